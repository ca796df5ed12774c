//! Delete: text `delete`, meta `md` (with C, I, and memcached 1.6.27's x and E) and binary
//! DELETE (with a CAS).
//!
//! ```text
//!   stats detail del   text and binary (meta records none, as memcached 1.6.18)
//!   a CAS to compare   the item's CAS differs -> Exists, nothing counted
//!   md x               the value is replaced by an empty one: flags F (or 0), expiry T (or
//!                      never), CAS E (or the item's own); with I that item is then marked
//!   md I               the item is marked stale under a new CAS (E, or one the store chooses)
//!   delete / md I / x  delete_hits or delete_misses
//! ```
//!
//! With a CAS the compare and the delete are two store calls: the store has no conditional
//! delete, so a write landing between them is deleted too (a narrow window that memcached,
//! holding the item lock, does not have).

use mnemo_store::{Item, Mode, StoreOutcome, Time};

use super::{Answer, Proto};
use crate::admin::detail::Event;
use crate::admin::stats::{bump, Counters};
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

// The variants are the protocol's replies (DELETED, NOT_FOUND, EXISTS).
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Deleted {
    Deleted,
    NotFound,
    /// The item has another CAS than the one given.
    Exists,
}

/// md's flags of memcached 1.6.27 (see the module docs).
#[derive(Clone, Copy, Default)]
pub(crate) struct MetaDelete {
    /// x: keep the item with an empty value, these client flags and this expiry.
    pub remove_value: Option<(u32, Time)>,
    /// E: the CAS the changed item takes.
    pub cas_in: Option<u64>,
}

pub(crate) fn delete(d: &Delete<'_>, proto: Proto, sh: &Shared, c: &Counters) -> Answer<Deleted> {
    match meta_delete(d, MetaDelete::default(), proto, sh, c) {
        Answer::Now(found) => Answer::Now(found.unwrap_or(Deleted::NotFound)),
        Answer::Later(p) => match p {},
    }
}

/// [`delete`] with md's x and E; None: x found no memory for the emptied item (memcached's
/// "SERVER_ERROR out of memory"), the item unchanged.
pub(crate) fn meta_delete(
    d: &Delete<'_>,
    m: MetaDelete,
    proto: Proto,
    sh: &Shared,
    c: &Counters,
) -> Answer<Option<Deleted>> {
    if sh.watch.flags() != 0 {
        return watched(d, m, proto, sh, c);
    }
    delete_now(d, m, proto, sh, c)
}

/// [`meta_delete`] while someone watches: the lookup (fetchers), then a removed item
/// (deletions: text `delete` and `md` without I, as memcached 1.6.45 logs them; binary DELETE
/// is not).
#[cold]
#[inline(never)]
fn watched(
    d: &Delete<'_>,
    m: MetaDelete,
    proto: Proto,
    sh: &Shared,
    c: &Counters,
) -> Answer<Option<Deleted>> {
    crate::watch::looked_up(sh, d.key);
    let size = sh
        .store
        .peek(d.key, sh.clock.now(), |it| it.value.len())
        .hit();
    let answer = delete_now(d, m, proto, sh, c);
    let logged =
        proto != Proto::Binary && d.invalidate.is_none() && sh.watch.wants(crate::watch::DELETIONS);
    if let (Answer::Now(Some(Deleted::Deleted)), Some(size), true) = (&answer, size, logged) {
        crate::watch::deleted(sh, d.key, proto == Proto::Meta, size);
    }
    answer
}

fn delete_now(
    d: &Delete<'_>,
    m: MetaDelete,
    proto: Proto,
    sh: &Shared,
    c: &Counters,
) -> Answer<Option<Deleted>> {
    if proto != Proto::Meta {
        sh.detail
            .record(d.key, sh.config.prefix_delimiter, Event::Delete);
    }
    let now = sh.clock.now();
    if let Some(want) = d.cas {
        match current_cas(d.key, sh, now) {
            Some(have) if have != want => return Answer::Now(Some(Deleted::Exists)),
            _ => {}
        }
    }
    let hit = match (m.remove_value, d.invalidate) {
        (Some(empty), stale) => match remove_value(d, empty, stale.is_some(), m.cas_in, sh, now) {
            Ok(hit) => hit,
            Err(()) => return Answer::Now(None),
        },
        (None, Some(new_exp)) => invalidate(d.key, new_exp, m.cas_in, sh, now),
        (None, None) => sh.store.delete(d.key, now),
    };
    if hit {
        bump(&c.delete_hits, 1);
        Answer::Now(Some(Deleted::Deleted))
    } else {
        bump(&c.delete_misses, 1);
        Answer::Now(Some(Deleted::NotFound))
    }
}

/// `md x`: the item's value replaced by an empty one, guarded by the CAS read (and by the
/// C given, compared again here so that a write in between cannot slip under it). The new
/// item is memcached's new item: unfetched, not stale, no win token sent, unless `stale`
/// (I) marks it. Its CAS is E, else the old one's (x) or a new one (x with I).
fn remove_value(
    d: &Delete<'_>,
    (flags, exp): (u32, Time),
    stale: bool,
    cas_in: Option<u64>,
    sh: &Shared,
    now: Time,
) -> Result<bool, ()> {
    for _ in 0..INVALIDATE_ATTEMPTS {
        let Some(have) = current_cas(d.key, sh, now) else {
            return Ok(false);
        };
        if d.cas.is_some_and(|want| want != have) {
            // Changed since the compare: as memcached, holding the item lock, would have
            // found it, this is a CAS that no longer matches: nothing is changed.
            return Ok(false);
        }
        let new_cas = cas_in.or((!stale).then_some(have));
        match sh
            .store
            .store_cas(Mode::Cas(have), d.key, flags, exp, b"", now, new_cas)
        {
            Ok(StoreOutcome::Stored { cas }) => {
                sh.marks.set(
                    d.key,
                    cas,
                    crate::marks::Mark {
                        stale,
                        win_sent: false,
                    },
                );
                return Ok(true);
            }
            // Rewritten or deleted in between: look again.
            Ok(_) => continue,
            Err(_) => return Err(()),
        }
    }
    Ok(false)
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
fn invalidate(
    key: &[u8],
    new_exp: Option<Time>,
    cas_in: Option<u64>,
    sh: &Shared,
    now: Time,
) -> bool {
    for _ in 0..INVALIDATE_ATTEMPTS {
        let read = |it: Item<'_>| (it.flags, it.value.to_vec(), it.exp, it.cas, it.fetched);
        let Some((flags, value, exp, cas, fetched)) = sh.store.peek(key, now, read).hit() else {
            return false;
        };
        let exp = new_exp.unwrap_or(exp);
        match sh
            .store
            .store_cas(Mode::Cas(cas), key, flags, exp, &value, now, cas_in)
        {
            Ok(StoreOutcome::Stored { cas }) => {
                sh.marks.set(
                    key,
                    cas,
                    crate::marks::Mark {
                        stale: true,
                        win_sent: false,
                    },
                );
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
                sh.marks.set(
                    key,
                    cas,
                    crate::marks::Mark {
                        stale: true,
                        win_sent: false,
                    },
                );
                return true;
            }
        }
    }
    false
}
