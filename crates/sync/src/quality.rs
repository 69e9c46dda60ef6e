//! How good a set of times is: violations of causality, how much each step
//! moved, how much local intervals changed, and (under
//! `PMTRACE_CLOCK_SIM`) how far the times are from the true time.

use serde::{Deserialize, Serialize};

use super::graph::Graph;
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
pub fn violations(g: &Graph, t: &[Vec<u64>]) -> SyncViolations {
    let at = |loc: u32, k: u32| t[loc as usize][k as usize];
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
pub fn latency_floor(g: &Graph, t: &[Vec<u64>], same_host: bool) -> Option<u64> {
    let mut lat: Vec<i64> = g
        .msgs
        .iter()
        .filter(|(s, r)| {
            let (a, b) = (&g.locs[s.loc as usize], &g.locs[r.loc as usize]);
            a.group != b.group && (a.host == b.host) == same_host
        })
        .map(|(s, r)| {
            t[r.loc as usize][r.k as usize] as i64 - t[s.loc as usize][s.k as usize] as i64
        })
        .collect();
    if lat.is_empty() {
        return None;
    }
    let at = (lat.len() - 1) / 100;
    Some((*lat.select_nth_unstable(at).1).max(0) as u64)
}

/// Events (records) with a stamp that differs between `a` and `b`, and
/// the largest difference.
pub fn moved(g: &Graph, a: &[Vec<u64>], b: &[Vec<u64>]) -> (u64, u64) {
    let mut events = 0;
    let mut max = 0;
    for (l, pos) in g.pos.iter().enumerate() {
        let mut moved = vec![false; pos.len() / 2 + 1];
        for (k, &p) in pos.iter().enumerate() {
            let d = a[l][k].abs_diff(b[l][k]);
            if d > 0 {
                max = max.max(d);
                let rec = &mut moved[p as usize / 2];
                if !*rec {
                    *rec = true;
                    events += 1;
                }
            }
        }
    }
    (events, max)
}

/// Becker's weighted interval deviation Σ|Δt' − Δt| / Σ|Δt| over
/// consecutive stamps of each location, against the recorded intervals.
pub fn interval_deviation(g: &Graph, t: &[Vec<u64>]) -> f64 {
    let (mut dev, mut sum) = (0u128, 0u128);
    for (raw, new) in g.raw.iter().zip(t) {
        for k in 1..raw.len() {
            let was = raw[k] - raw[k - 1];
            let now = new[k].abs_diff(new[k - 1]);
            dev += u128::from(was.abs_diff(now));
            sum += u128::from(was);
        }
    }
    if sum == 0 {
        0.0
    } else {
        dev as f64 / sum as f64
    }
}

/// Consecutive stamps of a location whose order `t` reverses (0 after every step).
pub fn order_inversions(t: &[Vec<u64>]) -> u64 {
    t.iter()
        .map(|ts| ts.windows(2).filter(|w| w[1] < w[0]).count() as u64)
        .sum()
}

/// The error of `t` against the true time, if the run simulated clocks.
pub fn error(trace: &Trace, g: &Graph, t: &[Vec<u64>]) -> Option<ErrorStats> {
    if trace.ranks.iter().all(|r| r.header.clock_sim.is_none()) {
        return None;
    }
    let mut errs: Vec<u64> = Vec::with_capacity(g.stamps());
    for ((loc, raw), new) in g.locs.iter().zip(&g.raw).zip(t) {
        let h = &trace.ranks[loc.rank as usize].header;
        errs.extend(
            raw.iter()
                .zip(new)
                .map(|(&r, &n)| h.true_time(r).abs_diff(n)),
        );
    }
    if errs.is_empty() {
        return Some(ErrorStats::default());
    }
    let n = errs.len();
    let max = *errs.iter().max().expect("not empty");
    let p99 = *errs.select_nth_unstable(((n - 1) * 99) / 100).1;
    let median = *errs.select_nth_unstable((n - 1) / 2).1;
    Some(ErrorStats { median, p99, max })
}
