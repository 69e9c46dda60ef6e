//! A block's part of sync's event graph, and its edges to other blocks.
//!
//! The block's locations and the messages between them form a serial
//! [`Graph`] of their own ([`Graph::build_block`]). What crosses blocks is
//! kept beside it:
//!
//! - **Cross messages.** Between two processes, the messages from one to
//!   the other are put in one order on both sides (by the sending call),
//!   so that a value travels as its position in that list. A message whose
//!   send or receive has no node (a thread the graph does not hold) is
//!   dead on both sides, as the serial graph leaves it out.
//! - **Collective instances.** Each has an owner (by a hash of its
//!   communicator, sequence number and start), which gets every member's
//!   part and answers for the instance ([`crate::colls`]): an exit's need
//!   during the forward replay, an enter's limit for the backward one, the
//!   violations.

use rustc_hash::FxHashMap as HashMap;

use pmtrace_matching::collective;
use pmtrace_sync::graph::{Graph, Node};
use pmtrace_trace::read::EventRef;

use crate::block::{Block, Blocks};
use crate::colls::{Inst, Mu, Part};
use crate::fabric::Fabric;
use crate::groups::Groups;
use crate::insts::{owner_of, Head};
use crate::messages::BlockMessages;
use crate::wire::{In, Out};

/// One end of a message whose other end is in another block.
#[derive(Debug, Clone, Copy)]
pub struct Cross {
    /// The other block's process, and the message's place in the list of
    /// messages between the two.
    pub proc: u32,
    pub index: u32,
    /// The world rank at the other end.
    pub peer: u32,
    /// This end's node.
    pub node: Option<Node>,
    /// Both ends have a node: the message is an edge of the graph.
    pub live: bool,
}

/// A member of a collective instance, held here.
#[derive(Debug, Clone, Copy)]
pub struct Member {
    pub owner: u32,
    /// The instance at its owner, and this member's part in it.
    pub inst: u32,
    pub part: u32,
    pub enter: Node,
    pub exit: Option<Node>,
    /// Its exit depends on some enter (and it has one).
    pub has_deps: bool,
    /// Its enter orders some exit.
    pub is_sender: bool,
}

/// An instance this process owns: each part's process and its member
/// there.
#[derive(Debug, Clone)]
pub struct Owned {
    pub inst: Inst,
    pub at: Vec<(u32, u32)>,
}

/// What a node waits for from another block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteDep {
    /// A cross message's send: `inbox[i]`.
    Msg(u32),
    /// The enters of a collective: `members[i]`'s exit.
    Coll(u32),
}

/// Who waits in another block for a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteOut {
    /// `outbox[i]`'s receive.
    Msg(u32),
    /// The exits `members[i]`'s enter orders.
    Enter(u32),
}

/// The block's graph and its edges to the others.
pub struct Net<'t> {
    pub g: Graph<'t>,
    pub groups: Groups,
    pub blocks: Blocks,
    pub inbox: Vec<Cross>,
    pub outbox: Vec<Cross>,
    pub members: Vec<Member>,
    pub owned: Vec<Owned>,
    /// Per location: (node, what it waits for), by node.
    pub rdeps: Vec<Vec<(u32, RemoteDep)>>,
    /// Per location: (node, who waits for it), by node.
    pub routs: Vec<Vec<(u32, RemoteOut)>>,
}

impl<'t> Net<'t> {
    /// The block's graph, its cross messages and its collective members,
    /// with the instances this process owns.
    pub fn build<F: Fabric + ?Sized>(
        f: &F,
        b: &'t Block,
        bm: &BlockMessages,
        groups: Groups,
    ) -> Net<'t> {
        let first = b.trace.first as usize;
        let held = b.trace.ranks.len();
        let g = Graph::build_block(
            &b.trace,
            &bm.m,
            &groups.group[first..first + held],
            &groups.host[first..first + held],
        );
        let (inbox, outbox) = cross(f, &g, b.blocks, bm);
        let (members, owned) = collectives(f, &g, b, &groups);
        let mut rdeps: Vec<Vec<(u32, RemoteDep)>> = vec![Vec::new(); g.locs.len()];
        let mut routs: Vec<Vec<(u32, RemoteOut)>> = vec![Vec::new(); g.locs.len()];
        for (i, c) in inbox.iter().enumerate() {
            if let (true, Some(n)) = (c.live, c.node) {
                rdeps[n.loc as usize].push((n.k, RemoteDep::Msg(i as u32)));
            }
        }
        for (i, c) in outbox.iter().enumerate() {
            if let (true, Some(n)) = (c.live, c.node) {
                routs[n.loc as usize].push((n.k, RemoteOut::Msg(i as u32)));
            }
        }
        for (i, m) in members.iter().enumerate() {
            if let (true, Some(x)) = (m.has_deps, m.exit) {
                rdeps[x.loc as usize].push((x.k, RemoteDep::Coll(i as u32)));
            }
            if m.is_sender {
                routs[m.enter.loc as usize].push((m.enter.k, RemoteOut::Enter(i as u32)));
            }
        }
        for v in &mut rdeps {
            v.sort_unstable_by_key(|e| e.0);
        }
        for v in &mut routs {
            v.sort_unstable_by_key(|e| e.0);
        }
        Net {
            g,
            groups,
            blocks: b.blocks,
            inbox,
            outbox,
            members,
            owned,
            rdeps,
            routs,
        }
    }

    /// The minimum latencies the graph uses now.
    pub fn mu(&self) -> Mu {
        Mu {
            intra: self.g.mu_intra,
            inter: self.g.mu_inter,
        }
    }

    /// The minimum latency of a message from world rank `from` to location
    /// `to` of this block (as [`Graph::mu`]).
    pub fn mu_from(&self, from: u32, to: u32) -> u64 {
        let loc = &self.g.locs[to as usize];
        let (group, host) = (
            self.groups.group[from as usize],
            self.groups.host[from as usize],
        );
        if group == loc.group {
            0
        } else if host == loc.host {
            self.g.mu_intra
        } else {
            self.g.mu_inter
        }
    }

    /// The minimum latency of a message from location `from` of this block
    /// to world rank `to`.
    pub fn mu_to(&self, from: u32, to: u32) -> u64 {
        let loc = &self.g.locs[from as usize];
        let (group, host) = (
            self.groups.group[to as usize],
            self.groups.host[to as usize],
        );
        if group == loc.group {
            0
        } else if host == loc.host {
            self.g.mu_intra
        } else {
            self.g.mu_inter
        }
    }

    /// Who in other blocks waits for node `k` of `loc`.
    pub fn routs_of(&self, loc: u32, k: u32) -> &[(u32, RemoteOut)] {
        at(&self.routs[loc as usize], k)
    }
}

/// The run of `list` (sorted by node) at node `k`.
fn at<T>(list: &[(u32, T)], k: u32) -> &[(u32, T)] {
    let a = list.partition_point(|e| e.0 < k);
    run_from(list, a, k)
}

/// The run of `list` at node `k`, which starts at `a` if anywhere.
fn run_from<T>(list: &[(u32, T)], a: usize, k: u32) -> &[(u32, T)] {
    debug_assert!(list[a..].first().is_none_or(|e| e.0 >= k));
    let n = list[a..].iter().take_while(|e| e.0 == k).count();
    &list[a..a + n]
}

/// Where a walk that visits each location's nodes in order stands in
/// [`Net::rdeps`] and [`Net::routs`]: the next node's runs are where the
/// last ones ended, found with no search (a forward replay asks them at
/// least twice a node).
pub struct InOrder {
    deps: Vec<u32>,
    outs: Vec<u32>,
}

impl InOrder {
    pub fn new(net: &Net) -> InOrder {
        let locs = net.g.locs.len();
        InOrder {
            deps: vec![0; locs],
            outs: vec![0; locs],
        }
    }

    /// What node `n`, the next node of its location, waits for in other
    /// blocks.
    pub fn deps<'n>(&self, net: &'n Net, n: Node) -> &'n [(u32, RemoteDep)] {
        let l = n.loc as usize;
        run_from(&net.rdeps[l], self.deps[l] as usize, n.k)
    }

    /// [`Net::routs_of`] node `n`, the next node of its location.
    pub fn outs<'n>(&self, net: &'n Net, n: Node) -> &'n [(u32, RemoteOut)] {
        let l = n.loc as usize;
        run_from(&net.routs[l], self.outs[l] as usize, n.k)
    }

    /// Node `n` visited: its location's runs start after it.
    pub fn past(&mut self, net: &Net, n: Node) {
        let l = n.loc as usize;
        self.deps[l] += self.deps(net, n).len() as u32;
        self.outs[l] += self.outs(net, n).len() as u32;
    }
}

/// The cross messages of the block: (receives of sends made elsewhere,
/// sends received elsewhere), each list in the order both processes of a
/// pair agree on.
fn cross<F: Fabric + ?Sized>(
    f: &F,
    g: &Graph,
    blocks: Blocks,
    bm: &BlockMessages,
) -> (Vec<Cross>, Vec<Cross>) {
    let m = &bm.m;
    type Keyed = ((EventRef, u32), Cross);
    let mut ins: Vec<Keyed> = Vec::new();
    let mut outs: Vec<Keyed> = Vec::new();
    for p in &m.matched {
        let (s, r) = (&m.sends[p.send], &m.recvs[p.recv]);
        let key = (s.call, s.item);
        if p.send < bm.own_sends && p.recv >= bm.own_recvs {
            let node = g.node_of(s.call, false);
            let c = Cross {
                proc: blocks.owner(r.dst) as u32,
                index: 0,
                peer: r.dst,
                node,
                live: node.is_some(),
            };
            outs.push((key, c));
        } else if p.send >= bm.own_sends && p.recv < bm.own_recvs {
            let node = g.node_of(r.completion, true);
            let c = Cross {
                proc: blocks.owner(s.src) as u32,
                index: 0,
                peer: s.src,
                node,
                live: node.is_some(),
            };
            ins.push((key, c));
        }
    }
    let order = |list: &mut Vec<Keyed>| {
        list.sort_unstable_by_key(|(key, c)| (c.proc, *key));
        let mut n = 0;
        let mut last = u32::MAX;
        for (_, c) in list.iter_mut() {
            if c.proc != last {
                (last, n) = (c.proc, 0);
            }
            c.index = n;
            n += 1;
        }
    };
    order(&mut ins);
    order(&mut outs);
    let mut ins: Vec<Cross> = ins.into_iter().map(|(_, c)| c).collect();
    let mut outs: Vec<Cross> = outs.into_iter().map(|(_, c)| c).collect();
    // Each side tells the other which of their messages have a node here.
    let mut out = vec![Out::default(); f.size()];
    for c in outs.iter().chain(&ins) {
        out[c.proc as usize].bool(c.node.is_some());
    }
    let got = f.exchange(out.into_iter().map(|o| o.0).collect());
    let runs = |list: &[Cross], proc: usize| {
        let a = list.partition_point(|c| (c.proc as usize) < proc);
        let b = a + list[a..].partition_point(|c| c.proc as usize == proc);
        a..b
    };
    for (proc, bytes) in got.iter().enumerate() {
        let mut i = In::new(bytes);
        // Their sends to here first, then their receives from here.
        let (ri, ro) = (runs(&ins, proc), runs(&outs, proc));
        for c in &mut ins[ri] {
            c.live &= i.bool();
        }
        for c in &mut outs[ro] {
            c.live &= i.bool();
        }
        debug_assert!(i.done());
    }
    (ins, outs)
}

/// The block's collective members, and the instances this process owns.
fn collectives<F: Fabric + ?Sized>(
    f: &F,
    g: &Graph,
    b: &Block,
    groups: &Groups,
) -> (Vec<Member>, Vec<Owned>) {
    let procs = f.size();
    let mut members: Vec<Member> = Vec::new();
    let mut out = vec![Out::default(); procs];
    collective::members(&b.trace, |m| {
        let Some(enter) = g.node_of(m.calls.enter, false) else {
            return;
        };
        // A nonblocking collective completed on another thread has no exit
        // on this location: leave it out.
        let exit = m
            .calls
            .exit
            .and_then(|x| g.node_of(x, true))
            .filter(|x| x.loc == enter.loc);
        let owner = owner_of(m.key, procs);
        let rank = m.calls.enter.rank as usize;
        let o = &mut out[owner];
        o.put(&Head::of(&m));
        o.u64(m.calls.sent).u64(m.calls.recvd).bool(exit.is_some());
        o.u32(groups.group[rank]).u32(groups.host[rank]);
        o.u32(members.len() as u32);
        members.push(Member {
            owner: owner as u32,
            inst: 0,
            part: 0,
            enter,
            exit,
            has_deps: false,
            is_sender: false,
        });
    });
    let got = f.exchange(out.into_iter().map(|o| o.0).collect());
    // The owner's instances, in order of first appearance.
    let mut index: HashMap<(u64, u64, u64), usize> = HashMap::default();
    let mut owned: Vec<Owned> = Vec::new();
    for (proc, bytes) in got.iter().enumerate() {
        let mut i = In::new(bytes);
        while !i.done() {
            let Head {
                key,
                me,
                shape,
                flow,
                root,
                ..
            } = i.get();
            let (sent, recvd, has_exit) = (i.u64(), i.u64(), i.bool());
            let (group, host, slot) = (i.u32(), i.u32(), i.u32());
            let ii = *index.entry(key).or_insert_with(|| {
                owned.push(Owned {
                    inst: Inst {
                        shape,
                        flow,
                        root,
                        parts: Vec::new(),
                    },
                    at: Vec::new(),
                });
                owned.len() - 1
            });
            let o = &mut owned[ii];
            o.inst.parts.push(Part {
                me,
                group,
                host,
                sent,
                recvd,
                has_exit,
            });
            o.at.push((proc as u32, slot));
        }
    }
    // Parts by communicator rank; each member learns where it is.
    let mut back = vec![Out::default(); procs];
    for (ii, o) in owned.iter_mut().enumerate() {
        let mut order: Vec<usize> = (0..o.inst.parts.len()).collect();
        order.sort_by_key(|&k| o.inst.parts[k].me);
        o.inst.parts = order.iter().map(|&k| o.inst.parts[k]).collect();
        o.at = order.iter().map(|&k| o.at[k]).collect();
        for (part, (&(proc, slot), (deps, sender))) in o.at.iter().zip(o.inst.roles()).enumerate() {
            let w = &mut back[proc as usize];
            w.u32(slot).u32(ii as u32).u32(part as u32);
            w.bool(deps).bool(sender);
        }
    }
    for bytes in f.exchange(back.into_iter().map(|o| o.0).collect()) {
        let mut i = In::new(&bytes);
        while !i.done() {
            let m = &mut members[i.u32() as usize];
            m.inst = i.u32();
            m.part = i.u32();
            m.has_deps = i.bool();
            m.is_sender = i.bool();
        }
    }
    (members, owned)
}
