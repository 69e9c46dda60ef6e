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
use pmtrace_report::races::{self, Race, Races};

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
        o.put(&Races::build(&b.trace, m, &wild, &clocks));
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
        let part: Races = In::new(bytes).get();
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
