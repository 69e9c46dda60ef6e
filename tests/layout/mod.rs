//! The layout's dependencies go one way (issue 18, point 4): no module
//! of the runtime (`src/capture/`), of the front (`src/`) or of a
//! post-processing crate imports, through
//! any chain, a module that imports it back. (Cargo already refuses a
//! cycle of crates.) The runtime's two generated modules count too: the
//! wrappers (the entry layer, calling the hooks) and `mpi`, the function
//! table and the real functions the layers below call.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::support::root;

/// A crate's modules (file stems of `src/*.rs`, `lib` left out) and which
/// other modules of the same crate each names as `crate::m` or `super::m`.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    graph_of(module_texts(src))
}

/// The text of each module file of `src`.
fn module_texts(src: &Path) -> BTreeMap<String, String> {
    let mut texts = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            if stem != "lib" && stem != "main" {
                texts.insert(stem, std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    texts
}

/// The runtime's modules: its files, and the two generated ones
/// (`lib.rs` declares them inline and includes the text made by
/// `build.rs`: the newest build's, which this test's build made).
fn runtime_texts() -> BTreeMap<String, String> {
    let mut texts = module_texts(&root().join("src/capture"));
    texts.remove("build");
    let lib = std::fs::read_to_string(root().join("src/capture/lib.rs")).unwrap();
    let newest = |file: &str| {
        let mut found: Vec<(std::time::SystemTime, std::path::PathBuf)> =
            std::fs::read_dir(root().join("target/release/build"))
                .unwrap()
                .filter_map(Result::ok)
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("pmtrace-capture-openmpi-")
                })
                .map(|e| e.path().join("out").join(file))
                .filter(|p| p.is_file())
                .map(|p| (p.metadata().unwrap().modified().unwrap(), p))
                .collect();
        found.sort();
        let (_, path) = found.pop().expect("a generated file");
        std::fs::read_to_string(path).unwrap()
    };
    for (module, file) in [("mpi", "mpi_tables.rs"), ("wrappers", "wrappers.rs")] {
        let start = lib
            .find(&format!("pub mod {module} {{"))
            .expect("declared in lib.rs");
        let block = &lib[start..start + lib[start..].find("\n}\n").unwrap()];
        texts.insert(module.to_string(), format!("{block}\n{}", newest(file)));
    }
    texts
}

/// Which other module each module names as `crate::m` or `super::m`.
fn graph_of(texts: BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let names: Vec<String> = texts.keys().cloned().collect();
    texts
        .iter()
        .map(|(m, text)| {
            // Code only: comments may name any module.
            let code: String = text
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            let deps = names
                .iter()
                .filter(|n| *n != m)
                .filter(|n| {
                    ["crate::", "super::"].iter().any(|p| {
                        code.match_indices(&format!("{p}{n}")).any(|(i, s)| {
                            !code[i + s.len()..]
                                .starts_with(|c: char| c.is_alphanumeric() || c == '_')
                        })
                    })
                })
                .cloned()
                .collect();
            (m.clone(), deps)
        })
        .collect()
}

/// The sets of modules that reach one another (strongly connected, more
/// than one module each).
fn knots(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for d in &g[&m] {
                if seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> = g.keys().map(|m| (m, reach(m))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for m in g.keys() {
        let knot: BTreeSet<String> = g
            .keys()
            .filter(|o| *o == m || (reaches[m].contains(*o) && reaches[*o].contains(m)))
            .cloned()
            .collect();
        if knot.len() > 1 && !out.contains(&knot) {
            out.push(knot);
        }
    }
    out
}

#[test]
fn the_graph_finds_a_knot_and_only_it() {
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a", "d"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(m, ds)| (m.to_string(), ds.into_iter().map(String::from).collect()))
    .collect();
    let want: BTreeSet<String> = ["a", "b", "c"].into_iter().map(String::from).collect();
    assert_eq!(knots(&g), vec![want]);
}

#[test]
fn no_module_of_a_post_processing_crate_imports_itself_back() {
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let src = entry.unwrap().path().join("src");
        if src.is_dir() {
            let k = knots(&module_graph(&src));
            assert!(k.is_empty(), "{}: modules in a cycle: {k:?}", src.display());
        }
    }
}

#[test]
fn no_module_of_the_runtime_imports_itself_back() {
    let g = graph_of(runtime_texts());
    assert!(g["wrappers"].contains("hooks") && g["mpi"].contains("ffi"));
    let k = knots(&g);
    assert!(k.is_empty(), "src/capture: modules in a cycle: {k:?}");
    let front = module_graph(&root().join("src"));
    assert!(front["front"].contains("family"));
    let k = knots(&front);
    assert!(k.is_empty(), "src: modules in a cycle: {k:?}");
}
