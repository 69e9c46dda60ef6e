//! Wait states and metrics over blocks of the golden traces at P = 1..4 on
//! threads, on recorded and on synchronized time: each block holds the
//! serial waits of its calls, in the serial order, and process 0 the
//! serial metrics.

mod common;
use common::*;

use std::path::PathBuf;

use pmtrace_matching::collective;
use pmtrace_matching::Messages;
use pmtrace_parallel::fabric::Threads;
use pmtrace_parallel::{block, insts, messages};
use pmtrace_report::times::Times;
use pmtrace_report::waits;
use pmtrace_sync::{self as sync, SyncParams, Synced};
use pmtrace_trace::Trace;

/// A copy of the rank files of `case`, synced by the serial sync.
fn synced_copy(case: &str, tag: &str) -> PathBuf {
    let dir = copy(case, tag);
    let trace = Trace::open(&dir).unwrap();
    let m = Messages::build(&trace);
    sync::sync(&trace, &m, &SyncParams::default())
        .write(&trace)
        .unwrap();
    dir
}

type Row = (&'static str, (u32, u32, u32), u64, u64, (u32, u32, u32));

fn rows(w: &[waits::Wait]) -> Vec<Row> {
    let key = |at: pmtrace_trace::read::EventRef| (at.rank, at.thread, at.index);
    w.iter()
        .map(|w| (w.kind, key(w.at), w.comm, w.ns, key(w.cause)))
        .collect()
}

#[test]
fn blocks_hold_the_serial_waits_of_their_calls() {
    for case in CASES {
        let dir = synced_copy(case, "waits");
        for on_sync in [false, true] {
            let trace = Trace::open(&dir).unwrap();
            let m = Messages::build(&trace);
            let synced = on_sync.then(|| Synced::load(&trace).unwrap().unwrap());
            let times = Times {
                trace: &trace,
                synced: synced.as_ref(),
            };
            let mut want = waits::find(&trace, &m, &collective::instances(&trace), &times);
            want.sort_by_key(|w| (w.at.rank, w.at.thread, w.at.index));
            let want = rows(&want);
            for procs in 1..=4 {
                let parts = Threads::run(procs, |f| {
                    let b = block::open(f, &dir).unwrap();
                    let bm = messages::build(f, &b);
                    let is = insts::gather(f, &b.trace);
                    let synced = on_sync.then(|| Synced::load(&b.trace).unwrap().unwrap());
                    let times = Times {
                        trace: &b.trace,
                        synced: synced.as_ref(),
                    };
                    rows(&pmtrace_parallel::waits::find(f, &b, &bm, &is, &times))
                });
                let got: Vec<Row> = parts.into_iter().flatten().collect();
                assert_eq!(got, want, "{case} (synced: {on_sync}) at P = {procs}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn process_zero_assembles_the_serial_metrics() {
    use pmtrace_report::metrics;
    for case in CASES {
        let dir = synced_copy(case, "metrics");
        for on_sync in [false, true] {
            let trace = Trace::open(&dir).unwrap();
            let synced = on_sync.then(|| Synced::load(&trace).unwrap().unwrap());
            let times = Times {
                trace: &trace,
                synced: synced.as_ref(),
            };
            let want = serde_json::to_value(metrics::compute(&trace, &times)).unwrap();
            for procs in 1..=4 {
                let parts = Threads::run(procs, |f| {
                    let b = block::open(f, &dir).unwrap();
                    let synced = on_sync.then(|| Synced::load(&b.trace).unwrap().unwrap());
                    let times = Times {
                        trace: &b.trace,
                        synced: synced.as_ref(),
                    };
                    pmtrace_parallel::metrics::compute(f, &b, &times)
                        .map(|m| serde_json::to_value(m).unwrap())
                });
                assert_eq!(
                    parts[0].as_ref(),
                    Some(&want),
                    "{case} (synced: {on_sync}) at P = {procs}"
                );
                assert!(parts[1..].iter().all(Option::is_none));
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn the_walk_over_blocks_finds_the_serial_critical_path() {
    use pmtrace_report::{critical, metrics};
    for case in CASES {
        let dir = synced_copy(case, "critical");
        for on_sync in [false, true] {
            let trace = Trace::open(&dir).unwrap();
            let m = Messages::build(&trace);
            let synced = on_sync.then(|| Synced::load(&trace).unwrap().unwrap());
            let times = Times {
                trace: &trace,
                synced: synced.as_ref(),
            };
            let mut found = waits::find(&trace, &m, &collective::instances(&trace), &times);
            found.sort_by_key(|w| (w.at.rank, w.at.thread, w.at.index));
            let window = metrics::window(&trace, &times);
            let path = critical::compute(&trace, &times, &mut found, window, None, false);
            assert!(path.length_ns > 0, "{case}");
            let want = serde_json::to_value(&path).unwrap();
            for procs in 1..=4 {
                let parts = Threads::run(procs, |f| {
                    let b = block::open(f, &dir).unwrap();
                    let bm = messages::build(f, &b);
                    let is = insts::gather(f, &b.trace);
                    let synced = on_sync.then(|| Synced::load(&b.trace).unwrap().unwrap());
                    let times = Times {
                        trace: &b.trace,
                        synced: synced.as_ref(),
                    };
                    let w = pmtrace_parallel::waits::find(f, &b, &bm, &is, &times);
                    let window = pmtrace_parallel::metrics::window(f, &b, &times);
                    pmtrace_parallel::critical::compute(f, &b, &times, &w, window)
                        .map(|p| serde_json::to_value(p).unwrap())
                });
                assert_eq!(
                    parts[0].as_ref(),
                    Some(&want),
                    "{case} (synced: {on_sync}) at P = {procs}"
                );
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn the_report_and_critical_path_verb_find_the_serial_paths() {
    use pmtrace_report::{Report, ReportOptions};
    for case in CASES {
        let dir = synced_copy(case, "weighted");
        for on_sync in [false, true] {
            let trace = Trace::open(&dir).unwrap();
            let m = Messages::build(&trace);
            let synced = on_sync.then(|| Synced::load(&trace).unwrap().unwrap());
            for weighted in [false, true] {
                let options = ReportOptions {
                    weighted,
                    ..ReportOptions::default()
                };
                let report = Report::build_on(&trace, &m, options, synced.as_ref());
                let want = serde_json::to_value(report.critical_path.unwrap()).unwrap();
                for procs in 1..=4 {
                    let parts = Threads::run(procs, |f| {
                        let b = block::open(f, &dir).unwrap();
                        let bm = messages::build(f, &b);
                        let is = insts::gather(f, &b.trace);
                        let synced = on_sync.then(|| Synced::load(&b.trace).unwrap().unwrap());
                        let times = Times {
                            trace: &b.trace,
                            synced: synced.as_ref(),
                        };
                        let w = pmtrace_parallel::waits::find(f, &b, &bm, &is, &times);
                        let window = pmtrace_parallel::metrics::window(f, &b, &times);
                        let extra = weighted.then_some((&bm, &is));
                        pmtrace_parallel::critical::paths(f, &b, extra, &times, &w, window)
                            .map(|p| serde_json::to_value(p).unwrap())
                    });
                    assert_eq!(
                        parts[0].as_ref(),
                        Some(&want),
                        "{case} (synced: {on_sync}, weighted: {weighted}) at P = {procs}"
                    );
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn process_zero_assembles_the_serial_wait_states() {
    let mut with_roots = 0;
    for case in CASES {
        let dir = synced_copy(case, "states");
        for on_sync in [false, true] {
            let trace = Trace::open(&dir).unwrap();
            let m = Messages::build(&trace);
            let synced = on_sync.then(|| Synced::load(&trace).unwrap().unwrap());
            let times = Times {
                trace: &trace,
                synced: synced.as_ref(),
            };
            let mut found = waits::find(&trace, &m, &collective::instances(&trace), &times);
            found.sort_by_key(|w| (w.at.rank, w.at.thread, w.at.index));
            let want = serde_json::to_value(waits::states(&trace, &times, &found)).unwrap();
            with_roots += usize::from(!want["root_causes"].as_array().unwrap().is_empty());
            for procs in 1..=4 {
                let parts = Threads::run(procs, |f| {
                    let b = block::open(f, &dir).unwrap();
                    let bm = messages::build(f, &b);
                    let is = insts::gather(f, &b.trace);
                    let synced = on_sync.then(|| Synced::load(&b.trace).unwrap().unwrap());
                    let times = Times {
                        trace: &b.trace,
                        synced: synced.as_ref(),
                    };
                    let w = pmtrace_parallel::waits::find(f, &b, &bm, &is, &times);
                    pmtrace_parallel::waits::states(f, &b, &times, &w)
                        .map(|s| serde_json::to_value(s).unwrap())
                });
                assert_eq!(
                    parts[0].as_ref(),
                    Some(&want),
                    "{case} (synced: {on_sync}) at P = {procs}"
                );
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
    assert!(with_roots >= 10, "{with_roots} cases with root causes");
}

#[test]
fn the_whole_report_over_blocks_is_the_serial_report() {
    use pmtrace_parallel::{insts, report};
    use pmtrace_report::{Report, ReportOptions};
    for case in CASES {
        let dir = synced_copy(case, "report");
        for on_sync in [false, true] {
            let trace = Trace::open(&dir).unwrap();
            let m = Messages::build(&trace);
            let synced = on_sync.then(|| Synced::load(&trace).unwrap().unwrap());
            let options = ReportOptions {
                mu_ns: 100,
                ..ReportOptions::default()
            };
            let mut want = Report::build_on(&trace, &m, options, synced.as_ref());
            if let Some(s) = &synced {
                want = want.with_sync(&trace, &m, s);
            }
            let want = serde_json::to_string_pretty(&want).unwrap();
            for procs in 1..=4 {
                let got = Threads::run(procs, |f| {
                    let b = block::open(f, &dir).unwrap();
                    let bm = messages::build(f, &b);
                    let is = insts::gather(f, &b.trace);
                    let synced = on_sync.then(|| Synced::load(&b.trace).unwrap().unwrap());
                    report::build(f, &b, &bm, &is, synced.as_ref(), 100)
                        .map(|r| serde_json::to_string_pretty(&r).unwrap())
                });
                assert_eq!(
                    got[0].as_deref(),
                    Some(want.as_str()),
                    "{case} (synced: {on_sync}) at P = {procs}"
                );
                assert!(got[1..].iter().all(Option::is_none));
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
