// The exported functions carry MPI's names; their safety contract is MPI's.
#![allow(non_snake_case, clippy::missing_safety_doc)]
//! Written by hand because they start and stop the tracer: `MPI_Init`,
//! `MPI_Init_thread`, `MPI_Finalize`, `MPI_Abort`, and `MPI_Pcontrol`
//! (variadic in C, which generated Rust cannot define).
//!
//! Start: after `PMPI_Init`, calibrate the timer over the span of the init
//! itself, duplicate MPI_COMM_WORLD for the tool's own messages, let rank 0
//! choose and create the trace directory and broadcast it, create this
//! rank's file, start the flusher, then record.
//!
//! Stop: record `MPI_Finalize`, seal every buffer, write the trailer, sum
//! the counts to rank 0 (which prints the one summary line), and only then
//! call `PMPI_Finalize`. `MPI_Abort` seals this rank's trace before
//! aborting, so an aborted job keeps its trace.

use crate::clock;
use crate::comms;
use crate::config::{Config, TimerChoice};
use crate::ffi::{self, MPI_Comm};
use crate::flusher::{Flusher, Msg, Totals};
use crate::guard::{self, Guard, State};
use crate::live;
use crate::mpi::{ids, pass, real, COLL_SHAPES, FUNCTIONS};
use crate::offsets;
use crate::peers;
use crate::piggyback::{self, Mode};
use crate::recorder::{self, Recorder, Writer};
use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use parking_lot::Mutex;
use pmtrace_format::coll::Coll;
use pmtrace_format::meta::{self, FunctionDef, MpiConstants, RunInfo, TimerDef};
use pmtrace_format::record::{put_name, MAX_FIXED_RECORD, PHASE_NAME_MAX};
use pmtrace_format::varint::Sink;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What the runtime keeps between init and finalize.
struct Session {
    rank: i32,
    /// A world started by `MPI_Comm_spawn`: its trace goes in a directory
    /// of the parent's, and its rank 0 prints no summary line.
    spawned: bool,
    dir: Option<PathBuf>,
    flusher: Option<std::thread::JoinHandle<()>>,
    mono_start: u64,
    start_ns: u64,
}

// SAFETY: MPI handles are plain identifiers usable from any thread.
unsafe impl Send for Session {}

static SESSION: Mutex<Option<Session>> = Mutex::new(None);
/// How to measure the offset again at finalize: (rank, size, reps, own clock).
static SYNC: Mutex<Option<(usize, usize, u32, bool)>> = Mutex::new(None);
/// The offset measured inside MPI_Finalize, for the trailer.
static FINAL_OFFSET: Mutex<Option<meta::OffsetSample>> = Mutex::new(None);

fn warn(msg: &str) {
    let _ = writeln!(std::io::stderr(), "pmtrace: warning: {msg}");
}

/// The next tool's function of this name (`crate::next::tool`), if one
/// follows pmtrace's.
macro_rules! next_tool {
    ($name:literal, $inner:literal) => {{
        static TOOL: AtomicUsize = AtomicUsize::new(0);
        crate::next::tool(&TOOL, $name, $inner, false)
    }};
}

// The outer levels (`crate::next`). When another tool follows, tracing
// starts and stops here, around that tool's function: a tool that reaches
// the MPI library without pmtrace's inner level (one that looks `PMPI_`
// functions up with `dlsym(RTLD_NEXT)`) then still has its job traced; the
// inner level, reached or not, passes through, as pmtrace holds the guard.

pub unsafe extern "C" fn MPI_Init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int {
    let Some(f) = next_tool!(c"MPI_Init", c"PMPI_Init") else {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { PMPI_Init(argc, argv) };
    };
    type F = unsafe extern "C" fn(*mut c_int, *mut *mut *mut c_char) -> c_int;
    // SAFETY: the other tool's MPI_Init, with the caller's arguments.
    init_around(ids::MPI_INIT, None, || unsafe {
        core::mem::transmute::<usize, F>(f)(argc, argv)
    })
}

pub unsafe extern "C" fn MPI_Init_thread(
    argc: *mut c_int,
    argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    let Some(f) = next_tool!(c"MPI_Init_thread", c"PMPI_Init_thread") else {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { PMPI_Init_thread(argc, argv, required, provided) };
    };
    type F = unsafe extern "C" fn(*mut c_int, *mut *mut *mut c_char, c_int, *mut c_int) -> c_int;
    // SAFETY: the other tool's MPI_Init_thread, with the caller's arguments.
    init_around(
        ids::MPI_INIT_THREAD,
        Some((required, provided)),
        || unsafe { core::mem::transmute::<usize, F>(f)(argc, argv, required, provided) },
    )
}

pub unsafe extern "C" fn MPI_Finalize() -> c_int {
    let Some(f) = next_tool!(c"MPI_Finalize", c"PMPI_Finalize") else {
        // SAFETY: no arguments.
        return unsafe { PMPI_Finalize() };
    };
    // SAFETY: the other tool's MPI_Finalize.
    finalize_around(|| unsafe {
        core::mem::transmute::<usize, unsafe extern "C" fn() -> c_int>(f)()
    })
}

pub unsafe extern "C" fn MPI_Abort(wide: ffi::wide::MPI_Comm, errorcode: c_int) -> c_int {
    let Some(f) = next_tool!(c"MPI_Abort", c"PMPI_Abort") else {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { PMPI_Abort(wide, errorcode) };
    };
    type F = unsafe extern "C" fn(ffi::wide::MPI_Comm, c_int) -> c_int;
    // SAFETY: the other tool's MPI_Abort, with the caller's arguments.
    abort_around(wide, errorcode, || unsafe {
        core::mem::transmute::<usize, F>(f)(wide, errorcode)
    })
}

pub unsafe extern "C" fn PMPI_Init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    init_around(ids::MPI_INIT, None, || unsafe {
        real::PMPI_Init(argc as *mut c_void, argv as *mut c_void)
    })
}

pub unsafe extern "C" fn PMPI_Init_thread(
    argc: *mut c_int,
    argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    init_around(
        ids::MPI_INIT_THREAD,
        Some((required, provided)),
        || unsafe {
            real::PMPI_Init_thread(
                argc as *mut c_void,
                argv as *mut c_void,
                required,
                provided as *mut c_void,
            )
        },
    )
}

/// Starts tracing around `init`, the call that initializes MPI (the real
/// `PMPI_Init(_thread)` or the next tool's `MPI_Init(_thread)`); `thread`
/// holds `MPI_Init_thread`'s required level and where MPI puts the
/// provided one.
fn init_around(
    id: u32,
    thread: Option<(c_int, *mut c_int)>,
    init: impl FnOnce() -> c_int,
) -> c_int {
    guard::init_thread();
    let guard = Guard::acquire_any();
    if guard.is_none() || guard::state() != State::Uninit {
        return init();
    }
    let t0 = clock::monotonic();
    let p0 = clock::pair();
    peers::expect();
    let rc = init();
    let announced = peers::announced();
    let levels = thread.map(|(required, provided)| {
        // SAFETY: MPI set *provided when it succeeded.
        (required, if rc == 0 { unsafe { *provided } } else { 0 })
    });
    start(guard.as_ref().unwrap(), id, (t0, p0), announced, rc, levels);
    rc
}

fn start(
    guard: &Guard,
    func: u32,
    (t0, p0): (u64, clock::Pair),
    announced: Option<peers::Announced>,
    rc: c_int,
    thread: Option<(c_int, c_int)>,
) {
    if rc != 0 {
        guard::set_state(State::Disabled);
        return;
    }
    let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        start_tracing(guard, func, t0, p0, announced, thread)
    }));
    if started.is_err() {
        guard::set_state(State::Disabled);
    }
}

/// `pmtrace-<YYYYmmdd-HHMMSS>-<pid>`, in UTC like the CLI's default.
fn default_dir_name() -> String {
    // SAFETY: time/localtime_r fill a local struct.
    let stamp = unsafe {
        let t = libc::time(core::ptr::null_mut());
        let mut tm: libc::tm = core::mem::zeroed();
        libc::gmtime_r(&t, &mut tm);
        format!(
            "{:04}{:02}{:02}-{:02}{:02}{:02}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec
        )
    };
    format!("pmtrace-{stamp}-{}", std::process::id())
}

/// This rank's trace directory, while tracing.
pub fn trace_dir() -> Option<PathBuf> {
    SESSION.lock().as_ref().and_then(|s| s.dir.clone())
}

/// Whether this world was started by `MPI_Comm_spawn` (or its
/// `_multiple` form): it has a parent.
fn has_parent() -> bool {
    let mut parent = core::mem::MaybeUninit::<MPI_Comm>::uninit();
    // SAFETY: a local query after MPI_Init.
    if unsafe { ffi::PMPI_Comm_get_parent(parent.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: filled by MPI.
    let parent = unsafe { parent.assume_init() };
    ffi::handle_key(parent) != ffi::handle_key(unsafe { ffi::RSMPI_COMM_NULL })
}

/// A spawned world's directory: `spawn-<k>` in the parent's trace (the
/// first `k` from 1 free; creating it is the claim), when the parent's
/// directory is there to hold it (`PMTRACE_DIR` names it); else a
/// directory of its own, as any job's.
fn spawned_dir(cfg: &Config) -> Option<PathBuf> {
    let base = PathBuf::from(cfg.dir.clone()?);
    if !std::fs::symlink_metadata(&base).is_ok_and(|m| m.is_dir()) {
        return None;
    }
    (1..10_000).find_map(|k| {
        let path = base.join(format!("spawn-{k}"));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .ok()
            .map(|()| path)
    })
}

/// Rank 0: creates (or checks) the trace directory; returns its absolute path.
fn prepare_dir(cfg: &Config, spawned: bool) -> Result<PathBuf, String> {
    let path = match spawned.then(|| spawned_dir(cfg)).flatten() {
        Some(p) => p,
        None if spawned && cfg.dir.is_some() => PathBuf::from(default_dir_name()),
        None => PathBuf::from(cfg.dir.clone().unwrap_or_else(default_dir_name)),
    };
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(format!(
                "{} is a symbolic link; refusing to follow it",
                path.display()
            ))
        }
        Ok(m) if !m.is_dir() => {
            return Err(format!("{} exists and is not a directory", path.display()))
        }
        Ok(_) => {
            if path.join(pmtrace_format::rank_file_name(0)).exists() {
                return Err(format!("{} already holds a trace", path.display()));
            }
        }
        Err(_) => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?,
    }
    let abs = std::fs::canonicalize(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let probe = abs.join(".pmtrace-write-test");
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(&probe)
        .map_err(|e| format!("cannot write in {}: {e}", abs.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(abs)
}

/// Rank 0's directory (or error) and piggyback mode to every rank: every
/// message's layout depends on the mode, so one rank decides.
fn share_dir(
    comm: MPI_Comm,
    rank: i32,
    mine: Option<Result<PathBuf, String>>,
    clocks: Mode,
) -> (Result<PathBuf, String>, Mode) {
    let c = ffi::consts();
    let text = match &mine {
        Some(Ok(p)) => format!("{}+{}", clocks as u8, p.display()),
        Some(Err(e)) => format!("{}-{e}", clocks as u8),
        None => String::new(),
    };
    let mut len = text.len() as c_int;
    // SAFETY: tool-internal broadcasts of an int and a byte buffer of that length.
    unsafe {
        ffi::PMPI_Bcast(
            &mut len as *mut c_int as *mut c_void,
            1,
            ffi::RSMPI_INT32_T,
            0,
            comm,
        );
        let mut buf = if rank == 0 {
            text.into_bytes()
        } else {
            vec![0u8; len as usize]
        };
        ffi::PMPI_Bcast(buf.as_mut_ptr() as *mut c_void, len, c.char, 0, comm);
        let s = String::from_utf8_lossy(&buf).into_owned();
        let mode = match s.as_bytes().first() {
            Some(b'1') => Mode::Lamport,
            Some(b'2') => Mode::Vector,
            _ => Mode::None,
        };
        let s = s.get(1..).unwrap_or("");
        let dir = match s.strip_prefix('+') {
            Some(p) => Ok(PathBuf::from(p)),
            None => Err(s.strip_prefix('-').unwrap_or("no directory").to_string()),
        };
        (dir, mode)
    }
}

/// This rank's host name as the trace records it (see `SimSpec::hosts`).
static HOST_NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn hostname() -> String {
    HOST_NAME.get().cloned().unwrap_or_else(real_hostname)
}

fn real_hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: a buffer of the given length.
    unsafe { libc::gethostname(buf.as_mut_ptr() as *mut c_char, buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn mpi_library() -> String {
    let mut buf = vec![0u8; 8192];
    let mut len: c_int = 0;
    // SAFETY: MPI_MAX_LIBRARY_VERSION_STRING is below 8192 in every MPI.
    unsafe { ffi::PMPI_Get_library_version(buf.as_mut_ptr() as *mut c_char, &mut len) };
    let s = String::from_utf8_lossy(&buf[..(len.max(0) as usize).min(buf.len())]).into_owned();
    s.lines()
        .next()
        .unwrap_or("")
        .trim_end_matches('\0')
        .trim()
        .to_string()
}

fn command_line() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn start_tracing(
    guard: &Guard,
    func: u32,
    t0: u64,
    p0: clock::Pair,
    announced: Option<peers::Announced>,
    thread: Option<(c_int, c_int)>,
) {
    let (mut rank, mut size) = (0, 0);
    // The tool talks over MPI_COMM_WORLD itself, and only inside MPI_Init
    // and MPI_Finalize, where the application can have no communication
    // pending. (A duplicate would cost every later progress call: creating a
    // communicator switches on Open MPI's nonblocking-collective progress.)
    // SAFETY: local queries.
    unsafe {
        ffi::PMPI_Comm_rank(ffi::world(), &mut rank);
        ffi::PMPI_Comm_size(ffi::world(), &mut size);
    }
    #[cfg(mpi_impl = "abi")]
    ffi::abi_status::learn();
    if announced.is_some_and(|a| !every_rank_traced(&a, rank, size)) {
        guard::set_state(State::Disabled);
        return;
    }
    let cfg = Config::from_env(&FUNCTIONS);
    let invariant = clock::tsc_is_invariant();
    let use_tsc = match cfg.timer {
        TimerChoice::Auto => invariant,
        TimerChoice::Tsc => invariant,
        TimerChoice::Monotonic => false,
    };
    let mut warnings = cfg.warnings.clone();
    crate::hooks::exclude(&cfg.exclude);
    if cfg.timer == TimerChoice::Tsc && !invariant {
        warnings
            .push("PMTRACE_TIMER=tsc but this CPU's TSC is not invariant; using monotonic".into());
    }
    let mono_start = t0;
    if use_tsc {
        clock::start_tsc(p0);
    }
    // From here on every timestamp is the rank's simulated one, the start of
    // MPI_Init included.
    let sim = cfg.clock_sim.map(|spec| spec.for_rank(rank as u32, t0));
    if let Some(spec) = cfg.clock_sim {
        let _ = HOST_NAME.set(spec.host_name(&real_hostname(), rank as u32, size as u32));
    }
    if let Some(sim) = sim {
        clock::simulate(sim);
    }
    let t0 = clock::simulated(t0);

    let spawned = has_parent();
    let mine = (rank == 0).then(|| prepare_dir(&cfg, spawned));
    let (shared, clocks) = share_dir(ffi::world(), rank, mine, cfg.clocks);
    *SESSION.lock() = Some(Session {
        rank,
        spawned,
        dir: None,
        flusher: None,
        mono_start,
        start_ns: t0,
    });
    if rank == 0 {
        for w in &warnings {
            warn(w);
        }
    }
    let dir = match shared {
        Ok(d) => d,
        Err(e) => {
            if rank == 0 {
                warn(&format!("{e}; tracing disabled"));
            }
            guard::set_state(State::Disabled);
            return;
        }
    };
    let path = dir.join(pmtrace_format::rank_file_name(rank as u32));
    let own_clock = sim.is_some();
    let offset = offsets::measure(
        ffi::world(),
        rank as usize,
        size as usize,
        cfg.sync_reps,
        &hostname(),
        own_clock,
    );
    if !own_clock {
        offsets::share_tsc_scale(
            ffi::world(),
            rank as usize,
            size as usize,
            offset.measured_by as usize,
        );
    }
    *SYNC.lock() = Some((rank as usize, size as usize, cfg.sync_reps, own_clock));
    let mut header = build_header(rank, size, t0, thread, use_tsc, &cfg, &dir, clocks);
    header.clock_sim = sim;
    header.offset_init = Some(offset);
    let local = open_trace(&path, &header, cfg.buffer_size);
    // The live status file too, before the ranks agree below: what making
    // it takes is then not skew between the ends of their MPI_Init.
    let live_path = path.with_extension("live");
    if local.is_ok() {
        live::create(&live_path, rank as u32, size as u32, &hostname(), t0);
        live::set_ticker(crate::live_tick::tick);
        live::set_sync_ms(cfg.live_sync_ms);
        if cfg.live_site {
            crate::live_site::install();
        }
    }
    // The channel's wake-up names the sending thread (`thread::current`),
    // which allocates the first time: done now, so that this thread's
    // first buffer hand-off, in the middle of its calls, does not.
    let _ = std::thread::current();
    // A thread that finds the flusher's queue full blocks on it, and its
    // first wait on any channel makes the thread's waiting context (an
    // allocation): made now, by a wait that times out, before the ranks
    // agree (the sleep is then not skew between the ends of their
    // MPI_Init). A thread waiting for a free buffer sleeps on a futex
    // (`flusher::spare`), not a channel.
    let (_keep, never) = crossbeam_channel::bounded::<()>(1);
    let _ = never.recv_timeout(std::time::Duration::from_millis(1));
    // All ranks trace or none: a rank without a trace file would skip the
    // communicator id agreement (a hidden collective) that the others run.
    let failed_rank = lowest_failed_rank(rank, local.is_err());
    if let Some(bad) = failed_rank {
        if let Err(e) = &local {
            if rank == bad {
                warn(&format!("rank {rank}: {e}; tracing disabled on all ranks"));
            }
        }
        if let Ok((tx, handle)) = local {
            // Our own file, just created: nothing else refers to it.
            let _ = tx.send(Msg::Abandon);
            let _ = handle.join();
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_file(&live_path);
        }
        guard::set_state(State::Disabled);
        return;
    }
    let Ok((tx, handle)) = local else { return };
    recorder::set_flusher(tx);
    if let Some(s) = SESSION.lock().as_mut() {
        s.dir = Some(dir);
        s.flusher = Some(handle);
    }
    go_active(guard, func, t0, thread, (rank, size), clocks, cfg.shm);
}

/// Whether every rank of `size` runs this pmtrace, as the ranks announced
/// themselves; if not, the first traced rank says which do not.
fn every_rank_traced(announced: &peers::Announced, rank: c_int, size: c_int) -> bool {
    let missing = announced.unmatched(size as u32);
    if missing.is_empty() {
        return true;
    }
    let first_traced = (0..size as u32).find(|r| missing.binary_search(r).is_err());
    if first_traced == Some(rank as u32) {
        warn(&format!(
            "rank{} {} of {size} run{} without pmtrace (or with another version); \
             tracing disabled on all ranks",
            if missing.len() > 1 { "s" } else { "" },
            peers::ranges(&missing),
            if missing.len() > 1 { "" } else { "s" },
        ));
    }
    false
}

/// Tracing on, once the trace file is open: the piggyback layer, the large
/// headers' shared memory, and the first record (the `MPI_Init` call of
/// `func`, from `t0` to now) with the communicators known at once.
///
/// The call ends after pmtrace's own start (the trace directory shared,
/// the clock offsets measured, the files opened, the ranks agreed): the
/// application waited for all of it in `MPI_Init`, and time after the
/// call's end is the application's computation.
fn go_active(
    guard: &Guard,
    func: u32,
    t0: u64,
    thread: Option<(c_int, c_int)>,
    (rank, size): (c_int, c_int),
    clocks: Mode,
    shm: bool,
) {
    // SAFETY: reads an initialised constant of mpi-sys's shim.
    let multiple = unsafe { ffi::RSMPI_THREAD_MULTIPLE };
    let serial = thread.is_none_or(|(_, provided)| provided < multiple);
    piggyback::enable(clocks, rank as usize, size as usize, serial);
    if clocks != Mode::None {
        crate::large_headers::open(rank as usize, size as usize, piggyback::header_len(), shm);
    }
    guard::set_state(State::Active);

    recorder::set_main_thread();
    let rec = guard.recorder();
    rec.set_origin(t0);
    let t1 = clock::now();
    if let Some(mut w) = rec.begin_call(func, t0, t1, 0, MAX_FIXED_RECORD) {
        if let Some((required, provided)) = thread {
            w.put_i(i64::from(required));
            w.put_i(i64::from(provided));
        }
        w.commit();
    }
    comms::init(rank as u32, rec, t1);
}

#[allow(clippy::too_many_arguments)]
fn build_header(
    rank: i32,
    size: i32,
    t0: u64,
    thread: Option<(c_int, c_int)>,
    use_tsc: bool,
    cfg: &Config,
    dir: &Path,
    clocks: Mode,
) -> meta::Header {
    let c = ffi::consts();
    let timer_name = if use_tsc { "tsc" } else { "monotonic" };
    meta::Header {
        library_version: env!("CARGO_PKG_VERSION").to_string(),
        mpi_library: mpi_library(),
        rank: rank as u32,
        world_size: size as u32,
        hostname: hostname(),
        pid: std::process::id(),
        timer: TimerDef {
            source: timer_name.into(),
            tsc_hz: clock::tsc_hz(),
            resolution_ns: clock::tsc_hz().map_or(1.0, |hz| (1e9 / hz).max(1.0)),
        },
        start_ns: t0,
        thread_level: thread.map_or(0, |t| t.1),
        constants: MpiConstants {
            any_source: c.any_source,
            any_tag: c.any_tag,
            proc_null: c.proc_null,
            root: c.root,
            undefined: c.undefined,
        },
        functions: function_defs(),
        run: (rank == 0).then(|| RunInfo {
            command_line: command_line(),
            world_size: size as u32,
            start_unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
            config: {
                let mut m = cfg.effective(&dir.display().to_string(), timer_name, &FUNCTIONS);
                m.insert("PMTRACE_CLOCKS".into(), clocks.name().into());
                m
            },
        }),
        clocks: clocks.name().into(),
        clock_sim: None,
        offset_init: None,
    }
}

/// Creates this rank's file (exclusively), writes its header and starts
/// the flusher on it.
fn open_trace(
    path: &Path,
    header: &meta::Header,
    buffer_size: usize,
) -> Result<(crossbeam_channel::Sender<Msg>, std::thread::JoinHandle<()>), String> {
    use std::os::unix::fs::FileExt;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let bytes = pmtrace_format::encode_file_header(header);
    file.write_all_at(&bytes, 0)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let (tx, rx) = crossbeam_channel::bounded::<Msg>(FLUSH_QUEUE);
    let flusher = Flusher::new(file, path, bytes.len() as u64, buffer_size);
    let handle = std::thread::Builder::new()
        .name("pmtrace-flusher".into())
        .spawn(move || flusher.run(rx))
        .map_err(|e| format!("cannot start its writer thread: {e}"))?;
    Ok((tx, handle))
}

/// Messages the flusher's queue holds. A thread has at most two buffers
/// handed off and waiting (it takes a spare for each), so a send blocks
/// only past some 500 threads, until the flusher takes the next message
/// (it never waits on an application thread). Bounded, the queue is
/// allocated once: an unbounded one allocated a block every 31 messages,
/// inside the application's calls that filled a buffer.
const FLUSH_QUEUE: usize = 1024;

/// "No rank failed" in `lowest_failed_rank`: below 2^63, as MPICH 4.0
/// compares `MPI_UINT64_T` values as signed under `MPI_MIN` (u64::MAX would
/// be the least of all, and a failed rank 0 went unseen).
const NONE_FAILED: u64 = i64::MAX as u64;

/// The lowest world rank that failed, if any (an allreduce over world).
fn lowest_failed_rank(rank: i32, failed: bool) -> Option<i32> {
    let c = ffi::consts();
    let mine: u64 = if failed { rank as u64 } else { NONE_FAILED };
    let mut lowest = NONE_FAILED;
    // SAFETY: a tool-internal reduction of one u64 over world, which every
    // rank reaches here inside its MPI_Init.
    unsafe {
        ffi::PMPI_Allreduce(
            &mine as *const u64 as *const c_void,
            &mut lowest as *mut u64 as *mut c_void,
            1,
            c.uint64,
            c.op_min,
            ffi::world(),
        );
    }
    (lowest < NONE_FAILED).then_some(lowest as i32)
}

/// Records the closing call, seals everything and stops the flusher.
fn seal(
    rec: Option<&mut Recorder>,
    func: u32,
    t0: u64,
    payload: impl FnOnce(&mut Writer),
) -> Option<Totals> {
    live::set_state(if func == ids::MPI_ABORT {
        pmtrace_format::live::STATE_ABORTED
    } else {
        pmtrace_format::live::STATE_FINISHED
    });
    if let Some(rec) = rec {
        if let Some(mut w) = rec.begin_call(func, t0, clock::now(), 0, MAX_FIXED_RECORD) {
            payload(&mut w);
            w.commit();
        }
        rec.finish();
    }
    guard::set_state(State::Finished);
    let tx = recorder::flusher()?;
    let (mono_start, start_ns, handle) = {
        let mut s = SESSION.lock();
        let s = s.as_mut()?;
        (s.mono_start, s.start_ns, s.flusher.take())
    };
    let end_ns = clock::now();
    let mono_end = clock::monotonic();
    let (reply_tx, reply_rx) = crossbeam_channel::bounded(1);
    let trailer = Box::new(move |t: &Totals| meta::Trailer {
        events: t.events,
        bytes: t.bytes,
        chunks: t.chunks,
        buffer_waits: t.waits,
        buffer_wait_ns: t.wait_ns,
        dropped: recorder::DROPPED.load(std::sync::atomic::Ordering::Relaxed),
        excluded: crate::hooks::left_out(),
        paused: crate::hooks::paused_out(),
        threads: t.threads.clone(),
        end_ns,
        monotonic_start_ns: mono_start,
        monotonic_end_ns: mono_end,
        offset_finalize: *FINAL_OFFSET.lock(),
    });
    let _ = start_ns;
    tx.send(Msg::Finish {
        trailer,
        reply: reply_tx,
    })
    .ok()?;
    let totals = reply_rx.recv().ok()?;
    if let Some(h) = handle {
        let _ = h.join();
    }
    Some(totals)
}

pub unsafe extern "C" fn PMPI_Finalize() -> c_int {
    // SAFETY: no arguments.
    finalize_around(|| unsafe { real::PMPI_Finalize() })
}

/// Whether this process's trace was finished (by `MPI_Finalize` or
/// `MPI_Abort`): at most once, though both levels may be reached.
static FINISHED: AtomicBool = AtomicBool::new(false);

/// Stops tracing, then calls `finalize`: the real `PMPI_Finalize`, or the
/// next tool's `MPI_Finalize`.
fn finalize_around(finalize: impl FnOnce() -> c_int) -> c_int {
    let guard = Guard::acquire_any();
    let session = SESSION
        .lock()
        .as_ref()
        .map(|s| (s.rank, s.dir.clone(), s.spawned));
    let first = session.is_some() && !FINISHED.swap(true, Ordering::AcqRel);
    if let (Some((rank, dir, spawned)), true) = (session, first) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let t0 = clock::now();
            crate::orphans::finish();
            crate::large_headers::close();
            if guard::state() == State::Active {
                if let Some((rank, size, reps, own)) = *SYNC.lock() {
                    *FINAL_OFFSET.lock() =
                        Some(offsets::measure_private(rank, size, reps, &hostname(), own));
                }
            }
            let totals = if guard::state() == State::Active {
                // No guard only if this thread's thread-locals are gone and
                // it is not the main thread: seal without recording the call.
                seal(
                    guard.as_ref().map(|g| g.recorder()),
                    ids::MPI_FINALIZE,
                    t0,
                    |_| {},
                )
            } else {
                None
            };
            summarize(rank, dir.as_deref(), totals, spawned);
        }));
    }
    drop(guard);
    finalize()
}

/// Sums the ranks' counts to rank 0, which prints the one summary line
/// (not in a spawned world: the job's line is its first world's).
fn summarize(rank: i32, dir: Option<&Path>, totals: Option<Totals>, spawned: bool) {
    let c = ffi::consts();
    let t = totals.unwrap_or_default();
    let traced = u64::from(t.file_bytes > 0);
    let dropped = recorder::DROPPED.load(std::sync::atomic::Ordering::Relaxed);
    let restored = u64::from(t.removed == Some(true));
    let lost = u64::from(t.removed == Some(false));
    let mine = [t.events, t.bytes, dropped, traced, t.waits, restored, lost];
    let mut sum = [0u64; 7];
    let mut size = 0;
    // SAFETY: a tool-internal reduction over world, which every rank that
    // started tracing reaches in its MPI_Finalize.
    unsafe {
        ffi::PMPI_Comm_size(ffi::world(), &mut size);
        ffi::PMPI_Reduce(
            mine.as_ptr() as *const c_void,
            sum.as_mut_ptr() as *mut c_void,
            7,
            c.uint64,
            c.op_sum,
            0,
            ffi::world(),
        );
    }
    if rank != 0 || spawned {
        return;
    }
    let Some(dir) = dir else { return };
    let [events, bytes, dropped, traced, waits, restored, lost] = sum;
    let per = if events > 0 {
        bytes as f64 / events as f64
    } else {
        0.0
    };
    let mut line =
        format!("pmtrace: trace of {traced}/{size} ranks in {}: {events} MPI calls, {bytes} bytes ({per:.1} B/call)", dir.display());
    if waits > 0 {
        line.push_str(&format!(", {waits} buffer waits"));
    }
    if dropped > 0 {
        line.push_str(&format!(", {dropped} events DROPPED"));
    }
    // Rank files removed while the job ran (the directory removed, say)
    // are written back from the open files (`Flusher::restore`).
    if restored > 0 {
        line.push_str(&format!(
            "; the files of {restored} ranks were removed while the job ran and written back"
        ));
    }
    if lost > 0 {
        line.push_str(&format!(
            "; the files of {lost} ranks were removed while the job ran and are LOST"
        ));
    }
    let _ = writeln!(std::io::stderr(), "{line}");
}

pub unsafe extern "C" fn PMPI_Abort(wide: ffi::wide::MPI_Comm, errorcode: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed through.
    abort_around(wide, errorcode, || unsafe {
        pass::PMPI_Abort(wide, errorcode)
    })
}

/// Seals this rank's trace, then calls `abort`: the real `PMPI_Abort`, or
/// the next tool's `MPI_Abort`.
fn abort_around(
    wide: ffi::wide::MPI_Comm,
    errorcode: c_int,
    abort: impl FnOnce() -> c_int,
) -> c_int {
    let guard = Guard::acquire_any();
    if guard::state() == State::Active && !FINISHED.swap(true, Ordering::AcqRel) {
        let comm: MPI_Comm = ffi::Wide::narrow(wide);
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let t0 = clock::now();
            let thread = guard.as_ref().map(|g| g.thread());
            let index = thread
                .map(|th| comms::resolve(comm, th, t0).index)
                .unwrap_or(0);
            seal(
                guard.as_ref().map(|g| g.recorder()),
                ids::MPI_ABORT,
                t0,
                |r| {
                    r.put_u(u64::from(index));
                    r.put_i(i64::from(errorcode));
                },
            );
        }));
    }
    drop(guard);
    abort()
}

/// `MPI_Pcontrol(level, ...)`: the variadic arguments are not read. On
/// x86-64 (System V) a callee may ignore trailing variadic arguments.
pub unsafe extern "C" fn MPI_Pcontrol(level: c_int) -> c_int {
    let next = || match next_tool!(c"MPI_Pcontrol", c"PMPI_Pcontrol") {
        // SAFETY: another tool's MPI_Pcontrol, given the level only (pmtrace
        // defines no PMPI_Pcontrol, so that tool's call is not seen again).
        Some(f) => unsafe {
            core::mem::transmute::<usize, unsafe extern "C" fn(c_int, ...) -> c_int>(f)(level)
        },
        // SAFETY: passes the level on; no variadic arguments follow.
        None => unsafe { real::PMPI_Pcontrol(level) },
    };
    let Some(guard) = Guard::acquire() else {
        return next();
    };
    let t0 = clock::now();
    let rc = next();
    let t1 = clock::now();
    let rec = guard.recorder();
    if let Some(mut w) = rec.begin_call(ids::MPI_PCONTROL, t0, t1, rc, MAX_FIXED_RECORD) {
        w.put_i(i64::from(level));
        w.commit();
    }
    // Level 0 pauses recording, 1 resumes it (the MPI standard leaves the
    // levels to the tool; these two are the usual meaning).
    match level {
        0 => crate::hooks::pause(true),
        1 => crate::hooks::pause(false),
        _ => {}
    }
    rc
}

/// pmtrace's own functions in the trace's function table, after the MPI
/// ones: a phase's begin and end.
/// The header's function table: every described function (a
/// collective with its shape and flow), then the phase marks.
fn function_defs() -> Vec<FunctionDef> {
    let described = FUNCTIONS.iter().zip(COLL_SHAPES).map(|(&(n, k), wrap)| {
        let coll = Coll::of_wrap(wrap);
        FunctionDef {
            shape: coll.map(|c| c.shape),
            flow: coll.map(|c| c.flow),
            ..FunctionDef::new(n, k.name())
        }
    });
    let phases = PHASE_FUNCTIONS
        .iter()
        .map(|&(n, k)| FunctionDef::new(n, k.name()));
    described.chain(phases).collect()
}

const PHASE_FUNCTIONS: [(&str, pmtrace_format::Kind); 2] = [
    ("pmtrace_phase_begin", pmtrace_format::Kind::Phase),
    ("pmtrace_phase_end", pmtrace_format::Kind::Phase),
];
const PHASE_BEGIN: u32 = FUNCTIONS.len() as u32;
const PHASE_END: u32 = PHASE_BEGIN + 1;

/// Records a phase's begin (`name`) or end (`None`) on this thread.
fn phase(name: Option<&[u8]>) {
    let Some(guard) = Guard::acquire() else {
        return;
    };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let t = clock::now();
        let (func, need) = match name {
            Some(n) => (
                PHASE_BEGIN,
                MAX_FIXED_RECORD + 2 * n.len().min(PHASE_NAME_MAX),
            ),
            None => (PHASE_END, MAX_FIXED_RECORD),
        };
        if let Some(mut w) = guard.recorder().begin_call(func, t, t, 0, need) {
            put_name(&mut w, name);
            w.commit();
        }
        let th = guard.thread();
        match name {
            Some(n) => th.state.phases.push(n.to_vec()),
            None => drop(th.state.phases.pop()),
        }
        live::phase(th.recorder.live, th.state.phases.last().map(|n| &n[..]));
    }));
}

/// `pmtrace_phase_begin(name)` (include/pmtrace.h): a phase named `name`
/// begins on this thread, until the matching `pmtrace_phase_end()`.
/// Phases nest. Without tracing (before `MPI_Init`, after `MPI_Finalize`,
/// or untraced) it does nothing.
pub unsafe extern "C" fn pmtrace_phase_begin(name: *const c_char) {
    let bytes = if name.is_null() {
        &b"phase"[..]
    } else {
        // SAFETY: the caller passes a NUL-terminated string.
        unsafe { core::ffi::CStr::from_ptr(name) }.to_bytes()
    };
    phase(Some(if bytes.is_empty() { b"phase" } else { bytes }));
}

/// `pmtrace_phase_end()`: the innermost phase of this thread ends.
pub extern "C" fn pmtrace_phase_end() {
    phase(None);
}

/// Fortran: `call pmtrace_phase_begin('name')`. gfortran and flang pass
/// the length after the arguments; the name's trailing blanks are dropped.
pub unsafe extern "C" fn pmtrace_phase_begin_(name: *const c_char, len: usize) {
    let bytes = if name.is_null() {
        &[][..]
    } else {
        // SAFETY: Fortran passes the character variable and its length.
        unsafe { core::slice::from_raw_parts(name as *const u8, len) }
    };
    let end = bytes.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    let trimmed = &bytes[..end];
    phase(Some(if trimmed.is_empty() {
        b"phase"
    } else {
        trimmed
    }));
}

/// Fortran: `call pmtrace_phase_end()`.
pub extern "C" fn pmtrace_phase_end_() {
    phase(None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmtrace_format::Kind;

    /// Every collective of the description has a shape the analyses know,
    /// and the same one they would work out from its name (what they do
    /// for traces without it): a new trace and an old one of the same
    /// program are analysed alike.
    #[test]
    fn every_collective_gets_its_shape_and_flow_in_the_header() {
        let defs = function_defs();
        let mut colls = 0;
        for d in &defs {
            let kind = Kind::from_name(&d.kind).unwrap();
            let coll = matches!(kind, Kind::Coll | Kind::Icoll | Kind::CollInit);
            assert_eq!(d.shape.is_some(), coll, "{}", d.name);
            assert_eq!(d.flow.is_some(), coll, "{}", d.name);
            if coll {
                colls += 1;
                let by_name = Coll::of_name(&d.name);
                assert_eq!(d.coll(), by_name, "{}", d.name);
            }
        }
        // Every coll:, icoll:, pcoll: and comm_idup entry of
        // wrappers/mpi.wrap.
        assert_eq!(colls, 131);
        let exscan = defs.iter().find(|d| d.name == "MPI_Iexscan").unwrap();
        assert_eq!(exscan.shape, Some(pmtrace_format::coll::Shape::Exscan));
        let idup = defs.iter().find(|d| d.name == "MPI_Comm_idup").unwrap();
        assert_eq!(idup.flow, Some(pmtrace_format::coll::Flow::Unordered));
    }
}
