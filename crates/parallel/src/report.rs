//! The report over blocks ([`pmtrace_report::Report`]): each block makes
//! the plain parts of its ranks ([`Plain::of`], as the serial report does
//! of the whole trace), process 0 merges them in block order; the
//! analyses are the blocks' own.
//!
//! - Collective instances are counted by their owners; the completed
//!   logical messages in linear time.
//! - Warnings: process 0's block holds the trace's own, every block its
//!   ranks'; in block order they are the serial list.

use std::collections::BTreeMap;

use pmtrace_report::phases;
use pmtrace_report::times::Times;
use pmtrace_report::{CollectiveCounts, Plain, Report};

use pmtrace_sync::{SyncViolations, Synced};

use crate::block::Block;
use crate::fabric::Fabric;
use crate::insts::Insts;
use crate::messages::BlockMessages;
use crate::net::Net;
use crate::wire::{In, Out};
use crate::{critical, groups, metrics, waits};

/// The report's plain parts over blocks, on process 0 (`None`
/// elsewhere): each block's [`Plain::of`], merged in block order.
pub fn plain<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    bm: &BlockMessages,
    insts: &Insts,
    times: &Times,
    mu_ns: u64,
) -> Option<Plain> {
    let mut mine = Plain::of(&b.trace, &bm.m, (bm.own_sends, bm.own_recvs), times, mu_ns);
    mine.collectives = CollectiveCounts {
        instances: insts.owned.len() as u64,
        logical_messages: insts.owned.iter().map(|o| o.inst.completed_count()).sum(),
    };
    let mut o = Out::default();
    o.put(&mine);
    let mut parts = f
        .gather(o.0)
        .into_iter()
        .map(|b| In::new(&b).get::<Plain>());
    let mut all = parts.next()?;
    for p in parts {
        all.merge(p);
    }
    Some(all)
}

/// The report's phases over blocks, on process 0 (`None` elsewhere): each
/// block's tallies added up ([`phases::tally`], [`phases::finish`]).
pub fn phases<F: Fabric + ?Sized>(f: &F, b: &Block, times: &Times) -> Option<Vec<phases::Phase>> {
    let spans = phases::spans(&b.trace, times);
    let mut o = Out::default();
    for (name, (n, ranks, funcs)) in phases::tally(&b.trace, times, &spans) {
        o.str(&name).u64(n).u64(ranks.len() as u64);
        for r in ranks.values() {
            o.u32(r.rank).u64(r.ns).u64(r.computation_ns).u64(r.mpi_ns);
        }
        o.u64(funcs.len() as u64);
        for (func, (calls, ns)) in &funcs {
            o.str(func).u64(*calls).u64(*ns);
        }
    }
    let got = f.gather(o.0);
    if f.index() != 0 {
        return None;
    }
    let mut all: BTreeMap<String, phases::Tally> = BTreeMap::new();
    for bytes in &got {
        let mut i = In::new(bytes);
        while !i.done() {
            let (name, n) = (i.str(), i.u64());
            let (count, ranks, funcs) = all.entry(name).or_default();
            *count += n;
            for _ in 0..i.u64() {
                let r = phases::PhaseRank {
                    rank: i.u32(),
                    ns: i.u64(),
                    computation_ns: i.u64(),
                    mpi_ns: i.u64(),
                };
                ranks.insert(r.rank, r);
            }
            for _ in 0..i.u64() {
                let func = i.str();
                let e = funcs.entry(func).or_default();
                e.0 += i.u64();
                e.1 += i.u64();
            }
        }
    }
    Some(phases::finish(all))
}

/// The violations left in the times `pmtrace sync` wrote, with the μ it
/// used, over every block (as the serial report's `with_sync`).
pub fn after_sync<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    bm: &BlockMessages,
    synced: &Synced,
) -> SyncViolations {
    let gs = groups::compute(f, &b.trace);
    let mut net = Net::build(f, b, bm, gs);
    let p = synced.report.params;
    net.g.mu_intra = p.mu_intra_ns;
    net.g.mu_inter = p.mu_inter_ns;
    crate::sync::violations(f, &net, &synced.node_times(&b.trace, &net.g))
}

/// The whole report over blocks, as `pmtrace report` makes it, on
/// process 0 (`None` elsewhere); on the times `pmtrace sync` wrote when
/// `synced` is given, with its report and the violations left in them.
pub fn build<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    bm: &BlockMessages,
    insts: &Insts,
    synced: Option<&Synced>,
    mu_ns: u64,
) -> Option<Report> {
    let times = Times {
        trace: &b.trace,
        synced,
    };
    let plain = plain(f, b, bm, insts, &times, mu_ns);
    let clocks = crate::clocks::report(f, b, bm);
    let found = waits::find(f, b, bm, insts, &times);
    let wait_states = waits::states(f, b, &times, &found);
    let metrics = metrics::compute(f, b, &times);
    let window = metrics::window(f, b, &times);
    let critical_path = critical::paths(f, b, None, &times, &found, window);
    let phases = phases(f, b, &times);
    let after = synced.map(|s| after_sync(f, b, bm, s));
    let mut report = plain?.into_report(b.trace.world_size, &b.trace.dir);
    report.violations_after_sync = after;
    report.clocks = Some(clocks);
    report.sync = synced.map(|s| s.report.clone());
    report.wait_states = wait_states;
    report.metrics = metrics;
    report.critical_path = critical_path;
    report.phases = phases.unwrap_or_default();
    Some(report)
}
