//! How good a set of times is: violations of causality, how much each step
//! moved, how much local intervals changed, and (under
//! `PMTRACE_CLOCK_SIM`) how far the times are from the true time.

use serde::{Deserialize, Serialize};

use super::graph::{Graph, Times};
use pmtrace_trace::read::Trace;

/// Messages that point backward in time, or arrive sooner than μ.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncViolations {
    /// Point-to-point messages received before they were sent.
    pub reversed: u64,
    /// Point-to-point messages received before send + μ.
    pub clock_condition: u64,
    /// Collective logical messages (enter → exit) reversed.
    pub collective_reversed: u64,
    /// Collective logical messages arriving before enter + μ.
    pub collective_clock_condition: u64,
}

/// |synced − true| over every stamp.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorStats {
    pub median: u64,
    pub p99: u64,
    pub max: u64,
}

/// Counts the violations of times `t` (in node order): only between
/// different clock groups, since one clock cannot misorder anything (what
/// looks backward within a group is what happened).
pub fn violations(g: &Graph, t: &(impl Times + ?Sized)) -> SyncViolations {
    let at = |loc: u32, k: u32| t.at(loc, k);
    let group = |loc: u32| g.locs[loc as usize].group;
    let mut v = SyncViolations::default();
    for &(s, r) in &g.msgs {
        if group(s.loc) == group(r.loc) {
            continue;
        }
        let (ts, tr) = (at(s.loc, s.k), at(r.loc, r.k));
        v.reversed += u64::from(tr < ts);
        v.clock_condition += u64::from(tr < ts + g.mu(s.loc, r.loc));
    }
    for inst in &g.insts {
        for (i, m) in inst.members.iter().enumerate() {
            let Some((m, exit)) = m.as_ref().and_then(|m| Some((m, m.exit?))) else {
                continue;
            };
            let tx = at(m.loc, exit);
            for k in inst.senders(i as u32) {
                let Some(s) = inst.members[k as usize].as_ref() else {
                    continue;
                };
                if group(s.loc) == group(m.loc) {
                    continue;
                }
                let te = at(s.loc, s.enter);
                v.collective_reversed += u64::from(tx < te);
                v.collective_clock_condition += u64::from(tx < te + g.mu(s.loc, m.loc));
            }
        }
    }
    v
}

/// The 1st percentile of the latencies (receive − send) of messages
/// between different clock groups, on one host or across hosts; 0 if that
/// is negative, `None` without such messages.
pub fn latency_floor(g: &Graph, t: &(impl Times + ?Sized), same_host: bool) -> Option<u64> {
    floor(latencies(g, t, same_host))
}

/// The 1st percentile of `lat`, 0 if negative; `None` if empty.
pub fn floor(mut lat: Vec<i64>) -> Option<u64> {
    if lat.is_empty() {
        return None;
    }
    let at = (lat.len() - 1) / 100;
    Some((*lat.select_nth_unstable(at).1).max(0) as u64)
}

/// The latencies (receive − send) of the messages of `g` between
/// different clock groups, on one host or across hosts.
pub fn latencies(g: &Graph, t: &(impl Times + ?Sized), same_host: bool) -> Vec<i64> {
    g.msgs
        .iter()
        .filter(|(s, r)| {
            let (a, b) = (&g.locs[s.loc as usize], &g.locs[r.loc as usize]);
            a.group != b.group && (a.host == b.host) == same_host
        })
        .map(|(s, r)| t.at(r.loc, r.k) as i64 - t.at(s.loc, s.k) as i64)
        .collect()
}

/// What one pass over every stamp tells of a step from `before` to `after`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sweep {
    /// Events (records) with a stamp the step moved, and the largest move.
    pub events_moved: u64,
    pub max_shift_ns: u64,
    /// Becker's weighted interval deviation Σ|Δt' − Δt| / Σ|Δt| over
    /// consecutive stamps of each location, against the recorded intervals.
    pub interval_deviation: f64,
    /// Consecutive stamps of a location whose order `after` reverses (0
    /// after every step).
    pub order_inversions: u64,
    /// [`error`] of `after`.
    pub error_ns: Option<ErrorStats>,
}

/// The step's moves, interval deviation, order inversions and [`error`]
/// in one pass, each time read once (times may be computed where read).
pub fn sweep(
    trace: &Trace,
    g: &Graph,
    before: &(impl Times + ?Sized + Sync),
    after: &(impl Times + ?Sized + Sync),
) -> Sweep {
    let simulated = trace.ranks.iter().any(|r| r.header.clock_sim.is_some());
    sweep_parts(trace, g, before, after, simulated).finish()
}

/// What a sweep adds up, before the error statistics: parts of several
/// blocks of a trace add up to the whole's.
#[derive(Debug, Clone, Default)]
pub struct SweepParts {
    pub events_moved: u64,
    pub max_shift_ns: u64,
    /// Σ|Δt' − Δt| and Σ|Δt|.
    pub deviation: u128,
    pub recorded: u128,
    pub order_inversions: u64,
    /// |after − true| of every stamp, if the run simulated clocks.
    pub errors: Option<Vec<u64>>,
}

impl SweepParts {
    /// The sweep, with the error statistics of `errors`.
    pub fn finish(self) -> Sweep {
        self.finish_with(error_stats)
    }

    /// The sweep, the error statistics given by `stats` (of the errors of
    /// every block, where a block has only its own).
    pub fn finish_with(self, stats: impl FnOnce(Vec<u64>) -> ErrorStats) -> Sweep {
        Sweep {
            events_moved: self.events_moved,
            max_shift_ns: self.max_shift_ns,
            interval_deviation: if self.recorded == 0 {
                0.0
            } else {
                self.deviation as f64 / self.recorded as f64
            },
            order_inversions: self.order_inversions,
            error_ns: self.errors.map(stats),
        }
    }
}

/// [`sweep`]'s sums; `simulated`: whether the trace simulated clocks (so
/// errors against the true time are taken).
pub fn sweep_parts(
    trace: &Trace,
    g: &Graph,
    before: &(impl Times + ?Sized + Sync),
    after: &(impl Times + ?Sized + Sync),
    simulated: bool,
) -> SweepParts {
    use rayon::prelude::*;
    /// One location's part: moved events, largest move, deviation and
    /// recorded sums, inversions, errors.
    type Part = (u64, u64, u128, u128, u64, Vec<u64>);
    let parts: Vec<Part> = (0..g.locs.len() as u32)
        .into_par_iter()
        .map(|l| {
            let loc = &g.locs[l as usize];
            let n = g.len(l) as u32;
            let h = &trace.rank(loc.rank).expect("the graph's rank").header;
            let mut errs = Vec::new();
            let (mut events, mut max, mut inversions) = (0, 0, 0);
            let (mut dev, mut sum) = (0u128, 0u128);
            let mut seen = vec![0u64; (n as usize / 2).div_ceil(64)];
            let (mut raw0, mut new0) = (0, 0);
            // A block of nodes at a time, each kind of time read in bulk.
            const BLOCK: u32 = 4096;
            let mut bufs = vec![0u64; 3 * BLOCK as usize];
            let mut k0 = 0;
            while k0 < n {
                let m = BLOCK.min(n - k0) as usize;
                let (raws, rest) = bufs.split_at_mut(BLOCK as usize);
                let (befores, afters) = rest.split_at_mut(BLOCK as usize);
                g.raw_fill(l, k0, &mut raws[..m]);
                before.fill(l, k0, &mut befores[..m]);
                after.fill(l, k0, &mut afters[..m]);
                for j in 0..m {
                    let k = k0 + j as u32;
                    let (raw, new) = (raws[j], afters[j]);
                    let d = befores[j].abs_diff(new);
                    if d > 0 {
                        max = max.max(d);
                        let rec = g.pos(l, k) as usize / 2;
                        let bit = 1u64 << (rec % 64);
                        if seen[rec / 64] & bit == 0 {
                            seen[rec / 64] |= bit;
                            events += 1;
                        }
                    }
                    if k > 0 {
                        let was = raw - raw0;
                        dev += u128::from(was.abs_diff(new.abs_diff(new0)));
                        sum += u128::from(was);
                        inversions += u64::from(new < new0);
                    }
                    if simulated {
                        errs.push(h.true_time(raw).abs_diff(new));
                    }
                    (raw0, new0) = (raw, new);
                }
                k0 += m as u32;
            }
            (events, max, dev, sum, inversions, errs)
        })
        .collect();
    let mut errs: Vec<u64> = Vec::new();
    let (mut events, mut max, mut inversions) = (0, 0, 0);
    let (mut dev, mut sum) = (0u128, 0u128);
    for (e, m, d, s, i, errors) in parts {
        events += e;
        max = max.max(m);
        dev += d;
        sum += s;
        inversions += i;
        errs.extend(errors);
    }
    SweepParts {
        events_moved: events,
        max_shift_ns: max,
        deviation: dev,
        recorded: sum,
        order_inversions: inversions,
        errors: simulated.then_some(errs),
    }
}

/// The error of `t` against the true time, if the run simulated clocks.
pub fn error(trace: &Trace, g: &Graph, t: &(impl Times + ?Sized)) -> Option<ErrorStats> {
    if trace.ranks.iter().all(|r| r.header.clock_sim.is_none()) {
        return None;
    }
    Some(error_stats(errors(trace, g, t)))
}

/// |t − true| of every stamp of `g` (whose trace simulated clocks).
pub fn errors(trace: &Trace, g: &Graph, t: &(impl Times + ?Sized)) -> Vec<u64> {
    let mut errs: Vec<u64> = Vec::with_capacity(g.stamps());
    for (l, loc) in g.locs.iter().enumerate() {
        let h = &trace.rank(loc.rank).expect("the graph's rank").header;
        let l = l as u32;
        errs.extend((0..g.len(l) as u32).map(|k| h.true_time(g.raw(l, k)).abs_diff(t.at(l, k))));
    }
    errs
}

/// Median, 99th percentile and largest of `errs`.
pub fn error_stats(mut errs: Vec<u64>) -> ErrorStats {
    if errs.is_empty() {
        return ErrorStats::default();
    }
    let n = errs.len();
    let max = *errs.iter().max().expect("not empty");
    let p99 = *errs.select_nth_unstable(((n - 1) * 99) / 100).1;
    let median = *errs.select_nth_unstable((n - 1) / 2).1;
    ErrorStats { median, p99, max }
}
