//! One traced call, what every hook starts from: its id, times and return
//! code, the thread's recorder, and the records it begins. Also what hooks
//! of every family share: the panic guard, the call's communicator, a
//! status's fields, the request table's entry for a new operation; and
//! the two smallest hooks, `plain` (a call with no payload) and
//! `types_changing`.
//!
//! A hook never lets a panic escape into C: the body runs under
//! `catch_unwind` (`guarded`), and a panic stops recording for the rest
//! of the run (later events are counted as dropped; the application
//! carries on, and the wrappers keep their part in the communicator id
//! agreement).

use crate::comms::{self, CommInfo};
use crate::ffi::{self, MPI_Comm, MPI_Datatype, MPI_Request, MPI_Status};
use crate::guard::Held;
use crate::piggyback;
use crate::recorder::{Recorder, Writer};
use crate::requests::{key, KeptPlace, Op, OpKind, REQUESTS};
use crate::thread::Thread;
use core::ffi::c_int;
use pmtrace_format::record::{LIST_BATCH, MAX_FIXED_RECORD, MAX_LIST_ITEM};
use pmtrace_format::varint::Sink;

/// One traced call: its id, times and return code.
pub struct Call<'g> {
    guard: Held<'g>,
    pub func: u32,
    pub t0: u64,
    pub t1: u64,
    pub rc: c_int,
}

impl<'g> Call<'g> {
    #[inline(always)]
    pub fn new(guard: impl Into<Held<'g>>, func: u32, t0: u64, t1: u64, rc: c_int) -> Self {
        Call {
            guard: guard.into(),
            func,
            t0,
            t1,
            rc,
        }
    }

    /// The guard, function, times and return code, apart (for a general
    /// path to make its own `Call` of).
    #[inline(always)]
    pub fn parts(&self) -> (Held<'g>, u32, u64, u64, c_int) {
        (self.guard, self.func, self.t0, self.t1, self.rc)
    }

    #[inline(always)]
    pub fn rec(&self) -> &mut Recorder {
        self.guard.recorder()
    }

    /// The thread's recorder and state together.
    #[inline(always)]
    pub fn thread(&self) -> &mut Thread {
        self.guard.thread()
    }

    #[inline(always)]
    pub fn ok(&self) -> bool {
        self.rc == 0
    }

    /// Whether this call is left out of the trace (see `exclusion`).
    #[inline(always)]
    pub fn leave_out(&self) -> bool {
        !self.guard.lane() && crate::exclusion::leave_out(self.func)
    }

    /// Whether the call is in the main thread's lane (see `lane`).
    #[inline(always)]
    pub fn lane(&self) -> bool {
        self.guard.lane()
    }

    /// Whether some calls may be left out now (`exclusion::any`); never
    /// in the main thread's lane.
    #[inline(always)]
    pub fn may_leave_out(&self) -> bool {
        !self.guard.lane() && crate::exclusion::any()
    }

    /// Bytes in `count` elements of `datatype`; 0 for a failed call,
    /// whose arguments may be invalid (and asking MPI about an invalid
    /// handle would raise an error the application did not cause).
    #[inline(always)]
    pub fn bytes(&self, count: i64, datatype: MPI_Datatype) -> u64 {
        if !self.ok() {
            return 0;
        }
        self.thread().state.types.bytes(count, datatype)
    }

    /// Starts this call's record with room for a fixed-size payload.
    #[inline(always)]
    pub fn begin(&self) -> Option<Writer<'_>> {
        self.rec()
            .begin_call(self.func, self.t0, self.t1, self.rc, MAX_FIXED_RECORD)
    }

    /// Starts this call's record with room for a fixed payload and one piggyback.
    #[inline(always)]
    pub fn begin_pb(&self) -> Option<Writer<'_>> {
        self.rec().begin_call(
            self.func,
            self.t0,
            self.t1,
            self.rc,
            MAX_FIXED_RECORD + piggyback::record_room(),
        )
    }

    /// Records `items` as a list: this call's record holds the first
    /// `list_batch()` of them, continuations the rest. `put` writes one
    /// batch, given the index of its first item.
    #[inline(always)]
    pub fn put_list<T>(&self, items: &[T], mut put: impl FnMut(&mut Writer, &[T], usize)) {
        let mut batches = items.chunks(list_batch());
        let first = batches.next().unwrap_or(&[]);
        let Some(mut w) = self.begin_list(first.len()) else {
            return;
        };
        w.put_u(first.len() as u64);
        put(&mut w, first, 0);
        w.commit();
        let mut done = first.len();
        for batch in batches {
            let Some(mut w) = self
                .rec()
                .begin_continuation(32 + batch.len() * item_room())
            else {
                return;
            };
            w.put_u(batch.len() as u64);
            put(&mut w, batch, done);
            w.commit_part();
            done += batch.len();
        }
    }

    /// Starts this call's record with room for a list of `items`.
    #[inline(always)]
    pub fn begin_list(&self, items: usize) -> Option<Writer<'_>> {
        self.rec().begin_call(
            self.func,
            self.t0,
            self.t1,
            self.rc,
            MAX_FIXED_RECORD + items * item_room(),
        )
    }
}

/// Most bytes one list item takes, piggyback included.
#[inline(always)]
pub fn item_room() -> usize {
    MAX_LIST_ITEM + piggyback::record_room()
}

/// Items per list record: fewer when vector clocks make items large.
#[inline(always)]
pub fn list_batch() -> usize {
    (LIST_BATCH * MAX_LIST_ITEM / item_room()).clamp(1, LIST_BATCH)
}

/// Runs a hook body; a panic disables tracing instead of unwinding into C.
#[inline(always)]
pub fn guarded(f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        crate::recorder::stop_recording();
    }
}

/// The communicator of a call. A communicator pmtrace does not know is
/// defined on first sight, unless the call failed (the handle may be invalid).
#[inline(always)]
pub fn comm_info(call: &Call, comm: MPI_Comm) -> &'static CommInfo {
    if call.ok() {
        comms::resolve(comm, call.thread(), call.t0)
    } else {
        comms::lookup(comm).unwrap_or_else(|| comms::unknown(call.rec(), call.t0))
    }
}

/// Source, tag and bytes of a filled status.
#[inline(always)]
pub fn actual(status: *const MPI_Status) -> (i32, i32, u64) {
    // SAFETY: MPI filled `status` (or our local substitute) for this call.
    let s = unsafe { &*status };
    (s.MPI_SOURCE, s.MPI_TAG, ffi::status_bytes(status))
}

/// Enters the operation a call just created under the request handle MPI
/// stored at `request`; `comm` is its communicator for the live view
/// (`Op::comm`).
#[inline(always)]
pub fn register(
    request: *mut MPI_Request,
    id: u64,
    kind: OpKind,
    persistent: bool,
    pb: usize,
    comm: u32,
) {
    // SAFETY: MPI just stored the new request handle there.
    let handle = unsafe { *request };
    REQUESTS.insert(
        key(handle),
        Op {
            id,
            kind,
            persistent,
            instance: None,
            cancelled: false,
            slot: request as usize,
            pb,
            comm,
        },
    );
}

/// `register` for an operation the fast path posted: kept out of the
/// table when the thread's place is free (`requests::Kept`).
#[inline(always)]
pub fn register_kept(
    kept: &mut KeptPlace,
    request: *mut MPI_Request,
    id: u64,
    kind: OpKind,
    pb: usize,
    comm: u32,
) {
    // SAFETY: MPI just stored the new request handle there.
    let handle = unsafe { *request };
    let op = Op {
        id,
        kind,
        persistent: false,
        instance: None,
        cancelled: false,
        slot: request as usize,
        pb,
        comm,
    };
    if !kept.get().put(key(handle), &op) {
        REQUESTS.insert(key(handle), op);
    }
}

/// Address of the i-th handle of the application's request array.
#[inline(always)]
pub fn slot_at(slots: *const MPI_Request, i: usize) -> usize {
    slots as usize + i * core::mem::size_of::<MPI_Request>()
}

/// A call recorded with no payload.
pub fn plain(call: Call) {
    guarded(|| {
        if call.leave_out() {
            return;
        }
        if let Some(r) = call.begin() {
            r.commit();
        }
    })
}

/// Before `MPI_Type_free`: cached datatype sizes become stale.
pub fn types_changing() {
    ffi::TYPE_GENERATION.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    ffi::EPOCH.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
}
