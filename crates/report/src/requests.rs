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
use pmtrace_trace::Payload;
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

/// How many pending requests a report lists.
pub const PENDING_SHOWN: usize = 100;

/// What made a request: the call, and what it named.
#[derive(Debug, Clone, Copy)]
struct Made {
    op: u64,
    at: EventRef,
    func: u32,
    t: u64,
    kind: &'static str,
    peer: Option<i32>,
    tag: Option<i32>,
    comm: Option<u32>,
    /// The persistent request an instance belongs to.
    init: Option<u64>,
}

/// Every request of `trace` never completed nor freed, by rank, thread and
/// position: how many, and the first [`PENDING_SHOWN`].
pub fn pending(trace: &Trace) -> (u64, Vec<PendingRequest>) {
    let per_rank: Vec<(u64, Vec<PendingRequest>)> = trace
        .ranks
        .par_iter()
        .map(|rank| pending_of(trace, rank))
        .collect();
    let total = per_rank.iter().map(|p| p.0).sum();
    let first = per_rank
        .into_iter()
        .flat_map(|p| p.1)
        .take(PENDING_SHOWN)
        .collect();
    (total, first)
}

fn pending_of(trace: &Trace, rank: &Rank) -> (u64, Vec<PendingRequest>) {
    use Kind::*;
    let makes = |k: Kind| {
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
    };
    let mut made: OpTable<Made> = OpTable::new(rank.events() as usize);
    // Persistent requests: what their instances name.
    let mut inits: OpTable<Made> = OpTable::new(0);
    let mut freed: OpTable<()> = OpTable::new(0);
    for (at, call) in rank.payload_calls_of(makes) {
        let base = Made {
            op: 0,
            at,
            func: call.func,
            t: call.t_start,
            kind: "send",
            peer: None,
            tag: None,
            comm: None,
            init: None,
        };
        let kind = rank.kind(call.func);
        let (op, m) = match call.payload {
            Payload::Send {
                peer,
                tag,
                comm,
                op: Some(op),
                ..
            } => (
                op,
                Made {
                    peer: Some(peer),
                    tag: Some(tag),
                    comm: Some(comm),
                    ..base
                },
            ),
            Payload::Recv {
                src,
                tag,
                comm,
                op: Some(op),
                ..
            } => (
                op,
                Made {
                    kind: "receive",
                    peer: Some(src),
                    tag: Some(tag),
                    comm: Some(comm),
                    ..base
                },
            ),
            // Its send half completes in the call; the receive half is the request.
            Payload::Isendrecv {
                src,
                rtag,
                comm,
                op: Some(op),
                ..
            } => (
                op,
                Made {
                    kind: "receive",
                    peer: Some(src),
                    tag: Some(rtag),
                    comm: Some(comm),
                    ..base
                },
            ),
            Payload::Mrecv { op: Some(op), .. } => (
                op,
                Made {
                    kind: "receive",
                    ..base
                },
            ),
            Payload::Coll {
                comm, op: Some(op), ..
            } => (
                op,
                Made {
                    kind: "collective",
                    comm: Some(comm),
                    ..base
                },
            ),
            Payload::Start { started } => {
                for &(init, instance) in started.iter() {
                    let named = init.and_then(|i| inits.get(&i).copied());
                    let m = match named {
                        Some(n) => Made { init, ..n },
                        None => Made {
                            kind: "send",
                            init,
                            ..base
                        },
                    };
                    made.insert(
                        instance,
                        Made {
                            op: instance,
                            at,
                            func: call.func,
                            t: call.t_start,
                            ..m
                        },
                    );
                }
                continue;
            }
            Payload::OpRef { op: Some(op), .. } if matches!(kind, RequestFree | Freed) => {
                freed.insert(op, ());
                continue;
            }
            _ => continue,
        };
        let m = Made { op, ..m };
        if matches!(kind, SendInit | PsendInit | RecvInit | PrecvInit | CollInit) {
            inits.insert(op, m);
        } else {
            made.insert(op, m);
        }
    }
    let completed = rank.completions();
    let mut left: Vec<Made> = made
        .values()
        .filter(|m| {
            !completed.contains_key(&m.op)
                && !freed.contains_key(&m.op)
                && !m.init.is_some_and(|i| freed.contains_key(&i))
        })
        .copied()
        .collect();
    left.sort_unstable_by_key(|m| (m.at.thread, m.at.index, m.op));
    let n = left.len() as u64;
    let c = trace.constants();
    let shown = left
        .into_iter()
        .take(PENDING_SHOWN)
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
