//! A blocking receive's record fields, and the pending slot of traces
//! written by earlier runtimes.
//!
//! [`PendingRecv`] is a successful blocking receive without a vector
//! clock, and [`PendingRecv::encode`] its record: the runtime writes it so
//! (`Recorder::write_recv`), and a reader decodes a slot's receive with it.
//!
//! Runtimes before issue 40 (session 36) did not encode the receive's
//! record when the call returned, on the critical path of the
//! application's next send: they stored its fields raw, at fixed places,
//! in the *pending slot* of its chunk (the bytes between the chunk header
//! and the records), and encoded the record at the thread's next record,
//! after that record's MPI call. The record was then exactly the one it
//! would have written at once, at the same place in the stream. That cost
//! more instructions than it saved time (about 100 instructions a receive
//! against 2 to 6 ns one way, measured); today's runtime writes no slot,
//! and readers still read traces that have one.
//!
//! A run that dies in between keeps the receive: the slot's last field is
//! the record position the receive belongs at, plus one, written after all
//! the others. A reader that finds a chunk's records ending exactly there
//! (an open chunk scanned to its first zero byte, or a chunk sealed by
//! another thread at `MPI_Finalize` or `MPI_Abort`) appends the slot's
//! record. Anywhere else the position is stale (the record was written
//! since) and the slot is ignored.
//!
//! ```text
//! slot (PENDING_LEN bytes, little-endian; zero in a fresh chunk):
//!   0 kind u32 (1: a receive)   4 func u32        8 t0 u64     16 t1 u64
//!  24 posted u64               32 bytes u64      40 pb id u64  48 pb lc u64
//!  56 pb sent u64              64 comm u32       68 src i32    72 tag i32
//!  76 actual src i32           80 actual tag i32 84 flags u32 (1: piggyback)
//!  88 reserved                120 at u64: record position + 1, 0 = none
//! ```

use crate::record::{advance, put_head, put_pb_scalars, put_status, FIRST_FUNCTION_CODE};
use crate::record::{Kind, Record, ThreadDecoder, MAX_FIXED_RECORD, ST_PIGGYBACK};
use crate::varint::{Sink, SliceSink};
use crate::FormatError;

/// Bytes of the pending slot at the start of a chunk's payload.
pub const PENDING_LEN: usize = 128;
/// Offset of the position field, the one written last.
pub const PENDING_AT: usize = 120;

const KIND_RECV: u32 = 1;
const FLAG_PB: u32 = 1;

fn put32(slot: &mut [u8; PENDING_AT], at: usize, v: u32) {
    slot[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(slot: &mut [u8; PENDING_AT], at: usize, v: u64) {
    slot[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// The fields of a successful blocking receive (kind `recv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PendingRecv {
    pub func: u32,
    pub t0: u64,
    pub t1: u64,
    pub src: i32,
    pub tag: i32,
    pub comm: u32,
    pub posted: u64,
    /// Source, tag and bytes of the status.
    pub actual: (i32, i32, u64),
    /// The piggyback the message carried: id, Lamport clock, send time.
    pub pb: Option<(u64, u64, u64)>,
}

impl PendingRecv {
    /// Writes every field but the position (see [`PENDING_AT`]): a slot
    /// as earlier runtimes left it (the simulator writes them, so that the
    /// reader's side stays tested).
    pub fn store(&self, slot: &mut [u8; PENDING_AT]) {
        let (id, lc, sent) = self.pb.unwrap_or_default();
        put32(slot, 0, KIND_RECV);
        put32(slot, 4, self.func);
        put64(slot, 8, self.t0);
        put64(slot, 16, self.t1);
        put64(slot, 24, self.posted);
        put64(slot, 32, self.actual.2);
        put64(slot, 40, id);
        put64(slot, 48, lc);
        put64(slot, 56, sent);
        put32(slot, 64, self.comm);
        put32(slot, 68, self.src as u32);
        put32(slot, 72, self.tag as u32);
        put32(slot, 76, self.actual.0 as u32);
        put32(slot, 80, self.actual.1 as u32);
        put32(slot, 84, if self.pb.is_some() { FLAG_PB } else { 0 });
    }

    /// The receive a slot holds, if it belongs at record position `end`.
    #[inline]
    pub fn load(slot: &[u8], end: u64) -> Option<PendingRecv> {
        let slot: &[u8; PENDING_LEN] = slot.get(..PENDING_LEN)?.try_into().ok()?;
        let u32_at = |o: usize| u32::from_le_bytes(slot[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(slot[o..o + 8].try_into().unwrap());
        if u64_at(PENDING_AT) != end.checked_add(1)? || u32_at(0) != KIND_RECV {
            return None;
        }
        Some(PendingRecv {
            func: u32_at(4),
            t0: u64_at(8),
            t1: u64_at(16),
            src: u32_at(68) as i32,
            tag: u32_at(72) as i32,
            comm: u32_at(64),
            posted: u64_at(24),
            actual: (u32_at(76) as i32, u32_at(80) as i32, u64_at(32)),
            pb: (u32_at(84) & FLAG_PB != 0).then(|| (u64_at(40), u64_at(48), u64_at(56))),
        })
    }

    /// Writes the receive's record, advancing the thread's time and
    /// piggyback state as every record does: the bytes are those the
    /// runtime writes for a receive recorded at once (kind `recv`).
    #[inline(always)]
    pub fn encode<S: Sink>(&self, out: &mut S, prev_end: &mut u64, pb_prev: (&mut u64, &mut u64)) {
        let (gap, dur) = advance(prev_end, self.t0, self.t1);
        let start = *prev_end - dur;
        put_head(out, FIRST_FUNCTION_CODE + u64::from(self.func), gap, dur, 0);
        out.put_i(i64::from(self.src));
        out.put_i(i64::from(self.tag));
        out.put_u(u64::from(self.comm));
        out.put_u(self.posted);
        let posted = (self.src, self.tag, Some(self.posted));
        match self.pb {
            None => put_status(out, posted, self.actual, 0),
            Some((id, lc, sent)) => {
                put_status(out, posted, self.actual, ST_PIGGYBACK);
                put_pb_scalars(out, pb_prev, start, id, lc, sent);
            }
        }
    }
}

impl ThreadDecoder {
    /// The record of a pending slot found at the end of the thread's
    /// records, decoded as if it had been written there.
    pub fn pending(&mut self, p: &PendingRecv, kinds: &[Kind]) -> Result<Record, FormatError> {
        if kinds.get(p.func as usize) != Some(&Kind::Recv) {
            return Err(FormatError::Corrupt(
                "pending slot of a function that is no receive".into(),
            ));
        }
        let mut buf = [0u8; MAX_FIXED_RECORD];
        let mut sink = SliceSink {
            buf: &mut buf,
            pos: 0,
        };
        let (mut prev_end, mut id, mut lc) = self.encoder_state();
        p.encode(&mut sink, &mut prev_end, (&mut id, &mut lc));
        let len = sink.pos;
        self.record(&buf[..len], &mut 0, kinds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Call, Payload, Pb, Status};

    const KINDS: &[Kind] = &[Kind::Send, Kind::Recv];

    fn sample() -> PendingRecv {
        PendingRecv {
            func: 1,
            t0: 1_000,
            t1: 1_450,
            src: -1,
            tag: 7,
            comm: 2,
            posted: 64,
            actual: (3, 7, 8),
            pb: Some((5u64 << 40 | 9, 42, 900)),
        }
    }

    fn slot_of(p: &PendingRecv, at: u64) -> [u8; PENDING_LEN] {
        let mut slot = [0u8; PENDING_LEN];
        p.store((&mut slot[..PENDING_AT]).try_into().unwrap());
        slot[PENDING_AT..].copy_from_slice(&at.to_le_bytes());
        slot
    }

    #[test]
    fn slot_round_trips_only_at_its_position() {
        let p = sample();
        let slot = slot_of(&p, 38);
        assert_eq!(PendingRecv::load(&slot, 37), Some(p));
        assert_eq!(PendingRecv::load(&slot, 36), None);
        assert_eq!(PendingRecv::load(&slot, 38), None);
        assert_eq!(PendingRecv::load(&[0u8; PENDING_LEN], 0), None);
        assert_eq!(PendingRecv::load(&slot[..100], 37), None);
        let plain = PendingRecv { pb: None, ..p };
        assert_eq!(PendingRecv::load(&slot_of(&plain, 1), 0), Some(plain));
    }

    #[test]
    fn encoded_record_decodes_to_the_receive() {
        let p = sample();
        let (mut prev_end, mut id, mut lc) = (600, 0, 0);
        let mut buf = [0u8; MAX_FIXED_RECORD];
        let mut sink = SliceSink {
            buf: &mut buf,
            pos: 0,
        };
        p.encode(&mut sink, &mut prev_end, (&mut id, &mut lc));
        assert_eq!(prev_end, 1_450);
        assert_eq!((id, lc), (5u64 << 40 | 9, 42));
        let len = sink.pos;
        let mut d = ThreadDecoder::new(0);
        d.start_chunk(600);
        let r = d.record(&buf[..len], &mut 0, KINDS).unwrap();
        let want = Record::Call(Call {
            func: 1,
            t_start: 1_000,
            t_end: 1_450,
            rc: 0,
            payload: Payload::Recv {
                src: -1,
                tag: 7,
                comm: 2,
                posted: 64,
                status: Some(Status {
                    source: Some(3),
                    tag: Some(7),
                    bytes: Some(8),
                    pb: Some(Pb {
                        id: 5u64 << 40 | 9,
                        lc: 42,
                        sent: 900,
                        vc: None,
                    }),
                    ..Status::default()
                }),
                op: None,
            },
        });
        assert_eq!(r, want);

        // The same through a slot at the end of a thread's records, after a
        // record that ended later than the receive started: the receive is
        // moved to start there, as the writer's clock rule does.
        let mut d = ThreadDecoder::new(0);
        d.start_chunk(1_200);
        let r = d.pending(&p, KINDS).unwrap();
        let Record::Call(c) = r else { panic!("{r:?}") };
        assert_eq!((c.t_start, c.t_end), (1_200, 1_450));
        let Payload::Recv { status, .. } = c.payload else {
            panic!()
        };
        assert_eq!(status.unwrap().pb.unwrap().sent, 900);
    }

    #[test]
    fn a_slot_of_another_kind_of_function_is_corrupt() {
        let p = PendingRecv {
            func: 0,
            ..sample()
        };
        let mut d = ThreadDecoder::new(0);
        assert!(matches!(d.pending(&p, KINDS), Err(FormatError::Corrupt(_))));
        let p = PendingRecv {
            func: 9,
            ..sample()
        };
        assert!(d.pending(&p, KINDS).is_err());
    }
}
