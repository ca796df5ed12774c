//! What the store tells an observer about the items it evicts: memcached's `watch evictions`.
//! The server registers one [`EvictionWatch`] ([`Store::watch_evictions`]); the eviction
//! path asks it [`EvictionWatch::wants`] before it reads anything out of the item, so with
//! nobody watching an eviction costs that one call and nothing else.
//!
//! Reported: items a victim segment or a large item's own buffer drops to make room (the
//! evictions `stats` counts there). Not reported: items demoted to the flash tier (still
//! served), flashed items whose pages are reused (their keys live on flash only), and a
//! `touch`/`gat` whose item cannot be placed again (counted, with no segment to read from).
//!
//! [`Store::watch_evictions`]: crate::Store::watch_evictions

use crate::Time;

/// One item leaving by eviction (never by expiry, delete or flush).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evicted<'a> {
    pub key: &'a [u8],
    /// 0 = never expires; otherwise on the store's relative clock.
    pub exp: Time,
    /// Read since it was written (memcached's ITEM_FETCHED).
    pub fetched: bool,
    /// The value's length (what a client stored).
    pub value_len: usize,
    /// A lower bound of its last write: when its segment was opened (relative clock).
    pub written: Time,
}

/// Whoever watches evictions. Called with the item's shard lock held: an implementation must
/// not call into the store, and should only take locks no store caller holds.
pub trait EvictionWatch: Send + Sync {
    /// Whether anyone watches now (cheap: asked on every eviction).
    fn wants(&self) -> bool;
    /// An item was evicted at `now` (relative clock).
    fn evicted(&self, item: &Evicted<'_>, now: Time);
}
