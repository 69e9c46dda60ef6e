//! The controlled logical clock over blocks of the golden traces, at
//! P = 1..4 on threads, against the serial one on the whole trace.

mod common;
use common::*;

use std::collections::BTreeMap;

use pmtrace_matching::Messages;
use pmtrace_parallel::fabric::{Fabric, Threads};
use pmtrace_parallel::net::Net;
use pmtrace_parallel::{block, groups, messages};
use pmtrace_sync::clc::{self, ClcParams};
use pmtrace_sync::graph::{Graph, Times as GraphTimes};
use pmtrace_trace::Trace;

type Times = BTreeMap<(u32, usize), Vec<u64>>;

const MU: (u64, u64) = (300, 2_000);

fn params() -> ClcParams {
    ClcParams::default()
}

/// Recorded times with each rank's clock set off by up to 60 µs, so that
/// messages and collectives point backward everywhere.
struct Skewed<'a, 't>(&'a Graph<'t>);

impl GraphTimes for Skewed<'_, '_> {
    fn at(&self, loc: u32, k: u32) -> u64 {
        let rank = u64::from(self.0.locs[loc as usize].rank);
        self.0.raw(loc, k) + (rank * 7_919 * 13) % 60_000
    }
}

fn serial(case: &str, skew: bool) -> (Times, u64, u64) {
    let trace = Trace::open(golden(case)).unwrap();
    let m = Messages::build(&trace);
    let g = Graph::build(&trace, &m, MU.0, MU.1);
    let (t, out) = if skew {
        clc::run(&g, &Skewed(&g), &params())
    } else {
        clc::run(&g, &g.recorded(), &params())
    };
    let times = g
        .locs
        .iter()
        .zip(t)
        .map(|(l, t)| ((l.rank, l.slot), t))
        .collect();
    (times, out.jumps, out.forced)
}

fn parallel(case: &str, procs: usize, skew: bool) -> (Times, u64, u64) {
    let parts = Threads::run(procs, |f| {
        let b = block::open(f, &golden(case)).unwrap();
        let bm = messages::build(f, &b);
        let gs = groups::compute(f, &b.trace);
        let mut net = Net::build(f, &b, &bm, gs);
        (net.g.mu_intra, net.g.mu_inter) = MU;
        let input = net.g.clone();
        let (t, out) = if skew {
            pmtrace_parallel::clc::run(f, &net, &Skewed(&input), &params())
        } else {
            pmtrace_parallel::clc::run(f, &net, &input.recorded(), &params())
        };
        let times: Times = net
            .g
            .locs
            .iter()
            .zip(t)
            .map(|(l, t)| ((l.rank, l.slot), t))
            .collect();
        let _ = f.index();
        (times, out.jumps, out.forced)
    });
    let mut all = Times::new();
    let (mut jumps, mut forced) = (None, None);
    for (t, j, fo) in parts {
        all.extend(t);
        assert!(
            jumps.is_none_or(|x| x == j),
            "every process gives the same count"
        );
        (jumps, forced) = (Some(j), Some(fo));
    }
    (all, jumps.unwrap(), forced.unwrap())
}

#[test]
fn blocks_give_the_serial_controlled_logical_clock() {
    for case in CASES {
        for skew in [false, true] {
            let want = serial(case, skew);
            for procs in 1..=4 {
                let got = parallel(case, procs, skew);
                assert_eq!(
                    got.1, want.1,
                    "{case} (skewed: {skew}) at P = {procs}: jumps"
                );
                assert_eq!(
                    got.2, want.2,
                    "{case} (skewed: {skew}) at P = {procs}: forced"
                );
                assert!(
                    got.0 == want.0,
                    "{case} (skewed: {skew}) at P = {procs}: times differ"
                );
            }
            eprintln!(
                "{case} (skewed: {skew}): {} jumps, {} forced",
                want.1, want.2
            );
        }
    }
}
