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

use rustc_hash::FxHashMap as HashMap;

use pmtrace_trace::Record;

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

/// Locations, their stamps in time order, and the edges between them.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub locs: Vec<Loc>,
    /// Recorded time of each stamp, per location, in time order.
    pub raw: Vec<Vec<u64>>,
    /// Stamp position (2·record + end) of each node, per location.
    pub pos: Vec<Vec<u32>>,
    dep_at: Vec<Vec<u32>>,
    deps: Vec<Vec<Dep>>,
    out_at: Vec<Vec<u32>>,
    outs: Vec<Vec<Out>>,
    pub insts: Vec<Inst>,
    /// Matched point-to-point messages: (send, receive).
    pub msgs: Vec<(Node, Node)>,
    /// Minimum latency between clock groups on one host, and across hosts.
    pub mu_intra: u64,
    pub mu_inter: u64,
}

/// A thread's enter and exit stamps in time order: the times, the
/// positions (2 × record + exit), and for each position its rank in the
/// order.
fn thread_order(th: &Thread) -> (Vec<u64>, Vec<u32>, Vec<u32>) {
    let mut st: Vec<(u64, u32)> = Vec::with_capacity(th.records.len() * 2);
    for i in 0..th.records.len() {
        let (a, b) = th.records.stamps(i);
        st.push((a, 2 * i as u32));
        st.push((b, 2 * i as u32 + 1));
    }
    st.sort_unstable();
    let mut back = vec![0u32; st.len()];
    for (k, &(_, p)) in st.iter().enumerate() {
        back[p as usize] = k as u32;
    }
    (
        st.iter().map(|s| s.0).collect(),
        st.iter().map(|s| s.1).collect(),
        back,
    )
}

/// The two timestamps of a record.
pub fn stamps_of(rec: &Record) -> (u64, u64) {
    match rec {
        Record::Call(c) => (c.t_start, c.t_end),
        Record::BufferWait { t_start, t_end } => (*t_start, *t_end),
        Record::DefComm { t, .. } | Record::DefThread { t, .. } => (*t, *t),
    }
}

impl Graph {
    /// Builds the graph of `trace` with the messages of `m`; `mu_intra` and
    /// `mu_inter` are the minimum latencies between clock groups.
    pub fn build(trace: &Trace, m: &Messages, mu_intra: u64, mu_inter: u64) -> Graph {
        let (groups, hosts) = clock_groups(trace);
        let mut g = Graph {
            mu_intra,
            mu_inter,
            ..Graph::default()
        };
        let mut inv: Vec<Vec<u32>> = Vec::new();
        let mut rank_locs: Vec<Vec<(u32, u32)>> = Vec::new();
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
                    group: groups[rank.rank as usize],
                    host: hosts[rank.rank as usize],
                });
                let (raw, pos, back) = ordered.next().unwrap_or_default();
                g.raw.push(raw);
                g.pos.push(pos);
                inv.push(back);
            }
            rank_locs.push(mine);
        }
        let node = |at: EventRef, end: bool| -> Option<Node> {
            let locs = rank_locs.get(at.rank as usize)?;
            let &(_, loc) = locs.iter().find(|(t, _)| *t == at.thread)?;
            let k = *inv[loc as usize].get(2 * at.index + usize::from(end))?;
            Some(Node { loc, k })
        };
        let mut deps: Vec<(Node, Dep)> = Vec::new();
        let mut outs: Vec<(Node, Out)> = Vec::new();
        for msg in &m.matched {
            let (s, r) = (&m.sends[msg.send], &m.recvs[msg.recv]);
            let (Some(sn), Some(rn)) = (node(s.call, false), node(r.completion, true)) else {
                continue;
            };
            g.msgs.push((sn, rn));
            deps.push((rn, Dep::Msg(sn)));
            outs.push((sn, Out::Msg(rn)));
        }
        g.insts = collectives(trace, &node);
        for (ii, inst) in g.insts.iter().enumerate() {
            let mut is_sender = vec![false; inst.members.len()];
            for (i, mem) in inst.members.iter().enumerate() {
                let Some(mem) = mem else { continue };
                let mut any = false;
                for k in inst.senders(i as u32) {
                    is_sender[k as usize] = true;
                    any = true;
                }
                if let (true, Some(exit)) = (any, mem.exit) {
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
        let sizes: Vec<usize> = g.raw.iter().map(Vec::len).collect();
        (g.dep_at, g.deps) = csr(&sizes, deps);
        (g.out_at, g.outs) = csr(&sizes, outs);
        g
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
        self.raw.iter().map(Vec::len).sum()
    }

    pub fn deps(&self, n: Node) -> &[Dep] {
        let at = &self.dep_at[n.loc as usize];
        &self.deps[n.loc as usize][at[n.k as usize] as usize..at[n.k as usize + 1] as usize]
    }

    pub fn outs(&self, n: Node) -> &[Out] {
        let at = &self.out_at[n.loc as usize];
        &self.outs[n.loc as usize][at[n.k as usize] as usize..at[n.k as usize + 1] as usize]
    }

    /// Minimum latency of a message from location `a` to location `b`:
    /// none within one clock group (one clock cannot reverse a message).
    pub fn mu(&self, a: u32, b: u32) -> u64 {
        let (a, b) = (&self.locs[a as usize], &self.locs[b as usize]);
        if a.group == b.group {
            0
        } else if a.host == b.host {
            self.mu_intra
        } else {
            self.mu_inter
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

    /// Maps times in node order back to stamp positions, per location.
    pub fn by_position(&self, t: &[Vec<u64>]) -> Vec<Vec<u64>> {
        t.iter()
            .zip(&self.pos)
            .map(|(ts, ps)| {
                let mut out = vec![0; ts.len()];
                for (&v, &p) in ts.iter().zip(ps) {
                    out[p as usize] = v;
                }
                out
            })
            .collect()
    }
}

/// Compressed rows: for each location, the start of each node's items.
#[allow(clippy::type_complexity)]
fn csr<T: Copy>(sizes: &[usize], mut items: Vec<(Node, T)>) -> (Vec<Vec<u32>>, Vec<Vec<T>>) {
    items.sort_by_key(|(n, _)| *n);
    let mut at: Vec<Vec<u32>> = sizes.iter().map(|&n| vec![0u32; n + 1]).collect();
    let mut flat: Vec<Vec<T>> = sizes.iter().map(|_| Vec::new()).collect();
    for (n, item) in items {
        at[n.loc as usize][n.k as usize + 1] += 1;
        flat[n.loc as usize].push(item);
    }
    for a in &mut at {
        for k in 1..a.len() {
            a[k] += a[k - 1];
        }
    }
    (at, flat)
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
fn collectives(trace: &Trace, node: &dyn Fn(EventRef, bool) -> Option<Node>) -> Vec<Inst> {
    collective::instances(trace)
        .iter()
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
