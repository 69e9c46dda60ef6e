//! Synchronized times, kept beside the rank files in `DIR/sync.pmts`.
//!
//! ```text
//!  offset  size  field
//!  0       8     magic "PMTSYNC1"
//!  8       4     JSON length n (u32, little endian)
//!  12      n     JSON: the sync report and, per rank, the rank file's size
//!                and each thread's record count (to spot a stale file)
//!  12+n    ...   per rank, per thread (in file order), per stamp
//!                (2·record + 0 start, + 1 end): zigzag varint of
//!                shift − previous shift, shift = synced − recorded
//!  end−4   4     crc32 of everything before it
//! ```
//!
//! Shifts change slowly along a thread, so most take one byte. The file is
//! written beside the trace and renamed into place; the rank files are
//! never changed.

use std::fs;
use std::path::{Path, PathBuf};

use pmtrace_format::chunk::payload_crc;
use pmtrace_format::varint::{get_i, put_i, MAX_VARINT};
use serde::{Deserialize, Serialize};

use super::graph::{Graph, Times};
use super::SyncReport;
use pmtrace_trace::error::ReadError;
use pmtrace_trace::read::{EventRef, Thread, Trace};
use pmtrace_trace::Events;

/// The name of the file `pmtrace sync` writes in a trace directory.
pub const SYNC_FILE: &str = "sync.pmts";
const MAGIC: &[u8; 8] = b"PMTSYNC1";

/// Synchronized times of a whole trace.
#[derive(Debug, Clone)]
pub struct Synced {
    pub report: SyncReport,
    /// World rank of `times[0]` (a block's first rank, in parallel).
    first: u32,
    /// [rank − first][thread slot], by stamp position.
    times: Vec<Vec<ThreadTimes>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Meta {
    report: SyncReport,
    ranks: Vec<RankPrint>,
}

/// What the times were computed for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankPrint {
    pub file_bytes: u64,
    /// (thread index, records) per thread.
    pub threads: Vec<(u32, u64)>,
}

/// The start of a sync file: magic, the JSON's length, the JSON (the
/// report and every rank's print).
pub fn file_head(report: &SyncReport, ranks: Vec<RankPrint>) -> Vec<u8> {
    let meta = Meta {
        report: report.clone(),
        ranks,
    };
    let json = serde_json::to_vec(&meta).expect("the report serializes");
    let mut out = Vec::with_capacity(16 + json.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    out
}

/// One thread's part of a sync file: each stamp's shift from its recorded
/// time (`times` by stamp position), as the zigzag varint of its change.
pub fn encode_shifts(records: &Events, times: &[u64]) -> Vec<u8> {
    encode(times.len(), |p| times[p] as i64 - records.stamp(p) as i64)
}

fn encode(n: usize, shift: impl Fn(usize) -> i64) -> Vec<u8> {
    let mut part = Vec::with_capacity(n + 16);
    let mut buf = [0u8; MAX_VARINT];
    let mut prev = 0i64;
    for p in 0..n {
        let shift = shift(p);
        let mut k = 0;
        put_i(&mut buf, &mut k, shift - prev);
        part.extend_from_slice(&buf[..k]);
        prev = shift;
    }
    part
}

/// The print of each rank of `trace` (or of a block of it).
pub fn prints(trace: &Trace) -> Vec<RankPrint> {
    trace
        .ranks
        .iter()
        .map(|r| RankPrint {
            file_bytes: r.file_bytes,
            threads: r
                .threads
                .iter()
                .map(|t| (t.index, t.records.len() as u64))
                .collect(),
        })
        .collect()
}

/// One thread's synchronized times by stamp position (2·record + end):
/// each one's shift from its recorded time, in 32 bits where every shift
/// of the thread fits (8 bytes an event), else the times themselves.
#[derive(Debug, Clone)]
pub enum ThreadTimes {
    Shifts(Vec<i32>),
    Full(Vec<u64>),
}

impl ThreadTimes {
    fn new(records: &Events, times: Vec<u64>) -> ThreadTimes {
        let mut shifts = Vec::with_capacity(times.len());
        for (p, &v) in times.iter().enumerate() {
            match i32::try_from(v as i64 - records.stamp(p) as i64) {
                Ok(s) => shifts.push(s),
                Err(_) => return ThreadTimes::Full(times),
            }
        }
        ThreadTimes::Shifts(shifts)
    }

    /// The time of stamp position `p` of `records` (this thread's).
    #[inline]
    pub fn get(&self, records: &Events, p: usize) -> Option<u64> {
        match self {
            ThreadTimes::Shifts(v) => {
                let shift = *v.get(p)?;
                Some((records.stamp(p) as i64 + i64::from(shift)) as u64)
            }
            ThreadTimes::Full(v) => v.get(p).copied(),
        }
    }

    /// The shift of stamp position `p` from `raw`, its recorded time.
    fn shift(&self, p: usize, raw: u64) -> i64 {
        match self {
            ThreadTimes::Shifts(v) => i64::from(v[p]),
            ThreadTimes::Full(v) => v[p] as i64 - raw as i64,
        }
    }

    fn len(&self) -> usize {
        match self {
            ThreadTimes::Shifts(v) => v.len(),
            ThreadTimes::Full(v) => v.len(),
        }
    }
}

impl Synced {
    /// Times in node order of `g` become times by rank, thread and stamp
    /// (of a whole trace, or of a block's ranks and graph).
    pub fn from_graph(trace: &Trace, g: &Graph, t: Vec<Vec<u64>>, report: SyncReport) -> Synced {
        let mut times: Vec<Vec<ThreadTimes>> = trace
            .ranks
            .iter()
            .map(|r| vec![ThreadTimes::Shifts(Vec::new()); r.threads.len()])
            .collect();
        for (loc, by_pos) in g.locs.iter().zip(g.by_position(t)) {
            let records = &trace.held(loc.rank).threads[loc.slot].records;
            times[(loc.rank - trace.first) as usize][loc.slot] = ThreadTimes::new(records, by_pos);
        }
        Synced {
            report,
            first: trace.first,
            times,
        }
    }

    /// The synchronized start (or end) of the record at `at`.
    pub fn time(&self, trace: &Trace, at: EventRef, end: bool) -> Option<u64> {
        let rank = trace.rank(at.rank)?;
        let slot = rank
            .threads
            .binary_search_by_key(&at.thread, |t| t.index)
            .ok()?;
        self.times[(at.rank - self.first) as usize][slot]
            .get(&rank.threads[slot].records, 2 * at.pos() + usize::from(end))
    }

    /// The synchronized times of the records of rank `rank`'s thread at
    /// `slot` (two per record), if the sync covered it.
    pub fn thread_times(&self, rank: u32, slot: usize) -> Option<&ThreadTimes> {
        self.times
            .get(rank.checked_sub(self.first)? as usize)?
            .get(slot)
    }

    /// The synchronized times in node order of `g`.
    pub fn node_times<'a>(&'a self, trace: &'a Trace, g: &'a Graph<'a>) -> NodeTimes<'a> {
        NodeTimes {
            synced: self,
            g,
            trace,
        }
    }

    pub fn path(dir: &Path) -> PathBuf {
        dir.join(SYNC_FILE)
    }

    /// Writes the times beside the trace's rank files; returns the path.
    pub fn write(&self, trace: &Trace) -> Result<PathBuf, ReadError> {
        let mut out = file_head(&self.report, prints(trace));
        out.reserve(self.stamps());
        // Each thread's shifts encode on their own, side by side.
        use rayon::prelude::*;
        let threads: Vec<(&Thread, &ThreadTimes)> = trace
            .ranks
            .iter()
            .zip(&self.times)
            .flat_map(|(rank, threads)| rank.threads.iter().zip(threads))
            .collect();
        let parts: Vec<Vec<u8>> = threads
            .par_iter()
            .map(|&(th, ts)| encode(ts.len(), |p| ts.shift(p, th.records.stamp(p))))
            .collect();
        out.reserve(parts.iter().map(Vec::len).sum());
        for part in parts {
            out.extend_from_slice(&part);
        }
        let crc = payload_crc(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        let path = Synced::path(&trace.dir);
        let tmp = trace.dir.join(format!(".{SYNC_FILE}.tmp"));
        let io = |source| ReadError::Io {
            path: path.clone(),
            source,
        };
        fs::write(&tmp, &out).map_err(io)?;
        fs::rename(&tmp, &path).map_err(io)?;
        Ok(path)
    }

    /// Reads `DIR/sync.pmts` if `pmtrace sync` wrote one for this trace.
    pub fn load(trace: &Trace) -> Result<Option<Synced>, ReadError> {
        let path = Synced::path(&trace.dir);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(ReadError::Io { path, source }),
        };
        let bad =
            |why: &str| ReadError::corrupt(SYNC_FILE, format!("{why}; run `pmtrace sync` again"));
        if bytes.len() < 16 || &bytes[..8] != MAGIC {
            return Err(bad("not a pmtrace sync file"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if payload_crc(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err(bad("checksum mismatch"));
        }
        let n = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes")) as usize;
        let json = body.get(12..12 + n).ok_or_else(|| bad("truncated"))?;
        let meta: Meta = serde_json::from_slice(json).map_err(|_| bad("unreadable header"))?;
        // A block of the trace checks its own ranks, and skips the stamps
        // of the ranks before it.
        let first = trace.first as usize;
        let mine = meta.ranks.get(first..first + trace.ranks.len());
        if meta.ranks.len() != trace.world_size as usize || mine != Some(&prints(trace)[..]) {
            return Err(bad("made for other rank files"));
        }
        let before: u64 = meta.ranks[..first]
            .iter()
            .flat_map(|r| &r.threads)
            .map(|t| 2 * t.1)
            .sum();
        let start = skip_varints(body, 12 + n, before as usize).ok_or_else(|| bad("truncated"))?;
        // Each thread's shifts: found by counting the varints' last bytes
        // (below 0x80), then decoded side by side.
        let threads: Vec<&Thread> = trace.ranks.iter().flat_map(|r| &r.threads).collect();
        let mut bounds = vec![start];
        for th in &threads {
            let at = *bounds.last().expect("a start");
            bounds.push(
                skip_varints(body, at, th.records.len() * 2).ok_or_else(|| bad("truncated"))?,
            );
        }
        let last = first + trace.ranks.len() == meta.ranks.len();
        if last && bounds.last() != Some(&body.len()) {
            return Err(bad("trailing bytes"));
        }
        use rayon::prelude::*;
        let decoded: Vec<Option<ThreadTimes>> = threads
            .par_iter()
            .enumerate()
            .map(|(k, th)| decode_shifts(&th.records, &body[bounds[k]..bounds[k + 1]]))
            .collect();
        let mut decoded = decoded.into_iter();
        let mut times = Vec::with_capacity(trace.ranks.len());
        for rank in &trace.ranks {
            let mut mine = Vec::with_capacity(rank.threads.len());
            for _ in &rank.threads {
                mine.push(decoded.next().flatten().ok_or_else(|| bad("truncated"))?);
            }
            times.push(mine);
        }
        Ok(Some(Synced {
            report: meta.report,
            first: trace.first,
            times,
        }))
    }

    fn stamps(&self) -> usize {
        self.times.iter().flatten().map(ThreadTimes::len).sum()
    }
}

/// The position after `count` varints from `at`, if `buf` holds them.
fn skip_varints(buf: &[u8], mut at: usize, mut count: usize) -> Option<usize> {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    while count > 0 {
        // Eight bytes at a time while they end fewer varints than are left.
        if let Some(word) = buf.get(at..at + 8) {
            let w = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            let ends = (!w & HIGH).count_ones() as usize;
            if ends < count {
                count -= ends;
                at += 8;
                continue;
            }
        }
        if *buf.get(at)? < 0x80 {
            count -= 1;
        }
        at += 1;
    }
    Some(at)
}

/// One thread's synchronized times from its shifts (all of `buf`).
fn decode_shifts(records: &Events, buf: &[u8]) -> Option<ThreadTimes> {
    let n = records.len() * 2;
    let raw = |p: usize| records.stamp(p);
    let mut pos = 0;
    let mut shifts: Vec<i32> = Vec::with_capacity(n);
    let mut full: Option<Vec<u64>> = None;
    let mut shift = 0i64;
    for p in 0..n {
        shift += get_i(buf, &mut pos)?;
        match (&mut full, i32::try_from(shift)) {
            (None, Ok(s)) => shifts.push(s),
            (None, Err(_)) => {
                // A shift past 32 bits: this thread keeps times.
                let mut ts: Vec<u64> = (0..shifts.len())
                    .map(|q| (raw(q) as i64 + i64::from(shifts[q])) as u64)
                    .collect();
                ts.push((raw(p) as i64 + shift) as u64);
                full = Some(ts);
            }
            (Some(ts), _) => ts.push((raw(p) as i64 + shift) as u64),
        }
    }
    if pos != buf.len() {
        return None;
    }
    Some(match full {
        Some(ts) => ThreadTimes::Full(ts),
        None => ThreadTimes::Shifts(shifts),
    })
}

/// Synchronized times in the node order of a graph ([`Synced::node_times`]).
pub struct NodeTimes<'a> {
    synced: &'a Synced,
    g: &'a Graph<'a>,
    trace: &'a Trace,
}

impl Times for NodeTimes<'_> {
    #[inline]
    fn at(&self, loc: u32, k: u32) -> u64 {
        let l = &self.g.locs[loc as usize];
        let records = &self.trace.held(l.rank).threads[l.slot].records;
        self.synced.times[(l.rank - self.synced.first) as usize][l.slot]
            .get(records, self.g.pos(loc, k) as usize)
            .expect("a stamp of the graph")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_skipped_exactly_as_decoding_goes() {
        let mut buf = Vec::new();
        let mut b = [0u8; MAX_VARINT];
        let mut ends = vec![0];
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for k in 0..5000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = (x >> (k % 64)) as i64 * if k % 3 == 0 { -1 } else { 1 };
            let mut n = 0;
            put_i(&mut b, &mut n, v);
            buf.extend_from_slice(&b[..n]);
            ends.push(buf.len());
        }
        for from in [0, 1, 7, 100, 4999] {
            for count in [0, 1, 2, 8, 9, 63, 64, 65, 1000] {
                let want = ends.get(from + count).copied();
                assert_eq!(
                    skip_varints(&buf, ends[from], count),
                    want,
                    "{from} + {count}"
                );
            }
        }
        assert_eq!(skip_varints(&buf, 0, 5001), None, "past the end");
    }
}
