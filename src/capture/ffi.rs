//! The bindings of this build's MPI interface (build.rs runs bindgen over
//! its mpi.h) plus what they lack: constants that are C macros or objects
//! of the library (read through `src/capture/shim.c` once the front has
//! found the library, `bind`) and helpers for handle values. This is the
//! FFI edge: every raw read of a caller's handle goes through here.

#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    clippy::all
)]
mod sys {
    include!(concat!(env!("OUT_DIR"), "/mpi_bindings.rs"));
}
pub use sys::*;

/// The same fields, in the same order, as shim.c's `struct raw_consts`:
/// every value widened to 64 bits (handles are pointers or ints).
#[repr(C)]
#[derive(Default)]
struct RawConsts {
    comm_world: i64,
    comm_self: i64,
    comm_null: i64,
    datatype_null: i64,
    int32_t: i64,
    message_null: i64,
    request_null: i64,
    errors_return: i64,
    status_ignore: i64,
    statuses_ignore: i64,
    any_source: i64,
    any_tag: i64,
    proc_null: i64,
    undefined: i64,
    cart: i64,
    graph: i64,
    dist_graph: i64,
    thread_multiple: i64,
    in_place: i64,
    bottom: i64,
    root: i64,
    err_in_status: i64,
    err_pending: i64,
    uint64: i64,
    char: i64,
    byte: i64,
    op_max: i64,
    op_sum: i64,
    op_min: i64,
    info_null: i64,
    comm_type_shared: i64,
}

extern "C" {
    #[cfg_attr(mpi_impl = "openmpi", link_name = "pmtrace_openmpi_consts")]
    #[cfg_attr(mpi_impl = "mpich", link_name = "pmtrace_mpich_consts")]
    #[cfg_attr(mpi_impl = "abi", link_name = "pmtrace_abi_consts")]
    fn shim_consts(c: *mut RawConsts);
    #[cfg_attr(mpi_impl = "openmpi", link_name = "pmtrace_openmpi_set_library")]
    #[cfg_attr(mpi_impl = "mpich", link_name = "pmtrace_mpich_set_library")]
    #[cfg_attr(mpi_impl = "abi", link_name = "pmtrace_abi_set_library")]
    fn shim_set_library(handle: *mut core::ffi::c_void);
}

/// A constant's 64-bit value as a handle of `T`'s width.
fn handle<T: Copy>(v: i64) -> T {
    // SAFETY: handles are 4 (MPICH) or 8 bytes, plain values of any bits.
    unsafe {
        match core::mem::size_of::<T>() {
            4 => core::mem::transmute_copy(&(v as i32)),
            8 => core::mem::transmute_copy(&v),
            n => unreachable!("a {n}-byte MPI handle"),
        }
    }
}

// The predefined handles and numbers the runtime names (as mpi-sys named
// them), set by `bind` before any wrapper of this build runs, and read
// only after.
macro_rules! predefined {
    ($($name:ident: $t:ty = $field:ident;)*) => {
        $(pub static mut $name: $t = unsafe { core::mem::zeroed() };)*
        /// Sets every predefined value from the shim's.
        unsafe fn set_predefined(raw: &RawConsts) {
            // SAFETY: called once, by `bind`, before any reader runs.
            unsafe { $($name = handle::<$t>(raw.$field);)* }
        }
    };
}

predefined! {
    RSMPI_COMM_WORLD: MPI_Comm = comm_world;
    RSMPI_COMM_NULL: MPI_Comm = comm_null;
    RSMPI_COMM_SELF: MPI_Comm = comm_self;
    RSMPI_DATATYPE_NULL: MPI_Datatype = datatype_null;
    RSMPI_INT32_T: MPI_Datatype = int32_t;
    RSMPI_MESSAGE_NULL: MPI_Message = message_null;
    RSMPI_REQUEST_NULL: MPI_Request = request_null;
    RSMPI_STATUS_IGNORE: *mut MPI_Status = status_ignore;
    RSMPI_STATUSES_IGNORE: *mut MPI_Status = statuses_ignore;
    RSMPI_ANY_SOURCE: core::ffi::c_int = any_source;
    RSMPI_ANY_TAG: core::ffi::c_int = any_tag;
    RSMPI_PROC_NULL: core::ffi::c_int = proc_null;
    RSMPI_UNDEFINED: core::ffi::c_int = undefined;
    RSMPI_CART: core::ffi::c_int = cart;
    RSMPI_GRAPH: core::ffi::c_int = graph;
    RSMPI_DIST_GRAPH: core::ffi::c_int = dist_graph;
    RSMPI_THREAD_MULTIPLE: core::ffi::c_int = thread_multiple;
    RSMPI_ERRORS_RETURN: MPI_Errhandler = errors_return;
}

/// Binds this build to the MPI library the process runs (`library`, a
/// handle from `dlopen`), which the front found to have this build's
/// interface: reads every constant. Called once, before any wrapper of
/// this build runs.
pub fn bind(library: *mut core::ffi::c_void) {
    let mut raw = RawConsts::default();
    // SAFETY: the shim's setter and reader, on a handle of the library.
    unsafe {
        shim_set_library(library);
        shim_consts(&mut raw);
        set_predefined(&raw);
    }
    let consts = Consts {
        in_place: raw.in_place as usize,
        root: raw.root as i32,
        proc_null: raw.proc_null as i32,
        any_source: raw.any_source as i32,
        any_tag: raw.any_tag as i32,
        undefined: raw.undefined as i32,
        err_in_status: raw.err_in_status as i32,
        err_pending: raw.err_pending as i32,
        uint64: handle(raw.uint64),
        char: handle(raw.char),
        byte: handle(raw.byte),
        bottom: raw.bottom as usize,
        op_max: handle(raw.op_max),
        op_sum: handle(raw.op_sum),
        op_min: handle(raw.op_min),
        info_null: handle(raw.info_null),
        comm_type_shared: raw.comm_type_shared as i32,
    };
    // SAFETY: as `set_predefined`: once, before any reader runs.
    unsafe { *core::ptr::addr_of_mut!(CONSTS) = consts };
}

use core::mem::MaybeUninit;

/// The real functions pmtrace calls for itself, with the prototypes of
/// the bindings above, which they shadow: resolved by name when first
/// called (`crate::next`), never bound at link time, because pmtrace
/// exports `PMPI_` functions of its own (the inner level of stacking) and
/// a link-time reference would reach those.
macro_rules! own_calls {
    ($($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?);)*) => {$(
        $(#[$m])*
        // Some serve only the builds whose status layout is not known.
        #[allow(non_snake_case, dead_code, clippy::missing_safety_doc)]
        #[inline(always)]
        pub unsafe fn $name($($a: $t),*) -> c_int {
            static AT: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
            // SAFETY: a literal NUL-terminated name.
            let name = unsafe {
                core::ffi::CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes())
            };
            let f = crate::next::function(&AT, name);
            // SAFETY: the library's function, of the prototype its mpi.h declares.
            unsafe { core::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> c_int>(f)($($a),*) }
        }
    )*};
}

use core::ffi::{c_char, c_int, c_void};

own_calls! {
    fn PMPI_Allgather(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm);
    fn PMPI_Allreduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm);
    fn PMPI_Barrier(comm: MPI_Comm);
    fn PMPI_Bcast(buffer: *mut c_void, count: c_int, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm);
    fn PMPI_Cartdim_get(comm: MPI_Comm, ndims: *mut c_int);
    fn PMPI_Cancel(request: *mut MPI_Request);
    fn PMPI_Comm_dup(comm: MPI_Comm, newcomm: *mut MPI_Comm);
    fn PMPI_Comm_free(comm: *mut MPI_Comm);
    fn PMPI_Comm_get_errhandler(comm: MPI_Comm, errhandler: *mut MPI_Errhandler);
    fn PMPI_Comm_get_parent(parent: *mut MPI_Comm);
    fn PMPI_Comm_group(comm: MPI_Comm, group: *mut MPI_Group);
    fn PMPI_Comm_rank(comm: MPI_Comm, rank: *mut c_int);
    fn PMPI_Comm_remote_group(comm: MPI_Comm, group: *mut MPI_Group);
    fn PMPI_Comm_remote_size(comm: MPI_Comm, size: *mut c_int);
    fn PMPI_Comm_set_errhandler(comm: MPI_Comm, errhandler: MPI_Errhandler);
    fn PMPI_Comm_size(comm: MPI_Comm, size: *mut c_int);
    fn PMPI_Comm_split_type(comm: MPI_Comm, split_type: c_int, key: c_int, info: MPI_Info, newcomm: *mut MPI_Comm);
    fn PMPI_Comm_test_inter(comm: MPI_Comm, flag: *mut c_int);
    fn PMPI_Dist_graph_neighbors_count(comm: MPI_Comm, indegree: *mut c_int, outdegree: *mut c_int, weighted: *mut c_int);
    fn PMPI_Errhandler_free(errhandler: *mut MPI_Errhandler);
    fn PMPI_Get_address(location: *const c_void, address: *mut MPI_Aint);
    fn PMPI_Get_elements_x(status: *const MPI_Status, datatype: MPI_Datatype, count: *mut MPI_Count);
    fn PMPI_Get_library_version(version: *mut c_char, resultlen: *mut c_int);
    fn PMPI_Graph_neighbors_count(comm: MPI_Comm, rank: c_int, nneighbors: *mut c_int);
    fn PMPI_Group_free(group: *mut MPI_Group);
    fn PMPI_Group_translate_ranks(group1: MPI_Group, n: c_int, ranks1: *const c_int, group2: MPI_Group, ranks2: *mut c_int);
    fn PMPI_Ibarrier(comm: MPI_Comm, request: *mut MPI_Request);
    fn PMPI_Info_create(info: *mut MPI_Info);
    fn PMPI_Info_dup(info: MPI_Info, newinfo: *mut MPI_Info);
    fn PMPI_Info_free(info: *mut MPI_Info);
    fn PMPI_Info_get(info: MPI_Info, key: *const c_char, valuelen: c_int, value: *mut c_char, flag: *mut c_int);
    fn PMPI_Info_get_valuelen(info: MPI_Info, key: *const c_char, valuelen: *mut c_int, flag: *mut c_int);
    fn PMPI_Info_set(info: MPI_Info, key: *const c_char, value: *const c_char);
    fn PMPI_Isend(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request);
    fn PMPI_Iprobe(source: c_int, tag: c_int, comm: MPI_Comm, flag: *mut c_int, status: *mut MPI_Status);
    fn PMPI_Irecv(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, source: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request);
    fn PMPI_Pack(inbuf: *const c_void, incount: c_int, datatype: MPI_Datatype, outbuf: *mut c_void, outsize: c_int, position: *mut c_int, comm: MPI_Comm);
    fn PMPI_Recv_init(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, source: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request);
    fn PMPI_Recv(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, source: c_int, tag: c_int, comm: MPI_Comm, status: *mut MPI_Status);
    fn PMPI_Reduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, root: c_int, comm: MPI_Comm);
    fn PMPI_Request_free(request: *mut MPI_Request);
    fn PMPI_Request_get_status(request: MPI_Request, flag: *mut c_int, status: *mut MPI_Status);
    fn PMPI_Send(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm);
    fn PMPI_Status_set_cancelled(status: *mut MPI_Status, flag: c_int);
    fn PMPI_Status_set_elements_x(status: *mut MPI_Status, datatype: MPI_Datatype, count: MPI_Count);
    fn PMPI_Start(request: *mut MPI_Request);
    fn PMPI_Test(request: *mut MPI_Request, flag: *mut c_int, status: *mut MPI_Status);
    fn PMPI_Test_cancelled(status: *const MPI_Status, flag: *mut c_int);
    fn PMPI_Testsome(incount: c_int, requests: *mut MPI_Request, outcount: *mut c_int, indices: *mut c_int, statuses: *mut MPI_Status);
    fn PMPI_Topo_test(comm: MPI_Comm, status: *mut c_int);
    fn PMPI_Type_commit(datatype: *mut MPI_Datatype);
    fn PMPI_Type_create_struct(count: c_int, blocklengths: *const c_int, displacements: *const MPI_Aint, types: *const MPI_Datatype, newtype: *mut MPI_Datatype);
    #[cfg(mpi4)]
    fn PMPI_Type_create_struct_c(count: MPI_Count, blocklengths: *const MPI_Count, displacements: *const MPI_Count, types: *const MPI_Datatype, newtype: *mut MPI_Datatype);
    fn PMPI_Type_free(datatype: *mut MPI_Datatype);
    fn PMPI_Type_get_extent_x(datatype: MPI_Datatype, lb: *mut MPI_Count, extent: *mut MPI_Count);
    fn PMPI_Type_get_true_extent_x(datatype: MPI_Datatype, true_lb: *mut MPI_Count, true_extent: *mut MPI_Count);
    fn PMPI_Type_size_x(datatype: MPI_Datatype, size: *mut MPI_Count);
    fn PMPI_Wait(request: *mut MPI_Request, status: *mut MPI_Status);
    fn PMPI_Waitsome(incount: c_int, requests: *mut MPI_Request, outcount: *mut c_int, indices: *mut c_int, statuses: *mut MPI_Status);
    fn PMPI_Unpack(inbuf: *const c_void, insize: c_int, position: *mut c_int, outbuf: *mut c_void, outcount: c_int, datatype: MPI_Datatype, comm: MPI_Comm);
}

/// Bytes a completed operation transferred, and whether it was cancelled,
/// for an MPI whose status layout pmtrace does not know (Open MPI's and
/// MPICH's fields are read in place below): through MPI itself.
#[cfg(not(any(mpi_impl = "openmpi", mpi_impl = "mpich")))]
unsafe fn pmtrace_status_set_bytes(status: *mut MPI_Status, n: core::ffi::c_longlong) {
    // SAFETY: the caller's status.
    unsafe { PMPI_Status_set_elements_x(status, consts().byte, n as MPI_Count) };
}

#[cfg(not(any(mpi_impl = "openmpi", mpi_impl = "mpich")))]
unsafe fn pmtrace_status_bytes(status: *const MPI_Status) -> core::ffi::c_longlong {
    let mut n: MPI_Count = 0;
    // SAFETY: the caller's status.
    unsafe { PMPI_Get_elements_x(status, consts().byte, &mut n) };
    n.max(0) as core::ffi::c_longlong
}

#[cfg(not(any(mpi_impl = "openmpi", mpi_impl = "mpich")))]
unsafe fn pmtrace_status_cancelled(status: *const MPI_Status) -> c_int {
    let mut flag = 0;
    // SAFETY: the caller's status.
    unsafe { PMPI_Test_cancelled(status, &mut flag) };
    flag
}

/// Handles as the exported `MPI_*` functions take and return them by
/// value: register-wide. An MPICH build narrows its `int` handles (a
/// caller compiled for MPICH leaves the upper half of the register
/// undefined, and MPICH reads only the lower); pointer handles are their
/// own wide form.
pub trait Wide: Copy {
    type W: Copy;
    fn narrow(w: Self::W) -> Self;
    fn widen(self) -> Self::W;
}

macro_rules! same_width {
    ($($t:ident),*) => {$(
        impl Wide for $t {
            type W = $t;
            #[inline(always)]
            fn narrow(w: $t) -> $t { w }
            #[inline(always)]
            fn widen(self) -> $t { self }
        }
    )*};
}

#[cfg(mpi_impl = "mpich")]
macro_rules! int_handles {
    ($($t:ident),*) => {$(
        impl Wide for $t {
            type W = u64;
            #[inline(always)]
            fn narrow(w: u64) -> $t { $t(w as core::ffi::c_int) }
            #[inline(always)]
            fn widen(self) -> u64 { u64::from(self.0 as u32) }
        }
    )*};
}

#[cfg(mpi_impl = "mpich")]
int_handles!(
    MPI_Comm,
    MPI_Datatype,
    MPI_Group,
    MPI_Info,
    MPI_Message,
    MPI_Op,
    MPI_Request,
    MPI_Win,
    MPI_Errhandler
);
#[cfg(mpi_impl = "mpich")]
same_width!(
    MPI_File,
    MPI_T_enum,
    MPI_T_cvar_handle,
    MPI_T_pvar_handle,
    MPI_T_pvar_session
);
#[cfg(not(mpi_impl = "mpich"))]
same_width!(
    MPI_Comm,
    MPI_Datatype,
    MPI_Group,
    MPI_Info,
    MPI_Message,
    MPI_Op,
    MPI_Request,
    MPI_Win,
    MPI_Errhandler,
    MPI_File,
    MPI_T_enum,
    MPI_T_cvar_handle,
    MPI_T_pvar_handle,
    MPI_T_pvar_session
);

#[cfg(all(mpi_sessions, mpi_impl = "mpich"))]
int_handles!(MPI_Session);
#[cfg(all(mpi_sessions, not(mpi_impl = "mpich")))]
same_width!(MPI_Session);
#[cfg(mpi_t_events)]
same_width!(MPI_T_event_registration, MPI_T_event_instance);

/// The wide handle types, by the handles' names (for generated code).
#[allow(non_camel_case_types, dead_code)]
pub mod wide {
    use super::Wide;
    pub type MPI_Comm = <super::MPI_Comm as Wide>::W;
    pub type MPI_Datatype = <super::MPI_Datatype as Wide>::W;
    pub type MPI_Group = <super::MPI_Group as Wide>::W;
    pub type MPI_Info = <super::MPI_Info as Wide>::W;
    pub type MPI_Message = <super::MPI_Message as Wide>::W;
    pub type MPI_Op = <super::MPI_Op as Wide>::W;
    pub type MPI_Request = <super::MPI_Request as Wide>::W;
    pub type MPI_Win = <super::MPI_Win as Wide>::W;
    pub type MPI_File = <super::MPI_File as Wide>::W;
    pub type MPI_Errhandler = <super::MPI_Errhandler as Wide>::W;
    pub type MPI_T_enum = <super::MPI_T_enum as Wide>::W;
    pub type MPI_T_cvar_handle = <super::MPI_T_cvar_handle as Wide>::W;
    pub type MPI_T_pvar_handle = <super::MPI_T_pvar_handle as Wide>::W;
    pub type MPI_T_pvar_session = <super::MPI_T_pvar_session as Wide>::W;
    #[cfg(mpi_sessions)]
    pub type MPI_Session = <super::MPI_Session as Wide>::W;
    #[cfg(mpi_t_events)]
    pub type MPI_T_event_registration = <super::MPI_T_event_registration as Wide>::W;
    #[cfg(mpi_t_events)]
    pub type MPI_T_event_instance = <super::MPI_T_event_instance as Wide>::W;
}

/// MPI's special values, read once.
pub struct Consts {
    pub in_place: usize,
    pub root: i32,
    pub proc_null: i32,
    pub any_source: i32,
    pub any_tag: i32,
    pub undefined: i32,
    pub err_in_status: i32,
    pub err_pending: i32,
    pub uint64: MPI_Datatype,
    pub char: MPI_Datatype,
    pub byte: MPI_Datatype,
    pub bottom: usize,
    pub op_max: MPI_Op,
    pub op_sum: MPI_Op,
    pub op_min: MPI_Op,
    pub info_null: MPI_Info,
    pub comm_type_shared: i32,
}

// SAFETY: handle values are plain identifiers, valid from any thread.
unsafe impl Send for Consts {}
unsafe impl Sync for Consts {}

/// Set by `bind` before any wrapper of this build runs, and read only
/// after, as the predefined values are (no test on the hot paths).
static mut CONSTS: Consts = Consts {
    in_place: 0,
    root: 0,
    proc_null: 0,
    any_source: 0,
    any_tag: 0,
    undefined: 0,
    err_in_status: 0,
    err_pending: 0,
    // SAFETY: handles are plain values (pointers or integers); these are
    // overwritten by `bind` before any use.
    uint64: unsafe { core::mem::zeroed() },
    char: unsafe { core::mem::zeroed() },
    byte: unsafe { core::mem::zeroed() },
    bottom: 0,
    op_max: unsafe { core::mem::zeroed() },
    op_sum: unsafe { core::mem::zeroed() },
    op_min: unsafe { core::mem::zeroed() },
    info_null: unsafe { core::mem::zeroed() },
    comm_type_shared: 0,
};

/// MPI's special values, read by `bind`.
#[inline(always)]
pub fn consts() -> &'static Consts {
    // SAFETY: written once by `bind`, before any wrapper runs (see
    // `CONSTS`); only read after.
    unsafe { &*core::ptr::addr_of!(CONSTS) }
}

/// `MPI_COMM_WORLD`.
pub fn world() -> MPI_Comm {
    // SAFETY: reads a constant `bind` set.
    unsafe { RSMPI_COMM_WORLD }
}

/// A handle's value as an integer key, whatever the handle type is
/// (a pointer in Open MPI, an int in MPICH).
#[inline(always)]
pub fn handle_key<T: Copy>(h: T) -> u64 {
    let n = core::mem::size_of::<T>().min(8);
    let mut k = 0u64;
    // SAFETY: copies at most 8 bytes of a Copy value into a u64.
    unsafe {
        core::ptr::copy_nonoverlapping(
            &h as *const T as *const u8,
            &mut k as *mut u64 as *mut u8,
            n,
        );
    }
    k
}

/// `status` unless it is MPI_STATUS_IGNORE, in which case local storage, so
/// that source, tag and count can always be read after the call.
#[inline(always)]
pub fn status_or_local(
    status: *mut MPI_Status,
    local: &mut MaybeUninit<MPI_Status>,
) -> *mut MPI_Status {
    // SAFETY: reads a constant `bind` set.
    let chosen = if status.is_null() || status == unsafe { RSMPI_STATUS_IGNORE } {
        local.as_mut_ptr()
    } else {
        status
    };
    opaque(chosen)
}

/// `p`, chosen once: the compiler may not recompute it at each use (it
/// would otherwise redo a choice between a local's address and another
/// pointer at every use, to save a register).
#[inline(always)]
pub fn opaque<T>(mut p: *mut T) -> *mut T {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    // SAFETY: an empty instruction sequence: the value passes unchanged.
    // (No memory is read or written through it: `nomem` holds.)
    #[allow(clippy::pointers_in_nomem_asm_block)]
    unsafe {
        core::arch::asm!("/* {0} */", inout(reg) p, options(pure, nomem, nostack, preserves_flags));
    }
    p
}

/// Reads `*request` (the caller's handle) before MPI overwrites it.
///
/// # Safety
/// `request` must be null or valid for reads.
#[inline(always)]
pub unsafe fn request_value(request: *const MPI_Request) -> MPI_Request {
    if request.is_null() {
        // An erroneous call: MPI will say so; pmtrace must not crash first.
        return unsafe { RSMPI_REQUEST_NULL };
    }
    unsafe { *request }
}

/// # Safety
/// `message` must be null or valid for reads.
#[inline(always)]
pub unsafe fn message_value(message: *const MPI_Message) -> MPI_Message {
    if message.is_null() {
        return unsafe { RSMPI_MESSAGE_NULL };
    }
    unsafe { *message }
}

/// # Safety
/// `comm` must be null or valid for reads.
#[inline(always)]
pub unsafe fn comm_value(comm: *const MPI_Comm) -> MPI_Comm {
    if comm.is_null() {
        return unsafe { RSMPI_COMM_NULL };
    }
    unsafe { *comm }
}

#[inline(always)]
pub fn is_request_null(r: MPI_Request) -> bool {
    // SAFETY: reads a constant `bind` set.
    handle_key(r) == handle_key(unsafe { RSMPI_REQUEST_NULL })
}

/// Runs `f`, MPI calls of pmtrace's own on handles that may be invalid,
/// with the error handlers of `MPI_COMM_WORLD` and `MPI_COMM_SELF` (which
/// take errors not tied to a communicator: MPI-3 says world, MPI-4 self)
/// set to return, and puts the application's back after. An invalid
/// handle then gives pmtrace an error code, never the application's fatal
/// handler: only the application's own call reports its mistake.
pub fn quietly<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: initialised constants; handler queries and settings on the
    // predefined communicators, each reference taken freed after.
    unsafe {
        let comms = [RSMPI_COMM_WORLD, RSMPI_COMM_SELF];
        let mut old: [MPI_Errhandler; 2] = core::mem::zeroed();
        let mut got = [false; 2];
        for (i, &c) in comms.iter().enumerate() {
            got[i] = PMPI_Comm_get_errhandler(c, &mut old[i]) == 0;
            if got[i] {
                PMPI_Comm_set_errhandler(c, RSMPI_ERRORS_RETURN);
            }
        }
        let r = f();
        for (i, &c) in comms.iter().enumerate() {
            if got[i] {
                PMPI_Comm_set_errhandler(c, old[i]);
                PMPI_Errhandler_free(&mut old[i]);
            }
        }
        r
    }
}

/// Bumped by `MPI_Type_free`: datatype handles are reused, so cached sizes
/// must be dropped when one is freed.
pub static TYPE_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Bumped whenever a communicator or a datatype is freed (`comms::forget`,
/// `hooks_call::types_changing`): the kept payloads of fixed records
/// (`ProbeMiss`, `CollMemo`) are valid within one epoch.
pub static EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A thread's cache of the last datatype it sized: most calls repeat it.
pub struct TypeSizes {
    key: u64,
    generation: u64,
    size: u64,
    /// Elements are laid out without gaps from the buffer address on (size
    /// equals extent and true extent, lower bounds zero).
    dense: bool,
    /// MPI answered for this handle: it is a valid datatype.
    valid: bool,
    /// Handles found valid in this generation, most recent first: these
    /// are asked again without guarding the error handlers (`quietly`).
    known: [u64; 8],
    known_generation: u64,
}

impl TypeSizes {
    pub const fn new() -> Self {
        TypeSizes {
            key: u64::MAX,
            generation: u64::MAX,
            size: 0,
            dense: false,
            valid: false,
            known: [u64::MAX; 8],
            known_generation: u64::MAX,
        }
    }

    /// Whether the cached sizes are `datatype`'s and still valid.
    #[inline(always)]
    fn holds(&self, datatype: MPI_Datatype) -> bool {
        self.key == handle_key(datatype)
            && self.generation == TYPE_GENERATION.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[inline]
    fn load(&mut self, datatype: MPI_Datatype) {
        if !self.holds(datatype) {
            let generation = TYPE_GENERATION.load(std::sync::atomic::Ordering::Relaxed);
            self.query(datatype, handle_key(datatype), generation);
        }
    }

    /// Bytes in `count` elements of the cached type.
    #[inline(always)]
    fn times(&self, count: i64) -> u64 {
        if count <= 0 {
            0
        } else {
            (count as u64).saturating_mul(self.size)
        }
    }

    #[cold]
    fn query(&mut self, datatype: MPI_Datatype, key: u64, generation: u64) {
        if self.known_generation != generation {
            self.known = [u64::MAX; 8];
            self.known_generation = generation;
        }
        // SAFETY: reads an initialised constant.
        let null = key == handle_key(unsafe { RSMPI_DATATYPE_NULL });
        let known = self.known.contains(&key);
        let (mut size, mut lb, mut extent, mut tlb, mut textent): (
            MPI_Count,
            MPI_Count,
            MPI_Count,
            MPI_Count,
            MPI_Count,
        ) = (0, 0, 0, 0, 0);
        // SAFETY: queries on a handle the application passed to MPI.
        let mut ask = || unsafe {
            PMPI_Type_size_x(datatype, &mut size) == 0
                && PMPI_Type_get_extent_x(datatype, &mut lb, &mut extent) == 0
                && PMPI_Type_get_true_extent_x(datatype, &mut tlb, &mut textent) == 0
        };
        // A handle not yet seen valid may be the application's mistake,
        // which only the application's own call may report: asked with the
        // error handlers that could take it set to return.
        let ok = !null && if known { ask() } else { quietly(ask) };
        if ok && !known {
            self.known.copy_within(0..7, 1);
            self.known[0] = key;
        }
        let size_ok = ok && size >= 0;
        *self = TypeSizes {
            key,
            generation,
            size: if size_ok { size as u64 } else { 0 },
            // A type of no bytes places nothing: its elements are as dense
            // as bytes (a null buffer with them is the application's right).
            dense: size_ok
                && (size == 0 || (lb == 0 && tlb == 0 && extent == size && textent == size)),
            valid: ok,
            known: self.known,
            known_generation: self.known_generation,
        };
    }

    /// None if MPI will reject `count` elements of `datatype`; else their
    /// bytes, and whether they form one contiguous block.
    #[inline]
    pub fn layout(&mut self, count: i64, datatype: MPI_Datatype) -> Option<(u64, bool)> {
        self.load(datatype);
        (self.valid && count >= 0).then(|| ((count as u64).saturating_mul(self.size), self.dense))
    }

    /// `layout`, when `datatype` is the cached type; `None` rather than
    /// asking MPI about it.
    #[inline(always)]
    pub fn cached_layout(&self, count: i64, datatype: MPI_Datatype) -> Option<(u64, bool)> {
        (self.holds(datatype) && self.valid && count >= 0)
            .then(|| ((count as u64).saturating_mul(self.size), self.dense))
    }

    /// Bytes in `count` elements of `datatype`.
    #[inline]
    pub fn bytes(&mut self, count: i64, datatype: MPI_Datatype) -> u64 {
        if count <= 0 {
            return 0;
        }
        self.load(datatype);
        self.times(count)
    }
}

impl Default for TypeSizes {
    fn default() -> Self {
        Self::new()
    }
}

/// The count and the cancelled flag of a status MPI filled, where this
/// build keeps them: Open MPI's and MPICH's fields in place (this is every
/// receive's hot path), the standard ABI's where the running library keeps
/// them, found once and then read and set in place.
#[derive(Clone, Copy)]
pub struct StatusCount {
    status: *mut MPI_Status,
    #[cfg(mpi_impl = "abi")]
    words: Option<(*mut core::ffi::c_int, *mut core::ffi::c_int)>,
}

impl StatusCount {
    /// `status` must be a status MPI filled for a completed operation,
    /// and stay valid while this is used.
    #[inline(always)]
    pub fn of(status: *mut MPI_Status) -> StatusCount {
        StatusCount {
            status,
            #[cfg(mpi_impl = "abi")]
            words: abi_status::words(status),
        }
    }

    /// Bytes the operation transferred.
    #[inline(always)]
    pub fn bytes(self) -> u64 {
        // SAFETY: the status `of` was given.
        unsafe {
            #[cfg(mpi_impl = "openmpi")]
            return (*self.status)._ucount as u64;
            #[cfg(mpi_impl = "mpich")]
            return mpich_count(&*self.status);
            #[cfg(mpi_impl = "abi")]
            return match self.words {
                Some((lo, hi)) => split_count(*lo, *hi),
                None => pmtrace_status_bytes(self.status).max(0) as u64,
            };
        }
    }

    /// Sets the byte count (what `MPI_Get_count` divides).
    #[inline(always)]
    pub fn set(self, n: u64) {
        // SAFETY: the status `of` was given.
        unsafe {
            #[cfg(mpi_impl = "openmpi")]
            {
                (*self.status)._ucount = n as usize;
            }
            #[cfg(mpi_impl = "mpich")]
            {
                let s = &mut *self.status;
                (s.count_lo, s.count_hi_and_cancelled) = split_words(n, s.count_hi_and_cancelled);
            }
            #[cfg(mpi_impl = "abi")]
            match self.words {
                Some((lo, hi)) => {
                    (*lo, *hi) = split_words(n, *hi);
                }
                None => pmtrace_status_set_bytes(self.status, n as core::ffi::c_longlong),
            }
        }
    }

    /// Whether the operation was cancelled.
    #[inline(always)]
    pub fn cancelled(self) -> bool {
        // SAFETY: the status `of` was given.
        unsafe {
            #[cfg(mpi_impl = "openmpi")]
            return (*self.status)._cancelled != 0;
            #[cfg(mpi_impl = "mpich")]
            return (*self.status).count_hi_and_cancelled & 1 != 0;
            #[cfg(mpi_impl = "abi")]
            return match self.words {
                Some((_, hi)) => *hi & 1 != 0,
                None => pmtrace_status_cancelled(self.status) != 0,
            };
        }
    }
}

/// Bytes a completed operation transferred, from its status.
#[inline(always)]
pub fn status_bytes(status: *const MPI_Status) -> u64 {
    StatusCount::of(status as *mut MPI_Status).bytes()
}

/// Sets the byte count a status reports (what `MPI_Get_count` divides).
#[inline(always)]
pub fn set_status_bytes(status: *mut MPI_Status, n: u64) {
    StatusCount::of(status).set(n)
}

#[inline(always)]
pub fn status_cancelled(status: *const MPI_Status) -> bool {
    StatusCount::of(status as *mut MPI_Status).cancelled()
}

/// MPICH's count: 31 high bits beside the cancelled flag, 32 low bits.
#[cfg(mpi_impl = "mpich")]
#[inline(always)]
fn mpich_count(s: &MPI_Status) -> u64 {
    split_count(s.count_lo, s.count_hi_and_cancelled)
}

/// A count kept as MPICH keeps it: the low 32 bits in one word, the high
/// bits shifted left by one in another, whose lowest bit is the cancelled
/// flag.
#[allow(dead_code)]
#[inline(always)]
fn split_count(lo: core::ffi::c_int, hi_and_cancelled: core::ffi::c_int) -> u64 {
    (u64::from(hi_and_cancelled as u32 >> 1) << 32) | u64::from(lo as u32)
}

/// The two words of `n` in that layout, keeping the cancelled flag.
#[allow(dead_code)]
#[inline(always)]
fn split_words(n: u64, hi_and_cancelled: core::ffi::c_int) -> (core::ffi::c_int, core::ffi::c_int) {
    (
        n as u32 as core::ffi::c_int,
        (((n >> 32) << 1) as u32 | (hi_and_cancelled as u32 & 1)) as core::ffi::c_int,
    )
}

/// Where a status keeps a count in the split layout, from the words a
/// library writes for three probes (`probe(count, cancelled)`): the
/// positions of the low and the high word, if one layout explains all.
#[allow(dead_code)]
pub fn find_split_layout(
    probe: impl Fn(MPI_Count, bool) -> Option<[core::ffi::c_int; 5]>,
) -> Option<(usize, usize)> {
    let cases: [(MPI_Count, bool); 3] = [(0x1_2345_6789, false), (5, true), (0x7f_ffff_fffe, true)];
    let words: Vec<[core::ffi::c_int; 5]> = cases
        .iter()
        .map(|&(n, c)| probe(n, c))
        .collect::<Option<_>>()?;
    (0..5usize)
        .flat_map(|lo| (0..5usize).map(move |hi| (lo, hi)))
        .filter(|(lo, hi)| lo != hi)
        .find(|&(lo, hi)| {
            cases
                .iter()
                .zip(&words)
                .all(|(&(n, c), w)| split_count(w[lo], w[hi]) == n as u64 && (w[hi] & 1 != 0) == c)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_layout_is_found_wherever_it_sits() {
        // MPICH 5's libmpi_abi.so: count_lo in word 0, the rest in 1.
        let mpich = |n: MPI_Count, c: bool| {
            let (lo, hi) = split_words(n as u64, core::ffi::c_int::from(c));
            Some([lo, hi, 0, 0, 0])
        };
        assert_eq!(find_split_layout(mpich), Some((0, 1)));
        let shifted = |n: MPI_Count, c: bool| {
            let (lo, hi) = split_words(n as u64, core::ffi::c_int::from(c));
            Some([7, 0, hi, lo, 0])
        };
        assert_eq!(find_split_layout(shifted), Some((3, 2)));
        // A plain 64-bit count with the flag apart: not this layout.
        let plain = |n: MPI_Count, c: bool| {
            Some([
                n as core::ffi::c_int,
                (n >> 32) as core::ffi::c_int,
                core::ffi::c_int::from(c),
                0,
                0,
            ])
        };
        assert_eq!(find_split_layout(plain), None);
        assert_eq!(find_split_layout(|_, _| None), None);
    }
}

/// The standard ABI fixes `MPI_SOURCE`, `MPI_TAG` and `MPI_ERROR` but
/// leaves where an implementation keeps the count in `MPI_internal[5]`.
/// At `MPI_Init`, `learn` asks the library to set known counts and the
/// cancelled flag and looks for them; if they sit in MPICH's split layout
/// (as in MPICH 5's libmpi_abi.so), receives read them in place, as the
/// MPICH build does. Any other layout, or before `learn`: MPI's own calls.
#[cfg(mpi_impl = "abi")]
pub mod abi_status {
    use super::*;
    use core::ffi::c_int;

    /// Where the count's words sit, as byte offsets from the status's
    /// start: the low word's, then the high word's with the cancelled flag.
    /// Both lie in `MPI_internal`, after the three fixed fields, so an
    /// offset of 0 means no layout was found.
    #[derive(Clone, Copy)]
    struct Layout {
        lo: u32,
        hi: u32,
    }

    /// Set by `learn` inside `MPI_Init`, before tracing starts, and read
    /// only after (no test on the hot paths).
    static mut LAYOUT: Layout = Layout { lo: 0, hi: 0 };

    /// The count's low and high words of `status` in the learnt layout.
    #[inline(always)]
    pub fn words(status: *mut MPI_Status) -> Option<(*mut c_int, *mut c_int)> {
        // SAFETY: written once by `learn` before tracing starts (see
        // `LAYOUT`); only read after.
        let l = unsafe { LAYOUT };
        if l.hi == 0 {
            return None;
        }
        // SAFETY: `learn` keeps only offsets of words inside
        // `MPI_internal`; `status` points at a status.
        unsafe {
            let s = status as *mut u8;
            Some((
                s.add(l.lo as usize) as *mut c_int,
                s.add(l.hi as usize) as *mut c_int,
            ))
        }
    }

    /// The words of a status the library filled with `count` bytes and
    /// the cancelled flag.
    fn filled(count: MPI_Count, cancelled: bool) -> Option<[c_int; 5]> {
        // SAFETY: a zeroed status of this build's layout, filled by MPI.
        unsafe {
            let mut st: MPI_Status = core::mem::zeroed();
            if PMPI_Status_set_elements_x(&mut st, consts().byte, count) != 0
                || PMPI_Status_set_cancelled(&mut st, c_int::from(cancelled)) != 0
            {
                return None;
            }
            Some(st.MPI_internal)
        }
    }

    /// After `PMPI_Init`: learns the running library's layout.
    pub fn learn() {
        if let Some((lo, hi)) = find_split_layout(filled).filter(|&(lo, hi)| lo < 5 && hi < 5) {
            let internal = core::mem::offset_of!(MPI_Status, MPI_internal);
            let at = |i: usize| (internal + i * core::mem::size_of::<c_int>()) as u32;
            // SAFETY: inside MPI_Init, before tracing starts: no wrapper
            // reads it yet (see `LAYOUT`).
            unsafe {
                LAYOUT = Layout {
                    lo: at(lo),
                    hi: at(hi),
                }
            };
        }
    }
}
