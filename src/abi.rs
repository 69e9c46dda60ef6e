//! Whether the process runs the MPI this library was built for.
//!
//! A PMPI tool is bound to one MPI's binary interface: handles are pointers
//! to structures in Open MPI and integers in MPICH and the libraries built
//! on it (MVAPICH, Intel MPI, Cray MPICH), and the constants the shim reads
//! at build time are that family's. Preloaded under a program of the other
//! family, the library would pass handles MPI cannot read: Open MPI crashes,
//! MPICH aborts with "Invalid communicator". This happens easily on a
//! machine with both MPIs (module systems, distribution packages side by
//! side), so `MPI_Init` first asks `MPI_Get_library_version`, which MPI
//! allows before initialisation, and on a mismatch leaves tracing off: the
//! program runs as if untraced, and rank 0 says why in one line.

use crate::wrappers::real;
use core::ffi::c_int;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    OpenMpi,
    /// MPICH and its ABI-compatible derivatives.
    Mpich,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::OpenMpi => "Open MPI",
            Family::Mpich => "MPICH",
        }
    }

    /// The compiler wrapper that builds against this family on Debian-like
    /// systems, for the warning's hint.
    fn mpicc(self) -> &'static str {
        match self {
            Family::OpenMpi => "mpicc.openmpi",
            Family::Mpich => "mpicc.mpich",
        }
    }
}

/// The family this library was compiled against (None: another MPI, whose
/// version string is not checked).
pub const BUILT: Option<Family> = if cfg!(mpi_impl = "openmpi") {
    Some(Family::OpenMpi)
} else if cfg!(mpi_impl = "mpich") {
    Some(Family::Mpich)
} else {
    None
};

/// The family a library version string names, if it is one of the two.
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

/// What is wrong when a library built for `built` runs under `version`.
pub fn verdict(built: Option<Family>, version: &str) -> Option<String> {
    let (built, running) = (built?, family_of(version)?);
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
         tracing is off. Build pmtrace with MPICC={} to trace it",
        built.name(),
        running.name(),
        running.mpicc()
    ))
}

/// The running MPI's version string.
fn running_version() -> Option<String> {
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
    verdict(BUILT, &running_version()?)
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

#[cfg(test)]
mod tests {
    use super::*;

    const OMPI: &str =
        "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022";
    const MPICH: &str = "MPICH Version:\t4.0.2\nMPICH Release date:\tThu Apr  7 12:34:45 CDT 2022\nMPICH ABI:\t14:2:2\n";

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
    fn only_a_known_other_family_is_a_mismatch() {
        assert_eq!(verdict(Some(Family::OpenMpi), OMPI), None);
        assert_eq!(verdict(Some(Family::Mpich), MPICH), None);
        // Unknown on either side: no verdict, tracing goes on.
        assert_eq!(verdict(None, MPICH), None);
        assert_eq!(verdict(Some(Family::Mpich), "Some Vendor MPI 1.0"), None);
        let w = verdict(Some(Family::OpenMpi), MPICH).unwrap();
        assert_eq!(
            w,
            "this libpmtrace was built for Open MPI but the program runs MPICH \
             (MPICH Version: 4.0.2); tracing is off. Build pmtrace with \
             MPICC=mpicc.mpich to trace it"
        );
        assert!(verdict(Some(Family::Mpich), OMPI)
            .unwrap()
            .contains("runs Open MPI (Open MPI v4.1.4, package"));
    }
}
