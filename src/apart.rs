//! Headers sent apart from large messages.
//!
//! A message with a header in front is no longer contiguous, and a
//! non-contiguous message loses the MPI library's single-copy path: the
//! data is then pipelined through shared buffers by both processes, which
//! on a loaded node costs up to 3.6x of the bandwidth (docs/notes.md,
//! "Large messages"). So a message of more than [`limit`] bytes goes
//! *exactly as the application described it*: same buffer, count,
//! datatype, communicator, tag and mode, matched and progressed by MPI as
//! without pmtrace. Its header goes before it, small and eager
//! (`MPI_Isend`), on pmtrace's duplicate of the world, to the
//! destination's world rank.
//!
//! **Which messages.** Every sender applies one rule: user data of more
//! than `limit` bytes goes apart, anything else inline. A receive sees
//! `b` bytes: `b ≤ limit` is inline, `b > limit + h` apart, and in the band
//! between, inline headers are told from data by the per-job 64-bit
//! [`magic`] they start with. Probes cannot look at data: in the band
//! they look for the header among those already come (see
//! `piggyback::fix_probe_status`).
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
use crate::ffi::{self, MPI_Comm, MPI_Request, MPI_Status};
use core::ffi::{c_int, c_void};
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

/// Bytes before the piggyback header in a header message: the
/// communicator's global id, the tag, the data's size.
pub const ENVELOPE: usize = 24;
/// The tag of header messages on the channel.
const TAG: c_int = 7;
/// Outstanding header sends tested once this many have gathered.
const BATCH: usize = 32;

/// Largest message sent inline (0: every message inline, as before
/// `open`, or with piggybacking off).
static LIMIT: AtomicU64 = AtomicU64::new(0);
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

/// Header sends in flight, and buffers of completed ones to reuse.
struct Sends {
    flying: Vec<Outgoing>,
    spare: Vec<Box<[u8]>>,
    requests: Vec<MPI_Request>,
    indices: Vec<c_int>,
}
// SAFETY: as `Outgoing`.
unsafe impl Send for Sends {}
static SENDS: Mutex<Sends> = Mutex::new(Sends {
    flying: Vec::new(),
    spare: Vec::new(),
    requests: Vec::new(),
    indices: Vec::new(),
});

/// A header that came and has not been taken yet.
struct Waiting {
    gid: u64,
    tag: i32,
    bytes: u64,
    header: SmallVec<[u8; 64]>,
}
/// Headers come into a ring of persistent receives from any source, posted
/// ahead so that MPI matches them as they arrive; what came waits in a
/// queue per sender until a receive takes it.
struct Inbox {
    /// Per world rank of the sender, in arrival order.
    queues: Vec<VecDeque<Waiting>>,
    ring: Vec<MPI_Request>,
    buffers: Vec<Box<[u8]>>,
    /// When each ring receive was (re)started: MPI matches a message to
    /// the earliest posted, so this orders what came.
    started: Vec<u64>,
    starts: u64,
    indices: Vec<c_int>,
    statuses: Vec<MPI_Status>,
}
// SAFETY: request handles are plain identifiers; the buffers are owned.
unsafe impl Send for Inbox {}
static INBOX: Mutex<Option<Inbox>> = Mutex::new(None);
/// Ring receives posted ahead.
const RING: usize = 16;

#[inline(always)]
pub fn limit() -> u64 {
    LIMIT.load(Relaxed)
}

/// Whether a message of `bytes` is larger than the inline limit (never,
/// while nothing goes apart).
#[inline(always)]
pub fn beyond(bytes: u64) -> bool {
    let limit = limit();
    limit != 0 && bytes > limit
}

#[inline(always)]
pub fn magic() -> u64 {
    MAGIC.load(Relaxed)
}

/// At init, on every rank once piggybacking is on (a collective: the
/// channel is a duplicate of the world, and rank 0 draws the magic).
/// `header` is the piggyback header's length. Failure leaves every message
/// inline, on every rank (the duplicate fails everywhere or nowhere).
pub fn open(rank: usize, size: usize, header: usize) {
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
    let mut magic: u64 = if rank == 0 { draw() } else { 0 };
    // SAFETY: a broadcast of one u64 on the new communicator.
    let ok = unsafe {
        ffi::PMPI_Bcast(
            &mut magic as *mut u64 as *mut c_void,
            8,
            ffi::consts().byte,
            0,
            dup,
        )
    } == 0;
    if !ok {
        return;
    }
    let _ = CHANNEL.set(Channel(dup));
    let inbox = Inbox::open(dup, size, ENVELOPE + header);
    // Every rank sends apart, or none.
    let mut ok = c_int::from(inbox.is_some());
    let mut all: c_int = 0;
    // SAFETY: an allreduce of one int over the channel.
    let agreed = unsafe {
        ffi::PMPI_Allreduce(
            &mut ok as *mut c_int as *const c_void,
            &mut all as *mut c_int as *mut c_void,
            1,
            ffi::RSMPI_INT32_T,
            ffi::consts().op_min,
            dup,
        )
    } == 0;
    let Some(inbox) = inbox.filter(|_| agreed && all == 1) else {
        return;
    };
    *INBOX.lock() = Some(inbox);
    MAGIC.store(magic, Relaxed);
    WORLD.store(size, Relaxed);
    LIMIT.store(crate::piggyback::COPY_MAX + 2 * header as u64, Relaxed);
}

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
    if let Some(mut inbox) = INBOX.lock().take() {
        inbox.close();
    }
    LIMIT.store(0, Relaxed);
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
    let all = |t: &[c_int]| !t.is_empty() && t.iter().all(|&w| w >= 0);
    match comms::lookup(comm) {
        Some(info) if info.gid == comms::WORLD_GID => true,
        Some(info) => all(info.world_ranks.get_or_init(|| translate(comm))),
        None => all(&quiet_translate(comm)),
    }
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
/// bytes) into the message after the envelope.
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
    let mut message = match sends.spare.pop() {
        Some(m) if m.len() == len => m,
        _ => vec![0u8; len].into_boxed_slice(),
    };
    message[0..8].copy_from_slice(&gid.to_ne_bytes());
    message[8..16].copy_from_slice(&i64::from(tag).to_ne_bytes());
    message[16..24].copy_from_slice(&bytes.to_ne_bytes());
    fill(message[ENVELOPE..].as_mut_ptr());
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

impl Waiting {
    fn fits(&self, w: &Want) -> bool {
        (self.gid == w.gid || (self.gid | w.gid) & LOCAL_GID_BIT != 0)
            && w.tag.is_none_or(|t| t == self.tag)
            && w.bytes.is_none_or(|b| b == self.bytes)
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
        .filter(|&f| f < inbox.queues.len())?;
    loop {
        if let Some(i) = inbox.queues[from].iter().position(|h| h.fits(w)) {
            let h = inbox.queues[from].remove(i)?;
            return Some((h.bytes, read(h.header.as_ptr())));
        }
        if !inbox.harvest(true) {
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
        .filter(|&f| f < inbox.queues.len())
    else {
        return false;
    };
    let fits = |inbox: &Inbox| inbox.queues[from].iter().any(|h| h.fits(w));
    fits(inbox) || (inbox.harvest(false) && fits(inbox))
}

impl Inbox {
    fn open(chan: MPI_Comm, size: usize, len: usize) -> Option<Inbox> {
        let mut inbox = Inbox {
            queues: (0..size).map(|_| VecDeque::new()).collect(),
            ring: Vec::with_capacity(RING),
            buffers: (0..RING)
                .map(|_| vec![0u8; len].into_boxed_slice())
                .collect(),
            started: vec![0; RING],
            starts: 0,
            indices: vec![0; RING],
            // SAFETY: a status is plain data; MPI fills these.
            statuses: (0..RING).map(|_| unsafe { core::mem::zeroed() }).collect(),
        };
        for k in 0..RING {
            let mut r = core::mem::MaybeUninit::<MPI_Request>::uninit();
            // SAFETY: a persistent receive into a buffer the inbox owns
            // (boxed: it does not move) for as long as the request lives.
            let rc = unsafe {
                ffi::PMPI_Recv_init(
                    inbox.buffers[k].as_mut_ptr() as *mut c_void,
                    len as c_int,
                    ffi::consts().byte,
                    ffi::consts().any_source,
                    TAG,
                    chan,
                    r.as_mut_ptr(),
                )
            };
            if rc != 0 {
                inbox.close();
                return None;
            }
            // SAFETY: set by the successful call.
            inbox.ring.push(unsafe { r.assume_init() });
            if !inbox.start(k) {
                inbox.close();
                return None;
            }
        }
        Some(inbox)
    }

    fn start(&mut self, k: usize) -> bool {
        self.starts += 1;
        self.started[k] = self.starts;
        // SAFETY: an inactive persistent request of ours.
        unsafe { ffi::PMPI_Start(&mut self.ring[k]) == 0 }
    }

    /// Moves the headers that came into their queues, waiting for one
    /// when `wait`; false if MPI fails.
    fn harvest(&mut self, wait: bool) -> bool {
        let mut done: c_int = 0;
        let n = self.ring.len() as c_int;
        // SAFETY: our own persistent requests, with arrays of their number.
        let rc = unsafe {
            if wait {
                ffi::PMPI_Waitsome(
                    n,
                    self.ring.as_mut_ptr(),
                    &mut done,
                    self.indices.as_mut_ptr(),
                    self.statuses.as_mut_ptr(),
                )
            } else {
                ffi::PMPI_Testsome(
                    n,
                    self.ring.as_mut_ptr(),
                    &mut done,
                    self.indices.as_mut_ptr(),
                    self.statuses.as_mut_ptr(),
                )
            }
        };
        if rc != 0 || done < 0 {
            return false;
        }
        // Arrival order is start order (see `started`).
        let mut came: SmallVec<[(u64, usize, c_int); RING]> = (0..done as usize)
            .map(|j| {
                let k = self.indices[j] as usize;
                (self.started[k], k, self.statuses[j].MPI_SOURCE)
            })
            .collect();
        if came.len() > 1 {
            came.sort_unstable();
        }
        for (_, k, source) in came {
            let b = &self.buffers[k];
            let word =
                |i: usize| u64::from_ne_bytes(b[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
            let h = Waiting {
                gid: word(0),
                tag: word(1) as i64 as i32,
                bytes: word(2),
                header: SmallVec::from_slice(&b[ENVELOPE..]),
            };
            if let Some(q) = usize::try_from(source)
                .ok()
                .and_then(|s| self.queues.get_mut(s))
            {
                q.push_back(h);
            }
            if !self.start(k) {
                return false;
            }
        }
        true
    }

    /// Cancels the ring's receives and frees them.
    fn close(&mut self) {
        for r in &mut self.ring {
            // SAFETY: our own persistent requests, active or not.
            unsafe {
                ffi::PMPI_Cancel(r);
                ffi::PMPI_Wait(r, ffi::RSMPI_STATUS_IGNORE);
                ffi::PMPI_Request_free(r);
            }
        }
        self.ring.clear();
    }
}
