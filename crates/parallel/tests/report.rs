//! The report's plain parts over blocks of the golden traces at P = 1..4
//! on threads: process 0 assembles the serial profile, messages, matrix,
//! counts and lists.

mod common;
use common::*;

use pmtrace_matching::Messages;
use pmtrace_parallel::fabric::Threads;
use pmtrace_parallel::{block, insts, messages};
use pmtrace_report::times::Times;
use pmtrace_report::{Report, ReportOptions};
use pmtrace_trace::Trace;
use serde_json::json;

#[test]
fn process_zero_assembles_the_serial_plain_parts() {
    for case in CASES {
        let dir = copy(case, "report");
        let trace = Trace::open(&dir).unwrap();
        let m = Messages::build(&trace);
        let mu_ns = 250;
        let options = ReportOptions {
            mu_ns,
            ..ReportOptions::default()
        };
        let r = Report::build(&trace, &m, options);
        let want = json!({
            "events": r.events,
            "messages": r.messages,
            "violations": r.violations,
            "collectives": r.collectives,
            "functions": r.functions,
            "per_rank": r.per_rank,
            "matrix": r.matrix,
            "bytes_total": r.bytes_total,
            "bytes_payload": r.bytes_payload,
            "incomplete_ranks": r.incomplete_ranks,
            "excluded_calls": r.excluded_calls,
            "paused_calls": r.paused_calls,
            "run": r.run,
            "warnings": r.warnings,
        });
        for procs in 1..=4 {
            let parts = Threads::run(procs, |f| {
                let b = block::open(f, &dir).unwrap();
                let bm = messages::build(f, &b);
                let is = insts::gather(f, &b.trace);
                let times = Times {
                    trace: &b.trace,
                    synced: None,
                };
                pmtrace_parallel::report::plain(f, &b, &bm, &is, &times, mu_ns).map(|p| {
                    let p = p.into_report(b.trace.world_size, &b.trace.dir);
                    json!({
                        "events": p.events,
                        "messages": p.messages,
                        "violations": p.violations,
                        "collectives": p.collectives,
                        "functions": p.functions,
                        "per_rank": p.per_rank,
                        "matrix": p.matrix,
                        "bytes_total": p.bytes_total,
                        "bytes_payload": p.bytes_payload,
                        "incomplete_ranks": p.incomplete_ranks,
                        "excluded_calls": p.excluded_calls,
                        "paused_calls": p.paused_calls,
                        "run": p.run,
                        "warnings": p.warnings,
                    })
                })
            });
            assert_eq!(parts[0].as_ref(), Some(&want), "{case} at P = {procs}");
            assert!(parts[1..].iter().all(Option::is_none));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn the_violations_left_after_sync_are_the_serial_ones() {
    use pmtrace_sync::{self as sync, SyncParams, Synced};
    let mut counted = 0;
    for case in CASES {
        let dir = copy(case, "after-sync");
        let trace = Trace::open(&dir).unwrap();
        let m = Messages::build(&trace);
        sync::sync(&trace, &m, &SyncParams::default())
            .write(&trace)
            .unwrap();
        // A μ far above the sync's, so that the clock condition counts.
        let wide = |mut s: Synced| {
            s.report.params.mu_intra_ns = 20_000;
            s.report.params.mu_inter_ns = 20_000;
            s
        };
        let synced = wide(Synced::load(&trace).unwrap().unwrap());
        let want = Report::build(&trace, &m, ReportOptions::default())
            .with_sync(&trace, &m, &synced)
            .violations_after_sync
            .unwrap();
        for procs in 1..=4 {
            let got = Threads::run(procs, |f| {
                let b = block::open(f, &dir).unwrap();
                let bm = messages::build(f, &b);
                let synced = wide(Synced::load(&b.trace).unwrap().unwrap());
                pmtrace_parallel::report::after_sync(f, &b, &bm, &synced)
            });
            assert!(got.iter().all(|v| *v == want), "{case} at P = {procs}");
        }
        counted += u64::from(want.clock_condition > 0 || want.collective_clock_condition > 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
    assert!(counted >= 2, "{counted} cases with clock conditions broken");
}

#[test]
fn receives_matched_by_id_and_senders_clocks_are_counted_as_serially() {
    use pmtrace_matching::clocks;
    let mut with_ids = 0;
    for case in CASES {
        let dir = copy(case, "ids");
        let trace = Trace::open(&dir).unwrap();
        let m = Messages::build(&trace);
        let report = clocks::compute(&trace, &m).report;
        let decreasing = clocks::decreasing_by_sender(clocks::by_sender(m.recvs.iter()));
        for procs in 1..=4 {
            let got = Threads::run(procs, |f| {
                let b = block::open(f, &dir).unwrap();
                let bm = messages::build(f, &b);
                pmtrace_parallel::clocks::ids(f, &b, &bm)
            });
            for ids in got {
                if report.mode != "none" {
                    assert_eq!(
                        ids.checks.matched_by_id, report.matched_by_id,
                        "{case} at P = {procs}"
                    );
                    assert_eq!(ids.checks.unmatched_by_id, report.unmatched_by_id, "{case}");
                    assert_eq!(
                        ids.checks.fifo_disagreements, report.fifo_disagreements,
                        "{case}"
                    );
                    assert_eq!(ids.checks.fifo_unordered, report.fifo_unordered, "{case}");
                }
                assert_eq!(
                    ids.decreasing_by_sender, decreasing,
                    "{case} at P = {procs}"
                );
            }
        }
        with_ids += u64::from(report.matched_by_id > 0 && report.unmatched_by_id > 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
    assert!(
        with_ids >= 1,
        "a case with receives matched by id and without"
    );
}

#[test]
fn the_clock_replay_over_blocks_gives_the_serial_clock_report() {
    use pmtrace_matching::clocks;
    let check = |dir: &std::path::Path, procs: std::ops::RangeInclusive<usize>| {
        let trace = Trace::open(dir).unwrap();
        let m = Messages::build(&trace);
        let want = clocks::compute(&trace, &m).report;
        for p in procs {
            let got = Threads::run(p, |f| {
                let b = block::open(f, dir).unwrap();
                let bm = messages::build(f, &b);
                pmtrace_parallel::clocks::report(f, &b, &bm)
            });
            for r in got {
                assert_eq!(r, want, "{} at P = {p}", dir.display());
            }
        }
        want
    };
    let (mut vector, mut threads) = (0, 0);
    for case in CASES {
        let dir = copy(case, "clocks");
        let want = check(&dir, 1..=4);
        vector += u64::from(want.happens_before.is_some());
        threads += u64::from(want.wire_checked < want.matched_by_id);
        // Every matched piggyback is checked or counted as left out.
        assert_eq!(
            want.wire_checked + want.wire_unchecked,
            want.matched_by_id,
            "{}",
            dir.display()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
    assert!(vector >= 1, "a case with the happens-before check");
    assert!(
        threads >= 1,
        "a case with threads left out of the wire check"
    );
    // A simulated run with wildcard receives and collectives, whole and
    // with rank 5 cut short: its clocks are forced past what never came.
    let dir = synth(12, 40, None, "clocks");
    let want = check(&dir, 1..=5);
    assert_eq!(
        (want.matched_by_id, want.forced, want.lamport_violations),
        (1450, 0, 0)
    );
    let dir = synth(12, 40, Some(5), "clocks");
    let want = check(&dir, 1..=5);
    assert_eq!(want.matched_by_id, 1367);
    assert!(want.forced > 100 && want.lamport_violations > 10 && want.wire_mismatches > 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn races_over_blocks_are_the_serial_races_in_both_clock_modes() {
    use pmtrace_matching::clocks::RaceClocks;
    use pmtrace_report::races::{self, Races};
    let serial = |dir: &std::path::Path, vector: bool| {
        let trace = Trace::open(dir).unwrap();
        let m = Messages::build(&trace);
        let wild = races::wildcards(&trace, &m);
        let probed = races::probed_receives(&m, &wild);
        let clocks = RaceClocks::compute(&trace, &m, vector, &probed);
        let r = Races::build(&trace, &m, &wild, &clocks);
        (serde_json::to_string_pretty(&r).unwrap(), r.racy_receives)
    };
    let check = |dir: &std::path::Path, procs: std::ops::RangeInclusive<usize>| {
        let mut racy = 0;
        for vector in [false, true] {
            let (want, n) = serial(dir, vector);
            racy += n;
            for p in procs.clone() {
                let got = Threads::run(p, |f| {
                    let b = block::open(f, dir).unwrap();
                    let bm = messages::build(f, &b);
                    pmtrace_parallel::races::find(f, &b, &bm, vector)
                        .map(|r| serde_json::to_string_pretty(&r).unwrap())
                });
                assert_eq!(
                    got[0].as_deref(),
                    Some(want.as_str()),
                    "{} (vector: {vector}) at P = {p}",
                    dir.display()
                );
            }
        }
        racy
    };
    let mut racy = 0;
    for case in CASES {
        let dir = copy(case, "races");
        racy += check(&dir, 1..=4);
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // A simulated run: every fourth iteration, each row's first rank takes
    // one message from every other member with MPI_ANY_SOURCE.
    let dir = synth(12, 40, None, "races");
    let n = check(&dir, 1..=5);
    assert!(n > 10, "{n} racy receives in the simulated run");
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(racy > 0, "racy receives in the goldens");
}
