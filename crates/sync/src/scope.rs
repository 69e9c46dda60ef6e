//! Where one synchronization runs: the whole trace in this process
//! ([`Whole`]), or one block of ranks among others in a parallel run
//! (`pmtrace-parallel`'s scope over a fabric).
//!
//! [`crate::sync`]'s three steps are written once, against [`Scope`]. What
//! a block cannot know alone (a sum, a largest value, a percentile, a fit
//! of messages between two clock groups, the CLC replay) is asked of the
//! scope; the whole trace answers each from its own graph.

use crate::clc::{self, ClcOutcome, ClcParams};
use crate::graph::{Graph, Times};
use crate::quality::{self, ErrorStats, SyncViolations};
use crate::regress::{self, Checks, Correction};
use pmtrace_trace::read::Trace;

/// The ranks one synchronization sees, and how its measures combine with
/// those of the ranks it does not see. Every process of a run calls each
/// method in the same order.
pub trait Scope<'t> {
    /// This scope's ranks (`first` is its first world rank).
    fn trace(&self) -> &'t Trace;
    /// The graph of this scope's stamps.
    fn graph(&self) -> &Graph<'t>;
    fn graph_mut(&mut self) -> &mut Graph<'t>;
    /// Element-wise sums over every scope.
    fn sum(&self, _v: &mut [u64]) {}
    /// Element-wise maxima over every scope.
    fn max(&self, _v: &mut [u64]) {}
    /// Every scope's step-1 checks, merged in rank order (the first time
    /// of a group and its largest bound).
    fn checks(&self, mine: Checks) -> Checks {
        mine
    }
    /// The clock group of world rank 0.
    fn reference(&self) -> u32;
    /// Step 2 on the messages of every scope, of `groups` clock groups.
    fn estimate(
        &self,
        t: &(impl Times + ?Sized),
        groups: usize,
        reference: u32,
        anchors: &[Option<u64>],
        checks: &Checks,
    ) -> Correction;
    /// [`quality::latency_floor`] over every scope's messages.
    fn latency_floor(&self, t: &(impl Times + ?Sized), same_host: bool) -> Option<u64>;
    /// [`quality::violations`] over every scope.
    fn violations(&self, t: &(impl Times + ?Sized)) -> SyncViolations;
    /// [`quality::error_stats`] of every scope's errors together.
    fn error_stats(&self, errs: Vec<u64>) -> ErrorStats;
    /// Step 3.
    fn clc(&self, t: &impl Times, p: &ClcParams) -> (Vec<Vec<u64>>, ClcOutcome);

    /// The sum of `x` over every scope.
    fn sum_of(&self, x: u64) -> u64 {
        let mut v = [x];
        self.sum(&mut v);
        v[0]
    }
    /// The largest `x` of every scope.
    fn max_of(&self, x: u64) -> u64 {
        let mut v = [x];
        self.max(&mut v);
        v[0]
    }
    /// The least of every scope's `x` (`None` where none has one).
    fn min_of(&self, x: Option<u64>) -> Option<u64> {
        let mut v = [u64::MAX - x.unwrap_or(u64::MAX)];
        self.max(&mut v);
        (v[0] > 0).then(|| u64::MAX - v[0])
    }
}

/// Every rank of a trace, in this process.
pub struct Whole<'t> {
    pub trace: &'t Trace,
    pub g: Graph<'t>,
}

impl<'t> Scope<'t> for Whole<'t> {
    fn trace(&self) -> &'t Trace {
        self.trace
    }
    fn graph(&self) -> &Graph<'t> {
        &self.g
    }
    fn graph_mut(&mut self) -> &mut Graph<'t> {
        &mut self.g
    }
    fn reference(&self) -> u32 {
        self.g
            .locs
            .iter()
            .find(|l| l.rank == 0)
            .map_or(0, |l| l.group)
    }
    fn estimate(
        &self,
        t: &(impl Times + ?Sized),
        _groups: usize,
        reference: u32,
        anchors: &[Option<u64>],
        checks: &Checks,
    ) -> Correction {
        regress::estimate(&self.g, t, reference, anchors, checks)
    }
    fn latency_floor(&self, t: &(impl Times + ?Sized), same_host: bool) -> Option<u64> {
        quality::latency_floor(&self.g, t, same_host)
    }
    fn violations(&self, t: &(impl Times + ?Sized)) -> SyncViolations {
        quality::violations(&self.g, t)
    }
    fn error_stats(&self, errs: Vec<u64>) -> ErrorStats {
        quality::error_stats(errs)
    }
    fn clc(&self, t: &impl Times, p: &ClcParams) -> (Vec<Vec<u64>>, ClcOutcome) {
        clc::run(&self.g, t, p)
    }
}
