//! Faults while a job runs: a disk that fills up, the trace directory
//! removed, a rank stopped for seconds, a disk slower than the trace
//! rate. Under each, at np=4 under Open MPI
//! and MPICH: the application prints and exits as untraced, pmtrace says
//! what happened in its one line, the trace reads, and whatever was lost
//! is counted, per rank and thread.

use crate::support::*;
use pmtrace_trace::Trace;
use std::path::Path;
use std::time::{Duration, Instant};

/// halo2d's iterations: about 120 MPI calls each per rank, some 25 MB of
/// trace at np=4, and about a second of run under Open MPI (MPICH's ranks
/// poll, and four of them on two cores take longer).
const ITERATIONS: &str = "4000";

/// A tmpfs of `size` mounted on `dir` for as long as it lives (the test
/// runs as root, as CI does: it fails where the mount cannot be made).
struct Tmpfs<'a>(&'a Path);

impl<'a> Tmpfs<'a> {
    fn mount(dir: &'a Path, size: &str) -> Tmpfs<'a> {
        std::fs::create_dir_all(dir).unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "pmtrace-test"])
            .arg(dir)
            .status()
            .expect("mount");
        assert!(st.success(), "a tmpfs on {} (as root)", dir.display());
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs<'_> {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.0).status();
    }
}

/// Waits (at most 60 s) until `path` exists.
fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The untraced run's output, which every faulty run must print.
fn untraced(mpi: Mpi, dir: &Path) -> Run {
    let prog = mpi.prog("halo2d");
    let plain = mpirun_on(mpi, dir, 4, &prog, &[ITERATIONS], Mode::Plain, &[]);
    assert_eq!(plain.code, 0, "{mpi:?}: {}", plain.stderr);
    assert!(plain.stdout.contains("halo2d: "), "{}", plain.stdout);
    plain
}

/// The one line pmtrace printed, after checking the run behaved as the
/// untraced one.
fn one_line(plain: &Run, traced: &Run, what: &str) -> String {
    assert_eq!(traced.code, plain.code, "{what}: {}", traced.stderr);
    assert_eq!(traced.stdout, plain.stdout, "{what}");
    let lines = traced.stderr_lines();
    assert_eq!(lines.len(), 1, "{what}: {lines:?}");
    assert!(
        lines[0].starts_with("pmtrace: trace of 4/4 ranks in "),
        "{what}: {}",
        lines[0]
    );
    lines[0].to_string()
}

/// halo2d at np=4 under `mpi`, untraced, then traced with `fault` done
/// (given the trace directory) once every rank has made its file: both
/// runs, and the one line pmtrace printed.
fn with_fault(
    mpi: Mpi,
    dir: &Path,
    what: &str,
    env: &[(&str, &str)],
    fault: impl FnOnce(&Path),
) -> (Run, String) {
    let plain = untraced(mpi, dir);
    let prog = mpi.prog("halo2d");
    let traced = mpirun_during(
        mpi,
        dir,
        4,
        &prog,
        &[ITERATIONS],
        Mode::Preload,
        env,
        |trace| {
            // Every rank's file: a rank that could not make its own turns
            // tracing off on all (a rank in the middle of MPI_Init when
            // the fault strikes is another test's).
            for r in 0..4 {
                wait_for(&trace.join(format!("rank-{r:05}.pmt")));
            }
            fault(trace);
        },
    );
    let line = one_line(&plain, &traced, what);
    (traced, line)
}

/// With `PMTRACE_DIR` on a 1 MiB tmpfs, the disk fills up early: the run
/// is as untraced, the summary line counts the events DROPPED, the trace
/// reads, and the report counts what each rank and thread lost; every
/// call is either recorded or counted among the dropped records.
#[test]
fn a_disk_that_fills_up_drops_events_and_counts_each_one() {
    for mpi in [Mpi::OpenMpi, Mpi::Mpich] {
        let what = format!("{mpi:?}, a full disk");
        let dir = scratch(&format!("faults-full-{}", mpi.tag()));
        let plain = untraced(mpi, &dir);
        let trace = dir.join("trace-preload");
        let _tmpfs = Tmpfs::mount(&trace, "1m");
        let prog = mpi.prog("halo2d");
        let traced = mpirun_on(mpi, &dir, 4, &prog, &[ITERATIONS], Mode::Preload, &[]);
        let line = one_line(&plain, &traced, &what);
        let dropped: u64 = line
            .split(", ")
            .find_map(|p| p.strip_suffix(" events DROPPED"))
            .unwrap_or_else(|| panic!("{what}: no drop counted: {line}"))
            .parse()
            .unwrap();
        assert!(dropped > 0, "{what}: {line}");
        let t = Trace::open(&trace).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(t.ranks.len(), 4, "{what}");
        let rep = report(&trace);
        assert_eq!(rep["dropped_events"], dropped, "{what}: {line}");
        // Each rank's loss, and each thread's within it.
        let expected = traced.expected_counts(4);
        for (r, rank) in rep["per_rank"].as_array().unwrap().iter().enumerate() {
            let lost = rank["dropped_events"].as_u64().unwrap();
            let by_thread: u64 = rank["dropped_by_thread"]
                .as_object()
                .map_or(0, |m| m.values().map(|v| v.as_u64().unwrap()).sum());
            assert_eq!(by_thread, lost, "{what}: rank {r}: {rank}");
            // Every call is recorded or counted as lost (the count covers
            // every record lost, the few that are not calls too).
            let calls: u64 = expected[r].values().sum();
            let events = rank["events"].as_u64().unwrap();
            assert!(
                events <= calls && events + lost >= calls,
                "{what}: rank {r}: {events} recorded and {lost} dropped, of {calls} calls"
            );
        }
    }
}

/// The trace directory removed as soon as every rank has made its file,
/// while the job iterates: the run is as untraced,
/// and the writers, which kept writing into their open files, write them
/// back at the end; the summary line says so, and the trace holds every
/// call.
#[test]
fn a_trace_directory_removed_while_the_job_runs_is_written_back() {
    for mpi in [Mpi::OpenMpi, Mpi::Mpich] {
        let what = format!("{mpi:?}, the directory removed");
        let dir = scratch(&format!("faults-removed-{}", mpi.tag()));
        let (traced, line) = with_fault(mpi, &dir, &what, &[], |trace| {
            std::fs::remove_dir_all(trace).unwrap();
        });
        assert!(
            line.ends_with(
                "; the files of 4 ranks were removed while the job ran and written back"
            ),
            "{what}: {line}"
        );
        let t = Trace::open(&traced.trace).unwrap_or_else(|e| panic!("{what}: {e}"));
        let expected = traced.expected_counts(4);
        assert_eq!(recorded_counts(&t), expected, "{what}");
        let rep = report(&traced.trace);
        assert_eq!(rep["dropped_events"], 0, "{what}");
        assert_eq!(rep["messages"]["unmatched"], 0, "{what}");
    }
}

/// A rank stopped (SIGSTOP) for 3 s, far longer than its peers' buffers
/// take to fill at their rate: the others wait for it in MPI, nothing is
/// lost, and the run goes on as untraced once it is continued.
#[test]
fn a_rank_stopped_for_seconds_loses_nothing() {
    for mpi in [Mpi::OpenMpi, Mpi::Mpich] {
        let what = format!("{mpi:?}, a rank stopped");
        let dir = scratch(&format!("faults-stopped-{}", mpi.tag()));
        let prog = mpi.prog("halo2d");
        let (traced, line) = with_fault(mpi, &dir, &what, &[], |trace| {
            // A rank of this job: the newest.
            let pid = ranks_of(&prog, trace)
                .pop()
                .unwrap_or_else(|| panic!("{what}: no rank found"));
            let signal = |sig: &str| {
                let st = std::process::Command::new("kill")
                    .args([sig, &pid])
                    .status()
                    .expect("kill");
                assert!(st.success(), "{what}: kill {sig} {pid}");
            };
            signal("-STOP");
            std::thread::sleep(Duration::from_secs(3));
            signal("-CONT");
        });
        assert!(!line.contains("DROPPED"), "{what}: {line}");
        let t = Trace::open(&traced.trace).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(recorded_counts(&t), traced.expected_counts(4), "{what}");
        let rep = report(&traced.trace);
        assert_eq!(rep["messages"]["unmatched"], 0, "{what}");
    }
}

/// The ranks of the job tracing into `trace`: the processes running
/// `prog` with `PMTRACE_DIR=trace` in their environment (not the
/// launcher, nor another test's job), by pid.
fn ranks_of(prog: &Path, trace: &Path) -> Vec<String> {
    let prog = std::fs::canonicalize(prog).unwrap();
    let mut var = b"PMTRACE_DIR=".to_vec();
    var.extend_from_slice(trace.as_os_str().as_encoded_bytes());
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid: &u32| {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe"));
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            exe.is_ok_and(|e| e == prog) && env.split(|&b| b == 0).any(|v| v == var)
        })
        .collect();
    pids.sort_unstable();
    pids.iter().map(u32::to_string).collect()
}

/// A disk slower than the trace rate, as the writer sees it: every rank's
/// writer thread stopped until the rank's main thread waits for it, then
/// let run for 5 ms, again and again until the rank ends
/// (tests/progs/stall, by ptrace: the application threads run on), with
/// the smallest buffers (64 KiB). The
/// application's threads wait for buffers (pmtrace stalls, never drops):
/// the run is as untraced, the summary line counts the waits, the report
/// shows them by rank, and the trace holds every call.
#[test]
fn a_disk_slower_than_the_trace_rate_stalls_the_ranks_and_loses_nothing() {
    for mpi in [Mpi::OpenMpi, Mpi::Mpich] {
        let what = format!("{mpi:?}, a slow disk");
        let dir = scratch(&format!("faults-slow-{}", mpi.tag()));
        let halo = mpi.prog("halo2d");
        let stall = prog("stall");
        let env = [("PMTRACE_BUFFER_SIZE", "64K")];
        let (traced, line) = with_fault(mpi, &dir, &what, &env, |trace| {
            let ranks = ranks_of(&halo, trace);
            assert_eq!(ranks.len(), 4, "{what}: {ranks:?}");
            let stallers: Vec<_> = ranks
                .iter()
                .map(|pid| {
                    std::process::Command::new(&stall)
                        .args([pid.as_str(), "pmtrace-flusher"])
                        .stdout(std::process::Stdio::piped())
                        .spawn()
                        .expect("stall")
                })
                .collect();
            for s in stallers {
                let out = s.wait_with_output().expect("stall");
                assert!(out.status.success(), "{what}: stall failed");
                let waits: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
                assert!(waits > 0, "{what}: a rank never waited for its writer");
            }
        });
        assert!(!line.contains("DROPPED"), "{what}: {line}");
        let waits: u64 = line
            .split(", ")
            .find_map(|p| p.strip_suffix(" buffer waits"))
            .unwrap_or_else(|| panic!("{what}: no buffer wait counted: {line}"))
            .parse()
            .unwrap();
        assert!(waits > 0, "{what}: {line}");
        let t = Trace::open(&traced.trace).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(recorded_counts(&t), traced.expected_counts(4), "{what}");
        let rep = report(&traced.trace);
        let by_rank: u64 = rep["per_rank"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["buffer_waits"].as_u64().unwrap())
            .sum();
        assert_eq!(by_rank, waits, "{what}: {line}");
        assert_eq!(rep["dropped_events"], 0, "{what}");
        assert_eq!(rep["messages"]["unmatched"], 0, "{what}");
    }
}
