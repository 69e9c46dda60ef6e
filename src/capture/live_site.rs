//! Where a blocked call came from: the application's frames around it.
//!
//! Calls store no return address: that would cost every call. Instead,
//! once a call has blocked for a second, the writer thread asks the thread
//! for its stack: it sends it a real-time signal whose handler unwinds the
//! stack (glibc's `backtrace`, through the signal frame) into a buffer and
//! says it is done. The writer thread then places the addresses in the
//! loaded objects, drops the frames inside pmtrace and the MPI library, and
//! keeps the application's first ones.
//!
//! The signal is one no one had a handler for at `MPI_Init`, the highest
//! free of the real-time ones; it is sent only while the handler is still
//! pmtrace's, and at most once to a thread that never answered (one that
//! blocks the signal). The handler is installed with `SA_RESTART` and keeps
//! `errno`. `PMTRACE_LIVE_SITE=off` turns all of this off.

use crate::next::places::{locate, Place};
use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering::*};
use parking_lot::Mutex;
use pmtrace_format::live::{SiteFrame, SITE_FRAMES};

/// Return addresses the handler keeps: enough to cross the MPI library's
/// progress engine and pmtrace into the application.
const DEPTH: usize = 64;

/// The signal, 0 when off.
static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The request in flight: its number (times 4) and phase.
static STATE: AtomicU64 = AtomicU64::new(0);
const ASKED: u64 = 1;
const WRITING: u64 = 2;
const DONE: u64 = 3;
/// The thread asked (kernel id).
static TARGET: AtomicI32 = AtomicI32::new(0);
static COUNT: AtomicUsize = AtomicUsize::new(0);

struct Frames(UnsafeCell<[*mut c_void; DEPTH]>);
// SAFETY: written only by the handler that won `STATE` (ASKED -> WRITING),
// read only by the writer thread after it saw DONE.
unsafe impl Sync for Frames {}
static FRAMES: Frames = Frames(UnsafeCell::new([core::ptr::null_mut(); DEPTH]));

/// Threads that did not answer (they block the signal): not asked again,
/// as each ask would queue one more signal.
static DEAF: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// How long the writer thread waits for an answer.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_millis(50);

fn gettid() -> i32 {
    // SAFETY: a system call without arguments (async-signal-safe).
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

extern "C" fn on_signal(_: c_int, _: *mut libc::siginfo_t, _: *mut c_void) {
    // SAFETY: this thread's errno, kept across the handler.
    let errno = unsafe { *libc::__errno_location() };
    let st = STATE.load(Acquire);
    if st & 3 == ASKED
        && TARGET.load(Relaxed) == gettid()
        && STATE
            .compare_exchange(st, st & !3 | WRITING, AcqRel, Relaxed)
            .is_ok()
    {
        // SAFETY: this handler alone writes FRAMES now (it won WRITING);
        // `backtrace` was called once at install, so it loads nothing.
        let n = unsafe { libc::backtrace(FRAMES.0.get().cast(), DEPTH as c_int) };
        COUNT.store(n.max(0) as usize, Relaxed);
        STATE.store(st & !3 | DONE, Release);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Takes a free real-time signal for the asks (at `MPI_Init`, before any
/// thread can be asked). Not when pmtrace is linked into the executable:
/// its frames and the application's are then in one object, and cannot be
/// told apart.
pub fn install() {
    let Some(own) = own_place() else { return };
    if std::fs::read_link("/proc/self/exe").is_ok_and(|exe| exe == own.object) {
        return;
    }
    // The unwinder's first use loads libgcc_s: not in a signal handler.
    let mut warm = [core::ptr::null_mut(); 4];
    // SAFETY: a buffer of 4 pointers.
    unsafe { libc::backtrace(warm.as_mut_ptr(), 4) };
    let (lo, hi) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    for sig in (lo.max(hi - 8)..=hi).rev() {
        // SAFETY: sigaction with a null new action only reads the old.
        let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
        if unsafe { libc::sigaction(sig, core::ptr::null(), &mut old) } != 0
            || old.sa_sigaction != libc::SIG_DFL
        {
            continue;
        }
        // SAFETY: a zeroed sigaction is valid; its mask is emptied below.
        let mut sa: libc::sigaction = unsafe { core::mem::zeroed() };
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        // SAFETY: `sa` is ours; the handler is async-signal-safe.
        unsafe { libc::sigemptyset(&mut sa.sa_mask) };
        if unsafe { libc::sigaction(sig, &sa, core::ptr::null_mut()) } == 0 {
            SIGNAL.store(sig, Relaxed);
            return;
        }
    }
}

/// Whether the signal's handler is still pmtrace's (the application may
/// have taken the signal since).
fn still_ours(sig: c_int) -> bool {
    // SAFETY: as in `install`.
    let mut cur: libc::sigaction = unsafe { core::mem::zeroed() };
    (unsafe { libc::sigaction(sig, core::ptr::null(), &mut cur) }) == 0
        && cur.sa_sigaction == on_signal as *const () as usize
}

/// The return addresses of thread `tid`'s stack now, innermost first; for
/// the writer thread alone. `None`: off, no answer, or the signal is no
/// longer pmtrace's.
fn ask(tid: i32) -> Option<Vec<usize>> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let sig = SIGNAL.load(Relaxed);
    if sig == 0 || tid <= 0 || DEAF.lock().contains(&tid) {
        return None;
    }
    if !still_ours(sig) {
        SIGNAL.store(0, Relaxed);
        return None;
    }
    let id = NEXT.fetch_add(1, Relaxed) + 1;
    TARGET.store(tid, Relaxed);
    STATE.store(id << 2 | ASKED, Release);
    // SAFETY: tgkill to a thread of this process.
    if unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, sig) } != 0 {
        STATE.store(0, Relaxed);
        return None;
    }
    let deadline = std::time::Instant::now() + ANSWER_WITHIN;
    loop {
        let st = STATE.load(Acquire);
        if st == id << 2 | DONE {
            let n = COUNT.load(Relaxed).min(DEPTH);
            // SAFETY: the handler finished writing (DONE, acquired).
            let frames = unsafe { &*FRAMES.0.get() };
            let out = frames[..n].iter().map(|&p| p as usize).collect();
            STATE.store(0, Relaxed);
            return Some(out);
        }
        if std::time::Instant::now() > deadline
            && STATE
                .compare_exchange(id << 2 | ASKED, 0, AcqRel, Relaxed)
                .is_ok()
        {
            DEAF.lock().push(tid);
            return None;
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// Objects of the MPI library's (and its language bindings'), which lie
/// between the application and pmtrace when, say, Fortran calls MPI.
fn is_mpi_object(path: &std::path::Path) -> bool {
    let name = file_name(path);
    name.starts_with(b"libmpi") || name.starts_with(b"libpmpi")
}

fn file_name(path: &std::path::Path) -> &[u8] {
    use std::os::unix::ffi::OsStrExt;
    path.file_name().map_or(b"", |n| n.as_bytes())
}

/// The C library's, where a stack begins (`__libc_start_main`, a thread's
/// start): the application's frames end there.
fn is_libc_object(path: &std::path::Path) -> bool {
    let name = file_name(path);
    name.starts_with(b"libc.so") || name.starts_with(b"libc-")
}

/// The object pmtrace's code is in.
fn own_place() -> Option<Place> {
    locate(&[own_place as *const () as usize]).pop().flatten()
}

/// The application frames of a stack (return addresses, innermost first):
/// those past pmtrace's outermost frame, less the MPI library's, up to the
/// C library's that began the stack. None when pmtrace's frames are not
/// there (the thread had left the call).
fn application_frames(stack: &[usize]) -> Option<Vec<SiteFrame>> {
    // The stack's places, and pmtrace's own last, in one look.
    let mut addrs = stack.to_vec();
    addrs.push(own_place as *const () as usize);
    let mut places = locate(&addrs);
    let own = places.pop().flatten()?;
    let last_own = places.iter().rposition(|p| {
        p.as_ref()
            .is_some_and(|p| p.object == own.object && p.bias == own.bias)
    })?;
    let frames = stack[last_own + 1..]
        .iter()
        .zip(&places[last_own + 1..])
        .filter(|(_, p)| !p.as_ref().is_some_and(|p| is_mpi_object(&p.object)))
        .take_while(|(_, p)| !p.as_ref().is_some_and(|p| is_libc_object(&p.object)))
        .take(SITE_FRAMES)
        .map(|(&pc, p)| match p {
            // A return address follows its call: one back is in the call.
            Some(p) => SiteFrame {
                address: (pc - 1 - p.bias) as u64,
                symbol: p
                    .symbol
                    .as_ref()
                    .map(|(name, off)| format!("{name}+{:#x}", off.saturating_sub(1))),
                object: p.object.to_string_lossy().into_owned(),
            },
            None => SiteFrame {
                address: pc as u64 - 1,
                symbol: None,
                object: String::new(),
            },
        })
        .collect();
    Some(frames)
}

/// Where the call thread `tid` is blocked in came from, or `None` when it
/// could not be found (see `ask` and `application_frames`).
pub fn site_of(tid: i32) -> Option<Vec<SiteFrame>> {
    application_frames(&ask(tid)?)
}
