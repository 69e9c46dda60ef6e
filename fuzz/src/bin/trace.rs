//! Fuzz target `trace`: the trace reader and what reads its result. The
//! input (see `layout`) becomes the rank files of a trace directory in
//! memory; the directory is opened, its messages matched, its timestamps
//! synchronized, and its report built and written, as `pmtrace sync` and
//! `pmtrace report` do. A readable error is a good outcome; a panic, a
//! hang or an allocation the input does not justify is a finding.

use pmtrace_fuzz::{golden, justify, layout, scratch, Bounded};
use pmtrace_matching::Messages;
use pmtrace_report::Report;
use pmtrace_report::ReportOptions;
use pmtrace_sync::{sync, SyncParams};
use pmtrace_trace::Trace;

#[global_allocator]
static ALLOC: Bounded = Bounded;

fn main() {
    let dir = scratch("trace");
    let base = std::fs::read(golden("ring").join("rank-00000.pmt")).unwrap();
    let (header, _) = pmtrace_format::decode_file_header(&base).unwrap();
    let base = serde_json::to_value(header).unwrap();
    afl::fuzz!(|input: &[u8]| {
        justify(usize::MAX / 2, 1);
        let files = layout::expand(input, &base);
        for e in std::fs::read_dir(&dir).unwrap() {
            let _ = std::fs::remove_file(e.unwrap().path());
        }
        let mut bytes = 0;
        for (r, f) in files.iter().enumerate() {
            std::fs::write(dir.join(pmtrace_format::rank_file_name(r as u32)), f).unwrap();
            bytes += f.len();
        }
        // A record of a few bytes justifies a few tens of bytes of tables.
        justify(bytes, 64);
        read(&dir);
        justify(usize::MAX / 2, 1);
    });
}

fn read(dir: &std::path::Path) {
    let Ok(trace) = Trace::open(dir) else { return };
    let _ = trace.all_warnings();
    let messages = Messages::build(&trace);
    let synced = sync(&trace, &messages, &SyncParams::default());
    let report = Report::build_on(&trace, &messages, ReportOptions::default(), Some(&synced))
        .with_sync(&trace, &messages, &synced);
    let mut out = Vec::new();
    report.write_text(&mut out).unwrap();
    synced.report.write_text(&mut out).unwrap();
    serde_json::to_writer(&mut out, &report).unwrap();
}
