//! The error a trace read can end with. Each one displays as a single line
//! naming the file and, where there is one, the byte offset.

use std::io;
use std::path::PathBuf;

use pmtrace_format::FormatError;
use thiserror::Error;

/// Why a trace directory could not be read.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The directory or one of its files could not be read at all.
    #[error("cannot read {path}: {source}", path = .path.display())]
    Io { path: PathBuf, source: io::Error },
    /// The directory holds no `rank-NNNNN.pmt` file.
    #[error("no pmtrace rank files (rank-NNNNN.pmt) in {dir}", dir = .dir.display())]
    NoRankFiles { dir: PathBuf },
    /// A rank of the world has no file.
    #[error("incomplete trace: {file} is missing from {dir} (world size {world_size})", dir = .dir.display())]
    MissingRank {
        dir: PathBuf,
        file: String,
        world_size: u32,
    },
    /// A file ends before its own layout says it should.
    #[error("truncated trace: {file}: {what}")]
    Truncated { file: String, what: String },
    /// A checksum, magic number, length or record does not make sense.
    #[error("corrupt trace: {file}: {what}")]
    Corrupt { file: String, what: String },
    /// The file was written by a pmtrace with another record layout.
    #[error("{file}: unsupported trace format version {version} (this pmtrace reads version {ours})", ours = pmtrace_format::FORMAT_VERSION)]
    Version { file: String, version: u32 },
}

impl ReadError {
    pub fn corrupt(file: &str, what: impl Into<String>) -> ReadError {
        ReadError::Corrupt {
            file: file.to_owned(),
            what: what.into(),
        }
    }

    /// Attaches a file name (and a place within it) to a format-level error.
    pub fn from_format(file: &str, err: FormatError, place: Option<String>) -> ReadError {
        let with_place = |what: String| match &place {
            Some(p) => format!("{what} {p}"),
            None => what,
        };
        match err {
            FormatError::Truncated(what) => ReadError::Truncated {
                file: file.to_owned(),
                what: with_place(format!("{what} ends early")),
            },
            FormatError::Corrupt(what) => ReadError::corrupt(file, with_place(what)),
            FormatError::Version(version) => ReadError::Version {
                file: file.to_owned(),
                version,
            },
            other => ReadError::corrupt(file, with_place(other.to_string())),
        }
    }
}
