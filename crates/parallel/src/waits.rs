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
use pmtrace_report::waits::{self, Wait};
use pmtrace_trace::read::EventRef;

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

fn kind_code(kind: &str) -> u8 {
    KINDS
        .iter()
        .position(|k| *k == kind)
        .expect("a kind of wait") as u8
}

/// (ns, count) keyed by `K`, over waits.
type Tally<K> = BTreeMap<K, (u64, u64)>;

fn tally<K: Ord>(t: &mut Tally<K>, k: K, ns: u64, n: u64) {
    let e = t.entry(k).or_default();
    e.0 += ns;
    e.1 += n;
}

/// The wait states' summary ([`waits::states`]) over blocks, on process 0
/// (`None` elsewhere); `found` are this block's waits, sorted by call.
///
/// The tables add up over blocks; a cause is named by the block of the
/// late call; each root-cause chain is followed as a token from block to
/// block (a chain's root does not depend on the order chains run, see
/// [`waits::CHAIN_STEPS`]) and counted at the root's block.
pub fn states<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    times: &Times,
    found: &[Wait],
) -> Option<waits::WaitStates> {
    let trace = &b.trace;
    let me = f.index();
    let procs = f.size();
    let mpi_by_rank: BTreeMap<u32, u64> = trace
        .ranks
        .iter()
        .map(|rank| {
            let ns = (0..rank.threads.len())
                .flat_map(|slot| times.calls(rank.rank, slot))
                .map(|(_, a, b)| b.saturating_sub(a))
                .sum();
            (rank.rank, ns)
        })
        .collect();
    let mut by_kind: Tally<u8> = BTreeMap::new();
    let mut by_rank: Tally<(u32, &'static str)> = BTreeMap::new();
    let mut by_function: Tally<(String, u8)> = BTreeMap::new();
    let mut by_comm: Tally<(u64, u8)> = BTreeMap::new();
    let mut to_cause = vec![Out::default(); procs];
    for w in found {
        let k = kind_code(w.kind);
        tally(&mut by_kind, k, w.ns, 1);
        tally(&mut by_rank, (w.at.rank, w.kind), w.ns, 1);
        tally(&mut by_function, (times.name(w.at).to_owned(), k), w.ns, 1);
        tally(&mut by_comm, (w.comm, k), w.ns, 1);
        to_cause[b.blocks.owner(w.cause.rank)]
            .at(w.cause)
            .u8(k)
            .u64(w.ns);
    }
    // Causes, named where the late call is.
    let mut causes: Tally<(u32, String, u8)> = BTreeMap::new();
    for bytes in f.exchange(to_cause.into_iter().map(|o| o.0).collect()) {
        let mut i = In::new(&bytes);
        while !i.done() {
            let (at, k, ns) = (i.at(), i.u8(), i.u64());
            tally(&mut causes, (at.rank, times.name(at).to_owned(), k), ns, 1);
        }
    }
    let roots = roots(f, b, times, found);

    let mut o = Out::default();
    o.u64(mpi_by_rank.values().sum());
    let put = |o: &mut Out, ns: u64, n: u64| {
        o.u64(ns).u64(n);
    };
    o.u64(by_kind.len() as u64);
    for (k, (ns, n)) in &by_kind {
        o.u8(*k);
        put(&mut o, *ns, *n);
    }
    o.u64(by_rank.len() as u64);
    for ((r, k), (ns, n)) in &by_rank {
        o.u32(*r).u8(kind_code(k)).f64(share(*ns, mpi_by_rank[r]));
        put(&mut o, *ns, *n);
    }
    o.u64(by_function.len() as u64);
    for ((name, k), (ns, n)) in &by_function {
        o.str(name).u8(*k);
        put(&mut o, *ns, *n);
    }
    o.u64(by_comm.len() as u64);
    for ((c, k), (ns, n)) in &by_comm {
        o.u64(*c).u8(*k);
        put(&mut o, *ns, *n);
    }
    o.u64(causes.len() as u64);
    for ((r, name, k), (ns, n)) in &causes {
        o.u32(*r).str(name).u8(*k);
        put(&mut o, *ns, *n);
    }
    o.u64(roots.len() as u64);
    for ((r, name), (ns, n, indirect, delay)) in &roots {
        o.u32(*r)
            .str(name)
            .u64(*ns)
            .u64(*n)
            .u64(*indirect)
            .u64(*delay);
    }
    let got = f.gather(o.0);
    if me != 0 {
        return None;
    }
    let mut mpi_ns = 0u64;
    let mut by_kind: Tally<&'static str> = BTreeMap::new();
    let mut rank_rows: Vec<waits::WaitRow> = Vec::new();
    let mut by_function: Tally<(String, &'static str)> = BTreeMap::new();
    let mut by_comm: Tally<(u64, &'static str)> = BTreeMap::new();
    let mut causes: Tally<(u32, String, &'static str)> = BTreeMap::new();
    let mut roots: BTreeMap<(u32, String), (u64, u64, u64, u64)> = BTreeMap::new();
    for bytes in &got {
        let mut i = In::new(bytes);
        mpi_ns += i.u64();
        for _ in 0..i.u64() {
            let k = KINDS[i.u8() as usize];
            tally(&mut by_kind, k, i.u64(), i.u64());
        }
        for _ in 0..i.u64() {
            let (rank, k, share_of_mpi) = (i.u32(), KINDS[i.u8() as usize], i.f64());
            rank_rows.push(waits::WaitRow {
                kind: k,
                rank: Some(rank),
                function: None,
                comm: None,
                ns: i.u64(),
                count: i.u64(),
                share_of_mpi,
            });
        }
        for _ in 0..i.u64() {
            let key = (i.str(), KINDS[i.u8() as usize]);
            tally(&mut by_function, key, i.u64(), i.u64());
        }
        for _ in 0..i.u64() {
            let key = (i.u64(), KINDS[i.u8() as usize]);
            tally(&mut by_comm, key, i.u64(), i.u64());
        }
        for _ in 0..i.u64() {
            let key = (i.u32(), i.str(), KINDS[i.u8() as usize]);
            tally(&mut causes, key, i.u64(), i.u64());
        }
        for _ in 0..i.u64() {
            let key = (i.u32(), i.str());
            let e = roots.entry(key).or_default();
            e.0 += i.u64();
            e.1 += i.u64();
            e.2 += i.u64();
            e.3 += i.u64();
        }
    }
    let row = |kind, ns, count| waits::WaitRow {
        kind,
        rank: None,
        function: None,
        comm: None,
        ns,
        count,
        share_of_mpi: share(ns, mpi_ns),
    };
    let wait_ns = by_kind.values().map(|v| v.0).sum();
    let causes = waits::top_causes(causes);
    let root_causes = waits::top_roots(roots);
    Some(waits::WaitStates {
        time_base: times.base(),
        mpi_ns,
        wait_ns,
        share_of_mpi: share(wait_ns, mpi_ns),
        by_kind: by_kind
            .into_iter()
            .map(|(k, (ns, n))| row(k, ns, n))
            .collect(),
        by_rank: rank_rows,
        by_function: by_function
            .into_iter()
            .map(|((name, k), (ns, n))| waits::WaitRow {
                function: Some(name),
                ..row(k, ns, n)
            })
            .collect(),
        by_comm: by_comm
            .into_iter()
            .map(|((c, k), (ns, n))| waits::WaitRow {
                comm: Some(c),
                ..row(k, ns, n)
            })
            .collect(),
        causes,
        root_causes,
    })
}

fn share(ns: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        ns as f64 / of as f64
    }
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
