//! Large text storage commands received in place: the data block of a `set` (add, replace,
//! cas) whose item gets a buffer of its own is read from the socket straight into that item
//! (mnemo_store::Incoming), not into the connection's input buffer and then copied.
//!
//! ```text
//!   "set k 0 0 102400\r\n" + first bytes   parse: Incomplete, and most of the block is still
//!                                          on the wire -> begin: the item is laid out, the
//!                                          buffered bytes go into it
//!   readv [rest of the value | input buffer]   until the value is whole (conn.rs `fill`)
//!   "\r\n" in the input buffer              -> finish: the item is linked in, STORED
//!   anything else there                     -> CLIENT_ERROR bad data chunk, nothing stored
//! ```
//!
//! The stream stays in step exactly as when the block is buffered: the same bytes are
//! consumed (line, block, two bytes after it) and the same reply is sent, by the same code
//! (command::write, super::store_reply). No lock is held while the value is read; until `finish` links it, the
//! item is the connection's alone, so a client that goes away half-way leaves nothing behind.

use mnemo_proto::text::{self, StoreKind};
use mnemo_proto::ErrorReply;
use mnemo_store::Incoming;

use crate::admin::stats::Counters;
use crate::command::write;
use crate::Shared;

/// A block with at least this much still to arrive is received in place; a shorter rest is
/// just buffered (the copy it saves would be small).
pub const MISSING_MIN: usize = 16 * 1024;

/// A storage command whose value is being received into its item.
pub struct LargeSet {
    inc: Incoming,
    kind: StoreKind,
    cas: u64,
    noreply: bool,
    /// Value bytes received so far.
    got: usize,
}

/// For the request at the front of `input`, a storage command `parse` is waiting for: its
/// item, if its value should be received in place, and how many bytes of `input` it took (its
/// line and the part of its value already buffered).
pub fn begin(input: &[u8], limits: &text::Limits, sh: &Shared) -> Option<(Box<LargeSet>, usize)> {
    let h = text::pending_store(input, limits)?;
    let buffered = input.len() - h.data_at;
    if h.len + 2 - buffered < MISSING_MIN {
        return None;
    }
    // cas under -C answers without storing anything (protocol/text.rs); append/prepend join values.
    let in_place = match h.kind {
        StoreKind::Set | StoreKind::Add | StoreKind::Replace => true,
        StoreKind::Cas => sh.config.use_cas,
        StoreKind::Append | StoreKind::Prepend => false,
    };
    if !in_place {
        return None;
    }
    let exp = sh.clock.item_expiry(h.exptime);
    let mut inc = sh.store.begin_value(h.key, h.flags, exp, h.len)?;
    // buffered < len + 2 - MISSING_MIN: all of it is value.
    inc.value_mut()[..buffered].copy_from_slice(&input[h.data_at..]);
    let set = LargeSet {
        inc,
        kind: h.kind,
        cas: h.cas,
        noreply: h.noreply,
        got: buffered,
    };
    Some((Box::new(set), input.len()))
}

impl LargeSet {
    /// The part of the value still to be read.
    pub fn rest_mut(&mut self) -> &mut [u8] {
        let got = self.got;
        &mut self.inc.value_mut()[got..]
    }

    pub fn received(&mut self, n: usize) {
        self.got += n;
        debug_assert!(self.got <= self.inc.value().len());
    }

    pub fn complete(&self) -> bool {
        self.got == self.inc.value().len()
    }

    /// The value is whole and `end` holds the two bytes after it: store it if they are
    /// "\r\n", and reply.
    pub fn finish(self, end: &[u8], sh: &Shared, c: &Counters, out: &mut Vec<u8>) {
        debug_assert!(self.complete());
        if end != b"\r\n" {
            sh.store.abandon(self.inc);
            if !self.noreply {
                ErrorReply::BadDataChunk.write(out);
            }
            return;
        }
        let mut key = [0u8; mnemo_store::MAX_KEY_LEN];
        let key = {
            let k = self.inc.key();
            key[..k.len()].copy_from_slice(k);
            &key[..k.len()]
        };
        let mode = super::mode_of(self.kind, self.cas);
        let result = sh.store.finish_value(self.inc, mode, sh.clock.now());
        super::store_reply(write::received(key, mode, result, sh, c), self.noreply, out);
    }
}
