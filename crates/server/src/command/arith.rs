//! incr/decr: text `incr`/`decr`, meta `ma` and binary INCREMENT/DECREMENT.
//!
//! ```text
//!   compare a CAS   meta C: compared, then an ordinary delta; binary: read, compare, parse and
//!                   a CAS-guarded write, so a write in between fails it (memcached's atomicity)
//!   delta           u64; incr wraps, decr stops at 0; a shorter number keeps its length,
//!                   space padded, unless the caller says an unsent reply holds the item
//!   missing item    created with the initial value when asked (ma N, binary unless the
//!                   expiry is 0xffffffff); a racing creator wins and the delta applies to it
//!   then (ma)       a number answered: E gives the item that CAS (memcached 1.6.27), T
//!                   touches the item, t reads its expiry back
//!   counted         incr_hits/decr_hits for a number answered, *_misses for a missing item;
//!                   a created item counts as a hit in meta, as nothing in binary, whose
//!                   failed create counts store_no_memory (all as mnemo has always answered
//!                   memcached's differential tables)
//! ```

use mnemo_proto::num::parse_u64;
use mnemo_store::{DeltaError, Mode, StoreError, StoreOutcome, Time};

use super::{Answer, Proto};
use crate::admin::stats::{bump, Counters};
use crate::Shared;

/// An incr/decr as parsed.
pub(crate) struct Delta<'a> {
    pub key: &'a [u8],
    pub incr: bool,
    pub by: u64,
    /// A shorter number keeps the old length, space padded (false: an unsent reply holds the
    /// item, protocol::text::PendingReads).
    pub pad: bool,
    /// Apply only to an item with this CAS.
    pub cas: Option<u64>,
    /// A missing item is created with `initial` and this expiry.
    pub create: Option<(u64, Time)>,
    /// ma T: once a number is answered, the item's expiry becomes this.
    pub touch: Option<Time>,
    /// ma t: once a number is answered (and touched), read the item's expiry back.
    pub read_exp: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Counted {
    /// The new number and CAS; `exp`: the item's expiry, if `read_exp` asked and it is there.
    Value {
        n: u64,
        cas: u64,
        exp: Option<Time>,
    },
    /// The item was missing and is created with the initial value.
    Created {
        n: u64,
        cas: u64,
        exp: Option<Time>,
    },
    NotFound,
    NonNumeric,
    /// The item has another CAS than the one given.
    Exists,
    NoMemory,
    NotStored,
}

/// How often a delta retries when the item it creates is added by someone else first.
const DELTA_ATTEMPTS: usize = 8;

#[inline]
pub(crate) fn delta(d: &Delta<'_>, proto: Proto, sh: &Shared, c: &Counters) -> Answer<Counted> {
    delta_with(d, None, proto, sh, c)
}

/// [`delta`] whose changed or created item takes the CAS `cas_in` (ma E).
pub(crate) fn delta_with(
    d: &Delta<'_>,
    cas_in: Option<u64>,
    proto: Proto,
    sh: &Shared,
    c: &Counters,
) -> Answer<Counted> {
    let (hits, misses) = if d.incr {
        (&c.incr_hits, &c.incr_misses)
    } else {
        (&c.decr_hits, &c.decr_misses)
    };
    let mut answer = apply(d, cas_in, proto, sh, c);
    if let (Counted::Value { cas, .. }, Some(e)) = (&mut answer, cas_in) {
        // The store's delta chooses the CAS: the new number is written again under E,
        // guarded by the CAS the delta gave it (a write in between keeps its own).
        let now = sh.clock.now();
        let mine = sh
            .store
            .peek(d.key, now, |it| {
                (it.cas == *cas).then(|| (it.flags, it.exp, it.value.to_vec()))
            })
            .hit()
            .flatten();
        if let Some((flags, exp, value)) = mine {
            if let Ok(StoreOutcome::Stored { cas: new }) =
                sh.store
                    .store_cas(Mode::Cas(*cas), d.key, flags, exp, &value, now, Some(e))
            {
                sh.marks.set(d.key, new, crate::marks::Mark::default());
                *cas = new;
            }
        }
    }
    if let Counted::Value { exp, .. } | Counted::Created { exp, .. } = &mut answer {
        if d.touch.is_some() || d.read_exp {
            let now = sh.clock.now();
            if let Some(t) = d.touch {
                sh.store.touch(d.key, t, now);
            }
            if d.read_exp {
                *exp = sh.store.get(d.key, now, |it| it.exp).hit();
            }
        }
    }
    match answer {
        Counted::Value { .. } => bump(hits, 1),
        Counted::Created { .. } if proto == Proto::Meta => bump(hits, 1),
        Counted::NotFound => bump(misses, 1),
        _ => {}
    }
    Answer::Now(answer)
}

fn apply(d: &Delta<'_>, cas_in: Option<u64>, proto: Proto, sh: &Shared, c: &Counters) -> Counted {
    let now = sh.clock.now();
    if let (Some(want), Proto::Meta) = (d.cas, proto) {
        if let Some(have) = super::delete::current_cas(d.key, sh, now) {
            if have != want {
                return Counted::Exists;
            }
        }
    }
    let attempts = if proto == Proto::Meta {
        2
    } else {
        DELTA_ATTEMPTS
    };
    for _ in 0..attempts {
        let res = match (d.cas, proto) {
            (Some(cas), Proto::Binary) => guarded(d, cas, sh, now),
            _ => plain(d, sh, now),
        };
        let Some((initial, exp)) = d.create.filter(|_| res == Counted::NotFound) else {
            return res;
        };
        let mut digits = [0; 20];
        match sh.store.store_cas(
            Mode::Add,
            d.key,
            0,
            exp,
            decimal(initial, &mut digits),
            now,
            cas_in,
        ) {
            Ok(StoreOutcome::Stored { cas }) => {
                return Counted::Created {
                    n: initial,
                    cas,
                    exp: None,
                }
            }
            // Someone else created it first: apply the delta to theirs.
            Ok(_) => continue,
            // Meta: whatever kept the add out, the delta is tried once more.
            Err(_) if proto == Proto::Meta => continue,
            Err(StoreError::OutOfMemory) => {
                bump(&c.store_no_memory, 1);
                return Counted::NoMemory;
            }
            Err(StoreError::TooLarge) => return Counted::NotStored,
        }
    }
    match proto {
        // Meta's second delta found the item gone again.
        Proto::Meta => plain(d, sh, now),
        // memcached's answer when its add of the initial value fails.
        _ => Counted::NotStored,
    }
}

fn plain(d: &Delta<'_>, sh: &Shared, now: Time) -> Counted {
    match sh
        .store
        .delta_padded(d.key, d.incr, d.by, now, parse_u64, d.pad)
    {
        Ok((n, cas)) => Counted::Value { n, cas, exp: None },
        Err(DeltaError::NotFound) => Counted::NotFound,
        Err(DeltaError::NonNumeric) => Counted::NonNumeric,
    }
}

/// With a CAS: the CAS is compared before the value is parsed (memcached's order), and the
/// new number is written with a CAS-guarded store. Like the store's own delta, a shorter
/// number keeps the old length, padded with spaces, as memcached rewrites in place.
fn guarded(d: &Delta<'_>, want: u64, sh: &Shared, now: Time) -> Counted {
    let found = sh.store.get(d.key, now, |it| {
        if it.cas != want {
            return Err(Counted::Exists);
        }
        let n = match parse_u64(it.value) {
            Some(v) if !it.value.is_empty() => v,
            _ => return Err(Counted::NonNumeric),
        };
        let n = if d.incr {
            n.wrapping_add(d.by)
        } else {
            n.saturating_sub(d.by)
        };
        Ok((n, it.flags, it.exp, it.value.len()))
    });
    let (n, flags, exp, old_len) = match found.hit() {
        None => return Counted::NotFound,
        Some(Err(answer)) => return answer,
        Some(Ok(v)) => v,
    };
    let mut digits = [0; 20];
    let mut text = decimal(n, &mut digits).to_vec();
    if text.len() < old_len {
        text.resize(old_len, b' ');
    }
    match sh
        .store
        .store(Mode::Cas(want), d.key, flags, exp, &text, now)
    {
        Ok(StoreOutcome::Stored { cas }) => Counted::Value { n, cas, exp: None },
        Ok(StoreOutcome::Exists) => Counted::Exists,
        Ok(_) => Counted::NotFound,
        Err(_) => Counted::NoMemory,
    }
}

/// `n` in decimal, without allocating.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::decimal;

    #[test]
    fn decimal_digits() {
        let mut b = [0; 20];
        assert_eq!(decimal(0, &mut b), b"0");
        assert_eq!(decimal(u64::MAX, &mut b), b"18446744073709551615");
    }
}
