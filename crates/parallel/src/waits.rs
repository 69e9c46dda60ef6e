//! Wait states over blocks: [`pmtrace_report::waits::find`]'s
//! waits, each held by the block of the call that waited, in the serial
//! order (late receivers, late senders, collectives; then by call, ties in
//! that order).
//!
//! - A late sender is found where its receive is: the send's times come
//!   from its block when it is another.
//! - A late receiver is found where its send is: the receive's posting
//!   time comes over.
//! - The waits in a collective are found by its owner, from its members'
//!   enter times, and go to the waiting member's block.

use std::collections::BTreeMap;

use pmtrace_report::times::Times;
use pmtrace_report::waits::{self, kind_code, Wait, KINDS};
use pmtrace_trace::read::EventRef;

use crate::block::Block;
use crate::fabric::Fabric;
use crate::insts::Insts;
use crate::messages::BlockMessages;
use crate::wire::{In, Out};

/// Every wait of a call of this block, sorted by call as the serial
/// report sorts them.
pub fn find<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    bm: &BlockMessages,
    insts: &Insts,
    times: &Times,
) -> Vec<Wait> {
    let trace = &b.trace;
    let m = &bm.m;
    let crossing = bm.crossing(&b.blocks);
    // The times of sends made elsewhere, and of receives made elsewhere.
    let mut send_times: BTreeMap<usize, Option<(u64, u64)>> = BTreeMap::new();
    crossing.to_receivers(
        f,
        |k, o| {
            o.put(&times.of(m.sends[m.matched[k].send].call));
        },
        |k, i| {
            send_times.insert(k, i.get());
        },
    );
    let mut recv_times: BTreeMap<usize, (bool, Option<(u64, u64)>)> = BTreeMap::new();
    crossing.to_senders(
        f,
        |k, o| {
            let r = &m.recvs[m.matched[k].recv];
            o.bool(times.of(r.completion).is_some());
            o.put(&times.of(r.post));
        },
        |k, i| {
            let done = i.bool();
            recv_times.insert(k, (done, i.get()));
        },
    );
    let send_of = |k: usize| match send_times.get(&k) {
        Some(t) => *t,
        None => times.of(m.sends[m.matched[k].send].call),
    };
    let mut found: Vec<Wait> = Vec::new();
    // Late receivers, at the sends of this block, in send order.
    for (k, p) in m.matched.iter().enumerate() {
        if p.send >= bm.own_sends {
            continue;
        }
        let (s, r) = (&m.sends[p.send], &m.recvs[p.recv]);
        let (done, post) = match recv_times.get(&k) {
            Some(&(done, post)) => (done, post),
            None => (times.of(r.completion).is_some(), times.of(r.post)),
        };
        let (Some(send), true, Some((posted, _))) = (times.of(s.call), done, post) else {
            continue;
        };
        if waits::blocking(trace, times, s.call).1 {
            found.extend(waits::late_receiver(s, r, send, posted));
        }
    }
    // Late senders, at the receives of this block: per completing call
    // the latest send, the first of equals in the order of sends.
    let mut mine: Vec<usize> = (0..m.matched.len())
        .filter(|&k| m.matched[k].recv < bm.own_recvs)
        .collect();
    mine.sort_by_key(|&k| bm.send_key(m.matched[k].send));
    let mut late_senders = waits::LateSenders::default();
    for k in mine {
        let p = &m.matched[k];
        let (s, r) = (&m.sends[p.send], &m.recvs[p.recv]);
        let (Some(done), Some(send)) = (times.of(r.completion), send_of(k)) else {
            continue;
        };
        if waits::blocking(trace, times, r.completion).0 {
            late_senders.add(s, r, done, send.0);
        }
    }
    found.extend(late_senders.waits());
    // Collectives, at their owners, from the members' enter times.
    let mut enters: BTreeMap<(usize, u32), Option<(u64, u64)>> = BTreeMap::new();
    insts.to_owners(
        f,
        |slot, o| {
            o.put(&times.of(insts.members[slot].calls.enter));
        },
        |ii, me, i| {
            enters.insert((ii, me), i.get());
        },
    );
    let mut out = vec![Out::default(); f.size()];
    for (ii, o) in insts.owned.iter().enumerate() {
        let by_enter: BTreeMap<EventRef, u32> = o
            .from
            .iter()
            .filter_map(|&(me, _, _)| Some((o.inst.members[me as usize]?.enter, me)))
            .collect();
        let waits = waits::in_collective(&o.inst, |at| {
            by_enter
                .get(&at)
                .and_then(|&me| enters.get(&(ii, me)).copied().flatten())
        });
        for (j, w) in waits.into_iter().enumerate() {
            let to = b.blocks.owner(w.at.rank);
            let x = &mut out[to];
            x.u32(o.first.0).u32(o.first.1).u32(j as u32);
            x.u8(KINDS.iter().position(|k| *k == w.kind).expect("a kind") as u8);
            x.at(w.at);
            x.u64(w.comm).u64(w.ns);
            x.at(w.cause);
        }
    }
    let mut coll: Vec<((u32, u32, u32), Wait)> = Vec::new();
    for bytes in f.exchange(out.into_iter().map(|o| o.0).collect()) {
        let mut i = In::new(&bytes);
        while !i.done() {
            let order = (i.u32(), i.u32(), i.u32());
            let kind = KINDS[i.u8() as usize];
            let at = i.at();
            let (comm, ns) = (i.u64(), i.u64());
            let cause = i.at();
            coll.push((
                order,
                Wait {
                    kind,
                    at,
                    comm,
                    ns,
                    cause,
                },
            ));
        }
    }
    coll.sort_by_key(|(order, _)| *order);
    found.extend(coll.into_iter().map(|(_, w)| w));
    found.sort_by_key(|w| (w.at.rank, w.at.thread, w.at.index));
    found
}

/// The wait states' summary ([`waits::states`]) over blocks, on process 0
/// (`None` elsewhere); `found` are this block's waits, sorted by call.
///
/// The tables add up over blocks ([`waits::Tallies`]); a cause is named
/// by the block of the late call; each root-cause chain is followed as a
/// token from block to block (a chain's root does not depend on the
/// order chains run, see [`waits::CHAIN_STEPS`]) and counted at the
/// root's block.
pub fn states<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    times: &Times,
    found: &[Wait],
) -> Option<waits::WaitStates> {
    let trace = &b.trace;
    let mut t = waits::Tallies::default();
    for rank in &trace.ranks {
        t.mpi_time(
            rank.rank,
            waits::mpi_time(times, rank.rank, rank.threads.len()),
        );
    }
    let mut to_cause = vec![Out::default(); f.size()];
    for w in found {
        t.wait(w, times.name(w.at));
        let o = &mut to_cause[b.blocks.owner(w.cause.rank)];
        o.at(w.cause).u8(kind_code(w.kind)).u64(w.ns);
    }
    // Causes, named where the late call is.
    for bytes in f.exchange(to_cause.into_iter().map(|o| o.0).collect()) {
        let mut i = In::new(&bytes);
        while !i.done() {
            let (at, kind, ns) = (i.at(), KINDS[i.u8() as usize], i.u64());
            t.cause(at.rank, times.name(at), kind, ns);
        }
    }
    for ((rank, function), v) in roots(f, b, times, found) {
        t.root(rank, function, v);
    }
    let mut o = Out::default();
    t.put(&mut o);
    let got = f.gather(o.0);
    if f.index() != 0 {
        return None;
    }
    let mut all = waits::Tallies::default();
    for bytes in &got {
        all.merge(waits::Tallies::get(&mut In::new(bytes)));
    }
    Some(all.finish(times.base()))
}

/// Each wait's root cause, followed as a token from the block of each
/// late call to the next; counted at the root's block: per (rank,
/// function) the waiting, the waits, the indirect ones and the delay
/// before each distinct root call.
fn roots<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    times: &Times,
    found: &[Wait],
) -> BTreeMap<(u32, String), (u64, u64, u64, u64)> {
    let trace = &b.trace;
    let me = f.index();
    let gap_before = |at: EventRef| waits::gap_before(trace, times, at);
    let next = |at: EventRef| {
        waits::chain_next(at, gap_before(at), |c| {
            pmtrace_report::critical::largest_wait(found, c)
        })
    };
    // Tokens: (the wait's ns, where its chain started, where it is, steps).
    let mut here: Vec<(u64, EventRef, EventRef, usize)> = Vec::new();
    let mut out = vec![Out::default(); f.size()];
    for w in found {
        let o = &mut out[b.blocks.owner(w.cause.rank)];
        o.u64(w.ns).at(w.cause).at(w.cause).u64(0);
    }
    let mut acc: BTreeMap<(u32, String), (u64, u64, u64, u64)> = BTreeMap::new();
    let mut counted: rustc_hash::FxHashSet<(u32, u32, u32)> = Default::default();
    loop {
        let got = f.exchange(
            std::mem::replace(&mut out, vec![Out::default(); f.size()])
                .into_iter()
                .map(|o| o.0)
                .collect(),
        );
        let mut moved = 0u64;
        for bytes in &got {
            let mut i = In::new(bytes);
            while !i.done() {
                here.push((i.u64(), i.at(), i.at(), i.u64() as usize));
                moved += 1;
            }
        }
        if crate::fabric::sum_of(f, moved) == 0 {
            break;
        }
        for (ns, start, mut at, mut steps) in here.drain(..) {
            let root = loop {
                if steps >= waits::CHAIN_STEPS {
                    break Some(at);
                }
                match next(at) {
                    None => break Some(at),
                    Some(n) => {
                        at = n;
                        steps += 1;
                        let to = b.blocks.owner(n.rank);
                        if to != me {
                            out[to].u64(ns).at(start).at(at).u64(steps as u64);
                            break None;
                        }
                    }
                }
            };
            if let Some(root) = root {
                let e = acc
                    .entry((root.rank, times.name(root).to_owned()))
                    .or_default();
                e.0 += ns;
                e.1 += 1;
                e.2 += u64::from(root != start);
                if counted.insert((root.rank, root.thread, root.index)) {
                    e.3 += gap_before(root).map_or(0, |x| x.1);
                }
            }
        }
    }
    acc
}
