//! Whether the process runs the MPI this library was built for.
//!
//! A PMPI tool is bound to one MPI's binary interface: handles are pointers
//! to structures in Open MPI, integers in MPICH and the libraries built on
//! it (MVAPICH, Intel MPI, Cray MPICH), and pointer-sized constants fixed
//! by the standard in the MPI-5 ABI (`libmpi_abi.so`, which MPICH 5 ships
//! beside its own `libmpi.so.12`); the constants the shim reads at build
//! time are that interface's. Preloaded under a program of another family,
//! the library would pass handles MPI cannot read: Open MPI crashes, MPICH
//! aborts with "Invalid communicator". This happens easily on a machine
//! with several MPIs (module systems, distribution packages side by side,
//! one MPICH installation with both interfaces), so `MPI_Init` first asks
//! `MPI_Abi_get_version` where it exists and `MPI_Get_library_version`,
//! which MPI allows before initialisation, and on a mismatch leaves tracing
//! off: the program runs as if untraced, and rank 0 says why in one line.

use crate::mpi::real;
use core::ffi::c_int;

/// A binary interface to MPI: what one libpmtrace is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Open MPI 4.1 and 5 (`libmpi.so.40`).
    OpenMpi,
    /// MPICH and its ABI-compatible derivatives (`libmpi.so.12`).
    Mpich,
    /// The MPI-5 standard ABI (`libmpi_abi.so`), whichever MPI provides it.
    Abi,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::OpenMpi => "Open MPI",
            Family::Mpich => "MPICH",
            Family::Abi => "the MPI-5 standard ABI",
        }
    }

    /// What builds the library of this family, and where it lands.
    fn library(self) -> &'static str {
        match self {
            Family::OpenMpi => "`make`: target/release/libpmtrace.so",
            Family::Mpich => "`make mpich`: target/mpich/release/libpmtrace.so",
            Family::Abi => "`make abi`: target/abi/release/libpmtrace.so",
        }
    }
}

/// The family this library was compiled against (None: another MPI, whose
/// version string is not checked).
pub const BUILT: Option<Family> = if cfg!(mpi_impl = "abi") {
    Some(Family::Abi)
} else if cfg!(mpi_impl = "openmpi") {
    Some(Family::OpenMpi)
} else if cfg!(mpi_impl = "mpich") {
    Some(Family::Mpich)
} else {
    None
};

/// The family a library version string names, if it is one of the two
/// native ones.
pub fn family_of(version: &str) -> Option<Family> {
    if version.contains("Open MPI") {
        Some(Family::OpenMpi)
    } else if ["MPICH", "MVAPICH", "Intel(R) MPI"]
        .iter()
        .any(|n| version.contains(n))
    {
        Some(Family::Mpich)
    } else {
        None
    }
}

/// The family the process runs: the standard ABI when the MPI library's
/// `MPI_Abi_get_version` gives a version (an MPI-5 library that is not
/// the ABI one answers -1), else the version string's.
pub fn running_family(abi_major: Option<c_int>, version: &str) -> Option<Family> {
    if abi_major.is_some_and(|m| m >= 1) {
        return Some(Family::Abi);
    }
    family_of(version)
}

/// What is wrong when a library built for `built` runs under `running`.
pub fn verdict(built: Option<Family>, running: Option<Family>, version: &str) -> Option<String> {
    let (built, running) = (built?, running?);
    if built == running {
        return None;
    }
    let first: Vec<&str> = version
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let first = first.join(" ");
    Some(format!(
        "this libpmtrace was built for {} but the program runs {} ({first}); \
         tracing is off. Trace it with the library for {} ({}), or with \
         `pmtrace run`, which picks it",
        built.name(),
        running.name(),
        running.name(),
        running.library()
    ))
}

/// The standard ABI's version, asked of the MPI library in the process if
/// it has `MPI_Abi_get_version` (MPI-5; callable before `MPI_Init`). Looked
/// up by name, since an older MPI lacks the function altogether (and
/// never pmtrace's own, `next::lookup`).
fn abi_version() -> Option<c_int> {
    type AbiVersion = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
    let f = crate::next::lookup(c"PMPI_Abi_get_version");
    if f.is_null() {
        return None;
    }
    // SAFETY: MPI_Abi_get_version(int *abi_major, int *abi_minor).
    let f: AbiVersion = unsafe { core::mem::transmute::<*mut libc::c_void, AbiVersion>(f) };
    let (mut major, mut minor) = (-1, -1);
    // SAFETY: two writable ints.
    (unsafe { f(&mut major, &mut minor) } == 0).then_some(major)
}

/// The running MPI's version string.
pub fn running_version() -> Option<String> {
    // Larger than MPI_MAX_LIBRARY_VERSION_STRING of every MPI (Open MPI's
    // is 256, MPICH's 8192): the constant compiled in may be the other
    // family's.
    let mut buf = vec![0u8; 1 << 15];
    let mut len: c_int = 0;
    // SAFETY: a writable buffer larger than any implementation's maximum,
    // and an int for the length; callable before MPI_Init.
    let rc = unsafe {
        real::PMPI_Get_library_version(buf.as_mut_ptr().cast(), (&mut len as *mut c_int).cast())
    };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end.min(len.max(0) as usize)]).into_owned())
}

/// None when the running MPI fits this build; otherwise the warning.
pub fn mismatch() -> Option<String> {
    BUILT?;
    let version = running_version()?;
    let mpich = mpich_version(&version);
    crate::piggyback::isendrecv_quirks(
        mpich.is_some(),
        mpich.is_some_and(|v| v.starts_with("4.0")),
    );
    verdict(BUILT, running_family(abi_version(), &version), &version)
}

/// The release number of an MPICH version string ("MPICH Version: 4.0.2").
fn mpich_version(version: &str) -> Option<&str> {
    let rest = version.split("MPICH Version:").nth(1)?;
    rest.split_whitespace().next()
}

pub use crate::next::launcher_rank;

#[cfg(test)]
mod tests {
    use super::*;

    const OMPI: &str =
        "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022";
    const MPICH: &str = "MPICH Version:\t4.0.2\nMPICH Release date:\tThu Apr  7 12:34:45 CDT 2022\nMPICH ABI:\t14:2:2\n";

    #[test]
    fn mpich_releases_are_read_from_the_version_string() {
        assert_eq!(mpich_version(MPICH), Some("4.0.2"));
        assert_eq!(mpich_version("MPICH Version:      5.0.2\n"), Some("5.0.2"));
        assert_eq!(mpich_version(OMPI), None);
        assert_eq!(mpich_version("MVAPICH2 Version      :\t2.3.7"), None);
    }

    #[test]
    fn families_are_told_apart_by_their_version_strings() {
        assert_eq!(family_of(OMPI), Some(Family::OpenMpi));
        assert_eq!(family_of(MPICH), Some(Family::Mpich));
        assert_eq!(
            family_of("MVAPICH2 Version      :\t2.3.7"),
            Some(Family::Mpich)
        );
        assert_eq!(
            family_of("Intel(R) MPI Library 2021.10 for Linux* OS"),
            Some(Family::Mpich)
        );
        assert_eq!(family_of("Some Vendor MPI 1.0"), None);
    }

    #[test]
    fn the_standard_abi_is_told_by_its_version_not_its_vendor() {
        // MPICH 5's libmpi_abi.so and its libmpi.so.12 give the same version
        // string; only the first has an ABI version.
        assert_eq!(running_family(Some(1), MPICH), Some(Family::Abi));
        assert_eq!(running_family(Some(-1), MPICH), Some(Family::Mpich));
        assert_eq!(running_family(None, OMPI), Some(Family::OpenMpi));
        assert_eq!(
            running_family(Some(1), "Some Vendor MPI 1.0"),
            Some(Family::Abi)
        );
        assert_eq!(running_family(Some(-1), "Some Vendor MPI 1.0"), None);
    }

    #[test]
    fn only_a_known_other_family_is_a_mismatch() {
        let v = |built, abi, version| verdict(built, running_family(abi, version), version);
        assert_eq!(v(Some(Family::OpenMpi), None, OMPI), None);
        assert_eq!(v(Some(Family::Mpich), Some(-1), MPICH), None);
        assert_eq!(v(Some(Family::Abi), Some(1), MPICH), None);
        // Unknown on either side: no verdict, tracing goes on.
        assert_eq!(v(None, None, MPICH), None);
        assert_eq!(v(Some(Family::Mpich), None, "Some Vendor MPI 1.0"), None);
        let w = v(Some(Family::OpenMpi), None, MPICH).unwrap();
        assert_eq!(
            w,
            "this libpmtrace was built for Open MPI but the program runs MPICH \
             (MPICH Version: 4.0.2); tracing is off. Trace it with the library \
             for MPICH (`make mpich`: target/mpich/release/libpmtrace.so), or \
             with `pmtrace run`, which picks it"
        );
        assert!(v(Some(Family::Mpich), None, OMPI)
            .unwrap()
            .contains("runs Open MPI (Open MPI v4.1.4, package"));
        let w = v(Some(Family::Mpich), Some(1), MPICH).unwrap();
        assert!(
            w.starts_with("this libpmtrace was built for MPICH but the program runs the MPI-5 standard ABI (MPICH Version: 4.0.2)"),
            "{w}"
        );
        assert!(
            w.contains("`make abi`: target/abi/release/libpmtrace.so"),
            "{w}"
        );
        let w = v(Some(Family::Abi), Some(-1), MPICH).unwrap();
        assert!(w.contains("runs MPICH (MPICH"), "{w}");
    }
}
