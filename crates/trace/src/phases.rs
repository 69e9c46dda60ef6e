//! User phases as the records mark them: `pmtrace_phase_begin(name)` /
//! `pmtrace_phase_end()` (include/pmtrace.h) and `MPI_Pcontrol`.
//!
//! A thread's phases nest: a begin opens a phase, an end closes the
//! innermost one. `MPI_Pcontrol(k)` with k ≥ 2 opens the phase "Pcontrol k"
//! (closing an earlier Pcontrol phase of the thread); any level but 0
//! closes it. `MPI_Pcontrol(0)` pauses recording until `MPI_Pcontrol(1)`:
//! a pause is kept as a span too ([`PAUSED`]). A phase still open at the
//! thread's last call ends there.

use pmtrace_format::Kind;
use serde::Serialize;

use crate::read::{EventRef, Rank, Thread, Trace};
use crate::Payload;

/// One phase on one thread, in the times `spans` was given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PhaseSpan {
    pub name: String,
    pub rank: u32,
    pub thread: u32,
    pub from_ns: u64,
    pub to_ns: u64,
    /// 0 for an outermost phase.
    pub depth: u32,
    /// The records that opened and closed it (positions in the thread;
    /// the thread's last call for a phase never closed).
    pub from_index: u32,
    pub to_index: u32,
    /// Opened by `pmtrace_phase_begin` (nested properly); not a Pcontrol
    /// phase or a pause, which may cross user phases.
    pub user: bool,
}

/// The name of a pause's span.
pub const PAUSED: &str = "paused";

/// Every phase of `trace` (pauses as [`PAUSED`] spans), by rank, thread
/// and start.
pub fn spans(trace: &Trace, time: impl Fn(EventRef) -> Option<(u64, u64)>) -> Vec<PhaseSpan> {
    let mut out = Vec::new();
    for rank in &trace.ranks {
        for th in &rank.threads {
            thread_spans(rank, th, &time, &mut out);
        }
    }
    sort(&mut out);
    out
}

/// The phases of one thread (`spans` of that thread alone, in the same
/// order), without looking at any other: an export that goes thread by
/// thread pays for each thread once.
pub fn spans_of(
    trace: &Trace,
    rank: u32,
    thread: u32,
    time: impl Fn(EventRef) -> Option<(u64, u64)>,
) -> Vec<PhaseSpan> {
    let mut out = Vec::new();
    if let Some(r) = trace.rank(rank) {
        for th in r.threads.iter().filter(|t| t.index == thread) {
            thread_spans(r, th, &time, &mut out);
        }
    }
    sort(&mut out);
    out
}

/// By rank, thread, start and depth; stable, so that spans alike keep the
/// order they closed in.
fn sort(out: &mut [PhaseSpan]) {
    out.sort_by(|x, y| {
        (x.rank, x.thread, x.from_ns, x.depth).cmp(&(y.rank, y.thread, y.from_ns, y.depth))
    });
}

fn thread_spans(
    rank: &Rank,
    th: &Thread,
    time: &impl Fn(EventRef) -> Option<(u64, u64)>,
    out: &mut Vec<PhaseSpan>,
) {
    let last = (0..th.records.len()).rev().find(|&p| th.records.is_call(p));
    let last_at = last.map_or(0, |p| p as u32);
    let last_end = last
        .and_then(|p| {
            time(EventRef {
                rank: rank.rank,
                thread: th.index,
                index: p as u32,
            })
        })
        .map_or(0, |x| x.1);
    // Open spans: (name, start, record, depth).
    let mut open: Vec<(String, u64, u32)> = Vec::new();
    let mut pcontrol: Option<(String, u64, u32, u32)> = None;
    let mut paused: Option<(u64, u32)> = None;
    let mut close = |name: String, from: (u64, u32), to: (u64, u32), depth: usize, user: bool| {
        out.push(PhaseSpan {
            name,
            rank: rank.rank,
            thread: th.index,
            from_ns: from.0,
            to_ns: to.0.max(from.0),
            depth: depth as u32,
            from_index: from.1,
            to_index: to.1,
            user,
        });
    };
    let calls = rank.thread_payload_calls_of(th, |k| matches!(k, Kind::Phase | Kind::Pcontrol));
    for (at, call) in calls {
        let (a, b) = time(at).unwrap_or((call.t_start, call.t_end));
        let here = at.index;
        match call.payload {
            Payload::Phase { name: Some(name) } => open.push((name.to_owned(), b, here)),
            Payload::Phase { name: None } => {
                if let Some((name, from, k)) = open.pop() {
                    close(name, (from, k), (a, here), open.len(), true);
                }
            }
            Payload::Pcontrol { level } => {
                if level == 0 {
                    paused.get_or_insert((b, here));
                    continue;
                }
                if let Some(from) = paused.take() {
                    close(PAUSED.to_owned(), from, (a, here), 0, false);
                }
                if let Some((name, from, k, depth)) = pcontrol.take() {
                    close(name, (from, k), (a, here), depth as usize, false);
                }
                if level >= 2 {
                    pcontrol = Some((format!("Pcontrol {level}"), b, here, open.len() as u32));
                }
            }
            _ => {}
        }
    }
    let end = (last_end, last_at);
    if let Some((name, from, k, depth)) = pcontrol {
        close(name, (from, k), end, depth as usize, false);
    }
    if let Some(from) = paused {
        close(PAUSED.to_owned(), from, end, 0, false);
    }
    while let Some((name, from, k)) = open.pop() {
        close(name, (from, k), end, open.len(), true);
    }
}
