//! The run summary behind `pmtrace report`: profile, message matrix,
//! matching results and causality violations, as JSON (the stable keys of
//! DESIGN.md §3, plus more) or as text for a person.
//!
//! **Definitions.**
//! - `events`: decoded records that are MPI calls, over all ranks.
//! - `functions.<name>`: calls of that MPI function over all ranks,
//!   `total_ns` the sum of their durations, `bytes` the data they moved:
//!   bytes of the sends they posted and of the receives they completed
//!   (so a `MPI_Wait` counts the bytes of the receive it completed, and a
//!   `MPI_Start` those of the persistent send it started), plus, for
//!   collectives, the bytes sent and received as recorded.
//! - `violations.reversed`: matched messages whose receive time (end of the
//!   completing call) is earlier than their send time (start of the sending
//!   call). `violations.clock_condition`: matched messages with receive
//!   time < send time + μ, μ being `violations.mu_ns` (a minimum message
//!   latency; 0 unless given, which makes it equal `reversed`).
//! - `violations_after_sync`: the same counts on the times `pmtrace sync`
//!   wrote, with the μ the sync used between clock groups (0 within one
//!   clock), and the same counts for the logical messages of collectives
//!   (`collective_reversed`, `collective_clock_condition`).
//! - `sync`: the report `pmtrace sync` stored (see [`pmtrace_sync`]).
//! - `bytes_total`: size of the rank files; `bytes_payload`: what the
//!   records take in them; `bytes_per_call`: `bytes_payload / events`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::{self, Write};

use pmtrace_format::Kind;
use pmtrace_trace::Payload;
use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;

use pmtrace_matching::collective::{self, Instance, MemberCalls};
use pmtrace_matching::ends::Cursor;
use pmtrace_matching::matching::{Messages, Violations};
use pmtrace_sync::{quality, Graph, SyncReport, SyncViolations, Synced};
use pmtrace_trace::read::{Rank, Trace};
use pmtrace_trace::wire::{In, Out, Wire};

pub mod critical;
pub mod metrics;
pub mod path;
pub mod phases;
pub mod plain;
pub mod races;
pub mod requests;
pub mod times;
pub mod waits;
pub mod weighted;
use critical::CriticalPath;
use metrics::Metrics;
pub use plain::Plain;
use requests::PendingRequest;
use waits::WaitStates;

/// How to compute the report.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReportOptions {
    /// Minimum message latency μ for the clock condition, in ns.
    pub mu_ns: u64,
    /// Add the weighted critical path (`pmtrace critical-path` does): one
    /// more pass over every call.
    pub weighted: bool,
    /// Keep what the timeline draws ([`Report::insight`]).
    pub insight: bool,
    /// Only what the critical path needs (`pmtrace critical-path` prints
    /// nothing else): the profile, the clock checks, the wait states and
    /// the metrics are left out, and their parts of the report stay empty.
    pub path_only: bool,
}

/// What `pmtrace timeline` draws beside the calls, on the report's time
/// base: the critical path, the time calls waited, the phases.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Insight {
    /// (rank, from, to, computing), last first.
    pub path: Vec<(u32, u64, u64, bool)>,
    /// (rank, thread, from, to): the waiting part of a call.
    pub waits: Vec<(u32, u32, u64, u64)>,
    pub phases: Vec<phases::PhaseSpan>,
    /// Every wait state, by the waiting call.
    pub found: Vec<waits::Wait>,
}

/// Calls, time and bytes of one function.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FunctionStats {
    pub calls: u64,
    pub total_ns: u64,
    pub mean_ns: f64,
    pub bytes: u64,
}

impl FunctionStats {
    fn add(&mut self, dur: u64, bytes: u64) {
        self.calls += 1;
        self.total_ns += dur;
        self.bytes += bytes;
    }

    /// Adds `other` in, and sets the mean of the sum.
    pub fn merge(&mut self, other: &FunctionStats) {
        self.calls += other.calls;
        self.total_ns += other.total_ns;
        self.bytes += other.bytes;
        self.mean_ns = self.total_ns as f64 / self.calls.max(1) as f64;
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MessageCounts {
    pub sent: u64,
    pub received: u64,
    pub matched: u64,
    /// Unmatched sends plus unmatched receives.
    pub unmatched: u64,
    pub unmatched_sends: u64,
    pub unmatched_receives: u64,
    /// Receive requests posted and never completed.
    pub pending_receives: u64,
    /// Sends and receives whose peer has no known world rank (also unmatched).
    pub unresolved: u64,
    /// Bytes of all sends.
    pub bytes: u64,
    /// The first unmatched sends and receives (at most [`UNMATCHED_SHOWN`]).
    pub unmatched_first: Vec<UnmatchedMessage>,
    /// Nonblocking requests never completed nor freed (see [`requests`]).
    pub pending_requests: u64,
    /// The first of them (at most [`requests::PENDING_SHOWN`]).
    pub pending_first: Vec<PendingRequest>,
}

/// How many unmatched messages a report lists.
pub const UNMATCHED_SHOWN: usize = 10;

/// An unmatched send or receive and its channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnmatchedMessage {
    /// "send" or "receive".
    pub side: &'static str,
    pub src: Option<u32>,
    pub dst: Option<u32>,
    pub comm: u64,
    pub tag: i32,
    pub bytes: u64,
    pub time_ns: u64,
    /// Where the call that sent or posted it is: its rank, thread, function
    /// and position among the thread's records (from 0).
    pub rank: u32,
    pub thread: u32,
    pub function: String,
    pub position: u32,
}

impl UnmatchedMessage {
    /// Send `i` of `m`, unmatched.
    pub fn send(m: &Messages, i: usize, times: &times::Times) -> UnmatchedMessage {
        let s = &m.sends[i];
        UnmatchedMessage {
            side: "send",
            src: Some(s.src),
            dst: s.dst,
            comm: s.comm,
            tag: s.tag,
            bytes: s.bytes,
            time_ns: s.time,
            rank: s.call.rank,
            thread: s.call.thread,
            function: times.name(s.call).to_owned(),
            position: s.call.index,
        }
    }

    /// Receive `i` of `m`, unmatched.
    pub fn receive(m: &Messages, i: usize, times: &times::Times) -> UnmatchedMessage {
        let r = &m.recvs[i];
        UnmatchedMessage {
            side: "receive",
            src: r.src,
            dst: Some(r.dst),
            comm: r.comm,
            tag: r.tag,
            bytes: r.bytes,
            time_ns: r.time,
            rank: r.post.rank,
            thread: r.post.thread,
            function: times.name(r.post).to_owned(),
            position: r.post.index,
        }
    }
}

/// Messages and bytes from one world rank to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MatrixCell {
    pub src: u32,
    pub dst: u32,
    pub count: u64,
    pub bytes: u64,
}

/// Collective instances and their logical messages (see [`pmtrace_matching::collective`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CollectiveCounts {
    pub instances: u64,
    /// (sender enter, receiver exit) pairs whose receiver completed.
    pub logical_messages: u64,
}

impl CollectiveCounts {
    pub fn of(insts: &[Instance<MemberCalls>]) -> CollectiveCounts {
        CollectiveCounts {
            instances: insts.len() as u64,
            logical_messages: insts.iter().map(Instance::completed_count).sum(),
        }
    }
}

/// One rank at a glance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankSummary {
    pub rank: u32,
    pub host: String,
    /// Reached `MPI_Finalize`.
    pub complete: bool,
    pub events: u64,
    /// Point-to-point messages this rank sent and received.
    pub messages_sent: u64,
    pub messages_received: u64,
    pub threads: u64,
    /// Time from the start of tracing to its end (or the last record).
    pub span_ns: u64,
    /// Time inside MPI calls, summed over threads.
    pub mpi_ns: u64,
    pub file_bytes: u64,
    pub dropped_events: u64,
    /// Of those, by thread index (threads that lost none left out);
    /// absent when none did.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub dropped_by_thread: BTreeMap<u32, u64>,
    pub buffer_waits: u64,
    pub functions: BTreeMap<String, FunctionStats>,
}

/// What the command line and MPI were.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    pub command_line: Vec<String>,
    pub mpi_library: String,
    pub library_version: String,
}

/// Everything `pmtrace report` shows. Serialises to the JSON of
/// `pmtrace report --json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub ranks: u32,
    pub events: u64,
    pub messages: MessageCounts,
    pub violations: Violations,
    /// Collective calls across their communicators, and the logical
    /// messages they stand for (Becker et al. §4).
    pub collectives: CollectiveCounts,
    /// The same counts after `pmtrace sync`; null until a sync exists.
    pub violations_after_sync: Option<SyncViolations>,
    pub functions: BTreeMap<String, FunctionStats>,
    pub per_rank: Vec<RankSummary>,
    pub matrix: Vec<MatrixCell>,
    pub bytes_total: u64,
    pub bytes_payload: u64,
    pub bytes_per_call: f64,
    pub incomplete_ranks: Vec<u32>,
    pub dropped_events: u64,
    /// Calls left out on purpose (`PMTRACE_EXCLUDE`), by function, over
    /// all ranks; absent when none were.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub excluded_calls: BTreeMap<String, u64>,
    /// Worlds the job started with `MPI_Comm_spawn`, traced in directories
    /// of this trace's (`spawn-<k>`, each a trace of its own), by name
    /// with their rank count; absent when none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub spawned_worlds: BTreeMap<String, usize>,
    pub run: Option<RunSummary>,
    pub warnings: Vec<String>,
    /// Piggybacked clock checks (see [`pmtrace_matching::clocks`]).
    pub clocks: Option<pmtrace_matching::clocks::ClockReport>,
    /// Timestamp synchronisation results; null until `pmtrace sync` ran.
    pub sync: Option<SyncReport>,
    /// Time ranks spent waiting for late ranks (see [`waits`]).
    pub wait_states: Option<WaitStates>,
    /// Speedup, efficiency, load imbalance, the parallelism profile (see [`metrics`]).
    pub metrics: Option<Metrics>,
    /// The chain of work that decided the run's length (see [`critical`]).
    pub critical_path: Option<CriticalPath>,
    /// User phases (`pmtrace_phase_begin`/`_end`, `MPI_Pcontrol(k ≥ 2)`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<phases::Phase>,
    /// Calls left out while `MPI_Pcontrol(0)` paused recording, by function.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub paused_calls: BTreeMap<String, u64>,
    /// Where each rank stood when a job that did not finish was killed
    /// (or now, if it runs), from its live status files; absent when every
    /// rank finished. Set by the verbs (`pmtrace_live::at_end`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_end: Option<pmtrace_live::AtEnd>,
    /// Kept with `ReportOptions::insight`.
    #[serde(skip)]
    pub insight: Option<Insight>,
}

/// Messages per world rank, from the ranks of their sends or receives.
fn count_by_rank(trace: &Trace, ranks: impl Iterator<Item = u32>) -> Vec<u64> {
    let mut n = vec![
        0u64;
        trace
            .ranks
            .iter()
            .map(|r| r.rank as usize + 1)
            .max()
            .unwrap_or(0)
    ];
    for r in ranks {
        if let Some(c) = n.get_mut(r as usize) {
            *c += 1;
        }
    }
    n
}

/// One rank's profile.
pub fn profile(rank: &Rank, messages: &Messages, sent: &[u64], received: &[u64]) -> RankSummary {
    // By function index first: a name lookup per call is slow.
    let mut by_func = vec![FunctionStats::default(); rank.header.functions.len() + 1];
    let unknown = by_func.len() - 1;
    let (mut events, mut mpi_ns, mut last_end) = (0, 0, rank.header.start_ns);
    // A persistent collective moves its bytes at each start.
    let coll_inits: HashMap<u64, u64> = rank
        .payload_calls_of(|k| k == Kind::CollInit)
        .filter(|(_, c)| rank.kind(c.func) == Kind::CollInit && c.rc == 0)
        .filter_map(|(_, c)| match c.payload {
            Payload::Coll {
                sent,
                recvd,
                op: Some(op),
                ..
            } => Some((op, sent + recvd)),
            _ => None,
        })
        .collect();
    // Bytes each call moved point-to-point: those of the sends it posted
    // and of the receives it completed.
    let mut cursors: Vec<(Cursor, Cursor)> = (0..rank.threads.len())
        .map(|slot| {
            let t = messages.ends.thread(rank.rank, slot);
            (Cursor::new(&t.sends), Cursor::new(&t.done))
        })
        .collect();
    for (slot, th) in rank.threads.iter().enumerate() {
        let ev = &th.records;
        let (sends, done) = &mut cursors[slot];
        for i in 0..ev.len() {
            let Some(func) = ev.func(i) else { continue };
            let (t_start, t_end) = ev.stamps(i);
            // A call without a payload moves no bytes: it is not decoded.
            let bytes = if ev.has_payload(i) {
                let call = ev.call(i).expect("a call");
                let mut p2p = || {
                    let index = i as u32;
                    let sent: u64 = (sends.at(index).iter())
                        .map(|e| messages.sends[e.msg as usize].bytes)
                        .sum();
                    let received: u64 = (done.at(index).iter())
                        .map(|e| messages.recvs[e.msg as usize].bytes)
                        .sum();
                    sent + received
                };
                match &call.payload {
                    _ if rank.kind(func) == Kind::CollInit => 0,
                    Payload::Coll { sent, recvd, .. } => sent + recvd,
                    Payload::None => 0,
                    Payload::Start { started } if !coll_inits.is_empty() => {
                        let colls: u64 = started
                            .iter()
                            .filter_map(|(init, _)| init.and_then(|i| coll_inits.get(&i)))
                            .sum();
                        colls + p2p()
                    }
                    _ => p2p(),
                }
            } else {
                0
            };
            let dur = t_end - t_start;
            by_func[(func as usize).min(unknown)].add(dur, bytes);
            events += 1;
            mpi_ns += dur;
            last_end = last_end.max(t_end);
        }
    }
    let mut fns: BTreeMap<String, FunctionStats> = BTreeMap::new();
    for (func, stats) in by_func.iter().enumerate().filter(|(_, f)| f.calls > 0) {
        let name = rank.function_name(func as u32);
        fns.entry(name.to_owned()).or_default().merge(stats);
    }
    let end = rank
        .trailer
        .as_ref()
        .map_or(last_end, |t| t.end_ns.max(last_end));
    RankSummary {
        rank: rank.rank,
        host: rank.header.hostname.clone(),
        complete: rank.complete(),
        events,
        messages_sent: sent.get(rank.rank as usize).copied().unwrap_or(0),
        messages_received: received.get(rank.rank as usize).copied().unwrap_or(0),
        threads: rank.threads.len() as u64,
        span_ns: end.saturating_sub(rank.header.start_ns),
        mpi_ns,
        file_bytes: rank.file_bytes,
        dropped_events: rank.trailer.as_ref().map_or(0, |t| t.dropped),
        dropped_by_thread: rank
            .trailer
            .as_ref()
            .map(|t| {
                t.threads
                    .iter()
                    .filter(|d| d.dropped > 0)
                    .map(|d| (d.index, d.dropped))
                    .collect()
            })
            .unwrap_or_default(),
        buffer_waits: rank
            .threads
            .iter()
            .map(|t| t.records.buffer_waits() as u64)
            .sum(),
        functions: fns,
    }
}

/// The `spawn-<k>` directories of a trace that hold rank files, with how
/// many (see `Report::spawned_worlds`).
pub fn spawned_worlds(dir: &std::path::Path) -> BTreeMap<String, usize> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let k = name.strip_prefix("spawn-")?;
            if k.is_empty() || !k.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let ranks = std::fs::read_dir(e.path())
                .ok()?
                .filter_map(Result::ok)
                .filter(|f| f.file_name().to_string_lossy().ends_with(".pmt"))
                .count();
            (ranks > 0).then_some((name, ranks))
        })
        .collect()
}

impl Report {
    pub fn build(trace: &Trace, messages: &Messages, options: ReportOptions) -> Report {
        Report::build_on(trace, messages, options, None)
    }

    /// The report, its wait states on the times `pmtrace sync` wrote when
    /// `synced` is given (else on the recorded ones).
    pub fn build_on(
        trace: &Trace,
        messages: &Messages,
        options: ReportOptions,
        synced: Option<&Synced>,
    ) -> Report {
        Report::build_from(trace, Cow::Borrowed(messages), options, synced)
    }

    /// [`Report::build_on`], then [`Report::with_sync`] when `synced` is
    /// given, on messages that go as soon as nothing needs them: the
    /// late passes (metrics, wait states, the plain critical path) are a
    /// large trace's peak, and the messages its largest part.
    pub fn build_given(
        trace: &Trace,
        messages: Messages,
        options: ReportOptions,
        synced: Option<&Synced>,
    ) -> Report {
        let after_sync = synced.map(|s| (s, Report::after_sync(trace, &messages, s)));
        let report = Report::build_from(trace, Cow::Owned(messages), options, synced);
        match after_sync {
            Some((synced, violations)) => report.synced_by(synced, violations),
            None => report,
        }
    }

    fn build_from(
        trace: &Trace,
        messages: Cow<Messages>,
        options: ReportOptions,
        synced: Option<&Synced>,
    ) -> Report {
        // Three passes that need only the trace and the matching, side by
        // side: the plain parts (the profile by rank), the collectives, the
        // clock checks.
        let times = times::Times { trace, synced };
        let all = (messages.sends.len(), messages.recvs.len());
        let full = !options.path_only;
        let ((plain, instances), clocks) = rayon::join(
            || {
                rayon::join(
                    || {
                        if full {
                            Plain::of(trace, &messages, all, &times, options.mu_ns)
                        } else {
                            Plain::default()
                        }
                    },
                    || collective::instances(trace),
                )
            },
            || full.then(|| pmtrace_matching::clocks::compute(trace, &messages).report),
        );
        let mut report = Plain {
            collectives: CollectiveCounts::of(&instances),
            ..plain
        }
        .into_report(trace.world_size, &trace.dir);
        let mut found = waits::find(trace, &messages, &instances, &times);
        // By the waiting call: root causes and the critical path look waits up.
        found.sort_by_key(|w| (w.at.rank, w.at.thread, w.at.index));
        // Only the weighted path reads the messages and the instances
        // again: given ones go before the passes that follow.
        let weighted = options.weighted.then_some((messages, instances));
        // The path needs only the metrics' window.
        let metrics = full.then(|| metrics::compute(trace, &times));
        let spans = phases::spans(trace, &times);
        let phase_timeline = phases::PhaseTimeline::new(trace, &spans);
        let timeline = (!phase_timeline.is_empty()).then_some(&phase_timeline);
        report.clocks = clocks;
        let window = match &metrics {
            Some(m) => (m.from_ns, m.to_ns),
            None => metrics::window(trace, &times),
        };
        // The critical path beside the wait states' roots, both over the
        // waits sorted by call.
        let (path, states) = rayon::join(
            || match weighted {
                Some((messages, instances)) => critical::both(
                    trace, &times, &messages, &instances, &found, window, timeline,
                ),
                None => critical::compute_sorted(
                    trace,
                    &times,
                    &found,
                    window,
                    timeline,
                    options.insight,
                ),
            },
            || full.then(|| waits::states(trace, &times, &found)),
        );
        report.critical_path = Some(path);
        report.wait_states = states;
        report.insight = options.insight.then(|| Insight {
            path: Vec::new(),
            waits: found
                .iter()
                .filter_map(|w| {
                    let (a, b) = times.of(w.at)?;
                    Some((w.at.rank, w.at.thread, a, (a + w.ns).min(b)))
                })
                .collect(),
            phases: spans.clone(),
            found: found.clone(),
        });
        report.phases = phases::summarize(trace, &times, &spans);
        report.metrics = metrics;
        report
    }

    /// Adds what `pmtrace sync` stored: its report, and the violations
    /// left in its times, counted afresh.
    pub fn with_sync(self, trace: &Trace, messages: &Messages, synced: &Synced) -> Report {
        let violations = Report::after_sync(trace, messages, synced);
        self.synced_by(synced, violations)
    }

    fn synced_by(mut self, synced: &Synced, violations: SyncViolations) -> Report {
        self.violations_after_sync = Some(violations);
        self.sync = Some(synced.report.clone());
        self
    }

    /// The violations left in `synced`'s times.
    fn after_sync(trace: &Trace, messages: &Messages, synced: &Synced) -> SyncViolations {
        let p = synced.report.params;
        let g = Graph::build(trace, messages, p.mu_intra_ns, p.mu_inter_ns);
        quality::violations(&g, &synced.node_times(trace, &g))
    }

    /// The report as a person reads it.
    pub fn write_text(&self, w: &mut dyn Write) -> io::Result<()> {
        self.write_head(w)?;
        self.write_profile(w)?;
        self.write_ranks(w)?;
        self.write_matrix(w)?;
        self.write_messages(w)?;
        if let Some(ws) = &self.wait_states {
            ws.write_text(w)?;
        }
        if let Some(m) = &self.metrics {
            m.write_text(w)?;
        }
        if let Some(c) = &self.critical_path {
            c.write_text(w)?;
        }
        self.write_violations(w)?;
        self.write_clocks(w)
    }

    /// The run, its size, and what it lost or left out.
    fn write_head(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(w, "pmtrace report")?;
        if let Some(run) = &self.run {
            writeln!(w, "  command        {}", run.command_line.join(" "))?;
            writeln!(w, "  MPI            {}", run.mpi_library)?;
        }
        writeln!(w, "  ranks          {}", self.ranks)?;
        writeln!(w, "  events         {} MPI calls", self.events)?;
        writeln!(
            w,
            "  trace size     {} on disk, {} of records, {:.1} bytes per call",
            human_bytes(self.bytes_total),
            human_bytes(self.bytes_payload),
            self.bytes_per_call
        )?;
        if self.incomplete_ranks.is_empty() {
            writeln!(w, "  incomplete     none (every rank reached MPI_Finalize)")?;
        } else {
            writeln!(
                w,
                "  incomplete     ranks {} did not reach MPI_Finalize",
                list(&self.incomplete_ranks)
            )?;
        }
        if let Some(at_end) = &self.at_end {
            at_end.write_text(w)?;
            writeln!(w)?;
        }
        if self.dropped_events > 0 {
            writeln!(
                w,
                "  dropped        {} events could not be recorded",
                self.dropped_events
            )?;
        }
        for warning in &self.warnings {
            writeln!(w, "  warning        {warning}")?;
        }
        if !self.spawned_worlds.is_empty() {
            let list: Vec<String> = self
                .spawned_worlds
                .iter()
                .map(|(d, n)| format!("{d} ({n} ranks)"))
                .collect();
            writeln!(
                w,
                "  spawned        {} (MPI_Comm_spawn; each reads as a trace of its own)",
                list.join(", ")
            )?;
        }
        if !self.excluded_calls.is_empty() {
            let list: Vec<String> = self
                .excluded_calls
                .iter()
                .map(|(f, n)| format!("{f} {n}"))
                .collect();
            writeln!(w, "  left out       {} (PMTRACE_EXCLUDE)", list.join(", "))?;
        }
        Ok(())
    }

    /// Every function, by total time.
    fn write_profile(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(w, "\nProfile (all ranks, by total time)")?;
        let mut fns: Vec<(&String, &FunctionStats)> = self.functions.iter().collect();
        fns.sort_by(|a, b| b.1.total_ns.cmp(&a.1.total_ns).then(a.0.cmp(b.0)));
        let width = fns.iter().map(|(n, _)| n.len()).max().unwrap_or(8).max(8);
        writeln!(
            w,
            "  {:<width$} {:>10} {:>12} {:>12} {:>12}",
            "function", "calls", "total", "mean", "bytes"
        )?;
        for (name, f) in fns {
            writeln!(
                w,
                "  {name:<width$} {:>10} {:>12} {:>12} {:>12}",
                f.calls,
                human_ns(f.total_ns as f64),
                human_ns(f.mean_ns),
                human_bytes(f.bytes)
            )?;
        }
        Ok(())
    }

    /// A line per rank.
    fn write_ranks(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(w, "\nRanks")?;
        writeln!(
            w,
            "  {:>5} {:<16} {:>10} {:>7} {:>12} {:>12} {:>6}  state",
            "rank", "host", "events", "threads", "span", "in MPI", "MPI %"
        )?;
        for r in &self.per_rank {
            let pct = if r.span_ns == 0 {
                0.0
            } else {
                100.0 * r.mpi_ns as f64 / r.span_ns as f64
            };
            writeln!(
                w,
                "  {:>5} {:<16} {:>10} {:>7} {:>12} {:>12} {:>5.1}%  {}",
                r.rank,
                r.host,
                r.events,
                r.threads,
                human_ns(r.span_ns as f64),
                human_ns(r.mpi_ns as f64),
                pct,
                if r.complete {
                    "finalized"
                } else {
                    "INCOMPLETE"
                }
            )?;
        }
        Ok(())
    }

    /// Messages and bytes by pair of ranks.
    fn write_matrix(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(w, "\nMessage matrix (sender -> receiver: messages, bytes)")?;
        if self.matrix.is_empty() {
            writeln!(w, "  no point-to-point messages")?;
        }
        for c in &self.matrix {
            writeln!(
                w,
                "  {:>5} -> {:<5} {:>10} msgs {:>12}",
                c.src,
                c.dst,
                c.count,
                human_bytes(c.bytes)
            )?;
        }
        Ok(())
    }

    /// Message matching: the counts, the first unmatched, the requests never completed.
    fn write_messages(&self, w: &mut dyn Write) -> io::Result<()> {
        let m = &self.messages;
        writeln!(w, "\nMessages")?;
        writeln!(
            w,
            "  sent {}, received {}, matched {}, unmatched {} ({} sends, {} receives)",
            m.sent, m.received, m.matched, m.unmatched, m.unmatched_sends, m.unmatched_receives
        )?;
        if m.pending_receives > 0 {
            writeln!(
                w,
                "  {} receive requests were posted and never completed",
                m.pending_receives
            )?;
        }
        if m.unresolved > 0 {
            writeln!(
                w,
                "  {} sends/receives on communicators with unknown members",
                m.unresolved
            )?;
        }
        for u in &m.unmatched_first {
            writeln!(
                w,
                "  unmatched {:<7} {} -> {} comm {:#x} tag {} {} at {} ns: {} (rank {} thread {} call {})",
                u.side,
                opt(u.src),
                opt(u.dst),
                u.comm,
                u.tag,
                human_bytes(u.bytes),
                u.time_ns,
                u.function,
                u.rank,
                u.thread,
                u.position
            )?;
        }
        if (m.unmatched as usize) > m.unmatched_first.len() {
            writeln!(
                w,
                "  ... and {} more",
                m.unmatched as usize - m.unmatched_first.len()
            )?;
        }
        if m.pending_requests > 0 {
            writeln!(
                w,
                "  {} nonblocking requests were never completed nor freed",
                m.pending_requests
            )?;
        }
        for p in m.pending_first.iter().take(UNMATCHED_SHOWN) {
            let peer = match (p.peer, p.peer_world) {
                (_, Some(world)) => format!(" peer {world}"),
                (Some(local), None) => format!(" peer {local} (in its communicator)"),
                (None, None) => String::new(),
            };
            writeln!(
                w,
                "  never completed: {} {}{}{}{} at {} ns (rank {} thread {} call {})",
                p.kind,
                p.function,
                peer,
                p.tag.map(|t| format!(" tag {t}")).unwrap_or_default(),
                p.comm.map(|c| format!(" comm {c:#x}")).unwrap_or_default(),
                p.time_ns,
                p.rank,
                p.thread,
                p.position
            )?;
        }
        if m.pending_requests as usize > m.pending_first.len().min(UNMATCHED_SHOWN) {
            writeln!(
                w,
                "  ... and {} more",
                m.pending_requests as usize - m.pending_first.len().min(UNMATCHED_SHOWN)
            )?;
        }
        Ok(())
    }

    /// Timestamp violations, as recorded and after sync.
    fn write_violations(&self, w: &mut dyn Write) -> io::Result<()> {
        let v = &self.violations;
        writeln!(w, "\nViolations (timestamps as recorded)")?;
        let condition = format!("clock condition (recv < send + {} ns)", v.mu_ns);
        writeln!(
            w,
            "  {:<44} {}",
            "reversed messages (received before sent)", v.reversed
        )?;
        writeln!(w, "  {condition:<44} {}", v.clock_condition)?;
        match &self.violations_after_sync {
            Some(s) => writeln!(
                w,
                "  after sync: reversed {}, clock condition {}; collectives: reversed {}, clock condition {}",
                s.reversed, s.clock_condition, s.collective_reversed, s.collective_clock_condition
            )?,
            None => writeln!(w, "  after sync: not synced yet (run `pmtrace sync`)")?,
        }
        if let Some(sync) = &self.sync {
            sync.write_text(w)?;
        }
        Ok(())
    }

    /// The logical clocks' checks.
    fn write_clocks(&self, w: &mut dyn Write) -> io::Result<()> {
        if let Some(c) = &self.clocks {
            writeln!(w, "\nLogical clocks ({})", c.mode)?;
            if c.mode != "none" {
                writeln!(
                    w,
                    "  matched by piggybacked id {}, disagreeing with FIFO matching {}, without id {}",
                    c.matched_by_id, c.fifo_disagreements, c.unmatched_by_id
                )?;
                if c.fifo_unordered > 0 {
                    writeln!(
                        w,
                        "  differing from FIFO on channels that several threads use {} (MPI orders no two threads' messages; the ids decide)",
                        c.fifo_unordered
                    )?;
                }
                writeln!(
                    w,
                    "  clock condition broken: Lamport {}, vector {}",
                    c.lamport_violations,
                    c.vector_violations
                        .map_or_else(|| "-".to_owned(), |v| v.to_string())
                )?;
                writeln!(
                    w,
                    "  piggybacks checked against the senders' clocks {}, differing {}; decreasing clocks {}",
                    c.wire_checked, c.wire_mismatches, c.decreasing
                )?;
                if c.wire_unchecked > 0 {
                    writeln!(
                        w,
                        "  piggybacks not checked {} (a rank at one end has several threads that call MPI)",
                        c.wire_unchecked
                    )?;
                }
                if let Some(h) = &c.happens_before {
                    writeln!(
                        w,
                        "  happens-before vs vector clocks: {} events, {} pairs, {} disagreements",
                        h.events, h.pairs, h.disagreements
                    )?;
                }
            }
        }
        Ok(())
    }
}

fn opt(v: Option<u32>) -> String {
    v.map_or_else(|| "?".to_owned(), |v| v.to_string())
}

fn list(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

pub use pmtrace_trace::units::human_ns;

/// "512 B", "1.5 KiB", "3.0 MiB", "2.00 GiB".
pub fn human_bytes(b: u64) -> String {
    let f = b as f64;
    if b < 1024 {
        format!("{b} B")
    } else if f < 1024.0 * 1024.0 {
        format!("{:.1} KiB", f / 1024.0)
    } else if f < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1} MiB", f / (1024.0 * 1024.0))
    } else {
        format!("{:.2} GiB", f / (1024.0 * 1024.0 * 1024.0))
    }
}

impl Wire for FunctionStats {
    fn put(&self, o: &mut Out) {
        o.u64(self.calls)
            .u64(self.total_ns)
            .f64(self.mean_ns)
            .u64(self.bytes);
    }
    fn get(i: &mut In) -> FunctionStats {
        FunctionStats {
            calls: i.u64(),
            total_ns: i.u64(),
            mean_ns: i.f64(),
            bytes: i.u64(),
        }
    }
}

impl Wire for RankSummary {
    fn put(&self, o: &mut Out) {
        o.u32(self.rank).str(&self.host).bool(self.complete);
        o.u64(self.events)
            .u64(self.messages_sent)
            .u64(self.messages_received);
        o.u64(self.threads).u64(self.span_ns).u64(self.mpi_ns);
        o.u64(self.file_bytes)
            .u64(self.dropped_events)
            .u64(self.buffer_waits);
        o.put(&self.dropped_by_thread).put(&self.functions);
    }
    fn get(i: &mut In) -> RankSummary {
        RankSummary {
            rank: i.u32(),
            host: i.str(),
            complete: i.bool(),
            events: i.u64(),
            messages_sent: i.u64(),
            messages_received: i.u64(),
            threads: i.u64(),
            span_ns: i.u64(),
            mpi_ns: i.u64(),
            file_bytes: i.u64(),
            dropped_events: i.u64(),
            buffer_waits: i.u64(),
            dropped_by_thread: i.get(),
            functions: i.get(),
        }
    }
}

impl Wire for UnmatchedMessage {
    fn put(&self, o: &mut Out) {
        o.bool(self.side == "send").put(&self.src).put(&self.dst);
        o.u64(self.comm)
            .i32(self.tag)
            .u64(self.bytes)
            .u64(self.time_ns);
        o.u32(self.rank).u32(self.thread).str(&self.function);
        o.u32(self.position);
    }
    fn get(i: &mut In) -> UnmatchedMessage {
        UnmatchedMessage {
            side: if i.bool() { "send" } else { "receive" },
            src: i.get(),
            dst: i.get(),
            comm: i.u64(),
            tag: i.i32(),
            bytes: i.u64(),
            time_ns: i.u64(),
            rank: i.u32(),
            thread: i.u32(),
            function: i.str(),
            position: i.u32(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes_read_naturally() {
        assert_eq!(human_ns(850.0), "850 ns");
        assert_eq!(human_ns(12_500.0), "12.5 us");
        assert_eq!(human_ns(3_200_000.0), "3.200 ms");
        assert_eq!(human_ns(1.5e9), "1.500 s");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
    }
}
