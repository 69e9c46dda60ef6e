//! The critical path: the chain of computation and communication that
//! decided how long the application's work took, found backward from its
//! end on synchronized time (recorded time where sync did not run), after
//! Scalasca's critical-path analysis.
//!
//! The walk starts at the end of the window [`crate::metrics`] uses (where
//! the first rank entered `MPI_Finalize`), on the rank whose last call
//! starts last, and goes back in that rank's main thread. Time between
//! calls is computation; a call is MPI time, except
//! where it waited (a wait state, [`crate::waits`]): there the path leaves
//! for the rank that was late, at the start of its call, since that rank's
//! progress is what the waiting call depended on. The walk stops at the
//! window's start (the last end of `MPI_Init`). Every nanosecond of the
//! window is on the path exactly once, so the shares add up to 1.

use std::cell::Cell;

use pmtrace_trace::read::{EventRef, Trace};
use pmtrace_trace::wire::{In, Out, Wire};
use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;

use pmtrace_matching::collective::{Instance, MemberCalls};
use pmtrace_matching::matching::Messages;

use crate::path::{previous_call, Walk, COMPUTING};
use crate::phases::PhaseTimeline;
use crate::times::Times;
use crate::waits::Wait;

/// The activity name of time outside MPI.
pub const COMPUTATION: &str = "computation";
pub use crate::path::SEGMENTS_SHOWN;

/// A stretch of the path: (rank, from, to, activity), the activity a
/// function id of the rank or [`crate::path::COMPUTING`].
pub type PathStretch = (u32, u64, u64, u32);

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CriticalPath {
    /// "synchronized" or "recorded".
    pub time_base: &'static str,
    pub from_ns: u64,
    pub to_ns: u64,
    pub length_ns: u64,
    pub by_rank: Vec<Share>,
    /// Each MPI function, and "computation".
    pub by_activity: Vec<Share>,
    /// The longest stretches of one activity on one rank, longest first.
    pub segments: Vec<Segment>,
    /// Times the path went from one rank to another.
    pub hops: u64,
    /// Per user phase (the innermost phase of the path's rank at the
    /// time; "" outside every phase), when the trace has phases.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by_phase: Vec<Share>,
    /// The weighted path only: its weight (ns, each weighted by how few
    /// ranks computed meanwhile), and the message and collective edges
    /// that went back in time and were left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight_ns: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped_edges: Option<u64>,
    /// Jiang's weighted critical path over the same window ([`crate::weighted`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weighted: Option<Box<CriticalPath>>,
    /// Where the two paths differ, and why, in words.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub differences: Vec<String>,
    /// The whole path, when kept (`ReportOptions::insight`): (rank, from,
    /// to, activity), last first. The activity is a function id of the
    /// rank, or [`crate::path::COMPUTING`].
    #[serde(skip)]
    pub stretches: Vec<PathStretch>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Share {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub ns: u64,
    /// Share of the path's length (the weighted path: of its weight).
    pub share: f64,
    /// The weighted path only: the weight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Segment {
    pub rank: u32,
    pub activity: String,
    pub from_ns: u64,
    pub to_ns: u64,
    pub ns: u64,
    /// The weighted path only: the weight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
}

/// The critical path of `trace` over the window `(from, to)`, given its
/// wait states (sorted here by the waiting call).
pub fn compute(
    trace: &Trace,
    times: &Times,
    waits: &mut [Wait],
    window: (u64, u64),
    phases: Option<&PhaseTimeline>,
    keep: bool,
) -> CriticalPath {
    waits.sort_by_key(|w| (w.at.rank, w.at.thread, w.at.index));
    compute_sorted(trace, times, waits, window, phases, keep)
}

/// [`compute`] on waits sorted by the waiting call.
pub(crate) fn compute_sorted(
    trace: &Trace,
    times: &Times,
    waits: &[Wait],
    window: (u64, u64),
    phases: Option<&PhaseTimeline>,
    keep: bool,
) -> CriticalPath {
    let (from, to) = window;
    let lookup = LargestWaits::new(waits);
    let waited = |at: EventRef| lookup.get(at);
    let mut acc = if phases.is_some() || keep {
        Walk::keeping(from, to)
    } else {
        Walk::new(from, to)
    };
    let mut hops = 0u64;
    if let Some((rank, t)) = end_point(trace, times, to) {
        let limit = trace.events() as usize * 2 + 16;
        let mut c = Cursor::start(trace, times, rank, t);
        let mut push = |rank, activity, a, b| acc.push(rank, activity, a, b);
        loop {
            match c.step(trace, times, from, limit, &waited, &mut push) {
                Step::Go => {}
                Step::Done => break,
                Step::Hop { cause, resumed } => {
                    if !c.land(trace, times, cause, resumed) {
                        break;
                    }
                }
            }
        }
        hops = c.hops;
    }
    acc.flush();
    summarize(trace, times, acc, hops, (from, to), false, phases)
}

/// The critical path and, beside it, the weighted one with the words on
/// where they differ.
/// The largest wait of the call at `at` (the last of equals) in `waits`,
/// sorted by call.
pub fn largest_wait(waits: &[Wait], at: EventRef) -> Option<Wait> {
    let key = |at: EventRef| (at.rank, at.thread, at.index);
    let first = waits.partition_point(|w| key(w.at) < key(at));
    waits[first..]
        .iter()
        .take_while(|w| w.at == at)
        .max_by_key(|w| w.ns)
        .copied()
}

/// [`largest_wait`] for a walk back in time: each rank's lookup starts
/// where its last one ended, so that a walk over a rank's calls, latest
/// first, reads each wait about once instead of searching all of them at
/// every call. A lookup far from the last falls back to the search.
pub struct LargestWaits<'w> {
    waits: &'w [Wait],
    /// Per rank: where its last lookup's waits start in `waits` (or
    /// `usize::MAX` before the first).
    last: Vec<Cell<usize>>,
}

impl<'w> LargestWaits<'w> {
    /// Over `waits`, sorted by the waiting call.
    pub fn new(waits: &'w [Wait]) -> LargestWaits<'w> {
        let ranks = waits.iter().map(|w| w.at.rank as usize + 1).max();
        LargestWaits {
            waits,
            last: vec![Cell::new(usize::MAX); ranks.unwrap_or(0)],
        }
    }

    /// The largest wait of the call at `at`, as [`largest_wait`] gives it.
    pub fn get(&self, at: EventRef) -> Option<Wait> {
        const NEAR: usize = 32;
        let key = |at: EventRef| (at.rank, at.thread, at.index);
        let k = key(at);
        let search = || self.waits.partition_point(|w| key(w.at) < k);
        let last = self.last.get(at.rank as usize);
        let first = match last.map(Cell::get) {
            Some(mut p) if p != usize::MAX => {
                let mut steps = 0;
                while p > 0 && key(self.waits[p - 1].at) >= k && steps < NEAR {
                    p -= 1;
                    steps += 1;
                }
                while p < self.waits.len() && key(self.waits[p].at) < k && steps < NEAR {
                    p += 1;
                    steps += 1;
                }
                if steps == NEAR {
                    search()
                } else {
                    p
                }
            }
            _ => search(),
        };
        if let Some(c) = last {
            c.set(first);
        }
        self.waits[first..]
            .iter()
            .take_while(|w| w.at == at)
            .max_by_key(|w| w.ns)
            .copied()
    }
}

/// Where the backward walk is: on `rank` at time `t`, the call to look at
/// next, steps taken and hops between ranks. A walk over blocks carries it
/// from block to block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub rank: u32,
    pub t: u64,
    pub next: Option<EventRef>,
    pub guard: usize,
    pub hops: u64,
}

impl Wire for Cursor {
    fn put(&self, o: &mut Out) {
        o.u32(self.rank)
            .u64(self.t)
            .u64(self.guard as u64)
            .u64(self.hops);
        o.put(&self.next);
    }
    fn get(i: &mut In) -> Cursor {
        Cursor {
            rank: i.u32(),
            t: i.u64(),
            guard: i.u64() as usize,
            hops: i.u64(),
            next: i.get(),
        }
    }
}

/// What one step of the walk did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// It goes on from the same rank.
    Go,
    /// It leaves for the rank that was late: its call `cause`, which the
    /// waiting call waited for until `resumed`.
    Hop {
        cause: EventRef,
        resumed: u64,
    },
    Done,
}

impl Cursor {
    /// The walk's start: rank `rank` at time `t`.
    pub fn start(trace: &Trace, times: &Times, rank: u32, t: u64) -> Cursor {
        Cursor {
            rank,
            t,
            next: call_before(trace, times, rank, t),
            guard: 0,
            hops: 0,
        }
    }

    /// One step back on `self.rank` (held by `trace`), pushing what it
    /// passed as (rank, activity, from, to); `waited` gives the largest
    /// wait of a call.
    pub fn step(
        &mut self,
        trace: &Trace,
        times: &Times,
        from: u64,
        limit: usize,
        waited: &dyn Fn(EventRef) -> Option<Wait>,
        push: &mut dyn FnMut(u32, u32, u64, u64),
    ) -> Step {
        if self.t <= from || self.guard >= limit {
            return Step::Done;
        }
        self.guard += 1;
        let (rank, t) = (self.rank, self.t);
        let Some(call) = self.next else {
            push(rank, COMPUTING, from, t);
            return Step::Done;
        };
        let func = times.func(call).unwrap_or(u32::MAX);
        let (a, b) = times.of(call).expect("a call of the trace");
        if b < t {
            push(rank, COMPUTING, b, t);
        }
        let end = b.min(t);
        match waited(call) {
            Some(w) if w.cause.rank != rank || w.cause.thread != call.thread => {
                // The call waited until a + ns for the late rank.
                let resumed = (a + w.ns).min(end);
                push(rank, func, resumed, end);
                Step::Hop {
                    cause: w.cause,
                    resumed,
                }
            }
            _ => {
                push(rank, func, a, end);
                self.t = a;
                self.next = previous_call(trace, call);
                Step::Go
            }
        }
    }

    /// Lands a hop at the late call `cause` (whose rank `trace` holds);
    /// false where the call has no times (the walk ends).
    pub fn land(&mut self, trace: &Trace, times: &Times, cause: EventRef, resumed: u64) -> bool {
        let Some((c0, _)) = times.of(cause) else {
            return false;
        };
        self.hops += 1;
        self.rank = cause.rank;
        self.t = c0.min(resumed);
        self.next = call_before(trace, times, self.rank, self.t);
        true
    }
}

/// `waits` sorted by the waiting call.
pub(crate) fn both(
    trace: &Trace,
    times: &Times,
    messages: &Messages,
    instances: &[Instance<MemberCalls>],
    waits: &[Wait],
    window: (u64, u64),
    phases: Option<&PhaseTimeline>,
) -> CriticalPath {
    // The two paths side by side.
    let (plain, (weight, dropped, weighted)) = rayon::join(
        || compute_sorted(trace, times, waits, window, phases, false),
        || {
            let found = crate::weighted::compute(
                trace,
                times,
                messages,
                instances,
                waits,
                window,
                phases.is_some(),
            );
            let (weight, dropped) = (found.weight, found.dropped_edges);
            let weighted = summarize(trace, times, found.walk, found.hops, window, true, phases);
            (weight, dropped, weighted)
        },
    );
    // The stretches followed back weigh what the sweep found.
    debug_assert!(
        (weighted.weight_ns.unwrap_or(0.0) - weight).abs() <= 1e-6 * weight.max(1.0),
        "path weight {:?} against {}",
        weighted.weight_ns,
        weight
    );
    with_weighted(plain, weighted, dropped, trace.ranks.len())
}

/// The plain path with the weighted one beside it (`dropped` edges left
/// out of its sweep, `n` ranks), and the words on where they differ.
pub fn with_weighted(
    mut plain: CriticalPath,
    mut weighted: CriticalPath,
    dropped: u64,
    n: usize,
) -> CriticalPath {
    weighted.dropped_edges = Some(dropped);
    plain.differences = differences(&plain, &weighted, n);
    plain.weighted = Some(Box::new(weighted));
    plain
}

/// Mean number of ranks computing during an entry of the weighted path:
/// w = Δt·(1 + (1 − P)(n − 1)) gives P from its weight and length.
fn computing(s: &Share, n: usize) -> Option<f64> {
    let w = s.weight?;
    if s.ns == 0 || n < 2 {
        return None;
    }
    let p = 1.0 - (w / s.ns as f64 - 1.0) / (n as f64 - 1.0);
    Some(p.clamp(0.0, 1.0) * n as f64)
}

/// In words: where the weighted path differs from the plain one, and why.
fn differences(plain: &CriticalPath, weighted: &CriticalPath, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let pct = |x: f64| 100.0 * x;
    let (Some(pa), Some(wa)) = (plain.by_activity.first(), weighted.by_activity.first()) else {
        return out;
    };
    let name = |s: &Share| s.name.clone().unwrap_or_default();
    let during = |s: &Share| {
        weighted
            .by_activity
            .iter()
            .find(|x| x.name == s.name)
            .and_then(|x| computing(x, n))
    };
    if pa.name == wa.name {
        out.push(format!(
            "Both paths put the most on {}: {:.0}% of the plain path's time, {:.0}% of the weighted path's weight{}.",
            name(pa),
            pct(pa.share),
            pct(wa.share),
            during(wa).map_or(String::new(), |k| format!(
                " (meanwhile {k:.1} of {n} ranks computed on average)"
            ))
        ));
    } else {
        let k_w = during(wa);
        let k_p = during(pa);
        out.push(format!(
            "The plain path spends the most time in {} ({:.0}% of its length); the weighted path puts the most weight on {} ({:.0}% of its weight){}.",
            name(pa),
            pct(pa.share),
            name(wa),
            pct(wa.share),
            match (k_w, k_p) {
                (Some(kw), Some(kp)) => format!(
                    ": during {} on average {kw:.1} of {n} ranks computed, during {} {kp:.1}, so time cut from {} frees the others, while time cut from {} is largely taken up by waiting elsewhere",
                    name(wa),
                    name(pa),
                    name(wa),
                    name(pa)
                ),
                (Some(kw), None) => format!(": during it on average {kw:.1} of {n} ranks computed"),
                _ => String::new(),
            }
        ));
    }
    if let (Some(pr), Some(wr)) = (plain.by_rank.first(), weighted.by_rank.first()) {
        if pr.rank != wr.rank {
            out.push(format!(
                "The plain path runs longest on rank {} ({:.0}% of its length), the weighted path weighs rank {} most ({:.0}% of its weight{}).",
                pr.rank.unwrap_or_default(),
                pct(pr.share),
                wr.rank.unwrap_or_default(),
                pct(wr.share),
                computing(wr, n).map_or(String::new(), |k| format!(
                    ", {k:.1} of {n} ranks computing meanwhile"
                ))
            ));
        } else {
            out.push(format!(
                "Both paths hold rank {} the most ({:.0}% of the time, {:.0}% of the weight).",
                pr.rank.unwrap_or_default(),
                pct(pr.share),
                pct(wr.share)
            ));
        }
    }
    out
}

/// Where the walk starts: the rank whose main thread's last call starts
/// last (the first such rank), at that start or at the window's end `to`,
/// whichever comes first.
pub fn end_point(trace: &Trace, times: &Times, to: u64) -> Option<(u32, u64)> {
    let mut best: Option<(u64, u32)> = None;
    for rank in &trace.ranks {
        let th = rank.threads.first()?;
        let last = (0..th.records.len())
            .rev()
            .find(|&p| th.records.is_call(p))?;
        let at = EventRef {
            rank: rank.rank,
            thread: th.index,
            index: last as u32,
        };
        let (a, _) = times.of(at)?;
        if best.is_none_or(|b| a > b.0) {
            best = Some((a, rank.rank));
        }
    }
    best.map(|(a, r)| (r, a.min(to)))
}

/// The last call of `rank`'s main thread that starts before `t`.
fn call_before(trace: &Trace, times: &Times, rank: u32, t: u64) -> Option<EventRef> {
    let r = trace.rank(rank)?;
    let th = r.threads.first()?;
    let records = &th.records;
    let at = |p: usize| EventRef {
        rank,
        thread: th.index,
        index: p as u32,
    };
    let start = |p: usize| times.of(at(p)).map_or(0, |x| x.0);
    // Records start in order within a thread (sync keeps each thread's order).
    let n = {
        let (mut lo, mut hi) = (0usize, records.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if start(mid) < t {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    };
    (0..n).rev().find(|&p| records.is_call(p)).map(at)
}

pub(crate) fn summarize(
    trace: &Trace,
    times: &Times,
    walk: Walk,
    hops: u64,
    window: (u64, u64),
    weighted: bool,
    phases: Option<&PhaseTimeline>,
) -> CriticalPath {
    let name = |rank: u32, activity: u32| -> String {
        trace
            .held(rank)
            .header
            .functions
            .get(activity as usize)
            .map(|f| f.name.clone())
            .unwrap_or_default()
    };
    summarize_with(times.base(), &name, walk, hops, window, weighted, phases)
}

/// [`summarize`] with the time base given and each MPI function's name
/// from `function(rank, function id)`.
pub fn summarize_with(
    time_base: &'static str,
    function: &dyn Fn(u32, u32) -> String,
    mut walk: Walk,
    hops: u64,
    window: (u64, u64),
    weighted: bool,
    phases: Option<&PhaseTimeline>,
) -> CriticalPath {
    let name = |rank: u32, activity: u32| -> String {
        if activity == COMPUTING {
            return COMPUTATION.to_owned();
        }
        function(rank, activity)
    };
    let length: u64 = walk.by_rank.values().map(|v| v.0).sum();
    let total: f64 = walk.by_rank.values().map(|v| v.1).sum();
    // The plain path's shares are of its length, the weighted one's of its weight.
    let share = |(ns, w): (u64, f64)| {
        if weighted {
            if total > 0.0 {
                w / total
            } else {
                0.0
            }
        } else if length == 0 {
            0.0
        } else {
            ns as f64 / length as f64
        }
    };
    let weight = |w: f64| weighted.then_some(w);
    let mut by_name: HashMap<String, (u64, f64)> = HashMap::default();
    for (&(rank, activity), &(ns, w)) in &walk.by_activity {
        let e = by_name.entry(name(rank, activity)).or_default();
        e.0 += ns;
        e.1 += w;
    }
    let order = |a: &Share, b: &Share| {
        let key = |s: &Share| {
            if weighted {
                s.weight.unwrap_or(0.0)
            } else {
                s.ns as f64
            }
        };
        key(b).total_cmp(&key(a))
    };
    let mut by_rank: Vec<Share> = walk
        .by_rank
        .iter()
        .map(|(&r, &v)| Share {
            rank: Some(r),
            name: None,
            ns: v.0,
            share: share(v),
            weight: weight(v.1),
        })
        .collect();
    by_rank.sort_by(|a, b| order(a, b).then(a.rank.cmp(&b.rank)));
    let mut by_activity: Vec<Share> = by_name
        .into_iter()
        .map(|(n, v)| Share {
            rank: None,
            name: Some(n),
            ns: v.0,
            share: share(v),
            weight: weight(v.1),
        })
        .collect();
    by_activity.sort_by(|a, b| order(a, b).then(a.name.cmp(&b.name)));
    let mut segments: Vec<Segment> = walk
        .longest
        .iter()
        .map(|s| Segment {
            rank: s.rank,
            activity: name(s.rank, s.activity),
            from_ns: s.from,
            to_ns: s.to,
            ns: s.to - s.from,
            weight: weight(s.weight),
        })
        .collect();
    segments.sort_by(|a, b| {
        let key = |s: &Segment| s.weight.unwrap_or(s.ns as f64);
        key(b).total_cmp(&key(a)).then(a.from_ns.cmp(&b.from_ns))
    });
    // Per phase: each stretch split where its rank's phase changes (its
    // weight in proportion to the time).
    let mut by_phase: Vec<Share> = Vec::new();
    if let (Some(p), Some(all)) = (phases, &walk.all) {
        let mut acc: HashMap<String, (u64, f64)> = HashMap::default();
        for s in all {
            let len = (s.to - s.from).max(1) as f64;
            p.split(s.rank, s.from, s.to, |phase, ns| {
                let e = acc.entry(phase.unwrap_or("").to_owned()).or_default();
                e.0 += ns;
                e.1 += s.weight * ns as f64 / len;
            });
        }
        by_phase = acc
            .into_iter()
            .map(|(n, v)| Share {
                rank: None,
                name: Some(n),
                ns: v.0,
                share: share(v),
                weight: weight(v.1),
            })
            .collect();
        by_phase.sort_by(|a, b| order(a, b).then(a.name.cmp(&b.name)));
    }
    CriticalPath {
        time_base,
        from_ns: window.0,
        to_ns: window.1,
        length_ns: length,
        by_rank,
        by_activity,
        by_phase,
        segments,
        hops,
        weight_ns: weight(total),
        dropped_edges: None,
        weighted: None,
        differences: Vec::new(),
        // In place: a long path's stretches are many.
        stretches: walk.all.take().map_or_else(Vec::new, |all| {
            let mut v: Vec<PathStretch> = (all.into_iter())
                .map(|s| (s.rank, s.from, s.to, s.activity))
                .collect();
            // In place, the buffer kept the larger stretches' size.
            v.shrink_to_fit();
            v
        }),
    }
}

impl CriticalPath {
    /// The shares per rank, activity and phase, as text lines (`of`: what
    /// the percentage is of, after it).
    fn write_shares(&self, w: &mut dyn std::io::Write, of: &str) -> std::io::Result<()> {
        let ms = |ns: u64| ns as f64 / 1e6;
        for s in self.by_rank.iter().take(8) {
            let label = format!("rank {}", s.rank.unwrap_or_default());
            writeln!(
                w,
                "  {label:<22} {:>12.3} ms {:>5.1}%{of}",
                ms(s.ns),
                100.0 * s.share
            )?;
        }
        for s in self.by_activity.iter().take(8) {
            let label = s.name.as_deref().unwrap_or_default();
            writeln!(
                w,
                "  {label:<22} {:>12.3} ms {:>5.1}%{of}",
                ms(s.ns),
                100.0 * s.share
            )?;
        }
        for s in self.by_phase.iter().take(8) {
            let label = match s.name.as_deref() {
                Some("") | None => "(no phase)".to_owned(),
                Some(n) => format!("phase {n}"),
            };
            writeln!(
                w,
                "  {label:<22} {:>12.3} ms {:>5.1}%{of}",
                ms(s.ns),
                100.0 * s.share
            )?;
        }
        Ok(())
    }

    /// The path as a person reads it.
    pub fn write_text(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        let ms = |ns: u64| ns as f64 / 1e6;
        writeln!(
            w,
            "\nCritical path ({} time, MPI_Init to MPI_Finalize): {:.3} ms, {} hops between ranks",
            self.time_base,
            ms(self.length_ns),
            self.hops
        )?;
        self.write_shares(w, "")?;
        for s in self.segments.iter().take(5) {
            writeln!(
                w,
                "  longest: rank {} {} {:.3} ms (from {} ns)",
                s.rank,
                s.activity,
                ms(s.ns),
                s.from_ns
            )?;
        }
        if let Some(p) = &self.weighted {
            writeln!(
                w,
                "\nWeighted critical path (Jiang: time weighs more while fewer ranks compute): weight {:.3} ms over {:.3} ms, {} hops",
                ms(p.weight_ns.unwrap_or(0.0) as u64),
                ms(p.length_ns),
                p.hops
            )?;
            p.write_shares(w, " of the weight")?;
            for d in &self.differences {
                writeln!(w, "  {d}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rank: u32, thread: u32, index: u32) -> EventRef {
        EventRef {
            rank,
            thread,
            index,
        }
    }

    fn wait(call: EventRef, ns: u64, cause: u32) -> Wait {
        Wait {
            kind: "late sender",
            at: call,
            comm: 0,
            ns,
            cause: at(7, 0, cause),
        }
    }

    /// Waits on rank 0's main thread at every even call, a second thread
    /// between, rank 1 at every third call with two equal waits at call
    /// 30: looked up latest first on each rank with hops between, then far
    /// ahead, then on a rank with no waits, each lookup gives what the
    /// search over all waits gives.
    #[test]
    fn a_lookup_from_the_last_one_finds_what_the_search_finds() {
        let mut waits: Vec<Wait> = (0..200)
            .map(|i| wait(at(0, 0, 2 * i), u64::from(i), i))
            .collect();
        waits.extend((0..5).map(|i| wait(at(0, 1, i), 100 + u64::from(i), i)));
        waits.extend((0..100).map(|i| wait(at(1, 0, 3 * i), 7, i)));
        waits.push(wait(at(1, 0, 30), 7, 500));
        waits.sort_by_key(|w| (w.at.rank, w.at.thread, w.at.index));
        let lookup = LargestWaits::new(&waits);
        let mut asked = Vec::new();
        for i in (0..420).rev() {
            asked.push(at(0, 0, i));
            if i % 50 == 0 {
                asked.extend((0..320).rev().step_by(7).map(|j| at(1, 0, j)));
            }
        }
        asked.extend([
            at(0, 0, 398),
            at(0, 0, 2),
            at(0, 1, 3),
            at(5, 0, 1),
            at(1, 0, 30),
        ]);
        for a in asked {
            assert_eq!(lookup.get(a), largest_wait(&waits, a), "{a:?}");
        }
        // By hand: call 10 of rank 0 waited 5 ns; call 11 did not; of the
        // equal waits of rank 1's call 30, the last.
        assert_eq!(lookup.get(at(0, 0, 10)).map(|w| w.ns), Some(5));
        assert_eq!(lookup.get(at(0, 0, 11)), None);
        assert_eq!(lookup.get(at(1, 0, 30)).map(|w| w.cause.index), Some(500));
    }
}
