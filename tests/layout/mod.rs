//! The layout's dependencies go one way (issue 18, point 4): no module
//! of the runtime (`src/`) or of a post-processing crate imports, through
//! any chain, a module that imports it back. (Cargo already refuses a
//! cycle of crates.) The runtime's generated `wrappers` module (built into
//! OUT_DIR from `wrappers/`) is the runtime's entry layer and is not a file
//! of `src/`: it calls the hooks, and modules below reach the real MPI
//! functions through its `real` table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::support::root;

/// A crate's modules (file stems of `src/*.rs`, `lib` left out) and which
/// other modules of the same crate each names as `crate::m` or `super::m`.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
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
    let k = knots(&module_graph(&root().join("src")));
    assert!(k.is_empty(), "src: modules in a cycle: {k:?}");
}
