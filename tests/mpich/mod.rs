//! The same checks under MPICH (`make mpich` builds the runtime and the
//! programs for it), and a library of one MPI family preloaded under a
//! program of the other.

use crate::check_on;
use crate::support::*;

/// Transparency, exact call counts, every message matched through its
/// piggybacked id, and every clock check, under MPICH's Hydra: point to
/// point in every mode, wildcards, collectives, threads, derived types.
#[test]
fn under_mpich_programs_are_transparent_and_their_clocks_exact() {
    for name in ["ring", "halo2d", "master_worker", "collectives", "coverage"] {
        check_on(Mpi::Mpich, "mpich", name, 4, &[], "lamport");
    }
    check_on(Mpi::Mpich, "mpich", "bytes", 3, &[], "lamport");
    check_on(Mpi::Mpich, "mpich", "threads", 2, &[], "lamport");
    check_on(Mpi::Mpich, "mpich", "coverage", 3, &[], "vector");
    check_on(Mpi::Mpich, "mpich", "halo2d", 4, &[], "none");
}

/// A libpmtrace built for Open MPI under an MPICH program, and one built
/// for MPICH under an Open MPI program: the program runs as untraced (same
/// output, same exit status), rank 0 prints one warning, no trace is made.
#[test]
fn a_library_built_for_the_other_mpi_leaves_the_program_untraced() {
    for runs in [Mpi::Mpich, Mpi::OpenMpi] {
        let built = runs.other();
        let what = format!("{built:?} library under {runs:?}");
        let dir = scratch(&format!("mpich-foreign-{built:?}-in-{runs:?}"));
        for name in ["coverage", "threads"] {
            let prog = runs.prog(name);
            let plain = mpirun_on(runs, &dir, 4, &prog, &[], Mode::Plain, &[]);
            let traced = mpirun_on(runs, &dir, 4, &prog, &[], Mode::Foreign, &[]);
            assert_eq!(plain.code, 0, "{what} {name}: {}", plain.stderr);
            assert_eq!(traced.code, 0, "{what} {name}: {}", traced.stderr);
            assert_eq!(traced.stdout, plain.stdout, "{what} {name}");
            let lines = traced.stderr_lines();
            assert_eq!(lines.len(), 1, "{what} {name}: {lines:?}");
            let other = if built == Mpi::OpenMpi {
                "MPICH"
            } else {
                "Open MPI"
            };
            assert!(
                lines[0].starts_with("pmtrace: warning: this libpmtrace was built for ")
                    && lines[0].contains(&format!("but the program runs {other} ("))
                    && lines[0].contains("tracing is off"),
                "{what} {name}: {}",
                lines[0]
            );
            assert!(!traced.trace.exists(), "{what} {name}: a trace was made");
        }
    }
}
