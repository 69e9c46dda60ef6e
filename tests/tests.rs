//! Integration tests: real MPI jobs under the preload library (or linked
//! with it), checked against what the programs themselves know they did.
//! Each test has its own scratch directory under target/test-scratch.

mod exports;
mod faults;
mod golden;
mod layout;
mod live;
mod matrix;
mod parallel;
mod support;

use pmtrace_format::record::Status;
use pmtrace_trace::Call;
use pmtrace_trace::Payload;
use pmtrace_trace::Trace;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::*;

const EXAMPLES: &[&str] = &["ring", "pingpong", "halo2d", "master_worker", "collectives"];

/// Traces `prog` at `np` and checks transparency, exact call counts and
/// exact message matching. Returns the traced run.
fn check_program(test: &str, prog_name: &str, np: u32) -> Run {
    check_clocked(test, prog_name, np, &[], "lamport")
}

/// `check_program` with arguments and a piggyback mode; also checks every
/// clock the report checks.
fn check_clocked(test: &str, prog_name: &str, np: u32, args: &[&str], clocks: &str) -> Run {
    check_on(Mpi::OpenMpi, test, prog_name, np, args, clocks)
}

/// `check_clocked` under a given MPI.
fn check_on(mpi: Mpi, test: &str, prog_name: &str, np: u32, args: &[&str], clocks: &str) -> Run {
    check_env(mpi, test, prog_name, np, args, clocks, &[])
}

/// `check_on` with more settings for the traced run.
fn check_env(
    mpi: Mpi,
    test: &str,
    prog_name: &str,
    np: u32,
    args: &[&str],
    clocks: &str,
    settings: &[(&str, &str)],
) -> Run {
    let named: Vec<String> = settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let dir = scratch(&format!(
        "{test}-{prog_name}-{np}-{clocks}-{}-{}{}",
        args.join("-"),
        mpi.tag(),
        named.join("-")
    ));
    let prog = mpi.prog(prog_name);
    let plain = mpirun_on(mpi, &dir, np, &prog, args, Mode::Plain, &[]);
    let mut env = vec![("PMTRACE_CLOCKS", clocks)];
    env.extend_from_slice(settings);
    let traced = mpirun_on(mpi, &dir, np, &prog, args, Mode::Preload, &env);
    assert_transparent(&plain, &traced, np);

    let trace = Trace::open(&traced.trace).unwrap_or_else(|e| panic!("{prog_name} np={np}: {e}"));
    assert_eq!(trace.ranks.len(), np as usize);
    let expected = traced.expected_counts(np);
    let recorded = recorded_counts(&trace);
    for rank in 0..np as usize {
        assert_eq!(
            recorded[rank], expected[rank],
            "{prog_name} np={np} rank {rank}: recorded calls differ from the program's own counts"
        );
    }

    let rep = report(&traced.trace);
    let m = &rep["messages"];
    assert_eq!(
        m["unmatched"], 0,
        "{prog_name} np={np}: unmatched messages: {rep}"
    );
    assert_eq!(m["sent"], m["received"], "{prog_name} np={np}");
    assert_eq!(m["matched"], m["sent"], "{prog_name} np={np}");
    let total: u64 = expected.iter().map(|c| c.values().sum::<u64>()).sum();
    assert_eq!(rep["events"], total, "{prog_name} np={np}: report events");
    if clocks == "none" {
        assert_eq!(rep["clocks"]["mode"], "none", "{prog_name} np={np}");
    } else {
        check_clock_report(&rep, clocks, &format!("{prog_name} np={np}"));
    }
    traced
}

/// The `clocks` object of a report: every check passes, every message
/// matched through its piggybacked id, as FIFO matching does.
fn check_clock_report(rep: &serde_json::Value, mode: &str, what: &str) {
    let c = &rep["clocks"];
    assert_eq!(c["mode"], mode, "{what}: {c}");
    assert_eq!(
        c["matched_by_id"], rep["messages"]["matched"],
        "{what}: {c}"
    );
    for key in [
        "fifo_disagreements",
        "unmatched_by_id",
        "lamport_violations",
        "wire_mismatches",
        "decreasing",
        "forced",
    ] {
        assert_eq!(c[key], 0, "{what}: clocks.{key}: {c}");
    }
    // Each matched piggyback is checked, or counted as left unchecked when
    // a rank at one end has several threads that call MPI (the key is
    // absent when none was).
    let unchecked = c.get("wire_unchecked").map(|v| v.as_u64().unwrap());
    assert_eq!(
        c["wire_checked"].as_u64().unwrap() + unchecked.unwrap_or(0),
        rep["messages"]["matched"].as_u64().unwrap(),
        "{what}: {c}"
    );
    if what.starts_with("threads") {
        assert!(unchecked > Some(0), "{what}: {c}");
    } else {
        assert_eq!(unchecked, None, "{what}: every sender single-threaded: {c}");
    }
    if mode == "vector" {
        assert_eq!(c["vector_violations"], 0, "{what}: {c}");
        let m = &rep["messages"];
        let events = m["sent"].as_u64().unwrap() + m["received"].as_u64().unwrap();
        let hb = &c["happens_before"];
        if events > 4000 {
            // Too many to check pairwise (`clocks::HB_MAX_EVENTS`).
            assert!(hb.is_null(), "{what}: {c}");
        } else if !what.starts_with("threads") {
            assert!(hb["events"].as_u64().unwrap() > 0, "{what}: {c}");
            assert_eq!(hb["disagreements"], 0, "{what}: {c}");
        }
    }
}

/// Every message of a Lamport-clocked run matched (by id), every clock
/// check clean.
fn check_lamport_messages(rep: &serde_json::Value, what: &str) {
    let m = &rep["messages"];
    assert_eq!(m["unmatched"], 0, "{what}: {m}");
    assert_eq!(m["matched"], m["sent"], "{what}: {m}");
    check_clock_report(rep, "lamport", what);
}

#[test]
fn examples_trace_exactly_their_calls_at_np_2_to_8() {
    for np in 2..=8 {
        for name in EXAMPLES {
            check_program("examples", name, np);
        }
    }
}

#[test]
fn vector_clocks_are_transparent_and_exact_on_every_example() {
    for np in [2, 4, 8] {
        for name in EXAMPLES.iter().chain(&["coverage"]) {
            check_clocked("vector", name, np, &[], "vector");
        }
    }
}

/// Without piggybacking every call is still recorded, and every message
/// matched (by FIFO).
#[test]
fn without_piggyback_every_call_is_recorded_and_every_message_matched() {
    for name in EXAMPLES.iter().chain(&["coverage", "threads"]) {
        check_clocked("none", name, 4, &[], "none");
    }
}

#[test]
fn the_other_test_programs_are_transparent_under_vector_clocks() {
    check_clocked("vector", "bytes", 3, &[], "vector");
    check_clocked("vector", "threads", 2, &[], "vector");
    check_clocked("vector", "late_finalize", 3, &[], "vector");
}

/// mpi4py's own test suite (1,362 tests; built from its source
/// distribution by `make mpi4py-suite`, against Open MPI and against
/// MPICH), at np=1 and np=2 under each: every test has the same outcome
/// traced as untraced (test_spawn left out: it hangs untraced too), and
/// the suite the same verdict. Under Open MPI, every message matched, and
/// at np=2 sync, on one host's clock, moves nothing.
#[test]
fn mpi4py_test_suite_has_the_same_outcome_traced() {
    make_once(&MPI4PY_BUILD, "mpi4py-suite");
    let base = root().join("target/mpi4py");
    let runtests = base.join("mpi4py-3.1.4/test/runtests.py");
    let python = std::path::Path::new("/usr/bin/python3");
    let wrapper = root().join("tests/progs/mpi4py_suite.py");
    // Per rank, each test's outcome ("test_x (module.Class.test_x) ... ok",
    // as unittest's verbose mode prints it), "Ran N tests" and the verdict
    // ("OK (skipped=K)"), without the times.
    let outcome = |dir: &std::path::Path, np: u32| -> Vec<String> {
        (0..np)
            .flat_map(|r| {
                let f = dir.join(format!("rank{r}.txt"));
                let text =
                    std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
                text.lines()
                    .filter(|l| {
                        l.starts_with("Ran ")
                            || l.starts_with("OK")
                            || l.starts_with("FAILED")
                            || (l.starts_with("test") && l.contains(") ... "))
                    })
                    .map(|l| format!("rank {r}: {}", l.split(" in ").next().unwrap_or(l)))
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    for (mpi, lib) in [(Mpi::OpenMpi, "lib"), (Mpi::Mpich, "lib-mpich")] {
        let lib = base.join(lib);
        let env = [("PYTHONPATH", lib.to_str().unwrap())];
        for np in [1u32, 2] {
            let what = format!("mpi4py's suite under {mpi:?} np={np}");
            let dir = scratch(&format!("mpi4py-suite-{}-{np}", mpi.tag()));
            let run = |mode: Mode, name: &str| {
                let out = dir.join(name);
                std::fs::create_dir_all(&out).unwrap();
                let args = [
                    wrapper.to_str().unwrap(),
                    out.to_str().unwrap(),
                    runtests.to_str().unwrap(),
                    "-v",
                    "-e",
                    "spawn",
                ];
                (
                    mpirun_on(mpi, &dir, np, python, &args, mode, &env),
                    outcome(&out, np),
                )
            };
            let (plain, want) = run(Mode::Plain, "plain");
            let (traced, got) = run(Mode::Preload, "traced");
            assert_eq!(plain.code, 0, "{what}: {}", plain.stderr);
            assert_eq!(traced.code, plain.code, "{what}: {}", traced.stderr);
            let ran: Vec<&String> = want.iter().filter(|l| l.contains(": Ran ")).collect();
            assert_eq!(ran.len(), np as usize, "{what}: {ran:?}");
            assert!(
                want.contains(&"rank 0: Ran 1362 tests".to_string()),
                "{what}: {ran:?}"
            );
            // Each test's own line, on every rank.
            assert!(
                want.len() > 1300 * np as usize,
                "{what}: {} lines",
                want.len()
            );
            let differ: Vec<(&String, &String)> = got
                .iter()
                .zip(&want)
                .filter(|(g, w)| g != w)
                .take(5)
                .collect();
            assert!(differ.is_empty(), "{what}: traced, untraced: {differ:?}");
            assert_eq!(got.len(), want.len(), "{what}");
            let rep = report(&traced.trace);
            assert_eq!(rep["ranks"], np, "{what}");
            // Under MPICH, which cancels sends on MPI_COMM_SELF, the suite
            // frees 194 cancelled `MPI_Issend`s at np=1: not sent.
            assert_eq!(
                rep["messages"]["unmatched"], 0,
                "{what}: {}",
                rep["messages"]
            );
            if np == 2 && mpi == Mpi::OpenMpi {
                let out = pmtrace(&["sync", "--json", traced.trace.to_str().unwrap()]);
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let sync: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                for (key, n) in sync["recorded"]["violations"].as_object().unwrap() {
                    assert_eq!(n, 0, "{what}: recorded {key}");
                }
                for step in sync["steps"].as_array().unwrap() {
                    assert_eq!(step["events_moved"], 0, "{what}: {step}");
                }
            }
        }
    }
}

/// A Python program (Debian's mpi4py, over the C API): pickled messages
/// (received through MPI_Mprobe and MPI_Mrecv), wildcard buffer receives,
/// nonblocking exchanges and collectives. Same output, and the calls the
/// program makes itself counted exactly; every message matched through its
/// id, every clock check clean (mpi4py's own calls for its object
/// collectives vary with its version and are not counted).
#[test]
fn mpi4py_programs_are_transparent_and_their_messages_matched() {
    let script = root().join("tests/progs/mpi4py_ring.py");
    let script = script.to_str().unwrap();
    let python = std::path::Path::new("/usr/bin/python3");
    for (np, clocks) in [(4, "lamport"), (3, "vector")] {
        let what = format!("mpi4py np={np} {clocks}");
        let dir = scratch(&format!("mpi4py-{np}-{clocks}"));
        let plain = mpirun(&dir, np, python, &[script], Mode::Plain, &[]);
        assert!(
            plain
                .stdout
                .ends_with(&format!("mpi4py_ring: ok np={np}\n")),
            "{what}: {}{}",
            plain.stdout,
            plain.stderr
        );
        let env = [("PMTRACE_CLOCKS", clocks)];
        let traced = mpirun(&dir, np, python, &[script], Mode::Preload, &env);
        assert_transparent(&plain, &traced, np);
        let trace = Trace::open(&traced.trace).unwrap();
        let n = u64::from(np);
        for (rank, counts) in recorded_counts(&trace).iter().enumerate() {
            let count = |f: &str| counts.get(f).copied().unwrap_or(0);
            let pickled = 3; // one token receive per round
            for (f, want) in [
                ("MPI_Init_thread", 1),
                ("MPI_Isend", 2),
                ("MPI_Irecv", 2),
                ("MPI_Waitall", 1),
                ("MPI_Mprobe", pickled),
                ("MPI_Mrecv", pickled),
                ("MPI_Barrier", 1),
                ("MPI_Finalize", 1),
            ] {
                assert_eq!(count(f), want, "{what}: rank {rank} {f}: {counts:?}");
            }
            let wildcard = if rank == 0 { n - 1 } else { 0 };
            assert!(count("MPI_Recv") >= wildcard, "{what}: rank {rank}");
        }
        let rep = report(&traced.trace);
        let m = &rep["messages"];
        assert_eq!(m["unmatched"], 0, "{what}: {m}");
        assert_eq!(m["matched"], m["sent"], "{what}: {m}");
        assert!(
            m["matched"].as_u64().unwrap() >= 3 * n + (n - 1) + 4 * n / 2,
            "{what}: {m}"
        );
        check_clock_report(&rep, clocks, &what);
    }
}

/// `MPI_Request_free` on operations in flight: small (staged), wildcard,
/// large, strided and persistent receives still deliver their data, and
/// 1000 fire-and-forget sends go through, under both clock modes. The
/// five freed receives per pair have no completion in the trace: they are
/// counted as pending, and their messages as unmatched sends; the clocks
/// still check out.
#[test]
fn freed_requests_in_flight_still_deliver_their_data() {
    for (np, clocks) in [(2, "lamport"), (4, "lamport"), (2, "vector")] {
        let what = format!("reqfree np={np} {clocks}");
        let dir = scratch(&format!("reqfree-{np}-{clocks}"));
        let prog = prog("reqfree");
        let plain = mpirun(&dir, np, &prog, &[], Mode::Plain, &[]);
        assert!(
            plain.stdout.contains("reqfree: ok"),
            "{what}: {}",
            plain.stdout
        );
        let traced = mpirun(
            &dir,
            np,
            &prog,
            &[],
            Mode::Preload,
            &[("PMTRACE_CLOCKS", clocks)],
        );
        assert_transparent(&plain, &traced, np);
        let trace = Trace::open(&traced.trace).unwrap();
        let expected = traced.expected_counts(np);
        assert_eq!(recorded_counts(&trace), expected, "{what}");
        let rep = report(&traced.trace);
        let m = &rep["messages"];
        let pairs = u64::from(np / 2);
        // Matched by piggybacked id, the unmatched sends are the messages
        // the freed receives took (FIFO would pair each with the next
        // message of its channel instead).
        let mut left: Vec<(u64, u64)> = m["unmatched_first"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| (u["tag"].as_u64().unwrap(), u["bytes"].as_u64().unwrap()))
            .collect();
        left.sort_unstable();
        left.dedup();
        assert_eq!(
            left,
            [(1, 16), (3, 16), (4, 32768), (5, 16), (6, 16)],
            "{what}: {m}"
        );
        check_freed_receives(&rep, 5 * pairs, &what);
    }
}

/// A trace whose only unmatched messages are those `freed` receives freed
/// in flight took: they have no completion, so their sends stay unmatched
/// and FIFO matching (which pairs each with the next message of its
/// channel) disagrees once for each; every clock check is clean.
fn check_freed_receives(rep: &serde_json::Value, freed: u64, what: &str) {
    let (m, c) = (&rep["messages"], &rep["clocks"]);
    assert_eq!(m["pending_receives"], freed, "{what}: {m}");
    assert_eq!(m["unmatched_receives"], 0, "{what}: {m}");
    assert_eq!(m["unmatched_sends"], freed, "{what}: {m}");
    assert_eq!(c["fifo_disagreements"], freed, "{what}: {c}");
    assert_eq!(c["matched_by_id"], m["received"], "{what}: {c}");
    for key in [
        "unmatched_by_id",
        "lamport_violations",
        "wire_mismatches",
        "decreasing",
    ] {
        assert_eq!(c[key], 0, "{what}: clocks.{key}: {c}");
    }
}

/// Messages around the inline limit and far above it (issue 17, point 3):
/// every size from 4090 to 4400 bytes and others up to 1 MiB, in every send mode,
/// blocking and not, persistent, `Sendrecv(_replace)`, `Isendrecv(_replace)`,
/// probed and matched-probed, into larger buffers (nothing past the message
/// may change), between contiguous and strided types, on a reordered
/// communicator and an intercommunicator. The program checks every byte
/// and count itself; traced, the output is the same, every call recorded
/// and every message matched by its id, under each clock mode.
#[test]
fn large_messages_go_untouched_and_trace_exactly() {
    // Headers through the node's shared memory (limit about 1 KiB), and
    // all by MPI (the limit across nodes, about 4 KiB).
    for (mpi, np, clocks, shm) in [
        (Mpi::OpenMpi, 2, "lamport", "on"),
        (Mpi::OpenMpi, 4, "lamport", "on"),
        (Mpi::OpenMpi, 3, "vector", "on"),
        (Mpi::OpenMpi, 3, "none", "on"),
        (Mpi::OpenMpi, 3, "lamport", "off"),
        (Mpi::Mpich, 2, "lamport", "on"),
        (Mpi::Mpich, 3, "vector", "on"),
        (Mpi::Mpich, 2, "lamport", "off"),
    ] {
        let run = check_env(
            mpi,
            "bigmsg",
            "bigmsg",
            np,
            &[],
            clocks,
            &[("PMTRACE_SHM", shm)],
        );
        assert!(
            !run.stdout.contains("ERRORS"),
            "bigmsg np={np} {clocks} shm {shm}: {}",
            run.stdout
        );
    }
    // Receives freed in flight, of every size: their data still arrives
    // whole (the program checks it), and only their completions are
    // missing from the trace.
    for mpi in [Mpi::OpenMpi, Mpi::Mpich] {
        let np = 3;
        let what = format!("bigmsg freed under {mpi:?}");
        let dir = scratch(&format!("bigmsg-freed-{}", mpi.tag()));
        let prog = mpi.prog("bigmsg");
        let plain = mpirun_on(mpi, &dir, np, &prog, &["freed"], Mode::Plain, &[]);
        assert!(
            plain.stdout.contains("freed receive: 63 sizes, ok"),
            "{what}: {}",
            plain.stdout
        );
        let traced = mpirun_on(mpi, &dir, np, &prog, &["freed"], Mode::Preload, &[]);
        assert_transparent(&plain, &traced, np);
        let trace = Trace::open(&traced.trace).unwrap();
        assert_eq!(
            recorded_counts(&trace),
            traced.expected_counts(np),
            "{what}"
        );
        check_freed_receives(&report(&traced.trace), 63 * u64::from(np), &what);
    }
}

/// A message of more than 2 GiB (an `int` count of a strided type, whose
/// bytes no `int` holds) arrives whole, its gaps untouched: its header goes
/// apart, and the receive moves the data it took behind the header area
/// into place in pieces that `MPI_Pack`'s `int` arguments can take.
#[test]
fn a_strided_message_of_more_than_2_gib_arrives_whole() {
    for mpi in [Mpi::OpenMpi, Mpi::Mpich] {
        let run = check_on(mpi, "bigmsg-huge", "bigmsg", 2, &["huge"], "lamport");
        assert!(
            run.stdout.contains("huge strided message: 1 sizes, ok"),
            "bigmsg huge under {mpi:?}: {}",
            run.stdout
        );
    }
}

#[test]
fn coverage_program_traces_exactly_its_calls_at_np_2_to_8() {
    for np in 2..=8 {
        check_program("coverage", "coverage", np);
    }
}

/// The calls of one function on one rank, in order.
fn calls<'a>(trace: &'a Trace, rank: usize, name: &str) -> Vec<Call<'a>> {
    let r = &trace.ranks[rank];
    r.calls()
        .filter(|(_, c)| r.function_name(c.func) == name)
        .map(|(_, c)| c)
        .collect()
}

#[test]
fn byte_counts_are_exact_for_derived_types_oversized_receives_and_in_place() {
    let np = 3;
    let traced = check_program("bytes", "bytes", np);
    let trace = Trace::open(&traced.trace).unwrap();
    let any_source = trace.constants().any_source;
    let any_tag = trace.constants().any_tag;

    let sends = calls(&trace, 0, "MPI_Send");
    assert!(
        matches!(
            sends[0].payload,
            Payload::Send {
                peer: 1,
                tag: 11,
                bytes: 24,
                ..
            }
        ),
        "{:?}",
        sends[0]
    );
    assert!(
        matches!(
            sends[1].payload,
            Payload::Send {
                peer: 1,
                tag: 13,
                bytes: 8,
                ..
            }
        ),
        "{:?}",
        sends[1]
    );
    let isend = calls(&trace, 0, "MPI_Isend");
    assert!(matches!(
        isend[0].payload,
        Payload::Send {
            peer: 1,
            tag: 12,
            bytes: 24,
            op: Some(_),
            ..
        }
    ));

    let recvs = calls(&trace, 1, "MPI_Recv");
    // Posted 100 ints, received a 24-byte vector.
    match &recvs[0].payload {
        Payload::Recv {
            src: 0,
            tag: 11,
            posted: 400,
            status: Some(s),
            ..
        } => {
            assert_eq!((s.source, s.tag, s.bytes), (Some(0), Some(11), Some(24)))
        }
        p => panic!("{p:?}"),
    }
    // MPI_ANY_SOURCE, MPI_ANY_TAG and MPI_STATUS_IGNORE: the real source is recorded.
    match &recvs[1].payload {
        Payload::Recv {
            src,
            tag,
            posted: 400,
            status: Some(s),
            ..
        } => {
            assert_eq!((*src, *tag), (any_source, any_tag));
            assert_eq!((s.source, s.tag, s.bytes), (Some(0), Some(13), Some(8)));
        }
        p => panic!("{p:?}"),
    }
    // Irecv posted 10 pairs (120 bytes); the Wait (MPI_STATUS_IGNORE) completes it with 24.
    let Payload::Recv {
        posted: 120,
        op: Some(irecv_op),
        ..
    } = calls(&trace, 1, "MPI_Irecv")[0].payload
    else {
        panic!("irecv")
    };
    let waits = calls(&trace, 1, "MPI_Wait");
    let Payload::Complete { done } = &waits[0].payload else {
        panic!("wait")
    };
    assert_eq!(done.len(), 1);
    assert_eq!(done.get(0).unwrap().op, Some(irecv_op));
    let st: Status = done.get(0).unwrap().status.resolve(0, 12, 120);
    assert_eq!((st.source, st.tag, st.bytes), (Some(0), Some(12), Some(24)));

    for rank in 0..np as usize {
        let ar = calls(&trace, rank, "MPI_Allreduce");
        assert!(
            matches!(
                ar[0].payload,
                Payload::Coll {
                    root: None,
                    sent: 40,
                    recvd: 40,
                    ..
                }
            ),
            "{:?}",
            ar[0]
        );
        let bc = &calls(&trace, rank, "MPI_Bcast")[0].payload;
        let ga = &calls(&trace, rank, "MPI_Gather")[0].payload;
        if rank == 0 {
            assert!(
                matches!(
                    bc,
                    Payload::Coll {
                        root: Some(0),
                        sent: 12,
                        recvd: 0,
                        ..
                    }
                ),
                "{bc:?}"
            );
            assert!(
                matches!(
                    ga,
                    Payload::Coll {
                        root: Some(0),
                        sent: 0,
                        recvd: 24,
                        ..
                    }
                ),
                "{ga:?}"
            );
        } else {
            assert!(
                matches!(
                    bc,
                    Payload::Coll {
                        root: Some(0),
                        sent: 0,
                        recvd: 12,
                        ..
                    }
                ),
                "{bc:?}"
            );
            assert!(
                matches!(
                    ga,
                    Payload::Coll {
                        root: Some(0),
                        sent: 8,
                        recvd: 0,
                        ..
                    }
                ),
                "{ga:?}"
            );
        }
    }
}

#[test]
fn collective_sequence_numbers_count_per_communicator() {
    let traced = check_program("collseq", "collectives", 4);
    let trace = Trace::open(&traced.trace).unwrap();
    for rank in 0..4 {
        let r = &trace.ranks[rank];
        let mut per_comm: std::collections::BTreeMap<u32, Vec<u64>> = Default::default();
        for (_, c) in r.calls() {
            if let Payload::Coll { comm, seq, .. } = c.payload {
                per_comm.entry(comm).or_default().push(seq);
            }
        }
        for (comm, seqs) in per_comm {
            let expect: Vec<u64> = (0..seqs.len() as u64).collect();
            assert_eq!(seqs, expect, "rank {rank} comm {comm}");
        }
    }
}

/// Every communicator commids.c makes has one global id on all its members,
/// and no two share one: an intracommunicator's id is defined by exactly
/// its members, each at its own rank, as its rank 0 lists them (an
/// intercommunicator's by both groups). The constructors that every member
/// of the parent calls derive the id with no collective (bit 62); the
/// others agree on it by one (no bit 62). At np=5 a split leaves rank 0
/// out and the grid the last rank: the dup after them must still agree.
#[test]
fn communicators_get_one_id_on_their_members_and_no_two_share_one() {
    const DERIVED: u64 = 1 << 62;
    for np in [4u32, 5] {
        let traced = check_program("commids", "commids", np);
        let trace = Trace::open(&traced.trace).unwrap();
        let mut by_id: std::collections::BTreeMap<
            u64,
            Vec<(u32, &pmtrace_format::record::CommDef)>,
        > = Default::default();
        for r in &trace.ranks {
            for d in r.comm_defs() {
                by_id.entry(d.global_id).or_default().push((r.rank, d));
            }
        }
        let mut made = 0;
        for (&id, defs) in &by_id {
            if id == 0 || (id & 0xffff_ffff == 1 && defs.len() == 1 && defs[0].1.size == 1) {
                continue; // world, and each rank's MPI_COMM_SELF
            }
            made += 1;
            let (first, list) = defs
                .iter()
                .find(|(_, d)| d.rank == 0 && !d.members.is_empty())
                .unwrap_or_else(|| panic!("np={np}: no member list for {id:#x}"));
            let inter = defs[0].1.inter;
            let expect = if inter {
                (list.size + list.remote_size) as usize
            } else {
                list.size as usize
            };
            assert_eq!(defs.len(), expect, "np={np}: {id:#x} defined by {defs:?}");
            for (writer, d) in defs {
                assert_eq!(d.inter, inter, "np={np}: {id:#x}");
                if !inter || list.members.contains(writer) {
                    assert_eq!(d.size, list.size, "np={np}: {id:#x}");
                    assert_eq!(
                        list.members[d.rank as usize], *writer,
                        "np={np}: {id:#x}: rank {} of {:?} (listed by world rank {first})",
                        d.rank, list.members
                    );
                }
            }
        }
        // Two dups of world, the halves (2), the split without rank 0,
        // the shared split, the parity groups (2), the grid and its two
        // rows, two graphs, the evens, the intercommunicator, its merge,
        // the dup of a dup, the idup, and a dup of self per rank.
        let ids = 2 + 2 + 1 + 1 + 2 + 3 + 2 + 1 + 1 + 1 + 1 + 1 + np as usize;
        assert_eq!(made, ids, "np={np}: {by_id:#?}");
        for r in &trace.ranks {
            for (_, c) in r.calls() {
                let Payload::CommNew { comm: Some(ix), .. } = c.payload else {
                    continue;
                };
                let name = r.function_name(c.func);
                let id = r.comm_at(ix, c.t_end).unwrap().global_id;
                let agreed = matches!(name, "MPI_Comm_create_group" | "MPI_Intercomm_create");
                assert_eq!(
                    id & DERIVED == 0,
                    agreed,
                    "np={np} rank {}: {name} gave {id:#x}",
                    r.rank
                );
            }
        }
    }
}

/// Builds `ring` linked with pmtrace, dynamically or statically.
fn link_ring(dir: &std::path::Path, static_link: bool) -> std::path::PathBuf {
    let out = dir.join(if static_link {
        "ring-static"
    } else {
        "ring-linked"
    });
    let libdir = root().join("target/release");
    let mut cmd = std::process::Command::new("mpicc");
    cmd.arg("-O2")
        .arg(root().join("examples/ring.c"))
        .arg("-o")
        .arg(&out);
    if static_link {
        cmd.arg(libdir.join("libpmtrace.a"))
            .args(["-lpthread", "-ldl", "-lm", "-lgcc_s"]);
    } else {
        cmd.arg("-L")
            .arg(&libdir)
            .arg("-lpmtrace")
            .arg(format!("-Wl,-rpath,{}", libdir.display()));
    }
    let st = cmd.status().expect("mpicc");
    assert!(st.success(), "linking ring with pmtrace failed");
    out
}

#[test]
fn a_program_linked_with_pmtrace_produces_the_same_trace_as_preloading() {
    let dir = scratch("relink");
    let np = 3;
    let preloaded = mpirun(&dir, np, &prog("ring"), &["25"], Mode::Preload, &[]);
    assert_eq!(preloaded.code, 0, "{}", preloaded.stderr);
    let base = Trace::open(&preloaded.trace).unwrap();
    for static_link in [false, true] {
        let bin = link_ring(&dir, static_link);
        let linked = mpirun(&dir, np, &bin, &["25"], Mode::Linked, &[]);
        assert_eq!(linked.code, 0, "{}", linked.stderr);
        assert_eq!(linked.stdout, preloaded.stdout);
        assert_eq!(linked.stderr_lines().len(), 1, "{}", linked.stderr);
        let t = Trace::open(&linked.trace).unwrap();
        assert_eq!(
            recorded_counts(&t),
            recorded_counts(&base),
            "static={static_link}"
        );
        let (a, b) = (report(&linked.trace), report(&preloaded.trace));
        assert_eq!(a["messages"], b["messages"], "static={static_link}");
        assert_eq!(a["events"], b["events"]);
    }
}

#[test]
fn an_unwritable_trace_directory_disables_tracing_and_the_job_runs_on() {
    let dir = scratch("unwritable");
    let prog = prog("ring");
    let plain = mpirun(&dir, 2, &prog, &[], Mode::Plain, &[]);
    let bad = mpirun(
        &dir,
        2,
        &prog,
        &[],
        Mode::Preload,
        &[("PMTRACE_DIR", "/proc/pmtrace-cannot-be-here")],
    );
    assert_eq!(bad.code, 0);
    assert_eq!(bad.stdout, plain.stdout);
    let lines = bad.stderr_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("pmtrace: warning:") && lines[0].contains("tracing disabled"),
        "{}",
        lines[0]
    );
}

#[test]
fn bad_settings_get_one_warning_each_and_tracing_goes_on() {
    let dir = scratch("badconfig");
    let run = mpirun(
        &dir,
        2,
        &prog("ring"),
        &[],
        Mode::Preload,
        &[
            ("PMTRACE_BUFFER_SIZE", "banana"),
            ("PMTRACE_FROBNICATE", "1"),
        ],
    );
    assert_eq!(run.code, 0);
    let lines = run.stderr_lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[0].contains("PMTRACE_BUFFER_SIZE=banana"),
        "{}",
        lines[0]
    );
    assert!(lines[1].contains("PMTRACE_FROBNICATE"), "{}", lines[1]);
    assert!(lines[2].starts_with("pmtrace: trace of 2/2 ranks"));
    Trace::open(&run.trace).unwrap();
}

#[test]
fn an_existing_trace_is_never_overwritten() {
    let dir = scratch("nooverwrite");
    let first = mpirun(&dir, 2, &prog("ring"), &[], Mode::Preload, &[]);
    assert_eq!(first.code, 0);
    let before = std::fs::read(first.trace.join("rank-00000.pmt")).unwrap();
    let again = mpirun(
        &dir.join("again"),
        2,
        &prog("ring"),
        &[],
        Mode::Preload,
        &[("PMTRACE_DIR", first.trace.to_str().unwrap())],
    );
    assert_eq!(again.code, 0);
    assert!(
        again.stderr.contains("already holds a trace"),
        "{}",
        again.stderr
    );
    assert_eq!(
        std::fs::read(first.trace.join("rank-00000.pmt")).unwrap(),
        before
    );
}

#[test]
fn a_damaged_real_trace_gives_one_line_errors() {
    let dir = scratch("damaged");
    let run = mpirun(&dir, 2, &prog("halo2d"), &[], Mode::Preload, &[]);
    assert_eq!(run.code, 0);
    let file = run.trace.join("rank-00001.pmt");
    let good = std::fs::read(&file).unwrap();
    let check = |what: &str| {
        let out = pmtrace(&["report", run.trace.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert_eq!(err.lines().count(), 1, "{what}: {err}");
        assert!(err.starts_with("pmtrace: error:"), "{what}: {err}");
    };
    std::fs::write(&file, &good[..good.len() / 2 + 7]).unwrap();
    check("truncated");
    let mut flipped = good.clone();
    // Inside the first chunk's records: after the header page and the
    // 64-byte chunk header.
    let first_chunk =
        (u32::from_le_bytes(good[12..16].try_into().unwrap()) as usize + 20).div_ceil(4096) * 4096;
    flipped[first_chunk + 64 + 10] ^= 0x20;
    std::fs::write(&file, &flipped).unwrap();
    check("bit flipped");
    std::fs::remove_file(&file).unwrap();
    check("missing rank");
}

#[test]
fn ten_million_events_stay_within_the_buffer_memory() {
    let dir = scratch("tenmillion");
    let prog = prog("manycalls");
    let rss = |mode: Mode| {
        let f = dir.join(format!("rss-{mode:?}"));
        let _ = std::fs::remove_file(&f);
        let run = mpirun(
            &dir,
            2,
            &prog,
            &["5000000"],
            mode,
            &[
                ("RSS_FILE", f.to_str().unwrap()),
                ("PMTRACE_BUFFER_SIZE", "1M"),
            ],
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        let text = std::fs::read_to_string(&f).unwrap();
        let max: u64 = text
            .lines()
            .map(|l| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap())
            .max()
            .unwrap();
        (run, max)
    };
    let (_, plain_kib) = rss(Mode::Plain);
    let (traced, traced_kib) = rss(Mode::Preload);
    let line = traced.stderr_lines()[0].to_string();
    let calls: u64 = line
        .rsplit(": ")
        .next()
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // 5M Iprobe per rank plus Init, Comm_rank, Barrier, Finalize.
    assert_eq!(calls, 2 * (5_000_000 + 4), "{line}");
    // Two 1 MiB buffers per thread, plus the library and its writer thread:
    // a bound that does not grow with the 10M events (~70 MB of trace).
    let extra = traced_kib.saturating_sub(plain_kib);
    eprintln!("peak RSS: plain {plain_kib} KiB, traced {traced_kib} KiB (+{extra} KiB)");
    assert!(extra < 24 * 1024, "traced RSS grew by {extra} KiB");
}

#[test]
fn every_thread_records_its_own_stream_under_thread_multiple() {
    for np in [2, 4] {
        let traced = check_program("threads", "threads", np);
        let trace = Trace::open(&traced.trace).unwrap();
        for r in &trace.ranks {
            // The main thread, four workers and ten completers, one after
            // another (which may get an ended thread's OS id again).
            assert_eq!(r.threads.len(), 15, "rank {}", r.rank);
            let tids: Vec<u64> = r
                .threads
                .iter()
                .map(|t| t.tid.expect("every thread names its OS id"))
                .collect();
            let first: std::collections::BTreeSet<u64> = tids[..5].iter().copied().collect();
            assert_eq!(first.len(), 5, "distinct OS thread ids: {tids:?}");
        }
    }
}

/// A program that starts a thread per task: 2,000 threads, one after
/// another, each exchange one message and end. Every call is recorded, and
/// each ended thread leaves its trace a page or two, not its two buffers
/// (512 KiB: 1 GB a rank before the pool of `flusher`).
#[test]
fn a_thread_per_task_grows_the_trace_by_pages_not_buffers() {
    let threads = 2000;
    let traced = check_clocked(
        "threads-brief",
        "threads",
        2,
        &["2", "10", "2000"],
        "lamport",
    );
    let trace = Trace::open(&traced.trace).unwrap();
    for r in &trace.ranks {
        // The main thread, two workers, ten completers and the brief ones.
        assert_eq!(r.threads.len(), 13 + threads, "rank {}", r.rank);
        let sendrecvs = r
            .calls()
            .filter(|(_, c)| r.function_name(c.func) == "MPI_Sendrecv")
            .count();
        assert_eq!(sendrecvs, threads, "rank {}", r.rank);
    }
    for f in std::fs::read_dir(&traced.trace).unwrap() {
        let f = f.unwrap();
        if f.path().extension().is_some_and(|e| e == "pmt") {
            let len = f.metadata().unwrap().len();
            assert!(
                len < 3 * 4096 * threads as u64,
                "{}: {len} bytes for {threads} ended threads",
                f.path().display()
            );
        }
    }
}

#[test]
fn mpi_finalize_from_a_static_destructor_is_traced() {
    check_program("late", "late_finalize", 3);
}

#[test]
fn an_aborted_job_keeps_its_trace() {
    let dir = scratch("abort");
    let np = 3;
    let prog = prog("abort");
    let plain = mpirun(&dir, np, &prog, &[], Mode::Plain, &[]);
    let traced = mpirun(&dir, np, &prog, &[], Mode::Preload, &[]);
    assert_ne!(plain.code, 0);
    assert_eq!(traced.code, plain.code, "same exit status");
    assert_eq!(traced.stdout, plain.stdout);
    let trace = Trace::open(&traced.trace).unwrap();
    // The aborting rank sealed its trace, MPI_Abort included.
    let r0 = &trace.ranks[0];
    assert!(r0.complete());
    let names: Vec<&str> = r0.calls().map(|(_, c)| r0.function_name(c.func)).collect();
    assert_eq!(
        names
            .iter()
            .filter(|n| **n == "MPI_Sendrecv_replace")
            .count(),
        10
    );
    assert_eq!(names.last(), Some(&"MPI_Abort"));
    // The killed ranks never sealed theirs, yet every call they finished is there.
    for r in &trace.ranks[1..] {
        let calls: Vec<&str> = r.calls().map(|(_, c)| r.function_name(c.func)).collect();
        assert_eq!(
            calls
                .iter()
                .filter(|n| **n == "MPI_Sendrecv_replace")
                .count(),
            10,
            "rank {}",
            r.rank
        );
        assert!(calls.contains(&"MPI_Barrier"), "rank {}", r.rank);
    }
    let rep = report(&traced.trace);
    assert_eq!(rep["messages"]["matched"], 10 * np as u64);
}

/// A rank killed right after a receive returned keeps that receive, and its
/// message stays matched: the record is written before the call returns.
#[test]
fn a_rank_killed_right_after_a_receive_keeps_it() {
    let dir = scratch("kill");
    let np = 3;
    let prog = prog("abort");
    let plain = mpirun(&dir, np, &prog, &["kill"], Mode::Plain, &[]);
    let traced = mpirun(&dir, np, &prog, &["kill"], Mode::Preload, &[]);
    assert_ne!(plain.code, 0);
    assert_eq!(traced.code, plain.code, "same exit status");
    assert_eq!(traced.stdout, plain.stdout);
    let trace = Trace::open(&traced.trace).unwrap();
    let r1 = &trace.ranks[1];
    assert!(!r1.complete());
    let (_, last) = r1.calls().last().unwrap();
    assert_eq!(r1.function_name(last.func), "MPI_Recv");
    let Payload::Recv {
        src: 0,
        tag: 99,
        status: Some(status),
        ..
    } = &last.payload
    else {
        panic!("{last:?}")
    };
    assert!(status.pb.is_some(), "{status:?}");
    let rep = report(&traced.trace);
    assert_eq!(rep["messages"]["matched"], 10 * np as u64 + 1);
}

/// Names of the dynamic symbols a binary defines.
fn defined_symbols(path: &std::path::Path) -> Vec<String> {
    let out = std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(path)
        .output()
        .expect("nm");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(String::from))
        .collect()
}

#[test]
fn the_library_exports_only_mpi_symbols_and_the_cli_none() {
    // The MPI functions of every interface, pmtrace's phase API
    // (include/pmtrace.h), PMIx_Init, through which the untraced-rank check
    // rides on the MPI library's own PMIx start (peers), and dlsym, which
    // hands pmtrace's functions to programs that look MPI's up (src/dl.rs).
    let so = lib();
    let lib = defined_symbols(&so);
    assert!(lib.len() > 1000, "{} symbols", lib.len());
    let foreign: Vec<&String> = lib
        .iter()
        .filter(|s| {
            !s.starts_with("MPI_")
                && !s.starts_with("PMPI_")
                && !s.starts_with("pmtrace_phase_")
                && *s != "PMIx_Init"
                && *s != "dlsym"
        })
        .collect();
    assert!(foreign.is_empty(), "non-MPI exports: {foreign:?}");
    // Two levels for stacking (crates/linkage/src/definitions.rs): each inner PMPI_X has its MPI_X.
    let lone: Vec<&String> = lib
        .iter()
        .filter(|s| s.starts_with("PMPI_") && !lib.contains(&s[1..].to_string()))
        .collect();
    assert!(lone.is_empty(), "{lone:?}");
    assert!(lib.iter().any(|s| s == "PMIx_Init"));
    // Every interface's functions: Open MPI's conversions, MPICH's
    // and Open MPI's MPI-4 functions, and the standard ABI's own.
    for name in [
        "MPI_Comm_c2f",
        "MPI_Send_c",
        "MPI_Isendrecv",
        "MPI_Abi_get_version",
        "MPI_Comm_toint",
    ] {
        assert!(lib.iter().any(|s| s == name), "{name} is not exported");
    }
    // One library for every MPI: it needs none, and names no symbol of one.
    let dynamic = std::process::Command::new("readelf")
        .args(["-d"])
        .arg(&so)
        .output()
        .expect("readelf");
    let dynamic = String::from_utf8_lossy(&dynamic.stdout);
    let needed: Vec<&str> = dynamic.lines().filter(|l| l.contains("(NEEDED)")).collect();
    assert!(
        needed
            .iter()
            .all(|l| !l.contains("libmpi") && !l.contains("libmpich")),
        "{needed:?}"
    );
    let undefined = std::process::Command::new("nm")
        .args(["-D", "--undefined-only"])
        .arg(&so)
        .output()
        .expect("nm");
    let undefined = String::from_utf8_lossy(&undefined.stdout);
    let mpi: Vec<&str> = undefined
        .lines()
        .filter(|l| l.contains("MPI") || l.contains("mpi_") || l.contains("PMIx"))
        .collect();
    assert!(mpi.is_empty(), "undefined MPI symbols: {mpi:?}");
    let out = std::process::Command::new("nm")
        .arg(cli())
        .output()
        .expect("nm");
    let text = String::from_utf8_lossy(&out.stdout);
    let mpi: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" T MPI_") || l.contains(" T PMPI_"))
        .collect();
    assert!(mpi.is_empty(), "the CLI defines MPI symbols: {mpi:?}");
}

/// A rank whose file cannot be made (someone else's file is there) turns
/// tracing off on every rank, under both MPIs, rank 0 among them (MPICH
/// 4.0 compares `MPI_UINT64_T` as signed under `MPI_MIN`, which once hid a
/// failed rank 0 from the others: they traced on, and the job hung in
/// pmtrace's next collective).
#[test]
fn a_rank_that_cannot_create_its_file_turns_tracing_off_on_every_rank() {
    for mpi in [Mpi::OpenMpi, Mpi::Mpich] {
        for failing in [0, 2] {
            let what = format!("{mpi:?}, rank {failing}");
            let dir = scratch(&format!("onerankfails-{}-{failing}", mpi.tag()));
            let trace = dir.join("shared-trace");
            let _ = std::fs::remove_dir_all(&trace);
            std::fs::create_dir_all(&trace).unwrap();
            // The rank's file exists already: it must not be touched, and
            // the rank cannot trace. The job splits communicators, where
            // traced ranks would run a hidden collective an untraced rank
            // does not. Rank 0's is a dangling symbolic link, which rank
            // 0's check of the directory (is a trace there?) lets pass.
            let theirs = trace.join(format!("rank-{failing:05}.pmt"));
            let target = dir.join("nowhere");
            if failing == 0 {
                std::os::unix::fs::symlink(&target, &theirs).unwrap();
            } else {
                std::fs::write(&theirs, b"someone else's file").unwrap();
            }
            let prog = mpi.prog("collectives");
            let plain = mpirun_on(mpi, &dir, 3, &prog, &[], Mode::Plain, &[]);
            let run = mpirun_on(
                mpi,
                &dir,
                3,
                &prog,
                &[],
                Mode::Preload,
                &[("PMTRACE_DIR", trace.to_str().unwrap())],
            );
            assert_eq!(run.code, 0, "{what}: {}", run.stderr);
            assert_eq!(run.stdout, plain.stdout, "{what}");
            let lines = run.stderr_lines();
            assert_eq!(lines.len(), 1, "{what}: {lines:?}");
            assert!(
                lines[0].starts_with(&format!("pmtrace: warning: rank {failing}:"))
                    && lines[0].contains("tracing disabled on all ranks"),
                "{what}: {}",
                lines[0]
            );
            if failing == 0 {
                assert_eq!(std::fs::read_link(&theirs).unwrap(), target, "{what}");
                assert!(!target.exists(), "{what}: the link was followed");
            } else {
                assert_eq!(std::fs::read(&theirs).unwrap(), b"someone else's file");
            }
            let left: Vec<_> = std::fs::read_dir(&trace)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(left.len(), 1, "{what}: no partial trace is left: {left:?}");
        }
    }
}

/// Clocks of a scenario run, addressed by function name and occurrence.
struct ScenarioClocks {
    trace: Trace,
    messages: pmtrace_matching::Messages,
    clocks: pmtrace_matching::Clocks,
}

impl ScenarioClocks {
    fn run(scenario: &str, np: u32, mode: &str) -> ScenarioClocks {
        let traced = check_clocked("scenario", "scenarios", np, &[scenario], mode);
        let trace = Trace::open(&traced.trace).unwrap();
        let messages = pmtrace_matching::Messages::build(&trace);
        let clocks = pmtrace_matching::clocks::compute(&trace, &messages);
        ScenarioClocks {
            trace,
            messages,
            clocks,
        }
    }

    /// The n-th call of `name` on `rank`.
    fn call(&self, rank: usize, name: &str, n: usize) -> pmtrace_trace::EventRef {
        let r = &self.trace.ranks[rank];
        r.calls()
            .filter(|(_, c)| r.function_name(c.func) == name)
            .nth(n)
            .unwrap_or_else(|| panic!("rank {rank} has no {name} #{n}"))
            .0
    }

    /// Lamport clock after the n-th call of `name` on `rank`.
    fn after(&self, rank: usize, name: &str, n: usize) -> u64 {
        let at = self.call(rank, name, n);
        self.clocks
            .after_call
            .get(at)
            .unwrap_or_else(|| panic!("no clock after {name} #{n} on rank {rank}"))
    }

    /// (match clock, clock after the merge) of the receive posted by the
    /// n-th call of `name` on `rank`.
    fn recv(&self, rank: usize, name: &str, n: usize) -> (u64, u64) {
        let at = self.call(rank, name, n);
        let i = self
            .messages
            .recvs
            .iter()
            .position(|r| r.post == at)
            .unwrap_or_else(|| panic!("no receive posted by {name} #{n} on rank {rank}"));
        self.clocks.recv_lc.get(i).unwrap()
    }
}

#[test]
fn piggyback_scenarios_give_the_clocks_of_the_lazy_lamport_rules() {
    for mode in ["lamport", "vector"] {
        // The crooked barrier (Vo, Fig. 5.2): irecv [0], recv(*) [1], wait
        // [2] on P1; every other event [0].
        let s = ScenarioClocks::run("crooked", 3, mode);
        for r in 0..3 {
            assert_eq!(s.after(r, "MPI_Barrier", 0), 0, "{mode}: barrier on {r}");
        }
        assert_eq!(s.after(0, "MPI_Isend", 0), 0);
        assert_eq!(s.after(0, "MPI_Wait", 0), 0);
        assert_eq!(s.after(2, "MPI_Isend", 0), 0);
        assert_eq!(s.after(2, "MPI_Wait", 0), 0);
        assert_eq!(s.after(1, "MPI_Irecv", 0), 0);
        assert_eq!(s.recv(1, "MPI_Irecv", 0).0, 0, "{mode}: irecv match clock");
        assert_eq!(s.recv(1, "MPI_Recv", 0), (1, 2), "{mode}: recv(*)");
        assert_eq!(s.after(1, "MPI_Wait", 0), 2, "{mode}: wait");

        // Non-overtaking (Fig. 3.3): the pending wildcard irecv matched
        // before the later recv from the same sender, so it gets the
        // earlier clock although its wait comes last.
        let s = ScenarioClocks::run("overtake", 2, mode);
        assert_eq!(s.recv(1, "MPI_Irecv", 0), (0, 1), "{mode}: irecv(*)");
        assert_eq!(s.recv(1, "MPI_Recv", 0), (1, 1), "{mode}: recv");
        assert_eq!(s.after(1, "MPI_Wait", 0), 1);
        assert_eq!(s.after(0, "MPI_Send", 0), 0);

        // Two Irecv(*) completed by waits in reverse order (Fig. 2.14 with
        // one sender, 2.15 with two): the second wait completes the first
        // receive too (CompleteNow), so [0] and [1], both waits end at 2.
        for np in [2, 3] {
            let s = ScenarioClocks::run("reverse", np, mode);
            let last = np as usize - 1;
            assert_eq!(
                s.recv(last, "MPI_Irecv", 0).0,
                0,
                "{mode} np={np}: first irecv"
            );
            assert_eq!(
                s.recv(last, "MPI_Irecv", 1).0,
                1,
                "{mode} np={np}: second irecv"
            );
            assert_eq!(s.after(last, "MPI_Wait", 0), 2, "{mode} np={np}");
            assert_eq!(s.after(last, "MPI_Wait", 1), 2, "{mode} np={np}");
        }

        // Partial receives: deterministic, no ticks but the +1 of each merge.
        let s = ScenarioClocks::run("partial", 2, mode);
        assert_eq!(s.recv(1, "MPI_Recv", 0), (0, 1));
        assert_eq!(s.recv(1, "MPI_Recv", 1), (1, 1));
        assert_eq!(s.recv(1, "MPI_Recv", 2), (1, 1));
        // The wildcard Irecv ticks at its wait: matched at 1, then 2.
        assert_eq!(s.recv(1, "MPI_Irecv", 0), (1, 2));
        let bytes: Vec<u64> = s.messages.recvs.iter().map(|r| r.bytes).collect();
        assert_eq!(
            bytes,
            [20, 16384, 48, 28],
            "{mode}: user bytes, not the piggyback's"
        );

        // Probe then receive: the probe sees the user's size.
        let s = ScenarioClocks::run("probe", 2, mode);
        let st = |c: &Call| match &c.payload {
            Payload::Probe { status, .. } => status.bytes,
            p => panic!("{p:?}"),
        };
        assert_eq!(st(&calls(&s.trace, 1, "MPI_Probe")[0]), Some(37 * 8));
        assert_eq!(st(&calls(&s.trace, 1, "MPI_Mprobe")[0]), Some(3 * 8));
        assert_eq!(s.recv(1, "MPI_Recv", 0), (0, 1));
        assert_eq!(s.recv(1, "MPI_Recv", 1), (1, 1));

        // A buffer sized exactly for the application's message still holds
        // it with the piggyback; the application gets its own buffer back.
        let s = ScenarioClocks::run("bsend", 2, mode);
        assert_eq!(s.messages.matched.len(), 2);
    }
}

/// `pmtrace run` over an MPMD line whose `untraced` app contexts drop
/// `LD_PRELOAD` (`env -u`): those ranks run without pmtrace.
fn run_with_untraced_ranks(
    mpi: Mpi,
    dir: &std::path::Path,
    prog: &std::path::Path,
    contexts: &[(u32, bool)],
) -> (std::process::Output, std::path::PathBuf) {
    let trace = dir.join(format!("trace-{}-{}", mpi.tag(), contexts.len()));
    let _ = std::fs::remove_dir_all(&trace);
    let mut cmd = std::process::Command::new(cli());
    cmd.env_remove("LD_LIBRARY_PATH"); // see `mpirun_on`
    cmd.arg("run")
        .arg("--out")
        .arg(&trace)
        .arg("--")
        .arg(mpi.launcher().0)
        .arg("--oversubscribe");
    for (i, &(np, traced)) in contexts.iter().enumerate() {
        if i > 0 {
            cmd.arg(":");
        }
        cmd.arg("-np").arg(np.to_string());
        if !traced {
            cmd.args(["env", "-u", "LD_PRELOAD"]);
        }
        cmd.arg(prog);
    }
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    (cmd.output().expect("pmtrace run"), trace)
}

/// Under Open MPI 4.1 and 5: the check rides on the MPI library's own
/// PMIx initialisation, which pmtrace must leave as it is (Open MPI 5
/// aborted in `MPI_Init` when pmtrace joined PMIx first).
#[test]
fn a_rank_without_pmtrace_is_found_at_init_and_the_job_runs_untraced() {
    for mpi in [Mpi::OpenMpi, Mpi::OpenMpi5] {
        let dir = scratch(&format!("untraced-rank-{}", mpi.tag()));
        // Wildcard receives on rank 0: any stray message of the tool's would
        // be taken as a worker's result.
        let prog = mpi.prog("master_worker");
        let plain = mpirun_on(mpi, &dir, 4, &prog, &[], Mode::Plain, &[]);
        assert_eq!(plain.code, 0);
        for (contexts, who) in [
            (&[(3, true), (1, false)][..], "rank 3 of 4 runs"),
            (&[(1, false), (3, true)][..], "rank 0 of 4 runs"),
            (
                &[(1, true), (1, false), (1, true), (1, false)][..],
                "ranks 1, 3 of 4 run",
            ),
        ] {
            let (out, trace) = run_with_untraced_ranks(mpi, &dir, &prog, contexts);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{mpi:?}: {stderr}");
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                plain.stdout,
                "{mpi:?} {who}"
            );
            let lines: Vec<&str> = stderr.lines().collect();
            assert_eq!(lines.len(), 2, "{mpi:?}: {lines:?}");
            assert_eq!(
                lines[0],
                format!("pmtrace: warning: {who} without pmtrace (or with another version); tracing disabled on all ranks")
            );
            assert!(
                lines[1].starts_with("pmtrace: no rank wrote a trace"),
                "{}",
                lines[1]
            );
            let files = std::fs::read_dir(&trace).unwrap().count();
            assert_eq!(files, 0, "no rank file is left in {}", trace.display());
        }
        // And with every rank traced, the same line traces them all.
        let (out, trace) = run_with_untraced_ranks(mpi, &dir, &prog, &[(2, true), (2, true)]);
        assert_eq!(out.status.code(), Some(0), "{mpi:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), plain.stdout);
        let rep = report(&trace);
        assert_eq!(rep["ranks"], 4, "{mpi:?}");
        assert_eq!(rep["clocks"]["matched_by_id"], rep["messages"]["matched"]);
        assert_eq!(rep["messages"]["unmatched"], 0, "{mpi:?}");
    }
}

#[test]
fn simulated_clocks_skew_every_rank_but_zero_and_the_true_time_is_recovered() {
    let dir = scratch("clocksim");
    // The last case pretends the 8 ranks run on 3 hosts (ranks 0-2, 3-5,
    // 6-7): rank 0 measures the heads 3 and 6 (inter-host edges) and its
    // own host's ranks, each head its own.
    for (name, sim, hosts) in [
        ("halo2d", "seed=11", 1),
        ("master_worker", "seed=11", 1),
        ("halo2d", "seed=5,hosts=3", 3),
    ] {
        let prog = prog(name);
        let plain = mpirun(&dir, 8, &prog, &[], Mode::Plain, &[]);
        let traced = mpirun(
            &dir,
            8,
            &prog,
            &[],
            Mode::Preload,
            &[("PMTRACE_CLOCK_SIM", sim)],
        );
        assert_transparent(&plain, &traced, 8);
        let trace = Trace::open(&traced.trace).unwrap();
        let names: Vec<&str> = trace
            .ranks
            .iter()
            .map(|r| r.header.hostname.as_str())
            .collect();
        if hosts == 3 {
            let sim_host: Vec<&str> = names
                .iter()
                .map(|n| n.rsplit("~sim").next().unwrap())
                .collect();
            assert_eq!(
                sim_host,
                ["0", "0", "0", "1", "1", "1", "2", "2"],
                "{names:?}"
            );
        } else {
            assert!(
                names.iter().all(|n| !n.contains("~sim") && *n == names[0]),
                "{names:?}"
            );
        }
        let sims: Vec<_> = trace
            .ranks
            .iter()
            .map(|r| r.header.clock_sim.expect("every rank records its clock"))
            .collect();
        assert!(sims[0].is_identity(), "rank 0 keeps the true clock");
        for (r, s) in sims.iter().enumerate().skip(1) {
            assert!(
                s.offset_ns.abs() <= 5e6 && s.drift_ppm.abs() <= 50.0,
                "rank {r}: {s:?}"
            );
            assert!(s.offset_ns.abs() > 1.0, "rank {r} is skewed");
        }
        let messages = pmtrace_matching::Messages::build(&trace);
        let raw = messages.violations(0);
        assert!(
            raw.reversed * 4 >= messages.matched.len() as u64,
            "{name}: only {} of {} messages reversed",
            raw.reversed,
            messages.matched.len()
        );
        // Mapped back to true time (one host, one physical clock), no
        // message goes backward.
        let truth = messages.violations_in(0, |r, t| trace.ranks[r as usize].header.true_time(t));
        assert_eq!(truth.reversed, 0, "{name}");
        check_offsets_hold_the_truth(name, &trace, hosts);
        check_sync_removes_every_violation(name, &traced.trace);
    }
}

/// The offsets measured at init and finalize hold the true offset within
/// their error bound; every rank has its own clock (simulated), on `hosts`
/// hosts.
fn check_offsets_hold_the_truth(name: &str, trace: &Trace, hosts: u32) {
    for r in &trace.ranks {
        let fin = r.trailer.as_ref().unwrap().offset_finalize;
        for (when, o) in [("init", r.header.offset_init), ("finalize", fin)] {
            let o = o.unwrap_or_else(|| panic!("rank {} has no {when} offset", r.rank));
            let truth = r.header.true_time(o.local_ns) as i64 - o.local_ns as i64;
            assert!(
                (o.offset_ns - truth).unsigned_abs() <= o.error_ns + 2,
                "{name} rank {} at {when}: measured {} true {truth} bound {}",
                r.rank,
                o.offset_ns,
                o.error_ns
            );
            assert_eq!(o.measured_by, r.rank, "own clock, own measurement");
            assert_eq!((o.hosts, o.reps), (hosts, 100));
            assert!(o.latency_intra_ns.is_some(), "{name}: ranks share a host");
            assert_eq!(o.latency_inter_ns.is_some(), hosts > 1, "{name}");
        }
    }
}

/// `pmtrace sync` on a trace with hundreds of reversed messages: none left,
/// point-to-point or collective, and every step keeps each thread's order
/// and the local intervals.
fn check_sync_removes_every_violation(name: &str, trace: &std::path::Path) {
    let before = report(trace);
    assert!(before["sync"].is_null() && before["violations_after_sync"].is_null());
    let out = pmtrace(&["sync", trace.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(trace.join("sync.pmts").is_file());
    let rep = report(trace);
    let sync = &rep["sync"];
    let recorded = &sync["recorded"]["violations"];
    // The skew reverses about half the messages (how many depends on the
    // run's timing): a quarter is the floor.
    let matched = rep["messages"]["matched"].as_u64().unwrap();
    assert!(
        recorded["reversed"].as_u64().unwrap() >= matched / 4,
        "{name}: {recorded} of {matched}"
    );
    let names: Vec<&str> = sync["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["interpolate", "regress", "clc"], "{name}");
    for step in sync["steps"].as_array().unwrap() {
        assert_eq!(step["order_inversions"], 0, "{name}: {step}");
        assert!(step["events_moved"].is_u64() && step["max_shift_ns"].is_u64());
        assert!(
            step["error_ns"]["median"].is_u64(),
            "simulated: errors measured"
        );
    }
    assert_synced_clean(&rep, name);
    let deviation = sync["interval_deviation"].as_f64().unwrap();
    assert!(deviation < 0.01, "{name}: interval deviation {deviation}");
    // Interpolation alone brings every event within 50 us of the true
    // time here (offsets of up to 5 ms before).
    let max = sync["steps"][0]["error_ns"]["max"].as_u64().unwrap();
    assert!(max < 50_000, "{name}: {max} ns");
    // After sync, every stamp from its rank's first clock measurement on
    // is within 5 us of the true time. The stamps before it (the start of
    // MPI_Init, 0.3-0.6 s earlier here, and the records made inside it)
    // no measurement places: the report names them, with a bound they keep.
    let early = &sync["early"];
    let ranks = rep["ranks"].as_u64().unwrap();
    let stamps = early["stamps"].as_u64().unwrap();
    assert!(
        (3 * ranks..=16 * ranks).contains(&stamps),
        "{name}: {early}"
    );
    let rest = early["rest_error_ns"]["max"].as_u64().unwrap();
    assert!(
        rest <= 5_000,
        "{name}: {rest} ns after the first measurement"
    );
    let (err, bound) = (
        early["error_ns"]["max"].as_u64().unwrap(),
        early["bound_ns"].as_u64().unwrap(),
    );
    assert!(
        err <= bound,
        "{name}: early stamps off by {err} ns, bound {bound}"
    );
    assert_eq!(
        sync["error_ns"]["max"].as_u64().unwrap(),
        rest.max(err),
        "{name}: the two parts make up every stamp"
    );
    eprintln!(
        "{name}: sync error max {rest} ns; {stamps} early stamps, {err} ns (bound {bound} ns)"
    );
    // The recorded times are still there.
    assert_eq!(rep["violations"], before["violations"]);
    // The merged log: every call's end once, in synchronized-time order.
    let log = trace.with_extension("log");
    let out = pmtrace(&[
        "merge",
        trace.to_str().unwrap(),
        "-o",
        log.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let times: Vec<u64> = text
        .lines()
        .skip(1)
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "{name}: merged log out of order"
    );
    let exits = text.lines().filter(|l| l.contains(" exit r")).count() as u64;
    assert_eq!(exits, rep["events"].as_u64().unwrap(), "{name}");
}

#[test]
fn a_trace_without_violations_passes_through_sync_unchanged() {
    // zerocoll: zero-byte collectives, communicator management and uneven
    // computation, where no logical message stands for data that flowed.
    for mpi in [Mpi::OpenMpi, Mpi::Mpich] {
        let dir = scratch(&format!("sync-identity-{}", mpi.tag()));
        for name in ["halo2d", "collectives", "zerocoll"] {
            let what = format!("{name} under {mpi:?}");
            let prog = mpi.prog(name);
            let run = mpirun_on(mpi, &dir, 4, &prog, &[], Mode::Preload, &[]);
            assert_eq!(run.code, 0, "{what}: {}", run.stderr);
            let out = pmtrace(&["sync", "--json", run.trace.to_str().unwrap()]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let sync: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(sync["clock_groups"], 1, "{what}: one host, one clock");
            assert!(sync["error_ns"].is_null(), "{what}: no simulated clocks");
            for (key, n) in sync["recorded"]["violations"].as_object().unwrap() {
                assert_eq!(n, 0, "{what}: recorded {key}");
            }
            for step in sync["steps"].as_array().unwrap() {
                assert_eq!(
                    (&step["events_moved"], &step["max_shift_ns"]),
                    (&serde_json::json!(0), &serde_json::json!(0)),
                    "{what}: {step}"
                );
            }
            assert_eq!(sync["interval_deviation"], 0.0, "{what}");
            let rep = report(&run.trace);
            assert_eq!(rep["violations_after_sync"]["reversed"], 0, "{what}");
            if name == "zerocoll" {
                // Per round: the Gatherv's odd ranks to the root (2 at
                // np=4) and the allreduce of data (12), over 20 rounds.
                assert_eq!(rep["collectives"]["logical_messages"], 20 * 14, "{what}");
            }
        }
    }
}

/// Ranks of one host read one clock: rank 0 measures for all of them, and
/// all of them turn the TSC into time at its scale.
#[test]
fn ranks_of_one_host_share_the_offset_their_leader_measured() {
    let dir = scratch("offsets");
    let run = mpirun(
        &dir,
        4,
        &prog("ring"),
        &[],
        Mode::Preload,
        &[("PMTRACE_SYNC_REPS", "5")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let trace = Trace::open(&run.trace).unwrap();
    for r in &trace.ranks {
        let fin = r.trailer.as_ref().unwrap().offset_finalize;
        for o in [r.header.offset_init, fin] {
            let o = o.unwrap();
            // One host, one clock: rank 0 measured for everyone, offset 0.
            assert_eq!(
                (o.offset_ns, o.error_ns, o.measured_by, o.hosts, o.reps),
                (0, 0, 0, 1, 5)
            );
            let mu = o.latency_intra_ns.expect("two ranks share the host");
            assert!(mu > 0 && mu < 1_000_000, "intra-host latency {mu} ns");
            assert_eq!(o.latency_inter_ns, None);
        }
        // pmtrace's start (the offsets measured among it) is inside the
        // MPI_Init the application called, not computation after it.
        let (_, init) = r.calls().next().unwrap();
        assert_eq!(r.function_name(init.func), "MPI_Init");
        let at = r.header.offset_init.unwrap().local_ns;
        assert!(
            (init.t_start..init.t_end).contains(&at),
            "rank {}: offset measured at {at} ns, MPI_Init {}..{} ns",
            r.header.rank,
            init.t_start,
            init.t_end
        );
        // And one TSC scale, rank 0's: each rank's own calibration would
        // drift from the others' by hundreds of ns in ten seconds.
        let timer = &r.header.timer;
        assert_eq!(
            timer, &trace.ranks[0].header.timer,
            "rank {}",
            r.header.rank
        );
        if timer.source == "tsc" {
            assert!(timer.tsc_hz.is_some_and(|hz| hz > 1e8), "{timer:?}");
        }
    }
}

/// `PMTRACE_EXCLUDE=time,probe,test,Comm_rank` on the coverage program:
/// the output as untraced; `MPI_Wtime`, `MPI_Wtick`, `MPI_Comm_rank`,
/// `MPI_Test_cancelled`, `MPI_Request_get_status` and the probes that
/// matched no message for a later receive are gone from the trace, tests
/// and `MPI_Improbe` exactly where they completed or matched nothing (the
/// program counts its hits); every other call recorded exactly; what was
/// left out counted per function, exactly, in the trailer and the report;
/// every message still matched through its id, every clock exact.
#[test]
fn excluded_functions_are_left_out_and_counted_and_clocks_stay_exact() {
    let np = 4;
    let what = "coverage with PMTRACE_EXCLUDE";
    let dir = scratch("exclude");
    let plain = mpirun(&dir, np, &prog("coverage"), &[], Mode::Plain, &[]);
    let env = [("PMTRACE_EXCLUDE", "time,probe,test,Comm_rank")];
    let traced = mpirun(&dir, np, &prog("coverage"), &[], Mode::Preload, &env);
    assert_transparent(&plain, &traced, np);
    let trace = Trace::open(&traced.trace).unwrap();
    let expected = traced.expected_counts(np);
    let hits = traced.expected_hits(np);
    let recorded = recorded_counts(&trace);
    // Of each function the groups name, how many calls stay in the trace:
    // none of those that move no message and complete nothing; all of the
    // probes that match a message (its id is needed); of the tests and
    // `MPI_Improbe`, those that completed or matched something, as the
    // program counted them.
    let kept = |r: usize, f: &str, want: u64| -> Option<u64> {
        let hit = || hits[r].get(f).copied().unwrap_or(0);
        match f {
            "MPI_Wtime" | "MPI_Wtick" | "MPI_Comm_rank" | "MPI_Probe" | "MPI_Iprobe" => Some(0),
            "MPI_Mprobe" => Some(want),
            "MPI_Improbe" | "MPI_Test" | "MPI_Testany" | "MPI_Testall" | "MPI_Testsome" => {
                Some(hit())
            }
            _ if f.starts_with("MPI_Test") || f.starts_with("MPI_Request_get_status") => Some(0),
            _ => None,
        }
    };
    let mut named = std::collections::BTreeSet::new();
    for (r, rank) in trace.ranks.iter().enumerate() {
        let excluded = &rank.trailer.as_ref().unwrap().excluded;
        for (f, &want) in &expected[r] {
            let got = recorded[r].get(f).copied().unwrap_or(0);
            let gone = excluded.get(f).copied().unwrap_or(0);
            let Some(keep) = kept(r, f, want) else {
                assert_eq!(got, want, "{what}: rank {r} {f}");
                assert_eq!(gone, 0, "{what}: rank {r} {f}");
                continue;
            };
            named.insert(f.as_str());
            assert!(
                keep <= want,
                "{what}: rank {r} {f}: {keep} hits of {want} calls"
            );
            assert_eq!(
                (got, gone),
                (keep, want - keep),
                "{what}: rank {r} {f}: (kept, left out)"
            );
        }
    }
    // The program calls a function of every kind above, and some of its
    // tests and probes both miss and hit.
    for f in [
        "MPI_Wtime",
        "MPI_Wtick",
        "MPI_Comm_rank",
        "MPI_Probe",
        "MPI_Iprobe",
        "MPI_Mprobe",
        "MPI_Improbe",
        "MPI_Test",
        "MPI_Testany",
        "MPI_Testall",
        "MPI_Testsome",
        "MPI_Test_cancelled",
        "MPI_Request_get_status",
    ] {
        assert!(named.contains(f), "{what}: coverage calls no {f}");
    }
    let hit_total: u64 = hits.iter().flat_map(|h| h.values()).sum();
    assert!(hit_total >= 4, "{what}: {hits:?}");
    let rep = report(&traced.trace);
    let total: u64 = trace
        .ranks
        .iter()
        .flat_map(|r| r.trailer.as_ref().unwrap().excluded.values())
        .sum();
    let reported: u64 = rep["excluded_calls"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert!(total > 0, "{what}");
    assert_eq!(reported, total, "{what}: {}", rep["excluded_calls"]);
    check_lamport_messages(&rep, what);
    // The run record names what was left out.
    let run = trace.ranks[0].header.run.as_ref().unwrap();
    let names = &run.config["PMTRACE_EXCLUDE"];
    for f in ["MPI_Wtime", "MPI_Iprobe", "MPI_Testsome", "MPI_Comm_rank"] {
        assert!(names.split(',').any(|n| n == f), "{what}: {names}");
    }
}

/// What `tests/progs/pmpicount.c` wrote for each rank: its lines, and the
/// calls it made of its own through `PMPI_` ("own" lines).
fn tool_counts(
    dir: &std::path::Path,
    np: u32,
) -> Vec<(String, std::collections::BTreeMap<String, u64>)> {
    (0..np)
        .map(|r| {
            let path = dir.join(format!("rank-{r}.txt"));
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let own = text
                .lines()
                .filter_map(|l| l.strip_prefix("own "))
                .map(|l| {
                    let (f, n) = l.split_once(' ').unwrap();
                    (f.to_string(), n.parse().unwrap())
                })
                .collect();
            (text, own)
        })
        .collect()
}

/// Issue 17, point 6: another PMPI tool (counting calls and bytes of
/// Init/Send/Recv/Isend/Irecv/Allreduce) preloaded before and after
/// pmtrace, and linked into the executable, sees exactly what it sees
/// alone; the program's output is unchanged; and pmtrace's trace holds
/// every call of the program, every message matched, every clock check
/// clean. The tool's own `PMPI_` calls are calls of the process and are
/// recorded too: all of them when the tool comes first, all but those made
/// inside a call pmtrace records at the outer level when it comes after.
///
/// The tool's build that finds its `PMPI_` functions with `dlsym(RTLD_NEXT)`
/// (as Darshan's does) behaves the same, before pmtrace and after it: the
/// C library would answer with the MPI library's, past pmtrace's
/// piggyback, and pmtrace's `dlsym` answers with pmtrace's (src/dl.rs).
#[test]
fn another_pmpi_tool_sees_every_call_and_pmtrace_keeps_a_complete_trace() {
    let np = 4;
    for mpi in Mpi::ALL {
        let dir = scratch(&format!("stacking-{}", mpi.tag()));
        let coverage = mpi.prog("coverage");
        let linked = mpi.prog("coverage_pmpicount");
        let run = |name: &str, prog: &std::path::Path, mode: Mode| {
            let out = dir.join(format!("counts-{name}"));
            let _ = std::fs::remove_dir_all(&out);
            std::fs::create_dir_all(&out).unwrap();
            let env = [("PMPICOUNT_DIR", out.to_str().unwrap())];
            let run = mpirun_on(mpi, &dir, np, prog, &[], mode, &env);
            assert_eq!(run.code, 0, "{mpi:?} {name}: {}", run.stderr);
            (run, tool_counts(&out, np))
        };
        let (alone, seen) = run("alone", &coverage, Mode::Tool(Stack::Alone));
        for (text, _) in &seen {
            for f in ["MPI_Init_thread 1 calls", "MPI_Send ", "MPI_Allreduce "] {
                assert!(text.contains(f), "{mpi:?}: the tool alone: {text}");
            }
        }
        let (dlsym_alone, dlsym_seen) =
            run("dlsym-alone", &coverage, Mode::DlsymTool(Stack::Alone));
        assert_eq!(dlsym_alone.stdout, alone.stdout, "{mpi:?}");
        assert_eq!(dlsym_seen, seen, "{mpi:?}: the dlsym build alone");
        for (name, prog, mode) in [
            ("before", &coverage, Mode::Tool(Stack::BeforePmtrace)),
            ("after", &coverage, Mode::Tool(Stack::AfterPmtrace)),
            ("linked", &linked, Mode::Preload),
            (
                "dlsym-before",
                &coverage,
                Mode::DlsymTool(Stack::BeforePmtrace),
            ),
            (
                "dlsym-after",
                &coverage,
                Mode::DlsymTool(Stack::AfterPmtrace),
            ),
        ] {
            let what = format!("{mpi:?}, the tool {name} pmtrace");
            let (traced, stacked) = run(name, prog, mode);
            assert_transparent(&alone, &traced, np);
            for r in 0..np as usize {
                assert_eq!(
                    stacked[r].0, seen[r].0,
                    "{what}: rank {r}: the tool's counts"
                );
            }
            let trace = Trace::open(&traced.trace).unwrap();
            let expected = traced.expected_counts(np);
            let recorded = recorded_counts(&trace);
            for r in 0..np as usize {
                let own = &stacked[r].1;
                let functions: std::collections::BTreeSet<&String> =
                    expected[r].keys().chain(recorded[r].keys()).collect();
                for f in functions {
                    let want = expected[r].get(f).copied().unwrap_or(0);
                    let extra = own.get(f).copied().unwrap_or(0);
                    let got = recorded[r].get(f).copied().unwrap_or(0);
                    // A tool that comes first reaches pmtrace only through
                    // its inner level: all its own calls are recorded.
                    // After pmtrace, those it makes inside a call recorded
                    // at the outer level are not.
                    if name.ends_with("after") {
                        assert!(
                            (want..=want + extra).contains(&got),
                            "{what}: rank {r} {f}: {got} recorded, the program made {want}, the tool {extra}"
                        );
                    } else {
                        assert_eq!(
                            got,
                            want + extra,
                            "{what}: rank {r} {f}: the program made {want}, the tool {extra}"
                        );
                    }
                }
            }
            let rep = report(&traced.trace);
            check_lamport_messages(&rep, &what);
        }
    }
}

/// Issue 17, point 5: Fortran programs with `use mpi` and `use mpi_f08`
/// (`MPI_IN_PLACE`, `MPI_STATUS(ES)_IGNORE`, `MPI_ANY_SOURCE`, a vector
/// type, `MPI_Waitall`) trace with exact call counts, every message
/// matched by id and every clock check clean, and print what they print
/// untraced. Open MPI's Fortran layers call `PMPI_` functions, MPICH's call
/// `MPI_` ones (and `PMPI_` ones for `mpi_f08` routines without a buffer):
/// pmtrace's two levels record each call once either way.
#[test]
fn fortran_programs_trace_exactly_under_both_mpis_at_np_2_to_8() {
    for mpi in [Mpi::OpenMpi, Mpi::Mpich] {
        for prog in ["fcover", "fcover08"] {
            for np in 2..=8 {
                check_on(mpi, "fortran", prog, np, &[], "lamport");
            }
        }
    }
}

/// Issue 17, point 5: one job of Fortran ranks (0 and 1) and C ranks
/// (2 and up) exchanging messages, launched as `mpirun -np 2 fcover : -np
/// N fmix`: the same exactness as a job of one language.
#[test]
fn a_job_of_fortran_and_c_ranks_traces_exactly() {
    for mpi in [Mpi::OpenMpi, Mpi::Mpich] {
        let dir = scratch(&format!("mixed-{}", mpi.tag()));
        let fortran = mpi.prog("fcover");
        let c = mpi.prog("fmix");
        let args = [":", "-np", "3", c.to_str().unwrap()];
        let np = 5;
        let plain = mpirun_on(mpi, &dir, 2, &fortran, &args, Mode::Plain, &[]);
        let traced = mpirun_on(mpi, &dir, 2, &fortran, &args, Mode::Preload, &[]);
        let what = format!("{mpi:?}: fcover and fmix");
        assert!(
            plain.stdout.contains("fcover: ok np=5"),
            "{what}: {}",
            plain.stdout
        );
        assert_transparent(&plain, &traced, np);
        let trace = Trace::open(&traced.trace).unwrap();
        assert_eq!(trace.ranks.len(), np as usize, "{what}");
        let expected = traced.expected_counts(np);
        let recorded = recorded_counts(&trace);
        for r in 0..np as usize {
            assert_eq!(recorded[r], expected[r], "{what}: rank {r}");
        }
        let rep = report(&traced.trace);
        check_lamport_messages(&rep, &what);
    }
}

/// Issue 18: a verb whose trace needs more memory than the process can
/// have says so in one line before reading (its census: headers, chunk
/// headers and trailers), with exit status 1; told to try anyway
/// (`PMTRACE_MEMORY_CHECK=off`), it runs out of memory and says that in
/// one line, exit status 1: no abort, no backtrace. A trace of 3 M calls
/// (an `MPI_Iprobe` takes 21 bytes in memory) under an address-space
/// limit of 50 MB.
#[test]
fn a_trace_too_big_for_the_memory_is_one_line_and_exit_status_1() {
    use std::os::unix::process::CommandExt;
    let dir = scratch("oom");
    let run = mpirun(
        &dir,
        2,
        &prog("manycalls"),
        &["1500000"],
        Mode::Preload,
        &[("EXPECT_COUNTS_DIR", "")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let limited = |check: &str| {
        let mut cmd = std::process::Command::new(cli());
        cmd.args(["report", run.trace.to_str().unwrap()])
            .env("PMTRACE_MEMORY_CHECK", check);
        // SAFETY: only setrlimit between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: 50 << 20,
                    rlim_max: 50 << 20,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{err}");
        let lines: Vec<String> = err
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(String::from)
            .collect();
        assert_eq!(lines.len(), 1, "{err}");
        lines[0].clone()
    };
    let refused = limited("on");
    assert!(
        refused.starts_with("pmtrace: error: this trace holds 3.0 M events over 2 ranks; `pmtrace report` needs about"),
        "{refused}"
    );
    let ran_out = limited("off");
    assert!(
        ran_out.starts_with("pmtrace: error: out of memory: "),
        "{ran_out}"
    );
    // Without the limit the same trace reads.
    assert!(report(&run.trace)["events"].as_u64().unwrap() >= 3_000_000);
}

/// Issue 18, point 2: a verb whose trace needs more memory than it may use
/// works out of core (its large tables in files on disk), says so in one
/// note line, and gives exactly what it gives in memory; where it may not
/// (`PMTRACE_SPILL=off`, a spill directory in memory), one line says what
/// it needs, exit status 1. The limit is set twice: with `--memory`, and
/// by a memory cgroup of 64 MiB that the kernel enforces (the test fails
/// where none can be made), for a trace whose report takes about 150 MiB
/// in memory; each time the CLI's own account (`PMTRACE_TIMES`) shows that
/// more than the limit went to spill files.
#[test]
fn a_trace_bigger_than_its_memory_limit_is_worked_on_out_of_core() {
    let dir = scratch("out_of_core");
    let run = mpirun(&dir, 4, &prog("halo2d"), &["20000"], Mode::Preload, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let t = run.trace.to_str().unwrap();
    let in_memory = pmtrace(&["report", t, "--json"]);
    assert!(in_memory.status.success());
    assert!(in_memory.stderr.is_empty());
    let perfetto = |extra: &[&str], out: &str| {
        let path = dir.join(out);
        let mut args = vec!["export", t, "--format", "perfetto", "-o"];
        args.push(path.to_str().unwrap());
        args.extend(extra);
        let o = pmtrace(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        (
            std::fs::read(&path).unwrap(),
            String::from_utf8(o.stderr).unwrap(),
        )
    };
    let (reference, _) = perfetto(&[], "in-memory.pftrace");

    // The note is one line, first (an export goes on to say what it wrote).
    let noted = |stderr: &str, verb: &str| {
        let lines: Vec<&str> = stderr.lines().collect();
        let said = if verb == "report" { 1 } else { 3 };
        assert_eq!(lines.len(), said, "{stderr}");
        assert!(
            lines[0].starts_with(&format!("pmtrace: note: `pmtrace {verb}` needs about "))
                && lines[0].contains("working out of core"),
            "{stderr}"
        );
    };
    // How much went to spill files, from the CLI's own account
    // (`PMTRACE_TIMES`); the other lines of its standard error.
    let spilled_mib = |stderr: &str| -> (u64, String) {
        let (timed, rest): (Vec<&str>, Vec<&str>) = stderr
            .lines()
            .partition(|l| l.starts_with("pmtrace: time: "));
        let mib = timed
            .iter()
            .find_map(|l| l.strip_prefix("pmtrace: time: out of core, at most "))
            .and_then(|l| l.strip_suffix(" MiB in spill files"))
            .unwrap_or_else(|| panic!("nothing was spilled: {stderr}"))
            .parse()
            .unwrap();
        (mib, rest.join("\n"))
    };
    let out = Command::new(cli())
        .args(["report", t, "--json", "--memory", "64M"])
        .env("PMTRACE_TIMES", "1")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        out.stdout, in_memory.stdout,
        "out of core, the report is the same"
    );
    let (mib, rest) = spilled_mib(&String::from_utf8_lossy(&out.stderr));
    assert!(
        mib >= 64,
        "at most {mib} MiB spilled, of a report that needs 150"
    );
    noted(&rest, "report");
    let (spilled, stderr) = perfetto(&["--memory", "64M"], "spilled.pftrace");
    noted(&stderr, "export");
    assert!(
        spilled == reference,
        "out of core, the Perfetto export is the same"
    );

    let refused = |out: Output, why: &str| {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("pmtrace: error: this trace holds 0.8 M events over 4 ranks; `pmtrace report` needs about")
                && err.contains(why),
            "{err}"
        );
        assert!(out.stdout.is_empty());
    };
    let mut cmd = Command::new(cli());
    cmd.args(["report", t, "--memory", "64M"])
        .env("PMTRACE_SPILL", "off");
    refused(
        cmd.output().unwrap(),
        "PMTRACE_SPILL=off keeps it in memory",
    );
    assert!(
        is_tmpfs(Path::new("/dev/shm")),
        "the refusal of a spill directory in memory is tried on /dev/shm, which is no tmpfs here"
    );
    let mut cmd = Command::new(cli());
    cmd.args(["report", t, "--memory", "64M"])
        .env("PMTRACE_SPILL_DIR", "/dev/shm");
    refused(cmd.output().unwrap(), "is in memory (tmpfs)");

    // Under a limit the kernel holds it to (CI runs as root, where a
    // memory cgroup can be made).
    let cgroup = MemoryCgroup::new("pmtrace-out-of-core", 64 << 20)
        .expect("a memory cgroup of 64 MiB (root and a writable memory hierarchy)");
    let out = cgroup
        .command(&["report", t, "--json"])
        .env("PMTRACE_TIMES", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let (mib, rest) = spilled_mib(&err);
    assert!(mib >= 64, "at most {mib} MiB spilled under the cgroup");
    noted(&rest, "report");
    assert_eq!(
        out.stdout, in_memory.stdout,
        "under the cgroup, the report is the same"
    );
    let peak = cgroup
        .peak()
        .expect("the cgroup's peak (memory.peak or memory.max_usage_in_bytes)");
    assert!(peak <= 64 << 20, "{peak}");
    let out = cgroup
        .command(&["report", t])
        .env("PMTRACE_SPILL", "off")
        .output()
        .unwrap();
    refused(out, "PMTRACE_SPILL=off keeps it in memory");
}

/// Issue 19, point 3 (and the late broadcast): wait states of a program with a known delay (one
/// rank sleeps 200 ms before the call the others wait in, three rounds:
/// 600 ms): the expected kind on each expected rank within 10%, on
/// synchronized time, and charged to the late rank and its call.
#[test]
fn wait_states_show_the_injected_delay_on_the_expected_ranks() {
    let cases: [(&str, &[u64], &str, u64, &str); 5] = [
        ("late_sender", &[0], "late_sender", 1, "MPI_Send"),
        ("late_receiver", &[0], "late_receiver", 1, "MPI_Recv"),
        ("barrier", &[0, 1, 2], "wait_at_barrier", 3, "MPI_Barrier"),
        ("nxn", &[0, 2, 3], "wait_at_nxn", 1, "MPI_Allreduce"),
        ("bcast", &[1, 2, 3], "late_broadcast", 0, "MPI_Bcast"),
    ];
    let injected = 600e6;
    for (mode, waiters, kind, late, call) in cases {
        let dir = scratch(&format!("waits-{mode}"));
        let run = mpirun(&dir, 4, &prog("waits"), &[mode], Mode::Preload, &[]);
        assert_eq!(run.code, 0, "{mode}: {}", run.stderr);
        assert!(
            run.stdout.contains(&format!("waits: ok {mode} np=4")),
            "{}",
            run.stdout
        );
        let synced = pmtrace(&["sync", run.trace.to_str().unwrap()]);
        assert!(synced.status.success(), "{mode}");
        let ws = report(&run.trace)["wait_states"].clone();
        assert_eq!(ws["time_base"], "synchronized", "{mode}");
        let waited = |rank: u64| -> f64 {
            ws["by_rank"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["rank"] == rank && r["kind"] == kind)
                .map(|r| r["ns"].as_f64().unwrap())
                .sum()
        };
        for &w in waiters {
            let ns = waited(w);
            assert!(
                (ns - injected).abs() <= 0.1 * injected,
                "{mode}: rank {w} waited {ns} ns in {kind}, not about {injected}"
            );
        }
        assert!(
            waited(late) < 0.01 * injected,
            "{mode}: the late rank waited {}",
            waited(late)
        );
        let cause = ws["causes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["kind"] == kind)
            .max_by(|a, b| {
                a["ns"]
                    .as_f64()
                    .unwrap()
                    .total_cmp(&b["ns"].as_f64().unwrap())
            })
            .unwrap_or_else(|| panic!("{mode}: no cause of {kind}"));
        assert_eq!(
            (&cause["rank"], &cause["function"]),
            (&late.into(), &call.into()),
            "{mode}"
        );
        let caused = cause["ns"].as_f64().unwrap();
        let expected = injected * waiters.len() as f64;
        assert!(
            (caused - expected).abs() <= 0.1 * expected,
            "{mode}: caused {caused}"
        );
        // The critical path runs through the late rank's work. Its window
        // ends where the first rank enters MPI_Finalize: in the
        // point-to-point modes ranks 2 and 3 do before the third round, so
        // two of the three delays are in it.
        let cp = report(&run.trace)["critical_path"].clone();
        let length = cp["length_ns"].as_f64().unwrap();
        let top = &cp["by_rank"][0];
        assert_eq!(top["rank"], late, "{mode}: {cp}");
        let share = top["share"].as_f64().unwrap();
        let in_window = if waiters.len() == 1 { 400e6 } else { injected };
        let injected_share = in_window / length;
        assert!(
            (share - injected_share).abs() <= 0.1 * injected_share,
            "{mode}: the late rank holds {share} of the path, {injected_share} injected"
        );
        assert_eq!(cp["by_activity"][0]["name"], "computation", "{mode}");
        let verb = pmtrace(&["critical-path", run.trace.to_str().unwrap(), "--json"]);
        assert!(verb.status.success(), "{mode}");
        let mut alone: serde_json::Value = serde_json::from_slice(&verb.stdout).unwrap();
        // The verb adds the weighted path, which follows the late rank too.
        let weighted = alone
            .as_object_mut()
            .and_then(|o| {
                o.remove("differences");
                o.remove("weighted")
            })
            .expect("the weighted path");
        assert_eq!(
            alone, cp,
            "{mode}: `pmtrace critical-path` gives the report's path"
        );
        assert_eq!(weighted["by_rank"][0]["rank"], late, "{mode}: {weighted}");
        assert_eq!(weighted["dropped_edges"], 0, "{mode}");
    }
}

fn is_tmpfs(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs fills the struct it is given, for a NUL-terminated path.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statfs(c.as_ptr(), &mut fs) }) == 0 && fs.f_type as i64 == 0x0102_1994
}

/// A memory cgroup (v1 or v2) below this process's own, with a limit, if
/// this machine lets a test make one (root, a writable hierarchy, and in
/// v2 the memory controller delegated); removed when dropped.
struct MemoryCgroup {
    dir: PathBuf,
    v2: bool,
}

impl MemoryCgroup {
    fn new(name: &str, limit: u64) -> Option<MemoryCgroup> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        for line in own.lines() {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let (base, v2) = if controllers.split(',').any(|c| c == "memory") {
                (format!("/sys/fs/cgroup/memory{path}"), false)
            } else if controllers.is_empty() {
                (format!("/sys/fs/cgroup{path}"), true)
            } else {
                continue;
            };
            let dir = PathBuf::from(base).join(name);
            let _ = std::fs::remove_dir(&dir);
            if std::fs::create_dir(&dir).is_err() {
                continue;
            }
            let file = if v2 {
                "memory.max"
            } else {
                "memory.limit_in_bytes"
            };
            if std::fs::write(dir.join(file), limit.to_string()).is_ok() {
                return Some(MemoryCgroup { dir, v2 });
            }
            let _ = std::fs::remove_dir(&dir);
        }
        None
    }

    /// The CLI with `args`, started inside the cgroup.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"echo $$ > "$0/cgroup.procs" && exec "$@""#)
            .arg(&self.dir)
            .arg(cli())
            .args(args);
        cmd
    }

    /// The most memory the cgroup held, where the kernel tells.
    fn peak(&self) -> Option<u64> {
        let file = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// `pmtrace races DIR --json` with the given clocks ("" for the default).
fn races_of(trace: &Path, clocks: &str) -> serde_json::Value {
    let dir = trace.to_str().unwrap();
    let mut args = vec!["races", dir, "--json"];
    if !clocks.is_empty() {
        args.extend(["--clocks", clocks]);
    }
    let out = pmtrace(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Each race as (rank, function, matched (source, id), alternatives).
type RaceSet = Vec<(u64, String, (u64, u64), Vec<(u64, u64)>)>;

fn race_set(races: &serde_json::Value) -> RaceSet {
    let msg = |m: &serde_json::Value| {
        (
            m["source"].as_u64().unwrap(),
            m["message_id"].as_u64().unwrap(),
        )
    };
    races["races"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["rank"].as_u64().unwrap(),
                r["call"]["function"].as_str().unwrap().to_owned(),
                msg(&r["matched"]),
                r["alternatives"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(msg)
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn message_races_are_the_sends_concurrent_with_each_wildcard_receive() {
    let np3 = |mode: &str, args: &[&str], env: &[(&str, &str)]| {
        let dir = scratch(&format!("races-{mode}"));
        let mut a = vec![mode];
        a.extend(args);
        let run = mpirun(
            &dir,
            if mode == "master" { 5 } else { 3 },
            &prog("races"),
            &a,
            Mode::Preload,
            env,
        );
        assert_eq!(run.code, 0, "{mode}: {}", run.stderr);
        run
    };
    let both = |trace: &Path| -> (serde_json::Value, serde_json::Value) {
        let l = races_of(trace, "lamport");
        let v = races_of(trace, "vector");
        assert_eq!(
            (l["mode"].as_str(), l["exact"].as_bool()),
            (Some("lamport"), Some(false))
        );
        assert_eq!(
            (v["mode"].as_str(), v["exact"].as_bool()),
            (Some("vector"), Some(true))
        );
        (l, v)
    };
    let counts = |r: &serde_json::Value| {
        (
            r["wildcard_receives"].as_u64().unwrap(),
            r["racy_receives"].as_u64().unwrap(),
            r["alternatives"].as_u64().unwrap(),
        )
    };

    // The crooked barrier: the Irecv took one of the two messages (id 1 of
    // each sender) and could have taken the other; the Recv after the
    // barrier had no other choice left.
    let run = np3("crooked", &[], &[]);
    let took_22 = run.stdout.contains("irecv got 22");
    let (first, other) = if took_22 { (0, 2) } else { (2, 0) };
    for r in [both(&run.trace).0, both(&run.trace).1] {
        assert_eq!(counts(&r), (2, 1, 1), "{r}");
        assert_eq!(
            race_set(&r),
            vec![(1, "MPI_Irecv".to_owned(), (first, 1), vec![(other, 1)])]
        );
    }

    // Master/worker: each result could have been any worker's whose task
    // was out when it came; the master prints that answer itself.
    let run = np3("master", &["24"], &[]);
    let expected: RaceSet = run
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("expect "))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let alts: Vec<(u64, u64)> = f[2..]
                .iter()
                .map(|a| {
                    let (w, n) = a.split_once(':').unwrap();
                    (w.parse().unwrap(), n.parse().unwrap())
                })
                .collect();
            let source: u64 = f[1].parse().unwrap();
            // The worker's result number is its message id: workers send nothing else.
            let took = run
                .stdout
                .lines()
                .filter_map(|l| l.strip_prefix("expect "))
                .take_while(|x| *x != l)
                .filter(|x| x.split_whitespace().nth(1) == Some(f[1]))
                .count() as u64
                + 1;
            (!alts.is_empty()).then(|| (0, "MPI_Recv".to_owned(), (source, took), alts))
        })
        .collect();
    assert!(expected.len() >= 20, "{}", run.stdout);
    let (l, v) = both(&run.trace);
    for r in [&l, &v] {
        assert_eq!(r["wildcard_receives"], 24);
        assert_eq!(race_set(r), expected, "{}", r["mode"]);
    }

    // Wildcard receives in a causal chain, and a program without any.
    let run = np3("ordered", &[], &[]);
    for r in [both(&run.trace).0, both(&run.trace).1] {
        assert_eq!(counts(&r), (20, 0, 0));
    }
    let dir = scratch("races-deterministic");
    let run = mpirun(
        &dir,
        4,
        &prog("races"),
        &["deterministic"],
        Mode::Preload,
        &[],
    );
    assert_eq!(run.code, 0);
    for r in [both(&run.trace).0, both(&run.trace).1] {
        assert_eq!(counts(&r), (0, 0, 0));
    }

    // Fig. 5.3: rank 0's message (its first) could have matched rank 2's
    // wildcard receive, which took rank 1's second. Lamport clocks miss it,
    // vector clocks find it; a trace recorded with vector clocks uses them.
    let run = np3("fig53", &[], &[]);
    assert!(
        run.stdout.contains("fig53: first from 1, then from 0"),
        "{}",
        run.stdout
    );
    let (l, v) = both(&run.trace);
    assert_eq!(counts(&l), (2, 0, 0));
    assert_eq!(counts(&v), (2, 1, 1));
    assert_eq!(
        race_set(&v),
        vec![(2, "MPI_Recv".to_owned(), (1, 2), vec![(0, 1)])]
    );
    let run = np3("fig53", &[], &[("PMTRACE_CLOCKS", "vector")]);
    let r = races_of(&run.trace, "");
    assert_eq!(r["mode"], "vector");
    assert_eq!(race_set(&r), race_set(&v));

    // Wildcard probes: the first Probe and the first Mprobe chose between
    // ranks 1 and 2 (tag 1: each one's first message; tag 2: second).
    let run = np3("probe", &[], &[]);
    let (l, v) = both(&run.trace);
    for r in [&l, &v] {
        assert_eq!(counts(r), (4, 2, 2), "{r}");
        let set = race_set(r);
        assert_eq!(set.len(), 2);
        for ((_, function, (source, id), alts), (want_f, want_id)) in
            set.iter().zip([("MPI_Probe", 1), ("MPI_Mprobe", 2)])
        {
            assert_eq!((function.as_str(), *id), (want_f, want_id));
            assert_eq!(alts, &vec![(3 - source, want_id)]);
        }
    }
    let text = pmtrace(&["races", run.trace.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("rank 0 MPI_Probe (communicator 0, tag 1): 1 of 2 receives racy"),
        "{text}"
    );
    assert!(
        text.contains("a test must see each racy receive take a message from each of {1, 2}"),
        "{text}"
    );
}

#[test]
fn phases_and_pauses_show_in_the_report_and_on_the_critical_path() {
    let dir = scratch("phases");
    let plain = mpirun(&dir, 4, &prog("phases"), &["60"], Mode::Plain, &[]);
    let run = mpirun(&dir, 4, &prog("phases"), &["60"], Mode::Preload, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, plain.stdout, "the phase calls change nothing");
    assert!(run.stdout.contains("phases: ok np=4"), "{}", run.stdout);
    let synced = pmtrace(&["sync", run.trace.to_str().unwrap()]);
    assert!(synced.status.success());
    let rep = report(&run.trace);
    // Exact counts: the pause left out the 4000 MPI_Comm_rank calls but
    // kept its MPI_Allreduce (it moves data): 3 rounds + 1 per rank.
    assert_eq!(
        rep["paused_calls"],
        serde_json::json!({"MPI_Comm_rank": 4000})
    );
    assert_eq!(rep["functions"]["MPI_Comm_rank"]["calls"], 4);
    assert_eq!(rep["functions"]["MPI_Allreduce"]["calls"], 16);
    assert_eq!(rep["functions"]["pmtrace_phase_begin"]["calls"], 16);
    assert_eq!(rep["functions"]["pmtrace_phase_end"]["calls"], 16);
    assert_eq!(rep["messages"]["unmatched"], 0);
    let phases = rep["phases"].as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["Pcontrol 2", "output", "setup", "solve", "write"]);
    assert!(phases.iter().all(|p| p["spans"] == 4), "{phases:?}");
    let solve = phases.iter().find(|p| p["name"] == "solve").unwrap();
    let comp = |rank: u64| -> f64 {
        solve["per_rank"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["rank"] == rank)
            .unwrap()["computation_ns"]
            .as_f64()
            .unwrap()
    };
    // Rank 2 computes 3 x 60 ms in "solve", the others 3 x 20 ms.
    assert!(
        (comp(2) - 180e6).abs() < 0.1 * 180e6,
        "rank 2 computed {}",
        comp(2)
    );
    for r in [0, 1, 3] {
        assert!(comp(r) < 0.5 * comp(2), "rank {r} computed {}", comp(r));
    }
    assert!(solve["load_imbalance"].as_f64().unwrap() > 0.7, "{solve}");
    assert_eq!(solve["functions"][0]["name"], "MPI_Allreduce");
    // The critical path runs through rank 2's "solve": its share there is
    // the injected computation's share of the path, within 10%.
    let cp = &rep["critical_path"];
    assert_eq!(cp["by_rank"][0]["rank"], 2, "{cp}");
    let length = cp["length_ns"].as_f64().unwrap();
    let on_solve = cp["by_phase"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "solve")
        .expect("solve on the path");
    let share = on_solve["share"].as_f64().unwrap();
    let injected = comp(2) / length;
    assert!(
        (share - injected).abs() <= 0.1 * injected,
        "solve holds {share} of the path, {injected} injected"
    );
    assert_eq!(cp["by_phase"][0]["name"], "solve");
    // Every export shows the phases: Perfetto slices on a track per
    // thread, Chrome complete events (each of the 6 names on 4 ranks,
    // the pause included).
    let names = ["setup", "solve", "paused", "Pcontrol 2", "output", "write"];
    let want: serde_json::Map<String, serde_json::Value> =
        names.iter().map(|n| (n.to_string(), 4.into())).collect();
    let pf = run.trace.with_extension("pftrace");
    let out = pmtrace(&[
        "export",
        run.trace.to_str().unwrap(),
        "--format",
        "perfetto",
        "-o",
        pf.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let c = exports::python_check("perfetto_check.py", &pf);
    assert_eq!(c["phases"], serde_json::Value::Object(want.clone()), "{c}");
    assert_eq!(c["unbalanced_tracks"], 0, "{c}");
    let cj = run.trace.with_extension("json");
    let out = pmtrace(&[
        "export",
        run.trace.to_str().unwrap(),
        "--format",
        "chrome",
        "-o",
        cj.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&cj).unwrap()).unwrap();
    let mut seen = serde_json::Map::new();
    for e in v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "phase")
    {
        let n = e["name"].as_str().unwrap().to_string();
        let k = seen.get(&n).and_then(|x| x.as_u64()).unwrap_or(0) + 1;
        seen.insert(n, k.into());
    }
    assert_eq!(
        serde_json::Value::Object(seen),
        serde_json::Value::Object(want)
    );
    // OTF2: each phase is a region, entered and left once per rank,
    // properly nested (otf2-print reads the archive); the pause and the
    // Pcontrol phase cross no user phase here, so they are regions too.
    let archive = run.trace.with_extension("otf2");
    let out = pmtrace(&[
        "export",
        run.trace.to_str().unwrap(),
        "--format",
        "otf2",
        "-o",
        archive.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let printed = std::process::Command::new("otf2-print")
        .arg(archive.join("traces.otf2"))
        .output()
        .expect("otf2-print");
    assert!(printed.status.success());
    let text = String::from_utf8_lossy(&printed.stdout);
    for phase in names {
        for ev in ["ENTER", "LEAVE"] {
            let region = format!("Region: \"{phase}\" <");
            let n = text
                .lines()
                .filter(|l| l.starts_with(ev) && l.contains(&region))
                .count();
            assert_eq!(n, 4, "{ev} {phase}");
        }
    }
    // The weighted path splits by phase too.
    let verb = pmtrace(&["critical-path", run.trace.to_str().unwrap(), "--json"]);
    let alone: serde_json::Value = serde_json::from_slice(&verb.stdout).unwrap();
    assert_eq!(alone["weighted"]["by_phase"][0]["name"], "solve", "{alone}");
}

#[test]
fn a_wait_passed_on_by_a_rank_that_waited_itself_is_charged_to_its_root() {
    let dir = scratch("waits-chain");
    let run = mpirun(&dir, 4, &prog("waits"), &["chain"], Mode::Preload, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(pmtrace(&["sync", run.trace.to_str().unwrap()])
        .status
        .success());
    let ws = report(&run.trace)["wait_states"].clone();
    let near =
        |ns: &serde_json::Value, want: f64| (ns.as_f64().unwrap() - want).abs() <= 0.1 * want;
    // Directly: rank 1 waited for rank 0's send, rank 2 for rank 1's (3 x 200 ms each).
    let direct: Vec<(u64, &str)> = ws["causes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "late_sender")
        .map(|c| (c["rank"].as_u64().unwrap(), c["function"].as_str().unwrap()))
        .collect();
    assert!(
        direct.contains(&(0, "MPI_Send")) && direct.contains(&(1, "MPI_Send")),
        "{ws}"
    );
    // At the root: rank 0's 200 ms before each send caused all of it:
    // rank 1's 3 x 200 ms, rank 2's 3 x 200 ms (through rank 1's waits),
    // and rank 3's 2 x 200 ms at the next rounds' barriers (through rank 2's
    // and rank 1's): 1.6 s.
    let root = &ws["root_causes"][0];
    assert_eq!(
        (&root["rank"], &root["function"]),
        (&0.into(), &"MPI_Send".into()),
        "{ws}"
    );
    assert!(near(&root["ns"], 1600e6), "{root}");
    assert!(root["indirect"].as_u64().unwrap() >= 5, "{root}");
    assert!(near(&root["delay_ns"], 600e6), "{root}");
    // Charged directly, rank 1's sends hold rank 2's waits.
    let by_rank1: f64 = ws["causes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["rank"] == 1 && c["kind"] == "late_sender")
        .map(|c| c["ns"].as_f64().unwrap())
        .sum();
    assert!((by_rank1 - 600e6).abs() <= 60e6, "{by_rank1}");
}

#[test]
fn fortran_marks_phases_through_the_same_api() {
    let dir = scratch("fphase");
    let run = mpirun(&dir, 2, &prog("fphase"), &[], Mode::Linked, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("fphase: sum=3"), "{}", run.stdout);
    let rep = report(&run.trace);
    let names: Vec<(&str, u64)> = rep["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["spans"].as_u64().unwrap()))
        .collect();
    // The name's trailing blanks are dropped.
    assert_eq!(names, [("reduce step", 2), ("solve", 2)]);
    let reduce = rep["phases"][0]["functions"][0]["name"].clone();
    assert_eq!(reduce, "MPI_Allreduce");
}

/// What `repeats` (tests/progs) records on `rank`, one line per call as
/// `export --format text` writes it, times and definitions left out;
/// `any` is how the MPI spells MPI_ANY_SOURCE.
fn repeats_expected(rank: i32, any: i32) -> Vec<String> {
    let o = 1 - rank;
    let misses = |src: i32, tag: i32, comm: u32, n: usize| {
        let line = format!(
            "MPI_Iprobe src={src} tag={tag} comm={comm} status=[src={src},tag={tag},bytes=0,empty]"
        );
        vec![line; n]
    };
    let mut e: Vec<String> = ["MPI_Init", "MPI_Comm_rank", "MPI_Comm_size"]
        .map(String::from)
        .to_vec();
    e.extend(misses(o, 7, 0, 3));
    e.extend(misses(o, 8, 0, 2));
    e.extend(misses(any, 8, 0, 2));
    e.extend(misses(o, 300000, 0, 2));
    e.push("MPI_Comm_dup parent=0 new=2".into());
    e.extend(misses(o, 7, 2, 3));
    e.push("MPI_Comm_free comm=2".into());
    e.push("MPI_Comm_dup parent=0 new=3".into());
    e.extend(misses(o, 7, 3, 3));
    e.extend(misses(o, 7, 0, 2));
    let mut seq = [0u64; 4];
    let mut coll =
        |e: &mut Vec<String>, name: &str, comm: usize, root: Option<i32>, sent: u64, recvd: u64| {
            let root = root.map(|r| format!(" root={r}")).unwrap_or_default();
            e.push(format!(
                "{name} comm={comm}{root} sent={sent} recvd={recvd} seq={}",
                seq[comm]
            ));
            seq[comm] += 1;
        };
    for (comm, n, bytes) in [
        (0, 3, 4),
        (0, 2, 8),
        (0, 2, 16),
        (3, 2, 8),
        (0, 1, 8),
        (3, 1, 8),
    ] {
        for _ in 0..n {
            coll(&mut e, "MPI_Allreduce", comm, None, bytes, bytes);
        }
    }
    let bcast = |root: i32, bytes: u64| if rank == root { (bytes, 0) } else { (0, bytes) };
    for root in [0, 1] {
        for _ in 0..2 {
            let (s, r) = bcast(root, 12);
            coll(&mut e, "MPI_Bcast", 0, Some(root), s, r);
        }
    }
    for _ in 0..2 {
        let (s, r) = if rank == 1 { (16, 16) } else { (16, 0) };
        coll(&mut e, "MPI_Reduce", 0, Some(1), s, r);
    }
    for _ in 0..3 {
        coll(&mut e, "MPI_Barrier", 0, None, 0, 0);
    }
    for name in ["MPI_Scan", "MPI_Exscan"] {
        for _ in 0..2 {
            coll(&mut e, name, 0, None, 4, 4);
        }
    }
    for bytes in [12, 20] {
        e.push("MPI_Type_contiguous".into());
        e.push("MPI_Type_commit".into());
        for _ in 0..2 {
            let (s, r) = bcast(0, bytes);
            coll(&mut e, "MPI_Bcast", 0, Some(0), s, r);
        }
        e.push("MPI_Type_free".into());
    }
    // Nonblocking sends, each received back and waited for; operation
    // ids count from 1 (no call before took one).
    let mut op = 0;
    let mut sends = |e: &mut Vec<String>, name: &str, tag: i32, bytes: u64, comm: u32, n: usize| {
        for _ in 0..n {
            op += 1;
            e.push(format!(
                "{name} peer={o} tag={tag} comm={comm} bytes={bytes} op=0.{op}"
            ));
            e.push(format!(
                "MPI_Recv src={o} tag={tag} comm={comm} posted={bytes} status=[src={o},tag={tag},bytes={bytes}]"
            ));
            e.push(format!("MPI_Wait done=0.{op}:[none]"));
        }
    };
    sends(&mut e, "MPI_Isend", 5, 4, 0, 3);
    sends(&mut e, "MPI_Isend", 6, 4, 0, 2);
    sends(&mut e, "MPI_Isend", 6, 8, 0, 2);
    // two shorts
    sends(&mut e, "MPI_Isend", 6, 4, 0, 2);
    sends(&mut e, "MPI_Isend", 6, 4, 3, 2);
    e.push("MPI_Comm_free comm=3".into());
    e.push("MPI_Comm_dup parent=0 new=4".into());
    sends(&mut e, "MPI_Isend", 6, 4, 4, 2);
    sends(&mut e, "MPI_Issend", 6, 4, 4, 2);
    for _ in 0..2 {
        sends(&mut e, "MPI_Isend", 30000, 4, 4, 1);
        sends(&mut e, "MPI_Isend", 70, 4, 4, 1);
        sends(&mut e, "MPI_Isend", 6, 4, 4, 1);
    }
    // Nonblocking receives, each matched by a blocking send and waited
    // for: its status is the posted one, so nothing of it is written out.
    for (tag, bytes, comm, n) in [
        (9, 4, 4, 3),
        (9, 12, 4, 2),
        // three shorts
        (9, 6, 4, 2),
        (10, 6, 4, 2),
        (30000, 6, 4, 1),
        (10, 6, 4, 1),
        (30000, 6, 4, 1),
        (10, 6, 4, 1),
        (10, 6, 0, 2),
    ] {
        for _ in 0..n {
            op += 1;
            e.push(format!(
                "MPI_Irecv src={o} tag={tag} comm={comm} posted={bytes} op=0.{op}"
            ));
            e.push(format!(
                "MPI_Send peer={o} tag={tag} comm={comm} bytes={bytes}"
            ));
            e.push(format!("MPI_Wait done=0.{op}:[]"));
        }
    }
    e.push("MPI_Comm_free comm=4".into());
    e.push("MPI_Finalize".into());
    e
}

/// Calls that repeat the one before are recorded from what the runtime
/// kept of it (a probe that finds nothing, a blocking collective, a
/// nonblocking send): each
/// record still carries exactly its own call's fields, when the source,
/// tag, communicator (one freed and made again under a reused handle),
/// count, datatype (one freed and made again) or root change.
#[test]
fn repeated_calls_record_exactly_their_own_fields() {
    for (mpi, any) in [(Mpi::OpenMpi, -1), (Mpi::Mpich, -2)] {
        let run = check_on(mpi, "repeats", "repeats", 2, &[], "lamport");
        assert!(run.stdout.contains("repeats: ok"), "{}", run.stdout);
        let text = run.trace.with_extension("txt");
        let out = pmtrace(&[
            "export",
            run.trace.to_str().unwrap(),
            "--format",
            "text",
            "-o",
            text.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(&text).unwrap();
        for rank in 0..2 {
            let got: Vec<String> = text
                .lines()
                .filter(|l| l.starts_with(&format!("r{rank} ")))
                .map(|l| l.splitn(5, ' ').nth(4).unwrap_or("").to_string())
                .filter(|l| !l.starts_with("Def"))
                .collect();
            assert_eq!(got, repeats_expected(rank, any), "{mpi:?} rank {rank}");
        }
    }
}

/// Issue 40's hot paths (a probe that finds nothing; an 8 B Isend, the
/// Recv of it and the Wait of the send, to self; an 8 B Allreduce) call
/// no malloc or free of pmtrace's own, under each MPI interface: counted
/// by a library preloaded ahead of pmtrace (tests/progs/alloccount.c)
/// in the window mpibench opens around its measured loop. The same
/// library counts pmtrace's allocations outside the window, which shows
/// that it sees them.
#[test]
fn the_hot_paths_allocate_nothing() {
    let counter = prog("liballoccount.so");
    // The last case fills a 64 KiB buffer every few thousand calls, so
    // that hundreds of buffers are handed to the writer inside the window.
    let cases = [
        ("iprobe", "0.2", None),
        ("selfs", "0.2", None),
        ("allreduce", "0.2", None),
        ("selfs", "1", Some("64K")),
    ];
    for mpi in [Mpi::OpenMpi, Mpi::Mpich, Mpi::Abi] {
        let bench = mpi.prog("mpibench");
        for (mode, scale, buffer) in cases {
            let what = format!("{mode} {scale} under {mpi:?}, buffers {buffer:?}");
            let dir = scratch(&format!("alloc-{}-{mode}-{scale}", mpi.tag()));
            let counts = dir.join("counts");
            let trace = dir.join("trace");
            let mut cmd = Command::new(&bench);
            cmd.args([mode, scale])
                .envs(mpi.env())
                .env(
                    "LD_PRELOAD",
                    format!("{} {}", counter.display(), lib().display()),
                )
                .env("PMTRACE_DIR", &trace)
                .env("ALLOCCOUNT_OUT", &counts)
                .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
            if let Some(size) = buffer {
                cmd.env("PMTRACE_BUFFER_SIZE", size);
            }
            let out = cmd.output().expect("mpibench");
            assert!(out.status.success(), "{what}: {out:?}");
            let text = std::fs::read_to_string(&counts).unwrap();
            let line = text
                .lines()
                .find(|l| l.starts_with("mpibench "))
                .unwrap_or_else(|| panic!("{what}: no count from mpibench: {text}"));
            let field = |name: &str| -> u64 {
                line.split(' ')
                    .find_map(|f| f.strip_prefix(name))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{what}: {line}"))
            };
            assert!(field("main=") > 0, "{what}: the counter saw none: {line}");
            assert_eq!(
                field("window="),
                0,
                "{what}: {}",
                &line[..line.len().min(200)]
            );
            if buffer.is_some() {
                // At least 40 buffers of 64 KiB were handed off (the queue of
                // the unbounded channel allocated every 31st).
                let report = pmtrace(&["report", trace.to_str().unwrap(), "--json"]);
                let json: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
                let bytes = json["bytes_total"].as_u64().unwrap();
                assert!(bytes > 40 * 65536, "{what}: {bytes} bytes of records");
            }
        }
    }
}
