//! The tracer's lifecycle state and the re-entrancy guard.
//!
//! `Guard::acquire()` returns `None` when the wrapper must call the real
//! function and record nothing: tracing is not active (before `MPI_Init`,
//! after `MPI_Finalize`, or disabled by an error), or this thread is already
//! inside a wrapper (the tool's own MPI calls, or MPI calling itself).

use crate::lane;
use crate::recorder::Recorder;
use crate::thread::Thread;
use core::cell::{Cell, UnsafeCell};
use core::marker::PhantomData;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Before MPI_Init.
    Uninit = 0,
    Active = 1,
    /// Tracing could not start or failed; the application runs untraced.
    Disabled = 2,
    /// After MPI_Finalize (or MPI_Abort) sealed the trace.
    Finished = 3,
}

static STATE: AtomicU8 = AtomicU8::new(State::Uninit as u8);

pub fn state() -> State {
    match STATE.load(Ordering::Acquire) {
        0 => State::Uninit,
        1 => State::Active,
        2 => State::Disabled,
        _ => State::Finished,
    }
}

pub fn set_state(s: State) {
    STATE.store(s as u8, Ordering::Release);
    lane::close(lane::INACTIVE, s != State::Active);
}

/// Everything a thread needs on the hot path, in one thread-local: its
/// recorder and state, and whether a guard holds them.
pub struct Local {
    /// `lane::BUSY` while a guard holds the thread, else 0.
    busy: Cell<usize>,
    thread: UnsafeCell<Thread>,
}

thread_local! {
    static THREAD: Local = const {
        Local { busy: Cell::new(0), thread: UnsafeCell::new(Thread::new()) }
    };
}

/// The recorder of the thread that initialised MPI when that is the
/// process's main thread: reached without a thread-local lookup (which costs
/// a call to `__tls_get_addr` in a preloaded library), by comparing the
/// thread pointer. It is also where the main thread's recorder goes when its
/// thread-locals are destroyed while tracing is still on (`exit()` runs
/// thread-local destructors before static destructors, and programs call MPI,
/// MPI_Finalize above all, from static destructors). Used only by that
/// thread.
struct MainThread(Local);

// SAFETY: only the main thread touches it: through the fast path when its
// thread pointer is `MAIN_TP`, or after its own thread-locals are gone.
unsafe impl Sync for MainThread {}

static MAIN: MainThread = MainThread(Local {
    busy: Cell::new(0),
    thread: UnsafeCell::new(Thread::new()),
});

/// The main thread's thread pointer once it initialised MPI (0: no fast path).
static MAIN_TP: AtomicUsize = AtomicUsize::new(0);

/// The calling thread's thread pointer: distinct for every live thread, and
/// one instruction to read (0 where not known how).
#[inline(always)]
fn thread_pointer() -> usize {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let tp: usize;
        // SAFETY: on x86_64 Linux, fs:0 holds the thread control block's
        // own address, set up by the C library for every thread.
        unsafe {
            core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp,
                options(nostack, readonly, preserves_flags, pure));
        }
        tp
    }
    #[cfg(all(target_arch = "aarch64", target_os = "linux"))]
    {
        let tp: usize;
        // SAFETY: reads the thread register, which has no side effects.
        unsafe {
            core::arch::asm!("mrs {}, tpidr_el0", out(reg) tp,
                options(nostack, nomem, preserves_flags, pure));
        }
        tp
    }
    #[cfg(not(all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        target_os = "linux"
    )))]
    {
        0
    }
}

/// Before `MPI_Init` acquires its guard: when the process's main thread
/// initialises MPI, its calls use `MAIN` from now on. Nothing has been
/// recorded on any thread yet (recording starts inside MPI_Init), so no
/// state is left behind in its thread-local recorder.
pub fn init_thread() {
    let tp = thread_pointer();
    // SAFETY: plain system calls without arguments.
    let main = unsafe { libc::gettid() == libc::getpid() };
    if tp != 0 && main && state() == State::Uninit {
        MAIN_TP.store(tp, Ordering::Relaxed);
        lane::open_to(tp);
    }
}

/// Keeps the exiting main thread's recorder and state for calls made
/// after its thread-locals are gone.
pub fn adopt(thread: Thread) {
    // SAFETY: called from the main thread's own thread-local destructor;
    // nothing else references the main recorder (see `MainThread`).
    unsafe { *MAIN.0.thread.get() = thread };
}

pub struct Guard {
    thread: *const Local,
    /// Taken in the main thread's lane (see `lane`): the timer is the TSC,
    /// no orphan waits and no call is left out. Constant where a wrapper's
    /// body is inlined for the lane.
    lane: bool,
    _not_send: PhantomData<*const ()>,
}

impl Guard {
    /// The main thread's guard when the lane admits it (see `lane`), for
    /// the wrapper's copy of its body in which the thread's state is at a
    /// fixed address and the lane's tests are known to pass.
    #[inline(always)]
    pub fn in_lane() -> Option<Guard> {
        // Busy or not in the lane, in one comparison (see `lane::BUSY`).
        if !lane::admits(thread_pointer() | MAIN.0.busy.get()) {
            return None;
        }
        MAIN.0.busy.set(lane::BUSY);
        Some(Guard {
            thread: &MAIN.0,
            lane: true,
            _not_send: PhantomData,
        })
    }

    /// Any thread's guard, the main thread's included (when its lane is
    /// closed, or it is busy), or `None`: pass the call through.
    #[inline(always)]
    pub fn acquire() -> Option<Guard> {
        if STATE.load(Ordering::Relaxed) != State::Active as u8 {
            return None;
        }
        Self::acquire_any()
    }

    /// Acquires regardless of the lifecycle state (init and finalize).
    #[inline(always)]
    pub fn acquire_any() -> Option<Guard> {
        let tp = thread_pointer();
        if tp != 0 && tp == MAIN_TP.load(Ordering::Relaxed) {
            return Self::enter(&MAIN.0);
        }
        match THREAD.try_with(Self::enter) {
            Ok(g) => g,
            Err(_) => Self::acquire_orphan(),
        }
    }

    #[inline(always)]
    fn enter(t: &Local) -> Option<Guard> {
        if t.busy.get() != 0 {
            return None;
        }
        t.busy.set(lane::BUSY);
        Some(Guard {
            thread: t as *const Local,
            lane: false,
            _not_send: PhantomData,
        })
    }

    /// After the thread-locals of the main thread are gone, its calls go
    /// to the recorder it left behind (see `adopt`).
    #[cold]
    fn acquire_orphan() -> Option<Guard> {
        if crate::recorder::is_main_thread() {
            Self::enter(&MAIN.0)
        } else {
            None
        }
    }

    /// The guard's thread and lane, for the hooks (see `Held`).
    #[inline(always)]
    pub fn held(&self) -> Held<'_> {
        Held {
            thread: self.thread,
            lane: self.lane,
            _guard: PhantomData,
        }
    }

    /// This thread's recorder and state (see `Held::thread`).
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub fn thread(&self) -> &mut Thread {
        self.held().thread()
    }

    /// This thread's recorder (see `Held::thread`).
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub fn recorder(&self) -> &mut Recorder {
        self.held().recorder()
    }

    /// The trace timer (see `Held::now`).
    #[inline(always)]
    pub fn now(&self) -> u64 {
        self.held().now()
    }
}

/// What a guard holds, copied for the hooks: passed by value, so that the
/// guard itself never leaves its wrapper's frame and, in the lane's copy
/// of a wrapper, its fields stay constants.
#[derive(Clone, Copy)]
pub struct Held<'g> {
    thread: *const Local,
    lane: bool,
    _guard: PhantomData<&'g Guard>,
}

impl<'g> From<&'g Guard> for Held<'g> {
    #[inline(always)]
    fn from(g: &'g Guard) -> Held<'g> {
        g.held()
    }
}

impl<'g> Held<'g> {
    /// This thread's recorder and state. Exclusive: the guard is held by
    /// at most one frame per thread.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub fn thread(&self) -> &'g mut Thread {
        // SAFETY: `thread` points at this thread's Local, alive while the
        // guard (which is !Send) lives; `busy` ensures a single guard per
        // thread, so no other reference to the thread's state exists.
        unsafe { &mut *(*self.thread).thread.get() }
    }

    /// This thread's recorder (see `thread`).
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub fn recorder(&self) -> &'g mut Recorder {
        &mut self.thread().recorder
    }

    /// Whether the guard was taken in the main thread's lane.
    #[inline(always)]
    pub fn lane(&self) -> bool {
        self.lane
    }

    /// The trace timer (`clock::now`), with no test of the timer's mode
    /// in the lane.
    #[inline(always)]
    pub fn now(&self) -> u64 {
        if self.lane {
            crate::clock::now_tsc()
        } else {
            crate::clock::now()
        }
    }
}

impl Drop for Guard {
    #[inline(always)]
    fn drop(&mut self) {
        // Freed requests still in flight are completed at the end of traced
        // calls (see `orphans`), under this guard.
        if !self.lane && crate::orphans::wanted() {
            crate::orphans::poll();
        }
        // SAFETY: as in `thread`.
        unsafe { (*self.thread).busy.set(0) };
    }
}

impl Drop for Thread {
    /// A thread that exits hands its last buffer over; the main thread keeps
    /// recording through `adopt` (MPI_Finalize may still come).
    fn drop(&mut self) {
        if self.recorder.has_buffer() && state() == State::Active {
            if crate::recorder::is_main_thread() {
                adopt(core::mem::take(self));
            } else {
                self.recorder.finish();
            }
        }
    }
}
