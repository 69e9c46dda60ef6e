//! A thread's state beside its recorder: the caches its calls share
//! (the communicator and datatype it used last), the number of the next
//! message it sends, and the staging buffers of its blocking sends and
//! receives. The `Recorder` encodes records and nothing else; a `Thread`
//! holds both, in the one thread-local the guard reaches (`guard`), so a
//! hook borrows both parts with no second lookup.

use crate::ffi::TypeSizes;
use crate::recorder::Recorder;
use pmtrace_format::varint::zigzag;
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
    /// Collective constructors called on this communicator (`Origin::
    /// Collective`), whatever they returned.
    pub constructs: AtomicU64,
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
            constructs: AtomicU64::new(0),
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
/// count and datatype with the same peer and communicator (in the same
/// epoch, `ffi::EPOCH`) has the same payload but for its tag
/// (`SendMemo::payload_for`), so a loop over tags (a window of messages
/// told apart by their tags) keeps it (`hooks_p2p::send`,
/// `hooks_p2p::issue`).
#[derive(Clone, Copy)]
pub struct SendMemo {
    /// The communicator's handle (`ffi::handle_key`).
    pub comm: u64,
    /// `ffi::EPOCH` when kept; `u64::MAX` (never an epoch): none.
    pub epoch: u64,
    pub datatype: u64,
    pub count: i64,
    pub peer: i32,
    /// The tag `payload` was encoded with.
    pub tag: i32,
    /// The communicator's index, and the message's bytes.
    pub index: u32,
    pub bytes: u64,
    /// Whether the data is dense (`TypeCache::layout`), as the piggyback
    /// asks before the call: false where the piggyback is off.
    pub dense: bool,
    pub payload: u64,
    pub len: usize,
    /// The bytes of `payload` before the tag's (the peer's).
    pub head_len: usize,
    /// The bytes after the tag's (the communicator's index and the
    /// message's bytes), and how many.
    pub tail: u64,
    pub tail_len: usize,
}

impl SendMemo {
    pub const NONE: SendMemo = SendMemo {
        comm: 0,
        epoch: u64::MAX,
        datatype: 0,
        count: 0,
        peer: 0,
        tag: 0,
        index: 0,
        bytes: 0,
        dense: false,
        payload: 0,
        len: 0,
        head_len: 0,
        tail: 0,
        tail_len: 0,
    };

    /// The payload of a call like the memo's with this tag, and its
    /// length: the memo's own, or its head, the tag's varint and its tail
    /// spliced. `None` when that takes more than 8 bytes.
    #[inline(always)]
    pub fn payload_for(&self, tag: i32) -> Option<(u64, usize)> {
        if tag == self.tag {
            return Some((self.payload, self.len));
        }
        let (code, n) = varint_word(zigzag(i64::from(tag)));
        let len = self.head_len + n + self.tail_len;
        if len > 8 {
            return None;
        }
        // head_len + n < 8 here (the tail is at least two bytes), so no
        // shift below reaches 64.
        let head = self.payload & ((1u64 << (8 * self.head_len)) - 1);
        let bytes = head | code << (8 * self.head_len) | self.tail << (8 * (self.head_len + n));
        Some((bytes, len))
    }
}

/// A varint's bytes in the low bytes of a word, and how many (at most 8
/// are kept: the caller tests the length first).
#[inline(always)]
fn varint_word(mut v: u64) -> (u64, usize) {
    let mut code = 0u64;
    let mut n = 0;
    while v >= 0x80 {
        if n < 8 {
            code |= ((v & 0x7f) | 0x80) << (8 * n);
        }
        v >>= 7;
        n += 1;
    }
    if n < 8 {
        code |= v << (8 * n);
    }
    (code, n + 1)
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

#[cfg(test)]
mod tests {
    use super::*;
    use pmtrace_format::varint::{Packed, Sink};

    fn encoded(peer: i32, tag: i32, index: u32, bytes: u64) -> (u64, usize) {
        let mut p = Packed::default();
        p.put_i(i64::from(peer));
        p.put_i(i64::from(tag));
        p.put_u(u64::from(index));
        p.put_u(bytes);
        (p.bytes, p.len)
    }

    fn memo(peer: i32, tag: i32, index: u32, bytes: u64) -> SendMemo {
        let (payload, len) = encoded(peer, tag, index, bytes);
        let mut head = Packed::default();
        head.put_i(i64::from(peer));
        let mut tail = Packed::default();
        tail.put_u(u64::from(index));
        tail.put_u(bytes);
        SendMemo {
            peer,
            tag,
            index,
            bytes,
            payload,
            len,
            head_len: head.len,
            tail: tail.bytes,
            tail_len: tail.len,
            ..SendMemo::NONE
        }
    }

    #[test]
    fn another_tags_payload_is_the_encoding_of_its_fields() {
        let cases = [
            (1, 0, 0, 8),
            (300, 7, 2, 65536),
            (-2, 99, 1, 1 << 20),
            (5, 0, 0, 100),
        ];
        let tags = [0, 1, 15, 63, 64, 99, 8191, 8192, 1 << 20, i32::MAX, -1];
        for &(peer, tag, index, bytes) in &cases {
            let m = memo(peer, tag, index, bytes);
            for &t in &tags {
                let (want, want_len) = encoded(peer, t, index, bytes);
                let got = m.payload_for(t);
                if want_len <= 8 {
                    assert_eq!(got, Some((want, want_len)), "peer {peer} tag {tag} -> {t}");
                } else {
                    assert_eq!(got, None, "peer {peer} tag {tag} -> {t}");
                }
            }
        }
    }

    #[test]
    fn varint_word_matches_the_stream_encoding() {
        for v in [0u64, 1, 127, 128, 300, 16383, 16384, 1 << 35, u64::MAX] {
            let mut p = Packed::default();
            p.put_u(v);
            let (code, n) = varint_word(v);
            assert_eq!(n, p.len, "{v}");
            assert_eq!(code, p.bytes, "{v}");
        }
    }
}
