//! `pmtrace top` on running jobs (tests/progs/hang.c, examples/halo2d.c):
//! a deadlock named within seconds, a stall that ends at a computing
//! rank, rates that advance, the terminal view under tmux, and, once a
//! hung job is killed, `pmtrace report` saying where each rank was.

use crate::support::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `pmtrace top DIR --once --json`, parsed.
fn top_once(trace: &Path) -> Option<Value> {
    let out = pmtrace(&["top", trace.to_str().unwrap(), "--once", "--json"]);
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).unwrap();
    Some(serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}")))
}

/// Snapshots every half second until `done` holds (or 60 s pass).
fn top_until(trace: &Path, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        if let Some(s) = top_once(trace) {
            if done(&s) {
                return s;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what}: not seen in 60 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn ranks_of(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// The hang's waits, as (rank, call, waits_for).
fn waits(hang: &Value) -> Vec<(u64, String, Vec<u64>)> {
    hang["waits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["rank"].as_u64().unwrap(),
                w["call"].as_str().unwrap().to_string(),
                ranks_of(&w["waits_for"]),
            )
        })
        .collect()
}

/// Kills a job's ranks (by the pids their live files give) when dropped:
/// a hung job is killed however its test ends.
struct Killer(Vec<i32>);

impl Killer {
    fn of(trace: &Path) -> Killer {
        let s = top_until(trace, "the ranks' pids", |s| {
            s["ranks"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["pid"].as_i64().unwrap_or(0) > 0)
        });
        Killer(
            s["ranks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["pid"].as_i64().unwrap() as i32)
                .collect(),
        )
    }
}

impl Drop for Killer {
    fn drop(&mut self) {
        for &pid in &self.0 {
            // SAFETY: a signal to a rank process of the job under test.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// A site's frame as (function, file name, line).
fn frame(f: &Value) -> (String, String, u64) {
    (
        f["function"].as_str().unwrap_or("").to_string(),
        f["file"]
            .as_str()
            .unwrap_or("")
            .rsplit('/')
            .next()
            .unwrap()
            .to_string(),
        f["line"].as_u64().unwrap_or(0),
    )
}

/// The lines of tests/progs/hang.c that hold `text`.
fn hang_lines(text: &str) -> Vec<u64> {
    let src =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/progs/hang.c"))
            .unwrap();
    src.lines()
        .enumerate()
        .filter(|(_, l)| l.contains(text))
        .map(|(i, _)| i as u64 + 1)
        .collect()
}

/// Where the hung calls came from: for the deadlock of receives, ranks 0
/// and 1 in `receive_from`, at its MPI_Recv, called from main; every other
/// blocked call in main (hang.c is built with -g), at a line of that call.
fn check_sites(
    mpi: Mpi,
    mode: &str,
    call: &str,
    site_of: impl Fn(u64) -> Vec<(String, String, u64)>,
) {
    let recv = hang_lines("/* site: receive_from */");
    let calls = hang_lines(&format!("{call}("));
    let barriers = hang_lines("MPI_Barrier(");
    for r in 0..4 {
        let site = site_of(r);
        let top = site.first().cloned().unwrap_or_default();
        if r < 2 && mode == "deadlock" {
            assert_eq!(
                top,
                ("receive_from".into(), "hang.c".into(), recv[0]),
                "{mpi:?} rank {r}"
            );
            assert_eq!(
                site.get(1).map(|f| f.0.as_str()),
                Some("main"),
                "{mpi:?} rank {r}: {site:?}"
            );
        } else {
            let lines = if r < 2 { &calls } else { &barriers };
            assert_eq!(
                (top.0.as_str(), top.1.as_str()),
                ("main", "hang.c"),
                "{mpi:?} {mode} rank {r}: {site:?}"
            );
            assert!(
                lines.contains(&top.2),
                "{mpi:?} {mode} rank {r}: line {} not one of {lines:?}",
                top.2
            );
        }
    }
}

fn deadlock(mpi: Mpi, mode: &str, call: &str) {
    let dir = scratch(&format!("live-{mode}-{mpi:?}"));
    let prog = mpi.prog("hang");
    let run = mpirun_during(mpi, &dir, 4, &prog, &[mode], Mode::Preload, &[], |trace| {
        let _kill = Killer::of(trace);
        let s = top_until(trace, "the deadlock", |s| !s["hang"].is_null());
        let hang = &s["hang"];
        assert_eq!(hang["kind"], "deadlock", "{mpi:?} {mode}: {s}");
        assert_eq!(ranks_of(&hang["ranks"]), vec![0, 1], "{mpi:?} {mode}: {s}");
        assert_eq!(
            waits(hang),
            vec![
                (0, call.to_string(), vec![1]),
                (1, call.to_string(), vec![0]),
                (2, "MPI_Barrier".to_string(), vec![0, 1]),
                (3, "MPI_Barrier".to_string(), vec![0, 1]),
            ],
            "{mpi:?} {mode}"
        );
        // Named within 10 s of the hang: the receives began at most that
        // long before the first snapshot that names it.
        for w in hang["waits"].as_array().unwrap() {
            let for_ns = w["for_ns"].as_u64().unwrap();
            assert!(
                (5_000_000_000..10_000_000_000).contains(&for_ns),
                "{mpi:?} {mode}: named after {for_ns} ns"
            );
        }
        for r in s["ranks"].as_array().unwrap() {
            assert_eq!(r["state"], "mpi", "{mpi:?} {mode}: {r}");
        }
        assert_eq!(s["ranks"][0]["peer"], 1, "{mpi:?} {mode}");
        let c = &s["summary"]["collectives"][0];
        assert_eq!(
            (ranks_of(&c["waiting"]), ranks_of(&c["missing"])),
            (vec![2, 3], vec![0, 1])
        );
        // Blocked sends are messages sent and not yet received.
        let unreceived: Vec<(u64, u64, String)> = s["summary"]["unreceived"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| {
                (
                    u["rank"].as_u64().unwrap(),
                    u["to"].as_u64().unwrap(),
                    u["call"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let want = if call == "MPI_Send" {
            vec![(0, 1, call.to_string()), (1, 0, call.to_string())]
        } else {
            vec![]
        };
        assert_eq!(unreceived, want, "{mpi:?} {mode}: {s}");
        // Where each call came from, in the ranks and in the hang.
        check_sites(mpi, mode, call, |r| {
            s["ranks"][r as usize]["site"]
                .as_array()
                .unwrap()
                .iter()
                .map(frame)
                .collect()
        });
        for w in hang["waits"].as_array().unwrap() {
            let r = w["rank"].as_u64().unwrap() as usize;
            assert_eq!(w["site"], s["ranks"][r]["site"][0], "{mpi:?} {mode}");
        }
    });
    assert_ne!(run.code, 0, "{mpi:?} {mode}: the job was killed");
    // Once its writers are silent, every rank is gone and top says the job
    // ended; the files are as the kill left them.
    let trace = &run.trace;
    let s = top_until(trace, "the ranks gone", |s| s["job"] == "ended");
    for r in s["ranks"].as_array().unwrap() {
        assert_eq!(r["state"], "gone", "{mpi:?} {mode}: {r}");
    }
    // After the run, the report says where each rank was blocked.
    let rep = report(trace);
    let at_end = &rep["at_end"];
    assert_eq!(
        at_end["hang"]["kind"], "deadlock",
        "{mpi:?} {mode}: {at_end}"
    );
    assert_eq!(ranks_of(&at_end["hang"]["ranks"]), vec![0, 1]);
    let where_: Vec<(u64, String, String, Vec<u64>)> = at_end["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["rank"].as_u64().unwrap(),
                r["state"].as_str().unwrap().to_string(),
                r["call"].as_str().unwrap_or("").to_string(),
                ranks_of(&r["waits_for"]),
            )
        })
        .collect();
    let mpi_ = "mpi".to_string();
    assert_eq!(
        where_,
        vec![
            (0, mpi_.clone(), call.to_string(), vec![1]),
            (1, mpi_.clone(), call.to_string(), vec![0]),
            (2, mpi_.clone(), "MPI_Barrier".to_string(), vec![0, 1]),
            (3, mpi_, "MPI_Barrier".to_string(), vec![0, 1]),
        ],
        "{mpi:?} {mode}"
    );
    check_sites(mpi, mode, call, |r| {
        at_end["ranks"][r as usize]["site"]
            .as_array()
            .unwrap()
            .iter()
            .map(frame)
            .collect()
    });
    let text = pmtrace(&["report", trace.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("rank 0: in {call} for ")), "{text}");
    assert!(text.contains(", called from "), "{text}");
    assert!(
        text.contains("deadlock: ranks 0 -> 1 waited for each other"),
        "{text}"
    );
}

#[test]
fn a_deadlock_is_named_while_it_hangs_and_after_the_job_is_killed_under_open_mpi() {
    deadlock(Mpi::OpenMpi, "deadlock", "MPI_Recv");
}

#[test]
fn a_deadlock_is_named_while_it_hangs_and_after_the_job_is_killed_under_mpich() {
    deadlock(Mpi::Mpich, "deadlock", "MPI_Recv");
}

/// Ranks 0 and 1 block in MPI_Waitall on receives posted on a split
/// communicator where their ranks are swapped: the waits are found from the
/// requests, and the communicator's ranks mapped to the world.
#[test]
fn a_deadlock_in_waitall_on_a_split_communicator_names_world_ranks() {
    deadlock(Mpi::OpenMpi, "waitall", "MPI_Waitall");
}

/// Ranks 0 and 1 each block sending 16 MiB to the other: a deadlock of
/// two sends, and two messages sent and not yet received.
#[test]
fn a_deadlock_of_two_sends_shows_both_messages_unreceived() {
    deadlock(Mpi::OpenMpi, "sends", "MPI_Send");
}

/// The same under MPICH, whose request and communicator handles are
/// 4-byte integers (the slot keeps them at that width).
#[test]
fn a_deadlock_in_waitall_names_world_ranks_under_mpich() {
    deadlock(Mpi::Mpich, "waitall", "MPI_Waitall");
}

/// The application takes every real-time signal after MPI_Init: pmtrace,
/// whose handler is then not there, sends it none (rank 0 counts what the
/// ranks got), finds no site for the calls blocked meanwhile, and the job
/// runs as untraced.
#[test]
fn an_application_that_takes_the_signals_gets_none_of_pmtraces() {
    let mpi = Mpi::OpenMpi;
    let dir = scratch("live-taken");
    let prog = mpi.prog("hang");
    let plain = mpirun_on(mpi, &dir, 4, &prog, &["taken", "1"], Mode::Plain, &[]);
    assert_eq!(plain.stdout, "hang: ready\nhang: ok np=4 signals=0\n");
    let run = mpirun_during(
        mpi,
        &dir,
        4,
        &prog,
        &["taken", "6"],
        Mode::Preload,
        &[],
        |trace| {
            let s = top_until(trace, "ranks 1 to 3 blocked 2.5 s", |s| {
                (1..4).all(|r| {
                    s["ranks"][r]["call"] == "MPI_Barrier"
                        && s["ranks"][r]["for_ns"].as_u64().unwrap() > 2_500_000_000
                })
            });
            for r in 1..4 {
                assert_eq!(
                    s["ranks"][r]["site"],
                    serde_json::json!([]),
                    "rank {r}: {s}"
                );
            }
        },
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "hang: ready\nhang: ok np=4 signals=0\n");
}

fn stalled(mpi: Mpi) {
    let dir = scratch(&format!("live-stalled-{mpi:?}"));
    let prog = mpi.prog("hang");
    let plain = mpirun_on(mpi, &dir, 4, &prog, &["stalled", "1"], Mode::Plain, &[]);
    let run = mpirun_during(
        mpi,
        &dir,
        4,
        &prog,
        &["stalled", "14"],
        Mode::Preload,
        &[],
        |trace| {
            let kill = Killer::of(trace);
            let s = top_until(trace, "the stall", |s| !s["hang"].is_null());
            let hang = &s["hang"];
            assert_eq!(hang["kind"], "stalled", "{mpi:?}: {s}");
            assert_eq!(ranks_of(&hang["ranks"]), vec![0, 1, 3, 2], "{mpi:?}: {s}");
            assert_eq!(hang["end"]["rank"], 2);
            assert_eq!(hang["end"]["state"], "compute");
            for (r, call, w) in waits(hang) {
                assert_eq!(
                    (call.as_str(), w),
                    ("MPI_Allreduce", vec![2]),
                    "{mpi:?} rank {r}"
                );
            }
            assert_eq!(s["ranks"][2]["state"], "compute");
            assert!(s["ranks"][2]["call"].is_null());
            // Where the waiting ranks' Allreduce came from: main, at the
            // stall's Allreduce.
            let lines = hang_lines("MPI_Allreduce(");
            for w in hang["waits"].as_array().unwrap() {
                let (f, file, line) = frame(&w["site"]);
                assert_eq!(
                    (f.as_str(), file.as_str()),
                    ("main", "hang.c"),
                    "{mpi:?}: {w}"
                );
                assert!(
                    lines.contains(&line),
                    "{mpi:?}: line {line}, not one of {lines:?}"
                );
            }
            // The job is let finish.
            std::mem::forget(kill);
        },
    );
    // The job then ends as it would untraced.
    assert_eq!(run.code, 0, "{mpi:?}: {}", run.stderr);
    assert_eq!(run.stdout, plain.stdout);
    assert!(run.stdout.contains("hang: ok np=4"), "{}", run.stdout);
    assert_eq!(run.stderr_lines().len(), 1, "{mpi:?}: {}", run.stderr);
    let s = top_once(&run.trace).unwrap();
    assert_eq!(s["job"], "ended");
    for r in s["ranks"].as_array().unwrap() {
        assert_eq!(r["state"], "finished", "{r}");
    }
    assert!(report(&run.trace).get("at_end").is_none(), "a finished job");
}

#[test]
fn a_stall_ends_at_the_computing_rank_under_open_mpi() {
    stalled(Mpi::OpenMpi);
}

#[test]
fn a_stall_ends_at_the_computing_rank_under_mpich() {
    stalled(Mpi::Mpich);
}

/// A running halo2d: `top --json` prints a snapshot per interval whose
/// counts advance, exits by itself when the job ends, and the terminal
/// view (under tmux) shows every rank.
#[test]
fn a_running_job_shows_its_rates_and_the_terminal_view_every_rank() {
    let dir = scratch("live-halo2d");
    let prog = prog("halo2d");
    let tmux = which("tmux");
    // Long enough (about 30 s) to be watched; killed once it was.
    let run = mpirun_during(
        Mpi::OpenMpi,
        &dir,
        4,
        &prog,
        &["1500000"],
        Mode::Preload,
        &[],
        |trace| {
            let kill = Killer::of(trace);
            let mut top = Command::new(cli())
                .args([
                    "top",
                    trace.to_str().unwrap(),
                    "--json",
                    "--interval",
                    "0.5",
                ])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut lines =
                std::io::BufRead::lines(std::io::BufReader::new(top.stdout.take().unwrap()));
            let snaps: Vec<Value> = (0..4)
                .map(|_| serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap())
                .collect();
            for pair in snaps.windows(2).skip(1) {
                let before = pair[0]["ranks"].as_array().unwrap();
                let after = pair[1]["ranks"].as_array().unwrap();
                assert_eq!((before.len(), after.len()), (4, 4));
                for (r, (a, b)) in before.iter().zip(after).enumerate() {
                    assert!(
                        b["calls"].as_u64() > a["calls"].as_u64(),
                        "rank {r}: calls {} then {}",
                        a["calls"],
                        b["calls"]
                    );
                    assert!(
                        b["bytes_sent"].as_u64() > a["bytes_sent"].as_u64(),
                        "rank {r}"
                    );
                    assert!(
                        b["rates"]["calls_per_s"].as_f64().unwrap() > 1000.0,
                        "rank {r}: {b}"
                    );
                    assert!(
                        b["rates"]["messages_per_s"].as_f64().unwrap() > 100.0,
                        "rank {r}: {b}"
                    );
                }
            }
            // The terminal view, read back from tmux's pane.
            let session = format!("pmtrace-top-{}", std::process::id());
            let st = Command::new(&tmux)
                .args(["new-session", "-d", "-s", &session, "-x", "120", "-y", "30"])
                .arg(format!("{} top {}", cli().display(), trace.display()))
                .status()
                .unwrap();
            assert!(st.success());
            std::thread::sleep(Duration::from_secs(3));
            let pane = Command::new(&tmux)
                .args(["capture-pane", "-p", "-t", &session])
                .output()
                .unwrap();
            let _ = Command::new(&tmux)
                .args(["kill-session", "-t", &session])
                .status();
            let pane = String::from_utf8_lossy(&pane.stdout);
            assert!(pane.contains("pmtrace top"), "{pane}");
            assert!(pane.contains("4 ranks, job running"), "{pane}");
            for r in 0..4 {
                assert!(
                    pane.lines().any(|l| l
                        .trim_start_matches(['│', '|', ' '])
                        .starts_with(&format!("{r}  "))),
                    "rank {r} not shown:\n{pane}"
                );
            }
            // top goes on until the job ends (here: killed), then exits by itself.
            drop(kill);
            let st = top.wait().unwrap();
            assert!(st.success());
        },
    );
    assert_ne!(run.code, 0, "killed");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `pmtrace timeline --follow` on a running job (hang's stall: rank 2
/// computes while the others wait in MPI_Allreduce): a page drawn while it
/// runs, which reloads itself; once the job ends, the command exits by
/// itself, leaving the page `timeline` draws, which has the calls made
/// since.
#[test]
fn the_timeline_follows_a_running_job_and_ends_as_timeline_draws_it() {
    let dir = scratch("live-follow");
    let prog = prog("hang");
    let page = dir.join("follow.html");
    let mut follow = None;
    let mut running = Vec::new();
    let run = mpirun_during(
        Mpi::OpenMpi,
        &dir,
        4,
        &prog,
        &["stalled", "8"],
        Mode::Preload,
        &[],
        |trace| {
            top_until(trace, "the job's live files", |_| true);
            let child = Command::new(cli())
                .args(["timeline", trace.to_str().unwrap(), "-o"])
                .arg(&page)
                .args(["--follow", "--interval", "0.5"])
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            follow = Some(child);
            let start = Instant::now();
            loop {
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "no page while the job ran"
                );
                if let Ok(p) = std::fs::read(&page) {
                    running = p;
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        },
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let text = String::from_utf8_lossy(&running).into_owned();
    assert!(
        text.contains("<meta http-equiv=\"refresh\" content=\"1\">"),
        "{}",
        &text[..text.len().min(300)]
    );
    assert!(text.trim_end().ends_with("</html>"), "a whole page");
    let out = follow.unwrap().wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The last page is the finished job's, as `timeline` draws it.
    let plain = dir.join("plain.html");
    let st = pmtrace(&[
        "timeline",
        run.trace.to_str().unwrap(),
        "-o",
        plain.to_str().unwrap(),
    ]);
    assert!(st.status.success());
    let last = std::fs::read(&page).unwrap();
    assert!(
        last == std::fs::read(&plain).unwrap(),
        "the last page differs from timeline's"
    );
    // The page of the running job had fewer calls: the Allreduce and
    // MPI_Finalize were still to come.
    let calls = |t: &str| -> u64 {
        let title = &t[t.find("\"title\":").expect("the page's data")..];
        let at = title.find(" calls").expect("the title's call count");
        title[..at].rsplit(' ').next().unwrap().parse().unwrap()
    };
    let last = String::from_utf8_lossy(&last).into_owned();
    assert!(!last.contains("http-equiv=\"refresh\""));
    assert!(
        calls(&text) < calls(&last),
        "{} then {}",
        calls(&text),
        calls(&last)
    );
    assert!(!dir.join("follow.html.part").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

fn which(name: &str) -> std::path::PathBuf {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{name} (make deps installs it)");
    std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// `top` on what is not a running job's trace: one line and a non-zero
/// exit, never a panic; the files are never changed.
#[test]
fn top_on_bad_input_says_so_in_one_line() {
    let dir = scratch("live-bad");
    let check = |args: &[&str], what: &str| {
        let out = pmtrace(args);
        assert!(!out.status.success(), "{what}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{what}: {err}");
        assert!(err.starts_with("pmtrace: error: "), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
    };
    let missing = dir.join("nope");
    check(
        &["top", missing.to_str().unwrap(), "--once"],
        "no directory",
    );
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    check(
        &["top", empty.to_str().unwrap(), "--once"],
        "an empty directory",
    );
    let bad = dir.join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("rank-00000.live"), b"PMTL not really").unwrap();
    check(
        &["top", bad.to_str().unwrap(), "--once", "--json"],
        "a truncated live file",
    );
    std::fs::write(bad.join("rank-00000.live"), vec![7u8; 80_000]).unwrap();
    check(
        &["top", bad.to_str().unwrap(), "--once"],
        "a foreign live file",
    );
    let before = std::fs::read(bad.join("rank-00000.live")).unwrap();
    assert_eq!(std::fs::read(bad.join("rank-00000.live")).unwrap(), before);
    // The timeline's --follow, likewise.
    let page = dir.join("page.html");
    let page = page.to_str().unwrap();
    check(
        &[
            "timeline",
            missing.to_str().unwrap(),
            "-o",
            page,
            "--follow",
        ],
        "follow: no directory",
    );
    check(
        &["timeline", bad.to_str().unwrap(), "-o", page, "--follow"],
        "follow: a foreign live file",
    );
    check(
        &["timeline", empty.to_str().unwrap(), "-o", "-", "--follow"],
        "follow: standard output",
    );
}
