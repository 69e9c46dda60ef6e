//! Step 1: each rank's clock offset to rank 0, interpolated linearly
//! between the measurement inside `MPI_Init` and the one inside
//! `MPI_Finalize` (Becker et al. §2; CLOG and Score-P measure the same way).
//!
//! A rank with only the init measurement (it never finalized) keeps that
//! offset; a rank with none keeps its times.

use pmtrace_format::meta::OffsetSample;

use super::graph::Graph;
use crate::read::Trace;

/// A rank's offset to rank 0 as a function of its local time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetLine {
    pub init: Option<OffsetSample>,
    pub fin: Option<OffsetSample>,
}

impl OffsetLine {
    /// Rank 0's time for local time `t`.
    pub fn apply(&self, t: u64) -> u64 {
        let off = match (self.init, self.fin) {
            (Some(a), Some(b)) if b.local_ns > a.local_ns => {
                let (t, la, lb) = (
                    i128::from(t),
                    i128::from(a.local_ns),
                    i128::from(b.local_ns),
                );
                let (oa, ob) = (i128::from(a.offset_ns), i128::from(b.offset_ns));
                oa + (ob - oa) * (t - la) / (lb - la)
            }
            (Some(a), _) | (None, Some(a)) => i128::from(a.offset_ns),
            (None, None) => 0,
        };
        (i128::from(t) + off).clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// The offset line of every rank.
pub fn lines(trace: &Trace) -> Vec<OffsetLine> {
    trace
        .ranks
        .iter()
        .map(|r| OffsetLine {
            init: r.header.offset_init,
            fin: r.trailer.as_ref().and_then(|t| t.offset_finalize),
        })
        .collect()
}

/// Applies step 1 to times `t` (in node order).
pub fn apply(g: &Graph, lines: &[OffsetLine], t: &mut [Vec<u64>]) {
    for (loc, ts) in g.locs.iter().zip(t.iter_mut()) {
        let line = lines[loc.rank as usize];
        for v in ts.iter_mut() {
            *v = line.apply(*v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(local_ns: u64, offset_ns: i64) -> OffsetSample {
        OffsetSample {
            offset_ns,
            error_ns: 100,
            local_ns,
            measured_by: 1,
            hosts: 1,
            latency_intra_ns: None,
            latency_inter_ns: None,
            reps: 10,
        }
    }

    #[test]
    fn the_offset_is_interpolated_between_init_and_finalize() {
        let line = OffsetLine {
            init: Some(sample(1_000, 500)),
            fin: Some(sample(11_000, -500)),
        };
        assert_eq!(line.apply(1_000), 1_500);
        assert_eq!(line.apply(6_000), 6_000);
        assert_eq!(line.apply(11_000), 10_500);
        // Beyond the measurements the line goes on.
        assert_eq!(line.apply(21_000), 19_500);
    }

    #[test]
    fn one_measurement_is_a_constant_offset_and_none_is_identity() {
        let only = OffsetLine {
            init: Some(sample(1_000, -300)),
            fin: None,
        };
        assert_eq!(only.apply(5_000), 4_700);
        let none = OffsetLine {
            init: None,
            fin: None,
        };
        assert_eq!(none.apply(5_000), 5_000);
        // Offsets never take a time below zero.
        assert_eq!(only.apply(100), 0);
    }
}
