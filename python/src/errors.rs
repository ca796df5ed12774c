//! Rust client errors -> the exception classes of `mnemo.exceptions` (defined in Python so they
//! can also derive from the built-in ConnectionError, TimeoutError and ValueError), by memcached's
//! reply classes: `ERROR`, `CLIENT_ERROR ...`, `SERVER_ERROR ...`.

use mnemo_client::Error;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let m = MODULE.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("mnemo.exceptions")?.unbind())
    })?;
    Ok(m.bind(py).getattr(name)?.cast_into::<PyType>()?)
}

/// Which `mnemo.exceptions` class an error is raised as.
fn class_name(e: &Error) -> &'static str {
    match e {
        Error::BadKey(_) | Error::BadFilter(_) | Error::Unsupported(_) => "IllegalInputError",
        Error::Io { .. } => "NetworkError",
        Error::Timeout { .. } => "TimeoutError",
        Error::NoServers => "NoServersError",
        Error::Protocol { .. } => "UnexpectedReplyError",
        Error::Decode { .. } => "DecodeError",
        Error::Config(_) => "ConfigurationError",
        Error::Server { line, .. } => {
            if line == "ERROR" {
                "UnknownCommandError"
            } else if line.starts_with("CLIENT_ERROR") {
                "ClientError"
            } else if line.starts_with("SERVER_ERROR") || line.starts_with("BUSY") {
                "ServerError"
            } else {
                // A well-formed reply that does not answer the command (NOT_STORED to a set...).
                "UnexpectedReplyError"
            }
        }
    }
}

pub(crate) fn to_py(py: Python<'_>, e: Error) -> PyErr {
    match class(py, class_name(&e)) {
        Ok(cls) => PyErr::from_type(cls, e.to_string()),
        Err(import_failed) => import_failed,
    }
}

/// An `IllegalInputError` for a bad argument found before anything is sent.
pub(crate) fn illegal(py: Python<'_>, msg: String) -> PyErr {
    match class(py, "IllegalInputError") {
        Ok(cls) => PyErr::from_type(cls, msg),
        Err(e) => e,
    }
}
