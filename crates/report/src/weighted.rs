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

use pmtrace_matching::collective::{Instance, MemberCalls, Members, Readiness};
use pmtrace_matching::matching::Messages;
use pmtrace_trace::read::{EventRef, Trace};
use pmtrace_trace::wire::{In, Out, Wire};

use crate::path::{previous_call, Stretch, Walk, COMPUTING};
use crate::times::{CallsAt, Times};
use crate::waits::Wait;

/// Where a node's heaviest incoming edge came from, if not its own rank.
#[derive(Debug, Clone, Copy)]
pub struct Jump {
    /// The exit it arrived at (record position in the main thread).
    pub at: u32,
    /// The enter it left: rank, record position.
    pub rank: u32,
    pub pos: u32,
    /// The activity of the edge (the receiving call's function).
    pub activity: u32,
}

impl Wire for Jump {
    fn put(&self, o: &mut Out) {
        o.u32(self.at)
            .u32(self.rank)
            .u32(self.pos)
            .u32(self.activity);
    }
    fn get(i: &mut In) -> Jump {
        Jump {
            at: i.u32(),
            rank: i.u32(),
            pos: i.u32(),
            activity: i.u32(),
        }
    }
}

/// A source node (an enter) when swept: the weight of the heaviest path
/// to it, and where it is. `best` is NaN until swept.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    pub best: f64,
    pub rank: u32,
    pub pos: u32,
}

impl Wire for Mark {
    fn put(&self, o: &mut Out) {
        o.f64(self.best).u32(self.rank).u32(self.pos);
    }
    fn get(i: &mut In) -> Mark {
        Mark {
            best: i.f64(),
            rank: i.u32(),
            pos: i.u32(),
        }
    }
}

impl Wire for Arrivals {
    fn put(&self, o: &mut Out) {
        o.u64(self.missing).put(&self.won);
    }
    fn get(i: &mut In) -> Arrivals {
        let missing = i.u64();
        Arrivals {
            won: i.get(),
            missing,
        }
    }
}

impl Mark {
    pub const UNSWEPT: Mark = Mark {
        best: f64::NAN,
        rank: 0,
        pos: 0,
    };

    /// Whether `self` wins over `other` as an exit's heaviest edge: the
    /// heavier, and of equals the earlier node (lowest rank, then
    /// position), so that the winner does not depend on the order the
    /// edges are looked at.
    pub fn beats(&self, other: &Mark) -> bool {
        self.best > other.best
            || (self.best == other.best && (self.rank, self.pos) < (other.rank, other.pos))
    }
}

/// What arrived at an exit over its edges: the winning mark, and how many
/// edges came from enters not yet swept.
#[derive(Debug, Clone, Copy, Default)]
pub struct Arrivals {
    pub won: Option<Mark>,
    pub missing: u64,
}

impl Arrivals {
    /// One edge from an enter with mark `m`.
    pub fn take(&mut self, m: Mark) {
        if m.best.is_nan() {
            self.missing += 1;
        } else if self.won.is_none_or(|w| m.beats(&w)) {
            self.won = Some(m);
        }
    }

    /// What arrived over other edges.
    pub fn join(&mut self, other: Arrivals) {
        self.missing += other.missing;
        if let Some(m) = other.won {
            self.take(m);
        }
    }
}

/// How a sweep finds the marks of an exit's edges (`E`), and tells a
/// source's mark (`S`) to the exits that need it.
pub trait Edges<E, S> {
    fn arrive(&self, edge: E, into: &mut Arrivals);
    fn publish(&mut self, source: S, mark: Mark);
}

/// What arrives at an exit of the whole trace.
#[derive(Debug, Clone, Copy)]
enum From {
    Send(u32),
    /// Instance, member.
    Coll(u32, u32),
}

/// A node of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    Enter,
    /// Where a call that waited for a late rank stopped waiting.
    Resume,
    Exit,
}

/// The weights of the sweep: n·Δt less (n − 1)/n of the computing done
/// meanwhile, over the window `from..to`.
pub struct Weigh {
    pub n: f64,
    pub c: f64,
    pub computing: Computing,
    pub from: u64,
    pub to: u64,
}

impl Weigh {
    /// `ranks` in the whole trace.
    pub fn new(ranks: usize, computing: Computing, (from, to): (u64, u64)) -> Weigh {
        let n = ranks.max(1) as f64;
        Weigh {
            n,
            c: (n - 1.0) / n,
            computing,
            from,
            to,
        }
    }

    /// The weight of work over `a..b`.
    pub fn of(&self, a: u64, b: u64) -> f64 {
        self.n * (b - a) as f64 - self.c * (self.computing.f(b) - self.computing.f(a))
    }

    fn clip(&self, t: u64) -> u64 {
        t.clamp(self.from, self.to)
    }
}

/// How long each call of `rank`'s main thread waited (the longest of its
/// waits), by position, from `waits` sorted by the waiting call.
pub fn waited_by_call(trace: &Trace, rank: u32, waits: &[Wait]) -> Vec<(u32, u64)> {
    let main = trace.held(rank).threads.first().map(|t| t.index);
    let first = waits.partition_point(|w| w.at.rank < rank);
    let n = waits[first..].partition_point(|w| w.at.rank == rank);
    let mut v: Vec<(u32, u64)> = waits[first..first + n]
        .iter()
        .filter(|w| Some(w.at.thread) == main)
        .map(|w| (w.at.index, w.ns))
        .collect();
    // The longest wait of a call first, then one entry per call.
    v.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    v.dedup_by_key(|w| w.0);
    v.shrink_to_fit();
    v
}

/// One rank's main thread, as the sweep walks its nodes: its calls
/// (position, function, start, end), the incoming edges of its exits and
/// the sources at its enters, each by position.
pub struct Stream<'a, E, S> {
    pub rank: u32,
    calls: CallsAt<'a>,
    /// The current call: position, function, start, end (clipped).
    call: Option<(u32, u32, u64, u64)>,
    /// Its resume time, if it waited.
    resumed: Option<u64>,
    /// Where the lookup of waits is.
    next_wait: usize,
    /// The next node of `call`.
    side: Side,
    /// The last node swept: path weight, time, F(time).
    pub best: f64,
    t: u64,
    f: f64,
    pub incoming: Vec<(u32, E)>,
    next_in: usize,
    pub sources: Vec<(u32, S)>,
    next_src: usize,
    pub jumps: Vec<Jump>,
    /// How long its calls waited (see [`waited_by_call`]).
    pub waited: Vec<(u32, u64)>,
}

/// Where a stream stopped: at its end, or blocked at an exit at this time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    End,
    Blocked(u64),
}

impl<'a, E: Copy, S: Copy> Stream<'a, E, S> {
    /// The stream of `rank`'s main thread on the times `calls` gives
    /// (clipped to the window here).
    pub fn new(
        rank: u32,
        calls: CallsAt<'a>,
        waited: Vec<(u32, u64)>,
        w: &Weigh,
    ) -> Stream<'a, E, S> {
        let from = w.from;
        Stream {
            rank,
            calls,
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
            waited,
        }
    }

    /// Sorts the edges and sources by position, after they were added.
    pub fn sort(&mut self) {
        self.sources.sort_unstable_by_key(|x| x.0);
        self.incoming.sort_unstable_by_key(|x| x.0);
        self.sources.shrink_to_fit();
        self.incoming.shrink_to_fit();
    }

    /// The time and side of the next node (its call clipped to the window).
    fn head(&mut self, w: &Weigh) -> Option<(u64, Side)> {
        if self.call.is_none() {
            self.call = (self.calls.next()).map(|(p, f, a, b)| (p, f, w.clip(a), w.clip(b.max(a))));
            self.side = Side::Enter;
            self.resumed = match self.call {
                Some((p, _, a, b)) => resume_at(&self.waited, &mut self.next_wait, p, a, b),
                None => None,
            };
        }
        let (_, _, a, b) = self.call?;
        Some(match self.side {
            Side::Enter => (a, Side::Enter),
            Side::Resume => (self.resumed.unwrap_or(a), Side::Resume),
            Side::Exit => (b, Side::Exit),
        })
    }

    /// The incoming edges of the exit at `pos`.
    pub fn edges_at(&mut self, pos: u32) -> impl Iterator<Item = E> + '_ {
        while self.incoming.get(self.next_in).is_some_and(|x| x.0 < pos) {
            self.next_in += 1;
        }
        self.incoming[self.next_in..]
            .iter()
            .take_while(move |x| x.0 == pos)
            .map(|x| x.1)
    }

    /// The position of the exit the stream is blocked at, if it is.
    pub fn blocked_exit(&self) -> Option<u32> {
        match (self.call, self.side) {
            (Some((pos, ..)), Side::Exit) => Some(pos),
            _ => None,
        }
    }

    /// Sweeps the nodes as far as their edges allow; the first exit goes
    /// on without its missing edges when `forced`. Adds the edges left out
    /// (inside the window) to `dropped`; returns whether a node was swept,
    /// and where the stream stopped.
    pub fn advance(
        &mut self,
        w: &Weigh,
        edges: &mut impl Edges<E, S>,
        mut forced: bool,
        dropped: &mut u64,
    ) -> (bool, Stop) {
        let mut progress = false;
        loop {
            let Some((t, side)) = self.head(w) else {
                return (progress, Stop::End);
            };
            let (pos, func, _, _) = self.call.expect("a call at the head");
            let f_t = w.computing.f(t);
            let mut best = if side == Side::Resume {
                // Waiting weighs nothing.
                self.best
            } else {
                self.best + w.n * (t - self.t) as f64 - w.c * (f_t - self.f)
            };
            if side == Side::Exit {
                let mut came = Arrivals::default();
                let mut edges_n = 0;
                for e in self.edges_at(pos) {
                    edges_n += 1;
                    edges.arrive(e, &mut came);
                }
                if came.missing > 0 && !forced {
                    return (progress, Stop::Blocked(t));
                }
                // At the window's edges every node is clipped to one
                // time; nothing there weighs anything.
                if w.from < t && t < w.to {
                    *dropped += came.missing;
                }
                self.next_in += edges_n;
                // An edge only carries the dependency.
                if let Some(m) = came.won.filter(|m| m.best > best) {
                    best = m.best;
                    self.jumps.push(Jump {
                        at: pos,
                        rank: m.rank,
                        pos: m.pos,
                        activity: func,
                    });
                }
            } else if side == Side::Enter {
                while self.sources.get(self.next_src).is_some_and(|x| x.0 < pos) {
                    self.next_src += 1;
                }
                let mark = Mark {
                    best,
                    rank: self.rank,
                    pos,
                };
                while let Some(&(p, src)) = self.sources.get(self.next_src) {
                    if p != pos {
                        break;
                    }
                    self.next_src += 1;
                    edges.publish(src, mark);
                }
            }
            forced = false;
            self.best = best;
            self.t = t;
            self.f = f_t;
            self.side = match side {
                Side::Enter if self.resumed.is_some() => Side::Resume,
                Side::Enter | Side::Resume => Side::Exit,
                Side::Exit => {
                    self.call = None;
                    Side::Enter
                }
            };
            progress = true;
        }
    }
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
    /// Per bin: F at its start and C in it (its mean), side by side so
    /// that a lookup reads one cache line.
    bins: Vec<[f64; 2]>,
    /// F at the end of the last bin.
    end: f64,
}

/// What ranks add to [`Computing`]: per bin, the computing ranks' partial
/// shares (in 1/span of a bin) and the change in the count of those that
/// compute through whole bins (an `i64` in two's complement, so that parts
/// add as `u64`s); two cells past the last bin take what falls at its end.
pub struct ComputingParts {
    pub from: u64,
    pub span: u64,
    pub cells: Vec<[u64; 2]>,
}

impl ComputingParts {
    /// The parts of the ranks of `trace` (or of a block) in the window.
    pub fn new(trace: &Trace, times: &Times, (from, to): (u64, u64)) -> ComputingParts {
        let span = to.saturating_sub(from).max(1);
        let bins = span.min(1 << 22);
        let mut cells = vec![[0u64; 2]; bins as usize + 2];
        let place = |t: u64| u128::from(t - from) * u128::from(bins);
        let s = u128::from(span);
        let mut add = |x: u64, y: u64| {
            if y <= x {
                return;
            }
            let (ux, uy) = (place(x), place(y));
            let (bx, by) = ((ux / s) as usize, ((uy / s) as usize).min(bins as usize));
            if bx >= by {
                cells[bx.min(bins as usize)][0] += (uy - ux) as u64;
            } else {
                cells[bx][0] += ((bx as u128 + 1) * s - ux) as u64;
                cells[by][0] += (uy - by as u128 * s) as u64;
                cells[bx + 1][1] = cells[bx + 1][1].wrapping_add(1);
                cells[by][1] = cells[by][1].wrapping_sub(1);
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
        ComputingParts { from, span, cells }
    }
}

impl Computing {
    pub fn new(trace: &Trace, times: &Times, window: (u64, u64)) -> Computing {
        Computing::of(ComputingParts::new(trace, times, window))
    }

    /// F from every rank's parts, made in the parts' own cells.
    pub fn of(p: ComputingParts) -> Computing {
        let mut cells = p.cells;
        cells.truncate(cells.len().saturating_sub(2));
        let bins = cells.len();
        let width = p.span as f64 / bins as f64;
        let mut run = 0i64;
        let mut at = 0f64;
        let bins: Vec<[f64; 2]> = cells
            .into_iter()
            .map(|[part, d]| {
                run += d as i64;
                let c = run as f64 + part as f64 / p.span as f64;
                let edge = at;
                at = edge + c * width;
                [edge, c]
            })
            .collect();
        Computing {
            from: p.from,
            width,
            per_ns: 1.0 / width,
            bins,
            end: at,
        }
    }

    #[inline]
    pub fn f(&self, t: u64) -> f64 {
        let x = t.saturating_sub(self.from) as f64 * self.per_ns;
        // x ≥ 0: the cast truncates as floor would.
        let k = x as usize;
        let Some(&[edge, c]) = self.bins.get(k) else {
            return self.end;
        };
        edge + (x - k as f64) * c * self.width
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

/// The marks of the whole trace's sources.
struct Marks<'i> {
    instances: &'i [Instance<MemberCalls>],
    on_main: Vec<Vec<bool>>,
    first: Vec<usize>,
    send_mark: Vec<Mark>,
    enter_mark: Vec<Mark>,
    /// Per instance, over its senders on a main thread: which are swept
    /// ([`Readiness`], the replays' rule, as if sweeping were entering),
    /// and the two winning marks swept so far (with their members), so
    /// that an exit of an unordered instance (every sender but itself)
    /// gathers its edges in constant time, not one by one.
    swept: Vec<Readiness>,
    top: Vec<[Option<(Mark, u32)>; 2]>,
}

/// An instance as the weighted sweep sees it: its members that may send
/// and whose enter is on their rank's main thread send.
struct MainSenders<'a> {
    inst: &'a Instance<MemberCalls>,
    on_main: &'a [bool],
}

impl Members for MainSenders<'_> {
    fn slots(&self) -> u32 {
        self.inst.members.len() as u32
    }
    fn present(&self) -> u32 {
        Members::present(self.inst)
    }
    fn may_send(&self, k: u32) -> bool {
        self.on_main[k as usize] && self.inst.may_send(k)
    }
    fn may_recv(&self, i: u32) -> bool {
        self.inst.may_recv(i)
    }
    fn ordered(&self) -> bool {
        self.inst.ordered()
    }
    /// Counted by its senders: where every exit waits for every enter,
    /// the main-thread ones are the senders of each.
    fn all_to_all(&self) -> bool {
        false
    }
}

impl Marks<'_> {
    fn view(&self, ii: usize) -> MainSenders<'_> {
        MainSenders {
            inst: &self.instances[ii],
            on_main: &self.on_main[ii],
        }
    }

    /// Whether member `k`'s enter is an edge's source in instance `ii`.
    fn sends(&self, ii: usize, k: u32) -> bool {
        self.view(ii).may_send(k)
    }
}

impl Edges<From, From> for Marks<'_> {
    fn arrive(&self, e: From, into: &mut Arrivals) {
        match e {
            From::Send(si) => into.take(self.send_mark[si as usize]),
            From::Coll(ii, i) if self.instances[ii as usize].ordered() => {
                let ii = ii as usize;
                for k in self.instances[ii].senders(i) {
                    if self.on_main[ii][k as usize] {
                        into.take(self.enter_mark[self.first[ii] + k as usize]);
                    }
                }
            }
            From::Coll(ii, i) => {
                let ii = ii as usize;
                if !self.instances[ii].may_recv(i) {
                    return;
                }
                // Every sender but `i` itself.
                into.missing += u64::from(self.swept[ii].missing(&self.view(ii), i));
                let best = self.top[ii].iter().flatten().find(|&&(_, k)| k != i);
                if let Some(&(m, _)) = best {
                    into.take(m);
                }
            }
        }
    }

    fn publish(&mut self, src: From, mark: Mark) {
        match src {
            From::Send(si) => self.send_mark[si as usize] = mark,
            From::Coll(ii, k) => {
                let ii = ii as usize;
                self.enter_mark[self.first[ii] + k as usize] = mark;
                if !self.sends(ii, k) || mark.best.is_nan() {
                    return;
                }
                let view = MainSenders {
                    inst: &self.instances[ii],
                    on_main: &self.on_main[ii],
                };
                self.swept[ii].enter(&view, k);
                let top = &mut self.top[ii];
                if top[0].is_none_or(|(t, _)| mark.beats(&t)) {
                    top[1] = top[0];
                    top[0] = Some((mark, k));
                } else if top[1].is_none_or(|(t, _)| mark.beats(&t)) {
                    top[1] = Some((mark, k));
                }
            }
        }
    }
}

/// The weighted path's sweep and walk back; `waits` sorted by the
/// waiting call.
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
    let w = Weigh::new(
        trace.ranks.len(),
        Computing::new(trace, times, window),
        window,
    );
    let main = |rank: u32| trace.held(rank).threads.first().map(|t| t.index);
    let mut streams: Vec<Stream<From, From>> = trace
        .ranks
        .iter()
        .map(|r| {
            let waited = waited_by_call(trace, r.rank, waits);
            Stream::new(r.rank, times.calls_at(r.rank, 0), waited, &w)
        })
        .collect();
    // Sources and incoming edges, between main threads only.
    for (si, s) in messages.sends.iter().enumerate() {
        if Some(s.call.thread) == main(s.call.rank) {
            streams[s.call.rank as usize]
                .sources
                .push((s.call.index, From::Send(si as u32)));
        }
    }
    for m in &messages.matched {
        let (s, at) = (&messages.sends[m.send], messages.recvs[m.recv].completion);
        if Some(s.call.thread) == main(s.call.rank) && Some(at.thread) == main(at.rank) {
            streams[at.rank as usize]
                .incoming
                .push((at.index, From::Send(m.send as u32)));
        }
    }
    // Each member's enter mark, flat: instance `i`'s from `first[i]`.
    let mut first = Vec::with_capacity(instances.len());
    let mut total = 0usize;
    for inst in instances {
        first.push(total);
        total += inst.members.len();
    }
    let on_main: Vec<Vec<bool>> = instances
        .iter()
        .map(|inst| {
            (inst.members.iter())
                .map(|m| {
                    m.as_ref()
                        .is_some_and(|m| Some(m.enter.thread) == main(m.enter.rank))
                })
                .collect()
        })
        .collect();
    for (ii, inst) in instances.iter().enumerate() {
        for (k, m) in inst.members.iter().enumerate() {
            let Some(m) = m else { continue };
            if on_main[ii][k] {
                streams[m.enter.rank as usize]
                    .sources
                    .push((m.enter.index, From::Coll(ii as u32, k as u32)));
            }
            let Some(exit) = m.exit else { continue };
            let from_main = inst.senders(k as u32).any(|s| on_main[ii][s as usize]);
            if Some(exit.thread) == main(exit.rank) && from_main {
                streams[exit.rank as usize]
                    .incoming
                    .push((exit.index, From::Coll(ii as u32, k as u32)));
            }
        }
    }
    for s in &mut streams {
        s.sort();
    }
    let mut marks = Marks {
        instances,
        on_main,
        first,
        send_mark: vec![Mark::UNSWEPT; messages.sends.len()],
        enter_mark: vec![Mark::UNSWEPT; total],
        swept: Vec::new(),
        top: vec![[None; 2]; instances.len()],
    };
    marks.swept = (0..instances.len())
        .map(|ii| Readiness::new(&marks.view(ii)))
        .collect();
    let dropped = sweep(&mut streams, &w, &mut marks);
    // Back from the heaviest end, through the edges that won.
    let end = (0..streams.len()).max_by(|&a, &b| streams[a].best.total_cmp(&streams[b].best));
    let total = end.map_or(0.0, |e| streams[e].best);
    let mut walk = if keep {
        Walk::keeping(from, to)
    } else {
        Walk::new(from, to)
    };
    let hops = end.map_or(0, |e| {
        walk_back(trace, times, &w, &streams, e as u32, &mut walk)
    });
    walk.flush();
    Found {
        walk,
        weight: total,
        hops,
        dropped_edges: dropped,
    }
}

/// The sweep: each rank's nodes in order; an exit waits until the enters
/// its edges come from were swept (a DAG in time, so some rank can always
/// go on), unless nothing can: then the earliest blocked exit goes on
/// without the missing edges (they went back in time). The edges left
/// out so.
fn sweep(streams: &mut [Stream<From, From>], w: &Weigh, marks: &mut Marks) -> u64 {
    let mut dropped = 0u64;
    let mut force: Option<usize> = None;
    loop {
        let mut progress = false;
        let mut blocked: Option<(u64, usize)> = None;
        for (r, s) in streams.iter_mut().enumerate() {
            let (went, stop) = s.advance(w, marks, force == Some(r), &mut dropped);
            progress |= went;
            if let Stop::Blocked(t) = stop {
                if blocked.is_none_or(|b| t < b.0) {
                    blocked = Some((t, r));
                }
            }
        }
        force = None;
        match blocked {
            None => break,
            Some(_) if progress => {}
            Some((_, r)) => force = Some(r),
        }
    }
    dropped
}

/// The walk back from the end of rank `end`'s stream, through the edges
/// that won: its stretches last first, each with where its weighed part
/// starts, walked as they come. The hops between ranks.
fn walk_back(
    trace: &Trace,
    times: &Times,
    w: &Weigh,
    streams: &[Stream<From, From>],
    end: u32,
    walk: &mut Walk,
) -> u64 {
    let mut push = |rank, activity, a: u64, b: u64, weighed: u64| {
        if b > a {
            let s = Stretch::new(rank, activity, a, b);
            let weight = w.of(weighed.clamp(a, b), s.to);
            walk.push_weighted(s.rank, s.activity, s.from, s.to, weight);
        }
    };
    let Some(mut back) = Back::start(trace, times, w, end) else {
        return 0;
    };
    let limit = 4 * trace.events() as usize + 16;
    loop {
        let s = &streams[back.at.rank as usize];
        match back.step(trace, times, w, s, limit, &mut push) {
            BackStep::Go => {}
            BackStep::Done => return back.hops,
            BackStep::Hop(j) => back.land(trace, times, w, j, &mut push),
        }
    }
}

/// The walk back from the heaviest end of the sweep, through the edges
/// that won: at each exit the jump that arrived there, else the call and
/// the computation before it.
#[derive(Debug, Clone, Copy)]
pub struct Back {
    pub at: EventRef,
    pub on_exit: bool,
    pub t: u64,
    pub guard: usize,
    pub hops: u64,
}

impl Wire for Back {
    fn put(&self, o: &mut Out) {
        o.at(self.at).bool(self.on_exit).u64(self.t);
        o.u64(self.guard as u64).u64(self.hops);
    }
    fn get(i: &mut In) -> Back {
        Back {
            at: i.at(),
            on_exit: i.bool(),
            t: i.u64(),
            guard: i.u64() as usize,
            hops: i.u64(),
        }
    }
}

/// What one step of [`Back`] did.
pub enum BackStep {
    Go,
    Done,
    /// Over a jump to the enter of another call (maybe of another rank:
    /// [`Back::land`] there).
    Hop(Jump),
}

fn span(times: &Times, w: &Weigh, at: EventRef) -> (u64, u64) {
    let (a, b) = times.of(at).unwrap_or((w.from, w.from));
    (w.clip(a), w.clip(b.max(a)))
}

impl Back {
    /// At the last call of `rank`'s main thread, if it has one.
    pub fn start(trace: &Trace, times: &Times, w: &Weigh, rank: u32) -> Option<Back> {
        let at = last_call(trace, rank)?;
        Some(Back {
            at,
            on_exit: true,
            t: span(times, w, at).1,
            guard: 0,
            hops: 0,
        })
    }

    /// One step back on `at`'s rank, whose stream is `s`; `push(rank,
    /// activity, a, b, weighed from)` takes each stretch, last first.
    pub fn step<E: Copy, S: Copy>(
        &mut self,
        trace: &Trace,
        times: &Times,
        w: &Weigh,
        s: &Stream<E, S>,
        limit: usize,
        push: &mut impl FnMut(u32, u32, u64, u64, u64),
    ) -> BackStep {
        if self.t <= w.from || self.guard >= limit {
            return BackStep::Done;
        }
        self.guard += 1;
        let at = self.at;
        let a = span(times, w, at).0;
        if self.on_exit {
            let jump = (s.jumps.binary_search_by_key(&at.index, |j| j.at).ok()).map(|i| s.jumps[i]);
            if let Some(j) = jump {
                return BackStep::Hop(j);
            }
            let mut k = s.waited.partition_point(|x| x.0 < at.index);
            let resumed = resume_at(&s.waited, &mut k, at.index, a, self.t);
            let func = times.func(at).unwrap_or(COMPUTING);
            push(at.rank, func, a, self.t, resumed.unwrap_or(a));
            self.t = a;
            self.on_exit = false;
            return BackStep::Go;
        }
        match previous_call(trace, at) {
            Some(prev) => {
                let b_prev = span(times, w, prev).1.min(self.t);
                push(at.rank, COMPUTING, b_prev, self.t, b_prev);
                self.at = prev;
                self.t = b_prev;
                self.on_exit = true;
                BackStep::Go
            }
            None => {
                push(at.rank, COMPUTING, w.from, self.t, w.from);
                BackStep::Done
            }
        }
    }

    /// Arrives over jump `j` at the enter it left, on the block that holds
    /// `j.rank`: the receiving call's stretch is pushed from there.
    pub fn land(
        &mut self,
        trace: &Trace,
        times: &Times,
        w: &Weigh,
        j: Jump,
        push: &mut impl FnMut(u32, u32, u64, u64, u64),
    ) {
        let src = EventRef {
            rank: j.rank,
            thread: trace.held(j.rank).threads[0].index,
            index: j.pos,
        };
        // A message or collective edge from the enter of another rank's
        // call: the time is the receiving call's.
        let start = span(times, w, src).0;
        push(self.at.rank, j.activity, start, self.t, self.t);
        self.hops += u64::from(j.rank != self.at.rank);
        self.at = src;
        self.t = start;
        self.on_exit = false;
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
