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

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use pmtrace_matching::collective::{Instance, MemberCalls};
use pmtrace_matching::matching::Messages;
use pmtrace_trace::read::{EventRef, Trace};

use rustc_hash::FxHashMap as HashMap;

use crate::critical::{previous_call, Stretch, Walk, COMPUTING};
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

/// A source node when swept: the weight of the heaviest path to it, and
/// where it is (rank, record position).
#[derive(Debug, Clone, Copy)]
struct Mark {
    best: f64,
    rank: u32,
    pos: u32,
}

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
    /// The next node of `call`.
    side: Side,
    /// The last node swept: path weight, time, F.
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

/// When the call at a position of a rank's main thread (clipped to `a..b`)
/// stopped waiting, if it waited.
fn resume_of(waited: &HashMap<u32, u64>) -> impl Fn(u32, u64, u64) -> Option<u64> + '_ {
    move |pos, a, b| waited.get(&pos).map(|&ns| a.saturating_add(ns).clamp(a, b))
}

/// The time and side of the next node of `s`.
fn head<I: Iterator<Item = (u32, u32, u64, u64)>>(
    s: &mut Stream<I>,
    resume: &impl Fn(u32, u64, u64) -> Option<u64>,
) -> Option<(u64, Side)> {
    if s.call.is_none() {
        s.call = s.calls.next();
        s.side = Side::Enter;
        s.resumed = s.call.and_then(|(p, _, a, b)| resume(p, a, b));
    }
    let (_, _, a, b) = s.call?;
    Some(match s.side {
        Side::Enter => (a, Side::Enter),
        Side::Resume => (s.resumed.unwrap_or(a), Side::Resume),
        Side::Exit => (b, Side::Exit),
    })
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
) -> Found {
    let (from, to) = window;
    // How long each call of a main thread waited (the longest of its waits).
    let mut waited: Vec<HashMap<u32, u64>> = vec![HashMap::default(); trace.ranks.len()];
    for w in waits {
        let main = trace.ranks[w.at.rank as usize]
            .threads
            .first()
            .map(|t| t.index);
        if Some(w.at.thread) == main {
            let e = waited[w.at.rank as usize].entry(w.at.index).or_default();
            *e = (*e).max(w.ns);
        }
    }
    let n = trace.ranks.len().max(1) as f64;
    let c = (n - 1.0) / n;
    let clip = |t: u64| t.clamp(from, to);
    let weight = |a: (u64, f64), b: (u64, f64)| n * (b.0 - a.0) as f64 - c * (b.1 - a.1);
    let main = |rank: u32| trace.ranks[rank as usize].threads.first().map(|t| t.index);
    let mut streams: Vec<Stream<_>> = trace
        .ranks
        .iter()
        .map(|r| Stream {
            calls: times
                .calls_at(r.rank, 0)
                .map(move |(p, f, a, b)| (p, f, clip(a), clip(b.max(a)))),
            call: None,
            resumed: None,
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
    for (si, s) in messages.sends.iter().enumerate() {
        if Some(s.call.thread) == main(s.call.rank) {
            streams[s.call.rank as usize]
                .sources
                .push((s.call.index, From::Send(si)));
        }
    }
    let mut send_of = vec![usize::MAX; messages.recvs.len()];
    for m in &messages.matched {
        send_of[m.recv] = m.send;
    }
    for (ri, r) in messages.recvs.iter().enumerate() {
        let at = r.completion;
        if send_of[ri] != usize::MAX && Some(at.thread) == main(at.rank) {
            streams[at.rank as usize]
                .incoming
                .push((at.index, From::Send(send_of[ri])));
        }
    }
    for (ii, inst) in instances.iter().enumerate() {
        for (k, m) in inst.members.iter().enumerate() {
            let Some(m) = m else { continue };
            if Some(m.enter.thread) == main(m.enter.rank) {
                streams[m.enter.rank as usize]
                    .sources
                    .push((m.enter.index, From::Coll(ii, k as u32)));
            }
            if let Some(exit) = m.exit {
                if Some(exit.thread) == main(exit.rank) && inst.senders(k as u32).next().is_some() {
                    streams[exit.rank as usize]
                        .incoming
                        .push((exit.index, From::Coll(ii, k as u32)));
                }
            }
        }
    }
    for s in &mut streams {
        s.sources.sort_unstable_by_key(|x| x.0);
        s.incoming.sort_unstable_by_key(|x| x.0);
    }
    let mut send_mark: Vec<Option<Mark>> = vec![None; messages.sends.len()];
    let mut enter_mark: Vec<Vec<Option<Mark>>> = instances
        .iter()
        .map(|i| vec![None; i.members.len()])
        .collect();
    let mut dropped = 0u64;
    // The sweep: every node once, in time order (enters first at a tie),
    // each rank's in its own order.
    let mut heap: BinaryHeap<Reverse<(u64, Side, u32)>> = BinaryHeap::new();
    for (r, s) in streams.iter_mut().enumerate() {
        let resume = resume_of(&waited[r]);
        if let Some((t, side)) = head(s, &resume) {
            heap.push(Reverse((t, side, r as u32)));
        }
    }
    let (mut f_now, mut t_now, mut computing) = (0.0f64, from, n);
    while let Some(Reverse((t, side, r))) = heap.pop() {
        f_now += computing * (t - t_now) as f64;
        t_now = t;
        let s = &mut streams[r as usize];
        let (pos, func, _, _) = s.call.expect("a call at the head");
        // The time before a resume is waiting: it weighs nothing.
        let local = if side == Side::Resume {
            s.best
        } else {
            s.best + weight((s.t, s.f), (t, f_now))
        };
        let mut best = local;
        if side == Side::Exit {
            // Incoming message and collective edges. At the window's edges
            // every node is clipped to one time and the order among them
            // is lost; nothing there weighs anything either.
            let inside = from < t && t < to;
            while s.incoming.get(s.next_in).is_some_and(|x| x.0 < pos) {
                s.next_in += 1;
            }
            let mut won: Option<Mark> = None;
            while let Some(&(p, src)) = s.incoming.get(s.next_in) {
                if p != pos {
                    break;
                }
                s.next_in += 1;
                let marks: Vec<Mark> = match src {
                    From::Send(si) => match send_mark[si] {
                        Some(m) => vec![m],
                        None => {
                            dropped += u64::from(inside);
                            Vec::new()
                        }
                    },
                    From::Coll(ii, i) => {
                        let inst = &instances[ii];
                        let mut v = Vec::new();
                        for k in inst.senders(i) {
                            match enter_mark[ii][k as usize] {
                                Some(m) => v.push(m),
                                None => dropped += u64::from(inside),
                            }
                        }
                        v
                    }
                };
                // A message or collective edge only carries the dependency.
                for m in marks {
                    if m.best > best {
                        best = m.best;
                        won = Some(m);
                    }
                }
            }
            if let Some(m) = won {
                s.jumps.push(Jump {
                    at: pos,
                    rank: m.rank,
                    pos: m.pos,
                    activity: func,
                });
            }
            computing += 1.0;
        } else if side == Side::Enter {
            computing -= 1.0;
            while s.sources.get(s.next_src).is_some_and(|x| x.0 < pos) {
                s.next_src += 1;
            }
            let mark = Mark { best, rank: r, pos };
            while let Some(&(p, src)) = s.sources.get(s.next_src) {
                if p != pos {
                    break;
                }
                s.next_src += 1;
                match src {
                    From::Send(si) => send_mark[si] = Some(mark),
                    From::Coll(ii, k) => enter_mark[ii][k as usize] = Some(mark),
                }
            }
        }
        s.best = best;
        s.t = t;
        s.f = f_now;
        s.side = match side {
            Side::Enter if s.resumed.is_some() => Side::Resume,
            Side::Enter | Side::Resume => Side::Exit,
            Side::Exit => {
                s.call = None;
                Side::Enter
            }
        };
        let resume = resume_of(&waited[r as usize]);
        if let Some((t, side)) = head(s, &resume) {
            heap.push(Reverse((t, side, r)));
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
                        thread: trace.ranks[j.rank as usize].threads[0].index,
                        index: j.pos,
                    };
                    let start = span(src).0;
                    push(&mut path, at.rank, j.activity, start, t, t);
                    hops += u64::from(j.rank != at.rank);
                    at = src;
                    t = start;
                } else {
                    let resumed = resume_of(&waited[at.rank as usize])(at.index, a, t);
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
    // The weight of each stretch: F at its ends, in one pass per rank.
    let mut at_times: Vec<u64> = path.iter().flat_map(|(s, w)| [*w, s.to]).collect();
    at_times.sort_unstable();
    at_times.dedup();
    let f = integrals(trace, times, window, &at_times);
    let f_of = |t: u64| f[at_times.binary_search(&t).expect("a boundary")];
    let mut walk = Walk::new(from, to);
    for (s, w) in &path {
        let weight = weight((*w, f_of(*w)), (s.to, f_of(s.to)));
        walk.push_weighted(s.rank, s.activity, s.from, s.to, weight);
    }
    walk.flush();
    Found {
        walk,
        weight: total,
        hops,
        dropped_edges: dropped,
    }
}

/// F(t) = ∫ from the window's start to t of the number of ranks whose main
/// thread is outside MPI, at each of the sorted times `at`.
fn integrals(trace: &Trace, times: &Times, (from, to): (u64, u64), at: &[u64]) -> Vec<f64> {
    let mut f = vec![0f64; at.len()];
    for rank in &trace.ranks {
        // MPI time of this rank in [from, t], for each t of `at`.
        let mut mpi = 0u64;
        let mut q = 0usize;
        let mut add = |f: &mut Vec<f64>, upto: u64, mpi_before: u64, busy_from: Option<u64>| {
            while q < at.len() && at[q] <= upto {
                let t = at[q];
                let in_call = busy_from.map_or(0, |a| t.saturating_sub(a));
                let busy = mpi_before + in_call;
                f[q] += (t - from) as f64 - busy as f64;
                q += 1;
            }
        };
        for (_, _, a, b) in times.calls_at(rank.rank, 0) {
            let (a, b) = (a.clamp(from, to), b.max(a).clamp(from, to));
            add(&mut f, a, mpi, None);
            add(&mut f, b, mpi, Some(a));
            mpi += b - a;
        }
        add(&mut f, u64::MAX, mpi, None);
    }
    f
}

/// The last call of `rank`'s main thread.
fn last_call(trace: &Trace, rank: u32) -> Option<EventRef> {
    let th = trace.ranks.get(rank as usize)?.threads.first()?;
    (0..th.records.len())
        .rev()
        .find(|&p| th.records.is_call(p))
        .map(|p| EventRef {
            rank,
            thread: th.index,
            index: p as u32,
        })
}
