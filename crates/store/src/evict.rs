//! Taking memory back: eviction, TTL expiry of whole segments, flush_all, and the index sweep.
//!
//! Owns the policies; shard.rs owns the operations that call them.
//!
//! Eviction (when the budget is full and evict=true) takes the oldest segment of the FIFO:
//! ```text
//!   victim: [a*][b ][c*][d (dead)][e ]      * = read since written (slot freq > 0)
//!   new segment for the writer: [a'][c'] .... room for the new item ....
//!   b, e evicted; a, c copied forward with freq - 1 and their CAS kept explicitly
//! ```
//! so items read since they were written survive (S3-FIFO's reinsertion; the FIFO order is by
//! segment). A large item (its own buffer) gets a second chance without a copy: its buffer
//! just moves to the FIFO tail, and its read count goes back to 0 (CLOCK's reference bit, not
//! S3-FIFO's count - 1). Under count - 1, large items read about ten times each in an earlier
//! phase sat at the cap of 7 and held on for seven passes, while the `LARGE_SECOND_CHANCES`
//! cap evicted whatever came next, the current phase's items included (memcaslap d after
//! `mnemo bench` d: 6.9-14.6% of gets missed against memcached's 0.7-4.5%; after, 0-2.6%
//! against 0-1.3%). Copying is capped so the new segment always has room for the item that
//! asked, and when nothing is worth keeping the victim's buffer itself is reused (no allocation).
//! A shard holding less than half its fair share (limit / shards) takes a segment from a shard
//! above its share instead (try_lock only: a shard lock is never waited for while another is
//! held). After an operation whose index growth pushed the store over its limit, the shard
//! evicts its own head segments until it is back under (`Shard::trim`).
//!
//! Expiry never reads items: a segment whose largest exp has passed is retired whole. Its index
//! slots are dropped lazily, by lookups that meet them or by the sweep `maintain` runs, and the
//! segment id stays reserved until the last one is gone.

use crate::index::slot;
use crate::item::{self, NewHeader};
use crate::segment::{DeadReason, SegState};
use crate::shard::{Env, Part, Shard};
use crate::{StoreError, Time};

/// Index buckets swept per lock hold (64 bytes each: a few microseconds).
const SWEEP_SLICE: usize = 4096;

/// Read large items spared per large reservation before one is evicted regardless.
const LARGE_SECOND_CHANCES: usize = 8;

enum Steal {
    Took,
    /// Some richer shard was busy; trying again may work.
    Busy,
    Nothing,
}

impl Shard {
    pub fn set_flush(&mut self, at: Time) {
        self.flush_at = Some(at);
    }

    /// Applies a pending flush_all once it is due. Exact: every item in the shard now was
    /// written before this first operation at or after `at`. O(segments).
    pub fn apply_flush(&mut self, env: &Env<'_>, now: Time) {
        match self.flush_at {
            Some(at) if now >= at => {}
            _ => return,
        }
        self.flush_at = None;
        for id in self.segs.live_ids() {
            self.retire_dead(env, id, DeadReason::Flushed);
        }
        self.active = [0; crate::segment::TTL_BUCKETS];
    }

    /// Retires a Live segment whose items are all dead, without reading them.
    fn retire_dead(&mut self, env: &Env<'_>, id: u32, reason: DeadReason) {
        let m = &mut self.segs.metas[id as usize];
        if m.active {
            m.active = false;
            self.active[m.ttl as usize] = 0;
        }
        let (items, bytes) = (m.items as u64, m.live_bytes as u64);
        self.stats.curr_items -= items;
        self.stats.bytes -= bytes;
        match reason {
            DeadReason::Expired => self.stats.reclaimed += items,
            DeadReason::Flushed => self.stats.flushed += items,
        }
        env.budget.release(self.segs.retire(id, reason));
    }

    /// Drops every segment whose items have all expired.
    pub fn expire_segments(&mut self, env: &Env<'_>, now: Time) {
        let expired: Vec<u32> = self
            .segs
            .live_ids()
            .into_iter()
            .filter(|&id| self.segs.metas[id as usize].expired(now))
            .collect();
        for id in expired {
            self.retire_dead(env, id, DeadReason::Expired);
        }
        self.sync_overhead(env);
    }

    /// One slice of the sweep that drops index slots pointing at dead segments. Returns whether
    /// the current pass has more to do.
    pub fn sweep_step(&mut self, env: &Env<'_>) -> bool {
        if self.segs.dead_refs == 0 {
            self.sweep_cursor = 0;
            return false;
        }
        let segs = &mut self.segs;
        let stats = &mut self.stats;
        self.sweep_cursor = self.index.sweep(self.sweep_cursor, SWEEP_SLICE, |e| {
            let sg = slot::seg(e);
            match segs.metas[sg as usize].state {
                SegState::Dead(r) => {
                    segs.release_dead_ref(sg);
                    if r == DeadReason::Expired && !slot::fetched(e) {
                        stats.expired_unfetched += 1;
                    }
                    true
                }
                _ => false,
            }
        });
        self.sync_overhead(env);
        self.sweep_cursor != 0
    }

    /// Frees memory for a reservation that did not fit. With `dest = Some((ttl, need))` an own
    /// eviction leaves TTL group `ttl` an active segment with `need` bytes free.
    pub fn make_room(
        &mut self,
        env: &Env<'_>,
        now: Time,
        dest: Option<(u8, usize)>,
    ) -> Result<(), StoreError> {
        if !env.geo.evict {
            return Err(StoreError::OutOfMemory);
        }
        // Under even load every shard hovers around its fair share and must evict its own
        // segments (only own eviction can keep read items). Taking from others is for real
        // imbalance, e.g. another shard full of large items.
        let mine_first = self.used() >= env.geo.fair_share / 2;
        if mine_first && self.evict_head(env, now, dest) {
            return Ok(());
        }
        let steal = self.steal(env, now);
        if let Steal::Took = steal {
            return Ok(());
        }
        if !mine_first && self.evict_head(env, now, dest) {
            return Ok(());
        }
        match steal {
            Steal::Busy => {
                std::thread::yield_now();
                Ok(())
            }
            _ => Err(StoreError::OutOfMemory),
        }
    }

    /// [`Shard::steal`] for callers outside eviction: whether a segment was taken.
    pub(crate) fn steal_one(&mut self, env: &Env<'_>, now: Time) -> bool {
        matches!(self.steal(env, now), Steal::Took)
    }

    /// Evicts the oldest segment of a shard that holds more than its fair share.
    fn steal(&mut self, env: &Env<'_>, now: Time) -> Steal {
        let n = env.shards.len();
        let mut busy = false;
        for i in 1..n {
            let j = (env.me + i) % n;
            let Some(mut other) = env.shards[j].try_lock() else {
                busy = true;
                continue;
            };
            if other.used() <= env.geo.fair_share || other.segs.head() == 0 {
                continue;
            }
            let other_env = Env { me: j, ..*env };
            other.apply_flush(&other_env, now);
            other.evict_head(&other_env, now, None);
            return Steal::Took;
        }
        if busy {
            Steal::Busy
        } else {
            Steal::Nothing
        }
    }

    /// Evicts the FIFO head. Returns false if the shard has no segment.
    pub fn evict_head(&mut self, env: &Env<'_>, now: Time, dest: Option<(u8, usize)>) -> bool {
        self.relocate(env, now, self.segs.head(), dest, false)
    }

    /// Compaction instead of growth: moves every live item of segment `v` to a new segment at
    /// the FIFO tail that then has `dest.1` bytes free for TTL group `dest.0`, and frees `v`.
    /// Nothing is evicted (the caller checked that everything fits) and read counts are not aged.
    pub fn compact(&mut self, env: &Env<'_>, now: Time, v: u32, dest: (u8, usize)) -> bool {
        self.relocate(env, now, v, Some(dest), true)
    }

    /// Empties regular or large segment `v` (0: none), keeping what eviction's rules (or, with
    /// `keep_all`, compaction's) keep.
    fn relocate(
        &mut self,
        env: &Env<'_>,
        now: Time,
        v: u32,
        dest: Option<(u8, usize)>,
        keep_all: bool,
    ) -> bool {
        if v == 0 {
            return false;
        }
        {
            let m = &mut self.segs.metas[v as usize];
            if m.active {
                m.active = false;
                self.active[m.ttl as usize] = 0;
            }
        }
        if self.segs.metas[v as usize].large {
            self.evict_large(env, now, v, dest.is_some());
            return true;
        }
        let geo = env.geo;
        let cap = dest.map_or(0, |(_, need)| geo.seg_size.saturating_sub(need));
        let mut target = 0u32; // copy-forward segment, allocated on the first keeper
        let mut w = 0usize;
        let end = self.segs.metas[v as usize].write;
        // A victim that is mostly dead space (overwritten or deleted items) is compacted:
        // all its live items move forward, so churn on a few keys never evicts live data.
        let mostly_dead = keep_all || self.segs.metas[v as usize].live_bytes * 2 <= geo.seg_size;
        let mut off = 0;
        while off < end {
            let hdr = self.header_at(v, off);
            let len = hdr.total_len();
            if hdr.is_dead() {
                off += len;
                continue;
            }
            let h = {
                let d = &self.segs.metas[v as usize].data[off..];
                xxhash_rust::xxh3::xxh3_64(&d[hdr.key_range()])
            };
            let Some(pos) = self.index.find_exact(h, v, off as u32) else {
                debug_assert!(false, "live item without index slot");
                off += len;
                continue;
            };
            let s = self.index.get(pos);
            let expired = hdr.exp != 0 && hdr.exp <= now;
            let cas = geo.use_cas.then(|| self.cas_of(geo, v, off, &hdr));
            let nh = NewHeader { key_len: hdr.key_len, value_len: hdr.value_len, flags: hdr.flags, exp: hdr.exp, cas };
            let nlen = nh.total_len();
            if !expired && dest.is_some() && (mostly_dead || slot::freq(s) > 0) && w + nlen <= cap {
                if target == 0 {
                    match self.open_credit_segment(env, now) {
                        Some(t) => target = t,
                        None => {
                            // No id left: cannot keep anything; fall through to evicting.
                            target = u32::MAX;
                        }
                    }
                }
                if target != u32::MAX {
                    let (kr, vr) = (hdr.key_range(), hdr.value_range());
                    self.place(
                        target,
                        w,
                        &nh,
                        Part::Old { seg: v, start: off + kr.start, len: kr.len() },
                        &[Part::Old { seg: v, start: off + vr.start, len: vr.len() }],
                    );
                    let s = if keep_all { s } else { slot::decayed(s) };
                    self.index.set(pos, slot::moved(s, target, w as u32));
                    w += nlen;
                    self.drop_from_victim(v, off, len);
                    self.stats.relocated += 1;
                    off += len;
                    continue;
                }
            }
            if expired {
                self.stats.reclaimed += 1;
                if !slot::fetched(s) {
                    self.stats.expired_unfetched += 1;
                }
            } else {
                self.stats.evictions += 1;
                if !slot::fetched(s) {
                    self.stats.evicted_unfetched += 1;
                }
            }
            self.index.remove(pos);
            self.drop_from_victim(v, off, len);
            off += len;
        }
        debug_assert_eq!(self.segs.metas[v as usize].items, 0);
        match dest {
            Some((ttl, _)) if target == 0 || target == u32::MAX => {
                // Nothing kept: the victim's buffer becomes the new segment as it is.
                self.segs.reuse(v, ttl, now);
                self.set_active(env, ttl, v);
            }
            Some((ttl, _)) => {
                env.budget.release(self.segs.retire(v, DeadReason::Expired));
                self.set_active(env, ttl, target);
            }
            None => {
                env.budget.release(self.segs.retire(v, DeadReason::Expired));
            }
        }
        self.sync_overhead(env);
        true
    }

    /// A new regular segment charged to the budget even if that overshoots it for a moment:
    /// it receives copies out of a victim whose buffer is freed right after.
    /// Usually the budget's spare: the previous victim's buffer (budget.rs says why).
    fn open_credit_segment(&mut self, env: &Env<'_>, now: Time) -> Option<u32> {
        let id = self.segs.alloc_id()?;
        let buf = env.budget.regular_buffer(true).expect("forced");
        self.segs.open(id, buf, false, 0, now);
        Some(id)
    }

    /// Bookkeeping for an item leaving the victim (moved or dropped); the slot is handled.
    fn drop_from_victim(&mut self, v: u32, off: usize, len: usize) {
        let m = &mut self.segs.metas[v as usize];
        item::mark_dead(&mut m.data[off..]);
        m.items -= 1;
        m.live_bytes -= len;
        self.stats.curr_items -= 1;
        self.stats.bytes -= len as u64;
    }

    /// Before a large item's reservation evicts: read large items at the head of the FIFO
    /// get their second chance first (moved, not copied), at most `LARGE_SECOND_CHANCES` of
    /// them, so that a cache of hot large items still makes room in bounded time.
    pub fn make_room_large(&mut self, env: &Env<'_>, now: Time) -> Result<(), StoreError> {
        if env.geo.evict && self.used() >= env.geo.fair_share / 2 {
            for _ in 0..LARGE_SECOND_CHANCES {
                let v = self.segs.head();
                if v == 0 || !self.segs.metas[v as usize].large || !self.second_chance(now, v) {
                    break;
                }
            }
        }
        self.make_room(env, now, None)
    }

    /// Large segment `v`'s item, if read since it was written (or last spared) and not
    /// expired: to the FIFO tail with its read count cleared, no copy. Returns whether it was
    /// spared.
    fn second_chance(&mut self, now: Time, v: u32) -> bool {
        if self.segs.metas[v as usize].items != 1 {
            return false;
        }
        let hdr = self.header_at(v, 0);
        let h = {
            let d = &self.segs.metas[v as usize].data;
            xxhash_rust::xxh3::xxh3_64(&d[hdr.key_range()])
        };
        let Some(pos) = self.index.find_exact(h, v, 0) else {
            return false;
        };
        let s = self.index.get(pos);
        if slot::freq(s) == 0 || (hdr.exp != 0 && hdr.exp <= now) {
            return false;
        }
        self.index.set(pos, slot::cleared(s));
        self.segs.move_to_tail(v);
        true
    }

    /// A large item's own buffer: second chance (to the FIFO tail, count cleared) if it was read
    /// and the caller can use a regular segment; otherwise dropped.
    fn evict_large(&mut self, env: &Env<'_>, now: Time, v: u32, may_keep: bool) {
        if may_keep && self.second_chance(now, v) {
            return;
        }
        if self.segs.metas[v as usize].items == 1 {
            let hdr = self.header_at(v, 0);
            let h = {
                let d = &self.segs.metas[v as usize].data;
                xxhash_rust::xxh3::xxh3_64(&d[hdr.key_range()])
            };
            if let Some(pos) = self.index.find_exact(h, v, 0) {
                let s = self.index.get(pos);
                if hdr.exp != 0 && hdr.exp <= now {
                    self.stats.reclaimed += 1;
                    if !slot::fetched(s) {
                        self.stats.expired_unfetched += 1;
                    }
                } else {
                    self.stats.evictions += 1;
                    if !slot::fetched(s) {
                        self.stats.evicted_unfetched += 1;
                    }
                }
                self.index.remove(pos);
                self.drop_from_victim(v, 0, hdr.total_len());
            }
        }
        env.budget.release(self.segs.retire(v, DeadReason::Expired));
    }
}
