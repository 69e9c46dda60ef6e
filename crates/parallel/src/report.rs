//! The report over blocks ([`pmtrace_report::Report`]): what
//! adds up over ranks is counted where each rank, message or instance is
//! held, and process 0 assembles it in the serial order.
//!
//! - Each rank's profile is made in its block and gathered in rank order;
//!   process 0 merges the functions from them as the serial report does.
//! - A message is counted once: matched and unmatched receives by the
//!   receiver's block, sends and unmatched sends by the sender's. The
//!   first unmatched sends and receives of each block come to process 0 in
//!   block order, which is the whole trace's order of sends and receives.
//! - Collective instances are counted by their owners; the completed
//!   logical messages in linear time.
//! - Warnings: process 0's block holds the trace's own, every block its
//!   ranks'; in block order they are the serial list.

use std::collections::BTreeMap;

use pmtrace_matching::matching::Violations;
use pmtrace_report::phases;
use pmtrace_report::requests;
use pmtrace_report::times::Times;
use pmtrace_report::{
    profile, spawned_worlds, CollectiveCounts, FunctionStats, MatrixCell, MessageCounts,
    RankSummary, Report, RunSummary, UnmatchedMessage, UNMATCHED_SHOWN,
};

use pmtrace_sync::{SyncViolations, Synced};

use crate::block::Block;
use crate::fabric::{sum_of, Fabric};
use crate::insts::Insts;
use crate::messages::BlockMessages;
use crate::net::Net;
use crate::wire::{In, Out};
use crate::{critical, groups, metrics, waits};

/// The report's plain parts, on process 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Plain {
    pub events: u64,
    pub messages: MessageCounts,
    pub violations: Violations,
    pub collectives: CollectiveCounts,
    pub functions: BTreeMap<String, FunctionStats>,
    pub per_rank: Vec<RankSummary>,
    pub matrix: Vec<MatrixCell>,
    pub bytes_total: u64,
    pub bytes_payload: u64,
    pub incomplete_ranks: Vec<u32>,
    pub excluded_calls: BTreeMap<String, u64>,
    pub paused_calls: BTreeMap<String, u64>,
    pub run: Option<RunSummary>,
    pub warnings: Vec<String>,
}

fn add_counts(i: &mut In, into: &mut BTreeMap<String, u64>) {
    for (k, n) in i.get::<BTreeMap<String, u64>>() {
        *into.entry(k).or_default() += n;
    }
}

/// The report's plain parts over blocks, on process 0 (`None` elsewhere).
pub fn plain<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    bm: &BlockMessages,
    insts: &Insts,
    times: &Times,
    mu_ns: u64,
) -> Option<Plain> {
    let trace = &b.trace;
    let m = &bm.m;
    let (own_sends, own_recvs) = (&m.sends[..bm.own_sends], &m.recvs[..bm.own_recvs]);
    // Messages each rank of the block sent and received.
    let top = trace
        .ranks
        .iter()
        .map(|r| r.rank as usize + 1)
        .max()
        .unwrap_or(0);
    let mut sent = vec![0u64; top];
    let mut received = vec![0u64; top];
    for s in own_sends {
        sent[s.src as usize] += 1;
    }
    for r in own_recvs {
        received[r.dst as usize] += 1;
    }
    let mut o = Out::default();
    for rank in &trace.ranks {
        o.put(&profile(rank, m, &sent, &received));
    }
    let profiles = f.gather(o.0);

    // Counts that add up.
    let matched: Vec<_> = m.matched.iter().filter(|p| bm.counts(p.recv)).collect();
    let unmatched_sends: Vec<usize> = (m.unmatched_sends.iter().copied())
        .filter(|&i| i < bm.own_sends)
        .collect();
    let unmatched_recvs: Vec<usize> = (m.unmatched_recvs.iter().copied())
        .filter(|&i| i < bm.own_recvs)
        .collect();
    let v = m.violations_of(matched.iter().copied(), mu_ns, |_, t| t);
    let (pending_requests, pending_first) = requests::pending(trace);
    let mut sums = [
        trace.events(),
        own_sends.len() as u64,
        own_recvs.len() as u64,
        matched.len() as u64,
        unmatched_sends.len() as u64,
        unmatched_recvs.len() as u64,
        m.pending_receives,
        (own_sends.iter().filter(|s| s.dst.is_none()).count()
            + own_recvs.iter().filter(|r| r.src.is_none()).count()) as u64,
        own_sends.iter().map(|s| s.bytes).sum(),
        pending_requests,
        v.reversed,
        v.clock_condition,
        insts.owned.len() as u64,
        insts.owned.iter().map(|o| o.inst.completed_count()).sum(),
        trace.ranks.iter().map(|r| r.file_bytes).sum(),
        trace.ranks.iter().map(|r| r.payload_bytes).sum(),
    ];
    f.sum(&mut sums);

    // Lists, in block order.
    let mut o = Out::default();
    let firsts: Vec<UnmatchedMessage> = (unmatched_sends.iter().take(UNMATCHED_SHOWN))
        .map(|&i| UnmatchedMessage::send(m, i, times))
        .chain(
            (unmatched_recvs.iter().take(UNMATCHED_SHOWN))
                .map(|&i| UnmatchedMessage::receive(m, i, times)),
        )
        .collect();
    o.u64(firsts.len() as u64);
    for u in &firsts {
        o.put(u);
    }
    o.u64(pending_first.len() as u64);
    for p in &pending_first {
        o.put(p);
    }
    let mut cells: BTreeMap<(u32, u32), (u64, u64)> = BTreeMap::new();
    for s in own_sends {
        if let Some(dst) = s.dst {
            let cell = cells.entry((s.src, dst)).or_default();
            cell.0 += 1;
            cell.1 += s.bytes;
        }
    }
    o.u64(cells.len() as u64);
    for ((src, dst), (count, bytes)) in &cells {
        o.u32(*src).u32(*dst).u64(*count).u64(*bytes);
    }
    let incomplete = trace.incomplete_ranks();
    o.u32s(&incomplete);
    let mut excluded: BTreeMap<String, u64> = BTreeMap::new();
    let mut paused: BTreeMap<String, u64> = BTreeMap::new();
    for t in trace.ranks.iter().filter_map(|r| r.trailer.as_ref()) {
        for (k, n) in &t.excluded {
            *excluded.entry(k.clone()).or_default() += n;
        }
        for (k, n) in &t.paused {
            *paused.entry(k.clone()).or_default() += n;
        }
    }
    o.put(&excluded);
    o.put(&paused);
    match trace
        .ranks
        .first()
        .and_then(|r| Some((r, r.header.run.as_ref()?)))
    {
        Some((r, run)) => {
            o.u8(2).u64(run.command_line.len() as u64);
            for a in &run.command_line {
                o.str(a);
            }
            o.str(&r.header.mpi_library).str(&r.header.library_version);
        }
        None if !trace.ranks.is_empty() => {
            o.u8(1);
        }
        None => {
            o.u8(0);
        }
    };
    let warnings = trace.all_warnings();
    o.u64(warnings.len() as u64);
    for w in &warnings {
        o.str(w);
    }
    let lists = f.gather(o.0);
    let ranks = sum_of(f, trace.ranks.len() as u64);
    if f.index() != 0 {
        return None;
    }

    let mut per_rank: Vec<RankSummary> = Vec::with_capacity(ranks as usize);
    for bytes in &profiles {
        let mut i = In::new(bytes);
        while !i.done() {
            per_rank.push(i.get());
        }
    }
    let mut functions: BTreeMap<String, FunctionStats> = BTreeMap::new();
    for summary in &per_rank {
        for (name, stats) in &summary.functions {
            functions.entry(name.clone()).or_default().merge(stats);
        }
    }
    let (mut sends_first, mut recvs_first, mut pending_first) =
        (Vec::new(), Vec::new(), Vec::new());
    let mut matrix = Vec::new();
    let mut incomplete_ranks = Vec::new();
    let (mut excluded_calls, mut paused_calls) = (BTreeMap::new(), BTreeMap::new());
    let mut run: Option<Option<RunSummary>> = None;
    let mut warnings = Vec::new();
    for bytes in &lists {
        let mut i = In::new(bytes);
        for _ in 0..i.u64() {
            let u: UnmatchedMessage = i.get();
            if u.side == "send" {
                sends_first.push(u);
            } else {
                recvs_first.push(u);
            }
        }
        for _ in 0..i.u64() {
            pending_first.push(i.get());
        }
        for _ in 0..i.u64() {
            matrix.push(MatrixCell {
                src: i.u32(),
                dst: i.u32(),
                count: i.u64(),
                bytes: i.u64(),
            });
        }
        incomplete_ranks.extend(i.u32s());
        add_counts(&mut i, &mut excluded_calls);
        add_counts(&mut i, &mut paused_calls);
        match i.u8() {
            2 => {
                let command_line = (0..i.u64()).map(|_| i.str()).collect();
                let summary = RunSummary {
                    command_line,
                    mpi_library: i.str(),
                    library_version: i.str(),
                };
                run.get_or_insert(Some(summary));
            }
            1 => {
                run.get_or_insert(None);
            }
            _ => {}
        }
        for _ in 0..i.u64() {
            warnings.push(i.str());
        }
    }
    matrix.sort_by_key(|c| (c.src, c.dst));
    pending_first.truncate(requests::PENDING_SHOWN);
    let unmatched = sums[4] + sums[5];
    Some(Plain {
        events: sums[0],
        messages: MessageCounts {
            sent: sums[1],
            received: sums[2],
            matched: sums[3],
            unmatched,
            unmatched_sends: sums[4],
            unmatched_receives: sums[5],
            pending_receives: sums[6],
            unresolved: sums[7],
            bytes: sums[8],
            unmatched_first: sends_first
                .into_iter()
                .chain(recvs_first)
                .take(UNMATCHED_SHOWN)
                .collect(),
            pending_requests: sums[9],
            pending_first,
        },
        violations: Violations {
            reversed: sums[10],
            clock_condition: sums[11],
            mu_ns,
        },
        collectives: CollectiveCounts {
            instances: sums[12],
            logical_messages: sums[13],
        },
        functions,
        per_rank,
        matrix,
        bytes_total: sums[14],
        bytes_payload: sums[15],
        incomplete_ranks,
        excluded_calls,
        paused_calls,
        run: run.flatten(),
        warnings,
    })
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
    let p = plain?;
    Some(Report {
        ranks: b.trace.world_size,
        events: p.events,
        messages: p.messages,
        violations: p.violations,
        collectives: p.collectives,
        violations_after_sync: after,
        functions: p.functions,
        dropped_events: p.per_rank.iter().map(|r| r.dropped_events).sum(),
        per_rank: p.per_rank,
        matrix: p.matrix,
        bytes_total: p.bytes_total,
        bytes_payload: p.bytes_payload,
        bytes_per_call: if p.events == 0 {
            0.0
        } else {
            p.bytes_payload as f64 / p.events as f64
        },
        incomplete_ranks: p.incomplete_ranks,
        excluded_calls: p.excluded_calls,
        spawned_worlds: spawned_worlds(&b.trace.dir),
        run: p.run,
        warnings: p.warnings,
        clocks: Some(clocks),
        sync: synced.map(|s| s.report.clone()),
        wait_states,
        metrics,
        critical_path,
        phases: phases.unwrap_or_default(),
        paused_calls: p.paused_calls,
        insight: None,
    })
}
