//! What pmtrace knows about each live request and matched-probe message:
//! the operation id its issuing record got, and whether completing it
//! yields a receive status.
//!
//! Request handles are reused by MPI as soon as an operation completes, so
//! entries are keyed by handle value and dropped at completion (persistent
//! requests stay until `MPI_Request_free`, with a new instance id per
//! `MPI_Start`). The table is sharded so threads completing different
//! requests rarely meet on a lock.

use crate::ffi::{self, MPI_Comm};
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A send to `dst` (for the live view).
    Send { dst: i32 },
    /// A receive, with what was posted (source, tag, bytes); `None` bytes
    /// (and i32::MIN source/tag) when the status is written out in full.
    Recv {
        src: i32,
        tag: i32,
        posted: Option<u64>,
    },
    /// A receive whose status MPI does not fill (`piggyback::isendrecv_blind`):
    /// recorded as what was posted.
    RecvBlind { src: i32, tag: i32, posted: u64 },
    /// A nonblocking or persistent collective, the `seq`th on its
    /// communicator (its low 32 bits: for the live view).
    Coll { seq: u32 },
    /// An `MPI_Comm_idup`: at completion, define the new communicator.
    Idup {
        newcomm: usize,
        parent_gid: u64,
        nth: u64,
        /// Its number among the parent's collectives (low 32 bits).
        seq: u32,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    pub id: u64,
    pub kind: OpKind,
    /// Persistent: `id` names the request, `instance` the started operation.
    pub persistent: bool,
    pub instance: Option<u64>,
    /// `MPI_Cancel` was called on it.
    pub cancelled: bool,
    /// Address of the variable MPI stored the handle in, to tell apart live
    /// operations that share one handle value (below).
    pub slot: usize,
    /// The operation's piggyback slot (`piggyback_slots::Slot`), 0 if none.
    pub pb: usize,
    /// For the live view, the communicator completing it waits on: its
    /// index + 1 (`CommInfo::index`), 0 for none; the peer or the
    /// collective's number is the kind's. (A u32, so that it fits where
    /// `Op` had padding.)
    pub comm: u32,
}

/// Multiplicative hashing of handle values (already unique integers).
#[derive(Default)]
pub struct HandleHasher(u64);

impl Hasher for HandleHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Map<V> = HashMap<u64, V, BuildHasherDefault<HandleHasher>>;

const SHARDS: usize = 16;

pub struct Table<V> {
    shards: [Mutex<Option<Map<V>>>; SHARDS],
}

impl<V> Table<V> {
    pub const fn new() -> Self {
        Table {
            shards: [const { Mutex::new(None) }; SHARDS],
        }
    }

    #[inline(always)]
    fn shard(&self, key: u64) -> &Mutex<Option<Map<V>>> {
        &self.shards[(key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % SHARDS]
    }
}

/// A table value that can stand for "no entry": the table keeps no
/// empty values.
pub trait Vacant: Default {
    fn is_vacant(&self) -> bool;
}

impl<A: smallvec::Array> Vacant for SmallVec<A> {
    #[inline(always)]
    fn is_vacant(&self) -> bool {
        self.is_empty()
    }
}

impl<V: Vacant> Table<V> {
    /// Runs `f` on the entry for `key` (empty if absent); an entry left
    /// empty is not kept. One probe of the map either way.
    #[inline]
    pub fn with<R>(&self, key: u64, f: impl FnOnce(&mut V) -> R) -> R {
        let mut shard = self.shard(key).lock();
        let map = shard.get_or_insert_with(Map::default);
        match map.entry(key) {
            Entry::Occupied(mut e) => {
                let r = f(e.get_mut());
                if e.get().is_vacant() {
                    e.remove();
                }
                r
            }
            Entry::Vacant(e) => {
                let mut v = V::default();
                let r = f(&mut v);
                if !v.is_vacant() {
                    e.insert(v);
                }
                r
            }
        }
    }
}

impl<V: Copy> Table<V> {
    pub fn insert(&self, key: u64, v: V) {
        self.shard(key)
            .lock()
            .get_or_insert_with(Map::default)
            .insert(key, v);
    }

    pub fn remove(&self, key: u64) -> Option<V> {
        self.shard(key).lock().as_mut().and_then(|m| m.remove(&key))
    }
}

impl<V> Default for Table<V> {
    fn default() -> Self {
        Self::new()
    }
}

pub static REQUESTS: Requests = Requests::new();

/// Live operations by handle value. Usually one per handle, but not
/// always: Open MPI returns one static "empty" request for every operation
/// that completed at once (an eager `MPI_Isend` sent inline, any operation
/// on MPI_PROC_NULL), so several live operations can share a handle. Those
/// are told apart by the address the handle was stored at, then by age.
pub struct Requests {
    table: Table<SmallVec<[Op; 1]>>,
}

impl Requests {
    pub const fn new() -> Self {
        Requests {
            table: Table::new(),
        }
    }

    pub fn insert(&self, key: u64, op: Op) {
        self.table.with(key, |ops| ops.push(op));
    }

    /// Runs `f` on the operation behind `key` (the one stored at `slot` if
    /// several share the handle, else the oldest); `remove` drops it after.
    pub fn with_op<R>(
        &self,
        key: u64,
        slot: usize,
        remove: bool,
        f: impl FnOnce(&mut Op) -> R,
    ) -> Option<R> {
        self.table.with(key, |ops| {
            let i = if ops.len() > 1 {
                ops.iter().position(|o| o.slot == slot).unwrap_or(0)
            } else {
                0
            };
            let op = ops.get_mut(i)?;
            let r = f(op);
            if remove {
                drop_at(ops, i);
            }
            Some(r)
        })
    }

    /// The operation behind `key` (as `with_op`), dropped from the table
    /// when `gone` says so: one lookup for a completion.
    pub fn take_if(&self, key: u64, slot: usize, gone: impl FnOnce(&Op) -> bool) -> Option<Op> {
        self.table.with(key, |ops| {
            let i = if ops.len() > 1 {
                ops.iter().position(|o| o.slot == slot).unwrap_or(0)
            } else {
                0
            };
            let op = *ops.get(i)?;
            if gone(&op) {
                drop_at(ops, i);
            }
            Some(op)
        })
    }

    pub fn get(&self, key: u64, slot: usize) -> Option<Op> {
        self.with_op(key, slot, false, |op| *op)
    }

    pub fn remove(&self, key: u64, slot: usize) -> Option<Op> {
        self.with_op(key, slot, true, |op| *op)
    }
}

/// Drops the i-th operation of a handle, keeping the others in age order;
/// the last one (the only one, nearly always) without a move.
#[inline(always)]
fn drop_at(ops: &mut SmallVec<[Op; 1]>, i: usize) {
    if i + 1 == ops.len() {
        ops.pop();
    } else {
        ops.remove(i);
    }
}

impl Default for Requests {
    fn default() -> Self {
        Self::new()
    }
}

/// Matched-probe messages: message handle -> (op id, source, tag, bytes).
pub static MESSAGES: Table<(u64, i32, i32, u64)> = Table::new();

#[inline(always)]
pub fn key<T: Copy>(h: T) -> u64 {
    ffi::handle_key(h)
}

/// The communicator an `MPI_Comm_idup` stored at `newcomm`.
pub fn comm_of_idup(newcomm: usize) -> MPI_Comm {
    // SAFETY: `newcomm` is the address the application passed to
    // MPI_Comm_idup, which MPI requires to stay valid until completion.
    unsafe { *(newcomm as *const MPI_Comm) }
}

// `Op::comm` fits where `Op` had padding: the table's entries stay as
// large as before the live view.
const _: () = assert!(size_of::<Op>() == 80);
