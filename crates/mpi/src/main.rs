//! `pmtrace-mpi`: the verbs of `pmtrace` that read a trace, run in
//! parallel under MPI on the job's own allocation.
//!
//! ```text
//! mpirun -np P pmtrace-mpi VERB DIR [the options of pmtrace VERB]
//! srun -n P pmtrace-mpi VERB DIR ...
//! ```
//!
//! Each process reads one contiguous block of the rank files and holds
//! only its block's model; what crosses blocks travels as MPI messages
//! (`pmtrace_parallel`). Process 0 prints what `pmtrace VERB DIR` prints,
//! and the files written are the same. An error is one line on process
//! 0's stderr and exit status 1 on every process.

mod fabric;
mod verbs;

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use pmtrace_cli::args::{CriticalPathArgs, ExportArgs, RacesArgs, ReportArgs, SyncArgs};
use pmtrace_parallel::fabric::Fabric;

/// Analyse a trace in parallel: mpirun -np P pmtrace-mpi VERB DIR [options].
#[derive(Debug, Parser)]
#[command(name = "pmtrace-mpi", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Report(ReportArgs),
    Sync(SyncArgs),
    CriticalPath(CriticalPathArgs),
    Races(RacesArgs),
    Export(ExportArgs),
}

fn main() -> ExitCode {
    let Some(universe) = mpi::initialize() else {
        eprintln!("pmtrace-mpi: error: MPI was initialized already");
        return ExitCode::FAILURE;
    };
    let f = fabric::Mpi::new(&universe.world());
    // Usage errors: every process parses the same arguments, so every
    // process exits the same way; process 0 alone says why.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            if f.index() == 0 {
                let _ = e.print();
            }
            drop(f);
            drop(universe);
            return ExitCode::from(code);
        }
    };
    let outcome = run(&f, cli);
    let code = match outcome {
        Ok(out) => {
            if f.index() == 0 {
                let mut stdout = std::io::stdout().lock();
                let _ = stdout.write_all(&out);
                let _ = stdout.flush();
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            if f.index() == 0 {
                eprintln!("pmtrace-mpi: error: {e}");
            }
            ExitCode::FAILURE
        }
    };
    drop(f);
    drop(universe);
    code
}

/// What process 0 prints.
fn run(f: &fabric::Mpi, cli: Cli) -> Result<Vec<u8>, String> {
    match cli.command {
        Command::Report(a) => verbs::report(f, &a),
        Command::Sync(a) => verbs::sync(f, &a),
        Command::CriticalPath(a) => verbs::critical_path(f, &a),
        Command::Races(a) => verbs::races(f, &a),
        Command::Export(a) => verbs::export(f, &a),
    }
}
