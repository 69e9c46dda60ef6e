//! Step 2: the remaining offset of each clock group, estimated from the
//! application's own messages (Clément and Dagenais, `002_…`; the
//! min-delay corridor of one-way messages).
//!
//! After step 1 every group's time is rank 0's time plus a small error
//! `e(t)`. A message from group B to group A that left at `s` and arrived
//! at `r` (both as step 1 corrected them) says
//!
//! ```text
//!  r − s = latency + e_A − e_B     so     e_A − e_B ≤ r − s         (upper)
//!  and a message from A to B:             e_A − e_B ≥ −(r − s)      (lower)
//! ```
//!
//! The difference `d = e_A − e_B` lies in a corridor between the lowest
//! upper bound and the highest lower bound. Time is cut into windows with a
//! few messages each way; in each window the middle of the corridor is one
//! estimate of `d` (the fastest message each way bounds it best, and the
//! middle assumes the fastest messages took equally long both ways):
//!
//! ```text
//!   d ▲   ·  ·     ·  ·    ·   ← upper bounds (B→A messages)
//!     │ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ← fitted d(t) through the window middles
//!     │    ·   ·  ·      ·  ·  ← lower bounds (A→B messages)
//!     └────────────────────────► t
//! ```
//!
//! A line is fitted through the window estimates by least squares, with
//! outliers (windows whose fastest messages were slow) rejected by their
//! distance to the fit in median absolute deviations. When the line leaves
//! structure the estimates do not (the drift changed mid-run), a continuous
//! piecewise-linear fit with knots at quantiles of the estimates replaces
//! it.
//!
//! When both groups had their offsets measured at `MPI_Init` and at
//! `MPI_Finalize`, step 1 is right at those two times and, under a constant
//! drift, in between; the fit is then *pinned*: its line through those two
//! times is taken off, leaving only the curvature of a drift that changed.
//! (With ranks outnumbering cores, the fastest message one way can be tens
//! of µs slower than the other way for a whole phase of the run, which
//! moves the corridor middles by as much; a bias that stays constant or
//! grows linearly is removed by pinning.) A pinned fit costs its residual
//! plus the two measurements' bounds, and at least how far it leaves the
//! corridor: the corridor's bounds are certain, its middle is not.
//!
//! Pairs of groups with messages both ways form a graph; each group takes
//! the cheapest path to the reference group (rank 0's), where the cost of
//! a pair is half its corridor width plus its fit residual, and `e` adds
//! up along the path. Step 1 is a path too: straight to the reference,
//! with `e = 0` at the cost of its measurement's error bound, or of how
//! far outside the corridor with rank 0's group its times are (the 90th
//! percentile over the windows), whichever is larger. So a group
//! whose messages say less than its offset measurement (slow messages, a
//! short run) keeps the step 1 times, and a group with no messages both
//! ways can still anchor others.

use std::collections::{BTreeMap, BinaryHeap};

use super::graph::{Graph, Times};

/// A continuous piecewise-linear function; linear beyond its end knots.
#[derive(Debug, Clone, PartialEq)]
pub struct Pwl {
    /// (t, value), t strictly increasing; at least one knot.
    pub knots: Vec<(f64, f64)>,
}

impl Pwl {
    pub fn eval(&self, t: f64) -> f64 {
        let k = &self.knots;
        if k.len() == 1 {
            return k[0].1;
        }
        let j = match k.iter().position(|&(kt, _)| kt > t) {
            Some(0) => 0,
            Some(j) => j - 1,
            None => k.len() - 2,
        };
        let ((t0, v0), (t1, v1)) = (k[j], k[j + 1]);
        v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    }

    fn max_slope(&self) -> f64 {
        self.knots
            .windows(2)
            .map(|w| ((w[1].1 - w[0].1) / (w[1].0 - w[0].0)).abs())
            .fold(0.0, f64::max)
    }
}

/// One estimate of `d` in one window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub t: f64,
    pub d: f64,
    /// Corridor width (upper − lower); negative when the bounds cross.
    pub width: f64,
}

/// `d = e_a − e_b` for one pair of clock groups.
#[derive(Debug, Clone)]
pub struct PairFit {
    pub a: u32,
    pub b: u32,
    pub d: Pwl,
    pub cost: f64,
    /// Fitted to messages (else: step 1's own offset, `d = 0`).
    pub messages: bool,
}

/// The step 2 correction of every clock group: `e(t)`, or `None` where no
/// path of messages reaches the reference group.
#[derive(Debug, Clone, Default)]
pub struct Correction {
    /// Per group: the path to the reference, as (pair fit, sign).
    pub paths: Vec<Option<Vec<(usize, f64)>>>,
    pub fits: Vec<PairFit>,
}

impl Correction {
    /// The error of group `group` at time `t` (0 for the reference).
    pub fn error(&self, group: u32, t: f64) -> Option<f64> {
        let path = self.paths.get(group as usize)?.as_ref()?;
        Some(
            path.iter()
                .map(|&(f, sign)| sign * self.fits[f].d.eval(t))
                .sum(),
        )
    }

    /// Whether group `group` is corrected through messages.
    pub fn corrects(&self, group: u32) -> bool {
        self.paths
            .get(group as usize)
            .and_then(Option::as_ref)
            .is_some_and(|p| p.iter().any(|&(f, _)| self.fits[f].messages))
    }

    /// Groups corrected through messages.
    pub fn reached(&self) -> usize {
        self.paths
            .iter()
            .flatten()
            .filter(|p| p.iter().any(|&(f, _)| self.fits[f].messages))
            .count()
    }
}

/// (time, bound) samples of one side of a corridor.
pub type Samples = Vec<(f64, f64)>;

/// Where step 1 was measured, per group: at `MPI_Init` and at
/// `MPI_Finalize`, the time (in step 1's times) and the error bound of the
/// offset measured there.
pub type Checks = Vec<[Option<(f64, f64)>; 2]>;

/// Estimates the correction from the matched messages of `g` in times
/// `t`; `anchors`: per group, the error bound of step 1 (`None`: unknown);
/// `checks`: where step 1 was measured, which no fit may contradict.
pub fn estimate(
    g: &Graph,
    t: &(impl Times + ?Sized),
    reference: u32,
    anchors: &[Option<u64>],
    checks: &Checks,
) -> Correction {
    let groups = g.groups();
    let origin = origin(g, t);
    let at = |n: super::graph::Node| t.at(n.loc, n.k).saturating_sub(origin) as f64;
    // (upper, lower) samples per pair (a < b): (time, bound on e_a − e_b).
    let mut samples: BTreeMap<(u32, u32), (Samples, Samples)> = BTreeMap::new();
    for &(s, r) in &g.msgs {
        let (gs, gr) = (g.locs[s.loc as usize].group, g.locs[r.loc as usize].group);
        if gs == gr {
            continue;
        }
        let (ts, tr) = (at(s), at(r));
        let (mid, lat) = ((ts + tr) / 2.0, tr - ts);
        if gr < gs {
            samples.entry((gr, gs)).or_default().0.push((mid, lat));
        } else {
            samples.entry((gs, gr)).or_default().1.push((mid, -lat));
        }
    }
    let mut fits = Vec::new();
    // How far the messages with the reference group put each group's
    // step 1 times outside their corridor: step 1 cannot be better.
    let mut contradicted = vec![0.0f64; groups];
    for ((a, b), (up, low)) in samples {
        let (f, outside) = pair_fit(a, b, up, low, origin, reference, checks);
        if let Some((other, x)) = outside {
            contradicted[other as usize] = x;
        }
        fits.extend(f);
    }
    finish(groups, reference, fits, anchors, &contradicted)
}

/// The earliest of the times `t` at every location's first node: where
/// [`estimate`] counts time from.
pub fn origin(g: &Graph, t: &(impl Times + ?Sized)) -> u64 {
    (0..g.locs.len() as u32)
        .filter(|&l| g.len(l) > 0)
        .map(|l| t.at(l, 0))
        .min()
        .unwrap_or(0)
}

/// The fit of one pair of groups `a < b` from its `up` and `low` samples
/// (times from `origin`), and where one of them is the reference, how far
/// the messages put the other's step 1 times outside their corridor.
#[allow(clippy::type_complexity)]
pub fn pair_fit(
    a: u32,
    b: u32,
    up: Samples,
    low: Samples,
    origin: u64,
    reference: u32,
    checks: &Checks,
) -> (Option<PairFit>, Option<(u32, f64)>) {
    let points = windows(up, low);
    let outside_ref = (a == reference || b == reference).then(|| {
        let other = if a == reference { b } else { a };
        (other, outside(&points, |_| 0.0))
    });
    let Some(f) = fit(&points) else {
        return (None, outside_ref);
    };
    let d = shift(f.d, origin as f64);
    let unpinned = (f.half_width + f.rms).max(contradiction(&d, checks, a, b));
    // A pinned fit is only as good as the measurements it is
    // pinned to, and no better than the corridor lets it be.
    let (d, cost) = match pin(&d, checks, a, b) {
        Some((pinned, bounds)) if bounds < unpinned => {
            let off = outside(&points, |t| pinned.eval(t + origin as f64));
            (pinned, (f.rms + bounds).max(off))
        }
        _ => (d, unpinned),
    };
    let fit = PairFit {
        a,
        b,
        d,
        cost,
        messages: true,
    };
    (Some(fit), outside_ref)
}

/// The correction from the pairs' fits (in pair order), each group's step
/// 1 anchor and how far messages contradicted it.
pub fn finish(
    groups: usize,
    reference: u32,
    mut fits: Vec<PairFit>,
    anchors: &[Option<u64>],
    contradicted: &[f64],
) -> Correction {
    for (group, bound) in anchors.iter().enumerate() {
        if let (Some(bound), false) = (bound, group as u32 == reference) {
            fits.push(PairFit {
                a: reference,
                b: group as u32,
                d: Pwl {
                    knots: vec![(0.0, 0.0)],
                },
                cost: (*bound as f64).max(contradicted[group]),
                messages: false,
            });
        }
    }
    let paths = shortest_paths(groups, reference, &fits);
    Correction { paths, fits }
}

/// How far a fit `d = e_a − e_b` goes beyond what the offsets measured at
/// `MPI_Init` and at `MPI_Finalize` allow: there step 1's error is within
/// the measurement's bound on each side. A fit is at least this wrong.
/// (The corridor of messages assumes the fastest message is as fast each
/// way; with ranks descheduled on a busy node it is not, and the fit drifts
/// off by microseconds while its own cost looks small.)
fn contradiction(d: &Pwl, checks: &Checks, a: u32, b: u32) -> f64 {
    let (Some(ca), Some(cb)) = (checks.get(a as usize), checks.get(b as usize)) else {
        return 0.0;
    };
    ca.iter()
        .zip(cb)
        .filter_map(|(x, y)| {
            let ((ta, ba), (tb, bb)) = ((*x)?, (*y)?);
            Some(d.eval((ta + tb) / 2.0).abs() - ba - bb)
        })
        .fold(0.0, f64::max)
}

/// How far `d(t)` lies outside the corridor: the 90th percentile over the
/// windows of its distance beyond the window's bounds. The bounds are
/// certain (no message arrives before it was sent), so a `d` that leaves
/// them is at least that wrong; 0 without a window.
fn outside(points: &[Point], d: impl Fn(f64) -> f64) -> f64 {
    let mut out: Vec<f64> = points
        .iter()
        .filter(|p| p.width >= 0.0)
        .map(|p| ((p.d - d(p.t)).abs() - p.width / 2.0).max(0.0))
        .collect();
    if out.is_empty() {
        return 0.0;
    }
    let at = (out.len() - 1) * 9 / 10;
    *out.select_nth_unstable_by(at, f64::total_cmp).1
}

/// The part of a fit `d = e_a − e_b` that step 1 cannot see, when both
/// groups had their offsets measured at `MPI_Init` and at `MPI_Finalize`:
/// the fit minus its line through those two times.
///
/// Step 1 is right at the two measurements (to within their bounds, a
/// fraction of a µs when the measuring pair had the cores), and under a
/// constant drift right in between, so whatever line the corridor middles
/// add is theirs: the fastest messages were not as fast both ways (a
/// constant bias) or grew slower one way over the run (a slope). What is
/// left is the curvature of a drift that changed, which step 1's line
/// cannot follow. Returns it with the larger sum of the two groups'
/// error bounds at one measurement; `None` without the four measurements.
fn pin(d: &Pwl, checks: &Checks, a: u32, b: u32) -> Option<(Pwl, f64)> {
    let (ca, cb) = (checks.get(a as usize)?, checks.get(b as usize)?);
    let at = |k: usize| {
        let ((ta, ba), (tb, bb)) = (ca[k]?, cb[k]?);
        Some(((ta + tb) / 2.0, ba + bb))
    };
    let ((t1, b1), (t2, b2)) = (at(0)?, at(1)?);
    if t2 <= t1 {
        return None;
    }
    let (v1, v2) = (d.eval(t1), d.eval(t2));
    let line = |t: f64| v1 + (v2 - v1) * (t - t1) / (t2 - t1);
    let mut knots: Vec<(f64, f64)> = d.knots.iter().map(|&(t, v)| (t, v - line(t))).collect();
    if knots.len() == 1 {
        // A constant is a line: nothing is left of it.
        knots[0].1 = 0.0;
    }
    Some((Pwl { knots }, b1.max(b2)))
}

/// Moves the knots of `d` from times relative to `origin` to absolute times.
fn shift(mut d: Pwl, origin: f64) -> Pwl {
    for k in &mut d.knots {
        k.0 += origin;
    }
    d
}

/// The corridor middles, one per window with messages both ways.
pub fn windows(mut up: Vec<(f64, f64)>, mut low: Vec<(f64, f64)>) -> Vec<Point> {
    let n = up.len().min(low.len());
    if n == 0 {
        return Vec::new();
    }
    up.sort_by(|x, y| x.0.total_cmp(&y.0));
    low.sort_by(|x, y| x.0.total_cmp(&y.0));
    let lo = up[0].0.min(low[0].0);
    let hi = up[up.len() - 1].0.max(low[low.len() - 1].0);
    // Enough messages per window that one of them was fast each way.
    let w = (n / 32).clamp(1, 512);
    let span = (hi - lo) / w as f64;
    let slot = |t: f64| {
        if span > 0.0 {
            (((t - lo) / span) as usize).min(w - 1)
        } else {
            0
        }
    };
    // Per window: the lowest upper bound and the highest lower bound.
    let mut best_up: Vec<Option<(f64, f64)>> = vec![None; w];
    let mut best_low: Vec<Option<(f64, f64)>> = vec![None; w];
    for (t, v) in up {
        let b = &mut best_up[slot(t)];
        if b.is_none_or(|(_, bv)| v < bv) {
            *b = Some((t, v));
        }
    }
    for (t, v) in low {
        let b = &mut best_low[slot(t)];
        if b.is_none_or(|(_, bv)| v > bv) {
            *b = Some((t, v));
        }
    }
    best_up
        .into_iter()
        .zip(best_low)
        .filter_map(|(u, l)| {
            let ((tu, u), (tl, l)) = (u?, l?);
            Some(Point {
                t: (tu + tl) / 2.0,
                d: (u + l) / 2.0,
                width: u - l,
            })
        })
        .collect()
}

/// A fit of `d(t)` through the window estimates, and how far it may be off.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    pub d: Pwl,
    /// Half the median corridor width: how far the fastest messages, if
    /// not equally fast both ways, may have moved the corridor middles.
    pub half_width: f64,
    /// The root mean square distance of the kept estimates to the fit.
    pub rms: f64,
}

/// Fits `d(t)` through the window estimates.
pub fn fit(points: &[Point]) -> Option<Fit> {
    if points.is_empty() {
        return None;
    }
    let mut pts: Vec<Point> = points.to_vec();
    pts.sort_by(|x, y| x.t.total_cmp(&y.t));
    // Outliers (windows whose fastest messages were all slow) stand out
    // from their neighbours; a drift change does not.
    let local: Vec<f64> = (0..pts.len())
        .map(|i| {
            let near: Vec<f64> = pts[i.saturating_sub(3)..(i + 4).min(pts.len())]
                .iter()
                .map(|p| p.d)
                .collect();
            pts[i].d - median(&near)
        })
        .collect();
    let spread: Vec<f64> = local.iter().map(|r| r.abs()).collect();
    let limit = (4.0 * 1.4826 * median(&spread)).max(100.0);
    let keep: Vec<Point> = pts
        .iter()
        .zip(&local)
        .filter(|(_, r)| r.abs() <= limit)
        .map(|(p, _)| *p)
        .collect();
    let keep = if keep.is_empty() { pts } else { keep };
    let rms = |f: &Pwl, pts: &[Point]| {
        (pts.iter().map(|p| (p.d - f.eval(p.t)).powi(2)).sum::<f64>() / pts.len() as f64).sqrt()
    };
    let line = line_fit(&keep);
    let line_rms = rms(&line, &keep);
    let (mut best, mut best_rms) = (line.clone(), line_rms);
    if keep.len() >= 16 {
        // Few knots (a segment spans at least 1/8 of the run), and only
        // when the line leaves clear structure: a piecewise fit of noise
        // would swing at its ends.
        let knots = (keep.len() / 32).clamp(2, 8);
        if let Some(sp) = spline_fit(&keep, knots, &line) {
            let sp_rms = rms(&sp, &keep);
            if line_rms > 2.0 * sp_rms + 200.0 && sp.max_slope() < 1e-3 {
                (best, best_rms) = (sp, sp_rms);
            }
        }
    }
    let widths: Vec<f64> = keep.iter().map(|p| p.width.abs()).collect();
    Some(Fit {
        d: best,
        half_width: median(&widths) / 2.0,
        rms: best_rms,
    })
}

/// Least squares line through `pts` (a constant for one point or one time).
fn line_fit(pts: &[Point]) -> Pwl {
    let n = pts.len() as f64;
    let mt = pts.iter().map(|p| p.t).sum::<f64>() / n;
    let md = pts.iter().map(|p| p.d).sum::<f64>() / n;
    let stt: f64 = pts.iter().map(|p| (p.t - mt).powi(2)).sum();
    if pts.len() < 2 || stt <= 0.0 {
        return Pwl {
            knots: vec![(mt, md)],
        };
    }
    let slope = pts.iter().map(|p| (p.t - mt) * (p.d - md)).sum::<f64>() / stt;
    let (t0, t1) = (pts[0].t, pts[pts.len() - 1].t);
    Pwl {
        knots: vec![(t0, md + slope * (t0 - mt)), (t1, md + slope * (t1 - mt))],
    }
}

/// Least squares continuous piecewise-linear fit with `m` knots at
/// quantiles of the point times, pulled slightly towards `prior` where a
/// knot has little data.
fn spline_fit(pts: &[Point], m: usize, prior: &Pwl) -> Option<Pwl> {
    if pts.len() < 2 * m {
        return None;
    }
    let mut ts: Vec<f64> = (0..m)
        .map(|j| pts[(j * (pts.len() - 1)) / (m - 1)].t)
        .collect();
    ts.dedup();
    let m = ts.len();
    if m < 2 {
        return None;
    }
    // Tridiagonal normal equations: diag a, off-diagonal b, right side r.
    let (mut a, mut b, mut r) = (vec![0.0; m], vec![0.0; m], vec![0.0; m]);
    for p in pts {
        let j = match ts.iter().position(|&k| k > p.t) {
            Some(0) => 0,
            Some(j) => j - 1,
            None => m - 2,
        };
        let w = ((p.t - ts[j]) / (ts[j + 1] - ts[j])).clamp(0.0, 1.0);
        a[j] += (1.0 - w) * (1.0 - w);
        a[j + 1] += w * w;
        b[j] += (1.0 - w) * w;
        r[j] += (1.0 - w) * p.d;
        r[j + 1] += w * p.d;
    }
    let eps = 1e-6 * pts.len() as f64 / m as f64;
    for j in 0..m {
        a[j] += eps;
        r[j] += eps * prior.eval(ts[j]);
    }
    // Thomas algorithm.
    let (mut c, mut d) = (vec![0.0; m], vec![0.0; m]);
    c[0] = b[0] / a[0];
    d[0] = r[0] / a[0];
    for j in 1..m {
        let den = a[j] - b[j - 1] * c[j - 1];
        if den.abs() < 1e-12 {
            return None;
        }
        c[j] = b[j] / den;
        d[j] = (r[j] - b[j - 1] * d[j - 1]) / den;
    }
    let mut v = vec![0.0; m];
    v[m - 1] = d[m - 1];
    for j in (0..m - 1).rev() {
        v[j] = d[j] - c[j] * v[j + 1];
    }
    Some(Pwl {
        knots: ts.into_iter().zip(v).collect(),
    })
}

fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    let mid = v.len() / 2;
    let (_, m, _) = v.select_nth_unstable_by(mid, f64::total_cmp);
    *m
}

/// Dijkstra from the reference group over the pair fits.
fn shortest_paths(
    groups: usize,
    reference: u32,
    fits: &[PairFit],
) -> Vec<Option<Vec<(usize, f64)>>> {
    let mut adj: Vec<Vec<(usize, u32, f64)>> = vec![Vec::new(); groups];
    for (i, f) in fits.iter().enumerate() {
        // From b, reaching a: e_a = e_b + d.  From a, reaching b: e_b = e_a − d.
        adj[f.b as usize].push((i, f.a, 1.0));
        adj[f.a as usize].push((i, f.b, -1.0));
    }
    let mut dist = vec![f64::INFINITY; groups];
    let mut paths: Vec<Option<Vec<(usize, f64)>>> = vec![None; groups];
    let Some(d0) = dist.get_mut(reference as usize) else {
        return paths;
    };
    *d0 = 0.0;
    paths[reference as usize] = Some(Vec::new());
    #[derive(PartialEq)]
    struct Item(f64, u32);
    impl Eq for Item {}
    impl PartialOrd for Item {
        fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Item {
        fn cmp(&self, o: &Self) -> std::cmp::Ordering {
            o.0.total_cmp(&self.0).then(o.1.cmp(&self.1))
        }
    }
    let mut heap = BinaryHeap::from([Item(0.0, reference)]);
    while let Some(Item(dv, v)) = heap.pop() {
        if dv > dist[v as usize] {
            continue;
        }
        for &(f, to, sign) in &adj[v as usize] {
            let nd = dv + fits[f].cost.max(1.0);
            if nd < dist[to as usize] {
                dist[to as usize] = nd;
                let mut p = paths[v as usize].clone().unwrap_or_default();
                p.push((f, sign));
                paths[to as usize] = Some(p);
                heap.push(Item(nd, to));
            }
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages both ways between two clocks whose true difference is
    /// `d(t)`, with latencies from `lat(i)`.
    fn corridor(n: usize, d: impl Fn(f64) -> f64, lat: impl Fn(usize) -> f64) -> Vec<Point> {
        let mut up = Vec::new();
        let mut low = Vec::new();
        for i in 0..n {
            let t = i as f64 * 1000.0;
            up.push((t, d(t) + lat(i)));
            low.push((t + 500.0, d(t + 500.0) - lat(i + 7)));
        }
        windows(up, low)
    }

    #[test]
    fn a_fit_is_at_least_as_wrong_as_the_offset_measurements_say() {
        // d = e_a − e_b: 10 µs at init (t = 1e9), 2 µs at finalize (3e9).
        let d = Pwl {
            knots: vec![(1e9, 10_000.0), (3e9, 2_000.0)],
        };
        let checks: Checks = vec![
            [Some((1e9, 0.0)), Some((3e9, 0.0))],
            [Some((1e9 + 2e6, 1_000.0)), Some((3e9, 1_500.0))],
            [None, None],
        ];
        // Init: |d| = 10 µs (at the mean of the two init times, 1 ms
        // later: 9,996 ns) against bounds 0 + 1 µs; finalize: 2 µs within
        // 0 + 1.5 µs by 0.5 µs.
        assert_eq!(contradiction(&d, &checks, 0, 1), 8_996.0);
        // Wider bounds allow it.
        let loose: Checks = vec![
            [Some((1e9, 6_000.0)), Some((3e9, 1_000.0))],
            [Some((1e9, 6_000.0)), Some((3e9, 1_000.0))],
        ];
        assert_eq!(contradiction(&d, &loose, 0, 1), 0.0);
        // No measurement on one side: nothing to check.
        assert_eq!(contradiction(&d, &checks, 0, 2), 0.0);
    }

    #[test]
    fn pinning_keeps_only_what_the_measured_line_misses() {
        // Both groups measured at t = 1 s and 3 s, bounds 100 + 150 and 200 + 50.
        let checks: Checks = vec![
            [Some((1e9, 100.0)), Some((3e9, 200.0))],
            [Some((1e9, 150.0)), Some((3e9, 50.0))],
            [Some((1e9, 0.0)), None],
        ];
        // A bias of 1 µs plus a slope of 1 ppm (a line) under a tent of 4 µs.
        let d = Pwl {
            knots: vec![(1e9, 1_000.0), (2e9, 6_000.0), (3e9, 3_000.0)],
        };
        let (p, bounds) = pin(&d, &checks, 0, 1).expect("four measurements");
        assert_eq!(p.knots, vec![(1e9, 0.0), (2e9, 4_000.0), (3e9, 0.0)]);
        assert_eq!(bounds, 250.0);
        // Beyond the knots the pinned fit goes on along its end segments.
        assert_eq!(p.eval(0.5e9), -2_000.0);
        // A line is all bias: nothing is left; so is a constant.
        let line = Pwl {
            knots: vec![(0.0, -500.0), (4e9, 3_500.0)],
        };
        let (p, _) = pin(&line, &checks, 0, 1).expect("four measurements");
        assert!(p.knots.iter().all(|k| k.1.abs() < 1e-9), "{p:?}");
        let constant = Pwl {
            knots: vec![(2e9, 700.0)],
        };
        assert_eq!(pin(&constant, &checks, 0, 1).unwrap().0.eval(5e9), 0.0);
        // Without a finalize measurement there is nothing to pin to.
        assert_eq!(pin(&d, &checks, 0, 2), None);
    }

    #[test]
    fn a_candidate_outside_the_corridor_is_at_least_that_wrong() {
        // Ten windows, middle 0, half width 500; one crossed window (ignored).
        let mut pts: Vec<Point> = (0..10)
            .map(|i| Point {
                t: f64::from(i),
                d: 0.0,
                width: 1_000.0,
            })
            .collect();
        pts.push(Point {
            t: 10.0,
            d: 9_000.0,
            width: -10.0,
        });
        assert_eq!(outside(&pts, |_| 0.0), 0.0);
        assert_eq!(outside(&pts, |_| 400.0), 0.0);
        assert_eq!(outside(&pts, |_| -800.0), 300.0);
        // The 90th percentile: one window far off does not decide.
        pts[3].d = 20_000.0;
        assert_eq!(outside(&pts, |_| 0.0), 0.0);
        assert_eq!(outside(&[], |_| 1e9), 0.0);
    }

    #[test]
    fn a_constant_offset_is_the_corridor_middle() {
        let pts = corridor(
            400,
            |_| 2_500.0,
            |i| {
                if i % 3 == 0 {
                    300.0
                } else {
                    300.0 + (i % 13) as f64 * 200.0
                }
            },
        );
        let f = fit(&pts).expect("points").d;
        for t in [0.0, 100_000.0, 399_000.0] {
            assert!((f.eval(t) - 2_500.0).abs() < 1.0, "{}", f.eval(t));
        }
    }

    #[test]
    fn a_drift_is_a_line_and_slow_windows_are_rejected() {
        // 40 ppm drift; every 50th window has only slow messages.
        let d = |t: f64| -1_000.0 + 40e-6 * t;
        let pts = corridor(
            2000,
            d,
            |i| if (i / 4) % 50 == 3 { 90_000.0 } else { 400.0 },
        );
        let f = fit(&pts).expect("points").d;
        assert_eq!(f.knots.len(), 2, "a line");
        for t in [0.0, 1e6, 1.9e6] {
            assert!(
                (f.eval(t) - d(t)).abs() < 20.0,
                "at {t}: {} vs {}",
                f.eval(t),
                d(t)
            );
        }
    }

    #[test]
    fn a_drift_change_is_followed_piecewise() {
        // +50 ppm, then −50 ppm from t = 1 s.
        let d = |t: f64| {
            if t < 1e9 {
                50e-6 * t
            } else {
                50e3 - 50e-6 * (t - 1e9)
            }
        };
        let mut up = Vec::new();
        let mut low = Vec::new();
        for i in 0..4000 {
            let t = i as f64 * 500_000.0;
            up.push((t, d(t) + 500.0));
            low.push((t + 250_000.0, d(t + 250_000.0) - 500.0));
        }
        let f = fit(&windows(up, low)).expect("points").d;
        assert!(f.knots.len() > 2, "piecewise");
        let worst = (0..200)
            .map(|i| i as f64 * 1e7)
            .map(|t| (f.eval(t) - d(t)).abs())
            .fold(0.0, f64::max);
        assert!(worst < 5_000.0, "worst error {worst} ns");
        let typical = (f.eval(0.5e9) - d(0.5e9)).abs();
        assert!(typical < 1_000.0, "{typical}");
    }

    #[test]
    fn groups_are_reached_through_other_groups() {
        // 0 ↔ 1 and 1 ↔ 2 only: e_1 − e_0 = 100, e_2 − e_1 = 50.
        let fits = vec![
            PairFit {
                a: 0,
                b: 1,
                d: Pwl {
                    knots: vec![(0.0, -100.0)],
                },
                cost: 10.0,
                messages: true,
            },
            PairFit {
                a: 1,
                b: 2,
                d: Pwl {
                    knots: vec![(0.0, -50.0)],
                },
                cost: 10.0,
                messages: true,
            },
        ];
        let c = Correction {
            paths: shortest_paths(4, 0, &fits),
            fits,
        };
        assert_eq!(c.error(0, 5.0), Some(0.0));
        assert_eq!(c.error(1, 5.0), Some(100.0));
        assert_eq!(c.error(2, 5.0), Some(150.0));
        assert_eq!(c.error(3, 5.0), None);
        assert_eq!(c.reached(), 2, "groups 1 and 2, through messages");
    }
}
