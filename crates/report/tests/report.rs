//! The report (profile, matrix, counts) and the text export.

use pmtrace_export::text;
use pmtrace_fixture::{self as fixture, TraceBuilder};
use pmtrace_format::record::Payload;
use pmtrace_matching::Messages;
use pmtrace_report::Report;
use pmtrace_report::ReportOptions;
use pmtrace_report::{FunctionStats, MatrixCell};
use pmtrace_trace::Trace;

use crate::util::Scratch;

fn brief_report(options: ReportOptions) -> (Trace, Report) {
    let scratch = Scratch::new("report");
    fixture::two_rank_example().write(scratch.path()).unwrap();
    let trace = Trace::open(scratch.path()).unwrap();
    let report = Report::build(&trace, &Messages::build(&trace), options);
    (trace, report)
}

fn stats(calls: u64, total_ns: u64, bytes: u64) -> FunctionStats {
    FunctionStats {
        calls,
        total_ns,
        mean_ns: total_ns as f64 / calls as f64,
        bytes,
    }
}

#[test]
fn report_counts_events_messages_and_violations() {
    let (_, r) = brief_report(ReportOptions::default());
    assert_eq!(r.ranks, 2);
    assert_eq!(r.events, 12);
    let m = &r.messages;
    assert_eq!((m.sent, m.received, m.matched, m.unmatched), (4, 4, 4, 0));
    assert_eq!(m.bytes, 52);
    assert_eq!(
        (r.violations.reversed, r.violations.clock_condition),
        (1, 1)
    );
    assert!(r.incomplete_ranks.is_empty());
    assert_eq!(r.violations_after_sync, None);
}

#[test]
fn profile_attributes_bytes_to_the_calls_that_moved_them() {
    let (_, r) = brief_report(ReportOptions::default());
    assert_eq!(r.functions["MPI_Isend"], stats(3, 6, 48));
    assert_eq!(r.functions["MPI_Irecv"], stats(3, 3, 0));
    // Rank 0's Waitall completes sends (no bytes), rank 1's three receives.
    assert_eq!(r.functions["MPI_Waitall"], stats(2, 10 + 50, 48));
    assert_eq!(r.functions["MPI_Send"], stats(1, 10, 4));
    assert_eq!(r.functions["MPI_Recv"], stats(1, 40, 4));
    assert_eq!(r.functions["MPI_Comm_split"], stats(2, 20, 0));
    assert_eq!(r.functions.len(), 6);
    assert_eq!(r.per_rank[1].functions["MPI_Waitall"], stats(1, 50, 48));
    assert_eq!(
        r.matrix,
        vec![MatrixCell {
            src: 0,
            dst: 1,
            count: 4,
            bytes: 52
        }]
    );
}

#[test]
fn json_has_the_stable_keys() {
    let (_, r) = brief_report(ReportOptions {
        mu_ns: 5,
        ..ReportOptions::default()
    });
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["ranks"], 2);
    assert_eq!(v["events"], 12);
    assert_eq!(v["messages"]["sent"], 4);
    assert_eq!(v["messages"]["received"], 4);
    assert_eq!(v["messages"]["matched"], 4);
    assert_eq!(v["messages"]["unmatched"], 0);
    assert_eq!(v["violations"]["reversed"], 1);
    assert_eq!(v["violations"]["clock_condition"], 1);
    assert_eq!(v["violations"]["mu_ns"], 5);
    assert!(v["violations_after_sync"].is_null());
    assert_eq!(v["functions"]["MPI_Isend"]["calls"], 3);
    assert_eq!(v["functions"]["MPI_Isend"]["total_ns"], 6);
    assert_eq!(v["clocks"]["mode"], "none");
    assert!(v["sync"].is_null());
    assert_eq!(v["matrix"][0]["count"], 4);
}

#[test]
fn text_report_lists_profile_and_violations() {
    let (_, r) = brief_report(ReportOptions::default());
    let mut out = Vec::new();
    r.write_text(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("events         12 MPI calls"), "{text}");
    assert!(
        text.contains("sent 4, received 4, matched 4, unmatched 0"),
        "{text}"
    );
    assert!(
        text.contains("reversed messages (received before sent)     1"),
        "{text}"
    );
    // Sorted by total time: Waitall (60 ns) first.
    let profile = text.split("Profile").nth(1).unwrap();
    assert!(
        profile
            .lines()
            .nth(2)
            .unwrap()
            .trim_start()
            .starts_with("MPI_Waitall"),
        "{profile}"
    );
}

#[test]
fn text_export_writes_one_line_per_record_in_time_order() {
    let (trace, _) = brief_report(ReportOptions::default());
    let mut out = Vec::new();
    let lines = text::write(&trace, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    // 12 calls + 3 communicator definitions per rank.
    assert_eq!(lines, 18);
    assert_eq!(text.lines().count(), 18);
    let times: Vec<u64> = text
        .lines()
        .map(|l| l.split(' ').nth(2).unwrap().parse().unwrap())
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "merged in time order"
    );
    assert!(
        text.contains("\nr0 t0 100 +2 MPI_Isend peer=1 tag=5 comm=0 bytes=8 op=0.1\n"),
        "{text}"
    );
    assert!(text.contains("r1 t0 150 +50 MPI_Waitall done=0.1:[src=0,bytes=8],0.2:[src=0,bytes=16],0.3:[src=0,bytes=24]\n"), "{text}");
    assert!(text.contains("r1 t0 30 +0 DefComm index=2 global=0x2 inter=0 size=2 rank=0 remote_size=0 members=1,0\n"), "{text}");
}

#[test]
fn each_start_of_a_persistent_collective_is_an_instance_of_its_own() {
    use pmtrace_matching::collective;
    let mut tb = TraceBuilder::new(2);
    for r in 0..2u32 {
        tb.rank(r).define_world_and_self(0);
        let th = tb.rank(r).thread(0);
        let init = th.next_op();
        th.call("MPI_Allreduce_init", 10, 11, {
            let mut c = fixture::coll(0, None, 8, 8, 0);
            if let Payload::Coll { op, .. } = &mut c {
                *op = Some(init);
            }
            c
        });
        // A blocking collective between the starts keeps its own number.
        th.call("MPI_Barrier", 20, 25, fixture::coll(0, None, 0, 0, 1));
        for k in 0..3u64 {
            let t = 100 * (k + 1) + u64::from(r) * 10;
            let inst = th.next_op();
            th.call("MPI_Start", t, t + 1, fixture::start(&[init]));
            th.call(
                "MPI_Wait",
                t + 5,
                t + 30,
                fixture::complete(&[(inst, fixture::no_status())]),
            );
        }
    }
    let scratch = Scratch::new("persistent-coll");
    tb.write(scratch.path()).unwrap();
    let trace = Trace::open(scratch.path()).unwrap();
    let insts = collective::instances(&trace);
    // The barrier and three allreduce instances, each with both members.
    assert_eq!(insts.len(), 4);
    for inst in &insts {
        assert!(inst.members.iter().all(Option::is_some));
    }
    let call = |at| match trace.record(at) {
        Some(pmtrace_trace::Record::Call(c)) => c,
        other => panic!("not a call: {other:?}"),
    };
    let enters: Vec<Vec<u64>> = insts[1..]
        .iter()
        .map(|i| {
            i.members
                .iter()
                .map(|m| call(m.unwrap().enter).t_start)
                .collect()
        })
        .collect();
    assert_eq!(enters, vec![vec![100, 110], vec![200, 210], vec![300, 310]]);
    let exits: Vec<u64> = insts[1..]
        .iter()
        .map(|i| call(i.members[0].unwrap().exit.unwrap()).t_end)
        .collect();
    assert_eq!(exits, vec![130, 230, 330]);
    // Bytes count at the starts, not at the init.
    let report = Report::build(&trace, &Messages::build(&trace), Default::default());
    let f = &report.functions;
    assert_eq!(f["MPI_Allreduce_init"].bytes, 0);
    assert_eq!(f["MPI_Start"].bytes, 3 * 2 * 16);
}

/// Issue 19: nonblocking requests never completed nor freed are listed
/// with the call that made them; completed, freed and never-started
/// persistent requests are not.
#[test]
fn never_completed_requests_are_listed_with_their_calls() {
    let scratch = Scratch::new("pending");
    let mut tb = TraceBuilder::new(2);
    for r in 0..2 {
        tb.rank(r).define_world_and_self(0);
    }
    let any = pmtrace_format::meta::MpiConstants::OPEN_MPI.any_source;
    let none = fixture::no_status();
    let t = tb.rank(0).thread(0);
    let a = t.next_op();
    t.call("MPI_Isend", 100, 101, fixture::send(1, 5, 0, 8)); // completed
    t.call("MPI_Isend", 102, 103, fixture::send(1, 6, 0, 8)); // pending
    t.call("MPI_Wait", 110, 111, fixture::complete(&[(a, none)]));
    let c = t.next_op();
    t.call("MPI_Irecv", 120, 121, fixture::irecv(any, 7, 0, 8)); // freed
    t.call(
        "MPI_Request_free",
        122,
        123,
        Payload::OpRef {
            op: Some(c),
            cancelled: false,
        },
    );
    t.call("MPI_Irecv", 130, 131, fixture::irecv(1, 8, 0, 8)); // pending
    t.call("MPI_Send_init", 140, 141, fixture::send(1, 9, 0, 8)); // never started
    let f = t.next_op();
    t.call("MPI_Recv_init", 150, 151, fixture::irecv(1, 10, 0, 8));
    t.call("MPI_Start", 152, 153, fixture::start(&[f])); // its instance pending
    let g = t.next_op();
    t.call("MPI_Ibarrier", 160, 161, fixture::coll(0, None, 0, 0, 1)); // completed
    t.call("MPI_Wait", 162, 163, fixture::complete(&[(g, none)]));
    t.call("MPI_Iallreduce", 170, 171, fixture::coll(0, None, 8, 8, 2)); // pending
    tb.write(scratch.path()).unwrap();
    let trace = Trace::open(scratch.path()).unwrap();
    let r = Report::build(&trace, &Messages::build(&trace), ReportOptions::default());
    let m = &r.messages;
    assert_eq!(m.pending_requests, 4);
    type Seen<'a> = (&'a str, &'a str, u64, Option<i32>, Option<u32>, Option<i32>);
    let got: Vec<Seen> = m
        .pending_first
        .iter()
        .map(|p| {
            (
                p.kind,
                p.function.as_str(),
                p.time_ns,
                p.peer,
                p.peer_world,
                p.tag,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("send", "MPI_Isend", 102, Some(1), Some(1), Some(6)),
            ("receive", "MPI_Irecv", 130, Some(1), Some(1), Some(8)),
            ("receive", "MPI_Start", 152, Some(1), Some(1), Some(10)),
            ("collective", "MPI_Iallreduce", 170, None, None, None),
        ]
    );
    let world = m.pending_first[0].comm.expect("the world's id");
    assert!(m
        .pending_first
        .iter()
        .all(|p| p.rank == 0 && p.thread == 0 && p.comm == Some(world)));
    // Positions count the thread's records, its two communicator definitions first.
    let positions: Vec<u32> = m.pending_first.iter().map(|p| p.position).collect();
    assert_eq!(positions, vec![3, 7, 10, 13]);
    // All of them, each at the call that made it.
    let all = pmtrace_report::requests::pending_all(&trace);
    assert_eq!(all, m.pending_first);
    for p in &all {
        let call = trace.held(0).call_at(p.at()).expect("a call");
        assert_eq!(call.t_start, p.time_ns);
    }
    let mut text = Vec::new();
    r.write_text(&mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.contains("4 nonblocking requests were never completed nor freed"),
        "{text}"
    );
    assert!(
        text.contains("never completed: receive MPI_Start peer 1 tag 10"),
        "{text}"
    );
}

/// Issue 19: Jiang's metrics over the application's work (last end of
/// MPI_Init to first start of MPI_Finalize), on a hand-built trace whose
/// computation is known: window 20..105 (T = 85 ns); rank 0 computes
/// 10 + 20 + 5 = 35 ns, rank 1 5 + 50 + 5 = 60 ns.
#[test]
fn metrics_follow_the_computation_of_each_rank() {
    let scratch = Scratch::new("metrics");
    let mut tb = TraceBuilder::new(2);
    for r in 0..2 {
        tb.rank(r).define_world_and_self(0);
    }
    let none = Payload::None;
    let got = fixture::status(0, 4, 8);
    tb.rank(0)
        .thread(0)
        .call("MPI_Init", 0, 10, none.clone())
        .call("MPI_Send", 30, 40, fixture::send(1, 4, 0, 8))
        .call("MPI_Barrier", 60, 100, fixture::coll(0, None, 0, 0, 1))
        .call("MPI_Finalize", 110, 120, none.clone());
    tb.rank(1)
        .thread(0)
        .call("MPI_Init", 0, 20, none.clone())
        .call("MPI_Recv", 25, 40, fixture::recv(0, 4, 0, 8, got))
        .call("MPI_Barrier", 90, 100, fixture::coll(0, None, 0, 0, 1))
        .call("MPI_Finalize", 105, 115, none);
    tb.write(scratch.path()).unwrap();
    let trace = Trace::open(scratch.path()).unwrap();
    let r = Report::build(&trace, &Messages::build(&trace), ReportOptions::default());
    let m = r.metrics.expect("metrics");
    assert_eq!((m.from_ns, m.to_ns, m.total_ns), (20, 105, 85));
    let per_rank: Vec<(u64, u64)> = m
        .per_rank
        .iter()
        .map(|p| (p.computation_ns, p.mpi_ns))
        .collect();
    assert_eq!(per_rank, vec![(35, 50), (60, 25)]);
    assert_eq!((m.computation_ns, m.mpi_ns), (95, 75));
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(close(m.speedup, 95.0 / 85.0), "{}", m.speedup);
    assert!(close(m.efficiency, 95.0 / 170.0));
    assert!(close(m.computation_to_communication, 95.0 / 75.0));
    assert!(close(m.load_imbalance, 60.0 / 47.5 - 1.0));
    // The profile: 100 bins of 0.85 ns; its integral is the computation.
    assert_eq!(m.parallelism.len(), 100);
    assert!(close(m.bin_ns, 0.85));
    let integral: f64 = m.parallelism.iter().sum::<f64>() * m.bin_ns;
    assert!((integral - 95.0).abs() < 1e-6, "{integral}");
    // 20..20.85: both compute; 32.75..33.6: both in MPI; 54..54.85: both
    // compute; 88..88.85: rank 0 in the barrier, rank 1 computing.
    let at = |bin: usize| m.parallelism[bin];
    assert!(close(at(0), 2.0) && close(at(15), 0.0) && close(at(40), 2.0) && close(at(80), 1.0));
    // The wait states of the same trace: rank 0 entered the barrier at 60,
    // rank 1 (the last) at 90: 30 ns at the barrier, charged to rank 1; rank
    // 1's receive began at 25, before the send (30): 5 ns of late sender.
    let ws = r.wait_states.expect("wait states");
    let kinds: Vec<(&str, u64)> = ws.by_kind.iter().map(|k| (k.kind, k.ns)).collect();
    assert_eq!(kinds, vec![("late_sender", 5), ("wait_at_barrier", 30)]);
    let causes: Vec<(&str, u32, &str, u64)> = ws
        .causes
        .iter()
        .map(|c| (c.kind, c.rank, c.function.as_str(), c.ns))
        .collect();
    assert_eq!(
        causes,
        vec![
            ("wait_at_barrier", 1, "MPI_Barrier", 30),
            ("late_sender", 0, "MPI_Send", 5)
        ]
    );
    // The critical path, back from rank 0's MPI_Finalize (the last, at 110;
    // the window ends at 105): rank 0 computes 100..105 and leaves its
    // barrier at 100 having waited for rank 1 until 90; rank 1 computes
    // 40..90 and leaves its receive at 40 having waited for the send until
    // 30; rank 0 computes 20..30 (the window's start).
    let cp = r.critical_path.expect("critical path");
    assert_eq!((cp.length_ns, cp.hops), (85, 2));
    let ranks: Vec<(u32, u64)> = cp.by_rank.iter().map(|s| (s.rank.unwrap(), s.ns)).collect();
    assert_eq!(ranks, vec![(1, 60), (0, 25)]);
    let activities: Vec<(&str, u64)> = cp
        .by_activity
        .iter()
        .map(|s| (s.name.as_deref().unwrap(), s.ns))
        .collect();
    assert_eq!(
        activities,
        vec![("computation", 65), ("MPI_Barrier", 10), ("MPI_Recv", 10)]
    );
    let segments: Vec<(u32, &str, u64, u64)> = cp
        .segments
        .iter()
        .map(|s| (s.rank, s.activity.as_str(), s.from_ns, s.to_ns))
        .collect();
    assert_eq!(
        segments,
        vec![
            (1, "computation", 40, 90),
            (0, "computation", 20, 30),
            (1, "MPI_Recv", 30, 40),
            (0, "MPI_Barrier", 90, 100),
            (0, "computation", 100, 105),
        ]
    );
}

/// A run where the weighted critical path and the plain one part ways.
/// Rank 0 sets up alone for 100 ns while ranks 1 and 2 wait at a barrier;
/// then all compute; at the end rank 1 sends to rank 0 (9 ns late) and to
/// rank 2 (3 ns late). The plain path follows the late rank back and so
/// runs mostly on rank 1. The weighted path (Jiang) weighs rank 0's
/// set-up most: one rank of three computed then.
#[test]
fn the_weighted_critical_path_weighs_work_done_while_others_idle() {
    let scratch = Scratch::new("weighted");
    let mut tb = TraceBuilder::new(3);
    for r in 0..3 {
        tb.rank(r).define_world_and_self(0);
    }
    let none = Payload::None;
    let barrier = fixture::coll(0, None, 0, 0, 0);
    tb.rank(0)
        .thread(0)
        .call("MPI_Init", 0, 10, none.clone())
        .call("MPI_Barrier", 110, 111, barrier.clone())
        .call(
            "MPI_Recv",
            300,
            311,
            fixture::recv(1, 0, 0, 8, fixture::status(1, 0, 8)),
        )
        .call("MPI_Finalize", 320, 330, none.clone());
    tb.rank(1)
        .thread(0)
        .call("MPI_Init", 0, 10, none.clone())
        .call("MPI_Barrier", 10, 111, barrier.clone())
        .call("MPI_Send", 309, 310, fixture::send(0, 0, 0, 8))
        .call("MPI_Send", 315, 316, fixture::send(2, 0, 0, 8))
        .call("MPI_Finalize", 320, 330, none.clone());
    tb.rank(2)
        .thread(0)
        .call("MPI_Init", 0, 10, none.clone())
        .call("MPI_Barrier", 10, 111, barrier)
        .call(
            "MPI_Recv",
            312,
            317,
            fixture::recv(1, 0, 0, 8, fixture::status(1, 0, 8)),
        )
        .call("MPI_Finalize", 320, 330, none);
    tb.write(scratch.path()).unwrap();
    let trace = Trace::open(scratch.path()).unwrap();
    let options = ReportOptions {
        weighted: true,
        ..ReportOptions::default()
    };
    let r = Report::build(&trace, &Messages::build(&trace), options);
    let plain = r.critical_path.expect("a critical path");
    let ns = |v: &[pmtrace_report::critical::Share]| -> Vec<(u32, u64)> {
        v.iter().map(|s| (s.rank.unwrap(), s.ns)).collect()
    };
    // Plain: rank 0 9 + 2 (the receive after it stopped waiting), rank 1
    // 198 + 1 (the barrier after rank 0 came), rank 0's set-up 100.
    assert_eq!(
        (plain.from_ns, plain.to_ns, plain.length_ns),
        (10, 320, 310)
    );
    assert_eq!(ns(&plain.by_rank), vec![(1, 199), (0, 111)]);
    // Weighted: w = Δt(1 + (1 − P)·2), P the share of the 3 ranks computing.
    // Rank 0's set-up: 100 ns at P = 1/3, 233.33; rank 1 from the barrier
    // to the end: 221 (waiting and messages weigh nothing).
    let w = plain.weighted.as_ref().expect("the weighted path");
    let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
    assert!(
        close(w.weight_ns.unwrap(), 454.0 + 1.0 / 3.0),
        "{:?}",
        w.weight_ns
    );
    let weights: Vec<(u32, u64, f64)> = w
        .by_rank
        .iter()
        .map(|s| (s.rank.unwrap(), s.ns, s.weight.unwrap()))
        .collect();
    assert_eq!((weights[0].0, weights[0].1), (0, 100));
    assert!(close(weights[0].2, 700.0 / 3.0), "{weights:?}");
    assert_eq!((weights[1].0, weights[1].1), (1, 210));
    assert!(close(weights[1].2, 221.0), "{weights:?}");
    assert!(close(
        w.by_rank[0].share,
        (700.0 / 3.0) / (454.0 + 1.0 / 3.0)
    ));
    let activities: Vec<(&str, f64)> = w
        .by_activity
        .iter()
        .map(|s| (s.name.as_deref().unwrap(), s.weight.unwrap()))
        .collect();
    assert_eq!(activities.len(), 3, "{activities:?}");
    assert_eq!(activities[0].0, "computation");
    assert!(close(activities[0].1, 449.0 + 2.0 / 3.0), "{activities:?}");
    assert_eq!(activities[1].0, "MPI_Send");
    assert!(close(activities[1].1, 14.0 / 3.0), "{activities:?}");
    assert_eq!((activities[2].0, activities[2].1), ("MPI_Barrier", 0.0));
    assert_eq!(w.dropped_edges, Some(0));
    assert_eq!(
        plain.differences[1],
        "The plain path runs longest on rank 1 (64% of its length), the weighted path weighs rank 0 most (51% of its weight, 1.0 of 3 ranks computing meanwhile)."
    );
}
