//! What connects the events of a trace, over the trace model: messages
//! matched by MPI's FIFO rule and by their piggybacked ids
//! ([`Messages`]), collective instances ([`collective`]) and the checks of
//! the piggybacked clocks ([`Clocks`]). Sync, the report and the exports
//! all build on these.

pub mod clocks;
pub mod collective;
pub mod ends;
pub mod matching;

pub use clocks::{ClockReport, Clocks};
pub use matching::{IdChecks, Message, Messages, RecvEvent, SendEvent, Violations};
