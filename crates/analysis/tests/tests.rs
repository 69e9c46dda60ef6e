//! Integration tests of pmtrace-analysis on hand-built traces
//! (`pmtrace_fixture`). Each test gets its own scratch directory.

mod util;

mod matching;
mod races;
mod read;
mod report;
mod sync;
mod synth;
