//! `PMTRACE_*` settings: parsed in pmtrace-config (pure, and fuzzed),
//! against this runtime's function table.

pub use pmtrace_config::*;
