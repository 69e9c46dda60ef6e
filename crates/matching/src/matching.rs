//! Point-to-point messages: every send and receive of the trace, matched by
//! MPI's FIFO rule.
//!
//! **Sends** are `send` records, `isend` records (at issue), the send half
//! of `sendrecv` and `isendrecv`, and every started instance of a
//! `send_init` or `psend_init` request (at its `start` call). A send's time is the start of the call that posted it.
//!
//! **Receives** are `recv`, the receive half of `sendrecv`, `mrecv`, and the
//! completions (items of `complete` records) of operations made by `irecv`,
//! `isendrecv` (its receive half), started `recv_init` and `precv_init`
//! requests, and `imrecv`. A receive's time is the
//! end of the call that completed it; its *posting* time (which orders it
//! for matching) is the start of the call that posted it: the `recv`, the
//! `irecv`, the `start`, or, for `mrecv`/`imrecv`, the probe that matched
//! the message. Source, tag and size come from the status, resolved against
//! the posted values (the matched probe's status for `mrecv`/`imrecv`).
//!
//! **Left out:** peers equal to `MPI_PROC_NULL`, cancelled operations, and
//! calls that returned an error. A request freed with `MPI_Request_free`
//! still sends its message. A receive whose request was never completed
//! (or was freed) is counted in [`Messages::pending_receives`], not as a
//! receive.
//!
//! **Matching.** A receive whose message carried a piggyback names its
//! send: the sender's world rank (from the status) and the message id
//! (each sender thread numbers its messages, [`send_ids`] replays that).
//! Those pairs are exact. The rest (`PMTRACE_CLOCKS=none`, untraced
//! senders, partitioned messages, which carry no header) go by the FIFO rule, which [`Messages::fifo`] also keeps for
//! all receives, so that the ids can be checked against it. MPI guarantees
//! non-overtaking per *channel* (source world rank, destination world
//! rank, communicator, tag): the k-th send of a channel in the sender's
//! posting order matches the k-th receive of that channel in the
//! receiver's posting order. Because the status tells each
//! receive's actual source and tag, wildcard receives fall into their
//! channels too. A send or receive whose peer cannot be mapped to a world
//! rank (its communicator's members were never written) stays unmatched and
//! is counted in [`Messages::unresolved`].

use rayon::prelude::*;
use rustc_hash::FxHashMap as HashMap;

use pmtrace_format::meta::MpiConstants;
use pmtrace_format::record::{msg_id, Pb, MSG_THREAD_SHIFT};
use pmtrace_format::{Kind, Status};
use pmtrace_trace::{Call, Payload};

use pmtrace_trace::ops::OpTable;
use pmtrace_trace::read::{EventRef, Rank, Trace};
use pmtrace_trace::wire::{In, Out, Wire};

use crate::ends::{Cursor, Ends};

/// One message leaving a rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendEvent {
    /// World rank of the sender.
    pub src: u32,
    /// World rank of the receiver; `None` if it cannot be resolved.
    pub dst: Option<u32>,
    /// Global id of the communicator.
    pub comm: u64,
    pub tag: i32,
    pub bytes: u64,
    /// Start of the call that posted the send.
    pub time: u64,
    /// That call (for a persistent request, its `start`).
    pub call: EventRef,
    /// Position among the sends of `call` (a `startall` starts several).
    pub item: u32,
}

/// One message arriving at a rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvEvent {
    /// World rank of the sender; `None` if it cannot be resolved.
    pub src: Option<u32>,
    /// World rank of the receiver.
    pub dst: u32,
    pub comm: u64,
    pub tag: i32,
    /// Bytes received, from the status.
    pub bytes: u64,
    /// End of the call that completed the receive.
    pub time: u64,
    /// Start of the call that posted it (the matching probe for mrecv/imrecv).
    pub posted_at: u64,
    /// The posting call.
    pub post: EventRef,
    /// Position within the posting call (a `startall` posts several).
    pub post_item: u32,
    /// The completing call (`post` itself for a blocking receive).
    pub completion: EventRef,
    /// Position within the completing call (a `waitall` completes several).
    pub completion_item: u32,
    /// How the receive was made, for the clock rules.
    pub how: RecvHow,
    /// Posted with `MPI_ANY_SOURCE` (a matched-probe receive never is: its
    /// message was chosen by the probe).
    pub wildcard: bool,
    /// The tag it was posted with.
    pub posted_tag: i32,
    /// What the message's piggyback said, if it had one.
    pub pb: Option<Pb>,
}

impl Wire for SendEvent {
    fn put(&self, o: &mut Out) {
        o.u32(self.src).put(&self.dst);
        o.u64(self.comm)
            .i32(self.tag)
            .u64(self.bytes)
            .u64(self.time);
        o.at(self.call).u32(self.item);
    }
    fn get(i: &mut In) -> SendEvent {
        SendEvent {
            src: i.u32(),
            dst: i.get(),
            comm: i.u64(),
            tag: i.i32(),
            bytes: i.u64(),
            time: i.u64(),
            call: i.at(),
            item: i.u32(),
        }
    }
}

impl Wire for RecvEvent {
    fn put(&self, o: &mut Out) {
        o.put(&self.src).u32(self.dst).u64(self.comm).i32(self.tag);
        o.u64(self.bytes).u64(self.time).u64(self.posted_at);
        o.at(self.post).u32(self.post_item);
        o.at(self.completion).u32(self.completion_item);
        o.u8(self.how as u8)
            .bool(self.wildcard)
            .i32(self.posted_tag);
        let pb = self.pb.map(|pb| ((pb.id, pb.lc), (pb.sent, pb.vc)));
        o.put(&pb);
    }
    fn get(i: &mut In) -> RecvEvent {
        RecvEvent {
            src: i.get(),
            dst: i.u32(),
            comm: i.u64(),
            tag: i.i32(),
            bytes: i.u64(),
            time: i.u64(),
            posted_at: i.u64(),
            post: i.at(),
            post_item: i.u32(),
            completion: i.at(),
            completion_item: i.u32(),
            how: match i.u8() {
                0 => RecvHow::Blocking,
                1 => RecvHow::Nonblocking,
                _ => RecvHow::Probed,
            },
            wildcard: i.bool(),
            posted_tag: i.i32(),
            pb: (i.get::<Option<((u64, u64), (u64, Option<u32>))>>())
                .map(|((id, lc), (sent, vc))| Pb { id, lc, sent, vc }),
        }
    }
}

/// How a receive was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvHow {
    /// `recv`, `sendrecv`: posted and completed by one call.
    Blocking = 0,
    /// `irecv`, started `recv_init`: completed by a wait or test.
    Nonblocking,
    /// `mrecv`, `imrecv`: the message was matched by a probe.
    Probed,
}

/// A matched pair: indices into [`Messages::sends`] and [`Messages::recvs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    pub send: usize,
    pub recv: usize,
}

/// Receives against their sends by id and by the FIFO rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IdChecks {
    /// Matched to their send through the piggybacked id.
    pub matched_by_id: u64,
    /// Without a piggyback, or with an id no send has.
    pub unmatched_by_id: u64,
    /// With a piggyback whose id names another send than the FIFO rule,
    /// on a channel MPI orders (0 on every correct run).
    pub fifo_disagreements: u64,
    /// The same on channels several threads use, where MPI orders nothing
    /// and the id is the only answer.
    pub fifo_unordered: u64,
}

impl IdChecks {
    /// As numbers to sum across processes, in field order.
    pub fn to_array(self) -> [u64; 4] {
        [
            self.matched_by_id,
            self.unmatched_by_id,
            self.fifo_disagreements,
            self.fifo_unordered,
        ]
    }

    pub fn from_array(v: [u64; 4]) -> IdChecks {
        IdChecks {
            matched_by_id: v[0],
            unmatched_by_id: v[1],
            fifo_disagreements: v[2],
            fifo_unordered: v[3],
        }
    }
}

/// Timestamps that break causality, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Violations {
    /// Matched messages received (end of the completing call) before they
    /// were sent (start of the sending call).
    pub reversed: u64,
    /// Matched messages with receive time < send time + `mu_ns`: the clock
    /// condition with a minimum latency μ. With μ = 0 this equals `reversed`.
    pub clock_condition: u64,
    /// The μ used, in ns.
    pub mu_ns: u64,
}

/// Every point-to-point message of a trace.
#[derive(Debug, Clone, Default)]
pub struct Messages {
    pub sends: Vec<SendEvent>,
    pub recvs: Vec<RecvEvent>,
    /// In send order: by piggybacked message id where the receive carried
    /// one, by the FIFO rule for the rest.
    pub matched: Vec<Message>,
    pub unmatched_sends: Vec<usize>,
    pub unmatched_recvs: Vec<usize>,
    /// Receive operations posted but never completed.
    pub pending_receives: u64,
    /// The message id each send carried (0: unknown), see [`send_ids`].
    pub send_ids: Vec<u64>,
    /// For each receive, its send by the FIFO rule alone (what the ids
    /// are checked against), see [`Messages::send_by_fifo`].
    fifo: Vec<u32>,
    /// The receives (sorted) of channels on which several threads send,
    /// or several threads post receives: MPI orders no two messages of
    /// two threads (MPI-4.1 §3.5), so the FIFO rule does not pair them.
    unordered: Vec<u32>,
    /// Where each send and receive is in the records.
    pub ends: Ends,
    /// For each receive, the send its piggybacked id names ([`NO_SEND`]:
    /// none); see [`Messages::send_by_id`].
    by_id: Vec<u32>,
    /// The sends of each id, for the ranks whose sends these are.
    ids: SendIds,
    /// Sends of ranks outside a block that this block's receives may
    /// take ([`Messages::add_sends`]): by (sender, id), for those that
    /// carried one.
    foreign_ids: HashMap<(u32, u64), u32>,
}

/// Whether `threads` holds more than one value.
fn several(mut threads: impl Iterator<Item = u32>) -> bool {
    let first = threads.next();
    threads.any(|t| Some(t) != first)
}

/// No send (in [`Messages`]' per-receive tables).
const NO_SEND: u32 = u32::MAX;

/// Channel key: source world rank, destination world rank, comm, tag.
type Channel = (u32, u32, u64, i32);

impl Messages {
    /// Collects and matches the messages of `trace`.
    pub fn build(trace: &Trace) -> Messages {
        let mut m = Messages::collect(trace);
        m.pair();
        m
    }

    /// The sends and receives of `trace` (or of a block of it), with
    /// their ends and message ids, not yet matched.
    pub fn collect(trace: &Trace) -> Messages {
        // Each rank's scan appends to the lists alone (its own tail), so
        // ranks scan side by side and join in rank order.
        let parts: Vec<Messages> = trace
            .ranks
            .par_iter()
            .map(|rank| {
                let mut part = Messages::default();
                RankScan::new(trace, rank, &mut part).run();
                part
            })
            .collect();
        let mut m = Messages {
            pending_receives: parts.iter().map(|p| p.pending_receives).sum(),
            ..Messages::default()
        };
        let (sends, recvs): (Vec<_>, Vec<_>) =
            parts.into_iter().map(|p| (p.sends, p.recvs)).unzip();
        (m.sends, m.recvs) = rayon::join(|| concat(sends), || concat(recvs));
        m.ends = Ends::build(
            trace,
            &m.sends,
            |s| (s.src, (s.call, s.item)),
            &m.recvs,
            |r| {
                let done = (r.completion, r.completion_item);
                (r.dst, done, (r.post, r.post_item))
            },
        );
        let mut ids = SendIds::build(trace, &m.ends, m.sends.len());
        m.send_ids = std::mem::take(&mut ids.of_send);
        m.ids = ids;
        m
    }

    /// Adds sends made outside this block of the trace, each with the id
    /// it carried (0: none), for [`Messages::pair`] to match with the
    /// block's receives. They go after the block's own sends.
    pub fn add_sends(&mut self, sends: impl IntoIterator<Item = (SendEvent, u64)>) {
        for (s, id) in sends {
            if id != 0 {
                self.foreign_ids
                    .insert((s.src, id), self.sends.len() as u32);
            }
            self.sends.push(s);
            self.send_ids.push(id);
        }
    }

    /// Matches the sends and receives: by piggybacked id where the
    /// receive carried one, by the FIFO rule for the rest.
    pub fn pair(&mut self) {
        self.matched.clear();
        self.unmatched_sends.clear();
        self.unmatched_recvs.clear();
        self.by_id = self
            .recvs
            .iter()
            .map(|r| match (r.src, r.pb) {
                (Some(src), Some(pb)) => match self.ids.of_rank(src) {
                    Some(table) => table.send(pb.id),
                    None => self
                        .foreign_ids
                        .get(&(src, pb.id))
                        .copied()
                        .unwrap_or(NO_SEND),
                },
                _ => NO_SEND,
            })
            .collect();
        self.unordered = self.match_fifo(|_| true, |_| true);
        self.fifo = vec![NO_SEND; self.recvs.len()];
        for p in &self.matched {
            self.fifo[p.recv] = p.send as u32;
        }
        self.match_ids();
    }

    /// Settles a block's matching after [`Messages::pair`]: `received`
    /// are the receives made outside the block that took its sends (send
    /// index, receive), added after its own receives; the unmatched sends
    /// keep only the block's own (`own_sends` of them), since the sends of
    /// other blocks are counted where they were made.
    pub fn add_received(&mut self, received: Vec<(usize, RecvEvent)>, own_sends: usize) {
        let taken: rustc_hash::FxHashSet<usize> = received.iter().map(|(s, _)| *s).collect();
        for (send, recv) in received {
            let r = self.recvs.len();
            self.recvs.push(recv);
            self.fifo.push(send as u32);
            self.by_id.push(send as u32);
            self.matched.push(Message { send, recv: r });
        }
        self.matched.sort_by_key(|m| m.send);
        self.unmatched_sends
            .retain(|&s| s < own_sends && !taken.contains(&s));
    }

    /// The send receive `recv` matches by the FIFO rule alone, if any.
    pub fn send_by_fifo(&self, recv: usize) -> Option<usize> {
        let s = self.fifo[recv];
        (s != NO_SEND).then_some(s as usize)
    }

    /// Whether MPI orders receive `recv`'s channel, so that the FIFO rule
    /// pairs it: one thread sends on it and one thread posts its receives.
    pub fn fifo_applies(&self, recv: usize) -> bool {
        self.unordered.binary_search(&(recv as u32)).is_err()
    }

    /// How receives `recvs` compare with their sends by id and by the
    /// FIFO rule (the report's and `pmtrace-mpi`'s counts).
    pub fn id_checks(&self, recvs: std::ops::Range<usize>) -> IdChecks {
        let mut c = IdChecks::default();
        for ri in recvs {
            let found = self.send_by_id(ri);
            if found.is_some() {
                c.matched_by_id += 1;
            } else {
                c.unmatched_by_id += 1;
            }
            // A receive without a header (a partitioned message, an
            // untraced sender) has no id to disagree with.
            if self.recvs[ri].pb.is_some() && found != self.send_by_fifo(ri) {
                if self.fifo_applies(ri) {
                    c.fifo_disagreements += 1;
                } else {
                    c.fifo_unordered += 1;
                }
            }
        }
        c
    }

    /// The send receive `recv` names by its piggybacked id, if any.
    pub fn send_by_id(&self, recv: usize) -> Option<usize> {
        let s = self.by_id[recv];
        (s != NO_SEND).then_some(s as usize)
    }

    /// Pairs each receive that carried a piggybacked id with the send of
    /// that id (same channel), then the rest by the FIFO rule. The ids are
    /// exact where FIFO is not: a receive request freed in flight takes a
    /// message the trace never sees arrive, and shifts FIFO's pairs.
    fn match_ids(&mut self) {
        let mut pair_of_recv: Vec<Option<usize>> = vec![None; self.recvs.len()];
        let mut send_paired = vec![false; self.sends.len()];
        for (ri, r) in self.recvs.iter().enumerate() {
            let Some(si) = self.send_by_id(ri) else {
                continue;
            };
            let s = &self.sends[si];
            if s.dst == Some(r.dst) && s.comm == r.comm && s.tag == r.tag && !send_paired[si] {
                pair_of_recv[ri] = Some(si);
                send_paired[si] = true;
            }
        }
        if pair_of_recv.iter().all(Option::is_none) {
            return;
        }
        self.matched.clear();
        self.unmatched_sends.clear();
        self.unmatched_recvs.clear();
        let _ = self.match_fifo(|s| !send_paired[s], |r| pair_of_recv[r].is_none());
        self.matched.extend(
            pair_of_recv
                .iter()
                .enumerate()
                .filter_map(|(recv, s)| s.map(|send| Message { send, recv })),
        );
        self.matched.sort_by_key(|m| m.send);
    }

    /// The FIFO rule over the sends and receives that `send_ok` and
    /// `recv_ok` keep, added to `matched` and the unmatched lists; returns
    /// the receives of channels that MPI does not order (sorted, see
    /// [`Messages::fifo_applies`]).
    #[must_use]
    fn match_fifo(
        &mut self,
        send_ok: impl Fn(usize) -> bool,
        recv_ok: impl Fn(usize) -> bool,
    ) -> Vec<u32> {
        let mut channels: HashMap<Channel, (Vec<usize>, Vec<usize>)> = HashMap::default();
        for (i, s) in self.sends.iter().enumerate().filter(|&(i, _)| send_ok(i)) {
            match s.dst {
                Some(dst) => channels
                    .entry((s.src, dst, s.comm, s.tag))
                    .or_default()
                    .0
                    .push(i),
                None => self.unmatched_sends.push(i),
            }
        }
        for (i, r) in self.recvs.iter().enumerate().filter(|&(i, _)| recv_ok(i)) {
            match r.src {
                Some(src) => channels
                    .entry((src, r.dst, r.comm, r.tag))
                    .or_default()
                    .1
                    .push(i),
                None => self.unmatched_recvs.push(i),
            }
        }
        let mut unordered = Vec::new();
        for (mut sends, mut recvs) in channels.into_values() {
            let sending = |&i: &usize| self.sends[i].call.thread;
            let posting = |&i: &usize| self.recvs[i].post.thread;
            if several(sends.iter().map(sending)) || several(recvs.iter().map(posting)) {
                unordered.extend(recvs.iter().map(|&r| r as u32));
            }
            sends.sort_by_key(|&i| {
                let s = &self.sends[i];
                (s.time, s.call, s.item)
            });
            recvs.sort_by_key(|&i| {
                let r = &self.recvs[i];
                (r.posted_at, r.post, r.post_item)
            });
            let n = sends.len().min(recvs.len());
            self.matched.extend(
                sends
                    .iter()
                    .zip(&recvs)
                    .map(|(&send, &recv)| Message { send, recv }),
            );
            self.unmatched_sends.extend(&sends[n..]);
            self.unmatched_recvs.extend(&recvs[n..]);
        }
        self.matched.sort_by_key(|m| m.send);
        self.unmatched_sends.sort_unstable();
        self.unmatched_recvs.sort_unstable();
        unordered.sort_unstable();
        unordered
    }

    /// Sends and receives whose peer could not be mapped to a world rank.
    pub fn unresolved(&self) -> usize {
        self.sends.iter().filter(|s| s.dst.is_none()).count()
            + self.recvs.iter().filter(|r| r.src.is_none()).count()
    }

    /// Unmatched sends plus unmatched receives.
    pub fn unmatched(&self) -> usize {
        self.unmatched_sends.len() + self.unmatched_recvs.len()
    }

    /// Causality violations of the recorded timestamps (see [`Violations`]).
    pub fn violations(&self, mu_ns: u64) -> Violations {
        self.violations_in(mu_ns, |_, t| t)
    }

    /// Violations with every time mapped through `time(rank, t)` first (to
    /// corrected or true time).
    pub fn violations_in(&self, mu_ns: u64, time: impl Fn(u32, u64) -> u64) -> Violations {
        self.violations_of(&self.matched, mu_ns, time)
    }

    /// [`Messages::violations_in`] of the messages `matched` only (a
    /// block's share of them, say).
    pub fn violations_of<'m>(
        &self,
        matched: impl IntoIterator<Item = &'m Message>,
        mu_ns: u64,
        time: impl Fn(u32, u64) -> u64,
    ) -> Violations {
        let mut v = Violations {
            mu_ns,
            ..Violations::default()
        };
        for m in matched {
            let (s, r) = (&self.sends[m.send], &self.recvs[m.recv]);
            let (sent, received) = (time(s.src, s.time), time(r.dst, r.time));
            v.reversed += u64::from(received < sent);
            v.clock_condition += u64::from(received < sent.saturating_add(mu_ns));
        }
        v
    }
}

/// The operation ids of `rank`'s persistent send requests (`MPI_Send_init`
/// and its modes): a start of one of them sends.
pub fn send_inits(rank: &Rank) -> rustc_hash::FxHashSet<u64> {
    rank.payload_calls_of(|k| k == Kind::SendInit)
        .filter_map(|(_, c)| match (rank.kind(c.func), &c.payload) {
            (Kind::SendInit, Payload::Send { op: Some(op), .. }) => Some(*op),
            _ => None,
        })
        .collect()
}

/// The message ids of the sends: the runtime numbers the messages of
/// each thread from 1 in record order, `msg_id(thread, n)`. Every call
/// that sends takes one, also to `MPI_PROC_NULL` and when it fails (the
/// header is written before the call), so the count runs over calls that
/// are not in `sends`: a send, an isend, a sendrecv, and each persistent
/// send a start starts.
#[derive(Debug, Clone, Default)]
struct SendIds {
    /// The id each send carried (0: unknown).
    of_send: Vec<u64>,
    /// World rank of `by_rank[0]`.
    first: u32,
    /// By world rank less `first`: the send of each id.
    by_rank: Vec<IdTable>,
}

/// One rank's sends by message id: per thread, the send of its n-th
/// message at `n - 1` (a message that is no send: `NO_SEND`).
#[derive(Debug, Clone, Default)]
struct IdTable {
    threads: Vec<(u32, Vec<u32>)>,
}

impl IdTable {
    fn send(&self, id: u64) -> u32 {
        let thread = (id >> MSG_THREAD_SHIFT) as u32;
        let n = id & ((1u64 << MSG_THREAD_SHIFT) - 1);
        let Ok(t) = self.threads.binary_search_by_key(&thread, |t| t.0) else {
            return NO_SEND;
        };
        let table = &self.threads[t].1;
        match n.checked_sub(1).and_then(|k| table.get(k as usize)) {
            Some(&s) => s,
            None => NO_SEND,
        }
    }
}

impl SendIds {
    /// The id table of world rank `rank`, if its sends are these.
    fn of_rank(&self, rank: u32) -> Option<&IdTable> {
        self.by_rank.get(rank.checked_sub(self.first)? as usize)
    }

    fn build(trace: &Trace, ends: &Ends, sends: usize) -> SendIds {
        let per_rank: Vec<(IdTable, Vec<(u32, u64)>)> = trace
            .ranks
            .par_iter()
            .map(|rank| {
                let send_inits = send_inits(rank);
                let mut table = IdTable::default();
                let mut ids = Vec::new();
                for (slot, th) in rank.threads.iter().enumerate() {
                    let mut sends = Cursor::new(&ends.thread(rank.rank, slot).sends);
                    let mut of_n: Vec<u32> = Vec::new();
                    let ev = &th.records;
                    // Only a call whose payload may send takes an id (the
                    // rest are not decoded).
                    for index in (0..ev.len()).filter(|&i| ev.may_send(i)) {
                        let call = ev.call(index).expect("a call");
                        let here = sends.at(index as u32);
                        let mut take = |item: u32| {
                            let s = here.iter().find(|e| e.item == item).map(|e| e.msg);
                            of_n.push(s.unwrap_or(NO_SEND));
                            if let Some(s) = s {
                                ids.push((s, msg_id(th.index, of_n.len() as u64)));
                            }
                        };
                        match (&call.payload, rank.kind(call.func)) {
                            (Payload::Send { .. }, Kind::Send | Kind::Isend)
                            | (Payload::Sendrecv { .. } | Payload::Isendrecv { .. }, _) => take(0),
                            (Payload::Start { started }, _) => {
                                for (item, (init, _)) in started.iter().enumerate() {
                                    if init.is_some_and(|i| send_inits.contains(&i)) {
                                        take(item as u32);
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                    if !of_n.is_empty() {
                        table.threads.push((th.index, of_n));
                    }
                }
                (table, ids)
            })
            .collect();
        let mut of_send = vec![0u64; sends];
        let mut by_rank = Vec::with_capacity(per_rank.len());
        for (table, ids) in per_rank {
            for (s, id) in ids {
                of_send[s as usize] = id;
            }
            by_rank.push(table);
        }
        SendIds {
            of_send,
            first: trace.first,
            by_rank,
        }
    }
}

/// What a rank-local operation id stands for, as far as messages go.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// An isend or a started send_init instance: index into `sends`.
    Send(usize),
    SendInit(PostedSend),
    RecvInit(PostedRecv),
    /// A posted receive waiting for its completion.
    Recv(PostedRecv, Completed),
    /// A message matched by mprobe/improbe: source and tag from its status,
    /// posted at the probe.
    Probed(PostedRecv),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Completed {
    No,
    Yes,
}

/// What a send names, in the sender's communicator.
#[derive(Debug, Clone, Copy)]
struct PostedSend {
    peer: i32,
    tag: i32,
    comm: Option<u64>,
    bytes: u64,
}

/// What a receive asked for, and where and when it was posted.
#[derive(Debug, Clone, Copy)]
struct PostedRecv {
    src: i32,
    tag: i32,
    comm: Option<u64>,
    posted: u64,
    at: u64,
    post: EventRef,
    item: u32,
}

impl PostedRecv {
    /// Makes the receives that call `post`, starting at `at`, posts (its
    /// first item): from source, tag, communicator and posted bytes.
    fn maker(post: EventRef, at: u64) -> impl Fn(i32, i32, Option<u64>, u64) -> PostedRecv {
        move |src, tag, comm, posted| PostedRecv {
            src,
            tag,
            comm,
            posted,
            at,
            post,
            item: 0,
        }
    }
}

/// Collects the sends and receives of one rank in three passes, since an
/// operation may be created, started and completed on different threads.
struct RankScan<'a> {
    trace: &'a Trace,
    rank: &'a Rank,
    c: MpiConstants,
    out: &'a mut Messages,
    ops: OpTable<Op>,
    /// Indices into `out.sends` of sends later found cancelled.
    cancelled: Vec<usize>,
    first_send: usize,
    /// Receive operations made by `imrecv`.
    probed: OpTable<()>,
}

impl<'a> RankScan<'a> {
    fn new(trace: &'a Trace, rank: &'a Rank, out: &'a mut Messages) -> Self {
        let first_send = out.sends.len();
        let c = rank.header.constants;
        RankScan {
            trace,
            rank,
            c,
            out,
            ops: OpTable::new(rank.events() as usize),
            cancelled: vec![],
            first_send,
            probed: OpTable::new(rank.events() as usize),
        }
    }

    fn run(mut self) {
        let rank = self.rank;
        // Each pass decodes only the calls of its kinds.
        let calls = |keep: fn(Kind) -> bool| rank.payload_calls_of(keep).filter(|(_, c)| c.rc == 0);
        let posting = |k: Kind| {
            use Kind::*;
            matches!(
                k,
                Send | Isend
                    | SendInit
                    | PsendInit
                    | Recv
                    | Irecv
                    | RecvInit
                    | PrecvInit
                    | Sendrecv
                    | Isendrecv
                    | Mprobe
                    | Improbe
            )
        };
        for (at, call) in calls(posting) {
            self.posting(at, &call);
        }
        for (at, call) in calls(|k| matches!(k, Kind::Start | Kind::Mrecv | Kind::Imrecv)) {
            self.starting(at, &call);
        }
        for (at, call) in calls(|k| matches!(k, Kind::Complete | Kind::Freed)) {
            self.completing(at, &call);
        }
        let pending = self
            .ops
            .values()
            .filter(|op| matches!(op, Op::Recv(_, Completed::No)))
            .count();
        self.out.pending_receives += pending as u64;
        // Drop cancelled sends; only this rank's tail of `sends` can hold them.
        if !self.cancelled.is_empty() {
            self.cancelled.sort_unstable();
            let tail = self.out.sends.split_off(self.first_send);
            let (first, cancelled) = (self.first_send, &self.cancelled);
            let kept = tail
                .into_iter()
                .enumerate()
                .filter(|(i, _)| cancelled.binary_search(&(first + i)).is_err());
            self.out.sends.extend(kept.map(|(_, s)| s));
        }
    }

    fn comm_id(&self, index: u32, t: u64) -> Option<u64> {
        self.rank.comm_at(index, t).map(|d| d.global_id)
    }

    /// World rank of `peer` in communicator `comm`, as this rank sees it.
    fn world(&self, comm: Option<u64>, peer: i32) -> Option<u32> {
        let peer = u32::try_from(peer).ok()?;
        self.trace.comms.get(comm?)?.to_world(self.rank.rank, peer)
    }

    /// Records a send posted by `call` at `time`; its index, unless it goes nowhere.
    fn push_send(&mut self, s: PostedSend, time: u64, call: EventRef, item: u32) -> Option<usize> {
        if s.peer == self.c.proc_null {
            return None;
        }
        self.out.sends.push(SendEvent {
            src: self.rank.rank,
            dst: self.world(s.comm, s.peer),
            comm: s.comm.unwrap_or(u64::MAX),
            tag: s.tag,
            bytes: s.bytes,
            time,
            call,
            item,
        });
        Some(self.out.sends.len() - 1)
    }

    /// Registers a nonblocking receive awaiting its completion. One from
    /// `MPI_PROC_NULL` is no message, so it is not even pending.
    fn post_recv(&mut self, op: u64, p: PostedRecv) {
        if p.src != self.c.proc_null {
            self.ops.insert(op, Op::Recv(p, Completed::No));
        }
    }

    /// Records receive `p`, completed by `completion` (ending at `time`)
    /// with `status`, which this resolves against the posted values.
    fn push_recv(
        &mut self,
        p: PostedRecv,
        status: Status,
        completion: (EventRef, u32),
        time: u64,
        how: RecvHow,
    ) {
        let status = status.resolve(p.src, p.tag, p.posted);
        let source = status.source.unwrap_or(p.src);
        if p.src == self.c.proc_null
            || source == self.c.proc_null
            || status.cancelled
            || status.empty
        {
            return;
        }
        let src = if source == self.c.any_source {
            None
        } else {
            self.world(p.comm, source)
        };
        self.out.recvs.push(RecvEvent {
            src,
            dst: self.rank.rank,
            comm: p.comm.unwrap_or(u64::MAX),
            tag: status.tag.unwrap_or(p.tag),
            bytes: status.bytes.unwrap_or(p.posted),
            time,
            posted_at: p.at,
            post: p.post,
            post_item: p.item,
            completion: completion.0,
            completion_item: completion.1,
            how,
            wildcard: how != RecvHow::Probed && p.src == self.c.any_source,
            posted_tag: p.tag,
            pb: status.pb,
        });
    }

    /// Pass 1: calls that send, receive, or create an operation.
    fn posting(&mut self, at: EventRef, call: &Call) {
        match call.payload {
            Payload::Send { .. } => self.posting_send(at, call),
            Payload::Recv { .. } | Payload::Probe { .. } => self.posting_recv(at, call),
            Payload::Sendrecv { .. } | Payload::Isendrecv { .. } => self.posting_pair(at, call),
            _ => {}
        }
    }

    /// A send posted, or a persistent send made.
    fn posting_send(&mut self, at: EventRef, call: &Call) {
        let t = call.t_start;
        match (self.rank.kind(call.func), &call.payload) {
            (
                Kind::Send | Kind::Isend,
                &Payload::Send {
                    peer,
                    tag,
                    comm,
                    bytes,
                    op,
                },
            ) => {
                let s = PostedSend {
                    peer,
                    tag,
                    comm: self.comm_id(comm, t),
                    bytes,
                };
                let idx = self.push_send(s, t, at, 0);
                if let (Some(op), Some(idx)) = (op, idx) {
                    self.ops.insert(op, Op::Send(idx));
                }
            }
            (
                Kind::SendInit | Kind::PsendInit,
                &Payload::Send {
                    peer,
                    tag,
                    comm,
                    bytes,
                    op: Some(op),
                },
            ) => {
                let s = PostedSend {
                    peer,
                    tag,
                    comm: self.comm_id(comm, t),
                    bytes,
                };
                self.ops.insert(op, Op::SendInit(s));
            }
            _ => {}
        }
    }

    /// A receive posted or made, a persistent receive made, or a message
    /// probed for a matched receive.
    fn posting_recv(&mut self, at: EventRef, call: &Call) {
        let t = call.t_start;
        let posted = PostedRecv::maker(at, t);
        match (self.rank.kind(call.func), &call.payload) {
            (
                Kind::Recv,
                &Payload::Recv {
                    src,
                    tag,
                    comm,
                    posted: n,
                    status: Some(status),
                    ..
                },
            ) => {
                let p = posted(src, tag, self.comm_id(comm, t), n);
                self.push_recv(p, status, (at, 0), call.t_end, RecvHow::Blocking);
            }
            (
                Kind::Irecv,
                &Payload::Recv {
                    src,
                    tag,
                    comm,
                    posted: n,
                    op: Some(op),
                    ..
                },
            ) => {
                let p = posted(src, tag, self.comm_id(comm, t), n);
                self.post_recv(op, p);
            }
            (
                Kind::RecvInit | Kind::PrecvInit,
                &Payload::Recv {
                    src,
                    tag,
                    comm,
                    posted: n,
                    op: Some(op),
                    ..
                },
            ) => {
                let p = posted(src, tag, self.comm_id(comm, t), n);
                self.ops.insert(op, Op::RecvInit(p));
            }
            (
                Kind::Mprobe | Kind::Improbe,
                &Payload::Probe {
                    src,
                    tag,
                    comm,
                    status,
                    op: Some(op),
                },
            ) => {
                let (src, tag) = (status.source.unwrap_or(src), status.tag.unwrap_or(tag));
                let p = posted(src, tag, self.comm_id(comm, t), status.bytes.unwrap_or(0));
                self.ops.insert(op, Op::Probed(p));
            }
            _ => {}
        }
    }

    /// Both halves of a send-receive.
    fn posting_pair(&mut self, at: EventRef, call: &Call) {
        let t = call.t_start;
        let posted = PostedRecv::maker(at, t);
        match (self.rank.kind(call.func), &call.payload) {
            (
                Kind::Sendrecv,
                &Payload::Sendrecv {
                    peer,
                    stag,
                    bytes,
                    src,
                    rtag,
                    posted: n,
                    comm,
                    status,
                },
            ) => {
                let comm = self.comm_id(comm, t);
                self.push_send(
                    PostedSend {
                        peer,
                        tag: stag,
                        comm,
                        bytes,
                    },
                    t,
                    at,
                    0,
                );
                self.push_recv(
                    posted(src, rtag, comm, n),
                    status,
                    (at, 0),
                    call.t_end,
                    RecvHow::Blocking,
                );
            }
            (
                Kind::Isendrecv,
                &Payload::Isendrecv {
                    peer,
                    stag,
                    bytes,
                    src,
                    rtag,
                    posted: n,
                    comm,
                    op,
                },
            ) => {
                let comm = self.comm_id(comm, t);
                let s = PostedSend {
                    peer,
                    tag: stag,
                    comm,
                    bytes,
                };
                self.push_send(s, t, at, 0);
                if let Some(op) = op {
                    self.post_recv(op, posted(src, rtag, comm, n));
                }
            }
            _ => {}
        }
    }

    /// Pass 2: started persistent requests, and receives of probed messages.
    fn starting(&mut self, at: EventRef, call: &Call) {
        let t = call.t_start;
        match (self.rank.kind(call.func), &call.payload) {
            (Kind::Start, Payload::Start { started }) => {
                for (item, &(init, instance)) in started.iter().enumerate() {
                    match init.and_then(|i| self.ops.get(&i).copied()) {
                        Some(Op::SendInit(s)) => {
                            if let Some(idx) = self.push_send(s, t, at, item as u32) {
                                self.ops.insert(instance, Op::Send(idx));
                            }
                        }
                        Some(Op::RecvInit(p)) => {
                            let p = PostedRecv {
                                at: t,
                                post: at,
                                item: item as u32,
                                ..p
                            };
                            self.post_recv(instance, p);
                        }
                        _ => {}
                    }
                }
            }
            (
                Kind::Mrecv,
                &Payload::Mrecv {
                    msg: Some(msg),
                    posted,
                    status: Some(status),
                    ..
                },
            ) => {
                if let Some(Op::Probed(p)) = self.ops.get(&msg).copied() {
                    self.push_recv(
                        PostedRecv { posted, ..p },
                        status,
                        (at, 0),
                        call.t_end,
                        RecvHow::Probed,
                    );
                }
            }
            (
                Kind::Imrecv,
                &Payload::Mrecv {
                    msg: Some(msg),
                    posted,
                    op: Some(op),
                    ..
                },
            ) => {
                if let Some(Op::Probed(p)) = self.ops.get(&msg).copied() {
                    self.post_recv(op, PostedRecv { posted, ..p });
                    self.probed.insert(op, ());
                }
            }
            _ => {}
        }
    }

    /// Pass 3: completions. An operation completes once; a later completion
    /// of the same id (a non-destructive status query before the wait) is ignored.
    fn completing(&mut self, at: EventRef, call: &Call) {
        // A send freed once its cancellation succeeded moved nothing.
        if let Payload::OpRef {
            op: Some(op),
            cancelled: true,
        } = &call.payload
        {
            if let Some(&mut Op::Send(idx)) = self.ops.get_mut(op) {
                self.cancelled.push(idx);
            }
            return;
        }
        let Payload::Complete { done } = &call.payload else {
            return;
        };
        for (i, c) in done.iter().enumerate() {
            let Some(op) = c.op else { continue };
            if c.status.empty {
                continue;
            }
            match self.ops.get_mut(&op) {
                Some(Op::Recv(p, state @ Completed::No)) => {
                    *state = Completed::Yes;
                    let p = *p;
                    let how = if self.probed.contains_key(&op) {
                        RecvHow::Probed
                    } else {
                        RecvHow::Nonblocking
                    };
                    self.push_recv(p, c.status, (at, i as u32), call.t_end, how);
                }
                Some(&mut Op::Send(idx)) if c.status.cancelled => self.cancelled.push(idx),
                _ => {}
            }
        }
    }
}

/// The parts' items in order, each part moved side by side (the pages of
/// the whole are touched on every core, not on one).
fn concat<T: Send>(parts: Vec<Vec<T>>) -> Vec<T> {
    let total = parts.iter().map(Vec::len).sum();
    let mut out: Vec<T> = Vec::with_capacity(total);
    let mut rest = &mut out.spare_capacity_mut()[..total];
    for part in parts {
        let (dst, after) = rest.split_at_mut(part.len());
        part.into_par_iter()
            .zip(dst.par_iter_mut())
            .for_each(|(x, slot)| {
                slot.write(x);
            });
        rest = after;
    }
    // SAFETY: each of the first `total` places was written above, once.
    unsafe { out.set_len(total) };
    out
}

#[cfg(test)]
mod tests {
    use super::concat;

    #[test]
    fn parts_are_joined_in_order_and_moved_whole() {
        let parts: Vec<Vec<String>> = vec![
            (0..3).map(|i| format!("a{i}")).collect(),
            Vec::new(),
            (0..100_000).map(|i| format!("b{i}")).collect(),
            vec!["c".into()],
        ];
        let expected: Vec<String> = parts.concat();
        assert_eq!(concat(parts), expected);
        assert!(concat(Vec::<Vec<u8>>::new()).is_empty());
    }
}
