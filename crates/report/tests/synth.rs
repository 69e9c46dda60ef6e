//! The simulated traces of `pmtrace_synth` read, matched, checked
//! and synchronized like recorded ones, against their known truth.

use pmtrace_matching::Messages;
use pmtrace_report::Report;
use pmtrace_report::ReportOptions;
use pmtrace_sync::SyncParams;
use pmtrace_synth::{self as synth, SynthSpec};
use pmtrace_trace::Trace;

use crate::util::Scratch;

#[test]
fn a_synthesized_trace_matches_keeps_its_clocks_and_syncs_without_violations() {
    let dir = Scratch::new("synth16");
    let spec = SynthSpec {
        iterations: 8,
        hosts: 2,
        ..SynthSpec::new(16)
    };
    let truth = synth::write(dir.path(), &spec).unwrap();
    let trace = Trace::open(dir.path()).unwrap();
    assert!(trace.all_warnings().is_empty());
    assert_eq!(trace.events(), truth.events);
    let m = Messages::build(&trace);
    let report = Report::build(&trace, &m, ReportOptions::default());
    // 4×4 grid: 48 neighbour pairs (counted from each side) × 8 iterations;
    // 2 wildcard rounds of 3 messages per row.
    assert_eq!(truth.messages, 48 * 8 + 2 * 4 * 3);
    assert_eq!(report.messages.matched, truth.messages);
    assert_eq!(report.messages.unmatched, 0);
    let clocks = report.clocks.as_ref().unwrap();
    assert_eq!(clocks.mode, "lamport");
    assert_eq!(clocks.matched_by_id, truth.messages);
    assert_eq!(clocks.fifo_disagreements, 0);
    assert_eq!(clocks.lamport_violations, 0);
    assert_eq!(clocks.wire_checked, truth.messages);
    assert_eq!(clocks.wire_mismatches, 0);
    assert_eq!(clocks.decreasing, 0);
    // The skewed clocks reverse messages as recorded; sync removes them all.
    assert!(report.violations.reversed > 0);
    let synced = pmtrace_sync::sync(&trace, &m, &SyncParams::default());
    let after = Report::build_on(&trace, &m, ReportOptions::default(), Some(&synced))
        .with_sync(&trace, &m, &synced);
    // Given the messages to drop when done, sync and the report are the same.
    let given = pmtrace_sync::sync_given(&trace, m.clone(), &SyncParams::default());
    let mut stamps = 0;
    for rank in &trace.ranks {
        for th in &rank.threads {
            for index in 0..th.records.len() as u32 {
                let at = pmtrace_trace::read::EventRef {
                    rank: rank.rank,
                    thread: th.index,
                    index,
                };
                for end in [false, true] {
                    let t = given.time(&trace, at, end);
                    assert_eq!(t, synced.time(&trace, at, end));
                    stamps += usize::from(t.is_some());
                }
            }
        }
    }
    let records: usize = trace
        .ranks
        .iter()
        .flat_map(|r| &r.threads)
        .map(|t| t.records.len())
        .sum();
    assert_eq!(stamps, 2 * records);
    let weighted = ReportOptions {
        weighted: true,
        insight: true,
        ..ReportOptions::default()
    };
    for options in [ReportOptions::default(), weighted] {
        let lent =
            Report::build_on(&trace, &m, options, Some(&synced)).with_sync(&trace, &m, &synced);
        let given = Report::build_given(&trace, m.clone(), options, Some(&synced));
        assert!(given.critical_path.is_some() && given.violations_after_sync.is_some());
        assert_eq!(given, lent);
        let plain = Report::build_given(&trace, m.clone(), options, None);
        assert_eq!(plain, Report::build(&trace, &m, options));
        // The path alone is the same path.
        let path_only = ReportOptions {
            path_only: true,
            ..options
        };
        let path = Report::build_given(&trace, m.clone(), path_only, Some(&synced));
        assert_eq!(path.critical_path, lent.critical_path);
        assert!(path.clocks.is_none() && path.wait_states.is_none());
    }
    let v = after.violations_after_sync.unwrap();
    assert_eq!(
        (
            v.reversed,
            v.clock_condition,
            v.collective_reversed,
            v.collective_clock_condition
        ),
        (0, 0, 0, 0)
    );
    // The true times are known: the error left is of the order of the
    // offset measurements' (a few µs at most), not of the offsets (ms).
    let err = synced.report.error_ns.unwrap();
    assert!(err.median < 1_000 && err.max < 20_000, "{err:?}");
    // The critical path runs through the imbalanced rank.
    let path = after.critical_path.unwrap();
    let im = truth.imbalance.unwrap();
    assert_eq!(path.time_base, "synchronized");
    assert_eq!(path.by_rank[0].rank, Some(im.rank));
    assert!(path.by_rank[0].share > 0.9, "{:?}", path.by_rank);
    // From the last end of MPI_Init to MPI_Finalize, which a final
    // Allreduce makes everyone enter within a µs: the true window, to
    // the sync's error.
    assert!(truth.finalize_spread_ns < 1_000);
    assert!(
        path.length_ns.abs_diff(truth.window_ns) < 10_000,
        "{} vs {}",
        path.length_ns,
        truth.window_ns
    );
}

/// Collective violations counted by binary search per receiver, as sync
/// counts them in instances of more than 64 members, are those counted
/// pair by pair: on the recorded (skewed) clocks of 300 ranks on 7 hosts
/// of one clock each, with μ within and across hosts.
#[test]
fn collective_violations_count_alike_by_pairs_and_by_search() {
    use pmtrace_sync::{quality, Graph};
    let dir = Scratch::new("synth300");
    let spec = SynthSpec {
        iterations: 6,
        hosts: 7,
        ..SynthSpec::new(300)
    };
    synth::write(dir.path(), &spec).unwrap();
    let trace = Trace::open(dir.path()).unwrap();
    let m = Messages::build(&trace);
    for (intra, inter) in [(0, 0), (300, 2_000), (50_000, 400_000)] {
        let g = Graph::build(&trace, &m, intra, inter);
        assert!(g.insts.iter().any(|i| i.members.len() == 300));
        let by_pairs = quality::violations_with(&g, &g.recorded(), usize::MAX);
        let by_search = quality::violations_with(&g, &g.recorded(), 0);
        assert_eq!(by_search, by_pairs, "μ {intra} / {inter}");
        assert!(by_pairs.collective_reversed > 0, "{by_pairs:?}");
        assert!(
            by_pairs.collective_clock_condition > by_pairs.collective_reversed || inter == 0,
            "{by_pairs:?}"
        );
    }
}

/// The CLC forward pass and the violation counts give the same on every
/// golden trace (real runs: ranks sharing one clock group, one host or
/// several simulated ones; barriers, rooted and scan collectives, lost
/// events) and on a simulated run of 300 ranks on 7 hosts, whether each
/// instance asks its senders one by one or takes the latest enters by
/// group, host and pair (`forward_with` 0: every instance that can).
#[test]
fn collective_shortcuts_give_what_the_pairs_give() {
    use pmtrace_sync::{clc, quality, ClcParams, Graph};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden");
    let mut dirs: Vec<std::path::PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path().join("trace")))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 10, "{dirs:?}");
    let scratch = Scratch::new("synth300b");
    let spec = SynthSpec {
        iterations: 4,
        hosts: 7,
        ..SynthSpec::new(300)
    };
    synth::write(scratch.path(), &spec).unwrap();
    dirs.push(scratch.path().to_path_buf());
    let p = ClcParams::default();
    for dir in &dirs {
        let trace = Trace::open(dir).unwrap();
        let m = Messages::build(&trace);
        for (intra, inter) in [(0, 0), (300, 2_000)] {
            let g = Graph::build(&trace, &m, intra, inter);
            let what = format!("{} at μ {intra} / {inter}", dir.display());
            let one = clc::forward_with(&g, &g.recorded(), &p, usize::MAX);
            let all = clc::forward_with(&g, &g.recorded(), &p, 0);
            assert!(one == all, "{what}: forward pass differs");
            let one = quality::violations_with(&g, &g.recorded(), usize::MAX);
            let all = quality::violations_with(&g, &g.recorded(), 0);
            assert_eq!(one, all, "{what}");
        }
    }
}
