//! Jiang's weighted critical path (`004_…` §3.4): the heaviest path
//! through the execution graph when time spent while few ranks compute
//! weighs more.
//!
//! **The graph.** Nodes are the enters and exits of the calls of each
//! rank's main thread. Local edges join consecutive nodes of a rank: a
//! call (enter → exit) is MPI time, the gap before the next call (exit →
//! enter) is computation. A message edge runs from the enter of the call
//! that sent a message to the exit of the call that completed its receive;
//! collective edges run from the enter of each member that a member's exit
//! depends on (the logical messages of [`pmtrace_matching::collective`],
//! the ones sync uses) to that exit.
//!
//! **The weights.** Work over Δt gets w = Δt · (1 + (1 − P)(n − 1)), where
//! P is the mean parallelism meanwhile: the fraction of the n ranks whose
//! main thread is outside MPI. With C(t) ranks computing and F(t) = ∫ C,
//! that is w = n·Δt − (n − 1)/n · (F(b) − F(a)), so one sweep over all
//! nodes in time order that keeps F gives every weight exactly. Work is
//! computation and the part of a call that did not wait; the time a call
//! waited for a late rank (its wait state, [`crate::waits`]) and message
//! and collective edges weigh nothing, as they only carry the dependency.
//! (Were waiting weighed too, every path between two nodes would weigh the
//! same, w being a difference of one function of time.)
//!
//! **The path.** In that sweep each node takes the heaviest of its incoming
//! edges plus the weight of the path to their sources (a longest path in a
//! DAG: every edge goes forward in synchronized time; an edge that goes
//! back, on a trace with clock violations, is left out and counted). The
//! heaviest node at the window's end closes the path, which is followed
//! back through the edges that won. Times are clipped to the window, so
//! the path covers it; its elapsed length is the window's, and its weight
//! tells how far the work on it held the other ranks back.

use pmtrace_matching::collective::{Instance, MemberCalls};
use pmtrace_matching::matching::Messages;
use pmtrace_trace::read::{EventRef, Trace};

use crate::path::{previous_call, Stretch, Walk, COMPUTING};
use crate::times::Times;
use crate::waits::Wait;

/// Where a node's heaviest incoming edge came from, if not its own rank.
#[derive(Debug, Clone, Copy)]
struct Jump {
    /// The exit it arrived at (record position in the main thread).
    at: u32,
    /// The enter it left: rank, record position.
    rank: u32,
    pos: u32,
    /// The activity of the edge (the receiving call's function).
    activity: u32,
}

/// A source node (an enter) when swept: the weight of the heaviest path
/// to it, and where it is. `best` is NaN until swept.
#[derive(Debug, Clone, Copy)]
struct Mark {
    best: f64,
    rank: u32,
    pos: u32,
}

const UNSWEPT: Mark = Mark {
    best: f64::NAN,
    rank: 0,
    pos: 0,
};

/// What arrives at an exit.
#[derive(Debug, Clone, Copy)]
enum From {
    Send(usize),
    /// Instance, member.
    Coll(usize, u32),
}

/// A node of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    Enter,
    /// Where a call that waited for a late rank stopped waiting.
    Resume,
    Exit,
}

/// One rank's main thread, as the sweep walks its nodes.
struct Stream<I: Iterator<Item = (u32, u32, u64, u64)>> {
    calls: I,
    /// The current call: position, function, start, end (clipped).
    call: Option<(u32, u32, u64, u64)>,
    /// Its resume time, if it waited.
    resumed: Option<u64>,
    /// Where the lookup of waits is.
    next_wait: usize,
    /// The next node of `call`.
    side: Side,
    /// The last node swept: path weight, time, F(time).
    best: f64,
    t: u64,
    f: f64,
    /// Incoming edges by exit position, and sources by enter position.
    incoming: Vec<(u32, From)>,
    next_in: usize,
    sources: Vec<(u32, From)>,
    next_src: usize,
    jumps: Vec<Jump>,
}

/// When the call at `pos` of a rank's main thread (clipped to `a..b`)
/// stopped waiting, if it waited: `waited` is the rank's (position, ns)
/// sorted, and `next` where the last lookup ended (positions only grow).
fn resume_at(waited: &[(u32, u64)], next: &mut usize, pos: u32, a: u64, b: u64) -> Option<u64> {
    while waited.get(*next).is_some_and(|w| w.0 < pos) {
        *next += 1;
    }
    waited
        .get(*next)
        .filter(|w| w.0 == pos)
        .map(|&(_, ns)| a.saturating_add(ns).clamp(a, b))
}

/// The time and side of the next node of `s`.
fn head<I: Iterator<Item = (u32, u32, u64, u64)>>(
    s: &mut Stream<I>,
    waited: &[(u32, u64)],
) -> Option<(u64, Side)> {
    if s.call.is_none() {
        s.call = s.calls.next();
        s.side = Side::Enter;
        s.resumed = match s.call {
            Some((p, _, a, b)) => resume_at(waited, &mut s.next_wait, p, a, b),
            None => None,
        };
    }
    let (_, _, a, b) = s.call?;
    Some(match s.side {
        Side::Enter => (a, Side::Enter),
        Side::Resume => (s.resumed.unwrap_or(a), Side::Resume),
        Side::Exit => (b, Side::Exit),
    })
}

/// F(t) = ∫ from the window's start to t of C, the number of ranks whose
/// main thread is outside MPI, from bins: exact where a bin is 1 ns (a
/// window of up to 4 M ns), else linear within each bin of the window.
///
/// Each rank's share of a bin is kept as an integer, in units of 1/span of
/// a bin (a bin is span/bins ns, so a time's place in bins is
/// (t − from)·bins/span): sums of integers are the same in any order, so
/// blocks of ranks add their parts up to the whole trace's exactly.
pub struct Computing {
    from: u64,
    /// ns per bin, and bins per ns.
    width: f64,
    per_ns: f64,
    /// F at the start of each bin, and at the end of the last.
    at_edge: Vec<f64>,
    /// C in each bin (its mean).
    c: Vec<f64>,
}

/// What ranks add to [`Computing`]: per bin, the computing ranks' partial
/// shares (in 1/span of a bin) and the changes in the count of those that
/// compute through whole bins.
pub struct ComputingParts {
    pub from: u64,
    pub span: u64,
    pub part: Vec<u64>,
    pub diff: Vec<i64>,
}

impl ComputingParts {
    /// The parts of the ranks of `trace` (or of a block) in the window.
    pub fn new(trace: &Trace, times: &Times, (from, to): (u64, u64)) -> ComputingParts {
        let span = to.saturating_sub(from).max(1);
        let bins = span.min(1 << 22);
        let mut p = ComputingParts {
            from,
            span,
            part: vec![0; bins as usize + 1],
            diff: vec![0; bins as usize + 2],
        };
        let place = |t: u64| u128::from(t - from) * u128::from(bins);
        let s = u128::from(span);
        let mut add = |x: u64, y: u64| {
            if y <= x {
                return;
            }
            let (ux, uy) = (place(x), place(y));
            let (bx, by) = ((ux / s) as usize, ((uy / s) as usize).min(bins as usize));
            if bx >= by {
                p.part[bx.min(bins as usize)] += (uy - ux) as u64;
            } else {
                p.part[bx] += ((bx as u128 + 1) * s - ux) as u64;
                p.part[by] += (uy - by as u128 * s) as u64;
                p.diff[bx + 1] += 1;
                p.diff[by] -= 1;
            }
        };
        for rank in &trace.ranks {
            // Computing: the window outside this rank's main-thread calls.
            let mut at = from;
            for (_, _, a, b) in times.calls_at(rank.rank, 0) {
                let (a, b) = (a.clamp(from, to), b.max(a).clamp(from, to));
                add(at, a.max(at));
                at = at.max(b);
            }
            add(at, to);
        }
        p
    }
}

impl Computing {
    fn new(trace: &Trace, times: &Times, window: (u64, u64)) -> Computing {
        Computing::of(ComputingParts::new(trace, times, window))
    }

    /// F from every rank's parts.
    pub fn of(p: ComputingParts) -> Computing {
        let bins = p.part.len() - 1;
        let width = p.span as f64 / bins as f64;
        let mut run = 0i64;
        let c: Vec<f64> = (p.diff.iter().zip(&p.part))
            .take(bins)
            .map(|(&d, &part)| {
                run += d;
                run as f64 + part as f64 / p.span as f64
            })
            .collect();
        let mut at_edge = vec![0f64; bins + 1];
        for k in 0..bins {
            at_edge[k + 1] = at_edge[k] + c[k] * width;
        }
        Computing {
            from: p.from,
            width,
            per_ns: 1.0 / width,
            at_edge,
            c,
        }
    }

    #[inline]
    fn f(&self, t: u64) -> f64 {
        let x = t.saturating_sub(self.from) as f64 * self.per_ns;
        // x ≥ 0: the cast truncates as floor would.
        let k = (x as usize).min(self.c.len());
        if k == self.c.len() {
            return self.at_edge[k];
        }
        self.at_edge[k] + (x - k as f64) * self.c[k] * self.width
    }
}

/// The result: the stretches of the path, last first, and what the
/// sweep had to leave out.
pub(crate) struct Found {
    pub walk: Walk,
    /// The path's weight (ns, weighted).
    pub weight: f64,
    pub hops: u64,
    /// Message and collective edges that went back in time, left out.
    pub dropped_edges: u64,
}

pub(crate) fn compute(
    trace: &Trace,
    times: &Times,
    messages: &Messages,
    instances: &[Instance<MemberCalls>],
    waits: &[Wait],
    window: (u64, u64),
    keep: bool,
) -> Found {
    let (from, to) = window;
    // How long each call of a main thread waited (the longest of its
    // waits), per rank by position.
    let mut waited: Vec<Vec<(u32, u64)>> = vec![Vec::new(); trace.ranks.len()];
    for w in waits {
        let main = trace.held(w.at.rank).threads.first().map(|t| t.index);
        if Some(w.at.thread) == main {
            waited[w.at.rank as usize].push((w.at.index, w.ns));
        }
    }
    for v in &mut waited {
        // The longest wait of a call first, then one entry per call.
        v.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        v.dedup_by_key(|w| w.0);
    }
    let n = trace.ranks.len().max(1) as f64;
    let c = (n - 1.0) / n;
    let clip = |t: u64| t.clamp(from, to);
    let computing = Computing::new(trace, times, window);
    let weight = |a: u64, b: u64| n * (b - a) as f64 - c * (computing.f(b) - computing.f(a));
    let main = |rank: u32| trace.held(rank).threads.first().map(|t| t.index);
    let mut streams: Vec<Stream<_>> = trace
        .ranks
        .iter()
        .map(|r| Stream {
            calls: times
                .calls_at(r.rank, 0)
                .map(move |(p, f, a, b)| (p, f, clip(a), clip(b.max(a)))),
            call: None,
            resumed: None,
            next_wait: 0,
            side: Side::Enter,
            best: 0.0,
            t: from,
            f: 0.0,
            incoming: Vec::new(),
            next_in: 0,
            sources: Vec::new(),
            next_src: 0,
            jumps: Vec::new(),
        })
        .collect();
    // Sources and incoming edges, between main threads only.
    let mut send_mark: Vec<Mark> = vec![UNSWEPT; messages.sends.len()];
    for (si, s) in messages.sends.iter().enumerate() {
        if Some(s.call.thread) == main(s.call.rank) {
            streams[s.call.rank as usize]
                .sources
                .push((s.call.index, From::Send(si)));
        }
    }
    for m in &messages.matched {
        let (s, at) = (&messages.sends[m.send], messages.recvs[m.recv].completion);
        if Some(s.call.thread) == main(s.call.rank) && Some(at.thread) == main(at.rank) {
            streams[at.rank as usize]
                .incoming
                .push((at.index, From::Send(m.send)));
        }
    }
    // Each member's enter mark, flat: instance `i`'s from `first[i]`.
    let mut first = Vec::with_capacity(instances.len());
    let mut total = 0usize;
    for inst in instances {
        first.push(total);
        total += inst.members.len();
    }
    let mut enter_mark: Vec<Mark> = vec![UNSWEPT; total];
    let on_main = |m: &Option<MemberCalls>| {
        m.as_ref()
            .is_some_and(|m| Some(m.enter.thread) == main(m.enter.rank))
    };
    for (ii, inst) in instances.iter().enumerate() {
        for (k, m) in inst.members.iter().enumerate() {
            let Some(m) = m else { continue };
            if Some(m.enter.thread) == main(m.enter.rank) {
                streams[m.enter.rank as usize]
                    .sources
                    .push((m.enter.index, From::Coll(ii, k as u32)));
            }
            let Some(exit) = m.exit else { continue };
            let from_main = inst
                .senders(k as u32)
                .any(|s| on_main(&inst.members[s as usize]));
            if Some(exit.thread) == main(exit.rank) && from_main {
                streams[exit.rank as usize]
                    .incoming
                    .push((exit.index, From::Coll(ii, k as u32)));
            }
        }
    }
    for s in &mut streams {
        s.sources.sort_unstable_by_key(|x| x.0);
        s.incoming.sort_unstable_by_key(|x| x.0);
    }
    let mut dropped = 0u64;
    // The sweep: each rank's nodes in order; an exit waits until the
    // enters its edges come from were swept (a DAG in time, so some rank
    // can always go on), unless nothing can: then the earliest blocked
    // exit goes on without the missing edges (they went back in time).
    let heads: Vec<_> = (0..streams.len()).collect();
    let mut force: Option<usize> = None;
    loop {
        let mut progress = false;
        let mut blocked: Option<(u64, usize)> = None;
        for &r in &heads {
            loop {
                let s = &mut streams[r];
                let Some((t, side)) = head(s, &waited[r]) else {
                    break;
                };
                let (pos, func, _, _) = s.call.expect("a call at the head");
                let forced = force == Some(r);
                let f_t = computing.f(t);
                let mut best = if side == Side::Resume {
                    // Waiting weighs nothing.
                    s.best
                } else {
                    s.best + n * (t - s.t) as f64 - c * (f_t - s.f)
                };
                if side == Side::Exit {
                    while s.incoming.get(s.next_in).is_some_and(|x| x.0 < pos) {
                        s.next_in += 1;
                    }
                    let edges = s.incoming[s.next_in..]
                        .iter()
                        .take_while(|x| x.0 == pos)
                        .map(|x| x.1);
                    // The marks of the enters its edges come from.
                    let mut missing = 0u64;
                    let mut won: Option<Mark> = None;
                    let mut edges_n = 0;
                    for e in edges {
                        edges_n += 1;
                        let mut take = |m: Mark| {
                            if m.best.is_nan() {
                                missing += 1;
                            } else if m.best > best {
                                // An edge only carries the dependency.
                                best = m.best;
                                won = Some(m);
                            }
                        };
                        match e {
                            From::Send(si) => take(send_mark[si]),
                            From::Coll(ii, i) => {
                                let inst = &instances[ii];
                                for k in inst.senders(i) {
                                    if on_main(&inst.members[k as usize]) {
                                        take(enter_mark[first[ii] + k as usize]);
                                    }
                                }
                            }
                        }
                    }
                    if missing > 0 && !forced {
                        if blocked.is_none_or(|b| t < b.0) {
                            blocked = Some((t, r));
                        }
                        break;
                    }
                    // At the window's edges every node is clipped to one
                    // time; nothing there weighs anything.
                    if from < t && t < to {
                        dropped += missing;
                    }
                    s.next_in += edges_n;
                    if let Some(m) = won {
                        s.jumps.push(Jump {
                            at: pos,
                            rank: m.rank,
                            pos: m.pos,
                            activity: func,
                        });
                    }
                } else if side == Side::Enter {
                    while s.sources.get(s.next_src).is_some_and(|x| x.0 < pos) {
                        s.next_src += 1;
                    }
                    let mark = Mark {
                        best,
                        rank: r as u32,
                        pos,
                    };
                    while let Some(&(p, src)) = s.sources.get(s.next_src) {
                        if p != pos {
                            break;
                        }
                        s.next_src += 1;
                        match src {
                            From::Send(si) => send_mark[si] = mark,
                            From::Coll(ii, k) => enter_mark[first[ii] + k as usize] = mark,
                        }
                    }
                }
                if forced {
                    force = None;
                }
                s.best = best;
                s.t = t;
                s.f = f_t;
                s.side = match side {
                    Side::Enter if s.resumed.is_some() => Side::Resume,
                    Side::Enter | Side::Resume => Side::Exit,
                    Side::Exit => {
                        s.call = None;
                        Side::Enter
                    }
                };
                progress = true;
            }
        }
        match blocked {
            None => break,
            Some(_) if progress => {}
            Some((_, r)) => force = Some(r),
        }
    }
    // Back from the heaviest end, through the edges that won.
    let end = (0..streams.len()).max_by(|&a, &b| streams[a].best.total_cmp(&streams[b].best));
    let total = end.map_or(0.0, |e| streams[e].best);
    // Stretches last first, each with where its weighed part starts.
    let mut path: Vec<(Stretch, u64)> = Vec::new();
    let mut hops = 0u64;
    if let Some(last) = end.and_then(|e| last_call(trace, e as u32)) {
        let span = |at: EventRef| {
            let (a, b) = times.of(at).unwrap_or((from, from));
            (clip(a), clip(b.max(a)))
        };
        let mut at = last;
        let mut on_exit = true;
        let mut t = span(at).1;
        let mut guard = 0usize;
        let limit = 4 * trace.events() as usize + 16;
        let push =
            |path: &mut Vec<(Stretch, u64)>, rank, activity, a: u64, b: u64, weighed: u64| {
                if b > a {
                    path.push((Stretch::new(rank, activity, a, b), weighed.clamp(a, b)));
                }
            };
        while t > from && guard < limit {
            guard += 1;
            let a = span(at).0;
            if on_exit {
                let jumps = &streams[at.rank as usize].jumps;
                let jump = jumps
                    .binary_search_by_key(&at.index, |j| j.at)
                    .ok()
                    .map(|i| jumps[i]);
                if let Some(j) = jump {
                    // A message or collective edge from the enter of another
                    // rank's call: the time is the receiving call's.
                    let src = EventRef {
                        rank: j.rank,
                        thread: trace.held(j.rank).threads[0].index,
                        index: j.pos,
                    };
                    let start = span(src).0;
                    push(&mut path, at.rank, j.activity, start, t, t);
                    hops += u64::from(j.rank != at.rank);
                    at = src;
                    t = start;
                } else {
                    let w = &waited[at.rank as usize];
                    let mut k = w.partition_point(|x| x.0 < at.index);
                    let resumed = resume_at(w, &mut k, at.index, a, t);
                    let func = times.func(at).unwrap_or(COMPUTING);
                    push(&mut path, at.rank, func, a, t, resumed.unwrap_or(a));
                    t = a;
                }
                on_exit = false;
            } else {
                match previous_call(trace, at) {
                    Some(prev) => {
                        let b_prev = span(prev).1.min(t);
                        push(&mut path, at.rank, COMPUTING, b_prev, t, b_prev);
                        at = prev;
                        t = b_prev;
                        on_exit = true;
                    }
                    None => {
                        push(&mut path, at.rank, COMPUTING, from, t, from);
                        break;
                    }
                }
            }
        }
    }
    let mut walk = if keep {
        Walk::keeping(from, to)
    } else {
        Walk::new(from, to)
    };
    for (s, w) in &path {
        walk.push_weighted(s.rank, s.activity, s.from, s.to, weight(*w, s.to));
    }
    walk.flush();
    Found {
        walk,
        weight: total,
        hops,
        dropped_edges: dropped,
    }
}

/// The last call of `rank`'s main thread.
fn last_call(trace: &Trace, rank: u32) -> Option<EventRef> {
    let th = trace.rank(rank)?.threads.first()?;
    (0..th.records.len())
        .rev()
        .find(|&p| th.records.is_call(p))
        .map(|p| EventRef {
            rank,
            thread: th.index,
            index: p as u32,
        })
}
