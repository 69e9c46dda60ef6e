//! Timestamp synchronization: `pmtrace sync`.
//!
//! ```text
//!  recorded times ─► 1 interpolate ─► 2 regress ─► 3 CLC ─► sync.pmts
//!                    offsets at init   offsets from   forward and backward
//!                    and finalize      the messages   amortization
//! ```
//!
//! 1. [`interp`]: each rank's offset to rank 0, measured at `MPI_Init` and
//!    `MPI_Finalize`, interpolated linearly.
//! 2. [`regress`]: what is left of each clock group's offset, estimated
//!    from the matched messages both ways, through other groups where a
//!    group never talks to rank 0's.
//! 3. [`clc`]: the controlled logical clock removes the violations left,
//!    point-to-point and collective, keeping local intervals.
//!
//! The work is done on a [`graph::Graph`] of every timestamp. Each step is
//! measured ([`quality`]): violations, events moved, interval deviation,
//! order kept, and, under `PMTRACE_CLOCK_SIM`, the error against the true
//! time. The result is stored beside the rank files ([`store`]); the
//! recorded times are never touched.

pub mod clc;
pub mod extremes;
pub mod graph;
pub mod interp;
pub mod quality;
pub mod regress;
pub mod replay;
pub mod scope;
pub mod store;

use std::time::Instant;

use serde::{Deserialize, Serialize};

pub use clc::ClcParams;
pub use graph::{Graph, Times};
pub use quality::{ErrorStats, SyncViolations};
pub use scope::{Scope, Whole};
pub use store::Synced;

use pmtrace_matching::matching::Messages;
use pmtrace_trace::read::Trace;

/// What `pmtrace sync` may be told.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SyncParams {
    pub clc: ClcParams,
    /// μ between clock groups of one host; `None`: measured at init.
    pub mu_intra_ns: Option<u64>,
    /// μ between hosts; `None`: measured at init.
    pub mu_inter_ns: Option<u64>,
    /// Step 2 (regression over the messages).
    pub regression: bool,
}

impl Default for SyncParams {
    fn default() -> Self {
        SyncParams {
            clc: ClcParams::default(),
            mu_intra_ns: None,
            mu_inter_ns: None,
            regression: true,
        }
    }
}

/// The parameters a sync ran with, as the report shows them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UsedParams {
    pub gamma: f64,
    pub delta_ns: u64,
    pub mu_intra_ns: u64,
    pub mu_inter_ns: u64,
    /// `null`: each jump's window is the jump divided by `ramp`.
    pub window_ns: Option<u64>,
    pub ramp: f64,
    pub regression: bool,
}

/// The times before any step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Recorded {
    pub violations: SyncViolations,
    pub error_ns: Option<ErrorStats>,
}

/// One step and the times after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepReport {
    pub name: String,
    /// Events (records) with a timestamp this step changed.
    pub events_moved: u64,
    pub max_shift_ns: u64,
    pub violations: SyncViolations,
    /// Becker's weighted interval deviation against the recorded intervals.
    pub interval_deviation: f64,
    /// Neighbouring timestamps of one thread whose order changed (always 0).
    pub order_inversions: u64,
    pub error_ns: Option<ErrorStats>,
    /// regress: clock groups with a path of messages to rank 0's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups_reached: Option<u64>,
    /// clc: receives pushed forward.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jumps: Option<u64>,
    /// clc: timestamps whose send was never recorded (lost events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced: Option<u64>,
}

/// What `pmtrace report --json` shows under `sync`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyncReport {
    pub params: UsedParams,
    /// Sets of ranks that read one clock.
    pub clock_groups: u64,
    /// Timestamps synchronized (two per record).
    pub timestamps: u64,
    pub recorded: Recorded,
    pub steps: Vec<StepReport>,
    /// After the last step.
    pub interval_deviation: f64,
    /// After the last step; `null` unless the run simulated clocks.
    pub error_ns: Option<ErrorStats>,
    /// The stamps before their rank's first offset measurement, with how
    /// far they may be off; absent when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub early: Option<quality::Early>,
    pub seconds: f64,
}

impl SyncReport {
    /// The report's sync section, as a person reads it.
    pub fn write_text(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        use pmtrace_trace::units::human_ns;
        let p = &self.params;
        writeln!(
            w,
            "\nTimestamp sync ({} clock groups; γ {}, δ {} ns, μ {} ns within a host, {} ns across hosts; {:.2} s)",
            self.clock_groups, p.gamma, p.delta_ns, p.mu_intra_ns, p.mu_inter_ns, self.seconds
        )?;
        writeln!(
            w,
            "  {:<12} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}  error median / p99 / max",
            "step", "moved", "max shift", "reversed", "cond.", "coll.rev", "coll.cond", "int.dev",
        )?;
        let err = |e: &Option<ErrorStats>| match e {
            Some(e) => format!(
                "{} / {} / {}",
                human_ns(e.median as f64),
                human_ns(e.p99 as f64),
                human_ns(e.max as f64)
            ),
            None => "-".into(),
        };
        let row = |w: &mut dyn std::io::Write,
                   name: &str,
                   moved: String,
                   shift: String,
                   v: &SyncViolations,
                   dev: String,
                   e: String| {
            writeln!(
                w,
                "  {:<12} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}  {}",
                name,
                moved,
                shift,
                v.reversed,
                v.clock_condition,
                v.collective_reversed,
                v.collective_clock_condition,
                dev,
                e
            )
        };
        row(
            w,
            "recorded",
            "-".into(),
            "-".into(),
            &self.recorded.violations,
            "-".into(),
            err(&self.recorded.error_ns),
        )?;
        for s in &self.steps {
            row(
                w,
                &s.name,
                s.events_moved.to_string(),
                human_ns(s.max_shift_ns as f64),
                &s.violations,
                format!("{:.4}%", s.interval_deviation * 100.0),
                err(&s.error_ns),
            )?;
        }
        if let Some(e) = &self.early {
            let bound = e
                .bound_ns
                .map_or("unknown (a rank was measured once)".into(), |b| {
                    format!("±{}", human_ns(b as f64))
                });
            write!(
                w,
                "  {} stamps before their rank's first clock measurement (in MPI_Init; up to {} before it): within {bound}",
                e.stamps,
                human_ns(e.before_ns as f64),
            )?;
            match (e.error_ns, e.rest_error_ns) {
                (Some(a), Some(b)) => writeln!(
                    w,
                    "; error {}, every other stamp {}",
                    err(&Some(a)),
                    err(&Some(b))
                )?,
                _ => writeln!(w)?,
            }
        }
        Ok(())
    }
}

/// μ measured at init and finalize: the smallest over every rank.
pub fn measured_mu(lines: &[interp::OffsetLine]) -> (Option<u64>, Option<u64>) {
    let samples = lines
        .iter()
        .flat_map(|l| [l.init, l.fin].into_iter().flatten());
    let (mut intra, mut inter): (Option<u64>, Option<u64>) = (None, None);
    for s in samples {
        if let Some(v) = s.latency_intra_ns {
            intra = Some(intra.map_or(v, |m| m.min(v)));
        }
        if let Some(v) = s.latency_inter_ns {
            inter = Some(inter.map_or(v, |m| m.min(v)));
        }
    }
    (intra, inter)
}

/// The measured μ, lowered to what the messages show; 0 if unmeasured.
fn cap(measured: Option<u64>, shown: Option<u64>) -> u64 {
    match (measured, shown) {
        (Some(m), Some(s)) => m.min(s),
        (Some(m), None) => m,
        (None, _) => 0,
    }
}

/// μ within a host and across hosts: as given, else as measured at init
/// (across hosts: within a host where only that was measured), but never
/// more than the messages themselves show (`floors`, the 1st percentiles
/// of their latencies): a startup measurement on a loaded node can be far
/// above the latency of the run.
pub fn choose_mu(
    params: &SyncParams,
    (intra, inter): (Option<u64>, Option<u64>),
    (floor_intra, floor_inter): (Option<u64>, Option<u64>),
) -> (u64, u64) {
    (
        params.mu_intra_ns.unwrap_or(cap(intra, floor_intra)),
        params
            .mu_inter_ns
            .unwrap_or(cap(inter.or(intra), floor_inter)),
    )
}

/// Synchronizes the timestamps of `trace`.
pub fn sync(trace: &Trace, m: &Messages, params: &SyncParams) -> Synced {
    let began = Instant::now();
    sync_graph(trace, Graph::build(trace, m, 0, 0), params, began)
}

/// [`sync`], the messages going once the graph has their edges: they are
/// a large trace's largest part, and the replays need only the graph.
pub fn sync_given(trace: &Trace, m: Messages, params: &SyncParams) -> Synced {
    let began = Instant::now();
    sync_graph(trace, Graph::build_given(trace, m, 0, 0), params, began)
}

fn sync_graph<'t>(trace: &'t Trace, g: Graph<'t>, params: &SyncParams, began: Instant) -> Synced {
    let mut s = Whole { trace, g };
    let (after, report) = run(&mut s, params, began);
    Synced::from_graph(trace, &s.g, after, report)
}

/// The three steps and the measure of each, in scope `s`: the times after
/// step 3 (in the graph's node order) and the report, the same in every
/// scope of a run. `began`: when the verb began, for the report's seconds.
pub fn run<'t>(
    s: &mut impl Scope<'t>,
    params: &SyncParams,
    began: Instant,
) -> (Vec<Vec<u64>>, SyncReport) {
    let trace = s.trace();
    let lines = interp::lines(trace);
    let line = |rank: u32| &lines[(rank - trace.first) as usize];
    let (intra, inter) = measured_mu(&lines);
    let (intra, inter) = (s.min_of(intra), s.min_of(inter));
    let simulated = s.sum_of(
        trace
            .ranks
            .iter()
            .filter(|r| r.header.clock_sim.is_some())
            .count() as u64,
    ) > 0;
    let groups = s.max_of(s.graph().groups() as u64) as usize;
    // Steps 1 and 2, as functions of the recorded times.
    let mut reached = None;
    let correction = params.regression.then(|| {
        let g = s.graph();
        let t1 = interp::Stepped::interpolated(g, &lines);
        let reference = s.reference();
        // Per group: the largest bound of step 1 (0: none; else bound + 1).
        let mut anchors = vec![0u64; groups];
        for loc in &g.locs {
            if let Some(bound) = line(loc.rank).bound() {
                let a = &mut anchors[loc.group as usize];
                *a = (*a).max(bound + 1);
            }
        }
        s.max(&mut anchors);
        let anchors: Vec<Option<u64>> = anchors.iter().map(|&a| a.checked_sub(1)).collect();
        // Where step 1 was measured: the first location's time, every
        // location's largest bound.
        let mut checks: regress::Checks = vec![[None, None]; groups];
        for loc in &g.locs {
            let line = line(loc.rank);
            for (k, sample) in [line.init, line.fin].into_iter().enumerate() {
                let Some(sample) = sample else { continue };
                let c = &mut checks[loc.group as usize][k];
                let bound = sample.error_ns as f64;
                *c = Some(match *c {
                    Some((t, b)) => (t, b.max(bound)),
                    None => (line.apply(sample.local_ns) as f64, bound),
                });
            }
        }
        let checks = s.checks(checks);
        let correction = s.estimate(&t1, groups, reference, &anchors, &checks);
        reached = Some(correction.reached() as u64);
        correction
    });
    let floors = {
        let input = interp::Stepped::new(s.graph(), &lines, correction.as_ref());
        (
            s.latency_floor(&input, true),
            s.latency_floor(&input, false),
        )
    };
    let g = s.graph_mut();
    (g.mu_intra, g.mu_inter) = choose_mu(params, (intra, inter), floors);
    let s = &*s;
    let g = s.graph();
    let error = |t: &dyn Times| simulated.then(|| s.error_stats(quality::errors(trace, g, t)));
    let recorded = Recorded {
        violations: s.violations(&g.recorded()),
        error_ns: error(&g.recorded()),
    };
    let t1 = interp::Stepped::interpolated(g, &lines);
    let mut steps = vec![step(s, simulated, "interpolate", &g.recorded(), &t1)];
    let t = interp::Stepped::new(g, &lines, correction.as_ref());
    if correction.is_some() {
        // Where step 2 corrects no group its times are step 1's, and so is
        // everything its sweep would find, but the moves.
        let mut st = if reached == Some(0) {
            StepReport {
                name: "regress".into(),
                events_moved: 0,
                max_shift_ns: 0,
                ..steps[0].clone()
            }
        } else {
            step(s, simulated, "regress", &t1, &t)
        };
        st.groups_reached = reached;
        steps.push(st);
    }
    let (after, outcome) = s.clc(&t, &params.clc);
    let mut st = step(s, simulated, "clc", &t, &after);
    st.jumps = Some(outcome.jumps);
    st.forced = Some(outcome.forced);
    steps.push(st);
    let last = steps.last().expect("clc ran");
    let early = {
        let mut p = quality::early_parts(trace, g, &lines, &t1, &after, simulated);
        let mut sums = [p.stamps, u64::from(p.unbounded)];
        s.sum(&mut sums);
        p.stamps = sums[0];
        p.unbounded = sums[1] > 0;
        p.before_ns = s.max_of(p.before_ns);
        p.bound_ns = s.max_of(p.bound_ns);
        p.finish_with(|errs| s.error_stats(errs))
    };
    let report = SyncReport {
        params: UsedParams {
            gamma: params.clc.gamma,
            delta_ns: params.clc.delta_ns,
            mu_intra_ns: g.mu_intra,
            mu_inter_ns: g.mu_inter,
            window_ns: params.clc.window_ns,
            ramp: params.clc.ramp,
            regression: params.regression,
        },
        clock_groups: groups as u64,
        timestamps: s.sum_of(g.stamps() as u64),
        recorded,
        interval_deviation: last.interval_deviation,
        error_ns: last.error_ns,
        steps,
        early,
        seconds: began.elapsed().as_secs_f64(),
    };
    (after, report)
}

/// What one step did: from times `before` to times `after`, measured over
/// every scope.
fn step<'t>(
    s: &impl Scope<'t>,
    simulated: bool,
    name: &str,
    before: &(impl Times + ?Sized + Sync),
    after: &(impl Times + ?Sized + Sync),
) -> StepReport {
    let mut parts = quality::sweep_parts(s.trace(), s.graph(), before, after, simulated);
    let mut sums = [
        parts.events_moved,
        parts.order_inversions,
        (parts.deviation >> 64) as u64,
        parts.deviation as u64,
        (parts.recorded >> 64) as u64,
        parts.recorded as u64,
    ];
    // 128-bit sums: low words summed apart, their carries into the high ones.
    let mut lows = [
        sums[3] >> 32,
        sums[3] & 0xffff_ffff,
        sums[5] >> 32,
        sums[5] & 0xffff_ffff,
    ];
    s.sum(&mut lows);
    s.sum(&mut sums[..3]);
    let mut high = [sums[4]];
    s.sum(&mut high);
    let join =
        |hi: u64, a: u64, b: u64| (u128::from(hi) << 64) + (u128::from(a) << 32) + u128::from(b);
    parts.events_moved = sums[0];
    parts.order_inversions = sums[1];
    parts.deviation = join(sums[2], lows[0], lows[1]);
    parts.recorded = join(high[0], lows[2], lows[3]);
    parts.max_shift_ns = s.max_of(parts.max_shift_ns);
    let sweep = parts.finish_with(|errs| s.error_stats(errs));
    StepReport {
        name: name.into(),
        events_moved: sweep.events_moved,
        max_shift_ns: sweep.max_shift_ns,
        violations: s.violations(after),
        interval_deviation: sweep.interval_deviation,
        order_inversions: sweep.order_inversions,
        error_ns: sweep.error_ns,
        groups_reached: None,
        jumps: None,
        forced: None,
    }
}
