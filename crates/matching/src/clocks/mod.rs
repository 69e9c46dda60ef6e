//! Logical clocks, rebuilt from the trace and checked against what the
//! messages carried.
//!
//! **Matching by id.** Every message carried its id (`thread << 40 | n`,
//! see `pmtrace_format::record`); the receiver recorded it. Sends get their
//! ids back by counting, per thread, the records that sent a message. A
//! receive is matched to the send of its source rank with that id, and the
//! result is compared with the FIFO-rule matching of [`Messages`].
//!
//! **Clocks.** The Lamport clocks follow LLCP (`003_…` §5.1) exactly as the
//! runtime does (see the runtime's `piggyback` module): sends do not tick;
//! completing a receive ticks once per pending wildcard receive it
//! completes by non-overtaking, once for itself if it is a wildcard receive
//! still pending (or blocking), then merges `max(LC, m.LC + 1)`.
//! Collectives are logical messages (Becker et al., `000_…` §4): an exit
//! takes the maximum of the clocks at the enters it depends on (1-to-N: the
//! root's; N-to-1: all, at the root; N-to-N: all; Scan: ranks k ≤ i;
//! Exscan: k < i). The runtime cannot merge collectives without an extra
//! reduction per call, so it does not; this module does, offline.
//!
//! **Why the offline clocks are the rules' clocks.** The rules make every
//! clock a function of (a) each rank's sequence of events, (b) which send
//! each receive matched, (c) which enters each collective exit depends on.
//! The trace holds all three exactly: the records in order, the
//! piggybacked message ids, and per-communicator collective sequence
//! numbers. [`compute`] applies each rule once per event in an order in
//! which every event comes after everything it depends on (a real run has
//! no causal cycle), so it computes exactly the values the rules define.
//!
//! **Checks.** The same pass run without collectives must reproduce, bit
//! for bit, the clock each message carried (and its send time, and in
//! vector mode its vector clock): that checks the runtime. With
//! collectives, every matched pair must satisfy send < receive
//! (`lamport_violations`, `vector_violations`), and on small runs the
//! vector clocks must order two events exactly when a brute-force
//! happens-before over the event graph does.

use rustc_hash::FxHashMap as HashMap;

use pmtrace_format::Kind;
use pmtrace_trace::{Call, Payload};
use serde::Serialize;

use crate::ends::{Cursor, End};
use crate::matching::{IdChecks, Messages, RecvEvent, RecvHow};
use pmtrace_trace::read::{EventRef, Rank, Trace};

mod parts;
mod plan;
mod races;
mod results;
mod steps;
mod walk;

pub use parts::{Part, PartClocks, PartPlan, PartVectors, WireCheck};
pub use plan::Shape;
pub use races::RaceClocks;
pub use results::{CallClocks, ClockReport, Clocks, HbCheck, RecvClocks, ThreadClockReader};
pub use walk::{merge_for, merges};
use {parts::*, plan::*, races::*, results::*, steps::*, walk::*};

/// Largest number of events for the brute-force happens-before check.
pub const HB_MAX_EVENTS: usize = 4000;

/// Matched pairs of `recvs` with send ≥ receive: (Lamport, vector).
fn violations(m: &Messages, full: &Pass, recvs: std::ops::Range<usize>) -> (u64, u64) {
    let (mut lamport, mut vector) = (0, 0);
    for ri in recvs {
        let Some(si) = m.send_by_id(ri) else { continue };
        if let (Some(s), Some((_, after))) = (full.send_lc.get(si), full.recv_lc.get(ri)) {
            if s >= after {
                lamport += 1;
            }
        }
        if let (Some(Some(a)), Some(Some(b))) = (full.send_vc.get(si), full.recv_vc.get(ri)) {
            if !vc_less(a, b) {
                vector += 1;
            }
        }
    }
    (lamport, vector)
}

/// Rebuilds the clocks of `trace` and checks them.
pub fn compute(trace: &Trace, m: &Messages) -> Clocks {
    let mode = trace
        .ranks
        .first()
        .map(|r| r.header.clocks.clone())
        .unwrap_or_else(|| "none".into());
    let vector = mode == "vector";
    let p = plan(trace, m);
    let mut report = ClockReport {
        mode: mode.clone(),
        ..ClockReport::default()
    };
    // Matching by id.
    if mode != "none" {
        report.set_ids(m.id_checks(0..m.recvs.len()));
    }
    if mode == "none" {
        return Clocks {
            report,
            recv_lc: RecvClocks::new(m.recvs.len()),
            ..Clocks::default()
        };
    }
    // The runtime's view: no collectives; every piggyback must equal it.
    let vectors = if vector {
        Vectors::Eager
    } else {
        Vectors::None
    };
    // The full clocks, collectives merged, made beside the runtime's.
    let small = m.sends.len() + m.recvs.len() <= HB_MAX_EVENTS && p.multi.is_empty();
    let (w, full) = rayon::join(
        || {
            let wire = pass(trace, m, &p, false, vectors, false, None);
            wire_check(trace, m, &wire, &p.multi, 0..m.recvs.len())
        },
        || pass(trace, m, &p, true, vectors, vector && small, None),
    );
    (report.wire_checked, report.wire_mismatches) = (w.checked, w.mismatches);
    report.wire_unchecked = w.unchecked;
    // Clocks carried by one sender never decrease with its message ids.
    report.decreasing += decreasing_by_sender(by_sender(m.recvs.iter()));
    report.forced = full.forced;
    let (lamport, vector_bad) = violations(m, &full, 0..m.recvs.len());
    report.lamport_violations = lamport;
    if vector {
        report.vector_violations = Some(vector_bad);
        if small {
            report.happens_before = Some(hb_check(&full.nodes));
        }
    }
    // Clocks along each rank never decrease, call by call.
    report.decreasing += full.after_call.decreasing();
    Clocks {
        report,
        after_call: full.after_call,
        recv_lc: full.recv_lc,
    }
}

/// (sender, message id, clock) of each receive that carried a piggyback.
pub fn by_sender<'a>(recvs: impl Iterator<Item = &'a RecvEvent>) -> Vec<(u32, u64, u64)> {
    recvs
        .filter_map(|r| Some((r.src?, r.pb?.id, r.pb?.lc)))
        .collect()
}

/// Places where the clock one sender's thread piggybacked decreased with
/// its message ids, in `by_sender` (every receive of those senders).
pub fn decreasing_by_sender(mut by_sender: Vec<(u32, u64, u64)>) -> u64 {
    by_sender.sort_unstable();
    let mut n = 0;
    for w in by_sender.windows(2) {
        let same_thread = w[0].0 == w[1].0
            && w[0].1 >> pmtrace_format::record::MSG_THREAD_SHIFT
                == w[1].1 >> pmtrace_format::record::MSG_THREAD_SHIFT;
        if same_thread && w[1].2 < w[0].2 {
            n += 1;
        }
    }
    n
}

/// Brute force: reachability over the event graph against vector order.
fn hb_check(nodes: &[Node]) -> HbCheck {
    let n = nodes.len();
    let words = n.div_ceil(64);
    let mut reach = vec![0u64; n * words];
    for i in 0..n {
        for &f in &nodes[i].from {
            // `f` precedes `i` in the evaluation order.
            for w in 0..words {
                let v = reach[f * words + w];
                reach[i * words + w] |= v;
            }
            reach[i * words + f / 64] |= 1 << (f % 64);
        }
    }
    let mut c = HbCheck {
        events: n as u64,
        ..HbCheck::default()
    };
    for a in 0..n {
        for b in 0..n {
            if a == b {
                continue;
            }
            c.pairs += 1;
            let hb = reach[b * words + a / 64] >> (a % 64) & 1 == 1;
            if hb != vc_less(&nodes[a].vc, &nodes[b].vc) {
                c.disagreements += 1;
            }
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(index: u32) -> EventRef {
        EventRef {
            rank: 0,
            thread: 3,
            index,
        }
    }

    #[test]
    fn a_thread_in_record_order_keeps_only_its_clock_changes() {
        let mut c = CallClocks {
            ranks: vec![vec![(3, ThreadClocks::Steps(Vec::new()))]],
        };
        // Calls 2 and 5 communicate; 5 twice (two events), 9 leaves the clock as it was.
        c.set(0, 3, 2, 1);
        c.set(0, 3, 5, 2);
        c.set(0, 3, 5, 4);
        c.set(0, 3, 9, 4);
        let ThreadClocks::Steps(v) = &c.ranks[0][0].1 else {
            unreachable!()
        };
        assert_eq!(v, &vec![(2, 1), (5, 4)]);
        let got: Vec<Option<u64>> = (0..11).map(|i| c.get(at(i))).collect();
        let want = [0, 0, 1, 1, 1, 4, 4, 4, 4, 4, 4].map(Some);
        assert_eq!(got, want);
        assert_eq!(
            c.get(EventRef { thread: 4, ..at(0) }),
            None,
            "no such thread"
        );
        // The reader gives the same, in order and out of it.
        let mut r = c.thread(0, 3);
        for i in (0..11).chain([3, 0, 9, 2, 2, 10, 4]) {
            assert_eq!(r.get(i), c.get(at(i as u32)), "index {i}");
        }
        assert_eq!(c.thread(0, 4).get(0), None);
        assert_eq!(c.decreasing(), 0);
    }

    #[test]
    fn dense_threads_keep_a_clock_per_record_and_count_decreases() {
        let mut c = CallClocks {
            ranks: vec![vec![
                (3, ThreadClocks::Dense(vec![NO_CLOCK; 4])),
                (4, ThreadClocks::Steps(Vec::new())),
            ]],
        };
        c.set(0, 3, 2, 5);
        c.set(0, 3, 0, 7);
        assert_eq!(c.get(at(0)), Some(7));
        assert_eq!(c.get(at(1)), None, "not a call");
        assert_eq!(c.get(at(2)), Some(5));
        c.set(0, 4, 1, 9);
        c.set(0, 4, 3, 8);
        // 7 then 5 on thread 3; 9 then 8 on thread 4.
        assert_eq!(c.decreasing(), 2);
    }

    #[test]
    fn every_exit_merges_in_linear_time_what_it_merges_one_by_one() {
        let shapes = Shape::ALL;
        let mut x: u64 = 7;
        let mut next = |n: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % n
        };
        for round in 0..400 {
            let shape = shapes[round % shapes.len()];
            let size = 1 + next(6) as u32;
            let root = (round % 3 != 0).then(|| next(size as u64) as u32);
            // Members may enter twice (a broken trace), or not at all.
            let enters: Vec<(u32, u64, Vec<u64>)> = (0..next(8))
                .map(|_| (next(size as u64) as u32, next(5), Vec::new()))
                .collect();
            let got = merges(shape, root, &enters);
            let mut members: Vec<u32> = enters.iter().map(|e| e.0).collect();
            members.sort_unstable();
            members.dedup();
            let want: Vec<(u32, u64, Vec<u64>)> = members
                .iter()
                .map(|&k| {
                    let (lc, vc) = merge_for(shape, root, &enters, k);
                    (k, lc, vc)
                })
                .collect();
            assert_eq!(got, want, "{shape:?} root {root:?} enters {enters:?}");
        }
        // By hand: a scan's exit takes the members before it, a
        // broadcast's the root's, an all-to-all's the others'.
        let e = |v: &[(u32, u64)]| -> Vec<(u32, u64, Vec<u64>)> {
            v.iter().map(|&(k, c)| (k, c, Vec::new())).collect()
        };
        let lcs = |v: Vec<(u32, u64, Vec<u64>)>| v.into_iter().map(|x| x.1).collect::<Vec<_>>();
        let four = e(&[(0, 3), (1, 9), (2, 1), (3, 4)]);
        assert_eq!(lcs(merges(Shape::Scan, None, &four)), [0, 3, 9, 9]);
        assert_eq!(lcs(merges(Shape::OneToN, Some(2), &four)), [1, 1, 0, 1]);
        assert_eq!(lcs(merges(Shape::NToOne, Some(2), &four)), [0, 0, 9, 0]);
        assert_eq!(lcs(merges(Shape::NToN, None, &four)), [9, 4, 9, 9]);
        // Vectors merge entrywise, without the member's own.
        let v = vec![
            (0, 1, vec![1, 0, 5]),
            (1, 2, vec![0, 2, 0]),
            (2, 0, vec![3, 0, 0]),
        ];
        assert_eq!(
            merges(Shape::NToN, None, &v),
            vec![
                (0, 2, vec![3, 2, 0]),
                (1, 1, vec![3, 0, 5]),
                (2, 2, vec![1, 2, 5])
            ]
        );
    }
}
