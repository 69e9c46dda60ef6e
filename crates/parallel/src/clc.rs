//! The controlled logical clock over blocks: forward amortization as a
//! replay in rounds, backward amortization with the slacks of cross edges
//! brought home ([`pmtrace_sync::clc`] says what each computes).
//!
//! **Forward.** A stamp's forward time depends only on its location's
//! previous stamp and on the sends (collective enters) it receives from,
//! so any order that visits a stamp after those gives the serial times.
//! Each round, every process visits every stamp of its block that is
//! ready; the times of sends received in another block, and the enters of
//! collectives, then travel in one all-to-all: to the receiver's process,
//! and to the instance's owner, which answers each exit's need once its
//! senders came. Rounds go on until every stamp is visited. When no stamp
//! anywhere is ready (lost events), the blocked stamp with the earliest
//! input time over all blocks is visited anyway, as the serial replay
//! does; a collective need not yet known is then left out, which only a
//! damaged trace can tell from the serial result.
//!
//! **Backward.** Each jump ramps the stamps before it down to their
//! location's cap: the slack of each send toward its receives. A receive
//! in another block sends its forward time back; an instance's owner
//! gives each enter its limit from the members' forward exits.

use std::collections::VecDeque;

use pmtrace_sync::clc::{advance, backward_with, ClcOutcome, ClcParams};
use pmtrace_sync::graph::{Ahead, Dep, Node, Out as GOut, Times};

use crate::colls::Progress;
use crate::fabric::Fabric;
use crate::net::{InOrder, Net, RemoteDep, RemoteOut};
use crate::rounds::{self, Round};
use crate::wire::{In, Out};

/// Message kinds of a forward round.
const MSG: u8 = 0;
const ENTER: u8 = 1;
const NEED: u8 = 2;

/// Runs forward then backward amortization on input times `c`.
pub fn run<F: Fabric + ?Sized>(
    f: &F,
    net: &Net,
    c: &impl Times,
    p: &ClcParams,
) -> (Vec<Vec<u64>>, ClcOutcome) {
    let (mut t, jumps, forced) = forward(f, net, c, p);
    backward(f, net, &mut t, &jumps, p);
    let mut n = [jumps.iter().map(|j| j.len() as u64).sum::<u64>()];
    f.sum(&mut n);
    (
        t,
        ClcOutcome {
            jumps: n[0],
            forced,
        },
    )
}

/// What the replay keeps.
struct State<'n, 'g, T: Times> {
    net: &'n Net<'g>,
    p: ClcParams,
    me: usize,
    t: Vec<Vec<u64>>,
    jumps: Vec<Vec<(u32, u64)>>,
    next: Vec<u32>,
    prev_c: Vec<u64>,
    ahead: Ahead<'n, T>,
    /// Per inbox slot: the send's forward time, once it came.
    sent: Vec<Option<u64>>,
    /// Per member held here: its exit's need, once the owner gave it.
    need: Vec<Option<u64>>,
    /// Per owned instance: its members' enters so far, and how far it got.
    enters: Vec<Vec<Option<u64>>>,
    progress: Vec<Progress>,
    /// Inbox slots of each process's messages start here.
    in_start: Vec<usize>,
    queue: VecDeque<u32>,
    queued: Vec<bool>,
    /// Each location's place in the remote lists: nodes go in order.
    place: InOrder,
    left: u64,
    visited: u64,
    out: Vec<Out>,
    /// Messages sent and taken this round.
    sent_count: u64,
}

impl<T: Times> State<'_, '_, T> {
    fn wake(&mut self, loc: u32) {
        if !self.queued[loc as usize] {
            self.queued[loc as usize] = true;
            self.queue.push_back(loc);
        }
    }

    fn head(&self, loc: u32) -> Option<Node> {
        let k = self.next[loc as usize];
        ((k as usize) < self.net.g.len(loc)).then_some(Node { loc, k })
    }

    fn ready(&self, n: Node) -> bool {
        let g = &self.net.g;
        g.deps(n).iter().all(|d| match *d {
            Dep::Msg(s) => self.next[s.loc as usize] > s.k,
            Dep::Coll { .. } => unreachable!("a block's graph has no instance"),
        }) && self.place.deps(self.net, n).iter().all(|(_, d)| match *d {
            RemoteDep::Msg(i) => self.sent[i as usize].is_some(),
            RemoteDep::Coll(i) => self.need[i as usize].is_some(),
        })
    }

    /// Visits node `n`: its forward time, and tells who waits for it.
    fn visit(&mut self, n: Node) {
        let net = self.net;
        let g = &net.g;
        let (l, k) = (n.loc as usize, n.k as usize);
        let cn = self.ahead.get(n.loc, n.k);
        let before = std::mem::replace(&mut self.prev_c[l], cn);
        let prev = (k > 0).then(|| (before, self.t[l][k - 1]));
        let local = g.deps(n).iter().map(|&d| g.dep_time(&self.t, n, d));
        let remote = self
            .place
            .deps(net, n)
            .iter()
            .filter_map(|(_, d)| match *d {
                RemoteDep::Msg(i) => {
                    // Missing only when forced: the serial replay reads 0 there.
                    let s = self.sent[i as usize].unwrap_or(0);
                    Some(s + net.mu_from(net.inbox[i as usize].peer, n.loc))
                }
                RemoteDep::Coll(i) => self.need[i as usize],
            });
        let need = local.chain(remote).max();
        let (tn, jump) = advance(&self.p, cn, prev, need);
        if let Some(j) = jump {
            self.jumps[l].push((n.k, j));
        }
        self.t[l][k] = tn;
        self.next[l] += 1;
        self.left -= 1;
        self.visited += 1;
        for &o in g.outs(n) {
            if let GOut::Msg(r) = o {
                self.wake(r.loc);
            }
        }
        let outs = self.place.outs(net, n);
        self.place.past(net, n);
        for &(_, o) in outs {
            match o {
                RemoteOut::Msg(i) => {
                    let c = &net.outbox[i as usize];
                    self.out[c.proc as usize].u8(MSG).u32(c.index).u64(tn);
                    self.sent_count += 1;
                }
                RemoteOut::Enter(i) => {
                    let m = &net.members[i as usize];
                    if m.owner as usize == self.me {
                        self.enter(m.inst, m.part, tn);
                    } else {
                        self.out[m.owner as usize]
                            .u8(ENTER)
                            .u32(m.inst)
                            .u32(m.part)
                            .u64(tn);
                        self.sent_count += 1;
                    }
                }
            }
        }
    }

    /// An enter of an instance owned here: the exits it made known.
    fn enter(&mut self, inst: u32, part: u32, t: u64) {
        let (ii, k) = (inst as usize, part as usize);
        self.enters[ii][k] = Some(t);
        self.answer(ii, &[k]);
    }

    /// The exits of owned instance `ii` that the enters of members `newly`
    /// made known: to their members, here or at their processes.
    fn answer(&mut self, ii: usize, newly: &[usize]) {
        let net = self.net;
        let o = &net.owned[ii];
        let known = (o.inst).ready(&mut self.progress[ii], &self.enters[ii], newly, net.mu());
        for (i, need) in known {
            let (proc, slot) = o.at[i];
            if proc as usize == self.me {
                self.set_need(slot, need);
            } else {
                self.out[proc as usize].u8(NEED).u32(slot).u64(need);
                self.sent_count += 1;
            }
        }
    }

    fn set_need(&mut self, slot: u32, need: u64) {
        let m = self.net.members[slot as usize];
        self.need[slot as usize] = Some(need);
        if let Some(x) = m.exit {
            self.wake(x.loc);
        }
    }

    /// Visits every ready node.
    fn visit_ready(&mut self) {
        while let Some(l) = self.queue.pop_front() {
            self.queued[l as usize] = false;
            while let Some(n) = self.head(l) {
                if !self.ready(n) {
                    break;
                }
                self.visit(n);
            }
        }
    }

    /// Applies what came from process `from`.
    fn apply(&mut self, from: usize, bytes: &[u8]) {
        let mut i = In::new(bytes);
        while !i.done() {
            self.sent_count += 1;
            match i.u8() {
                MSG => {
                    let slot = self.in_start[from] + i.u32() as usize;
                    self.sent[slot] = Some(i.u64());
                    if let Some(n) = self.net.inbox[slot].node {
                        self.wake(n.loc);
                    }
                }
                ENTER => {
                    let (inst, part, t) = (i.u32(), i.u32(), i.u64());
                    self.enter(inst, part, t);
                }
                _ => {
                    let (slot, need) = (i.u32(), i.u64());
                    self.set_need(slot, need);
                }
            }
        }
    }
}

/// Forward amortization: the new times in node order, the jumps (stamp,
/// Δ) per location, and how many stamps were forced (over all blocks).
#[allow(clippy::type_complexity)]
pub fn forward<F: Fabric + ?Sized>(
    f: &F,
    net: &Net,
    c: &impl Times,
    p: &ClcParams,
) -> (Vec<Vec<u64>>, Vec<Vec<(u32, u64)>>, u64) {
    let g = &net.g;
    let locs = g.locs.len();
    let procs = f.size();
    let mut in_start = vec![0usize; procs + 1];
    for c in &net.inbox {
        in_start[c.proc as usize + 1] += 1;
    }
    for q in 0..procs {
        in_start[q + 1] += in_start[q];
    }
    let mut s = State {
        net,
        p: *p,
        me: f.index(),
        t: (0..locs as u32).map(|l| vec![0; g.len(l)]).collect(),
        jumps: vec![Vec::new(); locs],
        next: vec![0; locs],
        prev_c: vec![0; locs],
        ahead: Ahead::new(g, c),
        sent: vec![None; net.inbox.len()],
        need: vec![None; net.members.len()],
        enters: net
            .owned
            .iter()
            .map(|o| vec![None; o.inst.parts.len()])
            .collect(),
        progress: net.owned.iter().map(|o| o.inst.progress()).collect(),
        in_start,
        queue: (0..locs as u32).collect(),
        queued: vec![true; locs],
        place: InOrder::new(net),
        left: g.stamps() as u64,
        visited: 0,
        out: vec![Out::default(); procs],
        sent_count: 0,
    };
    // Instances whose exits need no enter at all are known at once.
    for ii in 0..net.owned.len() {
        s.answer(ii, &[]);
    }
    let forced = rounds::run(f, &mut s);
    (s.t, s.jumps, forced)
}

impl<T: Times> Round for State<'_, '_, T> {
    fn advance(&mut self) -> u64 {
        self.visit_ready();
        std::mem::take(&mut self.visited)
    }

    fn outgoing(&mut self) -> Vec<Out> {
        let procs = self.out.len();
        std::mem::replace(&mut self.out, vec![Out::default(); procs])
    }

    fn take(&mut self, from: usize, bytes: &[u8]) {
        self.apply(from, bytes);
    }

    fn left(&self) -> u64 {
        self.left
    }

    fn moved(&mut self) -> u64 {
        std::mem::take(&mut self.sent_count) + rounds::pending(&self.out)
    }

    /// Stuck: the blocked head with the earliest input time overall (ties
    /// to the lowest location, rank by rank) goes anyway.
    fn force<F: Fabric + ?Sized>(&mut self, f: &F) {
        force(f, self);
    }
}

/// Visits the blocked head with the earliest input time over every block.
fn force<F: Fabric + ?Sized, T: Times>(f: &F, s: &mut State<T>) {
    let g = &s.net.g;
    let heads: Vec<Node> = (0..g.locs.len() as u32).filter_map(|l| s.head(l)).collect();
    let mine = heads
        .into_iter()
        .map(|n| {
            let loc = &g.locs[n.loc as usize];
            (s.ahead.get(n.loc, n.k), loc.rank, loc.slot as u32, n)
        })
        .min_by_key(|&(key, rank, slot, _)| (key, rank, slot));
    let mut o = Out::default();
    if let Some((key, rank, slot, _)) = mine {
        o.u64(key).u32(rank).u32(slot);
    }
    let all = f.all_gather(o.0);
    let best = all
        .iter()
        .enumerate()
        .filter(|(_, b)| !b.is_empty())
        .map(|(p, b)| {
            let mut i = In::new(b);
            ((i.u64(), i.u32(), i.u32()), p)
        })
        .min();
    if let (Some((_, p)), Some((.., n))) = (best, mine) {
        if p == s.me {
            s.visit(n);
            s.wake(n.loc);
        }
    }
}

/// Backward amortization of `jumps`, in place.
pub fn backward<F: Fabric + ?Sized>(
    f: &F,
    net: &Net,
    t: &mut [Vec<u64>],
    jumps: &[Vec<(u32, u64)>],
    p: &ClcParams,
) {
    let procs = f.size();
    let me = f.index();
    // Receives of this block's sends made elsewhere: their forward times.
    let mut out = vec![Out::default(); procs];
    for c in &net.inbox {
        let v = c
            .node
            .filter(|_| c.live)
            .map_or(0, |n| t[n.loc as usize][n.k as usize]);
        out[c.proc as usize].u64(v);
    }
    let got = f.exchange(out.into_iter().map(|o| o.0).collect());
    let mut received = vec![0u64; net.outbox.len()];
    {
        let mut readers: Vec<In> = got.iter().map(|b| In::new(b)).collect();
        for (i, c) in net.outbox.iter().enumerate() {
            received[i] = readers[c.proc as usize].u64();
        }
    }
    // Every member's forward exit to its instance's owner; each enter's
    // limit back.
    let mut out = vec![Out::default(); procs];
    for m in &net.members {
        let w = &mut out[m.owner as usize];
        w.u32(m.inst).u32(m.part);
        match m.exit {
            Some(x) => w.u8(1).u64(t[x.loc as usize][x.k as usize]),
            None => w.u8(0),
        };
    }
    let mut exits: Vec<Vec<Option<u64>>> = net
        .owned
        .iter()
        .map(|o| vec![None; o.inst.parts.len()])
        .collect();
    for bytes in f.exchange(out.into_iter().map(|o| o.0).collect()) {
        let mut i = In::new(&bytes);
        while !i.done() {
            let (inst, part) = (i.u32() as usize, i.u32() as usize);
            if i.u8() == 1 {
                exits[inst][part] = Some(i.u64());
            }
        }
    }
    let mut back = vec![Out::default(); procs];
    for (o, ex) in net.owned.iter().zip(&exits) {
        for (k, limit) in o.inst.enter_limits(ex, net.mu()).into_iter().enumerate() {
            if let Some(limit) = limit {
                let (proc, slot) = o.at[k];
                back[proc as usize].u32(slot).u64(limit);
            }
        }
    }
    let mut limits = vec![u64::MAX; net.members.len()];
    for bytes in f.exchange(back.into_iter().map(|o| o.0).collect()) {
        let mut i = In::new(&bytes);
        while !i.done() {
            let slot = i.u32() as usize;
            limits[slot] = i.u64();
        }
    }
    let _ = me;
    let g = &net.g;
    backward_with(t, jumps, p, |t, n| {
        let remote = net.routs_of(n.loc, n.k);
        if g.outs(n).is_empty() && remote.is_empty() {
            return None;
        }
        let here = t[n.loc as usize][n.k as usize];
        let mut room = if g.outs(n).is_empty() {
            u64::MAX
        } else {
            g.slack(t, n)
        };
        for &(_, o) in remote {
            let limit = match o {
                RemoteOut::Msg(i) => {
                    let c = &net.outbox[i as usize];
                    received[i as usize].saturating_sub(net.mu_to(n.loc, c.peer))
                }
                RemoteOut::Enter(i) => limits[i as usize],
            };
            room = room.min(limit.saturating_sub(here));
        }
        Some(room)
    });
}
