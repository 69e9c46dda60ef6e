//! Shared test helpers.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use pmtrace_format::chunk::{ChunkHeader, ChunkState};
use pmtrace_format::decode_file_header;

/// A fresh directory under the system temp dir, removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "pmtrace-analysis-{}-{n}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside the scratch directory.
    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every chunk of a rank file: (offset, header).
pub fn chunks_of(file: &[u8]) -> Vec<(usize, ChunkHeader)> {
    let (_, mut at) = decode_file_header(file).unwrap();
    let mut out = vec![];
    while at < file.len() {
        let h = ChunkHeader::decode(&file[at..], at, file.len()).unwrap();
        out.push((at, h));
        at += h.capacity as usize;
    }
    out
}

/// Byte ranges of the checksummed payloads (payload[..used] of sealed chunks).
pub fn sealed_payloads(file: &[u8]) -> Vec<std::ops::Range<usize>> {
    chunks_of(file)
        .into_iter()
        .filter(|(_, h)| h.state == ChunkState::Sealed && h.used > 0)
        .map(|(at, h)| {
            let start = at + h.records_offset() as usize;
            start..start + h.used as usize
        })
        .collect()
}
