//! The test matrix: the same checks under the seven setups users run
//! (Debian's Open MPI 4.1 and MPICH 4.0, Open MPI 5.0 and MPICH 5.0 from
//! their wheels, programs built with `mpicc_abi` on MPICH 5.0's standard
//! ABI, and Intel MPI 2021.19 from its wheel through both its interfaces),
//! each with the other MPIs of the machine hidden and traced with the one
//! libpmtrace.so; under each, mpi4py 4 from its wheel, a program that
//! reaches MPI through `dlsym`, and a library opened with `RTLD_DEEPBIND`;
//! Intel's own benchmarks; MPIs pmtrace cannot trace; and ranks without
//! the library under both Open MPIs. `make matrix` builds everything they
//! run.

use crate::check_on;
use crate::exports::{check_chrome, check_otf2, check_perfetto};
use crate::support::*;
use pmtrace_trace::Trace;

/// Transparency, exact call counts, every message matched through its
/// piggybacked id and every clock check: point to point in every mode,
/// wildcards, collectives, threads, derived types, under all three clock
/// modes; then sync and the exports of a skewed trace.
fn setup_checks(mpi: Mpi) {
    for name in ["ring", "halo2d", "master_worker", "collectives", "coverage"] {
        check_on(mpi, "matrix", name, 4, &[], "lamport");
    }
    check_on(mpi, "matrix", "bytes", 3, &[], "lamport");
    check_on(mpi, "matrix", "bigmsg", 3, &[], "lamport");
    check_on(mpi, "matrix", "threads", 2, &[], "lamport");
    // Every communicator's id agreed with no hidden collective: a rank
    // that disagreed would leave its messages unmatched.
    check_on(mpi, "matrix", "commids", 5, &[], "lamport");
    check_on(mpi, "matrix", "coverage", 3, &[], "vector");
    check_on(mpi, "matrix", "halo2d", 4, &[], "none");
    let traffic = check_on(mpi, "matrix", "traffic", 4, &[], "lamport");
    assert!(traffic.stdout.contains("np=4 sum="), "{mpi:?}");
    sync_and_exports(mpi);
}

/// halo2d under a simulated clock skew: sync leaves no violation, and the
/// exports carry every call and message of the report.
fn sync_and_exports(mpi: Mpi) {
    let what = format!("halo2d under {mpi:?} with PMTRACE_CLOCK_SIM");
    let dir = scratch(&format!("matrix-sync-{}", mpi.tag()));
    let run = mpirun_on(
        mpi,
        &dir,
        4,
        &mpi.prog("halo2d"),
        &[],
        Mode::Preload,
        &[("PMTRACE_CLOCK_SIM", "seed=5")],
    );
    assert_eq!(run.code, 0, "{what}: {}", run.stderr);
    let before = report(&run.trace);
    assert!(
        before["violations"]["reversed"].as_u64().unwrap() > 0,
        "{what}: the simulation reverses messages"
    );
    let o = pmtrace(&["sync", run.trace.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rep = report(&run.trace);
    assert_synced_clean(&rep, &what);
    let synced = check_otf2(&what, &run.trace, &rep);
    assert_eq!(synced["reversed"], 0, "{what}: {synced}");
    check_perfetto(&what, &run.trace, &rep);
    check_chrome(&what, &run.trace, &rep);
}

#[test]
fn setup_openmpi_4_1_traces_transparently_and_exactly() {
    setup_checks(Mpi::OpenMpi);
}

#[test]
fn setup_mpich_4_0_traces_transparently_and_exactly() {
    setup_checks(Mpi::Mpich);
}

#[test]
fn setup_openmpi_5_0_traces_transparently_and_exactly() {
    setup_checks(Mpi::OpenMpi5);
}

#[test]
fn setup_mpich_5_0_traces_transparently_and_exactly() {
    setup_checks(Mpi::Mpich5);
}

#[test]
fn setup_standard_abi_traces_transparently_and_exactly() {
    setup_checks(Mpi::Abi);
}

#[test]
fn setup_intel_mpi_traces_transparently_and_exactly() {
    setup_checks(Mpi::Impi);
}

#[test]
fn setup_intel_mpi_standard_abi_traces_transparently_and_exactly() {
    setup_checks(Mpi::ImpiAbi);
}

/// A program that links no MPI, opens the library with `dlopen`
/// (`RTLD_LOCAL | RTLD_DEEPBIND`, as Julia does; and `RTLD_LOCAL` alone)
/// and calls every function through `dlsym` on that handle
/// (tests/progs/dlmpi.c) is traced as any other under every setup: the
/// same output, every call the program counts, every message matched by
/// its piggybacked id, including wildcard receives.
#[test]
fn a_program_calling_mpi_through_dlsym_is_traced_exactly() {
    for mpi in Mpi::ALL {
        let libmpi = mpi.libmpi();
        let libmpi = libmpi.to_str().unwrap();
        let run = check_on(mpi, "matrix", "dlmpi", 4, &[libmpi], "lamport");
        assert!(
            run.stdout.contains("dlmpi: np=4 sum="),
            "{mpi:?}: {}",
            run.stdout
        );
    }
    let libmpi = Mpi::OpenMpi.libmpi();
    check_on(
        Mpi::OpenMpi,
        "matrix",
        "dlmpi",
        4,
        &[libmpi.to_str().unwrap(), "local"],
        "lamport",
    );
}

/// The calls of a library that links libmpi, opened with `RTLD_LAZY |
/// RTLD_DEEPBIND` by a program that opened the MPI library so too (as
/// Julia runs t8code under MPI.jl: MPI.jl #893), are bound to the MPI
/// library past the preloaded pmtrace; pmtrace rewrites the library's
/// tables before its first lookup, and traces every call and message, in
/// every setup.
#[test]
fn a_library_opened_with_rtld_deepbind_is_traced_exactly() {
    for mpi in Mpi::ALL {
        let libmpi = mpi.libmpi();
        let library = mpi.prog("libdlmpi.so");
        let args = [libmpi.to_str().unwrap(), "deep", library.to_str().unwrap()];
        let run = check_on(mpi, "matrix", "dlmpi", 4, &args, "lamport");
        assert!(
            run.stdout.contains("dlmpi: np=4 sum="),
            "{mpi:?}: {}",
            run.stdout
        );
    }
}

/// When the library above initialises MPI from its constructor, inside
/// `dlopen`, before pmtrace can rewrite its tables, the job runs as
/// untraced (same output, same exit status), no trace is made, and rank 0
/// says so in one line at exit, rather than leave no trace unexplained.
#[test]
fn mpi_initialised_past_pmtrace_is_said_in_one_line() {
    for mpi in [Mpi::OpenMpi, Mpi::Mpich5] {
        let what = format!("{mpi:?}");
        let dir = scratch(&format!("matrix-ctor-{}", mpi.tag()));
        let libmpi = mpi.libmpi();
        let library = mpi.prog("libdlmpi.so");
        let args = [libmpi.to_str().unwrap(), "ctor", library.to_str().unwrap()];
        let prog = mpi.prog("dlmpi");
        let plain = mpirun_on(mpi, &dir, 4, &prog, &args, Mode::Plain, &[]);
        assert_eq!(plain.code, 0, "{what}: {}", plain.stderr);
        assert!(plain.stdout.contains("dlmpi: np=4 sum="), "{what}");
        let traced = mpirun_on(mpi, &dir, 4, &prog, &args, Mode::Preload, &[]);
        assert_eq!(traced.code, 0, "{what}: {}", traced.stderr);
        assert_eq!(traced.stdout, plain.stdout, "{what}");
        let lines = traced.stderr_lines();
        assert_eq!(lines.len(), 1, "{what}: {lines:?}");
        assert!(
            lines[0].starts_with("pmtrace: warning: MPI ran in this process (")
                && lines[0].ends_with(
                    "without its MPI_Init passing through pmtrace, so nothing was traced"
                ),
            "{what}: {}",
            lines[0]
        );
        assert!(!traced.trace.exists(), "{what}: a trace was made");
    }
}

/// A program whose MPI pmtrace cannot trace runs as untraced (same output,
/// same exit status), pmtrace says why in one line, and no trace is made:
/// an MPI of a binary interface pmtrace does not know, one of the MPICH
/// family too old for it, and two MPI libraries in one process (stand-ins:
/// tests/progs/fakempi.c).
#[test]
fn an_mpi_pmtrace_cannot_trace_runs_untraced_with_one_line() {
    let fake = root().join("target/fakempi");
    prog("coverage"); // `make examples`: the stand-ins among them
    let dir = scratch("matrix-untraceable");
    let cases = [
        (
            "unknown",
            None,
            "library: Fake MPI 1.0\n",
            "has a binary interface pmtrace does not know",
        ),
        (
            "old",
            None,
            "library: MPICH Version: 1.0.8\n",
            "is too old for pmtrace: it lacks PMPI_Type_size_x (MPI 3.0)",
        ),
        (
            "unknown",
            Some("old"),
            "library: Fake MPI 1.0\n",
            "the program has loaded 2 MPI libraries (",
        ),
    ];
    for (linked, opened, output, why) in cases {
        let what = format!("{linked} MPI, {opened:?} opened too");
        let run = |preload: bool| {
            let trace = dir.join(format!("{linked}-{}", opened.unwrap_or("alone")));
            let _ = std::fs::remove_dir_all(&trace);
            let mut cmd = std::process::Command::new(fake.join("fakeapp"));
            cmd.env("LD_LIBRARY_PATH", fake.join(linked))
                .env("PMTRACE_DIR", &trace);
            if let Some(o) = opened {
                cmd.arg(fake.join(o).join("libfakempi.so"));
            }
            if preload {
                cmd.env("LD_PRELOAD", lib());
            }
            (cmd.output().expect("fakeapp"), trace)
        };
        let (plain, _) = run(false);
        assert!(plain.status.success(), "{what}: {plain:?}");
        assert_eq!(String::from_utf8_lossy(&plain.stdout), output, "{what}");
        let (traced, trace) = run(true);
        assert_eq!(traced.status.code(), plain.status.code(), "{what}");
        assert_eq!(traced.stdout, plain.stdout, "{what}");
        let stderr = String::from_utf8_lossy(&traced.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{what}: {lines:?}");
        assert!(
            lines[0].starts_with("pmtrace: warning: ")
                && lines[0].contains(why)
                && lines[0].ends_with("; the program runs untraced"),
            "{what}: {}",
            lines[0]
        );
        assert!(!trace.exists(), "{what}: a trace was made");
    }
}

/// `pmtrace run -- <launcher> -np 4 <program>` with no `--lib`, from the
/// build tree and from `make install`: the one library is preloaded under
/// every setup, and every rank is traced with every message matched by its
/// piggybacked id.
#[test]
fn pmtrace_run_traces_every_setup_with_the_one_library() {
    let dir = scratch("matrix-run");
    let prefix = dir.join("prefix");
    let st = std::process::Command::new("make")
        .args(["-s", "install"])
        .arg(format!("PREFIX={}", prefix.display()))
        .current_dir(root())
        .status()
        .expect("make install");
    assert!(st.success(), "make install");
    for (where_, cli) in [("built", cli()), ("installed", prefix.join("bin/pmtrace"))] {
        for mpi in Mpi::ALL {
            let what = format!("{mpi:?}, pmtrace {where_}");
            // Point to point, nonblocking, wildcard receives, collectives,
            // and the library's version (tests/progs/dlmpi.c, linked).
            let prog = mpi.prog("traffic");
            let (plain, _) = launch(
                mpi,
                &dir,
                How::Plain,
                4,
                &[prog.to_str().unwrap()],
                &[],
                &[],
            );
            assert!(plain.status.success(), "{what}: {plain:?}");
            let expected = String::from_utf8_lossy(&plain.stdout).into_owned();
            assert!(
                expected
                    .split_whitespace()
                    .collect::<String>()
                    .starts_with(&format!(
                        "dlmpi:{}",
                        vendor(mpi).split_whitespace().collect::<String>()
                    )),
                "{what}: {expected}"
            );
            let trace = dir.join(format!("trace-{where_}-{}", mpi.tag()));
            let (launcher, ompi) = mpi.launcher();
            let mut cmd = mpi.command(&cli, &[]);
            cmd.arg("run")
                .arg("--out")
                .arg(&trace)
                .arg("--")
                .arg(launcher);
            if ompi {
                cmd.arg("--oversubscribe");
                cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
            }
            let out = cmd
                .args(mpi.np_args(4))
                .arg(&prog)
                .env_remove("PMTRACE_LIB")
                .output()
                .expect("pmtrace run");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{what}: {stderr}");
            assert_eq!(String::from_utf8_lossy(&out.stdout), expected, "{what}");
            let rep = report(&trace);
            assert_eq!(rep["ranks"], 4, "{what}: {stderr}");
            assert!(rep["messages"]["matched"].as_u64().unwrap() > 0, "{what}");
            assert_eq!(rep["messages"]["unmatched"], 0, "{what}");
            assert_eq!(
                rep["clocks"]["matched_by_id"], rep["messages"]["matched"],
                "{what}"
            );
        }
    }
}

/// A program that handles MPI errors itself (MPI_ERRORS_RETURN on a
/// duplicate of world, world left fatal): calls with an invalid datatype,
/// rank, count, tag, root and operation return their error codes traced as
/// untraced, and the program goes on communicating. pmtrace asks nothing of
/// a handle before the call that could reach a fatal handler, passes a call
/// it cannot piggyback untouched, and records every failed call with its
/// code, under every setup.
#[test]
fn errors_the_application_handles_stay_its_own() {
    // Not under Intel MPI: untraced, it aborts at the first invalid
    // datatype, whatever handler the communicator has.
    for mpi in Mpi::ALL
        .into_iter()
        .filter(|m| !matches!(m, Mpi::Impi | Mpi::ImpiAbi))
    {
        for np in [2, 3] {
            let traced = check_on(mpi, "errors", "errors", np, &[], "lamport");
            let failed: u64 = traced
                .stdout
                .lines()
                .find_map(|l| l.strip_prefix("errors: "))
                .and_then(|l| l.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .expect("the program's count of failed calls");
            let trace = pmtrace_trace::Trace::open(&traced.trace).unwrap();
            let recorded: u64 = trace
                .ranks
                .iter()
                .map(|r| r.calls().filter(|(_, c)| c.rc != 0).count() as u64)
                .sum();
            assert_eq!(recorded, failed, "{mpi:?} np={np}: failed calls recorded");
            // Every rank fails each of the program's 17 invalid calls.
            assert_eq!(failed, 17 * u64::from(np), "{mpi:?} np={np}");
        }
    }
}

/// MPI-4 under every MPI-4 setup: large-count forms mixed with their int
/// forms (Open MPI 5.0 has none: the int forms there), `MPI_Isendrecv(_replace)`, a persistent allreduce started three
/// times and a partitioned exchange, at np=2..8. Output as untraced, exact
/// call counts, every message matched; every message but the partitioned
/// ones (which carry no header) matched through its piggybacked id, and
/// each start of the persistent allreduce an instance of its own.
#[test]
fn mpi4_operations_are_traced_exactly() {
    for mpi in [Mpi::Mpich, Mpi::OpenMpi5, Mpi::Mpich5, Mpi::Abi] {
        for np in 2..=8u32 {
            let what = format!("mpi4 under {mpi:?} np={np}");
            let dir = scratch(&format!("matrix-mpi4-{np}-{}", mpi.tag()));
            let prog = mpi.prog("mpi4");
            let plain = mpirun_on(mpi, &dir, np, &prog, &[], Mode::Plain, &[]);
            let traced = mpirun_on(mpi, &dir, np, &prog, &[], Mode::Preload, &[]);
            assert_transparent(&plain, &traced, np);
            let trace = pmtrace_trace::Trace::open(&traced.trace).unwrap();
            assert_eq!(
                recorded_counts(&trace),
                traced.expected_counts(np),
                "{what}"
            );
            let rep = report(&traced.trace);
            let (m, c) = (&rep["messages"], &rep["clocks"]);
            assert_eq!(m["unmatched"], 0, "{what}: {m}");
            assert_eq!(m["matched"], m["sent"], "{what}: {m}");
            // Two starts of one partitioned channel per pair of ranks
            // (none under Open MPI 5 at odd np: see the program).
            let partitioned = if mpi == Mpi::OpenMpi5 && np % 2 == 1 {
                0
            } else {
                2 * u64::from(np / 2)
            };
            let matched = m["matched"].as_u64().unwrap();
            assert_eq!(c["matched_by_id"], matched - partitioned, "{what}: {c}");
            assert_eq!(c["unmatched_by_id"], partitioned, "{what}: {c}");
            for key in [
                "fifo_disagreements",
                "lamport_violations",
                "wire_mismatches",
                "decreasing",
                "forced",
            ] {
                assert_eq!(c[key], 0, "{what}: clocks.{key}: {c}");
            }
            // Collectives: 14 reports, bcast_c, bcast, allreduce_c,
            // allreduce, and 3 starts of the persistent allreduce.
            assert_eq!(rep["collectives"]["instances"], 14 + 4 + 3, "{what}");
        }
    }
}

#[allow(dead_code)]
#[path = "../../wrappers/generate.rs"]
mod generate;

/// Completeness by construction: every `PMPI_` function the `mpi.h` of
/// each setup declares is described in `wrappers/mpi.wrap` (with its
/// roles, or as `plain` on purpose), so it gets a wrapper. A library that
/// adds functions fails this test until they are classified.
#[test]
fn every_function_each_mpi_h_declares_is_described() {
    let wrap = std::fs::read_to_string(root().join("wrappers/mpi.wrap")).unwrap();
    let described: std::collections::BTreeSet<String> = generate::parse(&wrap)
        .unwrap()
        .into_iter()
        .map(|e| format!("P{}", e.name))
        .collect();
    let setups: [(&str, std::path::PathBuf); 5] = [
        ("Open MPI 4.1", "mpicc.openmpi".into()),
        ("MPICH 4.0", "mpicc.mpich".into()),
        ("Open MPI 5.0", root().join("target/mpi/openmpi5/bin/mpicc")),
        ("MPICH 5.0", root().join("target/mpi/mpich5/bin/mpicc")),
        (
            "the standard ABI",
            root().join("target/mpi/mpich5/bin/mpicc_abi"),
        ),
    ];
    make_once(&MATRIX_BUILD, "matrix");
    let dir = scratch("matrix-described");
    let src = dir.join("mpi_h.c");
    std::fs::write(&src, "#include <mpi.h>\n").unwrap();
    for (name, cc) in setups {
        let out = std::process::Command::new(&cc)
            .arg("-E")
            .arg(&src)
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", cc.display()));
        assert!(out.status.success(), "{name}: {} -E failed", cc.display());
        let declared = generate::declared_names(&String::from_utf8_lossy(&out.stdout));
        assert!(
            declared.len() > 400,
            "{name}: {} declarations",
            declared.len()
        );
        let missing: Vec<&String> = declared.difference(&described).collect();
        assert!(
            missing.is_empty(),
            "{name}'s mpi.h declares {} function(s) wrappers/mpi.wrap does not describe: {missing:?}",
            missing.len()
        );
    }
}

/// The functions of the MPI standard that move data between processes,
/// by chapter, with the kind each must have in `wrappers/mpi.wrap`: the
/// point-to-point and partitioned ones (chapters 3 and 4) record their
/// messages, the collectives (chapters 6 and 8) their shape. With their
/// large-count `_c` forms where the standard has them. One-sided
/// communication (chapter 12) and file I/O (chapter 14) move data too, but
/// pmtrace times them only (`plain`): they are listed so that the choice
/// stays one made on purpose.
fn data_moving_functions() -> Vec<(String, String)> {
    let mut want: Vec<(String, String)> = Vec::new();
    let mut with_c = |name: &str, kind: &str, c: bool| {
        want.push((format!("MPI_{name}"), kind.to_string()));
        if c {
            want.push((format!("MPI_{name}_c"), kind.to_string()));
        }
    };
    // Chapter 3, point-to-point; chapter 4, partitioned.
    for mode in ["", "B", "S", "R"] {
        let send = if mode.is_empty() {
            "Send".to_string()
        } else {
            format!("{mode}send")
        };
        with_c(&send, "send", true);
        with_c(&format!("I{}send", mode.to_lowercase()), "isend", true);
        with_c(&format!("{send}_init"), "send_init", true);
    }
    for (name, kind) in [
        ("Recv", "recv"),
        ("Irecv", "irecv"),
        ("Recv_init", "recv_init"),
        ("Sendrecv", "sendrecv"),
        ("Sendrecv_replace", "sendrecv_replace"),
        ("Isendrecv", "isendrecv"),
        ("Isendrecv_replace", "isendrecv_replace"),
        ("Mrecv", "mrecv"),
        ("Imrecv", "imrecv"),
    ] {
        with_c(name, kind, true);
    }
    with_c("Psend_init", "psend_init", false);
    with_c("Precv_init", "precv_init", false);
    // Chapter 6, collectives; chapter 8, neighbourhood collectives: the
    // blocking, nonblocking (I) and persistent (_init) forms.
    for name in [
        "Barrier",
        "Bcast",
        "Gather",
        "Gatherv",
        "Scatter",
        "Scatterv",
        "Allgather",
        "Allgatherv",
        "Alltoall",
        "Alltoallv",
        "Alltoallw",
        "Reduce",
        "Allreduce",
        "Reduce_scatter",
        "Reduce_scatter_block",
        "Scan",
        "Exscan",
        "Neighbor_allgather",
        "Neighbor_allgatherv",
        "Neighbor_alltoall",
        "Neighbor_alltoallv",
        "Neighbor_alltoallw",
    ] {
        let shape = name.to_lowercase();
        let c = name != "Barrier";
        with_c(name, &format!("coll:{shape}"), c);
        with_c(
            &format!("I{}", name.to_lowercase()),
            &format!("icoll:{shape}"),
            c,
        );
        with_c(&format!("{name}_init"), &format!("pcoll:{shape}"), c);
    }
    // Chapter 12, one-sided; chapter 14, I/O: timed only.
    for name in [
        "Put",
        "Get",
        "Accumulate",
        "Get_accumulate",
        "Rput",
        "Rget",
        "Raccumulate",
        "Rget_accumulate",
    ] {
        with_c(name, "plain", true);
    }
    with_c("Fetch_and_op", "plain", false);
    with_c("Compare_and_swap", "plain", false);
    for access in ["read", "write"] {
        for at in ["", "_at", "_all", "_at_all", "_shared", "_ordered"] {
            with_c(&format!("File_{access}{at}"), "plain", true);
            if at != "_ordered" {
                with_c(&format!("File_i{access}{at}"), "plain", true);
            }
        }
        for split in ["_all", "_at_all", "_ordered"] {
            with_c(&format!("File_{access}{split}_begin"), "plain", true);
            with_c(&format!("File_{access}{split}_end"), "plain", false);
        }
    }
    want
}

/// Each function of the standard that moves data has the kind that
/// records what it moves (`data_moving_functions`), and every function of
/// a message or collective kind in `wrappers/mpi.wrap` is one of them: a
/// data-moving function filed as `plain`, or a collective of the wrong
/// shape, fails here.
#[test]
fn every_data_moving_function_has_the_kind_that_records_its_data() {
    let wrap = std::fs::read_to_string(root().join("wrappers/mpi.wrap")).unwrap();
    let described: std::collections::BTreeMap<String, String> = generate::parse(&wrap)
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.kind))
        .collect();
    let want = data_moving_functions();
    let mut wrong = Vec::new();
    for (name, kind) in &want {
        match described.get(name) {
            Some(k) if k == kind => {}
            Some(k) => wrong.push(format!("{name} is {k}, not {kind}")),
            None => wrong.push(format!("{name} is not described")),
        }
    }
    assert!(wrong.is_empty(), "{} wrong: {wrong:#?}", wrong.len());
    let listed: std::collections::BTreeSet<&str> = want.iter().map(|(n, _)| n.as_str()).collect();
    let message_kinds = [
        "send",
        "isend",
        "send_init",
        "recv",
        "irecv",
        "recv_init",
        "sendrecv",
        "sendrecv_replace",
        "isendrecv",
        "isendrecv_replace",
        "mrecv",
        "imrecv",
        "psend_init",
        "precv_init",
    ];
    let unlisted: Vec<String> = described
        .iter()
        .filter(|(name, kind)| {
            (message_kinds.contains(&kind.as_str())
                || kind.starts_with("coll:")
                || kind.starts_with("icoll:")
                || kind.starts_with("pcoll:"))
                && !listed.contains(name.as_str())
        })
        .map(|(name, kind)| format!("{kind} {name}"))
        .collect();
    assert!(
        unlisted.is_empty(),
        "moving data by kind, not by the standard: {unlisted:?}"
    );
    assert!(want.len() > 250, "{} functions", want.len());
}

/// A program that starts with `MPI_Session_init` and never calls
/// `MPI_Init` runs as untraced under every MPI-4 setup: same output, exit
/// status 0, nothing on stderr, no trace (tracing starts at `MPI_Init`).
#[test]
fn a_sessions_program_runs_unharmed() {
    for mpi in [Mpi::Mpich, Mpi::OpenMpi5, Mpi::Mpich5, Mpi::Abi] {
        let what = format!("sessions under {mpi:?}");
        let dir = scratch(&format!("matrix-sessions-{}", mpi.tag()));
        let prog = mpi.prog("sessions");
        let plain = mpirun_on(mpi, &dir, 3, &prog, &[], Mode::Plain, &[]);
        let traced = mpirun_on(mpi, &dir, 3, &prog, &[], Mode::Preload, &[]);
        assert_eq!(plain.code, 0, "{what}: {}", plain.stderr);
        assert!(
            plain.stdout.contains("sum 33 over 3 ranks"),
            "{what}: {}",
            plain.stdout
        );
        assert_eq!(traced.code, 0, "{what}: {}", traced.stderr);
        assert_eq!(traced.stdout, plain.stdout, "{what}");
        assert!(
            traced.stderr_lines().is_empty(),
            "{what}: {}",
            traced.stderr
        );
        assert!(!traced.trace.exists(), "{what}: a trace was made");
    }
}

/// Issue 17: processes started with `MPI_Comm_spawn` are traced, into the
/// parent's trace as a world of their own (`spawn-1`), with exact counts on
/// both sides; the job behaves as untraced (one summary line). Open MPI 5's
/// launcher does not pass the job's environment on to spawned processes:
/// pmtrace adds it to the spawn's info. (MPICH 4.0's spawn fails on this
/// machine untraced too.)
#[test]
fn spawned_processes_are_traced_as_a_world_of_their_own() {
    for mpi in [Mpi::OpenMpi, Mpi::OpenMpi5] {
        let np = 2;
        let what = format!("{mpi:?} spawn");
        let dir = scratch(&format!("spawn-{}", mpi.tag()));
        let prog = mpi.prog("spawn");
        let plain = mpirun_on(mpi, &dir, np, &prog, &[], Mode::Plain, &[]);
        let traced = mpirun_on(mpi, &dir, np, &prog, &[], Mode::Preload, &[]);
        assert!(
            plain.stdout.contains("spawn: ok np=2 children=2 sum=402"),
            "{what}: {}",
            plain.stdout
        );
        assert_transparent(&plain, &traced, np);
        let parents = Trace::open(&traced.trace).unwrap();
        let children = Trace::open(traced.trace.join("spawn-1")).unwrap();
        assert_eq!(parents.ranks.len(), np as usize, "{what}");
        assert_eq!(children.ranks.len(), 2, "{what}");
        let sides = [
            (&parents, traced.expected_counts(np)),
            (&children, traced.counts_of(1000..1002)),
        ];
        for (trace, expected) in sides {
            let recorded = recorded_counts(trace);
            for (r, want) in expected.iter().enumerate() {
                assert_eq!(
                    &recorded[r],
                    want,
                    "{what}: {} rank {r}",
                    trace.dir.display()
                );
            }
        }
        let rep = report(&traced.trace);
        assert_eq!(
            rep["spawned_worlds"]["spawn-1"], 2,
            "{what}: {}",
            rep["spawned_worlds"]
        );
        // Rank 0's four messages go to and come from the other world.
        assert_eq!(
            rep["messages"]["unresolved"], 4,
            "{what}: {}",
            rep["messages"]
        );
        let child = report(&traced.trace.join("spawn-1"));
        assert_eq!(
            child["messages"]["unresolved"], 4,
            "{what}: {}",
            child["messages"]
        );
        assert!(child.get("spawned_worlds").is_none(), "{what}");
    }
}

/// How a job of `launch` is traced.
#[derive(Clone, Copy, Debug, PartialEq)]
enum How {
    Plain,
    /// `LD_PRELOAD` of target/release/libpmtrace.so, by the launcher.
    Preload,
    /// `pmtrace run -- <launcher> ...`.
    Run,
}

/// `program args` on `np` ranks of `mpi`'s launcher, the other MPIs
/// hidden (`Mpi::command`, keeping `keep` too), with `env` passed to every
/// rank: its output and its trace directory.
fn launch(
    mpi: Mpi,
    dir: &std::path::Path,
    how: How,
    np: u32,
    program: &[&str],
    env: &[(&str, String)],
    keep: &[std::path::PathBuf],
) -> (std::process::Output, std::path::PathBuf) {
    let trace = dir.join(format!("trace-{how:?}").to_lowercase());
    let _ = std::fs::remove_dir_all(&trace);
    let (launcher, ompi) = mpi.launcher();
    let mut cmd = match how {
        How::Run => {
            let mut cmd = mpi.command(cli(), keep);
            cmd.arg("run")
                .arg("--out")
                .arg(&trace)
                .arg("--")
                .arg(&launcher);
            cmd.env_remove("PMTRACE_LIB");
            cmd
        }
        _ => mpi.command(&launcher, keep),
    };
    cmd.args(mpi.np_args(np));
    let mut pass: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    if how == How::Preload {
        pass.push(("LD_PRELOAD".into(), lib().display().to_string()));
        pass.push(("PMTRACE_DIR".into(), trace.display().to_string()));
    }
    if ompi {
        cmd.arg("--oversubscribe")
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        for (k, v) in &pass {
            cmd.arg("-x").arg(format!("{k}={v}"));
        }
    } else {
        for (k, v) in &pass {
            cmd.arg("-genv").arg(k).arg(v);
        }
    }
    cmd.args(program);
    (cmd.output().expect("the launcher"), trace)
}

/// What a setup's `MPI_Get_library_version` says first.
fn vendor(mpi: Mpi) -> &'static str {
    match mpi {
        Mpi::OpenMpi => "Open MPI v4.1",
        Mpi::Mpich => "MPICH Version: 4.0",
        Mpi::OpenMpi5 => "Open MPI v5.0.11",
        Mpi::Mpich5 | Mpi::Abi => "MPICH Version: 5.0.2",
        Mpi::Impi | Mpi::ImpiAbi => "Intel(R) MPI Library 2021.19",
    }
}

/// Every message of a traced job matched by its piggybacked id.
fn assert_all_matched(trace: &std::path::Path, np: u64, what: &str) {
    let rep = report(trace);
    assert_eq!(rep["ranks"], np, "{what}");
    let m = &rep["messages"];
    assert!(m["sent"].as_u64().unwrap() > 0, "{what}: {m}");
    assert_eq!(m["unmatched"], 0, "{what}: {m}");
    assert_eq!(m["matched"], m["sent"], "{what}: {m}");
    assert_eq!(m["matched"], m["received"], "{what}: {m}");
    assert_eq!(rep["clocks"]["matched_by_id"], m["matched"], "{what}");
    assert_eq!(rep["clocks"]["lamport_violations"], 0, "{what}");
}

/// mpi4py 4.1.2 from its wheel (`make deps`: target/mpi/mpi4py4), which
/// picks its MPI at import (it asks the process first, then opens the
/// library with `RTLD_LOCAL`), under every setup with the other MPIs
/// hidden, through a plain `LD_PRELOAD` and through `pmtrace run`: the
/// same output as untraced, the library's version among it, and every
/// message matched by its piggybacked id. The wheel has no build for the
/// standard ABI: under the ABI setups it runs on the same MPI's
/// `libmpi.so.12`.
#[test]
fn mpi4py_4_from_its_wheel_is_traced_under_every_setup() {
    make_once(&MATRIX_BUILD, "matrix");
    let script = root().join("tests/progs/traffic.py");
    let script = script.to_str().unwrap();
    for mpi in Mpi::ALL {
        let what = format!("mpi4py 4.1.2 under {mpi:?}");
        let dir = scratch(&format!("matrix-mpi4py4-{}", mpi.tag()));
        let libmpi = mpi.libmpi_for_mpi4py();
        let mut env = vec![
            (
                "PYTHONPATH",
                root().join("target/mpi/mpi4py4").display().to_string(),
            ),
            ("MPI4PY_LIBMPI", libmpi.display().to_string()),
        ];
        if mpi == Mpi::Mpich {
            // The wheel's module asks for libmpi.so.12, which Debian's
            // MPICH is only under the name `make deps` gives it.
            let dir = libmpi.parent().unwrap().display().to_string();
            env.push(("LD_LIBRARY_PATH", dir));
        }
        let keep = [libmpi.clone()];
        let program = ["/usr/bin/python3", script];
        let (plain, _) = launch(mpi, &dir, How::Plain, 4, &program, &env, &keep);
        let stdout = String::from_utf8_lossy(&plain.stdout).into_owned();
        assert!(
            plain.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&plain.stderr)
        );
        // Versions as libraries space them (tabs, runs of spaces).
        let squash = |t: &str| t.split_whitespace().collect::<String>();
        assert!(
            squash(&stdout).starts_with(&squash(&format!("traffic: {}", vendor(mpi))))
                && stdout.contains("traffic: np=4 sum="),
            "{what}: {stdout}"
        );
        for how in [How::Preload, How::Run] {
            let what = format!("{what}, {how:?}");
            let (traced, trace) = launch(mpi, &dir, how, 4, &program, &env, &keep);
            let stderr = String::from_utf8_lossy(&traced.stderr);
            assert_eq!(traced.status.code(), Some(0), "{what}: {stderr}");
            assert_eq!(String::from_utf8_lossy(&traced.stdout), stdout, "{what}");
            assert_all_matched(&trace, 4, &what);
        }
    }
}

/// Intel MPI's own benchmarks, from its wheel, traced under Intel MPI
/// with the other MPIs hidden: `IMB-MPI1 PingPong` (np=2) and `Allreduce`
/// (np=4) print the same rows (sizes and repetitions; the times are the
/// machine's) as untraced, and every message of the trace matches.
#[test]
fn intel_mpi_benchmarks_print_the_same_rows_traced() {
    let imb = root().join("target/mpi/impi/bin/IMB-MPI1");
    let imb = imb.to_str().unwrap();
    let rows = |out: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(out)
            .lines()
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() >= 3 && f[0].parse::<u64>().is_ok() && f[1].parse::<u64>().is_ok()
            })
            .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
            .collect()
    };
    for (bench, np) in [("PingPong", 2), ("Allreduce", 4)] {
        let what = format!("IMB-MPI1 {bench} under Intel MPI");
        let dir = scratch(&format!("matrix-imb-{bench}"));
        let program = [
            imb,
            bench,
            "-msglog",
            "0:12",
            "-iter",
            "100",
            "-iter_policy",
            "off",
        ];
        let (plain, _) = launch(Mpi::Impi, &dir, How::Plain, np, &program, &[], &[]);
        assert!(
            plain.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&plain.stderr)
        );
        let expected = rows(&plain.stdout);
        assert!(expected.len() >= 10, "{what}: {expected:?}");
        let (traced, trace) = launch(Mpi::Impi, &dir, How::Preload, np, &program, &[], &[]);
        let stderr = String::from_utf8_lossy(&traced.stderr);
        assert_eq!(traced.status.code(), Some(0), "{what}: {stderr}");
        assert_eq!(rows(&traced.stdout), expected, "{what}");
        assert_all_matched(&trace, np.into(), &what);
        assert!(
            stderr.lines().count() == 1 && stderr.starts_with("pmtrace: trace of"),
            "{what}: {stderr}"
        );
    }
}
