//! Matching across blocks.
//!
//! A message's channel (sender, receiver, communicator, tag) lies wholly
//! in one block or crosses from the sender's to the receiver's, so each
//! block matches its own channels as a whole trace's matching does, and
//! for the others:
//!
//! 1. every send whose receiver is in another block goes there, with the
//!    id it carried ([`Messages::add_sends`]); the receiver's block
//!    matches it with its receives by id, then by the FIFO rule, exactly
//!    as the serial matching would (a channel's sends all come from one
//!    block, in their order);
//! 2. each receive that took such a send goes back to the sender's block
//!    ([`Messages::add_received`]).
//!
//! Then each block holds every message one of its ranks sent or received,
//! with both ends. A message whose ends lie in two blocks is in both, and
//! is counted by its receiver's; an unmatched send by its sender's.

use pmtrace_matching::Messages;
use pmtrace_trace::read::EventRef;

use crate::block::{Block, Blocks};
use crate::fabric::Fabric;
use crate::wire::{In, Out};

/// A block's messages: its own sends and receives first, then the other
/// blocks' ends of its messages.
pub struct BlockMessages {
    pub m: Messages,
    /// `m.sends[..own_sends]` are the block's.
    pub own_sends: usize,
    /// `m.recvs[..own_recvs]` are the block's.
    pub own_recvs: usize,
    /// Each other block's send here: its process and its index there.
    origin: Vec<(usize, u32)>,
    me: usize,
}

impl BlockMessages {
    /// Whether the pair of send `s` and receive `r` is counted here (by
    /// its receiver's block).
    pub fn counts(&self, r: usize) -> bool {
        r < self.own_recvs
    }

    /// Send `i`'s place in the whole trace's order of sends: (the process
    /// that holds its rank, its index there).
    pub fn send_key(&self, i: usize) -> (usize, u32) {
        match i.checked_sub(self.own_sends) {
            None => (self.me, i as u32),
            Some(k) => self.origin[k],
        }
    }

    /// The messages whose ends lie in this block and another, each list
    /// in the order both blocks agree on (by peer process, then sending
    /// call): (receives here of sends made there, sends here received
    /// there), as indices into `m.matched`.
    pub fn crossing(&self, blocks: &Blocks) -> Crossing {
        let m = &self.m;
        let mut ins: Vec<(u32, (EventRef, u32), usize)> = Vec::new();
        let mut outs: Vec<(u32, (EventRef, u32), usize)> = Vec::new();
        for (k, p) in m.matched.iter().enumerate() {
            let (s, r) = (&m.sends[p.send], &m.recvs[p.recv]);
            let key = (s.call, s.item);
            if p.send < self.own_sends && p.recv >= self.own_recvs {
                outs.push((blocks.owner(r.dst) as u32, key, k));
            } else if p.send >= self.own_sends && p.recv < self.own_recvs {
                ins.push((blocks.owner(s.src) as u32, key, k));
            }
        }
        ins.sort_unstable();
        outs.sort_unstable();
        Crossing {
            ins: ins.into_iter().map(|(p, _, k)| (p, k)).collect(),
            outs: outs.into_iter().map(|(p, _, k)| (p, k)).collect(),
        }
    }
}

/// The crossing messages of a block (see [`BlockMessages::crossing`]):
/// (peer process, index into `m.matched`).
pub struct Crossing {
    pub ins: Vec<(u32, usize)>,
    pub outs: Vec<(u32, usize)>,
}

impl Crossing {
    /// Something of each send here, to the block of its receive: `put`
    /// writes it for a sent message, `get` reads it for a received one
    /// (both given the index into `m.matched`).
    pub fn to_receivers<F: Fabric + ?Sized>(
        &self,
        f: &F,
        put: impl Fn(usize, &mut Out),
        mut get: impl FnMut(usize, &mut In),
    ) {
        flow(f, &self.outs, &self.ins, put, &mut get)
    }

    /// Something of each receive here, to the block of its send.
    pub fn to_senders<F: Fabric + ?Sized>(
        &self,
        f: &F,
        put: impl Fn(usize, &mut Out),
        mut get: impl FnMut(usize, &mut In),
    ) {
        flow(f, &self.ins, &self.outs, put, &mut get)
    }
}

fn flow<F: Fabric + ?Sized>(
    f: &F,
    from: &[(u32, usize)],
    to: &[(u32, usize)],
    put: impl Fn(usize, &mut Out),
    get: &mut impl FnMut(usize, &mut In),
) {
    let mut out = vec![Out::default(); f.size()];
    for &(p, k) in from {
        put(k, &mut out[p as usize]);
    }
    let got = f.exchange(out.into_iter().map(|o| o.0).collect());
    let mut readers: Vec<In> = got.iter().map(|b| In::new(b)).collect();
    for &(p, k) in to {
        get(k, &mut readers[p as usize]);
    }
}

/// Collects and matches the messages of this process's block.
pub fn build<F: Fabric + ?Sized>(f: &F, b: &Block) -> BlockMessages {
    let mut m = Messages::collect(&b.trace);
    let (own_sends, own_recvs) = (m.sends.len(), m.recvs.len());
    let me = f.index();
    let mut out = vec![Out::default(); f.size()];
    for (i, s) in m.sends.iter().enumerate() {
        let Some(dst) = s.dst else { continue };
        let to = b.blocks.owner(dst);
        if to != me && dst < b.blocks.ranks {
            out[to].u32(i as u32).u64(m.send_ids[i]);
            out[to].put(s);
        }
    }
    let got = f.exchange(out.into_iter().map(|o| o.0).collect());
    // Where each foreign send came from: (process, its index there).
    let mut origin: Vec<(usize, u32)> = Vec::new();
    let mut foreign = Vec::new();
    for (from, bytes) in got.iter().enumerate() {
        let mut i = In::new(bytes);
        while !i.done() {
            let index = i.u32();
            let id = i.u64();
            foreign.push((i.get(), id));
            origin.push((from, index));
        }
    }
    m.add_sends(foreign);
    m.pair();
    let mut back = vec![Out::default(); f.size()];
    for p in &m.matched {
        if p.send >= own_sends {
            let (to, index) = origin[p.send - own_sends];
            back[to].u32(index);
            back[to].put(&m.recvs[p.recv]);
        }
    }
    let got = f.exchange(back.into_iter().map(|o| o.0).collect());
    let mut received = Vec::new();
    for bytes in &got {
        let mut i = In::new(bytes);
        while !i.done() {
            let send = i.u32() as usize;
            received.push((send, i.get()));
        }
    }
    m.add_received(received, own_sends);
    BlockMessages {
        m,
        own_sends,
        own_recvs,
        origin,
        me,
    }
}
