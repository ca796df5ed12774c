//! The binary protocol (chosen per connection when its first byte is 0x80), with SASL PLAIN.
//! Placeholder until the binary protocol lands: every request is refused and the connection
//! closed, so a binary client fails fast instead of hanging.

use crate::stats::Counters;
use crate::Shared;

/// Per-connection state of the binary protocol (authentication).
#[derive(Default)]
pub struct BinSession {
    pub authenticated: bool,
}

/// What the connection does after one step.
#[derive(Debug, PartialEq, Eq)]
pub enum BinNext {
    /// This many input bytes were handled (replies, if any, appended to `out`).
    Consumed(usize),
    /// Buffer at least this many bytes in total, then call again.
    Incomplete(usize),
    /// Drop the connection (after writing what is in `out`).
    Close,
}

/// Handle at most one request from the front of `input`.
pub fn step(_input: &[u8], _session: &mut BinSession, _sh: &Shared, _c: &Counters, _out: &mut Vec<u8>) -> BinNext {
    BinNext::Close
}
