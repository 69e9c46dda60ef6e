//! The controlled logical clock on small hand-built traces with known
//! answers (Becker et al. §3–4), and the sync pipeline around it.
//!
//! Fixture ranks each have their own host and no offsets, so every pair of
//! ranks is a different clock: μ is the inter-host latency given to the
//! graph (100 ns here). Records 0 and 1 of every rank define the
//! communicators; calls start at record 2.

use pmtrace_fixture::{coll, recv, send, status, TraceBuilder};
use pmtrace_format::record::Payload;
use pmtrace_matching::Messages;
use pmtrace_sync::{clc, ClcParams, Graph, SyncParams, Synced};
use pmtrace_trace::Trace;

use crate::util::Scratch;

const MU: u64 = 100;

/// (start, end) of every record of thread 0, per rank.
type Times = Vec<Vec<(u64, u64)>>;

fn open(tb: &TraceBuilder, name: &str) -> (Scratch, Trace) {
    let dir = Scratch::new(name);
    tb.write(dir.path()).unwrap();
    let trace = Trace::open(dir.path()).unwrap();
    (dir, trace)
}

fn by_rank(g: &Graph, t: Vec<Vec<u64>>) -> Times {
    let by_pos = g.by_position(t);
    let mut out = vec![Vec::new(); g.locs.iter().map(|l| l.rank as usize + 1).max().unwrap()];
    for (loc, ts) in g.locs.iter().zip(by_pos) {
        out[loc.rank as usize] = ts.chunks(2).map(|c| (c[0], c[1])).collect();
    }
    out
}

/// CLC times (forward only, or forward and backward).
fn clc_times(tb: &TraceBuilder, p: ClcParams, backward: bool) -> (Times, Times) {
    let (_dir, trace) = open(tb, "clc");
    let m = Messages::build(&trace);
    let g = Graph::build(&trace, &m, MU, MU);
    let t = if backward {
        clc::run(&g, &g.recorded(), &p).0
    } else {
        clc::forward(&g, &g.recorded(), &p).0
    };
    let raw = (0..g.locs.len() as u32)
        .map(|l| (0..g.len(l) as u32).map(|k| g.raw(l, k)).collect())
        .collect();
    (by_rank(&g, raw), by_rank(&g, t))
}

fn world(n: u32) -> TraceBuilder {
    let mut tb = TraceBuilder::new(n);
    for r in 0..n {
        tb.rank(r).define_world_and_self(0);
    }
    tb
}

fn plain() -> Payload {
    Payload::None
}

/// Rank 0 sends at 1000; rank 1's receive of it ends at 950.
fn one_reversed_message() -> TraceBuilder {
    let mut tb = world(2);
    tb.rank(0)
        .thread(0)
        .call("MPI_Send", 1_000, 1_010, send(1, 7, 0, 8));
    tb.rank(1)
        .thread(0)
        .call("MPI_Recv", 900, 950, recv(0, 7, 0, 8, status(0, 7, 8)));
    tb
}

#[test]
fn a_receive_before_its_send_jumps_to_the_send_plus_mu() {
    let tb = one_reversed_message();
    let (raw, t) = clc_times(&tb, ClcParams::default(), false);
    assert_eq!(raw[1][2], (900, 950));
    assert_eq!(t[1][2], (900, 1_100), "end = send start 1000 + μ 100");
    assert_eq!(t[0], raw[0], "the sender does not move");
}

#[test]
fn after_a_jump_the_clock_runs_at_gamma_until_it_meets_its_own() {
    let mut tb = world(2);
    tb.rank(0)
        .thread(0)
        .call("MPI_Send", 1_000, 1_010, send(1, 7, 0, 8));
    tb.rank(1)
        .thread(0)
        .call("MPI_Recv", 900, 950, recv(0, 7, 0, 8, status(0, 7, 8)))
        .call("MPI_Comm_rank", 1_950, 1_950, plain())
        .call("MPI_Comm_rank", 3_950, 3_950, plain())
        .call("MPI_Comm_rank", 13_950, 13_950, plain())
        .call("MPI_Comm_rank", 23_950, 23_950, plain());
    let (_, t) = clc_times(&tb, ClcParams::default(), false);
    // 1100 + 0.99·1000; + 0.99·2000; + 0.99·10000 = 13970 > 13950; then
    // 13970 + 0.99·10000 = 23870 < 23950: caught up.
    assert_eq!(t[1][3], (2_090, 2_090));
    assert_eq!(t[1][4], (4_070, 4_070));
    assert_eq!(t[1][5], (13_970, 13_970));
    assert_eq!(t[1][6], (23_950, 23_950));
}

/// Rank 1: Comm_rank 10400–10500, [Send to rank 2 at 10600–10610,]
/// Recv 10900–10950 of a message rank 0 sent at 11000.
fn ramp_trace(with_send: bool) -> TraceBuilder {
    let mut tb = world(3);
    tb.rank(0)
        .thread(0)
        .call("MPI_Send", 11_000, 11_010, send(1, 7, 0, 8));
    let r1 = tb.rank(1).thread(0);
    r1.call("MPI_Comm_rank", 10_400, 10_500, plain());
    if with_send {
        r1.call("MPI_Send", 10_600, 10_610, send(2, 3, 0, 8));
        // Received at 10730: the send may move 30 ns at most.
        tb.rank(2).thread(0).call(
            "MPI_Recv",
            10_000,
            10_730,
            recv(1, 3, 0, 8, status(1, 3, 8)),
        );
    }
    tb.rank(1).thread(0).call(
        "MPI_Recv",
        10_900,
        10_950,
        recv(0, 7, 0, 8, status(0, 7, 8)),
    );
    tb
}

#[test]
fn backward_amortization_ramps_up_to_the_jump_over_the_window() {
    let p = ClcParams {
        window_ns: Some(1_000),
        ..ClcParams::default()
    };
    let (_, t) = clc_times(&ramp_trace(false), p, true);
    // Jump 150 at 10950; window from 9950: shift = 150·(t − 9950)/1000.
    assert_eq!(t[1][2], (10_400 + 67, 10_500 + 82));
    assert_eq!(t[1][3], (10_900 + 142, 11_100));
    assert_eq!(t[1][0], (0, 0), "before the window nothing moves");
}

#[test]
fn the_backward_ramp_stops_a_send_short_of_its_receive() {
    let p = ClcParams {
        window_ns: Some(1_000),
        ..ClcParams::default()
    };
    let (raw, t) = clc_times(&ramp_trace(true), p, true);
    // The send at 10600 may move to 10730 − μ = 10630: 30 ns, and so may
    // everything before it; its end and later stamps follow the ramp.
    assert_eq!(t[1][2], (10_400 + 30, 10_500 + 30));
    assert_eq!(t[1][3], (10_600 + 30, 10_610 + 99));
    assert_eq!(t[1][4], (10_900 + 142, 11_100));
    assert_eq!(t[2], raw[2], "the receive of that send does not move");
}

/// Three ranks in one collective: (function, root, per rank: (enter, exit, sent, recvd)).
fn one_collective(func: &str, root: Option<i32>, calls: [(u64, u64, u64, u64); 3]) -> TraceBuilder {
    let mut tb = world(3);
    for (r, (a, b, sent, recvd)) in calls.into_iter().enumerate() {
        tb.rank(r as u32)
            .thread(0)
            .call(func, a, b, coll(0, root, sent, recvd, 0));
    }
    tb
}

/// The exit of each rank's collective after forward amortization.
fn coll_exits(func: &str, root: Option<i32>, calls: [(u64, u64, u64, u64); 3]) -> Vec<u64> {
    let (_, t) = clc_times(
        &one_collective(func, root, calls),
        ClcParams::default(),
        false,
    );
    t.iter().map(|r| r[2].1).collect()
}

#[test]
fn one_to_n_pushes_the_exits_that_received_data_past_the_root_enter() {
    let exits = coll_exits(
        "MPI_Bcast",
        Some(0),
        [
            (2_000, 2_010, 8, 0),
            (1_500, 1_600, 0, 8),
            (1_500, 1_600, 0, 0),
        ],
    );
    // Rank 1 received data: 2000 + μ. Rank 2 received none: it stays.
    assert_eq!(exits, vec![2_010, 2_100, 1_600]);
}

#[test]
fn n_to_one_pushes_the_root_exit_past_the_latest_enter_that_sent_data() {
    let exits = coll_exits(
        "MPI_Reduce",
        Some(0),
        [
            (1_000, 1_100, 8, 24),
            (1_500, 1_510, 8, 0),
            (1_800, 1_810, 0, 0),
        ],
    );
    // Rank 2 sent nothing; rank 1's enter at 1500 is the latest that did.
    assert_eq!(exits, vec![1_600, 1_510, 1_810]);
}

#[test]
fn n_to_n_pushes_every_exit_past_the_latest_enter() {
    for func in ["MPI_Allreduce", "MPI_Barrier"] {
        let exits = coll_exits(
            func,
            None,
            [
                (2_000, 2_500, 8, 8),
                (2_100, 2_500, 8, 8),
                (3_000, 3_010, 8, 8),
            ],
        );
        assert_eq!(exits, vec![3_100, 3_100, 3_010], "{func}");
    }
}

#[test]
fn collectives_without_data_order_nothing_but_barriers_do() {
    // Rank 2 exits before the others enter. With no data, nothing says it
    // waited for them: a zero-count allreduce, a zero-byte gather, a
    // communicator duplication and a neighbourhood exchange stay as they
    // were; a barrier does order every exit after every enter.
    let calls = [
        (2_000, 2_500, 0, 0),
        (2_100, 2_500, 0, 0),
        (1_000, 1_010, 0, 0),
    ];
    for func in ["MPI_Allreduce", "MPI_Alltoall", "MPI_Comm_idup"] {
        assert_eq!(
            coll_exits(func, None, calls),
            vec![2_500, 2_500, 1_010],
            "{func}"
        );
    }
    assert_eq!(
        coll_exits("MPI_Gather", Some(0), calls),
        vec![2_500, 2_500, 1_010]
    );
    let data = [
        (2_000, 2_500, 8, 8),
        (2_100, 2_500, 8, 8),
        (1_000, 1_010, 8, 8),
    ];
    assert_eq!(
        coll_exits("MPI_Neighbor_alltoall", None, data),
        vec![2_500, 2_500, 1_010]
    );
    assert_eq!(
        coll_exits("MPI_Barrier", None, calls),
        vec![2_500, 2_500, 2_200]
    );
}

#[test]
fn only_members_that_receive_data_wait_for_members_that_send_it() {
    // An allreduce-shaped call where rank 2 contributes nothing: the others
    // do not wait for it, and it, receiving, waits for them.
    let exits = coll_exits(
        "MPI_Allgatherv",
        None,
        [
            (2_000, 2_500, 8, 8),
            (2_100, 2_500, 8, 8),
            (3_000, 3_010, 0, 16),
        ],
    );
    assert_eq!(exits, vec![2_500, 2_500, 3_010]);
    let exits = coll_exits(
        "MPI_Allgatherv",
        None,
        [
            (2_000, 2_500, 8, 8),
            (2_100, 2_500, 8, 8),
            (1_000, 1_010, 0, 16),
        ],
    );
    assert_eq!(exits, vec![2_500, 2_500, 2_200]);
}

#[test]
fn scan_and_exscan_exits_wait_for_lower_ranks_only() {
    // Rank 1 enters late (2000). Rank 2 depends on it; rank 0 does not
    // (the paper's reversed index order would push rank 0 instead).
    for func in ["MPI_Scan", "MPI_Exscan"] {
        let exits = coll_exits(
            func,
            None,
            [
                (1_000, 1_500, 8, 8),
                (2_000, 2_050, 8, 8),
                (1_200, 1_300, 8, 8),
            ],
        );
        assert_eq!(exits, vec![1_500, 2_050, 2_100], "{func}");
    }
    // The difference between the two is the self pair (rank i's own
    // enter), which its own order already covers: Exscan's rank 0 waits
    // for nobody, and neither does Scan's.
    let exits = coll_exits(
        "MPI_Exscan",
        None,
        [
            (5_000, 5_010, 8, 8),
            (1_000, 1_100, 8, 8),
            (1_000, 1_100, 8, 8),
        ],
    );
    assert_eq!(exits, vec![5_010, 5_100, 5_100]);
}

#[test]
fn a_trace_without_violations_passes_through_clc_unchanged() {
    // A deterministic pseudo-random ping-pong and allreduce pattern whose
    // receives all end at least μ after their sends.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for case in 0..20 {
        let mut tb = world(2);
        let mut now = 1_000u64;
        for i in 0..50 {
            let (s, r) = if (i + case) % 2 == 0 { (0, 1) } else { (1, 0) };
            let send_at = now + rnd(500);
            let recv_post = now + rnd(500);
            let recv_end = send_at.max(recv_post) + MU + rnd(300);
            tb.rank(s).thread(0).call(
                "MPI_Send",
                send_at,
                send_at + 5 + rnd(50),
                send(r as i32, 1, 0, 8),
            );
            tb.rank(r).thread(0).call(
                "MPI_Recv",
                recv_post,
                recv_end,
                recv(s as i32, 1, 0, 8, status(s as i32, 1, 8)),
            );
            now = recv_end + 1_000 + rnd(1_000);
            if i % 10 == 9 {
                let enters = [now + rnd(100), now + rnd(100)];
                let out = enters[0].max(enters[1]) + MU + rnd(50);
                for r in 0..2 {
                    tb.rank(r).thread(0).call(
                        "MPI_Allreduce",
                        enters[r as usize],
                        out + rnd(20),
                        coll(0, None, 8, 8, i / 10),
                    );
                }
                now = out + 1_000;
            }
        }
        let (raw, t) = clc_times(&tb, ClcParams::default(), true);
        assert_eq!(t, raw, "case {case}");
    }
}

#[test]
fn sync_writes_times_beside_the_trace_and_reads_them_back() {
    let mut tb = world(2);
    tb.rank(0)
        .thread(0)
        .call("MPI_Send", 1_000, 1_010, send(1, 7, 0, 8))
        .call("MPI_Comm_rank", 2_000, 2_000, plain());
    tb.rank(1)
        .thread(0)
        .call("MPI_Recv", 900, 950, recv(0, 7, 0, 8, status(0, 7, 8)))
        .call("MPI_Comm_rank", 5_000, 5_000, plain());
    let (dir, trace) = open(&tb, "store");
    let m = Messages::build(&trace);
    let params = SyncParams {
        mu_inter_ns: Some(MU),
        ..SyncParams::default()
    };
    let synced = pmtrace_sync::sync(&trace, &m, &params);
    let names: Vec<&str> = synced
        .report
        .steps
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, ["interpolate", "regress", "clc"]);
    assert_eq!(synced.report.recorded.violations.reversed, 1);
    let last = synced.report.steps.last().unwrap();
    assert_eq!(
        last.violations.reversed + last.violations.clock_condition,
        0
    );
    assert_eq!(last.order_inversions, 0);
    assert!(last.events_moved >= 1);
    assert!(synced.report.error_ns.is_none(), "no simulated clocks");
    let path = synced.write(&trace).unwrap();
    assert!(path.ends_with("sync.pmts"));
    let back = Synced::load(&trace).unwrap().expect("written");
    assert_eq!(back.report, synced.report);
    let recv_call = pmtrace_trace::EventRef {
        rank: 1,
        thread: 0,
        index: 2,
    };
    assert_eq!(back.time(&trace, recv_call, true), Some(1_100));
    assert_eq!(
        back.time(&trace, recv_call, false),
        synced.time(&trace, recv_call, false)
    );
    // The rank files are untouched: the recorded time is still there.
    let again = Trace::open(dir.path()).unwrap();
    assert!(
        matches!(again.record(recv_call), Some(pmtrace_trace::Record::Call(c)) if c.t_end == 950)
    );
    // A damaged file is an error that says what to do.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 9]).unwrap();
    let err = Synced::load(&trace).unwrap_err().to_string();
    assert!(err.contains("run `pmtrace sync` again"), "{err}");
}

#[test]
fn synced_times_keep_shifts_past_32_bits_through_the_file() {
    // Rank 1's times move by 3 s (past an i32 of ns) from its second
    // stamp on; rank 0's by a few ns: one thread keeps times, one shifts.
    let (_dir, trace) = open(&one_reversed_message(), "store-wide");
    let m = Messages::build(&trace);
    let g = Graph::build(&trace, &m, MU, MU);
    let t: Vec<Vec<u64>> = (0..g.locs.len() as u32)
        .map(|l| {
            (0..g.len(l) as u32)
                .map(|k| match (g.locs[l as usize].rank, k) {
                    (1, 0) => g.raw(l, k),
                    (1, _) => g.raw(l, k) + 3_000_000_000,
                    _ => g.raw(l, k) + u64::from(k),
                })
                .collect()
        })
        .collect();
    let report = pmtrace_sync::sync(&trace, &m, &SyncParams::default()).report;
    let synced = Synced::from_graph(&trace, &g, t, report);
    synced.write(&trace).unwrap();
    let back = Synced::load(&trace).unwrap().expect("written");
    for (rank, r) in trace.ranks.iter().enumerate() {
        for th in &r.threads {
            for index in 0..th.records.len() {
                let at = pmtrace_trace::EventRef {
                    rank: rank as u32,
                    thread: th.index,
                    index: index as u32,
                };
                for end in [false, true] {
                    let want = synced.time(&trace, at, end);
                    assert!(want.is_some());
                    assert_eq!(back.time(&trace, at, end), want, "{at:?} end {end}");
                }
            }
        }
    }
    // Rank 1's last record ends 3 s after it was recorded.
    let th = &trace.ranks[1].threads[0];
    let last = th.records.len() - 1;
    let at = pmtrace_trace::EventRef {
        rank: 1,
        thread: th.index,
        index: last as u32,
    };
    let recorded = th.records.stamps(last).1;
    assert_eq!(back.time(&trace, at, true), Some(recorded + 3_000_000_000));
}

#[test]
fn the_merged_log_is_in_synchronized_time_and_a_receive_follows_its_send() {
    // Rank 1's receive ends at 950, before rank 0 sent at 1000; μ 0 here,
    // so after sync the receive ends exactly when the send starts.
    let (_dir, trace) = open(&one_reversed_message(), "merge");
    let m = Messages::build(&trace);
    let params = SyncParams {
        mu_inter_ns: Some(0),
        ..SyncParams::default()
    };
    let synced = pmtrace_sync::sync(&trace, &m, &params);
    let mut out = Vec::new();
    let lines = pmtrace_export::merged::write(&trace, &m, &synced, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let body: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(lines as usize, body.len() + 1);
    // 4 DefComm lines, then two lines per call.
    assert_eq!(body.len(), 4 + 4, "{text}");
    let times: Vec<u64> = body
        .iter()
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{text}");
    let at = |needle: &str| body.iter().position(|l| l.contains(needle)).unwrap();
    let send = at("enter r0 t0 1000 +10 MPI_Send");
    let recv_end = at("exit r1 t0 MPI_Recv");
    assert!(send < recv_end, "{text}");
    assert!(body[recv_end].starts_with("1000 exit"), "{text}");
    // The receive's start moved up the backward ramp, short of its end.
    let start = at("enter r1 t0 900 +50 MPI_Recv");
    assert!(
        start < recv_end && (900..1_000).contains(&times[start]),
        "{text}"
    );
}
