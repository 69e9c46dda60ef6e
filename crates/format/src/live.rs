//! The live status file: what a running rank shows `pmtrace top`.
//!
//! Beside its trace file `rank-NNNNN.pmt` every rank maps
//! `rank-NNNNN.live`, a file of fixed size, shared. Each thread that
//! records owns one slot of it and writes a few words at every call: the
//! call it is entering and when, or, once out of it, when it left. The
//! rank's writer thread adds the rest about four times a second: a
//! heartbeat, the Lamport clock, the communicators with their collective
//! counts, and, for a call that has blocked for a while, whom it waits
//! for. Being a shared mapping, what is written is in the file at once
//! for a reader on the same node, and survives the process; the writer
//! syncs it to the file system once a second for readers elsewhere.
//!
//! ```text
//! header (HEADER_LEN bytes, little-endian)
//!   0 magic "PMTL"   4 version u32   8 rank u32     12 world size u32
//!  16 pid u32       20 threads u32  24 state u32   28 threads not shown u32
//!  32 beat u64 (ticks of the writer)  40 beat_ns u64 (tracer clock at it)
//!  48 beat_unix_ns u64 (wall clock at it)   56 start_ns u64 (tracer clock at MPI_Init)
//!  64 lamport u64   72 tick_ms u32   76 reserved   128 host (64 bytes, NUL-padded)
//! communicators (at COMMS_AT, COMMS_LEN bytes; written by the writer thread)
//!   0 generation u64 (odd while being rewritten)   8 count u32   12 truncated u32
//!  16 + 24 i: gid u64, collectives started u64, rank in it u32, size u32 (top bit: inter)
//! slot i (at SLOTS_AT + i SLOT_LEN)
//!   0 word u64: function id (bits 0-15), live kind (16-23), in the call
//!     (bit 31); the high 32 bits stay 0
//!   8 t u64 (by the writer thread): the first tick that saw the thread in
//!     its current (or last) call, at most a tick after the call began
//!     (tracer clock)
//!  16 a u64, 24 b u64: the call's arguments, by kind (below)
//!  32 events u64 (records written)  40 messages sent u64  48 bytes sent u64
//!  56 tid u64   64 out_t u64 (by the writer thread: the first tick that saw
//!     the thread out of its last call, an upper bound of when it left it)
//!  72 seen word u64, 80 seen records u64, 88 records u64 (the writer
//!     thread's: what it saw at its last tick, to tell a new call)
//! 128 request keys u64 x REQS (waits: the first REQS of the call's requests)
//! 384 phase: length u8, then the innermost phase's name (up to 63 bytes)
//! 512 detail (by the writer thread): t u64 and word u64 of the call it is
//!     about, count u32, total u32, then DETAIL_ENTRIES entries of 16 bytes:
//!     what u8 (1 from, 2 to, 3 collective), flags u8 (1 any source,
//!     2 the peer is a rank of the communicator, not of the world),
//!     pad u16, peer i32 (for a collective: its number on the communicator,
//!     low 32 bits), gid u64
//! 1024 site (by the writer thread, for a call blocked a second): t u64
//!     and word u64 of the call it is about, then text: one line a frame,
//!     the innermost application frame first, each ending in a newline,
//!     "address\tsymbol\tobject\n" (address hex, relative to the
//!     object's load bias, as `addr2line -e object` takes it; symbol
//!     "name+0xoffset" or empty), the rest of the area NUL
//! ```
//!
//! Arguments by live kind, for the writer thread: a receive or probe has
//! the source in the low 32 bits of `a` and the communicator's handle key
//! in `b`; a send, the destination and the communicator; a send-receive,
//! the destination (low 32 bits) and source (high 32) in `a`; a wait, the
//! number of requests in `a` (`MPI_Wait`: one, not stored) and their keys
//! in the slot's request list; a collective, the communicator in `b`. A
//! handle key is stored at the handle's own width (4 bytes in MPICH), the
//! rest of the word staying 0; a half of `a` not stored may be left from
//! an earlier call.
//!
//! Each word is written whole, but a slot as a whole is not: a copy taken
//! while the thread enters or leaves a call may pair one call's word with
//! the other's time. What `top` looks at lasts seconds, so the next copy
//! is right; the communicator table, rewritten at once, has a generation.

use crate::FormatError;

pub const LIVE_MAGIC: &[u8; 4] = b"PMTL";
pub const LIVE_VERSION: u32 = 3;
pub const HEADER_LEN: usize = 4096;
pub const COMMS_AT: usize = HEADER_LEN;
pub const COMMS_LEN: usize = 8192;
/// Communicators the table holds; more are counted as truncated.
pub const MAX_COMMS: usize = (COMMS_LEN - 16) / 24;
pub const SLOTS_AT: usize = COMMS_AT + COMMS_LEN;
pub const SLOT_LEN: usize = 2048;
/// Threads a rank shows; later ones are counted, not shown.
pub const MAX_THREADS: usize = 64;
pub const FILE_LEN: usize = SLOTS_AT + MAX_THREADS * SLOT_LEN;
/// Request keys a slot keeps of a wait.
pub const REQS: usize = 32;
/// Wait entries a detail holds.
pub const DETAIL_ENTRIES: usize = 30;

/// Header offsets.
pub mod h {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 4;
    pub const RANK: usize = 8;
    pub const SIZE: usize = 12;
    pub const PID: usize = 16;
    pub const THREADS: usize = 20;
    pub const STATE: usize = 24;
    pub const LOST_THREADS: usize = 28;
    pub const BEAT: usize = 32;
    pub const BEAT_NS: usize = 40;
    pub const BEAT_UNIX_NS: usize = 48;
    pub const START_NS: usize = 56;
    pub const LAMPORT: usize = 64;
    pub const TICK_MS: usize = 72;
    pub const HOST: usize = 128;
    pub const HOST_LEN: usize = 64;
}

/// Word indices (u64) within a slot.
pub mod w {
    pub const WORD: usize = 0;
    pub const T: usize = 1;
    pub const A: usize = 2;
    pub const B: usize = 3;
    pub const EVENTS: usize = 4;
    pub const MSGS: usize = 5;
    pub const BYTES: usize = 6;
    pub const TID: usize = 7;
    pub const OUT_T: usize = 8;
    /// The writer thread's own: the word, and the thread's records
    /// (written and dropped), at its last look, and those records now.
    pub const SEEN_WORD: usize = 9;
    pub const SEEN_PROGRESS: usize = 10;
    pub const PROGRESS: usize = 11;
    pub const REQS: usize = 16;
    pub const PHASE: usize = 48;
    pub const PHASE_WORDS: usize = 8;
    pub const DETAIL_T: usize = 64;
    pub const DETAIL_WORD: usize = 65;
    /// Count (low 32 bits) and total (high 32).
    pub const DETAIL_N: usize = 66;
    pub const DETAIL: usize = 67;
    pub const SITE_T: usize = 128;
    pub const SITE_WORD: usize = 129;
    /// The text's first word; it runs to the slot's end.
    pub const SITE_TEXT: usize = 130;
    pub const SITE_TEXT_LEN: usize = super::SLOT_LEN - SITE_TEXT * 8;
}

/// Application frames a site keeps.
pub const SITE_FRAMES: usize = 4;

/// One frame of the code a blocked call came from, as the writer thread
/// found it: `address` is relative to its object's load bias.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteFrame {
    pub address: u64,
    /// "name+0xoffset", from the dynamic symbol table, if it has one.
    pub symbol: Option<String>,
    pub object: String,
}

impl SiteFrame {
    /// Its line of a site's text.
    pub fn line(&self) -> String {
        format!(
            "{:x}\t{}\t{}\n",
            self.address,
            self.symbol.as_deref().unwrap_or(""),
            self.object
        )
    }

    /// The frames of a site's text: its whole lines (one cut short, or
    /// not ended by a newline, is dropped).
    pub fn parse_text(text: &[u8]) -> Vec<SiteFrame> {
        let end = text.iter().position(|&c| c == 0).unwrap_or(text.len());
        let whole = text[..end]
            .iter()
            .rposition(|&c| c == b'\n')
            .map_or(0, |i| i + 1);
        let text = String::from_utf8_lossy(&text[..whole]);
        text.split_terminator('\n')
            .filter_map(|l| {
                let mut f = l.splitn(3, '\t');
                let address = u64::from_str_radix(f.next()?, 16).ok()?;
                let symbol = f.next()?;
                let object = f.next()?;
                Some(SiteFrame {
                    address,
                    symbol: (!symbol.is_empty()).then(|| symbol.to_string()),
                    object: object.to_string(),
                })
            })
            .take(SITE_FRAMES)
            .collect()
    }
}

/// Bit 31 of a slot's word: the thread is inside the call. (The word's
/// high half stays 0: a call stores the low half alone, as a 32-bit
/// immediate.)
pub const IN_CALL: u64 = 1 << 31;

/// A rank's state, from the header.
pub const STATE_RUNNING: u32 = 1;
pub const STATE_FINISHED: u32 = 2;
pub const STATE_ABORTED: u32 = 3;

/// What a call waits on, for the writer thread to resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum LiveKind {
    /// A call that does not block (or not for anyone in particular).
    Other = 0,
    Recv = 1,
    Send = 2,
    Sendrecv = 3,
    Wait = 4,
    Waitall = 5,
    Waitany = 6,
    Waitsome = 7,
    Coll = 8,
}

impl LiveKind {
    pub fn of(code: u8) -> LiveKind {
        match code {
            1 => LiveKind::Recv,
            2 => LiveKind::Send,
            3 => LiveKind::Sendrecv,
            4 => LiveKind::Wait,
            5 => LiveKind::Waitall,
            6 => LiveKind::Waitany,
            7 => LiveKind::Waitsome,
            8 => LiveKind::Coll,
            _ => LiveKind::Other,
        }
    }

    /// A wait that ends when any one of its operations completes.
    pub fn any_of(self) -> bool {
        matches!(self, LiveKind::Waitany | LiveKind::Waitsome)
    }
}

/// A slot's word for a call of function `func` and live kind `kind`.
pub const fn word(func: u32, kind: LiveKind) -> u64 {
    func as u64 | (kind as u64) << 16
}

/// One thing a blocked call waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// A message from `peer` (a world rank, or a rank of communicator
    /// `gid` when `comm_rank`), or from any member of `gid`.
    From { gid: u64, peer: Peer },
    /// Its message to `peer` to be taken.
    To { gid: u64, peer: Peer },
    /// The members of `gid` that have not entered its collective `seq`.
    Coll { gid: u64, seq: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    World(u32),
    /// A rank of the communicator, not mapped to the world by the writer.
    Comm(u32),
    Any,
}

const WHAT_FROM: u8 = 1;
const WHAT_TO: u8 = 2;
const WHAT_COLL: u8 = 3;
const FLAG_ANY: u8 = 1;
const FLAG_COMM_RANK: u8 = 2;

impl Wait {
    /// Its two words in a detail.
    pub fn encode(&self) -> [u64; 2] {
        let (what, flags, peer, gid) = match *self {
            Wait::From { gid, peer } | Wait::To { gid, peer } => {
                let what = if matches!(self, Wait::From { .. }) {
                    WHAT_FROM
                } else {
                    WHAT_TO
                };
                match peer {
                    Peer::World(r) => (what, 0, r, gid),
                    Peer::Comm(r) => (what, FLAG_COMM_RANK, r, gid),
                    Peer::Any => (what, FLAG_ANY, 0, gid),
                }
            }
            Wait::Coll { gid, seq } => (WHAT_COLL, 0, seq as u32, gid),
        };
        [
            u64::from(what) | u64::from(flags) << 8 | u64::from(peer) << 32,
            gid,
        ]
    }

    pub fn decode(w: [u64; 2]) -> Option<Wait> {
        let (what, flags, peer, gid) = (w[0] as u8, (w[0] >> 8) as u8, (w[0] >> 32) as u32, w[1]);
        let p = if flags & FLAG_ANY != 0 {
            Peer::Any
        } else if flags & FLAG_COMM_RANK != 0 {
            Peer::Comm(peer)
        } else {
            Peer::World(peer)
        };
        match what {
            WHAT_FROM => Some(Wait::From { gid, peer: p }),
            WHAT_TO => Some(Wait::To { gid, peer: p }),
            WHAT_COLL => Some(Wait::Coll {
                gid,
                seq: u64::from(peer),
            }),
            _ => None,
        }
    }
}

/// A communicator as one rank's table shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveComm {
    pub gid: u64,
    /// Collectives this rank started on it (blocking ones count when they
    /// return).
    pub seq: u64,
    pub rank: u32,
    pub size: u32,
    pub inter: bool,
}

/// One thread's slot, read consistently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveThread {
    pub index: u32,
    pub tid: u64,
    pub func: u32,
    pub kind: LiveKind,
    pub in_call: bool,
    /// When the thread's current or last call began (tracer ns); 0
    /// before its first call.
    pub t: u64,
    /// Out of a call: when the writer thread first saw it out (tracer
    /// ns; within a tick after it left), 0 if it has not looked yet.
    pub out_t: u64,
    pub a: u64,
    pub b: u64,
    pub events: u64,
    pub messages_sent: u64,
    pub bytes_sent: u64,
    pub phase: Option<String>,
    /// Whom the call waits for, when the writer resolved it for this
    /// very call; the second figure is how many there were in all.
    pub waits: Option<(Vec<Wait>, u32)>,
    /// Where this very call came from, innermost first, once the writer
    /// found it (a call blocked a second); empty until then.
    pub site: Vec<SiteFrame>,
}

/// A whole live file, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveRank {
    pub rank: u32,
    pub size: u32,
    pub pid: u32,
    pub state: u32,
    pub lost_threads: u32,
    pub beat: u64,
    pub beat_ns: u64,
    pub beat_unix_ns: u64,
    pub start_ns: u64,
    pub lamport: u64,
    pub tick_ms: u32,
    pub host: String,
    pub comms: Vec<LiveComm>,
    pub comms_truncated: bool,
    pub threads: Vec<LiveThread>,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

impl LiveRank {
    /// Reads a live file's bytes. A communicator table being rewritten as
    /// it was copied comes back as `None` from [`LiveRank::parse_once`];
    /// this retries with `reread`, which returns the file's bytes anew.
    pub fn parse(
        mut bytes: Vec<u8>,
        mut reread: impl FnMut() -> std::io::Result<Vec<u8>>,
    ) -> Result<LiveRank, FormatError> {
        for _ in 0..20 {
            if let Some(r) = Self::parse_once(&bytes)? {
                return Ok(r);
            }
            bytes = reread().map_err(|e| FormatError::Truncated(format!("live file: {e}")))?;
        }
        Err(FormatError::Corrupt(
            "live file keeps changing under the reader".into(),
        ))
    }

    /// Reads one copy of the bytes; `None` when its communicator table was
    /// being rewritten as it was copied.
    pub fn parse_once(b: &[u8]) -> Result<Option<LiveRank>, FormatError> {
        if b.len() < SLOTS_AT {
            return Err(FormatError::Truncated(format!(
                "live file of {} bytes",
                b.len()
            )));
        }
        if &b[..4] != LIVE_MAGIC {
            return Err(FormatError::Corrupt("not a pmtrace live file".into()));
        }
        let version = u32_at(b, h::VERSION);
        if version != LIVE_VERSION {
            return Err(FormatError::Corrupt(format!(
                "live file version {version}, this pmtrace reads {LIVE_VERSION}"
            )));
        }
        let threads = (u32_at(b, h::THREADS) as usize).min(MAX_THREADS);
        if b.len() < SLOTS_AT + threads * SLOT_LEN {
            return Err(FormatError::Truncated(format!(
                "live file of {} bytes for {threads} threads",
                b.len()
            )));
        }
        let host = &b[h::HOST..h::HOST + h::HOST_LEN];
        let host_len = host.iter().position(|&c| c == 0).unwrap_or(host.len());
        let Some((comms, comms_truncated)) = Self::comms(&b[COMMS_AT..COMMS_AT + COMMS_LEN]) else {
            return Ok(None);
        };
        let out = (0..threads)
            .map(|i| {
                let at = SLOTS_AT + i * SLOT_LEN;
                Self::slot(i as u32, &b[at..at + SLOT_LEN])
            })
            .collect();
        Ok(Some(LiveRank {
            rank: u32_at(b, h::RANK),
            size: u32_at(b, h::SIZE),
            pid: u32_at(b, h::PID),
            state: u32_at(b, h::STATE),
            lost_threads: u32_at(b, h::LOST_THREADS),
            beat: u64_at(b, h::BEAT),
            beat_ns: u64_at(b, h::BEAT_NS),
            beat_unix_ns: u64_at(b, h::BEAT_UNIX_NS),
            start_ns: u64_at(b, h::START_NS),
            lamport: u64_at(b, h::LAMPORT),
            tick_ms: u32_at(b, h::TICK_MS),
            host: String::from_utf8_lossy(&host[..host_len]).into_owned(),
            comms,
            comms_truncated,
            threads: out,
        }))
    }

    fn comms(b: &[u8]) -> Option<(Vec<LiveComm>, bool)> {
        let gen = u64_at(b, 0);
        if gen % 2 == 1 {
            return None;
        }
        let n = (u32_at(b, 8) as usize).min(MAX_COMMS);
        let comms = (0..n)
            .map(|i| {
                let at = 16 + 24 * i;
                let size = u32_at(b, at + 20);
                LiveComm {
                    gid: u64_at(b, at),
                    seq: u64_at(b, at + 8),
                    rank: u32_at(b, at + 16),
                    size: size & !(1 << 31),
                    inter: size & (1 << 31) != 0,
                }
            })
            .collect();
        Some((comms, u32_at(b, 12) != 0))
    }

    fn slot(index: u32, b: &[u8]) -> LiveThread {
        let word = |i: usize| u64_at(b, i * 8);
        let w0 = word(w::WORD);
        let plen = (b[w::PHASE * 8] as usize).min(w::PHASE_WORDS * 8 - 1);
        let phase = (plen > 0).then(|| {
            String::from_utf8_lossy(&b[w::PHASE * 8 + 1..w::PHASE * 8 + 1 + plen]).into_owned()
        });
        let t = word(w::T);
        let detail_word = word(w::DETAIL_WORD);
        let waits = (w0 & IN_CALL != 0 && word(w::DETAIL_T) == t && detail_word == w0).then(|| {
            let n = word(w::DETAIL_N);
            let count = (n as u32 as usize).min(DETAIL_ENTRIES);
            let waits = (0..count)
                .filter_map(|i| {
                    let at = w::DETAIL + 2 * i;
                    Wait::decode([word(at), word(at + 1)])
                })
                .collect();
            (waits, (n >> 32) as u32)
        });
        let this_call = w0 & IN_CALL != 0 && word(w::SITE_T) == t && word(w::SITE_WORD) == w0;
        let site = if this_call {
            SiteFrame::parse_text(&b[w::SITE_TEXT * 8..])
        } else {
            Vec::new()
        };
        LiveThread {
            index,
            tid: word(w::TID),
            func: (w0 & 0xffff) as u32,
            kind: LiveKind::of((w0 >> 16) as u8),
            in_call: w0 & IN_CALL != 0,
            t,
            out_t: word(w::OUT_T),
            a: word(w::A),
            b: word(w::B),
            events: word(w::EVENTS),
            messages_sent: word(w::MSGS),
            bytes_sent: word(w::BYTES),
            phase,
            waits,
            site,
        }
    }

    /// The tracer clock now, by this rank's last heartbeat and the wall
    /// clock since (`unix_now_ns`).
    pub fn now_ns(&self, unix_now_ns: u64) -> u64 {
        self.beat_ns + unix_now_ns.saturating_sub(self.beat_unix_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blank(threads: u32) -> Vec<u8> {
        let mut b = vec![0u8; FILE_LEN];
        b[..4].copy_from_slice(LIVE_MAGIC);
        b[h::VERSION..h::VERSION + 4].copy_from_slice(&LIVE_VERSION.to_le_bytes());
        b[h::THREADS..h::THREADS + 4].copy_from_slice(&threads.to_le_bytes());
        b
    }

    fn put(b: &mut [u8], at: usize, v: u64) {
        b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }

    #[test]
    fn waits_round_trip() {
        for wt in [
            Wait::From {
                gid: 7,
                peer: Peer::World(3),
            },
            Wait::From {
                gid: 1 << 40,
                peer: Peer::Any,
            },
            Wait::To {
                gid: 0,
                peer: Peer::Comm(12),
            },
            Wait::Coll {
                gid: 5 << 32 | 2,
                seq: 41,
            },
        ] {
            assert_eq!(Wait::decode(wt.encode()), Some(wt));
        }
        assert_eq!(Wait::decode([0, 0]), None);
    }

    #[test]
    fn a_slot_reads_back_with_its_detail_only_for_its_call() {
        let mut b = blank(1);
        let s = SLOTS_AT;
        let wd = word(17, LiveKind::Recv) | IN_CALL;
        put(&mut b, s, wd);
        put(&mut b, s + 8, 5_000);
        put(&mut b, s + w::A * 8, 1);
        put(&mut b, s + w::EVENTS * 8, 99);
        put(&mut b, s + w::MSGS * 8, 4);
        put(&mut b, s + w::BYTES * 8, 4096);
        b[s + w::PHASE * 8] = 5;
        b[s + w::PHASE * 8 + 1..s + w::PHASE * 8 + 6].copy_from_slice(b"solve");
        let entry = Wait::From {
            gid: 0,
            peer: Peer::World(1),
        }
        .encode();
        put(&mut b, s + w::DETAIL * 8, entry[0]);
        put(&mut b, s + (w::DETAIL + 1) * 8, entry[1]);
        put(&mut b, s + w::DETAIL_N * 8, 1 | 1 << 32);
        put(&mut b, s + w::DETAIL_WORD * 8, wd);
        // A detail about an earlier call (another start) is not this call's.
        put(&mut b, s + w::DETAIL_T * 8, 4_000);
        let r = LiveRank::parse_once(&b).unwrap().unwrap();
        let t = &r.threads[0];
        assert_eq!(
            (t.func, t.kind, t.in_call, t.t),
            (17, LiveKind::Recv, true, 5_000)
        );
        assert_eq!((t.events, t.messages_sent, t.bytes_sent), (99, 4, 4096));
        assert_eq!(t.phase.as_deref(), Some("solve"));
        assert_eq!(t.waits, None);
        put(&mut b, s + w::DETAIL_T * 8, 5_000);
        let r = LiveRank::parse_once(&b).unwrap().unwrap();
        assert_eq!(
            r.threads[0].waits,
            Some((
                vec![Wait::From {
                    gid: 0,
                    peer: Peer::World(1)
                }],
                1
            ))
        );
    }

    #[test]
    fn a_site_reads_back_only_for_its_call_and_in_whole_lines() {
        let mut b = blank(1);
        let s = SLOTS_AT;
        let wd = word(3, LiveKind::Recv) | IN_CALL;
        put(&mut b, s, wd);
        put(&mut b, s + 8, 7_000);
        let frames = [
            SiteFrame {
                address: 0x11a9,
                symbol: None,
                object: "/apps/solver".into(),
            },
            SiteFrame {
                address: 0x2f00,
                symbol: Some("run_step+0x40".into()),
                object: "/apps/libphys.so".into(),
            },
        ];
        let text: String = frames.iter().map(SiteFrame::line).collect();
        // a third line, cut short (no newline, though its fields are all
        // there)
        let text = text + "3000\tmain+0x1\t/apps/solv";
        let at = s + w::SITE_TEXT * 8;
        b[at..at + text.len()].copy_from_slice(text.as_bytes());
        put(&mut b, s + w::SITE_WORD * 8, wd);
        put(&mut b, s + w::SITE_T * 8, 6_000);
        let r = LiveRank::parse_once(&b).unwrap().unwrap();
        assert_eq!(r.threads[0].site, vec![], "a site of an earlier call");
        put(&mut b, s + w::SITE_T * 8, 7_000);
        let r = LiveRank::parse_once(&b).unwrap().unwrap();
        assert_eq!(r.threads[0].site, frames.to_vec());
        // at most SITE_FRAMES frames
        let many: String = std::iter::repeat_n(frames[0].line(), SITE_FRAMES + 2).collect();
        b[at..at + many.len()].copy_from_slice(many.as_bytes());
        let r = LiveRank::parse_once(&b).unwrap().unwrap();
        assert_eq!(r.threads[0].site, vec![frames[0].clone(); SITE_FRAMES]);
        // out of the call, no site
        put(&mut b, s, wd & !IN_CALL);
        let r = LiveRank::parse_once(&b).unwrap().unwrap();
        assert_eq!(r.threads[0].site, vec![]);
    }

    #[test]
    fn a_table_being_rewritten_is_read_again() {
        let mut b = blank(0);
        put(&mut b, COMMS_AT, 3);
        assert_eq!(LiveRank::parse_once(&b).unwrap(), None);
        let mut fixed = b.clone();
        put(&mut fixed, COMMS_AT, 4);
        fixed[COMMS_AT + 8] = 1;
        put(&mut fixed, COMMS_AT + 16, 9);
        put(&mut fixed, COMMS_AT + 24, 2);
        fixed[COMMS_AT + 32..COMMS_AT + 36].copy_from_slice(&1u32.to_le_bytes());
        fixed[COMMS_AT + 36..COMMS_AT + 40].copy_from_slice(&(4u32 | 1 << 31).to_le_bytes());
        let r = LiveRank::parse(b, || Ok(fixed.clone())).unwrap();
        assert_eq!(
            r.comms,
            vec![LiveComm {
                gid: 9,
                seq: 2,
                rank: 1,
                size: 4,
                inter: true
            }]
        );
    }

    #[test]
    fn short_or_foreign_files_are_errors() {
        assert!(matches!(
            LiveRank::parse_once(&[0u8; 100]),
            Err(FormatError::Truncated(_))
        ));
        let mut b = blank(0);
        b[0] = b'X';
        assert!(matches!(
            LiveRank::parse_once(&b),
            Err(FormatError::Corrupt(_))
        ));
        let mut b = blank(3);
        b.truncate(SLOTS_AT + SLOT_LEN);
        assert!(matches!(
            LiveRank::parse_once(&b),
            Err(FormatError::Truncated(_))
        ));
    }
}
