//! `pmtrace`: run MPI programs under the tracer, then read, summarise and
//! export their traces.
//!
//! The binary is thin: it parses arguments, calls the crates along the data
//! flow (trace, matching, sync, report, export), and turns any error into
//! one line on stderr (`pmtrace: error: ...`, exit 1).
//! Usage errors are clap's (exit 2). It never links the `MPI_*` wrappers.

mod memory;
mod progress;
mod spill;
mod top;

#[global_allocator]
static ALLOCATOR: memory::Guarded = memory::Guarded;

use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Parser;
use pmtrace_cli::args::*;
use pmtrace_cli::command::{synth_spec, Cli, Command, SynthArgs};
use pmtrace_cli::launch;
use pmtrace_export::view::View;
use pmtrace_export::{chrome, merged, otf2, parquet, perfetto, text, timeline};
use pmtrace_matching::clocks::RaceClocks;
use pmtrace_matching::Messages;
use pmtrace_report::path::COMPUTING;
use pmtrace_report::races::{self, Races};
use pmtrace_report::Report;
use pmtrace_report::ReportOptions;
use pmtrace_sync::{ClcParams, SyncParams, Synced};
use pmtrace_trace::Trace;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("pmtrace: error: {}", one_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, each cause once (library errors
/// already name their cause in their own message).
fn one_line(err: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if msg.contains(&text) {
            continue;
        }
        if !msg.is_empty() {
            msg.push_str(": ");
        }
        msg.push_str(&text);
    }
    msg.replace('\n', " ")
}

/// A reader closed our stdout (`pmtrace export ... -o - | head`): not an error.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}

fn run(cli: Cli) -> Result<ExitCode> {
    memory::set_budget(cli.memory);
    match cli.command {
        Command::Report(args) => report(args),
        Command::Sync(args) => sync(args),
        Command::Merge(args) => merge(args),
        Command::Export(args) => export(args),
        Command::Timeline(args) => timeline(args),
        Command::CriticalPath(args) => critical_path(args),
        Command::Races(args) => races(args),
        Command::Run(args) => launch::run(args),
        Command::Synth(args) => synth(args),
        Command::Top(args) => top::run(args),
    }
}

fn synth(args: SynthArgs) -> Result<ExitCode> {
    use pmtrace_synth as synth;
    let spec = synth_spec(&args)?;
    if let Ok(entries) = std::fs::read_dir(&args.out) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".pmt") || name == "truth.json" || name == "sync.pmts" {
                bail!(
                    "{} already holds a trace ({name}); remove it or choose another directory",
                    args.out.display()
                );
            }
        }
    }
    let began = std::time::Instant::now();
    let truth = synth::write(&args.out, &spec)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    let imbalance = truth.imbalance.as_ref().map_or("none".to_string(), |im| {
        format!(
            "rank {} x{} (+{:.1} ms)",
            im.rank,
            im.factor,
            im.extra_ns as f64 / 1e6
        )
    });
    println!(
        "synth: {} ranks ({}x{} grid, {} host{}), {} iterations, {} events, {} messages, {} in {:.2} s to {} (imbalance: {imbalance}; truth in truth.json)",
        truth.ranks,
        truth.grid[0],
        truth.grid[1],
        truth.hosts,
        if truth.hosts == 1 { "" } else { "s" },
        truth.iterations,
        truth.events,
        truth.messages,
        pmtrace_report::human_bytes(truth.bytes),
        began.elapsed().as_secs_f64(),
        args.out.display(),
    );
    Ok(ExitCode::SUCCESS)
}

/// The report of `dir`, on synchronized time where sync ran.
fn build_report(dir: &Path, verb: &str, options: ReportOptions) -> Result<(Trace, Report)> {
    memory::check(dir, verb, memory::cost::REPORT)?;
    let progress = progress::Progress::new();
    progress.phase("reading the trace");
    let trace = Trace::open(dir)?;
    progress.phase("matching messages");
    let messages = Messages::build(&trace);
    progress.phase("analysing");
    let synced = Synced::load(&trace)?;
    let report = Report::build_given(&trace, messages, options, synced.as_ref());
    Ok((trace, report))
}

fn critical_path(args: CriticalPathArgs) -> Result<ExitCode> {
    let options = ReportOptions {
        weighted: true,
        path_only: true,
        ..ReportOptions::default()
    };
    let (trace, report) = build_report(&args.dir, "critical-path", options)?;
    let path = report
        .critical_path
        .context("the trace has no calls to follow")?;
    let mut out = BufWriter::new(io::stdout().lock());
    if args.json {
        serde_json::to_writer_pretty(&mut out, &path).context("cannot write the path")?;
        writeln!(out)?;
    } else {
        path.write_text(&mut out)?;
    }
    out.flush()?;
    leave(trace);
    Ok(ExitCode::SUCCESS)
}

fn races(args: RacesArgs) -> Result<ExitCode> {
    memory::check(&args.dir, "races", memory::cost::REPORT)?;
    let progress = progress::Progress::new();
    progress.phase("reading the trace");
    let trace = Trace::open(&args.dir)?;
    progress.phase("matching messages");
    let messages = Messages::build(&trace);
    progress.phase("rebuilding the clocks");
    let recorded = trace.ranks[0].header.clocks.as_str();
    let vector = match args.clocks.as_deref() {
        Some(mode) => mode == "vector",
        None => recorded == "vector",
    };
    let wild = races::wildcards(&trace, &messages);
    let clocks = RaceClocks::compute(
        &trace,
        &messages,
        vector,
        &races::probed_receives(&messages, &wild),
    );
    progress.phase("finding races");
    let races = Races::build(&trace, &messages, &wild, &clocks);
    drop(progress);
    let mut out = BufWriter::new(io::stdout().lock());
    if args.json {
        serde_json::to_writer_pretty(&mut out, &races).context("cannot write the races")?;
        writeln!(out)?;
    } else {
        races.write_text(trace.constants().any_tag, &mut out)?;
    }
    out.flush()?;
    leave(trace);
    Ok(ExitCode::SUCCESS)
}

fn report(args: ReportArgs) -> Result<ExitCode> {
    let (trace, mut report) = build_report(
        &args.dir,
        "report",
        ReportOptions {
            mu_ns: args.mu_ns,
            ..ReportOptions::default()
        },
    )?;
    report.at_end = pmtrace_live::at_end(&args.dir);
    let mut out = BufWriter::new(io::stdout().lock());
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report).context("cannot write the report")?;
        writeln!(out)?;
    } else {
        report.write_text(&mut out)?;
    }
    out.flush()?;
    leave(trace);
    Ok(ExitCode::SUCCESS)
}

fn sync(args: SyncArgs) -> Result<ExitCode> {
    memory::check(&args.dir, "sync", memory::cost::SYNC)?;
    let progress = progress::Progress::new();
    progress.phase("reading the trace");
    let trace = Trace::open(&args.dir)?;
    for warning in trace.all_warnings() {
        eprintln!("pmtrace: warning: {warning}");
    }
    progress.phase("matching messages");
    let messages = Messages::build(&trace);
    let params = SyncParams {
        clc: ClcParams {
            gamma: args.gamma,
            delta_ns: args.delta_ns,
            window_ns: args.window_ns,
            ramp: args.ramp,
        },
        mu_intra_ns: args.mu_intra_ns,
        mu_inter_ns: args.mu_inter_ns,
        regression: !args.no_regression,
    };
    progress.phase("synchronizing timestamps");
    let synced = pmtrace_sync::sync_given(&trace, messages, &params);
    progress.phase("writing");
    let path = synced.write(&trace)?;
    drop(progress);
    let mut out = BufWriter::new(io::stdout().lock());
    if args.json {
        serde_json::to_writer_pretty(&mut out, &synced.report)
            .context("cannot write the report")?;
        writeln!(out)?;
    } else {
        synced.report.write_text(&mut out)?;
        writeln!(out, "\nsynced times written to {}", path.display())?;
    }
    out.flush()?;
    leave(trace);
    Ok(ExitCode::SUCCESS)
}

fn merge(args: MergeArgs) -> Result<ExitCode> {
    memory::check(&args.dir, "merge", memory::cost::MERGE)?;
    let trace = Trace::open(&args.dir)?;
    let messages = Messages::build(&trace);
    let synced = match Synced::load(&trace)? {
        Some(s) => s,
        None => {
            note_not_synced(&args.dir);
            pmtrace_sync::sync(&trace, &messages, &SyncParams::default())
        }
    };
    let write = |out: &mut dyn Write| -> io::Result<()> {
        merged::write(&trace, &messages, &synced, out)?;
        out.flush()
    };
    if args.output.as_os_str() == "-" {
        write(&mut BufWriter::new(io::stdout().lock()))
            .context("cannot write to standard output")?;
    } else {
        let file = std::fs::File::create(&args.output)
            .with_context(|| format!("cannot create {}", args.output.display()))?;
        write(&mut BufWriter::new(file))
            .with_context(|| format!("cannot write {}", args.output.display()))?;
    }
    leave(trace);
    Ok(ExitCode::SUCCESS)
}

fn timeline(args: TimelineArgs) -> Result<ExitCode> {
    memory::check(&args.dir, "timeline", memory::cost::TIMELINE)?;
    if let (Some(from), Some(to)) = (args.from, args.to) {
        if to < from {
            bail!("--to ({to} ns) is before --from ({from} ns)");
        }
    }
    if args.follow {
        return follow_timeline(&args);
    }
    draw_timeline(&args, &args.output, None)?;
    Ok(ExitCode::SUCCESS)
}

/// `timeline --follow`: the page rewritten every interval while the job
/// runs, each one telling the browser to reload it; once the job has
/// ended (every rank finished or gone, as `top` says), the page as
/// `timeline` draws it. Each page is written beside the output and
/// renamed over it, so a browser never loads half of one.
fn follow_timeline(args: &TimelineArgs) -> Result<ExitCode> {
    if args.output.as_os_str() == "-" {
        bail!("--follow rewrites a file: give one with -o, not standard output");
    }
    let mut reader = pmtrace_live::Reader::new(&args.dir).map_err(anyhow::Error::msg)?;
    let mut part = args.output.clone().into_os_string();
    part.push(".part");
    let part = std::path::PathBuf::from(part);
    let every = std::time::Duration::from_secs_f64(args.interval);
    let reload = args.interval.ceil().max(1.0) as u64;
    let mut said = false;
    loop {
        let next = std::time::Instant::now() + every;
        match reader.snapshot(pmtrace_live::When::Now, u64::MAX, top::unix_now()) {
            Ok(s) if s.job == "ended" => break,
            Ok(_) => {
                // A trace still being made may not read yet: the next
                // interval's may.
                if draw_timeline(args, &part, Some(reload)).is_ok() {
                    std::fs::rename(&part, &args.output)
                        .with_context(|| format!("cannot write {}", args.output.display()))?;
                }
            }
            Err(pmtrace_live::ReadError::NotYet(m)) => {
                if !said {
                    eprintln!("pmtrace: {m}; waiting");
                    said = true;
                }
            }
            Err(e @ pmtrace_live::ReadError::Bad(_)) => bail!(e),
        }
        std::thread::sleep(next.saturating_duration_since(std::time::Instant::now()));
    }
    draw_timeline(args, &part, None)?;
    std::fs::rename(&part, &args.output)
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    Ok(ExitCode::SUCCESS)
}

/// Draws the timeline of `args.dir` into `output`. With `reload` (a page
/// of `--follow` while the job runs): a page that reloads itself that
/// often; no warnings, notes or summary line; and the trace is freed, as
/// more pages follow.
fn draw_timeline(args: &TimelineArgs, output: &Path, reload: Option<u64>) -> Result<()> {
    let quiet = reload.is_some();
    let progress = progress::Progress::new();
    progress.phase("reading the trace");
    let trace = Trace::open(&args.dir)?;
    if !quiet {
        for warning in trace.all_warnings() {
            eprintln!("pmtrace: warning: {warning}");
        }
    }
    progress.phase("matching messages");
    let messages = Messages::build(&trace);
    let synced = match Synced::load(&trace)? {
        Some(s) => s,
        None => {
            if !quiet {
                note_not_synced(&args.dir);
            }
            progress.phase("synchronizing timestamps");
            pmtrace_sync::sync(&trace, &messages, &SyncParams::default())
        }
    };
    progress.phase("computing clocks and collectives");
    let view = View::new(&trace, &messages, Some(&synced));
    let program = trace.ranks[0]
        .header
        .run
        .as_ref()
        .and_then(|r| r.command_line.first())
        .map(|p| p.rsplit('/').next().unwrap_or(p).to_owned())
        .unwrap_or_else(|| args.dir.display().to_string());
    let mut title = format!(
        "{program} · {} ranks · {} calls",
        trace.world_size,
        view.calls()
    );
    let window = match (args.from, args.to) {
        (None, None) => None,
        (from, to) => {
            let (from, to) = (from.unwrap_or(0), to.unwrap_or(u64::MAX));
            let ms = |ns: u64| ns as f64 / 1e6;
            title += &if to == u64::MAX {
                format!(" · from {} ms", ms(from))
            } else {
                format!(" · {} – {} ms", ms(from), ms(to))
            };
            Some((
                view.span.0.saturating_add(from),
                view.span.0.saturating_add(to),
            ))
        }
    };
    // What the page draws beside the calls: the report's critical path,
    // wait states, phases and parallelism, on the same time base.
    progress.phase("analysing");
    let options = ReportOptions {
        insight: true,
        ..ReportOptions::default()
    };
    let mut report = Report::build_on(&trace, &messages, options, Some(&synced));
    let mut insight = report.insight.take().unwrap_or_default();
    if let Some(cp) = report.critical_path.as_mut() {
        let stretches = std::mem::take(&mut cp.stretches).into_iter();
        insight.path = stretches
            .map(|(rank, a, b, activity)| (rank, a, b, activity == COMPUTING))
            .collect();
    }
    let overlay = timeline::Overlay {
        path: &insight.path,
        waits: &insight.waits,
        phases: &insight.phases,
        parallelism: report
            .metrics
            .as_ref()
            .map(|m| (m.from_ns, m.bin_ns, &m.parallelism[..])),
    };
    let mut tick = progress.counted("writing", view.calls());
    let s = with_output(output, |w| {
        timeline::write(&view, &title, window, Some(&overlay), reload, w, &mut tick)
    })?;
    drop(progress);
    if !quiet && args.output.as_os_str() != "-" {
        eprintln!(
            "pmtrace: wrote {} ({} lanes, {} calls, {} messages, {} of them backward in raw time; {})",
            args.output.display(),
            s.lanes,
            s.calls,
            s.messages,
            s.reversed_raw,
            pmtrace_report::human_bytes(s.bytes)
        );
    }
    if !quiet {
        leave(trace);
    }
    Ok(())
}

/// Says that a trace is synchronized in memory because `pmtrace sync` did
/// not run on it.
/// Ends a verb's use of the trace without freeing it: the process exits
/// next, and handing hundreds of MB back page by page only costs time
/// (3% of a report).
fn leave(trace: Trace) {
    std::mem::forget(trace);
}

fn note_not_synced(dir: &Path) {
    eprintln!(
        "pmtrace: note: {} is not synced; synchronizing in memory (`pmtrace sync` keeps the result)",
        dir.display()
    );
}

/// Runs `write` on a buffered `path` (`-`: standard output).
fn with_output<T>(path: &Path, write: impl FnOnce(&mut dyn Write) -> io::Result<T>) -> Result<T> {
    if path.as_os_str() == "-" {
        let mut out = BufWriter::new(io::stdout().lock());
        let v = write(&mut out).context("cannot write to standard output")?;
        out.flush().context("cannot write to standard output")?;
        Ok(v)
    } else {
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let v = write(&mut out).with_context(|| format!("cannot write {}", path.display()))?;
        out.flush()
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(v)
    }
}

/// The wait states and the critical path's stretches of a trace, on
/// `synced`'s times when given, as the Parquet export writes them.
fn analyses(
    trace: &Trace,
    messages: &Messages,
    synced: Option<&Synced>,
) -> (Vec<parquet::WaitState>, Vec<parquet::PathStretch>) {
    let options = ReportOptions {
        insight: true,
        path_only: true,
        ..ReportOptions::default()
    };
    let mut report = Report::build_on(trace, messages, options, synced);
    let found = report.insight.take().unwrap_or_default().found;
    let waits = found.iter().map(parquet::WaitState::from).collect();
    let path = (report.critical_path.as_mut())
        .map(|cp| std::mem::take(&mut cp.stretches))
        .unwrap_or_default();
    (waits, path)
}

/// The races of `trace` on the clocks it recorded (none without wildcard
/// receives), a row per receive and message it could have taken.
fn race_rows(trace: &Trace, messages: &Messages) -> Vec<parquet::RaceRow> {
    let wild = races::wildcards(trace, messages);
    if wild.is_empty() {
        return Vec::new();
    }
    let vector = trace.ranks[0].header.clocks == "vector";
    let probed = races::probed_receives(messages, &wild);
    let clocks = RaceClocks::compute(trace, messages, vector, &probed);
    let found = Races::build(trace, messages, &wild, &clocks);
    parquet::RaceRow::of(&found.races)
}

fn export(args: ExportArgs) -> Result<ExitCode> {
    memory::check(&args.dir, "export", memory::cost::EXPORT)?;
    let progress = progress::Progress::new();
    progress.phase("reading the trace");
    let trace = Trace::open(&args.dir)?;
    for warning in trace.all_warnings() {
        eprintln!("pmtrace: warning: {warning}");
    }
    for rank in trace.incomplete_ranks() {
        eprintln!("pmtrace: warning: rank {rank} did not reach MPI_Finalize; its events end early");
    }
    if args.format == ExportFormat::Text {
        if args.output.as_os_str() == "-" {
            let mut out = BufWriter::new(io::stdout().lock());
            text::write(&trace, &mut out).context("cannot write to standard output")?;
        } else {
            text::write_file(&trace, &args.output)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    progress.phase("matching messages");
    let messages = Messages::build(&trace);
    let stored = Synced::load(&trace)?;
    let synced = match (stored, args.format) {
        (Some(s), _) => Some(s),
        (None, ExportFormat::Otf2 | ExportFormat::Parquet) => None,
        (None, _) => {
            note_not_synced(&args.dir);
            progress.phase("synchronizing timestamps");
            Some(pmtrace_sync::sync(
                &trace,
                &messages,
                &SyncParams::default(),
            ))
        }
    };
    progress.phase("computing clocks and collectives");
    let view = View::new(&trace, &messages, synced.as_ref());
    let mut tick = progress.counted("writing", view.calls());
    match args.format {
        ExportFormat::Otf2 => {
            if args.output.as_os_str() == "-" {
                bail!("an OTF2 archive is a directory: give one with -o");
            }
            let summary = otf2::write(&view, &args.output, &mut tick)?;
            drop(progress);
            println!(
                "OTF2 archive {} ({} locations, {} events, {} time)",
                args.output
                    .join(format!("{}.otf2", otf2::ARCHIVE_NAME))
                    .display(),
                summary.locations,
                summary.events,
                if summary.synced {
                    "synchronized"
                } else {
                    "recorded"
                }
            );
        }
        ExportFormat::Perfetto | ExportFormat::Chrome => {
            let what = with_output(&args.output, |w| {
                Ok(if args.format == ExportFormat::Perfetto {
                    let s = perfetto::write(&view, w, &mut tick)?;
                    format!(
                        "{} slices, {} in flight, {} message flows, {} collective flows",
                        s.slices, s.in_flight_slices, s.message_flows, s.collective_flows
                    )
                } else {
                    let s = chrome::write(&view, w, &mut tick)?;
                    format!(
                        "{} slices, {} message flows, {} collective flows",
                        s.slices, s.message_flows, s.collective_flows
                    )
                })
            })?;
            if args.output.as_os_str() != "-" {
                eprintln!("pmtrace: wrote {} ({what})", args.output.display());
            }
        }
        ExportFormat::Parquet => {
            if args.output.as_os_str() == "-" {
                bail!("a Parquet export is a directory of tables: give one with -o");
            }
            // The wait states and the critical path, on the view's time
            // base, found while the other tables are written.
            // The analyses' tables are found and written on a thread of
            // their own while the others are written.
            parquet::prepare(&args.output, parquet::Layout::Files)?;
            let (written, analysed) = std::thread::scope(|scope| {
                let analysing = scope.spawn(|| {
                    let (waits, path) = analyses(&trace, &messages, synced.as_ref());
                    let races = race_rows(&trace, &messages);
                    let a = parquet::Analyses {
                        waits: &waits,
                        path: &path,
                        races: &races,
                    };
                    parquet::write_analyses(&view, &a, &args.output)
                });
                let pending = parquet::Pending::of(&trace);
                let written = parquet::write_prepared(&view, &pending, &args.output, &mut tick);
                (written, analysing.join())
            });
            let mut s = written?;
            let (w, p, r) = analysed.unwrap_or_else(|e| std::panic::resume_unwind(e))?;
            (s.wait_states, s.path_segments, s.races) = (Some(w), Some(p), Some(r));
            drop(progress);
            println!(
                "Parquet tables in {} ({}; {} time)",
                args.output.display(),
                s.counts(),
                if s.synced { "synchronized" } else { "recorded" }
            );
        }
        ExportFormat::Text => unreachable!("handled above"),
    }
    leave(trace);
    Ok(ExitCode::SUCCESS)
}
