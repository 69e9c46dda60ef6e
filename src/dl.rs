//! `dlsym`, as the program sees it: MPI functions looked up in an MPI
//! library come back as pmtrace's.
//!
//! A runtime that opens libmpi with `dlopen` (`RTLD_LOCAL`, with or
//! without `RTLD_DEEPBIND`) and calls it through `dlsym` on that handle,
//! as Julia's MPI.jl does, never meets a preloaded symbol: the lookup is
//! confined to the library. So pmtrace exports `dlsym` too:
//!
//! - on a handle of an object whose `MPI_X` or `PMPI_X` pmtrace also
//!   exports, the answer is pmtrace's function (src/front.rs routes it);
//! - an `MPI_X` that only pmtrace defines (the program's own scope finds
//!   the preloaded library first) is hidden while no MPI library is
//!   loaded: mpi4py 4 asks the process for `MPI_Get_version` to learn
//!   whether an MPI is loaded already, and would otherwise never load one;
//! - a `PMPI_X` looked up with `RTLD_NEXT` by another object (a PMPI
//!   tool preloaded after pmtrace that finds its `PMPI_` functions so, as
//!   Darshan does) is pmtrace's, whose inner level records and
//!   piggybacks, whenever the process's global scope finds pmtrace's
//!   `PMPI_X`: what the tool would reach had it called `PMPI_X` by name.
//!   The C library's answer would be the MPI library's, past pmtrace, and
//!   the tool's messages would go without the header receivers expect;
//! - anything else, and every other lookup with `RTLD_NEXT` (whose answer
//!   depends on who asks), goes to the C library's `dlsym` by a tail jump,
//!   so that it sees the caller's own return address.

use crate::trampolines::{ENTRIES, NAMES};
use core::ffi::{c_char, c_void, CStr};
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use pmtrace_linkage as link;

/// The C library's `dlsym`, set by `decide` before the first jump to it.
static REAL: AtomicUsize = AtomicUsize::new(0);

/// `decide`'s answer: hide the name (return null, the error set).
const HIDDEN: usize = 1;

/// The exported `dlsym(handle, name)` (x86-64, System V): asks `decide`
/// (with the caller's return address), which answers 0 (ask the C
/// library), `HIDDEN`, or the address to give.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym() {
    core::arch::naked_asm!(
        "mov rdx, [rsp]",
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {decide}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 2f",
        "cmp rax, {hidden}",
        "je 3f",
        "ret",
        "3:",
        "xor eax, eax",
        "ret",
        "2:",
        "jmp qword ptr [rip + {real}]",
        decide = sym decide,
        hidden = const HIDDEN,
        real = sym REAL,
    )
}

/// What the exported `dlsym` answers for `name` on `handle`, asked from
/// `caller` (see `dlsym`).
extern "C" fn decide(handle: *mut c_void, name: *const c_char, caller: *const c_void) -> usize {
    if REAL.load(Relaxed) == 0 {
        REAL.store(link::real_dlsym_address(), Relaxed);
    }
    // An object loaded since the last look is looked up before its code
    // runs: its tables are corrected first (src/tables.rs).
    crate::front::patch_tables();
    if name.is_null() {
        return 0;
    }
    std::panic::catch_unwind(|| {
        // SAFETY: the caller's NUL-terminated name.
        let name = unsafe { CStr::from_ptr(name) };
        let bytes = name.to_bytes();
        if !(bytes.starts_with(b"MPI_") || bytes.starts_with(b"PMPI_")) {
            return 0;
        }
        let Ok(slot) = NAMES.binary_search(&name) else {
            return 0;
        };
        if handle == libc::RTLD_NEXT {
            return next_inner(slot, caller);
        }
        let found = link::real_dlsym(handle, name);
        if found.is_null() {
            return 0;
        }
        if link::object_of(found) != link::own() {
            // The MPI library's (or a tool's) function: pmtrace's instead.
            return ENTRIES[slot] as usize;
        }
        if !link::definers(c"PMPI_Init").is_empty() {
            return found as usize;
        }
        // Only pmtrace defines it: not yet an MPI to call. The C library
        // sets the error, for a name nothing defines.
        // SAFETY: a NUL-terminated name; the loader's own handle.
        let libc_handle =
            unsafe { libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        link::real_dlsym(libc_handle, name);
        HIDDEN
    })
    .unwrap_or(0)
}

/// `dlsym(RTLD_NEXT, name)` of slot `slot` from `caller`: pmtrace's
/// `PMPI_X` for another object than pmtrace and the MPI library, where the
/// global scope finds pmtrace's; 0 (the C library's answer) otherwise.
fn next_inner(slot: usize, caller: *const c_void) -> usize {
    let name = NAMES[slot];
    if !name.to_bytes().starts_with(b"PMPI_") {
        return 0;
    }
    let from = link::object_of(caller);
    if from.is_null() || from == link::own() {
        return 0;
    }
    let ours = ENTRIES[slot] as usize;
    if link::real_dlsym(libc::RTLD_DEFAULT, name) as usize != ours {
        return 0;
    }
    // The MPI library's own lookups (of its own functions) stay its own.
    if link::definers(c"PMPI_Init")
        .iter()
        .any(|d| link::object_of(link::real_dlsym(d.handle, c"PMPI_Init")) == from)
    {
        return 0;
    }
    ours
}
