//! The verbs of `pmtrace-mpi`: each takes the arguments of its `pmtrace`
//! verb and returns what process 0 prints (empty elsewhere).

use pmtrace_cli::args::{
    CriticalPathArgs, ExportArgs, ExportFormat, RacesArgs, ReportArgs, SyncArgs,
};
use pmtrace_export::otf2;

use std::io::Write;

use pmtrace_sync::{ClcParams, SyncParams};

use pmtrace_report::times::Times;
use pmtrace_sync::Synced;

use pmtrace_parallel::fabric::{agree, Fabric};
use pmtrace_parallel::{block, critical, insts, messages, metrics, waits};

/// The verbs that do not run in parallel yet say so in one line.
fn not_yet(verb: &str) -> Result<Vec<u8>, String> {
    Err(format!(
        "{verb} does not run in parallel yet; run `pmtrace {verb}` on the trace"
    ))
}

/// `pmtrace report`: the report, on synchronized time where `pmtrace
/// sync` ran.
pub fn report<F: Fabric + ?Sized>(f: &F, a: &ReportArgs) -> Result<Vec<u8>, String> {
    let b = block::open(f, &a.dir)?;
    let bm = messages::build(f, &b);
    let is = insts::gather(f, &b.trace);
    let synced = agree(f, Synced::load(&b.trace).map_err(|e| e.to_string()))?;
    let report = pmtrace_parallel::report::build(f, &b, &bm, &is, synced.as_ref(), a.mu_ns);
    let mut out = Vec::new();
    if let Some(mut report) = report {
        report.at_end = pmtrace_live::at_end(&a.dir);
        if a.json {
            serde_json::to_writer_pretty(&mut out, &report).map_err(|e| e.to_string())?;
            out.push(b'\n');
        } else {
            report.write_text(&mut out).map_err(|e| e.to_string())?;
        }
    }
    Ok(out)
}

/// `pmtrace sync`: writes `DIR/sync.pmts`; prints the sync report.
pub fn sync<F: Fabric + ?Sized>(f: &F, a: &SyncArgs) -> Result<Vec<u8>, String> {
    let b = block::open(f, &a.dir)?;
    let bm = messages::build(f, &b);
    let params = SyncParams {
        clc: ClcParams {
            gamma: a.gamma,
            delta_ns: a.delta_ns,
            window_ns: a.window_ns,
            ramp: a.ramp,
        },
        mu_intra_ns: a.mu_intra_ns,
        mu_inter_ns: a.mu_inter_ns,
        regression: !a.no_regression,
    };
    let synced = pmtrace_parallel::sync::sync(f, &b, &bm, &params);
    let path = pmtrace_parallel::sync::write(f, &b, &synced)?;
    let mut out = Vec::new();
    if f.index() == 0 {
        if a.json {
            serde_json::to_writer_pretty(&mut out, &synced.report).map_err(|e| e.to_string())?;
            out.push(b'\n');
        } else {
            synced
                .report
                .write_text(&mut out)
                .map_err(|e| e.to_string())?;
            writeln!(out, "\nsynced times written to {}", path.display())
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(out)
}

/// `pmtrace critical-path`: the plain and the weighted critical path, on
/// synchronized time where `pmtrace sync` ran.
pub fn critical_path<F: Fabric + ?Sized>(f: &F, a: &CriticalPathArgs) -> Result<Vec<u8>, String> {
    let b = block::open(f, &a.dir)?;
    let bm = messages::build(f, &b);
    let is = insts::gather(f, &b.trace);
    let synced = agree(f, Synced::load(&b.trace).map_err(|e| e.to_string()))?;
    let times = Times {
        trace: &b.trace,
        synced: synced.as_ref(),
    };
    let found = waits::find(f, &b, &bm, &is, &times);
    let window = metrics::window(f, &b, &times);
    let path = critical::both(f, &b, &bm, &is, &times, &found, window);
    let mut out = Vec::new();
    if let Some(path) = path {
        if a.json {
            serde_json::to_writer_pretty(&mut out, &path).map_err(|e| e.to_string())?;
            out.push(b'\n');
        } else {
            path.write_text(&mut out).map_err(|e| e.to_string())?;
        }
    }
    Ok(out)
}

/// `pmtrace races`: the message races, on the clocks of the race rules.
pub fn races<F: Fabric + ?Sized>(f: &F, a: &RacesArgs) -> Result<Vec<u8>, String> {
    let b = block::open(f, &a.dir)?;
    let bm = messages::build(f, &b);
    let (recorded, any_tag) = pmtrace_parallel::clocks::first_header(f, &b);
    let vector = match a.clocks.as_deref() {
        Some(mode) => mode == "vector",
        None => recorded == "vector",
    };
    let mut out = Vec::new();
    if let Some(races) = pmtrace_parallel::races::find(f, &b, &bm, vector) {
        if a.json {
            serde_json::to_writer_pretty(&mut out, &races).map_err(|e| e.to_string())?;
            out.push(b'\n');
        } else {
            races
                .write_text(any_tag, &mut out)
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(out)
}

/// `pmtrace export`: OTF2, Perfetto and Parquet in parallel.
pub fn export<F: Fabric + ?Sized>(f: &F, a: &ExportArgs) -> Result<Vec<u8>, String> {
    match a.format {
        ExportFormat::Otf2 => export_otf2(f, a),
        ExportFormat::Perfetto => export_perfetto(f, a),
        ExportFormat::Parquet => export_parquet(f, a),
        _ => {
            let name = format!("{:?}", a.format).to_ascii_lowercase();
            not_yet(&format!("export --format {name}"))
        }
    }
}

/// `pmtrace export --format perfetto`: every block encodes its ranks'
/// packets; process 0 writes them in order.
fn export_perfetto<F: Fabric + ?Sized>(f: &F, a: &ExportArgs) -> Result<Vec<u8>, String> {
    let b = block::open(f, &a.dir)?;
    let bm = messages::build(f, &b);
    let stored = agree(f, Synced::load(&b.trace).map_err(|e| e.to_string()))?;
    let synced = match stored {
        Some(s) => s,
        None => {
            if f.index() == 0 {
                eprintln!(
                    "pmtrace-mpi: note: {} is not synced; synchronizing in memory (`pmtrace sync` keeps the result)",
                    a.dir.display()
                );
            }
            let s = pmtrace_parallel::sync::sync(f, &b, &bm, &SyncParams::default());
            Synced::from_graph(&b.trace, &s.net.g, s.times, s.report)
        }
    };
    let to_stdout = a.output.as_os_str() == "-";
    // The parts go beside the output (or into the trace's directory).
    let parts = match a.output.parent() {
        Some(p) if !to_stdout && !p.as_os_str().is_empty() => p.to_path_buf(),
        _ if to_stdout => a.dir.clone(),
        _ => std::path::PathBuf::from("."),
    };
    // Process 0 writes; every process learns whether it could.
    let file = match (f.index(), to_stdout) {
        (0, false) => std::fs::File::create(&a.output)
            .map(|file| Some(std::io::BufWriter::with_capacity(1 << 20, file)))
            .map_err(|e| format!("cannot create {}: {e}", a.output.display())),
        _ => Ok(None),
    };
    let mut file = agree(f, file)?;
    let mut out = Vec::new();
    let w: Option<&mut dyn std::io::Write> = match (f.index(), file.as_mut()) {
        (0, Some(file)) => Some(file),
        (0, None) => Some(&mut out),
        _ => None,
    };
    let summary = pmtrace_parallel::export::perfetto(f, &b, &bm, Some(&synced), &parts, w)?;
    drop(file);
    if f.index() == 0 && !to_stdout {
        eprintln!(
            "pmtrace-mpi: wrote {} ({} slices, {} in flight, {} message flows, {} collective flows)",
            a.output.display(),
            summary.slices,
            summary.in_flight_slices,
            summary.message_flows,
            summary.collective_flows
        );
    }
    Ok(out)
}

/// `pmtrace export --format otf2`: every block writes its locations'
/// event files.
fn export_otf2<F: Fabric + ?Sized>(f: &F, a: &ExportArgs) -> Result<Vec<u8>, String> {
    if a.output.as_os_str() == "-" {
        return Err("an OTF2 archive is a directory: give one with -o".into());
    }
    let b = block::open(f, &a.dir)?;
    let bm = messages::build(f, &b);
    let synced = agree(f, Synced::load(&b.trace).map_err(|e| e.to_string()))?;
    let s = pmtrace_parallel::export::otf2(f, &b, &bm, synced.as_ref(), &a.output)?;
    let mut out = Vec::new();
    if f.index() == 0 {
        writeln!(
            out,
            "OTF2 archive {} ({} locations, {} events, {} time)",
            a.output
                .join(format!("{}.otf2", otf2::ARCHIVE_NAME))
                .display(),
            s.locations,
            s.events,
            if s.synced { "synchronized" } else { "recorded" }
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// `pmtrace export --format parquet`: every block writes its part of each
/// table, a partitioned dataset.
fn export_parquet<F: Fabric + ?Sized>(f: &F, a: &ExportArgs) -> Result<Vec<u8>, String> {
    if a.output.as_os_str() == "-" {
        return Err("a Parquet export is a directory of tables: give one with -o".into());
    }
    let b = block::open(f, &a.dir)?;
    let bm = messages::build(f, &b);
    let synced = agree(f, Synced::load(&b.trace).map_err(|e| e.to_string()))?;
    let s = pmtrace_parallel::export::parquet(f, &b, &bm, synced.as_ref(), &a.output)?;
    let mut out = Vec::new();
    if f.index() == 0 {
        writeln!(
            out,
            "Parquet tables in {} ({}; {} time; a part per process, e.g. {}/calls/*.parquet)",
            a.output.display(),
            s.counts(),
            if s.synced { "synchronized" } else { "recorded" },
            a.output.display(),
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(out)
}
