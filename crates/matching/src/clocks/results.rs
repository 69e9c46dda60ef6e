//! What the clock rebuild gives: the report, and each send's, receive's
//! and call's clocks.

use super::*;

/// What `pmtrace report --json` shows under `clocks`.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct ClockReport {
    pub mode: String,
    /// Receives matched to their send through the piggybacked id.
    pub matched_by_id: u64,
    /// Receives with a piggyback whose id matching differs from the
    /// FIFO-rule matching.
    pub fifo_disagreements: u64,
    /// The same on channels several threads use (sending or posting
    /// receives), which MPI does not order; absent from the JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub fifo_unordered: u64,
    /// Receives that carried no piggyback, or an id no send has.
    pub unmatched_by_id: u64,
    /// Matched pairs with send.lc >= recv.lc (after the merge).
    pub lamport_violations: u64,
    /// Matched pairs whose vector clocks are not ordered send < receive.
    pub vector_violations: Option<u64>,
    /// Piggybacks (clock, send time, vector clock) that differ from what the
    /// sender's replayed clock says it sent.
    pub wire_mismatches: u64,
    /// Piggybacks checked against the replay (single-threaded senders).
    pub wire_checked: u64,
    /// Matched piggybacks left unchecked because a rank at one end has
    /// several threads that call MPI; absent from the JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub wire_unchecked: u64,
    /// Places where a clock decreased along a rank (or along one sender's
    /// messages): 0 on every correct run.
    pub decreasing: u64,
    /// Brute-force happens-before check of the vector clocks (small runs).
    pub happens_before: Option<HbCheck>,
    /// Events whose dependencies could not be resolved (a trace with lost
    /// events); their clocks use what was known.
    pub forced: u64,
}

impl ClockReport {
    /// The receives' checks by id ([`Messages::id_checks`]).
    pub fn set_ids(&mut self, c: IdChecks) {
        self.matched_by_id = c.matched_by_id;
        self.unmatched_by_id = c.unmatched_by_id;
        self.fifo_disagreements = c.fifo_disagreements;
        self.fifo_unordered = c.fifo_unordered;
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct HbCheck {
    pub events: u64,
    pub pairs: u64,
    /// Pairs where `VC(a) < VC(b)` and `a → b` disagree.
    pub disagreements: u64,
}

/// Clocks of one trace.
#[derive(Debug, Clone, Default)]
pub struct Clocks {
    /// The report's `clocks` object.
    pub report: ClockReport,
    /// Lamport clock of each call record after the call.
    pub after_call: CallClocks,
    /// For each receive of [`Messages::recvs`]: its LLCP match clock (the
    /// clock it got when it matched) and its clock after the merge.
    pub recv_lc: RecvClocks,
}

/// A clock per send, if it has one (`NO_CLOCK`: none).
#[derive(Debug, Clone, Default)]
pub(super) struct SendClocks(pub(super) Vec<u64>);

impl SendClocks {
    pub(super) fn new(n: usize) -> SendClocks {
        SendClocks(vec![NO_CLOCK; n])
    }

    pub(super) fn get(&self, i: usize) -> Option<u64> {
        Some(self.0[i]).filter(|&c| c != NO_CLOCK)
    }

    pub(super) fn set(&mut self, i: usize, c: u64) {
        self.0[i] = c;
    }
}

/// Two clocks per receive (match, after the merge), if it has them.
#[derive(Debug, Clone, Default)]
pub struct RecvClocks(pub(super) Vec<(u64, u64)>);

impl RecvClocks {
    pub(super) fn new(n: usize) -> RecvClocks {
        RecvClocks(vec![(NO_CLOCK, NO_CLOCK); n])
    }

    /// Receive `i`'s match clock and clock after the merge.
    pub fn get(&self, i: usize) -> Option<(u64, u64)> {
        Some(self.0[i]).filter(|&(a, _)| a != NO_CLOCK)
    }

    pub(super) fn set(&mut self, i: usize, c: (u64, u64)) {
        self.0[i] = c;
    }
}

/// The clock after each call record, per thread. A clock changes only at
/// calls that communicate, so a thread whose calls ran in record order keeps
/// only its changes, (record, clock) in record order, and a call takes the
/// clock of the last change at or before it; a thread whose time order
/// differs from its record order keeps one clock per record.
#[derive(Debug, Clone, Default)]
pub struct CallClocks {
    /// Per rank number: per thread, its index and clocks.
    pub(super) ranks: Vec<Vec<(u32, ThreadClocks)>>,
}

#[derive(Debug, Clone)]
pub(super) enum ThreadClocks {
    Steps(Vec<(u32, u64)>),
    Dense(Vec<u64>),
}

/// One thread's clocks ([`CallClocks::thread`]): the same values as
/// [`CallClocks::get`], found from where the last lookup ended.
pub struct ThreadClockReader<'a> {
    pub(super) clocks: Option<&'a ThreadClocks>,
    /// Steps before this one are at or before the last index looked up.
    pub(super) at: usize,
}

impl ThreadClockReader<'_> {
    /// The clock after call record `index`.
    pub fn get(&mut self, index: usize) -> Option<u64> {
        match self.clocks? {
            ThreadClocks::Dense(v) => v.get(index).copied().filter(|&c| c != NO_CLOCK),
            ThreadClocks::Steps(v) => {
                let before = |k: usize| v.get(k).is_some_and(|&(i, _)| i as usize <= index);
                if self.at > 0 && !before(self.at - 1) {
                    self.at = v.partition_point(|&(i, _)| i as usize <= index);
                } else {
                    while before(self.at) {
                        self.at += 1;
                    }
                }
                Some(if self.at == 0 { 0 } else { v[self.at - 1].1 })
            }
        }
    }
}

/// No clock for this record (not a call, or never reached).
pub(super) const NO_CLOCK: u64 = u64::MAX;

/// A receive not posted (see `Walker::post_order`).
pub(super) const NO_POST: u32 = u32::MAX;

impl CallClocks {
    pub(super) fn new(trace: &Trace, dense: &[Vec<bool>]) -> CallClocks {
        let len = trace
            .ranks
            .iter()
            .map(|r| r.rank as usize + 1)
            .max()
            .unwrap_or(0);
        let mut ranks = vec![Vec::new(); len];
        for (r, dense) in trace.ranks.iter().zip(dense) {
            ranks[r.rank as usize] = r
                .threads
                .iter()
                .zip(dense)
                .map(|(th, &dense)| {
                    let clocks = if dense {
                        ThreadClocks::Dense(vec![NO_CLOCK; th.records.len()])
                    } else {
                        ThreadClocks::Steps(Vec::new())
                    };
                    (th.index, clocks)
                })
                .collect();
        }
        CallClocks { ranks }
    }

    /// Sets the clock after call record `index` of `rank`'s thread `thread`.
    pub(super) fn set(&mut self, rank: u32, thread: u32, index: u32, lc: u64) {
        let Some(threads) = self.ranks.get_mut(rank as usize) else {
            return;
        };
        let Some((_, clocks)) = threads.iter_mut().find(|(t, _)| *t == thread) else {
            return;
        };
        match clocks {
            ThreadClocks::Dense(v) => {
                if let Some(c) = v.get_mut(index as usize) {
                    *c = lc;
                }
            }
            ThreadClocks::Steps(v) => match v.last_mut() {
                Some((i, c)) if *i == index => *c = lc,
                Some(&mut (_, c)) if c == lc => {}
                _ => v.push((index, lc)),
            },
        }
    }

    /// The clock after the call at `at` (a call record).
    pub fn get(&self, at: EventRef) -> Option<u64> {
        let threads = self.ranks.get(at.rank as usize)?;
        let (_, clocks) = threads.iter().find(|(t, _)| *t == at.thread)?;
        match clocks {
            ThreadClocks::Dense(v) => v.get(at.pos()).copied().filter(|&c| c != NO_CLOCK),
            ThreadClocks::Steps(v) => {
                let k = v.partition_point(|&(i, _)| i <= at.index);
                Some(if k == 0 { 0 } else { v[k - 1].1 })
            }
        }
    }

    /// A reader of one thread's clocks, fastest for calls in record order.
    pub fn thread(&self, rank: u32, thread: u32) -> ThreadClockReader<'_> {
        let clocks = self
            .ranks
            .get(rank as usize)
            .and_then(|threads| threads.iter().find(|(t, _)| *t == thread))
            .map(|(_, c)| c);
        ThreadClockReader { clocks, at: 0 }
    }

    /// Places where the clock decreased along a thread, call by call.
    pub(super) fn decreasing(&self) -> u64 {
        let mut n = 0;
        for (_, clocks) in self.ranks.iter().flatten() {
            let mut prev = 0;
            let mut count = |c: u64| {
                if c < prev {
                    n += 1;
                }
                prev = c;
            };
            match clocks {
                ThreadClocks::Dense(v) => {
                    v.iter().filter(|&&c| c != NO_CLOCK).for_each(|&c| count(c))
                }
                ThreadClocks::Steps(v) => v.iter().for_each(|&(_, c)| count(c)),
            }
        }
        n
    }
}
