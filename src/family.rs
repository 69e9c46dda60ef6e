//! The binary interfaces to MPI that pmtrace knows, and how to tell which
//! one a loaded MPI library has.
//!
//! Handles are pointers to structures in Open MPI, integers in MPICH and
//! the libraries built on it (MVAPICH, Intel MPI, Cray MPICH), and
//! pointer-sized constants fixed by the standard in the MPI-5 ABI
//! (`libmpi_abi.so`, which MPICH 5 ships beside its own `libmpi.so.12`,
//! both with the same version string). So the library is asked, before
//! `MPI_Init` (both calls are allowed then): `MPI_Abi_get_version` gives a
//! version only in an ABI library (an MPI-5 library of another interface
//! answers -1), an Open MPI library defines `ompi_mpi_comm_world`, and the
//! version string names the MPICH family.

/// A binary interface to MPI: one capture runtime inside libpmtrace.so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Open MPI 4.1 and 5 (`libmpi.so.40`).
    OpenMpi,
    /// MPICH and its ABI-compatible derivatives (`libmpi.so.12`).
    Mpich,
    /// The MPI-5 standard ABI (`libmpi_abi.so`), whichever MPI provides it.
    Abi,
}

/// What a loaded MPI library says of itself.
#[derive(Debug, Clone, Default)]
pub struct Traits {
    /// `MPI_Abi_get_version`'s major version, if the library has it.
    pub abi_major: Option<i32>,
    /// It defines Open MPI's predefined objects.
    pub ompi_objects: bool,
    /// `MPI_Get_library_version`'s string.
    pub version: String,
}

/// The interface of a library with these traits, if pmtrace knows it.
pub fn family_of(t: &Traits) -> Option<Family> {
    if t.abi_major.is_some_and(|m| m >= 1) {
        Some(Family::Abi)
    } else if t.ompi_objects {
        Some(Family::OpenMpi)
    } else if ["MPICH", "MVAPICH", "Intel(R) MPI"]
        .iter()
        .any(|n| t.version.contains(n))
    {
        Some(Family::Mpich)
    } else {
        None
    }
}

/// The first line of a version string, its spaces folded: for messages.
pub fn first_line(version: &str) -> String {
    let words: Vec<&str> = version
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const OMPI: &str =
        "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022";
    const MPICH: &str = "MPICH Version:\t4.0.2\nMPICH Release date:\tThu Apr  7 12:34:45 CDT 2022\nMPICH ABI:\t14:2:2\n";

    fn traits(abi_major: Option<i32>, ompi_objects: bool, version: &str) -> Traits {
        Traits {
            abi_major,
            ompi_objects,
            version: version.into(),
        }
    }

    #[test]
    fn open_mpi_is_told_by_its_objects() {
        assert_eq!(family_of(&traits(None, true, OMPI)), Some(Family::OpenMpi));
        // Open MPI 5 has MPI_Abi_get_version and answers -1.
        assert_eq!(
            family_of(&traits(Some(-1), true, OMPI)),
            Some(Family::OpenMpi)
        );
    }

    #[test]
    fn the_mpich_family_is_told_by_its_version_string() {
        for v in [
            MPICH,
            "MVAPICH2 Version      :\t2.3.7",
            "Intel(R) MPI Library 2021.19 for Linux* OS",
            "MPI VERSION    : CRAY MPICH version 8.1.28.2 (ANL base 3.4a2)",
        ] {
            assert_eq!(
                family_of(&traits(None, false, v)),
                Some(Family::Mpich),
                "{v}"
            );
        }
        assert_eq!(family_of(&traits(None, false, "Some Vendor MPI 1.0")), None);
    }

    #[test]
    fn the_standard_abi_is_told_by_its_version_not_its_vendor() {
        // MPICH 5's libmpi_abi.so and its libmpi.so.12 give the same version
        // string; only the first has an ABI version.
        assert_eq!(family_of(&traits(Some(1), false, MPICH)), Some(Family::Abi));
        assert_eq!(
            family_of(&traits(Some(-1), false, MPICH)),
            Some(Family::Mpich)
        );
        assert_eq!(
            family_of(&traits(Some(1), false, "Some Vendor MPI 1.0")),
            Some(Family::Abi)
        );
        assert_eq!(
            family_of(&traits(Some(-1), false, "Some Vendor MPI 1.0")),
            None
        );
    }

    #[test]
    fn messages_quote_the_first_line_of_the_version() {
        assert_eq!(first_line(MPICH), "MPICH Version: 4.0.2");
        assert_eq!(first_line(""), "");
    }
}
