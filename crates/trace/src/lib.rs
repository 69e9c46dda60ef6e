//! The trace model and its reader: the rank files of a trace directory
//! decoded ([`Trace::open`]), communicators resolved across ranks
//! ([`Comms`]). Every other part of the post-processing reads this.
//!
//! ```text
//!  format ─► trace ─► matching ─► sync ─► report
//!                          │        │
//!                          └────────┴────► export
//! ```
//!
//! Dependencies go one way, down toward this crate. Library code returns
//! typed errors ([`ReadError`]); the CLI turns them into one line on stderr.

pub mod comm;
pub mod error;
pub mod model;
pub mod ops;
pub mod phases;
pub mod read;
pub mod units;
pub mod wire;

pub use comm::{Comm, Comms};
pub use error::ReadError;
pub use model::{Call, Done, Events, Payload, Record};
pub use read::{census, Census, EventRef, Rank, Thread, Trace};
