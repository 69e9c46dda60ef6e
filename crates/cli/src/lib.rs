//! What `pmtrace` shares with `pmtrace-mpi` (the verbs' arguments), and
//! its command line, parsed apart from running it.

pub mod args;
pub mod command;
pub mod launch;
