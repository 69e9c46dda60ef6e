//! The MPI library the process runs, as this build sees it once the front
//! has bound it (src/front.rs decides the interface): its version string,
//! and the quirks of its release that the piggyback layer works around.

use crate::mpi::real;

/// The running MPI's version string.
pub fn running_version() -> Option<String> {
    // SAFETY: the library's function, with the buffer and length
    // `library_version` hands it; callable before MPI_Init.
    crate::next::library_version(|buf, len| unsafe {
        real::PMPI_Get_library_version(buf.cast(), len.cast())
    })
}

/// Sets the piggyback layer's quirks for the running release.
pub fn quirks() {
    let (blind, types_broken) = isendrecv_quirks_of(&running_version().unwrap_or_default());
    crate::piggyback::isendrecv_quirks(blind, types_broken);
}

/// Whether a release's `MPI_Isendrecv(_replace)` leave their statuses
/// unfilled, and whether they mishandle a derived send type (see
/// `piggyback::isendrecv_quirks`). MPICH: the first always, the second
/// in 4.0. Intel MPI, built on MPICH, takes both: traced without them,
/// its Isendrecv of 8 KiB delivered the wrong bytes (tests/progs/bigmsg.c).
fn isendrecv_quirks_of(version: &str) -> (bool, bool) {
    if version.contains("Intel(R) MPI") {
        return (true, true);
    }
    let mpich = mpich_version(version);
    (mpich.is_some(), mpich.is_some_and(|v| v.starts_with("4.0")))
}

/// The release number of an MPICH version string ("MPICH Version: 4.0.2").
fn mpich_version(version: &str) -> Option<&str> {
    let rest = version.split("MPICH Version:").nth(1)?;
    rest.split_whitespace().next()
}

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
    fn isendrecv_quirks_follow_the_release() {
        assert_eq!(isendrecv_quirks_of(MPICH), (true, true));
        assert_eq!(
            isendrecv_quirks_of("MPICH Version:      5.0.2\n"),
            (true, false)
        );
        assert_eq!(
            isendrecv_quirks_of("Intel(R) MPI Library 2021.19 for Linux* OS\n"),
            (true, true)
        );
        assert_eq!(isendrecv_quirks_of(OMPI), (false, false));
    }
}
