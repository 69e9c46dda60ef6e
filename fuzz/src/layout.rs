//! The compact form of a trace directory that the `trace` target takes,
//! and the rank files it stands for.
//!
//! ```text
//!  input := mode u8, then
//!    mode even: rank-00000.pmt, byte for byte (nothing is fixed up);
//!    mode odd:  sections, each  tag u8 | len u32 LE | body[len]
//!      'H'  a header JSON as it is: starts the next rank file
//!      'P'  a JSON object merged into the base header (ring's rank 0):
//!           starts the next rank file (not an object: taken as 'H')
//!      'C'  a chunk of the current file: head[16], pending slot, records
//!             head: kind u8, thread u8 (255: unowned), state u8,
//!                   slot u8 (0: none), seq u8, extra pages u8,
//!                   flags u8 (1: a wrong checksum), used delta i8,
//!                   base_ns u64 LE
//!      'T'  cuts u32 LE bytes off the end of the current file
//! ```
//!
//! The files' prefixes, page padding, chunk sizes and checksums are made
//! right unless the input says otherwise, so that the fuzzer's mutations
//! reach the decoding rather than die at a checksum.

use pmtrace_format::pending::PENDING_LEN;
use pmtrace_format::{ChunkHeader, ChunkState, FILE_MAGIC, FORMAT_VERSION, PAGE, UNOWNED_THREAD};

pub const HEAD_LEN: usize = 16;

/// The rank files an input stands for, in rank order; and the bytes they
/// hold in all (for the allocation bound).
pub fn expand(input: &[u8], base_header: &serde_json::Value) -> Vec<Vec<u8>> {
    let Some((&mode, rest)) = input.split_first() else {
        return vec![];
    };
    if mode % 2 == 0 {
        return vec![rest.to_vec()];
    }
    let mut files: Vec<Vec<u8>> = Vec::new();
    let mut at = 0;
    while at + 5 <= rest.len() {
        let tag = rest[at];
        let len = u32::from_le_bytes(rest[at + 1..at + 5].try_into().unwrap()) as usize;
        let body = &rest[at + 5..rest.len().min(at + 5 + len)];
        at = at.saturating_add(5).saturating_add(len);
        match tag {
            b'H' => files.push(header_file(body)),
            b'P' => {
                let json = match serde_json::from_slice::<serde_json::Value>(body) {
                    Ok(serde_json::Value::Object(patch)) => {
                        let mut h = base_header.clone();
                        for (k, v) in patch {
                            h[k] = v;
                        }
                        serde_json::to_vec(&h).unwrap()
                    }
                    _ => body.to_vec(),
                };
                files.push(header_file(&json));
            }
            b'C' => {
                if let Some(f) = files.last_mut() {
                    push_chunk(f, body);
                }
            }
            b'T' => {
                if let Some(f) = files.last_mut() {
                    let cut = body
                        .get(..4)
                        .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()) as usize);
                    f.truncate(f.len().saturating_sub(cut));
                }
            }
            _ => {}
        }
    }
    files
}

/// A file's header: prefix, the JSON, zero padding to a page.
fn header_file(json: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(PAGE);
    f.extend_from_slice(FILE_MAGIC);
    f.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    f.extend_from_slice(&(json.len() as u32).to_le_bytes());
    f.extend_from_slice(&crc32fast_hash(json).to_le_bytes());
    f.extend_from_slice(json);
    f.resize(f.len().div_ceil(PAGE) * PAGE, 0);
    f
}

fn crc32fast_hash(b: &[u8]) -> u32 {
    pmtrace_format::payload_crc(b)
}

/// Appends the chunk a 'C' body stands for.
fn push_chunk(f: &mut Vec<u8>, body: &[u8]) {
    let mut head = [0u8; HEAD_LEN];
    let n = body.len().min(HEAD_LEN);
    head[..n].copy_from_slice(&body[..n]);
    let rest = body.get(HEAD_LEN..).unwrap_or(&[]);
    let slot = if head[3] == 0 { 0 } else { PENDING_LEN };
    let (pending, records) = rest.split_at(rest.len().min(slot));
    let used = (records.len() as i64 + i64::from(head[7] as i8)).max(0) as u64;
    let capacity =
        (64 + slot + records.len()).div_ceil(PAGE).max(1) * PAGE + usize::from(head[5] % 16) * PAGE;
    let crc = pmtrace_format::payload_crc(records) ^ u32::from(head[6] & 1);
    let mut b = [0u8; 64];
    b[0..4].copy_from_slice(b"PMTC");
    b[4..8].copy_from_slice(&u32::from(head[0]).to_le_bytes());
    let thread = if head[1] == 255 {
        UNOWNED_THREAD
    } else {
        u32::from(head[1])
    };
    b[8..12].copy_from_slice(&thread.to_le_bytes());
    b[12..16].copy_from_slice(&u32::from(head[2]).to_le_bytes());
    b[16..24].copy_from_slice(&(capacity as u64).to_le_bytes());
    b[24..32].copy_from_slice(&used.to_le_bytes());
    b[32..40].copy_from_slice(&head[8..16]);
    b[40..48].copy_from_slice(&u64::from(head[4]).to_le_bytes());
    b[48..52].copy_from_slice(&crc.to_le_bytes());
    b[52..56].copy_from_slice(&(slot as u32).to_le_bytes());
    let start = f.len();
    f.extend_from_slice(&b);
    f.extend_from_slice(pending);
    f.resize(start + 64 + slot, 0);
    f.extend_from_slice(records);
    f.resize(start + capacity, 0);
}

/// The compact form of a rank file (for seeds): its header as a patch of
/// `base_header`, and each chunk's records.
pub fn compact(file: &[u8], base_header: &serde_json::Value, out: &mut Vec<u8>) -> Option<()> {
    let (header, first) = pmtrace_format::decode_file_header(file).ok()?;
    let json = serde_json::to_value(&header).ok()?;
    let mut patch = serde_json::Map::new();
    for (k, v) in json.as_object()? {
        if base_header.get(k) != Some(v) {
            patch.insert(k.clone(), v.clone());
        }
    }
    section(out, b'P', &serde_json::to_vec(&patch).ok()?);
    let mut at = first;
    while at < file.len() {
        let h = ChunkHeader::decode(&file[at..], at, file.len()).ok()?;
        let region = &file[at..at + h.capacity as usize];
        let from = h.records_offset() as usize;
        let records = match h.state {
            ChunkState::Sealed => &region[from..from + h.used as usize],
            ChunkState::Open => {
                let end = region.iter().rposition(|&b| b != 0).map_or(from, |i| i + 1);
                &region[from..end.max(from)]
            }
        };
        let mut body = vec![
            h.kind as u8,
            if h.thread == UNOWNED_THREAD {
                255
            } else {
                h.thread.min(254) as u8
            },
            h.state as u8,
            u8::from(h.slot != 0),
            h.seq.min(255) as u8,
            0,
            0,
            0,
        ];
        body.extend_from_slice(&h.base_ns.to_le_bytes());
        if h.slot != 0 {
            body.extend_from_slice(&region[64..64 + h.slot as usize]);
        }
        body.extend_from_slice(records);
        section(out, b'C', &body);
        at += h.capacity as usize;
    }
    Some(())
}

pub fn section(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
}
