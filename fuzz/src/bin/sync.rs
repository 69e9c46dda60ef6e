//! Fuzz target `sync`: reading `sync.pmts` (what `pmtrace sync` wrote)
//! against the trace it was made for, then a report on its times. Input:
//! which golden trace (byte 0), flags (byte 1: bit 0 leaves the file's
//! checksum as the input has it; else the checksum is appended), then the
//! file's bytes.

use pmtrace_fuzz::{copy_golden, justify, scratch, Bounded, GOLDEN};
use pmtrace_matching::Messages;
use pmtrace_report::Report;
use pmtrace_report::ReportOptions;
use pmtrace_sync::Synced;
use pmtrace_trace::Trace;
use std::sync::OnceLock;

#[global_allocator]
static ALLOC: Bounded = Bounded;

/// The golden traces, opened with their messages matched: in the fuzzed
/// process, on its first input (rayon's threads, started before AFL++'s
/// fork server forks, would not exist in the forked process).
fn traces() -> &'static [(Trace, Messages, usize)] {
    static TRACES: OnceLock<Vec<(Trace, Messages, usize)>> = OnceLock::new();
    TRACES.get_or_init(|| {
        let root = scratch("sync");
        GOLDEN
            .iter()
            .map(|name| {
                let dir = root.join(name);
                copy_golden(name, &dir);
                let bytes = std::fs::read_dir(&dir)
                    .unwrap()
                    .map(|e| e.unwrap().metadata().unwrap().len() as usize)
                    .sum();
                let trace = Trace::open(&dir).unwrap();
                let messages = Messages::build(&trace);
                (trace, messages, bytes)
            })
            .collect()
    })
}

fn main() {
    afl::fuzz!(|input: &[u8]| {
        let [which, flags, body @ ..] = input else {
            return;
        };
        let traces = traces();
        let (trace, messages, bytes) = &traces[usize::from(*which) % traces.len()];
        let mut file = body.to_vec();
        if flags & 1 == 0 {
            file.extend_from_slice(&pmtrace_format::payload_crc(body).to_le_bytes());
        }
        std::fs::write(Synced::path(&trace.dir), &file).unwrap();
        justify(bytes + input.len(), 64);
        if let Ok(Some(synced)) = Synced::load(trace) {
            let report = Report::build_on(trace, messages, ReportOptions::default(), Some(&synced))
                .with_sync(trace, messages, &synced);
            let mut out = Vec::new();
            report.write_text(&mut out).unwrap();
        }
        justify(usize::MAX / 2, 1);
    });
}
