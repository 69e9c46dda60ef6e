//! Generates the MPI wrappers from `wrappers/mpi.wrap` and compiles the
//! small C shim that reads MPI's compile-time constants (MPI_IN_PLACE and
//! friends are macros, so only a C compiler can see them).

#[path = "wrappers/generate.rs"]
mod generate;

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

/// Which MPI the build sees: `openmpi`, `mpich`, or `other`. The hot path
/// reads the status fields of the first two inline (src/ffi.rs).
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
    if defined("OPEN_MPI") {
        "openmpi"
    } else if defined("MPICH") {
        "mpich"
    } else {
        "other"
    }
}

fn main() {
    println!("cargo:rerun-if-changed=wrappers/mpi.wrap");
    println!("cargo:rerun-if-changed=wrappers/generate.rs");
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rerun-if-env-changed=MPICC");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo::rustc-check-cfg=cfg(mpi_impl, values(\"openmpi\", \"mpich\", \"other\"))");
    println!("cargo:rustc-cfg=mpi_impl=\"{}\"", mpi_impl(&out));

    let text = std::fs::read_to_string("wrappers/mpi.wrap").expect("wrappers/mpi.wrap");
    let entries = generate::parse(&text).unwrap_or_else(|e| panic!("{e}"));
    let declared = generate::declared_names(&preprocessed_mpi_h(&out));
    let code = generate::generate(&entries, &declared).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(out.join("wrappers.rs"), code).unwrap();

    cc::Build::new()
        .compiler(mpicc())
        .file("src/shim.c")
        .flag_if_supported("-fvisibility=hidden")
        .compile("pmtrace_shim");
}
