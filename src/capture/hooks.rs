//! What each kind of wrapper records, after the real call returned. The
//! generated wrappers (see `wrappers/generate.rs`) call one function here per
//! kind; payload layouts are those of `pmtrace_format::record`.
//!
//! This module lists every hook; they live by MPI family (as the sections
//! of `wrappers/mpi.wrap`), each on `hooks_call`'s `Call`:
//! - `hooks_p2p`: sends, receives, probes, matched receives;
//! - `hooks_recv`: the blocking receive's fast path;
//! - `hooks_requests`: persistent starts, completions, cancellation,
//!   request status and free;
//! - `hooks_colls`: collectives;
//! - `hooks_comms`: communicator constructors and destructors;
//! - `exclusion`: `PMTRACE_EXCLUDE` and `MPI_Pcontrol`'s pause;
//! - `scratch`: the per-thread arrays of array arguments.

pub use crate::exclusion::{exclude, left_out, pause, paused_out};
pub use crate::hooks_call::{plain, types_changing, Call};
pub use crate::hooks_colls::{coll, icoll, pcoll, CollArgs, Counts, Shape};
pub use crate::hooks_comms::{comm_free, comm_idup, comm_new, release_comm, Origin};
pub use crate::hooks_p2p::{
    claim_message, imrecv, isendrecv, issue, memo_hit, mrecv, probe, probe_out, recv, send,
    sendrecv, Issued,
};
pub use crate::hooks_recv::{recv_fast, recv_fast_end};
#[allow(unused_imports)] // MPI-4.1 libraries only
pub use crate::hooks_requests::request_statuses;
pub use crate::hooks_requests::{
    before_start, cancel, complete, request_free, request_status, start, Done,
};
pub use crate::scratch::Scratch;
