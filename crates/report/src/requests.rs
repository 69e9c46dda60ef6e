//! Nonblocking operations the trace never saw end: requests made by
//! `MPI_Isend` and its modes, `MPI_Irecv`, `MPI_Isendrecv(_replace)`,
//! `MPI_Imrecv`, the nonblocking collectives, and each instance that
//! `MPI_Start(all)` started of a persistent request, that no completion
//! call (`Wait`/`Test` family) named and no `MPI_Request_free` released. A
//! program that forgets a `Wait` leaks the request, and its receive may
//! never get its data; a rank that aborted shows what it had in flight.

use pmtrace_format::Kind;
use pmtrace_trace::ops::OpTable;
use pmtrace_trace::read::{EventRef, Rank, Trace};
use pmtrace_trace::wire::{In, Out, Wire};
use pmtrace_trace::{Call, Payload};
use rayon::prelude::*;
use serde::Serialize;

/// A request never completed, and the call that made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PendingRequest {
    pub rank: u32,
    pub thread: u32,
    /// The call that made it: `MPI_Irecv`, ...; for an instance of a
    /// persistent request, the `MPI_Start`/`MPI_Startall` that started it.
    pub function: String,
    /// That call's position among its thread's records (from 0).
    pub position: u32,
    pub time_ns: u64,
    /// "send", "receive" or "collective".
    pub kind: &'static str,
    /// The peer as the call named it (a rank of its communicator, or the
    /// MPI's `MPI_ANY_SOURCE`); none for a collective.
    pub peer: Option<i32>,
    /// That peer's world rank, where it is one and known.
    pub peer_world: Option<u32>,
    pub tag: Option<i32>,
    /// Global id of the communicator, where known.
    pub comm: Option<u64>,
}

impl PendingRequest {
    /// The call that made it.
    pub fn at(&self) -> EventRef {
        EventRef {
            rank: self.rank,
            thread: self.thread,
            index: self.position,
        }
    }
}

/// How many pending requests a report lists.
pub const PENDING_SHOWN: usize = 100;

/// What made a request: the call, and what it named.
#[derive(Debug, Clone, Copy)]
struct Made {
    at: EventRef,
    func: u32,
    t: u64,
    kind: &'static str,
    peer: Option<i32>,
    tag: Option<i32>,
    comm: Option<u32>,
}

/// Every request of `trace` never completed nor freed, by rank, thread and
/// position: how many, and the first [`PENDING_SHOWN`].
pub fn pending(trace: &Trace) -> (u64, Vec<PendingRequest>) {
    let per_rank: Vec<(u64, Vec<PendingRequest>)> = trace
        .ranks
        .par_iter()
        .map(|rank| pending_of(trace, rank, PENDING_SHOWN))
        .collect();
    let total = per_rank.iter().map(|p| p.0).sum();
    let first = per_rank
        .into_iter()
        .flat_map(|p| p.1)
        .take(PENDING_SHOWN)
        .collect();
    (total, first)
}

/// Every request of `trace` (or of a block) never completed nor freed, by
/// rank, thread and position.
pub fn pending_all(trace: &Trace) -> Vec<PendingRequest> {
    let per_rank: Vec<Vec<PendingRequest>> = (trace.ranks.par_iter())
        .map(|rank| pending_of(trace, rank, usize::MAX).1)
        .collect();
    per_rank.into_iter().flatten().collect()
}

/// The calls that make or release requests.
fn makes(k: Kind) -> bool {
    use Kind::*;
    matches!(
        k,
        Isend
            | Irecv
            | Isendrecv
            | Imrecv
            | Icoll
            | SendInit
            | PsendInit
            | RecvInit
            | PrecvInit
            | CollInit
            | Start
            | RequestFree
            | Freed
    )
}

impl Made {
    /// What `call` (at `at`) made, named by nothing but the call: a send
    /// unless its payload says otherwise.
    fn plain(at: EventRef, call: &Call<'_>) -> Made {
        Made {
            at,
            func: call.func,
            t: call.t_start,
            kind: "send",
            peer: None,
            tag: None,
            comm: None,
        }
    }
}

/// The request that `call` (at `at`) made, as the call named it; none
/// for a call that makes no request of its own (`MPI_Start`, a free).
fn made_by(at: EventRef, call: &Call<'_>) -> Option<Made> {
    let base = Made::plain(at, call);
    Some(match call.payload {
        Payload::Send {
            peer, tag, comm, ..
        } => Made {
            peer: Some(peer),
            tag: Some(tag),
            comm: Some(comm),
            ..base
        },
        Payload::Recv { src, tag, comm, .. } => Made {
            kind: "receive",
            peer: Some(src),
            tag: Some(tag),
            comm: Some(comm),
            ..base
        },
        // Its send half completes in the call; the receive half is the request.
        Payload::Isendrecv {
            src, rtag, comm, ..
        } => Made {
            kind: "receive",
            peer: Some(src),
            tag: Some(rtag),
            comm: Some(comm),
            ..base
        },
        Payload::Mrecv { .. } => Made {
            kind: "receive",
            ..base
        },
        Payload::Coll { comm, .. } => Made {
            kind: "collective",
            comm: Some(comm),
            ..base
        },
        _ => return None,
    })
}

/// The operation id a request-making call's payload names.
fn op_of(payload: &Payload<'_>) -> Option<u64> {
    match *payload {
        Payload::Send { op, .. }
        | Payload::Recv { op, .. }
        | Payload::Isendrecv { op, .. }
        | Payload::Mrecv { op, .. }
        | Payload::Coll { op, .. }
        | Payload::OpRef { op, .. } => op,
        _ => None,
    }
}

/// The requests of `rank` left pending: how many, and the first `shown`.
fn pending_of(trace: &Trace, rank: &Rank, shown: usize) -> (u64, Vec<PendingRequest>) {
    use Kind::*;
    // Each request's maker by position (thread, index): 12 bytes a request,
    // the details read back from the record for the few left pending.
    let mut made: OpTable<(u32, u32)> = OpTable::new(rank.events() as usize);
    // Persistent requests, what their instances name, and which request
    // each instance was started from.
    let mut inits: OpTable<Made> = OpTable::new(0);
    let mut instance_of: OpTable<u64> = OpTable::new(0);
    let mut freed: OpTable<()> = OpTable::new(0);
    for (at, call) in rank.payload_calls_of(makes) {
        let kind = rank.kind(call.func);
        if let Payload::Start { started } = call.payload {
            for &(init, instance) in started.iter() {
                made.insert(instance, (at.thread, at.index));
                if let Some(init) = init {
                    instance_of.insert(instance, init);
                }
            }
            continue;
        }
        let Some(op) = op_of(&call.payload) else {
            continue;
        };
        let made_here = made_by(at, &call);
        match made_here {
            None if matches!(kind, RequestFree | Freed) => freed.insert(op, ()),
            None => {}
            Some(m) if matches!(kind, SendInit | PsendInit | RecvInit | PrecvInit | CollInit) => {
                inits.insert(op, m)
            }
            Some(_) => made.insert(op, (at.thread, at.index)),
        }
    }
    // The ops some completion call named (a byte a slot, not a call's
    // place: only whether there was one is asked).
    let mut completed: OpTable<()> = OpTable::new(rank.events() as usize);
    for (_, c) in rank.payload_calls_of(|k| k == Complete) {
        if let Payload::Complete { done } = c.payload {
            for op in done.iter().filter_map(|d| d.op) {
                completed.insert(op, ());
            }
        }
    }
    let mut left: Vec<(u32, u32, u64)> = made
        .iter()
        .filter(|&(op, _)| {
            !completed.contains_key(&op)
                && !freed.contains_key(&op)
                && !instance_of.get(&op).is_some_and(|i| freed.contains_key(i))
        })
        .map(|(op, &(thread, index))| (thread, index, op))
        .collect();
    left.sort_unstable();
    let n = left.len() as u64;
    let c = trace.constants();
    let shown = left
        .into_iter()
        .filter_map(|(thread, index, op)| {
            let at = EventRef {
                rank: rank.rank,
                thread,
                index,
            };
            let call = rank.call_at(at)?;
            match call.payload {
                Payload::Start { .. } => {
                    let named = instance_of.get(&op).and_then(|i| inits.get(i).copied());
                    let started = Made::plain(at, &call);
                    Some(match named {
                        Some(n) => Made {
                            kind: n.kind,
                            peer: n.peer,
                            tag: n.tag,
                            comm: n.comm,
                            ..started
                        },
                        None => started,
                    })
                }
                _ => made_by(at, &call),
            }
        })
        .take(shown)
        .map(|m| {
            let def = m.comm.and_then(|i| rank.comm_at(i, m.t));
            let peer_world = match (m.comm, m.peer) {
                (Some(i), Some(p)) if p >= 0 && p != c.proc_null => {
                    trace.to_world(rank.rank, i, p as u32)
                }
                _ => None,
            };
            PendingRequest {
                rank: rank.rank,
                thread: m.at.thread,
                function: rank.header.functions[m.func as usize].name.clone(),
                position: m.at.index,
                time_ns: m.t,
                kind: m.kind,
                peer: m.peer,
                peer_world,
                tag: m.tag,
                comm: def.map(|d| d.global_id),
            }
        })
        .collect();
    (n, shown)
}

impl Wire for PendingRequest {
    fn put(&self, o: &mut Out) {
        o.u32(self.rank).u32(self.thread).str(&self.function);
        o.u32(self.position).u64(self.time_ns).str(self.kind);
        o.put(&self.peer).put(&self.peer_world);
        o.put(&self.tag).put(&self.comm);
    }
    fn get(i: &mut In) -> PendingRequest {
        let (rank, thread, function) = (i.u32(), i.u32(), i.str());
        let (position, time_ns) = (i.u32(), i.u64());
        let kind = match i.str().as_str() {
            "send" => "send",
            "receive" => "receive",
            _ => "collective",
        };
        PendingRequest {
            rank,
            thread,
            function,
            position,
            time_ns,
            kind,
            peer: i.get(),
            peer_world: i.get(),
            tag: i.get(),
            comm: i.get(),
        }
    }
}
