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
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Send,
    /// A receive, with what was posted (source, tag, bytes); `None` bytes
    /// (and i32::MIN source/tag) when the status is written out in full.
    Recv { src: i32, tag: i32, posted: Option<u64> },
    Coll,
    /// An `MPI_Comm_idup`: at completion, define the new communicator.
    Idup { newcomm: usize, parent_gid: u64, nth: u64 },
}

#[derive(Debug, Clone, Copy)]
pub struct Op {
    pub id: u64,
    pub kind: OpKind,
    /// Persistent: `id` names the request, `instance` the started operation.
    pub persistent: bool,
    pub instance: Option<u64>,
    /// `MPI_Cancel` was called on it.
    pub cancelled: bool,
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

impl<V: Copy> Table<V> {
    pub const fn new() -> Self {
        Table { shards: [const { Mutex::new(None) }; SHARDS] }
    }

    #[inline(always)]
    fn shard(&self, key: u64) -> &Mutex<Option<Map<V>>> {
        &self.shards[(key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % SHARDS]
    }

    pub fn insert(&self, key: u64, v: V) {
        self.shard(key).lock().get_or_insert_with(Map::default).insert(key, v);
    }

    pub fn get(&self, key: u64) -> Option<V> {
        self.shard(key).lock().as_ref().and_then(|m| m.get(&key).copied())
    }

    pub fn remove(&self, key: u64) -> Option<V> {
        self.shard(key).lock().as_mut().and_then(|m| m.remove(&key))
    }

    pub fn update<R>(&self, key: u64, f: impl FnOnce(&mut V) -> R) -> Option<R> {
        self.shard(key).lock().as_mut().and_then(|m| m.get_mut(&key).map(f))
    }
}

impl<V: Copy> Default for Table<V> {
    fn default() -> Self {
        Self::new()
    }
}

pub static REQUESTS: Table<Op> = Table::new();
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
