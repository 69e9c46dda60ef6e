//! Per-thread recording: a thread writes records straight into the active
//! buffer, a mapped region of the trace file (see `flusher`), and swaps to
//! its spare when the active one cannot hold the next record.
//!
//! Policy when both buffers are full: **stall, never drop.** The thread waits
//! for the flusher to return a buffer, and the wait itself is recorded (a
//! BufferWait record, and counts in the trailer). Events are dropped only if
//! the trace file cannot grow at all (disk full, I/O error); those are
//! counted in `dropped` and reported, never hidden.
//!
//! A recorder encodes records and nothing else: the caches and buffers
//! its thread's calls share live beside it (`thread::ThreadState`).

use crate::clock;
use crate::flusher::{Msg, Region, ThreadLink, RECORDS_AT};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use pmtrace_format::pending::PendingRecv;
use pmtrace_format::record::{self, CODE_BUFFER_WAIT, CODE_DEF_THREAD, FIRST_FUNCTION_CODE};
use pmtrace_format::varint::Sink;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

/// What a received message's header said.
#[derive(Debug, Clone, Default)]
pub struct Got {
    pub id: u64,
    pub lc: u64,
    pub sent: u64,
    /// Vector mode only.
    pub vc: Vec<u64>,
}

static FLUSHER: OnceLock<Sender<Msg>> = OnceLock::new();
static NEXT_THREAD: AtomicU32 = AtomicU32::new(0);
/// The thread that called MPI_Init (whose recorder outlives its thread).
static MAIN_TID: AtomicU64 = AtomicU64::new(0);

pub fn set_main_thread() {
    MAIN_TID.store(gettid(), Relaxed);
}

pub fn is_main_thread() -> bool {
    MAIN_TID.load(Relaxed) == gettid()
}

/// Set when the runtime hit a bug (a panic in a hook): from then on every
/// thread counts its events as dropped instead of recording them, while the
/// wrappers keep doing what the other ranks rely on (communicator ids).
/// Most bytes a BufferWait record takes.
const WAIT_RECORD: usize = 32;

static STOPPED: AtomicBool = AtomicBool::new(false);

/// `Recorder::attention`: a buffer wait waits to be written.
const ATTENTION_WAIT: u8 = 1;

pub fn stop_recording() {
    STOPPED.store(true, Relaxed);
    crate::lane::close(crate::lane::STOPPED, true);
}

/// Events that could not be recorded (the trace file could not grow).
pub static DROPPED: AtomicU64 = AtomicU64::new(0);

pub fn set_flusher(tx: Sender<Msg>) {
    let _ = FLUSHER.set(tx);
}

pub fn flusher() -> Option<&'static Sender<Msg>> {
    FLUSHER.get()
}

fn gettid() -> u64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u64 }
}

/// The first varint of a successful call's record of function `func`
/// (`record::put_head`), packed (for `Recorder::fixed_call`).
#[inline(always)]
pub const fn fixed_head(func: u32) -> (u64, usize) {
    pmtrace_format::varint::packed((FIRST_FUNCTION_CODE + func as u64) << 1)
}

/// `Recorder::fixed_end` for a buffer of `cap` bytes and `attention`.
fn fixed_end(cap: usize, attention: u8) -> usize {
    if attention == 0 && cap >= record::MAX_FIXED_RECORD {
        cap - record::MAX_FIXED_RECORD + 1
    } else {
        0
    }
}

pub struct Recorder {
    region: Option<Region>,
    base: *mut u8,
    cap: usize,
    pos: usize,
    /// A record of at most `MAX_FIXED_RECORD` bytes starting below this
    /// position needs nothing first: `cap - MAX_FIXED_RECORD + 1` when
    /// nothing waits for `attention`, else 0 (`fixed_end`). One
    /// comparison for both.
    fixed_end: usize,
    prev_end: u64,
    seq: u64,
    /// Next operation number (ids are `thread << 40 | n`, see the format).
    next_n: u64,
    /// This thread's index in the high bits of its operation and message
    /// ids (`record::op_id(index, 0)`, the same as `msg_id`'s): 0 until the
    /// thread registers, as the index.
    index_bits: u64,
    /// The last collective's communicator and number (`u32::MAX`: none).
    last_coll: (u32, u64),
    /// Call records written by this thread.
    events: u64,
    link: Option<Arc<ThreadLink>>,
    spares: Option<Receiver<Region>>,
    /// Tracing failed on this thread (no buffer could be had).
    broken: bool,
    /// A wait for a free buffer, written as its own record once the record
    /// that was being written (and its continuations) is complete.
    pending_wait: Option<(u64, u64)>,
    /// The previous recorded piggyback, for delta coding.
    pb_prev: record::PbState,
    /// Start of the record being written.
    start: u64,
    /// What the next record must see to first (`ATTENTION_*`): a buffer
    /// wait to write; 0 on the fast path.
    attention: u8,
    /// This thread's slot in the live status file (see `live`).
    pub live: &'static crate::live::Slot,
}

impl Recorder {
    pub const fn new() -> Recorder {
        Recorder {
            region: None,
            base: core::ptr::null_mut(),
            cap: 0,
            pos: 0,
            fixed_end: 0,
            prev_end: 0,
            seq: 0,
            next_n: 1,
            index_bits: 0,
            last_coll: (u32::MAX, 0),
            events: 0,
            link: None,
            spares: None,
            broken: false,
            pending_wait: None,
            pb_prev: record::PbState {
                id: 0,
                lc: 0,
                vc: Vec::new(),
            },
            start: 0,
            attention: 0,
            live: &crate::live::SINK,
        }
    }

    /// Sets the time base of this thread's first chunk (before its first
    /// record), so that a record may start before the thread registered.
    pub fn set_origin(&mut self, t: u64) {
        if self.link.is_none() {
            self.prev_end = t;
        }
    }

    /// Makes room for `need` bytes. False if nothing can be recorded.
    #[inline(always)]
    pub fn reserve(&mut self, need: usize) -> bool {
        if self.cap - self.pos >= need && !STOPPED.load(Relaxed) {
            return true;
        }
        self.reserve_slow(need)
    }

    #[cold]
    fn reserve_slow(&mut self, need: usize) -> bool {
        if self.broken || STOPPED.load(Relaxed) {
            self.dropped();
            return false;
        }
        if self.link.is_none() {
            if !self.register() {
                return self.fail();
            }
            if self.cap - self.pos >= need {
                return true;
            }
        }
        if self.region.is_some() {
            self.hand_off(false);
        }
        let Some(spares) = self.spares.as_ref() else {
            return self.fail();
        };
        let region = match spares.try_recv() {
            Ok(r) => r,
            Err(_) => {
                let t0 = clock::now();
                let link = self.link.as_ref().unwrap();
                let Some(r) = crate::flusher::spare::wait(spares, &link.spare) else {
                    return self.fail();
                };
                let t1 = clock::now();
                self.activate(r);
                let link = self.link.as_ref().unwrap();
                link.waits.fetch_add(1, Relaxed);
                link.wait_ns.fetch_add(t1 - t0, Relaxed);
                self.pending_wait = Some((t0, t1));
                self.attention |= ATTENTION_WAIT;
                self.fixed_end = fixed_end(self.cap, self.attention);
                return self.cap - self.pos >= need || self.fail();
            }
        };
        self.activate(region);
        self.cap - self.pos >= need || self.fail()
    }

    fn fail(&mut self) -> bool {
        self.broken = true;
        self.dropped();
        false
    }

    /// Counts an event this thread could not record: for the process (the
    /// summary line) and for the thread (its entry in the trailer).
    fn dropped(&self) {
        DROPPED.fetch_add(1, Relaxed);
        if let Some(link) = &self.link {
            link.dropped.fetch_add(1, Relaxed);
        }
    }

    fn register(&mut self) -> bool {
        let Some(flusher) = flusher() else {
            return false;
        };
        let index = NEXT_THREAD.fetch_add(1, Relaxed);
        let tid = gettid();
        let live = crate::live::slot_for(tid);
        let link = Arc::new(ThreadLink {
            index,
            tid,
            live,
            pos: AtomicUsize::new(0),
            events: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            active: Mutex::new(None),
            spare: Default::default(),
        });
        let (tx, rx) = crossbeam_channel::bounded(2);
        if flusher
            .send(Msg::Register {
                link: link.clone(),
                to_thread: tx,
                spares: rx.clone(),
            })
            .is_err()
        {
            return false;
        }
        crate::flusher::register_link(link.clone());
        self.live = live;
        self.index_bits = record::op_id(index, 0);
        self.link = Some(link);
        self.spares = Some(rx);
        if self.prev_end == 0 {
            self.prev_end = clock::now();
        }
        // The thread's first record names its OS thread id.
        let link = self.link.as_ref().unwrap();
        if let Some(r) = crate::flusher::spare::wait(self.spares.as_ref().unwrap(), &link.spare) {
            self.activate(r);
            let t = self.prev_end;
            if let Some(mut w) = self.begin_special(CODE_DEF_THREAD, t, t, 32) {
                w.put_u(tid);
                w.commit_part();
            }
            true
        } else {
            false
        }
    }

    fn activate(&mut self, mut region: Region) {
        let link = self.link.as_ref().unwrap();
        let offset = region.offset;
        let map = region.bytes();
        map[8..12].copy_from_slice(&link.index.to_le_bytes());
        map[32..40].copy_from_slice(&self.prev_end.to_le_bytes());
        map[40..48].copy_from_slice(&self.seq.to_le_bytes());
        self.seq += 1;
        self.base = map[RECORDS_AT..].as_mut_ptr();
        self.cap = map.len() - RECORDS_AT;
        self.pos = 0;
        self.fixed_end = fixed_end(self.cap, self.attention);
        link.pos.store(0, Relaxed);
        *link.active.lock() = Some((offset, map.len()));
        self.region = Some(region);
    }

    /// Gives the active buffer to the flusher.
    fn hand_off(&mut self, last: bool) {
        let Some(region) = self.region.take() else {
            return;
        };
        let link = self.link.as_ref().unwrap();
        *link.active.lock() = None;
        let used = self.pos;
        self.base = core::ptr::null_mut();
        self.cap = 0;
        self.pos = 0;
        self.fixed_end = fixed_end(self.cap, self.attention);
        if let Some(f) = flusher() {
            let _ = f.send(Msg::Full {
                region,
                used,
                thread: link.index,
                last,
            });
        }
    }

    /// Seals this thread's buffer for good (finalize, thread exit).
    pub fn finish(&mut self) {
        self.attention &= !ATTENTION_WAIT;
        self.fixed_end = fixed_end(self.cap, self.attention);
        if let Some((a, b)) = self.pending_wait.take() {
            if self.reserve(WAIT_RECORD) {
                self.write_wait(a, b);
            }
        }
        self.hand_off(true);
        self.broken = true;
        crate::live::release(core::mem::replace(&mut self.live, &crate::live::SINK));
    }

    /// Advances the thread's clock to a record spanning `t0..t1`; returns
    /// (gap, duration). Times are kept monotone per thread.
    #[inline(always)]
    fn advance(&mut self, t0: u64, t1: u64) -> (u64, u64) {
        record::advance(&mut self.prev_end, t0, t1)
    }

    #[inline(always)]
    fn writer(&mut self) -> Writer<'_> {
        // SAFETY: `pos <= cap`, inside the mapped payload.
        let p = unsafe { self.base.add(self.pos) };
        Writer { rec: self, p }
    }

    /// Starts a call record with room for `need` bytes; `None` if nothing
    /// can be recorded.
    #[inline(always)]
    pub fn begin_call(
        &mut self,
        func: u32,
        t0: u64,
        t1: u64,
        rc: i32,
        need: usize,
    ) -> Option<Writer<'_>> {
        self.begin(FIRST_FUNCTION_CODE + u64::from(func), t0, t1, rc, need)
    }

    /// Starts any record but a continuation: room, then its head.
    #[inline(always)]
    fn begin(&mut self, code: u64, t0: u64, t1: u64, rc: i32, need: usize) -> Option<Writer<'_>> {
        if !self.ready(t0, need) {
            return None;
        }
        let prev = self.prev_end;
        let (gap, dur) = self.advance(t0, t1);
        self.start = prev + gap;
        let mut w = self.writer();
        record::put_head(&mut w, code, gap, dur, rc);
        Some(w)
    }

    /// Starts a call record whose payload is already encoded (the low
    /// `len` bytes of `payload`, at most 8), on the fast path: `head` is
    /// the call's encoded first varint for a successful call
    /// (`fixed_head`). The writer returned may add up to 16 bytes more.
    /// `None`, with nothing written, when the record needs `begin_call`'s
    /// path: a buffer wait to write, too little room, recording stopped.
    /// `lane`: the call is in the main thread's lane (see `lane`), so
    /// recording is known not to be stopped.
    #[inline(always)]
    pub fn fixed_call(
        &mut self,
        head: (u64, usize),
        (t0, t1): (u64, u64),
        payload: (u64, usize),
        lane: bool,
    ) -> Option<Writer<'_>> {
        // (No `start`: a fixed record has no piggyback to code against it.)
        self.fixed_begin::<false>(head, t0, t1, payload, lane)
    }

    /// `fixed_call` for a record that goes on with a piggyback
    /// (`Writer::put_status_scalars`), coded against its start.
    #[inline(always)]
    pub fn fixed_call_pb(
        &mut self,
        head: (u64, usize),
        (t0, t1): (u64, u64),
        payload: (u64, usize),
        lane: bool,
    ) -> Option<Writer<'_>> {
        self.fixed_begin::<true>(head, t0, t1, payload, lane)
    }

    #[inline(always)]
    fn fixed_begin<const START: bool>(
        &mut self,
        head: (u64, usize),
        t0: u64,
        t1: u64,
        (payload, len): (u64, usize),
        lane: bool,
    ) -> Option<Writer<'_>> {
        if self.pos >= self.fixed_end || (!lane && STOPPED.load(Relaxed)) {
            return None;
        }
        let prev = self.prev_end;
        let (gap, dur) = self.advance(t0, t1);
        if START {
            self.start = prev + gap;
        }
        let mut w = self.writer();
        // SAFETY: MAX_FIXED_RECORD bytes are free at the cursor: the head
        // (at most 8 bytes written, `head.1` kept), two varints of at most
        // 10 bytes, 8 bytes written of which `len` are kept, then what the
        // caller adds; bytes past the record are free room, overwritten by
        // the next one.
        unsafe {
            (w.p as *mut u64).write_unaligned(head.0);
            w.p = w.p.add(head.1);
            w.put_u(gap);
            w.put_u(dur);
            (w.p as *mut u64).write_unaligned(payload);
            w.p = w.p.add(len);
        }
        Some(w)
    }

    /// Makes room for a record that starts at `t0`.
    #[inline(always)]
    fn ready(&mut self, t0: u64, need: usize) -> bool {
        let room = if need <= record::MAX_FIXED_RECORD {
            self.pos < self.fixed_end
        } else {
            self.attention == 0 && self.cap - self.pos >= need
        };
        if room && !STOPPED.load(Relaxed) {
            return true;
        }
        self.ready_slow(t0, need)
    }

    /// The slow start of a record. A thread's first record gives its first
    /// chunk's time base. A buffer wait that happened while the previous
    /// record was written is written now, before this record: it came after
    /// that record's call and before this one's. A wait that happens while
    /// making room for this record is written before the next one.
    #[cold]
    fn ready_slow(&mut self, t0: u64, need: usize) -> bool {
        if self.link.is_none() && self.prev_end == 0 {
            self.prev_end = t0;
        }
        let earlier = self.pending_wait.take();
        self.attention &= !ATTENTION_WAIT;
        self.fixed_end = fixed_end(self.cap, self.attention);
        if !self.reserve(need + WAIT_RECORD) {
            return false;
        }
        if let Some((a, b)) = earlier {
            self.write_wait(a, b);
        }
        true
    }

    /// A successful blocking receive's record without a vector clock,
    /// from its fields (`PendingRecv`, whose encoder the reader shares).
    /// False if nothing can be recorded.
    #[inline(always)]
    pub fn write_recv(&mut self, p: &PendingRecv) -> bool {
        if !self.ready(p.t0, record::MAX_FIXED_RECORD) {
            return false;
        }
        let mut prev_end = self.prev_end;
        let (mut id, mut lc) = (self.pb_prev.id, self.pb_prev.lc);
        let mut w = self.writer();
        p.encode(&mut w, &mut prev_end, (&mut id, &mut lc));
        w.commit();
        self.prev_end = prev_end;
        (self.pb_prev.id, self.pb_prev.lc) = (id, lc);
        true
    }

    fn write_wait(&mut self, t0: u64, t1: u64) {
        let (gap, dur) = self.advance(t0, t1);
        let mut w = self.writer();
        record::put_head(&mut w, CODE_BUFFER_WAIT, gap, dur, 0);
        w.commit_part();
    }

    /// Starts a non-call record (definitions, buffer waits).
    pub fn begin_special(
        &mut self,
        code: u64,
        t0: u64,
        t1: u64,
        need: usize,
    ) -> Option<Writer<'_>> {
        self.begin(code, t0, t1, 0, need)
    }

    /// Starts a continuation of the previous record's list.
    pub fn begin_continuation(&mut self, need: usize) -> Option<Writer<'_>> {
        if !self.reserve(need) {
            return None;
        }
        let mut w = self.writer();
        w.put_u(record::CODE_CONTINUATION << 1);
        Some(w)
    }

    /// Publishes the fill to the flusher's view (plain stores: only this
    /// thread writes them).
    #[inline(always)]
    fn publish(&self) {
        debug_assert!(self.link.is_some());
        // SAFETY: only a writer publishes, and a writer is made only where
        // the buffer had room, so `cap > 0`: `activate` gave the buffer,
        // which it does only once `register` set the link (never unset).
        let link = unsafe { self.link.as_ref().unwrap_unchecked() };
        link.pos.store(self.pos, Relaxed);
        link.events.store(self.events, Relaxed);
    }

    /// The id the next created operation gets, and takes it.
    #[inline(always)]
    pub fn take_op(&mut self) -> u64 {
        let id = self.index_bits | self.next_n;
        self.next_n += 1;
        id
    }

    #[inline(always)]
    pub fn next_op(&self) -> u64 {
        self.index_bits | self.next_n
    }

    /// Message id `n` of this thread, which registers first (the id names
    /// its stream).
    #[inline(always)]
    pub fn msg_id(&mut self, n: u64) -> u64 {
        if self.link.is_none() {
            let _ = self.reserve(64);
        }
        self.index_bits | n
    }
}

// Operation and message ids put the thread's index at the same place
// (`Recorder::index_bits`).
const _: () = assert!(record::OP_THREAD_SHIFT == record::MSG_THREAD_SHIFT);

/// One record being written: a cursor into the active buffer, kept in a
/// register while the record is encoded, stored back by `commit`.
pub struct Writer<'a> {
    rec: &'a mut Recorder,
    p: *mut u8,
}

impl Writer<'_> {
    /// The writing thread's live slot (its own: the thread is registered).
    #[inline(always)]
    pub fn live(&self) -> &'static crate::live::Slot {
        self.rec.live
    }

    #[inline(always)]
    pub fn put_status(
        &mut self,
        posted: (i32, i32, Option<u64>),
        actual: (i32, i32, u64),
        extra: u64,
    ) {
        record::put_status(self, posted, actual, extra);
    }

    /// A receive status, with the piggyback the message carried.
    #[inline(always)]
    pub fn put_status_pb(
        &mut self,
        posted: (i32, i32, Option<u64>),
        actual: (i32, i32, u64),
        extra: u64,
        got: Option<&Got>,
    ) {
        match got {
            None => record::put_status(self, posted, actual, extra),
            Some(g) => {
                self.put_status_scalars(posted, actual, extra, (g.id, g.lc, g.sent));
                if !g.vc.is_empty() {
                    let mut prev = core::mem::take(&mut self.rec.pb_prev.vc);
                    record::put_pb_vector(self, &mut prev, &g.vc);
                    self.rec.pb_prev.vc = prev;
                }
            }
        }
    }

    /// `put_status_pb` of a piggyback without a vector clock: its id,
    /// Lamport clock and send time.
    #[inline(always)]
    pub fn put_status_scalars(
        &mut self,
        posted: (i32, i32, Option<u64>),
        actual: (i32, i32, u64),
        extra: u64,
        (id, lc, sent): (u64, u64, u64),
    ) {
        record::put_status(self, posted, actual, extra | record::ST_PIGGYBACK);
        let start = self.rec.start;
        let (mut prev_id, mut prev_lc) = (self.rec.pb_prev.id, self.rec.pb_prev.lc);
        record::put_pb_scalars(self, (&mut prev_id, &mut prev_lc), start, id, lc, sent);
        (self.rec.pb_prev.id, self.rec.pb_prev.lc) = (prev_id, prev_lc);
    }

    /// Takes the id of the operation this record creates.
    #[inline(always)]
    pub fn take_op(&mut self) -> u64 {
        self.rec.take_op()
    }

    #[inline(always)]
    pub fn put_op_ref(&mut self, id: Option<u64>) {
        let next = self.rec.next_op();
        self.put_i(record::op_ref(next, id));
    }

    #[inline(always)]
    pub fn put_coll_seq(&mut self, comm: u32, seq: u64) {
        // No communicator has index u32::MAX: as `None` for the rule.
        let code = record::coll_seq_code(Some(self.rec.last_coll), comm, seq);
        self.rec.last_coll = (comm, seq);
        self.put_u(code);
    }

    #[inline(always)]
    fn store(&mut self) {
        // SAFETY: `p` only moved forward from `base + pos` within the room
        // reserved for this record.
        self.rec.pos = unsafe { self.p.offset_from(self.rec.base) } as usize;
    }

    /// Ends a call record: stores it and counts it.
    #[inline(always)]
    pub fn commit(mut self) {
        self.store();
        let events = self.rec.events + 1;
        self.rec.events = events;
        self.rec.publish();
    }

    /// Ends a definition or continuation record (not an MPI call).
    pub fn commit_part(mut self) {
        self.store();
        self.rec.publish();
    }
}

impl Sink for Writer<'_> {
    /// Appends a varint, without bounds checks: every record reserved its
    /// maximum size first. Two and three bytes are written whole: adding
    /// `v & !0x7f` to `v` moves its bits from 7 up by one, so that each
    /// group of seven starts a byte (and the same again from bit 14).
    #[inline(always)]
    fn put_u(&mut self, mut v: u64) {
        // SAFETY: `reserve` guaranteed room for the whole record, and no
        // record writes more than it reserved (MAX_FIXED_RECORD or the list
        // sizes), so the cursor stays inside the mapped payload: a varint
        // has room for its most bytes, ten, and the three-byte case writes
        // four (the last a zero, overwritten by what follows, or left zero
        // as the room past the records is).
        unsafe {
            if v < 0x80 {
                *self.p = v as u8;
                self.p = self.p.add(1);
                return;
            }
            if v < 1 << 14 {
                let w = v + (v & !0x7f) + 0x80;
                (self.p as *mut u16).write_unaligned(w as u16);
                self.p = self.p.add(2);
                return;
            }
            if v < 1 << 21 {
                let w = v + (v & !0x7f) + ((v & !0x3fff) << 1) + 0x8080;
                (self.p as *mut u32).write_unaligned(w as u32);
                self.p = self.p.add(3);
                return;
            }
            while v >= 0x80 {
                *self.p = (v as u8) | 0x80;
                self.p = self.p.add(1);
                v >>= 7;
            }
            *self.p = v as u8;
            self.p = self.p.add(1);
        }
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// Whether this recorder holds a buffer (it recorded and did not finish).
    pub fn has_buffer(&self) -> bool {
        self.region.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flusher::{Flusher, Totals};
    use pmtrace_format::meta::{self, FunctionDef, Header};
    use pmtrace_format::record::{CODE_DEF_COMM, MAX_FIXED_RECORD};
    use pmtrace_trace::Payload;
    use pmtrace_trace::Record;
    use std::io::Write;

    /// The writer's varints are the format's, byte for byte, at every
    /// length and at each length's edges, and the bytes past one stay zero.
    #[test]
    fn varints_are_the_formats() {
        let mut values = vec![0u64, 1, u64::MAX, u64::MAX - 1];
        for bits in 1..64 {
            let edge = 1u64 << bits;
            values.extend([edge - 1, edge, edge + 1, edge | (edge >> 1) | 0x55]);
        }
        let mut rec = Recorder::new();
        for v in values {
            let mut want = [0u8; 16];
            let mut n = 0;
            pmtrace_format::varint::put_u(&mut want, &mut n, v);
            let mut got = [0u8; 16];
            let mut w = Writer {
                rec: &mut rec,
                p: got.as_mut_ptr(),
            };
            w.put_u(v);
            // SAFETY: `p` moved forward within `got`.
            let len = unsafe { w.p.offset_from(got.as_ptr()) } as usize;
            assert_eq!((len, got), (n, want), "{v:#x}");
        }
    }

    /// The buffer machinery end to end, without MPI: one thread writes more
    /// records than many small buffers hold, plus list records split into
    /// continuations, and the trace reader gets every one back.
    #[test]
    fn records_through_rotating_buffers_all_come_back() {
        let dir =
            std::env::temp_dir().join(format!("pmtrace-recorder-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut header = Header::example();
        header.world_size = 1;
        header.functions = vec![
            FunctionDef::new("MPI_Send", "send"),
            FunctionDef::new("MPI_Startall", "start"),
        ];
        let bytes = pmtrace_format::encode_file_header(&header);
        let path = dir.join(pmtrace_format::rank_file_name(0));
        let mut file = std::fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        file.write_all(&bytes).unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        let flusher = Flusher::new(file, &path, bytes.len() as u64, crate::config::MIN_BUFFER);
        let handle = std::thread::spawn(move || flusher.run(rx));
        set_flusher(tx.clone());

        let mut rec = Recorder::new();
        let mut t = 1_000u64;
        {
            let mut w = rec.begin_special(CODE_DEF_COMM, t, t, 64).unwrap();
            for v in [0u64, 0, 0, 1, 0, 0, 0] {
                w.put_u(v);
            }
            w.commit_part();
        }
        const SENDS: u64 = 100_000;
        for i in 0..SENDS {
            t += 50;
            let mut w = rec.begin_call(0, t, t + 20, 0, MAX_FIXED_RECORD).unwrap();
            w.put_i(1);
            w.put_i((i % 100) as i64);
            w.put_u(0);
            w.put_u(8);
            w.commit();
        }
        // A start of 1024 requests: one record and 15 continuations.
        t += 50;
        let mut w = rec
            .begin_call(1, t, t + 10, 0, MAX_FIXED_RECORD + 64 * 48)
            .unwrap();
        w.put_u(64);
        for _ in 0..64 {
            w.put_i(0);
            w.take_op();
        }
        w.commit();
        for _ in 0..15 {
            let mut w = rec.begin_continuation(32 + 64 * 48).unwrap();
            w.put_u(64);
            for _ in 0..64 {
                w.put_i(0);
                w.take_op();
            }
            w.commit_part();
        }
        rec.finish();
        let (reply_tx, reply_rx) = crossbeam_channel::bounded(1);
        let trailer = Box::new(|t: &Totals| meta::Trailer {
            events: t.events,
            bytes: t.bytes,
            chunks: t.chunks,
            buffer_waits: t.waits,
            buffer_wait_ns: t.wait_ns,
            dropped: 0,
            excluded: Default::default(),
            paused: Default::default(),
            threads: t.threads.clone(),
            end_ns: 0,
            monotonic_start_ns: 0,
            monotonic_end_ns: 0,
            offset_finalize: None,
        });
        tx.send(Msg::Finish {
            trailer,
            reply: reply_tx,
        })
        .unwrap();
        let totals = reply_rx.recv().unwrap();
        handle.join().unwrap();
        assert!(
            totals.chunks > 10,
            "buffers rotated: {} chunks",
            totals.chunks
        );

        let trace = pmtrace_trace::Trace::open(&dir).unwrap();
        let records = &trace.ranks[0].threads[0].records;
        let sends = records
            .iter()
            .filter(|r| matches!(r, Record::Call(c) if matches!(c.payload, Payload::Send { bytes: 8, .. })))
            .count() as u64;
        assert_eq!(sends, SENDS);
        let started: usize = records
            .iter()
            .filter_map(|r| match r {
                Record::Call(c) => match &c.payload {
                    Payload::Start { started } => Some(started.len()),
                    _ => None,
                },
                _ => None,
            })
            .sum();
        assert_eq!(started, 64 * 16);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
