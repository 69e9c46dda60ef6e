//! Step 1: each rank's clock offset to rank 0, interpolated linearly
//! between the measurement inside `MPI_Init` and the one inside
//! `MPI_Finalize` (Becker et al. §2; CLOG and Score-P measure the same way).
//!
//! A rank with only the init measurement (it never finalized) keeps that
//! offset; a rank with none keeps its times.

use pmtrace_format::meta::OffsetSample;

use super::graph::{Graph, Times};
use super::regress::Correction;
use pmtrace_trace::read::Trace;

/// A rank's offset to rank 0 as a function of its local time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetLine {
    pub init: Option<OffsetSample>,
    pub fin: Option<OffsetSample>,
}

impl OffsetLine {
    /// Rank 0's time for local time `t`. Before the first measurement and
    /// after the last, the line goes on only when its slope is known better
    /// than the slope itself is large; else the offset is held. (When
    /// `MPI_Init` takes longer than the computation, extrapolating a slope
    /// made of two close, noisy measurements would multiply their errors
    /// far beyond any real drift.)
    pub fn apply(&self, t: u64) -> u64 {
        self.map(t, !self.slope_is_known())
    }

    /// Whether the slope's uncertainty (the two error bounds over the
    /// time between the measurements) is below half the slope.
    pub(crate) fn slope_is_known(&self) -> bool {
        let (Some(a), Some(b)) = (self.init, self.fin) else {
            return false;
        };
        let span = b.local_ns.saturating_sub(a.local_ns) as f64;
        let rise = (b.offset_ns - a.offset_ns).unsigned_abs() as f64;
        // Holding errs by the true slope times the distance, at least
        // (rise − bounds) / span; going on errs by at most bounds / span.
        // And no real clock drifts by 500 ppm: such a slope is noise.
        span > 0.0 && 2.0 * ((a.error_ns + b.error_ns) as f64) < rise && rise / span < 500e-6
    }

    /// Rank 0's time for local time `t` on the line, extrapolated beyond
    /// the measurements too (what step 2 corrects, as one line under a
    /// constant drift).
    pub fn extrapolate(&self, t: u64) -> u64 {
        self.map(t, false)
    }

    pub(crate) fn map(&self, t: u64, hold: bool) -> u64 {
        let off = match (self.init, self.fin) {
            (Some(a), Some(b)) if b.local_ns > a.local_ns => {
                let at = if hold {
                    t.clamp(a.local_ns, b.local_ns)
                } else {
                    t
                };
                let (t, la, lb) = (
                    i128::from(at),
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

impl OffsetLine {
    /// How far step 1 may place a local time `d` ns before the first
    /// measurement from the true time, at most: that measurement's bound,
    /// plus the drift over `d`. The slope is uncertain by the two bounds
    /// over the time between the measurements; where the line goes on,
    /// that is all, and where it holds, the largest slope the measurements
    /// allow. `None` without two measurements (the drift is unknown).
    pub fn bound_before(&self, d: u64) -> Option<u64> {
        let (Some(a), Some(b)) = (self.init, self.fin) else {
            return None;
        };
        let span = b.local_ns.checked_sub(a.local_ns).filter(|&s| s > 0)? as f64;
        let unsure = (a.error_ns + b.error_ns) as f64 / span;
        let slope = if self.slope_is_known() {
            unsure
        } else {
            (b.offset_ns - a.offset_ns).unsigned_abs() as f64 / span + unsure
        };
        Some(a.error_ns + (slope * d as f64).ceil() as u64)
    }

    /// How far step 1 may be off: the larger error bound of the two
    /// measurements; `None` without any.
    pub fn bound(&self) -> Option<u64> {
        [self.init, self.fin]
            .into_iter()
            .flatten()
            .map(|s| s.error_ns)
            .max()
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

/// An offset line made ready for evaluating at every stamp: the same
/// values as [`OffsetLine::map`], with its division by the constant span
/// done by a multiplication by the span's reciprocal and an exact fix-up
/// (the library's 128-bit division took a fifth of `pmtrace sync`).
#[derive(Debug, Clone, Copy)]
struct Line {
    line: OffsetLine,
    hold: bool,
    /// (local time and offset at init, rise, span, ⌊(2^64 − 1) / span⌋)
    /// for a line through two measurements.
    slope: Option<(u64, i64, i64, u64, u64)>,
    /// Local time at finalize (the end of the held range).
    end: u64,
}

impl Line {
    fn new(line: OffsetLine) -> Line {
        let hold = !line.slope_is_known();
        let slope = match (line.init, line.fin) {
            (Some(a), Some(b)) if b.local_ns > a.local_ns => {
                let span = b.local_ns - a.local_ns;
                let rise = b.offset_ns.checked_sub(a.offset_ns);
                rise.map(|rise| (a.local_ns, a.offset_ns, rise, span, u64::MAX / span))
            }
            _ => None,
        };
        Line {
            line,
            hold,
            slope,
            end: line.fin.map_or(0, |b| b.local_ns),
        }
    }

    #[inline]
    fn eval(&self, t: u64, hold: bool) -> u64 {
        let Some((la, oa, rise, span, inv)) = self.slope else {
            return self.line.map(t, hold);
        };
        let at = if hold { t.clamp(la, self.end) } else { t };
        let run = i128::from(at) - i128::from(la);
        let num = i128::from(rise) * run;
        let Ok(n) = u64::try_from(num.unsigned_abs()) else {
            return self.line.map(t, hold);
        };
        // ⌊n / span⌋: the estimate is low by at most 2.
        let mut q = ((u128::from(n) * u128::from(inv)) >> 64) as u64;
        let mut r = n - q * span;
        while r >= span {
            q += 1;
            r -= span;
        }
        let quotient = if num < 0 {
            -i128::from(q)
        } else {
            i128::from(q)
        };
        let off = i128::from(oa) + quotient;
        (i128::from(t) + off).clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// Steps 1 and 2 as functions of the recorded times, computed where they
/// are read instead of stored: step 1's offset line of each location, and
/// where step 2 corrects the location's clock group, its correction.
pub struct Stepped<'a, 't> {
    g: &'a Graph<'t>,
    /// Per location: its rank's line, and whether step 2 corrects it.
    locs: Vec<(Line, bool)>,
    correction: Option<&'a Correction>,
}

impl<'a, 't> Stepped<'a, 't> {
    /// Step 1: the interpolated offsets.
    pub fn interpolated(g: &'a Graph<'t>, lines: &[OffsetLine]) -> Stepped<'a, 't> {
        Stepped::new(g, lines, None)
    }

    /// Step 1, and step 2 if there is a `correction`.
    pub fn new(
        g: &'a Graph<'t>,
        lines: &[OffsetLine],
        correction: Option<&'a Correction>,
    ) -> Stepped<'a, 't> {
        let locs = g
            .locs
            .iter()
            .map(|loc| {
                let corrects = correction.is_some_and(|c| c.corrects(loc.group));
                (Line::new(lines[(loc.rank - g.first) as usize]), corrects)
            })
            .collect();
        Stepped {
            g,
            locs,
            correction,
        }
    }
}

impl Stepped<'_, '_> {
    /// The time of recorded time `r` of location `loc`.
    #[inline]
    fn map(&self, loc: u32, r: u64) -> u64 {
        let (line, corrects) = &self.locs[loc as usize];
        match self.correction {
            Some(c) if *corrects => {
                // Outside the measured range, the correction is held at its
                // value where the range ends, and step 1's rule carries the
                // line on: no message there speaks for a slope of its own.
                let edge = match line.slope {
                    Some((la, ..)) => r.clamp(la, line.end),
                    None => r,
                };
                let group = self.g.locs[loc as usize].group;
                let on_line = line.eval(edge, false);
                let e = c.error(group, on_line as f64).unwrap_or(0.0).round() as i64;
                let at = if edge == r {
                    on_line
                } else {
                    line.eval(r, line.hold)
                };
                (at as i64 - e).max(0) as u64
            }
            _ => line.eval(r, line.hold),
        }
    }
}

impl Times for Stepped<'_, '_> {
    #[inline]
    fn at(&self, loc: u32, k: u32) -> u64 {
        self.map(loc, self.g.raw(loc, k))
    }

    fn fill(&self, loc: u32, k0: u32, out: &mut [u64]) {
        self.g.raw_fill(loc, k0, out);
        for o in out.iter_mut() {
            *o = self.map(loc, *o);
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
        let mut line = OffsetLine {
            init: Some(sample(1_000, 500)),
            fin: Some(sample(11_000, -500)),
        };
        line.init.as_mut().unwrap().error_ns = 1_000;
        assert_eq!(line.apply(1_000), 1_500);
        assert_eq!(line.apply(6_000), 6_000);
        assert_eq!(line.apply(11_000), 10_500);
        // Beyond the measurements the offset is held.
        assert_eq!(line.apply(21_000), 20_500);
        assert_eq!(line.apply(0), 500);
        assert_eq!(line.extrapolate(21_000), 19_500);
    }

    #[test]
    fn a_time_before_the_first_measurement_is_bounded_by_the_slope_it_may_have() {
        // Measured 1 s apart, each within 100 ns: the slope is known to
        // 200 ns / 1 s = 0.2 ppm.
        let s = 1_000_000_000;
        let known = OffsetLine {
            init: Some(sample(s, 0)),
            fin: Some(sample(2 * s, 10_000)),
        };
        assert!(known.slope_is_known());
        // 0.5 s before: 100 + 0.2 ppm × 0.5 s.
        assert_eq!(known.bound_before(s / 2), Some(200));
        assert_eq!(known.bound_before(0), Some(100));
        // A rise of 300 ns is not known (2 × 200 ≥ 300): the offset is
        // held, and the true slope may be up to (300 + 200) ns / 1 s.
        let held = OffsetLine {
            init: Some(sample(s, 0)),
            fin: Some(sample(2 * s, -300)),
        };
        assert!(!held.slope_is_known());
        assert_eq!(held.bound_before(s / 2), Some(100 + 250));
        // One measurement: the drift is unknown.
        let once = OffsetLine {
            init: Some(sample(s, 0)),
            fin: None,
        };
        assert_eq!(once.bound_before(1), None);
    }

    #[test]
    fn a_well_measured_slope_goes_on_beyond_the_measurements() {
        // A rise of 1000 ns over 10 s (0.1 ppm) against error bounds of 2·100 ns.
        let line = OffsetLine {
            init: Some(sample(1_000_000_000, 500)),
            fin: Some(sample(11_000_000_000, -500)),
        };
        assert_eq!(line.apply(0), 600);
        assert_eq!(line.apply(21_000_000_000), 21_000_000_000 - 1_500);
        // The same rise against bounds of 2·300 ns: held.
        let mut noisy = line;
        noisy.init.as_mut().unwrap().error_ns = 300;
        noisy.fin.as_mut().unwrap().error_ns = 300;
        assert_eq!(noisy.apply(0), 500);
        assert_eq!(noisy.apply(21_000_000_000), 21_000_000_000 - 500);
        // A slope no clock has (1000 ppm) is noise: held.
        let wild = OffsetLine {
            init: Some(sample(1_000_000, 500)),
            fin: Some(sample(11_000_000, -9_500)),
        };
        assert_eq!(wild.apply(0), 500);
    }

    #[test]
    fn the_ready_line_gives_the_lines_values_exactly() {
        let lines = [
            (sample(1_000, 500), sample(11_000, -500)),
            (sample(1_000_000_000, 500), sample(11_000_000_000, -500)),
            (
                sample(3_000_000_000, -7_777),
                sample(3_000_000_123, 9_999_999),
            ),
            (sample(5, i64::MAX / 2), sample(1 << 62, -(i64::MAX / 2))),
        ];
        let times = [
            0,
            1,
            999,
            1_000,
            5_555,
            11_000,
            21_000,
            1 << 40,
            u64::MAX / 3,
            u64::MAX,
        ];
        for (a, b) in lines {
            for line in [
                OffsetLine {
                    init: Some(a),
                    fin: Some(b),
                },
                OffsetLine {
                    init: Some(a),
                    fin: None,
                },
                OffsetLine {
                    init: None,
                    fin: None,
                },
            ] {
                let ready = Line::new(line);
                for t in times
                    .iter()
                    .copied()
                    .chain((0..2000).map(|k| k * 7_919_393))
                {
                    for hold in [false, true] {
                        assert_eq!(
                            ready.eval(t, hold),
                            line.map(t, hold),
                            "{line:?} at {t}, hold {hold}"
                        );
                    }
                }
            }
        }
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
