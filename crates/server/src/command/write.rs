//! The storage commands: set, add, replace, append, prepend and cas in every protocol (text
//! `set`, its in-place large form protocol/text/largeset.rs, meta `ms`, binary SET/ADD/REPLACE), and a
//! storage command refused before its data was read (too large).
//!
//! Counting, as memcached 1.6.18 does (tests/test_command_counters.py):
//!
//! ```text
//!   stats detail set   text and binary, before the store (a failed store is recorded too)
//!   cmd_set            once the item is allocated: not for a store that finds no memory or
//!                      is too large; an append/prepend whose join fails still counts
//!   cas_hits / cas_badval / cas_misses   stored / EXISTS / NOT_FOUND of a cas
//!   store_no_memory / store_too_large    text and meta only: binary counts neither
//! ```
//!
//! A `set` that fails leaves no old value readable: the store drops it itself
//! (mnemo_store::Store::store); a set refused before it reached the store, and a binary SET
//! with a CAS (a compare-and-swap to the store, a set to memcached's failure rule:
//! `Store::drop_on_failure`), delete here.

use mnemo_store::{Mode, StoreError, StoreOutcome, Time};

use super::{Answer, Proto};
use crate::admin::detail::Event;
use crate::admin::stats::{bump, Counters};
use crate::Shared;

/// A storage command as parsed.
pub(crate) struct Store<'a> {
    pub mode: Mode,
    pub key: &'a [u8],
    pub flags: u32,
    pub exp: Time,
    pub data: &'a [u8],
    /// ms I: a cas carrying an older CAS still lands, as a stale item (see [`store`]).
    pub stale_if_older: bool,
    /// A store that fails (too large, no memory) drops the key's old value, as a plain set's
    /// failure does in the store itself: memcached's binary SET with a CAS.
    pub drop_on_failure: bool,
}

/// A storage command's outcome, for the protocol to encode.
// The variants are the protocol's replies (STORED, NOT_STORED, EXISTS, ...).
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Stored {
    Stored {
        cas: u64,
    },
    NotStored,
    /// A cas found the item under another CAS.
    Exists,
    /// A cas found no item.
    NotFound,
    TooLarge,
    NoMemory,
}

/// Stores `s` by its mode's rules and counts it.
#[inline]
pub(crate) fn store(s: &Store<'_>, proto: Proto, sh: &Shared, c: &Counters) -> Answer<Stored> {
    store_with(s, None, proto, sh, c)
}

/// [`store`] whose new version takes the CAS `cas_in` when given (ms E, memcached 1.6.27).
#[inline]
pub(crate) fn store_with(
    s: &Store<'_>,
    cas_in: Option<u64>,
    proto: Proto,
    sh: &Shared,
    c: &Counters,
) -> Answer<Stored> {
    // `watch`: one relaxed load and a branch while nobody watches (watch.rs).
    if sh.watch.flags() != 0 {
        return watched(s, cas_in, proto, sh, c);
    }
    store_now(s, cas_in, proto, sh, c)
}

/// [`store`] while someone watches: memcached logs the lookup a store makes first
/// (fetchers), then the outcome (mutations).
#[cold]
#[inline(never)]
fn watched(
    s: &Store<'_>,
    cas_in: Option<u64>,
    proto: Proto,
    sh: &Shared,
    c: &Counters,
) -> Answer<Stored> {
    crate::watch::looked_up(sh, s.key);
    let answer = store_now(s, cas_in, proto, sh, c);
    if let Answer::Now(outcome) = &answer {
        // A joined value is logged at its new length (memcached logs the item it linked).
        let joined = matches!(
            (s.mode, outcome),
            (Mode::Append | Mode::Prepend, Stored::Stored { .. })
        );
        let size = if joined {
            sh.store
                .peek(s.key, sh.clock.now(), |it| it.value.len())
                .hit()
        } else {
            None
        };
        log_outcome(
            s.key,
            s.mode,
            *outcome,
            s.exp,
            size.unwrap_or(s.data.len()),
            sh,
        );
    }
    answer
}

/// A store's outcome for `watch mutations`; a store refused before the store (too large, no
/// memory) is not logged, as memcached logs only what reached its store call.
fn log_outcome(key: &[u8], mode: Mode, outcome: Stored, exp: Time, size: usize, sh: &Shared) {
    let status = match outcome {
        Stored::Stored { .. } => "stored",
        Stored::NotStored => "not_stored",
        Stored::Exists => "exists",
        Stored::NotFound => "not_found",
        Stored::TooLarge | Stored::NoMemory => return,
    };
    if sh.watch.wants(crate::watch::MUTATIONS) {
        crate::watch::stored(sh, key, mode, status, exp, size);
    }
}

fn store_now(
    s: &Store<'_>,
    cas_in: Option<u64>,
    proto: Proto,
    sh: &Shared,
    c: &Counters,
) -> Answer<Stored> {
    record(s.key, proto, sh);
    let now = sh.clock.now();
    let result = match s.mode {
        // memcached -C: items hold no CAS, so a text cas can match none: it fails on any
        // item there is. (Binary ignores a CAS under -C; it never asks for one.)
        Mode::Cas(_) if !sh.config.use_cas && proto == Proto::Text => {
            Ok(if sh.store.get(s.key, now, |_| ()).is_hit() {
                StoreOutcome::Exists
            } else {
                StoreOutcome::NotFound
            })
        }
        mode => sh
            .store
            .store_cas(mode, s.key, s.flags, s.exp, s.data, now, cas_in),
    };
    let result = match (result, s.mode, s.stale_if_older) {
        (Ok(StoreOutcome::Exists), Mode::Cas(want), true) => stale_write(s, want, cas_in, sh, now),
        (Ok(StoreOutcome::Stored { cas }), ..) if cas_in.is_some() => {
            // The chosen CAS may be one an earlier version of the key had: its marks (stale,
            // win sent) must not pass to this new version.
            sh.marks.set(s.key, cas, crate::marks::Mark::default());
            result
        }
        (result, ..) => result,
    };
    if result.is_err() && s.drop_on_failure {
        sh.store.delete(s.key, now);
    }
    Answer::Now(count(s.mode, result, proto, c))
}

/// ms I with a CAS older than the item's: the write still lands, but as a stale item that
/// keeps the TTL and the "win token sent" state of the item it replaces (memcached), so
/// readers go on seeing X and Z and nobody is handed a second W. A CAS that is not older
/// stays EXISTS.
fn stale_write(
    s: &Store<'_>,
    want: u64,
    cas_in: Option<u64>,
    sh: &Shared,
    now: Time,
) -> Result<StoreOutcome, StoreError> {
    let old = sh.store.peek(s.key, now, |it| (it.cas, it.exp)).hit();
    let Some((have, old_exp)) = old.filter(|&(have, _)| want < have) else {
        return Ok(StoreOutcome::Exists);
    };
    let win_sent = sh.marks.get(s.key, have).win_sent;
    let result = sh
        .store
        .store_cas(Mode::Set, s.key, s.flags, old_exp, s.data, now, cas_in);
    if let Ok(StoreOutcome::Stored { cas }) = result {
        sh.marks.set(
            s.key,
            cas,
            crate::marks::Mark {
                stale: true,
                win_sent,
            },
        );
    }
    result
}

/// A text value received in place (protocol/text/largeset.rs) was linked in with `result` (the store
/// call is `finish_value`, the value being in its item already): count it as [`store`] would.
pub(crate) fn received(
    key: &[u8],
    mode: Mode,
    result: Result<StoreOutcome, StoreError>,
    sh: &Shared,
    c: &Counters,
) -> Answer<Stored> {
    record(key, Proto::Text, sh);
    let outcome = count(mode, result, Proto::Text, c);
    if sh.watch.wants(crate::watch::MUTATIONS) {
        // The value's length and expiry as stored (the lookup before it is not logged: it
        // happened as the value began to arrive).
        if let Some((exp, size)) = sh
            .store
            .peek(key, sh.clock.now(), |it| (it.exp, it.value.len()))
            .hit()
        {
            log_outcome(key, mode, outcome, exp, size, sh);
        }
    }
    Answer::Now(outcome)
}

/// A storage command refused before its data was read: its value is over -I.
pub(crate) fn refused_too_large(
    key: &[u8],
    mode: Mode,
    proto: Proto,
    sh: &Shared,
    c: &Counters,
) -> Answer<Stored> {
    if proto != Proto::Binary {
        bump(&c.store_too_large, 1);
    }
    // memcached: a failed set must not leave the old value readable.
    if mode == Mode::Set {
        sh.store.delete(key, sh.clock.now());
    }
    Answer::Now(Stored::TooLarge)
}

/// `stats detail` set: text and binary (meta records none, as memcached 1.6.18).
pub(super) fn record(key: &[u8], proto: Proto, sh: &Shared) {
    if proto != Proto::Meta {
        sh.detail
            .record(key, sh.config.prefix_delimiter, Event::Set);
    }
}

fn count(
    mode: Mode,
    result: Result<StoreOutcome, StoreError>,
    proto: Proto,
    c: &Counters,
) -> Stored {
    if result.is_ok() || matches!(mode, Mode::Append | Mode::Prepend) {
        bump(&c.cmd_set, 1);
    }
    let counted = proto != Proto::Binary;
    match result {
        Ok(StoreOutcome::Stored { cas }) => {
            if matches!(mode, Mode::Cas(_)) {
                bump(&c.cas_hits, 1);
            }
            Stored::Stored { cas }
        }
        Ok(StoreOutcome::NotStored) => Stored::NotStored,
        Ok(StoreOutcome::Exists) => {
            bump(&c.cas_badval, 1);
            Stored::Exists
        }
        Ok(StoreOutcome::NotFound) => {
            bump(&c.cas_misses, 1);
            Stored::NotFound
        }
        Err(StoreError::TooLarge) => {
            if counted {
                bump(&c.store_too_large, 1);
            }
            Stored::TooLarge
        }
        Err(StoreError::OutOfMemory) => {
            if counted {
                bump(&c.store_no_memory, 1);
            }
            Stored::NoMemory
        }
    }
}
