//! The 64-byte chunk header (layout in the crate docs).

use crate::FormatError;

pub const PAGE: usize = 4096;
pub const CHUNK_HEADER_LEN: usize = 64;
pub const CHUNK_MAGIC: &[u8; 4] = b"PMTC";
/// Thread index of a chunk no thread ever wrote (a spare buffer the run did
/// not need); such chunks carry no records.
pub const UNOWNED_THREAD: u32 = u32::MAX;

/// The checksum a sealed chunk stores in `crc`: crc32 of `payload[..used]`.
pub fn payload_crc(payload: &[u8]) -> u32 {
    crc32fast::hash(payload)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkKind {
    Events = 1,
    Trailer = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkState {
    /// Being written, or the writer never sealed it (the run died).
    Open = 0,
    Sealed = 1,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    pub kind: ChunkKind,
    pub thread: u32,
    pub state: ChunkState,
    pub capacity: u64,
    pub used: u64,
    pub base_ns: u64,
    pub seq: u64,
    pub crc: u32,
    /// Bytes of the pending slot between the header and the records.
    pub slot: u32,
}

impl ChunkHeader {
    /// An events chunk of `capacity` bytes that no thread owns (yet), open
    /// and empty: a buffer the runtime has not handed out, or gave back.
    pub fn unowned(capacity: u64, slot: u32) -> ChunkHeader {
        ChunkHeader {
            kind: ChunkKind::Events,
            thread: UNOWNED_THREAD,
            state: ChunkState::Open,
            capacity,
            used: 0,
            base_ns: 0,
            seq: 0,
            crc: 0,
            slot,
        }
    }

    pub fn encode(&self) -> [u8; CHUNK_HEADER_LEN] {
        let mut b = [0u8; CHUNK_HEADER_LEN];
        b[0..4].copy_from_slice(CHUNK_MAGIC);
        b[4..8].copy_from_slice(&(self.kind as u32).to_le_bytes());
        b[8..12].copy_from_slice(&self.thread.to_le_bytes());
        b[12..16].copy_from_slice(&(self.state as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.capacity.to_le_bytes());
        b[24..32].copy_from_slice(&self.used.to_le_bytes());
        b[32..40].copy_from_slice(&self.base_ns.to_le_bytes());
        b[40..48].copy_from_slice(&self.seq.to_le_bytes());
        b[48..52].copy_from_slice(&self.crc.to_le_bytes());
        b[52..56].copy_from_slice(&self.slot.to_le_bytes());
        b
    }

    /// Offset of the first record from the start of the chunk.
    pub fn records_offset(&self) -> u64 {
        CHUNK_HEADER_LEN as u64 + u64::from(self.slot)
    }

    /// Bytes the chunk has room for in records.
    pub fn records_capacity(&self) -> u64 {
        self.capacity - self.records_offset()
    }

    /// Parses and checks a header found at file offset `at` of a file of
    /// `file_len` bytes.
    pub fn decode(b: &[u8], at: usize, file_len: usize) -> Result<Self, FormatError> {
        if b.len() < CHUNK_HEADER_LEN {
            return Err(FormatError::Truncated(format!("chunk at offset {at}")));
        }
        if &b[0..4] != CHUNK_MAGIC {
            return Err(FormatError::Corrupt(format!(
                "bad chunk magic at offset {at}"
            )));
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let kind = match u32_at(4) {
            1 => ChunkKind::Events,
            2 => ChunkKind::Trailer,
            k => {
                return Err(FormatError::Corrupt(format!(
                    "unknown chunk kind {k} at offset {at}"
                )))
            }
        };
        let state = match u32_at(12) {
            0 => ChunkState::Open,
            1 => ChunkState::Sealed,
            s => {
                return Err(FormatError::Corrupt(format!(
                    "bad chunk state {s} at offset {at}"
                )))
            }
        };
        let capacity = u64_at(16);
        let used = u64_at(24);
        if capacity < PAGE as u64 || capacity % PAGE as u64 != 0 {
            return Err(FormatError::Corrupt(format!(
                "bad chunk size {capacity} at offset {at}"
            )));
        }
        if at as u64 + capacity > file_len as u64 {
            return Err(FormatError::Truncated(format!("chunk at offset {at}")));
        }
        let slot = u32_at(52);
        if slot != 0 && slot as usize != crate::pending::PENDING_LEN {
            return Err(FormatError::Corrupt(format!(
                "bad pending slot size {slot} at offset {at}"
            )));
        }
        if used > capacity - CHUNK_HEADER_LEN as u64 - u64::from(slot) {
            return Err(FormatError::Corrupt(format!(
                "chunk fill {used} exceeds its size at offset {at}"
            )));
        }
        Ok(ChunkHeader {
            kind,
            thread: u32_at(8),
            state,
            capacity,
            used,
            base_ns: u64_at(32),
            seq: u64_at(40),
            crc: u32_at(48),
            slot,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ChunkHeader {
        ChunkHeader {
            kind: ChunkKind::Events,
            thread: 3,
            state: ChunkState::Sealed,
            capacity: 8192,
            used: 100,
            base_ns: 123456789,
            seq: 7,
            crc: 0xdeadbeef,
            slot: 128,
        }
    }

    #[test]
    fn header_round_trips() {
        let h = sample();
        assert_eq!(
            ChunkHeader::decode(&h.encode(), 4096, 4096 + 8192).unwrap(),
            h
        );
    }

    #[test]
    fn header_past_end_of_file_is_truncation() {
        let h = sample();
        let err = ChunkHeader::decode(&h.encode(), 4096, 4096 + 4096).unwrap_err();
        assert!(matches!(err, FormatError::Truncated(_)));
    }

    #[test]
    fn fill_beyond_capacity_is_corruption() {
        let mut h = sample();
        h.used = 9000;
        let err = ChunkHeader::decode(&h.encode(), 0, 1 << 20).unwrap_err();
        assert!(matches!(err, FormatError::Corrupt(_)));
        // The slot's bytes are not room for records.
        h.used = 8192 - 64 - 128 + 1;
        assert!(matches!(
            ChunkHeader::decode(&h.encode(), 0, 1 << 20),
            Err(FormatError::Corrupt(_))
        ));
        h.used -= 1;
        let ok = ChunkHeader::decode(&h.encode(), 0, 1 << 20).unwrap();
        assert_eq!((ok.records_offset(), ok.records_capacity()), (192, 8000));
    }

    #[test]
    fn pending_slot_of_another_size_is_corruption() {
        let mut h = sample();
        h.slot = 64;
        let err = ChunkHeader::decode(&h.encode(), 0, 1 << 20).unwrap_err();
        assert!(matches!(err, FormatError::Corrupt(_)));
        h.slot = 0;
        assert_eq!(ChunkHeader::decode(&h.encode(), 0, 1 << 20).unwrap(), h);
    }
}
