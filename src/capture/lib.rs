//! pmtrace's capture runtime for one MPI binary interface. The same source
//! builds three crates (`crates/capture/{openmpi,mpich,abi}`, build.rs
//! picks the interface), all three inside `libpmtrace.so`, whose front
//! (src/front.rs) finds the MPI the process runs and routes every exported
//! `MPI_*` function to one of them (`EXPORTS`, after `bind`). Each defines
//! the `MPI_*` functions, records each call, and passes it on to `PMPI_*`.
//!
//! A flat list of small modules, each importing only modules below it
//! (`tests/layout` checks):
//! - `wrappers`: generated from `wrappers/mpi.wrap` (one per MPI function);
//! - `mpi`: generated too: the function table and the real MPI functions
//!   below pmtrace, which every other module calls;
//! - `lifecycle`: the hand-written Init/Finalize/Abort/Pcontrol;
//! - `hooks`: what each kind of call records, by family in `hooks_*`;
//! - `piggyback`: the hidden header on every message, and the clocks;
//!   its parts are `piggyback_*` (lamport, header, routes, send, deliver,
//!   replace, slots), with `large_headers` (headers sent apart from large
//!   messages) and `header_rings` (their rings in shared memory on a node);
//! - `peers`: finds ranks that run without pmtrace, before any message;
//! - `offsets`: clock offsets to rank 0 at init and finalize;
//! - `recorder`: per-thread buffers in mapped file pages, which it
//!   encodes records into; `thread`: the state a thread keeps beside it;
//! - `flusher`: the background writer thread that owns the file;
//! - `live`: the live status file `pmtrace top` reads, which each call
//!   writes a few words of; `live_tick`: what the writer thread adds;
//!   `live_site`: where a blocked call came from, asked of its thread;
//! - `comms`, `requests`: communicator ids and live request state;
//! - `library`: the running library's version and quirks;
//! - `guard`: lifecycle state and the re-entrancy guard; `lane`: the main
//!   thread's fast lane, which one comparison admits; `clock`: the timer;
//! - `config`: `PMTRACE_*` settings; `ffi`: MPI bindings and C constants.
//!
//! Nothing here is exported by name: the front exports the MPI symbols and
//! the phase API of `include/pmtrace.h`, from `EXPORTS`.

mod buffers;
mod clock;
mod comms;
mod config;
mod exclusion;
mod ffi;
mod flusher;
mod guard;
mod header_rings;
mod hooks;
mod hooks_call;
mod hooks_colls;
mod hooks_comms;
mod hooks_p2p;
mod hooks_recv;
mod hooks_requests;
mod lane;
mod large_headers;
mod library;
mod lifecycle;
mod live;
mod live_site;
mod live_tick;
mod offsets;
mod orphans;
mod peers;
mod piggyback;
mod piggyback_deliver;
mod piggyback_header;
mod piggyback_lamport;
mod piggyback_replace;
mod piggyback_ring;
mod piggyback_routes;
mod piggyback_send;
mod piggyback_slots;
mod recorder;
mod requests;
mod scratch;
mod spawn;
mod thread;

/// Which loaded object defines what (shared by every interface's build).
pub(crate) use pmtrace_linkage as next;

/// The generated function table (ids and names) and the functions below
/// pmtrace (`real`, and `pass` with handles as exported):
/// `$OUT_DIR/mpi_tables.rs`. It imports nothing above it.
#[allow(
    clippy::all,
    non_snake_case,
    unused_variables,
    unused_mut,
    unused_imports,
    clippy::missing_safety_doc
)]
pub mod mpi {
    use crate::ffi;
    use core::ffi::{c_int, c_void};
    use pmtrace_format::Kind;

    include!(concat!(env!("OUT_DIR"), "/mpi_tables.rs"));
}

/// The generated wrappers: `$OUT_DIR/wrappers.rs` (`make wrappers` shows it).
#[allow(
    clippy::all,
    non_snake_case,
    unused_variables,
    unused_mut,
    clippy::missing_safety_doc
)]
pub mod wrappers {
    use crate::clock;
    use crate::ffi::{self, comm_value, message_value, request_value, status_or_local};
    use crate::guard::Guard;
    use crate::hooks::{self, Call, CollArgs, Counts, Done, Issued, Origin, Scratch, Shape};
    use crate::live;
    use crate::piggyback as pb;
    use core::ffi::{c_int, c_void};
    use core::mem::MaybeUninit;
    use core::sync::atomic::AtomicUsize;
    use pmtrace_format::live::{word, LiveKind, IN_CALL};

    pub use crate::mpi::{ids, pass, real, FUNCTIONS};

    /// The return code recorded for functions that return no error code.
    const MPI_SUCCESS_CODE: c_int = 0;

    include!(concat!(env!("OUT_DIR"), "/wrappers.rs"));
}

/// One function libpmtrace.so exports, as this build defines it.
pub struct Export {
    pub name: &'static core::ffi::CStr,
    pub f: *const (),
}

// SAFETY: function addresses, never written.
unsafe impl Sync for Export {}

include!(concat!(env!("OUT_DIR"), "/exports.rs"));

/// Binds this build to the MPI library the process runs (a `dlopen`
/// handle), which the front found to have this build's interface and
/// recorded (`pmtrace_linkage::set_library`): reads MPI's constants and
/// the library's quirks. Called once, before any function of `EXPORTS`.
pub fn bind(library: *mut core::ffi::c_void) {
    ffi::bind(library);
    library::quirks();
}

/// Whether this build's runtime saw MPI start (`MPI_Init`,
/// `MPI_Init_thread` or a session), whatever became of tracing then.
pub fn started() -> bool {
    guard::state() != guard::State::Uninit
}
