//! Delete: text `delete`, meta `md` (with C and I) and binary DELETE (with a CAS).
//!
//! ```text
//!   stats detail del   text and binary (meta records none, as memcached 1.6.18)
//!   a CAS to compare   the item's CAS differs -> Exists, nothing counted
//!   delete / md I      delete_hits or delete_misses
//! ```
//!
//! With a CAS the compare and the delete are two store calls: the store has no conditional
//! delete, so a write landing between them is deleted too (a narrow window that memcached,
//! holding the item lock, does not have).

use mnemo_store::{Item, Mode, StoreOutcome, Time};

use super::{Answer, Proto};
use crate::detail::Event;
use crate::stats::{bump, Counters};
use crate::Shared;

/// A delete as parsed.
pub(crate) struct Delete<'a> {
    pub key: &'a [u8],
    /// Delete only an item with this CAS (meta C, binary's CAS field; memcached compares even
    /// with -C, where every item's CAS is 0).
    pub cas: Option<u64>,
    /// md I: mark the item stale instead of deleting it, with this new expiry if given.
    pub invalidate: Option<Option<Time>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Deleted {
    Deleted,
    NotFound,
    /// The item has another CAS than the one given.
    Exists,
}

pub(crate) fn delete(d: &Delete<'_>, proto: Proto, sh: &Shared, c: &Counters) -> Answer<Deleted> {
    if sh.watch.flags() != 0 {
        return watched(d, proto, sh, c);
    }
    delete_now(d, proto, sh, c)
}

/// [`delete`] while someone watches: the lookup (fetchers), then a removed item (deletions:
/// text `delete` and `md` without I, as memcached 1.6.45 logs them; binary DELETE is not).
#[cold]
#[inline(never)]
fn watched(d: &Delete<'_>, proto: Proto, sh: &Shared, c: &Counters) -> Answer<Deleted> {
    crate::watch::looked_up(sh, d.key);
    let size = sh.store.peek(d.key, sh.clock.now(), |it| it.value.len()).hit();
    let answer = delete_now(d, proto, sh, c);
    let logged = proto != Proto::Binary && d.invalidate.is_none() && sh.watch.wants(crate::watch::DELETIONS);
    if let (Answer::Now(Deleted::Deleted), Some(size), true) = (&answer, size, logged) {
        crate::watch::deleted(sh, d.key, proto == Proto::Meta, size);
    }
    answer
}

fn delete_now(d: &Delete<'_>, proto: Proto, sh: &Shared, c: &Counters) -> Answer<Deleted> {
    if proto != Proto::Meta {
        sh.detail.record(d.key, sh.config.prefix_delimiter, Event::Delete);
    }
    let now = sh.clock.now();
    if let Some(want) = d.cas {
        match current_cas(d.key, sh, now) {
            Some(have) if have != want => return Answer::Now(Deleted::Exists),
            _ => {}
        }
    }
    let hit = match d.invalidate {
        Some(new_exp) => invalidate(d.key, new_exp, sh, now),
        None => sh.store.delete(d.key, now),
    };
    if hit {
        bump(&c.delete_hits, 1);
        Answer::Now(Deleted::Deleted)
    } else {
        bump(&c.delete_misses, 1);
        Answer::Now(Deleted::NotFound)
    }
}

/// The CAS of a live item, for a compare (md C, ma C, binary DELETE with a CAS).
pub(crate) fn current_cas(key: &[u8], sh: &Shared, now: Time) -> Option<u64> {
    sh.store.get(key, now, |it| it.cas).hit()
}

/// How often `md I` retries when the item changes under it.
const INVALIDATE_ATTEMPTS: usize = 4;

/// `md I`: the item stays, stale, under a new CAS (memcached bumps it, so a writer holding
/// the old CAS now has a lower one: its `ms I` lands as a stale value, a plain `ms C` fails)
/// and with the win token offered again. The store makes a new CAS only by writing a new
/// copy, so the item is rewritten, guarded by its CAS against a write in between (and read
/// without counting as a read: its fetched state carries over).
fn invalidate(key: &[u8], new_exp: Option<Time>, sh: &Shared, now: Time) -> bool {
    for _ in 0..INVALIDATE_ATTEMPTS {
        let read = |it: Item<'_>| (it.flags, it.value.to_vec(), it.exp, it.cas, it.fetched);
        let Some((flags, value, exp, cas, fetched)) = sh.store.peek(key, now, read).hit() else {
            return false;
        };
        let exp = new_exp.unwrap_or(exp);
        match sh.store.store(Mode::Cas(cas), key, flags, exp, &value, now) {
            Ok(StoreOutcome::Stored { cas }) => {
                sh.marks.set(key, cas, crate::marks::Mark { stale: true, win_sent: false });
                if fetched {
                    // memcached keeps the item, so it stays fetched (a later h says h1); the
                    // copy is marked by reading it.
                    sh.store.get(key, now, |_| ());
                }
                return true;
            }
            // Rewritten or deleted in between: look again.
            Ok(_) => continue,
            // No room for the copy: mark the item as it is.
            Err(_) => {
                if let Some(e) = new_exp {
                    sh.store.touch(key, e, now);
                }
                sh.marks.set(key, cas, crate::marks::Mark { stale: true, win_sent: false });
                return true;
            }
        }
    }
    false
}
