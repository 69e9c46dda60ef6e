//! The front of libpmtrace.so: finds the MPI library the process runs,
//! decides its binary interface, and routes every exported function to the
//! capture runtime built for that interface.
//!
//! ```text
//!  program ──► MPI_Send (exported, generated)   jmp [TABLE + 8·slot]
//!                 │
//!      before binding: lazy_<slot> ─► lazy ─► resolve(slot) ─► bind() ─┐
//!                                                                      │
//!      after:  TABLE[slot] = ─┬─ pmtrace_capture_<interface>::EXPORTS  ◄┘
//!                             ├─ the MPI library's own function (a name the
//!                             │  interface's runtime does not wrap, or no
//!                             │  tracing: an interface pmtrace does not know,
//!                             │  two MPI libraries, one too old)
//!                             └─ a no-op (the phase API, untraced)
//! ```
//!
//! Binding happens once, at the first call of any exported function, on a
//! cold path: the program cannot call MPI before it has loaded an MPI
//! library, however it loaded it (linked, `dlopen` with `RTLD_LOCAL` as
//! mpi4py does, or `dlopen` plus `dlsym` as Julia does; src/dl.rs). After
//! that, a call costs one indirect jump. Nothing here loads an MPI library:
//! pmtrace only ever binds the one the program loaded.

use crate::family::{self, Family, Traits};
use crate::trampolines::{NAMES, SLOTS, TABLE};
use core::ffi::{c_char, c_int, c_void, CStr};
use core::sync::atomic::{AtomicBool, Ordering};
use parking_lot::Mutex;
use pmtrace_linkage as link;

/// The stub every slot holds before binding (x86-64, System V): keeps
/// every argument register (and `al`, the vector count of a variadic
/// call) across `resolve(slot)`, then jumps where it says. `lazy_<slot>`
/// puts the slot in `r11d`, which no argument uses.
#[unsafe(naked)]
pub unsafe extern "C" fn lazy() {
    core::arch::naked_asm!(
        "push rbp",
        "mov rbp, rsp",
        "push rdi",
        "push rsi",
        "push rdx",
        "push rcx",
        "push r8",
        "push r9",
        "push rax",
        "push r10",
        "sub rsp, 128",
        "movdqu [rsp], xmm0",
        "movdqu [rsp + 16], xmm1",
        "movdqu [rsp + 32], xmm2",
        "movdqu [rsp + 48], xmm3",
        "movdqu [rsp + 64], xmm4",
        "movdqu [rsp + 80], xmm5",
        "movdqu [rsp + 96], xmm6",
        "movdqu [rsp + 112], xmm7",
        "mov edi, r11d",
        "call {resolve}",
        "mov r11, rax",
        "movdqu xmm0, [rsp]",
        "movdqu xmm1, [rsp + 16]",
        "movdqu xmm2, [rsp + 32]",
        "movdqu xmm3, [rsp + 48]",
        "movdqu xmm4, [rsp + 64]",
        "movdqu xmm5, [rsp + 80]",
        "movdqu xmm6, [rsp + 96]",
        "movdqu xmm7, [rsp + 112]",
        "add rsp, 128",
        "pop r10",
        "pop rax",
        "pop r9",
        "pop r8",
        "pop rcx",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "pop rbp",
        "jmp r11",
        resolve = sym resolve,
    )
}

/// Where slot `slot` goes: binds first if nothing is bound yet.
extern "C" fn resolve(slot: u32) -> usize {
    let slot = slot as usize;
    let target = std::panic::catch_unwind(|| {
        let mut state = STATE.lock();
        if state.is_none() {
            *state = bind();
            if state.is_some() {
                patch_tables();
            }
        }
        let target = match &*state {
            Some(binding) => binding.target(slot),
            // No MPI library is loaded: this name goes where it would
            // without pmtrace, if anywhere.
            None => passthrough(slot),
        };
        if target != 0 {
            fill(slot, target);
        }
        target
    })
    .unwrap_or(0);
    if target == 0 {
        missing(slot);
    }
    target
}

/// A function the program called that nothing defines but pmtrace.
#[cold]
fn missing(slot: usize) -> ! {
    let name = NAMES[slot].to_string_lossy();
    if link::definers(c"PMPI_Init").is_empty() {
        eprintln!("pmtrace: {name} was called, but no MPI library is loaded");
    } else {
        eprintln!("pmtrace: {name} was called, but the MPI library has no {name}");
    }
    std::process::abort()
}

/// What binding decided.
enum Binding {
    /// Traced by the runtime of this interface.
    Traced(Family),
    /// Passed to the MPI library untouched.
    Untraced,
}

/// The binding, once made (None: no MPI library was loaded yet).
static STATE: Mutex<Option<Binding>> = Mutex::new(None);
/// Per slot, once bound: whether the MPI library lacks the function (a
/// weak reference to it must stay null: src/tables.rs).
static MISSING: std::sync::OnceLock<Vec<bool>> = std::sync::OnceLock::new();

/// Corrects the tables of objects loaded since the last look (src/tables.rs),
/// and says in one line which could not be corrected.
pub fn patch_tables() {
    let unwritable = crate::tables::patch(MISSING.get().map(Vec::as_slice));
    if !unwritable.is_empty() {
        say(&format!(
            "{} call MPI past pmtrace (loaded with RTLD_DEEPBIND) and their tables \
             could not be rewritten: those calls are not traced",
            unwritable.join(", ")
        ));
    }
}
/// Whether the one warning line was printed.
static SAID: AtomicBool = AtomicBool::new(false);

impl Binding {
    /// The function slot `slot` jumps to (0: none).
    fn target(&self, slot: usize) -> usize {
        let name = NAMES[slot];
        // Each interface's runtime has its own table type, of one shape.
        macro_rules! find {
            ($exports:expr) => {{
                let exports = $exports;
                exports
                    .binary_search_by(|e| e.name.cmp(name))
                    .ok()
                    .map(|i| exports[i].f as usize)
            }};
        }
        let own = match self {
            Binding::Untraced => None,
            Binding::Traced(Family::OpenMpi) => find!(pmtrace_capture_openmpi::EXPORTS),
            Binding::Traced(Family::Mpich) => find!(pmtrace_capture_mpich::EXPORTS),
            Binding::Traced(Family::Abi) => find!(pmtrace_capture_abi::EXPORTS),
        };
        own.unwrap_or_else(|| passthrough(slot))
    }
}

/// Slot `slot` as if pmtrace were not there: the next definition of its
/// name (the MPI library's, or another tool's); the phase API does
/// nothing.
fn passthrough(slot: usize) -> usize {
    let name = NAMES[slot];
    if name.to_bytes().starts_with(b"pmtrace_") {
        return nothing as extern "C" fn() as usize;
    }
    link::lookup(name) as usize
}

/// The phase API of an untraced process.
extern "C" fn nothing() {}

/// Points slot `slot` at `target`.
fn fill(slot: usize, target: usize) {
    // SAFETY: an aligned word of the table, written whole; other threads
    // jump through it, with either value a valid target.
    unsafe {
        core::ptr::addr_of_mut!(TABLE[slot])
            .cast::<usize>()
            .write_volatile(target)
    };
}

/// Finds the MPI library, decides the interface and fills every slot;
/// None when no MPI library is loaded yet.
fn bind() -> Option<Binding> {
    let mut libraries = link::definers(c"PMPI_Init");
    let binding = match libraries.len() {
        0 => return None,
        1 => {
            let library = libraries.pop().unwrap();
            match check(&library) {
                Ok(family) => {
                    link::set_library(library.handle);
                    match family {
                        Family::OpenMpi => pmtrace_capture_openmpi::bind(library.handle),
                        Family::Mpich => pmtrace_capture_mpich::bind(library.handle),
                        Family::Abi => pmtrace_capture_abi::bind(library.handle),
                    }
                    Binding::Traced(family)
                }
                Err(why) => {
                    link::set_library(library.handle);
                    say(&format!("{why}; the program runs untraced"));
                    Binding::Untraced
                }
            }
        }
        _ => {
            let paths: Vec<String> = libraries.iter().map(|l| shown(&l.path)).collect();
            say(&format!(
                "the program has loaded {} MPI libraries ({}), so no interface is sure; \
                 the program runs untraced",
                paths.len(),
                paths.join(", ")
            ));
            Binding::Untraced
        }
    };
    for slot in 0..SLOTS {
        let target = binding.target(slot);
        if target != 0 {
            fill(slot, target);
        }
    }
    MISSING.get_or_init(|| (0..SLOTS).map(lacks).collect());
    Some(binding)
}

/// Whether the MPI library (the bound one, or any) lacks slot `slot`'s
/// MPI function.
fn lacks(slot: usize) -> bool {
    let name = NAMES[slot];
    let bytes = name.to_bytes();
    if !(bytes.starts_with(b"MPI_") || bytes.starts_with(b"PMPI_")) {
        return false;
    }
    let library = link::library();
    if library.is_null() {
        link::lookup(name).is_null()
    } else {
        own_definition(library, name).is_null()
    }
}

/// A loaded object's path for a message.
fn shown(path: &CStr) -> String {
    if path.is_empty() {
        "the executable".into()
    } else {
        path.to_string_lossy().into_owned()
    }
}

/// The functions pmtrace calls for itself that an MPI older than 3.0 lacks.
const NEEDED: [&CStr; 5] = [
    c"PMPI_Type_size_x",
    c"PMPI_Type_get_extent_x",
    c"PMPI_Get_elements_x",
    c"PMPI_Status_set_elements_x",
    c"PMPI_Ibarrier",
];

/// The interface of `library`, or why it cannot be traced.
fn check(library: &link::Definer) -> Result<Family, String> {
    let traits = traits(library.handle);
    let what = format!(
        "{} ({})",
        shown(&library.path),
        family::first_line(&traits.version)
    );
    let Some(family) = family::family_of(&traits) else {
        return Err(format!(
            "the MPI library {what} has a binary interface pmtrace does not know \
             (it knows Open MPI's, MPICH's and the MPI-5 standard ABI)"
        ));
    };
    if let Some(lacks) = NEEDED
        .iter()
        .find(|f| own_definition(library.handle, f).is_null())
    {
        return Err(format!(
            "the MPI library {what} is too old for pmtrace: it lacks {} (MPI 3.0)",
            lacks.to_string_lossy()
        ));
    }
    Ok(family)
}

/// `name` as `handle`'s object or its dependencies define it, never
/// pmtrace's own.
fn own_definition(handle: *mut c_void, name: &CStr) -> *mut c_void {
    let f = link::real_dlsym(handle, name);
    if f.is_null() || link::object_of(f) == link::own() {
        core::ptr::null_mut()
    } else {
        f
    }
}

/// What the library says of itself (all of it callable before MPI_Init).
fn traits(handle: *mut c_void) -> Traits {
    let mut t = Traits {
        ompi_objects: !own_definition(handle, c"ompi_mpi_comm_world").is_null(),
        ..Traits::default()
    };
    let abi = own_definition(handle, c"PMPI_Abi_get_version");
    if !abi.is_null() {
        type AbiVersion = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
        let (mut major, mut minor) = (-1, -1);
        // SAFETY: MPI_Abi_get_version(int *abi_major, int *abi_minor).
        let rc =
            unsafe { core::mem::transmute::<*mut c_void, AbiVersion>(abi)(&mut major, &mut minor) };
        if rc == 0 {
            t.abi_major = Some(major);
        }
    }
    let version = own_definition(handle, c"PMPI_Get_library_version");
    if !version.is_null() {
        type Version = unsafe extern "C" fn(*mut c_char, *mut c_int) -> c_int;
        // SAFETY: MPI_Get_library_version(char *version, int *resultlen).
        let version = unsafe { core::mem::transmute::<*mut c_void, Version>(version) };
        // SAFETY: the buffer and length `library_version` hands it.
        t.version =
            link::library_version(|buf, len| unsafe { version(buf, len) }).unwrap_or_default();
    }
    t
}

/// The one line pmtrace prints when it cannot trace (on the launcher's
/// rank 0, once).
pub fn say(line: &str) {
    if SAID.swap(true, Ordering::Relaxed) || link::launcher_rank().unwrap_or(0) != 0 {
        return;
    }
    eprintln!("pmtrace: warning: {line}");
}

/// Registers `exited` as the library loads.
#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;

extern "C" fn at_load() {
    // SAFETY: registers a function of this library, which stays loaded.
    unsafe { libc::atexit(exited) };
}

/// At exit: if the process ran MPI but its runtime never saw MPI start
/// (the calls were bound to the library past pmtrace, from where pmtrace
/// could not turn them: src/tables.rs), says that nothing was traced,
/// rather than leave an empty trace to explain itself.
extern "C" fn exited() {
    let _ = std::panic::catch_unwind(|| {
        if SAID.load(Ordering::Relaxed) {
            return;
        }
        let started = match STATE.try_lock().as_deref() {
            Some(Some(Binding::Traced(Family::OpenMpi))) => pmtrace_capture_openmpi::started(),
            Some(Some(Binding::Traced(Family::Mpich))) => pmtrace_capture_mpich::started(),
            Some(Some(Binding::Traced(Family::Abi))) => pmtrace_capture_abi::started(),
            Some(Some(Binding::Untraced)) | None => return,
            Some(None) => false,
        };
        let libraries = link::definers(c"PMPI_Init");
        let [library] = libraries.as_slice() else {
            return;
        };
        if started
            || !(asks(library.handle, c"PMPI_Initialized")
                || asks(library.handle, c"PMPI_Finalized"))
        {
            return;
        }
        say(&format!(
            "MPI ran in this process ({}) without its MPI_Init passing through pmtrace, \
             so nothing was traced",
            shown(&library.path)
        ));
    });
}

/// What `MPI_Initialized` or `MPI_Finalized` (`name`) of the library says
/// (both callable at any time).
fn asks(handle: *mut c_void, name: &CStr) -> bool {
    let f = own_definition(handle, name);
    if f.is_null() {
        return false;
    }
    type Flag = unsafe extern "C" fn(*mut c_int) -> c_int;
    let mut flag = 0;
    // SAFETY: MPI_Initialized(int *flag), MPI_Finalized(int *flag).
    let rc = unsafe { core::mem::transmute::<*mut c_void, Flag>(f)(&mut flag) };
    rc == 0 && flag != 0
}
