//! Processes started with `MPI_Comm_spawn(_multiple)`: traced too.
//!
//! A traced parent piggybacks on every message, including those to and
//! from the processes it spawns, so they must be traced (an untraced child
//! would take the header as data), with the same settings (the header's
//! layout depends on them). Launchers do not all pass the job's
//! environment on to spawned processes (Open MPI 5's does not), so the
//! spawning root adds it to the call's info, under the key Open MPI reads
//! (newline-separated `NAME=value` lines: `env` up to Open MPI 4,
//! `PMIX_ENVAR` from 5, which warns about `env`; MPICH's Hydra passes its
//! own environment on and needs nothing), with `LD_PRELOAD` naming
//! pmtrace, every `PMTRACE_` setting of the parent, and `PMTRACE_DIR` set
//! to the parent's trace directory. There the spawned world writes a trace
//! of its own, `spawn-<k>` (`lifecycle::prepare_dir`). The caller's info
//! objects are left as they were: pmtrace passes copies.

use crate::ffi::{self, MPI_Comm, MPI_Info};
use crate::guard::{self, State};
use core::ffi::{c_char, c_int, c_void};
use std::ffi::CString;

/// The info objects a spawn passes in place of the caller's, freed when
/// this is dropped (after the call).
pub struct Env {
    infos: Vec<MPI_Info>,
    made: bool,
}

impl Env {
    /// For `MPI_Comm_spawn`: `info` is read at the root only.
    pub fn new(info: &[MPI_Info], root: c_int, comm: MPI_Comm) -> Env {
        Self::build(info, root, comm)
    }

    /// For `MPI_Comm_spawn_multiple`: `count` info objects at `infos`
    /// (read at the root only).
    pub fn many(infos: *mut c_void, count: c_int, root: c_int, comm: MPI_Comm) -> Env {
        if !is_root(root, comm) || infos.is_null() || count <= 0 {
            return Env::unchanged();
        }
        // SAFETY: at the root, MPI's contract: `count` info handles.
        let given =
            unsafe { core::slice::from_raw_parts(infos as *const MPI_Info, count as usize) };
        Self::build(given, root, comm)
    }

    fn unchanged() -> Env {
        Env {
            infos: Vec::new(),
            made: false,
        }
    }

    fn build(given: &[MPI_Info], root: c_int, comm: MPI_Comm) -> Env {
        if guard::state() != State::Active || !is_root(root, comm) {
            return Env {
                infos: given.to_vec(),
                made: false,
            };
        }
        if crate::piggyback::mode() == crate::piggyback::Mode::Vector {
            // A vector header holds one entry per rank of the sender's
            // world: worlds of different sizes cannot read each other's.
            static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                eprintln!(
                    "pmtrace: warning: vector clocks do not span the worlds MPI_Comm_spawn \
                     starts (their sizes differ); messages between worlds of different sizes \
                     fail: trace programs that spawn with PMTRACE_CLOCKS=lamport"
                );
            }
        }
        let Some((key, lines)) = env_key().zip(env_lines()) else {
            return Env {
                infos: given.to_vec(),
                made: false,
            };
        };
        let infos = given.iter().map(|&i| with_env(i, key, &lines)).collect();
        Env { infos, made: true }
    }

    /// The info to pass for `MPI_Comm_spawn`.
    pub fn infos(&self) -> &[MPI_Info] {
        &self.infos
    }

    /// The array to pass for `MPI_Comm_spawn_multiple`: pmtrace's, or the
    /// caller's where pmtrace adds nothing.
    pub fn infos_or(&self, given: *mut c_void) -> *mut c_void {
        if self.made {
            self.infos.as_ptr() as *mut c_void
        } else {
            given
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if !self.made {
            return;
        }
        for info in &mut self.infos {
            // SAFETY: an info object this module created.
            unsafe { ffi::PMPI_Info_free(info) };
        }
    }
}

/// Whether this process is the spawn's root in `comm`.
fn is_root(root: c_int, comm: MPI_Comm) -> bool {
    let mut rank = -1;
    // SAFETY: a local query; a bad communicator fails and is left to the
    // real call to report.
    (unsafe { ffi::PMPI_Comm_rank(comm, &mut rank) } == 0) && rank == root
}

/// The environment spawned processes need, one `NAME=value` per line;
/// None when there is nothing to pass (no trace directory).
fn env_lines() -> Option<String> {
    let dir = crate::lifecycle::trace_dir()?;
    let mut lines = Vec::new();
    if let Some(lib) = own_library() {
        let preload = std::env::var("LD_PRELOAD").unwrap_or_default();
        let named = preload.split([':', ' ']).any(|p| p == lib);
        lines.push(if named {
            format!("LD_PRELOAD={preload}")
        } else if preload.is_empty() {
            format!("LD_PRELOAD={lib}")
        } else {
            format!("LD_PRELOAD={lib}:{preload}")
        });
    }
    for (k, v) in std::env::vars() {
        if k.starts_with("PMTRACE_") && k != "PMTRACE_DIR" && !v.contains('\n') {
            lines.push(format!("{k}={v}"));
        }
    }
    lines.push(format!("PMTRACE_DIR={}", dir.display()));
    Some(lines.join("\n"))
}

/// The path of pmtrace's shared library; None when pmtrace is linked into
/// the executable (spawned copies of it are traced anyway).
fn own_library() -> Option<String> {
    let path = crate::next::path_of(own_library as *const c_void)?;
    let path = path.to_str()?.to_string();
    let file = path.rsplit('/').next().unwrap_or(&path);
    (file.contains(".so") && path.starts_with('/')).then_some(path)
}

/// The info key through which the running MPI passes environment
/// variables to spawned processes, if it has one.
fn env_key() -> Option<&'static core::ffi::CStr> {
    let version = crate::library::running_version()?;
    let major: u32 = version
        .strip_prefix("Open MPI v")?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some(if major >= 5 { c"PMIX_ENVAR" } else { c"env" })
}

/// A copy of `info` (or a new info) whose environment key (`key`, or
/// `env` where the caller already set that, which Open MPI reads first)
/// has `lines` appended.
fn with_env(info: MPI_Info, key: &core::ffi::CStr, lines: &str) -> MPI_Info {
    let null = ffi::consts().info_null;
    let mut out = core::mem::MaybeUninit::<MPI_Info>::uninit();
    // SAFETY: MPI creates or copies an info object into `out`.
    let ok = unsafe {
        if ffi::handle_key(info) == ffi::handle_key(null) {
            ffi::PMPI_Info_create(out.as_mut_ptr())
        } else {
            ffi::PMPI_Info_dup(info, out.as_mut_ptr())
        }
    } == 0;
    if !ok {
        return info;
    }
    // SAFETY: created above.
    let out = unsafe { out.assume_init() };
    let (key, mut value) = match existing(out, c"env") {
        Some(v) => (c"env", v),
        None => (key, existing(out, key).unwrap_or_default()),
    };
    if !value.is_empty() && !value.ends_with('\n') {
        value.push('\n');
    }
    value.push_str(lines);
    if let Ok(v) = CString::new(value) {
        // SAFETY: NUL-terminated key and value.
        unsafe { ffi::PMPI_Info_set(out, key.as_ptr(), v.as_ptr()) };
    }
    out
}

/// The value of `key` in `info`, if set.
fn existing(info: MPI_Info, key: &core::ffi::CStr) -> Option<String> {
    let (mut len, mut flag) = (0, 0);
    // SAFETY: a valid info object and key.
    unsafe { ffi::PMPI_Info_get_valuelen(info, key.as_ptr(), &mut len, &mut flag) };
    if flag == 0 || len < 0 {
        return None;
    }
    let mut buf = vec![0u8; len as usize + 1];
    // SAFETY: room for `len` characters and the terminating NUL.
    unsafe {
        ffi::PMPI_Info_get(
            info,
            key.as_ptr(),
            len,
            buf.as_mut_ptr() as *mut c_char,
            &mut flag,
        )
    };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(len as usize);
    (flag != 0).then(|| String::from_utf8_lossy(&buf[..end]).into_owned())
}
