//! mnemo-client: a Rust client for memcached-protocol servers (mnemod, memcached).
//!
//! It owns what a memcached deployment leaves to its clients: which server holds a key
//! (libmemcached-compatible weighted ketama, optional `{hash tags}`), how requests hit the wire
//! (one vectored write per batch, TCP_NODELAY, pipelined multi-key commands fanned out to all
//! servers at once), and how values become bytes and flags (a pluggable serde, zstd or zlib
//! compression with a threshold, a minimum saving and already-compressed detection; flag
//! profiles for the PHP, Perl, Java and Python client families, [`profile`]).
//!
//! ```text
//!   Client::get_multi(keys)
//!     ├─ ketama: key -> server (ejected servers skipped)      ketama.rs
//!     ├─ per server, concurrently:                            ops.rs, client.rs
//!     │    pool -> Conn: one writev of all requests,          node.rs, conn.rs
//!     │          replies decoded as they arrive               codec.rs (I/O-free)
//!     └─ merge; values decompressed by flags, then the serde  serde.rs, compress.rs
//! ```
//!
//! [`Client::fget`] runs a server-side filter (mnemod's `fget`) over keys on many servers and
//! hands back each server's partial result for a merge ([`filter`]).
//!
//! [`Client`] is async (tokio); [`blocking::Client`] is the same client for code without a
//! runtime.

pub mod admin;
pub mod blocking;
mod client;
pub mod codec;
pub mod compress;
mod conn;
mod error;
mod fanout;
pub mod filter;
mod inflate;
pub mod ketama;
mod node;
mod ops;
pub mod profile;
pub mod serde;
mod values;

pub use admin::{KeyInfo, PerServer};
pub use client::{Client, Config};
pub use codec::StoreCmd;
pub use compress::{Algorithm, Compression};
pub use error::{Error, Result};
pub use filter::FilterPart;
pub use ketama::ServerSpec;
pub use ops::{Item, SetOptions, StoreOutcome};
pub use profile::FlagProfile;
pub use serde::{FlagSerde, Serde, Serialization, Value, ValueRef};
