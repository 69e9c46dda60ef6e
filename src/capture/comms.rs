//! Communicators: each gets a rank-local index (used in records) and a
//! global id that is the same on every member, so that an analysis can map
//! ranks in any communicator to world ranks.
//!
//! **Global ids.** World is 0; MPI_COMM_SELF of world rank r is
//! `r << 32 | 1`. Other ids are found in one of three ways:
//! - *Derived*, with no communication, for an intracommunicator that every
//!   member of its parent makes (dup, split, create, cart, graph, merge)
//!   and for `MPI_Comm_idup`: a hash of the parent's id, the number of such
//!   constructions (or idups) on the parent before this one, and the world
//!   rank of the new communicator's rank 0. All members agree on each,
//!   because collectives on a communicator are ordered (MPI-4.1 §6.4) and a
//!   rank left out of a split counts the call too; the world rank of rank 0
//!   tells apart the disjoint communicators one split makes. So no
//!   collective the application did not ask for runs in its constructors,
//!   and none where `MPI_Comm_idup` completes, where one could deadlock.
//! - *Agreed*, by one small allreduce on the new communicator before the
//!   application has its handle: the maximum over its members of
//!   `world_rank << 32 | n` (n counts this rank's constructions from 2).
//!   For an intercommunicator two allreduces give both groups the maximum
//!   over both (the first yields the other group's maximum, the second one's
//!   own). This is the way for an intercommunicator, for a communicator that
//!   only some of the parent's members make (`MPI_Comm_create_group`) or
//!   that has no parent (made from groups), and for a parent whose own id
//!   is local.
//! - *Local*, with the top bit set, for communicators pmtrace never saw
//!   created or whose other side may be untraced.
//!
//! Derived ids have bit 62 set and are unique but for a hash collision
//! (about 2^-62 a pair); their low 32 bits are never 1, which names a
//! `MPI_COMM_SELF`.
//!
//! **Lookups** on the hot path are lock-free: an open-addressed table keyed
//! by the handle's value. Handles are reused after `MPI_Comm_free`, so a
//! free empties the entry and a new communicator with the same handle
//! replaces it.

use crate::ffi::{self, MPI_Comm};
use crate::recorder::Recorder;
use crate::thread::{Thread, ThreadState};
use parking_lot::Mutex;
use pmtrace_format::record::{self, CODE_DEF_COMM};
use pmtrace_format::varint::Sink;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

pub const WORLD_GID: u64 = 0;
pub const LOCAL_GID_BIT: u64 = 1 << 63;
const DERIVED_GID_BIT: u64 = 1 << 62;

pub use crate::thread::CommInfo;

struct Slot {
    key: AtomicU64,
    info: AtomicPtr<CommInfo>,
}

const SLOTS: usize = 1 << 13;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    key: AtomicU64::new(0),
    info: AtomicPtr::new(core::ptr::null_mut()),
};
static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
static INSERT: Mutex<()> = Mutex::new(());
static NEXT_INDEX: AtomicU32 = AtomicU32::new(0);
static CONSTRUCTED: AtomicU64 = AtomicU64::new(2);
static WORLD_RANK: AtomicU32 = AtomicU32::new(0);
/// Bumped whenever a handle is freed, invalidating per-thread caches.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// Communicators that did not fit in the table (counted, never expected).
pub static OVERFLOW: AtomicU64 = AtomicU64::new(0);
/// Bumped after every change of the table, for `each`'s callers to know
/// when what they saw is stale.
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// The table's change count (see `CHANGES`): read it before `each`.
pub fn changes() -> u64 {
    CHANGES.load(Ordering::Acquire)
}

#[inline(always)]
fn key_of(comm: MPI_Comm) -> u64 {
    match ffi::handle_key(comm) {
        0 => u64::MAX,
        k => k,
    }
}

#[inline(always)]
fn home(key: u64) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - 13)) as usize
}

/// The communicator behind a handle, if pmtrace knows it.
#[inline(always)]
pub fn lookup(comm: MPI_Comm) -> Option<&'static CommInfo> {
    lookup_key(key_of(comm))
}

/// The communicator behind a handle given by its `ffi::handle_key`.
pub fn lookup_by_handle_key(k: u64) -> Option<&'static CommInfo> {
    lookup_key(if k == 0 { u64::MAX } else { k })
}

/// Every communicator the table holds now (a handle freed since it was
/// made is not among them), once each.
pub fn each(mut f: impl FnMut(&'static CommInfo)) {
    let mut seen = std::collections::HashSet::new();
    for slot in &TABLE {
        if slot.key.load(Ordering::Acquire) == 0 {
            continue;
        }
        let p = slot.info.load(Ordering::Acquire);
        // SAFETY: infos are leaked boxes, never freed.
        if let Some(info) = unsafe { p.as_ref() } {
            if seen.insert(p as usize) {
                f(info);
            }
        }
    }
}

#[inline(always)]
fn lookup_key(key: u64) -> Option<&'static CommInfo> {
    let mut i = home(key);
    for _ in 0..SLOTS {
        let slot = &TABLE[i];
        let k = slot.key.load(Ordering::Acquire);
        if k == key {
            let p = slot.info.load(Ordering::Acquire);
            // SAFETY: infos are leaked boxes, never freed.
            return unsafe { p.as_ref() };
        }
        if k == 0 {
            return None;
        }
        i = (i + 1) & (SLOTS - 1);
    }
    None
}

fn insert(comm: MPI_Comm, info: &'static CommInfo) {
    insert_slot(comm, info);
    CHANGES.fetch_add(1, Ordering::Release);
}

fn insert_slot(comm: MPI_Comm, info: &'static CommInfo) {
    let _lock = INSERT.lock();
    let key = key_of(comm);
    let mut i = home(key);
    let mut reusable = None;
    for _ in 0..SLOTS {
        let slot = &TABLE[i];
        let k = slot.key.load(Ordering::Acquire);
        if k == key {
            slot.info
                .store(info as *const _ as *mut _, Ordering::Release);
            return;
        }
        if k != 0 && slot.info.load(Ordering::Acquire).is_null() && reusable.is_none() {
            reusable = Some(i);
        }
        if k == 0 {
            let at = reusable.unwrap_or(i);
            TABLE[at]
                .info
                .store(info as *const _ as *mut _, Ordering::Release);
            TABLE[at].key.store(key, Ordering::Release);
            return;
        }
        i = (i + 1) & (SLOTS - 1);
    }
    match reusable {
        Some(at) => {
            TABLE[at]
                .info
                .store(info as *const _ as *mut _, Ordering::Release);
            TABLE[at].key.store(key, Ordering::Release);
        }
        None => {
            OVERFLOW.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Takes a handle about to be freed out of the table.
pub fn release(comm: MPI_Comm) -> Option<&'static CommInfo> {
    let info = lookup(comm)?;
    forget(comm);
    Some(info)
}

/// Puts back a handle whose free failed.
pub fn restore(comm: MPI_Comm, info: &'static CommInfo) {
    insert(comm, info);
}

/// Forgets a freed handle.
fn forget(comm: MPI_Comm) {
    let _lock = INSERT.lock();
    // Per-thread caches of the last communicator are now stale.
    GENERATION.fetch_add(1, Ordering::Relaxed);
    ffi::EPOCH.fetch_add(1, Ordering::Relaxed);
    let key = key_of(comm);
    let mut i = home(key);
    for _ in 0..SLOTS {
        let slot = &TABLE[i];
        let k = slot.key.load(Ordering::Acquire);
        if k == key {
            slot.info.store(core::ptr::null_mut(), Ordering::Release);
            CHANGES.fetch_add(1, Ordering::Release);
            return;
        }
        if k == 0 {
            return;
        }
        i = (i + 1) & (SLOTS - 1);
    }
}

struct Shape {
    size: u32,
    rank: u32,
    inter: bool,
    remote_size: u32,
}

fn shape(comm: MPI_Comm) -> Shape {
    let (mut size, mut rank, mut inter, mut remote) = (0, 0, 0, 0);
    // SAFETY: local queries on a valid communicator handle.
    unsafe {
        ffi::PMPI_Comm_size(comm, &mut size);
        ffi::PMPI_Comm_rank(comm, &mut rank);
        ffi::PMPI_Comm_test_inter(comm, &mut inter);
        if inter != 0 {
            ffi::PMPI_Comm_remote_size(comm, &mut remote);
        }
    }
    Shape {
        size: size as u32,
        rank: rank as u32,
        inter: inter != 0,
        remote_size: remote as u32,
    }
}

/// World ranks of the communicator's (local) group, in rank order.
fn members(comm: MPI_Comm, size: u32) -> Vec<u32> {
    let n = size as usize;
    let ranks: Vec<i32> = (0..n as i32).collect();
    let mut world = vec![0i32; n];
    // SAFETY: group handles are created and freed here; arrays hold `n` ints.
    unsafe {
        let mut g = core::mem::zeroed();
        let mut wg = core::mem::zeroed();
        ffi::PMPI_Comm_group(comm, &mut g);
        ffi::PMPI_Comm_group(ffi::RSMPI_COMM_WORLD, &mut wg);
        ffi::PMPI_Group_translate_ranks(g, n as i32, ranks.as_ptr(), wg, world.as_mut_ptr());
        ffi::PMPI_Group_free(&mut g);
        ffi::PMPI_Group_free(&mut wg);
    }
    world.into_iter().map(|r| r.max(0) as u32).collect()
}

/// Registers `comm` with `gid` and writes its definition record.
fn define(comm: MPI_Comm, gid: u64, rec: &mut Recorder, t: u64) -> &'static CommInfo {
    let s = shape(comm);
    let index = NEXT_INDEX.fetch_add(1, Ordering::Relaxed);
    let info: &'static CommInfo = Box::leak(Box::new(CommInfo {
        index,
        gid,
        size: s.size,
        rank: s.rank,
        inter: s.inter,
        remote_size: s.remote_size,
        seq: AtomicU64::new(0),
        idups: AtomicU64::new(0),
        constructs: AtomicU64::new(0),
        world_ranks: std::sync::OnceLock::new(),
    }));
    insert(comm, info);
    let list = if s.rank == 0 && gid != WORLD_GID {
        members(comm, s.size)
    } else {
        Vec::new()
    };
    write_def(rec, t, info, &list);
    info
}

const MEMBER_BATCH: usize = 512;

fn write_def(rec: &mut Recorder, t: u64, info: &CommInfo, members: &[u32]) {
    let mut batches = members.chunks(MEMBER_BATCH);
    let first = batches.next().unwrap_or(&[]);
    let Some(mut w) = rec.begin_special(CODE_DEF_COMM, t, t, 96 + first.len() * 10) else {
        return;
    };
    w.put_u(u64::from(info.index));
    w.put_u(info.gid);
    w.put_u(info.inter as u64);
    w.put_u(u64::from(info.size));
    w.put_u(u64::from(info.rank));
    w.put_u(u64::from(info.remote_size));
    w.put_u(first.len() as u64);
    let mut prev = -1i64;
    record::put_members(&mut w, &mut prev, first);
    w.commit_part();
    for batch in batches {
        let Some(mut w) = rec.begin_continuation(16 + batch.len() * 10) else {
            return;
        };
        w.put_u(batch.len() as u64);
        record::put_members(&mut w, &mut prev, batch);
        w.commit_part();
    }
}

/// Defines MPI_COMM_WORLD and MPI_COMM_SELF at init.
pub fn init(world_rank: u32, rec: &mut Recorder, t: u64) {
    WORLD_RANK.store(world_rank, Ordering::Relaxed);
    // SAFETY: reads initialised constants of mpi-sys's shim.
    let (world, selfc) = unsafe { (ffi::RSMPI_COMM_WORLD, ffi::RSMPI_COMM_SELF) };
    define(world, WORLD_GID, rec, t);
    define(selfc, (u64::from(world_rank) << 32) | 1, rec, t);
}

/// The communicator of this thread's previous call, if `comm` is it
/// (`resolve`'s fast path, without defining anything).
#[inline(always)]
pub fn cached(comm: MPI_Comm, state: &ThreadState) -> Option<&'static CommInfo> {
    let (k, info) = state.last_comm?;
    (k == key_of(comm) && GENERATION.load(Ordering::Relaxed) == state.comm_generation)
        .then_some(info)
}

/// The communicator behind a handle, defining it on first sight if it was
/// made behind pmtrace's back (e.g. `MPI_Comm_get_parent`).
#[inline(always)]
pub fn resolve(comm: MPI_Comm, thread: &mut Thread, t: u64) -> &'static CommInfo {
    if let Some(info) = cached(comm, &thread.state) {
        return info;
    }
    let key = key_of(comm);
    let info = match lookup(comm) {
        Some(info) => info,
        None => define_local(comm, &mut thread.recorder, t),
    };
    thread.state.last_comm = Some((key, info));
    thread.state.comm_generation = GENERATION.load(Ordering::Relaxed);
    info
}

#[cold]
fn define_local(comm: MPI_Comm, rec: &mut Recorder, t: u64) -> &'static CommInfo {
    let n = CONSTRUCTED.fetch_add(1, Ordering::Relaxed);
    let gid = LOCAL_GID_BIT | (u64::from(WORLD_RANK.load(Ordering::Relaxed)) << 32) | n;
    define(comm, gid, rec, t)
}

/// Stands for a communicator handle that a failed call passed (it may not
/// be a valid handle, so pmtrace does not ask MPI about it).
pub fn unknown(rec: &mut Recorder, t: u64) -> &'static CommInfo {
    static UNKNOWN: std::sync::OnceLock<&'static CommInfo> = std::sync::OnceLock::new();
    if let Some(info) = UNKNOWN.get() {
        return info;
    }
    let _lock = INSERT.lock();
    if let Some(info) = UNKNOWN.get() {
        return info;
    }
    let info: &'static CommInfo = Box::leak(Box::new(CommInfo::empty(
        NEXT_INDEX.fetch_add(1, Ordering::Relaxed),
        LOCAL_GID_BIT | (u64::from(WORLD_RANK.load(Ordering::Relaxed)) << 32),
    )));
    write_def(rec, t, info, &[]);
    let _ = UNKNOWN.set(info);
    info
}

/// Defines a communicator made by the dynamic-process calls (spawn,
/// accept, connect, join). Its other side may be a program pmtrace does not
/// trace, so no collective is run on it: its id is local to this rank.
pub fn define_dynamic(comm: MPI_Comm, rec: &mut Recorder, t: u64) -> &'static CommInfo {
    define_local(comm, rec, t)
}

/// Defines a communicator that every member of `parent` made in its
/// `nth` collective construction on it (see the module docs).
pub fn define_collective(
    comm: MPI_Comm,
    parent: &CommInfo,
    nth: u64,
    rec: &mut Recorder,
    t: u64,
) -> &'static CommInfo {
    let mut inter = 0;
    // SAFETY: a local query on the communicator MPI just returned.
    unsafe { ffi::PMPI_Comm_test_inter(comm, &mut inter) };
    // The same on every member of the new communicator, so that all of
    // them take the allreduce or none does.
    let first = match (inter, parent.gid & LOCAL_GID_BIT) {
        (0, 0) => world_rank_of_first(comm),
        _ => None,
    };
    match first {
        Some(w) => define(comm, derived(parent.gid, nth, u64::from(w) + 1), rec, t),
        None => define_agreed(comm, rec, t),
    }
}

/// The world rank of the communicator's rank 0, if it is in this world.
fn world_rank_of_first(comm: MPI_Comm) -> Option<u32> {
    let first = 0i32;
    let mut world = -1i32;
    // SAFETY: group handles are created and freed here; one rank each way.
    unsafe {
        let mut g = core::mem::zeroed();
        let mut wg = core::mem::zeroed();
        ffi::PMPI_Comm_group(comm, &mut g);
        ffi::PMPI_Comm_group(ffi::RSMPI_COMM_WORLD, &mut wg);
        ffi::PMPI_Group_translate_ranks(g, 1, &first, wg, &mut world);
        ffi::PMPI_Group_free(&mut g);
        ffi::PMPI_Group_free(&mut wg);
    }
    u32::try_from(world).ok()
}

/// A derived id (see the module docs) from the parent's id and what tells
/// this child from the parent's others: `salt` 0 for an idup, the world
/// rank of rank 0 plus 1 for a collective construction.
fn derived(parent_gid: u64, nth: u64, salt: u64) -> u64 {
    let mut h = parent_gid ^ 0x9E37_79B9_7F4A_7C15;
    h = (h ^ nth.wrapping_mul(0xBF58_476D_1CE4_E5B9)).wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^= h >> 31;
    if salt != 0 {
        h = (h ^ salt.wrapping_mul(0xD6E8_FEB8_6659_FD93)).wrapping_mul(0x94D0_49BB_1331_11EB);
        h ^= h >> 29;
    }
    let mut gid = DERIVED_GID_BIT | (h & (DERIVED_GID_BIT - 1));
    if gid & 0xffff_ffff == 1 {
        gid ^= 2;
    }
    gid
}

/// Defines a communicator a blocking constructor just returned: agrees on
/// its global id with the other members (see the module docs).
pub fn define_agreed(comm: MPI_Comm, rec: &mut Recorder, t: u64) -> &'static CommInfo {
    let c = ffi::consts();
    let n = CONSTRUCTED.fetch_add(1, Ordering::Relaxed);
    let cand = (u64::from(WORLD_RANK.load(Ordering::Relaxed)) << 32) | n;
    let mut inter = 0;
    let mut r1 = 0u64;
    // SAFETY: tool-internal collectives on the new communicator, which every
    // member is constructing right now; buffers are one u64 each.
    let gid = unsafe {
        ffi::PMPI_Comm_test_inter(comm, &mut inter);
        let p = |x: &u64| x as *const u64 as *const core::ffi::c_void;
        let q = |x: &mut u64| x as *mut u64 as *mut core::ffi::c_void;
        if ffi::PMPI_Allreduce(p(&cand), q(&mut r1), 1, c.uint64, c.op_max, comm) != 0 {
            return define_local(comm, rec, t);
        }
        if inter != 0 {
            let mut r2 = 0u64;
            ffi::PMPI_Allreduce(p(&r1), q(&mut r2), 1, c.uint64, c.op_max, comm);
            r1.max(r2)
        } else {
            r1
        }
    };
    define(comm, gid, rec, t)
}

/// Defines the communicator an `MPI_Comm_idup` on `parent` produced.
pub fn define_idup(
    comm: MPI_Comm,
    parent_gid: u64,
    nth: u64,
    rec: &mut Recorder,
    t: u64,
) -> &'static CommInfo {
    define(comm, derived(parent_gid, nth, 0), rec, t)
}
