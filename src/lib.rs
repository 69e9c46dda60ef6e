//! `libpmtrace.so` (for `LD_PRELOAD`) and `libpmtrace.a` (for relinking):
//! one library for every MPI, linking none.
//!
//! It exports every MPI function that any of the three binary interfaces
//! pmtrace knows has (Open MPI's, MPICH's, and the MPI-5 standard ABI), as
//! a jump through a table (`trampolines`, generated). At the first call,
//! `front` finds the MPI library the process loaded, tells its interface
//! (`family`), and fills the table from the capture runtime built for that
//! interface (crates/capture: the same source, src/capture, built three
//! times against the three `mpi.h`). `dl` makes lookups through `dlsym`
//! on an MPI library's handle find pmtrace's functions too; `tables`
//! points references bound past pmtrace (`RTLD_DEEPBIND`) at pmtrace's
//! functions, and keeps null the weak references to MPI functions the
//! running library lacks.
//!
//! x86-64 Linux: the jumps are written in its assembly.

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
compile_error!("libpmtrace's front is written for x86-64 Linux");

mod dl;
mod family;
mod front;
mod tables;

/// The exported functions and their table: `$OUT_DIR/trampolines.rs`.
#[allow(non_snake_case, clippy::all)]
mod trampolines {
    include!(concat!(env!("OUT_DIR"), "/trampolines.rs"));
}
