//! The clocks the race rules compare.

use super::*;

/// What the race rules compare, per message and per receive, for one
/// rank's receives (`003_…` Theorems 5.3 and 5.5): a send's clock as its
/// destination would see it, and a receive's clock when it matched.
#[derive(Debug, Clone, Default)]
pub struct RaceClocks {
    /// `"vector"` (LVCP: exact) or `"lamport"` (LLCP: sound, may miss some).
    pub mode: &'static str,
    /// Per send of [`Messages::sends`]: its LLCP clock, or in vector mode
    /// its LVCP vector's entry for the destination rank.
    pub(super) send: Vec<u64>,
    /// Per receive of [`Messages::recvs`]: its clock when it matched (LLCP),
    /// or its own LVCP entry then.
    pub(super) recv: Vec<u64>,
}

impl RaceClocks {
    /// The clocks of DAMPI's rules on the whole trace: LVCP's vectors when
    /// `vector`, else LLCP's clocks; collectives are logical messages.
    /// `probed` marks the receives whose message a wildcard probe chose:
    /// they tick like wildcard receives.
    pub fn compute(trace: &Trace, m: &Messages, vector: bool, probed: &[bool]) -> RaceClocks {
        let p = plan(trace, m);
        let vectors = if vector { Vectors::Lazy } else { Vectors::None };
        let full = pass(trace, m, &p, true, vectors, false, Some(probed));
        race_clocks(full, vector)
    }

    /// Send `i`'s clock as its destination sees it.
    pub fn send(&self, i: usize) -> Option<u64> {
        self.send.get(i).copied().filter(|&c| c != NO_CLOCK)
    }

    /// Receive `i`'s clock when it matched.
    pub fn recv(&self, i: usize) -> Option<u64> {
        self.recv.get(i).copied().filter(|&c| c != NO_CLOCK)
    }
}

/// The race rules' clocks out of a walk with `races`.
pub(super) fn race_clocks(full: Pass, vector: bool) -> RaceClocks {
    if vector {
        RaceClocks {
            mode: "vector",
            send: full.send_own,
            recv: full.recv_own,
        }
    } else {
        RaceClocks {
            mode: "lamport",
            send: full.send_lc.0,
            recv: full.recv_lc.0.iter().map(|&(matched, _)| matched).collect(),
        }
    }
}
