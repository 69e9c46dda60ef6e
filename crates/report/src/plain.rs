//! The report's parts that add up over ranks: the profile, the message
//! and collective counts, the matrix, the first unmatched messages and
//! pending requests, what the trailers and headers say.
//!
//! [`Plain::of`] makes them for the ranks one process holds: the whole
//! trace in `pmtrace report`, a block in `pmtrace-mpi report`. The blocks'
//! parts, [merged](Plain::merge) in block order, are the whole trace's,
//! and [`Plain::into_report`] makes either into a report.
//!
//! A message is counted once in a run over blocks: its receive and its
//! pair by the receiver's block, its send by the sender's. A block's
//! messages hold its own sends and receives first (`own`), then those of
//! other blocks that it matched against.

use std::collections::BTreeMap;
use std::path::Path;

use pmtrace_matching::matching::{Messages, Violations};
use pmtrace_trace::read::Trace;
use pmtrace_trace::wire::{In, Out, Wire};
use rayon::prelude::*;

use crate::requests::{self, PendingRequest};
use crate::times::Times;
use crate::{
    count_by_rank, profile, spawned_worlds, CollectiveCounts, FunctionStats, MatrixCell,
    MessageCounts, RankSummary, Report, RunSummary, UnmatchedMessage, UNMATCHED_SHOWN,
};

/// The report's parts of some ranks.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plain {
    pub events: u64,
    /// The counts; `unmatched_first` holds the first unmatched sends only
    /// (the receives are `recvs_first` until [`Plain::into_report`]).
    pub messages: MessageCounts,
    pub recvs_first: Vec<UnmatchedMessage>,
    pub violations: Violations,
    /// Left to the caller, who holds the instances.
    pub collectives: CollectiveCounts,
    pub per_rank: Vec<RankSummary>,
    /// (sender, receiver) → (messages, bytes).
    pub matrix: BTreeMap<(u32, u32), (u64, u64)>,
    pub bytes_total: u64,
    pub bytes_payload: u64,
    pub incomplete_ranks: Vec<u32>,
    pub excluded_calls: BTreeMap<String, u64>,
    pub paused_calls: BTreeMap<String, u64>,
    /// The first rank's run (`None`: these parts hold no rank).
    pub run: Option<Option<RunSummary>>,
    pub warnings: Vec<String>,
}

fn add_counts(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, n) in from {
        *into.entry(k.clone()).or_default() += n;
    }
}

impl Plain {
    /// The parts of `trace`'s ranks, whose own sends and receives are the
    /// first `own` of `m`'s, on `times`, violations with μ `mu_ns`.
    pub fn of(
        trace: &Trace,
        m: &Messages,
        own: (usize, usize),
        times: &Times,
        mu_ns: u64,
    ) -> Plain {
        let (sends, recvs) = (&m.sends[..own.0], &m.recvs[..own.1]);
        let sent = count_by_rank(trace, sends.iter().map(|s| s.src));
        let received = count_by_rank(trace, recvs.iter().map(|r| r.dst));
        let per_rank = trace
            .ranks
            .par_iter()
            .map(|rank| profile(rank, m, &sent, &received))
            .collect();
        let unmatched_sends: Vec<usize> = (m.unmatched_sends.iter().copied())
            .filter(|&i| i < own.0)
            .collect();
        let unmatched_recvs: Vec<usize> = (m.unmatched_recvs.iter().copied())
            .filter(|&i| i < own.1)
            .collect();
        let matched = || m.matched.iter().filter(|p| p.recv < own.1);
        let (pending_requests, pending_first) = requests::pending(trace);
        let mut matrix: BTreeMap<(u32, u32), (u64, u64)> = BTreeMap::new();
        for s in sends {
            if let Some(dst) = s.dst {
                let cell = matrix.entry((s.src, dst)).or_default();
                cell.0 += 1;
                cell.1 += s.bytes;
            }
        }
        let (mut excluded_calls, mut paused_calls) = (BTreeMap::new(), BTreeMap::new());
        for t in trace.ranks.iter().filter_map(|r| r.trailer.as_ref()) {
            add_counts(&mut excluded_calls, &t.excluded);
            add_counts(&mut paused_calls, &t.paused);
        }
        let first = |i: &[usize], made: fn(&Messages, usize, &Times) -> UnmatchedMessage| {
            (i.iter().take(UNMATCHED_SHOWN))
                .map(|&i| made(m, i, times))
                .collect()
        };
        Plain {
            events: trace.events(),
            messages: MessageCounts {
                sent: sends.len() as u64,
                received: recvs.len() as u64,
                matched: matched().count() as u64,
                unmatched: (unmatched_sends.len() + unmatched_recvs.len()) as u64,
                unmatched_sends: unmatched_sends.len() as u64,
                unmatched_receives: unmatched_recvs.len() as u64,
                pending_receives: m.pending_receives,
                unresolved: (sends.iter().filter(|s| s.dst.is_none()).count()
                    + recvs.iter().filter(|r| r.src.is_none()).count())
                    as u64,
                bytes: sends.iter().map(|s| s.bytes).sum(),
                unmatched_first: first(&unmatched_sends, UnmatchedMessage::send),
                pending_requests,
                pending_first,
            },
            recvs_first: first(&unmatched_recvs, UnmatchedMessage::receive),
            violations: m.violations_of(matched(), mu_ns, |_, t| t),
            collectives: CollectiveCounts::default(),
            per_rank,
            matrix,
            bytes_total: trace.ranks.iter().map(|r| r.file_bytes).sum(),
            bytes_payload: trace.ranks.iter().map(|r| r.payload_bytes).sum(),
            incomplete_ranks: trace.incomplete_ranks(),
            excluded_calls,
            paused_calls,
            run: trace.ranks.first().map(|r| {
                r.header.run.as_ref().map(|run| RunSummary {
                    command_line: run.command_line.clone(),
                    mpi_library: r.header.mpi_library.clone(),
                    library_version: r.header.library_version.clone(),
                })
            }),
            warnings: trace.all_warnings(),
        }
    }

    /// Adds the parts of the ranks after these.
    pub fn merge(&mut self, next: Plain) {
        self.events += next.events;
        let (a, b) = (&mut self.messages, next.messages);
        a.sent += b.sent;
        a.received += b.received;
        a.matched += b.matched;
        a.unmatched += b.unmatched;
        a.unmatched_sends += b.unmatched_sends;
        a.unmatched_receives += b.unmatched_receives;
        a.pending_receives += b.pending_receives;
        a.unresolved += b.unresolved;
        a.bytes += b.bytes;
        a.unmatched_first.extend(b.unmatched_first);
        a.unmatched_first.truncate(UNMATCHED_SHOWN);
        a.pending_requests += b.pending_requests;
        a.pending_first.extend(b.pending_first);
        a.pending_first.truncate(requests::PENDING_SHOWN);
        self.recvs_first.extend(next.recvs_first);
        self.recvs_first.truncate(UNMATCHED_SHOWN);
        self.violations.reversed += next.violations.reversed;
        self.violations.clock_condition += next.violations.clock_condition;
        self.collectives.instances += next.collectives.instances;
        self.collectives.logical_messages += next.collectives.logical_messages;
        self.per_rank.extend(next.per_rank);
        for (k, (n, bytes)) in next.matrix {
            let cell = self.matrix.entry(k).or_default();
            cell.0 += n;
            cell.1 += bytes;
        }
        self.bytes_total += next.bytes_total;
        self.bytes_payload += next.bytes_payload;
        self.incomplete_ranks.extend(next.incomplete_ranks);
        add_counts(&mut self.excluded_calls, &next.excluded_calls);
        add_counts(&mut self.paused_calls, &next.paused_calls);
        if self.run.is_none() {
            self.run = next.run;
        }
        self.warnings.extend(next.warnings);
    }

    /// The report of a trace of `ranks` ranks in `dir` whose parts these
    /// are, before its analyses (clocks, wait states, metrics, critical
    /// path, phases, sync).
    pub fn into_report(self, ranks: u32, dir: &Path) -> Report {
        let mut functions: BTreeMap<String, FunctionStats> = BTreeMap::new();
        for summary in &self.per_rank {
            for (name, stats) in &summary.functions {
                functions.entry(name.clone()).or_default().merge(stats);
            }
        }
        let mut messages = self.messages;
        messages.unmatched_first.extend(self.recvs_first);
        messages.unmatched_first.truncate(UNMATCHED_SHOWN);
        Report {
            ranks,
            events: self.events,
            messages,
            violations: self.violations,
            collectives: self.collectives,
            violations_after_sync: None,
            functions,
            dropped_events: self.per_rank.iter().map(|r| r.dropped_events).sum(),
            per_rank: self.per_rank,
            matrix: (self.matrix.into_iter())
                .map(|((src, dst), (count, bytes))| MatrixCell {
                    src,
                    dst,
                    count,
                    bytes,
                })
                .collect(),
            bytes_total: self.bytes_total,
            bytes_payload: self.bytes_payload,
            bytes_per_call: if self.events == 0 {
                0.0
            } else {
                self.bytes_payload as f64 / self.events as f64
            },
            incomplete_ranks: self.incomplete_ranks,
            excluded_calls: self.excluded_calls,
            spawned_worlds: spawned_worlds(dir),
            run: self.run.flatten(),
            warnings: self.warnings,
            clocks: None,
            sync: None,
            wait_states: None,
            metrics: None,
            critical_path: None,
            phases: Vec::new(),
            paused_calls: self.paused_calls,
            insight: None,
            at_end: None,
        }
    }
}

impl Wire for RunSummary {
    fn put(&self, o: &mut Out) {
        o.put(&self.command_line)
            .str(&self.mpi_library)
            .str(&self.library_version);
    }
    fn get(i: &mut In) -> RunSummary {
        RunSummary {
            command_line: i.get(),
            mpi_library: i.str(),
            library_version: i.str(),
        }
    }
}

impl Wire for Plain {
    fn put(&self, o: &mut Out) {
        let m = &self.messages;
        o.u64(self.events);
        for n in [
            m.sent,
            m.received,
            m.matched,
            m.unmatched,
            m.unmatched_sends,
            m.unmatched_receives,
            m.pending_receives,
            m.unresolved,
            m.bytes,
            m.pending_requests,
        ] {
            o.u64(n);
        }
        o.put(&m.unmatched_first)
            .put(&m.pending_first)
            .put(&self.recvs_first);
        let v = &self.violations;
        o.u64(v.reversed).u64(v.clock_condition).u64(v.mu_ns);
        let c = &self.collectives;
        o.u64(c.instances).u64(c.logical_messages);
        o.put(&self.per_rank).put(&self.matrix);
        o.u64(self.bytes_total).u64(self.bytes_payload);
        o.u32s(&self.incomplete_ranks);
        o.put(&self.excluded_calls).put(&self.paused_calls);
        o.put(&self.run).put(&self.warnings);
    }
    fn get(i: &mut In) -> Plain {
        let events = i.u64();
        let mut n = [0u64; 10];
        n.iter_mut().for_each(|x| *x = i.u64());
        let messages = MessageCounts {
            sent: n[0],
            received: n[1],
            matched: n[2],
            unmatched: n[3],
            unmatched_sends: n[4],
            unmatched_receives: n[5],
            pending_receives: n[6],
            unresolved: n[7],
            bytes: n[8],
            pending_requests: n[9],
            unmatched_first: i.get(),
            pending_first: i.get::<Vec<PendingRequest>>(),
        };
        Plain {
            events,
            messages,
            recvs_first: i.get(),
            violations: Violations {
                reversed: i.u64(),
                clock_condition: i.u64(),
                mu_ns: i.u64(),
            },
            collectives: CollectiveCounts {
                instances: i.u64(),
                logical_messages: i.u64(),
            },
            per_rank: i.get(),
            matrix: i.get(),
            bytes_total: i.u64(),
            bytes_payload: i.u64(),
            incomplete_ranks: i.u32s(),
            excluded_calls: i.get(),
            paused_calls: i.get(),
            run: i.get(),
            warnings: i.get(),
        }
    }
}
