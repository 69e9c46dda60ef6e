//! The event graph sync works on.
//!
//! ```text
//!  location = one application thread of one rank
//!  stamp    = one timestamp of a record: 2·record + 0 (start), 2·record + 1 (end)
//!             (a record with one time gives both stamps that time)
//!  node     = (location, k): the k-th stamp of the location in time order
//!
//!  rank 0 / thread 0   ●──●──●────●──●──────●──●
//!                          ╲ send        ▲ exit (logical receive)
//!  rank 1 / thread 0   ●────●──●──●──────●──●
//!                             recv       ╲ enter (logical send)
//! ```
//!
//! Edges run from a send to its receive: a point-to-point message goes from
//! the start of the call that sent it to the end of the call that completed
//! its receive (Becker et al. §3.1: "the send event always marks the
//! beginning of a send operation, whereas a receive event marks the end of
//! a receive operation"). A collective instance is a set of logical
//! messages from enters to exits (§4.1):
//!
//! | shape | a member's exit depends on the enter of |
//! |---|---|
//! | 1-to-N (Bcast, Scatter) | the root, if the member received data |
//! | N-to-1 (Reduce, Gather) | every member that sent data (root's exit only) |
//! | N-to-N (Allreduce, Barrier, ...) | every member |
//! | Scan, Exscan | every member of lower rank |
//!
//! Scan's rank i depends on ranks 0..=i, Exscan's on 0..i (the paper's
//! index order is reversed: a prefix result can only depend on lower
//! ranks). A member's own enter precedes its exit on its own location, so
//! the self pair adds nothing and both kinds add the same edges.
//!
//! Stamps of a location are ordered by recorded time (records are written
//! when a call ends, so record order is not always time order), and every
//! sync step keeps that order.

use std::borrow::Cow;

use rustc_hash::FxHashMap as HashMap;

use pmtrace_trace::Events;

use crate::extremes::{Mu, Place};
use pmtrace_matching::collective::{self, Instance, Part};
use pmtrace_matching::matching::Messages;
use pmtrace_trace::read::{EventRef, Thread, Trace};
use rayon::prelude::*;

/// Stamp `k` (in time order) of location `loc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    pub loc: u32,
    pub k: u32,
}

/// One application thread of one rank.
#[derive(Debug, Clone)]
pub struct Loc {
    pub rank: u32,
    /// The thread's index (chunk headers, operation ids).
    pub thread: u32,
    /// Position of the thread in `Rank::threads`.
    pub slot: usize,
    /// Locations of one clock group read the same physical clock.
    pub group: u32,
    pub host: u32,
}

/// What a receive-like stamp waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dep {
    /// The send of a point-to-point message.
    Msg(Node),
    /// The enters this member's exit depends on.
    Coll { inst: u32, member: u32 },
}

/// Who waits for a send-like stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Out {
    Msg(Node),
    /// The exits of the members that depend on this member's enter.
    Enter {
        inst: u32,
        member: u32,
    },
}

/// One rank's part in a collective instance.
#[derive(Debug, Clone)]
pub struct Member {
    pub loc: u32,
    pub enter: u32,
    pub exit: Option<u32>,
    pub sent: u64,
    pub recvd: u64,
}

impl Part for Member {
    fn sent(&self) -> u64 {
        self.sent
    }
    fn recvd(&self) -> u64 {
        self.recvd
    }
}

/// One collective call, across its communicator, on the graph's nodes.
pub type Inst = Instance<Member>;

/// Times in node order: the recorded ones, a step's, or any function of them.
pub trait Times {
    /// The time of node `k` of location `loc`.
    fn at(&self, loc: u32, k: u32) -> u64;

    /// The times of nodes `k0..` of `loc`, as many as `out` holds (which
    /// the location must have): what `at` gives, faster where a type can.
    fn fill(&self, loc: u32, k0: u32, out: &mut [u64]) {
        for (j, o) in out.iter_mut().enumerate() {
            *o = self.at(loc, k0 + j as u32);
        }
    }
}

impl Times for [Vec<u64>] {
    #[inline]
    fn at(&self, loc: u32, k: u32) -> u64 {
        self[loc as usize][k as usize]
    }

    fn fill(&self, loc: u32, k0: u32, out: &mut [u64]) {
        out.copy_from_slice(&self[loc as usize][k0 as usize..][..out.len()]);
    }
}

impl Times for Vec<Vec<u64>> {
    #[inline]
    fn at(&self, loc: u32, k: u32) -> u64 {
        self[loc as usize][k as usize]
    }

    fn fill(&self, loc: u32, k0: u32, out: &mut [u64]) {
        self.as_slice().fill(loc, k0, out)
    }
}

/// Times read in order along each location, a block at a time through
/// [`Times::fill`] (a location's nodes are read in order by the passes
/// that read every node).
pub struct Ahead<'a, T: Times + ?Sized> {
    times: &'a T,
    /// Per location: the first node of its block, and the block.
    blocks: Vec<(u32, Vec<u64>)>,
    lens: Vec<u32>,
}

/// Nodes per block of [`Ahead`].
const AHEAD: u32 = 2048;

impl<'a, T: Times + ?Sized> Ahead<'a, T> {
    pub fn new(g: &Graph, times: &'a T) -> Ahead<'a, T> {
        Ahead {
            times,
            blocks: vec![(0, Vec::new()); g.locs.len()],
            lens: (0..g.locs.len() as u32).map(|l| g.len(l) as u32).collect(),
        }
    }

    /// The time of node `k` of `loc`.
    #[inline]
    pub fn get(&mut self, loc: u32, k: u32) -> u64 {
        let (first, block) = &mut self.blocks[loc as usize];
        match k.checked_sub(*first) {
            Some(j) if (j as usize) < block.len() => block[j as usize],
            _ => {
                let n = AHEAD.min(self.lens[loc as usize] - k);
                block.resize(n as usize, 0);
                self.times.fill(loc, k, block);
                *first = k;
                block[0]
            }
        }
    }
}

/// The recorded times of a graph's nodes ([`Graph::recorded`]).
pub struct Recorded<'a, 't>(&'a Graph<'t>);

impl Times for Recorded<'_, '_> {
    #[inline]
    fn at(&self, loc: u32, k: u32) -> u64 {
        self.0.raw(loc, k)
    }

    fn fill(&self, loc: u32, k0: u32, out: &mut [u64]) {
        self.0.raw_fill(loc, k0, out)
    }
}

/// Items of some nodes of one location, in compressed rows: a bit per node
/// says whether it has any, and the bits set before it (a count kept per
/// word of 64, plus the word's own below it) number its row.
#[derive(Debug, Clone, Default)]
struct Sparse<T> {
    has: Vec<u64>,
    /// Nodes with items in the words before each word.
    before: Vec<u32>,
    /// Start of each row's items; one more entry than rows.
    at: Vec<u32>,
    items: Vec<T>,
}

impl<T> Sparse<T> {
    /// From items sorted by node.
    fn new(len: usize, sorted: impl Iterator<Item = (u32, T)>) -> Sparse<T> {
        let mut s = Sparse {
            has: vec![0; len.div_ceil(64)],
            before: Vec::new(),
            at: vec![0],
            items: Vec::new(),
        };
        let mut last = None;
        for (k, item) in sorted {
            if last != Some(k) {
                if last.is_some() {
                    s.at.push(s.items.len() as u32);
                }
                last = Some(k);
                s.has[k as usize / 64] |= 1u64 << (k % 64);
            }
            s.items.push(item);
        }
        if last.is_some() {
            s.at.push(s.items.len() as u32);
        }
        s.before = s
            .has
            .iter()
            .scan(0u32, |n, w| {
                let b = *n;
                *n += w.count_ones();
                Some(b)
            })
            .collect();
        s
    }

    #[inline]
    fn get(&self, k: u32) -> &[T] {
        let (w, bit) = (k as usize / 64, 1u64 << (k % 64));
        let word = self.has[w];
        if word & bit == 0 {
            return &[];
        }
        let i = (self.before[w] + (word & (bit - 1)).count_ones()) as usize;
        &self.items[self.at[i] as usize..self.at[i + 1] as usize]
    }
}

/// Locations, their stamps in time order, and the edges between them. The
/// recorded times are read from the trace's records, not copied.
#[derive(Debug, Clone)]
pub struct Graph<'t> {
    /// World rank of the trace's first rank (a block's, in parallel).
    pub first: u32,
    pub locs: Vec<Loc>,
    /// Each location's records.
    records: Vec<&'t Events>,
    /// Stamp position (2·record + end) of each node, for a location whose
    /// time order is not its record order; `None`: node k is stamp k.
    pos: Vec<Option<Vec<u32>>>,
    deps: Vec<Sparse<Dep>>,
    outs: Vec<Sparse<Out>>,
    pub insts: Vec<Inst>,
    /// Matched point-to-point messages: (send, receive).
    pub msgs: Vec<(Node, Node)>,
    /// Minimum latency between clock groups on one host, and across hosts.
    pub mu_intra: u64,
    pub mu_inter: u64,
    /// By world rank less `first`: (thread index, location) of each thread.
    rank_locs: Vec<Vec<(u32, u32)>>,
    /// Per location out of record order: each stamp position's node.
    back: Vec<Option<Vec<u32>>>,
}

/// A thread's stamps in time order: `None` if that is their record order
/// (the common case), else each node's stamp position and each stamp
/// position's node.
fn thread_order(th: &Thread) -> Option<(Vec<u32>, Vec<u32>)> {
    let ev = &th.records;
    let mut last = 0;
    let in_order = (0..ev.len()).all(|i| {
        let (a, b) = ev.stamps(i);
        let ok = last <= a && a <= b;
        last = b;
        ok
    });
    if in_order {
        return None;
    }
    let mut st: Vec<(u64, u32)> = Vec::with_capacity(ev.len() * 2);
    for i in 0..ev.len() {
        let (a, b) = ev.stamps(i);
        st.push((a, 2 * i as u32));
        st.push((b, 2 * i as u32 + 1));
    }
    st.sort_unstable();
    let mut back = vec![0u32; st.len()];
    for (k, &(_, p)) in st.iter().enumerate() {
        back[p as usize] = k as u32;
    }
    Some((st.iter().map(|s| s.1).collect(), back))
}

impl<'t> Graph<'t> {
    /// Builds the graph of `trace` with the messages of `m`; `mu_intra` and
    /// `mu_inter` are the minimum latencies between clock groups.
    pub fn build(trace: &'t Trace, m: &Messages, mu_intra: u64, mu_inter: u64) -> Graph<'t> {
        Graph::whole(trace, Cow::Borrowed(m), mu_intra, mu_inter)
    }

    /// [`Graph::build`], the messages going once their edges are taken
    /// (before the collectives' and the tables of edges are made).
    pub fn build_given(trace: &'t Trace, m: Messages, mu_intra: u64, mu_inter: u64) -> Graph<'t> {
        Graph::whole(trace, Cow::Owned(m), mu_intra, mu_inter)
    }

    fn whole(trace: &'t Trace, m: Cow<Messages>, mu_intra: u64, mu_inter: u64) -> Graph<'t> {
        let (groups, hosts) = clock_groups(trace);
        Graph::build_with(trace, m, mu_intra, mu_inter, (&groups, &hosts), true)
    }

    /// The graph of one block of a trace: its locations, the messages
    /// between them, and no collective instance (their members span
    /// blocks). `groups` and `hosts` number the block's ranks' clock groups
    /// and hosts across the whole trace (by world rank less `trace.first`).
    pub fn build_block(trace: &'t Trace, m: &Messages, groups: &[u32], hosts: &[u32]) -> Graph<'t> {
        Graph::build_with(trace, Cow::Borrowed(m), 0, 0, (groups, hosts), false)
    }

    fn build_with(
        trace: &'t Trace,
        m: Cow<Messages>,
        mu_intra: u64,
        mu_inter: u64,
        (groups, hosts): (&[u32], &[u32]),
        with_collectives: bool,
    ) -> Graph<'t> {
        let mut g = Graph {
            first: trace.first,
            rank_locs: Vec::new(),
            back: Vec::new(),
            locs: Vec::new(),
            records: Vec::new(),
            pos: Vec::new(),
            deps: Vec::new(),
            outs: Vec::new(),
            insts: Vec::new(),
            msgs: Vec::new(),
            mu_intra,
            mu_inter,
        };
        let mut inv: Vec<Option<Vec<u32>>> = Vec::new();
        let mut rank_locs: Vec<Vec<(u32, u32)>> = Vec::new();
        let first = trace.first;
        // Each thread's stamps in time order, threads side by side.
        let threads: Vec<&Thread> = trace.ranks.iter().flat_map(|r| &r.threads).collect();
        let mut ordered = threads
            .par_iter()
            .map(|th| thread_order(th))
            .collect::<Vec<_>>()
            .into_iter();
        for rank in &trace.ranks {
            let mut mine = Vec::new();
            for (slot, th) in rank.threads.iter().enumerate() {
                let loc = g.locs.len() as u32;
                mine.push((th.index, loc));
                g.locs.push(Loc {
                    rank: rank.rank,
                    thread: th.index,
                    slot,
                    group: groups[(rank.rank - first) as usize],
                    host: hosts[(rank.rank - first) as usize],
                });
                g.records.push(&th.records);
                let (pos, back) = ordered.next().flatten().unzip();
                g.pos.push(pos);
                inv.push(back);
            }
            rank_locs.push(mine);
        }
        g.rank_locs = rank_locs;
        g.back = inv;
        let node = |at: EventRef, end: bool| g.node_of(at, end);
        // Messages side by side, in the order of `m.matched`.
        let msgs: Vec<(Node, Node)> = m
            .matched
            .par_iter()
            .filter_map(|msg| {
                let (s, r) = (&m.sends[msg.send], &m.recvs[msg.recv]);
                Some((node(s.call, false)?, node(r.completion, true)?))
            })
            .collect();
        drop(m);
        let mut deps: Vec<(Node, Dep)> = msgs
            .par_iter()
            .map(|&(sn, rn)| (rn, Dep::Msg(sn)))
            .collect();
        let mut outs: Vec<(Node, Out)> = msgs
            .par_iter()
            .map(|&(sn, rn)| (sn, Out::Msg(rn)))
            .collect();
        let insts = if with_collectives {
            collectives(trace, &node)
        } else {
            Vec::new()
        };
        for (ii, inst) in insts.iter().enumerate() {
            let (receives, is_sender) = inst.ends();
            for (i, mem) in inst.members.iter().enumerate() {
                let Some(mem) = mem else { continue };
                if let (true, Some(exit)) = (receives[i], mem.exit) {
                    let n = Node {
                        loc: mem.loc,
                        k: exit,
                    };
                    deps.push((
                        n,
                        Dep::Coll {
                            inst: ii as u32,
                            member: i as u32,
                        },
                    ));
                }
            }
            for (k, mem) in inst.members.iter().enumerate() {
                if let (true, Some(mem)) = (is_sender[k], mem) {
                    let n = Node {
                        loc: mem.loc,
                        k: mem.enter,
                    };
                    outs.push((
                        n,
                        Out::Enter {
                            inst: ii as u32,
                            member: k as u32,
                        },
                    ));
                }
            }
        }
        g.insts = insts;
        g.msgs = msgs;
        g.deps = csr(&g, deps);
        g.outs = csr(&g, outs);
        g
    }

    /// The node of a record's start (`end` false) or end, if the graph
    /// holds its thread.
    pub fn node_of(&self, at: EventRef, end: bool) -> Option<Node> {
        let locs = self
            .rank_locs
            .get(at.rank.checked_sub(self.first)? as usize)?;
        let &(_, loc) = locs.iter().find(|(t, _)| *t == at.thread)?;
        let p = 2 * at.pos() + usize::from(end);
        let k = match &self.back[loc as usize] {
            Some(back) => *back.get(p)?,
            None if p < 2 * self.records[loc as usize].len() => p as u32,
            None => return None,
        };
        Some(Node { loc, k })
    }

    /// Number of nodes (stamps) of location `loc`.
    #[inline]
    pub fn len(&self, loc: u32) -> usize {
        2 * self.records[loc as usize].len()
    }

    /// The stamp position (2·record + end) of node `k` of `loc`.
    #[inline]
    pub fn pos(&self, loc: u32, k: u32) -> u32 {
        match &self.pos[loc as usize] {
            Some(pos) => pos[k as usize],
            None => k,
        }
    }

    /// The recorded time of node `k` of `loc`.
    #[inline]
    pub fn raw(&self, loc: u32, k: u32) -> u64 {
        self.records[loc as usize].stamp(self.pos(loc, k) as usize)
    }

    /// The recorded times of nodes `k0..` of `loc`, as many as `out` holds.
    pub fn raw_fill(&self, loc: u32, k0: u32, out: &mut [u64]) {
        let records = self.records[loc as usize];
        match &self.pos[loc as usize] {
            Some(pos) => {
                for (o, &p) in out.iter_mut().zip(&pos[k0 as usize..]) {
                    *o = records.stamp(p as usize);
                }
            }
            None => {
                for (k, o) in (k0 as usize..).zip(out.iter_mut()) {
                    *o = records.stamp(k);
                }
            }
        }
    }

    /// The recorded times, as [`Times`].
    pub fn recorded(&self) -> Recorded<'_, 't> {
        Recorded(self)
    }

    /// Number of clock groups.
    pub fn groups(&self) -> usize {
        self.locs
            .iter()
            .map(|l| l.group as usize + 1)
            .max()
            .unwrap_or(0)
    }

    /// Total number of stamps.
    pub fn stamps(&self) -> usize {
        self.records.iter().map(|r| 2 * r.len()).sum()
    }

    #[inline]
    pub fn deps(&self, n: Node) -> &[Dep] {
        self.deps[n.loc as usize].get(n.k)
    }

    #[inline]
    pub fn outs(&self, n: Node) -> &[Out] {
        self.outs[n.loc as usize].get(n.k)
    }

    /// Minimum latency of a message from location `a` to location `b`:
    /// none within one clock group (one clock cannot reverse a message).
    pub fn mu(&self, a: u32, b: u32) -> u64 {
        self.mus().between(self.place(a), self.place(b))
    }

    /// The minimum latencies across clock groups.
    pub fn mus(&self) -> Mu {
        Mu {
            intra: self.mu_intra,
            inter: self.mu_inter,
        }
    }

    /// Location `loc`'s clock group and host.
    pub fn place(&self, loc: u32) -> Place {
        let l = &self.locs[loc as usize];
        Place {
            group: l.group,
            host: l.host,
        }
    }

    /// The time a dependency asks of its receive, in times `t`: the send's
    /// time plus μ (the latest over a collective's senders).
    pub fn dep_time(&self, t: &[Vec<u64>], recv: Node, dep: Dep) -> u64 {
        match dep {
            Dep::Msg(s) => t[s.loc as usize][s.k as usize] + self.mu(s.loc, recv.loc),
            Dep::Coll { inst, member } => {
                let inst = &self.insts[inst as usize];
                inst.senders(member)
                    .filter_map(|k| inst.members[k as usize].as_ref())
                    .map(|m| t[m.loc as usize][m.enter as usize] + self.mu(m.loc, recv.loc))
                    .max()
                    .unwrap_or(0)
            }
        }
    }

    /// How far send-like stamp `n` may move later in times `t` without
    /// passing any of its receives minus μ.
    pub fn slack(&self, t: &[Vec<u64>], n: Node) -> u64 {
        let here = t[n.loc as usize][n.k as usize];
        let mut room = u64::MAX;
        for &out in self.outs(n) {
            let limit = match out {
                Out::Msg(r) => {
                    t[r.loc as usize][r.k as usize].saturating_sub(self.mu(n.loc, r.loc))
                }
                Out::Enter { inst, member } => {
                    let inst = &self.insts[inst as usize];
                    inst.members
                        .iter()
                        .enumerate()
                        .filter_map(|(i, m)| {
                            let m = m.as_ref()?;
                            let exit = m.exit?;
                            inst.sends(member, i as u32).then(|| {
                                t[m.loc as usize][exit as usize]
                                    .saturating_sub(self.mu(n.loc, m.loc))
                            })
                        })
                        .min()
                        .unwrap_or(u64::MAX)
                }
            };
            room = room.min(limit.saturating_sub(here));
        }
        room
    }

    /// Maps times in node order back to stamp positions, per location
    /// (a location in record order keeps its vector).
    pub fn by_position(&self, t: Vec<Vec<u64>>) -> Vec<Vec<u64>> {
        t.into_iter()
            .zip(&self.pos)
            .map(|(ts, pos)| match pos {
                None => ts,
                Some(ps) => {
                    let mut out = vec![0; ts.len()];
                    for (&v, &p) in ts.iter().zip(ps) {
                        out[p as usize] = v;
                    }
                    out
                }
            })
            .collect()
    }
}

/// Items by node, in compressed rows per location.
fn csr<T: Copy + Send + Sync>(g: &Graph, mut items: Vec<(Node, T)>) -> Vec<Sparse<T>> {
    // Stable: a node's items keep the order they were made in.
    items.par_sort_by_key(|(n, _)| *n);
    (0..g.locs.len() as u32)
        .into_par_iter()
        .map(|loc| {
            let a = items.partition_point(|(n, _)| n.loc < loc);
            let b = a + items[a..].partition_point(|(n, _)| n.loc == loc);
            Sparse::new(g.len(loc), items[a..b].iter().map(|&(n, item)| (n.k, item)))
        })
        .collect()
}

/// Each rank's clock group and host, as small integers. Ranks share a
/// clock group when the offset measurement said they read one clock (one
/// leader measured them all); without offsets, when they share a host and
/// ran without a simulated clock.
fn clock_groups(trace: &Trace) -> (Vec<u32>, Vec<u32>) {
    let mut host_ids: HashMap<&str, u32> = HashMap::default();
    let mut group_ids: HashMap<(u32, u64), u32> = HashMap::default();
    let mut groups = Vec::new();
    let mut hosts = Vec::new();
    for r in &trace.ranks {
        let n = host_ids.len() as u32;
        let host = *host_ids.entry(r.header.hostname.as_str()).or_insert(n);
        let key = match (&r.header.clock_sim, &r.header.offset_init) {
            (Some(_), _) => (u32::MAX, u64::from(r.rank)),
            (None, Some(o)) => (0, u64::from(o.measured_by)),
            (None, None) => (1, u64::from(host)),
        };
        let n = group_ids.len() as u32;
        groups.push(*group_ids.entry(key).or_insert(n));
        hosts.push(host);
    }
    (groups, hosts)
}

/// Every collective instance, its members' calls mapped to nodes.
fn collectives(trace: &Trace, node: &(dyn Fn(EventRef, bool) -> Option<Node> + Sync)) -> Vec<Inst> {
    collective::instances(trace)
        .par_iter()
        .map(|inst| {
            inst.map(|m| {
                let enter = node(m.enter, false)?;
                let exit = m.exit.and_then(|x| node(x, true));
                Some(Member {
                    loc: enter.loc,
                    enter: enter.k,
                    // A nonblocking collective completed on another thread
                    // has no exit on this location: leave it out.
                    exit: exit.filter(|x| x.loc == enter.loc).map(|x| x.k),
                    sent: m.sent,
                    recvd: m.recvd,
                })
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::Sparse;

    #[test]
    fn a_sparse_row_is_found_by_its_node_in_every_word() {
        // Nodes 0, 5 (two items), 63, 64, 130 and 199 of 200.
        let items = [
            (0, 'a'),
            (5, 'b'),
            (5, 'c'),
            (63, 'd'),
            (64, 'e'),
            (130, 'f'),
            (199, 'g'),
        ];
        let s = Sparse::new(200, items.iter().copied());
        assert_eq!(s.get(0), &['a']);
        assert_eq!(s.get(5), &['b', 'c']);
        assert_eq!(s.get(63), &['d']);
        assert_eq!(s.get(64), &['e']);
        assert_eq!(s.get(130), &['f']);
        assert_eq!(s.get(199), &['g']);
        let with: Vec<u32> = (0..200).filter(|&k| !s.get(k).is_empty()).collect();
        assert_eq!(with, [0, 5, 63, 64, 130, 199]);
        let empty = Sparse::<char>::new(70, std::iter::empty());
        assert!((0..70).all(|k| empty.get(k).is_empty()));
    }
}
