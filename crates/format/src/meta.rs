//! Per-rank definitions stored as JSON: the file header (written at
//! `MPI_Init`) and the trailer chunk (written at `MPI_Finalize`).
//! Communicators are defined in the record stream instead (see
//! [`crate::record::Code::DefComm`]), because they appear during the run.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::coll::{Coll, Flow, Shape};

/// One traced function: its name and the kind that fixes its payload layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionDef {
    pub name: String,
    pub kind: String,
    /// A collective's shape and flow, from `wrappers/mpi.wrap` (absent
    /// for other functions, and in traces written before they were
    /// given: see [`FunctionDef::coll`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Shape>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<Flow>,
}

impl FunctionDef {
    /// A function that is no collective.
    pub fn new(name: impl Into<String>, kind: impl Into<String>) -> FunctionDef {
        FunctionDef {
            name: name.into(),
            kind: kind.into(),
            shape: None,
            flow: None,
        }
    }

    /// The function's shape and flow as a collective: as the header
    /// gives them, else worked out from its name ([`Coll::of_name`]).
    pub fn coll(&self) -> Coll {
        match (self.shape, self.flow) {
            (Some(shape), Some(flow)) => Coll { shape, flow },
            _ => Coll::of_name(&self.name),
        }
    }
}

/// How the runtime read time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimerDef {
    /// "tsc" (invariant TSC scaled to ns) or "monotonic" (CLOCK_MONOTONIC).
    pub source: String,
    /// TSC ticks per second, as calibrated at init (tsc only).
    pub tsc_hz: Option<f64>,
    /// Timer resolution in ns.
    pub resolution_ns: f64,
}

/// The whole run, recorded by rank 0 only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInfo {
    pub command_line: Vec<String>,
    pub world_size: u32,
    /// Wall-clock start, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// Effective configuration: every PMTRACE_* setting, defaults included.
    pub config: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub library_version: String,
    pub mpi_library: String,
    pub rank: u32,
    pub world_size: u32,
    pub hostname: String,
    pub pid: u32,
    pub timer: TimerDef,
    /// Timer value (ns) when tracing started on this rank.
    pub start_ns: u64,
    /// Thread support level returned by MPI_Init(_thread).
    pub thread_level: i32,
    /// The MPI library's values of the special ranks and tags, which differ
    /// between implementations.
    pub constants: MpiConstants,
    /// Indexed by function id (record code minus [`crate::record::FIRST_FUNCTION_CODE`]).
    pub functions: Vec<FunctionDef>,
    pub run: Option<RunInfo>,
    /// What every message carried: "lamport", "vector" (world-size vector
    /// clocks too) or "none". The same on every rank.
    #[serde(default = "no_clocks")]
    pub clocks: String,
    /// `PMTRACE_CLOCK_SIM`: this rank's simulated clock (a testing knob).
    /// Every timestamp of the rank went through it.
    #[serde(default)]
    pub clock_sim: Option<crate::sim::ClockSim>,
    /// This rank's clock offset to rank 0, measured inside MPI_Init.
    #[serde(default)]
    pub offset_init: Option<OffsetSample>,
}

/// A clock offset to rank 0: rank 0's time ≈ local time + `offset_ns`, at
/// local time `local_ns`, within ±`error_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetSample {
    pub offset_ns: i64,
    /// Half the round trips along the path to rank 0: a bound on the error.
    pub error_ns: u64,
    pub local_ns: u64,
    /// The rank that measured for this rank's clock (its host's leader; the
    /// rank itself when it has its own clock).
    pub measured_by: u32,
    /// Distinct hosts in the job.
    pub hosts: u32,
    /// Smallest one-way latency (RTT/2) seen within a host, and between
    /// hosts (None where there was no such pair).
    pub latency_intra_ns: Option<u64>,
    pub latency_inter_ns: Option<u64>,
    /// Ping-pongs per measurement (the smallest round trip is kept).
    pub reps: u32,
}

fn no_clocks() -> String {
    "none".into()
}

impl Header {
    /// The true time of this rank's timestamp `t`: `t` itself unless the
    /// run simulated clock skew (`PMTRACE_CLOCK_SIM`).
    pub fn true_time(&self, t: u64) -> u64 {
        self.clock_sim.as_ref().map_or(t, |s| s.true_time(t))
    }

    /// A small valid header for tests.
    pub fn example() -> Self {
        Header {
            library_version: "0.0.0-test".into(),
            mpi_library: "test MPI".into(),
            rank: 0,
            world_size: 2,
            hostname: "node0".into(),
            pid: 42,
            timer: TimerDef {
                source: "monotonic".into(),
                tsc_hz: None,
                resolution_ns: 1.0,
            },
            start_ns: 1000,
            thread_level: 0,
            constants: MpiConstants::OPEN_MPI,
            functions: vec![
                FunctionDef::new("MPI_Send", "send"),
                FunctionDef::new("MPI_Recv", "recv"),
            ],
            run: None,
            clocks: "none".into(),
            clock_sim: None,
            offset_init: None,
        }
    }
}

/// Special values of the MPI library the trace was taken with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MpiConstants {
    pub any_source: i32,
    pub any_tag: i32,
    pub proc_null: i32,
    pub root: i32,
    pub undefined: i32,
}

impl MpiConstants {
    /// Open MPI's values (for tests).
    pub const OPEN_MPI: MpiConstants = MpiConstants {
        any_source: -1,
        any_tag: -1,
        proc_null: -2,
        root: -4,
        undefined: -32766,
    };
}

/// One application thread that recorded events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadDef {
    pub index: u32,
    /// OS thread id.
    pub tid: u64,
    /// Events of this thread that could not be recorded (no buffer could
    /// be had: a full disk, say). Absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Written at `MPI_Finalize` as the last chunk of a rank file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trailer {
    /// Records written (calls and runtime records).
    pub events: u64,
    /// Payload bytes of all event chunks.
    pub bytes: u64,
    pub chunks: u64,
    /// Times an application thread found both of its buffers full and waited.
    pub buffer_waits: u64,
    pub buffer_wait_ns: u64,
    /// Events that could not be recorded (always counted, never hidden).
    pub dropped: u64,
    /// Calls left out on purpose (`PMTRACE_EXCLUDE`), by function.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub excluded: std::collections::BTreeMap<String, u64>,
    /// Calls left out while `MPI_Pcontrol(0)` paused recording, by function.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub paused: std::collections::BTreeMap<String, u64>,
    pub threads: Vec<ThreadDef>,
    /// Timer value (ns) at the end of tracing.
    pub end_ns: u64,
    /// CLOCK_MONOTONIC at init and finalize, beside the timer's own values,
    /// so a reader can rescale a TSC timer exactly.
    pub monotonic_start_ns: u64,
    pub monotonic_end_ns: u64,
    /// The clock offset to rank 0 measured inside MPI_Finalize (None after
    /// MPI_Abort, or when tracing ended early).
    #[serde(default)]
    pub offset_finalize: Option<OffsetSample>,
}
