//! Hooks of collectives, blocking, nonblocking and persistent: each
//! records its communicator, root, sequence number on the communicator,
//! and the bytes this rank sends and receives, worked out per shape from
//! the arguments that are significant on this rank.

use crate::comms::CommInfo;
use crate::ffi::{self, MPI_Comm, MPI_Datatype, MPI_Request, TypeSizes};
use crate::guard::Held;
use crate::hooks_call::{comm_info, guarded, register, Call};
use crate::recorder::{fixed_head, Writer};
use crate::requests::OpKind;
use crate::thread::CollMemo;
use core::ffi::{c_int, c_void};
use core::sync::atomic::Ordering::Relaxed;
use pmtrace_format::record::root_code;
use pmtrace_format::varint::{Packed, Sink};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Barrier,
    Bcast,
    Reduce,
    Allreduce,
    Scan,
    Exscan,
    ReduceScatter,
    ReduceScatterBlock,
    Gather,
    Gatherv,
    Scatter,
    Scatterv,
    Allgather,
    Allgatherv,
    Alltoall,
    Alltoallv,
    Alltoallw,
    NeighborAllgather,
    NeighborAllgatherv,
    NeighborAlltoall,
    NeighborAlltoallv,
    NeighborAlltoallw,
}

impl Shape {
    fn rooted(self) -> bool {
        matches!(
            self,
            Shape::Bcast
                | Shape::Reduce
                | Shape::Gather
                | Shape::Gatherv
                | Shape::Scatter
                | Shape::Scatterv
        )
    }
}

/// A collective's arguments by role; absent roles stay at their defaults.
pub struct CollArgs {
    pub sendbuf: *const c_void,
    pub recvbuf: *const c_void,
    pub count: i64,
    pub datatype: MPI_Datatype,
    pub sendcount: i64,
    pub sendtype: MPI_Datatype,
    pub recvcount: i64,
    pub recvtype: MPI_Datatype,
    pub sendcounts: Counts,
    pub recvcounts: Counts,
    pub sendtypes: *const MPI_Datatype,
    pub recvtypes: *const MPI_Datatype,
    pub root: c_int,
    pub comm: MPI_Comm,
}

impl CollArgs {
    #[inline(always)]
    pub fn new(comm: MPI_Comm) -> CollArgs {
        // SAFETY: reads an initialised constant of mpi-sys's shim.
        let null = unsafe { ffi::RSMPI_DATATYPE_NULL };
        CollArgs {
            sendbuf: core::ptr::null(),
            recvbuf: core::ptr::null(),
            count: 0,
            datatype: null,
            sendcount: 0,
            sendtype: null,
            recvcount: 0,
            recvtype: null,
            sendcounts: Counts::Int(core::ptr::null()),
            recvcounts: Counts::Int(core::ptr::null()),
            sendtypes: core::ptr::null(),
            recvtypes: core::ptr::null(),
            root: 0,
            comm,
        }
    }
}

/// A collective's array of counts: `int` ones, or the `MPI_Count` ones of
/// the large-count (`_c`) functions.
#[derive(Clone, Copy)]
pub enum Counts {
    Int(*const c_int),
    #[cfg_attr(not(mpi4), allow(dead_code))]
    Large(*const ffi::MPI_Count),
}

impl Counts {
    fn is_null(self) -> bool {
        match self {
            Counts::Int(p) => p.is_null(),
            Counts::Large(p) => p.is_null(),
        }
    }

    /// The `i`-th count.
    ///
    /// # Safety
    /// The array is not null and has more than `i` entries.
    unsafe fn get(self, i: usize) -> i64 {
        // SAFETY: per the contract.
        unsafe {
            match self {
                Counts::Int(p) => i64::from(*p.add(i)),
                #[allow(clippy::unnecessary_cast)] // MPI_Count is i64 everywhere so far
                Counts::Large(p) => *p.add(i) as i64,
            }
        }
    }
}

/// Sum of `counts[..n]`, each times the size of its type.
fn sum_bytes(
    sizes: &mut TypeSizes,
    counts: Counts,
    n: usize,
    datatype: MPI_Datatype,
    types: *const MPI_Datatype,
) -> u64 {
    if counts.is_null() {
        return 0;
    }
    let mut total = 0u64;
    for i in 0..n {
        // SAFETY: MPI requires count (and type) arrays of the group's size
        // (or degree) for this rank's role; we read only those.
        let (c, t) = unsafe {
            (
                counts.get(i),
                if types.is_null() {
                    datatype
                } else {
                    *types.add(i)
                },
            )
        };
        total = total.saturating_add(sizes.bytes(c, t));
    }
    total
}

/// (in-degree, out-degree) of a communicator's topology.
fn degrees(comm: MPI_Comm, rank: u32) -> (usize, usize) {
    let mut status = 0;
    // SAFETY: local topology queries on a valid communicator.
    unsafe {
        ffi::PMPI_Topo_test(comm, &mut status);
        if status == ffi::RSMPI_CART {
            let mut nd = 0;
            ffi::PMPI_Cartdim_get(comm, &mut nd);
            (2 * nd as usize, 2 * nd as usize)
        } else if status == ffi::RSMPI_GRAPH {
            let mut n = 0;
            ffi::PMPI_Graph_neighbors_count(comm, rank as c_int, &mut n);
            (n as usize, n as usize)
        } else if status == ffi::RSMPI_DIST_GRAPH {
            let (mut i, mut o, mut w) = (0, 0, 0);
            ffi::PMPI_Dist_graph_neighbors_count(comm, &mut i, &mut o, &mut w);
            (i as usize, o as usize)
        } else {
            (0, 0)
        }
    }
}

/// Bytes this rank sends and receives in a collective.
fn coll_bytes(sizes: &mut TypeSizes, shape: Shape, a: &CollArgs, info: &CommInfo) -> (u64, u64) {
    macro_rules! b {
        ($n:expr, $t:expr) => {
            sizes.bytes($n, $t)
        };
    }
    let c = ffi::consts();
    let in_place = a.sendbuf as usize == c.in_place;
    let recv_in_place = a.recvbuf as usize == c.in_place;
    // Peers whose blocks a rank handles: the remote group on an intercommunicator.
    let peers = if info.inter {
        info.remote_size
    } else {
        info.size
    } as c_int;
    let peers_u = peers.max(0) as usize;
    // Arguments significant only at the root (or only at non-roots) are read
    // only there: elsewhere they may be garbage or null.
    macro_rules! data {
        () => {
            b!(a.count, a.datatype)
        };
    }
    // Rooted collectives on an intercommunicator: MPI_ROOT sends (or
    // gathers), MPI_PROC_NULL does nothing, the others are the leaves.
    enum Role {
        Root,
        Leaf,
        Idle,
    }
    let role = if info.inter {
        if a.root == c.root {
            Role::Root
        } else if a.root == c.proc_null {
            Role::Idle
        } else {
            Role::Leaf
        }
    } else if a.root == info.rank as c_int {
        Role::Root
    } else {
        Role::Leaf
    };
    match shape {
        Shape::Barrier => (0, 0),
        Shape::Bcast => match role {
            Role::Root => (data!(), 0),
            Role::Leaf => (0, data!()),
            Role::Idle => (0, 0),
        },
        Shape::Reduce => match role {
            Role::Root if info.inter => (0, data!()),
            Role::Root => (data!(), data!()),
            Role::Leaf => (data!(), 0),
            Role::Idle => (0, 0),
        },
        Shape::Allreduce | Shape::Scan | Shape::Exscan => (data!(), data!()),
        Shape::ReduceScatterBlock => (
            b!(a.recvcount, a.datatype) * info.size as u64,
            b!(a.recvcount, a.datatype),
        ),
        Shape::ReduceScatter => {
            let total = sum_bytes(
                sizes,
                a.recvcounts,
                info.size as usize,
                a.datatype,
                core::ptr::null(),
            );
            // SAFETY: recvcounts has one entry per rank of the group.
            let mine = if a.recvcounts.is_null() {
                0
            } else {
                b!(unsafe { a.recvcounts.get(info.rank as usize) }, a.datatype)
            };
            (total, mine)
        }
        Shape::Gather | Shape::Gatherv => {
            let gathered = |sizes: &mut TypeSizes| {
                if shape == Shape::Gather {
                    sizes.bytes(a.recvcount, a.recvtype) * peers_u as u64
                } else {
                    sum_bytes(sizes, a.recvcounts, peers_u, a.recvtype, core::ptr::null())
                }
            };
            match role {
                Role::Root if info.inter || in_place => (0, gathered(sizes)),
                Role::Root => (b!(a.sendcount, a.sendtype), gathered(sizes)),
                Role::Leaf => (b!(a.sendcount, a.sendtype), 0),
                Role::Idle => (0, 0),
            }
        }
        Shape::Scatter | Shape::Scatterv => {
            let scattered = |sizes: &mut TypeSizes| {
                if shape == Shape::Scatter {
                    sizes.bytes(a.sendcount, a.sendtype) * peers_u as u64
                } else {
                    sum_bytes(sizes, a.sendcounts, peers_u, a.sendtype, core::ptr::null())
                }
            };
            match role {
                Role::Root if info.inter || recv_in_place => (scattered(sizes), 0),
                Role::Root => (scattered(sizes), b!(a.recvcount, a.recvtype)),
                Role::Leaf => (0, b!(a.recvcount, a.recvtype)),
                Role::Idle => (0, 0),
            }
        }
        Shape::Allgather => {
            let block = b!(a.recvcount, a.recvtype);
            (
                if in_place {
                    block
                } else {
                    b!(a.sendcount, a.sendtype)
                },
                block * peers_u as u64,
            )
        }
        Shape::Allgatherv => {
            let total = sum_bytes(sizes, a.recvcounts, peers_u, a.recvtype, core::ptr::null());
            let sent = if in_place {
                // SAFETY: recvcounts has one entry per rank of the group.
                b!(unsafe { a.recvcounts.get(info.rank as usize) }, a.recvtype)
            } else {
                b!(a.sendcount, a.sendtype)
            };
            (sent, total)
        }
        Shape::Alltoall => {
            let r = b!(a.recvcount, a.recvtype) * peers_u as u64;
            (
                if in_place {
                    r
                } else {
                    b!(a.sendcount, a.sendtype) * peers_u as u64
                },
                r,
            )
        }
        Shape::Alltoallv | Shape::Alltoallw => {
            let per_peer = |t: *const MPI_Datatype| {
                if shape == Shape::Alltoallw {
                    t
                } else {
                    core::ptr::null()
                }
            };
            let r = sum_bytes(
                sizes,
                a.recvcounts,
                peers_u,
                a.recvtype,
                per_peer(a.recvtypes),
            );
            (
                if in_place {
                    r
                } else {
                    sum_bytes(
                        sizes,
                        a.sendcounts,
                        peers_u,
                        a.sendtype,
                        per_peer(a.sendtypes),
                    )
                },
                r,
            )
        }
        Shape::NeighborAllgather | Shape::NeighborAlltoall => {
            let (ins, outs) = degrees(a.comm, info.rank);
            // Allgather sends the same block to every out-neighbour,
            // alltoall one block each: the same bytes either way.
            (
                b!(a.sendcount, a.sendtype) * outs as u64,
                b!(a.recvcount, a.recvtype) * ins as u64,
            )
        }
        Shape::NeighborAllgatherv => {
            let (ins, outs) = degrees(a.comm, info.rank);
            (
                b!(a.sendcount, a.sendtype) * outs as u64,
                sum_bytes(sizes, a.recvcounts, ins, a.recvtype, core::ptr::null()),
            )
        }
        Shape::NeighborAlltoallv | Shape::NeighborAlltoallw => {
            let (ins, outs) = degrees(a.comm, info.rank);
            let per_peer = |t: *const MPI_Datatype| {
                if shape == Shape::NeighborAlltoallw {
                    t
                } else {
                    core::ptr::null()
                }
            };
            (
                sum_bytes(sizes, a.sendcounts, outs, a.sendtype, per_peer(a.sendtypes)),
                sum_bytes(sizes, a.recvcounts, ins, a.recvtype, per_peer(a.recvtypes)),
            )
        }
    }
}

impl Call<'_> {
    /// Bytes this rank sends and receives in a collective (none if it failed).
    #[inline(always)]
    pub fn coll_bytes(&self, shape: Shape, args: &CollArgs, info: &CommInfo) -> (u64, u64) {
        if !self.ok() {
            return (0, 0);
        }
        // The commonest shapes without a call.
        match shape {
            Shape::Barrier => (0, 0),
            Shape::Allreduce | Shape::Scan | Shape::Exscan => {
                let data = self.bytes(args.count, args.datatype);
                (data, data)
            }
            _ => coll_bytes(&mut self.thread().state.types, shape, args, info),
        }
    }
}

/// The sequence number of this rank's next collective on `info`. Counted
/// whether or not the record can be written, so that numbers stay aligned
/// across ranks. MPI orders collectives on one communicator, so no two
/// threads start one on it at once: a plain increment suffices.
#[inline(always)]
pub fn next_seq(info: &CommInfo) -> u64 {
    let seq = info.seq.load(core::sync::atomic::Ordering::Relaxed);
    info.seq
        .store(seq + 1, core::sync::atomic::Ordering::Relaxed);
    seq
}

#[inline(always)]
pub fn put_coll(
    r: &mut Writer,
    info: &CommInfo,
    seq: u64,
    root: Option<i32>,
    sent: u64,
    recvd: u64,
) {
    put_coll_fields(r, info.index, root, sent, recvd);
    r.put_coll_seq(info.index, seq);
}

/// A collective's payload but its sequence code: into a record, or into
/// the bytes a fixed record repeats (`CollMemo`).
#[inline(always)]
fn put_coll_fields<S: Sink>(out: &mut S, comm: u32, root: Option<i32>, sent: u64, recvd: u64) {
    out.put_u(u64::from(comm));
    out.put_u(root_code(root));
    out.put_u(sent);
    out.put_u(recvd);
}

/// A blocking collective. One of a shape whose payload depends on its
/// communicator, count, datatype and root alone (`memoised`) that repeats
/// the thread's last such collective is a fixed record: that payload's
/// bytes, then its sequence code, with no look at the datatype or the
/// communicator table (`Recorder::fixed_call`).
/// `args` builds the arguments (twice at most: only the slow path needs
/// them whole).
#[inline(always)]
pub fn coll(call: Call, shape: Shape, args: impl Fn() -> CollArgs) {
    if let Some(slot) = memo_slot(shape).filter(|_| call.ok()) {
        let args = args();
        let thread = call.thread();
        let m = thread.state.coll_memo[slot];
        if m.comm == ffi::handle_key(args.comm)
            && m.count == args.count
            && m.datatype == ffi::handle_key(args.datatype)
            && m.root == args.root
            && m.epoch == ffi::EPOCH.load(Relaxed)
        {
            let info = m.info;
            let head = fixed_head(call.func);
            let payload = (m.bytes, m.len);
            if let Some(mut w) =
                thread
                    .recorder
                    .fixed_call(head, (call.t0, call.t1), payload, call.lane())
            {
                w.put_coll_seq(info.index, next_seq(info));
                w.commit();
                return;
            }
        }
    }
    // Made here, on the general path only: nothing of the call is stored
    // on the fast path for its sake.
    let (guard, func, t0, t1, rc) = call.parts();
    coll_full(CollFull {
        guard,
        func,
        t0,
        t1,
        rc,
        shape,
        args: args(),
    });
}

/// `coll`'s call and arguments, for its general path.
struct CollFull<'g> {
    guard: Held<'g>,
    func: u32,
    t0: u64,
    t1: u64,
    rc: c_int,
    shape: Shape,
    args: CollArgs,
}

#[inline(never)]
fn coll_full(a: CollFull) {
    let call = Call::new(a.guard, a.func, a.t0, a.t1, a.rc);
    guarded(|| record_coll(&call, a.shape, &a.args, None))
}

/// Shapes whose bytes depend on the communicator, count, datatype and
/// root alone (see `coll_bytes`): each has its place among the thread's
/// kept collectives (`ThreadState::coll_memo`).
#[inline(always)]
fn memo_slot(shape: Shape) -> Option<usize> {
    match shape {
        Shape::Barrier => Some(0),
        Shape::Bcast => Some(1),
        Shape::Reduce => Some(2),
        Shape::Allreduce => Some(3),
        Shape::Scan => Some(4),
        Shape::Exscan => Some(5),
        _ => None,
    }
}

pub fn icoll(call: Call, shape: Shape, args: &CollArgs, request: *mut MPI_Request) {
    guarded(|| record_coll(&call, shape, args, Some((request, false))))
}

/// A persistent collective (`MPI_*_init`): its sequence number is taken
/// now (the init call is ordered as a collective); each `MPI_Start` of
/// the request is an instance of its own (see `start`).
#[cfg_attr(not(mpi4), allow(dead_code))]
pub fn pcoll(call: Call, shape: Shape, args: &CollArgs, request: *mut MPI_Request) {
    guarded(|| record_coll(&call, shape, args, Some((request, true))))
}

/// Records a collective; one that creates an operation (its request, and
/// whether it is persistent) gets the operation's id, under its handle.
#[inline(always)]
fn record_coll(
    call: &Call,
    shape: Shape,
    args: &CollArgs,
    request: Option<(*mut MPI_Request, bool)>,
) {
    let info = comm_info(call, args.comm);
    let seq = next_seq(info);
    let (sent, recvd) = call.coll_bytes(shape, args, info);
    let Some(mut r) = call.begin() else { return };
    let root = shape.rooted().then_some(args.root);
    put_coll(&mut r, info, seq, root, sent, recvd);
    if let Some((request, persistent)) = request.filter(|_| call.ok()) {
        let id = r.take_op();
        let kind = OpKind::Coll { seq: seq as u32 };
        register(request, id, kind, persistent, 0, info.index + 1);
    }
    r.commit();
    if let Some(slot) = memo_slot(shape).filter(|_| request.is_none() && call.ok()) {
        // The payload just written but its sequence code, for the next
        // such collective.
        let mut payload = Packed::default();
        put_coll_fields(&mut payload, info.index, root, sent, recvd);
        if payload.len <= 8 {
            call.thread().state.coll_memo[slot] = CollMemo {
                comm: ffi::handle_key(args.comm),
                epoch: ffi::EPOCH.load(Relaxed),
                info,
                datatype: ffi::handle_key(args.datatype),
                count: args.count,
                root: args.root,
                bytes: payload.bytes,
                len: payload.len,
            };
        }
    }
}
