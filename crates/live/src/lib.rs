//! What a running job does, read from its ranks' live status files
//! (`pmtrace_format::live`), and why a hung job is hung: `pmtrace top`,
//! and the "where each rank was" of `pmtrace report` on a job that was
//! killed.
//!
//! - [`snapshot`]: one look at the files: each rank's state, call, time in
//!   it, whom it waits for, its counts and rates, and a summary;
//! - [`hang`]: the wait-for graph over the ranks, and the deadlock or
//!   stall it shows;
//! - [`site`]: where a blocked call came from, in the application's code.

pub mod hang;
pub mod site;
pub mod snapshot;

pub use hang::{Hang, State};
pub use snapshot::{ReadError, Reader, Snapshot, When};

use serde::Serialize;

/// Where each rank of a job that did not finish stood at its last
/// heartbeat (a job killed, or one still running): what `pmtrace report`
/// adds for such a trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AtEnd {
    pub ranks: Vec<RankAtEnd>,
    /// The hang then, judged with waits of `hang_after_ns` or more.
    pub hang: Option<Hang>,
    pub hang_after_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankAtEnd {
    pub rank: u32,
    /// `mpi`, `compute`, `finished`, or `gone` (no live file).
    pub state: State,
    pub call: Option<String>,
    pub for_ns: u64,
    pub waits_for: Vec<u32>,
    /// Where its call came from, innermost frame first (a call blocked
    /// for a second or more).
    pub site: Vec<site::Frame>,
}

/// Waits this long, at the end of a job that did not finish, are a hang:
/// shorter than `top`'s default, as a job is often killed soon after it
/// was seen to hang, and a cycle of waits that lasted a second among
/// ranks that then never moved again was no passing one.
pub const AT_END_HANG_AFTER_NS: u64 = 1_000_000_000;

/// Where the ranks of the job in `dir` stood, if its live files show a
/// job that did not finish (`None` when every rank finished, or the trace
/// has no live files).
pub fn at_end(dir: &std::path::Path) -> Option<AtEnd> {
    let mut reader = Reader::new(dir).ok()?;
    let s = reader
        .snapshot(When::LastBeat, AT_END_HANG_AFTER_NS, 0)
        .ok()?;
    if s.ranks.iter().all(|r| r.state == State::Finished) {
        return None;
    }
    Some(AtEnd {
        ranks: s
            .ranks
            .into_iter()
            .map(|r| RankAtEnd {
                rank: r.rank,
                state: r.state,
                call: r.call,
                for_ns: r.for_ns,
                waits_for: r.waits_for,
                site: r.site,
            })
            .collect(),
        hang: s.hang,
        hang_after_ns: AT_END_HANG_AFTER_NS,
    })
}

impl AtEnd {
    /// The text `pmtrace report` prints.
    pub fn write_text(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        writeln!(
            out,
            "\nThe job did not finish. Where each rank was at its last heartbeat:"
        )?;
        for r in &self.ranks {
            let what = match (r.state, &r.call) {
                (State::Mpi, Some(c)) => format!("in {c}"),
                (State::Mpi, None) => "in MPI".to_string(),
                (s, _) => s.name().to_string(),
            };
            let waits = if r.waits_for.is_empty() {
                String::new()
            } else {
                let w: Vec<String> = r.waits_for.iter().map(|x| x.to_string()).collect();
                let s = if w.len() == 1 { "" } else { "s" };
                format!(", waiting for rank{s} {}", w.join(", "))
            };
            let at = r
                .site
                .first()
                .map_or(String::new(), |f| format!(", called from {}", f.short()));
            writeln!(
                out,
                "  rank {}: {what} for {:.2} s{waits}{at}",
                r.rank,
                r.for_ns as f64 / 1e9
            )?;
        }
        if let Some(h) = &self.hang {
            let chain: Vec<String> = h.ranks.iter().map(|r| r.to_string()).collect();
            match h.kind {
                hang::Kind::Deadlock => writeln!(
                    out,
                    "  deadlock: ranks {} waited for each other in a cycle",
                    chain.join(" -> ")
                )?,
                hang::Kind::Stalled => writeln!(
                    out,
                    "  stalled: the waits of ranks {} ended at rank {} ({})",
                    chain[..chain.len().saturating_sub(1)].join(", "),
                    h.end.as_ref().map_or(0, |e| e.rank),
                    h.end.as_ref().map_or("", |e| e.state.name())
                )?,
            }
        }
        Ok(())
    }
}
