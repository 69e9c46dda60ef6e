//! Everything the `pmtrace` command does with a trace after the run, in
//! one place for the CLI: this crate only re-exports the crates that do
//! the work, along the data flow.
//!
//! ```text
//!  rank files ─► trace ─► matching ─► sync ─► report (JSON / text)
//!                 (model,  (messages,   (times)
//!                  reader)  collectives,   │
//!                           clocks)        └──► export (text, OTF2,
//!                                                Perfetto, Chrome, HTML)
//! ```
//!
//! - `crates/trace`: the trace model and its reader;
//! - `crates/matching`: matching, collectives and clocks over the model;
//! - `crates/sync`: timestamp synchronisation;
//! - `crates/report`: the report and analyses;
//! - `crates/export`: the exports;
//! - `crates/fixture`: hand-built traces, for tests only.

pub use pmtrace_export as export;
pub use pmtrace_matching::{clocks, collective, matching};
pub use pmtrace_report as report;
pub use pmtrace_sync as sync;
pub use pmtrace_trace::{comm, error, model, read, units};

pub use pmtrace_export::ExportError;
pub use pmtrace_matching::{
    ClockReport, Clocks, Message, Messages, RecvEvent, SendEvent, Violations,
};
pub use pmtrace_report::{Report, ReportOptions};
pub use pmtrace_trace::{
    census, Call, Census, Comm, Comms, EventRef, Payload, Rank, ReadError, Record, Thread, Trace,
};
