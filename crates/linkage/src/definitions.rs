//! The MPI library's own functions, found by name when first called, and
//! the other PMPI tools that sit between the program and it.
//!
//! Wrappers reach the real `PMPI_` functions through here (the generated
//! `real` and `pass` modules, and `ffi`'s functions for pmtrace's own
//! calls), not through link-time references: the library then loads under
//! any release of its MPI family, whichever functions that release lacks
//! (a program can only call what its MPI has), and is linkable into
//! programs of an older release. The next definition after pmtrace's own
//! comes first (`RTLD_NEXT`: the MPI library, or another tool that
//! interposes `PMPI_` functions); failing that (an MPI library loaded
//! later, with `dlopen` and `RTLD_LOCAL`), the MPI library the front bound
//! (`set_library`), then the first definition in any other loaded object.
//! Never pmtrace's own: it exports `PMPI_` functions too (see `tool`).
//!
//! pmtrace also exports `dlsym` (so that a program that looks MPI
//! functions up in its MPI library gets pmtrace's): every lookup here
//! goes to the C library's own (`real_dlsym`).
//!
//! Stacking. pmtrace defines each function twice: `MPI_X`, the outer
//! level, and `PMPI_X`, the inner one, which records and piggybacks. When
//! the next `MPI_X` after pmtrace's is the MPI library's own (it lives in
//! the object that holds the real `PMPI_X`), `MPI_X` goes straight to the
//! inner level. Otherwise another tool follows pmtrace in the search order
//! (preloaded after it): `MPI_X` calls that tool's `MPI_X` with the user's
//! arguments, and the tool's `PMPI_X` call reaches pmtrace's inner level,
//! which does the work. A tool found before pmtrace (preloaded first, or
//! linked into the executable) calls `PMPI_X` itself, which is pmtrace's.

use core::ffi::{c_void, CStr};
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The address of `name`, cached in `at`.
#[inline(always)]
pub fn function(at: &AtomicUsize, name: &CStr) -> usize {
    match at.load(Relaxed) {
        0 => resolve(at, name),
        f => f,
    }
}

#[cold]
#[inline(never)]
fn resolve(at: &AtomicUsize, name: &CStr) -> usize {
    let f = lookup(name);
    if f.is_null() {
        // The program called a function its MPI library does not have,
        // which it could not have linked against: nothing to pass it to.
        eprintln!("pmtrace: the MPI library has no {}", name.to_string_lossy());
        std::process::abort();
    }
    at.store(f as usize, Relaxed);
    f as usize
}

/// No other tool's `MPI_X` follows pmtrace's.
pub const NONE: usize = 1;

/// Another tool's `outer` (`MPI_X`) that follows pmtrace's, if any: the
/// next definition, when it lives elsewhere than the real `inner`
/// (`PMPI_X`). Cached in `at`.
///
/// `needs_inner`: pmtrace's work on X happens at the inner level (the
/// piggyback), so the tool's `PMPI_X` must be pmtrace's: it calls
/// `PMPI_X` by name, or looks it up with `dlsym`, which is pmtrace's
/// (src/dl.rs answers `dlsym(RTLD_NEXT, "PMPI_X")` with pmtrace's
/// `PMPI_X`, as Darshan asks). Where neither holds (a program linked with
/// libpmtrace.a that does not export its `dlsym`), the tool would find the
/// MPI library's `PMPI_X` and send messages without the header that
/// receivers expect, or take them with one: X is then not handed to it
/// (it misses those calls, as it would without stacking), with one
/// warning.
#[inline(always)]
pub fn tool(at: &AtomicUsize, outer: &CStr, inner: &CStr, needs_inner: bool) -> Option<usize> {
    match at.load(Relaxed) {
        0 => find_tool(at, outer, inner, needs_inner),
        NONE => None,
        f => Some(f),
    }
}

#[cold]
#[inline(never)]
fn find_tool(at: &AtomicUsize, outer: &CStr, inner: &CStr, needs_inner: bool) -> Option<usize> {
    let f = lookup(outer);
    let real = lookup(inner);
    let mut found = if f.is_null() || real.is_null() || object_of(f) == object_of(real) {
        NONE
    } else {
        f as usize
    };
    if found != NONE && needs_inner && !dlsym_is_own() && !calls_by_name(f, inner) {
        bypassed(f, outer);
        found = NONE;
    }
    at.store(found, Relaxed);
    (found != NONE).then_some(found)
}

/// Whether the process's `dlsym` is pmtrace's (src/dl.rs).
fn dlsym_is_own() -> bool {
    let f = real_dlsym(libc::RTLD_DEFAULT, c"dlsym");
    !f.is_null() && object_of(f) == own()
}

/// Whether the object holding `f` refers to `name` as an undefined symbol
/// (a call bound by the dynamic linker, which reaches pmtrace's export).
/// Each object's file is read once, however many functions ask.
fn calls_by_name(f: *const c_void, name: &CStr) -> bool {
    type Undefined = Option<Vec<Vec<u8>>>;
    static READ: std::sync::Mutex<Vec<(std::path::PathBuf, Undefined)>> =
        std::sync::Mutex::new(Vec::new());
    let Some(path) = path_of(f) else {
        return false;
    };
    let mut read = READ.lock().unwrap_or_else(|e| e.into_inner());
    let at = match read.iter().position(|(p, _)| *p == path) {
        Some(at) => at,
        None => {
            let names = std::fs::read(&path)
                .ok()
                .and_then(|image| crate::elf::undefined_symbols(&image));
            read.push((path, names));
            read.len() - 1
        }
    };
    read[at]
        .1
        .as_ref()
        .is_some_and(|names| names.iter().any(|n| n.as_slice() == name.to_bytes()))
}

/// The file of the object that holds `f`.
// dladdr reads no memory at `f`: any address is a valid question.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn path_of(f: *const c_void) -> Option<std::path::PathBuf> {
    let mut info = core::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr fills `info` for any address, or returns 0.
    if unsafe { libc::dladdr(f, info.as_mut_ptr()) } == 0 {
        return None;
    }
    // SAFETY: filled by dladdr.
    let name = unsafe { info.assume_init() }.dli_fname;
    if name.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated path from the loader.
    let name = unsafe { CStr::from_ptr(name) };
    use std::os::unix::ffi::OsStrExt;
    Some(std::ffi::OsStr::from_bytes(name.to_bytes()).into())
}

/// Says once (on the launcher's rank 0) which tool misses calls, and why.
fn bypassed(f: *const c_void, outer: &CStr) {
    static SAID: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
    if SAID.swap(true, Relaxed) || launcher_rank().unwrap_or(0) != 0 {
        return;
    }
    let tool = path_of(f).map_or_else(|| "a tool".into(), |p| p.display().to_string());
    eprintln!(
        "pmtrace: warning: {tool}, preloaded after pmtrace, reaches the MPI library \
         without pmtrace's PMPI_ functions, so it is not handed {} and the like \
         (preload it before pmtrace to let it see them)",
        outer.to_string_lossy()
    );
}

/// The first definition of `name` after pmtrace's own, or null.
pub fn lookup(name: &CStr) -> *mut c_void {
    let f = real_dlsym(libc::RTLD_NEXT, name);
    if !f.is_null() && object_of(f) != own() {
        return f;
    }
    let library = library();
    if !library.is_null() {
        let f = real_dlsym(library, name);
        if !f.is_null() && object_of(f) != own() {
            return f;
        }
    }
    elsewhere(name)
}

/// The MPI library the front bound: a `dlopen` handle, or 0.
static LIBRARY: AtomicUsize = AtomicUsize::new(0);

/// Records the MPI library the process runs (a `dlopen` handle).
pub fn set_library(handle: *mut c_void) {
    LIBRARY.store(handle as usize, Relaxed);
}

/// The MPI library the front bound, or null.
pub fn library() -> *mut c_void {
    LIBRARY.load(Relaxed) as *mut c_void
}

/// `dlsym` of the C library, never pmtrace's own export (which may hand
/// back pmtrace's functions for MPI names). Looked up once by version:
/// `dlvsym` is not interposed. `handle` is a `dlopen` handle of an object
/// still loaded, or one of the `RTLD_` pseudo-handles.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn real_dlsym(handle: *mut c_void, name: &CStr) -> *mut c_void {
    static REAL: AtomicUsize = AtomicUsize::new(0);
    let mut f = REAL.load(Relaxed);
    if f == 0 {
        f = real_dlsym_address();
        REAL.store(f, Relaxed);
    }
    type Dlsym = unsafe extern "C" fn(*mut c_void, *const libc::c_char) -> *mut c_void;
    // SAFETY: the C library's dlsym, with a NUL-terminated name.
    unsafe { core::mem::transmute::<usize, Dlsym>(f)(handle, name.as_ptr()) }
}

/// The address of the C library's `dlsym` (glibc 2.34 and later keep it in
/// libc itself; older ones in libdl, under the first x86-64 version).
pub fn real_dlsym_address() -> usize {
    for version in [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"] {
        // SAFETY: NUL-terminated names, looked up after pmtrace's object.
        let f = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
        if !f.is_null() {
            return f as usize;
        }
    }
    eprintln!("pmtrace: cannot find the C library's dlsym");
    std::process::abort()
}

/// The base address of the object that holds `addr` (null if none).
// dladdr reads no memory at `addr`: any address is a valid question.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn object_of(addr: *const c_void) -> *mut c_void {
    let mut info = core::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr fills `info` for any address, or returns 0.
    if unsafe { libc::dladdr(addr, info.as_mut_ptr()) } == 0 {
        return core::ptr::null_mut();
    }
    // SAFETY: filled by dladdr.
    unsafe { info.assume_init() }.dli_fbase
}

/// The object pmtrace is in: the shared library, or the executable it
/// was linked into.
pub fn own() -> *mut c_void {
    static OWN: AtomicUsize = AtomicUsize::new(0);
    match OWN.load(Relaxed) {
        0 => {
            let base = object_of(own as *const c_void);
            OWN.store(base as usize, Relaxed);
            base
        }
        b => b as *mut c_void,
    }
}

/// `name` in the loaded objects other than pmtrace's, in load order.
fn elsewhere(name: &CStr) -> *mut c_void {
    let mut found: (&CStr, *mut c_void) = (name, core::ptr::null_mut());
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _: libc::size_t,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is `found` below; `info` is the loader's.
        let (name, found) = unsafe { &mut *(data as *mut (&CStr, *mut c_void)) };
        let path = unsafe { (*info).dlpi_name };
        if path.is_null() || unsafe { *path } == 0 {
            return 0; // the executable: pmtrace's scope, searched first
        }
        // SAFETY: an object already loaded; RTLD_NOLOAD loads nothing.
        let h = unsafe { libc::dlopen(path, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if h.is_null() {
            return 0;
        }
        let f = real_dlsym(h, name);
        unsafe { libc::dlclose(h) };
        if f.is_null() || object_of(f) == own() {
            return 0;
        }
        *found = f;
        1
    }
    // SAFETY: the callback reads only what the loader hands it.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut found as *mut _ as *mut c_void) };
    found.1
}

/// This process's rank as the launcher tells it, before MPI can be asked
/// (the handles to ask it with are the wrong family's).
pub fn launcher_rank() -> Option<u64> {
    [
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "PMIX_RANK",
        "SLURM_PROCID",
        "MV2_COMM_WORLD_RANK",
    ]
    .iter()
    .find_map(|k| std::env::var(k).ok()?.trim().parse().ok())
}

/// A loaded object that defines a name itself.
pub struct Definer {
    /// Its path as the loader has it (empty: the executable).
    pub path: std::ffi::CString,
    /// A `dlopen` handle on it, held open.
    pub handle: *mut c_void,
}

/// The loaded objects other than pmtrace's that define `name` themselves
/// (not through a library they depend on), in load order.
pub fn definers(name: &CStr) -> Vec<Definer> {
    let mut found: (&CStr, Vec<Definer>) = (name, Vec::new());
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _: libc::size_t,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is `found` below; `info` is the loader's.
        let (name, found) = unsafe { &mut *(data as *mut (&CStr, Vec<Definer>)) };
        let info = unsafe { &*info };
        // An address inside the object: its first loaded segment.
        let phdrs = if info.dlpi_phdr.is_null() {
            &[][..]
        } else {
            // SAFETY: the loader's program headers, dlpi_phnum of them.
            unsafe { core::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
        };
        let Some(load) = phdrs.iter().find(|p| p.p_type == libc::PT_LOAD) else {
            return 0;
        };
        let inside = (info.dlpi_addr as usize).wrapping_add(load.p_vaddr as usize) as *const c_void;
        let base = object_of(inside);
        if base.is_null() || base == own() {
            return 0;
        }
        let path = if info.dlpi_name.is_null() {
            c""
        } else {
            // SAFETY: a NUL-terminated path from the loader.
            unsafe { CStr::from_ptr(info.dlpi_name) }
        };
        // SAFETY: an object already loaded (RTLD_NOLOAD loads nothing); the
        // executable is opened as null.
        let h = unsafe {
            libc::dlopen(
                if path.is_empty() {
                    core::ptr::null()
                } else {
                    path.as_ptr()
                },
                libc::RTLD_LAZY | libc::RTLD_NOLOAD,
            )
        };
        if h.is_null() {
            return 0;
        }
        let f = real_dlsym(h, name);
        if !f.is_null() && object_of(f) == base {
            found.push(Definer {
                path: path.into(),
                handle: h,
            });
        } else {
            // SAFETY: the handle opened above.
            unsafe { libc::dlclose(h) };
        }
        0
    }
    // SAFETY: the callback reads only what the loader hands it.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut found as *mut _ as *mut c_void) };
    found.1
}

/// An MPI library's version string, from a call of its
/// `MPI_Get_library_version` (`get(buffer, &length)`, callable before
/// `MPI_Init`) into a buffer larger than any implementation's maximum
/// (Open MPI's is 256 bytes, MPICH's 8192).
pub fn library_version(
    get: impl FnOnce(*mut libc::c_char, *mut libc::c_int) -> libc::c_int,
) -> Option<String> {
    let mut buf = vec![0u8; 1 << 15];
    let mut len: libc::c_int = 0;
    if get(buf.as_mut_ptr().cast(), &mut len) != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end.min(len.max(0) as usize)]).into_owned())
}
