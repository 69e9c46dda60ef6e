//! Headers sent apart from large messages.
//!
//! A message with a header in front is no longer contiguous, and a
//! non-contiguous message loses the MPI library's single-copy path: the
//! data is then pipelined through shared buffers by both processes, which
//! on a loaded node costs up to 3.6x of the bandwidth (docs/notes.md,
//! "Large messages"). So a message of more than [`limit`] bytes goes
//! *exactly as the application described it*: same buffer, count,
//! datatype, communicator, tag and mode, matched and progressed by MPI as
//! without pmtrace. Its header goes before it: to a process of the same
//! node through a ring in shared memory (`header_rings`), to any other as a small
//! eager `MPI_Isend` on pmtrace's duplicate of the world, to the
//! destination's world rank. Headers are numbered per sender and receiver,
//! so that the receiver merges the two routes in send order.
//!
//! **The limit.** About 4 KiB (`COPY_MAX` and two headers). With every
//! process of the world on one node and the rings up, 1 KiB
//! (`NODE_LIMIT`): a header through a ring costs about what an inline one
//! does, and a large receive saves only the first limit-and-a-header bytes
//! of its buffer (all an inline message can overwrite past its data).
//!
//! **Which messages.** Every sender applies one rule: user data of more
//! than `limit` bytes goes apart, anything else inline. A receive sees
//! `b` bytes: `b ≤ limit` is inline, `b > limit + h` apart, and in the band
//! between, inline headers are told from data by the per-job 64-bit
//! [`magic`] they start with. Probes cannot look at data: in the band
//! they look for the header among those already come (see
//! `piggyback_deliver::fix_probe_status`).
//!
//! **Which header.** A receive that got a message apart takes, from the
//! sender's headers, the earliest not yet taken on its channel
//! (communicator, tag) with its size; headers come in send order. A
//! receive waits for it only once the data is there, and the header was
//! sent before the data, so the wait cannot deadlock. Two messages of one
//! channel and size whose order the receiver cannot see (two sending
//! threads, or a wildcard receive completed after a later one) may swap
//! headers: the data stays right (MPI matched it); their ids and clocks
//! swap, which the report's FIFO check shows.
//!
//! Peers outside this world (spawned or connected) get inline messages
//! whatever their size: their world ranks are not known here.

use crate::comms::{self, LOCAL_GID_BIT};
use crate::ffi::{self, MPI_Comm, MPI_Request};
use core::ffi::{c_int, c_void};
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

/// Largest dense message sent through a staging copy.
pub const COPY_MAX: u64 = 4096;

/// Bytes before the piggyback header in a header: the header's number
/// among those from its sender to its receiver, the communicator's global
/// id, the tag, the data's size.
pub const ENVELOPE: usize = 32;
/// The tag of header messages on the channel.
const TAG: c_int = 7;
/// The inline limit before headers when the whole world is on this node.
const NODE_LIMIT: u64 = 1024;
/// Outstanding header sends tested once this many have gathered.
const BATCH: usize = 32;

/// Largest message sent inline (0: every message inline, as before
/// `open`, or with piggybacking off).
static LIMIT: AtomicU64 = AtomicU64::new(0);
/// `LIMIT`, or `u64::MAX` while it is 0: `beyond` in one comparison.
static BEYOND: AtomicU64 = AtomicU64::new(u64::MAX);
/// The value inline headers start with, the same on every rank of a job.
static MAGIC: AtomicU64 = AtomicU64::new(0);
/// World size, once the channel is open.
static WORLD: AtomicUsize = AtomicUsize::new(0);

struct Channel(MPI_Comm);
// SAFETY: a communicator handle is a plain identifier, valid from any thread.
unsafe impl Send for Channel {}
unsafe impl Sync for Channel {}
static CHANNEL: OnceLock<Channel> = OnceLock::new();

struct Outgoing {
    request: MPI_Request,
    message: Box<[u8]>,
}
// SAFETY: as `Channel`; the buffer is owned and only freed after completion.
unsafe impl Send for Outgoing {}

/// Header sends in flight, buffers of completed ones to reuse, and the
/// number of the next header to each world rank.
struct Sends {
    flying: Vec<Outgoing>,
    spare: Vec<Box<[u8]>>,
    requests: Vec<MPI_Request>,
    indices: Vec<c_int>,
    next: Vec<u64>,
}
// SAFETY: as `Outgoing`.
unsafe impl Send for Sends {}
static SENDS: Mutex<Sends> = Mutex::new(Sends {
    flying: Vec::new(),
    spare: Vec::new(),
    requests: Vec::new(),
    indices: Vec::new(),
    next: Vec::new(),
});

/// A header that came and has not been taken yet.
struct Waiting {
    gid: u64,
    tag: i32,
    bytes: u64,
    header: SmallVec<[u8; 64]>,
}

/// The headers from one sender: those that came in order, ready to be
/// taken, and those that came ahead of one still on its way (the two
/// routes, shared memory and MPI, do not keep order between them).
struct Peer {
    next: u64,
    ready: VecDeque<Waiting>,
    early: Vec<(u64, Waiting)>,
}

impl Default for Peer {
    fn default() -> Peer {
        Peer {
            next: 1,
            ready: VecDeque::new(),
            early: Vec::new(),
        }
    }
}

impl Peer {
    fn came(&mut self, number: u64, h: Waiting) {
        if number != self.next {
            self.early.push((number, h));
            return;
        }
        self.ready.push_back(h);
        self.next += 1;
        while let Some(i) = self.early.iter().position(|e| e.0 == self.next) {
            self.ready.push_back(self.early.swap_remove(i).1);
            self.next += 1;
        }
    }
}

/// Headers from the processes of this node come through shared memory
/// (`Node`); from the others, and when a ring is full, as MPI messages,
/// received from their sender when a receive needs one.
struct Inbox {
    /// By world rank of the sender, made on its first header.
    peers: Vec<Option<Box<Peer>>>,
    chan: MPI_Comm,
    buffer: Box<[u8]>,
}
// SAFETY: the communicator handle is a plain identifier.
unsafe impl Send for Inbox {}
static INBOX: Mutex<Option<Inbox>> = Mutex::new(None);

#[inline(always)]
pub fn limit() -> u64 {
    LIMIT.load(Relaxed)
}

/// Whether a message of `bytes` is larger than the inline limit (never,
/// while nothing goes apart).
#[inline(always)]
pub fn beyond(bytes: u64) -> bool {
    bytes > BEYOND.load(Relaxed)
}

/// Sets `LIMIT` and `BEYOND`.
fn set_limit(limit: u64) {
    LIMIT.store(limit, Relaxed);
    BEYOND.store(if limit == 0 { u64::MAX } else { limit }, Relaxed);
}

#[inline(always)]
pub fn magic() -> u64 {
    MAGIC.load(Relaxed)
}

/// At init, on every rank once piggybacking is on (a collective: the
/// channel is a duplicate of the world, and rank 0 draws the magic).
/// `header` is the piggyback header's length. Failure leaves every message
/// inline, on every rank (the duplicate fails everywhere or nowhere).
pub fn open(rank: usize, size: usize, header: usize, shm: bool) {
    let world = ffi::world();
    let mut dup = core::mem::MaybeUninit::<MPI_Comm>::uninit();
    // SAFETY: a collective duplicate of the world, kept for the run.
    if unsafe { ffi::PMPI_Comm_dup(world, dup.as_mut_ptr()) } != 0 {
        return;
    }
    // SAFETY: initialised by the successful dup; errors on pmtrace's own
    // communicator are returned to pmtrace, never the application's to
    // handle.
    let dup = unsafe {
        let dup = dup.assume_init();
        ffi::PMPI_Comm_set_errhandler(dup, ffi::RSMPI_ERRORS_RETURN);
        dup
    };
    // Rank 0's magic, and its choice of rings.
    let mut shared: [u64; 2] = if rank == 0 {
        [draw(), u64::from(shm)]
    } else {
        [0; 2]
    };
    // SAFETY: a broadcast of two u64 on the new communicator.
    let ok = unsafe {
        ffi::PMPI_Bcast(
            shared.as_mut_ptr() as *mut c_void,
            16,
            ffi::consts().byte,
            0,
            dup,
        )
    } == 0;
    if !ok {
        return;
    }
    let [magic, shm] = shared;
    let _ = CHANNEL.set(Channel(dup));
    let len = ENVELOPE + header;
    let node = (shm != 0)
        .then(|| crate::header_rings::open(dup, rank, size, magic, len))
        .flatten();
    // With every process on this node, an apart header costs about as
    // much as an inline one, and a smaller limit makes the save before a
    // large receive smaller (`piggyback_deliver::saved_len`).
    let limit = match node {
        Some(ref n) if n.has_all() => NODE_LIMIT,
        _ => COPY_MAX,
    };
    if let Some(node) = node {
        let _ = NODE.set(node);
    }
    *INBOX.lock() = Some(Inbox {
        peers: (0..size).map(|_| None).collect(),
        chan: dup,
        buffer: vec![0u8; len].into_boxed_slice(),
    });
    // Headers are numbered from 1 (0 marks a free slot in a ring).
    SENDS.lock().next = vec![1; size];
    MAGIC.store(magic, Relaxed);
    WORLD.store(size, Relaxed);
    set_limit(limit + 2 * header as u64);
}

/// The rings of this node, once open.
static NODE: OnceLock<crate::header_rings::Node> = OnceLock::new();

/// A 64-bit value no message is expected to start with: the time and the
/// process id, mixed.
fn draw() -> u64 {
    let t = crate::clock::now();
    let pid = std::process::id() as u64;
    let mut x = t ^ pid.rotate_left(32) ^ 0x9E37_79B9_7F4A_7C15;
    // splitmix64's finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// At finalize: completes the header sends that are done and lets MPI
/// finish the rest on its own (a header whose message was never received).
pub fn close() {
    set_limit(0);
    INBOX.lock().take();
    let mut sends = SENDS.lock();
    sends.test();
    for mut o in sends.flying.drain(..) {
        // SAFETY: an active send request of ours; its buffer is leaked,
        // since MPI may still read it.
        unsafe { ffi::PMPI_Request_free(&mut o.request) };
        core::mem::forget(o.message);
    }
}

impl Sends {
    /// Completes the header sends that are done; their buffers are kept.
    fn test(&mut self) {
        if self.flying.is_empty() {
            return;
        }
        let n = self.flying.len();
        self.requests.clear();
        self.requests.extend(self.flying.iter().map(|o| o.request));
        self.indices.resize(n, 0);
        let mut done: c_int = 0;
        // SAFETY: our own active requests; statuses ignored.
        let rc = unsafe {
            ffi::PMPI_Testsome(
                n as c_int,
                self.requests.as_mut_ptr(),
                &mut done,
                self.indices.as_mut_ptr(),
                ffi::RSMPI_STATUSES_IGNORE,
            )
        };
        if rc != 0 || done <= 0 {
            return;
        }
        let mut finished = self.indices[..done as usize].to_vec();
        finished.sort_unstable();
        for &i in finished.iter().rev() {
            let o = self.flying.swap_remove(i as usize);
            self.spare.push(o.message);
        }
    }
}

/// The world rank of `rank` in `comm` (in its remote group for an
/// intercommunicator), if it is a process of this world, and the
/// communicator's id. A communicator pmtrace has not seen yet is
/// translated anew (and has a rank-local id), so that sender and receiver
/// decide alike whatever each has seen.
pub fn world_rank(comm: MPI_Comm, rank: c_int) -> Option<(c_int, u64)> {
    if rank < 0 {
        return None;
    }
    if is_world(comm) {
        return ((rank as usize) < WORLD.load(Relaxed)).then_some((rank, comms::WORLD_GID));
    }
    let (w, gid) = match comms::lookup(comm) {
        Some(info) if info.gid == comms::WORLD_GID => (Some(rank), info.gid),
        Some(info) => {
            let table = info.world_ranks.get_or_init(|| translate(comm));
            (table.get(rank as usize).copied(), info.gid)
        }
        None => (
            quiet_translate(comm).get(rank as usize).copied(),
            LOCAL_GID_BIT,
        ),
    };
    w.filter(|&w| w >= 0 && (w as usize) < WORLD.load(Relaxed))
        .map(|w| (w, gid))
}

/// Whether every process `comm` reaches is of this world.
pub fn all_local(comm: MPI_Comm) -> bool {
    if is_world(comm) {
        return true;
    }
    let all = |t: &[c_int]| !t.is_empty() && t.iter().all(|&w| w >= 0);
    match comms::lookup(comm) {
        Some(info) if info.gid == comms::WORLD_GID => true,
        Some(info) => all(info.world_ranks.get_or_init(|| translate(comm))),
        None => all(&quiet_translate(comm)),
    }
}

/// Whether `comm` is `MPI_COMM_WORLD` itself: its ranks are world ranks,
/// with no lookup.
#[inline(always)]
fn is_world(comm: MPI_Comm) -> bool {
    ffi::handle_key(comm) == ffi::handle_key(ffi::world())
}

/// `translate` for a handle pmtrace has not seen valid: an invalid one
/// gives an error code here, never the application's fatal handler.
#[cold]
fn quiet_translate(comm: MPI_Comm) -> Box<[c_int]> {
    ffi::quietly(|| translate(comm))
}

#[cold]
fn translate(comm: MPI_Comm) -> Box<[c_int]> {
    let (mut inter, mut n) = (0 as c_int, 0 as c_int);
    let mut group = core::mem::MaybeUninit::uninit();
    let mut world_group = core::mem::MaybeUninit::uninit();
    // SAFETY: queries on the caller's communicator; both groups freed.
    unsafe {
        if ffi::PMPI_Comm_test_inter(comm, &mut inter) != 0 {
            return Box::new([]);
        }
        let got = if inter != 0 {
            ffi::PMPI_Comm_remote_size(comm, &mut n);
            ffi::PMPI_Comm_remote_group(comm, group.as_mut_ptr())
        } else {
            ffi::PMPI_Comm_size(comm, &mut n);
            ffi::PMPI_Comm_group(comm, group.as_mut_ptr())
        };
        if got != 0 || n <= 0 {
            return Box::new([]);
        }
        let ranks: Vec<c_int> = (0..n).collect();
        let mut out = vec![-1 as c_int; n as usize];
        let mut group = group.assume_init();
        if ffi::PMPI_Comm_group(ffi::world(), world_group.as_mut_ptr()) == 0 {
            let mut world_group = world_group.assume_init();
            if ffi::PMPI_Group_translate_ranks(
                group,
                n,
                ranks.as_ptr(),
                world_group,
                out.as_mut_ptr(),
            ) != 0
            {
                out.fill(-1);
            }
            ffi::PMPI_Group_free(&mut world_group);
        }
        ffi::PMPI_Group_free(&mut group);
        let undefined = ffi::consts().undefined;
        for w in &mut out {
            if *w == undefined {
                *w = -1;
            }
        }
        out.into_boxed_slice()
    }
}

/// Where a message of a send goes apart: the destination's world rank and
/// the communicator's id; None when it goes inline.
#[inline]
pub fn destination(comm: MPI_Comm, dest: c_int, tag: c_int, bytes: u64) -> Option<(c_int, u64)> {
    if !beyond(bytes) || tag < 0 {
        return None;
    }
    world_rank(comm, dest)
}

/// Sends a header apart: `fill` writes the piggyback header (of `header`
/// bytes) into the message after the envelope. To a process of this node
/// it goes through shared memory while its ring has room, else as an MPI
/// message on the channel.
pub fn send(
    to: c_int,
    gid: u64,
    tag: c_int,
    bytes: u64,
    header: usize,
    fill: impl FnOnce(*mut u8),
) {
    let Some(chan) = CHANNEL.get() else { return };
    let len = ENVELOPE + header;
    let mut sends = SENDS.lock();
    let Some(number) = sends.next.get_mut(to as usize).map(|n| {
        *n += 1;
        *n - 1
    }) else {
        return;
    };
    // The envelope after the number, then the piggyback header.
    let mut fill = Some(fill);
    let mut rest = |m: &mut [u8]| {
        m[0..8].copy_from_slice(&gid.to_ne_bytes());
        m[8..16].copy_from_slice(&i64::from(tag).to_ne_bytes());
        m[16..24].copy_from_slice(&bytes.to_ne_bytes());
        if let Some(f) = fill.take() {
            f(m[ENVELOPE - 8..].as_mut_ptr());
        }
    };
    if NODE
        .get()
        .is_some_and(|node| node.send(to as usize, number, len, &mut rest))
    {
        return;
    }
    let mut message = match sends.spare.pop() {
        Some(m) if m.len() == len => m,
        _ => vec![0u8; len].into_boxed_slice(),
    };
    message[0..8].copy_from_slice(&number.to_ne_bytes());
    rest(&mut message[8..]);
    let mut request = core::mem::MaybeUninit::<MPI_Request>::uninit();
    // SAFETY: a send of our own buffer, kept until the request completes.
    let rc = unsafe {
        ffi::PMPI_Isend(
            message.as_ptr() as *const c_void,
            len as c_int,
            ffi::consts().byte,
            to,
            TAG,
            chan.0,
            request.as_mut_ptr(),
        )
    };
    if rc != 0 {
        // Not sent (MPI failing on pmtrace's own communicator, not
        // expected): its number goes to the next header, so that later
        // ones are not held back behind a gap; this message's receive
        // still waits for a header.
        sends.next[to as usize] -= 1;
        return;
    }
    sends.flying.push(Outgoing {
        // SAFETY: set by the successful Isend.
        request: unsafe { request.assume_init() },
        message,
    });
    if sends.flying.len() >= BATCH {
        sends.test();
    }
}

/// What a receive knows of the message whose header it takes.
pub struct Want {
    /// World rank of the sender.
    pub from: c_int,
    /// The receiving communicator's id (a rank-local one matches any).
    pub gid: u64,
    /// None: any (a receive whose status MPI does not fill).
    pub tag: Option<i32>,
    pub bytes: Option<u64>,
}

impl Want {
    fn fits(&self, gid: u64, tag: i32, bytes: u64) -> bool {
        (gid == self.gid || (gid | self.gid) & LOCAL_GID_BIT != 0)
            && self.tag.is_none_or(|t| t == tag)
            && self.bytes.is_none_or(|b| b == bytes)
    }
}

/// A header's envelope as sent: its number, communicator id, tag, size.
fn envelope(b: &[u8]) -> (u64, u64, i32, u64) {
    let word = |i: usize| u64::from_ne_bytes(b[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
    (word(0), word(1), word(2) as i64 as i32, word(3))
}

impl Waiting {
    fn fits(&self, w: &Want) -> bool {
        w.fits(self.gid, self.tag, self.bytes)
    }

    /// A header as sent: its number and what it says.
    fn parse(b: &[u8]) -> (u64, Waiting) {
        let (number, gid, tag, bytes) = envelope(b);
        let h = Waiting {
            gid,
            tag,
            bytes,
            header: SmallVec::from_slice(&b[ENVELOPE..]),
        };
        (number, h)
    }
}

/// Takes the header of a message that came apart, waiting for it if it
/// has not come yet (it was sent before the message): the data's size and
/// what `read` makes of the piggyback header. None if MPI fails to deliver
/// it.
pub fn take<R>(w: &Want, read: impl FnOnce(*const u8) -> R) -> Option<(u64, R)> {
    let mut guard = INBOX.lock();
    let inbox = guard.as_mut()?;
    let from = usize::try_from(w.from)
        .ok()
        .filter(|&f| f < inbox.peers.len())?;
    // The common case: nothing waits from `from`, and the next header in
    // its ring is this one: read in place.
    let peer = inbox.peer(from);
    if peer.ready.is_empty() && peer.early.is_empty() {
        if let Some(node) = NODE.get() {
            let next = peer.next;
            let got = node.take_next(from, |slot| {
                let (number, gid, tag, bytes) = envelope(slot);
                (number == next && w.fits(gid, tag, bytes)).then_some(bytes)
            });
            if let Some((bytes, slot)) = got {
                peer.next += 1;
                let r = read(slot.as_ptr().wrapping_add(ENVELOPE));
                node.release(from);
                return Some((bytes, r));
            }
        }
    }
    loop {
        if let Some(h) = inbox.find(from, w) {
            return Some((h.bytes, read(h.header.as_ptr())));
        }
        // Not among those that came: through shared memory it is there
        // (written before the data was sent), else it comes by MPI.
        if !inbox.drain_node(from) && !inbox.receive_mpi(from, true) {
            return None;
        }
    }
}

/// Whether a header that fits `w` has come (without waiting): the probes'
/// test in the ambiguous band.
pub fn has_come(w: &Want) -> bool {
    let mut guard = INBOX.lock();
    let Some(inbox) = guard.as_mut() else {
        return false;
    };
    let Some(from) = usize::try_from(w.from)
        .ok()
        .filter(|&f| f < inbox.peers.len())
    else {
        return false;
    };
    // Headers ahead of one still on its way count too: the probe asks
    // whether this message came apart, not which header it takes.
    let fits = |inbox: &Inbox| {
        inbox.peers[from].as_ref().is_some_and(|p| {
            p.ready.iter().any(|h| h.fits(w)) || p.early.iter().any(|(_, h)| h.fits(w))
        })
    };
    loop {
        if fits(inbox) {
            return true;
        }
        if !inbox.drain_node(from) && !inbox.receive_mpi(from, false) {
            return false;
        }
    }
}

impl Inbox {
    fn peer(&mut self, from: usize) -> &mut Peer {
        self.peers[from].get_or_insert_with(Default::default)
    }

    /// Removes and returns the earliest header from `from` that fits.
    fn find(&mut self, from: usize, w: &Want) -> Option<Waiting> {
        let p = self.peers[from].as_mut()?;
        let i = p.ready.iter().position(|h| h.fits(w))?;
        p.ready.remove(i)
    }

    /// Takes what came from `from` through shared memory; false if nothing.
    fn drain_node(&mut self, from: usize) -> bool {
        let Some(node) = NODE.get() else {
            return false;
        };
        node.drain(from, |slot| {
            let (number, h) = Waiting::parse(slot);
            self.peer(from).came(number, h);
        })
    }

    /// Receives the next header `from` sent by MPI, waiting for it when
    /// `wait` (else only if it is there); false if none or MPI fails.
    fn receive_mpi(&mut self, from: usize, wait: bool) -> bool {
        let source = from as c_int;
        if !wait {
            let mut flag: c_int = 0;
            // SAFETY: a probe on our own channel.
            let rc = unsafe {
                ffi::PMPI_Iprobe(source, TAG, self.chan, &mut flag, ffi::RSMPI_STATUS_IGNORE)
            };
            if rc != 0 || flag == 0 {
                return false;
            }
        }
        // SAFETY: a receive into the inbox's buffer of a header's length.
        let rc = unsafe {
            ffi::PMPI_Recv(
                self.buffer.as_mut_ptr() as *mut c_void,
                self.buffer.len() as c_int,
                ffi::consts().byte,
                source,
                TAG,
                self.chan,
                ffi::RSMPI_STATUS_IGNORE,
            )
        };
        if rc != 0 {
            return false;
        }
        let (number, h) = Waiting::parse(&self.buffer);
        self.peer(from).came(number, h);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(tag: i32) -> Waiting {
        Waiting {
            gid: 0,
            tag,
            bytes: 1,
            header: SmallVec::new(),
        }
    }

    #[test]
    fn headers_from_two_routes_are_taken_in_send_order() {
        let mut p = Peer::default();
        // 1 by the ring, 3 and 4 by the ring while 2 is still on its way by MPI.
        p.came(1, header(1));
        p.came(3, header(3));
        p.came(4, header(4));
        let tags = |p: &Peer| p.ready.iter().map(|h| h.tag).collect::<Vec<_>>();
        assert_eq!(tags(&p), vec![1], "3 and 4 wait for 2");
        p.came(2, header(2));
        assert_eq!(tags(&p), vec![1, 2, 3, 4]);
        assert!(p.early.is_empty());
        assert_eq!(p.next, 5);
    }

    #[test]
    fn a_header_fits_its_channel_and_size_or_any_where_the_status_says_nothing() {
        let w = |tag, bytes| Want {
            from: 0,
            gid: 5,
            tag,
            bytes,
        };
        assert!(w(Some(1), Some(10)).fits(5, 1, 10));
        assert!(!w(Some(1), Some(10)).fits(5, 2, 10));
        assert!(!w(Some(1), Some(10)).fits(5, 1, 11));
        assert!(!w(Some(1), Some(10)).fits(6, 1, 10));
        assert!(w(None, None).fits(5, 9, 99));
        // A rank-local communicator id matches any.
        assert!(w(Some(1), Some(10)).fits(6 | LOCAL_GID_BIT, 1, 10));
    }
}
