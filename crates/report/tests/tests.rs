//! Integration tests of the post-processing crates (trace, matching,
//! sync, report, export) on hand-built traces
//! (`pmtrace_fixture`). Each test gets its own scratch directory.

mod util;

mod matching;
mod races;
mod read;
mod report;
mod sync;
mod synth;
