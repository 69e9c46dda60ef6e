//! Jiang's metrics over blocks ([`pmtrace_report::metrics`]):
//! the window from every block's parts, each rank's part where it is held,
//! assembled at process 0 in rank order (so the parallelism profile's
//! floating-point sums are the serial ones).

use rayon::prelude::*;

use pmtrace_report::metrics::{self, Metrics, RankMetrics};
use pmtrace_report::times::Times;

use crate::block::Block;
use crate::fabric::Fabric;
use crate::wire::{In, Out};

/// The window of the whole trace's work.
pub fn window<F: Fabric + ?Sized>(f: &F, b: &Block, times: &Times) -> (u64, u64) {
    let (init_end, fin_start, lo, hi) = metrics::window_parts(&b.trace, times);
    // Maxima all: None as 0, a minimum as its complement.
    let mut v = [
        init_end.map_or(0, |x| x + 1),
        fin_start.map_or(0, |x| u64::MAX - x),
        u64::MAX - lo,
        hi,
    ];
    f.max(&mut v);
    metrics::window_of((
        v[0].checked_sub(1),
        (v[1] > 0).then(|| u64::MAX - v[1]),
        u64::MAX - v[2],
        v[3],
    ))
}

/// The metrics, on process 0 (`None` elsewhere).
pub fn compute<F: Fabric + ?Sized>(f: &F, b: &Block, times: &Times) -> Option<Metrics> {
    let window = window(f, b, times);
    let parts: Vec<(RankMetrics, Vec<f64>)> = b
        .trace
        .ranks
        .par_iter()
        .map(|rank| metrics::rank_part(rank, times, window))
        .collect();
    let mut out = Out::default();
    for (m, p) in &parts {
        out.u32(m.rank)
            .u64(m.computation_ns)
            .u64(m.mpi_ns)
            .u64(p.len() as u64);
        for &x in p {
            out.f64(x);
        }
    }
    let got = f.gather(out.0);
    if f.index() != 0 {
        return None;
    }
    let mut all = Vec::with_capacity(b.trace.world_size as usize);
    for bytes in &got {
        let mut i = In::new(bytes);
        while !i.done() {
            let m = RankMetrics {
                rank: i.u32(),
                computation_ns: i.u64(),
                mpi_ns: i.u64(),
            };
            let n = i.u64() as usize;
            all.push((m, (0..n).map(|_| i.f64()).collect()));
        }
    }
    Some(metrics::assemble(times.base(), window, all))
}
