//! Everything the `pmtrace` command does with a trace after the run: read
//! the rank files ([`Trace::open`]), resolve communicators across ranks
//! ([`Comms`]), match point-to-point messages by MPI's FIFO rule
//! ([`Messages`]), summarise them ([`Report`]) and write them out in other
//! formats ([`export`]).
//!
//! ```text
//!  rank files ─► read::Trace ─► matching::Messages ─► report::Report
//!                    │                                  (JSON / text)
//!                    └──────────► export::text
//! ```
//!
//! Library code returns typed errors ([`ReadError`], [`ExportError`]); the
//! CLI turns them into one line on stderr. There is no `unsafe` here.

pub mod clocks;
pub mod collective;
pub mod comm;
pub mod error;
pub mod export;
pub mod fixture;
pub mod matching;
pub mod read;
pub mod report;
pub mod sync;

pub use clocks::{ClockReport, Clocks};
pub use comm::{Comm, Comms};
pub use error::ReadError;
pub use export::ExportError;
pub use matching::{Message, Messages, RecvEvent, SendEvent, Violations};
pub use read::{EventRef, Rank, Thread, Trace};
pub use report::{Report, ReportOptions};
