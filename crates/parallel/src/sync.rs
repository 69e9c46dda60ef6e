//! `pmtrace sync` over blocks: [`pmtrace_sync::run`], the serial steps
//! and measures, in a block's scope, and the same `sync.pmts`.
//! What the scope answers over the blocks:
//! - Step 1 is each rank's own offset line: local.
//! - Step 2 samples each message between clock groups where it was
//!   received (a send in another block sends its time there), sends the
//!   samples of each pair of groups to the pair's owner, which fits it;
//!   every process then has every fit and finds the same paths.
//! - Step 3 is [`crate::clc`].
//! - Each step's measures add up over the blocks; medians and
//!   percentiles are found exactly over all ([`crate::select`]).
//! - Each block writes its threads' part of `sync.pmts` at its place in
//!   the file; process 0 writes the head and the checksum, combined from
//!   every part's.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Instant;

use pmtrace_sync::clc::{ClcOutcome, ClcParams};
use pmtrace_sync::graph::{Graph, Times};
use pmtrace_sync::quality::{self, ErrorStats, SyncViolations};
use pmtrace_sync::regress::{self, Checks, Correction, PairFit, Pwl, Samples};
use pmtrace_sync::store::{self, RankPrint, SYNC_FILE};
use pmtrace_sync::{Scope, SyncParams, SyncReport};
use pmtrace_trace::read::Trace;

use crate::block::Block;
use crate::fabric::{sum_of, Fabric};
use crate::groups;
use crate::messages::BlockMessages;
use crate::net::Net;
use crate::select;
use crate::wire::{In, Out};

/// A block's synchronized times (in its graph's node order) and the
/// report, the same on every process.
pub struct BlockSynced<'t> {
    pub net: Net<'t>,
    pub times: Vec<Vec<u64>>,
    pub report: SyncReport,
}

/// The times `t` of the sends of this block's cross receives, by inbox
/// slot (0 for a dead message).
pub fn cross_send_times<F: Fabric + ?Sized>(
    f: &F,
    net: &Net,
    t: &(impl Times + ?Sized),
) -> Vec<u64> {
    let mut out = vec![Out::default(); f.size()];
    for c in &net.outbox {
        let v = c.node.filter(|_| c.live).map_or(0, |n| t.at(n.loc, n.k));
        out[c.proc as usize].u64(v);
    }
    let got = f.exchange(out.into_iter().map(|o| o.0).collect());
    let mut readers: Vec<In> = got.iter().map(|b| In::new(b)).collect();
    net.inbox
        .iter()
        .map(|c| readers[c.proc as usize].u64())
        .collect()
}

/// Each owned instance's members' enter and exit times in `t`.
#[allow(clippy::type_complexity)]
fn member_times<F: Fabric + ?Sized>(
    f: &F,
    net: &Net,
    t: &(impl Times + ?Sized),
) -> Vec<(Vec<u64>, Vec<Option<u64>>)> {
    let mut out = vec![Out::default(); f.size()];
    for m in &net.members {
        let w = &mut out[m.owner as usize];
        w.u32(m.inst).u32(m.part).u64(t.at(m.enter.loc, m.enter.k));
        match m.exit {
            Some(x) => w.u8(1).u64(t.at(x.loc, x.k)),
            None => w.u8(0),
        };
    }
    let mut times: Vec<(Vec<u64>, Vec<Option<u64>>)> = net
        .owned
        .iter()
        .map(|o| (vec![0; o.inst.parts.len()], vec![None; o.inst.parts.len()]))
        .collect();
    for bytes in f.exchange(out.into_iter().map(|o| o.0).collect()) {
        let mut i = In::new(&bytes);
        while !i.done() {
            let (inst, part) = (i.u32() as usize, i.u32() as usize);
            times[inst].0[part] = i.u64();
            if i.u8() == 1 {
                times[inst].1[part] = Some(i.u64());
            }
        }
    }
    times
}

/// The violations of times `t` over every block (as
/// [`quality::violations`] of the whole graph).
pub fn violations<F: Fabric + ?Sized>(
    f: &F,
    net: &Net,
    t: &(impl Times + ?Sized),
) -> SyncViolations {
    let g = &net.g;
    let local = quality::violations(g, t);
    let sends = cross_send_times(f, net, t);
    let mut v = [
        local.reversed,
        local.clock_condition,
        local.collective_reversed,
        local.collective_clock_condition,
    ];
    for (c, &ts) in net.inbox.iter().zip(&sends) {
        let (true, Some(r)) = (c.live, c.node) else {
            continue;
        };
        if net.groups.group[c.peer as usize] == g.locs[r.loc as usize].group {
            continue;
        }
        let tr = t.at(r.loc, r.k);
        v[0] += u64::from(tr < ts);
        v[1] += u64::from(tr < ts + net.mu_from(c.peer, r.loc));
    }
    for (o, (enter, exit)) in net.owned.iter().zip(member_times(f, net, t)) {
        let (r, cc) = o.inst.violations(&enter, &exit, net.mu());
        v[2] += r;
        v[3] += cc;
    }
    f.sum(&mut v);
    SyncViolations {
        reversed: v[0],
        clock_condition: v[1],
        collective_reversed: v[2],
        collective_clock_condition: v[3],
    }
}

/// The latencies between clock groups, on one host or across hosts, of
/// every message received in this block, in times `t`.
fn latencies<F: Fabric + ?Sized>(
    f: &F,
    net: &Net,
    t: &(impl Times + ?Sized),
    same_host: bool,
) -> Vec<i64> {
    let g = &net.g;
    let mut lat = quality::latencies(g, t, same_host);
    let sends = cross_send_times(f, net, t);
    for (c, &ts) in net.inbox.iter().zip(&sends) {
        let (true, Some(r)) = (c.live, c.node) else {
            continue;
        };
        let loc = &g.locs[r.loc as usize];
        let (group, host) = (
            net.groups.group[c.peer as usize],
            net.groups.host[c.peer as usize],
        );
        if group != loc.group && (host == loc.host) == same_host {
            lat.push(t.at(r.loc, r.k) as i64 - ts as i64);
        }
    }
    lat
}

/// The owner of the pair of clock groups `(a, b)`.
fn pair_owner(a: u32, b: u32, procs: usize) -> usize {
    let mut h = (u64::from(a) << 32 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 29;
    (h % procs as u64) as usize
}

/// One block's scope of [`pmtrace_sync::run`]: its ranks, its part of the
/// graph, and the fabric to the other blocks.
struct Blocked<'f, 't, F: ?Sized> {
    f: &'f F,
    b: &'t Block,
    net: Net<'t>,
}

impl<'t, F: Fabric + ?Sized> Scope<'t> for Blocked<'_, 't, F> {
    fn trace(&self) -> &'t Trace {
        &self.b.trace
    }
    fn graph(&self) -> &Graph<'t> {
        &self.net.g
    }
    fn graph_mut(&mut self) -> &mut Graph<'t> {
        &mut self.net.g
    }
    fn sum(&self, v: &mut [u64]) {
        self.f.sum(v)
    }
    fn max(&self, v: &mut [u64]) {
        self.f.max(v)
    }
    fn checks(&self, mine: Checks) -> Checks {
        let mut out = Out::default();
        for (group, cs) in mine.iter().enumerate() {
            for (k, c) in cs.iter().enumerate() {
                if let Some((t, bd)) = c {
                    out.u32(group as u32).u8(k as u8).f64(*t).f64(*bd);
                }
            }
        }
        let mut checks: Checks = vec![[None, None]; mine.len()];
        for bytes in self.f.all_gather(out.0) {
            let mut i = In::new(&bytes);
            while !i.done() {
                let (group, k, t, bd) = (i.u32() as usize, i.u8() as usize, i.f64(), i.f64());
                let c = &mut checks[group][k];
                *c = Some(match *c {
                    Some((t0, b0)) => (t0, b0.max(bd)),
                    None => (t, bd),
                });
            }
        }
        checks
    }
    fn reference(&self) -> u32 {
        let mut o = Out::default();
        if let Some(l) = self.net.g.locs.iter().find(|l| l.rank == 0) {
            o.u32(l.group);
        }
        self.f
            .all_gather(o.0)
            .iter()
            .find(|b| !b.is_empty())
            .map_or(0, |b| In::new(b).u32())
    }
    /// Step 2 over the blocks: [`regress::estimate`] of the whole graph.
    fn estimate(
        &self,
        t: &(impl Times + ?Sized),
        groups: usize,
        reference: u32,
        anchors: &[Option<u64>],
        checks: &Checks,
    ) -> Correction {
        let (f, net) = (self.f, &self.net);
        let g = &net.g;
        let origin = self
            .min_of(
                (0..g.locs.len() as u32)
                    .filter(|&l| g.len(l) > 0)
                    .map(|l| t.at(l, 0))
                    .min(),
            )
            .unwrap_or(0);
        let at = |v: u64| v.saturating_sub(origin) as f64;
        let procs = f.size();
        let mut out = vec![Out::default(); procs];
        let mut sample = |gs: u32, gr: u32, ts: u64, tr: u64| {
            if gs == gr {
                return;
            }
            let (ts, tr) = (at(ts), at(tr));
            let (mid, lat) = ((ts + tr) / 2.0, tr - ts);
            let (a, b, up, v) = if gr < gs {
                (gr, gs, true, lat)
            } else {
                (gs, gr, false, -lat)
            };
            out[pair_owner(a, b, procs)]
                .u32(a)
                .u32(b)
                .bool(up)
                .f64(mid)
                .f64(v);
        };
        for &(s, r) in &g.msgs {
            let (gs, gr) = (g.locs[s.loc as usize].group, g.locs[r.loc as usize].group);
            sample(gs, gr, t.at(s.loc, s.k), t.at(r.loc, r.k));
        }
        let sends = cross_send_times(f, net, t);
        for (c, &ts) in net.inbox.iter().zip(&sends) {
            let (true, Some(r)) = (c.live, c.node) else {
                continue;
            };
            let gs = net.groups.group[c.peer as usize];
            sample(gs, g.locs[r.loc as usize].group, ts, t.at(r.loc, r.k));
        }
        let mut pairs: BTreeMap<(u32, u32), (Samples, Samples)> = BTreeMap::new();
        for bytes in f.exchange(out.into_iter().map(|o| o.0).collect()) {
            let mut i = In::new(&bytes);
            while !i.done() {
                let (a, b, up, mid, v) = (i.u32(), i.u32(), i.bool(), i.f64(), i.f64());
                let e = pairs.entry((a, b)).or_default();
                if up {
                    e.0.push((mid, v))
                } else {
                    e.1.push((mid, v))
                }
            }
        }
        // The pairs this process owns, fitted; then every fit everywhere.
        let mut mine = Out::default();
        for ((a, b), (up, low)) in pairs {
            let (fit, outside) = regress::pair_fit(a, b, up, low, origin, reference, checks);
            if let Some((other, x)) = outside {
                mine.u8(0).u32(other).f64(x);
            }
            if let Some(fit) = fit {
                mine.u8(1)
                    .u32(fit.a)
                    .u32(fit.b)
                    .f64(fit.cost)
                    .bool(fit.messages);
                mine.u64(fit.d.knots.len() as u64);
                for &(kt, kv) in &fit.d.knots {
                    mine.f64(kt).f64(kv);
                }
            }
        }
        let mut fits: Vec<PairFit> = Vec::new();
        let mut contradicted = vec![0.0f64; groups];
        for bytes in f.all_gather(mine.0) {
            let mut i = In::new(&bytes);
            while !i.done() {
                if i.u8() == 0 {
                    let other = i.u32() as usize;
                    contradicted[other] = i.f64();
                    continue;
                }
                let (a, b, cost, messages) = (i.u32(), i.u32(), i.f64(), i.bool());
                let n = i.u64() as usize;
                let knots = (0..n).map(|_| (i.f64(), i.f64())).collect();
                fits.push(PairFit {
                    a,
                    b,
                    d: Pwl { knots },
                    cost,
                    messages,
                });
            }
        }
        fits.sort_by_key(|fit| (fit.a, fit.b));
        regress::finish(groups, reference, fits, anchors, &contradicted)
    }
    fn latency_floor(&self, t: &(impl Times + ?Sized), same_host: bool) -> Option<u64> {
        select::latency_floor(self.f, &latencies(self.f, &self.net, t, same_host))
    }
    fn violations(&self, t: &(impl Times + ?Sized)) -> SyncViolations {
        violations(self.f, &self.net, t)
    }
    fn error_stats(&self, errs: Vec<u64>) -> ErrorStats {
        select::error_stats(self.f, &errs)
    }
    fn clc(&self, t: &impl Times, p: &ClcParams) -> (Vec<Vec<u64>>, ClcOutcome) {
        crate::clc::run(self.f, &self.net, t, p)
    }
}

/// Synchronizes this process's block (every process calls it):
/// [`pmtrace_sync::run`] in the block's scope.
pub fn sync<'t, F: Fabric + ?Sized>(
    f: &F,
    b: &'t Block,
    bm: &BlockMessages,
    params: &SyncParams,
) -> BlockSynced<'t> {
    let began = Instant::now();
    let gs = groups::compute(f, &b.trace);
    let mut s = Blocked {
        f,
        b,
        net: Net::build(f, b, bm, gs),
    };
    let (times, report) = pmtrace_sync::run(&mut s, params, began);
    BlockSynced {
        net: s.net,
        times,
        report,
    }
}

/// Writes `DIR/sync.pmts` from every block: the same bytes as the serial
/// [`pmtrace_sync::Synced::write`]. Returns its path.
pub fn write<F: Fabric + ?Sized>(f: &F, b: &Block, s: &BlockSynced) -> Result<PathBuf, String> {
    let trace = &b.trace;
    let g = &s.net.g;
    // This block's threads, in rank and thread order.
    let by_pos = g.by_position(s.times.clone());
    let mut part = Vec::new();
    let mut loc_of = std::collections::HashMap::new();
    for (l, loc) in g.locs.iter().enumerate() {
        loc_of.insert((loc.rank, loc.slot), l);
    }
    for rank in &trace.ranks {
        for (slot, th) in rank.threads.iter().enumerate() {
            let times = &by_pos[loc_of[&(rank.rank, slot)]];
            part.extend_from_slice(&store::encode_shifts(&th.records, times));
        }
    }
    // Process 0 makes the head from every rank's print.
    let mut prints = Out::default();
    for p in store::prints(trace) {
        prints.u64(p.file_bytes).u64(p.threads.len() as u64);
        for (index, n) in p.threads {
            prints.u32(index).u64(n);
        }
    }
    let gathered = f.all_gather(if f.index() == 0 {
        Vec::new()
    } else {
        prints.0.clone()
    });
    let head = if f.index() == 0 {
        let mut all: Vec<RankPrint> = Vec::new();
        for (p, bytes) in gathered.iter().enumerate() {
            let bytes = if p == 0 { &prints.0 } else { bytes };
            let mut i = In::new(bytes);
            while !i.done() {
                let file_bytes = i.u64();
                let n = i.u64() as usize;
                let threads = (0..n).map(|_| (i.u32(), i.u64())).collect();
                all.push(RankPrint {
                    file_bytes,
                    threads,
                });
            }
        }
        store::file_head(&s.report, all)
    } else {
        Vec::new()
    };
    let head_len = sum_of(f, head.len() as u64);
    // Each part's place, and its checksum to combine.
    let mut mine = Out::default();
    mine.u64(part.len() as u64).u32(crc32fast::hash(&part));
    let all = f.all_gather(mine.0);
    let sizes: Vec<(u64, u32)> = all
        .iter()
        .map(|b| {
            let mut i = In::new(b);
            (i.u64(), i.u32())
        })
        .collect();
    let at = head_len + sizes[..f.index()].iter().map(|s| s.0).sum::<u64>();
    let path = store::Synced::path(&trace.dir);
    let tmp = trace.dir.join(format!(".{SYNC_FILE}.tmp"));
    let io = |e: std::io::Error| format!("{}: {e}", tmp.display());
    let made = match f.index() {
        0 => std::fs::write(&tmp, &head).map_err(io),
        _ => Ok(()),
    };
    crate::fabric::agree(f, made)?;
    let file = OpenOptions::new().write(true).open(&tmp).map_err(io);
    let wrote = file.and_then(|file| file.write_all_at(&part, at).map_err(io));
    crate::fabric::agree(f, wrote)?;
    let mut result = Ok(());
    if f.index() == 0 {
        let mut crc = crc32fast::Hasher::new();
        crc.update(&head);
        for &(len, c) in &sizes {
            crc.combine(&crc32fast::Hasher::new_with_initial_len(c, len));
        }
        let end = head_len + sizes.iter().map(|s| s.0).sum::<u64>();
        let done = OpenOptions::new()
            .write(true)
            .open(&tmp)
            .and_then(|file| file.write_all_at(&crc.finalize().to_le_bytes(), end))
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(io);
        result = done;
    }
    crate::fabric::agree(f, result)?;
    Ok(path)
}
