//! Writing a trace out in formats other tools (or people) read.
//!
//! [`text`] and [`merged`] are logs for people; [`otf2`], [`perfetto`] and
//! [`chrome`] feed viewers; [`timeline`] is a viewer of its own;
//! [`parquet`] writes tables for data frames and SQL. The viewer exports
//! and the tables all read a [`view::View`].

use std::io;
use std::path::PathBuf;

use thiserror::Error;

pub mod chrome;
pub mod merged;
pub mod otf2;
pub mod parquet;
pub mod perfetto;
pub mod text;
pub mod timeline;
pub mod view;

/// Why an export failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ExportError {
    #[error("cannot write {path}: {source}", path = .path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("cannot write the OTF2 archive: {0}")]
    Otf2(#[from] pmtrace_otf2::Otf2Error),
}
