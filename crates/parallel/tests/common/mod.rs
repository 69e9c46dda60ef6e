//! What the tests of blocks share: the golden traces and copies of them.

#![allow(dead_code)]

use std::path::PathBuf;

/// The recorded traces of `tests/golden`.
pub const CASES: &[&str] = &[
    "ring",
    "master_worker",
    "master_worker_skewed",
    "collectives",
    "coverage",
    "halo2d_vector",
    "halo2d_skewed",
    "threads",
    "zerocoll",
    "mpi4_ompi5",
    "halo2d_np4",
    "collectives_np8",
    "aborted",
];

/// The rank files of golden case `case`.
pub fn golden(case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/golden")
        .join(case)
        .join("trace")
}

/// A copy of the rank files of `case` in a directory of its own (`tag`
/// tells apart the tests that run at once).
pub fn copy(case: &str, tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pmtrace-p{tag}-{}-{case}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(golden(case)).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().ends_with(".pmt") {
            std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
        }
    }
    dir
}

/// A simulated trace of `ranks` ranks over `iterations` iterations, with
/// rank `cut`'s file (if any) cut to 8 KiB, as a job that died leaves
/// it: messages without their other end and collectives some members
/// never entered.
pub fn synth(ranks: u32, iterations: u32, cut: Option<u32>, tag: &str) -> PathBuf {
    use pmtrace_synth::{self as synth, SynthSpec};
    let dir = std::env::temp_dir().join(format!("pmtrace-p{tag}-{}-synth", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let spec = SynthSpec {
        iterations,
        ..SynthSpec::new(ranks)
    };
    synth::write(&dir, &spec).unwrap();
    if let Some(rank) = cut {
        let path = dir.join(format!("rank-{rank:05}.pmt"));
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..8192.min(bytes.len())]).unwrap();
    }
    dir
}
