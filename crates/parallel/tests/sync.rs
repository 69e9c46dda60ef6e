//! `pmtrace sync` over blocks of the golden traces at P = 1..4 on threads:
//! the same report and the same `sync.pmts` as the serial sync (but the
//! seconds it took).

mod common;
use common::*;

use std::path::Path;

use pmtrace_matching::Messages;
use pmtrace_parallel::fabric::Threads;
use pmtrace_parallel::{block, messages};
use pmtrace_sync::{self as sync, SyncParams, Synced};
use pmtrace_trace::Trace;

/// The sync file's JSON (its seconds zeroed) and its times.
fn parts(dir: &Path) -> (serde_json::Value, Vec<u8>) {
    let bytes = std::fs::read(dir.join("sync.pmts")).unwrap();
    let n = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let mut json: serde_json::Value = serde_json::from_slice(&bytes[12..12 + n]).unwrap();
    json["report"]["seconds"] = 0.into();
    // The file is whole (its checksum holds) and reads back.
    assert!(Synced::load(&Trace::open(dir).unwrap()).unwrap().is_some());
    (json, bytes[12 + n..bytes.len() - 4].to_vec())
}

#[test]
fn blocks_write_the_serial_sync_file() {
    for case in CASES {
        let dir = copy(case, "serial");
        let trace = Trace::open(&dir).unwrap();
        let m = Messages::build(&trace);
        let s = sync::sync(&trace, &m, &SyncParams::default());
        s.write(&trace).unwrap();
        let want = parts(&dir);
        for procs in 1..=4 {
            let pdir = copy(case, &format!("p{procs}"));
            Threads::run(procs, |f| {
                let b = block::open(f, &pdir).unwrap();
                let bm = messages::build(f, &b);
                let s = pmtrace_parallel::sync::sync(f, &b, &bm, &SyncParams::default());
                pmtrace_parallel::sync::write(f, &b, &s).unwrap();
            });
            let got = parts(&pdir);
            assert_eq!(got.0, want.0, "{case} at P = {procs}: the report");
            assert!(got.1 == want.1, "{case} at P = {procs}: the times");
            std::fs::remove_dir_all(&pdir).unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
