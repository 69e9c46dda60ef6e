//! Is every rank of the job traced? A rank that runs without pmtrace (an
//! MPMD job whose second program lost `LD_PRELOAD`, a remote node that was
//! not passed it) would misread every piggybacked message and would skip
//! the tool's own collectives at init. It must be found before the tool
//! sends anything over MPI, because any message of ours could be taken by
//! that rank's `MPI_ANY_TAG` receive.
//!
//! The launcher's key-value store carries the answer out of band. Before
//! `PMPI_Init`, each traced rank puts `pmtrace.wire` (the piggyback layout
//! version) in the job's PMIx store and commits it; the MPI library's own
//! init then exchanges every rank's committed data in its modex fence. After
//! `PMPI_Init`, each rank looks the key up for every rank of the world,
//! locally. All ranks see the same data, so all reach the same verdict
//! without a message.
//!
//! PMIx is found at run time (`dlopen`), only when the launcher says it is
//! there (`PMIX_NAMESPACE`): Open MPI's mpirun, PRRTE, and Slurm's
//! `srun --mpi=pmix`. Other launchers (MPICH's Hydra) have no store that
//! is readable before a fence, and no check is made.

use core::ffi::{c_char, c_int, c_void};
use std::ffi::CString;

/// The piggyback wire layout; bump on any change of the header.
pub const WIRE: &str = "pmtrace-wire-1";
const KEY: &[u8] = b"pmtrace.wire\0";

const PMIX_SUCCESS: c_int = 0;
const PMIX_GLOBAL: u8 = 3;
const PMIX_BOOL: u16 = 1;
const PMIX_STRING: u16 = 3;

/// `pmix_proc_t`.
#[repr(C)]
struct Proc {
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
struct Info {
    key: [c_char; 512],
    flags: u32,
    value: Value,
}

type InitFn = unsafe extern "C" fn(*mut Proc, *mut Info, usize) -> c_int;
type PutFn = unsafe extern "C" fn(u8, *const c_char, *mut Value) -> c_int;
type CommitFn = unsafe extern "C" fn() -> c_int;
type GetFn =
    unsafe extern "C" fn(*const Proc, *const c_char, *const Info, usize, *mut *mut Value) -> c_int;
type FinalizeFn = unsafe extern "C" fn(*const Info, usize) -> c_int;

/// A PMIx client that announced this rank.
pub struct Announced {
    me: Proc,
    get: GetFn,
    finalize: FinalizeFn,
}

// SAFETY: plain data and function pointers into a library never unloaded.
unsafe impl Send for Announced {}

fn symbol<T>(lib: *mut c_void, name: &[u8]) -> Option<T> {
    // SAFETY: `name` is NUL-terminated; the caller names the type of the symbol.
    let p = unsafe { libc::dlsym(lib, name.as_ptr() as *const c_char) };
    // SAFETY: T is a function pointer type of the symbol's C signature.
    (!p.is_null()).then(|| unsafe { core::mem::transmute_copy::<*mut c_void, T>(&p) })
}

fn open_pmix() -> Option<*mut c_void> {
    for name in [&b"libpmix.so.2\0"[..], b"libpmix.so\0"] {
        for flags in [libc::RTLD_NOLOAD, 0] {
            // SAFETY: NUL-terminated library name.
            let lib =
                unsafe { libc::dlopen(name.as_ptr() as *const c_char, libc::RTLD_NOW | flags) };
            if !lib.is_null() {
                return Some(lib);
            }
        }
    }
    None
}

/// Before `PMPI_Init`: joins the launcher's PMIx store and puts this rank's
/// layout there. None when there is no PMIx launcher.
pub fn announce() -> Option<Announced> {
    std::env::var_os("PMIX_NAMESPACE")?;
    let lib = open_pmix()?;
    let init: InitFn = symbol(lib, b"PMIx_Init\0")?;
    let put: PutFn = symbol(lib, b"PMIx_Put\0")?;
    let commit: CommitFn = symbol(lib, b"PMIx_Commit\0")?;
    let get: GetFn = symbol(lib, b"PMIx_Get\0")?;
    let finalize: FinalizeFn = symbol(lib, b"PMIx_Finalize\0")?;
    let mut me = Proc {
        nspace: [0; 256],
        rank: 0,
    };
    // SAFETY: PMIx fills `me`; no info. PMIx_Init counts its callers, so the
    // MPI library's own init later shares this client.
    if unsafe { init(&mut me, core::ptr::null_mut(), 0) } != PMIX_SUCCESS {
        return None;
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
    if !ok {
        // SAFETY: drops our reference only.
        unsafe { finalize(core::ptr::null(), 0) };
        return None;
    }
    Some(Announced { me, get, finalize })
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

impl Drop for Announced {
    fn drop(&mut self) {
        // SAFETY: drops our reference; the MPI library keeps its own.
        unsafe { (self.finalize)(core::ptr::null(), 0) };
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
