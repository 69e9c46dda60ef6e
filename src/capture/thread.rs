//! A thread's state beside its recorder: the caches its calls share
//! (the communicator and datatype it used last), the number of the next
//! message it sends, and the staging buffers of its blocking sends and
//! receives. The `Recorder` encodes records and nothing else; a `Thread`
//! holds both, in the one thread-local the guard reaches (`guard`), so a
//! hook borrows both parts with no second lookup.

use crate::ffi::TypeSizes;
use crate::recorder::Recorder;
use std::sync::atomic::AtomicU64;

/// What the runtime keeps of a communicator (made and looked up in
/// `comms`; a thread keeps the last one it used).
pub struct CommInfo {
    pub index: u32,
    pub gid: u64,
    pub size: u32,
    pub rank: u32,
    pub inter: bool,
    pub remote_size: u32,
    /// Collectives started on this communicator by this rank.
    pub seq: AtomicU64,
    /// `MPI_Comm_idup`s on this communicator.
    pub idups: AtomicU64,
    /// World rank of each (remote) rank, -1 outside this world; made when
    /// a large message first needs it (`large_headers`).
    pub world_ranks: std::sync::OnceLock<Box<[core::ffi::c_int]>>,
}

impl CommInfo {
    /// A communicator of no members (placeholders: `comms::unknown`,
    /// `CollMemo::NONE`).
    pub const fn empty(index: u32, gid: u64) -> CommInfo {
        CommInfo {
            index,
            gid,
            size: 0,
            rank: 0,
            inter: false,
            remote_size: 0,
            seq: AtomicU64::new(0),
            idups: AtomicU64::new(0),
            world_ranks: std::sync::OnceLock::new(),
        }
    }
}

/// Everything one thread keeps: its recorder and its state.
#[derive(Default)]
pub struct Thread {
    pub recorder: Recorder,
    pub state: ThreadState,
}

/// A thread's caches and buffers (see the module docs).
pub struct ThreadState {
    /// The communicator of this thread's previous call: most calls repeat it.
    pub last_comm: Option<(u64, &'static CommInfo)>,
    pub comm_generation: u64,
    /// Sizes of the datatype this thread used last.
    pub types: TypeSizes,
    /// Messages this thread sent (the `n` of message ids).
    msg_n: u64,
    /// Staging buffers of blocking sends and receives (see `piggyback`).
    stage_out: Vec<u8>,
    stage_in: Vec<u8>,
    /// The names of the phases this thread is in, innermost last.
    pub phases: Vec<Vec<u8>>,
    /// The last probe this thread recorded that found nothing.
    pub probe_miss: ProbeMiss,
    /// The last blocking collective this thread recorded of each shape
    /// whose payload depends on its communicator, count, datatype and root
    /// alone (`hooks_colls::memo_slot`).
    pub coll_memo: [CollMemo; 6],
    /// The last send or nonblocking receive this thread recorded.
    pub send_memo: SendMemo,
    /// Where this thread's small nonblocking sends wait (`piggyback_ring`).
    pub ring: crate::piggyback_ring::Owned,
    /// The operation this thread keeps out of the request table
    /// (`requests::Kept`).
    pub kept: crate::requests::KeptPlace,
}

/// A point-to-point payload (peer, tag, communicator, bytes), encoded,
/// and what it was for: a send, `MPI_Isend` or `MPI_Irecv` of the same
/// count and datatype with the same peer, tag and communicator (in the
/// same epoch, `ffi::EPOCH`) has the same payload (`hooks_p2p::send`,
/// `hooks_p2p::issue`).
#[derive(Clone, Copy)]
pub struct SendMemo {
    /// The communicator's handle (`ffi::handle_key`).
    pub comm: u64,
    /// `ffi::EPOCH` when kept; `u64::MAX` (never an epoch): none.
    pub epoch: u64,
    pub datatype: u64,
    pub count: i64,
    /// Peer and tag (`ProbeMiss::of`).
    pub to: u64,
    /// The communicator's index, and the message's bytes.
    pub index: u32,
    pub bytes: u64,
    /// Whether the data is dense (`TypeCache::layout`), as the piggyback
    /// asks before the call: false where the piggyback is off.
    pub dense: bool,
    pub payload: u64,
    pub len: usize,
}

impl SendMemo {
    pub const NONE: SendMemo = SendMemo {
        comm: 0,
        epoch: u64::MAX,
        datatype: 0,
        count: 0,
        to: 0,
        index: 0,
        bytes: 0,
        dense: false,
        payload: 0,
        len: 0,
    };
}

/// A blocking collective's payload but its sequence code, encoded, and
/// what it was for: one of the same shape with the same communicator,
/// count, datatype and root (in the same epoch, `ffi::EPOCH`) has the
/// same payload (`hooks_colls::coll`).
#[derive(Clone, Copy)]
pub struct CollMemo {
    /// The communicator's handle (`ffi::handle_key`).
    pub comm: u64,
    /// `ffi::EPOCH` when kept; `u64::MAX` (never an epoch): none.
    pub epoch: u64,
    /// The communicator's info (`NO_COMM` for none).
    pub info: &'static CommInfo,
    pub datatype: u64,
    pub count: i64,
    pub root: i32,
    pub bytes: u64,
    pub len: usize,
}

/// What an empty `CollMemo` names: never used, as no key matches it.
static NO_COMM: CommInfo = CommInfo::empty(0, 0);

impl CollMemo {
    const NONE: CollMemo = CollMemo {
        comm: 0,
        epoch: u64::MAX,
        info: &NO_COMM,
        datatype: 0,
        count: 0,
        root: 0,
        bytes: 0,
        len: 0,
    };
}

impl Default for CollMemo {
    fn default() -> Self {
        CollMemo::NONE
    }
}

/// A probe that found nothing, its payload encoded: a probe of the same
/// source, tag and communicator (in the same epoch, `ffi::EPOCH`) that
/// finds nothing has the same payload (`hooks_p2p::probe`).
#[derive(Default, Clone, Copy)]
pub struct ProbeMiss {
    /// The communicator's handle (`ffi::handle_key`).
    pub comm: u64,
    /// `ffi::EPOCH` when kept; `u64::MAX` (never an epoch): none.
    pub epoch: u64,
    /// Source and tag (`ProbeMiss::of`).
    pub from: u64,
    pub bytes: u64,
    pub len: usize,
}

impl ProbeMiss {
    /// A probe's source and tag, as one word.
    #[inline(always)]
    pub fn of(src: i32, tag: i32) -> u64 {
        (u64::from(src as u32) << 32) | u64::from(tag as u32)
    }
}

impl Thread {
    pub const fn new() -> Thread {
        Thread {
            recorder: Recorder::new(),
            state: ThreadState::new(),
        }
    }

    /// The id of the next message this thread sends, taken. The id names
    /// the recorder's stream, so the thread is registered first.
    #[inline(always)]
    pub fn next_msg_id(&mut self) -> u64 {
        self.state.msg_n += 1;
        self.recorder.msg_id(self.state.msg_n)
    }
}

impl ThreadState {
    pub const fn new() -> ThreadState {
        ThreadState {
            last_comm: None,
            comm_generation: 0,
            types: TypeSizes::new(),
            msg_n: 0,
            stage_out: Vec::new(),
            stage_in: Vec::new(),
            phases: Vec::new(),
            probe_miss: ProbeMiss {
                comm: 0,
                epoch: u64::MAX,
                from: 0,
                bytes: 0,
                len: 0,
            },
            coll_memo: [CollMemo::NONE; 6],
            send_memo: SendMemo::NONE,
            ring: crate::piggyback_ring::Owned::none(),
            kept: crate::requests::KeptPlace::none(),
        }
    }

    /// The thread's staging buffer for outgoing messages, at least `n` bytes.
    #[inline(always)]
    pub fn stage_out(&mut self, n: usize) -> *mut u8 {
        if self.stage_out.len() < n {
            self.stage_out.resize(n.next_power_of_two(), 0);
        }
        self.stage_out.as_mut_ptr()
    }

    /// The thread's staging buffer for incoming messages, at least `n` bytes.
    #[inline(always)]
    pub fn stage_in(&mut self, n: usize) -> *mut u8 {
        if self.stage_in.len() < n {
            self.stage_in.resize(n.next_power_of_two(), 0);
        }
        self.stage_in.as_mut_ptr()
    }
}

impl Default for ThreadState {
    fn default() -> Self {
        ThreadState::new()
    }
}
