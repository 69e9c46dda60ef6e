//! Message races: for every wildcard receive, the sends that could have
//! matched it instead (`pmtrace races`).
//!
//! **What counts as a wildcard receive.** A receive posted with
//! `MPI_ANY_SOURCE` (blocking, nonblocking, persistent, the receive half of
//! a sendrecv), a message matched by a wildcard `MPI_Mprobe`/`MPI_Improbe`
//! and received by `MPI_Mrecv`/`MPI_Imrecv`, and a wildcard
//! `MPI_Probe`/`MPI_Iprobe` that found a message which the next receive
//! from that source and tag then took: there the probe is the point where
//! the source was chosen, so the probe is the race's call.
//!
//! **The rule** (`003_…` §5.1–5.2). A wildcard receive `r` on rank `i`
//! matched a message from source `a`. A message `m` from another source,
//! received by a receive `r′` of rank `i` posted after `r` on the same
//! communicator, with a tag `r` accepts, could have matched `r` when it is
//! concurrent with `r` under the matches-before order: `m` is *late*
//! (`m.clock ≤ r.clock`) and `m.clock < r′.clock` (Theorems 5.3, 5.5).
//! Clocks are those of the rules, computed from the whole trace
//! ([`RaceClocks`]):
//! - `vector` mode (LVCP): the entry for rank `i` of the sender's lazy
//!   vector clock, against `r`'s own entry when it matched. This is exact:
//!   it finds every concurrent send, and only those.
//! - `lamport` mode (LLCP): Lamport clocks. Every send it reports is a real
//!   alternative, but where several wildcard receives race on ranks whose
//!   clocks drifted apart it can miss some (Fig. 5.3).
//!
//! The candidates of `r` are the receives posted after it that carry a
//! message with `clock ≤ r.clock`. They are found with a tree of minimum
//! clocks over each (rank, communicator)'s receives in post order, so the
//! cost is O(log n) per wildcard receive and per candidate looked at.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};

use pmtrace_format::Kind;
use pmtrace_matching::clocks::RaceClocks;
use pmtrace_matching::matching::{Messages, RecvHow};
use pmtrace_trace::read::{EventRef, Trace};
use pmtrace_trace::wire::{In, Out, Wire};
use pmtrace_trace::Payload;
use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;

/// A message, as a race names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct RaceMessage {
    /// World rank of its sender.
    pub source: u32,
    /// The id it carried (`thread << 40 | n`; 0 if unknown).
    pub message_id: u64,
}

/// The call where a wildcard receive chose its source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RaceCall {
    pub function: String,
    /// Position among the thread's records (from 0).
    pub position: u32,
}

/// One wildcard receive that could have matched another message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Race {
    pub rank: u32,
    pub thread: u32,
    pub call: RaceCall,
    /// Global id of the communicator.
    pub comm: u64,
    /// The tag the receive accepted (`MPI_ANY_TAG` as the MPI defines it).
    pub tag: i32,
    pub matched: RaceMessage,
    pub alternatives: Vec<RaceMessage>,
}

/// The races of one receive site: one rank's wildcard receives with the
/// same function, communicator and tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RaceSite {
    pub rank: u32,
    pub function: String,
    pub comm: u64,
    pub tag: i32,
    pub receives: u64,
    pub racy: u64,
    /// Sources its receives matched in this run.
    pub matched_sources: Vec<u32>,
    /// Sources a racy receive could have matched instead.
    pub other_sources: Vec<u32>,
}

/// `pmtrace races --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Races {
    /// "vector" (exact) or "lamport" (sound, may miss races).
    pub mode: &'static str,
    pub exact: bool,
    pub wildcard_receives: u64,
    /// Wildcard receives with at least one alternative.
    pub racy_receives: u64,
    /// (receive, alternative send) pairs.
    pub alternatives: u64,
    /// Wildcard receives whose message is unknown (no matched send), left out.
    pub unresolved: u64,
    pub sites: Vec<RaceSite>,
    pub races: Vec<Race>,
}

impl Race {
    /// The call where the receive chose its source.
    pub fn at(&self) -> EventRef {
        EventRef {
            rank: self.rank,
            thread: self.thread,
            index: self.call.position,
        }
    }
}

impl Wire for RaceMessage {
    fn put(&self, o: &mut Out) {
        o.u32(self.source).u64(self.message_id);
    }
    fn get(i: &mut In) -> RaceMessage {
        RaceMessage {
            source: i.u32(),
            message_id: i.u64(),
        }
    }
}

impl Wire for RaceSite {
    fn put(&self, o: &mut Out) {
        o.u32(self.rank)
            .str(&self.function)
            .u64(self.comm)
            .i32(self.tag);
        o.u64(self.receives).u64(self.racy);
        o.u32s(&self.matched_sources).u32s(&self.other_sources);
    }
    fn get(i: &mut In) -> RaceSite {
        RaceSite {
            rank: i.u32(),
            function: i.str(),
            comm: i.u64(),
            tag: i.i32(),
            receives: i.u64(),
            racy: i.u64(),
            matched_sources: i.u32s(),
            other_sources: i.u32s(),
        }
    }
}

impl Wire for Race {
    fn put(&self, o: &mut Out) {
        o.u32(self.rank).u32(self.thread);
        o.str(&self.call.function).u32(self.call.position);
        o.u64(self.comm).i32(self.tag);
        o.put(&self.matched).put(&self.alternatives);
    }
    fn get(i: &mut In) -> Race {
        Race {
            rank: i.u32(),
            thread: i.u32(),
            call: RaceCall {
                function: i.str(),
                position: i.u32(),
            },
            comm: i.u64(),
            tag: i.i32(),
            matched: i.get(),
            alternatives: i.get(),
        }
    }
}

/// A block's races, its mode aside (what `pmtrace-mpi` merges).
impl Wire for Races {
    fn put(&self, o: &mut Out) {
        o.u64(self.wildcard_receives).u64(self.racy_receives);
        o.u64(self.alternatives).u64(self.unresolved);
        o.put(&self.sites).put(&self.races);
    }
    fn get(i: &mut In) -> Races {
        Races {
            mode: "",
            exact: false,
            wildcard_receives: i.u64(),
            racy_receives: i.u64(),
            alternatives: i.u64(),
            unresolved: i.u64(),
            sites: i.get(),
            races: i.get(),
        }
    }
}

/// A receive site: rank, function, communicator, tag.
impl Race {
    /// The order races are listed in: by call, then by the message taken
    /// (its sender too, since ids count per sender).
    pub fn order(&self) -> (u32, u32, u32, u64, u32) {
        (
            self.rank,
            self.thread,
            self.call.position,
            self.matched.message_id,
            self.matched.source,
        )
    }
}

type SiteKey = (u32, String, u64, i32);
/// A site's receives, racy receives, matched and other sources.
type SiteTally = (u64, u64, BTreeSet<u32>, BTreeSet<u32>);

/// A wildcard receive to test.
pub struct Wild {
    /// The receive that took its message (index into `Messages::recvs`).
    pub recv: usize,
    /// Where the source was chosen (the receive's posting call, or a probe).
    pub call: EventRef,
    /// The tag it accepted, as posted.
    pub tag: i32,
}

/// A minimum tree over clocks, to list the positions past `from` whose
/// clock is at most a bound.
struct MinTree {
    n: usize,
    min: Vec<u64>,
}

impl MinTree {
    fn new(values: &[u64]) -> MinTree {
        let n = values.len().next_power_of_two().max(1);
        let mut min = vec![u64::MAX; 2 * n];
        min[n..n + values.len()].copy_from_slice(values);
        for i in (1..n).rev() {
            min[i] = min[2 * i].min(min[2 * i + 1]);
        }
        MinTree { n, min }
    }

    /// Calls `f` with every position ≥ `from` whose value is ≤ `bound`, in order.
    fn each_at_most(&self, from: usize, bound: u64, f: &mut impl FnMut(usize)) {
        self.walk(1, 0, self.n, from, bound, f);
    }

    fn walk(
        &self,
        node: usize,
        lo: usize,
        hi: usize,
        from: usize,
        bound: u64,
        f: &mut impl FnMut(usize),
    ) {
        if hi <= from || self.min[node] > bound {
            return;
        }
        if hi - lo == 1 {
            f(lo);
            return;
        }
        let mid = (lo + hi) / 2;
        self.walk(2 * node, lo, mid, from, bound, f);
        self.walk(2 * node + 1, mid, hi, from, bound, f);
    }
}

/// For each wildcard receive of `wild`, the sends (indices into
/// `messages.sends`) that could have matched it instead, by `clocks`;
/// `None` where its own message is unknown.
pub fn alternatives(
    messages: &Messages,
    wild: &[Wild],
    clocks: &RaceClocks,
    any_tag: i32,
) -> Vec<Option<Vec<usize>>> {
    let send_of = send_of(messages);
    // Each (rank, communicator)'s receives in post order.
    let mut groups: HashMap<(u32, u64), Vec<usize>> = HashMap::default();
    for (ri, r) in messages.recvs.iter().enumerate() {
        groups.entry((r.dst, r.comm)).or_default().push(ri);
    }
    let mut at: Vec<(u32, u32)> = vec![(u32::MAX, 0); messages.recvs.len()];
    let mut trees: Vec<(Vec<usize>, MinTree)> = Vec::with_capacity(groups.len());
    for (_, mut list) in groups {
        let r = &messages.recvs;
        list.sort_unstable_by_key(|&ri| {
            (
                r[ri].posted_at,
                r[ri].post.thread,
                r[ri].post.index,
                r[ri].post_item,
            )
        });
        let clocks: Vec<u64> = list
            .iter()
            .map(|&ri| match send_of[ri] {
                usize::MAX => u64::MAX,
                si => clocks.send(si).unwrap_or(u64::MAX),
            })
            .collect();
        let g = trees.len() as u32;
        for (k, &ri) in list.iter().enumerate() {
            at[ri] = (g, k as u32);
        }
        trees.push((list, MinTree::new(&clocks)));
    }
    wild.iter()
        .map(|w| {
            let r = &messages.recvs[w.recv];
            let si = send_of[w.recv];
            let (Some(source), Some(bound), true) = (r.src, clocks.recv(w.recv), si != usize::MAX)
            else {
                return None;
            };
            let (g, k) = at[w.recv];
            let (list, tree) = &trees[g as usize];
            let mut found = Vec::new();
            tree.each_at_most(k as usize + 1, bound, &mut |j| {
                let rj = list[j];
                let o = &messages.recvs[rj];
                let (Some(src), sj) = (o.src, send_of[rj]) else {
                    return;
                };
                let tag_ok = w.tag == any_tag || w.tag == o.tag;
                let before_its_own = match (clocks.send(sj), clocks.recv(rj)) {
                    (Some(m), Some(r0)) => m < r0,
                    _ => false,
                };
                if src != source && tag_ok && before_its_own {
                    found.push(sj);
                }
            });
            Some(found)
        })
        .collect()
}

/// For each receive, its matched send (`usize::MAX`: none).
fn send_of(messages: &Messages) -> Vec<usize> {
    let mut v = vec![usize::MAX; messages.recvs.len()];
    for m in &messages.matched {
        v[m.recv] = m.send;
    }
    v
}

impl Races {
    /// The races of `trace`'s wildcard receives `wild` ([`wildcards`]), by
    /// `clocks` (computed with [`probed_receives`]).
    pub fn build(trace: &Trace, messages: &Messages, wild: &[Wild], clocks: &RaceClocks) -> Races {
        let mut races = Vec::new();
        let mut unresolved = 0;
        let mut sites: BTreeMap<SiteKey, SiteTally> = BTreeMap::new();
        let send_of = send_of(messages);
        let found = alternatives(messages, wild, clocks, trace.constants().any_tag);
        for (w, found) in wild.iter().zip(found) {
            let r = &messages.recvs[w.recv];
            let si = send_of[w.recv];
            let (Some(source), Some(found)) = (r.src, found) else {
                unresolved += 1;
                continue;
            };
            let function = trace
                .held(w.call.rank)
                .thread(w.call.thread)
                .and_then(|t| t.records.func(w.call.pos()))
                .map_or("?", |f| trace.held(w.call.rank).function_name(f))
                .to_owned();
            let site = sites
                .entry((r.dst, function.clone(), r.comm, w.tag))
                .or_default();
            site.0 += 1;
            site.2.insert(source);
            let mut alternatives: Vec<RaceMessage> = found
                .iter()
                .map(|&sj| RaceMessage {
                    source: messages.sends[sj].src,
                    message_id: messages.send_ids.get(sj).copied().unwrap_or(0),
                })
                .collect();
            if alternatives.is_empty() {
                continue;
            }
            alternatives.sort_unstable();
            site.1 += 1;
            site.3.extend(alternatives.iter().map(|a| a.source));
            races.push(Race {
                rank: r.dst,
                thread: w.call.thread,
                call: RaceCall {
                    function,
                    position: w.call.index,
                },
                comm: r.comm,
                tag: w.tag,
                matched: RaceMessage {
                    source,
                    message_id: messages.send_ids.get(si).copied().unwrap_or(0),
                },
                alternatives,
            });
        }
        races.sort_unstable_by_key(Race::order);
        Races {
            mode: clocks.mode,
            exact: clocks.mode == "vector",
            wildcard_receives: wild.len() as u64,
            racy_receives: races.len() as u64,
            alternatives: races.iter().map(|r| r.alternatives.len() as u64).sum(),
            unresolved,
            sites: sites
                .into_iter()
                .map(
                    |((rank, function, comm, tag), (receives, racy, matched, other))| RaceSite {
                        rank,
                        function,
                        comm,
                        tag,
                        receives,
                        racy,
                        matched_sources: matched.into_iter().collect(),
                        other_sources: other.into_iter().collect(),
                    },
                )
                .collect(),
            races,
        }
    }

    /// The races for a person: by receive site, then the outcomes a test
    /// would have to cover.
    /// The races as text; `any_tag` is the trace's `MPI_ANY_TAG`.
    pub fn write_text(&self, any_tag: i32, out: &mut impl Write) -> io::Result<()> {
        let tag = |t: i32| {
            if t == any_tag {
                "any".to_owned()
            } else {
                t.to_string()
            }
        };
        writeln!(
            out,
            "{} wildcard receive{}, {} racy, {} alternative match{} ({} clocks: {})",
            self.wildcard_receives,
            plural(self.wildcard_receives),
            self.racy_receives,
            self.alternatives,
            if self.alternatives == 1 { "" } else { "es" },
            self.mode,
            if self.exact {
                "exact, every concurrent send is found"
            } else {
                "every race shown is real, but some may be missed; record with PMTRACE_CLOCKS=vector or run with --clocks vector for all"
            }
        )?;
        if self.unresolved > 0 {
            writeln!(
                out,
                "{} wildcard receive{} left out: the message it took has no matched send",
                self.unresolved,
                plural(self.unresolved)
            )?;
        }
        for s in &self.sites {
            writeln!(
                out,
                "\nrank {} {} (communicator {}, tag {}): {} of {} receive{} racy",
                s.rank,
                s.function,
                s.comm,
                tag(s.tag),
                s.racy,
                s.receives,
                plural(s.receives)
            )?;
            writeln!(out, "  matched from {}", list(&s.matched_sources))?;
            if s.racy == 0 {
                writeln!(
                    out,
                    "  deterministic in this run: no other send could have matched"
                )?;
                continue;
            }
            let all: BTreeSet<u32> = s
                .matched_sources
                .iter()
                .chain(&s.other_sources)
                .copied()
                .collect();
            writeln!(
                out,
                "  could also have matched {}: a test must see each racy receive take a message from each of {}",
                list(&s.other_sources),
                list(&all.into_iter().collect::<Vec<_>>())
            )?;
            let shown: Vec<&Race> = self
                .races
                .iter()
                .filter(|r| {
                    r.rank == s.rank
                        && r.call.function == s.function
                        && r.comm == s.comm
                        && r.tag == s.tag
                })
                .take(5)
                .collect();
            for r in &shown {
                writeln!(
                    out,
                    "  thread {} call {}: took {} from {}, could have taken {}",
                    r.thread,
                    r.call.position,
                    msg_id(r.matched.message_id),
                    r.matched.source,
                    r.alternatives
                        .iter()
                        .map(|a| format!("{} from {}", msg_id(a.message_id), a.source))
                        .collect::<Vec<_>>()
                        .join(", ")
                )?;
            }
            if s.racy as usize > shown.len() {
                writeln!(
                    out,
                    "  … and {} more (--json lists all)",
                    s.racy as usize - shown.len()
                )?;
            }
        }
        Ok(())
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn list(v: &[u32]) -> String {
    let s: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("{{{}}}", s.join(", "))
}

/// A message id as thread and number.
fn msg_id(id: u64) -> String {
    let shift = pmtrace_format::record::MSG_THREAD_SHIFT;
    format!("message {}.{}", id >> shift, id & ((1 << shift) - 1))
}

/// The receives whose message a wildcard probe chose (`RaceClocks::compute`).
pub fn probed_receives(messages: &Messages, wild: &[Wild]) -> Vec<bool> {
    let mut v = vec![false; messages.recvs.len()];
    for w in wild {
        if !messages.recvs[w.recv].wildcard {
            v[w.recv] = true;
        }
    }
    v
}

/// Every wildcard receive of the trace, with the call that chose its source.
pub fn wildcards(trace: &Trace, messages: &Messages) -> Vec<Wild> {
    wildcards_of(trace, messages, messages.recvs.len())
}

/// The wildcard receives among `messages.recvs[..own]`, the receives of
/// `trace`'s ranks (a block's, whose messages hold other blocks' receives
/// after its own).
pub fn wildcards_of(trace: &Trace, messages: &Messages, own: usize) -> Vec<Wild> {
    let c = trace.constants();
    let mut out = Vec::new();
    for (ri, r) in messages.recvs[..own].iter().enumerate() {
        if r.wildcard {
            out.push(Wild {
                recv: ri,
                call: r.post,
                tag: r.posted_tag,
            });
        } else if r.how == RecvHow::Probed {
            // Received by Mrecv/Imrecv: wildcard if its Mprobe was.
            let rank = &trace.held(r.post.rank);
            let probe = rank
                .thread(r.post.thread)
                .and_then(|t| t.records.call(r.post.pos()));
            if let Some(Payload::Probe { src, tag, .. }) = probe.map(|p| p.payload) {
                if src == c.any_source {
                    out.push(Wild {
                        recv: ri,
                        call: r.post,
                        tag,
                    });
                }
            }
        }
    }
    out.extend(probed(trace, messages));
    out
}

/// Wildcard `MPI_Probe`/`MPI_Iprobe` calls that found a message, each with
/// the receive that took it: the first receive of the same thread posted
/// after the probe, from the source and with the tag it found.
fn probed(trace: &Trace, messages: &Messages) -> Vec<Wild> {
    let c = trace.constants();
    // Each thread's receives in post order.
    let mut posts: HashMap<(u32, u32), Vec<(u64, usize)>> = HashMap::default();
    for (ri, r) in messages.recvs.iter().enumerate() {
        if r.how != RecvHow::Probed {
            posts
                .entry((r.dst, r.post.thread))
                .or_default()
                .push((r.posted_at, ri));
        }
    }
    for list in posts.values_mut() {
        list.sort_unstable();
    }
    let mut out = Vec::new();
    for rank in &trace.ranks {
        for (at, call) in rank.payload_calls_of(|k| matches!(k, Kind::Probe | Kind::Iprobe)) {
            let Payload::Probe {
                src,
                tag,
                comm,
                status,
                ..
            } = call.payload
            else {
                continue;
            };
            if src != c.any_source || status.empty {
                continue;
            }
            let (Some(found), Some(def)) = (status.source, rank.comm_at(comm, call.t_start)) else {
                continue;
            };
            let gid = def.global_id;
            let Some(from) = u32::try_from(found)
                .ok()
                .and_then(|f| trace.comms.get(gid)?.to_world(rank.rank, f))
            else {
                continue;
            };
            let found_tag = status.tag.unwrap_or(tag);
            let Some(list) = posts.get(&(rank.rank, at.thread)) else {
                continue;
            };
            let first = list.partition_point(|&(t, _)| t < call.t_end);
            let took = list[first..].iter().map(|&(_, ri)| ri).find(|&ri| {
                let r = &messages.recvs[ri];
                r.comm == gid && r.src == Some(from) && r.tag == found_tag
            });
            // A wildcard receive after the probe is a race site of its own.
            if let Some(ri) = took.filter(|&ri| !messages.recvs[ri].wildcard) {
                out.push(Wild {
                    recv: ri,
                    call: at,
                    tag,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::MinTree;

    #[test]
    fn the_min_tree_lists_every_position_at_most_the_bound() {
        let values = [5, 1, 7, 3, 3, 9, 0];
        let t = MinTree::new(&values);
        for from in 0..=values.len() {
            for bound in 0..10 {
                let mut got = Vec::new();
                t.each_at_most(from, bound, &mut |j| got.push(j));
                let want: Vec<usize> = (from..values.len())
                    .filter(|&j| values[j] <= bound)
                    .collect();
                assert_eq!(got, want, "from {from} bound {bound}");
            }
        }
    }
}
