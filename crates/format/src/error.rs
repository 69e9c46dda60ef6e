//! Errors a reader reports. Each displays as one line.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatError {
    #[error("truncated trace: {0} ends early")]
    Truncated(String),
    #[error("corrupt trace: {0}")]
    Corrupt(String),
    #[error("unsupported trace format version {0} (this pmtrace reads version {ver})", ver = crate::FORMAT_VERSION)]
    Version(u32),
}
