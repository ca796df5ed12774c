//! The client's errors: one enum, each variant naming the server it came from where there is one.

use crate::codec::CodecError;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Empty, longer than 250 bytes, or holding a space or control character.
    #[error("invalid key {0:?}: 1 to 250 bytes, no spaces or control characters")]
    BadKey(String),
    /// A filter name for `fget` that the text protocol cannot carry (the key rules apply).
    #[error("invalid filter name {0:?}: 1 to 250 bytes, no spaces or control characters")]
    BadFilter(String),
    #[error("{server}: {source}")]
    Io {
        server: String,
        source: std::io::Error,
    },
    #[error("{server}: no reply within {after:?}")]
    Timeout { server: String, after: Duration },
    #[error("{server}: {source}")]
    Protocol { server: String, source: CodecError },
    /// `ERROR`, `CLIENT_ERROR ...`, `SERVER_ERROR ...` (or `BUSY ...`): the server's whole line.
    #[error("{server} replied: {line}")]
    Server { server: String, line: String },
    /// Every server that could own the key is ejected (or the list is empty).
    #[error("no live server")]
    NoServers,
    /// A stored value could not be turned back into a [`crate::Value`].
    #[error("cannot decode value with flags {flags}: {why}")]
    Decode { flags: u32, why: String },
    /// A value the client's profile has no way to store (a float under the python profile,
    /// a pickle for PHP clients, a NaN for PHP).
    #[error("cannot store this value: {0}")]
    Unsupported(String),
    #[error("configuration: {0}")]
    Config(String),
}

impl Error {
    /// Whether the server (or the path to it) failed, as opposed to the request or the value:
    /// these count towards ejecting the server.
    pub fn is_server_failure(&self) -> bool {
        matches!(
            self,
            Error::Io { .. } | Error::Timeout { .. } | Error::Protocol { .. }
        )
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
