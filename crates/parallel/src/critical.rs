//! The critical path over blocks: the serial backward walk
//! ([`pmtrace_analysis::report::critical`]) as a token that goes from
//! block to block. The block that holds the walk's rank takes its steps;
//! a hop to a rank of another block hands the walk's place over in the
//! next all-to-all. Each block logs what the walk passed, numbered, and
//! process 0 adds the logs up in that order, as the serial walk does.

use std::collections::BTreeMap;

use pmtrace_analysis::read::EventRef;
use pmtrace_analysis::report::critical::{self, CriticalPath, Cursor, Step};
use pmtrace_analysis::report::path::{Walk, COMPUTING};
use pmtrace_analysis::report::times::Times;
use pmtrace_analysis::report::waits::Wait;

use crate::block::Block;
use crate::fabric::{sum_of, Fabric};
use crate::wire::{In, Out};

/// Where the walk starts, over every block (as [`critical::end_point`]).
fn end_point<F: Fabric + ?Sized>(f: &F, b: &Block, times: &Times, to: u64) -> Option<(u32, u64)> {
    // A rank without a thread or a call ends the search, as serially.
    let mut mine = Out::default();
    match critical::end_point(&b.trace, times, u64::MAX) {
        None if !b.trace.ranks.is_empty() => {
            mine.u8(0);
        }
        None => {}
        Some((rank, a)) => {
            mine.u8(1).u64(a).u32(rank);
        }
    }
    let mut best: Option<(u64, u32)> = None;
    for bytes in f.all_gather(mine.0) {
        let mut i = In::new(&bytes);
        if i.done() {
            continue;
        }
        if i.u8() == 0 {
            return None;
        }
        let (a, rank) = (i.u64(), i.u32());
        if best.is_none_or(|x| a > x.0) {
            best = Some((a, rank));
        }
    }
    best.map(|(a, r)| (r, a.min(to)))
}

fn put_cursor(o: &mut Out, c: &Cursor, pending: Option<(EventRef, u64)>, seq: u64) {
    o.u32(c.rank)
        .u64(c.t)
        .u64(c.guard as u64)
        .u64(c.hops)
        .u64(seq);
    match c.next {
        Some(at) => o.u8(1).u32(at.rank).u32(at.thread).u32(at.index),
        None => o.u8(0),
    };
    match pending {
        Some((at, resumed)) => o
            .u8(1)
            .u32(at.rank)
            .u32(at.thread)
            .u32(at.index)
            .u64(resumed),
        None => o.u8(0),
    };
}

fn get_cursor(i: &mut In) -> (Cursor, Option<(EventRef, u64)>, u64) {
    let (rank, t, guard, hops, seq) = (i.u32(), i.u64(), i.u64() as usize, i.u64(), i.u64());
    let next = (i.u8() == 1).then(|| i.at());
    let pending = (i.u8() == 1).then(|| (i.at(), i.u64()));
    (
        Cursor {
            rank,
            t,
            next,
            guard,
            hops,
        },
        pending,
        seq,
    )
}

/// Message kinds between rounds.
const TOKEN: u8 = 0;
const DONE: u8 = 1;

/// The critical path over the window, on process 0 (`None` elsewhere);
/// `waits` are this block's, sorted by call.
pub fn compute<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    times: &Times,
    waits: &[Wait],
    (from, to): (u64, u64),
) -> Option<CriticalPath> {
    let trace = &b.trace;
    let me = f.index();
    let waited = |at: EventRef| critical::largest_wait(waits, at);
    let limit = sum_of(f, trace.events()) as usize * 2 + 16;
    let start = end_point(f, b, times, to);
    let mut token = start
        .filter(|(rank, _)| b.blocks.owner(*rank) == me)
        .map(|(rank, t)| {
            (
                Cursor::start(trace, times, rank, t),
                None::<(EventRef, u64)>,
                0u64,
            )
        });
    let mut log: Vec<(u64, u32, u32, u64, u64)> = Vec::new();
    let mut hops = 0;
    let mut done = start.is_none();
    while !done {
        let mut out = vec![Out::default(); f.size()];
        if let Some((mut c, mut pending, mut seq)) = token.take() {
            let finished = loop {
                if let Some((cause, resumed)) = pending {
                    let to = b.blocks.owner(cause.rank);
                    if to != me {
                        out[to].u8(TOKEN);
                        put_cursor(&mut out[to], &c, pending, seq);
                        break false;
                    }
                    pending = None;
                    if !c.land(trace, times, cause, resumed) {
                        break true;
                    }
                }
                let mut push = |rank, activity, a, b| {
                    log.push((seq, rank, activity, a, b));
                    seq += 1;
                };
                match c.step(trace, times, from, limit, &waited, &mut push) {
                    Step::Go => {}
                    Step::Done => break true,
                    Step::Hop { cause, resumed } => pending = Some((cause, resumed)),
                }
            };
            if finished {
                for o in &mut out {
                    o.u8(DONE).u64(c.hops);
                }
            }
        }
        for bytes in f.exchange(out.into_iter().map(|o| o.0).collect()) {
            let mut i = In::new(&bytes);
            while !i.done() {
                match i.u8() {
                    TOKEN => token = Some(get_cursor(&mut i)),
                    _ => {
                        hops = i.u64();
                        done = true;
                    }
                }
            }
        }
    }
    // Process 0 adds the logs up in the walk's order, with the functions'
    // names from the blocks that hold them.
    let mut names: BTreeMap<(u32, u32), String> = BTreeMap::new();
    for &(_, rank, activity, _, _) in &log {
        if activity != COMPUTING {
            names.entry((rank, activity)).or_insert_with(|| {
                trace
                    .held(rank)
                    .header
                    .functions
                    .get(activity as usize)
                    .map(|f| f.name.clone())
                    .unwrap_or_default()
            });
        }
    }
    let mut o = Out::default();
    o.u64(log.len() as u64);
    for &(seq, rank, activity, a, b) in &log {
        o.u64(seq).u32(rank).u32(activity).u64(a).u64(b);
    }
    for ((rank, activity), name) in &names {
        o.u32(*rank).u32(*activity).str(name);
    }
    let got = f.gather(o.0);
    if me != 0 {
        return None;
    }
    let mut all: Vec<(u64, u32, u32, u64, u64)> = Vec::new();
    let mut names: BTreeMap<(u32, u32), String> = BTreeMap::new();
    for bytes in &got {
        let mut i = In::new(bytes);
        let n = i.u64();
        for _ in 0..n {
            all.push((i.u64(), i.u32(), i.u32(), i.u64(), i.u64()));
        }
        while !i.done() {
            let k = (i.u32(), i.u32());
            names.insert(k, i.str());
        }
    }
    all.sort_unstable_by_key(|e| e.0);
    let mut walk = Walk::new(from, to);
    for (_, rank, activity, a, b) in all {
        walk.push(rank, activity, a, b);
    }
    walk.flush();
    let function =
        |rank: u32, activity: u32| names.get(&(rank, activity)).cloned().unwrap_or_default();
    Some(critical::summarize_with(
        times.base(),
        &function,
        walk,
        hops,
        (from, to),
        false,
        None,
    ))
}
