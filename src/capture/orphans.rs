//! Requests the application freed while their operation was in flight.
//!
//! `MPI_Request_free` on an active request lets MPI finish the operation
//! on its own. Under pmtrace that operation still owns a piggyback slot:
//! a staged receive's data sits in the slot's staging area and must reach
//! the user's buffer, and the slot (and its struct type) must live until
//! MPI is done with it. So pmtrace does not pass such a request to
//! `PMPI_Request_free`. It sets the application's handle to
//! `MPI_REQUEST_NULL`, keeps the request, and completes it itself with
//! `PMPI_Testsome` at the end of later traced calls. A staged receive is
//! urgent: every traced call tests it, so when the application learns by
//! other means (a later message, a barrier) that the data has come, the
//! call that told it has already copied the data. Other operations are
//! tested once [`BATCH`] of them have gathered, so a fire-and-forget
//! `MPI_Isend` loop costs one test per batch. `MPI_Finalize` tests what is
//! left and frees the rest the way the application asked.
//!
//! A freed receive has no completion in the trace, so its completion here
//! applies no clock rule (the offline replay sees none either), and it
//! leaves the pending wildcard set when it is freed.

use crate::ffi::{self, MPI_Request, MPI_Status};
use crate::piggyback;
use crate::requests::{key, REQUESTS};
use core::ffi::c_int;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

thread_local! {
    /// Set by [`free`] when the request it frees was cancelled, and MPI
    /// says that succeeded; taken by the hook that records the call.
    static FREED_CANCELLED: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Whether the request the last [`free`] of this thread freed had been
/// cancelled with success (and forgets it).
pub fn take_freed_cancelled() -> bool {
    FREED_CANCELLED.replace(false)
}

/// Non-urgent orphans gathered before a test.
const BATCH: usize = 64;

struct Orphan {
    handle: MPI_Request,
    slot: usize,
    persistent: bool,
    urgent: bool,
}

// SAFETY: request handles are plain identifiers; the slot is owned by the
// orphan and only touched under the table's lock.
unsafe impl Send for Orphan {}

static ORPHANS: Mutex<Vec<Orphan>> = Mutex::new(Vec::new());
static URGENT: AtomicUsize = AtomicUsize::new(0);
/// Whether the next traced call should test the orphans.
static WANTED: AtomicBool = AtomicBool::new(false);

/// Whether orphans wait for a test (read at the end of every traced call).
#[inline(always)]
pub fn wanted() -> bool {
    WANTED.load(Relaxed)
}

/// Sets `WANTED`, and the main thread's lane's reason with it.
fn set_wanted(on: bool) {
    WANTED.store(on, Relaxed);
    crate::lane::close(crate::lane::ORPHANS, on);
}

/// `MPI_Request_free`, keeping an operation in flight that has a slot.
///
/// # Safety
/// `request` is the application's argument: null or valid for reads and
/// writes.
pub unsafe fn free(request: *mut MPI_Request) -> c_int {
    if !request.is_null() {
        // SAFETY: the caller's handle variable.
        let handle = unsafe { *request };
        let op = REQUESTS.get(key(handle), request as usize);
        if op.is_some_and(|op| op.cancelled) {
            // Whether the cancellation succeeded, which the trace must say
            // (a cancelled send moved nothing): asked of MPI without
            // completing or freeing anything.
            // SAFETY: MPI_Status is plain data that MPI fills.
            let mut st: MPI_Status = unsafe { core::mem::zeroed() };
            let mut flag: c_int = 0;
            // SAFETY: the application's live request; our flag and status.
            let rc = unsafe { ffi::PMPI_Request_get_status(handle, &mut flag, &mut st) };
            FREED_CANCELLED.set(rc == 0 && flag != 0 && ffi::status_cancelled(&st));
        }
        if let Some(op) = op.filter(|op| piggyback::in_flight(op.pb)) {
            piggyback::forget_pending(op.pb);
            let urgent = piggyback::delivers(op.pb);
            let mut o = ORPHANS.lock();
            o.push(Orphan {
                handle,
                slot: op.pb,
                persistent: op.persistent,
                urgent,
            });
            if urgent {
                URGENT.fetch_add(1, Relaxed);
            }
            set_wanted(URGENT.load(Relaxed) > 0 || o.len() >= BATCH);
            // SAFETY: as above; MPI would have set it to null.
            unsafe { *request = ffi::RSMPI_REQUEST_NULL };
            return 0;
        }
    }
    // SAFETY: the caller's argument, passed through.
    // Called, never taken by address: a library for the standard ABI must
    // load where no MPI defines the function (see Makefile, `abi`).
    unsafe { crate::mpi::real::PMPI_Request_free(request) }
}

/// Tests the orphans and completes those MPI has finished. Called with the
/// thread's guard held; skips if another thread is testing.
#[cold]
pub fn poll() {
    let Some(mut o) = ORPHANS.try_lock() else {
        return;
    };
    test(&mut o);
    set_wanted(URGENT.load(Relaxed) > 0 || o.len() >= BATCH);
}

/// At `MPI_Finalize`: completes what has finished and frees the rest as
/// the application asked (their slots stay: MPI may still write there).
pub fn finish() {
    let mut o = ORPHANS.lock();
    test(&mut o);
    for mut orphan in o.drain(..) {
        // SAFETY: a request pmtrace kept in the application's stead.
        unsafe { ffi::PMPI_Request_free(&mut orphan.handle) };
    }
    URGENT.store(0, Relaxed);
    set_wanted(false);
}

fn test(o: &mut Vec<Orphan>) {
    if o.is_empty() {
        return;
    }
    let n = o.len();
    let mut handles: Vec<MPI_Request> = o.iter().map(|x| x.handle).collect();
    let mut indices = vec![0 as c_int; n];
    // SAFETY: MPI_Status is plain data that Testsome fills.
    let mut statuses: Vec<MPI_Status> = vec![unsafe { core::mem::zeroed() }; n];
    let mut count: c_int = 0;
    // SAFETY: arrays of `n` entries each.
    let rc = unsafe {
        ffi::PMPI_Testsome(
            n as c_int,
            handles.as_mut_ptr(),
            &mut count,
            indices.as_mut_ptr(),
            statuses.as_mut_ptr(),
        )
    };
    if rc != 0 && rc != ffi::consts().err_in_status {
        return;
    }
    if count <= 0 {
        // MPI_UNDEFINED: none left active (all were inactive or null).
        return;
    }
    let mut done = vec![false; n];
    for k in 0..count as usize {
        let i = indices[k] as usize;
        let status = &mut statuses[k] as *mut MPI_Status;
        let orphan = &mut o[i];
        orphan.handle = handles[i];
        piggyback::finish_orphan(orphan.slot, status);
        if orphan.persistent {
            // Now inactive: the free the application asked for.
            // SAFETY: a request pmtrace kept in the application's stead.
            unsafe { ffi::PMPI_Request_free(&mut orphan.handle) };
        }
        if orphan.urgent {
            URGENT.fetch_sub(1, Relaxed);
        }
        done[i] = true;
    }
    let mut i = 0;
    o.retain(|_| {
        i += 1;
        !done[i - 1]
    });
}
