//! Why loading or calling a filter failed. A call's error becomes the request's reply
//! (`SERVER_ERROR filter <reason>`); a load error is logged and the previous filter is kept.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    // --- loading ---
    #[error("cannot read filter {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("filter {path} is not a usable WebAssembly module: {reason}")]
    BadModule { path: PathBuf, reason: String },
    #[error("cannot load native filter {path}: {reason}")]
    BadLibrary { path: PathBuf, reason: String },
    #[error("filter {path} speaks ABI version {found}, this server speaks {expected}")]
    AbiVersion {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    #[error("cannot set up the WebAssembly engine: {0}")]
    Engine(String),

    // --- one call ---
    #[error("timeout")]
    Timeout,
    #[error("out of memory")]
    OutOfMemory,
    #[error("trapped")]
    Trapped,
    #[error("output too large")]
    OutputTooLarge,
    #[error("bad result")]
    BadResult,
    /// The filter reported an error itself; the message is sanitized (printable ASCII,
    /// at most [`crate::MESSAGE_MAX`] bytes).
    #[error("failed: {0}")]
    Failed(String),
    /// A brief call gave up (its epoch ran out, or it needed memory a brief call is not
    /// given): never a reply, [`crate::Filter::call_brief`] answers None for it.
    #[error("not brief")]
    NotBrief,
}

impl FilterError {
    /// Whether this is a per-call failure (as opposed to a load failure).
    pub fn is_call_error(&self) -> bool {
        matches!(
            self,
            FilterError::Timeout
                | FilterError::OutOfMemory
                | FilterError::Trapped
                | FilterError::OutputTooLarge
                | FilterError::BadResult
                | FilterError::Failed(_)
        )
    }
}

/// A filter's message made safe for a reply line: printable ASCII only, bounded.
pub(crate) fn sanitize(msg: &[u8]) -> String {
    msg.iter()
        .take(crate::MESSAGE_MAX)
        .map(|&b| {
            if (0x20..0x7f).contains(&b) {
                b as char
            } else {
                '?'
            }
        })
        .collect()
}
