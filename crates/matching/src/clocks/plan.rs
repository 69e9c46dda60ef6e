//! The plan of the rules' walk: every rank's steps in order, what each
//! refers to, and the collectives' shapes.

use super::*;
use rayon::prelude::*;

/// One step of a rank, in order.
#[derive(Debug, Clone, Copy)]
pub(super) enum Ev {
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
pub(super) enum Vectors {
    None,
    /// Happens-before vectors, as the runtime's vector mode piggybacks:
    /// a rank's own entry ticks at every send, receive, enter and exit.
    Eager,
    /// LVCP's (`003_…` §5.2): a rank's own entry ticks exactly where its
    /// LLCP clock does (the completion of a wildcard receive), and entries
    /// merge by maximum along messages and collectives.
    Lazy,
}

pub use pmtrace_format::coll::Shape;

/// A collective instance, as the plan finds it; what a walk learns of it
/// is [`Live`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Instance {
    pub(super) shape: Shape,
    /// World rank of the root, for rooted shapes.
    pub(super) root: Option<u32>,
    pub(super) size: usize,
}

/// An instance a walk has entered and not every member has left.
#[derive(Debug, Default)]
pub(super) struct Live {
    /// (comm rank, clock at the enter, vector clock at the enter) per member.
    pub(super) enters: Vec<(u32, u64, Vec<u64>)>,
    /// Every entered member's merge ([`merges`]), made once all entered,
    /// with the number of enters it was made from.
    pub(super) merged: Option<(usize, Merged)>,
    /// Members that have left it.
    pub(super) exits: usize,
}

/// Each member's (clock, vector clock) merge, by member.
pub(super) type Merged = HashMap<u32, (u64, Vec<u64>)>;

/// The events of every rank, and what they refer to.
pub(super) struct Plan {
    /// Per stream (one application thread of one rank), in order.
    pub(super) events: Vec<Steps>,
    /// The rank (index into `trace.ranks`) of each stream.
    pub(super) stream_rank: Vec<usize>,
    pub(super) instances: Vec<Instance>,
    /// For each instance, comm ranks by world rank.
    pub(super) comm_rank: CommRanks,
    /// (communicator, sequence number, start) of each instance.
    pub(super) keys: Vec<(u64, u64, u64)>,
    /// World ranks with more than one thread, sorted (the replay is exact
    /// on the others).
    pub(super) multi: Vec<u32>,
    /// Per rank, per thread: its calls' time order is not their record
    /// order, so each call gets a clock of its own (`CallClocks`).
    pub(super) dense: Vec<Vec<bool>>,
    /// (world rank, thread index) of each stream.
    pub(super) stream_at: Vec<(u32, u32)>,
}

/// The collective instances found so far, by (communicator, sequence
/// number, start): the start is 0 but for a persistent collective, whose
/// k-th start is an instance of its own.
#[derive(Default)]
pub(super) struct Found {
    pub(super) instances: Vec<Instance>,
    pub(super) of: HashMap<(u64, u64, u64), usize>,
}

/// Each instance's rank in its communicator of each member, by world
/// rank: one table per communicator, shared by its instances.
#[derive(Default)]
pub(super) struct CommRanks {
    /// The table of each instance.
    of_instance: Vec<u32>,
    tables: Vec<HashMap<u32, u32>>,
    /// The table of each communicator, by global id.
    of_comm: HashMap<u64, u32>,
}

impl CommRanks {
    /// World rank `world`'s rank in instance `i`'s communicator.
    #[inline]
    pub(super) fn get(&self, i: usize, world: u32) -> Option<u32> {
        self.tables[self.of_instance[i] as usize]
            .get(&world)
            .copied()
    }

    /// Adds the next instance, of communicator `c`.
    fn push(&mut self, c: &pmtrace_trace::Comm) {
        let tables = &mut self.tables;
        let t = *self.of_comm.entry(c.global_id).or_insert_with(|| {
            tables.push(
                c.members
                    .iter()
                    .chain(&c.remote_members)
                    .enumerate()
                    .map(|(k, &w)| (w, k as u32))
                    .collect(),
            );
            (tables.len() - 1) as u32
        });
        self.of_instance.push(t);
    }
}

impl Found {
    /// The instance a collective call (its `start`-th start) belongs to.
    pub(super) fn instance(
        &mut self,
        trace: &Trace,
        rank: &Rank,
        call: &Call,
        start: u64,
    ) -> Option<usize> {
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
            let shape = rank.coll(call.func).shape;
            let rooted = shape.rooted();
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
            });
            self.instances.len() - 1
        }))
    }
}

pub(super) fn plan(trace: &Trace, m: &Messages) -> Plan {
    // Each rank's steps side by side, its instances numbered in the order
    // it meets them; then numbered across ranks in rank order, each
    // rank's in that order: the numbers one walk over the ranks in turn
    // would give. As many ranks at a time as there are threads, so that
    // only their instance tables are held beside the whole's.
    let mut instances = Vec::new();
    let mut comm_rank = CommRanks::default();
    let mut of: HashMap<(u64, u64, u64), usize> = HashMap::default();
    let mut keys = Vec::new();
    let mut parts: Vec<(Vec<Steps>, Vec<u32>, Vec<bool>)> = Vec::with_capacity(trace.ranks.len());
    for wave in trace.ranks.chunks(rayon::current_num_threads().max(1)) {
        let planned: Vec<RankPlan> = (wave.par_iter())
            .map(|rank| rank_plan(trace, m, rank))
            .collect();
        for part in planned {
            let numbers = (part.keys.iter().enumerate())
                .map(|(i, &key)| {
                    *of.entry(key).or_insert_with(|| {
                        instances.push(part.instances[i]);
                        // The key's first part is the communicator.
                        let c = trace.comms.get(key.0);
                        comm_rank.push(c.expect("an instance's communicator is known"));
                        keys.push(key);
                        instances.len() - 1
                    }) as u32
                })
                .collect();
            parts.push((part.streams, numbers, part.dense));
        }
    }
    let mut events = Vec::new();
    let (mut stream_rank, mut stream_at, mut dense, mut multi) = (vec![], vec![], vec![], vec![]);
    for (ri, (streams, numbers, rank_dense)) in parts.iter_mut().enumerate() {
        let rank = &trace.ranks[ri];
        if rank.threads.len() > 1 {
            multi.push(rank.rank);
        }
        for (th, steps) in rank.threads.iter().zip(streams.drain(..)) {
            events.push((steps, &*numbers));
            stream_rank.push(ri);
            stream_at.push((rank.rank, th.index));
        }
        dense.push(std::mem::take(rank_dense));
    }
    let events = (events.into_par_iter())
        .map(|(steps, numbers)| steps.renumbered(numbers))
        .collect();
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

/// One rank's part of the plan: its threads' steps, with its instances
/// numbered in the order the rank meets them (each one's key and shape
/// by that number).
struct RankPlan {
    streams: Vec<Steps>,
    keys: Vec<(u64, u64, u64)>,
    instances: Vec<Instance>,
    dense: Vec<bool>,
}

fn rank_plan(trace: &Trace, m: &Messages, rank: &Rank) -> RankPlan {
    let mut found = Found::default();
    // Threads are separate streams: their order is not MPI's to know.
    let mut streams: Vec<Steps> = (0..rank.threads.len()).map(|_| Steps::default()).collect();
    let mut state = RankState {
        send_inits: crate::matching::send_inits(rank),
        icoll_of: HashMap::default(),
        coll_inits: HashMap::default(),
    };
    // Calls of all threads in time order.
    let (steps, dense) = call_order(rank);
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
        let records = &rank.threads[slot].records;
        let evs = &mut streams[slot];
        let before = evs.bytes();
        let call = &records.call(index as usize).expect("a call");
        let ends = Ends {
            sends,
            done,
            posted,
        };
        state.steps(trace, rank, m, &mut found, call, ends, evs);
        if evs.bytes() > before || dense[slot] {
            evs.push(Ev::End(index));
        }
    }
    for stream in &mut streams {
        stream.shrink_to_fit();
    }
    let mut keys = vec![(0, 0, 0); found.instances.len()];
    for (key, i) in found.of {
        keys[i] = key;
    }
    RankPlan {
        streams,
        keys,
        instances: found.instances,
        dense,
    }
}

/// A call's messages, from the ends: its sends, receives completed and
/// receives posted.
struct Ends<'e> {
    sends: &'e [End],
    done: &'e [End],
    posted: &'e [End],
}

/// What a rank's calls share in the plan: its persistent sends, its
/// persistent collectives by op id (the call that made each and how often
/// it was started), and the instances of its nonblocking collectives by
/// op id.
struct RankState<'r> {
    send_inits: rustc_hash::FxHashSet<u64>,
    coll_inits: HashMap<u64, (Call<'r>, u64)>,
    icoll_of: HashMap<u64, usize>,
}

impl<'r> RankState<'r> {
    /// The steps of one `call` of `rank` onto its stream's `evs`.
    #[allow(clippy::too_many_arguments)]
    fn steps(
        &mut self,
        trace: &Trace,
        rank: &Rank,
        m: &Messages,
        found: &mut Found,
        call: &Call<'r>,
        ends: Ends,
        evs: &mut Steps,
    ) {
        let item_of = |run: &[End], item: u32| run.iter().find(|e| e.item == item).map(|e| e.msg);
        let send_at = |item: u32| item_of(ends.sends, item);
        let recv_done = |item: u32| item_of(ends.done, item);
        // Nonblocking receives posted here (a blocking one is posted and
        // completed at once).
        let recv_post = |item: u32| {
            (ends.posted.iter())
                .find(|e| e.item == item && m.recvs[e.msg as usize].how != RecvHow::Blocking)
                .map(|e| e.msg)
        };
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
                    if self.send_inits.contains(&init) {
                        evs.push(send(item));
                    } else if let Some(s) = send_at(item) {
                        // A partitioned send: no header, but a message.
                        evs.push(Ev::Send(s));
                    } else if let Some(r) = recv_post(item) {
                        evs.push(Ev::Post(r));
                    } else if let Some((made, k)) = self.coll_inits.get_mut(&init) {
                        *k += 1;
                        if let Some(inst) = found.instance(trace, rank, &*made, *k) {
                            evs.push(Ev::Enter(inst as u32));
                            self.icoll_of.insert(instance, inst);
                        }
                    }
                }
            }
            (Payload::Complete { done }, _) => {
                for (item, c) in done.iter().enumerate() {
                    if let Some(r) = recv_done(item as u32) {
                        evs.push(Ev::Recv(r));
                    } else if let Some(inst) = c.op.and_then(|op| self.icoll_of.remove(&op)) {
                        evs.push(Ev::Exit(inst as u32));
                    }
                }
            }
            (&Payload::Coll { op, .. }, _) if call.rc == 0 => {
                if kind == Kind::CollInit {
                    if let Some(op) = op {
                        self.coll_inits.insert(op, (*call, 0));
                    }
                } else if let Some(inst) = found.instance(trace, rank, call, 0) {
                    evs.push(Ev::Enter(inst as u32));
                    if kind == Kind::Icoll {
                        if let Some(op) = op {
                            self.icoll_of.insert(op, inst);
                        }
                    } else {
                        evs.push(Ev::Exit(inst as u32));
                    }
                }
            }
            _ => {}
        }
    }
}

/// The calls of `rank` the rules visit, (thread slot, record) in time
/// order, and whether each thread's calls come out of record order (then
/// every call is visited, so that each gets a clock of its own; else only
/// calls with a payload, since the others take part in no rule).
pub(super) fn call_order(rank: &Rank) -> (Box<dyn Iterator<Item = (u32, u32)> + '_>, Vec<bool>) {
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
            let calls = (0..ev.len() as u32)
                .filter(|&i| ev.has_payload(i as usize))
                .map(|i| (0, i));
            return (Box::new(calls), vec![false]);
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
        .collect::<Vec<_>>();
    (Box::new(steps.into_iter()), dense)
}
