//! What every viewer export reads: a trace with its messages, its
//! collectives, its Lamport clocks and one time base.
//!
//! The time base is the synchronized one when `pmtrace sync` ran (its times
//! keep each location's order, so they are monotone per thread as OTF2
//! requires), else the recorded one. Exports ask [`View::time`] and never
//! pick a base themselves; the HTML timeline also reads [`View::raw`].

use pmtrace_trace::{Call, Events, Payload};

use pmtrace_format::Kind;
use pmtrace_matching::clocks::{self, Clocks};
use pmtrace_matching::collective::{self, Instance, MemberCalls};
use pmtrace_matching::ends::{self, Cursor, End, ThreadEnds};
use pmtrace_matching::matching::Messages;
use pmtrace_sync::store::ThreadTimes;
use pmtrace_sync::Synced;
use pmtrace_trace::read::{EventRef, Trace};

/// One application thread of one rank: a track, an OTF2 location, a lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub rank: u32,
    /// Thread index (as in [`EventRef::thread`]).
    pub thread: u32,
    /// Position in `Rank::threads`.
    pub slot: usize,
}

/// A communicator's name as the exports give it: `MPI_COMM_WORLD`,
/// `MPI_COMM_SELF (rank r)`, or `communicator 0x…` (its global id).
pub fn comm_name(c: &pmtrace_trace::comm::Comm) -> String {
    match c.global_id {
        pmtrace_trace::comm::WORLD_ID => "MPI_COMM_WORLD".to_owned(),
        id if id & 0xffff_ffff == 1 && c.members.len() == 1 => {
            format!("MPI_COMM_SELF (rank {})", id >> 32)
        }
        id => format!("communicator {id:#x}"),
    }
}

/// What a viewer shows about one call beside its name and times.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallDetail {
    /// World rank of the first message's peer (or the collective's root).
    pub peer: Option<u32>,
    pub tag: Option<i32>,
    /// Bytes moved: point-to-point sent plus received, or a collective's
    /// sent plus received.
    pub bytes: u64,
    /// Global id of the communicator ([`pmtrace_trace::comm::Comm`]): of
    /// the first message, or of the collective.
    pub comm: Option<u64>,
}

/// A nonblocking operation between the call that started it and the call
/// that completed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    pub start: EventRef,
    pub end: EventRef,
    pub detail: CallDetail,
}

/// A location's record times in an export's base ([`View::times`]).
#[derive(Clone, Copy)]
pub struct LocTimes<'a> {
    synced: Option<&'a ThreadTimes>,
    records: &'a Events,
}

impl LocTimes<'_> {
    /// Start and end of record `i`.
    #[inline]
    pub fn get(&self, i: usize) -> (u64, u64) {
        let raw = || self.records.stamps(i);
        match self.synced {
            Some(t) => match (t.get(self.records, 2 * i), t.get(self.records, 2 * i + 1)) {
                (Some(a), Some(b)) => (a, b),
                (a, b) => (a.unwrap_or_else(|| raw().0), b.unwrap_or_else(|| raw().1)),
            },
            None => raw(),
        }
    }
}

/// A trace ready to be drawn.
pub struct View<'a> {
    pub trace: &'a Trace,
    pub messages: &'a Messages,
    pub synced: Option<&'a Synced>,
    pub clocks: Clocks,
    pub collectives: Vec<Instance<MemberCalls>>,
    pub locations: Vec<Location>,
    /// The send each receive matched (FIFO rule), by receive index.
    pub send_of_recv: Vec<Option<usize>>,
    /// Earliest and latest time of the base.
    pub span: (u64, u64),
    /// `messages.recvs[..own_recvs]` are the receives of the view's ranks
    /// (a block's messages hold other blocks' receives after them).
    pub own_recvs: usize,
}

impl<'a> View<'a> {
    pub fn new(trace: &'a Trace, messages: &'a Messages, synced: Option<&'a Synced>) -> View<'a> {
        let (clocks, collectives) = rayon::join(
            || clocks::compute(trace, messages),
            || collective::instances(trace),
        );
        View::assemble(trace, messages, synced, clocks, collectives)
    }

    /// The view of one block of a trace's ranks (`pmtrace-mpi`), with the
    /// clocks computed over all blocks and without collective instances
    /// (an instance's members lie in several blocks); its span is the
    /// block's until the caller sets the whole trace's.
    pub fn of_block(
        trace: &'a Trace,
        messages: &'a Messages,
        synced: Option<&'a Synced>,
        clocks: Clocks,
    ) -> View<'a> {
        View::assemble(trace, messages, synced, clocks, Vec::new())
    }

    /// The view's collective instances: a block's hold its own members.
    pub fn with_collectives(mut self, collectives: Vec<Instance<MemberCalls>>) -> View<'a> {
        self.collectives = collectives;
        self
    }

    fn assemble(
        trace: &'a Trace,
        messages: &'a Messages,
        synced: Option<&'a Synced>,
        clocks: Clocks,
        collectives: Vec<Instance<MemberCalls>>,
    ) -> View<'a> {
        let mut send_of_recv = vec![None; messages.recvs.len()];
        for m in &messages.matched {
            send_of_recv[m.recv] = Some(m.send);
        }
        let locations = trace
            .ranks
            .iter()
            .flat_map(|r| {
                r.threads.iter().enumerate().map(|(slot, th)| Location {
                    rank: r.rank,
                    thread: th.index,
                    slot,
                })
            })
            .collect();
        let mut view = View {
            trace,
            messages,
            synced,
            clocks,
            collectives,
            locations,
            send_of_recv,
            span: (0, 0),
            own_recvs: messages.recvs.len(),
        };
        view.span = view.compute_span();
        view
    }

    fn compute_span(&self) -> (u64, u64) {
        View::clamp_span(self.raw_span())
    }

    /// The earliest and latest time of the locations, `(u64::MAX, 0)`
    /// when they have no records.
    pub fn raw_span(&self) -> (u64, u64) {
        use rayon::prelude::*;
        self.locations
            .par_iter()
            .map(|loc| {
                let times = self.times(*loc);
                (0..self.records(*loc).len())
                    .map(|i| times.get(i))
                    .fold((u64::MAX, 0), |(lo, hi), (a, b)| (lo.min(a), hi.max(b)))
            })
            .reduce(|| (u64::MAX, 0), |x, y| (x.0.min(y.0), x.1.max(y.1)))
    }

    /// The span of `(earliest, latest)` over some locations: none when
    /// there is no time.
    pub fn clamp_span((lo, hi): (u64, u64)) -> (u64, u64) {
        if lo > hi {
            (0, 0)
        } else {
            (lo, hi)
        }
    }

    /// Every user phase, on this view's time base, by rank, thread and start.
    pub fn phases(&self) -> Vec<pmtrace_trace::phases::PhaseSpan> {
        pmtrace_trace::phases::spans(self.trace, |at| {
            Some((self.time(at, false), self.time(at, true)))
        })
    }

    /// The phases of one location, as `phases` gives them.
    pub fn phases_of(&self, loc: Location) -> Vec<pmtrace_trace::phases::PhaseSpan> {
        pmtrace_trace::phases::spans_of(self.trace, loc.rank, loc.thread, |at| {
            Some((self.time(at, false), self.time(at, true)))
        })
    }

    /// The records of a location.
    pub fn records(&self, loc: Location) -> &'a Events {
        &self.trace.held(loc.rank).threads[loc.slot].records
    }

    pub fn at(&self, loc: Location, index: usize) -> EventRef {
        EventRef {
            rank: loc.rank,
            thread: loc.thread,
            index: index as u32,
        }
    }

    /// The start (or end) of a record in the export's time base.
    pub fn time(&self, at: EventRef, end: bool) -> u64 {
        self.synced
            .and_then(|s| s.time(self.trace, at, end))
            .unwrap_or_else(|| self.raw(at, end))
    }

    /// The start (or end) of a record as recorded.
    pub fn raw(&self, at: EventRef, end: bool) -> u64 {
        let Some(th) = self.trace.rank(at.rank).and_then(|r| r.thread(at.thread)) else {
            return 0;
        };
        if at.pos() >= th.records.len() {
            return 0;
        }
        let (a, b) = th.records.stamps(at.pos());
        if end {
            b
        } else {
            a
        }
    }

    /// The times of a location's records in the export's base, read
    /// without a lookup per record: what [`View::time`] gives.
    pub fn times(&self, loc: Location) -> LocTimes<'a> {
        LocTimes {
            synced: self.synced.and_then(|s| s.thread_times(loc.rank, loc.slot)),
            records: self.records(loc),
        }
    }

    /// The location's calls (record index and call) sorted by start, ties
    /// by end: the order in which their Enter events go out.
    pub fn calls_in_order(&self, loc: Location) -> impl Iterator<Item = (usize, Call<'a>)> + 'a {
        let records = self.records(loc);
        self.order(loc)
            .into_iter()
            .map(move |i| (i as usize, records.call(i as usize).expect("a call")))
    }

    /// The record indices of [`View::calls_in_order`].
    pub fn order(&self, loc: Location) -> Vec<u32> {
        use rayon::prelude::*;
        let records = self.records(loc);
        let times = self.times(loc);
        // Usually record order already is: then no sort.
        let calls: Vec<u32> = (0..records.len() as u32)
            .filter(|&i| records.is_call(i as usize))
            .collect();
        if calls
            .par_windows(2)
            .all(|w| times.get(w[0] as usize) <= times.get(w[1] as usize))
        {
            return calls;
        }
        drop(calls);
        let mut calls: Vec<(u64, u64, u32)> = (0..records.len())
            .filter(|&i| records.is_call(i))
            .map(|i| {
                let (a, b) = times.get(i);
                (a, b, i as u32)
            })
            .collect();
        calls.sort_unstable();
        calls.into_iter().map(|(_, _, i)| i).collect()
    }

    pub fn function_name(&self, rank: u32, call: &Call) -> &'a str {
        self.trace.held(rank).function_name(call.func)
    }

    /// The message ends of the call at `at` in one of its thread's lists.
    fn ends_at(&self, at: EventRef, list: fn(&'a ThreadEnds) -> &'a [End]) -> &'a [End] {
        let Some(rank) = self.trace.rank(at.rank) else {
            return &[];
        };
        let Ok(slot) = rank.threads.binary_search_by_key(&at.thread, |t| t.index) else {
            return &[];
        };
        ends::at(list(self.messages.ends.thread(at.rank, slot)), at.index)
    }

    /// The sends the call at `at` posted (indices into the messages'
    /// sends), in item order.
    pub fn sends_at(&self, at: EventRef) -> impl Iterator<Item = usize> + 'a {
        self.ends_at(at, |t| &t.sends)
            .iter()
            .map(|e| e.msg as usize)
    }

    /// The Lamport clock after a call, if the trace has clocks.
    pub fn lamport(&self, at: EventRef) -> Option<u64> {
        if self.clocks.report.mode == "none" {
            return None;
        }
        self.clocks.after_call.get(at)
    }

    /// Peer, tag and bytes of a call.
    pub fn detail(&self, at: EventRef, call: &Call) -> CallDetail {
        if call.payload == Payload::None {
            return CallDetail::default();
        }
        let sends = self.ends_at(at, |t| &t.sends);
        let done = self.ends_at(at, |t| &t.done);
        self.detail_of(at, call, sends, done)
    }

    /// [`View::detail`] of a call whose sends and completed receives the
    /// caller found (a walk with [`ends::Cursor`]s).
    pub fn detail_of(&self, at: EventRef, call: &Call, sends: &[End], done: &[End]) -> CallDetail {
        let m = self.messages;
        let mut d = CallDetail::default();
        if call.payload == Payload::None {
            // No message and no peer (MPI_Wtime, MPI_Comm_rank, ...): the
            // common case of a busy trace, without the lookups.
            return d;
        }
        if let Payload::Coll {
            comm,
            root,
            sent,
            recvd,
            ..
        } = call.payload
        {
            d.bytes = sent + recvd;
            d.comm = (self.trace.rank(at.rank))
                .and_then(|r| r.comm_at(comm, call.t_start))
                .map(|c| c.global_id);
            d.peer = root
                .and_then(|r| u32::try_from(r).ok())
                .and_then(|r| self.trace.to_world(at.rank, comm, r));
            return d;
        }
        for e in sends {
            let s = &m.sends[e.msg as usize];
            d.peer = d.peer.or(s.dst);
            d.tag = d.tag.or(Some(s.tag));
            d.comm = d.comm.or(Some(s.comm));
            d.bytes += s.bytes;
        }
        for e in done {
            let r = &m.recvs[e.msg as usize];
            d.peer = d.peer.or(r.src);
            d.tag = d.tag.or(Some(r.tag));
            d.comm = d.comm.or(Some(r.comm));
            d.bytes += r.bytes;
        }
        d
    }

    /// The logical messages of the collectives as (sender's enter, receiver's
    /// exit), for those whose receiving member's exit is known.
    pub fn collective_flows(&self) -> impl Iterator<Item = (EventRef, EventRef)> + '_ {
        self.collectives.iter().flat_map(|inst| {
            inst.drawn_messages().filter_map(|(from, to)| {
                let a = inst.members[from as usize].as_ref()?;
                let exit = inst.members[to as usize].as_ref()?.exit?;
                Some((a.enter, exit))
            })
        })
    }

    /// The nonblocking operations of rank `rank` that completed, each from
    /// its starting call to its completing call: isends and started
    /// persistent sends that moved a message, nonblocking receives, and
    /// nonblocking collectives.
    pub fn in_flight(&self, rank: u32) -> Vec<InFlight> {
        let r = &self.trace.held(rank);
        let m = self.messages;
        let done_at = r.completions();
        let mut out = Vec::new();
        let mut cursors: Vec<Cursor> = (0..r.threads.len())
            .map(|slot| Cursor::new(&m.ends.thread(rank, slot).sends))
            .collect();
        let sends_of = |kind| matches!(kind, Kind::Send | Kind::Isend | Kind::Start);
        for (at, c) in r.payload_calls_of(sends_of) {
            // The request of the send at each item.
            let op_at = |item: u32| match &c.payload {
                Payload::Send { op, .. } if item == 0 => *op,
                Payload::Start { started } => started.get(item as usize).map(|s| s.1),
                _ => None,
            };
            for e in cursors[r.thread_slot(at.thread)].at(at.index) {
                let sv = &m.sends[e.msg as usize];
                let op = op_at(sv.item);
                if let Some(&end) = op.and_then(|op| done_at.get(&op)) {
                    out.push(InFlight {
                        start: at,
                        end,
                        detail: CallDetail {
                            peer: sv.dst,
                            tag: Some(sv.tag),
                            bytes: sv.bytes,
                            comm: Some(sv.comm),
                        },
                    });
                }
            }
        }
        // This rank's receives are one run of them.
        let own = &m.recvs[..self.own_recvs];
        let first = own.partition_point(|r| r.dst < rank);
        let end = first + own[first..].partition_point(|r| r.dst == rank);
        for rv in &own[first..end] {
            if rv.post != rv.completion {
                out.push(InFlight {
                    start: rv.post,
                    end: rv.completion,
                    detail: CallDetail {
                        peer: rv.src,
                        tag: Some(rv.tag),
                        bytes: rv.bytes,
                        comm: Some(rv.comm),
                    },
                });
            }
        }
        for inst in &self.collectives {
            for mc in inst.members.iter().flatten() {
                if let (true, Some(end)) = (mc.enter.rank == rank, mc.exit) {
                    if end != mc.enter {
                        out.push(InFlight {
                            start: mc.enter,
                            end,
                            detail: CallDetail {
                                bytes: mc.sent + mc.recvd,
                                ..CallDetail::default()
                            },
                        });
                    }
                }
            }
        }
        out
    }

    /// Number of calls in the trace.
    pub fn calls(&self) -> u64 {
        self.trace.events()
    }
}
