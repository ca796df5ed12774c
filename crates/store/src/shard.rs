//! One shard: the cache operations on the index and segments it owns, under its mutex.
//!
//! Owns the semantics of get/touch/store/delete/delta (memcached's rules): the lookup, reads and
//! deletes here, the write path in write.rs. Making room (eviction), expiry, flush and the sweep
//! live in evict.rs.
//!
//! A lookup (`find`) walks the index for RAM items only; a flashed slot (flash/) stops the
//! walk, and only then is the walk made again knowing flash (`find_flashed`), so a RAM hit
//! costs the same with or without a flash tier.

mod write;

pub(crate) use write::Reserve;

use parking_lot::Mutex;

use crate::budget::Budget;
use crate::config::{Eviction, Geometry};
use crate::flash::entries::{self, Entries};
use crate::flash::{Flash, FlashRef};
use crate::ghost::{Ghost, Left};
use crate::index::{slot, Index, Pos, Visit};
use crate::item::{self, Header, NewHeader};
use crate::segment::{exp_bound, ttl_bucket, DeadReason, Queue, SegState, SegTable, TTL_BUCKETS};
use crate::stats::{Counters, StoreStats};
use crate::{DeltaError, Item, Lookup, Mode, StoreError, StoreOutcome, Time};

/// What an operation needs besides its own shard.
pub(crate) struct Env<'a> {
    pub geo: &'a Geometry,
    pub budget: &'a Budget,
    /// All shards (eviction may take memory from a richer one with try_lock).
    pub shards: &'a [Mutex<Shard>],
    pub me: usize,
    /// The flash tier, if configured.
    pub flash: Option<&'a Flash>,
    /// Who watches evictions (evicted.rs), if anyone registered.
    pub watch: &'a crate::WatchSlot,
}

/// A head segment this dead (1/4) is compacted rather than more memory taken.
const COMPACT_DEAD_SHARE: usize = 4;

/// Bound on make-room rounds for one operation; each round frees a segment or ages a hot one,
/// so hitting this means memory cannot be had.
pub(crate) const MAX_ATTEMPTS: usize = 100_000;

pub(crate) struct Shard {
    pub(crate) index: Index,
    pub(crate) segs: SegTable,
    /// Append target per FIFO (by `Queue`) and TTL group (0 = none yet).
    pub(crate) active: [[u32; TTL_BUCKETS]; 2],
    /// Keys the small FIFO evicted unread (S3-FIFO; empty under fifo).
    pub(crate) ghost: Ghost,
    pub(crate) flush_at: Option<Time>,
    pub(crate) stats: Counters,
    /// Index + metadata bytes currently charged to the budget.
    overhead: usize,
    pub(crate) sweep_cursor: usize,
    shard_no: u64,
    /// Items whose value is on flash (flash/entries.rs).
    pub(crate) flash: Entries,
    /// `Flash::recycled` when this shard's last full sweep began: a newer count means some
    /// entries may name recycled pages.
    pub(crate) flash_swept: u64,
}

pub(crate) enum Found {
    Live {
        pos: Pos,
        seg: u32,
        off: usize,
        hdr: Header,
    },
    /// The key's value is on flash (by its 55 hash bits; the read checks the key).
    Flash {
        pos: Pos,
        fref: FlashRef,
    },
    Dead(DeadReason),
    Absent,
}

/// A piece of a new item's key or value.
pub(crate) enum Part<'a> {
    Bytes(&'a [u8]),
    /// Bytes already in a segment (append/prepend, touch and eviction moves).
    Old {
        seg: u32,
        start: usize,
        len: usize,
    },
    /// memcached's decr pads with spaces.
    Spaces(usize),
}

impl Part<'_> {
    fn len(&self) -> usize {
        match self {
            Part::Bytes(b) => b.len(),
            Part::Old { len, .. } => *len,
            Part::Spaces(n) => *n,
        }
    }
}

/// `Shard::find`'s visit of a slot with the key's tag: a match (its header decoded into
/// `matched`), a skip, or a purge of a slot whose segment died (noted in `dead`). None: the
/// slot names no segment, it is a flashed one (`slot::FLASH_BASE` is past every segment id).
#[inline(always)]
fn visit_ram(
    segs: &mut SegTable,
    stats: &mut Counters,
    key: &[u8],
    s: u64,
    dead: &mut Option<DeadReason>,
    matched: &mut Option<Header>,
) -> Option<Visit> {
    let sg = slot::seg(s);
    let m = segs.metas.get(sg as usize)?;
    Some(match m.state {
        SegState::Live => {
            let d = &m.data[slot::off(s) as usize..];
            // Cheap rejections first: the key length is byte 1 of every header.
            if d[1] as usize != key.len() {
                return Some(Visit::Skip);
            }
            let hdr = item::decode(d);
            if &d[hdr.key_range()] == key {
                *matched = Some(hdr);
                Visit::Match
            } else {
                Visit::Skip
            }
        }
        SegState::Dead(r) => {
            segs.release_dead_ref(sg);
            if r == DeadReason::Expired && !slot::fetched(s) {
                stats.expired_unfetched += 1;
            }
            *dead = Some(r);
            Visit::Purge
        }
        SegState::Free => {
            debug_assert!(false, "index slot points at a free segment");
            Visit::Purge
        }
    })
}

/// `Shard::find_flashed`'s visit of a flashed slot (hash `h`): a match by the entry's hash
/// bits (the read checks the key), also when its page was recycled (the read finds nothing,
/// counts memcached's miss_from_extstore and drops it: flash/mod.rs `sweep_due`).
fn visit_flash(flash: &mut Entries, tier: Option<&Flash>, s: u64, h: u64) -> Visit {
    debug_assert!(slot::is_flash(s), "only a flashed slot names no segment");
    let i = slot::flash_entry(s);
    match (flash.get(i), tier) {
        (Some((check, _)), Some(_)) => {
            if check == entries::hash_check(h) {
                Visit::Match
            } else {
                Visit::Skip
            }
        }
        (Some(_), None) => {
            flash.free(i);
            Visit::Purge
        }
        (None, _) => {
            debug_assert!(false, "index slot names a free flash entry");
            Visit::Purge
        }
    }
}

impl Shard {
    pub fn new(shard_no: u64, geo: &Geometry, budget: &Budget) -> Shard {
        let index = Index::new(geo.initial_buckets);
        let segs = SegTable::new();
        let ghost = Ghost::new();
        let overhead = index.bytes() + segs.meta_bytes() + ghost.bytes();
        budget.force_add(overhead);
        Shard {
            index,
            segs,
            active: [[0; TTL_BUCKETS]; 2],
            ghost,
            flush_at: None,
            stats: Counters::default(),
            overhead,
            sweep_cursor: 0,
            shard_no,
            flash: Entries::new(),
            flash_swept: 0,
        }
    }

    /// Bytes this shard holds against the budget.
    pub fn used(&self) -> usize {
        self.segs.buffer_bytes + self.overhead
    }

    /// Charges (or refunds) index and metadata growth.
    pub fn sync_overhead(&mut self, env: &Env<'_>) {
        let cur =
            self.index.bytes() + self.segs.meta_bytes() + self.ghost.bytes() + self.flash.bytes();
        if cur > self.overhead {
            env.budget.force_add(cur - self.overhead);
        } else if cur < self.overhead {
            env.budget.sub(self.overhead - cur);
        }
        self.overhead = cur;
    }

    /// Index growth is charged after the fact; if that left the store over its limit, give
    /// back whole segments of this shard now rather than at the next reservation.
    pub fn trim(&mut self, env: &Env<'_>, now: Time) {
        if !env.geo.evict {
            return;
        }
        while env.budget.used() > env.budget.limit() {
            // A shard with no segment of its own (e.g. all flushed) takes one from a shard that
            // holds more than its share, so the overshoot does not last until the next write.
            if !self.evict_head(env, now, None) && !self.steal_one(env, now) {
                break;
            }
        }
    }

    // ---- reading -------------------------------------------------------------------------

    #[inline]
    pub fn header_at(&self, seg: u32, off: usize) -> Header {
        item::decode(&self.segs.metas[seg as usize].data[off..])
    }

    /// CAS from location: (segment seq, shard, offset). seq >= 1, so never 0.
    #[inline]
    pub(crate) fn derived_cas(&self, seg: u32, off: usize) -> u64 {
        (self.segs.metas[seg as usize].seq << 28) | (self.shard_no << 20) | off as u64
    }

    #[inline]
    pub fn cas_of(&self, geo: &Geometry, seg: u32, off: usize, hdr: &Header) -> u64 {
        if !geo.use_cas {
            return 0;
        }
        hdr.explicit_cas()
            .unwrap_or_else(|| self.derived_cas(seg, off))
    }

    /// Looks a key up. Slots with the key's tag that point at dead segments are dropped on the
    /// way; an expired item is unlinked and reported as such.
    ///
    /// A flashed slot costs a RAM hit nothing: its segment id is past every segment's
    /// (`slot::FLASH_BASE`), so the bounds check the segment lookup makes anyway is where this
    /// walk stops at one, and `find_flashed` walks again, knowing flash. (The flash checks in
    /// this walk cost a get hit 14 instructions, callgrind.)
    pub fn find(&mut self, env: &Env<'_>, h: u64, key: &[u8], now: Time) -> Found {
        let segs = &mut self.segs;
        let stats = &mut self.stats;
        let mut dead = None;
        // The matching item's header, decoded once for the key comparison and kept.
        let mut matched = None;
        let pos = self.index.find(h, |s| {
            visit_ram(segs, stats, key, s, &mut dead, &mut matched).unwrap_or(Visit::Match)
        });
        let Some(pos) = pos else {
            return dead.map_or(Found::Absent, Found::Dead);
        };
        let Some(hdr) = matched else {
            // A match that decoded no header: the walk stopped at a flashed slot.
            return self.find_flashed(env, h, key, now, dead);
        };
        self.live(env, pos, h, hdr, now)
    }

    /// `find` for a key whose walk met a flashed slot: the walk again, where a flashed slot
    /// matches by its entry's hash bits (the read checks the key) or is dropped if its page
    /// was recycled. `dead`: what the first walk dropped.
    #[cold]
    #[inline(never)]
    fn find_flashed(
        &mut self,
        env: &Env<'_>,
        h: u64,
        key: &[u8],
        now: Time,
        dead: Option<DeadReason>,
    ) -> Found {
        let segs = &mut self.segs;
        let stats = &mut self.stats;
        let flash = &mut self.flash;
        let mut dead = dead;
        let mut matched = None;
        let pos = self.index.find(h, |s| {
            visit_ram(segs, stats, key, s, &mut dead, &mut matched)
                .unwrap_or_else(|| visit_flash(flash, env.flash, s, h))
        });
        let Some(pos) = pos else {
            return dead.map_or(Found::Absent, Found::Dead);
        };
        match matched {
            Some(hdr) => self.live(env, pos, h, hdr, now),
            None => {
                let entry = slot::flash_entry(self.index.get(pos));
                let (_, loc) = self
                    .flash
                    .get(entry)
                    .expect("visit_flash matched a live entry");
                Found::Flash {
                    pos,
                    fref: FlashRef { h, entry, loc },
                }
            }
        }
    }

    /// Key hash `h`'s item expired after a read: under S3-FIFO, once the shard evicts, the
    /// ghost remembers it (`Left::Expired`), so its next set goes to main, not through
    /// probation again: a key read before its TTL ran out is likely read again after.
    fn expired_read(&mut self, env: &Env<'_>, h: u64) {
        if env.geo.eviction == Eviction::S3Fifo && self.stats.evictions > 0 {
            self.ghost
                .insert(h, self.stats.curr_items as usize, Left::Expired);
        }
    }

    /// `find`'s answer for the item whose header `hdr` was matched at `pos`: live, or
    /// unlinked as expired.
    #[inline(always)]
    fn live(&mut self, env: &Env<'_>, pos: Pos, h: u64, hdr: Header, now: Time) -> Found {
        let s = self.index.get(pos);
        let (seg, off) = (slot::seg(s), slot::off(s) as usize);
        if hdr.exp != 0 && hdr.exp <= now {
            if !slot::fetched(s) {
                self.stats.expired_unfetched += 1;
            } else {
                self.expired_read(env, h);
            }
            self.remove(env, pos);
            return Found::Dead(DeadReason::Expired);
        }
        Found::Live { pos, seg, off, hdr }
    }

    #[inline(always)]
    pub(crate) fn item_at(&self, geo: &Geometry, seg: u32, off: usize, hdr: &Header) -> Item<'_> {
        let m = &self.segs.metas[seg as usize];
        let d = &m.data[off..];
        Item {
            flags: hdr.flags,
            value: &d[hdr.value_range()],
            cas: self.cas_of(geo, seg, off, hdr),
            exp: hdr.exp,
            fetched: false,
            // Only a large item's buffer is never reused in place (segment.rs `reuse`).
            pages: if m.large { m.data.lendable() } else { None },
        }
    }

    /// Reads the live item under `key` (hash `h`) and marks it read. A flashed item is
    /// marked read too, and handed back with `f` for a read outside the lock.
    #[inline(always)]
    pub fn get<R, F: FnOnce(Item<'_>) -> R>(
        &mut self,
        env: &Env<'_>,
        h: u64,
        key: &[u8],
        now: Time,
        f: F,
    ) -> Result<Lookup<R>, (FlashRef, bool, F)> {
        Ok(match self.find(env, h, key, now) {
            Found::Flash { pos, fref } => {
                let s = self.index.get(pos);
                self.index.set(pos, slot::touched(s));
                return Err((fref, slot::fetched(s), f));
            }
            Found::Live { pos, seg, off, hdr } => {
                let s = self.index.get(pos);
                self.index.set(pos, slot::touched(s));
                let mut it = self.item_at(env.geo, seg, off, &hdr);
                it.fetched = slot::fetched(s);
                Lookup::Hit(f(it))
            }
            Found::Dead(DeadReason::Expired) => Lookup::Expired,
            Found::Dead(DeadReason::Flushed) => Lookup::Flushed,
            Found::Absent => Lookup::Miss,
        })
    }

    // ---- removing ------------------------------------------------------------------------

    /// The item at (seg, off) is no longer referenced by the index: mark it dead, update the
    /// counters, and drop its segment if that was the last live item of a closed segment.
    pub fn item_gone(&mut self, env: &Env<'_>, seg: u32, off: usize) {
        let m = &mut self.segs.metas[seg as usize];
        let len = item::decode(&m.data[off..]).total_len();
        item::mark_dead(&mut m.data[off..]);
        m.items -= 1;
        m.live_bytes -= len;
        self.stats.curr_items -= 1;
        self.stats.bytes -= len as u64;
        if m.items == 0 && !m.active {
            env.budget
                .release(self.segs.retire(seg, DeadReason::Expired));
        }
    }

    pub fn remove(&mut self, env: &Env<'_>, pos: Pos) {
        let s = self.index.get(pos);
        self.index.remove(pos);
        self.item_gone(env, slot::seg(s), slot::off(s) as usize);
    }

    pub fn delete(&mut self, env: &Env<'_>, h: u64, key: &[u8], now: Time) -> bool {
        match self.find(env, h, key, now) {
            Found::Live { pos, .. } => {
                self.remove(env, pos);
                true
            }
            Found::Flash { pos, fref } => {
                self.remove_flash(env, pos, &fref);
                true
            }
            _ => false,
        }
    }

    // ---- stats ---------------------------------------------------------------------------

    pub fn add_stats(&self, st: &mut StoreStats) {
        let c = &self.stats;
        // memcached counts an item whose value is on flash as an item.
        st.curr_items += c.curr_items + self.flash.live() as u64;
        st.flash_items += self.flash.live() as u64;
        st.flash_entry_bytes += self.flash.bytes() as u64;
        st.total_items += c.total_items;
        st.bytes += c.bytes;
        st.evictions += c.evictions;
        st.reclaimed += c.reclaimed;
        st.expired_unfetched += c.expired_unfetched;
        st.evicted_unfetched += c.evicted_unfetched;
        st.evictions_relocated += c.relocated;
        st.compactions += c.compactions;
        st.flushed += c.flushed;
        st.index_bytes += self.index.bytes() as u64;
        st.index_slots += self.index.slots() as u64;
        st.index_entries += self.index.items() as u64;
        st.index_overflow_buckets += self.index.overflow_buckets() as u64;
        st.meta_bytes += self.segs.meta_bytes() as u64;
        st.segments_used += self.segs.regular_segments as u64;
        for m in &self.segs.metas {
            if m.state != SegState::Live {
                continue;
            }
            if m.large {
                st.large_items += m.items as u64;
                st.large_bytes += m.data.len() as u64;
            } else {
                st.dead_bytes += (m.write - m.live_bytes) as u64;
                st.unwritten_bytes += m.room() as u64;
            }
        }
    }

    pub fn reset_stats(&mut self) {
        self.stats.reset();
    }
}

/// n in decimal, without allocating.
fn decimal(mut n: u64) -> ([u8; 20], usize) {
    let mut tmp = [0u8; 20];
    let mut i = 20;
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut out = [0u8; 20];
    out[..20 - i].copy_from_slice(&tmp[i..]);
    (out, 20 - i)
}

#[cfg(test)]
mod tests {
    #[test]
    fn decimal_digits() {
        for n in [0u64, 9, 10, 12345, u64::MAX] {
            let (d, l) = super::decimal(n);
            assert_eq!(&d[..l], n.to_string().as_bytes());
        }
    }
}
