//! Wait states: time a rank spends inside MPI only because another rank
//! was late, after Scalasca's patterns, on synchronized time when
//! `pmtrace sync` ran (else on the recorded times, and the report says so).
//!
//! - **Late sender**: a blocking receive (`MPI_Recv`, `MPI_Sendrecv`,
//!   `MPI_Mrecv`, or a `Wait` family call completing a receive) began
//!   before its message's send did: it waited from its start until the
//!   send's start (at most its own end). A call completing several
//!   receives waits once, for the latest send.
//! - **Late receiver**: a blocking send (`MPI_Send`, `MPI_Ssend`,
//!   `MPI_Rsend`, `MPI_Sendrecv`) that did not return before its receive
//!   was posted waited from its start until that posting.
//! - **Wait at N×N**: in a blocking all-to-all collective (`Allreduce`,
//!   `Allgather`, `Alltoall`, ...), each member waits from its enter until
//!   the last member's enter (at most its own exit).
//! - **Wait at barrier**: the same in `MPI_Barrier`.
//! - **Late broadcast**: in a blocking one-to-all collective (`Bcast`,
//!   `Scatter`), a member other than the root that entered before the root
//!   waits until the root's enter.
//!
//! **Causes.** Each wait is charged to the rank that was late and the call
//! it was late for: the sender and its send, the receiver and its posting
//! call, the collective's last member (the root for a broadcast) and its
//! call. What delayed that rank is its own work before that call.
//!
//! **Root causes** (after Scalasca's delay analysis). A late rank may be
//! late only because it waited itself just before: its call before the
//! late one was a wait caused by a third rank, longer than the computation
//! between the two calls. Then the wait goes on to that rank's late call,
//! and so on (at most 64 steps). Where it stops, the delay is the root
//! rank's computation before its late call. `root_causes` charges every
//! wait to its root (`indirect`: waits that reached it through another
//! rank's wait).

use std::borrow::Cow;
use std::collections::BTreeMap;

use pmtrace_format::Kind;
use pmtrace_matching::clocks::Shape;
use pmtrace_matching::collective::{Flow, Instance, MemberCalls};
use pmtrace_matching::matching::{Messages, RecvEvent, SendEvent};
use pmtrace_trace::read::{EventRef, Trace};
use pmtrace_trace::wire::{In, Out};
use rayon::prelude::*;
use serde::Serialize;

use crate::times::Times;

/// The wait states of a trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitStates {
    /// "synchronized" (the times `pmtrace sync` wrote) or "recorded".
    pub time_base: &'static str,
    /// Time inside MPI calls, all ranks, in ns.
    pub mpi_ns: u64,
    /// Time in wait states, all ranks, in ns.
    pub wait_ns: u64,
    pub share_of_mpi: f64,
    pub by_kind: Vec<WaitRow>,
    /// By rank and kind; shares of that rank's MPI time.
    pub by_rank: Vec<WaitRow>,
    /// By function and kind; shares of all MPI time.
    pub by_function: Vec<WaitRow>,
    /// By communicator (global id) and kind; shares of all MPI time.
    pub by_comm: Vec<WaitRow>,
    /// Who was late for which call, and how much waiting it caused: the
    /// largest first, at most [`CAUSES_SHOWN`].
    pub causes: Vec<Cause>,
    /// The same waits charged to the computation that started them.
    pub root_causes: Vec<RootCause>,
}

/// Waiting traced back to a rank's computation before a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RootCause {
    pub rank: u32,
    /// The call the rank was late for.
    pub function: String,
    /// The waiting it caused, directly and through other ranks' waits.
    pub ns: u64,
    pub waits: u64,
    /// Waits that reached it through another rank's wait.
    pub indirect: u64,
    /// The rank's computation right before those calls (each call once).
    pub delay_ns: u64,
}

/// Wait time of one kind, for a rank, a function or a communicator.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitRow {
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comm: Option<u64>,
    pub ns: u64,
    /// Calls that waited.
    pub count: u64,
    pub share_of_mpi: f64,
}

/// A rank late for a call, and the waiting it caused on other ranks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cause {
    pub kind: &'static str,
    pub rank: u32,
    pub function: String,
    pub ns: u64,
    pub waits: u64,
}

pub const CAUSES_SHOWN: usize = 20;

pub const LATE_SENDER: &str = "late_sender";
pub const LATE_RECEIVER: &str = "late_receiver";
pub const WAIT_AT_NXN: &str = "wait_at_nxn";
pub const WAIT_AT_BARRIER: &str = "wait_at_barrier";
pub const LATE_BROADCAST: &str = "late_broadcast";

/// The most steps a root cause's chain takes (module docs).
pub const CHAIN_STEPS: usize = 64;

/// A call and the computation before it: the call before it in its
/// thread, and the time from that call's end to its start.
pub fn gap_before(trace: &Trace, times: &Times, call: EventRef) -> Option<(EventRef, u64)> {
    let prev = crate::path::previous_call(trace, call)?;
    let (a, _) = times.of(call)?;
    let (_, b) = times.of(prev)?;
    Some((prev, a.saturating_sub(b)))
}

/// The next late call of a root cause's chain from the late call `at`
/// (whose gap before is `gap`): the cause of the call before it, when that
/// call waited for another rank longer than the computation between.
pub fn chain_next(
    at: EventRef,
    gap: Option<(EventRef, u64)>,
    wait_at: impl Fn(EventRef) -> Option<Wait>,
) -> Option<EventRef> {
    let (prev, gap) = gap?;
    wait_at(prev)
        .filter(|wp| wp.cause.rank != at.rank && wp.ns > gap)
        .map(|wp| wp.cause)
}

/// `root_causes`: each wait followed back through the waits of the late
/// ranks (module docs). `waits` are sorted by the waiting call. A chain's
/// root is where it ends, or its call after [`CHAIN_STEPS`] steps: which
/// chain ran first does not change it.
fn roots<'t>(trace: &Trace, times: &'t Times, waits: &[Wait]) -> BTreeMap<(u32, &'t str), Roots> {
    // The longest wait of each call that waited, by the call's number (of
    // equals the last, as `max_by_key` gives). A wait at no record of the
    // trace has no number, and no place here.
    let waited = Numbered::new(trace, waits.iter().map(|w| w.at));
    let mut longest: Vec<u32> = Vec::with_capacity(waited.len());
    for (i, w) in waits.iter().enumerate() {
        if waited.bit(w.at).is_none() {
            continue;
        }
        match longest.last_mut() {
            Some(l) if waits[*l as usize].at == w.at => {
                if w.ns >= waits[*l as usize].ns {
                    *l = i as u32;
                }
            }
            _ => longest.push(i as u32),
        }
    }
    let wait_at = |at: EventRef| -> Option<Wait> {
        let k = waited.number(at)?;
        Some(waits[longest[k] as usize])
    };
    let gap_before = |call: EventRef| gap_before(trace, times, call);
    let next = |at: EventRef| chain_next(at, gap_before(at), wait_at);
    // Every call on a chain is the cause of some wait: its start, and each
    // step (the cause of the wait before a late call).
    let causes = Numbered::new(trace, waits.iter().map(|w| w.cause));
    // The end of each chain that ended within the limit, and how many
    // steps from each call on it: a later chain that meets one of them
    // takes its end if it is near enough. By the call's number among the
    // causes: `memo_end` holds the end's number, `NOT_ENDED` where no chain
    // has ended through the call (the waits, 56 bytes each, number fewer).
    const NOT_ENDED: u32 = u32::MAX;
    let mut memo_end: Vec<u32> = vec![NOT_ENDED; causes.len()];
    let mut memo_steps: Vec<u8> = vec![0; causes.len()];
    let number = |at: EventRef| causes.number(at);
    let mut root_of = |start: EventRef| -> EventRef {
        let mut chain: Vec<EventRef> = Vec::new();
        let mut at = start;
        let (root, ended) = loop {
            if let Some(k) = number(at).filter(|&k| memo_end[k] != NOT_ENDED) {
                let d = usize::from(memo_steps[k]);
                if chain.len() + d < CHAIN_STEPS {
                    break (causes.member(memo_end[k] as usize), Some(chain.len() + d));
                }
            }
            if chain.len() >= CHAIN_STEPS {
                break (at, None);
            }
            chain.push(at);
            match next(at) {
                Some(n) => at = n,
                None => break (at, Some(chain.len() - 1)),
            }
        };
        if let (Some(last), Some(end)) = (ended, number(root)) {
            for (i, c) in chain.into_iter().enumerate() {
                if let Some(k) = number(c) {
                    memo_end[k] = end as u32;
                    // Below CHAIN_STEPS (64), so a byte holds it.
                    memo_steps[k] = (last - i) as u8;
                }
            }
        }
        root
    };
    // Summed by (rank, function) first, then by name.
    let mut by_call: rustc_hash::FxHashMap<(u32, Option<u32>), Roots> = Default::default();
    let mut counted = vec![false; causes.len()];
    for w in waits {
        let cause = root_of(w.cause);
        let e = by_call.entry((cause.rank, times.func(cause))).or_default();
        e.0 = e.0.saturating_add(w.ns);
        e.1 += 1;
        e.2 += u64::from(cause != w.cause);
        // Every chain's call is a cause, numbered: `None` is never seen.
        let first = number(cause).is_none_or(|k| !std::mem::replace(&mut counted[k], true));
        if first {
            e.3 = e.3.saturating_add(gap_before(cause).map_or(0, |x| x.1));
        }
    }
    let mut acc: BTreeMap<(u32, &str), Roots> = BTreeMap::new();
    for ((rank, func), v) in by_call {
        let e = acc.entry((rank, times.name_of(rank, func))).or_default();
        e.0 = e.0.saturating_add(v.0);
        e.1 += v.1;
        e.2 += v.2;
        e.3 = e.3.saturating_add(v.3);
    }
    acc
}

/// A set of a trace's records, each member numbered by its place in
/// record order (rank, thread, index): a bit per record and a count per
/// word of 64 bits, so that a member's number takes two lookups in small
/// tables where a hash map or a binary search misses the cache.
struct Numbered {
    /// Every thread: (its first bit, rank, thread index, records), in
    /// record order.
    threads: Vec<(usize, u32, u32, usize)>,
    /// Where each rank's threads begin in `threads`, by rank less `first`.
    of_rank: Vec<usize>,
    first: u32,
    words: Vec<u64>,
    /// Members in the words before each.
    before: Vec<u32>,
    len: usize,
}

impl Numbered {
    fn new(trace: &Trace, members: impl Iterator<Item = EventRef>) -> Numbered {
        let threads = (trace.ranks.iter())
            .flat_map(|r| (r.threads.iter()).map(|th| (r.rank, th.index, th.records.len())));
        Numbered::over(trace.first, threads, members)
    }

    /// The set of `members` among the records of `threads`: (rank, thread
    /// index, records) in order, ranks from `first` on without a gap.
    fn over(
        first: u32,
        threads: impl Iterator<Item = (u32, u32, usize)>,
        members: impl Iterator<Item = EventRef>,
    ) -> Numbered {
        let (mut all, mut of_rank, mut next) = (Vec::new(), Vec::new(), 0);
        for (rank, thread, records) in threads {
            while of_rank.len() <= (rank - first) as usize {
                of_rank.push(all.len());
            }
            all.push((next, rank, thread, records));
            next += records;
        }
        of_rank.push(all.len());
        let mut set = Numbered {
            threads: all,
            of_rank,
            first,
            words: vec![0; next.div_ceil(64)],
            before: Vec::new(),
            len: 0,
        };
        for at in members {
            if let Some(bit) = set.bit(at) {
                set.words[bit / 64] |= 1 << (bit % 64);
            }
        }
        set.before = (set.words.iter())
            .scan(0u32, |n, w| {
                let at = *n;
                *n += w.count_ones();
                Some(at)
            })
            .collect();
        set.len = set.words.iter().map(|w| w.count_ones() as usize).sum();
        set
    }

    /// Where record `at` is among all the trace's records.
    fn bit(&self, at: EventRef) -> Option<usize> {
        let r = at.rank.checked_sub(self.first)? as usize;
        let threads = self
            .threads
            .get(*self.of_rank.get(r)?..*self.of_rank.get(r + 1)?)?;
        let &(first, _, _, len) = threads.iter().find(|t| t.2 == at.thread)?;
        (at.pos() < len).then_some(first + at.pos())
    }

    /// Member number `k`.
    fn member(&self, k: usize) -> EventRef {
        let w = self.before.partition_point(|&b| b as usize <= k) - 1;
        let mut word = self.words[w];
        for _ in 0..k - self.before[w] as usize {
            word &= word - 1;
        }
        let bit = w * 64 + word.trailing_zeros() as usize;
        let t = self.threads[self.threads.partition_point(|t| t.0 <= bit) - 1];
        EventRef {
            rank: t.1,
            thread: t.2,
            index: (bit - t.0) as u32,
        }
    }

    /// How many members there are.
    fn len(&self) -> usize {
        self.len
    }

    /// `at`'s number among the members, if it is one.
    fn number(&self, at: EventRef) -> Option<usize> {
        let bit = self.bit(at)?;
        let word = self.words[bit / 64];
        let mask = 1u64 << (bit % 64);
        (word & mask != 0)
            .then(|| (self.before[bit / 64] + (word & (mask - 1)).count_ones()) as usize)
    }
}

/// A root cause's tallies: the waiting it caused, the waits, the
/// indirect ones, and the delay before its calls.
pub type Roots = (u64, u64, u64, u64);

/// Root causes from their tallies by (rank, function): (ns, waits,
/// indirect, delay); the largest first (of equals the lowest rank), at
/// most [`CAUSES_SHOWN`].
pub fn top_roots<S: AsRef<str>>(acc: BTreeMap<(u32, S), (u64, u64, u64, u64)>) -> Vec<RootCause> {
    let mut out: Vec<RootCause> = acc
        .into_iter()
        .map(
            |((rank, function), (ns, waits, indirect, delay_ns))| RootCause {
                rank,
                function: function.as_ref().to_owned(),
                ns,
                waits,
                indirect,
                delay_ns,
            },
        )
        .collect();
    out.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.rank.cmp(&b.rank)));
    out.truncate(CAUSES_SHOWN);
    out
}

/// Causes from their tallies by (rank, function, kind): (ns, waits); the
/// largest first (of equals the lowest rank), at most [`CAUSES_SHOWN`].
pub fn top_causes<S: AsRef<str>>(t: BTreeMap<(u32, S, &'static str), (u64, u64)>) -> Vec<Cause> {
    let mut causes: Vec<Cause> = t
        .into_iter()
        .map(|((rank, function, kind), (ns, waits))| Cause {
            kind,
            rank,
            function: function.as_ref().to_owned(),
            ns,
            waits,
        })
        .collect();
    causes.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.rank.cmp(&b.rank)));
    causes.truncate(CAUSES_SHOWN);
    causes
}

/// One wait: who waited where, how long, and who caused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    pub kind: &'static str,
    /// The call that waited.
    pub at: EventRef,
    pub comm: u64,
    pub ns: u64,
    /// The late rank's call.
    pub cause: EventRef,
}

/// What blocks in the calls that messages wait in: whether `at` is a
/// blocking call that completes a receive (a late sender's victim), and
/// whether it is a blocking send (a late receiver's).
pub fn blocking(trace: &Trace, times: &Times, at: EventRef) -> (bool, bool) {
    let kind = times.func(at).map(|f| trace.held(at.rank).kind(f));
    let name = times.name(at);
    let receive = match kind {
        Some(Kind::Recv | Kind::Sendrecv | Kind::Mrecv) => true,
        Some(Kind::Complete) => name.starts_with("MPI_Wait"),
        _ => false,
    };
    let send = matches!(kind, Some(Kind::Send | Kind::Sendrecv)) && !name.contains("Bsend");
    (receive, send)
}

/// The late-receiver wait of a blocking send that ran over `send` (its
/// call's start and end) while its receive was posted at `posted`: from
/// the send's start to the posting, if the posting came inside it.
pub fn late_receiver(s: &SendEvent, r: &RecvEvent, send: (u64, u64), posted: u64) -> Option<Wait> {
    let (s0, s1) = send;
    (posted > s0 && s1 > posted).then(|| Wait {
        kind: LATE_RECEIVER,
        at: s.call,
        comm: s.comm,
        ns: posted.saturating_sub(s0),
        cause: r.post,
    })
}

/// The late senders, one per blocking call that completed receives: the
/// latest send it waited for (the first of equals in the order offered).
#[derive(Debug, Default)]
pub struct LateSenders(BTreeMap<(u32, u32, u32), (u64, u64, EventRef)>);

impl LateSenders {
    /// Receive `r` of send `s`, completed by a blocking call that ran over
    /// `done`, the send having started at `sent`.
    pub fn add(&mut self, s: &SendEvent, r: &RecvEvent, done: (u64, u64), sent: u64) {
        let (r0, r1) = done;
        if sent <= r0 {
            return;
        }
        // Saturating: times of a corrupt trace (or sync.pmts) may end
        // before they start.
        let ns = sent.min(r1).saturating_sub(r0);
        let key = (r.completion.rank, r.completion.thread, r.completion.index);
        let e = self.0.entry(key).or_insert((0, r.comm, s.call));
        if ns > e.0 {
            *e = (ns, r.comm, s.call);
        }
    }

    /// Adds the late senders `later` found, among receives offered after
    /// these.
    pub fn merge(&mut self, later: LateSenders) {
        for (key, v) in later.0 {
            let e = self.0.entry(key).or_insert(v);
            if v.0 > e.0 {
                *e = v;
            }
        }
    }

    /// The waits, by waiting call.
    pub fn waits(self) -> impl Iterator<Item = Wait> {
        (self.0.into_iter()).filter(|(_, (ns, _, _))| *ns > 0).map(
            |((rank, thread, index), (ns, comm, cause))| Wait {
                kind: LATE_SENDER,
                at: EventRef {
                    rank,
                    thread,
                    index,
                },
                comm,
                ns,
                cause,
            },
        )
    }
}

/// The wait states of the waits [`find`] found.
pub fn states(trace: &Trace, times: &Times, waits: &[Wait]) -> WaitStates {
    summarize(trace, times, waits)
}

/// Every wait of `trace`: late receivers (in send order), late senders
/// (by completing call), then the waits in collectives (instance by
/// instance).
pub fn find(
    trace: &Trace,
    messages: &Messages,
    instances: &[Instance<MemberCalls>],
    times: &Times,
) -> Vec<Wait> {
    // The messages in parts side by side. The parts' late senders merge in
    // order, so that of a call's equal waits the first offered stays.
    let parts: Vec<(Vec<Wait>, LateSenders)> = (messages.matched.par_chunks(1 << 16))
        .map(|part| {
            let mut waits: Vec<Wait> = Vec::new();
            let mut late_senders = LateSenders::default();
            for m in part {
                let (s, r) = (&messages.sends[m.send], &messages.recvs[m.recv]);
                let (Some(done), Some(send)) = (times.of(r.completion), times.of(s.call)) else {
                    continue;
                };
                if blocking(trace, times, r.completion).0 {
                    late_senders.add(s, r, done, send.0);
                }
                let Some((posted, _)) = times.of(r.post) else {
                    continue;
                };
                if blocking(trace, times, s.call).1 {
                    waits.extend(late_receiver(s, r, send, posted));
                }
            }
            (waits, late_senders)
        })
        .collect();
    let mut late_senders = LateSenders::default();
    let mut receivers = Vec::with_capacity(parts.len());
    for (part, late) in parts {
        receivers.push(part);
        late_senders.merge(late);
    }
    let senders: Vec<Wait> = late_senders.waits().collect();

    // Blocking collectives.
    let colls: Vec<Vec<Wait>> = (instances.par_iter())
        .map(|inst| in_collective(inst, |at| times.of(at)))
        .collect();
    // All of them in one vector of the size they take.
    let total = receivers.iter().chain(&colls).map(Vec::len).sum::<usize>() + senders.len();
    let mut waits: Vec<Wait> = Vec::with_capacity(total);
    waits.extend(receivers.into_iter().flatten());
    waits.extend(senders);
    waits.extend(colls.into_iter().flatten());
    waits
}

/// The waits in one blocking collective instance (none for another kind),
/// with each member's enter call's times from `times_of`.
pub fn in_collective(
    inst: &Instance<MemberCalls>,
    times_of: impl Fn(EventRef) -> Option<(u64, u64)>,
) -> Vec<Wait> {
    let mut out = Vec::new();
    let kind = match (inst.flow, inst.shape) {
        (Flow::Barrier, _) => WAIT_AT_BARRIER,
        (Flow::Data, Shape::NToN) => WAIT_AT_NXN,
        (Flow::Data, Shape::OneToN) => LATE_BROADCAST,
        _ => return Vec::new(),
    };
    let members: Vec<(u32, EventRef, u64, u64)> = inst
        .members
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let m = m.as_ref()?;
            (m.exit == Some(m.enter)).then_some(())?;
            let (t0, t1) = times_of(m.enter)?;
            Some((i as u32, m.enter, t0, t1))
        })
        .collect();
    if members.len() < 2 {
        return Vec::new();
    }
    // The member the others wait for: the last to enter, or the root.
    let late = if kind == LATE_BROADCAST {
        let Some(root) = inst.root else {
            return Vec::new();
        };
        match members.iter().find(|m| m.0 == root) {
            Some(m) => *m,
            None => return Vec::new(),
        }
    } else {
        *members
            .iter()
            .max_by_key(|m| (m.2, m.0))
            .expect("two members")
    };
    for &(i, at, t0, t1) in &members {
        if i == late.0 || late.2 <= t0 {
            continue;
        }
        out.push(Wait {
            kind,
            at,
            comm: inst.comm,
            ns: late.2.min(t1).saturating_sub(t0),
            cause: late.1,
        });
    }
    out
}

fn summarize(trace: &Trace, times: &Times, waits: &[Wait]) -> WaitStates {
    let mut t = Tallies::default();
    // MPI time per rank, on the same time base.
    let mpi_by_rank: Vec<u64> = (trace.ranks.par_iter())
        .map(|rank| mpi_time(times, rank.rank, rank.threads.len()))
        .collect();
    for (rank, ns) in trace.ranks.iter().zip(mpi_by_rank) {
        t.mpi_time(rank.rank, ns);
    }
    // Summed by function id first, then by name: a few keys.
    type Sums<K> = rustc_hash::FxHashMap<K, (u64, u64)>;
    let (mut at, mut by) = (Sums::default(), Sums::default());
    for w in waits {
        let e = at
            .entry((w.at.rank, times.func(w.at), w.kind, w.comm))
            .or_default();
        *e = (e.0.saturating_add(w.ns), e.1 + 1);
        let e = by
            .entry((w.cause.rank, times.func(w.cause), w.kind))
            .or_default();
        *e = (e.0.saturating_add(w.ns), e.1 + 1);
    }
    for ((rank, func, kind, comm), v) in at {
        t.waits(rank, times.name_of(rank, func), kind, comm, v);
    }
    for ((rank, func, kind), v) in by {
        t.causes(rank, times.name_of(rank, func), kind, v);
    }
    for ((rank, function), v) in roots(trace, times, waits) {
        t.root(rank, function, v);
    }
    t.finish(times.base())
}

/// The time rank `rank` (of `threads` threads) spent in MPI calls.
pub fn mpi_time(times: &Times, rank: u32, threads: usize) -> u64 {
    (0..threads)
        .flat_map(|slot| times.calls(rank, slot))
        .map(|(_, a, b)| b.saturating_sub(a))
        .fold(0, u64::saturating_add)
}

/// (ns, count) of waits by `K`.
type Tally<K> = BTreeMap<K, (u64, u64)>;

/// The wait states' tables before they are ranked and shared out: sums
/// that add up over any split of the trace, so that the blocks of
/// `pmtrace-mpi` each make theirs and [`Tallies::merge`] them. Function
/// names are borrowed where the tallies are made, owned where they came
/// over the wire.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tallies<'a> {
    mpi_by_rank: BTreeMap<u32, u64>,
    by_kind: Tally<&'static str>,
    by_rank: Tally<(u32, &'static str)>,
    by_function: Tally<(Cow<'a, str>, &'static str)>,
    by_comm: Tally<(u64, &'static str)>,
    causes: Tally<(u32, Cow<'a, str>, &'static str)>,
    roots: BTreeMap<(u32, Cow<'a, str>), Roots>,
}

/// The kinds of wait, by their code on the wire.
pub const KINDS: [&str; 5] = [
    LATE_SENDER,
    LATE_RECEIVER,
    WAIT_AT_NXN,
    WAIT_AT_BARRIER,
    LATE_BROADCAST,
];

/// A kind of wait's code on the wire.
pub fn kind_code(kind: &str) -> u8 {
    KINDS
        .iter()
        .position(|k| *k == kind)
        .expect("a kind of wait") as u8
}

fn kind_of(code: u8) -> &'static str {
    KINDS[usize::from(code)]
}

fn tally<K: Ord>(t: &mut Tally<K>, k: K, (ns, n): (u64, u64)) {
    let e = t.entry(k).or_default();
    // Saturating: a corrupt trace's stamps near 2^64 would overflow.
    e.0 = e.0.saturating_add(ns);
    e.1 += n;
}

impl<'a> Tallies<'a> {
    /// Rank `rank` spent `ns` in MPI calls.
    pub fn mpi_time(&mut self, rank: u32, ns: u64) {
        let e = self.mpi_by_rank.entry(rank).or_default();
        *e = e.saturating_add(ns);
    }

    /// Wait `w`, in a call of `function`.
    pub fn wait(&mut self, w: &Wait, function: &'a str) {
        self.waits(w.at.rank, function, w.kind, w.comm, (w.ns, 1));
    }

    /// `n` waits of `kind` for `ns` in all, at rank `rank`'s calls of
    /// `function` in communicator `comm`.
    pub fn waits(
        &mut self,
        rank: u32,
        function: &'a str,
        kind: &'static str,
        comm: u64,
        (ns, n): (u64, u64),
    ) {
        tally(&mut self.by_kind, kind, (ns, n));
        tally(&mut self.by_rank, (rank, kind), (ns, n));
        tally(&mut self.by_function, (function.into(), kind), (ns, n));
        tally(&mut self.by_comm, (comm, kind), (ns, n));
    }

    /// `n` waits of `kind` for `ns` in all, caused by rank `rank`'s calls
    /// of `function`.
    pub fn causes(
        &mut self,
        rank: u32,
        function: impl Into<Cow<'a, str>>,
        kind: &'static str,
        v: (u64, u64),
    ) {
        tally(&mut self.causes, (rank, function.into(), kind), v);
    }

    /// A wait of `kind` for `ns` caused by rank `rank`'s call of
    /// `function` (named where that call was made).
    pub fn cause(
        &mut self,
        rank: u32,
        function: impl Into<Cow<'a, str>>,
        kind: &'static str,
        ns: u64,
    ) {
        self.causes(rank, function, kind, (ns, 1));
    }

    /// A root cause's tallies, at rank `rank`'s calls of `function`.
    pub fn root(&mut self, rank: u32, function: impl Into<Cow<'a, str>>, v: Roots) {
        self.add_root((rank, function.into()), v);
    }

    fn add_root(&mut self, key: (u32, Cow<'a, str>), v: Roots) {
        let e = self.roots.entry(key).or_default();
        e.0 = e.0.saturating_add(v.0);
        e.1 += v.1;
        e.2 += v.2;
        e.3 = e.3.saturating_add(v.3);
    }

    /// Adds `other`'s tallies to these.
    pub fn merge(&mut self, other: Tallies<'a>) {
        for (r, ns) in other.mpi_by_rank {
            self.mpi_time(r, ns);
        }
        for (k, v) in other.by_kind {
            tally(&mut self.by_kind, k, v);
        }
        for (k, v) in other.by_rank {
            tally(&mut self.by_rank, k, v);
        }
        for (k, v) in other.by_function {
            tally(&mut self.by_function, k, v);
        }
        for (k, v) in other.by_comm {
            tally(&mut self.by_comm, k, v);
        }
        for (k, v) in other.causes {
            tally(&mut self.causes, k, v);
        }
        for (k, v) in other.roots {
            self.add_root(k, v);
        }
    }

    /// The wait states on `time_base`: shares, causes ranked.
    pub fn finish(self, time_base: &'static str) -> WaitStates {
        let mpi_ns = (self.mpi_by_rank.values()).fold(0, |a: u64, &b| a.saturating_add(b));
        let share = |ns: u64, of: u64| if of == 0 { 0.0 } else { ns as f64 / of as f64 };
        let wait_ns = (self.by_kind.values()).fold(0, |a: u64, v| a.saturating_add(v.0));
        let row = |kind, ns, count, of| WaitRow {
            kind,
            rank: None,
            function: None,
            comm: None,
            ns,
            count,
            share_of_mpi: share(ns, of),
        };
        let mpi_by_rank = &self.mpi_by_rank;
        WaitStates {
            time_base,
            mpi_ns,
            wait_ns,
            share_of_mpi: share(wait_ns, mpi_ns),
            by_kind: (self.by_kind.into_iter())
                .map(|(k, (ns, n))| row(k, ns, n, mpi_ns))
                .collect(),
            by_rank: (self.by_rank.into_iter())
                .map(|((r, k), (ns, n))| WaitRow {
                    rank: Some(r),
                    ..row(k, ns, n, mpi_by_rank.get(&r).copied().unwrap_or(0))
                })
                .collect(),
            by_function: (self.by_function.into_iter())
                .map(|((f, k), (ns, n))| WaitRow {
                    function: Some(f.into_owned()),
                    ..row(k, ns, n, mpi_ns)
                })
                .collect(),
            by_comm: (self.by_comm.into_iter())
                .map(|((c, k), (ns, n))| WaitRow {
                    comm: Some(c),
                    ..row(k, ns, n, mpi_ns)
                })
                .collect(),
            causes: top_causes(self.causes),
            root_causes: top_roots(self.roots),
        }
    }

    /// The wire form (for `pmtrace-mpi`).
    pub fn put(&self, o: &mut Out) {
        let put = |o: &mut Out, &(ns, n): &(u64, u64)| {
            o.u64(ns).u64(n);
        };
        o.u64(self.mpi_by_rank.len() as u64);
        for (&r, &ns) in &self.mpi_by_rank {
            o.u32(r).u64(ns);
        }
        o.u64(self.by_kind.len() as u64);
        for (k, v) in &self.by_kind {
            put(o.u8(kind_code(k)), v);
        }
        o.u64(self.by_rank.len() as u64);
        for ((r, k), v) in &self.by_rank {
            put(o.u32(*r).u8(kind_code(k)), v);
        }
        o.u64(self.by_function.len() as u64);
        for ((f, k), v) in &self.by_function {
            put(o.str(f).u8(kind_code(k)), v);
        }
        o.u64(self.by_comm.len() as u64);
        for ((c, k), v) in &self.by_comm {
            put(o.u64(*c).u8(kind_code(k)), v);
        }
        o.u64(self.causes.len() as u64);
        for ((r, f, k), v) in &self.causes {
            put(o.u32(*r).str(f).u8(kind_code(k)), v);
        }
        o.u64(self.roots.len() as u64);
        for ((r, f), v) in &self.roots {
            o.u32(*r).str(f).u64(v.0).u64(v.1).u64(v.2).u64(v.3);
        }
    }

    /// Reads what [`Tallies::put`] wrote.
    pub fn get(i: &mut In) -> Tallies<'static> {
        let mut t = Tallies::default();
        let pair = |i: &mut In| (i.u64(), i.u64());
        for _ in 0..i.u64() {
            let (r, ns) = (i.u32(), i.u64());
            t.mpi_time(r, ns);
        }
        for _ in 0..i.u64() {
            let k = kind_of(i.u8());
            t.by_kind.insert(k, pair(i));
        }
        for _ in 0..i.u64() {
            let k = (i.u32(), kind_of(i.u8()));
            t.by_rank.insert(k, pair(i));
        }
        for _ in 0..i.u64() {
            let k = (Cow::Owned(i.str()), kind_of(i.u8()));
            t.by_function.insert(k, pair(i));
        }
        for _ in 0..i.u64() {
            let k = (i.u64(), kind_of(i.u8()));
            t.by_comm.insert(k, pair(i));
        }
        for _ in 0..i.u64() {
            let k = (i.u32(), Cow::Owned(i.str()), kind_of(i.u8()));
            t.causes.insert(k, pair(i));
        }
        for _ in 0..i.u64() {
            let k = (i.u32(), Cow::Owned(i.str()));
            t.roots.insert(k, (i.u64(), i.u64(), i.u64(), i.u64()));
        }
        t
    }
}

impl WaitStates {
    /// The wait states as a person reads them.
    pub fn write_text(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        let ms = |ns: u64| ns as f64 / 1e6;
        writeln!(
            w,
            "\nWait states ({} time): {:.3} ms of {:.3} ms in MPI ({:.1}%)",
            self.time_base,
            ms(self.wait_ns),
            ms(self.mpi_ns),
            100.0 * self.share_of_mpi
        )?;
        for r in &self.by_kind {
            writeln!(
                w,
                "  {:<18} {:>12.3} ms {:>5.1}% of MPI  {} calls",
                r.kind,
                ms(r.ns),
                100.0 * r.share_of_mpi,
                r.count
            )?;
        }
        if !self.by_rank.is_empty() {
            writeln!(w, "  by rank (share of its MPI time):")?;
        }
        for r in &self.by_rank {
            writeln!(
                w,
                "    rank {:<5} {:<18} {:>12.3} ms {:>5.1}%",
                r.rank.unwrap_or_default(),
                r.kind,
                ms(r.ns),
                100.0 * r.share_of_mpi
            )?;
        }
        if !self.causes.is_empty() {
            writeln!(
                w,
                "  caused by (the rank that was late, and the call it was late for):"
            )?;
        }
        for c in self.causes.iter().take(10) {
            writeln!(
                w,
                "    rank {:<5} before {:<22} {:>12.3} ms of {} in {} waits",
                c.rank,
                c.function,
                ms(c.ns),
                c.kind,
                c.waits
            )?;
        }
        if !self.root_causes.is_empty() {
            writeln!(
                w,
                "  root causes (through ranks that were late only because they waited):"
            )?;
        }
        for r in self.root_causes.iter().take(10) {
            writeln!(
                w,
                "    rank {:<5} computing {:>10.3} ms before {:<22} {:>12.3} ms in {} waits ({} through other ranks)",
                r.rank,
                ms(r.delay_ns),
                r.function,
                ms(r.ns),
                r.waits,
                r.indirect
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rank: u32, index: u32) -> EventRef {
        EventRef {
            rank,
            thread: 0,
            index,
        }
    }

    fn wait(kind: &'static str, rank: u32, ns: u64, cause: u32) -> Wait {
        Wait {
            kind,
            at: at(rank, 7),
            comm: 1,
            ns,
            cause: at(cause, 3),
        }
    }

    /// Members of a set of records are numbered in record order, found
    /// again by number, and nothing else is a member.
    #[test]
    fn a_set_of_records_numbers_its_members_in_record_order() {
        // Rank 4: threads 0 (100 records) and 3 (70); rank 5: thread 0 (10).
        let threads = [(4, 0, 100), (4, 3, 70), (5, 0, 10)];
        let r = |rank, thread, index| EventRef {
            rank,
            thread,
            index,
        };
        let members = [
            r(5, 0, 9),
            r(4, 3, 0),
            r(4, 0, 63),
            r(4, 0, 64),
            r(4, 3, 69),
            r(4, 0, 0),
        ];
        // Not records: a thread, an index and ranks that are not there.
        let strays = [
            r(4, 1, 0),
            r(4, 0, 100),
            r(3, 0, 0),
            r(6, 0, 0),
            r(5, 0, 10),
        ];
        let set = Numbered::over(4, threads.into_iter(), members.into_iter().chain(strays));
        assert_eq!(set.len(), 6);
        let order = [
            r(4, 0, 0),
            r(4, 0, 63),
            r(4, 0, 64),
            r(4, 3, 0),
            r(4, 3, 69),
            r(5, 0, 9),
        ];
        for (k, &at) in order.iter().enumerate() {
            assert_eq!(set.number(at), Some(k), "{at:?}");
            assert_eq!(set.member(k), at);
        }
        for at in strays
            .into_iter()
            .chain([r(4, 0, 1), r(4, 3, 1), r(5, 0, 0)])
        {
            assert_eq!(set.number(at), None, "{at:?}");
        }
    }

    fn add<'a>(t: &mut Tallies<'a>, w: &Wait) {
        t.wait(w, "MPI_Recv");
        t.cause(w.cause.rank, "MPI_Send", w.kind, w.ns);
    }

    /// Tallies made in two parts and merged (one of them through its wire
    /// form) give the wait states of the whole.
    #[test]
    fn tallies_of_parts_merge_into_those_of_the_whole() {
        let waits = [
            wait(LATE_SENDER, 0, 100, 1),
            wait(LATE_SENDER, 1, 50, 0),
            wait(WAIT_AT_BARRIER, 1, 30, 0),
        ];
        let mut whole = Tallies::default();
        let (mut a, mut b) = (Tallies::default(), Tallies::default());
        for (i, w) in waits.iter().enumerate() {
            add(&mut whole, w);
            add(if i == 0 { &mut a } else { &mut b }, w);
        }
        whole.mpi_time(0, 1_000);
        whole.mpi_time(1, 400);
        whole.root(1, "MPI_Send", (100, 1, 0, 20));
        a.mpi_time(0, 1_000);
        a.root(1, "MPI_Send", (60, 1, 0, 20));
        b.mpi_time(1, 400);
        let mut o = Out::default();
        b.put(&mut o);
        let b = Tallies::get(&mut In::new(&o.0));
        a.merge(b);
        // The roots' tallies add: merge one more.
        whole.root(1, "MPI_Send", (0, 0, 0, 0));
        let mut extra = Tallies::default();
        extra.root(1, "MPI_Send", (40, 0, 0, 0));
        a.merge(extra);
        let (w, m) = (whole.finish("recorded"), a.finish("recorded"));
        assert_eq!(w, m);
        assert_eq!((w.mpi_ns, w.wait_ns), (1_400, 180));
        let rank1: Vec<(u64, f64)> = (w.by_rank.iter())
            .filter(|r| r.rank == Some(1))
            .map(|r| (r.ns, r.share_of_mpi))
            .collect();
        assert_eq!(rank1, [(50, 0.125), (30, 0.075)]);
        assert_eq!(w.causes[0].function, "MPI_Send");
        assert_eq!((w.causes[0].rank, w.causes[0].ns), (1, 100));
        assert_eq!(w.root_causes[0].ns, 100);
    }
}
