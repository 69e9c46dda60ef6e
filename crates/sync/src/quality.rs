//! How good a set of times is: violations of causality, how much each step
//! moved, how much local intervals changed, and (under
//! `PMTRACE_CLOCK_SIM`) how far the times are from the true time.

use serde::{Deserialize, Serialize};

use super::extremes::Enters;
use super::graph::{Graph, Inst, Times};
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
    violations_with(g, t, PAIRWISE)
}

/// `violations`, checking instances of up to `pairwise` members pair by
/// pair (tests compare both ways of counting).
#[doc(hidden)]
pub fn violations_with(g: &Graph, t: &(impl Times + ?Sized), pairwise: usize) -> SyncViolations {
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
        let (reversed, clock) = if inst.ordered() || inst.members.len() <= pairwise {
            collective_pairs(g, inst, t)
        } else {
            collective_counts(g, inst, t)
        };
        v.collective_reversed += reversed;
        v.collective_clock_condition += clock;
    }
    v
}

/// Instances up to this size are checked pair by pair.
const PAIRWISE: usize = 64;

/// An instance's collective violations (reversed, before enter + μ), one
/// logical message at a time.
fn collective_pairs(g: &Graph, inst: &Inst, t: &(impl Times + ?Sized)) -> (u64, u64) {
    let group = |loc: u32| g.locs[loc as usize].group;
    let (mut reversed, mut clock) = (0, 0);
    for (i, m) in inst.members.iter().enumerate() {
        let Some((m, exit)) = m.as_ref().and_then(|m| Some((m, m.exit?))) else {
            continue;
        };
        let tx = t.at(m.loc, exit);
        for k in inst.senders(i as u32) {
            let Some(s) = inst.members[k as usize].as_ref() else {
                continue;
            };
            if group(s.loc) == group(m.loc) {
                continue;
            }
            let te = t.at(s.loc, s.enter);
            reversed += u64::from(tx < te);
            clock += u64::from(tx < te + g.mu(s.loc, m.loc));
        }
    }
    (reversed, clock)
}

/// `collective_pairs` of an unordered instance (every sender but itself
/// sends to each receiver) in O(N log N) rather than N²: per receiver, the
/// senders' enters later than its exit (less μ) are counted by binary
/// search in the enter times sorted over the instance, by host, by clock
/// group and by both, and the senders of its own group (whose messages
/// one clock cannot misorder) are taken out by inclusion and exclusion.
fn collective_counts(g: &Graph, inst: &Inst, t: &(impl Times + ?Sized)) -> (u64, u64) {
    let senders = (inst.members.iter().enumerate())
        .filter(|&(k, _)| inst.may_send(k as u32))
        .filter_map(|(_, m)| m.as_ref())
        .map(|m| (g.place(m.loc), t.at(m.loc, m.enter)));
    let enters = Enters::new(senders);
    let (mut reversed, mut clock) = (0, 0);
    for (i, m) in inst.members.iter().enumerate() {
        let Some((m, exit)) = m.as_ref().and_then(|m| Some((m, m.exit?))) else {
            continue;
        };
        if !inst.may_recv(i as u32) {
            continue;
        }
        let (r, c) = enters.late(g.place(m.loc), t.at(m.loc, exit), g.mus());
        reversed += r;
        clock += c;
    }
    (reversed, clock)
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

/// The stamps before their rank's first offset measurement (the start of
/// `MPI_Init`, and anything earlier): no measurement and no message places
/// them, so step 1's line is carried back to them, and how far it may be
/// off grows with the distance. The report names them with that bound.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Early {
    pub stamps: u64,
    /// The farthest of them before its rank's measurement.
    pub before_ns: u64,
    /// How far from the true time the last step may have put them, at
    /// most; `null` where a rank was measured once only (its drift is
    /// unknown).
    pub bound_ns: Option<u64>,
    /// Under `PMTRACE_CLOCK_SIM`: their error after the last step.
    pub error_ns: Option<ErrorStats>,
    /// Under `PMTRACE_CLOCK_SIM`: the error of every other stamp after the
    /// last step.
    pub rest_error_ns: Option<ErrorStats>,
}

/// [`Early`] over some locations: the sums, and the errors of the early
/// stamps and of the rest (if simulated).
#[derive(Debug, Clone, Default)]
pub struct EarlyParts {
    pub stamps: u64,
    pub before_ns: u64,
    pub bound_ns: u64,
    /// Some early stamp has no bound.
    pub unbounded: bool,
    pub errors: Option<(Vec<u64>, Vec<u64>)>,
}

impl EarlyParts {
    /// The report's part; `None` where no stamp is early. `stats` gives
    /// the statistics of errors (of every block, where a block has only
    /// its own).
    pub fn finish_with(self, mut stats: impl FnMut(Vec<u64>) -> ErrorStats) -> Option<Early> {
        (self.stamps > 0).then(|| {
            let (early, rest) = match self.errors {
                Some((e, r)) => (Some(stats(e)), Some(stats(r))),
                None => (None, None),
            };
            Early {
                stamps: self.stamps,
                before_ns: self.before_ns,
                bound_ns: (!self.unbounded).then_some(self.bound_ns),
                error_ns: early,
                rest_error_ns: rest,
            }
        })
    }
}

/// The early stamps of `g` (see [`Early`]): step 1's bound at each, plus
/// how far the later steps moved it from step 1's time `t1` to `last`.
/// `lines`: the offset line of each rank from `g.first`.
pub fn early_parts(
    trace: &Trace,
    g: &Graph,
    lines: &[super::interp::OffsetLine],
    t1: &(impl Times + ?Sized),
    last: &(impl Times + ?Sized),
    simulated: bool,
) -> EarlyParts {
    let mut p = EarlyParts::default();
    let (mut early, mut rest) = (Vec::new(), Vec::new());
    for (l, loc) in g.locs.iter().enumerate() {
        let l = l as u32;
        let line = &lines[(loc.rank - g.first) as usize];
        let h = &trace.rank(loc.rank).expect("the graph's rank").header;
        let first = line.init.map(|a| a.local_ns);
        for k in 0..g.len(l) as u32 {
            let raw = g.raw(l, k);
            // Nodes are in time order: past the measurement, only the
            // errors of the rest are left to take.
            if !simulated && first.is_none_or(|a| raw >= a) {
                break;
            }
            let err = simulated.then(|| h.true_time(raw).abs_diff(last.at(l, k)));
            match first.filter(|&a| raw < a) {
                Some(a) => {
                    p.stamps += 1;
                    p.before_ns = p.before_ns.max(a - raw);
                    match line.bound_before(a - raw) {
                        Some(b) => {
                            let moved = t1.at(l, k).abs_diff(last.at(l, k));
                            p.bound_ns = p.bound_ns.max(b.saturating_add(moved));
                        }
                        None => p.unbounded = true,
                    }
                    early.extend(err);
                }
                None => rest.extend(err),
            }
        }
    }
    p.errors = simulated.then_some((early, rest));
    p
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
