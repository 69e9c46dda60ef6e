//! Which libpmtrace a launcher line needs. pmtrace builds one library per
//! MPI binary interface: Open MPI's (`libmpi.so.40`), MPICH's
//! (`libmpi.so.12`) and the MPI-5 standard ABI's (`libmpi_abi.so`). The
//! program's own dynamic section says which MPI it links; a program that
//! says nothing (a Python script, a static link) is judged by the
//! launcher's `--version`.
//!
//! Where the libraries are, relative to the `pmtrace` executable:
//!
//! ```text
//! installed (make install PREFIX=P)    build tree (make, make mpich, make abi)
//!   P/bin/pmtrace                        target/release/pmtrace
//!   P/lib/pmtrace/openmpi/libpmtrace.so  target/release/libpmtrace.so
//!   P/lib/pmtrace/mpich/libpmtrace.so    target/mpich/release/libpmtrace.so
//!   P/lib/pmtrace/abi/libpmtrace.so      target/abi/release/libpmtrace.so
//! ```

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use object::read::elf::{Dyn as _, ElfFile64, FileHeader};
use object::{elf, Endianness};

const LIBRARY: &str = "libpmtrace.so";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    OpenMpi,
    Mpich,
    Abi,
}

impl Flavour {
    pub const ALL: [Flavour; 3] = [Flavour::OpenMpi, Flavour::Mpich, Flavour::Abi];

    pub fn name(self) -> &'static str {
        match self {
            Flavour::OpenMpi => "Open MPI",
            Flavour::Mpich => "MPICH",
            Flavour::Abi => "the MPI-5 standard ABI",
        }
    }

    /// Its directory under `PREFIX/lib/pmtrace`.
    pub fn install_dir(self) -> &'static str {
        match self {
            Flavour::OpenMpi => "openmpi",
            Flavour::Mpich => "mpich",
            Flavour::Abi => "abi",
        }
    }

    /// What builds it in the source tree.
    pub fn make(self) -> &'static str {
        match self {
            Flavour::OpenMpi => "make",
            Flavour::Mpich => "make mpich",
            Flavour::Abi => "make abi",
        }
    }

    /// The flavour an MPI library's file name belongs to: the C library or
    /// one of its Fortran and C++ companions.
    pub fn of_soname(name: &str) -> Option<Flavour> {
        let stem = name.split(".so").next().unwrap_or(name);
        match stem {
            "libmpi_abi" | "libmpi_abi_f08" | "libmpi_abi_usempi" => Some(Flavour::Abi),
            "libmpi" if name.starts_with("libmpi.so.40") => Some(Flavour::OpenMpi),
            "libmpi_mpifh" | "libmpi_usempif08" | "libmpi_usempi_ignore_tkr" | "libmpi_cxx" => {
                Some(Flavour::OpenMpi)
            }
            "libmpi" if name.starts_with("libmpi.so.12") => Some(Flavour::Mpich),
            "libmpich" | "libmpifort" | "libmpicxx" => Some(Flavour::Mpich),
            _ => None,
        }
    }

    /// Where this flavour's library is, beside the `pmtrace` executable in
    /// `exe_dir` (installed or in the build tree).
    pub fn library(self, exe_dir: &Path) -> Option<PathBuf> {
        let up = exe_dir.parent().unwrap_or(exe_dir);
        let installed = up
            .join("lib/pmtrace")
            .join(self.install_dir())
            .join(LIBRARY);
        let built = match self {
            Flavour::OpenMpi => exe_dir.join(LIBRARY),
            Flavour::Mpich => up.join("mpich/release").join(LIBRARY),
            Flavour::Abi => up.join("abi/release").join(LIBRARY),
        };
        [installed, built].into_iter().find(|p| p.is_file())
    }
}

/// The `DT_NEEDED` entries of an ELF64 file, or None if it is not one.
pub fn needed(path: &Path) -> Option<Vec<String>> {
    let data = std::fs::read(path).ok()?;
    let file = ElfFile64::<Endianness>::parse(&*data).ok()?;
    let endian = file.endian();
    let header = file.elf_header();
    let sections = header.sections(endian, &*data).ok()?;
    let (dynamic, index) = sections.dynamic(endian, &*data).ok()??;
    let strings = sections.strings(endian, &*data, index).ok()?;
    let mut out = Vec::new();
    for d in dynamic {
        if d.tag(endian) == elf::DT_NEEDED {
            let name = d.string(endian, strings).ok()?;
            out.push(String::from_utf8_lossy(name).into_owned());
        }
    }
    Some(out)
}

/// An argument as a file: itself if it names one, else found on PATH.
fn as_file(arg: &OsStr) -> Option<PathBuf> {
    let p = Path::new(arg);
    if p.components().count() > 1 || p.is_file() {
        return p.is_file().then(|| p.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(p))
        .find(|c| c.is_file())
}

/// The MPI the first program of a launcher line that links one links, and
/// the library file that says so.
pub fn of_program(args: &[OsString]) -> Option<(Flavour, String)> {
    args.iter().find_map(|a| {
        if a.to_string_lossy().starts_with('-') {
            return None;
        }
        needed(&as_file(a)?)?
            .into_iter()
            .find_map(|n| Flavour::of_soname(&n).map(|f| (f, n)))
    })
}

/// The MPI a launcher belongs to, by what its `--version` says.
pub fn of_launcher(program: &OsStr) -> Option<Flavour> {
    let out = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&[out.stdout, out.stderr].concat()).into_owned();
    if text.contains("Open MPI") {
        Some(Flavour::OpenMpi)
    } else if text.contains("HYDRA") || text.contains("MPICH") {
        Some(Flavour::Mpich)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sonames_name_their_flavour() {
        assert_eq!(Flavour::of_soname("libmpi.so.40"), Some(Flavour::OpenMpi));
        assert_eq!(
            Flavour::of_soname("libmpi_mpifh.so.40"),
            Some(Flavour::OpenMpi)
        );
        assert_eq!(Flavour::of_soname("libmpi.so.12"), Some(Flavour::Mpich));
        assert_eq!(Flavour::of_soname("libmpifort.so.12"), Some(Flavour::Mpich));
        assert_eq!(Flavour::of_soname("libmpi_abi.so.1"), Some(Flavour::Abi));
        assert_eq!(Flavour::of_soname("libc.so.6"), None);
        assert_eq!(Flavour::of_soname("libmpi.so.20"), None);
    }

    #[test]
    fn libraries_are_found_installed_or_in_the_build_tree() {
        let root = std::env::temp_dir().join(format!("pmtrace-flavour-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let touch = |p: &Path| {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"").unwrap();
        };
        // Build tree: target/release holds pmtrace and the Open MPI library.
        let release = root.join("target/release");
        touch(&release.join(LIBRARY));
        touch(&root.join("target/abi/release").join(LIBRARY));
        assert_eq!(
            Flavour::OpenMpi.library(&release),
            Some(release.join(LIBRARY))
        );
        assert_eq!(Flavour::Mpich.library(&release), None);
        assert_eq!(
            Flavour::Abi.library(&release),
            Some(root.join("target/abi/release").join(LIBRARY))
        );
        // Installed: P/bin and P/lib/pmtrace/<flavour>.
        let bin = root.join("prefix/bin");
        let mpich = root.join("prefix/lib/pmtrace/mpich").join(LIBRARY);
        touch(&mpich);
        std::fs::create_dir_all(&bin).unwrap();
        assert_eq!(Flavour::Mpich.library(&bin), Some(mpich));
        assert_eq!(Flavour::OpenMpi.library(&bin), None);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_program_says_which_mpi_it_links() {
        // This test binary links no MPI; a launcher line of non-files and
        // options finds nothing either.
        let me = std::env::current_exe().unwrap();
        assert!(needed(&me)
            .unwrap()
            .iter()
            .any(|n| n.starts_with("libc.so")));
        let args = ["-np", "4", me.to_str().unwrap()].map(OsString::from);
        assert_eq!(of_program(&args), None);
        assert_eq!(needed(Path::new("/nonexistent")), None);
    }
}
