//! The store's vocabulary: what its callers pass in and get back (modes, outcomes, errors,
//! items as seen under a shard's lock, lookups).

use crate::{FlashRef, Pages};

/// Seconds on the server's relative clock.
pub type Time = u32;

/// What `Store::get_located` found: the answer, or where on flash the value is (with the
/// caller's closure handed back, for `Store::finish_get`).
pub enum Located<R, F> {
    Done(Lookup<R>),
    Flash { fref: FlashRef, fetched: bool, f: F },
}

/// A key's hash, as `Store::key_hash` gives it for `Store::prefetch_hashed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyHash(pub(crate) u64);

/// How `store` treats an existing item (memcached's storage commands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOutcome {
    Stored { cas: u64 },
    NotStored,
    Exists,
    NotFound,
}

#[derive(thiserror::Error, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreError {
    #[error("object too large for cache")]
    TooLarge,
    #[error("out of memory storing object")]
    OutOfMemory,
}

/// A stored item as seen under the shard lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item<'a> {
    pub flags: u32,
    pub value: &'a [u8],
    /// 0 when CAS is disabled.
    pub cas: u64,
    /// 0 = never expires.
    pub exp: Time,
    /// Read before this access (memcached's meta `h` flag); false on writes' results.
    pub fetched: bool,
    /// Set for a large item in pages of its own: the reader may lend them to the kernel
    /// rather than copy the value (`Pages::lend`).
    pub pages: Option<Pages<'a>>,
}

/// Result of a read. `Expired` and `Flushed` mean the key was there but is dead (memcached's
/// get_expired / get_flushed); treat them as a miss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup<R> {
    Hit(R),
    Miss,
    Expired,
    Flushed,
}

impl<R> Lookup<R> {
    pub fn hit(self) -> Option<R> {
        match self {
            Lookup::Hit(r) => Some(r),
            _ => None,
        }
    }
    pub fn is_hit(&self) -> bool {
        matches!(self, Lookup::Hit(_))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeltaError {
    NotFound,
    NonNumeric,
}
