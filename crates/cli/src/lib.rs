//! What `pmtrace` shares with `pmtrace-mpi`: the verbs' arguments.

pub mod args;
