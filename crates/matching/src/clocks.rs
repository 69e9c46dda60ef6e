//! Logical clocks, rebuilt from the trace and checked against what the
//! messages carried.
//!
//! **Matching by id.** Every message carried its id (`thread << 40 | n`,
//! see `pmtrace_format::record`); the receiver recorded it. Sends get their
//! ids back by counting, per thread, the records that sent a message. A
//! receive is matched to the send of its source rank with that id, and the
//! result is compared with the FIFO-rule matching of [`Messages`].
//!
//! **Clocks.** The Lamport clocks follow LLCP (`003_…` §5.1) exactly as the
//! runtime does (see the runtime's `piggyback` module): sends do not tick;
//! completing a receive ticks once per pending wildcard receive it
//! completes by non-overtaking, once for itself if it is a wildcard receive
//! still pending (or blocking), then merges `max(LC, m.LC + 1)`.
//! Collectives are logical messages (Becker et al., `000_…` §4): an exit
//! takes the maximum of the clocks at the enters it depends on (1-to-N: the
//! root's; N-to-1: all, at the root; N-to-N: all; Scan: ranks k ≤ i;
//! Exscan: k < i). The runtime cannot merge collectives without an extra
//! reduction per call, so it does not; this module does, offline.
//!
//! **Why the offline clocks are the rules' clocks.** The rules make every
//! clock a function of (a) each rank's sequence of events, (b) which send
//! each receive matched, (c) which enters each collective exit depends on.
//! The trace holds all three exactly: the records in order, the
//! piggybacked message ids, and per-communicator collective sequence
//! numbers. [`compute`] applies each rule once per event in an order in
//! which every event comes after everything it depends on (a real run has
//! no causal cycle), so it computes exactly the values the rules define.
//!
//! **Checks.** The same pass run without collectives must reproduce, bit
//! for bit, the clock each message carried (and its send time, and in
//! vector mode its vector clock): that checks the runtime. With
//! collectives, every matched pair must satisfy send < receive
//! (`lamport_violations`, `vector_violations`), and on small runs the
//! vector clocks must order two events exactly when a brute-force
//! happens-before over the event graph does.

use rustc_hash::FxHashMap as HashMap;

use pmtrace_format::Kind;
use pmtrace_trace::{Call, Payload};
use serde::Serialize;

use crate::ends::{Cursor, End};
use crate::matching::{Messages, RecvEvent, RecvHow};
use pmtrace_trace::read::{EventRef, Rank, Trace};

/// Largest number of events for the brute-force happens-before check.
pub const HB_MAX_EVENTS: usize = 4000;

/// What `pmtrace report --json` shows under `clocks`.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct ClockReport {
    pub mode: String,
    /// Receives matched to their send through the piggybacked id.
    pub matched_by_id: u64,
    /// Receives with a piggyback whose id matching differs from the
    /// FIFO-rule matching.
    pub fifo_disagreements: u64,
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
    /// Places where a clock decreased along a rank (or along one sender's
    /// messages): 0 on every correct run.
    pub decreasing: u64,
    /// Brute-force happens-before check of the vector clocks (small runs).
    pub happens_before: Option<HbCheck>,
    /// Events whose dependencies could not be resolved (a trace with lost
    /// events); their clocks use what was known.
    pub forced: u64,
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
struct SendClocks(Vec<u64>);

impl SendClocks {
    fn new(n: usize) -> SendClocks {
        SendClocks(vec![NO_CLOCK; n])
    }

    fn get(&self, i: usize) -> Option<u64> {
        Some(self.0[i]).filter(|&c| c != NO_CLOCK)
    }

    fn set(&mut self, i: usize, c: u64) {
        self.0[i] = c;
    }
}

/// Two clocks per receive (match, after the merge), if it has them.
#[derive(Debug, Clone, Default)]
pub struct RecvClocks(Vec<(u64, u64)>);

impl RecvClocks {
    fn new(n: usize) -> RecvClocks {
        RecvClocks(vec![(NO_CLOCK, NO_CLOCK); n])
    }

    /// Receive `i`'s match clock and clock after the merge.
    pub fn get(&self, i: usize) -> Option<(u64, u64)> {
        Some(self.0[i]).filter(|&(a, _)| a != NO_CLOCK)
    }

    fn set(&mut self, i: usize, c: (u64, u64)) {
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
    ranks: Vec<Vec<(u32, ThreadClocks)>>,
}

#[derive(Debug, Clone)]
enum ThreadClocks {
    Steps(Vec<(u32, u64)>),
    Dense(Vec<u64>),
}

/// One thread's clocks ([`CallClocks::thread`]): the same values as
/// [`CallClocks::get`], found from where the last lookup ended.
pub struct ThreadClockReader<'a> {
    clocks: Option<&'a ThreadClocks>,
    /// Steps before this one are at or before the last index looked up.
    at: usize,
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
const NO_CLOCK: u64 = u64::MAX;

/// A receive not posted (see `Walker::post_order`).
const NO_POST: u32 = u32::MAX;

impl CallClocks {
    fn new(trace: &Trace, dense: &[Vec<bool>]) -> CallClocks {
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
    fn set(&mut self, rank: u32, thread: u32, index: u32, lc: u64) {
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
    fn decreasing(&self) -> u64 {
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

/// One step of a rank, in order.
#[derive(Debug, Clone, Copy)]
enum Ev {
    Send(u32),
    /// A message to MPI_PROC_NULL, or from a failed call: it still went
    /// through the piggyback layer (an id and a vector-clock tick).
    SendNowhere,
    /// A nonblocking receive posted (index into `recvs`, post order).
    Post(u32),
    Recv(u32),
    /// A collective instance: entered, exited.
    Enter(u32),
    Exit(u32),
    /// The end of a call record (its index; the stream is its thread).
    /// Only calls that communicate get one, unless the stream's clocks
    /// are dense (`Plan::dense`).
    End(u32),
}

/// Which vector clocks a pass keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Vectors {
    None,
    /// Happens-before vectors, as the runtime's vector mode piggybacks:
    /// a rank's own entry ticks at every send, receive, enter and exit.
    Eager,
    /// LVCP's (`003_…` §5.2): a rank's own entry ticks exactly where its
    /// LLCP clock does (the completion of a wildcard receive), and entries
    /// merge by maximum along messages and collectives.
    Lazy,
}

/// How a collective's enters and exits depend on each other (Becker et al. §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    OneToN,
    NToOne,
    NToN,
    Scan,
    Exscan,
}

impl Shape {
    pub const ALL: [Shape; 5] = [
        Shape::OneToN,
        Shape::NToOne,
        Shape::NToN,
        Shape::Scan,
        Shape::Exscan,
    ];
}

pub fn shape_of(name: &str) -> Shape {
    let n = name.trim_start_matches("MPI_").to_ascii_lowercase();
    // Large-count forms and persistent collectives have the shape of their base.
    let n = n.strip_suffix("_c").unwrap_or(&n);
    let n = n.strip_suffix("_init").unwrap_or(n).to_string();
    let n = n
        .strip_prefix('i')
        .filter(|rest| {
            [
                "bcast",
                "scatter",
                "reduce",
                "gather",
                "allreduce",
                "allgather",
                "alltoall",
                "scan",
                "exscan",
                "barrier",
                "neighbor",
            ]
            .iter()
            .any(|k| rest.starts_with(k))
        })
        .unwrap_or(&n);
    if n.starts_with("bcast") || n.starts_with("scatter") {
        Shape::OneToN
    } else if n == "reduce" || n.starts_with("gather") {
        Shape::NToOne
    } else if n == "scan" {
        Shape::Scan
    } else if n == "exscan" {
        Shape::Exscan
    } else {
        Shape::NToN
    }
}

#[derive(Debug, Clone)]
struct Instance {
    shape: Shape,
    /// World rank of the root, for rooted shapes.
    root: Option<u32>,
    size: usize,
    /// (comm rank, clock at the enter, vector clock at the enter) per member.
    enters: Vec<(u32, u64, Vec<u64>)>,
    /// Every entered member's merge ([`merges`]), made once all entered,
    /// with the number of enters it was made from.
    merged: Option<(usize, Merged)>,
}

/// Each member's (clock, vector clock) merge, by member.
type Merged = HashMap<u32, (u64, Vec<u64>)>;

/// The events of every rank, and what they refer to.
struct Plan {
    /// Per stream (one application thread of one rank), in order.
    events: Vec<Vec<Ev>>,
    /// The rank (index into `trace.ranks`) of each stream.
    stream_rank: Vec<usize>,
    instances: Vec<Instance>,
    /// For each instance, comm ranks by world rank.
    comm_rank: Vec<HashMap<u32, u32>>,
    /// (communicator, sequence number, start) of each instance.
    keys: Vec<(u64, u64, u64)>,
    /// World ranks with more than one thread, sorted (the replay is exact
    /// on the others).
    multi: Vec<u32>,
    /// Per rank, per thread: its calls' time order is not their record
    /// order, so each call gets a clock of its own (`CallClocks`).
    dense: Vec<Vec<bool>>,
    /// (world rank, thread index) of each stream.
    stream_at: Vec<(u32, u32)>,
}

/// The collective instances found so far, by (communicator, sequence
/// number, start): the start is 0 but for a persistent collective, whose
/// k-th start is an instance of its own.
#[derive(Default)]
struct Found {
    instances: Vec<Instance>,
    comm_rank: Vec<HashMap<u32, u32>>,
    of: HashMap<(u64, u64, u64), usize>,
}

impl Found {
    /// The instance a collective call (its `start`-th start) belongs to.
    fn instance(&mut self, trace: &Trace, rank: &Rank, call: &Call, start: u64) -> Option<usize> {
        let &Payload::Coll {
            comm, root, seq, ..
        } = &call.payload
        else {
            return None;
        };
        let gid = rank.comm_at(comm, call.t_start)?.global_id;
        let c = trace.comms.get(gid)?;
        let size = c.members.len() + c.remote_members.len();
        if size == 0 {
            return None;
        }
        Some(*self.of.entry((gid, seq, start)).or_insert_with(|| {
            let shape = shape_of(rank.function_name(call.func));
            let rooted = matches!(shape, Shape::OneToN | Shape::NToOne);
            let root = if rooted && !c.inter {
                root.and_then(|r| u32::try_from(r).ok())
                    .and_then(|r| c.members.get(r as usize).copied())
            } else {
                None
            };
            self.instances.push(Instance {
                shape: if rooted && root.is_none() {
                    Shape::NToN
                } else {
                    shape
                },
                root,
                size,
                enters: Vec::new(),
                merged: None,
            });
            self.comm_rank.push(
                c.members
                    .iter()
                    .chain(&c.remote_members)
                    .enumerate()
                    .map(|(k, &w)| (w, k as u32))
                    .collect(),
            );
            self.instances.len() - 1
        }))
    }
}

fn plan(trace: &Trace, m: &Messages) -> Plan {
    let n = trace.ranks.len();
    let mut found = Found::default();
    let mut events: Vec<Vec<Ev>> = Vec::new();
    let mut stream_rank = Vec::new();
    let mut stream_at = Vec::new();
    let mut dense = Vec::with_capacity(n);
    let mut multi = Vec::new();
    for (ri, rank) in trace.ranks.iter().enumerate() {
        if rank.threads.len() > 1 {
            multi.push(rank.rank);
        }
        // Threads are separate streams: their order is not MPI's to know.
        let mut stream_of: HashMap<u32, usize> = HashMap::default();
        for th in &rank.threads {
            stream_of.insert(th.index, events.len());
            events.push(Vec::new());
            stream_rank.push(ri);
            stream_at.push((rank.rank, th.index));
        }
        // Persistent sends, and the instances of icolls, by op id.
        let send_inits = crate::matching::send_inits(rank);
        let mut icoll_of: HashMap<u64, usize> = HashMap::default();
        // Persistent collectives by op id: the call that made them and how
        // often they were started.
        let mut coll_inits: HashMap<u64, (Call, u64)> = HashMap::default();
        // Calls of all threads in time order.
        let (steps, rank_dense) = call_order(rank);
        // Per thread slot: its sends, receives completed and posted.
        let mut cursors: Vec<[Cursor; 3]> = (0..rank.threads.len())
            .map(|slot| {
                let t = m.ends.thread(rank.rank, slot);
                [
                    Cursor::new(&t.sends),
                    Cursor::new(&t.done),
                    Cursor::new(&t.posted),
                ]
            })
            .collect();
        for (slot, index) in steps {
            let slot = slot as usize;
            let [sends, done, posted] = &mut cursors[slot];
            let (sends, done) = (sends.at(index), done.at(index));
            let posted = posted.at(index);
            let item_of =
                |run: &[End], item: u32| run.iter().find(|e| e.item == item).map(|e| e.msg);
            let send_at = |item: u32| item_of(sends, item);
            let recv_done = |item: u32| item_of(done, item);
            // Nonblocking receives posted here (a blocking one is posted and
            // completed at once).
            let recv_post = |item: u32| {
                posted
                    .iter()
                    .find(|e| e.item == item && m.recvs[e.msg as usize].how != RecvHow::Blocking)
                    .map(|e| e.msg)
            };
            let records = &rank.threads[slot].records;
            let at = EventRef {
                rank: rank.rank,
                thread: rank.threads[slot].index,
                index,
            };
            let stream = stream_of[&at.thread];
            let before = events[stream].len();
            let call = &records.call(at.pos()).expect("a call");
            let evs = &mut events[stream];
            let kind = rank.kind(call.func);
            // Every call that sends went through the piggyback layer, even
            // when it sent nothing (see `matching::send_ids`).
            let send = |item: u32| match send_at(item) {
                Some(s) => Ev::Send(s),
                None => Ev::SendNowhere,
            };
            match (&call.payload, kind) {
                (Payload::Send { .. }, Kind::Send | Kind::Isend) => evs.push(send(0)),
                (Payload::Sendrecv { .. }, _) => {
                    evs.push(send(0));
                    if let Some(r) = recv_done(0) {
                        evs.push(Ev::Recv(r));
                    }
                }
                (Payload::Isendrecv { .. }, _) => {
                    evs.push(send(0));
                    if let Some(r) = recv_post(0) {
                        evs.push(Ev::Post(r));
                    }
                }
                (Payload::Recv { .. } | Payload::Mrecv { .. }, _) => {
                    if let Some(r) = recv_done(0) {
                        evs.push(Ev::Recv(r));
                    }
                    if let Some(r) = recv_post(0) {
                        evs.push(Ev::Post(r));
                    }
                }
                (Payload::Start { started }, _) => {
                    for (item, &(init, instance)) in started.iter().enumerate() {
                        let (init, item) = (init.unwrap_or(0), item as u32);
                        if send_inits.contains(&init) {
                            evs.push(send(item));
                        } else if let Some(s) = send_at(item) {
                            // A partitioned send: no header, but a message.
                            evs.push(Ev::Send(s));
                        } else if let Some(r) = recv_post(item) {
                            evs.push(Ev::Post(r));
                        } else if let Some((made, k)) = coll_inits.get_mut(&init) {
                            *k += 1;
                            if let Some(inst) = found.instance(trace, rank, &*made, *k) {
                                evs.push(Ev::Enter(inst as u32));
                                icoll_of.insert(instance, inst);
                            }
                        }
                    }
                }
                (Payload::Complete { done }, _) => {
                    for (item, c) in done.iter().enumerate() {
                        if let Some(r) = recv_done(item as u32) {
                            evs.push(Ev::Recv(r));
                        } else if let Some(inst) = c.op.and_then(|op| icoll_of.remove(&op)) {
                            evs.push(Ev::Exit(inst as u32));
                        }
                    }
                }
                (&Payload::Coll { op, .. }, _) if call.rc == 0 => {
                    if kind == Kind::CollInit {
                        if let Some(op) = op {
                            coll_inits.insert(op, (*call, 0));
                        }
                    } else if let Some(inst) = found.instance(trace, rank, call, 0) {
                        evs.push(Ev::Enter(inst as u32));
                        if kind == Kind::Icoll {
                            if let Some(op) = op {
                                icoll_of.insert(op, inst);
                            }
                        } else {
                            evs.push(Ev::Exit(inst as u32));
                        }
                    }
                }
                _ => {}
            }
            let evs = &mut events[stream];
            if evs.len() > before || rank_dense[slot] {
                evs.push(Ev::End(at.index));
            }
        }
        dense.push(rank_dense);
    }
    let Found {
        instances,
        comm_rank,
        of,
    } = found;
    let mut keys = vec![(0, 0, 0); instances.len()];
    for (key, i) in of {
        keys[i] = key;
    }
    multi.sort_unstable();
    Plan {
        events,
        stream_rank,
        instances,
        comm_rank,
        keys,
        multi,
        dense,
        stream_at,
    }
}

/// The calls of `rank` the rules visit, (thread slot, record) in time
/// order, and whether each thread's calls come out of record order (then
/// every call is visited, so that each gets a clock of its own; else only
/// calls with a payload, since the others take part in no rule).
fn call_order(rank: &Rank) -> (Vec<(u32, u32)>, Vec<bool>) {
    let with_payload = |ev: &pmtrace_trace::Events, slot: u32| {
        (0..ev.len() as u32)
            .filter(|&i| ev.has_payload(i as usize))
            .map(move |i| (slot, i))
            .collect::<Vec<_>>()
    };
    // One thread whose calls start in record order (the common case):
    // time order is record order, without a sort.
    if let [th] = rank.threads.as_slice() {
        let ev = &th.records;
        let mut last = 0;
        let in_order = (0..ev.len()).filter(|&i| ev.is_call(i)).all(|i| {
            let t = ev.stamps(i).0;
            let ok = last <= t;
            last = t;
            ok
        });
        if in_order {
            return (with_payload(ev, 0), vec![false]);
        }
    }
    // (start, thread slot, record) of every call, in time order (threads
    // are sorted by index, so slot order is thread order).
    let mut calls: Vec<(u64, u32, u32)> = Vec::new();
    for (slot, th) in rank.threads.iter().enumerate() {
        let ev = &th.records;
        calls.extend(
            (0..ev.len())
                .filter(|&i| ev.is_call(i))
                .map(|i| (ev.stamps(i).0, slot as u32, i as u32)),
        );
    }
    calls.sort_unstable();
    let mut last: Vec<Option<u32>> = vec![None; rank.threads.len()];
    let mut dense = vec![false; rank.threads.len()];
    for &(_, slot, index) in &calls {
        let slot = slot as usize;
        if last[slot].replace(index).is_some_and(|prev| prev > index) {
            dense[slot] = true;
        }
    }
    let steps = calls
        .into_iter()
        .filter(|&(_, slot, index)| {
            dense[slot as usize]
                || rank.threads[slot as usize]
                    .records
                    .has_payload(index as usize)
        })
        .map(|(_, slot, index)| (slot, index))
        .collect();
    (steps, dense)
}

/// Per-rank clock state of the rules.
#[derive(Clone)]
struct State {
    lc: u64,
    vc: Vec<u64>,
    /// Pending nonblocking wildcard receives: (recv index, comm, posted tag, post order).
    pending: Vec<(usize, u64, i32, usize)>,
    posts: usize,
}

/// The result of one pass.
struct Pass {
    send_lc: SendClocks,
    /// Vector clocks, in vector mode only.
    send_vc: Vec<Option<Vec<u64>>>,
    recv_lc: RecvClocks,
    recv_vc: Vec<Option<Vec<u64>>>,
    /// Lazy vectors only: each send's entry for its destination, and each
    /// receive's own entry when it matched (`NO_CLOCK`: none).
    send_own: Vec<u64>,
    recv_own: Vec<u64>,
    after_call: CallClocks,
    forced: u64,
    /// Events in evaluation order (a topological order), for the HB check:
    /// (rank, vector clock, node kind) with sources of incoming edges.
    nodes: Vec<Node>,
}

#[derive(Clone)]
struct Node {
    vc: Vec<u64>,
    /// Nodes this one directly depends on besides its rank predecessor.
    from: Vec<usize>,
}

/// Runs the rules over the whole trace. `collectives`: merge at collective
/// exits (the full clocks, kept per call) or not (what the runtime did,
/// for checking the piggybacks only).
fn pass(
    trace: &Trace,
    m: &Messages,
    p: &Plan,
    collectives: bool,
    vectors: Vectors,
    keep_nodes: bool,
    races: Option<&[bool]>,
) -> Pass {
    let mut run = Part {
        w: walker(trace, m, p, collectives, vectors, keep_nodes, races),
        cur: vec![0; p.events.len()],
    };
    loop {
        let stepped = run.advance();
        let Some(r) = run.blocked() else { break };
        if stepped == 0 {
            // A dependency that never comes (lost events): go on without it.
            run.force(r, None);
        }
    }
    run.w.out
}

/// A walker at the start of the trace.
fn walker<'a>(
    trace: &'a Trace,
    m: &'a Messages,
    p: &'a Plan,
    collectives: bool,
    vectors: Vectors,
    keep_nodes: bool,
    races: Option<&'a [bool]>,
) -> Walker<'a> {
    let n = p.events.len();
    let world = trace.world_size as usize;
    let vector = vectors != Vectors::None;
    let lazy = vectors == Vectors::Lazy;
    Walker {
        trace,
        m,
        p,
        collectives,
        vector,
        lazy,
        keep_nodes,
        races,
        matched_send: if races.is_some() {
            let mut v = vec![usize::MAX; m.recvs.len()];
            for pair in &m.matched {
                v[pair.recv] = pair.send;
            }
            v
        } else {
            Vec::new()
        },
        // A block may hold no rank (more processes than ranks).
        any_tag: trace
            .ranks
            .first()
            .map_or(-1, |r| r.header.constants.any_tag),
        st: (0..n)
            .map(|_| State {
                lc: 0,
                vc: if vector { vec![0; world] } else { Vec::new() },
                pending: Vec::new(),
                posts: 0,
            })
            .collect(),
        out: Pass {
            send_lc: SendClocks::new(m.sends.len()),
            send_vc: if vector {
                vec![None; m.sends.len()]
            } else {
                Vec::new()
            },
            recv_lc: RecvClocks::new(m.recvs.len()),
            recv_vc: if vector && !lazy {
                vec![None; m.recvs.len()]
            } else {
                Vec::new()
            },
            send_own: if lazy {
                vec![NO_CLOCK; m.sends.len()]
            } else {
                Vec::new()
            },
            recv_own: if lazy {
                vec![NO_CLOCK; m.recvs.len()]
            } else {
                Vec::new()
            },
            after_call: if collectives {
                CallClocks::new(trace, &p.dense)
            } else {
                CallClocks::default()
            },
            forced: 0,
            nodes: Vec::new(),
        },
        send_node: if keep_nodes {
            vec![None; m.sends.len()]
        } else {
            Vec::new()
        },
        post_order: vec![NO_POST; m.recvs.len()],
        enter_node: vec![Vec::new(); p.instances.len()],
        last_node: vec![None; n],
        insts: p.instances.clone(),
        part: None,
    }
}

/// The state of one pass over the streams.
struct Walker<'a> {
    trace: &'a Trace,
    m: &'a Messages,
    p: &'a Plan,
    collectives: bool,
    vector: bool,
    /// The vectors are LVCP's (`Vectors::Lazy`).
    lazy: bool,
    keep_nodes: bool,
    /// DAMPI's rules, for races: a receive merges `max(LC, m.LC)` (not
    /// `m.LC + 1`), and the receives marked here tick as wildcard ones
    /// (a wildcard probe chose their message).
    races: Option<&'a [bool]>,
    /// For races, each receive's send as matched (by id, else by the FIFO
    /// rule); else receives merge the send their id names only.
    matched_send: Vec<usize>,
    any_tag: i32,
    st: Vec<State>,
    out: Pass,
    /// The node of each send (when keeping nodes).
    send_node: Vec<Option<usize>>,
    /// The post order of each receive posted (`NO_POST`: none).
    post_order: Vec<u32>,
    enter_node: Vec<Vec<(u32, usize)>>,
    last_node: Vec<Option<usize>>,
    insts: Vec<Instance>,
    /// Over a block of ranks ([`Part`]): what crosses blocks.
    part: Option<PartIo>,
}

/// What a [`Part`]'s walker exchanges with the other blocks.
#[derive(Default)]
struct PartIo {
    /// What each member's exit merges, from the instance's owner:
    /// (instance, member) to (clock, vector clock).
    answers: HashMap<(u32, u32), (u64, Vec<u64>)>,
    /// Enters stepped since they were last taken: (instance, member,
    /// clock, vector clock).
    enters: Vec<(u32, u32, u64, Vec<u64>)>,
    /// Sends stepped since they were last taken.
    sends: Vec<u32>,
}

impl Walker<'_> {
    /// Stream `r`'s rank in instance `i`'s communicator.
    fn member(&self, r: usize, i: usize) -> u32 {
        let me = self.trace.ranks[self.p.stream_rank[r]].rank;
        self.p.comm_rank[i].get(&me).copied().unwrap_or(0)
    }

    /// The send whose clock receive `ri` merges.
    fn send_for(&self, ri: usize) -> Option<usize> {
        if self.races.is_some() {
            Some(self.matched_send[ri]).filter(|&s| s != usize::MAX)
        } else {
            self.m.send_by_id(ri)
        }
    }

    /// Whether everything `ev` of stream `r` depends on has happened.
    fn ready(&self, r: usize, ev: Ev) -> bool {
        let sent = |ri: usize| {
            self.send_for(ri)
                .is_none_or(|s| self.out.send_lc.get(s).is_some())
        };
        match ev {
            Ev::Recv(ri) if self.races.is_some() => {
                // The receives that matched before it merge here too.
                let ri = ri as usize;
                let my_post = match self.post_order[ri] {
                    NO_POST => usize::MAX,
                    k => k as usize,
                };
                sent(ri)
                    && complete_now(&self.st[r], self.m, ri, my_post, self.any_tag, true)
                        .iter()
                        .all(|&(e, ..)| sent(e))
            }
            Ev::Recv(ri) => sent(ri as usize),
            Ev::Exit(i) => {
                let i = i as usize;
                !self.collectives
                    || match &self.part {
                        Some(io) => io.answers.contains_key(&(i as u32, self.member(r, i))),
                        None => self.insts[i].enters.len() >= self.insts[i].size,
                    }
            }
            _ => true,
        }
    }

    /// Applies the rules to event `ev` of stream `r`; `matched`: a receive
    /// merges its send's clock (false when forced past a missing send).
    fn step(&mut self, r: usize, ev: Ev, matched: bool) {
        let me = self.trace.ranks[self.p.stream_rank[r]].rank as usize;
        let Walker {
            m,
            p,
            collectives,
            vector,
            lazy,
            keep_nodes,
            races,
            matched_send,
            any_tag,
            st,
            out,
            send_node,
            post_order,
            enter_node,
            last_node,
            insts,
            part,
            ..
        } = self;
        let (m, p, collectives, vector, lazy, keep_nodes, any_tag) =
            (*m, *p, *collectives, *vector, *lazy, *keep_nodes, *any_tag);
        // Happens-before vectors tick at every event; lazy ones with the clock.
        let eager = vector && !lazy;
        let races = *races;
        let matched_send = &*matched_send;
        let send_of = |ri: usize| {
            if !matched {
                None
            } else if races.is_some() {
                Some(matched_send[ri]).filter(|&s| s != usize::MAX)
            } else {
                m.send_by_id(ri)
            }
        };
        let s = &mut st[r];
        let mut node = |out: &mut Pass, vc: &[u64], from: Vec<usize>| -> Option<usize> {
            if !keep_nodes {
                return None;
            }
            let mut f = from;
            if let Some(prev) = last_node[r] {
                f.push(prev);
            }
            out.nodes.push(Node {
                vc: vc.to_vec(),
                from: f,
            });
            let id = out.nodes.len() - 1;
            last_node[r] = Some(id);
            Some(id)
        };
        match ev {
            Ev::Send(si) => {
                let si = si as usize;
                if eager {
                    s.vc[me] += 1;
                }
                out.send_lc.set(si, s.lc);
                if vector {
                    out.send_vc[si] = Some(s.vc.clone());
                }
                if let Some(io) = part {
                    io.sends.push(si as u32);
                }
                if lazy {
                    if let Some(d) = m.sends[si].dst {
                        out.send_own[si] = s.vc.get(d as usize).copied().unwrap_or(NO_CLOCK);
                    }
                }
                if keep_nodes {
                    let vc = s.vc.clone();
                    send_node[si] = node(out, &vc, Vec::new());
                }
            }
            Ev::SendNowhere => {
                if eager {
                    s.vc[me] += 1;
                }
            }
            Ev::Post(ri) => {
                let ri = ri as usize;
                s.posts += 1;
                post_order[ri] = u32::try_from(s.posts).unwrap_or(NO_POST);
                let rv = &m.recvs[ri];
                // For races every nonblocking receive is followed: one that
                // names its source also matches before a later receive
                // that takes a message it would take.
                if rv.wildcard || races.is_some() {
                    s.pending.push((ri, rv.comm, rv.posted_tag, s.posts));
                }
            }
            Ev::Recv(ri) => {
                let ri = ri as usize;
                let rv = &m.recvs[ri];
                let my_post = match post_order[ri] {
                    NO_POST => usize::MAX,
                    k => k as usize,
                };
                // CompleteNow: pending receives that must have matched before this one.
                let now = complete_now(s, m, ri, my_post, any_tag, races.is_some());
                s.pending.retain(|e| !now.iter().any(|x| x.0 == e.0));
                for &(e, ..) in &now {
                    // Its match clock; its merge comes at its own completion
                    // (for races: now, as matches-before has it).
                    let after = out.recv_lc.get(e).map_or(0, |x| x.1);
                    out.recv_lc.set(e, (s.lc, after));
                    if lazy {
                        out.recv_own[e] = s.vc[me];
                    }
                    if m.recvs[e].wildcard {
                        s.lc += 1;
                        if lazy {
                            s.vc[me] += 1;
                        }
                    }
                    if races.is_some() {
                        if let Some(si) = send_of(e) {
                            if let Some(mlc) = out.send_lc.get(si) {
                                s.lc = s.lc.max(mlc);
                            }
                            if let Some(v) = out.send_vc.get_mut(si).and_then(Option::take) {
                                for (a, b) in s.vc.iter_mut().zip(&v) {
                                    *a = (*a).max(*b);
                                }
                            }
                        }
                    }
                }
                let was_pending = s
                    .pending
                    .iter()
                    .position(|e| e.0 == ri)
                    .map(|i| s.pending.swap_remove(i))
                    .is_some();
                let tracked = rv.wildcard || races.is_some() && my_post != usize::MAX;
                let match_lc = if rv.how == RecvHow::Nonblocking && tracked && !was_pending {
                    // Matched earlier, by a later receive's completion.
                    out.recv_lc.get(ri).map_or(s.lc, |x| x.0)
                } else {
                    let lc = s.lc;
                    if lazy {
                        out.recv_own[ri] = s.vc[me];
                    }
                    let probed = races.is_some_and(|w| w.get(ri).copied().unwrap_or(false));
                    if rv.wildcard && (rv.how == RecvHow::Blocking || was_pending) || probed {
                        s.lc += 1;
                        if lazy {
                            s.vc[me] += 1;
                        }
                    }
                    lc
                };
                let sent = send_of(ri).and_then(|si| out.send_lc.get(si));
                if let Some(mlc) = sent {
                    s.lc = s.lc.max(if races.is_some() { mlc } else { mlc + 1 });
                }
                out.recv_lc.set(ri, (match_lc, s.lc));
                let mut from = Vec::new();
                if lazy {
                    // The send's vector is needed by this receive alone.
                    if let Some(v) = send_of(ri).and_then(|si| out.send_vc[si].take()) {
                        for (a, b) in s.vc.iter_mut().zip(&v) {
                            *a = (*a).max(*b);
                        }
                    }
                } else if vector {
                    if let Some(v) = send_of(ri).and_then(|si| out.send_vc[si].as_ref()) {
                        for (a, b) in s.vc.iter_mut().zip(v) {
                            *a = (*a).max(*b);
                        }
                    }
                    s.vc[me] += 1;
                    out.recv_vc[ri] = Some(s.vc.clone());
                }
                if let Some(n) = send_of(ri).and_then(|si| send_node.get(si).copied().flatten()) {
                    from.push(n);
                }
                let vc = s.vc.clone();
                node(out, &vc, from);
            }
            Ev::Enter(i) => {
                let i = i as usize;
                if !collectives {
                    return;
                }
                if eager {
                    s.vc[me] += 1;
                }
                let cr = p.comm_rank[i].get(&(me as u32)).copied().unwrap_or(0);
                match part {
                    Some(io) => io.enters.push((i as u32, cr, s.lc, s.vc.clone())),
                    None => insts[i].enters.push((cr, s.lc, s.vc.clone())),
                }
                let vc = s.vc.clone();
                if let Some(nid) = node(out, &vc, Vec::new()) {
                    enter_node[i].push((cr, nid));
                }
            }
            Ev::Exit(i) => {
                let i = i as usize;
                if !collectives {
                    return;
                }
                let inst = &mut insts[i];
                let mine = p.comm_rank[i].get(&(me as u32)).copied().unwrap_or(0);
                let root_cr = inst.root.and_then(|w| p.comm_rank[i].get(&w).copied());
                let (lc, vc) = match part {
                    Some(io) => io
                        .answers
                        .get(&(i as u32, mine))
                        .cloned()
                        .unwrap_or_default(),
                    None => {
                        // All in: every member's merge at once, in linear
                        // time (one by one is N² per instance).
                        let n = inst.enters.len();
                        if n >= inst.size && inst.merged.as_ref().is_none_or(|m| m.0 != n) {
                            let all = merges(inst.shape, root_cr, &inst.enters);
                            let all = all.into_iter().map(|(k, lc, vc)| (k, (lc, vc)));
                            inst.merged = Some((n, all.collect()));
                        }
                        match inst.merged.as_ref().filter(|m| m.0 == n) {
                            Some((_, all)) if all.contains_key(&mine) => all[&mine].clone(),
                            _ => merge_for(inst.shape, root_cr, &inst.enters, mine),
                        }
                    }
                };
                let inst = &insts[i];
                s.lc = s.lc.max(lc);
                for (a, b) in s.vc.iter_mut().zip(&vc) {
                    *a = (*a).max(*b);
                }
                let from = enter_node[i]
                    .iter()
                    .filter(|&&(k, _)| k != mine && depends(inst.shape, root_cr, mine, k))
                    .map(|&(_, nid)| nid)
                    .collect();
                if eager {
                    s.vc[me] += 1;
                }
                let vc = s.vc.clone();
                node(out, &vc, from);
            }
            Ev::End(index) => {
                let (rank, thread) = p.stream_at[r];
                out.after_call.set(rank, thread, index, s.lc);
            }
        }
    }
}

/// CompleteNow of LLCP's rule R4 (`003_…` §5.1.2): the pending receives of
/// `s` that matched before receive `ri` (posted `my_post`), in post order:
/// those posted earlier that would take its message. With `closure`, also
/// those that would take the message of one already in the set (the trace
/// knows every message; the runtime knows only `ri`'s).
fn complete_now(
    s: &State,
    m: &Messages,
    ri: usize,
    my_post: usize,
    any_tag: i32,
    closure: bool,
) -> Vec<(usize, u64, i32, usize)> {
    let takes = |e: (usize, u64, i32, usize), x: usize, post: usize| {
        let (r, xr) = (&m.recvs[e.0], &m.recvs[x]);
        e.0 != x
            && e.1 == xr.comm
            && (e.2 == any_tag || e.2 == xr.tag)
            && (r.wildcard || r.src == xr.src)
            && e.3 < post
    };
    let mut now: Vec<(usize, u64, i32, usize)> = s
        .pending
        .iter()
        .copied()
        .filter(|&e| e.0 != ri && takes(e, ri, my_post))
        .collect();
    if closure {
        loop {
            let more: Vec<_> = s
                .pending
                .iter()
                .copied()
                .filter(|e| e.0 != ri && !now.iter().any(|x| x.0 == e.0))
                .filter(|&e| now.iter().any(|x| takes(e, x.0, x.3)))
                .collect();
            if more.is_empty() {
                break;
            }
            now.extend(more);
        }
    }
    now.sort_by_key(|&(_, _, _, post)| post);
    now
}

/// `a < b` for vector clocks: every entry ≤ and one <.
fn vc_less(a: &[u64], b: &[u64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x <= y) && a != b
}

/// Whether a member's exit (`mine`) depends on member `k`'s enter.
fn depends(shape: Shape, root: Option<u32>, mine: u32, k: u32) -> bool {
    match shape {
        Shape::NToN => true,
        Shape::OneToN => Some(k) == root,
        Shape::NToOne => Some(mine) == root,
        Shape::Scan => k <= mine,
        Shape::Exscan => k < mine,
    }
}

/// What member `mine`'s exit merges from the enters that came, (member,
/// clock, vector clock): the largest clock and the entrywise largest vector
/// of the enters it depends on but its own.
pub fn merge_for(
    shape: Shape,
    root: Option<u32>,
    enters: &[(u32, u64, Vec<u64>)],
    mine: u32,
) -> (u64, Vec<u64>) {
    let mut lc = 0;
    let mut vc: Vec<u64> = Vec::new();
    for (k, c, v) in enters {
        if *k == mine || !depends(shape, root, mine, *k) {
            continue;
        }
        lc = lc.max(*c);
        if vc.len() < v.len() {
            vc.resize(v.len(), 0);
        }
        for (a, b) in vc.iter_mut().zip(v) {
            *a = (*a).max(*b);
        }
    }
    (lc, vc)
}

/// [`merge_for`] of every member that entered, in member order: the
/// clocks in linear time (the largest two of distinct members, or a
/// scan's prefix); vectors, which only small runs have, one by one.
pub fn merges(
    shape: Shape,
    root: Option<u32>,
    enters: &[(u32, u64, Vec<u64>)],
) -> Vec<(u32, u64, Vec<u64>)> {
    let mut members: Vec<u32> = enters.iter().map(|e| e.0).collect();
    members.sort_unstable();
    members.dedup();
    if enters.iter().any(|e| !e.2.is_empty()) {
        return members
            .into_iter()
            .map(|k| {
                let (lc, vc) = merge_for(shape, root, enters, k);
                (k, lc, vc)
            })
            .collect();
    }
    // The largest clock of members that `mine`'s exit depends on.
    let of = |keep: &dyn Fn(u32) -> bool| {
        enters
            .iter()
            .filter(|e| keep(e.0))
            .map(|e| e.1)
            .max()
            .unwrap_or(0)
    };
    let lcs: Vec<u64> = match shape {
        Shape::OneToN => {
            let at_root = of(&|k| Some(k) == root);
            members
                .iter()
                .map(|&k| if Some(k) == root { 0 } else { at_root })
                .collect()
        }
        Shape::NToOne => {
            let but_root = of(&|k| Some(k) != root);
            members
                .iter()
                .map(|&k| if Some(k) == root { but_root } else { 0 })
                .collect()
        }
        Shape::NToN => {
            // The largest clock, and the largest of the other members.
            let best = enters.iter().max_by_key(|e| e.1).map(|e| (e.0, e.1));
            let second = best.map(|(b, _)| of(&|k| k != b));
            members
                .iter()
                .map(|&k| match best {
                    Some((b, c)) if b != k => c,
                    _ => second.unwrap_or(0),
                })
                .collect()
        }
        Shape::Scan | Shape::Exscan => {
            // Members before each one, by member order.
            let mut by: Vec<(u32, u64)> = enters.iter().map(|e| (e.0, e.1)).collect();
            by.sort_unstable();
            let mut at = 0;
            let mut before = 0;
            members
                .iter()
                .map(|&k| {
                    while at < by.len() && by[at].0 < k {
                        before = before.max(by[at].1);
                        at += 1;
                    }
                    before
                })
                .collect()
        }
    };
    members
        .into_iter()
        .zip(lcs)
        .map(|(k, lc)| (k, lc, Vec::new()))
        .collect()
}

/// Which vector clocks a [`Part`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartVectors {
    None,
    /// The runtime's vector mode.
    HappensBefore,
    /// LVCP's, for races.
    Lazy,
}

/// The walk's plan for a block of ranks ([`Part`]).
pub struct PartPlan(Plan);

impl PartPlan {
    pub fn new(trace: &Trace, m: &Messages) -> PartPlan {
        PartPlan(plan(trace, m))
    }

    /// Instance `i` of the block's collective calls: (its key
    /// (communicator, sequence number, start), its shape, the root's rank
    /// in the communicator, its size).
    pub fn instance(&self, i: usize) -> ((u64, u64, u64), Shape, Option<u32>, usize) {
        let (p, inst) = (&self.0, &self.0.instances[i]);
        let root = inst.root.and_then(|w| p.comm_rank[i].get(&w).copied());
        (p.keys[i], inst.shape, root, inst.size)
    }

    /// The block's instances by key.
    pub fn instances(&self) -> HashMap<(u64, u64, u64), u32> {
        (self.0.keys.iter().enumerate())
            .map(|(i, &k)| (k, i as u32))
            .collect()
    }

    /// The block's ranks with more than one thread.
    pub fn multi_threaded(&self) -> &[u32] {
        &self.0.multi
    }
}

/// The clock rules over the streams of some ranks, the whole trace's
/// (`pass`) or a block's (`pmtrace-mpi`): each stream steps while what its
/// next event depends on is known. In a block, the clocks of other blocks'
/// sends and what each collective exit merges come in from outside
/// ([`Part::set_send`], [`Part::answer`]), and the block's sends and
/// enters go out ([`Part::take_sends`], [`Part::take_enters`]).
pub struct Part<'a> {
    w: Walker<'a>,
    /// Each stream's next event.
    cur: Vec<usize>,
}

impl<'a> Part<'a> {
    /// The rules over a block: `collectives` merged at exits or not,
    /// `races` as in [`RaceClocks::compute`].
    pub fn new(
        trace: &'a Trace,
        m: &'a Messages,
        plan: &'a PartPlan,
        collectives: bool,
        vectors: PartVectors,
        races: Option<&'a [bool]>,
    ) -> Part<'a> {
        let vectors = match vectors {
            PartVectors::None => Vectors::None,
            PartVectors::HappensBefore => Vectors::Eager,
            PartVectors::Lazy => Vectors::Lazy,
        };
        let mut w = walker(trace, m, &plan.0, collectives, vectors, false, races);
        w.part = Some(PartIo::default());
        Part {
            w,
            cur: vec![0; plan.0.events.len()],
        }
    }

    /// Steps every stream as far as it can, once round; the events stepped.
    pub fn advance(&mut self) -> u64 {
        let mut stepped = 0;
        let p = self.w.p;
        let w = &mut self.w;
        for (r, at) in self.cur.iter_mut().enumerate() {
            while let Some(&ev) = p.events[r].get(*at) {
                if !w.ready(r, ev) {
                    break;
                }
                w.step(r, ev, true);
                *at += 1;
                stepped += 1;
            }
        }
        stepped
    }

    /// The first stream not at its end.
    pub fn blocked(&self) -> Option<usize> {
        (0..self.cur.len()).find(|&r| self.cur[r] < self.w.p.events[r].len())
    }

    /// The collective exit stream `r` waits at: (instance, member).
    pub fn waiting_exit(&self, r: usize) -> Option<(usize, u32)> {
        match self.w.p.events[r].get(self.cur[r]) {
            Some(&Ev::Exit(i)) if self.w.collectives => {
                Some((i as usize, self.w.member(r, i as usize)))
            }
            _ => None,
        }
    }

    /// Steps stream `r` past what never came; an exit merges `partial`,
    /// what its owner had (the whole trace's walk has the enters itself).
    pub fn force(&mut self, r: usize, partial: Option<(u64, Vec<u64>)>) {
        let ev = self.w.p.events[r][self.cur[r]];
        let waits = self.waiting_exit(r);
        if let (Some(io), Some((i, mine)), Some(x)) = (&mut self.w.part, waits, partial) {
            io.answers.insert((i as u32, mine), x);
        }
        self.w.out.forced += 1;
        self.w.step(r, ev, false);
        self.cur[r] += 1;
    }

    /// The sends stepped since the last call.
    pub fn take_sends(&mut self) -> Vec<u32> {
        self.w
            .part
            .as_mut()
            .map(|io| std::mem::take(&mut io.sends))
            .unwrap_or_default()
    }

    /// Send `i`'s clock and vector clock.
    pub fn send(&self, i: usize) -> (Option<u64>, Option<&[u64]>) {
        let vc = self.w.out.send_vc.get(i).and_then(|v| v.as_deref());
        (self.w.out.send_lc.get(i), vc)
    }

    /// The clock (and vector) of send `i`, made in another block.
    pub fn set_send(&mut self, i: usize, lc: u64, vc: Option<Vec<u64>>) {
        let out = &mut self.w.out;
        out.send_lc.set(i, lc);
        if let Some(v) = vc {
            if self.w.lazy {
                if let Some(d) = self.w.m.sends[i].dst {
                    out.send_own[i] = v.get(d as usize).copied().unwrap_or(NO_CLOCK);
                }
            }
            if let Some(slot) = out.send_vc.get_mut(i) {
                *slot = Some(v);
            }
        }
    }

    /// The enters stepped since the last call: (instance, member, clock,
    /// vector clock).
    pub fn take_enters(&mut self) -> Vec<(u32, u32, u64, Vec<u64>)> {
        self.w
            .part
            .as_mut()
            .map(|io| std::mem::take(&mut io.enters))
            .unwrap_or_default()
    }

    /// What member `member`'s exit of instance `i` merges.
    pub fn answer(&mut self, i: u32, member: u32, lc: u64, vc: Vec<u64>) {
        if let Some(io) = &mut self.w.part {
            io.answers.insert((i, member), (lc, vc));
        }
    }

    /// The clocks computed, for the checks.
    pub fn finish(self) -> PartClocks {
        PartClocks(self.w.out)
    }
}

/// What a [`Part`] computed.
pub struct PartClocks(Pass);

impl PartClocks {
    /// Events stepped past what they depend on.
    pub fn forced(&self) -> u64 {
        self.0.forced
    }

    /// The clocks after each call.
    pub fn after_call(self) -> CallClocks {
        self.0.after_call
    }

    /// The piggybacks of `recvs` checked against the clocks of a walk
    /// without collectives, when both ends are single-threaded (`multi`:
    /// the ranks that are not): (checked, mismatches).
    pub fn wire(
        &self,
        trace: &Trace,
        m: &Messages,
        multi: &[u32],
        recvs: std::ops::Range<usize>,
    ) -> (u64, u64) {
        wire_check(trace, m, &self.0, multi, recvs)
    }

    /// Matched pairs of `recvs` whose clocks are not ordered: (Lamport,
    /// vector, in vector mode).
    pub fn violations(&self, m: &Messages, recvs: std::ops::Range<usize>) -> (u64, u64) {
        violations(m, &self.0, recvs)
    }

    /// Places where a thread's clock decreased, call by call.
    pub fn decreasing(&self) -> u64 {
        self.0.after_call.decreasing()
    }

    /// What the race rules compare ([`RaceClocks`]).
    pub fn races(self, vector: bool) -> RaceClocks {
        race_clocks(self.0, vector)
    }
}

/// Piggybacks checked against the walk without collectives (see
/// [`PartClocks::wire`]).
fn wire_check(
    trace: &Trace,
    m: &Messages,
    wire: &Pass,
    multi: &[u32],
    recvs: std::ops::Range<usize>,
) -> (u64, u64) {
    let single = |rank: u32| multi.binary_search(&rank).is_err();
    let vector = !wire.send_vc.is_empty();
    let (mut checked, mut mismatches) = (0, 0);
    for ri in recvs {
        let r = &m.recvs[ri];
        let (Some(pb), Some(si)) = (r.pb, m.send_by_id(ri)) else {
            continue;
        };
        let s = &m.sends[si];
        if !(single(s.src) && single(r.dst)) {
            continue;
        }
        checked += 1;
        let mut bad = wire.send_lc.get(si) != Some(pb.lc) || s.time != pb.sent;
        if vector {
            let got = pb.vc.and_then(|at| {
                let th = trace.held(r.dst).thread(r.completion.thread)?;
                let w = trace.world_size as usize;
                th.vcs
                    .get(at as usize * w..(at as usize + 1) * w)
                    .map(|v| v.to_vec())
            });
            bad |= got.as_deref() != wire.send_vc[si].as_deref();
        }
        if bad {
            mismatches += 1;
        }
    }
    (checked, mismatches)
}

/// Matched pairs of `recvs` with send ≥ receive: (Lamport, vector).
fn violations(m: &Messages, full: &Pass, recvs: std::ops::Range<usize>) -> (u64, u64) {
    let (mut lamport, mut vector) = (0, 0);
    for ri in recvs {
        let Some(si) = m.send_by_id(ri) else { continue };
        if let (Some(s), Some((_, after))) = (full.send_lc.get(si), full.recv_lc.get(ri)) {
            if s >= after {
                lamport += 1;
            }
        }
        if let (Some(Some(a)), Some(Some(b))) = (full.send_vc.get(si), full.recv_vc.get(ri)) {
            if !vc_less(a, b) {
                vector += 1;
            }
        }
    }
    (lamport, vector)
}

/// Rebuilds the clocks of `trace` and checks them.
pub fn compute(trace: &Trace, m: &Messages) -> Clocks {
    let mode = trace
        .ranks
        .first()
        .map(|r| r.header.clocks.clone())
        .unwrap_or_else(|| "none".into());
    let vector = mode == "vector";
    let p = plan(trace, m);
    let mut report = ClockReport {
        mode: mode.clone(),
        ..ClockReport::default()
    };
    // Matching by id.
    for (ri, r) in m.recvs.iter().enumerate() {
        let found = m.send_by_id(ri);
        if mode != "none" {
            if found.is_some() {
                report.matched_by_id += 1;
            } else {
                report.unmatched_by_id += 1;
            }
            // A receive without a header (a partitioned message, an
            // untraced sender) has no id to disagree with.
            if r.pb.is_some() && found != m.send_by_fifo(ri) {
                report.fifo_disagreements += 1;
            }
        }
    }
    if mode == "none" {
        return Clocks {
            report,
            recv_lc: RecvClocks::new(m.recvs.len()),
            ..Clocks::default()
        };
    }
    // The runtime's view: no collectives; every piggyback must equal it.
    let vectors = if vector {
        Vectors::Eager
    } else {
        Vectors::None
    };
    let wire = pass(trace, m, &p, false, vectors, false, None);
    (report.wire_checked, report.wire_mismatches) =
        wire_check(trace, m, &wire, &p.multi, 0..m.recvs.len());
    drop(wire);
    // Clocks carried by one sender never decrease with its message ids.
    report.decreasing += decreasing_by_sender(by_sender(m.recvs.iter()));
    // The full clocks, collectives merged.
    let small = m.sends.len() + m.recvs.len() <= HB_MAX_EVENTS && p.multi.is_empty();
    let full = pass(trace, m, &p, true, vectors, vector && small, None);
    report.forced = full.forced;
    let (lamport, vector_bad) = violations(m, &full, 0..m.recvs.len());
    report.lamport_violations = lamport;
    if vector {
        report.vector_violations = Some(vector_bad);
        if small {
            report.happens_before = Some(hb_check(&full.nodes));
        }
    }
    // Clocks along each rank never decrease, call by call.
    report.decreasing += full.after_call.decreasing();
    Clocks {
        report,
        after_call: full.after_call,
        recv_lc: full.recv_lc,
    }
}

/// (sender, message id, clock) of each receive that carried a piggyback.
pub fn by_sender<'a>(recvs: impl Iterator<Item = &'a RecvEvent>) -> Vec<(u32, u64, u64)> {
    recvs
        .filter_map(|r| Some((r.src?, r.pb?.id, r.pb?.lc)))
        .collect()
}

/// Places where the clock one sender's thread piggybacked decreased with
/// its message ids, in `by_sender` (every receive of those senders).
pub fn decreasing_by_sender(mut by_sender: Vec<(u32, u64, u64)>) -> u64 {
    by_sender.sort_unstable();
    let mut n = 0;
    for w in by_sender.windows(2) {
        let same_thread = w[0].0 == w[1].0
            && w[0].1 >> pmtrace_format::record::MSG_THREAD_SHIFT
                == w[1].1 >> pmtrace_format::record::MSG_THREAD_SHIFT;
        if same_thread && w[1].2 < w[0].2 {
            n += 1;
        }
    }
    n
}

/// What the race rules compare, per message and per receive, for one
/// rank's receives (`003_…` Theorems 5.3 and 5.5): a send's clock as its
/// destination would see it, and a receive's clock when it matched.
#[derive(Debug, Clone, Default)]
pub struct RaceClocks {
    /// `"vector"` (LVCP: exact) or `"lamport"` (LLCP: sound, may miss some).
    pub mode: &'static str,
    /// Per send of [`Messages::sends`]: its LLCP clock, or in vector mode
    /// its LVCP vector's entry for the destination rank.
    send: Vec<u64>,
    /// Per receive of [`Messages::recvs`]: its clock when it matched (LLCP),
    /// or its own LVCP entry then.
    recv: Vec<u64>,
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
fn race_clocks(full: Pass, vector: bool) -> RaceClocks {
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

/// Brute force: reachability over the event graph against vector order.
fn hb_check(nodes: &[Node]) -> HbCheck {
    let n = nodes.len();
    let words = n.div_ceil(64);
    let mut reach = vec![0u64; n * words];
    for i in 0..n {
        for &f in &nodes[i].from {
            // `f` precedes `i` in the evaluation order.
            for w in 0..words {
                let v = reach[f * words + w];
                reach[i * words + w] |= v;
            }
            reach[i * words + f / 64] |= 1 << (f % 64);
        }
    }
    let mut c = HbCheck {
        events: n as u64,
        ..HbCheck::default()
    };
    for a in 0..n {
        for b in 0..n {
            if a == b {
                continue;
            }
            c.pairs += 1;
            let hb = reach[b * words + a / 64] >> (a % 64) & 1 == 1;
            if hb != vc_less(&nodes[a].vc, &nodes[b].vc) {
                c.disagreements += 1;
            }
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(index: u32) -> EventRef {
        EventRef {
            rank: 0,
            thread: 3,
            index,
        }
    }

    #[test]
    fn a_thread_in_record_order_keeps_only_its_clock_changes() {
        let mut c = CallClocks {
            ranks: vec![vec![(3, ThreadClocks::Steps(Vec::new()))]],
        };
        // Calls 2 and 5 communicate; 5 twice (two events), 9 leaves the clock as it was.
        c.set(0, 3, 2, 1);
        c.set(0, 3, 5, 2);
        c.set(0, 3, 5, 4);
        c.set(0, 3, 9, 4);
        let ThreadClocks::Steps(v) = &c.ranks[0][0].1 else {
            unreachable!()
        };
        assert_eq!(v, &vec![(2, 1), (5, 4)]);
        let got: Vec<Option<u64>> = (0..11).map(|i| c.get(at(i))).collect();
        let want = [0, 0, 1, 1, 1, 4, 4, 4, 4, 4, 4].map(Some);
        assert_eq!(got, want);
        assert_eq!(
            c.get(EventRef { thread: 4, ..at(0) }),
            None,
            "no such thread"
        );
        // The reader gives the same, in order and out of it.
        let mut r = c.thread(0, 3);
        for i in (0..11).chain([3, 0, 9, 2, 2, 10, 4]) {
            assert_eq!(r.get(i), c.get(at(i as u32)), "index {i}");
        }
        assert_eq!(c.thread(0, 4).get(0), None);
        assert_eq!(c.decreasing(), 0);
    }

    #[test]
    fn dense_threads_keep_a_clock_per_record_and_count_decreases() {
        let mut c = CallClocks {
            ranks: vec![vec![
                (3, ThreadClocks::Dense(vec![NO_CLOCK; 4])),
                (4, ThreadClocks::Steps(Vec::new())),
            ]],
        };
        c.set(0, 3, 2, 5);
        c.set(0, 3, 0, 7);
        assert_eq!(c.get(at(0)), Some(7));
        assert_eq!(c.get(at(1)), None, "not a call");
        assert_eq!(c.get(at(2)), Some(5));
        c.set(0, 4, 1, 9);
        c.set(0, 4, 3, 8);
        // 7 then 5 on thread 3; 9 then 8 on thread 4.
        assert_eq!(c.decreasing(), 2);
    }

    #[test]
    fn every_exit_merges_in_linear_time_what_it_merges_one_by_one() {
        let shapes = Shape::ALL;
        let mut x: u64 = 7;
        let mut next = |n: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % n
        };
        for round in 0..400 {
            let shape = shapes[round % shapes.len()];
            let size = 1 + next(6) as u32;
            let root = (round % 3 != 0).then(|| next(size as u64) as u32);
            // Members may enter twice (a broken trace), or not at all.
            let enters: Vec<(u32, u64, Vec<u64>)> = (0..next(8))
                .map(|_| (next(size as u64) as u32, next(5), Vec::new()))
                .collect();
            let got = merges(shape, root, &enters);
            let mut members: Vec<u32> = enters.iter().map(|e| e.0).collect();
            members.sort_unstable();
            members.dedup();
            let want: Vec<(u32, u64, Vec<u64>)> = members
                .iter()
                .map(|&k| {
                    let (lc, vc) = merge_for(shape, root, &enters, k);
                    (k, lc, vc)
                })
                .collect();
            assert_eq!(got, want, "{shape:?} root {root:?} enters {enters:?}");
        }
        // By hand: a scan's exit takes the members before it, a
        // broadcast's the root's, an all-to-all's the others'.
        let e = |v: &[(u32, u64)]| -> Vec<(u32, u64, Vec<u64>)> {
            v.iter().map(|&(k, c)| (k, c, Vec::new())).collect()
        };
        let lcs = |v: Vec<(u32, u64, Vec<u64>)>| v.into_iter().map(|x| x.1).collect::<Vec<_>>();
        let four = e(&[(0, 3), (1, 9), (2, 1), (3, 4)]);
        assert_eq!(lcs(merges(Shape::Scan, None, &four)), [0, 3, 9, 9]);
        assert_eq!(lcs(merges(Shape::OneToN, Some(2), &four)), [1, 1, 0, 1]);
        assert_eq!(lcs(merges(Shape::NToOne, Some(2), &four)), [0, 0, 9, 0]);
        assert_eq!(lcs(merges(Shape::NToN, None, &four)), [9, 4, 9, 9]);
        // Vectors merge entrywise, without the member's own.
        let v = vec![
            (0, 1, vec![1, 0, 5]),
            (1, 2, vec![0, 2, 0]),
            (2, 0, vec![3, 0, 0]),
        ];
        assert_eq!(
            merges(Shape::NToN, None, &v),
            vec![
                (0, 2, vec![3, 2, 0]),
                (1, 1, vec![3, 0, 5]),
                (2, 2, vec![1, 2, 5])
            ]
        );
    }
}
