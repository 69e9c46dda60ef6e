//! What pmtrace knows about each live request and matched-probe message:
//! the operation id its issuing record got, and whether completing it
//! yields a receive status.
//!
//! Request handles are reused by MPI as soon as an operation completes, so
//! entries are keyed by handle value and dropped at completion (persistent
//! requests stay until `MPI_Request_free`, with a new instance id per
//! `MPI_Start`). The table is sharded so threads completing different
//! requests rarely meet on a lock.
//!
//! Beside the table, each thread keeps one operation of its own out of it
//! (`Kept`): the nonblocking send or receive it posted last on the fast
//! path, when its place was free. The thread that posted it completes it
//! from there, with no hash and no lock, as the usual pattern does (post,
//! then wait). Anything else that needs the operation (another thread's
//! completion, `MPI_Cancel`, the live view) moves it into the table first:
//! every lookup that misses the table looks in the kept places.

use crate::ffi::{self, MPI_Comm};
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
use parking_lot::{Mutex, MutexGuard};
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
///
/// Each shard is an open-addressed table (linear probing, deletion by
/// shifting back, so no tombstones), under its own lock: an insert or a
/// completion is one lock, one hash and a probe or two, and allocates
/// nothing but when a shard grows (doubling, at half full).
pub struct Requests {
    shards: [Mutex<Open>; SHARDS],
}

/// One shard's table. `ages` 0 marks a free entry; the others number the
/// shard's inserts, so that the oldest of several operations under one
/// handle is known.
struct Open {
    keys: Vec<u64>,
    ages: Vec<u64>,
    ops: Vec<Op>,
    len: usize,
    next_age: u64,
}

/// Entries a shard starts with (at its first insert).
const FIRST_CAPACITY: usize = 64;

impl Open {
    const fn new() -> Open {
        Open {
            keys: Vec::new(),
            ages: Vec::new(),
            ops: Vec::new(),
            len: 0,
            next_age: 1,
        }
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.keys.len().wrapping_sub(1)
    }

    /// Entry `i`'s age (0: free). `i` is masked, so within the table:
    /// the three vectors always have the same, power-of-two, length.
    #[inline(always)]
    fn age(&self, i: usize) -> u64 {
        debug_assert!(i < self.ages.len());
        // SAFETY: every index is masked by `mask()`, below the length.
        unsafe { *self.ages.get_unchecked(i) }
    }

    /// Entry `i`'s key (as `age`).
    #[inline(always)]
    fn key(&self, i: usize) -> u64 {
        debug_assert!(i < self.keys.len());
        // SAFETY: as in `age`.
        unsafe { *self.keys.get_unchecked(i) }
    }

    /// Where `key`'s probe starts (the hash's bits below the shard's).
    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        (hash(key) >> 32) as usize & self.mask()
    }

    #[inline(always)]
    fn insert(&mut self, key: u64, op: Op) {
        if (self.len + 1) * 2 > self.keys.len() {
            self.grow();
        }
        let age = self.next_age;
        self.next_age += 1;
        self.place(key, age, op);
        self.len += 1;
    }

    #[inline(always)]
    fn place(&mut self, key: u64, age: u64, op: Op) {
        let mask = self.mask();
        let mut i = self.home(key);
        while self.age(i) != 0 {
            i = (i + 1) & mask;
        }
        self.keys[i] = key;
        self.ages[i] = age;
        self.ops[i] = op;
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let capacity = (self.keys.len() * 2).max(FIRST_CAPACITY);
        let keys = core::mem::replace(&mut self.keys, vec![0; capacity]);
        let ages = core::mem::replace(&mut self.ages, vec![0; capacity]);
        let ops = core::mem::replace(&mut self.ops, vec![EMPTY_OP; capacity]);
        for ((key, age), op) in keys.into_iter().zip(ages).zip(ops) {
            if age != 0 {
                self.place(key, age, op);
            }
        }
    }

    /// The entry of the operation behind `key`: the one stored at `slot`
    /// if several share the handle, else the oldest.
    #[inline(always)]
    fn find(&self, key: u64, slot: usize) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mask = self.mask();
        let mut i = self.home(key);
        let mut found: Option<usize> = None;
        while self.age(i) != 0 {
            if self.key(i) == key {
                match found {
                    None => found = Some(i),
                    Some(f) => {
                        // Several under one handle (rare): the oldest of
                        // those stored at `slot`, else the oldest.
                        let (at_i, at_f) = (self.ops[i].slot == slot, self.ops[f].slot == slot);
                        if (at_i && !at_f) || (at_i == at_f && self.ages[i] < self.ages[f]) {
                            found = Some(i);
                        }
                    }
                }
            }
            i = (i + 1) & mask;
        }
        found
    }

    /// Frees entry `i`, shifting back the entries after it in the run
    /// that would no longer be found from their homes.
    #[inline(always)]
    fn remove_at(&mut self, mut i: usize) {
        let mask = self.mask();
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            if self.age(j) == 0 {
                break;
            }
            let home = self.home(self.key(j));
            // Entry j may move to the hole at i unless its home lies
            // cyclically in (i, j].
            let stays = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !stays {
                self.keys[i] = self.keys[j];
                self.ages[i] = self.ages[j];
                self.ops[i] = self.ops[j];
                i = j;
            }
        }
        self.ages[i] = 0;
        self.len -= 1;
    }
}

/// What free entries of `Open::ops` hold.
const EMPTY_OP: Op = Op {
    id: 0,
    kind: OpKind::Coll { seq: 0 },
    persistent: false,
    instance: None,
    cancelled: false,
    slot: 0,
    pb: 0,
    comm: 0,
};

#[inline(always)]
fn hash(key: u64) -> u64 {
    key.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Requests {
    pub const fn new() -> Self {
        Requests {
            shards: [const { Mutex::new(Open::new()) }; SHARDS],
        }
    }

    #[inline(always)]
    fn shard(&self, key: u64) -> &Mutex<Open> {
        &self.shards[(hash(key) >> 60) as usize % SHARDS]
    }

    #[inline(always)]
    pub fn insert(&self, key: u64, op: Op) {
        self.shard(key).lock().insert(key, op);
    }

    /// The shard of `key`, locked, and the entry of the operation behind
    /// it (as `Open::find`), one kept out of the table moved in first.
    #[inline(always)]
    fn lookup(&self, key: u64, slot: usize) -> Option<(MutexGuard<'_, Open>, usize)> {
        let shard = self.shard(key).lock();
        if let Some(i) = shard.find(key, slot) {
            return Some((shard, i));
        }
        drop(shard);
        self.lookup_kept(key, slot)
    }

    /// `lookup` after a miss: moves the operations of `key` that threads
    /// keep into the table, then looks again.
    #[cold]
    #[inline(never)]
    fn lookup_kept(&self, key: u64, slot: usize) -> Option<(MutexGuard<'_, Open>, usize)> {
        let mut shard = self.shard(key).lock();
        let mut moved = false;
        for kept in KEPT.lock().iter() {
            kept.take_key(key, |op| {
                shard.insert(key, op);
                moved = true;
            });
        }
        if !moved {
            return None;
        }
        let i = shard.find(key, slot)?;
        Some((shard, i))
    }

    /// Runs `f` on the operation behind `key` (the one stored at `slot` if
    /// several share the handle, else the oldest); `remove` drops it after.
    #[inline(always)]
    pub fn with_op<R>(
        &self,
        key: u64,
        slot: usize,
        remove: bool,
        f: impl FnOnce(&mut Op) -> R,
    ) -> Option<R> {
        let (mut shard, i) = self.lookup(key, slot)?;
        let r = f(&mut shard.ops[i]);
        if remove {
            shard.remove_at(i);
        }
        Some(r)
    }

    /// The operation behind `key` (as `with_op`), dropped from the table
    /// when `gone` says so: one lookup for a completion.
    #[inline(always)]
    pub fn take_if(&self, key: u64, slot: usize, gone: impl FnOnce(&Op) -> bool) -> Option<Op> {
        let (mut shard, i) = self.lookup(key, slot)?;
        let op = shard.ops[i];
        if gone(&op) {
            shard.remove_at(i);
        }
        Some(op)
    }

    /// The completion's fast path: the operation behind `key` (as
    /// `with_op`) out of the table if it is a send, not persistent and
    /// never cancelled; any other stays for the general path.
    #[inline(always)]
    pub fn take_send(&self, key: u64, slot: usize) -> TakeSend {
        let Some((mut shard, i)) = self.lookup(key, slot) else {
            return TakeSend::Missing;
        };
        let op = &shard.ops[i];
        if !matches!(op.kind, OpKind::Send { .. }) || op.persistent || op.cancelled {
            return TakeSend::Other;
        }
        let (id, pb) = (op.id, op.pb);
        shard.remove_at(i);
        TakeSend::Sent { id, pb }
    }

    pub fn get(&self, key: u64, slot: usize) -> Option<Op> {
        self.with_op(key, slot, false, |op| *op)
    }

    pub fn remove(&self, key: u64, slot: usize) -> Option<Op> {
        self.with_op(key, slot, true, |op| *op)
    }
}

impl Default for Requests {
    fn default() -> Self {
        Self::new()
    }
}

/// How many operations a thread keeps out of the table: a window of
/// nonblocking calls on an array of requests has one place per element
/// (`Kept::at`).
pub const KEPT_PLACES: usize = 16;

/// A thread's places for the operations it keeps out of the table (see
/// the module docs), each on its own cache line. An operation's place is
/// chosen by the address of its request's handle, so the elements of a
/// request array take consecutive places. Never freed: a thread that ends
/// gives its places to the next (`Kept::own`).
pub struct Kept([Place; KEPT_PLACES]);

/// One kept operation: its fields in atomics, `state` saying whose they
/// are. Only the owner fills it (from `EMPTY`); whoever takes it claims it
/// first (`FULL` to `TAKING`), reads it, then frees it (`EMPTY`).
#[repr(align(64))]
struct Place {
    state: AtomicU8,
    key: AtomicU64,
    slot: AtomicUsize,
    id: AtomicU64,
    pb: AtomicUsize,
    /// Peer (destination or source) and tag, as `ProbeMiss::of` packs them.
    from: AtomicU64,
    /// A receive's posted bytes; `SEND` for a send.
    posted: AtomicU64,
    comm: AtomicU32,
}

const EMPTY: u8 = 0;
const FULL: u8 = 1;
const TAKING: u8 = 2;
/// `Place::posted` of a send.
const SEND: u64 = u64::MAX;

/// Every thread's kept places, for lookups that miss the table.
static KEPT: Mutex<Vec<&'static Kept>> = Mutex::new(Vec::new());
/// Places of threads that ended, for new threads.
static KEPT_SPARE: Mutex<Vec<&'static Kept>> = Mutex::new(Vec::new());

impl Kept {
    /// Places for the calling thread: those a thread left, or new ones.
    #[cold]
    pub fn own() -> &'static Kept {
        if let Some(k) = KEPT_SPARE.lock().pop() {
            return k;
        }
        let k: &'static Kept = Box::leak(Box::new(Kept(
            [const {
                Place {
                    state: AtomicU8::new(EMPTY),
                    key: AtomicU64::new(0),
                    slot: AtomicUsize::new(0),
                    id: AtomicU64::new(0),
                    pb: AtomicUsize::new(0),
                    from: AtomicU64::new(0),
                    posted: AtomicU64::new(0),
                    comm: AtomicU32::new(0),
                }
            }; KEPT_PLACES],
        )));
        KEPT.lock().push(k);
        k
    }

    /// The owner's thread ended: the places go to the next thread (an
    /// operation in one stays there until someone completes it).
    pub fn leave(&'static self) {
        KEPT_SPARE.lock().push(self);
    }

    /// The place of an operation whose handle is stored at `slot`.
    #[inline(always)]
    fn at(&self, slot: usize) -> &Place {
        &self.0[(slot / size_of::<ffi::MPI_Request>()) % KEPT_PLACES]
    }

    /// Keeps a nonblocking send or receive (`Op::kind` `Send`, or `Recv`
    /// with its posted bytes), posted now and not persistent; false when
    /// its place is taken (the caller enters it in the table). Owner only.
    #[inline(always)]
    pub fn put(&self, key: u64, op: &Op) -> bool {
        self.at(op.slot).put(key, op)
    }

    /// The kept operation, out of its place, if it is the one behind
    /// `key` stored at `slot`.
    #[inline(always)]
    pub fn take(&self, key: u64, slot: usize) -> Option<Op> {
        self.at(slot).take(key, slot)
    }

    /// The kept operations behind `key`, whatever their slots, out of
    /// their places, each handed to `f`.
    fn take_key(&self, key: u64, mut f: impl FnMut(Op)) {
        for place in &self.0 {
            if let Some(op) = place.take_key(key) {
                f(op);
            }
        }
    }
}

impl Place {
    #[inline(always)]
    fn put(&self, key: u64, op: &Op) -> bool {
        // Acquire: whoever emptied the place has read it.
        if self.state.load(Acquire) != EMPTY {
            return false;
        }
        let (peer, tag, posted) = match op.kind {
            OpKind::Send { dst } => (dst, 0, SEND),
            OpKind::Recv {
                src,
                tag,
                posted: Some(p),
            } if p != SEND => (src, tag, p),
            _ => return false,
        };
        self.key.store(key, Relaxed);
        self.slot.store(op.slot, Relaxed);
        self.id.store(op.id, Relaxed);
        self.pb.store(op.pb, Relaxed);
        self.from.store(
            (u64::from(peer as u32) << 32) | u64::from(tag as u32),
            Relaxed,
        );
        self.posted.store(posted, Relaxed);
        self.comm.store(op.comm, Relaxed);
        // Release: the fields before the state, for a thread that claims it.
        self.state.store(FULL, Release);
        true
    }

    #[inline(always)]
    fn take(&self, key: u64, slot: usize) -> Option<Op> {
        if self.state.load(Relaxed) != FULL
            || self.key.load(Relaxed) != key
            || self.slot.load(Relaxed) != slot
        {
            return None;
        }
        self.claim(key)
    }

    /// The kept operation behind `key`, out of this place, whatever its
    /// slot. Another thread's claim lasts a few instructions: it is waited
    /// out, so that a claim for another handle never hides this one.
    fn take_key(&self, key: u64) -> Option<Op> {
        loop {
            match self.state.load(Acquire) {
                TAKING => core::hint::spin_loop(),
                FULL if self.key.load(Relaxed) == key => {
                    if let Some(op) = self.claim(key) {
                        return Some(op);
                    }
                }
                _ => return None,
            }
        }
    }

    #[inline(always)]
    fn claim(&self, key: u64) -> Option<Op> {
        // Acquire: the owner's fields, stored before it set FULL.
        if self
            .state
            .compare_exchange(FULL, TAKING, Acquire, Relaxed)
            .is_err()
        {
            return None;
        }
        if self.key.load(Relaxed) != key {
            self.state.store(FULL, Release);
            return None;
        }
        let from = self.from.load(Relaxed);
        let (peer, tag) = ((from >> 32) as u32 as i32, from as u32 as i32);
        let posted = self.posted.load(Relaxed);
        let kind = if posted == SEND {
            OpKind::Send { dst: peer }
        } else {
            OpKind::Recv {
                src: peer,
                tag,
                posted: Some(posted),
            }
        };
        let op = Op {
            id: self.id.load(Relaxed),
            kind,
            persistent: false,
            instance: None,
            cancelled: false,
            slot: self.slot.load(Relaxed),
            pb: self.pb.load(Relaxed),
            comm: self.comm.load(Relaxed),
        };
        // Release: read before the owner may fill the place again.
        self.state.store(EMPTY, Release);
        Some(op)
    }
}

/// A thread's kept places (`ThreadState::kept`), had at its first kept
/// operation and given back when the thread ends.
pub struct KeptPlace(Option<&'static Kept>);

impl KeptPlace {
    pub const fn none() -> KeptPlace {
        KeptPlace(None)
    }

    #[inline(always)]
    pub fn get(&mut self) -> &'static Kept {
        match self.0 {
            Some(k) => k,
            None => self.0.insert(Kept::own()),
        }
    }

    #[inline(always)]
    pub fn peek(&self) -> Option<&'static Kept> {
        self.0
    }
}

impl Drop for KeptPlace {
    fn drop(&mut self) {
        if let Some(k) = self.0 {
            k.leave();
        }
    }
}

/// What `Requests::take_send` found.
pub enum TakeSend {
    /// A send, taken out: its id and piggyback slot.
    Sent { id: u64, pb: usize },
    /// Another operation, left in.
    Other,
    /// None.
    Missing,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, VecDeque};

    fn op(id: u64, slot: usize) -> Op {
        Op {
            id,
            slot,
            ..EMPTY_OP
        }
    }

    #[test]
    fn operations_under_one_handle_are_told_apart_by_slot_then_age() {
        let t = Requests::new();
        t.insert(5, op(1, 100));
        t.insert(5, op(2, 200));
        t.insert(5, op(3, 300));
        t.insert(5, op(4, 200));
        assert_eq!(
            t.get(5, 200).map(|o| o.id),
            Some(2),
            "the oldest at the slot"
        );
        assert_eq!(t.remove(5, 200).map(|o| o.id), Some(2));
        assert_eq!(t.remove(5, 200).map(|o| o.id), Some(4));
        assert_eq!(t.get(5, 999).map(|o| o.id), Some(1), "the oldest");
        assert_eq!(t.remove(5, 999).map(|o| o.id), Some(1));
        assert_eq!(t.take_if(5, 300, |_| false).map(|o| o.id), Some(3));
        assert_eq!(t.take_if(5, 300, |_| true).map(|o| o.id), Some(3));
        assert_eq!(t.get(5, 0), None);
        assert_eq!(t.get(6, 0), None);
    }

    /// A kept operation is taken by its owner from its place, or moved
    /// into the table by any lookup that misses there, once.
    #[test]
    fn a_kept_operation_is_found_by_its_owner_or_moved_into_the_table() {
        const K: u64 = 0x7e57_0000_0001;
        let k = Kept::own();
        let send = Op {
            kind: OpKind::Send { dst: 3 },
            ..op(7, 100)
        };
        assert!(k.put(K, &send));
        assert!(!k.put(K, &op(8, 100)), "one operation a place");
        assert_eq!(k.take(K, 999), None, "another slot");
        assert_eq!(k.take(K + 1, 100), None, "another handle");
        assert_eq!(k.take(K, 100), Some(send));
        assert_eq!(k.take(K, 100), None, "taken once");

        let recv = Op {
            kind: OpKind::Recv {
                src: -1,
                tag: 9,
                posted: Some(64),
            },
            comm: 4,
            pb: 0x1000,
            ..op(9, 200)
        };
        assert!(k.put(K, &recv));
        let t = Requests::new();
        let moved = std::thread::spawn(move || t.get(K, 0).map(|o| (o, t)))
            .join()
            .unwrap();
        let (got, t) = moved.expect("moved into the table");
        assert_eq!(got, recv);
        assert_eq!(k.take(K, 200), None, "no longer kept");
        assert_eq!(t.remove(K, 200), Some(recv));
        assert_eq!(t.get(K, 0), None);
        // Only sends and receives with posted bytes are kept.
        let coll = Op {
            kind: OpKind::Coll { seq: 1 },
            ..op(10, 300)
        };
        assert!(!k.put(K, &coll));
        k.leave();
    }

    /// The elements of a request array take places of their own, as many
    /// as there are; the next element's place is the first's.
    #[test]
    fn a_window_of_requests_is_kept_one_place_each() {
        let k = Kept::own();
        let base = 0x10_0000usize;
        let at = |i: usize| base + i * size_of::<ffi::MPI_Request>();
        let send = |i: usize| Op {
            kind: OpKind::Send { dst: 1 },
            ..op(i as u64, at(i))
        };
        for i in 0..KEPT_PLACES {
            assert!(k.put(0x100 + i as u64, &send(i)), "element {i}");
        }
        assert!(
            !k.put(0x500, &send(KEPT_PLACES)),
            "the first element's place"
        );
        // Taken in any order, each from its own place.
        for i in (0..KEPT_PLACES).rev() {
            assert_eq!(k.take(0x100 + i as u64, at(i)), Some(send(i)));
        }
        assert!(k.put(0x500, &send(KEPT_PLACES)), "free again");
        // A lookup by handle alone finds it whatever its place.
        let mut found = Vec::new();
        k.take_key(0x500, |o| found.push(o));
        assert_eq!(found, vec![send(KEPT_PLACES)]);
        k.leave();
    }

    /// Inserts and removals of handles that look like pointers (many in
    /// one shard, runs that wrap around the table's end, growth from the
    /// first capacity to thousands of entries) against a plain map.
    #[test]
    fn the_table_agrees_with_a_map_through_growth_and_removals() {
        let t = Requests::new();
        let mut model: BTreeMap<u64, VecDeque<u64>> = BTreeMap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = 1;
        let mut live = 0usize;
        for round in 0..300_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = ((x >> 16) % 4000 + 1) * 64;
            // Grow to about 6,000 live operations, then shrink.
            let insert = if round < 150_000 {
                x % 5 < 3
            } else {
                x % 5 < 1
            };
            if insert {
                t.insert(key, op(next, 0));
                model.entry(key).or_default().push_back(next);
                next += 1;
                live += 1;
            } else {
                let want = model.get_mut(&key).and_then(|q| q.pop_front());
                assert_eq!(t.remove(key, 0).map(|o| o.id), want, "round {round}");
                live -= usize::from(want.is_some());
            }
        }
        assert!(live > 0);
        for (key, ids) in model {
            for id in ids {
                assert_eq!(t.remove(key, 0).map(|o| o.id), Some(id));
            }
            assert_eq!(t.get(key, 0), None);
        }
        assert!(t.shards.iter().all(|s| s.lock().len == 0));
    }
}
