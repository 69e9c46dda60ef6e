//! User phases: what `pmtrace_phase_begin(name)` / `pmtrace_phase_end()`
//! (include/pmtrace.h) and `MPI_Pcontrol` marked, and the report's view of
//! each phase.
//!
//! A thread's phases nest: a begin opens a phase, an end closes the
//! innermost one. `MPI_Pcontrol(k)` with k ≥ 2 opens the phase "Pcontrol k"
//! (closing an earlier Pcontrol phase of the thread); any level but 0
//! closes it. `MPI_Pcontrol(0)` pauses recording until `MPI_Pcontrol(1)`:
//! a pause is kept as a span too. A phase still open at the thread's last
//! call ends there.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;

use pmtrace_format::Kind;
use pmtrace_trace::read::Trace;
use serde::Serialize;

use crate::times::Times;

pub use pmtrace_trace::phases::{PhaseSpan, PAUSED};

/// Every phase of `trace` on the report's time base.
pub fn spans(trace: &Trace, times: &Times) -> Vec<PhaseSpan> {
    pmtrace_trace::phases::spans(trace, |at| times.of(at))
}

/// One phase in the report: its time and calls on each rank's main thread.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Phase {
    pub name: String,
    /// Times it was entered, over all ranks and threads.
    pub spans: u64,
    /// Wall time in it, summed over ranks (main threads).
    pub ns: u64,
    pub computation_ns: u64,
    pub mpi_ns: u64,
    /// Max over ranks of the computation in it, over the mean, minus 1.
    pub load_imbalance: f64,
    pub per_rank: Vec<PhaseRank>,
    /// The MPI functions that took the most time in it (at most 10).
    pub functions: Vec<PhaseFunction>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PhaseRank {
    pub rank: u32,
    pub ns: u64,
    pub computation_ns: u64,
    pub mpi_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PhaseFunction {
    pub name: String,
    pub calls: u64,
    pub ns: u64,
}

/// A phase's spans, per rank, and (calls, ns) per function.
pub type Tally = (u64, BTreeMap<u32, PhaseRank>, BTreeMap<String, (u64, u64)>);

/// How many functions a phase lists.
pub const FUNCTIONS_SHOWN: usize = 10;

/// The report's phases: per phase name (pauses left out), the time of
/// each rank's main thread in it, split into MPI calls and computation.
pub fn summarize(trace: &Trace, times: &Times, spans: &[PhaseSpan]) -> Vec<Phase> {
    finish(tally(trace, times, spans))
}

/// What the ranks of `trace` (or of a block) add to each phase.
pub fn tally(trace: &Trace, times: &Times, spans: &[PhaseSpan]) -> BTreeMap<String, Tally> {
    let mut names: BTreeMap<String, Tally> = BTreeMap::new();
    for s in spans {
        if s.name != PAUSED {
            names.entry(s.name.clone()).or_default().0 += 1;
        }
    }
    for rank in &trace.ranks {
        let Some(main) = rank.threads.first() else {
            continue;
        };
        // This rank's main-thread spans, in start order.
        let mine: Vec<&PhaseSpan> = spans
            .iter()
            .filter(|s| s.rank == rank.rank && s.thread == main.index && s.name != PAUSED)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let calls: Vec<(u32, u64, u64)> = times
            .calls(rank.rank, 0)
            .filter(|&(f, _, _)| rank.kind(f) != Kind::Phase)
            .collect();
        for s in mine {
            let (_, ranks, funcs) = names.get_mut(s.name.as_str()).expect("a named phase");
            let first = calls.partition_point(|c| c.2 <= s.from_ns);
            let mut mpi = 0u64;
            for &(f, a, b) in calls[first..].iter().take_while(|c| c.1 < s.to_ns) {
                let ns = b.min(s.to_ns).saturating_sub(a.max(s.from_ns));
                mpi += ns;
                let e = funcs.entry(rank.function_name(f).to_owned()).or_default();
                e.0 += 1;
                e.1 += ns;
            }
            let span = s.to_ns - s.from_ns;
            let r = ranks.entry(rank.rank).or_insert(PhaseRank {
                rank: rank.rank,
                ns: 0,
                computation_ns: 0,
                mpi_ns: 0,
            });
            r.ns += span;
            r.mpi_ns += mpi.min(span);
            r.computation_ns += span - mpi.min(span);
        }
    }
    names
}

/// The phases from the whole trace's tallies.
pub fn finish(names: BTreeMap<String, Tally>) -> Vec<Phase> {
    names
        .into_iter()
        .map(|(name, (n, ranks, funcs))| {
            let per_rank: Vec<PhaseRank> = ranks.into_values().collect();
            let comp: Vec<u64> = per_rank.iter().map(|r| r.computation_ns).collect();
            let mean = comp.iter().sum::<u64>() as f64 / comp.len().max(1) as f64;
            let max = comp.iter().copied().max().unwrap_or(0) as f64;
            let mut functions: Vec<PhaseFunction> = funcs
                .into_iter()
                .map(|(name, (calls, ns))| PhaseFunction { name, calls, ns })
                .collect();
            functions.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.name.cmp(&b.name)));
            functions.truncate(FUNCTIONS_SHOWN);
            Phase {
                name,
                spans: n,
                ns: per_rank.iter().map(|r| r.ns).sum(),
                computation_ns: comp.iter().sum(),
                mpi_ns: per_rank.iter().map(|r| r.mpi_ns).sum(),
                load_imbalance: if mean > 0.0 { max / mean - 1.0 } else { 0.0 },
                per_rank,
                functions,
            }
        })
        .collect()
}

/// Where a rank's innermost phase changes: (time, its name from then on,
/// or None outside every phase).
pub type Changes = Vec<(u64, Option<String>)>;

/// Each rank's innermost phase over time (main threads, pauses left out),
/// to split stretches of time by phase.
pub struct PhaseTimeline {
    pub names: Vec<String>,
    /// Per rank: (time, phase from then on: an index of `names`, or
    /// `NONE`), in time order.
    changes: HashMap<u32, Vec<(u64, u32)>>,
}

const NONE: u32 = u32::MAX;

impl PhaseTimeline {
    pub fn new(trace: &Trace, spans: &[PhaseSpan]) -> PhaseTimeline {
        let mut names: Vec<String> = Vec::new();
        let mut id = |n: &str| -> u32 {
            match names.iter().position(|x| x == n) {
                Some(i) => i as u32,
                None => {
                    names.push(n.to_owned());
                    (names.len() - 1) as u32
                }
            }
        };
        let mut changes: HashMap<u32, Vec<(u64, u32)>> = HashMap::default();
        for rank in &trace.ranks {
            let Some(main) = rank.threads.first() else {
                continue;
            };
            // Begins and ends in time order (an end before a begin at a tie),
            // the innermost open phase after each.
            let mut ev: Vec<(u64, bool, u32, u32)> = Vec::new();
            for s in spans
                .iter()
                .filter(|s| s.rank == rank.rank && s.thread == main.index && s.name != PAUSED)
            {
                let n = id(&s.name);
                ev.push((s.from_ns, true, s.depth, n));
                ev.push((s.to_ns, false, s.depth, n));
            }
            ev.sort_by_key(|&(t, begin, depth, _)| {
                (t, begin, if begin { depth } else { u32::MAX - depth })
            });
            let mut open: Vec<(u32, u32)> = Vec::new();
            let out = changes.entry(rank.rank).or_default();
            for (t, begin, depth, n) in ev {
                if begin {
                    open.push((depth, n));
                } else if let Some(i) = open.iter().rposition(|&(d, m)| d == depth && m == n) {
                    open.remove(i);
                }
                let now = open.iter().max_by_key(|x| x.0).map_or(NONE, |x| x.1);
                match out.last_mut() {
                    Some(last) if last.0 == t => last.1 = now,
                    _ => out.push((t, now)),
                }
            }
        }
        PhaseTimeline { names, changes }
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Where `rank`'s innermost phase changes: (time, the phase's name
    /// from then on, or None).
    pub fn changes_of(&self, rank: u32) -> Vec<(u64, Option<&str>)> {
        let name = |n: u32| (n != NONE).then(|| self.names[n as usize].as_str());
        self.changes
            .get(&rank)
            .map_or_else(Vec::new, |v| v.iter().map(|&(t, n)| (t, name(n))).collect())
    }

    /// The timeline of ranks' changes as [`PhaseTimeline::changes_of`]
    /// gives them.
    pub fn of_changes(ranks: Vec<(u32, Changes)>) -> PhaseTimeline {
        let mut names: Vec<String> = Vec::new();
        let mut changes: HashMap<u32, Vec<(u64, u32)>> = HashMap::default();
        for (rank, v) in ranks {
            let ids = v
                .into_iter()
                .map(|(t, n)| {
                    let id = n.map_or(NONE, |n| match names.iter().position(|x| *x == n) {
                        Some(i) => i as u32,
                        None => {
                            names.push(n);
                            (names.len() - 1) as u32
                        }
                    });
                    (t, id)
                })
                .collect();
            changes.insert(rank, ids);
        }
        PhaseTimeline { names, changes }
    }

    /// `a..b` on `rank` split where its innermost phase changes: (phase
    /// name, or None outside every phase; ns).
    pub fn split(&self, rank: u32, a: u64, b: u64, mut f: impl FnMut(Option<&str>, u64)) {
        let Some(ch) = self.changes.get(&rank) else {
            f(None, b - a);
            return;
        };
        let mut k = ch.partition_point(|c| c.0 <= a);
        let mut phase = if k == 0 { NONE } else { ch[k - 1].1 };
        let mut t = a;
        loop {
            let next = match ch.get(k) {
                Some(c) if c.0 < b => c.0,
                _ => b,
            };
            if next > t {
                f(
                    (phase != NONE).then(|| self.names[phase as usize].as_str()),
                    next - t,
                );
            }
            if next >= b {
                break;
            }
            phase = ch[k].1;
            k += 1;
            t = next;
        }
    }
}
