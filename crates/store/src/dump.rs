//! Listing every live item (memcached's `lru_crawler metadump`), without holding a shard lock
//! for more than one small batch.
//!
//! The walk goes shard by shard and, inside a shard, over its index buckets. Each step locks
//! one shard, copies out up to `DUMP_BATCH` items (key, exp, CAS, size, fetched bit, write
//! time) into buffers the cursor owns, unlocks, and only then hands them to the caller, so a
//! slow consumer (a socket) never holds a lock and a big dump delays other clients by one
//! batch at a time.
//!
//! Between steps other clients insert, and the index grows by splitting buckets (linear
//! hashing): a split moves entries from bucket s to bucket s + 2^level, which may be ahead of or
//! behind the walk. Walking the current buckets 0..n would then report some items twice or not
//! at all. Instead the walk fixes the shard's geometry when it starts on the shard and walks
//! *those* buckets; for each one it visits, under one lock hold, every current bucket that
//! descends from it:
//!
//! ```text
//!   geometry at start: level0, split0         bucket b uses bits0 = level0 + 1 if b < split0
//!                                                                   or b >= 2^level0, else level0
//!   entries with home b at start (h mod 2^bits0 == b) now live in buckets
//!       b, b + 2^bits0, b + 2*2^bits0, ...   (< current bucket count)
//! ```
//!
//! The table only grows and each later geometry refines the earlier one, so every entry belongs
//! to exactly one start bucket, and it is read together with that bucket's whole family: an
//! item that stays live during the whole dump is reported exactly once; one written or deleted
//! meanwhile may or may not be (as in memcached, whose crawler makes the same promise).
//!
//! Flashed items (flash/mod.rs) keep only 40 bits of their key's hash and the record's place in
//! RAM; the key itself is in the record. Under the lock a step copies out where each flashed
//! item of its buckets is; after unlocking it reads the head of each record (header and key,
//! at most `record::HEAD_MAX` = 295 bytes, together: `Flash::read_heads`) and lists the item only if
//! the head is the record written there (magic, page, generation, a length agreeing with the
//! entry's, the page generation unchanged across the read) and the key's hash matches the
//! entry's 40 hash bits and the slot's 15 tag bits. A record that fails is skipped: a read of
//! it would miss too.
//!
//! ```text
//!   lock shard    RAM items: key, exp, CAS, sizes copied      flashed: (hash bits, tag, place)
//!   unlock
//!   read heads    one submission per 64 records not in a write buffer, waiting for all
//!   verify, visit
//! ```
//!
//! What that costs the caller (an event loop: crawler.rs): records still in a write buffer are
//! copied from RAM; the rest are small reads, from the page cache in microseconds, else one
//! wait for the device per 64 records read in parallel (a step reads at most about
//! `DUMP_BATCH` heads, so at most five such waits, a millisecond or so on an SSD). The reads
//! count in the extstore read counters (`extstore_objects_read`, `extstore_bytes_read`).

use crate::flash::entries::hash_check;
use crate::flash::record::{self, Place};
use crate::flash::Loc;
use crate::index::slot;
use crate::segment::SegState;
use crate::shard::{Env, Shard};
use crate::{Store, Time};

/// Items copied out per shard lock hold, rounded up to whole buckets (~8 items each, more only
/// if the shard's index grew a lot while the walk was in it). Copying one is a header decode
/// and a key copy: a batch holds the lock for microseconds.
pub const DUMP_BATCH: usize = 256;

/// One live item, as it was when its shard was locked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DumpItem<'a> {
    pub key: &'a [u8],
    /// 0 = never expires; otherwise on the store's relative clock.
    pub exp: Time,
    /// 0 when CAS is disabled.
    pub cas: u64,
    /// The client's flags, as stored.
    pub flags: u32,
    /// Bytes the item occupies in memory (header + key + value).
    pub size: usize,
    /// The value's length (what a client stored).
    pub value_len: usize,
    /// Read since it was written (memcached's ITEM_FETCHED).
    pub fetched: bool,
    /// A lower bound of when this copy of the item was written: the time its segment was
    /// opened. Items carry no time of their own (it would cost 4 bytes per item). 0 for an item
    /// on flash, whose records carry no time either.
    pub written: Time,
}

/// Where a dump is, plus the buffers one batch is copied into (reused from step to step).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DumpCursor {
    shard: usize,
    /// (level, split) of the shard's index when the walk entered it; None before that.
    start: Option<(u32, usize)>,
    /// Next bucket of that starting geometry.
    bucket: usize,
    done: bool,
    keys: Vec<u8>,
    items: Vec<Copied>,
    /// Flashed items found under the lock, their heads read after it (module doc).
    flashed: Vec<Flashed>,
    heads: Vec<Vec<u8>>,
}

/// A flashed item as the lock hold saw it: what its record's head must agree with.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Flashed {
    /// The entry's key hash bits and the slot's tag.
    check: u64,
    tag: u64,
    loc: Loc,
    fetched: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Copied {
    key_end: usize,
    exp: Time,
    cas: u64,
    flags: u32,
    size: usize,
    value_len: usize,
    fetched: bool,
    written: Time,
}

impl DumpCursor {
    pub fn new() -> DumpCursor {
        DumpCursor::default()
    }

    /// Every item has been handed out.
    pub fn is_done(&self) -> bool {
        self.done
    }
}

impl Store {
    /// Visits every live item (not expired at `now`, not flushed). See the module doc for what
    /// concurrent writes may do to the listing.
    pub fn dump(&self, now: Time, mut visit: impl FnMut(&DumpItem<'_>)) {
        let mut cur = DumpCursor::new();
        while self.dump_step(&mut cur, now, &mut visit) {}
    }

    /// One batch of a dump: locks one shard, copies out up to about `DUMP_BATCH` items,
    /// unlocks, then calls `visit` for each. Returns whether anything is left. A step may
    /// visit nothing (an empty stretch of the index) and still return true.
    pub fn dump_step(
        &self,
        cur: &mut DumpCursor,
        now: Time,
        mut visit: impl FnMut(&DumpItem<'_>),
    ) -> bool {
        if cur.done {
            return false;
        }
        self.observe(now);
        cur.keys.clear();
        cur.items.clear();
        cur.flashed.clear();
        {
            let me = cur.shard;
            let env = self.env(me);
            let mut s = self.shards[me].lock();
            s.apply_flush(&env, now);
            let (level0, split0) = *cur.start.get_or_insert_with(|| s.index.geometry());
            let n0 = (1usize << level0) + split0;
            while cur.bucket < n0 && cur.items.len() + cur.flashed.len() < DUMP_BATCH {
                let out = (&mut cur.keys, &mut cur.items, &mut cur.flashed);
                copy_family(&s, &env, (level0, split0), cur.bucket, now, out);
                cur.bucket += 1;
            }
            if cur.bucket >= n0 {
                cur.shard += 1;
                cur.start = None;
                cur.bucket = 0;
                cur.done = cur.shard == self.shards.len();
            }
        }
        self.read_flashed(cur, now);
        let mut from = 0;
        for c in &cur.items {
            visit(&DumpItem {
                key: &cur.keys[from..c.key_end],
                exp: c.exp,
                cas: c.cas,
                flags: c.flags,
                size: c.size,
                value_len: c.value_len,
                fetched: c.fetched,
                written: c.written,
            });
            from = c.key_end;
        }
        !cur.done
    }
}

impl Store {
    /// The flashed items of a step, read and verified with no lock held (module doc): each
    /// one whose record's head passes joins the step's items.
    fn read_flashed(&self, cur: &mut DumpCursor, now: Time) {
        let Some(fl) = self.flash.as_deref() else {
            return;
        };
        if cur.flashed.is_empty() {
            return;
        }
        let locs: Vec<Loc> = cur.flashed.iter().map(|f| f.loc).collect();
        cur.heads
            .resize_with(locs.len().max(cur.heads.len()), Vec::new);
        let got = fl.read_heads(&locs, &mut cur.heads[..locs.len()]);
        for ((f, head), read) in cur.flashed.iter().zip(&cur.heads).zip(got) {
            let Ok(gen) = read else { continue };
            let Ok(h) = record::verify_head(
                head,
                Place {
                    page: f.loc.page,
                    gen,
                },
                f.loc.len as usize,
            ) else {
                continue;
            };
            let hash = Self::hash(h.key);
            if hash_check(hash) != f.check || slot::tag_of_hash(hash) != f.tag {
                continue;
            }
            let exp = fl.local_exp(f.loc.page, gen, h.meta.exp);
            if exp != 0 && exp <= now {
                continue;
            }
            cur.keys.extend_from_slice(h.key);
            cur.items.push(Copied {
                key_end: cur.keys.len(),
                exp,
                cas: if self.geo.use_cas { h.meta.cas } else { 0 },
                flags: h.meta.flags,
                size: f.loc.len as usize,
                value_len: h.value_len,
                fetched: f.fetched,
                written: 0,
            });
        }
    }
}

/// Where one step's copies go: key bytes, RAM items, flashed items to read.
type Out<'a> = (&'a mut Vec<u8>, &'a mut Vec<Copied>, &'a mut Vec<Flashed>);

/// Copies the live items of start bucket `b` and of every bucket split off it since; for a
/// flashed item, where its record is.
fn copy_family(
    s: &Shard,
    env: &Env<'_>,
    (level0, split0): (u32, usize),
    b: usize,
    now: Time,
    out: Out<'_>,
) {
    let (keys, items, flashed) = out;
    let bits = if b < split0 || b >= 1 << level0 {
        level0 + 1
    } else {
        level0
    };
    let n = s.index.buckets();
    let mut c = b;
    while c < n {
        s.index.for_each_in_chain(c, |e| {
            // A flashed item's key is on flash only: its record is read after the lock.
            if slot::is_flash(e) {
                if let Some((check, loc)) = s.flash.get(slot::flash_entry(e)) {
                    flashed.push(Flashed {
                        check,
                        tag: slot::tag(e),
                        loc,
                        fetched: slot::fetched(e),
                    });
                }
                return;
            }
            let seg = slot::seg(e);
            let m = &s.segs.metas[seg as usize];
            // A slot into a dead (expired or flushed) segment is garbage the sweep has not
            // reached yet.
            if m.state != SegState::Live {
                return;
            }
            let off = slot::off(e) as usize;
            let hdr = s.header_at(seg, off);
            if hdr.exp != 0 && hdr.exp <= now {
                return;
            }
            keys.extend_from_slice(&m.data[off..][hdr.key_range()]);
            items.push(Copied {
                key_end: keys.len(),
                exp: hdr.exp,
                cas: s.cas_of(env.geo, seg, off, &hdr),
                flags: hdr.flags,
                size: hdr.total_len(),
                value_len: hdr.value_len as usize,
                fetched: slot::fetched(e),
                written: m.opened,
            });
        });
        c += 1 << bits;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::{Mode, StoreConfig};

    #[derive(Debug, PartialEq, Eq)]
    struct Seen {
        exp: Time,
        cas: u64,
        size: usize,
        fetched: bool,
        written: Time,
    }

    /// Dump with the given cursor to the end; panics on a key reported twice.
    fn collect(store: &Store, now: Time) -> HashMap<Vec<u8>, Seen> {
        let mut out = HashMap::new();
        store.dump(now, |it| {
            let seen = Seen {
                exp: it.exp,
                cas: it.cas,
                size: it.size,
                fetched: it.fetched,
                written: it.written,
            };
            assert!(
                out.insert(it.key.to_vec(), seen).is_none(),
                "{:?} twice",
                it.key
            );
        });
        out
    }

    fn set(store: &Store, key: &[u8], exp: Time, now: Time) -> u64 {
        match store.store(Mode::Set, key, 0, exp, b"value", now).unwrap() {
            crate::StoreOutcome::Stored { cas } => cas,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_live_items_are_dumped() {
        let store = Store::new(StoreConfig::default());
        let now = 100;
        let cas_forever = set(&store, b"forever", 0, now);
        let cas_later = set(&store, b"later", now + 1000, now);
        set(&store, b"soon", now + 5, now);
        set(&store, b"deleted", 0, now);
        assert!(store.delete(b"deleted", now));
        assert!(store.get(b"later", now, |_| ()).is_hit());

        let at = now + 10;
        let got = collect(&store, at);
        let mut keys: Vec<_> = got.keys().cloned().collect();
        keys.sort();
        assert_eq!(keys, vec![b"forever".to_vec(), b"later".to_vec()]);
        let f = &got[&b"forever".to_vec()];
        assert_eq!(
            (f.exp, f.cas, f.fetched, f.written),
            (0, cas_forever, false, now)
        );
        assert!(f.size >= b"forever".len() + b"value".len());
        let l = &got[&b"later".to_vec()];
        assert_eq!((l.exp, l.cas, l.fetched), (now + 1000, cas_later, true));

        // flush_all: nothing written before it is listed, what comes after is.
        store.flush_all(at);
        set(&store, b"after", 0, at + 1);
        let got = collect(&store, at + 1);
        assert_eq!(got.keys().collect::<Vec<_>>(), vec![&b"after".to_vec()]);
        assert_eq!(got[&b"after".to_vec()].written, at + 1);
    }

    #[test]
    fn pending_flush_applies_when_due() {
        let store = Store::new(StoreConfig::default());
        set(&store, b"k", 0, 100);
        store.flush_all(105);
        assert_eq!(collect(&store, 104).len(), 1);
        assert!(collect(&store, 105).is_empty());
    }

    #[test]
    fn batches_are_bounded_and_cover_everything() {
        let store = Store::new(StoreConfig {
            shards: 4,
            ..Default::default()
        });
        let n = 5000;
        for i in 0..n {
            set(&store, format!("key:{i}").as_bytes(), 0, 100);
        }
        let mut cur = DumpCursor::new();
        let mut seen = HashMap::new();
        let mut steps = 0;
        loop {
            let mut in_step = 0;
            let more = store.dump_step(&mut cur, 100, |it| {
                in_step += 1;
                *seen.entry(it.key.to_vec()).or_insert(0) += 1;
            });
            // Whole buckets: a batch ends within one bucket family past the bound.
            assert!(
                in_step < DUMP_BATCH + 64,
                "{in_step} items in one lock hold"
            );
            steps += 1;
            if !more {
                break;
            }
        }
        assert!(cur.is_done());
        assert!(steps >= n / DUMP_BATCH);
        assert_eq!(seen.len(), n);
        assert!(seen.values().all(|&c| c == 1));
    }

    /// A store whose RAM (1 MiB) holds a fraction of what is set, with a flash file of
    /// `flash_mb` MiB: most items end up on flash.
    fn flashed_store(t: &crate::flash::tests::TempFile, flash_mb: u64) -> Store {
        let fc = crate::FlashConfig {
            page_size: 1 << 20,
            wbuf_size: 256 << 10,
            item_size: 500,
            recache_rate: 0,
            ..crate::FlashConfig::new(&t.0, flash_mb << 20)
        };
        Store::new(StoreConfig {
            mem_limit: 1 << 20,
            shards: 2,
            huge_pages: false,
            flash: Some(fc),
            ..Default::default()
        })
    }

    /// Keys of every length a key may have, binary bytes included.
    fn flash_key(i: u32) -> Vec<u8> {
        let mut k = format!("k{i}:").into_bytes();
        k.resize(1 + (i as usize * 7) % 250, (i % 256) as u8);
        k.truncate(250);
        k
    }

    /// Sets `n` items of 1,000-byte values, waiting for the flash writer now and then (a
    /// writer left behind turns demotions into evictions); returns the keys a get serves.
    fn fill_flash(store: &Store, n: u32) -> std::collections::HashSet<Vec<u8>> {
        for i in 0..n {
            store
                .store(Mode::Set, &flash_key(i), i, 0, &[b'v'; 1000], 1)
                .unwrap();
            if i % 100 == 99 {
                store.flash_sync();
            }
        }
        (0..n)
            .map(flash_key)
            .filter(|k| store.peek(k, 1, |_| ()).is_hit())
            .collect()
    }

    /// memcached's metadump lists items whose value is on flash (extstore); so does mnemo's,
    /// reading each record's head for its key.
    #[test]
    fn flashed_items_are_listed() {
        let t = crate::flash::tests::TempFile::new("dump");
        let store = flashed_store(&t, 64);
        let served = fill_flash(&store, 6000);
        let st = store.stats();
        assert!(st.flash_items > 4000, "{st:?}");
        assert!(served.len() >= 5900, "{} served", served.len());
        let got = collect(&store, 1);
        let listed: std::collections::HashSet<Vec<u8>> = got.keys().cloned().collect();
        assert_eq!(
            listed.len(),
            served.len(),
            "listed {} of {} served",
            listed.len(),
            served.len()
        );
        assert!(listed == served);
        for (k, seen) in &got {
            assert!(seen.size > k.len() + 1000, "{seen:?}");
            assert!(seen.cas != 0);
        }
    }

    /// Recycled pages (the file is a third of what was set) and damaged records: nothing that
    /// a get would not serve is listed under another key's name, nothing served is left out.
    #[test]
    fn recycled_and_damaged_records_list_no_foreign_key() {
        use std::os::unix::fs::FileExt;
        let t = crate::flash::tests::TempFile::new("dump-recycled");
        let store = flashed_store(&t, 8);
        let n = 24_000;
        fill_flash(&store, n);
        assert!(store.stats().flash.unwrap().page_evictions > 0);
        // Damage page 2's records: key bytes, headers and values alike.
        let f = std::fs::OpenOptions::new().write(true).open(&t.0).unwrap();
        for at in (0..(1u64 << 20)).step_by(4096) {
            f.write_all_at(&[0x5a; 300], (2 << 20) + at + 37).unwrap();
        }
        let set: std::collections::HashSet<Vec<u8>> = (0..n).map(flash_key).collect();
        let listed: std::collections::HashSet<Vec<u8>> = collect(&store, 1).into_keys().collect();
        assert!(listed.is_subset(&set), "a key never stored was listed");
        let served: std::collections::HashSet<Vec<u8>> = set
            .iter()
            .filter(|k| store.peek(k, 1, |_| ()).is_hit())
            .cloned()
            .collect();
        assert!(
            served.is_subset(&listed),
            "{} served but not listed",
            served.difference(&listed).count()
        );
        assert!(served.len() > 1000, "{}", served.len());
    }

    /// Keys inserted between steps split index buckets behind and ahead of the walk; every key
    /// that was there before the dump and stays is still reported exactly once.
    #[test]
    fn growth_during_the_dump_neither_repeats_nor_loses() {
        let store = Store::new(StoreConfig {
            shards: 2,
            ..Default::default()
        });
        let old = 2000;
        for i in 0..old {
            set(&store, format!("old:{i}").as_bytes(), 0, 100);
        }
        let mut cur = DumpCursor::new();
        let mut seen: HashMap<Vec<u8>, u32> = HashMap::new();
        let mut added = 0;
        loop {
            let more = store.dump_step(&mut cur, 100, |it| {
                *seen.entry(it.key.to_vec()).or_insert(0) += 1
            });
            // Quadruple the table over the course of the dump.
            for _ in 0..300 {
                set(&store, format!("new:{added}").as_bytes(), 0, 100);
                added += 1;
            }
            if !more {
                break;
            }
        }
        assert!(seen.values().all(|&c| c == 1), "an item was reported twice");
        for i in 0..old {
            assert_eq!(
                seen.get(format!("old:{i}").as_bytes()),
                Some(&1),
                "old:{i} missing"
            );
        }
    }
}
