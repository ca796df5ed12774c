//! Binary APPEND/PREPEND, which may carry a CAS and are held to memcached's exact item size
//! rule, and meta `ms` in append/prepend mode with C, E, N or s ([`meta_join`]). (Text
//! append/prepend and a plain `ms MA` are storage modes: command/write.rs.)
//!
//! The store has no CAS form of append, so a guarded one is a read, a compare and a
//! CAS-guarded write of the joined value: a write that lands in between changes the CAS and
//! the guarded write fails with "exists", as it would in memcached.
//!
//! Counted as every storage command (cmd_set, `stats detail` set): memcached allocates the
//! appended piece before it joins, so a join that fails still counts.

use mnemo_proto::text::Limits;
use mnemo_store::{Mode, StoreError, StoreOutcome, Time};

use super::write::{record, Stored};
use super::{Answer, Proto};
use crate::admin::stats::{bump, Counters};
use crate::Shared;

pub(crate) struct Concat<'a> {
    pub append: bool,
    pub key: &'a [u8],
    pub data: &'a [u8],
    /// Join only onto an item with this CAS.
    pub cas: Option<u64>,
}

/// Answers Stored, Exists (the CAS differs) or NotStored (missing, too large, no memory).
pub(crate) fn concat(j: &Concat<'_>, proto: Proto, sh: &Shared, c: &Counters) -> Answer<Stored> {
    bump(&c.cmd_set, 1);
    record(j.key, proto, sh);
    let outcome = match j.cas {
        Some(cas) => guarded(j, cas, sh),
        None if !joined_fits(j.key, j.data.len(), sh) => StoreOutcome::NotStored,
        None => {
            let mode = if j.append {
                Mode::Append
            } else {
                Mode::Prepend
            };
            // The store answers NotStored itself when the result would be too large or finds
            // no memory, as memcached does for append/prepend.
            sh.store
                .store(mode, j.key, 0, 0, j.data, sh.clock.now())
                .unwrap_or(StoreOutcome::NotStored)
        }
    };
    Answer::Now(match outcome {
        StoreOutcome::Stored { cas } => Stored::Stored { cas },
        StoreOutcome::Exists => Stored::Exists,
        StoreOutcome::NotStored | StoreOutcome::NotFound => Stored::NotStored,
    })
}

fn limits(sh: &Shared) -> Limits {
    Limits {
        item_size_max: sh.config.item_size_max,
        use_cas: sh.config.use_cas,
    }
}

/// Whether appending `extra` bytes keeps the item within memcached's exact size rule (the
/// store's own bound is a little looser). An append racing in between can only be caught by
/// the store's bound, which still holds.
fn joined_fits(key: &[u8], extra: usize, sh: &Shared) -> bool {
    match sh
        .store
        .get(key, sh.clock.now(), |it| (it.flags, it.value.len()))
        .hit()
    {
        Some((flags, len)) => limits(sh).item_fits(key.len(), flags, len + extra),
        // Missing: the store answers NotStored.
        None => true,
    }
}

/// Read, compare, and write the joined value only if the CAS still matches.
fn guarded(j: &Concat<'_>, cas: u64, sh: &Shared) -> StoreOutcome {
    let now = sh.clock.now();
    let joined = sh.store.get(j.key, now, |it| {
        if it.cas != cas {
            return None;
        }
        let mut v = Vec::with_capacity(it.value.len() + j.data.len());
        let (first, second) = if j.append {
            (it.value, j.data)
        } else {
            (j.data, it.value)
        };
        v.extend_from_slice(first);
        v.extend_from_slice(second);
        Some((it.flags, it.exp, v))
    });
    let Some(found) = joined.hit() else {
        return StoreOutcome::NotStored;
    };
    let Some((flags, exp, v)) = found else {
        return StoreOutcome::Exists;
    };
    if !limits(sh).item_fits(j.key.len(), flags, v.len()) {
        return StoreOutcome::NotStored;
    }
    match sh.store.store(Mode::Cas(cas), j.key, flags, exp, &v, now) {
        Ok(StoreOutcome::NotFound) | Err(_) => StoreOutcome::NotStored,
        Ok(o) => o,
    }
}

/// An `ms` in append (MA) or prepend (MP) mode with any of the flags the plain storage mode
/// cannot answer: C (join only onto that CAS), E (the joined item's CAS, memcached 1.6.27),
/// N (a missing item is created from the data with this expiry and `flags`, memcached 1.6.20)
/// and s (the size of the stored item: the joined size, memcached 1.6.20).
pub(crate) struct Join<'a> {
    pub append: bool,
    pub key: &'a [u8],
    pub data: &'a [u8],
    pub cas: Option<u64>,
    pub cas_in: Option<u64>,
    pub vivify: Option<(u32, Time)>,
}

/// How often a join retries when the item changes between its read and its guarded write.
const JOIN_ATTEMPTS: usize = 8;

/// A read of the item, the join, and a write guarded by the CAS read (so that a write in
/// between makes it look again, as memcached's join under the item lock would see it).
/// Answers the outcome and the size `s` reports: the joined size once stored, else the
/// data's (memcached reports the size of the item it allocated for the data).
pub(crate) fn meta_join(j: &Join<'_>, sh: &Shared, c: &Counters) -> Answer<(Stored, usize)> {
    bump(&c.cmd_set, 1);
    record(j.key, Proto::Meta, sh);
    let now = sh.clock.now();
    let not_joined = j.data.len();
    for _ in 0..JOIN_ATTEMPTS {
        let read = sh.store.peek(j.key, now, |it| {
            let mut v = Vec::with_capacity(it.value.len() + j.data.len());
            let (first, second) = if j.append {
                (it.value, j.data)
            } else {
                (j.data, it.value)
            };
            v.extend_from_slice(first);
            v.extend_from_slice(second);
            (it.cas, it.flags, it.exp, v)
        });
        let Some((have, flags, exp, joined)) = read.hit() else {
            let Some((flags, exp)) = j.vivify else {
                return Answer::Now((Stored::NotStored, not_joined));
            };
            match sh
                .store
                .store_cas(Mode::Add, j.key, flags, exp, j.data, now, j.cas_in)
            {
                Ok(StoreOutcome::Stored { cas }) => {
                    return Answer::Now((stored(j, cas, sh), not_joined))
                }
                // Someone created it first: join onto theirs.
                Ok(_) => continue,
                Err(StoreError::TooLarge) => return Answer::Now((Stored::TooLarge, not_joined)),
                Err(StoreError::OutOfMemory) => return Answer::Now((Stored::NoMemory, not_joined)),
            }
        };
        if j.cas.is_some_and(|want| want != have) {
            return Answer::Now((Stored::Exists, not_joined));
        }
        if !limits(sh).item_fits(j.key.len(), flags, joined.len()) {
            return Answer::Now((Stored::NotStored, not_joined));
        }
        match sh
            .store
            .store_cas(Mode::Cas(have), j.key, flags, exp, &joined, now, j.cas_in)
        {
            Ok(StoreOutcome::Stored { cas }) => {
                return Answer::Now((stored(j, cas, sh), joined.len()))
            }
            // Rewritten or deleted in between: look again.
            Ok(_) => continue,
            // memcached answers a join it finds no memory for NOT_STORED.
            Err(_) => return Answer::Now((Stored::NotStored, not_joined)),
        }
    }
    // Still changing under every attempt: with a C, the CAS it names is gone.
    Answer::Now((
        if j.cas.is_some() {
            Stored::Exists
        } else {
            Stored::NotStored
        },
        not_joined,
    ))
}

/// A join stored: an explicit CAS (E) starts the new version without the old one's marks.
fn stored(j: &Join<'_>, cas: u64, sh: &Shared) -> Stored {
    if j.cas_in.is_some() {
        sh.marks.set(j.key, cas, crate::marks::Mark::default());
    }
    Stored::Stored { cas }
}
