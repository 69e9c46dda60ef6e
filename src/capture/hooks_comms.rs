//! Hooks of communicators: constructors (collective or dynamic),
//! `MPI_Comm_idup`, and the release of a communicator. Each new
//! communicator gets its id and definition record in `comms`.

use crate::comms::{self, CommInfo};
use crate::ffi::{self, MPI_Comm, MPI_Request};
use crate::hooks_call::{comm_info, guarded, register, Call};
use crate::hooks_colls::{next_seq, put_coll};
use crate::requests::OpKind;
use core::sync::atomic::Ordering::Relaxed;
use pmtrace_format::varint::Sink;

/// How a new communicator came about, which decides how its id is found.
pub enum Origin {
    /// A constructor every member of the parent calls, in the order of the
    /// parent's other collectives (dup, split, create, cart, graph, merge):
    /// the id is derived from the parent's, with no communication.
    Collective,
    /// A constructor a subset of the parent calls (`MPI_Comm_create_group`),
    /// or one without a parent (from groups): the members agree on the id.
    Agreed,
    /// Spawn, accept, connect, join: the other side may be untraced, so
    /// the id is local.
    Dynamic,
    /// `MPI_Comm_get_parent`: known already, or local.
    Parent,
}

pub fn comm_new(call: Call, parent: Option<MPI_Comm>, newcomm: *mut MPI_Comm, origin: Origin) {
    guarded(|| {
        let parent = parent.map(|p| comm_info(&call, p));
        // Counted whatever the call returns, as on every other member: a
        // rank left out of a split (MPI_COMM_NULL) still counts it.
        let nth = match (&origin, parent) {
            (Origin::Collective, Some(p)) => Some((p, p.constructs.fetch_add(1, Relaxed))),
            _ => None,
        };
        let parent = parent.map(|p| p.index);
        let new = if call.ok() {
            // SAFETY: MPI stored the new communicator there.
            let c = unsafe { *newcomm };
            // SAFETY: reads an initialised constant of mpi-sys's shim.
            if ffi::handle_key(c) == ffi::handle_key(unsafe { ffi::RSMPI_COMM_NULL }) {
                None
            } else {
                let t = call.t0;
                Some(match origin {
                    Origin::Collective => match nth {
                        Some((p, n)) => comms::define_collective(c, p, n, call.rec(), t),
                        None => comms::define_agreed(c, call.rec(), t),
                    },
                    Origin::Agreed => comms::define_agreed(c, call.rec(), t),
                    Origin::Dynamic => comms::define_dynamic(c, call.rec(), t),
                    Origin::Parent => comms::resolve(c, call.thread(), t),
                })
            }
        } else {
            None
        };
        if let Some(mut r) = call.begin() {
            r.put_u(parent.map_or(0, |p| u64::from(p) + 1));
            r.put_u(new.map_or(0, |n| u64::from(n.index) + 1));
            r.commit();
        }
    })
}

pub fn comm_idup(call: Call, comm: MPI_Comm, newcomm: *mut MPI_Comm, request: *mut MPI_Request) {
    guarded(|| {
        let info = comm_info(&call, comm);
        let seq = next_seq(info);
        let nth = info.idups.fetch_add(1, Relaxed);
        let Some(mut r) = call.begin() else { return };
        put_coll(&mut r, info, seq, None, 0, 0);
        if call.ok() {
            let id = r.take_op();
            let kind = OpKind::Idup {
                newcomm: newcomm as usize,
                parent_gid: info.gid,
                nth,
                seq: seq as u32,
            };
            register(request, id, kind, false, 0, info.index + 1);
        }
        r.commit();
    })
}

/// Before `MPI_Comm_free`/`MPI_Comm_disconnect`: the communicator is taken
/// out of the table (looked up only: the handle is about to die).
pub fn release_comm(comm: MPI_Comm) -> Option<&'static CommInfo> {
    comms::release(comm)
}

pub fn comm_free(call: Call, comm: MPI_Comm, released: Option<&'static CommInfo>) {
    guarded(|| {
        if !call.ok() {
            // Still alive after all.
            if let Some(info) = released {
                comms::restore(comm, info);
            }
        }
        let index = released
            .unwrap_or_else(|| comms::unknown(call.rec(), call.t0))
            .index;
        if let Some(mut r) = call.begin() {
            r.put_u(u64::from(index));
            r.commit();
        }
    })
}
