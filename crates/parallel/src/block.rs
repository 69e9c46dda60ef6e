//! Which process holds which ranks, and reading one block of a trace.
//!
//! Process `p` of `P` holds the world ranks `⌊p·N/P⌋ .. ⌊(p+1)·N/P⌋`: a
//! contiguous block of rank files, blocks differing by at most one rank
//! (a process holds none when P > N). It reads and models its block only.
//! What the block needs of other ranks is small and travels between
//! processes: the member lists of communicators that a rank outside the
//! block wrote (so that every communicator rank maps to a world rank).

use std::ops::Range;
use std::path::Path;

use pmtrace_format::record::CommDef;
use pmtrace_trace::comm::Comms;
use pmtrace_trace::read;
use pmtrace_trace::Trace;

use crate::fabric::{agree, Fabric};
use crate::wire::{In, Out};

/// N ranks over P processes in contiguous blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocks {
    pub ranks: u32,
    pub procs: u32,
}

impl Blocks {
    pub fn new(ranks: u32, procs: usize) -> Blocks {
        Blocks {
            ranks,
            procs: procs.max(1) as u32,
        }
    }

    fn start(&self, p: u64) -> u32 {
        (p * u64::from(self.ranks) / u64::from(self.procs)) as u32
    }

    /// The ranks process `p` holds.
    pub fn range(&self, p: usize) -> Range<u32> {
        self.start(p as u64)..self.start(p as u64 + 1)
    }

    /// The process that holds world rank `rank`.
    pub fn owner(&self, rank: u32) -> usize {
        // The largest p with ⌊p·N/P⌋ ≤ rank.
        ((u64::from(rank) + 1) * u64::from(self.procs)).div_ceil(u64::from(self.ranks).max(1))
            as usize
            - 1
    }
}

/// One process's share of a trace.
pub struct Block {
    /// The block's ranks, with every communicator of the trace resolved.
    pub trace: Trace,
    pub blocks: Blocks,
}

/// Reads this process's block of the trace in `dir`. Every process gets
/// the same error where any fails.
pub fn open<F: Fabric + ?Sized>(f: &F, dir: &Path) -> Result<Block, String> {
    let world = agree(f, read::world_size(dir).map_err(|e| e.to_string()))?;
    let blocks = Blocks::new(world, f.size());
    let mut trace = agree(
        f,
        Trace::open_block(dir, blocks.range(f.index())).map_err(|e| e.to_string()),
    )?;
    // Every block sees the world size rank 0 wrote.
    let mut sizes = [
        u64::from(trace.world_size),
        u64::from(u32::MAX - trace.world_size),
    ];
    f.max(&mut sizes);
    if sizes[0] != u64::from(world) || u64::from(u32::MAX) - sizes[1] != u64::from(world) {
        return agree(
            f,
            Err(format!(
                "corrupt trace: {}: ranks disagree on the world size",
                dir.display()
            )),
        );
    }
    let constants = constants_warnings(f, &trace, blocks.owner(0));
    let (comms, comm_warnings) = resolve_comms(f, &trace);
    trace.comms = comms;
    // Process 0 keeps the trace's warnings, as a whole trace's reader
    // gives them; the others keep none (each rank keeps its own).
    trace.warnings = match f.index() {
        0 => constants.into_iter().chain(comm_warnings).collect(),
        _ => Vec::new(),
    };
    Ok(Block { trace, blocks })
}

/// The ranks whose MPI constants differ from rank 0's (held by process
/// `zero`), one line each, in rank order, on every process.
fn constants_warnings<F: Fabric + ?Sized>(f: &F, trace: &Trace, zero: usize) -> Vec<String> {
    let rank0 = match trace.rank(0) {
        Some(r) => serde_json::to_vec(&r.header.constants).expect("constants serialize"),
        None => Vec::new(),
    };
    let rank0 = f.all_gather(rank0).swap_remove(zero);
    let mut out = Out::default();
    for r in &trace.ranks {
        if serde_json::to_vec(&r.header.constants).expect("constants serialize") != rank0 {
            out.str(&format!(
                "{}: MPI constants differ from rank 0's",
                r.file_name
            ));
        }
    }
    let mut lines = Vec::new();
    for bytes in f.all_gather(out.0) {
        let mut i = In::new(&bytes);
        while !i.done() {
            lines.push(i.str());
        }
    }
    lines
}

/// Communicators resolved from every rank's definitions, as a whole
/// trace's reader does: the definitions that carry member lists come from
/// every block, in rank order, then this block's own. With the warnings
/// the member lists gave.
fn resolve_comms<F: Fabric + ?Sized>(f: &F, trace: &Trace) -> (Comms, Vec<String>) {
    let mut out = Out::default();
    for rank in &trace.ranks {
        for def in rank.comm_defs().filter(|d| !d.members.is_empty()) {
            out.u32(rank.rank).put(def);
        }
    }
    let all = f.all_gather(out.0);
    let mut defs: Vec<(u32, CommDef)> = Vec::new();
    for bytes in &all {
        let mut i = In::new(bytes);
        while !i.done() {
            defs.push((i.u32(), i.get()));
        }
    }
    let own = trace
        .ranks
        .iter()
        .flat_map(|r| r.comm_defs().map(move |d| (r.rank, d)))
        .filter(|(_, d)| d.members.is_empty());
    let mut warnings = Vec::new();
    let comms = Comms::resolve(
        trace.world_size,
        defs.iter().map(|(w, d)| (*w, d)).chain(own),
        &mut warnings,
    );
    (comms, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_contiguous_and_owners_invert_them() {
        for ranks in [1u32, 2, 5, 7, 64, 65_536] {
            for procs in [1usize, 2, 3, 4, 8] {
                let b = Blocks::new(ranks, procs);
                let mut next = 0;
                for p in 0..procs {
                    let r = b.range(p);
                    assert_eq!(r.start, next);
                    assert!(r.len() as u32 <= ranks.div_ceil(procs as u32));
                    for rank in r.clone() {
                        assert_eq!(b.owner(rank), p, "rank {rank} of {ranks} over {procs}");
                    }
                    next = r.end;
                }
                assert_eq!(next, ranks);
            }
        }
        assert_eq!(Blocks::new(5, 2).range(0), 0..2);
        assert_eq!(Blocks::new(5, 2).range(1), 2..5);
        assert_eq!(Blocks::new(2, 3).range(0), 0..0);
    }
}
