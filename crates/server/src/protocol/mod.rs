//! The three protocols memcached speaks, over the command layer (crate::command): each parses
//! a request (with mnemo_proto), calls the command, and encodes the answer in its own reply
//! format. The connection layer (conn.rs, udp.rs) hands them bytes.
//!
//! ```text
//!   text.rs     the text protocol: storage, retrieval, arithmetic, admin dispatch; Next, the
//!               "what next" every protocol answers the connection with
//!   meta.rs     mg ms md ma mn me (its flags and replies)
//!   binary.rs   the binary protocol (binary/storage.rs the item commands, sasl.rs, stat.rs)
//! ```

pub(crate) mod binary;
pub(crate) mod meta;
pub(crate) mod text;
