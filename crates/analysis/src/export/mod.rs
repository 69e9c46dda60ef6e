//! Writing a trace out in formats other tools (or people) read.
//!
//! Only [`text`] exists so far; OTF2, Perfetto and Chrome JSON come later.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

pub mod merged;
pub mod text;

/// Why an export failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ExportError {
    #[error("cannot write {path}: {source}", path = .path.display())]
    Io { path: PathBuf, source: io::Error },
}
