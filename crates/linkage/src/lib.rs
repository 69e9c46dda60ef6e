//! What the dynamic linker has loaded, as the preload library needs to
//! know it: the definitions that follow pmtrace's own (`definitions`: the MPI
//! library, or another PMPI tool stacked after pmtrace), the objects that
//! define a name, and the symbols an object leaves to the linker (`elf`).
//! Shared by the front of libpmtrace.so and every interface's capture
//! runtime, so that its caches exist once per process.

pub mod definitions;
pub mod elf;
pub mod places;

pub use definitions::*;
