//! The tracer's lifecycle state and the re-entrancy guard.
//!
//! `Guard::acquire()` returns `None` when the wrapper must call the real
//! function and record nothing: tracing is not active (before `MPI_Init`,
//! after `MPI_Finalize`, or disabled by an error), or this thread is already
//! inside a wrapper (the tool's own MPI calls, or MPI calling itself).

use crate::recorder::Recorder;
use core::cell::{Cell, UnsafeCell};
use core::marker::PhantomData;
use std::sync::atomic::{AtomicU8, Ordering};

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
}

/// Everything a thread needs on the hot path, in one thread-local.
pub struct ThreadState {
    busy: Cell<bool>,
    recorder: UnsafeCell<Recorder>,
}

thread_local! {
    static THREAD: ThreadState = const {
        ThreadState { busy: Cell::new(false), recorder: UnsafeCell::new(Recorder::new()) }
    };
}

pub struct Guard {
    thread: *const ThreadState,
    _not_send: PhantomData<*const ()>,
}

impl Guard {
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
        THREAD
            .try_with(|t| {
                if t.busy.replace(true) {
                    None
                } else {
                    Some(Guard {
                        thread: t as *const ThreadState,
                        _not_send: PhantomData,
                    })
                }
            })
            .ok()
            .flatten()
    }

    /// This thread's recorder. Exclusive: the guard is held by at most one
    /// frame per thread.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub fn recorder(&self) -> &mut Recorder {
        // SAFETY: `thread` points at this thread's ThreadState, alive while
        // the guard (which is !Send) lives; `busy` ensures a single guard per
        // thread, so no other reference to the recorder exists.
        unsafe { &mut *(*self.thread).recorder.get() }
    }
}

impl Drop for Guard {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: as in `recorder`.
        unsafe { (*self.thread).busy.set(false) };
    }
}
