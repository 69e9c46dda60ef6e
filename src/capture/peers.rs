//! Is every rank of the job traced? A rank that runs without pmtrace (an
//! MPMD job whose second program lost `LD_PRELOAD`, a remote node that was
//! not passed it) would misread every piggybacked message and would skip
//! the tool's own collectives at init. It must be found before the tool
//! sends anything over MPI, because any message of ours could be taken by
//! that rank's `MPI_ANY_TAG` receive.
//!
//! The launcher's key-value store carries the answer out of band, and the
//! MPI library's own initialisation carries it to every rank, untouched:
//! pmtrace defines `PMIx_Init`, so the MPI library's call to it inside
//! `PMPI_Init` reaches this module first. It is passed on to the real
//! function unchanged, with the library's own arguments; once it returns,
//! and only on a rank whose `MPI_Init` pmtrace is tracing, the rank puts
//! `pmtrace.wire` (the piggyback layout version) in the job's store and
//! commits it. The MPI library's modex fence later in the same `PMPI_Init`
//! then exchanges every rank's committed data. After `PMPI_Init`, each rank
//! looks the key up for every rank of the world, locally. All ranks see the
//! same data, so all reach the same verdict without a message.
//!
//! (An earlier version joined PMIx itself before `PMPI_Init`; Open MPI 5
//! then finds its PMIx client set up without its own attributes and
//! aborts in `MPI_Init`. Nothing here runs before the MPI library's own
//! PMIx initialisation has returned.)
//!
//! This covers every MPI that reaches PMIx through the exported `PMIx_Init`
//! (Open MPI 4 and 5 under mpirun or PRRTE, `srun --mpi=pmix`). Launchers
//! without a PMIx store that is readable before a fence (MPICH's Hydra)
//! never call it, and no check is made.

use core::ffi::{c_char, c_int, c_void};
use parking_lot::Mutex;
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The piggyback wire layout; bump on any change of the header.
pub const WIRE: &str = "pmtrace-wire-1";
const KEY: &[u8] = b"pmtrace.wire\0";

const PMIX_SUCCESS: c_int = 0;
const PMIX_ERR_INIT: c_int = -31;
const PMIX_GLOBAL: u8 = 3;
const PMIX_BOOL: u16 = 1;
const PMIX_STRING: u16 = 3;

/// `pmix_proc_t`.
#[repr(C)]
pub struct Proc {
    nspace: [c_char; 256],
    rank: u32,
}

/// `pmix_value_t`: a type tag and a 24-byte union.
#[repr(C)]
struct Value {
    kind: u16,
    data: [u64; 3],
}

/// `pmix_info_t`.
#[repr(C)]
pub struct Info {
    key: [c_char; 512],
    flags: u32,
    value: Value,
}

type InitFn = unsafe extern "C" fn(*mut Proc, *mut Info, usize) -> c_int;
type PutFn = unsafe extern "C" fn(u8, *const c_char, *mut Value) -> c_int;
type CommitFn = unsafe extern "C" fn() -> c_int;
type GetFn =
    unsafe extern "C" fn(*const Proc, *const c_char, *const Info, usize, *mut *mut Value) -> c_int;

/// A rank that announced its layout in the PMIx store, and how to read the
/// others'.
pub struct Announced {
    me: Proc,
    get: GetFn,
}

// SAFETY: plain data and a function pointer into a library never unloaded.
unsafe impl Send for Announced {}

/// Set by `MPI_Init` around its `PMPI_Init` on a rank that will trace.
static WANTED: AtomicBool = AtomicBool::new(false);
/// The announcement made inside that `PMPI_Init`.
static ANNOUNCED: Mutex<Option<Announced>> = Mutex::new(None);
/// The real `PMIx_Init`, once looked up.
static REAL_INIT: AtomicUsize = AtomicUsize::new(0);

fn symbol<T>(lib: *mut c_void, name: &[u8]) -> Option<T> {
    // SAFETY: `name` is NUL-terminated; the caller names the type of the symbol.
    let p = unsafe { libc::dlsym(lib, name.as_ptr() as *const c_char) };
    // SAFETY: T is a function pointer type of the symbol's C signature.
    (!p.is_null()).then(|| unsafe { core::mem::transmute_copy::<*mut c_void, T>(&p) })
}

/// The PMIx library the MPI library loaded (never a second copy): by
/// soname, only if it is already in the process.
fn loaded_pmix() -> Option<*mut c_void> {
    [&b"libpmix.so.2\0"[..], b"libpmix.so\0"]
        .iter()
        .find_map(|name| {
            // SAFETY: NUL-terminated library name; RTLD_NOLOAD loads nothing.
            let lib = unsafe {
                libc::dlopen(
                    name.as_ptr() as *const c_char,
                    libc::RTLD_NOW | libc::RTLD_NOLOAD,
                )
            };
            (!lib.is_null()).then_some(lib)
        })
}

/// A PMIx function: the next definition after this library's (the one
/// the process would have called without pmtrace), else the loaded PMIx
/// library's (a component opened with RTLD_LOCAL holds it privately).
fn pmix_fn<T>(name: &[u8]) -> Option<T> {
    symbol(libc::RTLD_NEXT, name).or_else(|| symbol(loaded_pmix()?, name))
}

fn real_init() -> Option<InitFn> {
    let p = REAL_INIT.load(Ordering::Acquire);
    if p != 0 {
        // SAFETY: stored below from a resolved `PMIx_Init`.
        return Some(unsafe { core::mem::transmute::<usize, InitFn>(p) });
    }
    let f: InitFn = pmix_fn(b"PMIx_Init\0")?;
    REAL_INIT.store(f as usize, Ordering::Release);
    Some(f)
}

/// Before `PMPI_Init` on a rank that will trace: announce this rank when
/// the MPI library initialises PMIx.
pub fn expect() {
    WANTED.store(true, Ordering::Release);
}

/// After `PMPI_Init`: the announcement, if the MPI library initialised
/// PMIx inside it (None: no PMIx launcher, no check).
pub fn announced() -> Option<Announced> {
    WANTED.store(false, Ordering::Release);
    ANNOUNCED.lock().take()
}

/// `PMIx_Init`, as the MPI library (or anything else in the process) calls
/// it: passed on unchanged; inside a traced `MPI_Init`, this rank's layout
/// is put and committed once the real call has succeeded.
///
/// # Safety
/// PMIx's contract: `proc_` null or writable, `info` an array of `ninfo`.
#[cfg_attr(test, allow(dead_code))]
#[allow(non_snake_case)]
pub unsafe extern "C" fn PMIx_Init(proc_: *mut Proc, info: *mut Info, ninfo: usize) -> c_int {
    let Some(init) = real_init() else {
        // No PMIx in the process, so nobody could have linked this call.
        return PMIX_ERR_INIT;
    };
    // SAFETY: the caller's arguments, passed through.
    let rc = unsafe { init(proc_, info, ninfo) };
    if rc == PMIX_SUCCESS && WANTED.load(Ordering::Acquire) {
        let mut slot = ANNOUNCED.lock();
        if slot.is_none() {
            *slot = std::panic::catch_unwind(|| announce(init, proc_)).unwrap_or(None);
        }
    }
    rc
}

/// Puts and commits this rank's layout; the client is already up.
fn announce(init: InitFn, caller: *const Proc) -> Option<Announced> {
    let put: PutFn = pmix_fn(b"PMIx_Put\0")?;
    let commit: CommitFn = pmix_fn(b"PMIx_Commit\0")?;
    let get: GetFn = pmix_fn(b"PMIx_Get\0")?;
    let mut me = Proc {
        nspace: [0; 256],
        rank: 0,
    };
    if caller.is_null() {
        // Who we are, from a second (counted) init that the real library
        // answers from the client it already has.
        type FinalizeFn = unsafe extern "C" fn(*const Info, usize) -> c_int;
        let finalize: FinalizeFn = pmix_fn(b"PMIx_Finalize\0")?;
        // SAFETY: PMIx fills `me`; the extra reference is dropped at once.
        unsafe {
            if init(&mut me, core::ptr::null_mut(), 0) != PMIX_SUCCESS {
                return None;
            }
            finalize(core::ptr::null(), 0);
        }
    } else {
        // SAFETY: the real PMIx_Init filled the caller's identifier.
        unsafe { core::ptr::copy_nonoverlapping(caller, &mut me, 1) };
    }
    let wire = CString::new(WIRE).ok()?;
    let mut value = Value {
        kind: PMIX_STRING,
        data: [wire.as_ptr() as u64, 0, 0],
    };
    // SAFETY: PMIx copies the key and the string value.
    let ok = unsafe {
        put(PMIX_GLOBAL, KEY.as_ptr() as *const c_char, &mut value) == PMIX_SUCCESS
            && commit() == PMIX_SUCCESS
    };
    ok.then_some(Announced { me, get })
}

impl Announced {
    /// After `PMPI_Init`: the world ranks that did not announce this layout.
    pub fn unmatched(&self, size: u32) -> Vec<u32> {
        let mut optional = Info {
            key: [0; 512],
            flags: 0,
            value: Value {
                kind: PMIX_BOOL,
                data: [1, 0, 0],
            },
        };
        for (d, s) in optional.key.iter_mut().zip(b"pmix.optional") {
            *d = *s as c_char;
        }
        let mut peer = Proc {
            nspace: self.me.nspace,
            rank: 0,
        };
        let mut missing = Vec::new();
        for rank in 0..size {
            peer.rank = rank;
            if !self.holds(&peer, &optional) {
                missing.push(rank);
            }
        }
        missing
    }

    /// Whether `peer` put our layout. The modex fence gave this process
    /// everyone's data, so the lookup stays local (`pmix.optional`).
    fn holds(&self, peer: &Proc, optional: &Info) -> bool {
        let mut out: *mut Value = core::ptr::null_mut();
        // SAFETY: PMIx allocates *out on success.
        let rc = unsafe { (self.get)(peer, KEY.as_ptr() as *const c_char, optional, 1, &mut out) };
        if rc != PMIX_SUCCESS || out.is_null() {
            return false;
        }
        // SAFETY: a value PMIx returned; a string value owns a malloc'd copy.
        unsafe {
            let v = &*out;
            let same = v.kind == PMIX_STRING
                && v.data[0] != 0
                && std::ffi::CStr::from_ptr(v.data[0] as *const c_char).to_bytes()
                    == WIRE.as_bytes();
            if v.kind == PMIX_STRING {
                libc::free(v.data[0] as *mut c_void);
            }
            libc::free(out as *mut c_void);
            same
        }
    }
}

/// "2", "2-3", "2-3, 5": ranks as ranges.
pub fn ranges(ranks: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            ranks[i].to_string()
        } else {
            format!("{}-{}", ranks[i], ranks[j])
        });
        i = j + 1;
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_print_as_ranges() {
        assert_eq!(ranges(&[2]), "2");
        assert_eq!(ranges(&[2, 3]), "2-3");
        assert_eq!(ranges(&[0, 2, 3, 4, 7]), "0, 2-4, 7");
        assert_eq!(ranges(&[]), "");
    }

    #[test]
    fn pmix_structs_have_the_c_layout() {
        assert_eq!(core::mem::size_of::<Proc>(), 260);
        assert_eq!(core::mem::size_of::<Value>(), 32);
        assert_eq!(core::mem::size_of::<Info>(), 552);
        assert_eq!(core::mem::offset_of!(Info, value), 520);
    }
}
