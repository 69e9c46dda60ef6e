//! Generates the MPI wrappers from `wrappers/mpi.wrap` and compiles the
//! small C shim that reads MPI's compile-time constants (MPI_IN_PLACE and
//! friends are macros, so only a C compiler can see them).

#[path = "wrappers/generate.rs"]
mod generate;

use std::collections::BTreeSet;
use std::env;
use std::path::PathBuf;
use std::process::Command;

fn mpicc() -> String {
    env::var("MPICC").unwrap_or_else(|_| "mpicc".to_string())
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
            panic!("pmtrace: cannot run `{cc}` ({e}); install an MPI with `make deps` or set MPICC")
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

/// Bindings of the MPI-5 standard ABI (`mpi_abi.h`), in the shape mpi-sys
/// gives the other builds: handle types as newtypes. No MPI library is
/// linked: the ABI's handles and constants are fixed values, so the
/// library refers to nothing but functions, which the dynamic linker finds
/// in whichever libmpi_abi.so the program loaded (and nothing stops a
/// program of another MPI from starting with this library preloaded).
fn abi_bindings(out: &std::path::Path) {
    let bindings = bindgen::builder()
        .header_contents("pmtrace_abi.h", "#include <mpi.h>\n")
        .clang_args(mpicc_cflags())
        .allowlist_function("PMPI_.*")
        .allowlist_type("MPI_.*")
        .allowlist_var("MPI_.*")
        .new_type_alias("MPI_(Comm|Datatype|Errhandler|Group|Info|Message|Op|Request|Session|Win)")
        .derive_partialeq(true)
        .layout_tests(false)
        .generate()
        .unwrap_or_else(|e| panic!("pmtrace: bindgen on the ABI's mpi.h: {e}"));
    bindings
        .write_to_file(out.join("abi_bindings.rs"))
        .expect("abi_bindings.rs");
}

fn main() {
    println!("cargo:rerun-if-changed=wrappers/mpi.wrap");
    println!("cargo:rerun-if-changed=wrappers/generate.rs");
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rerun-if-env-changed=MPICC");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!(
        "cargo::rustc-check-cfg=cfg(mpi_impl, values(\"abi\", \"openmpi\", \"mpich\", \"other\"))"
    );
    let imp = mpi_impl(&out);
    println!("cargo:rustc-cfg=mpi_impl=\"{imp}\"");
    let native = env::var_os("CARGO_FEATURE_NATIVE").is_some();
    match (imp, native) {
        ("abi", true) => panic!(
            "pmtrace: `{}` compiles for the MPI-5 standard ABI; build with \
             --no-default-features (`make abi`)",
            mpicc()
        ),
        ("abi", false) => abi_bindings(&out),
        (_, false) => panic!(
            "pmtrace: --no-default-features builds for the MPI-5 standard ABI, \
             but `{}` does not compile for it (set MPICC to an ABI compiler, \
             such as MPICH's mpicc_abi)",
            mpicc()
        ),
        _ => {}
    }

    let text = std::fs::read_to_string("wrappers/mpi.wrap").expect("wrappers/mpi.wrap");
    let entries = generate::parse(&text).unwrap_or_else(|e| panic!("{e}"));
    let mut declared = generate::declared_names(&preprocessed_mpi_h(&out));
    if let Some(exported) = exported_pmpi() {
        declared.retain(|f| exported.contains(f));
    }
    // What the library's MPI version brings, for the hand-written code.
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

    cc::Build::new()
        .compiler(mpicc())
        .file("src/shim.c")
        .flag_if_supported("-fvisibility=hidden")
        .compile("pmtrace_shim");
}
