//! Jiang's weighted critical path over blocks
//! ([`pmtrace_report::weighted`] says what it weighs).
//!
//! **F(t).** Each block adds its ranks' integer shares of computing per
//! bin; the sums over blocks are the whole trace's, so every process holds
//! the serial F.
//!
//! **The sweep** is a longest-path replay in rounds, like CLC's forward
//! pass ([`crate::clc`]): a node's path weight depends only on its rank's
//! node before it and on the enters its exit's edges come from, so any
//! order that sweeps an exit after those gives the serial weights (of
//! equal edges the earliest enter wins, in any order). Each round every
//! block sweeps what it can; then one all-to-all carries the marks of
//! sends received in another block (to the receiver's process) and of
//! collective enters (to the instance's owner, which answers each exit
//! with the heaviest of its senders once they all came: the top two
//! senders, or a scan's prefix, in linear time). Stuck everywhere (edges
//! back in time), the blocked exit that is earliest over all blocks (ties
//! to the lowest rank) goes on with the edges that came, asking the
//! owners for what its collectives brought so far, as the serial sweep.
//!
//! **The path** is followed back from the heaviest end as a token
//! ([`Back`]) that goes to the block of the rank a jump leaves from; each
//! block logs the stretches it passed, numbered, and process 0 weighs and
//! adds them up in that order.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap as HashMap;

use pmtrace_matching::collective::{Readiness, Senders};
use pmtrace_report::path::{Walk, COMPUTING};
use pmtrace_report::times::Times;
use pmtrace_report::waits::Wait;
use pmtrace_report::weighted::{
    waited_by_call, Arrivals, Back, BackStep, Computing, ComputingParts, Edges, Jump, Mark, Stop,
    Stream, Weigh,
};
use pmtrace_trace::read::EventRef;

use crate::block::Block;
use crate::fabric::{sum_of, Fabric};
use crate::insts::Insts;
use crate::messages::BlockMessages;
use crate::rounds::{self, Round, Went};
use crate::wire::{In, Out};

/// F over the window from every block's parts.
pub fn computing<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    times: &Times,
    window: (u64, u64),
) -> Computing {
    let mut p = ComputingParts::new(&b.trace, times, window);
    f.sum(p.cells.as_flattened_mut());
    Computing::of(p)
}

/// An edge into an exit of this block.
#[derive(Debug, Clone, Copy)]
enum Edge {
    /// A send of this block (index into the block's sends).
    Local(usize),
    /// A send of another block (slot of the inbox).
    Cross(usize),
    /// The collective of a member held here (its slot).
    Coll(usize),
}

/// A source at an enter of this block.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// A send received here: its index, and the receiving stream.
    Local(usize, usize),
    /// A send received in another block: that process, and the send's
    /// place among those it receives from here.
    Cross(u32, u32),
    /// A collective's enter (member slot).
    Enter(usize),
}

/// An owned instance as the sweep sees it.
struct Owned {
    /// By member: it may send and enters on its rank's main thread.
    sender: Vec<bool>,
    /// By member: its exit waits for the collective edge.
    waits: Vec<bool>,
    /// By member: where it is held (process, slot).
    at: Vec<(u32, u32)>,
    ordered: bool,
    marks: Vec<Option<Mark>>,
    /// Which senders' marks came ([`Readiness`]).
    came: Readiness,
    /// A scan: the next member, and what its senders before it brought.
    next: usize,
    before: Arrivals,
}

impl Owned {
    /// What member `i`'s senders brought so far.
    fn partial(&self, i: usize) -> Arrivals {
        let mut a = Arrivals::default();
        for k in (0..self.sender.len()).filter(|&k| self.sender[k] && k != i) {
            if !self.ordered || k < i {
                a.take(self.marks[k].unwrap_or(Mark::UNSWEPT));
            }
        }
        a
    }

    /// The exits now known: (member, what arrived).
    fn ready(&mut self) -> Vec<(usize, Arrivals)> {
        let mut out = Vec::new();
        let n = self.sender.len();
        let view = Senders {
            sender: &self.sender,
            ordered: self.ordered,
        };
        if self.ordered {
            while self.next < n && self.came.ready(&view, self.next as u32) {
                let i = self.next;
                if self.sender[i] && self.marks[i].is_none() {
                    break;
                }
                if self.waits[i] {
                    out.push((i, self.before));
                }
                if let (true, Some(m)) = (self.sender[i], self.marks[i]) {
                    self.before.take(m);
                }
                self.next += 1;
            }
            return out;
        }
        if !self.came.all_in() || self.next > 0 {
            return out;
        }
        self.next = n;
        // The two heaviest senders: each exit takes the first but itself.
        let mut top: [Option<(Mark, usize)>; 2] = [None, None];
        for k in (0..n).filter(|&k| self.sender[k]) {
            let m = self.marks[k].expect("every sender came");
            if top[0].is_none_or(|(t, _)| m.beats(&t)) {
                top = [Some((m, k)), top[0]];
            } else if top[1].is_none_or(|(t, _)| m.beats(&t)) {
                top[1] = Some((m, k));
            }
        }
        for i in (0..n).filter(|&i| self.waits[i]) {
            let won = top.iter().flatten().find(|(_, k)| *k != i).map(|x| x.0);
            out.push((i, Arrivals { won, missing: 0 }));
        }
        out
    }
}

const MARK: u8 = 0;
const ENTER: u8 = 1;
const RESULT: u8 = 2;
const QUERY: u8 = 3;
const PARTIAL: u8 = 4;

/// What the sweep keeps beside the streams.
struct State {
    me: usize,
    send_mark: Vec<Mark>,
    inbox: Vec<Mark>,
    /// The stream each inbox slot's receive is on.
    inbox_stream: Vec<usize>,
    /// Inbox slots from each process start here.
    in_start: Vec<usize>,
    /// By member slot held here: what its collective brought its exit.
    coll: Vec<Option<Arrivals>>,
    /// By member slot: its owner, and the stream its exit is on.
    member_owner: Vec<u32>,
    member_stream: Vec<Option<usize>>,
    owned: Vec<Owned>,
    /// (process, slot) of a member → (owned instance, member).
    owned_at: HashMap<(u32, u32), (usize, usize)>,
    out: Vec<Out>,
    woken: Vec<usize>,
    moved: u64,
}

impl Edges<Edge, Source> for State {
    fn arrive(&self, e: Edge, into: &mut Arrivals) {
        match e {
            Edge::Local(si) => into.take(self.send_mark[si]),
            Edge::Cross(slot) => into.take(self.inbox[slot]),
            Edge::Coll(slot) => match self.coll[slot] {
                Some(a) => into.join(a),
                None => into.missing += 1,
            },
        }
    }

    fn publish(&mut self, src: Source, mark: Mark) {
        match src {
            Source::Local(si, r) => {
                self.send_mark[si] = mark;
                self.woken.push(r);
            }
            Source::Cross(p, j) => {
                let o = &mut self.out[p as usize];
                o.u8(MARK).u32(j);
                o.put(&mark);
            }
            Source::Enter(slot) => {
                let owner = self.member_owner[slot];
                if owner as usize == self.me {
                    self.enter(self.me as u32, slot as u32, mark);
                } else {
                    let o = &mut self.out[owner as usize];
                    o.u8(ENTER).u32(slot as u32);
                    o.put(&mark);
                }
            }
        }
    }
}

impl State {
    /// An enter of an instance owned here, from member slot `slot` of
    /// process `p`.
    fn enter(&mut self, p: u32, slot: u32, mark: Mark) {
        let (ii, k) = self.owned_at[&(p, slot)];
        let o = &mut self.owned[ii];
        if o.marks[k].is_none() && o.sender[k] {
            let view = Senders {
                sender: &o.sender,
                ordered: o.ordered,
            };
            o.came.enter(&view, k as u32);
        }
        o.marks[k] = Some(mark);
        for (i, a) in o.ready() {
            let (p, slot) = self.owned[ii].at[i];
            self.result(p, slot, a, RESULT);
        }
    }

    /// What member `slot` of process `p` gets for its exit.
    fn result(&mut self, p: u32, slot: u32, a: Arrivals, kind: u8) {
        if p as usize == self.me {
            self.coll[slot as usize] = Some(a);
            if let Some(r) = self.member_stream[slot as usize] {
                self.woken.push(r);
            }
        } else {
            let o = &mut self.out[p as usize];
            o.u8(kind).u32(slot);
            o.put(&a);
        }
    }

    /// Applies what came from process `from`.
    fn take(&mut self, from: usize, bytes: &[u8]) {
        let mut i = In::new(bytes);
        while !i.done() {
            self.moved += 1;
            match i.u8() {
                MARK => {
                    let slot = self.in_start[from] + i.u32() as usize;
                    self.inbox[slot] = i.get::<Mark>();
                    self.woken.push(self.inbox_stream[slot]);
                }
                ENTER => {
                    let slot = i.u32();
                    let m = i.get::<Mark>();
                    self.enter(from as u32, slot, m);
                }
                QUERY => {
                    let slot = i.u32();
                    let (ii, k) = self.owned_at[&(from as u32, slot)];
                    let a = self.owned[ii].partial(k);
                    self.result(from as u32, slot, a, PARTIAL);
                }
                _ => {
                    let slot = i.u32() as usize;
                    self.coll[slot] = Some(i.get::<Arrivals>());
                    if let Some(r) = self.member_stream[slot] {
                        self.woken.push(r);
                    }
                }
            }
        }
    }
}

/// The weighted path found over blocks.
pub struct Found {
    /// On process 0: the walk, weighed.
    pub walk: Option<Walk>,
    pub weight: f64,
    pub hops: u64,
    pub dropped_edges: u64,
    /// (rank, function) of the stretches this block logged for its ranks.
    pub names: BTreeSet<(u32, u32)>,
}

/// The weighted critical path over the window; `waits` are this block's.
#[allow(clippy::too_many_arguments)]
pub fn compute<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    bm: &BlockMessages,
    insts: &Insts,
    times: &Times,
    waits: &[Wait],
    window: (u64, u64),
    keep: bool,
) -> Found {
    let trace = &b.trace;
    let me = f.index();
    let procs = f.size();
    let ranks = sum_of(f, trace.ranks.len() as u64) as usize;
    let w = Weigh::new(ranks, computing(f, b, times, window), window);
    let idx: HashMap<u32, usize> = (trace.ranks.iter().enumerate())
        .map(|(i, r)| (r.rank, i))
        .collect();
    let main = |rank: u32| trace.held(rank).threads.first().map(|t| t.index);
    let on_main = |at: EventRef| Some(at.thread) == main(at.rank);
    let mut streams: Vec<Stream<Edge, Source>> = (trace.ranks.iter())
        .map(|r| {
            let waited = waited_by_call(trace, r.rank, waits);
            Stream::new(r.rank, times.calls_at(r.rank, 0), waited, &w)
        })
        .collect();

    let (in_start, inbox_stream) = message_edges(f, b, bm, &idx, &on_main, &mut streams);
    let (owned, owned_at, member_stream) = collective_edges(f, insts, &idx, &on_main, &mut streams);
    for s in &mut streams {
        s.sort();
    }

    let mut st = State {
        me,
        send_mark: vec![Mark::UNSWEPT; bm.m.sends.len()],
        inbox: vec![Mark::UNSWEPT; inbox_stream.len()],
        inbox_stream,
        in_start,
        coll: vec![None; insts.members.len()],
        member_owner: insts.members.iter().map(|x| x.owner).collect(),
        member_stream,
        owned,
        owned_at,
        out: vec![Out::default(); procs],
        woken: (0..streams.len()).collect(),
        moved: 0,
    };
    // Instances whose exits wait for nothing are known at once.
    for ii in 0..st.owned.len() {
        for (i, a) in st.owned[ii].ready() {
            let (p, slot) = st.owned[ii].at[i];
            st.result(p, slot, a, RESULT);
        }
    }
    let mut sweep = Sweep {
        w: &w,
        finished: vec![false; streams.len()],
        blocked: vec![None; streams.len()],
        left: streams.len() as u64,
        streams,
        st,
        force: None,
        dropped: 0,
    };
    rounds::run(f, &mut sweep);
    let Sweep {
        streams, dropped, ..
    } = sweep;
    let dropped = sum_of(f, dropped);

    let end = heaviest_end(f, &streams);
    let limit = 4 * sum_of(f, trace.events()) as usize + 16;
    let (log, hops, names) = walk_back(f, b, times, &w, &streams, &idx, end.map(|e| e.1), limit);

    let walk = weigh(f, &log, &w, keep);
    Found {
        walk,
        weight: end.map_or(0.0, |e| e.0),
        hops,
        dropped_edges: dropped,
        names,
    }
}

/// The message edges of the block's streams, within the block and across
/// (a send's place among those its block sends to the receiver's, in the
/// order both agree on): where each process's inbox slots start, and the
/// stream of each inbox slot.
fn message_edges<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    bm: &BlockMessages,
    idx: &HashMap<u32, usize>,
    on_main: &impl Fn(EventRef) -> bool,
    streams: &mut [Stream<Edge, Source>],
) -> (Vec<usize>, Vec<usize>) {
    let procs = f.size();
    let m = &bm.m;
    for p in &m.matched {
        let (s, at) = (&m.sends[p.send], m.recvs[p.recv].completion);
        if p.send < bm.own_sends && p.recv < bm.own_recvs && on_main(s.call) && on_main(at) {
            let r = idx[&at.rank];
            streams[idx[&s.call.rank]]
                .sources
                .push((s.call.index, Source::Local(p.send, r)));
            streams[r].incoming.push((at.index, Edge::Local(p.send)));
        }
    }
    let crossing = bm.crossing(&b.blocks);
    let mut in_start = vec![0usize; procs + 1];
    for &(p, _) in &crossing.ins {
        in_start[p as usize + 1] += 1;
    }
    for q in 0..procs {
        in_start[q + 1] += in_start[q];
    }
    let mut sent_to = vec![0u32; procs];
    for &(p, k) in &crossing.outs {
        let s = &m.sends[m.matched[k].send];
        if on_main(s.call) {
            streams[idx[&s.call.rank]]
                .sources
                .push((s.call.index, Source::Cross(p, sent_to[p as usize])));
        }
        sent_to[p as usize] += 1;
    }
    // Whether each crossing send is on its rank's main thread.
    let mut from_main = vec![false; crossing.ins.len()];
    let mut slot_of: HashMap<usize, usize> = HashMap::default();
    for (slot, &(_, k)) in crossing.ins.iter().enumerate() {
        slot_of.insert(k, slot);
    }
    crossing.to_receivers(
        f,
        |k, o| {
            o.bool(on_main(m.sends[m.matched[k].send].call));
        },
        |k, i| from_main[slot_of[&k]] = i.bool(),
    );
    let mut inbox_stream = vec![0usize; crossing.ins.len()];
    for (slot, &(_, k)) in crossing.ins.iter().enumerate() {
        let at = m.recvs[m.matched[k].recv].completion;
        inbox_stream[slot] = idx[&at.rank];
        if from_main[slot] && on_main(at) {
            streams[idx[&at.rank]]
                .incoming
                .push((at.index, Edge::Cross(slot)));
        }
    }

    (in_start, inbox_stream)
}

/// The collective edges of the block's streams: each member's
/// main-thread enter and exit to the owner, which says which exits wait
/// for the collective. The owned instances, where each owned member is
/// (process, slot) → (instance, member), and the stream of each member's
/// exit that waits.
#[allow(clippy::type_complexity)]
fn collective_edges<F: Fabric + ?Sized>(
    f: &F,
    insts: &Insts,
    idx: &HashMap<u32, usize>,
    on_main: &impl Fn(EventRef) -> bool,
    streams: &mut [Stream<Edge, Source>],
) -> (
    Vec<Owned>,
    HashMap<(u32, u32), (usize, usize)>,
    Vec<Option<usize>>,
) {
    let procs = f.size();
    let mut owned: Vec<Owned> = insts
        .owned
        .iter()
        .map(|o| {
            let n = o.inst.members.len();
            Owned {
                sender: vec![false; n],
                waits: vec![false; n],
                at: vec![(0, 0); n],
                ordered: o.inst.ordered(),
                marks: vec![None; n],
                came: Readiness::new(&Senders {
                    sender: &[],
                    ordered: false,
                }),
                next: 0,
                before: Arrivals::default(),
            }
        })
        .collect();
    let mut exit_main = owned
        .iter()
        .map(|o| vec![false; o.sender.len()])
        .collect::<Vec<_>>();
    insts.to_owners(
        f,
        |slot, o| {
            let c = &insts.members[slot].calls;
            o.bool(on_main(c.enter)).bool(c.exit.is_some_and(&on_main));
        },
        |ii, k, i| {
            owned[ii].sender[k as usize] = i.bool() && insts.owned[ii].inst.may_send(k);
            exit_main[ii][k as usize] = i.bool();
        },
    );
    let mut owned_at: HashMap<(u32, u32), (usize, usize)> = HashMap::default();
    let mut answers = vec![Out::default(); procs];
    for (ii, ((o, own), exit_main)) in insts
        .owned
        .iter()
        .zip(&mut owned)
        .zip(&exit_main)
        .enumerate()
    {
        let inst = &o.inst;
        let senders = own.sender.iter().filter(|&&s| s).count();
        let mut before = 0;
        for (i, &exit_main) in exit_main.iter().enumerate() {
            let others = if own.ordered {
                before
            } else {
                senders - usize::from(own.sender[i])
            };
            own.waits[i] = exit_main && inst.may_recv(i as u32) && others > 0;
            before += usize::from(own.sender[i]);
        }
        own.came = Readiness::new(&Senders {
            sender: &own.sender,
            ordered: own.ordered,
        });
        for &(k, p, slot) in &o.from {
            own.at[k as usize] = (p, slot);
            owned_at.insert((p, slot), (ii, k as usize));
            answers[p as usize].u32(slot).bool(own.waits[k as usize]);
        }
    }
    let got = f.exchange(answers.into_iter().map(|o| o.0).collect());
    let mut member_stream = vec![None; insts.members.len()];
    for bytes in &got {
        let mut i = In::new(bytes);
        while !i.done() {
            let (slot, waits) = (i.u32() as usize, i.bool());
            let c = &insts.members[slot].calls;
            if on_main(c.enter) {
                streams[idx[&c.enter.rank]]
                    .sources
                    .push((c.enter.index, Source::Enter(slot)));
            }
            if let (true, Some(x)) = (waits, c.exit) {
                member_stream[slot] = Some(idx[&x.rank]);
                streams[idx[&x.rank]]
                    .incoming
                    .push((x.index, Edge::Coll(slot)));
            }
        }
    }
    (owned, owned_at, member_stream)
}

/// The heaviest end over every block (of equals the last rank): its
/// weight and rank.
fn heaviest_end<F: Fabric + ?Sized>(f: &F, streams: &[Stream<Edge, Source>]) -> Option<(f64, u32)> {
    let mine = (0..streams.len()).max_by(|&a, &b| streams[a].best.total_cmp(&streams[b].best));
    let mut o = Out::default();
    if let Some(r) = mine {
        o.f64(streams[r].best).u32(streams[r].rank);
    }
    let mut end: Option<(f64, u32)> = None;
    for bytes in f.all_gather(o.0) {
        let mut i = In::new(&bytes);
        if i.done() {
            continue;
        }
        let (best, rank) = (i.f64(), i.u32());
        if end.is_none_or(|e| best.total_cmp(&e.0).then(rank.cmp(&e.1)).is_ge()) {
            end = Some((best, rank));
        }
    }
    end
}

/// Process 0 weighs the stretches every block logged, in the walk's
/// order (`None` elsewhere).
fn weigh<F: Fabric + ?Sized>(f: &F, log: &[Logged], w: &Weigh, keep: bool) -> Option<Walk> {
    let mut o = Out::default();
    for &(seq, rank, activity, a, b, weighed) in log {
        o.u64(seq)
            .u32(rank)
            .u32(activity)
            .u64(a)
            .u64(b)
            .u64(weighed);
    }
    let got = f.gather(o.0);
    (f.index() == 0).then(|| {
        let mut all: Vec<(u64, u32, u32, u64, u64, u64)> = Vec::new();
        for bytes in &got {
            let mut i = In::new(bytes);
            while !i.done() {
                all.push((i.u64(), i.u32(), i.u32(), i.u64(), i.u64(), i.u64()));
            }
        }
        all.sort_unstable_by_key(|e| e.0);
        let mut walk = if keep {
            Walk::keeping(w.from, w.to)
        } else {
            Walk::new(w.from, w.to)
        };
        for (_, rank, activity, a, b, weighed) in all {
            walk.push_weighted(rank, activity, a, b, w.of(weighed, b));
        }
        walk.flush();
        walk
    })
}

/// Picks the blocked exit that is earliest over all blocks (ties to the
/// lowest rank); its block asks the owners of its collectives what came so
/// far. Returns the stream to force, on its block.
/// The forward sweep over blocks, as [`rounds::run`] drives it.
struct Sweep<'w, 'a> {
    w: &'w Weigh,
    streams: Vec<Stream<'a, Edge, Source>>,
    st: State,
    finished: Vec<bool>,
    /// Per stream: the time of the exit it is blocked at.
    blocked: Vec<Option<u64>>,
    left: u64,
    /// The stream that goes on past its blocked exit in the next round.
    force: Option<usize>,
    dropped: u64,
}

impl Round for Sweep<'_, '_> {
    fn advance(&mut self) -> u64 {
        let mut swept = 0u64;
        while let Some(r) = self.st.woken.pop() {
            if self.finished[r] {
                continue;
            }
            let now = self.force == Some(r);
            if now {
                self.force = None;
            }
            let (went, stop) =
                self.streams[r].advance(self.w, &mut self.st, now, &mut self.dropped);
            swept += u64::from(went);
            self.blocked[r] = match stop {
                Stop::End => {
                    self.finished[r] = true;
                    self.left -= 1;
                    None
                }
                Stop::Blocked(t) => Some(t),
            };
        }
        swept
    }

    fn outgoing(&mut self) -> Vec<Out> {
        let procs = self.st.out.len();
        std::mem::replace(&mut self.st.out, vec![Out::default(); procs])
    }

    fn take(&mut self, from: usize, bytes: &[u8]) {
        self.st.take(from, bytes);
    }

    fn left(&self) -> u64 {
        self.left
    }

    fn moved(&mut self) -> u64 {
        std::mem::take(&mut self.st.moved) + rounds::pending(&self.st.out)
    }

    /// Stuck: the earliest blocked exit over all blocks goes.
    fn force<F: Fabric + ?Sized>(&mut self, f: &F) {
        self.force = forced(f, &mut self.st, &self.streams, &self.blocked);
        if let Some(r) = self.force {
            self.st.woken.push(r);
        }
    }
}

fn forced<F: Fabric + ?Sized>(
    f: &F,
    st: &mut State,
    streams: &[Stream<Edge, Source>],
    blocked: &[Option<u64>],
) -> Option<usize> {
    let mine = (0..streams.len())
        .filter_map(|r| blocked[r].map(|t| (t, streams[r].rank, r)))
        .min();
    let mut o = Out::default();
    if let Some((t, rank, _)) = mine {
        o.u64(t).u32(rank);
    }
    let best = f
        .all_gather(o.0)
        .iter()
        .enumerate()
        .filter(|(_, b)| !b.is_empty())
        .map(|(p, b)| {
            let mut i = In::new(b);
            ((i.u64(), i.u32()), p)
        })
        .min();
    let here = best.is_some_and(|(_, p)| p == f.index());
    let r = mine.filter(|_| here).map(|x| x.2);
    // The exit's collectives: what their senders brought so far.
    let mut ask = vec![Out::default(); f.size()];
    if let Some(r) = r {
        let s = &streams[r];
        let pos = s.blocked_exit().expect("blocked at an exit");
        for &(_, e) in s.incoming.iter().filter(|x| x.0 == pos) {
            if let Edge::Coll(slot) = e {
                if st.coll[slot].is_none() {
                    ask[st.member_owner[slot] as usize]
                        .u8(QUERY)
                        .u32(slot as u32);
                }
            }
        }
    }
    for round in 0..2 {
        let out = if round == 0 {
            std::mem::take(&mut ask)
        } else {
            std::mem::replace(&mut st.out, vec![Out::default(); f.size()])
        };
        let got = f.exchange(out.into_iter().map(|o| o.0).collect());
        for (from, bytes) in got.iter().enumerate() {
            st.take(from, bytes);
        }
    }
    r
}

/// A stretch the walk passed: (number, rank, activity, from, to, where
/// its weighed part starts).
type Logged = (u64, u32, u32, u64, u64, u64);

/// The walk back from `end`'s last call as a token: this block's log,
/// the hops, and the (rank, function) pairs of its ranks it passed.
#[allow(clippy::too_many_arguments)]
fn walk_back<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    times: &Times,
    w: &Weigh,
    streams: &[Stream<Edge, Source>],
    idx: &HashMap<u32, usize>,
    end: Option<u32>,
    limit: usize,
) -> (Vec<Logged>, u64, BTreeSet<(u32, u32)>) {
    let trace = &b.trace;
    let me = f.index();
    let mut log: Vec<Logged> = Vec::new();
    let start = end
        .filter(|&r| b.blocks.owner(r) == me)
        .and_then(|r| Back::start(trace, times, w, r));
    // Every block learns whether the walk starts at all.
    let mut v = [u64::from(start.is_some())];
    f.max(&mut v);
    let token = start.map(|c| (c, None::<Jump>, 0u64));
    let mut hop_names: Vec<(u32, u32)> = Vec::new();
    let hops = rounds::pass_token(f, token, v[0] == 0, |(mut c, mut hop, mut seq)| {
        let mut push = |rank: u32, activity: u32, a: u64, b: u64, weighed: u64| {
            if b > a {
                log.push((seq, rank, activity, a, b, weighed.clamp(a, b)));
                seq += 1;
            }
        };
        loop {
            if let Some(j) = hop {
                let to = b.blocks.owner(j.rank);
                if to != me {
                    return Went::On(to, (c, hop, seq));
                }
                hop = None;
                c.land(trace, times, w, j, &mut push);
            }
            let s = &streams[idx[&c.at.rank]];
            match c.step(trace, times, w, s, limit, &mut push) {
                BackStep::Go => {}
                BackStep::Done => return Went::Ended(c.hops),
                BackStep::Hop(j) => {
                    // The receiving call's function, named here.
                    hop_names.push((c.at.rank, j.activity));
                    hop = Some(j);
                }
            }
        }
    });
    let names = (log.iter())
        .map(|e| (e.1, e.2))
        .chain(hop_names)
        .filter(|&(rank, activity)| activity != COMPUTING && idx.contains_key(&rank))
        .collect();
    (log, hops, names)
}
