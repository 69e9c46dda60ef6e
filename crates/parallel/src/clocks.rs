//! The clock checks over blocks ([`pmtrace_analysis::clocks`]), the parts
//! that need no replay: how receives matched by their piggybacked ids
//! (counted where each receive is), and whether the clocks one sender's
//! thread piggybacked ever decreased with its message ids (its receives
//! sorted at the sender's block).

use pmtrace_analysis::clocks;

use crate::block::Block;
use crate::fabric::Fabric;
use crate::messages::BlockMessages;
use crate::wire::{In, Out};

/// Receives matched by id, without one, and disagreeing with the FIFO
/// rule; and the decreases along senders. On every process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ids {
    pub matched_by_id: u64,
    pub unmatched_by_id: u64,
    pub fifo_disagreements: u64,
    pub decreasing_by_sender: u64,
}

pub fn ids<F: Fabric + ?Sized>(f: &F, b: &Block, bm: &BlockMessages) -> Ids {
    let m = &bm.m;
    let mut v = [0u64; 4];
    for ri in 0..bm.own_recvs {
        let found = m.send_by_id(ri);
        if found.is_some() {
            v[0] += 1;
        } else {
            v[1] += 1;
        }
        if m.recvs[ri].pb.is_some() && found != m.send_by_fifo(ri) {
            v[2] += 1;
        }
    }
    // Each sender's receives, at its block.
    let mut out = vec![Out::default(); f.size()];
    for (src, id, lc) in clocks::by_sender(m.recvs[..bm.own_recvs].iter()) {
        out[b.blocks.owner(src)].u32(src).u64(id).u64(lc);
    }
    let mut mine = Vec::new();
    for bytes in f.exchange(out.into_iter().map(|o| o.0).collect()) {
        let mut i = In::new(&bytes);
        while !i.done() {
            mine.push((i.u32(), i.u64(), i.u64()));
        }
    }
    v[3] = clocks::decreasing_by_sender(mine);
    f.sum(&mut v);
    Ids {
        matched_by_id: v[0],
        unmatched_by_id: v[1],
        fifo_disagreements: v[2],
        decreasing_by_sender: v[3],
    }
}
