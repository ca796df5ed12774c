//! mnemo-proto: I/O-free codecs for the memcached protocols.
//!
//! This crate owns the bytes on the wire and nothing else: no sockets, no clock, no store.
//! The server side turns a buffer into a [`text::Request`] that borrows from it (or says how
//! many more bytes it needs), and offers helpers that append replies to an output buffer.
//!
//! ```text
//!   socket bytes ──> text::parse(buf) ──> Parsed::Request(req, consumed)   execute, reply
//!                                    ├──> Parsed::Incomplete               read more
//!                                    ├──> Parsed::Error(err, consumed, …)  memcached's error line
//!                                    └──> Parsed::Close                    drop the connection
//! ```
//!
//! Numbers are parsed with the exact rules of the C library calls memcached uses
//! (`strtol`/`strtoul`/`strtoull` plus memcached's `safe_*` wrappers), so that a drop-in
//! replacement accepts and refuses exactly the same command lines.

pub mod binary;
pub mod meta;
pub mod num;
pub mod reply;
mod request;
pub mod text;
mod tokens;

pub use reply::ErrorReply;
