//! The critical path over blocks: the serial backward walk
//! ([`pmtrace_report::critical`]) as a token that goes from
//! block to block. The block that holds the walk's rank takes its steps;
//! a hop to a rank of another block hands the walk's place over in the
//! next all-to-all. Each block logs what the walk passed, numbered, and
//! process 0 adds the logs up in that order, as the serial walk does.

use std::collections::{BTreeMap, BTreeSet};

use pmtrace_report::critical::{self, CriticalPath, Cursor, Step};
use pmtrace_report::path::{Walk, COMPUTING};
use pmtrace_report::phases::{self, PhaseTimeline};
use pmtrace_report::times::Times;
use pmtrace_report::waits::Wait;
use pmtrace_trace::read::EventRef;

use crate::block::Block;
use crate::fabric::{sum_of, Fabric};
use crate::insts::Insts;
use crate::messages::BlockMessages;
use crate::rounds::{self, Went};
use crate::weighted;
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

/// The critical path over the window, on process 0 (`None` elsewhere);
/// `waits` are this block's, sorted by call.
pub fn compute<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    times: &Times,
    waits: &[Wait],
    window: (u64, u64),
) -> Option<CriticalPath> {
    let (walk, hops, mine) = plain(f, b, times, waits, window, false);
    let names = names_at_zero(f, b, &mine);
    let walk = walk?;
    let function =
        |rank: u32, activity: u32| names.get(&(rank, activity)).cloned().unwrap_or_default();
    Some(critical::summarize_with(
        times.base(),
        &function,
        walk,
        hops,
        window,
        false,
        None,
    ))
}

/// The whole critical path: every stretch, last first, and the names of
/// the functions on it by (rank, function id).
pub struct Stretches {
    pub path: Vec<critical::PathStretch>,
    pub names: BTreeMap<(u32, u32), String>,
}

/// Every stretch of the critical path over the window, on process 0
/// (`None` elsewhere), as the serial report keeps them
/// (`ReportOptions::insight`).
pub fn stretches<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    times: &Times,
    waits: &[Wait],
    window: (u64, u64),
) -> Option<Stretches> {
    let (walk, _, mine) = plain(f, b, times, waits, window, true);
    let names = names_at_zero(f, b, &mine);
    let all = walk?.all.unwrap_or_default();
    let path = (all.into_iter())
        .map(|s| (s.rank, s.from, s.to, s.activity))
        .collect();
    Some(Stretches { path, names })
}

/// The critical path and the weighted one beside it, split by phase
/// where the trace has phases, as `pmtrace critical-path` gives them: on
/// process 0 (`None` elsewhere).
pub fn both<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    bm: &BlockMessages,
    insts: &Insts,
    times: &Times,
    waits: &[Wait],
    window: (u64, u64),
) -> Option<CriticalPath> {
    paths(f, b, Some((bm, insts)), times, waits, window)
}

/// The critical path split by phase where the trace has phases, as
/// `pmtrace report` gives it, with the weighted one beside it when the
/// block's messages and instances are given.
pub fn paths<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    weighted: Option<(&BlockMessages, &Insts)>,
    times: &Times,
    waits: &[Wait],
    window: (u64, u64),
) -> Option<CriticalPath> {
    let spans = phases::spans(&b.trace, times);
    let mut any = [u64::from(!PhaseTimeline::new(&b.trace, &spans).is_empty())];
    f.max(&mut any);
    let keep = any[0] == 1;
    let (walk, hops, mut mine) = plain(f, b, times, waits, window, keep);
    let found =
        weighted.map(|(bm, insts)| weighted::compute(f, b, bm, insts, times, waits, window, keep));
    if let Some(found) = &found {
        mine.extend(&found.names);
    }
    let names = names_at_zero(f, b, &mine);
    let timeline = keep.then(|| {
        let on_path: BTreeSet<u32> = [walk.as_ref(), found.as_ref().and_then(|x| x.walk.as_ref())]
            .into_iter()
            .flatten()
            .flat_map(|w| w.all.iter().flatten().map(|s| s.rank))
            .collect();
        timeline_at_zero(f, b, times, &on_path)
    });
    let ranks = sum_of(f, b.trace.ranks.len() as u64) as usize;
    let walk = walk?;
    let function =
        |rank: u32, activity: u32| names.get(&(rank, activity)).cloned().unwrap_or_default();
    let summary = |walk, hops, is_weighted| {
        critical::summarize_with(
            times.base(),
            &function,
            walk,
            hops,
            window,
            is_weighted,
            timeline.as_ref().and_then(Option::as_ref),
        )
    };
    let plain = summary(walk, hops, false);
    Some(match found {
        Some(found) => {
            let weighted = summary(found.walk?, found.hops, true);
            critical::with_weighted(plain, weighted, found.dropped_edges, ranks)
        }
        None => plain,
    })
}

/// The phase changes of the ranks `on_path` (known at process 0) from
/// the blocks that hold them, as one timeline at process 0.
fn timeline_at_zero<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    times: &Times,
    on_path: &BTreeSet<u32>,
) -> Option<PhaseTimeline> {
    let mut o = Out::default();
    if f.index() == 0 {
        for &r in on_path {
            o.u32(r);
        }
    }
    let asked = f.all_gather(o.0).swap_remove(0);
    let mut wanted = Vec::new();
    let mut i = In::new(&asked);
    while !i.done() {
        let r = i.u32();
        if b.trace.rank(r).is_some() {
            wanted.push(r);
        }
    }
    let spans = phases::spans(&b.trace, times);
    let mine = PhaseTimeline::new(&b.trace, &spans);
    let mut o = Out::default();
    for r in wanted {
        let ch = mine.changes_of(r);
        o.u32(r).u64(ch.len() as u64);
        for (t, name) in ch {
            o.u64(t);
            match name {
                Some(n) => o.u8(1).str(n),
                None => o.u8(0),
            };
        }
    }
    let got = f.gather(o.0);
    (f.index() == 0).then(|| {
        let mut ranks = Vec::new();
        for bytes in &got {
            let mut i = In::new(bytes);
            while !i.done() {
                let r = i.u32();
                let n = i.u64();
                let ch = (0..n)
                    .map(|_| (i.u64(), (i.u8() == 1).then(|| i.str())))
                    .collect();
                ranks.push((r, ch));
            }
        }
        PhaseTimeline::of_changes(ranks)
    })
}

/// The names of the functions (rank, function id) that blocks name, at
/// process 0 (empty elsewhere).
fn names_at_zero<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    mine: &BTreeSet<(u32, u32)>,
) -> BTreeMap<(u32, u32), String> {
    let mut o = Out::default();
    for &(rank, activity) in mine {
        let name = (b.trace.held(rank).header.functions.get(activity as usize))
            .map(|f| f.name.clone())
            .unwrap_or_default();
        o.u32(rank).u32(activity).str(&name);
    }
    let mut names = BTreeMap::new();
    for bytes in f.gather(o.0) {
        let mut i = In::new(&bytes);
        while !i.done() {
            let k = (i.u32(), i.u32());
            names.insert(k, i.str());
        }
    }
    names
}

/// The plain walk over the window: at process 0 the walk (every stretch
/// kept if `keep`), the hops, and the (rank, function) pairs this block
/// passed on its ranks.
fn plain<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    times: &Times,
    waits: &[Wait],
    (from, to): (u64, u64),
    keep: bool,
) -> (Option<Walk>, u64, BTreeSet<(u32, u32)>) {
    let trace = &b.trace;
    let me = f.index();
    let lookup = critical::LargestWaits::new(waits);
    let waited = |at: EventRef| lookup.get(at);
    let limit = sum_of(f, trace.events()) as usize * 2 + 16;
    let start = end_point(f, b, times, to);
    let token = start
        .filter(|(rank, _)| b.blocks.owner(*rank) == me)
        .map(|(rank, t)| {
            (
                Cursor::start(trace, times, rank, t),
                None::<(EventRef, u64)>,
                0u64,
            )
        });
    let mut log: Vec<(u64, u32, u32, u64, u64)> = Vec::new();
    let hops = rounds::pass_token(
        f,
        token,
        start.is_none(),
        |(mut c, mut pending, mut seq)| loop {
            if let Some((cause, resumed)) = pending {
                let to = b.blocks.owner(cause.rank);
                if to != me {
                    return Went::On(to, (c, pending, seq));
                }
                pending = None;
                if !c.land(trace, times, cause, resumed) {
                    return Went::Ended(c.hops);
                }
            }
            let mut push = |rank, activity, a, b| {
                log.push((seq, rank, activity, a, b));
                seq += 1;
            };
            match c.step(trace, times, from, limit, &waited, &mut push) {
                Step::Go => {}
                Step::Done => return Went::Ended(c.hops),
                Step::Hop { cause, resumed } => pending = Some((cause, resumed)),
            }
        },
    );
    let names = (log.iter())
        .filter(|e| e.2 != COMPUTING)
        .map(|e| (e.1, e.2))
        .collect();
    // Process 0 adds the logs up in the walk's order.
    let mut o = Out::default();
    for &(seq, rank, activity, a, b) in &log {
        o.u64(seq).u32(rank).u32(activity).u64(a).u64(b);
    }
    let got = f.gather(o.0);
    if me != 0 {
        return (None, hops, names);
    }
    let mut all: Vec<(u64, u32, u32, u64, u64)> = Vec::new();
    for bytes in &got {
        let mut i = In::new(bytes);
        while !i.done() {
            all.push((i.u64(), i.u32(), i.u32(), i.u64(), i.u64()));
        }
    }
    all.sort_unstable_by_key(|e| e.0);
    let mut walk = if keep {
        Walk::keeping(from, to)
    } else {
        Walk::new(from, to)
    };
    for (_, rank, activity, a, b) in all {
        walk.push(rank, activity, a, b);
    }
    walk.flush();
    (Some(walk), hops, names)
}
