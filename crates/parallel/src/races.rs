//! Message races over blocks ([`pmtrace_report::races`]).
//!
//! A wildcard receive's candidates are the later receives of its own rank,
//! so each block finds the races of its ranks, as the serial code does, on
//! the clocks of the race rules replayed over blocks
//! ([`crate::clocks::replay`]: a send received in another block brings its
//! clock, and its lazy vector, there). Process 0 adds up the counts and
//! lists the sites in block order, which is rank order, and the races in
//! their order.

use pmtrace_matching::clocks::{PartPlan, PartVectors};
use pmtrace_report::races::{self, Race, RaceCall, RaceMessage, RaceSite, Races};

use crate::block::Block;
use crate::fabric::Fabric;
use crate::messages::BlockMessages;
use crate::wire::{In, Out};

/// The races of the whole trace on process 0 (`None` elsewhere); `vector`:
/// LVCP's vector clocks (exact), else LLCP's Lamport clocks.
pub fn find<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    bm: &BlockMessages,
    vector: bool,
) -> Option<Races> {
    let m = &bm.m;
    let wild = if b.trace.ranks.is_empty() {
        Vec::new()
    } else {
        races::wildcards_of(&b.trace, m, bm.own_recvs)
    };
    let probed = races::probed_receives(m, &wild);
    let plan = PartPlan::new(&b.trace, m);
    let vectors = if vector {
        PartVectors::Lazy
    } else {
        PartVectors::None
    };
    let clocks = crate::clocks::replay(f, b, bm, &plan, true, vectors, Some(&probed)).races(vector);
    let mut o = Out::default();
    if !b.trace.ranks.is_empty() {
        put(&mut o, &Races::build(&b.trace, m, &wild, &clocks));
    }
    let got = f.gather(o.0);
    if f.index() != 0 {
        return None;
    }
    let mut all = Races {
        mode: clocks.mode,
        exact: clocks.mode == "vector",
        wildcard_receives: 0,
        racy_receives: 0,
        alternatives: 0,
        unresolved: 0,
        sites: Vec::new(),
        races: Vec::new(),
    };
    for bytes in got.iter().filter(|b| !b.is_empty()) {
        let part = get(&mut In::new(bytes));
        all.wildcard_receives += part.wildcard_receives;
        all.racy_receives += part.racy_receives;
        all.alternatives += part.alternatives;
        all.unresolved += part.unresolved;
        all.sites.extend(part.sites);
        all.races.extend(part.races);
    }
    all.races.sort_unstable_by_key(Race::order);
    Some(all)
}

fn put_msg(o: &mut Out, m: &RaceMessage) {
    o.u32(m.source).u64(m.message_id);
}

fn get_msg(i: &mut In) -> RaceMessage {
    RaceMessage {
        source: i.u32(),
        message_id: i.u64(),
    }
}

/// A block's races (its mode aside).
fn put(o: &mut Out, r: &Races) {
    o.u64(r.wildcard_receives)
        .u64(r.racy_receives)
        .u64(r.alternatives)
        .u64(r.unresolved);
    o.u64(r.sites.len() as u64);
    for s in &r.sites {
        o.u32(s.rank)
            .str(&s.function)
            .u64(s.comm)
            .i32(s.tag)
            .u64(s.receives)
            .u64(s.racy)
            .u32s(&s.matched_sources)
            .u32s(&s.other_sources);
    }
    o.u64(r.races.len() as u64);
    for x in &r.races {
        o.u32(x.rank)
            .u32(x.thread)
            .str(&x.call.function)
            .u32(x.call.position)
            .u64(x.comm)
            .i32(x.tag);
        put_msg(o, &x.matched);
        o.u64(x.alternatives.len() as u64);
        for a in &x.alternatives {
            put_msg(o, a);
        }
    }
}

fn get(i: &mut In) -> Races {
    let (wildcard_receives, racy_receives, alternatives, unresolved) =
        (i.u64(), i.u64(), i.u64(), i.u64());
    let sites = (0..i.u64())
        .map(|_| RaceSite {
            rank: i.u32(),
            function: i.str(),
            comm: i.u64(),
            tag: i.i32(),
            receives: i.u64(),
            racy: i.u64(),
            matched_sources: i.u32s(),
            other_sources: i.u32s(),
        })
        .collect();
    let races = (0..i.u64())
        .map(|_| Race {
            rank: i.u32(),
            thread: i.u32(),
            call: RaceCall {
                function: i.str(),
                position: i.u32(),
            },
            comm: i.u64(),
            tag: i.i32(),
            matched: get_msg(i),
            alternatives: (0..i.u64()).map(|_| get_msg(i)).collect(),
        })
        .collect();
    Races {
        mode: "",
        exact: false,
        wildcard_receives,
        racy_receives,
        alternatives,
        unresolved,
        sites,
        races,
    }
}
