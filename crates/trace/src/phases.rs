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

use crate::read::{EventRef, Trace};
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
}

/// The name of a pause's span.
pub const PAUSED: &str = "paused";

/// Every phase of `trace` (pauses as [`PAUSED`] spans), by rank, thread
/// and start.
pub fn spans(trace: &Trace, time: impl Fn(EventRef) -> Option<(u64, u64)>) -> Vec<PhaseSpan> {
    let mut out = Vec::new();
    for rank in &trace.ranks {
        for th in &rank.threads {
            let last_end = (0..th.records.len())
                .rev()
                .find(|&p| th.records.is_call(p))
                .and_then(|p| {
                    time(EventRef {
                        rank: rank.rank,
                        thread: th.index,
                        index: p as u32,
                    })
                })
                .map_or(0, |x| x.1);
            let mut open: Vec<(String, u64)> = Vec::new();
            let mut pcontrol: Option<(String, u64, u32)> = None;
            let mut paused: Option<u64> = None;
            let close =
                |out: &mut Vec<PhaseSpan>, name: String, from: u64, to: u64, depth: usize| {
                    out.push(PhaseSpan {
                        name,
                        rank: rank.rank,
                        thread: th.index,
                        from_ns: from,
                        to_ns: to.max(from),
                        depth: depth as u32,
                    });
                };
            let calls = rank
                .payload_calls_of(|k| matches!(k, Kind::Phase | Kind::Pcontrol))
                .filter(|(at, _)| at.thread == th.index);
            for (at, call) in calls {
                let (a, b) = time(at).unwrap_or((call.t_start, call.t_end));
                match call.payload {
                    Payload::Phase { name: Some(name) } => open.push((name.to_owned(), b)),
                    Payload::Phase { name: None } => {
                        if let Some((name, from)) = open.pop() {
                            close(&mut out, name, from, a, open.len());
                        }
                    }
                    Payload::Pcontrol { level } => {
                        if level == 0 {
                            paused.get_or_insert(b);
                            continue;
                        }
                        if let Some(from) = paused.take() {
                            close(&mut out, PAUSED.to_owned(), from, a, 0);
                        }
                        if let Some((name, from, depth)) = pcontrol.take() {
                            close(&mut out, name, from, a, depth as usize);
                        }
                        if level >= 2 {
                            pcontrol = Some((format!("Pcontrol {level}"), b, open.len() as u32));
                        }
                    }
                    _ => {}
                }
            }
            if let Some((name, from, depth)) = pcontrol {
                close(&mut out, name, from, last_end, depth as usize);
            }
            if let Some(from) = paused {
                close(&mut out, PAUSED.to_owned(), from, last_end, 0);
            }
            while let Some((name, from)) = open.pop() {
                close(&mut out, name, from, last_end, open.len());
            }
        }
    }
    out.sort_by(|x, y| {
        (x.rank, x.thread, x.from_ns, x.depth).cmp(&(y.rank, y.thread, y.from_ns, y.depth))
    });
    out
}
