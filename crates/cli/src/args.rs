//! The arguments of the verbs that read a trace, shared by `pmtrace` and
//! `pmtrace-mpi` (which takes the same ones).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// Message races: the wildcard receives (MPI_ANY_SOURCE receives, and
/// wildcard probes) that could have matched another send.
///
/// For each wildcard receive, lists the sends, from other sources, that
/// were concurrent with it under MPI's matches-before order and so could
/// have matched it in another run (Vo's DAMPI, Theorems 5.3 and 5.5). The
/// text groups them by receive site and says which outcomes a test would
/// have to cover. With vector clocks the answer is exact; with Lamport
/// clocks every race shown is real, but some may be missed.
#[derive(Debug, Args)]
pub struct RacesArgs {
    /// The trace directory.
    pub dir: PathBuf,
    /// Print one JSON object (keys: mode, exact, wildcard_receives,
    /// racy_receives, alternatives, unresolved, sites, races).
    #[arg(long)]
    pub json: bool,
    /// The clocks to decide with: vector (exact; the clocks are rebuilt
    /// from the whole trace, one entry per rank for every message in
    /// flight) or lamport. Default: the clocks the trace was recorded with.
    #[arg(long, value_parser = ["vector", "lamport"])]
    pub clocks: Option<String>,
}

/// The critical path: the chain of computation and communication that
/// decided how long the application's work took.
///
/// Found backward from where the last rank entered MPI_Finalize to the last
/// end of MPI_Init, on the times `pmtrace sync` wrote (recorded times
/// otherwise): time between calls is computation; where a call waited for
/// a late rank (a late sender, a collective's last member, ...), the path
/// goes on in that rank. Prints its length, its share per rank and per
/// activity (each MPI function, and computation), and its longest
/// stretches. Beside it, Jiang's weighted critical path: the heaviest chain
/// of work through the execution graph when time weighs more while fewer
/// ranks compute, and in words where the two paths differ. `pmtrace report`
/// shows the same beside wait states.
#[derive(Debug, Args)]
pub struct CriticalPathArgs {
    /// The trace directory.
    pub dir: PathBuf,
    /// Print one JSON object (keys: length_ns, by_rank, by_activity,
    /// segments, hops, time_base, from_ns, to_ns, weighted, differences).
    #[arg(long)]
    pub json: bool,
}

/// Summarise a trace: profile, message matrix, message matching and
/// timestamp violations.
///
/// Reads every rank file of DIR (a directory written by a traced run),
/// matches point-to-point messages by MPI's FIFO rule and prints a summary:
/// run facts, the time and bytes of each MPI function, each rank, the
/// message matrix, unmatched messages, and messages whose receive is
/// timestamped before their send. Ranks that never reached MPI_Finalize are
/// read as far as they got and reported as incomplete.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The trace directory.
    pub dir: PathBuf,
    /// Print one JSON object instead of text (keys: ranks, events, messages,
    /// violations, violations_after_sync, functions, per_rank, matrix, ...).
    #[arg(long)]
    pub json: bool,
    /// Minimum message latency μ, in ns, for the clock-condition count:
    /// a matched message violates it if received before send time + μ.
    #[arg(long, value_name = "NS", default_value_t = 0)]
    pub mu_ns: u64,
}

/// Correct the timestamps of a trace so that no message points backward
/// in time.
///
/// Three steps, each measured: (1) each rank's clock offset to rank 0,
/// measured inside MPI_Init and MPI_Finalize, interpolated linearly;
/// (2) the offset left, estimated from the application's messages both
/// ways (fastest message each way per time window, a fitted line or,
/// when the drift changed, a piecewise line), through other ranks where a
/// rank never talks to rank 0; (3) the controlled logical clock (Becker et
/// al.), which pushes every receive (and collective exit) to at least its
/// send (enter) + μ and amortizes each jump forward (γ) and backward (a
/// ramp that stops sends short of their receives).
///
/// The corrected times go to DIR/sync.pmts; the rank files are never
/// changed. `pmtrace report` then shows the violations left and the
/// quality of each step.
#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The trace directory.
    pub dir: PathBuf,
    /// Pace of the clock after a jump, in (0, 1].
    #[arg(long, default_value_t = 0.99, value_parser = parse_gamma)]
    pub gamma: f64,
    /// Minimum step between two timestamps recorded apart, in ns.
    #[arg(long, value_name = "NS", default_value_t = 1)]
    pub delta_ns: u64,
    /// Minimum message latency between ranks of one host with different
    /// clocks, in ns [default: measured at MPI_Init].
    #[arg(long, value_name = "NS")]
    pub mu_intra_ns: Option<u64>,
    /// Minimum message latency between hosts, in ns [default: measured at
    /// MPI_Init, else the intra-host value].
    #[arg(long, value_name = "NS")]
    pub mu_inter_ns: Option<u64>,
    /// Backward amortization window, in ns [default: each jump divided by
    /// --ramp].
    #[arg(long, value_name = "NS")]
    pub window_ns: Option<u64>,
    /// Slope of the backward ramp when the window is not fixed.
    #[arg(long, default_value_t = 0.01, value_parser = parse_ramp)]
    pub ramp: f64,
    /// Skip step 2 (the regression over messages).
    #[arg(long)]
    pub no_regression: bool,
    /// Print the sync report as one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn parse_gamma(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(g) if g > 0.0 && g <= 1.0 => Ok(g),
        _ => Err(format!("{s} is not a number in (0, 1]")),
    }
}

pub fn parse_ramp(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 1.0 => Ok(r),
        _ => Err(format!("{s} is not a slope in (0, 1]")),
    }
}

/// Write one log of all ranks' events in synchronized-time order.
///
/// Two lines per call (its start, `enter`, with its arguments, and its
/// end, `exit`), in the order of the times `pmtrace sync` wrote; that
/// order is causal too: a receive never precedes its send. A trace that
/// was not synced is synchronized in memory first, with the defaults.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The trace directory.
    pub dir: PathBuf,
    /// Output file; `-` writes to standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
}

/// Write a trace in another format.
///
/// `otf2` writes an OTF2 archive (for Vampir, Scalasca, otf2-print) into
/// the directory OUT: traces.otf2, traces.def and traces/. Synchronized
/// times when `pmtrace sync` ran, else the recorded ones with each rank's
/// measured clock offsets as ClockOffset definitions.
///
/// `perfetto` writes Perfetto's protobuf trace (open it in the Perfetto
/// UI): one track per rank and thread, a slice per MPI call, async tracks
/// for nonblocking operations in flight, and a flow arrow per message and
/// per logical message of a collective.
///
/// `chrome` writes Trace Event Format JSON (chrome://tracing): complete
/// events for MPI calls and flow events for messages.
///
/// Perfetto and Chrome use synchronized times; a trace that was not synced
/// is synchronized in memory first (`pmtrace sync` keeps the result).
///
/// `parquet` writes a directory of Parquet tables (pandas, polars, DuckDB,
/// Spark): `calls`, `messages`, `unmatched` and `ranks` (see the README
/// for their columns). Times are ns, synchronized when `pmtrace sync`
/// ran, with the recorded ones beside them.
///
/// `text` writes one line per recorded event, all ranks and threads merged
/// in recorded-time order: `r<rank> t<thread> <start ns> +<duration ns>
/// <name> key=value...`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The trace directory.
    pub dir: PathBuf,
    /// Output format.
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// Output file (a directory for OTF2 and Parquet); `-` writes to
    /// standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
}

/// Write a self-contained HTML timeline of the trace (no network needed).
///
/// Open the file in any browser: one lane per rank (and thread), MPI calls
/// coloured by kind, computation as the gaps between them, message arrows
/// from each send to the call that completed its receive. Wheel zooms,
/// drag pans, hovering shows a call's function, peer, tag, bytes and
/// Lamport clock. A switch shows raw or synchronized time; in raw time the
/// messages that point backward are drawn red. Zoomed out, a million calls
/// are drawn as per-pixel summaries. A trace that was not synced is
/// synchronized in memory first (`pmtrace sync` keeps the result).
#[derive(Debug, Args)]
pub struct TimelineArgs {
    /// The trace directory.
    pub dir: PathBuf,
    /// The HTML file to write; `-` writes to standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Draw only from this time on, after the trace's start (e.g. `1.5s`,
    /// `250ms`, `40us`; a bare number is seconds).
    #[arg(long, value_name = "TIME", value_parser = parse_offset)]
    pub from: Option<u64>,
    /// Draw only up to this time after the trace's start.
    #[arg(long, value_name = "TIME", value_parser = parse_offset)]
    pub to: Option<u64>,
    /// Follow a running job: rewrite FILE every interval until the job
    /// ends (the page reloads itself meanwhile), then write it once more,
    /// as without --follow, and exit.
    #[arg(long)]
    pub follow: bool,
    /// Seconds between rewrites with --follow.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0, value_parser = positive_seconds)]
    pub interval: f64,
}

/// A number of seconds above 0 (and below a million).
pub fn positive_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() && x < 1e6 => Ok(x),
        _ => Err(format!("{s} is not a positive number of seconds")),
    }
}

/// A time after the trace's start, in ns: a number with an optional unit
/// (`s`, `ms`, `us`, `ns`; seconds without one).
pub fn parse_offset(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit {
        "" | "s" => 1e9,
        "ms" => 1e6,
        "us" | "µs" => 1e3,
        "ns" => 1.0,
        _ => return Err(format!("unknown unit {unit:?} (use s, ms, us or ns)")),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok((v * scale).round() as u64),
        _ => Err(format!("{s:?} is not a time such as 1.5s or 250ms")),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    Otf2,
    Perfetto,
    Chrome,
    Text,
    Parquet,
}
