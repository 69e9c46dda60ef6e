//! Rings of headers in shared memory, between the processes of one node.
//!
//! A header sent apart (`large_headers`) to a process of the same node needs no
//! MPI message: the sender writes it into a ring in the receiver's
//! segment, before it sends the data, and the receiver reads it when a
//! receive needs it. An MPI message per header cost the receiver about
//! 1,900 instructions (its matching, a posted receive, and a search of the
//! wildcard receives on every message that came); a ring costs a few
//! loads and stores. A full ring, a header too long for a slot, or a peer
//! on another node: the header goes by MPI (`large_headers::send`), numbered, so
//! that the receiver puts the two routes back in order.
//!
//! Each process makes one segment, `/pmtrace-<magic>-<world rank>`, with
//! one ring per process of its node (32 slots, fewer on a crowded node:
//! the node's rings take at most 16 MiB in all), and maps its peers' segments; the
//! names are unlinked as soon as every peer has mapped them, so that
//! nothing is left behind, whatever becomes of the job. The pages are
//! allocated up front (`posix_fallocate`): a full `/dev/shm` fails here,
//! and every rank then sends its headers by MPI, rather than a later write
//! faulting in the application.

use crate::ffi::{self, MPI_Comm};
use core::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

/// Most headers a ring holds.
const SLOTS: u64 = 32;
/// Fewest: with fewer, rings are not worth their memory.
const MIN_SLOTS: u64 = 4;
/// Shared memory the rings of one node may take in all (n² rings): 16 MiB
/// leaves room in a container's small `/dev/shm` for the MPI library and
/// the application.
const NODE_BUDGET: usize = 16 << 20;
/// A cache line: slots are whole lines.
const LINE: usize = 64;
/// Longest header sent through a ring (vector clocks of a large world go
/// by MPI).
const MAX_SLOT: usize = 512;
/// Most processes per node with rings (each process holds one ring per
/// process of its node).
const MAX_PROCS: usize = 256;
const NONE: u32 = u32::MAX;

pub struct Node {
    /// By world rank: its index on this node, or NONE.
    index: Box<[u32]>,
    /// Each node process's segment, by node index.
    segments: Box<[*mut u8]>,
    me: usize,
    /// Bytes of a header, of a slot, of a ring; slots in a ring.
    len: usize,
    slot: usize,
    ring: usize,
    slots: u64,
    /// By node index: the next slot this process writes in that process's
    /// ring, and the next it reads in its own ring from that process.
    /// Kept here, not in shared memory: each is one process's alone.
    tails: Box<[AtomicU64]>,
    heads: Box<[AtomicU64]>,
}
// SAFETY: the segments are mapped for the life of the process and only
// reached through the slots' atomic first words: one producer per ring
// (under `large_headers`'s send lock), one consumer (under its inbox lock).
unsafe impl Send for Node {}
unsafe impl Sync for Node {}

impl Node {
    /// Slot `n` of the ring in `receiver`'s segment that `sender` writes.
    /// A slot's first word is the header's number (never 0) once written,
    /// 0 once read: the producer and the consumer each touch only the slot
    /// (one cache line for a Lamport header), no shared head or tail.
    fn slot(&self, receiver: usize, sender: usize, n: u64) -> Slot {
        // SAFETY: both indices are of this node; the segment holds one
        // ring of `slots` slots per node process.
        Slot(unsafe {
            self.segments[receiver].add(sender * self.ring + (n % self.slots) as usize * self.slot)
        })
    }

    /// Whether every process of the world is on this node.
    pub fn has_all(&self) -> bool {
        self.index.iter().all(|&i| i != NONE)
    }

    fn local(&self, world: usize) -> Option<usize> {
        self.index
            .get(world)
            .filter(|&&i| i != NONE)
            .map(|&i| i as usize)
    }

    /// Writes header `number` (not 0), of `len` bytes, for world rank `to`
    /// through its ring: false (nothing written) if `to` is not of this
    /// node, the ring is full or the header too long. `write` fills the
    /// header after its number, which is published last.
    pub fn send(&self, to: usize, number: u64, len: usize, write: impl FnOnce(&mut [u8])) -> bool {
        let Some(j) = self.local(to).filter(|_| len == self.len) else {
            return false;
        };
        let tail = self.tails[j].load(Relaxed);
        let slot = self.slot(j, self.me, tail);
        if slot.word().load(Acquire) != 0 {
            return false;
        }
        // SAFETY: the slot is free (its word 0), and the producer's alone
        // until its word is set.
        write(unsafe { core::slice::from_raw_parts_mut(slot.0.add(8), len - 8) });
        slot.word().store(number, Release);
        self.tails[j].store(tail + 1, Relaxed);
        true
    }

    /// The next header from world rank `from`, if it came and `accept`
    /// says yes to it: what `accept` said and the header in its slot,
    /// valid until `release`.
    pub fn take_next<T>(
        &self,
        from: usize,
        accept: impl FnOnce(&[u8]) -> Option<T>,
    ) -> Option<(T, &[u8])> {
        let j = self.local(from)?;
        let slot = self.slot(self.me, j, self.heads[j].load(Relaxed));
        if slot.word().load(Acquire) == 0 {
            return None;
        }
        // SAFETY: published by the producer, the consumer's until released.
        let body = unsafe { core::slice::from_raw_parts(slot.0, self.len) };
        accept(body).map(|t| (t, body))
    }

    /// Frees the slot `take_next` gave.
    pub fn release(&self, from: usize) {
        let Some(j) = self.local(from) else { return };
        let head = self.heads[j].load(Relaxed);
        self.slot(self.me, j, head).word().store(0, Release);
        self.heads[j].store(head + 1, Relaxed);
    }

    /// Hands `take` every header that world rank `from` wrote to this
    /// process, oldest first; false if there was none.
    pub fn drain(&self, from: usize, mut take: impl FnMut(&[u8])) -> bool {
        let mut came = false;
        while let Some(((), body)) = self.take_next(from, |_| Some(())) {
            take(body);
            self.release(from);
            came = true;
        }
        came
    }
}

#[derive(Clone, Copy)]
struct Slot(*mut u8);

impl Slot {
    fn word(&self) -> &AtomicU64 {
        // SAFETY: an aligned u64 at the slot's start (slots are whole
        // lines), zero-initialised, shared by the processes that map it.
        unsafe { &*(self.0 as *const AtomicU64) }
    }
}

/// Slots per ring for `n` processes on the node and slots of `slot`
/// bytes: as many as the node's budget allows, at most SLOTS.
fn slots_for(n: usize, slot: usize) -> u64 {
    (NODE_BUDGET / (n * n * slot).max(1)).min(SLOTS as usize) as u64
}

fn name(magic: u64, world: usize) -> std::ffi::CString {
    std::ffi::CString::new(format!("/pmtrace-{magic:016x}-{world}")).unwrap_or_default()
}

/// Maps `len` bytes of an open shared-memory object.
fn map(fd: c_int, len: usize) -> Option<*mut u8> {
    // SAFETY: a shared mapping of an object of at least `len` bytes.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p as *mut u8)
}

/// At init, on every rank of `chan` (a duplicate of the world): the rings
/// of this node, or None on every rank if any rank could not make or map
/// them. `len` is a header's length in bytes.
pub fn open(chan: MPI_Comm, rank: usize, size: usize, magic: u64, len: usize) -> Option<Node> {
    let slot = len.div_ceil(LINE) * LINE;
    if slot > MAX_SLOT {
        // The same on every rank: no collective is skipped by some only.
        return None;
    }
    let c = ffi::consts();
    let mut node_comm = core::mem::MaybeUninit::<MPI_Comm>::uninit();
    // SAFETY: a collective split of our own communicator.
    if unsafe {
        ffi::PMPI_Comm_split_type(
            chan,
            c.comm_type_shared,
            rank as c_int,
            c.info_null,
            node_comm.as_mut_ptr(),
        )
    } != 0
    {
        return agree(chan, false, None);
    }
    // SAFETY: set by the successful split.
    let mut node_comm = unsafe { node_comm.assume_init() };
    let (mut n, mut me) = (0 as c_int, 0 as c_int);
    let mut members = Vec::new();
    // SAFETY: queries and an allgather of one int on the node communicator.
    let ok = unsafe {
        ffi::PMPI_Comm_size(node_comm, &mut n) == 0
            && ffi::PMPI_Comm_rank(node_comm, &mut me) == 0
            && n > 0
            && {
                members.resize(n as usize, 0 as c_int);
                let mine = rank as c_int;
                ffi::PMPI_Allgather(
                    &mine as *const c_int as *const c_void,
                    1,
                    ffi::RSMPI_INT32_T,
                    members.as_mut_ptr() as *mut c_void,
                    1,
                    ffi::RSMPI_INT32_T,
                    node_comm,
                ) == 0
            }
    };
    let n = n as usize;
    // The same on every process of the node: n and the header's length.
    let slots = slots_for(n, slot);
    let ring = slots as usize * slot;
    let bytes = n * ring;
    let mut ok = ok && n <= MAX_PROCS && slots >= MIN_SLOTS;
    // Our segment: made, its pages allocated, mapped.
    let own = name(magic, rank);
    let mut segments: Vec<*mut u8> = vec![core::ptr::null_mut(); n];
    let mut created = false;
    if ok {
        // SAFETY: a new object of ours, sized and mapped, its fd closed.
        unsafe {
            let fd = libc::shm_open(
                own.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                0o600,
            );
            ok = fd >= 0;
            created = ok;
            if ok {
                ok = libc::posix_fallocate(fd, 0, bytes as libc::off_t) == 0;
                if let Some(p) = ok.then(|| map(fd, bytes)).flatten() {
                    segments[me as usize] = p;
                } else {
                    ok = false;
                }
                libc::close(fd);
            }
        }
    }
    // SAFETY: collectives on the node communicator.
    unsafe { ffi::PMPI_Barrier(node_comm) };
    if ok {
        for (i, &w) in members.iter().enumerate() {
            if i == me as usize {
                continue;
            }
            // SAFETY: a peer's object, made before the barrier; fd closed.
            unsafe {
                let fd = libc::shm_open(name(magic, w as usize).as_ptr(), libc::O_RDWR, 0);
                if fd < 0 {
                    ok = false;
                    break;
                }
                match map(fd, bytes) {
                    Some(p) => segments[i] = p,
                    None => ok = false,
                }
                libc::close(fd);
            }
            if !ok {
                break;
            }
        }
    }
    // SAFETY: as above; then every peer has mapped ours (or given up), and
    // the name goes.
    unsafe {
        ffi::PMPI_Barrier(node_comm);
        if created {
            libc::shm_unlink(own.as_ptr());
        }
        ffi::PMPI_Comm_free(&mut node_comm);
    }
    let mut index = vec![NONE; size].into_boxed_slice();
    for (i, &w) in members.iter().enumerate() {
        if let Some(x) = index.get_mut(w as usize) {
            *x = i as u32;
        }
    }
    let node = Node {
        index,
        segments: segments.into_boxed_slice(),
        me: me as usize,
        len,
        slot,
        ring,
        slots,
        tails: (0..n).map(|_| AtomicU64::new(0)).collect(),
        heads: (0..n).map(|_| AtomicU64::new(0)).collect(),
    };
    agree(chan, ok, Some(node))
}

/// The rings if every rank of `chan` has its own (`ok`); else the
/// mappings made go back.
fn agree(chan: MPI_Comm, ok: bool, node: Option<Node>) -> Option<Node> {
    let mine = c_int::from(ok && node.is_some());
    let mut all: c_int = 0;
    // SAFETY: an allreduce of one int over the channel.
    let rc = unsafe {
        ffi::PMPI_Allreduce(
            &mine as *const c_int as *const c_void,
            &mut all as *mut c_int as *mut c_void,
            1,
            ffi::RSMPI_INT32_T,
            ffi::consts().op_min,
            chan,
        )
    };
    if rc == 0 && all == 1 {
        return node;
    }
    if let Some(node) = node {
        let bytes = node.segments.len() * node.ring;
        for &p in node.segments.iter().filter(|p| !p.is_null()) {
            // SAFETY: our mappings of `bytes`, used by nobody yet (the
            // peers that mapped ours drop theirs alike).
            unsafe { libc::munmap(p as *mut c_void, bytes) };
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two processes of one node, their segments on the heap: `of(p)` is
    /// process p's view (the same memory, p as `me`).
    struct Two {
        memory: Vec<Vec<u64>>,
        len: usize,
    }

    impl Two {
        fn new(len: usize) -> Two {
            let slot = len.div_ceil(LINE) * LINE;
            let words = 2 * SLOTS as usize * slot / 8;
            Two {
                memory: vec![vec![0u64; words]; 2],
                len,
            }
        }

        fn of(&mut self, me: usize) -> Node {
            let slot = self.len.div_ceil(LINE) * LINE;
            Node {
                index: vec![0, 1, NONE].into_boxed_slice(),
                segments: self
                    .memory
                    .iter_mut()
                    .map(|m| m.as_mut_ptr() as *mut u8)
                    .collect(),
                me,
                len: self.len,
                slot,
                ring: SLOTS as usize * slot,
                slots: SLOTS,
                tails: (0..2).map(|_| AtomicU64::new(0)).collect(),
                heads: (0..2).map(|_| AtomicU64::new(0)).collect(),
            }
        }
    }

    fn drained(node: &Node, from: usize) -> Vec<(u64, u8)> {
        let mut got = Vec::new();
        node.drain(from, |b| {
            got.push((u64::from_ne_bytes(b[..8].try_into().unwrap()), b[8]))
        });
        got
    }

    #[test]
    fn headers_arrive_in_order_and_a_full_ring_refuses_more() {
        let mut two = Two::new(64);
        let (sender, receiver) = (two.of(0), two.of(1));
        for n in 1..=SLOTS {
            assert!(sender.send(1, n, 64, |b| b[0] = n as u8), "slot {n}");
        }
        assert!(!sender.send(1, SLOTS + 1, 64, |_| panic!("written to a full ring")));
        let got = drained(&receiver, 0);
        assert_eq!(got.len(), SLOTS as usize);
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, &(n, b))| n == i as u64 + 1 && b == n as u8));
        assert!(drained(&receiver, 0).is_empty(), "a slot read twice");
        // Room again, and the ring wraps.
        assert!(sender.send(1, SLOTS + 1, 64, |b| b[0] = 7));
        assert_eq!(drained(&receiver, 0), vec![(SLOTS + 1, 7)]);
    }

    #[test]
    fn a_crowded_node_gets_shorter_rings_within_the_budget() {
        assert_eq!(slots_for(2, 64), 32);
        assert_eq!(slots_for(64, 64), 32);
        assert_eq!(slots_for(128, 64), 16);
        assert_eq!(slots_for(256, 64), 4);
        // Vector clocks at 56 ranks: 512-byte slots.
        assert_eq!(slots_for(56, 512), 10);
        assert!(slots_for(512, 64) < MIN_SLOTS);
    }

    #[test]
    fn only_processes_of_the_node_with_headers_that_fit_a_slot() {
        let mut two = Two::new(64);
        let sender = two.of(0);
        assert!(!sender.send(2, 1, 64, |_| panic!("rank 2 is on another node")));
        assert!(!sender.send(1, 1, 96, |_| panic!("a header longer than a slot")));
        assert!(!sender.has_all());
    }

    #[test]
    fn take_next_reads_in_place_and_release_frees_the_slot() {
        let mut two = Two::new(64);
        let (sender, receiver) = (two.of(0), two.of(1));
        assert!(
            receiver.take_next(0, |_| Some(())).is_none(),
            "nothing sent yet"
        );
        assert!(sender.send(1, 1, 64, |b| b[0] = 5));
        assert!(sender.send(1, 2, 64, |b| b[0] = 6));
        // Declined: the slot stays for the next look.
        assert!(receiver.take_next(0, |_| None::<()>).is_none());
        let (t, body) = receiver.take_next(0, |b| Some(b[8])).unwrap();
        assert_eq!((t, body.len()), (5, 64));
        receiver.release(0);
        assert_eq!(drained(&receiver, 0), vec![(2, 6)]);
    }
}
