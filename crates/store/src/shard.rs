//! One shard: the cache operations on the index and segments it owns, under its mutex.
//!
//! Owns the semantics of get/touch/store/delete/delta (memcached's rules) and the write path:
//! reserve space -> write the new copy -> repoint the index slot -> retire the old copy.
//! Making room (eviction), expiry, flush and the sweep live in evict.rs.
//!
//! A lookup (`find`) walks the index for RAM items only; a flashed slot (flash/) stops the
//! walk, and only then is the walk made again knowing flash (`find_flashed`), so a RAM hit
//! costs the same with or without a flash tier.
//!
//! Every modification writes a new copy at a location never used before, which is what makes
//! the derived CAS new. Reserving space may evict, and eviction may move or drop any item, so a
//! write that had to make room starts over from the lookup (`Reserve::Retry`).

use parking_lot::Mutex;

use crate::budget::Budget;
use crate::flash::entries::{self, Entries};
use crate::flash::{Flash, FlashRef};
use crate::config::Geometry;
use crate::ghost::Ghost;
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
    Live { pos: Pos, seg: u32, off: usize, hdr: Header },
    /// The key's value is on flash (by its 55 hash bits; the read checks the key).
    Flash { pos: Pos, fref: FlashRef },
    Dead(DeadReason),
    Absent,
}

/// A piece of a new item's key or value.
pub(crate) enum Part<'a> {
    Bytes(&'a [u8]),
    /// Bytes already in a segment (append/prepend, touch and eviction moves).
    Old { seg: u32, start: usize, len: usize },
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
/// bits (the read checks the key), or a purge if its page was recycled (counted there).
fn visit_flash(flash: &mut Entries, tier: Option<&Flash>, s: u64, h: u64) -> Visit {
    debug_assert!(slot::is_flash(s), "only a flashed slot names no segment");
    let i = slot::flash_entry(s);
    match (flash.get(i), tier) {
        (Some((check, loc)), Some(f)) if f.current(&loc) => {
            if check == entries::hash_check(h) {
                Visit::Match
            } else {
                Visit::Skip
            }
        }
        (Some(_), _) => {
            flash.free(i);
            Visit::Purge
        }
        (None, _) => {
            debug_assert!(false, "index slot names a free flash entry");
            Visit::Purge
        }
    }
}

pub(crate) enum Reserve {
    At(u32, usize),
    Retry,
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
        let cur = self.index.bytes() + self.segs.meta_bytes() + self.ghost.bytes() + self.flash.bytes();
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
        hdr.explicit_cas().unwrap_or_else(|| self.derived_cas(seg, off))
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
        self.live(env, pos, hdr, now)
    }

    /// `find` for a key whose walk met a flashed slot: the walk again, where a flashed slot
    /// matches by its entry's hash bits (the read checks the key) or is dropped if its page
    /// was recycled. `dead`: what the first walk dropped.
    #[cold]
    #[inline(never)]
    fn find_flashed(&mut self, env: &Env<'_>, h: u64, key: &[u8], now: Time, dead: Option<DeadReason>) -> Found {
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
            Some(hdr) => self.live(env, pos, hdr, now),
            None => {
                let entry = slot::flash_entry(self.index.get(pos));
                let (_, loc) = self.flash.get(entry).expect("visit_flash matched a live entry");
                Found::Flash { pos, fref: FlashRef { h, entry, loc } }
            }
        }
    }

    /// `find`'s answer for the item whose header `hdr` was matched at `pos`: live, or
    /// unlinked as expired.
    #[inline(always)]
    fn live(&mut self, env: &Env<'_>, pos: Pos, hdr: Header, now: Time) -> Found {
        let s = self.index.get(pos);
        let (seg, off) = (slot::seg(s), slot::off(s) as usize);
        if hdr.exp != 0 && hdr.exp <= now {
            if !slot::fetched(s) {
                self.stats.expired_unfetched += 1;
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
            env.budget.release(self.segs.retire(seg, DeadReason::Expired));
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

    // ---- writing -------------------------------------------------------------------------

    /// Makes `id` the append target of TTL group `ttl` in its FIFO; the previous one is closed
    /// (and dropped if nothing in it is live any more).
    pub fn set_active(&mut self, env: &Env<'_>, ttl: u8, id: u32) {
        let q = self.segs.metas[id as usize].queue as usize;
        let old = self.active[q][ttl as usize];
        if old != 0 && old != id {
            let m = &mut self.segs.metas[old as usize];
            m.active = false;
            if m.items == 0 && m.state == SegState::Live {
                env.budget.release(self.segs.retire(old, DeadReason::Expired));
            }
        }
        self.active[q][ttl as usize] = id;
        let m = &mut self.segs.metas[id as usize];
        m.active = true;
        m.ttl = ttl;
    }

    /// Finds `size` bytes for a new item in TTL group `ttl` of FIFO `q`: in the group's
    /// segment, a new segment, or a buffer of its own for a large item. `Retry` means memory
    /// was made by evicting, which may have moved anything: look the key up again.
    pub fn reserve(
        &mut self,
        env: &Env<'_>,
        size: usize,
        ttl: u8,
        q: Queue,
        now: Time,
    ) -> Result<Reserve, StoreError> {
        let geo = env.geo;
        let ttl = geo.ttl_group(ttl);
        if size > geo.large_min {
            if crate::budget::large_len(size) > env.budget.limit() {
                return Err(StoreError::OutOfMemory);
            }
            let buf = env.budget.take_large(size);
            if env.budget.try_add(buf.len()) {
                let Some(id) = self.segs.alloc_id() else {
                    env.budget.release(buf);
                    return Err(StoreError::OutOfMemory);
                };
                self.segs.open(id, buf, true, ttl, q, now);
                return Ok(Reserve::At(id, 0));
            }
            env.budget.give_large(buf);
            self.make_room_large(env, now)?;
            return Ok(Reserve::Retry);
        }
        let a = self.active[q as usize][ttl as usize];
        if a != 0 {
            let m = &self.segs.metas[a as usize];
            if m.room() >= size {
                return Ok(Reserve::At(a, m.write));
            }
        }
        // Before taking more memory, reclaim dead space: a log of overwritten values would
        // otherwise grow to the limit before anything is reused (budget.rs says what fresh
        // memory costs). Compaction moves every live item of a mostly dead segment to a new
        // segment (the spare's buffer, usually) and frees it. Only while memory is left: once
        // the budget is full, eviction decides what stays.
        if let Some(v) = self.compaction_victim(env, ttl, q, size) {
            self.compact(env, now, v, (ttl, size, q));
            self.stats.compactions += 1;
            return Ok(Reserve::Retry);
        }
        if let Some(buf) = env.budget.regular_buffer(false) {
            let Some(id) = self.segs.alloc_id() else {
                env.budget.release(buf);
                return Err(StoreError::OutOfMemory);
            };
            self.segs.open(id, buf, false, ttl, q, now);
            self.set_active(env, ttl, id);
            return Ok(Reserve::At(id, 0));
        }
        self.make_room(env, now, Some((ttl, size, q)))?;
        Ok(Reserve::Retry)
    }

    /// The segment to compact before opening a new one, if any: only while the budget still
    /// has room (the alternative is fresh memory, not eviction); of the regular segments of
    /// TTL group `ttl` in FIFO `q` (the moved items join that group's new segment, so groups
    /// stay apart and still expire whole, and compaction never moves items between FIFOs), the one with the most dead bytes (overwritten, deleted, expired
    /// items), if at least `1 / COMPACT_DEAD_SHARE` of a segment is dead and its live items
    /// (each maybe growing by an explicit CAS) plus the `size` bytes asked for fit in one
    /// segment. Greedy, as in
    /// log-structured file systems: the deadest segment frees the most per byte copied. At a
    /// quarter dead, compaction copies at most 3 bytes per byte it frees; fresh memory costs a
    /// fault and a zeroing per page, several times that (budget.rs). O(segments of the shard),
    /// once per segment filled.
    fn compaction_victim(&self, env: &Env<'_>, ttl: u8, q: Queue, size: usize) -> Option<u32> {
        let seg = env.geo.seg_size;
        if env.budget.used() + seg > env.budget.limit() {
            return None;
        }
        let (mut best, mut best_dead) = (0u32, 0usize);
        let mut id = self.segs.head();
        while id != 0 {
            let m = &self.segs.metas[id as usize];
            let dead = m.write - m.live_bytes;
            if !m.large
                && m.ttl == ttl
                && m.queue == q
                && dead > best_dead
                && m.live_bytes + 8 * m.items as usize + size <= seg
            {
                (best, best_dead) = (id, dead);
            }
            id = self.segs.next_of(id);
        }
        (best != 0 && best_dead * COMPACT_DEAD_SHARE >= seg).then_some(best)
    }

    /// Writes `part` at `at` in segment `seg`. A request's bytes (every set's key and value)
    /// are copied inline: this and the boxed flash tier (lib.rs) took a set from 2,854 to
    /// 2,805 instructions (callgrind, bench/instructions.sh), most of it the two calls here.
    #[inline(always)]
    fn copy_part(&mut self, seg: u32, at: usize, part: &Part<'_>) {
        match *part {
            Part::Bytes(b) => {
                self.segs.metas[seg as usize].data[at..at + b.len()].copy_from_slice(b)
            }
            _ => self.copy_other(seg, at, part),
        }
    }

    /// `copy_part` for bytes that are not the request's: moved or padding.
    #[inline(never)]
    fn copy_other(&mut self, seg: u32, at: usize, part: &Part<'_>) {
        match *part {
            Part::Bytes(b) => {
                self.segs.metas[seg as usize].data[at..at + b.len()].copy_from_slice(b)
            }
            Part::Spaces(n) => self.segs.metas[seg as usize].data[at..at + n].fill(b' '),
            Part::Old { seg: src, start, len } if src == seg => {
                self.segs.metas[seg as usize].data.copy_within(start..start + len, at)
            }
            Part::Old { seg: src, start, len } => {
                let (from, to) = self.segs.pair_mut(src, seg);
                to[at..at + len].copy_from_slice(&from[start..start + len]);
            }
        }
    }

    /// Writes an item at a reserved place and counts it live. Returns its length.
    pub fn place(
        &mut self,
        seg: u32,
        off: usize,
        nh: &NewHeader,
        key: Part<'_>,
        value: &[Part<'_>],
    ) -> usize {
        let len = nh.total_len();
        let mut w = off + nh.encode(&mut self.segs.metas[seg as usize].data[off..off + len]);
        self.copy_part(seg, w, &key);
        w += key.len();
        for p in value {
            self.copy_part(seg, w, p);
            w += p.len();
        }
        debug_assert_eq!(w, off + len);
        let m = &mut self.segs.metas[seg as usize];
        debug_assert!(m.large || m.write == off);
        m.write = off + len;
        m.items += 1;
        m.live_bytes += len;
        m.max_exp = m.max_exp.max(exp_bound(nh.exp));
        self.stats.curr_items += 1;
        self.stats.bytes += len as u64;
        len
    }

    /// Adds a slot for a new key, growing the index by a bucket when it is loaded.
    pub(crate) fn index_insert(&mut self, h: u64, s: u64) {
        self.index.insert(h, s);
        while self.index.wants_split() {
            let segs = &mut self.segs;
            let stats = &mut self.stats;
            let flash = &self.flash;
            self.index.split_one(|e| {
                if slot::is_flash(e) {
                    // The entry keeps the hash bits below the tag: all a bucket is chosen by.
                    return flash.get(slot::flash_entry(e)).map(|(check, _)| check | slot::tag(e) << 40);
                }
                let sg = slot::seg(e);
                match segs.metas[sg as usize].state {
                    SegState::Live => {
                        let d = &segs.metas[sg as usize].data[slot::off(e) as usize..];
                        let hdr = item::decode(d);
                        Some(xxhash_rust::xxh3::xxh3_64(&d[hdr.key_range()]))
                    }
                    SegState::Dead(r) => {
                        segs.release_dead_ref(sg);
                        if r == DeadReason::Expired && !slot::fetched(e) {
                            stats.expired_unfetched += 1;
                        }
                        None
                    }
                    SegState::Free => None,
                }
            });
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn store(
        &mut self,
        env: &Env<'_>,
        h: u64,
        mode: Mode,
        key: &[u8],
        flags: u32,
        exp: Time,
        value: &[u8],
        now: Time,
    ) -> Result<StoreOutcome, StoreError> {
        let r = self.store_inner(env, h, mode, key, flags, exp, value, now);
        if r.is_err() && mode == Mode::Set {
            // memcached: a failed set must not leave the old value readable.
            self.delete(env, h, key, now);
        }
        self.sync_overhead(env);
        self.trim(env, now);
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn store_inner(
        &mut self,
        env: &Env<'_>,
        h: u64,
        mode: Mode,
        key: &[u8],
        flags: u32,
        exp: Time,
        value: &[u8],
        now: Time,
    ) -> Result<StoreOutcome, StoreError> {
        let geo = env.geo;
        let concat = matches!(mode, Mode::Append | Mode::Prepend);
        // The FIFO of a new key, decided once: the ghost forgets a key it is asked about.
        let mut new_key_queue = None;
        for _ in 0..MAX_ATTEMPTS {
            let old = match self.find(env, h, key, now) {
                Found::Live { pos, seg, off, hdr } => Some((pos, seg, off, hdr)),
                // The store layer brought a flashed item back to RAM first where the mode needs
                // the old value; a flashed copy still here is overwritten: it must never be
                // found again after this write.
                Found::Flash { pos, fref } => {
                    self.remove_flash(env, pos, &fref);
                    continue;
                }
                _ => None,
            };
            match (mode, &old) {
                (Mode::Add, Some(_)) => return Ok(StoreOutcome::NotStored),
                (Mode::Replace | Mode::Append | Mode::Prepend, None) => {
                    return Ok(StoreOutcome::NotStored)
                }
                (Mode::Cas(_), None) => return Ok(StoreOutcome::NotFound),
                // With CAS disabled every item's CAS is 0 and memcached compares the item's
                // (0) with the old one's (0): the cas command always succeeds.
                (Mode::Cas(c), Some((_, seg, off, hdr)))
                    if geo.use_cas && self.cas_of(geo, *seg, *off, hdr) != c =>
                {
                    return Ok(StoreOutcome::Exists)
                }
                _ => {}
            }
            let (nflags, nexp, vlen) = match (&old, concat) {
                (Some((_, _, _, o)), true) => (o.flags, o.exp, o.value_len as usize + value.len()),
                _ => (flags, exp, value.len()),
            };
            if key.len() + vlen > geo.item_size_max {
                // Only reachable by append/prepend: memcached's failed allocation -> NOT_STORED.
                return Ok(StoreOutcome::NotStored);
            }
            let nh = NewHeader {
                key_len: key.len() as u8,
                value_len: vlen as u32,
                flags: nflags,
                exp: nexp,
                cas: None,
            };
            let ttl = ttl_bucket(nexp, now);
            let q = match &old {
                Some((_, oseg, _, _)) => self.admit(geo, h, Some(*oseg), nh.total_len()),
                None => *new_key_queue.get_or_insert_with(|| self.admit(geo, h, None, nh.total_len())),
            };
            let (seg, off) = match self.reserve(env, nh.total_len(), ttl, q, now) {
                Ok(Reserve::At(seg, off)) => (seg, off),
                Ok(Reserve::Retry) => continue,
                Err(_) if concat => return Ok(StoreOutcome::NotStored),
                Err(e) => return Err(e),
            };
            let old_value = old.as_ref().map(|(_, oseg, ooff, o)| {
                let r = o.value_range();
                Part::Old { seg: *oseg, start: ooff + r.start, len: r.len() }
            });
            match (mode, old_value) {
                (Mode::Append, Some(ov)) => {
                    self.place(seg, off, &nh, Part::Bytes(key), &[ov, Part::Bytes(value)])
                }
                (Mode::Prepend, Some(ov)) => {
                    self.place(seg, off, &nh, Part::Bytes(key), &[Part::Bytes(value), ov])
                }
                _ => self.place(seg, off, &nh, Part::Bytes(key), &[Part::Bytes(value)]),
            };
            let new_slot = slot::new(slot::tag_of_hash(h), seg, off as u32);
            match old {
                Some((pos, oseg, ooff, _)) => {
                    self.index.set(pos, new_slot);
                    self.item_gone(env, oseg, ooff);
                }
                None => self.index_insert(h, new_slot),
            }
            self.stats.total_items += 1;
            let cas = if geo.use_cas { self.derived_cas(seg, off) } else { 0 };
            return Ok(StoreOutcome::Stored { cas });
        }
        Err(StoreError::OutOfMemory)
    }

    /// Gives a live item a new exp, keeping its CAS. In place when the header has an exp
    /// field; otherwise the item is rewritten with one (and with its CAS made explicit).
    fn retime(
        &mut self,
        env: &Env<'_>,
        h: u64,
        key: &[u8],
        exp: Time,
        now: Time,
    ) -> Result<Found, StoreError> {
        for _ in 0..MAX_ATTEMPTS {
            let (pos, seg, off, hdr) = match self.find(env, h, key, now) {
                Found::Live { pos, seg, off, hdr } => (pos, seg, off, hdr),
                // The store brought it back to RAM before; on flash again means making room
                // for the rewrite evicted it there: this change fails as for an evicted item,
                // and the old copy must not outlive the failure.
                Found::Flash { pos, fref } => {
                    self.remove_flash(env, pos, &fref);
                    return Ok(Found::Absent);
                }
                other => return Ok(other),
            };
            let s = self.index.get(pos);
            if let Some(eo) = hdr.exp_offset() {
                let m = &mut self.segs.metas[seg as usize];
                m.data[off + eo..off + eo + 4].copy_from_slice(&exp.to_le_bytes());
                // The segment must not be dropped as expired before this item is.
                m.max_exp = m.max_exp.max(exp_bound(exp));
                self.index.set(pos, slot::touched(s));
                let hdr = self.header_at(seg, off);
                return Ok(Found::Live { pos, seg, off, hdr });
            }
            if exp == 0 {
                self.index.set(pos, slot::touched(s));
                return Ok(Found::Live { pos, seg, off, hdr });
            }
            let cas = env.geo.use_cas.then(|| self.cas_of(env.geo, seg, off, &hdr));
            let nh = NewHeader { key_len: hdr.key_len, value_len: hdr.value_len, flags: hdr.flags, exp, cas };
            let q = self.admit(env.geo, h, Some(seg), 0);
            let (nseg, noff) = match self.reserve(env, nh.total_len(), ttl_bucket(exp, now), q, now)? {
                Reserve::At(a, b) => (a, b),
                Reserve::Retry => continue,
            };
            let (kr, vr) = (hdr.key_range(), hdr.value_range());
            self.place(
                nseg,
                noff,
                &nh,
                Part::Old { seg, start: off + kr.start, len: kr.len() },
                &[Part::Old { seg, start: off + vr.start, len: vr.len() }],
            );
            self.index.set(pos, slot::moved(slot::touched(s), nseg, noff as u32));
            self.item_gone(env, seg, off);
            let hdr = self.header_at(nseg, noff);
            return Ok(Found::Live { pos, seg: nseg, off: noff, hdr });
        }
        Err(StoreError::OutOfMemory)
    }

    pub fn touch(&mut self, env: &Env<'_>, h: u64, key: &[u8], exp: Time, now: Time) -> bool {
        let r = matches!(self.retime(env, h, key, exp, now), Ok(Found::Live { .. }));
        self.sync_overhead(env);
        self.trim(env, now);
        r
    }

    pub fn get_and_touch<R>(
        &mut self,
        env: &Env<'_>,
        h: u64,
        key: &[u8],
        exp: Time,
        now: Time,
        f: impl FnOnce(Item<'_>) -> R,
    ) -> Lookup<R> {
        let r = self.retime(env, h, key, exp, now);
        self.sync_overhead(env);
        let out = match r {
            Ok(Found::Live { pos, seg, off, hdr }) => {
                let s = self.index.get(pos);
                self.index.set(pos, slot::touched(s));
                let mut it = self.item_at(env.geo, seg, off, &hdr);
                it.fetched = slot::fetched(s);
                Lookup::Hit(f(it))
            }
            Ok(Found::Dead(DeadReason::Expired)) => Lookup::Expired,
            Ok(Found::Dead(DeadReason::Flushed)) => Lookup::Flushed,
            // Still on flash: the store could not bring it back (no memory with evict=false).
            Ok(Found::Absent | Found::Flash { .. }) => Lookup::Miss,
            // No memory to give the item an expiry (evict=false): serve it unchanged.
            Err(_) => self.get(env, h, key, now, f).unwrap_or(Lookup::Miss),
        };
        // After the read: trimming may evict the segment the item was just read from.
        self.trim(env, now);
        out
    }

    #[allow(clippy::too_many_arguments)]
    pub fn delta(
        &mut self,
        env: &Env<'_>,
        h: u64,
        key: &[u8],
        incr: bool,
        delta: u64,
        now: Time,
        parse: impl FnOnce(&[u8]) -> Option<u64>,
        pad: bool,
    ) -> Result<(u64, u64), DeltaError> {
        let r = self.delta_inner(env, h, key, incr, delta, now, parse, pad);
        self.sync_overhead(env);
        self.trim(env, now);
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn delta_inner(
        &mut self,
        env: &Env<'_>,
        h: u64,
        key: &[u8],
        incr: bool,
        delta: u64,
        now: Time,
        parse: impl FnOnce(&[u8]) -> Option<u64>,
        pad: bool,
    ) -> Result<(u64, u64), DeltaError> {
        let mut parse = Some(parse);
        // Computed once: a retry after eviction finds the same value (eviction moves, never
        // changes, items) or none.
        let mut result: Option<(u64, [u8; 20], usize)> = None;
        for _ in 0..MAX_ATTEMPTS {
            let (pos, seg, off, hdr) = match self.find(env, h, key, now) {
                Found::Live { pos, seg, off, hdr } => (pos, seg, off, hdr),
                // As in retime: back on flash after the store brought it to RAM.
                Found::Flash { pos, fref } => {
                    self.remove_flash(env, pos, &fref);
                    return Err(DeltaError::NotFound);
                }
                _ => return Err(DeltaError::NotFound),
            };
            let old_len = hdr.value_len as usize;
            if result.is_none() {
                if old_len == 0 {
                    return Err(DeltaError::NonNumeric);
                }
                let d = &self.segs.metas[seg as usize].data[off..];
                let parse = parse.take().expect("parse runs once");
                let v = parse(&d[hdr.value_range()]).ok_or(DeltaError::NonNumeric)?;
                let n = if incr { v.wrapping_add(delta) } else { v.saturating_sub(delta) };
                let (digits, dl) = decimal(n);
                result = Some((n, digits, dl));
            }
            let (n, digits, dl) = result.unwrap();
            // memcached rewrites in place when the number got shorter, leaving the old length
            // padded with spaces ("10" decr 1 -> "9 "); we reproduce the bytes.
            let vlen = if pad { dl.max(old_len) } else { dl };
            let nh = NewHeader { key_len: hdr.key_len, value_len: vlen as u32, flags: hdr.flags, exp: hdr.exp, cas: None };
            let q = self.admit(env.geo, h, Some(seg), 0);
            let (nseg, noff) = match self.reserve(env, nh.total_len(), ttl_bucket(hdr.exp, now), q, now) {
                Ok(Reserve::At(a, b)) => (a, b),
                Ok(Reserve::Retry) => continue,
                // No variant for it in the API; only reachable with evict=false and full memory.
                Err(_) => return Err(DeltaError::NotFound),
            };
            self.place(
                nseg,
                noff,
                &nh,
                Part::Bytes(key),
                &[Part::Bytes(&digits[..dl]), Part::Spaces(vlen - dl)],
            );
            let s = self.index.get(pos);
            self.index.set(pos, slot::moved(slot::touched(s), nseg, noff as u32));
            self.item_gone(env, seg, off);
            let cas = if env.geo.use_cas { self.derived_cas(nseg, noff) } else { 0 };
            return Ok((n, cas));
        }
        Err(DeltaError::NotFound)
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
