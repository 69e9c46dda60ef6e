//! Wait states over blocks: [`pmtrace_analysis::report::waits::find`]'s
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

use pmtrace_analysis::read::EventRef;
use pmtrace_analysis::report::times::Times;
use pmtrace_analysis::report::waits::{self, Wait, LATE_RECEIVER, LATE_SENDER};
use pmtrace_format::Kind;

use crate::block::Block;
use crate::fabric::Fabric;
use crate::insts::Insts;
use crate::messages::BlockMessages;
use crate::wire::{In, Out};

fn put_times(o: &mut Out, t: Option<(u64, u64)>) {
    match t {
        Some((a, b)) => o.u8(1).u64(a).u64(b),
        None => o.u8(0),
    };
}

fn get_times(i: &mut In) -> Option<(u64, u64)> {
    (i.u8() == 1).then(|| (i.u64(), i.u64()))
}

const KINDS: [&str; 5] = [
    waits::LATE_SENDER,
    waits::LATE_RECEIVER,
    waits::WAIT_AT_NXN,
    waits::WAIT_AT_BARRIER,
    waits::LATE_BROADCAST,
];

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
    let kind_of = |at: EventRef| times.func(at).map(|func| trace.held(at.rank).kind(func));
    let name = |at: EventRef| times.name(at);
    let crossing = bm.crossing(&b.blocks);
    // The times of sends made elsewhere, and of receives made elsewhere.
    let mut send_times: BTreeMap<usize, Option<(u64, u64)>> = BTreeMap::new();
    crossing.to_receivers(
        f,
        |k, o| put_times(o, times.of(m.sends[m.matched[k].send].call)),
        |k, i| {
            send_times.insert(k, get_times(i));
        },
    );
    let mut recv_times: BTreeMap<usize, (bool, Option<(u64, u64)>)> = BTreeMap::new();
    crossing.to_senders(
        f,
        |k, o| {
            let r = &m.recvs[m.matched[k].recv];
            o.bool(times.of(r.completion).is_some());
            put_times(o, times.of(r.post));
        },
        |k, i| {
            let done = i.bool();
            recv_times.insert(k, (done, get_times(i)));
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
        let Some((s0, s1)) = times.of(s.call) else {
            continue;
        };
        if !done {
            continue;
        }
        let blocking_send = matches!(kind_of(s.call), Some(Kind::Send | Kind::Sendrecv))
            && !name(s.call).contains("Bsend");
        let Some((p0, _)) = post else { continue };
        if blocking_send && p0 > s0 && s1 > p0 {
            found.push(Wait {
                kind: LATE_RECEIVER,
                at: s.call,
                comm: s.comm,
                ns: p0 - s0,
                cause: r.post,
            });
        }
    }
    // Late senders, at the receives of this block: per completing call
    // the latest send, the first of equals in the order of sends.
    let mut mine: Vec<usize> = (0..m.matched.len())
        .filter(|&k| m.matched[k].recv < bm.own_recvs)
        .collect();
    mine.sort_by_key(|&k| bm.send_key(m.matched[k].send));
    let mut late_send: BTreeMap<(u32, u32, u32), (u64, u64, EventRef)> = BTreeMap::new();
    for k in mine {
        let p = &m.matched[k];
        let (s, r) = (&m.sends[p.send], &m.recvs[p.recv]);
        let blocking = match kind_of(r.completion) {
            Some(Kind::Recv | Kind::Sendrecv | Kind::Mrecv) => true,
            Some(Kind::Complete) => name(r.completion).starts_with("MPI_Wait"),
            _ => false,
        };
        let (Some((r0, r1)), Some((s0, _))) = (times.of(r.completion), send_of(k)) else {
            continue;
        };
        if blocking && s0 > r0 {
            let ns = s0.min(r1) - r0;
            let key = (r.completion.rank, r.completion.thread, r.completion.index);
            let e = late_send.entry(key).or_insert((0, r.comm, s.call));
            if ns > e.0 {
                *e = (ns, r.comm, s.call);
            }
        }
    }
    found.extend(late_send.into_iter().filter(|(_, (ns, _, _))| *ns > 0).map(
        |((rank, thread, index), (ns, comm, cause))| Wait {
            kind: LATE_SENDER,
            at: EventRef {
                rank,
                thread,
                index,
            },
            comm,
            ns,
            cause,
        },
    ));
    // Collectives, at their owners, from the members' enter times.
    let mut enters: BTreeMap<(usize, u32), Option<(u64, u64)>> = BTreeMap::new();
    insts.to_owners(
        f,
        |slot, o| put_times(o, times.of(insts.members[slot].calls.enter)),
        |ii, me, i| {
            enters.insert((ii, me), get_times(i));
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
