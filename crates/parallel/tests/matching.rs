//! Blocks of the recorded golden traces, read and matched at P = 1..4 on
//! threads, against the whole trace's matching.

mod common;
use common::*;

use std::collections::BTreeSet;

use pmtrace_matching::Messages;
use pmtrace_parallel::block;
use pmtrace_parallel::fabric::{Fabric, Threads};
use pmtrace_parallel::messages;
use pmtrace_trace::read::EventRef;
use pmtrace_trace::Trace;

type Pair = ((EventRef, u32), (EventRef, u32));

/// Matched pairs (send call and item, completing call and item) and the
/// unmatched sends and receives.
#[derive(Debug, Default, PartialEq)]
struct Outcome {
    pairs: BTreeSet<Pair>,
    unmatched_sends: BTreeSet<(EventRef, u32)>,
    unmatched_recvs: BTreeSet<(EventRef, u32)>,
    pending: u64,
}

fn whole(case: &str) -> Outcome {
    let trace = Trace::open(golden(case)).unwrap();
    let m = Messages::build(&trace);
    Outcome {
        pairs: m
            .matched
            .iter()
            .map(|p| {
                let (s, r) = (&m.sends[p.send], &m.recvs[p.recv]);
                ((s.call, s.item), (r.completion, r.completion_item))
            })
            .collect(),
        unmatched_sends: m
            .unmatched_sends
            .iter()
            .map(|&i| (m.sends[i].call, m.sends[i].item))
            .collect(),
        unmatched_recvs: m
            .unmatched_recvs
            .iter()
            .map(|&i| (m.recvs[i].post, m.recvs[i].post_item))
            .collect(),
        pending: m.pending_receives,
    }
}

fn parallel(case: &str, procs: usize) -> Outcome {
    let parts = Threads::run(procs, |f| {
        let b = block::open(f, &golden(case)).unwrap();
        let bm = messages::build(f, &b);
        let m = &bm.m;
        let mut o = Outcome::default();
        for p in &m.matched {
            let (s, r) = (&m.sends[p.send], &m.recvs[p.recv]);
            let pair = ((s.call, s.item), (r.completion, r.completion_item));
            // Both blocks of a crossing message hold it; the receiver's counts it.
            assert!(b.trace.block().contains(&s.src) || b.trace.block().contains(&r.dst));
            if bm.counts(p.recv) {
                o.pairs.insert(pair);
            }
        }
        o.unmatched_sends = m
            .unmatched_sends
            .iter()
            .map(|&i| (m.sends[i].call, m.sends[i].item))
            .collect();
        o.unmatched_recvs = m
            .unmatched_recvs
            .iter()
            .map(|&i| (m.recvs[i].post, m.recvs[i].post_item))
            .collect();
        o.pending = m.pending_receives;
        assert!(m.unmatched_sends.iter().all(|&i| i < bm.own_sends));
        (f.index(), o)
    });
    let mut all = Outcome::default();
    for (_, o) in parts {
        let n = all.pairs.len() + o.pairs.len();
        all.pairs.extend(o.pairs);
        assert_eq!(all.pairs.len(), n, "a message counted twice");
        all.unmatched_sends.extend(o.unmatched_sends);
        all.unmatched_recvs.extend(o.unmatched_recvs);
        all.pending += o.pending;
    }
    all
}

#[test]
fn blocks_match_every_message_as_the_whole_trace_does() {
    for case in CASES {
        let serial = whole(case);
        for procs in 1..=4 {
            assert_eq!(parallel(case, procs), serial, "{case} at P = {procs}");
        }
    }
}
