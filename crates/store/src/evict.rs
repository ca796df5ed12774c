//! Taking memory back: eviction, TTL expiry of whole segments, flush_all, and the index sweep.
//!
//! Owns the policies; shard.rs owns the operations that call them.
//!
//! Eviction (when the budget is full and evict=true) is S3-FIFO adapted to segments by default
//! (`Eviction::S3Fifo`), or one FIFO with reinsertion (`Eviction::Fifo`, the policy before it).
//! Under S3-FIFO each shard keeps two FIFOs of segments and a ghost of key hashes:
//! ```text
//!   set of a new key ──(ghost remembers it, or under half the mean item size?)──yes──┐
//!        │ no                                                          v
//!        v                                                   ┌──── Main FIFO ─────┐
//!   ┌─ Small FIFO (1/20..1/2 of the segment) ───┐            │ head          tail │
//!   │ head                                 tail │            └──┬──────────────^──┘
//!   └──┬────────────────────────────────────────┘               │ evicted:     │ read since written:
//!      │ evicted: read there? ──yes── copied to Main's tail ────────────────────┤ copied forward,
//!      │                      └─no─── dropped, key hash -> ghost (if <= 2 KiB)  │ min(freq, 2) - 1
//!      v                                                        └─ unread: dropped, -> ghost
//!   ghost: a ring-like table of 32-bit fingerprints, ~the shard's item count (ghost.rs);
//!   a key back from it goes to Main and moves Small's share: up if it had left Small, down
//!   (8x as far) if it had left Main; it also remembers read items that expired (Main, no move)
//!   large items (own buffers) over 1/4 of the shard's bytes: the oldest large item is the
//!   victim instead of either head (a large item pushes out large items)
//! ```
//! The victim is Small's head while Small holds more than its target share of the shard's
//! segment bytes (or Main is empty), else Main's head. The share adapts, between 1/20 and 1/2,
//! as ARC's does (ghost.rs): the ghost also remembers keys Main evicted unread; a key back
//! from Small's ghost grows Small's share, one back from Main's shrinks it 8 times as fast
//! (after a popularity shift nothing Main evicts comes back, so Small grows and Main, full of
//! the old phase's keys, turns over; zipf-shift at 25 MiB, store-level replay: 0.2992 with a
//! fixed 1/10, 0.2842 adaptive; memcached through the server: 0.2893). So one-hit wonders
//! (most of a trace's keys) leave after a short probation without pushing anything out of Main, a scan cannot
//! flush Main, and a key that comes back soon after leaving unread (its set after a look-aside
//! miss) skips probation. Size awareness, for object hit ratio where sizes differ widely
//! (memcached's slab classes give each size class its own memory, so a large item only pushes
//! out large ones; size-blind, mnemod missed 1.76x memcached's on 10 B..500 KB values):
//! an item must have been read more often to be kept the larger it is (`size_bar`: beyond 1 KiB
//! two reads more, then one more per doubling, up to 5), so the memory of one large item keeps several
//! small ones where they are read as often; large items (own buffers) over `LARGE_SHARE` of
//! the shard evict each other; an item under half the mean size skips probation
//! (`MAIN_DIRECT`); the ghost remembers only items up to `GHOST_MAX_LEN`. Replay of the mixed
//! sizes at 45 / 88 MiB, object miss ratio 0.4807 / 0.3951 before these three rules, 0.2751 /
//! 0.2315 after (memcached through the server at the same memory: 0.2688 / 0.2467); byte miss
//! 0.51 / 0.44 (memcached 0.65 / 0.54). Measured with the store alone (examples/replay.rs), miss
//! ratio s3fifo / fifo: Zipf 0.99 at 3 and 27 MiB (2% and 18% of its data) 0.86 and 0.92;
//! mixed sizes (10 B..500 KB) at 36 and 72 MiB 0.85 and 0.78; web12 at 0.5-2 MiB 0.98-0.82;
//! orm-night at 23 and 34 MiB 0.82 and 0.88 (1.05 and 1.07 without the size bar: a trace
//! FIFO-reinsertion already serves as well as LRU, where the second active segment's slack
//! costs more items than probation gains).
//! What S3-FIFO costs: Small's active segment is a second one being filled per TTL group
//! (half a segment of slack more per shard, a few % of small caches), and reads of keys
//! that are not set again after a miss (memcaslap: a run reads what it set itself, but not
//! within Small's window) miss more than under fifo (incoming.rs has that test).
//!
//! A victim's items are relocated:
//! ```text
//!   victim: [a*][b ][c*][d (dead)][e ]      * = read since written (slot freq > 0)
//!   Main's active segment: [....][a'][c'] .... room ....
//!   b, e evicted; a, c copied forward with min(freq, 2) - 1 (fifo: freq - 1), CAS kept explicitly
//! ```
//! so items read since they were written survive (S3-FIFO's reinsertion in Main and promotion
//! out of Small; the FIFO order is by segment). Keepers go to Main's active segment of their
//! own TTL group (the writer's only when theirs is full and a segment was already opened), and
//! at most one new segment is opened for them per victim; where the writer writes to that same
//! segment (fifo, or a set that goes to Main) they leave it room for the item that asked, and
//! when no new segment was needed the victim's buffer itself becomes the writer's new segment
//! (no allocation). Own group, because a segment expires whole only once its last item has:
//! a kept item without a TTL in a TTL group's segment kept it from ever expiring, and one with
//! a TTL sat expired in a segment that never does until eviction came round. Store-level
//! replay of zipf-ttl at 25 MiB (with config.rs's smaller segments): 2.1 MB of expired and
//! 2.7 MB of dead (expired, then read) items held at the end before, 0.28 / 0.05 MB after;
//! miss ratio at 7 / 25 MiB 0.3426 / 0.2704 -> 0.3394 / 0.2638 (the other workloads alike,
//! none of them has a TTL). A large item (its own buffer) read
//! since written (under S3-FIFO, in main: more than `LARGE_BAR` times) gets a second chance
//! without a copy: its buffer just moves to Main's tail, and its read count goes
//! back to 0 (CLOCK's reference bit, not S3-FIFO's count - 1). Under count - 1, large items
//! read about ten times each in an earlier phase sat at the cap of 7 and held on for seven
//! passes, while the `LARGE_SECOND_CHANCES` cap evicted whatever came next, the current
//! phase's items included (memcaslap d after `mnemo bench` d: 6.9-14.6% of gets missed
//! against memcached's 0.7-4.5%; after, 0-2.6% against 0-1.3%).
//! A shard holding less than half its fair share (limit / shards) takes a segment from a shard
//! above its share instead (try_lock only: a shard lock is never waited for while another is
//! held). After an operation whose index growth pushed the store over its limit, the shard
//! evicts its own head segments until it is back under (`Shard::trim`).
//!
//! Expiry does not move items: a segment whose largest exp has passed is retired whole. Its index
//! slots are dropped lazily, by lookups that meet them or by the sweep `maintain` runs, and the
//! segment id stays reserved until the last one is gone. Under S3-FIFO, once the shard evicts,
//! its items that had been read are first remembered by the ghost (`remember_read`), as is an
//! item a read finds expired: a key read before its TTL ran out goes to main when set again.

use crate::config::{Eviction, Geometry};
use crate::ghost::{Left, SPLIT_ONE};
use crate::index::{slot, Pos};
use crate::item::{self, NewHeader};
use crate::segment::{ttl_bucket, DeadReason, Queue, SegState};
use crate::shard::{Env, Part, Shard};
use crate::{StoreError, Time};

/// Index buckets swept per lock hold (64 bytes each: a few microseconds).
const SWEEP_SLICE: usize = 4096;

/// Read large items spared per large reservation before one is evicted regardless.
const LARGE_SECOND_CHANCES: usize = 8;

/// Size awareness for large items (S3-FIFO only): one in its own buffer that reaches main's
/// head is spared (moved to main's tail, count cleared) only if read more than `LARGE_BAR`
/// times since it entered main or was last spared. One read is not enough: the memory of one
/// such item (32 KiB..) holds dozens of small ones. Out of small one read still promotes it:
/// requiring two there too gained twice as much on the replays below, but a run that reads
/// only what it set itself, once or twice soon after (memcaslap; incoming.rs's tests),
/// missed 368 of 600 reads instead of 236. Store-level replay (examples/replay.rs), object
/// miss ratio 1 read / 2 reads: mixed sizes (10 B..500 KB) at 44 and 88 MiB 0.4848 / 0.4800
/// and 0.4035 / 0.3951 (byte miss 0.4391 / 0.4394, 0.3826 / 0.3826); web12 at 0.5, 1, 2 MiB
/// 0.4858 / 0.4782, 0.3608 / 0.3558, 0.2269 / 0.2253; orm-night, Zipf, zipf-shift unchanged.
const LARGE_BAR: u32 = 1;

/// Size awareness (S3-FIFO only): while large items (own buffers) hold more than
/// 1 / `LARGE_SHARE` of the shard's buffer bytes, eviction takes the oldest large item rather
/// than the FIFO head, so large items mostly push out large items, as in memcached's
/// per-size-class memory. Store-level replay (examples/replay.rs), object miss ratio of the
/// mixed sizes (10 B..500 KB) at 45 and 88 MiB, with the other two size rules below: shares of
/// 1/10, 1/5, 1/3 gave 0.2777 / 0.2723 / 0.2804 and 0.2308 / 0.2306 / 0.2270 (without a share
/// 0.3286 and 0.2594); byte miss ratio 0.54 / 0.51 / 0.49 (memcached's on the server: 0.65).
/// Since then (adaptive split, items to 1 KiB without a bar): at 45 MiB, shares of 1/3, 1/4,
/// 1/5, 1/6, 1/10: 0.2816 / 0.2768 / 0.2783 / 0.2782 / 0.2808, byte 0.49 / 0.50 / 0.51 / 0.52
/// / 0.54. This round together (1/4, `SIZE_BAR_FLOOR`, `GHOST_MAX_LEN` 2 KiB, ghost.rs's
/// `MAIN_RETURN_WEIGHT` 8), miss ratio before -> after: mixed at 45 / 88 MiB 0.2783 / 0.2326
/// -> 0.2763 / -; Zipf at 7 / 25 MiB 0.3102 / 0.2296 -> 0.3101 / 0.2256; zipf-shift 0.3429 /
/// 0.2837 -> 0.3409 / 0.2832; orm-night at 23 / 34 MiB 0.0192 / 0.0149 -> 0.0190 / 0.0148;
/// web12 at 0.5 / 1 / 2 MiB 0.3761 / 0.2669 / 0.1882 -> 0.3807 / 0.2720 / 0.1888 (without the
/// 2 KiB ghost limit).
const LARGE_SHARE: usize = 4;

/// Size awareness (S3-FIFO only): an item larger than this evicted unread from small is not
/// remembered by the ghost, so when it comes back it goes through probation again instead of
/// straight to main. A ghost hit is a cheap promotion for a small item and a costly one for a
/// 20 KB item read once per main pass. Replay, mixed sizes at 45 / 88 MiB, object miss ratio:
/// no limit 0.3286 / 0.2594, 8 KiB 0.2832 / 0.2312, 4 KiB 0.2777 / 0.2308, 2 KiB 0.2800 at
/// 88; limits relative to the mean item size did worse (2x the mean: 0.2798 / 0.2378). orm-night
/// (values up to 16 KB) gains too: 0.0217 -> 0.0208 at 23 MiB. Later, with the rules of
/// `LARGE_SHARE`'s last round: 4 / 2 KiB, mixed at 45 MiB 0.2774 / 0.2763, orm-night at 23 /
/// 34 MiB 0.0193 / 0.0148 -> 0.0190 / 0.0148.
const GHOST_MAX_LEN: usize = 2048;

/// Size awareness (S3-FIFO only): a new key's item of at most 1 / `MAIN_DIRECT` of the shard's
/// mean item size goes straight to main. Probation is for what costs memory: among items
/// much larger than it, a small item's window in small (small's bytes over the insert rate in
/// bytes) is too short to be read in, and the ghost (sized by the item count) too short to
/// bring it back, so small items kept cycling through small (those of 8..128 B missed 0.34 of
/// their reads on the mixed replay, items of 256..512 B 0.15). Where the sizes are alike (Zipf
/// 200..1000 B) no item is under half the mean and nothing changes. Replay, mixed sizes at 45 /
/// 88 MiB: 1/4 of the mean 0.2819 / 0.2371, 1/2 0.2777 / 0.2308, the mean 0.2849 / 0.2329
/// (but Zipf at 7 MiB 0.3240 instead of 0.3098); orm-night at 23 / 27 / 34 MiB 0.0217 / 0.0187
/// / 0.0158 without, 0.0208 / 0.0178 / 0.0150 with. Only once the shard has evicted: before,
/// there is no probation to skip, and a second active segment being filled is only slack
/// (2M items of 50..300 B in 4 GiB: 8.8 -> 5.6 unwritten bytes per item; the replay rows
/// moved by 0.0001..0.0030 either way).
const MAIN_DIRECT: u64 = 2;

/// S3-FIFO: an item copied forward carries at most `REINSERT_CAP - 1` reads into its next
/// pass (the paper's counter saturates at 3), so an item unread since a phase change leaves
/// main after one more pass rather than up to seven. Replay, miss ratio with 7 / 3 / 2 (fixed
/// split of 1/10): zipf-shift at 7 MiB 0.3684 / 0.3527 / 0.3489, at 25 MiB 0.3003 / 0.3003 /
/// 0.3002; orm-night at 23 / 27 / 34 MiB 0.0208 / 0.0178 / 0.0150 -> 0.0196 / 0.0168 / 0.0143
/// (2: 0.0200 / 0.0170 / 0.0144). With the adaptive split (ghost.rs), 3 / 2: zipf-shift at 7 /
/// 25 MiB 0.3508 / 0.3508 -> 0.3479 / 0.2829, orm-night at 23 MiB 0.0189 -> 0.0192, the rest
/// within 0.0030. Under fifo the count just goes down by one (the policy as it was).
const REINSERT_CAP: u32 = 2;

/// Size awareness (S3-FIFO only): an item of more than `SIZE_BAR_BASE` bytes must have been
/// read more often to be kept by an eviction (promoted out of small, or copied forward in main):
/// more than one read past `SIZE_BAR_BASE` bytes, and one more per doubling, up to
/// `SIZE_BAR_MAX`. Object hit ratio gains when the memory of one large item keeps several small
/// ones, which is what memcached's per-size-class memory does by construction (on orm-night at
/// 23 MiB it held 33k items where size-blind s3fifo held 26k). Store-level replay, miss ratio
/// without / with: orm-night at 23 and 34 MiB 0.0287 / 0.0224 and 0.0202 / 0.0167 (byte miss
/// ratio 0.028 / 0.029, still under memcached's 0.04); Zipf and web12 within 1%.
const SIZE_BAR_BASE: usize = 512;
const SIZE_BAR_MAX: u32 = 5;
/// Items up to this many bytes need no read beyond the first, whatever `SIZE_BAR_BASE` says
/// (the bar's steps above it stay where they were: 1..2 KiB needs two more reads). Zipf's
/// 200..1000 B values differ too little for a second read to pay: store-level replay, miss
/// ratio without -> with (`LARGE_SHARE` 4; the round's figures are there): Zipf at 7 /
/// 25 MiB 0.3102 / 0.2296 -> 0.3084 / 0.2244; orm-night at 23 MiB 0.0192 -> 0.0193;
/// zipf-shift at 25 MiB 0.2837 -> 0.2877 (the shift wants the faster turnover the bar gave:
/// `MAIN_RETURN_WEIGHT` 8 instead of 16 gives it back, ghost.rs).
const SIZE_BAR_FLOOR: usize = 1024;

/// Reads an item of `len` bytes needs beyond the first to be kept (`SIZE_BAR_BASE`).
fn size_bar(len: usize) -> u32 {
    if len <= SIZE_BAR_BASE.max(SIZE_BAR_FLOOR) {
        0
    } else {
        ((len / SIZE_BAR_BASE).ilog2() + 1).min(SIZE_BAR_MAX)
    }
}

/// Where the writer that asked for room wants its item: (TTL group, bytes, FIFO).
pub(crate) type Dest = (u8, usize, Queue);

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
        self.active = [[0; crate::segment::TTL_BUCKETS]; 2];
        // A key set again after a flush has not come back from an eviction.
        self.ghost.clear();
        self.flush_flash(env);
    }

    /// flush_all for flashed items: every flash slot and entry goes (O(index), as rare as
    /// flush_all), so no flashed copy written before the flush is ever found again.
    fn flush_flash(&mut self, env: &Env<'_>) {
        if self.flash.live() == 0 {
            return;
        }
        let mut cursor = 0;
        loop {
            cursor = self
                .index
                .sweep(cursor, self.index.buckets(), slot::is_flash);
            if cursor == 0 {
                break;
            }
        }
        self.stats.flushed += self.flash.live() as u64;
        if let Some(f) = env.flash {
            self.flash.each(|_, loc| f.release(&loc));
        }
        self.flash.clear();
    }

    /// Retires a Live segment whose items are all dead, without reading them.
    fn retire_dead(&mut self, env: &Env<'_>, id: u32, reason: DeadReason) {
        let m = &mut self.segs.metas[id as usize];
        if m.active {
            m.active = false;
            self.active[m.queue as usize][m.ttl as usize] = 0;
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
            if env.geo.eviction == Eviction::S3Fifo && self.stats.evictions > 0 {
                self.remember_read(id);
            }
            self.retire_dead(env, id, DeadReason::Expired);
        }
        self.sync_overhead(env);
    }

    /// Before expired segment `id` goes (S3-FIFO, once the shard evicts): the ghost remembers
    /// its items that had been read (`Left::Expired`), so that their keys' next sets skip
    /// probation, as when a read finds an item expired (shard.rs `expired_read`). A read key
    /// with a TTL is likely set again after its expiry, and is read again; through small each
    /// time, it took small's room from keys on probation. This reads the segment's items
    /// once (as an eviction of it would have), only where eviction runs anyway.
    /// Store-level replay (segments of limit / 128, ghost.rs's `LIVE_EPOCHS` 8, expired reads
    /// already remembered), zipf-ttl at 3 / 7 / 25 MiB: 0.3913 / 0.3378 / 0.2638 without,
    /// 0.3889 / 0.3364 / 0.2634 with (the other workloads have no TTL). Expired reads alone:
    /// 0.3394 -> 0.3378 at 7 MiB, 0.2638 at 25 (most expired items' slots are swept before a
    /// read meets them).
    fn remember_read(&mut self, id: u32) {
        let m = &self.segs.metas[id as usize];
        let end = if m.large { 0 } else { m.write };
        let mut off = 0;
        while off < end {
            let hdr = self.header_at(id, off);
            if !hdr.is_dead() {
                let h =
                    crate::Store::hash(&self.segs.metas[id as usize].data[off..][hdr.key_range()]);
                let read = self
                    .index
                    .find_exact(h, id, off as u32)
                    .is_some_and(|pos| slot::fetched(self.index.get(pos)));
                if read {
                    self.ghost
                        .insert(h, self.stats.curr_items as usize, Left::Expired);
                }
            }
            off += hdr.total_len();
        }
    }

    /// One slice of the sweep that drops index slots pointing at dead segments. Returns whether
    /// the current pass has more to do.
    pub fn sweep_step(&mut self, env: &Env<'_>) -> bool {
        // Flash pages recycled since the last pass left entries naming them; they are swept
        // only once they hold enough memory (flash/mod.rs `sweep_due`).
        let flash_due = env.flash.is_some_and(|f| f.sweep_due(env.budget.limit()));
        let recycled = env
            .flash
            .filter(|_| flash_due)
            .map_or(self.flash_swept, |f| f.recycled());
        if self.segs.dead_refs == 0 && self.sweep_cursor == 0 && recycled == self.flash_swept {
            return false;
        }
        if self.sweep_cursor == 0 {
            self.flash_swept = recycled;
        }
        let segs = &mut self.segs;
        let stats = &mut self.stats;
        let flash = &mut self.flash;
        self.sweep_cursor = self.index.sweep(self.sweep_cursor, SWEEP_SLICE, |e| {
            if slot::is_flash(e) {
                let i = slot::flash_entry(e);
                let Some((_, loc)) = flash.get(i) else {
                    return true;
                };
                let stale = env.flash.is_some_and(|f| !f.current(&loc));
                if stale && flash_due {
                    flash.free(i);
                    if let Some(f) = env.flash {
                        f.release(&loc);
                    }
                    return true;
                }
                return false;
            }
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
        dest: Option<Dest>,
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
            if other.used() <= env.geo.fair_share || other.victim() == 0 {
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

    /// Which FIFO a new copy of a key (`len` bytes encoded) goes to: the one its old copy is
    /// in (`old_seg`), else, under S3-FIFO, Main if the ghost remembers the key (it was evicted
    /// unread and came back) or the item is small beside the shard's others (`MAIN_DIRECT`),
    /// and Small otherwise. Consults (and clears) the ghost: call once per write.
    pub(crate) fn admit(
        &mut self,
        geo: &Geometry,
        h: u64,
        old_seg: Option<u32>,
        len: usize,
    ) -> Queue {
        if let Some(seg) = old_seg {
            return self.segs.metas[seg as usize].queue;
        }
        match geo.eviction {
            Eviction::Fifo => Queue::Main,
            Eviction::S3Fifo if let Some(left) = self.ghost.take(h) => {
                self.ghost.returned(left, len, self.stats.bytes);
                Queue::Main
            }
            // (An empty shard has no mean: max(1) sends nothing to main there.)
            Eviction::S3Fifo
                if self.stats.evictions > 0
                    && len as u64 * MAIN_DIRECT * self.stats.curr_items.max(1)
                        <= self.stats.bytes =>
            {
                Queue::Main
            }
            Eviction::S3Fifo => Queue::Small,
        }
    }

    /// The segment eviction takes next: the head of the small FIFO while it holds more than
    /// its share (or main is empty), else the head of main. 0 if the shard has none.
    pub fn victim(&self) -> u32 {
        let small = self.segs.head_of(Queue::Small);
        let main = self.segs.head_of(Queue::Main);
        let over = self.segs.small_bytes as u64 * SPLIT_ONE
            > self.segs.buffer_bytes as u64 * self.ghost.split();
        if small != 0 && (main == 0 || over) {
            small
        } else {
            main
        }
    }

    /// Evicts the next victim. Returns false if the shard has no segment.
    pub fn evict_head(&mut self, env: &Env<'_>, now: Time, dest: Option<Dest>) -> bool {
        if env.geo.eviction == Eviction::S3Fifo
            && self.segs.large_bytes * LARGE_SHARE > self.segs.buffer_bytes
        {
            // Large items over their share: the oldest one goes (read ones get a second
            // chance first, a bounded number of them, as in `make_room_large`; then the
            // oldest goes regardless).
            for spare in (0..=LARGE_SECOND_CHANCES).rev() {
                let v = self.oldest_large();
                if v == 0 {
                    break;
                }
                if spare > 0 && self.second_chance(env, now, v) {
                    continue;
                }
                self.evict_large(env, now, v, false);
                return true;
            }
        }
        self.relocate(env, now, self.victim(), dest, false)
    }

    /// The oldest large segment of the FIFO `victim` would take from (so small and main keep
    /// their balance), else of the other; 0 if none. O(segments before it), paid only while
    /// large items are over their share, i.e. when there are many of them.
    fn oldest_large(&self) -> u32 {
        let first = match self.victim() {
            0 => Queue::Small,
            v => self.segs.metas[v as usize].queue,
        };
        let other = if first == Queue::Small {
            Queue::Main
        } else {
            Queue::Small
        };
        for q in [first, other] {
            let mut id = self.segs.head_of(q);
            while id != 0 && self.segs.metas[id as usize].queue == q {
                if self.segs.metas[id as usize].large {
                    return id;
                }
                id = self.segs.next_of(id);
            }
        }
        0
    }

    /// Compaction instead of growth: moves every live item of segment `v` to a new segment at
    /// the tail of its FIFO that then has `dest.1` bytes free for TTL group `dest.0`, and frees
    /// `v`. Nothing is evicted (the caller checked that everything fits) and read counts are
    /// not aged.
    pub fn compact(&mut self, env: &Env<'_>, now: Time, v: u32, dest: Dest) -> bool {
        self.relocate(env, now, v, Some(dest), true)
    }

    /// Empties regular or large segment `v` (0: none), keeping what eviction's rules (or, with
    /// `keep_all`, compaction's) keep. Keepers of an eviction go to main (promotion out of
    /// small, or reinsertion in main); compaction's stay in `v`'s FIFO. They are appended to
    /// that FIFO's active segment of their own TTL group (compaction's: the writer's, which is
    /// `v`'s), else of the writer's, and at most one new segment is opened for them; when the
    /// writer writes to that same segment, they leave it `dest.1` bytes. If no segment was
    /// opened, `v`'s buffer becomes the writer's new segment.
    fn relocate(
        &mut self,
        env: &Env<'_>,
        now: Time,
        v: u32,
        dest: Option<Dest>,
        keep_all: bool,
    ) -> bool {
        if v == 0 {
            return false;
        }
        let vq = {
            let m = &mut self.segs.metas[v as usize];
            if m.active {
                m.active = false;
                self.active[m.queue as usize][m.ttl as usize] = 0;
            }
            m.queue
        };
        if self.segs.metas[v as usize].large {
            // A read one gets its chance whoever needs the memory (a writer, or a trim after
            // the index grew): otherwise when the index happens to grow decides what stays.
            self.evict_large(env, now, v, true);
            return true;
        }
        let geo = env.geo;
        let kq = if keep_all { vq } else { Queue::Main };
        // The writer's TTL group: where keepers go if theirs has no room (module doc).
        let (kg, writer_room) = match dest {
            Some((ttl, need, q)) => (ttl, if q == kq { need } else { 0 }),
            None => (0, 0),
        };
        let mut opened = false;
        let mut no_id = false;
        let end = self.segs.metas[v as usize].write;
        // A victim in main that is mostly dead space (overwritten or deleted items) is
        // compacted: all its live items move forward, so churn on a few keys never evicts live
        // data. (In small, only what was read moves on: that is what small is for.)
        let mostly_dead = keep_all
            || (vq == Queue::Main && self.segs.metas[v as usize].live_bytes * 2 <= geo.seg_size);
        let sized = geo.eviction == Eviction::S3Fifo;
        let reinsert_cap = if sized { REINSERT_CAP } else { u32::MAX };
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
                crate::Store::hash(&d[hdr.key_range()])
            };
            let Some(pos) = self.index.find_exact(h, v, off as u32) else {
                debug_assert!(false, "live item without index slot");
                off += len;
                continue;
            };
            let s = self.index.get(pos);
            let expired = hdr.exp != 0 && hdr.exp <= now;
            let cas = geo.use_cas.then(|| self.cas_of(geo, v, off, &hdr));
            let nh = NewHeader {
                key_len: hdr.key_len,
                value_len: hdr.value_len,
                flags: hdr.flags,
                exp: hdr.exp,
                cas,
            };
            let nlen = nh.total_len();
            let bar = if sized { size_bar(nlen) } else { 0 };
            if !expired && dest.is_some() && (mostly_dead || slot::freq(s) > bar) {
                // To its own TTL group's segment (compaction's stay in the victim's group):
                // in the writer's, an item without a TTL would keep a TTL segment from
                // expiring whole, and one with a TTL would sit expired in a segment that never
                // does. The writer's group only when its own is full and a segment was opened.
                let own = if keep_all {
                    kg
                } else {
                    geo.ttl_group(ttl_bucket(hdr.exp, now))
                };
                let fits = |sh: &Shard, g: u8| {
                    let t = sh.active[kq as usize][g as usize];
                    let need = nlen + if g == kg { writer_room } else { 0 };
                    (t != 0 && sh.segs.metas[t as usize].room() >= need).then_some(t)
                };
                let mut at = fits(self, own);
                if at.is_none() && !opened && !no_id {
                    match self.open_credit_segment(env, now, kq) {
                        Some(t) => {
                            self.set_active(env, own, t);
                            opened = true;
                            at = fits(self, own);
                        }
                        // No id left: cannot keep anything more; fall through to evicting.
                        None => no_id = true,
                    }
                }
                if let Some(at) = at.or_else(|| fits(self, kg)) {
                    let (kr, vr) = (hdr.key_range(), hdr.value_range());
                    let w = self.segs.metas[at as usize].write;
                    self.place(
                        at,
                        w,
                        &nh,
                        Part::Old {
                            seg: v,
                            start: off + kr.start,
                            len: kr.len(),
                        },
                        &[Part::Old {
                            seg: v,
                            start: off + vr.start,
                            len: vr.len(),
                        }],
                    );
                    let s = if keep_all {
                        s
                    } else {
                        slot::decayed(s, reinsert_cap)
                    };
                    self.index.set(pos, slot::moved(s, at, w as u32));
                    self.drop_from_victim(v, off, len);
                    self.stats.relocated += 1;
                    off += len;
                    continue;
                }
            }
            if !expired {
                if let Some(i) = self.demote(env, v, off, &hdr, h, now) {
                    // The value goes to flash; the slot stays, naming the flash entry.
                    self.index.set(pos, slot::to_flash(slot::cleared(s), i));
                    self.drop_from_victim(v, off, len);
                    off += len;
                    continue;
                }
            }
            let left = if vq == Queue::Small {
                Left::Small
            } else {
                Left::Main
            };
            if !expired {
                self.report_eviction(env, v, off, s, now);
            }
            self.forget(
                pos,
                s,
                h,
                expired,
                (sized && !keep_all && nlen <= GHOST_MAX_LEN).then_some(left),
            );
            self.drop_from_victim(v, off, len);
            off += len;
        }
        debug_assert_eq!(self.segs.metas[v as usize].items, 0);
        match dest {
            Some((ttl, _, q)) if !opened => {
                // No new segment: the victim's buffer becomes the writer's new segment as it is.
                self.segs.reuse(v, ttl, q, now);
                self.set_active(env, ttl, v);
            }
            _ => {
                // A segment was opened for the keepers (charged): the victim's buffer goes.
                env.budget.release(self.segs.retire(v, DeadReason::Expired));
            }
        }
        self.sync_overhead(env);
        true
    }

    /// A new regular segment charged to the budget even if that overshoots it for a moment:
    /// it receives copies out of a victim whose buffer is freed right after.
    /// Usually the budget's spare: the previous victim's buffer (budget.rs says why).
    fn open_credit_segment(&mut self, env: &Env<'_>, now: Time, q: Queue) -> Option<u32> {
        let id = self.segs.alloc_id()?;
        let buf = env.budget.regular_buffer(true).expect("forced");
        self.segs.open(id, buf, false, 0, q, now);
        Some(id)
    }

    /// Bookkeeping for an item leaving the victim (moved or dropped); the slot is handled.
    pub(crate) fn drop_from_victim(&mut self, v: u32, off: usize, len: usize) {
        let m = &mut self.segs.metas[v as usize];
        item::mark_dead(&mut m.data[off..]);
        m.items -= 1;
        m.live_bytes -= len;
        self.stats.curr_items -= 1;
        self.stats.bytes -= len as u64;
    }

    /// Before a large item's reservation evicts: read large items at the head of the victim's
    /// FIFO get their second chance first (moved, not copied: to main's tail), at most
    /// `LARGE_SECOND_CHANCES` of them, so that a cache of hot large items still makes room in
    /// bounded time.
    pub fn make_room_large(&mut self, env: &Env<'_>, now: Time) -> Result<(), StoreError> {
        if env.geo.evict && self.used() >= env.geo.fair_share / 2 {
            for _ in 0..LARGE_SECOND_CHANCES {
                let v = self.victim();
                if v == 0 || !self.segs.metas[v as usize].large || !self.second_chance(env, now, v)
                {
                    break;
                }
            }
        }
        self.make_room(env, now, None)
    }

    /// Large segment `v`'s item, if read since it was written (or last spared) and not
    /// expired: to main's tail (a promotion, out of small) with its read count cleared, no
    /// copy. Returns whether it was spared.
    fn second_chance(&mut self, env: &Env<'_>, now: Time, v: u32) -> bool {
        if self.segs.metas[v as usize].items != 1 {
            return false;
        }
        let hdr = self.header_at(v, 0);
        let h = {
            let d = &self.segs.metas[v as usize].data;
            crate::Store::hash(&d[hdr.key_range()])
        };
        let Some(pos) = self.index.find_exact(h, v, 0) else {
            return false;
        };
        let s = self.index.get(pos);
        let in_main = self.segs.metas[v as usize].queue == Queue::Main;
        let bar = if env.geo.eviction == Eviction::S3Fifo && in_main {
            LARGE_BAR
        } else {
            0
        };
        if slot::freq(s) <= bar || (hdr.exp != 0 && hdr.exp <= now) {
            return false;
        }
        self.index.set(pos, slot::cleared(s));
        self.segs.move_to_tail(v, Queue::Main);
        true
    }

    /// The item at `off` of segment `v` (index slot `s`) is being evicted: tell whoever
    /// watches (evicted.rs). Nothing is read unless someone does.
    fn report_eviction(&self, env: &Env<'_>, v: u32, off: usize, s: u64, now: Time) {
        let Some(w) = env.watch.get().filter(|w| w.wants()) else {
            return;
        };
        let m = &self.segs.metas[v as usize];
        let hdr = self.header_at(v, off);
        w.evicted(
            &crate::Evicted {
                key: &m.data[off..][hdr.key_range()],
                exp: hdr.exp,
                fetched: slot::fetched(s),
                value_len: hdr.value_len as usize,
                written: m.opened,
            },
            now,
        );
    }

    /// An item leaving the cache from a victim segment (slot `s` at `pos`, key hash `h`): counted
    /// as reclaimed (expired) or evicted, remembered by the ghost when S3-FIFO's small queue
    /// evicts it unread (`to_ghost`), and its index slot removed.
    fn forget(&mut self, pos: Pos, s: u64, h: u64, expired: bool, to_ghost: Option<Left>) {
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
            if let Some(left) = to_ghost {
                let items = self.stats.curr_items as usize;
                self.ghost.insert(h, items, left);
            }
        }
        self.index.remove(pos);
    }

    /// A large item's own buffer: second chance (to the FIFO tail, count cleared) if it was read
    /// and the caller can use a regular segment; otherwise dropped.
    fn evict_large(&mut self, env: &Env<'_>, now: Time, v: u32, may_keep: bool) {
        if may_keep && self.second_chance(env, now, v) {
            return;
        }
        if self.segs.metas[v as usize].items == 1 {
            let hdr = self.header_at(v, 0);
            let h = {
                let d = &self.segs.metas[v as usize].data;
                crate::Store::hash(&d[hdr.key_range()])
            };
            if let Some(pos) = self.index.find_exact(h, v, 0) {
                let s = self.index.get(pos);
                let expired = hdr.exp != 0 && hdr.exp <= now;
                if let Some(i) = (!expired)
                    .then(|| self.demote(env, v, 0, &hdr, h, now))
                    .flatten()
                {
                    // The value goes to flash; the slot stays, naming the flash entry.
                    self.index.set(pos, slot::to_flash(slot::cleared(s), i));
                } else {
                    let left = match self.segs.metas[v as usize].queue {
                        Queue::Small => Left::Small,
                        Queue::Main => Left::Main,
                    };
                    let remember =
                        env.geo.eviction == Eviction::S3Fifo && hdr.total_len() <= GHOST_MAX_LEN;
                    if !expired {
                        self.report_eviction(env, v, 0, s, now);
                    }
                    self.forget(pos, s, h, expired, remember.then_some(left));
                }
                self.drop_from_victim(v, 0, hdr.total_len());
            }
        }
        env.budget.release(self.segs.retire(v, DeadReason::Expired));
    }
}

#[cfg(test)]
#[path = "evict_tests.rs"]
mod tests;
