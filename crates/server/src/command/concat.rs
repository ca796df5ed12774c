//! Binary APPEND/PREPEND, which may carry a CAS and are held to memcached's exact item size
//! rule. (Text and meta append/prepend are storage modes: command/write.rs.)
//!
//! The store has no CAS form of append, so a guarded one is a read, a compare and a
//! CAS-guarded write of the joined value: a write that lands in between changes the CAS and
//! the guarded write fails with "exists", as it would in memcached.
//!
//! Counted as every storage command (cmd_set, `stats detail` set): memcached allocates the
//! appended piece before it joins, so a join that fails still counts.

use mnemo_proto::text::Limits;
use mnemo_store::{Mode, StoreOutcome};

use super::write::{record, Stored};
use super::{Answer, Proto};
use crate::stats::{bump, Counters};
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
            let mode = if j.append { Mode::Append } else { Mode::Prepend };
            // The store answers NotStored itself when the result would be too large or finds
            // no memory, as memcached does for append/prepend.
            sh.store.store(mode, j.key, 0, 0, j.data, sh.clock.now()).unwrap_or(StoreOutcome::NotStored)
        }
    };
    Answer::Now(match outcome {
        StoreOutcome::Stored { cas } => Stored::Stored { cas },
        StoreOutcome::Exists => Stored::Exists,
        StoreOutcome::NotStored | StoreOutcome::NotFound => Stored::NotStored,
    })
}

fn limits(sh: &Shared) -> Limits {
    Limits { item_size_max: sh.config.item_size_max, use_cas: sh.config.use_cas }
}

/// Whether appending `extra` bytes keeps the item within memcached's exact size rule (the
/// store's own bound is a little looser). An append racing in between can only be caught by
/// the store's bound, which still holds.
fn joined_fits(key: &[u8], extra: usize, sh: &Shared) -> bool {
    match sh.store.get(key, sh.clock.now(), |it| (it.flags, it.value.len())).hit() {
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
        let (first, second) = if j.append { (it.value, j.data) } else { (j.data, it.value) };
        v.extend_from_slice(first);
        v.extend_from_slice(second);
        Some((it.flags, it.exp, v))
    });
    let Some(found) = joined.hit() else { return StoreOutcome::NotStored };
    let Some((flags, exp, v)) = found else { return StoreOutcome::Exists };
    if !limits(sh).item_fits(j.key.len(), flags, v.len()) {
        return StoreOutcome::NotStored;
    }
    match sh.store.store(Mode::Cas(cas), j.key, flags, exp, &v, now) {
        Ok(StoreOutcome::NotFound) | Err(_) => StoreOutcome::NotStored,
        Ok(o) => o,
    }
}
