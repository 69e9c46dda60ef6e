//! The pmtrace trace format, shared by the capture runtime (writer) and the
//! CLI (reader). No `unsafe`: the runtime hands this crate plain byte slices
//! that happen to live in memory-mapped file pages.
//!
//! # A trace directory
//!
//! ```text
//! DIR/
//!   rank-00000.pmt     one file per rank: header, then chunks (below)
//!   rank-00000.live    what the rank is doing now (see [`live`])
//!   rank-00001.pmt
//!   ...
//! ```
//!
//! # A rank file
//!
//! ```text
//!  offset 0                                    header_capacity (page multiple)
//!  +-------------------------------------------+---------------+---------------+--
//!  | "PMTRACE\0" | ver u32 | len u32 | crc u32 | chunk         | chunk         | ...
//!  | header JSON (len bytes)   ... zero pad    | (64 B header  | (any thread)  |
//!  +-------------------------------------------+  + records)   +---------------+--
//! ```
//!
//! All integers in fixed-size fields are little-endian. The header JSON
//! ([`meta::Header`]) makes the file self-describing: it names every traced
//! function and the *kind* of its record payload, the timer, the host, and,
//! on rank 0, the run (command line, configuration).
//!
//! # Chunks
//!
//! A chunk is one buffer of one thread. The runtime maps a page-aligned region
//! of the file, the application thread writes records straight into it, and
//! the background writer seals it when it is full:
//!
//! ```text
//!  0  magic "PMTC"     4  kind u32 (1 events, 2 trailer)   8  thread u32
//! 12  state u32 (0 open, 1 sealed)  16 capacity u64 (whole region, bytes)
//! 24  used u64 (record bytes)       32 base_ns u64 (time base of first record)
//! 40  seq u64 (per-thread chunk number)  48 crc32 u32 of the records[..used]
//! 52  slot u32 (bytes of the pending slot: 0, or pending::PENDING_LEN)
//! 56  reserved u64    64 pending slot     64 + slot: records ...
//!
//!  state machine:  free --(mapped, handed to a thread)--> open (being written)
//!                  open --(full or finalize; writer stores used+crc)--> sealed
//! ```
//!
//! An *open* chunk (a run that died) is still readable: records are scanned
//! until the first zero byte, since fresh file pages are zero-filled and no
//! record starts with a zero byte. Runtimes before issue 40 wrote a
//! pending slot (`slot` = `pending::PENDING_LEN`) holding a blocking
//! receive whose record was not encoded yet; see [`pending`] for when a
//! reader appends it. Today's runtime writes its records at once and no
//! slot (`slot` = 0).
//!
//! A thread's chunks are numbered by `seq` from 0 without gaps; they can lie
//! anywhere in the file, interleaved with other threads' chunks. A chunk
//! whose thread is [`UNOWNED_THREAD`] is a spare buffer no thread needed: it
//! holds no records. The trailer chunk is last.
//!
//! # Records
//!
//! See [`record`] for the encoding: a varint head (record code and error
//! bit), the gap since the thread's previous record ended, the duration, and a
//! payload whose layout the function's [`Kind`] fixes. One record per MPI call.

pub mod chunk;
pub mod coll;
pub mod error;
pub mod live;
pub mod meta;
pub mod pending;
pub mod record;
pub mod sim;
pub mod varint;

pub use chunk::UNOWNED_THREAD;
pub use chunk::{payload_crc, ChunkHeader, ChunkKind, ChunkState, CHUNK_HEADER_LEN, PAGE};
pub use error::FormatError;
pub use record::{Kind, Status};

/// The version of the record and chunk layout. Readers refuse other versions.
pub const FORMAT_VERSION: u32 = 1;

/// Magic at the start of every rank file.
pub const FILE_MAGIC: &[u8; 8] = b"PMTRACE\0";

/// Length of the fixed part of the file header, before the JSON.
pub const FILE_PREFIX_LEN: usize = 20;

/// File name of one rank's trace inside a trace directory.
pub fn rank_file_name(rank: u32) -> String {
    format!("rank-{rank:05}.pmt")
}

/// Builds the file header: prefix plus JSON, zero-padded to a page multiple.
pub fn encode_file_header(header: &meta::Header) -> Vec<u8> {
    let json = serde_json::to_vec(header).expect("header serializes");
    let mut out = Vec::with_capacity(FILE_PREFIX_LEN + json.len());
    out.extend_from_slice(FILE_MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&json).to_le_bytes());
    out.extend_from_slice(&json);
    let padded = out.len().div_ceil(PAGE) * PAGE;
    out.resize(padded, 0);
    out
}

/// Parses a file header; returns it and the offset of the first chunk.
pub fn decode_file_header(file: &[u8]) -> Result<(meta::Header, usize), FormatError> {
    if file.len() < FILE_PREFIX_LEN {
        return Err(FormatError::Truncated("file header".into()));
    }
    if &file[..8] != FILE_MAGIC {
        return Err(FormatError::Corrupt(
            "not a pmtrace rank file (bad magic)".into(),
        ));
    }
    let version = u32::from_le_bytes(file[8..12].try_into().unwrap());
    if version != FORMAT_VERSION {
        return Err(FormatError::Version(version));
    }
    let len = u32::from_le_bytes(file[12..16].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(file[16..20].try_into().unwrap());
    let end = FILE_PREFIX_LEN
        .checked_add(len)
        .ok_or_else(|| FormatError::Corrupt("header length".into()))?;
    if end > file.len() {
        return Err(FormatError::Truncated("file header".into()));
    }
    let json = &file[FILE_PREFIX_LEN..end];
    if crc32fast::hash(json) != crc {
        return Err(FormatError::Corrupt("file header checksum mismatch".into()));
    }
    let header: meta::Header = serde_json::from_slice(json)
        .map_err(|e| FormatError::Corrupt(format!("file header: {e}")))?;
    Ok((header, end.div_ceil(PAGE) * PAGE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_header_round_trips_and_is_page_padded() {
        let h = meta::Header::example();
        let bytes = encode_file_header(&h);
        assert_eq!(bytes.len() % PAGE, 0);
        let (back, first_chunk) = decode_file_header(&bytes).unwrap();
        assert_eq!(back, h);
        assert_eq!(first_chunk, bytes.len());
    }

    #[test]
    fn file_header_rejects_flipped_bit() {
        let mut bytes = encode_file_header(&meta::Header::example());
        bytes[FILE_PREFIX_LEN + 3] ^= 0x10;
        assert!(matches!(
            decode_file_header(&bytes),
            Err(FormatError::Corrupt(_))
        ));
    }

    #[test]
    fn file_header_rejects_truncation() {
        let bytes = encode_file_header(&meta::Header::example());
        assert!(matches!(
            decode_file_header(&bytes[..30]),
            Err(FormatError::Truncated(_))
        ));
    }
}
