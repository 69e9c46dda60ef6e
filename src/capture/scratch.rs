//! Per-thread arrays the wrappers of array arguments reuse across calls:
//! substitute statuses for `MPI_STATUSES_IGNORE`, and the request handles
//! as they were before the call (the completion hooks look them up).

use crate::ffi::{self, MPI_Request, MPI_Status};
use core::cell::RefCell;
use core::ffi::c_int;

thread_local! {
    static SCRATCH: RefCell<(Vec<MPI_Status>, Vec<MPI_Request>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Per-thread arrays reused across calls: substitute statuses for
/// MPI_STATUSES_IGNORE, and the request handles as they were before the call.
pub struct Scratch {
    statuses: Vec<MPI_Status>,
    requests: Vec<MPI_Request>,
}

impl Scratch {
    pub fn take() -> Scratch {
        let (statuses, requests) = SCRATCH
            .try_with(|s| core::mem::take(&mut *s.borrow_mut()))
            .unwrap_or_default();
        Scratch { statuses, requests }
    }

    pub fn statuses(&mut self, statuses: *mut MPI_Status, n: c_int) -> *mut MPI_Status {
        // SAFETY: reads an initialised constant of mpi-sys's shim.
        let ignore = unsafe { ffi::RSMPI_STATUSES_IGNORE };
        if !statuses.is_null() && statuses != ignore {
            return statuses;
        }
        let n = n.max(1) as usize;
        if self.statuses.len() < n {
            // SAFETY: MPI_Status is plain data; all-zero is a valid value.
            self.statuses.resize(n, unsafe { core::mem::zeroed() });
        }
        self.statuses.as_mut_ptr()
    }

    pub fn save_requests(&mut self, requests: *const MPI_Request, n: c_int) {
        self.requests.clear();
        if !requests.is_null() && n > 0 {
            // SAFETY: MPI requires `n` valid request handles there.
            self.requests
                .extend_from_slice(unsafe { core::slice::from_raw_parts(requests, n as usize) });
        }
    }

    pub fn requests(&self) -> &[MPI_Request] {
        &self.requests
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let bufs = (
            core::mem::take(&mut self.statuses),
            core::mem::take(&mut self.requests),
        );
        let _ = SCRATCH.try_with(|s| *s.borrow_mut() = bufs);
    }
}
