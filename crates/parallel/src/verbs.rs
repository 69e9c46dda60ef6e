//! The verbs of `pmtrace-mpi`: each takes the arguments of its `pmtrace`
//! verb and returns what process 0 prints (empty elsewhere).

use pmtrace_cli::args::{CriticalPathArgs, ExportArgs, RacesArgs, ReportArgs, SyncArgs};

use crate::fabric::Fabric;

/// The verbs that do not run in parallel yet say so in one line.
fn not_yet(verb: &str) -> Result<Vec<u8>, String> {
    Err(format!(
        "{verb} does not run in parallel yet; run `pmtrace {verb}` on the trace"
    ))
}

pub fn report<F: Fabric + ?Sized>(_f: &F, _a: &ReportArgs) -> Result<Vec<u8>, String> {
    not_yet("report")
}

pub fn sync<F: Fabric + ?Sized>(_f: &F, _a: &SyncArgs) -> Result<Vec<u8>, String> {
    not_yet("sync")
}

pub fn critical_path<F: Fabric + ?Sized>(_f: &F, _a: &CriticalPathArgs) -> Result<Vec<u8>, String> {
    not_yet("critical-path")
}

pub fn races<F: Fabric + ?Sized>(_f: &F, _a: &RacesArgs) -> Result<Vec<u8>, String> {
    not_yet("races")
}

pub fn export<F: Fabric + ?Sized>(_f: &F, _a: &ExportArgs) -> Result<Vec<u8>, String> {
    not_yet("export")
}
