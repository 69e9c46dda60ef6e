//! The `pmtrace` command line: its verbs and options, parsed (clap) and
//! checked, apart from running them, so that the parsing is fuzzed
//! (fuzz/, target `options`) without doing anything.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use pmtrace_synth::{ClockMode, Imbalance, SynthSpec};

use crate::args::*;
use crate::launch;

/// Trace MPI programs and analyse their traces.
#[derive(Debug, Parser)]
#[command(
    name = "pmtrace",
    version,
    propagate_version = true,
    after_help = "Typical use:\n  pmtrace run --out ring.trace -- mpirun -np 4 ./ring\n  pmtrace sync ring.trace\n  pmtrace report ring.trace\n  pmtrace export ring.trace --format text -o ring.txt"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Memory a verb may use, in bytes or with K, M, G or T (e.g. 800M)
    /// [default: what the machine, the process's cgroup and its ulimit
    /// leave]. A trace that needs more is worked on out of core, its large
    /// tables in files in PMTRACE_SPILL_DIR (default: the trace directory).
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_size)]
    pub memory: Option<u64>,
}

pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len()));
    let shift = match unit.to_ascii_uppercase().trim_end_matches(['B', 'I']) {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("{s} is not a size (for example 800M or 4G)")),
    };
    match digits.trim().parse::<f64>() {
        Ok(n) if n > 0.0 && n.is_finite() => Ok((n * (1u64 << shift) as f64) as u64),
        _ => Err(format!("{s} is not a size (for example 800M or 4G)")),
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Report(ReportArgs),
    Sync(SyncArgs),
    Merge(MergeArgs),
    Export(ExportArgs),
    Timeline(TimelineArgs),
    CriticalPath(CriticalPathArgs),
    Races(RacesArgs),
    Run(launch::RunArgs),
    Synth(SynthArgs),
    Top(TopArgs),
}

/// Watch a running job: what each rank is doing now, and why a hung job
/// is hung.
///
/// Reads the live status files (rank-*.live) every rank of a job started
/// with `pmtrace run`, or with the library preloaded, keeps in its trace
/// directory: per rank and thread, the MPI call it is in and for how long,
/// or how long it has been computing; its rates of calls, messages and
/// bytes; its phase. Below: the ranks others wait for, the collectives
/// still waiting and for whom, and a hang: a *deadlock* when the waits of
/// blocked ranks form a cycle, or *stalled* when they end at a rank that
/// computes, finished or is gone, once it has lasted --hang-after. Opens
/// the files read-only; exits when every rank has finished or is gone.
/// On a terminal it draws a full-screen view (q quits); otherwise, or with
/// --json, it prints.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// The trace directory (the job's PMTRACE_DIR or `pmtrace run --out`).
    pub dir: PathBuf,
    /// Print one JSON object per refresh, a line each (keys: ranks[] with
    /// rank, state, call, for_ns, peer, waits_for, calls, messages_sent,
    /// bytes_sent, rates, phase, site[], threads[]; summary; hang: null, or
    /// kind, ranks[], waits[] with rank, call, waits_for, for_ns, site).
    #[arg(long)]
    pub json: bool,
    /// One snapshot, then exit (its rates span one interval).
    #[arg(long)]
    pub once: bool,
    /// Seconds a cycle or chain of waits must last to be called a hang.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0, value_parser = positive_seconds)]
    pub hang_after: f64,
    /// Seconds between refreshes.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0, value_parser = positive_seconds)]
    pub interval: f64,
}

/// Write a simulated trace of N ranks with known truth, for testing
/// post-processing at scale.
///
/// Simulates a 2D stencil program in true time and writes the trace the
/// runtime would have written for it under PMTRACE_CLOCK_SIM: ranks on a
/// grid as square as N allows; MPI_Init, MPI_Comm_split into row
/// communicators; each iteration a computation, a halo exchange with the
/// (up to) 4 grid neighbours (MPI_Irecv, MPI_Isend, MPI_Waitall), and now
/// and then an MPI_Allreduce on the world, an MPI_Bcast on the row, and a
/// round of wildcard receives (each row's first rank receives one message
/// from every other member with MPI_ANY_SOURCE, in the order they arrive);
/// MPI_Finalize. One rank computes longer (the injected imbalance). Every
/// rank but 0 has a skewed, drifting clock, recorded in its header so that
/// the true time of every event is known; clock offsets are measured at
/// MPI_Init and MPI_Finalize with realistic errors; messages carry
/// piggybacked Lamport clocks and ids.
///
/// Writes OUT/rank-NNNNN.pmt and OUT/truth.json (what was injected: the
/// imbalanced rank and its extra computation, the clock parameters, the
/// counts of events and messages), and prints one summary line.
#[derive(Debug, Args)]
pub struct SynthArgs {
    /// The trace directory to write: new, or without a trace in it.
    pub out: PathBuf,
    /// Number of ranks (at least 2).
    #[arg(long, value_name = "N")]
    pub ranks: u32,
    /// Iterations of the program [default: 20].
    #[arg(long, value_name = "K")]
    pub iterations: Option<u32>,
    /// Seed of every random draw (clocks, jitter, latencies) [default: 1].
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// Simulated hosts, blocks of consecutive ranks [default: one per 32 ranks].
    #[arg(long, value_name = "H")]
    pub hosts: Option<u32>,
    /// The rank that computes FACTOR times as long, or `none` [default: the
    /// grid's middle rank, factor 2].
    #[arg(long, value_name = "RANK[:FACTOR]|none")]
    pub imbalance: Option<String>,
    /// Iterations the imbalance lasts, FROM..TO (TO excluded) [default: all].
    #[arg(long, value_name = "FROM..TO")]
    pub imbalance_iterations: Option<String>,
    /// What messages carry: lamport (piggybacked Lamport clocks and
    /// message ids) or none.
    #[arg(long, value_parser = ["lamport", "none"], default_value = "lamport")]
    pub clocks: String,
    /// Computation per iteration, in µs [default: 2000].
    #[arg(long, value_name = "US")]
    pub compute_us: Option<u64>,
    /// Clock offsets are drawn in ±US µs [default: 5000].
    #[arg(long, value_name = "US")]
    pub offset_us: Option<f64>,
    /// Clock drifts are drawn in ±PPM ppm [default: 50].
    #[arg(long, value_name = "PPM")]
    pub drift_ppm: Option<f64>,
    /// An MPI_Allreduce on the world every K iterations, 0 never [default: 2].
    #[arg(long, value_name = "K")]
    pub allreduce_every: Option<u32>,
    /// An MPI_Bcast on each row every K iterations, 0 never [default: 10].
    #[arg(long, value_name = "K")]
    pub bcast_every: Option<u32>,
    /// A round of wildcard receives every K iterations, 0 never [default: 4].
    #[arg(long, value_name = "K")]
    pub wildcard_every: Option<u32>,
}

/// The trace `pmtrace synth` is asked for: every option taken and checked
/// (`--imbalance RANK[:FACTOR]|none`, `--imbalance-iterations FROM..TO`).
pub fn synth_spec(args: &SynthArgs) -> Result<SynthSpec> {
    let mut spec = SynthSpec::new(args.ranks);
    spec.iterations = args.iterations.unwrap_or(spec.iterations);
    spec.seed = args.seed.unwrap_or(spec.seed);
    spec.hosts = args.hosts.unwrap_or(spec.hosts);
    if let Some(us) = args.compute_us {
        spec.compute_ns = us
            .checked_mul(1000)
            .with_context(|| format!("--compute-us {us} is too large"))?;
    }
    spec.offset_us = args.offset_us.unwrap_or(spec.offset_us);
    spec.drift_ppm = args.drift_ppm.unwrap_or(spec.drift_ppm);
    spec.allreduce_every = args.allreduce_every.unwrap_or(spec.allreduce_every);
    spec.bcast_every = args.bcast_every.unwrap_or(spec.bcast_every);
    spec.wildcard_every = args.wildcard_every.unwrap_or(spec.wildcard_every);
    spec.clocks = match args.clocks.as_str() {
        "none" => ClockMode::None,
        _ => ClockMode::Lamport,
    };
    match args.imbalance.as_deref() {
        None => {}
        Some("none") => spec.imbalance = None,
        Some(text) => {
            let (rank, factor) = text.split_once(':').unwrap_or((text, ""));
            let default = spec.imbalance.as_ref().map_or(2.0, |im| im.factor);
            spec.imbalance = Some(Imbalance {
                rank: rank
                    .parse()
                    .with_context(|| format!("--imbalance {text}: {rank} is not a rank"))?,
                factor: if factor.is_empty() {
                    default
                } else {
                    factor
                        .parse()
                        .with_context(|| format!("--imbalance {text}: {factor} is not a factor"))?
                },
                iterations: 0..u32::MAX,
            });
        }
    }
    if let Some(text) = &args.imbalance_iterations {
        let range = text
            .split_once("..")
            .and_then(|(a, b)| Some(a.parse::<u32>().ok()?..b.parse::<u32>().ok()?))
            .with_context(|| format!("--imbalance-iterations {text} is not FROM..TO"))?;
        match spec.imbalance.as_mut() {
            Some(im) => im.iterations = range,
            None => bail!("--imbalance-iterations needs an imbalance"),
        }
    }
    spec.check().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synth(args: &[&str]) -> Result<SynthSpec> {
        let cli = Cli::try_parse_from(["pmtrace", "synth", "out"].iter().chain(args))?;
        let Command::Synth(args) = cli.command else {
            unreachable!("synth parses as synth")
        };
        synth_spec(&args)
    }

    /// Found by fuzzing (fuzz/regressions/options/compute-us-overflow):
    /// `--compute-us` times 1000 overflowed.
    #[test]
    fn a_computation_too_long_to_count_in_ns_is_an_error() {
        let e = synth(&["--ranks", "4", "--compute-us", "111111111111111110"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--compute-us 111111111111111110 is too large"
        );
        let spec = synth(&["--ranks", "4", "--compute-us", "25"]).unwrap();
        assert_eq!(spec.compute_ns, 25_000);
    }

    #[test]
    fn synth_options_are_checked_before_anything_runs() {
        let spec = synth(&[
            "--ranks",
            "16",
            "--imbalance",
            "3:2.5",
            "--imbalance-iterations",
            "2..9",
        ])
        .unwrap();
        let im = spec.imbalance.unwrap();
        assert_eq!((im.rank, im.factor, im.iterations), (3, 2.5, 2..9));
        assert!(synth(&["--ranks", "16", "--imbalance", "x"]).is_err());
        assert!(synth(&["--ranks", "16", "--imbalance-iterations", "9"]).is_err());
        let none = synth(&[
            "--ranks",
            "16",
            "--imbalance",
            "none",
            "--imbalance-iterations",
            "1..2",
        ]);
        assert_eq!(
            none.unwrap_err().to_string(),
            "--imbalance-iterations needs an imbalance"
        );
    }
}
