//! Jiang's metrics of the execution graph (`004_…` §3), over the
//! application's work: from the last end of `MPI_Init(_thread)` to the
//! first start of `MPI_Finalize` across ranks (the whole trace where
//! either is missing), on synchronized time when `pmtrace sync` ran.
//!
//! - `total_ns`: T, that window's length;
//! - each rank's computation Cᵢ: its time in the window outside MPI (a
//!   rank with several threads is in MPI while any of them is);
//! - `speedup`: ΣCᵢ / T, the parallel work done per unit of time, and
//!   `efficiency`: ΣCᵢ / (n·T);
//! - `computation_to_communication`: ΣCᵢ / Σ(T − Cᵢ);
//! - `load_imbalance`: max Cᵢ / mean Cᵢ − 1 (0: balanced);
//! - `parallelism`: the parallelism profile, in each of [`BINS`] equal
//!   bins of the window the mean number of ranks computing.

use pmtrace_format::Kind;
use pmtrace_trace::read::{EventRef, Rank, Trace};
use rayon::prelude::*;
use serde::Serialize;

use crate::times::Times;

/// Bins of the parallelism profile.
pub const BINS: usize = 100;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metrics {
    /// "synchronized" or "recorded".
    pub time_base: &'static str,
    /// The window, in the trace's times (ns).
    pub from_ns: u64,
    pub to_ns: u64,
    pub total_ns: u64,
    pub computation_ns: u64,
    pub mpi_ns: u64,
    pub speedup: f64,
    pub efficiency: f64,
    pub computation_to_communication: f64,
    pub load_imbalance: f64,
    pub per_rank: Vec<RankMetrics>,
    /// Length of a bin of `parallelism`, in ns.
    pub bin_ns: f64,
    pub parallelism: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankMetrics {
    pub rank: u32,
    pub computation_ns: u64,
    pub mpi_ns: u64,
}

/// The metrics of `trace` on `times`.
pub fn compute(trace: &Trace, times: &Times) -> Metrics {
    let window = window(trace, times);
    let parts: Vec<(RankMetrics, Vec<f64>)> = trace
        .ranks
        .par_iter()
        .map(|rank| rank_part(rank, times, window))
        .collect();
    assemble(times.base(), window, parts)
}

/// One rank's computation and MPI time in the window `(from, to)`, and its
/// share of the parallelism profile, from its MPI intervals merged in
/// time order.
pub fn rank_part(rank: &Rank, times: &Times, (from, to): (u64, u64)) -> (RankMetrics, Vec<f64>) {
    let total = to.saturating_sub(from);
    let mut acc = Sweep {
        from,
        to,
        width: total as f64 / BINS as f64,
        at: from,
        mpi: 0,
        parallel: vec![0f64; BINS],
    };
    if rank.threads.len() == 1 {
        merged(
            times.calls(rank.rank, 0).map(|(_, a, b)| (a, b.max(a))),
            &mut acc,
        );
    } else {
        let mut v: Vec<(u64, u64)> = (0..rank.threads.len())
            .flat_map(|slot| times.calls(rank.rank, slot))
            .map(|(_, a, b)| (a, b.max(a)))
            .collect();
        v.sort_unstable();
        merged(v.into_iter(), &mut acc);
    }
    acc.finish();
    let m = RankMetrics {
        rank: rank.rank,
        computation_ns: total.saturating_sub(acc.mpi),
        mpi_ns: acc.mpi,
    };
    (m, acc.parallel)
}

/// The metrics from every rank's part, in rank order (the profile's sums
/// taken in that order).
pub fn assemble(
    time_base: &'static str,
    (from, to): (u64, u64),
    per_rank: Vec<(RankMetrics, Vec<f64>)>,
) -> Metrics {
    let total = to.saturating_sub(from);
    let width = total as f64 / BINS as f64;
    let mut parallel = vec![0f64; BINS];
    for (_, p) in &per_rank {
        for (sum, v) in parallel.iter_mut().zip(p) {
            *sum += v;
        }
    }
    let per_rank: Vec<RankMetrics> = per_rank.into_iter().map(|(m, _)| m).collect();
    // Saturating: each rank's share is at most the window, but a corrupt
    // trace's window can be near 2^64.
    let computation = (per_rank.iter()).fold(0u64, |a, r| a.saturating_add(r.computation_ns));
    let mpi = (per_rank.iter()).fold(0u64, |a, r| a.saturating_add(r.mpi_ns));
    let n = per_rank.len().max(1) as f64;
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let mean = computation as f64 / n;
    let max = per_rank.iter().map(|r| r.computation_ns).max().unwrap_or(0);
    Metrics {
        time_base,
        from_ns: from,
        to_ns: to,
        total_ns: total,
        computation_ns: computation,
        mpi_ns: mpi,
        speedup: ratio(computation as f64, total as f64),
        efficiency: ratio(computation as f64, n * total as f64),
        computation_to_communication: ratio(computation as f64, mpi as f64),
        load_imbalance: if mean > 0.0 {
            max as f64 / mean - 1.0
        } else {
            0.0
        },
        per_rank,
        bin_ns: width,
        parallelism: parallel,
    }
}

struct Sweep {
    from: u64,
    to: u64,
    width: f64,
    /// The end of the MPI time seen so far.
    at: u64,
    mpi: u64,
    parallel: Vec<f64>,
}

impl Sweep {
    /// An MPI interval, after every earlier one (merged: disjoint).
    fn busy(&mut self, a: u64, b: u64) {
        let (ca, cb) = (a.max(self.from), b.min(self.to));
        if cb > ca {
            self.mpi += cb - ca;
        }
        if a > self.at {
            self.computing(self.at, a);
        }
        self.at = self.at.max(b);
    }

    fn finish(&mut self) {
        if self.to > self.at {
            self.computing(self.at, self.to);
            self.at = self.to;
        }
    }

    /// Time computing from `a` to `b`, into the profile's bins.
    fn computing(&mut self, a: u64, b: u64) {
        let (a, b) = (a.max(self.from), b.min(self.to));
        if b <= a || self.width <= 0.0 {
            return;
        }
        let x0 = (a - self.from) as f64 / self.width;
        let x1 = (b - self.from) as f64 / self.width;
        let (i0, i1) = (x0 as usize, (x1 as usize).min(BINS - 1));
        for (i, p) in self.parallel.iter_mut().enumerate().take(i1 + 1).skip(i0) {
            let lo = x0.max(i as f64);
            let hi = x1.min(i as f64 + 1.0);
            if hi > lo {
                *p += hi - lo;
            }
        }
    }
}

/// Feeds `sweep` the union of `intervals` (sorted by start).
fn merged(intervals: impl Iterator<Item = (u64, u64)>, sweep: &mut Sweep) {
    let mut cur: Option<(u64, u64)> = None;
    for (a, b) in intervals {
        match &mut cur {
            Some(c) if a <= c.1 => c.1 = c.1.max(b),
            _ => {
                if let Some((x, y)) = cur.replace((a, b)) {
                    sweep.busy(x, y);
                }
            }
        }
    }
    if let Some((x, y)) = cur {
        sweep.busy(x, y);
    }
}

/// From the last end of an init call to the first start of `MPI_Finalize`
/// over all ranks; from the first call's start to the last call's end
/// where a trace has not both, or they leave no gap.
/// The window of `trace`'s work (see the module docs).
pub fn window(trace: &Trace, times: &Times) -> (u64, u64) {
    window_of(window_parts(trace, times))
}

/// What the window is made of, over the ranks of `trace` (or of a block):
/// the last end of `MPI_Init`, the first start of `MPI_Finalize`, the
/// first and last times of any call.
pub fn window_parts(trace: &Trace, times: &Times) -> (Option<u64>, Option<u64>, u64, u64) {
    let mut init_end: Option<u64> = None;
    let mut fin_start: Option<u64> = None;
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    for rank in &trace.ranks {
        for th in &rank.threads {
            let records = &th.records;
            let at = |p: usize| EventRef {
                rank: rank.rank,
                thread: th.index,
                index: p as u32,
            };
            let calls: Vec<usize> = [
                (0..records.len()).find(|&p| records.is_call(p)),
                (0..records.len()).rev().find(|&p| records.is_call(p)),
            ]
            .into_iter()
            .flatten()
            .collect();
            for p in calls {
                if let Some((a, b)) = times.of(at(p)) {
                    lo = lo.min(a);
                    hi = hi.max(b);
                }
            }
            for p in 0..records.len() {
                let Some(func) = records.func(p) else {
                    continue;
                };
                match rank.kind(func) {
                    Kind::Init | Kind::InitThread => {
                        if let Some((_, b)) = times.of(at(p)) {
                            init_end = Some(init_end.map_or(b, |e| e.max(b)));
                        }
                    }
                    Kind::Finalize => {
                        if let Some((a, _)) = times.of(at(p)) {
                            fin_start = Some(fin_start.map_or(a, |s| s.min(a)));
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    (init_end, fin_start, lo, hi)
}

/// The window from its parts (several blocks' combined).
pub fn window_of(
    (init_end, fin_start, lo, hi): (Option<u64>, Option<u64>, u64, u64),
) -> (u64, u64) {
    match (init_end, fin_start) {
        (Some(a), Some(b)) if a < b => (a, b),
        _ if lo <= hi => (lo, hi),
        _ => (0, 0),
    }
}

impl Metrics {
    /// The metrics as a person reads them, the parallelism profile drawn
    /// in 50 characters (each the mean of two bins, the full block for all
    /// ranks computing).
    pub fn write_text(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        let n = self.per_rank.len();
        writeln!(
            w,
            "\nMetrics ({} time, MPI_Init to MPI_Finalize): {:.3} ms",
            self.time_base,
            self.total_ns as f64 / 1e6
        )?;
        writeln!(
            w,
            "  speedup (sum of computation / time) {:.2} of {n} ranks, efficiency {:.1}%",
            self.speedup,
            100.0 * self.efficiency
        )?;
        writeln!(
            w,
            "  computation : communication {:.2}, load imbalance (max / mean computation - 1) {:.1}%",
            self.computation_to_communication,
            100.0 * self.load_imbalance
        )?;
        const LEVELS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
        let line: String = self
            .parallelism
            .chunks(2)
            .map(|c| {
                let p = c.iter().sum::<f64>() / c.len() as f64;
                let level = if n == 0 { 0.0 } else { p / n as f64 * 8.0 };
                LEVELS[(level.round() as usize).min(8)]
            })
            .collect();
        writeln!(w, "  parallelism  |{line}|  (ranks computing, 0 to {n})")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A corrupt trace's window near 2^64: the sums saturate (the fuzz
    /// regression `metrics-computation-sum-overflow` is such a trace).
    #[test]
    fn sums_over_ranks_saturate() {
        let part = |rank| {
            let m = RankMetrics {
                rank,
                computation_ns: u64::MAX - 10,
                mpi_ns: u64::MAX / 2 + 1,
            };
            (m, vec![0.0; BINS])
        };
        let m = assemble("recorded", (0, u64::MAX), vec![part(0), part(1)]);
        assert_eq!((m.computation_ns, m.mpi_ns), (u64::MAX, u64::MAX));
    }
}
