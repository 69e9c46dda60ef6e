//! pmtrace's post-processing in parallel.
//!
//! Each process of a parallel run holds one contiguous block of rank files
//! ([`block`]) and only its block's model. What crosses blocks (the other
//! end of a message, a collective's members, the clock a replay carries
//! to the next block) travels through a [`fabric::Fabric`]: MPI in the
//! `pmtrace-mpi` binary, threads in tests. The results are those of the
//! serial verbs, byte for byte.

pub mod block;
pub mod clc;
pub mod clocks;
pub mod colls;
pub mod critical;
pub mod export;
pub mod fabric;
pub mod groups;
pub mod insts;
pub mod messages;
pub mod metrics;
pub mod net;
pub mod races;
pub mod report;
pub mod rounds;
pub mod select;
pub mod sync;
pub mod waits;
pub mod weighted;
/// Records between processes: [`pmtrace_trace::wire`], where the types
/// that travel have their wire forms.
pub use pmtrace_trace::wire;
