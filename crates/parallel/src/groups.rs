//! Clock groups and hosts numbered across the whole trace, as a whole
//! trace's sync numbers them: in order of first appearance, rank by rank.
//! Ranks share a clock group when one leader measured their offsets (they
//! read one clock); without offsets, when they share a host and ran
//! without a simulated clock; under a simulated clock each rank is a group.

use rustc_hash::FxHashMap as HashMap;

use pmtrace_trace::Trace;

use crate::fabric::Fabric;
use crate::wire::{In, Out};

/// Every rank's clock group and host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Groups {
    /// By world rank.
    pub group: Vec<u32>,
    pub host: Vec<u32>,
}

impl Groups {
    pub fn count(&self) -> usize {
        self.group
            .iter()
            .map(|&g| g as usize + 1)
            .max()
            .unwrap_or(0)
    }
}

/// Numbers `keys` (each block's, in rank order) by first appearance over
/// the blocks in order: each block sends its distinct keys in the order it
/// met them, and every process merges them alike.
fn number<F: Fabric + ?Sized, K: Clone + Eq + std::hash::Hash>(
    f: &F,
    keys: &[K],
    put: impl Fn(&mut Out, &K),
    get: impl Fn(&mut In) -> K,
) -> Vec<u32> {
    let mut seen: HashMap<K, ()> = HashMap::default();
    let mut out = Out::default();
    for k in keys {
        if seen.insert(k.clone(), ()).is_none() {
            put(&mut out, k);
        }
    }
    let mut ids: HashMap<K, u32> = HashMap::default();
    for bytes in f.all_gather(out.0) {
        let mut i = In::new(&bytes);
        while !i.done() {
            let k = get(&mut i);
            let n = ids.len() as u32;
            ids.entry(k).or_insert(n);
        }
    }
    keys.iter().map(|k| ids[k]).collect()
}

/// The clock group and host of every rank of the trace.
pub fn compute<F: Fabric + ?Sized>(f: &F, trace: &Trace) -> Groups {
    let names: Vec<String> = trace
        .ranks
        .iter()
        .map(|r| r.header.hostname.clone())
        .collect();
    let hosts = number(
        f,
        &names,
        |o, s| {
            o.str(s);
        },
        |i| i.str(),
    );
    let keys: Vec<(u32, u64)> = trace
        .ranks
        .iter()
        .zip(&hosts)
        .map(
            |(r, &host)| match (&r.header.clock_sim, &r.header.offset_init) {
                (Some(_), _) => (u32::MAX, u64::from(r.rank)),
                (None, Some(o)) => (0, u64::from(o.measured_by)),
                (None, None) => (1, u64::from(host)),
            },
        )
        .collect();
    let groups = number(
        f,
        &keys,
        |o, k| {
            o.u32(k.0).u64(k.1);
        },
        |i| (i.u32(), i.u64()),
    );
    let mut out = Out::default();
    for (g, h) in groups.iter().zip(&hosts) {
        out.u32(*g).u32(*h);
    }
    let mut all = Groups {
        group: Vec::with_capacity(trace.world_size as usize),
        host: Vec::with_capacity(trace.world_size as usize),
    };
    for bytes in f.all_gather(out.0) {
        let mut i = In::new(&bytes);
        while !i.done() {
            all.group.push(i.u32());
            all.host.push(i.u32());
        }
    }
    all
}
