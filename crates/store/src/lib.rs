//! mnemo-store: the memory engine behind mnemod.
//!
//! Owns items, their memory and their lifetime: segments, the hash index, TTL expiry, eviction,
//! CAS values, memory accounting and the counters `stats` reports. No protocol, no sockets, no
//! clock: every operation is told `now` (seconds on the server's relative clock).
//!
//! ```text
//!                 key --xxh3--> h (64 bits)
//!   h[56..64] -> shard          h[40..55] -> tag in slot          h[0..] -> index bucket
//!
//!   Store ─┬─ Mutex<Shard 0> ─┬─ Index:     [bucket: 8 × u64 slot] ... + chains of [4 × slot]
//!          ├─ Mutex<Shard 1>  │               slot = tag | freq | segment id | offset
//!          ├─ ...             ├─ SegTable:  segment 1: [hdr key value][hdr key value]...  (≤ 1 MiB)
//!          │                  │             segment 2: ...      large item: own buffer (whole pages)
//!          │                  │             two FIFOs of segments (Small, Main), 130 TTL groups
//!          │                  ├─ Ghost:     fingerprints of keys Small evicted unread
//!          │                  └─ counters, pending flush_all time
//!          └─ Budget: one atomic byte count of buffers + index + metadata, against mem_limit,
//!                     and one spare segment buffer kept for reuse (budget.rs)
//! ```
//!
//! * Items are appended to segments; there is no per-item allocation (item.rs has the format).
//! * CAS is (segment sequence, shard, offset): every write lands at a never-used location, so it
//!   gets a new CAS for free. Items moved by eviction or touch carry their CAS explicitly.
//! * TTL: a segment holds items of similar remaining TTL; `maintain` drops a segment as soon as
//!   its largest exp has passed, without reading it. Index slots still pointing there are
//!   dropped lazily (on lookup, or by the sweep in `maintain`).
//! * Eviction is S3-FIFO at segment granularity (evict.rs has the diagram): new items enter a
//!   small FIFO; what is read there is copied on into the main FIFO, the rest leaves and its key
//!   enters a ghost; a key the ghost remembers goes straight to main; main copies forward what
//!   was read since it was written. `Eviction::Fifo` keeps the one FIFO with reinsertion.
//! * flush_all is a pending time per shard; the first operation that sees it due retires every
//!   segment of that shard (O(segments)).
//!
//! Module map: buf.rs (segment buffers, mmap, huge pages, pages lent to the kernel; buf/table.rs: the index's mapped arrays), budget.rs (memory accounting,
//! spare buffer), config.rs (sizes), item.rs (header codec), index.rs (hash index), segment.rs
//! (segment table, FIFOs, TTL groups), shard.rs (operations), prefetch.rs (multi-key lookahead),
//! evict.rs (eviction, expiry, flush, sweep), ghost.rs (keys evicted unread), incoming.rs (large values read from the socket
//! straight into their item), dump.rs (listing live items in bounded batches),
//! snapshot.rs (warm restart: the live items to a file and back), stats.rs (counters), types.rs (the API's types).

mod budget;
mod buf;
mod config;
mod dump;
mod evict;
mod evicted;
mod flash;
mod ghost;
mod incoming;
mod index;
mod item;
mod prefetch;
mod segment;
mod shard;
mod snapshot;
mod stats;
mod types;

use core::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;

pub use buf::Pages;
pub use config::{
    Eviction, StoreConfig, DEFAULT_SHARDS, MAX_SEGMENT_SIZE, MAX_SHARDS, MIN_SEGMENT_SIZE,
};
pub use dump::{DumpCursor, DumpItem, DUMP_BATCH};
pub use evicted::{Evicted, EvictionWatch};
pub use flash::{
    FlashConfig, FlashError, FlashRef, FlashRestore, FlashSetting, FlashStats, FlashValue,
    PageStat, Reject as FlashReject, DEFAULT_ITEM_AGE, DEFAULT_ITEM_SIZE, DEFAULT_LOW_TTL,
    DEFAULT_MAX_FRAG_PERMILLE, DEFAULT_PAGE_SIZE, DEFAULT_RECACHE_RATE, DEFAULT_WBUF_SIZE,
    MAX_PAGE_SIZE,
};
pub use incoming::Incoming;
pub use item::MAX_KEY_LEN;
pub use prefetch::{Prefetch, PREFETCH_HEAD, PREFETCH_VALUE};
pub use snapshot::{Frozen, RestoreReport, SnapshotError, SnapshotStats};
pub use stats::StoreStats;
pub use types::{DeltaError, Item, KeyHash, Located, Lookup, Mode, StoreError, StoreOutcome, Time};

use budget::Budget;
use config::Geometry;
use flash::Flash;
use shard::{Env, Found, Shard};

/// Lookups one read may take: a flashed copy that fails verification is dropped and the key
/// looked up again (another slot may hold it), which cannot go on for long.
const FLASH_RETRIES: usize = 4;

/// The cache. Send + Sync; share it with `Arc`.
pub struct Store {
    shards: Box<[Mutex<Shard>]>,
    geo: Geometry,
    budget: Budget,
    /// Largest `now` any operation passed: lets flush_all apply a pending flush that is due but
    /// was not yet seen by every shard before replacing it.
    seen: AtomicU32,
    /// The flash tier (`StoreConfig::flash`). Boxed: `Env` takes it as `Option<&Flash>` on
    /// every operation, a plain load from a box (a test and a select from an inline value).
    flash: Option<Box<Flash>>,
    /// Who watches evictions, once the server has said (evicted.rs).
    watch: WatchSlot,
}

/// Where the eviction watcher, once registered, is found (`Env::watch`).
pub(crate) type WatchSlot = std::sync::OnceLock<std::sync::Arc<dyn EvictionWatch>>;

impl Store {
    /// A store as configured. Panics if the flash file cannot be used: see [`Store::open`].
    pub fn new(cfg: StoreConfig) -> Store {
        Store::open(cfg).unwrap_or_else(|e| panic!("flash tier: {e}"))
    }

    /// A store as configured; the error says why the flash file could not be used.
    pub fn open(cfg: StoreConfig) -> Result<Store, FlashError> {
        let flash = cfg
            .flash
            .as_ref()
            .map(Flash::open)
            .transpose()?
            .map(Box::new);
        let geo = Geometry::new(&cfg);
        let budget = Budget::new(geo.limit, geo.seg_size, geo.huge_pages);
        let shards: Box<[Mutex<Shard>]> = (0..geo.shards)
            .map(|i| Mutex::new(Shard::new(i as u64, &geo, &budget)))
            .collect();
        Ok(Store {
            shards,
            geo,
            budget,
            seen: AtomicU32::new(0),
            flash,
            watch: WatchSlot::new(),
        })
    }

    #[inline]
    fn env(&self, me: usize) -> Env<'_> {
        Env {
            geo: &self.geo,
            budget: &self.budget,
            shards: &self.shards,
            me,
            flash: self.flash.as_deref(),
            watch: &self.watch,
        }
    }

    /// Registers the one eviction watcher (evicted.rs); a second registration is ignored.
    pub fn watch_evictions(&self, w: std::sync::Arc<dyn EvictionWatch>) {
        let _ = self.watch.set(w);
    }

    /// The key hash every index, shard choice and flash check uses: computed here only.
    #[inline]
    pub(crate) fn hash(key: &[u8]) -> u64 {
        xxhash_rust::xxh3::xxh3_64(key)
    }

    /// Runs `op` on the key's shard with its lock held, after applying a due flush_all.
    #[inline]
    fn observe(&self, now: Time) {
        // Written about once a second, so the shared line stays mostly read-only.
        if now > self.seen.load(Ordering::Relaxed) {
            self.seen.fetch_max(now, Ordering::Relaxed);
        }
    }

    #[inline]
    fn with_shard<T>(&self, h: u64, now: Time, op: impl FnOnce(&mut Shard, &Env<'_>) -> T) -> T {
        self.observe(now);
        let me = self.geo.shard_of(h);
        let env = self.env(me);
        let mut shard = self.shards[me].lock();
        // The test inline: a call per operation to learn that no flush is pending cost a get
        // hit 17 instructions (callgrind).
        if shard.flush_at.is_some() {
            shard.apply_flush(&env, now);
        }
        op(&mut shard, &env)
    }

    #[inline]
    fn valid_key(key: &[u8]) -> bool {
        !key.is_empty() && key.len() <= MAX_KEY_LEN
    }

    /// Reads an item; `f` runs under the shard lock (copy the value out, don't block). An item
    /// whose value is on flash is read after the lock is released (a pread) and verified,
    /// and `f` runs then, with no lock held.
    #[inline(always)]
    pub fn get<R>(&self, key: &[u8], now: Time, f: impl FnOnce(Item<'_>) -> R) -> Lookup<R> {
        if !Self::valid_key(key) {
            return Lookup::Miss;
        }
        let h = Self::hash(key);
        match self.with_shard(h, now, |s, env| s.get(env, h, key, now, f)) {
            Ok(l) => l,
            Err((fref, fetched, f)) => self.get_from_flash(key, h, fref, fetched, now, f),
        }
    }

    /// The rest of a `get` that found its item on flash, out of the RAM hit's way: read,
    /// verify, answer; a record that fails is dropped and the key looked up again.
    #[cold]
    #[inline(never)]
    fn get_from_flash<R, F: FnOnce(Item<'_>) -> R>(
        &self,
        key: &[u8],
        h: u64,
        fref: FlashRef,
        fetched: bool,
        now: Time,
        f: F,
    ) -> Lookup<R> {
        let (mut fref, mut fetched, mut f) = (fref, fetched, f);
        for _ in 0..FLASH_RETRIES {
            match self.finish_flash(key, fref, fetched, now, true, f) {
                Ok(l) => return l,
                Err(g) => match self.with_shard(h, now, |s, env| s.get(env, h, key, now, g)) {
                    Ok(l) => return l,
                    Err((r, fe, g)) => (fref, fetched, f) = (r, fe, g),
                },
            }
        }
        Lookup::Miss
    }

    /// The second half of a read that found its item on flash: reads and verifies the record
    /// (no lock held), then runs `f` on it. A record that fails verification is dropped from
    /// the index and `f` handed back, for the caller to look the key up again.
    fn finish_flash<R, F: FnOnce(Item<'_>) -> R>(
        &self,
        key: &[u8],
        fref: FlashRef,
        fetched: bool,
        now: Time,
        recache: bool,
        f: F,
    ) -> Result<Lookup<R>, F> {
        let read = self.read_flash(&fref, key);
        self.complete_flash(key, fref, fetched, read, now, recache, f)
    }

    /// A get in two halves, for a caller that reads flash elsewhere (an I/O thread, io_uring)
    /// and answers later: the lookup, under the shard lock. `Located::Done` is the answer as
    /// `get` gives it; `Located::Flash` hands `f` back with where the value is: read it with
    /// [`Store::read_flash`] (no lock, may block on the disk), then finish with
    /// [`Store::finish_get`].
    #[inline(always)]
    pub fn get_located<R, F: FnOnce(Item<'_>) -> R>(
        &self,
        key: &[u8],
        now: Time,
        f: F,
    ) -> Located<R, F> {
        if !Self::valid_key(key) {
            return Located::Done(Lookup::Miss);
        }
        let h = Self::hash(key);
        match self.with_shard(h, now, |s, env| s.get(env, h, key, now, f)) {
            Ok(l) => Located::Done(l),
            Err((fref, fetched, f)) => Located::Flash { fref, fetched, f },
        }
    }

    /// The second half of a `get_located` that found its item on flash: `read` is what
    /// [`Store::read_flash`] gave for `fref`. Runs `f` on the value (no lock held), or answers
    /// a miss for a record that failed (and drops its slot: a `get_located` again may find the
    /// key elsewhere, after an index tag collision); recaches per `ext_recache_rate`.
    pub fn finish_get<R, F: FnOnce(Item<'_>) -> R>(
        &self,
        key: &[u8],
        fref: FlashRef,
        fetched: bool,
        read: Result<FlashValue, FlashReject>,
        now: Time,
        f: F,
    ) -> Lookup<R> {
        self.complete_flash(key, fref, fetched, read, now, true, f)
            .unwrap_or(Lookup::Miss)
    }

    #[allow(clippy::too_many_arguments)]
    fn complete_flash<R, F: FnOnce(Item<'_>) -> R>(
        &self,
        key: &[u8],
        fref: FlashRef,
        fetched: bool,
        read: Result<FlashValue, FlashReject>,
        now: Time,
        recache: bool,
        f: F,
    ) -> Result<Lookup<R>, F> {
        let v = match read {
            Ok(v) => v,
            Err(_) => {
                self.forget_flash(key, &fref, now);
                return Err(f);
            }
        };
        if v.exp() != 0 && v.exp() <= now {
            self.forget_flash(key, &fref, now);
            return Ok(Lookup::Expired);
        }
        let it = Item {
            flags: v.flags(),
            value: v.value(),
            cas: if self.geo.use_cas { v.meta.cas } else { 0 },
            exp: v.exp(),
            fetched,
            pages: None,
        };
        let r = f(it);
        let fl = self
            .flash
            .as_deref()
            .expect("a FlashRef comes from the flash tier");
        if recache && fl.recache_due() {
            let back = self.with_shard(fref.h, now, |s, env| {
                let ok = s.recache(env, key, &fref, &v, now);
                s.sync_overhead(env);
                s.trim(env, now);
                ok
            });
            if back {
                fl.counters()
                    .recache_from_extstore
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(Lookup::Hit(r))
    }

    /// Reads a flashed item's record and verifies it (magic, checksum, page generation, key):
    /// the half of a flash hit that needs no lock, for a caller that runs it elsewhere (an
    /// I/O thread) after a lookup gave it `fref`. Counts memcached's get_extstore,
    /// miss_from_extstore and badcrc_from_extstore.
    pub fn read_flash(&self, fref: &FlashRef, key: &[u8]) -> Result<FlashValue, FlashReject> {
        let fl = self.flash.as_deref().ok_or(FlashReject::Gone)?;
        let mut rec = Vec::new();
        let read = fl.read(&fref.loc, &mut rec);
        Self::verify_flash(fl, fref, key, rec, read)
    }

    /// [`Store::read_flash`] if it needs no disk I/O (the record in a write buffer or in the
    /// page cache): an event loop may call it. None: the record must be read from the disk,
    /// with `read_flash` where waiting is fine (nothing is counted then).
    pub fn read_flash_cached(
        &self,
        fref: &FlashRef,
        key: &[u8],
    ) -> Option<Result<FlashValue, FlashReject>> {
        let fl = self.flash.as_deref()?;
        let mut rec = Vec::new();
        let read = match fl.read_cached(&fref.loc, &mut rec) {
            Ok(None) => return None,
            Ok(Some(gen)) => Ok(gen),
            Err(e) => Err(e),
        };
        Some(Self::verify_flash(fl, fref, key, rec, read))
    }

    fn verify_flash(
        fl: &Flash,
        fref: &FlashRef,
        key: &[u8],
        rec: Vec<u8>,
        read: Result<u32, FlashReject>,
    ) -> Result<FlashValue, FlashReject> {
        let c = fl.counters();
        c.get_extstore.fetch_add(1, Ordering::Relaxed);
        let r = read.and_then(|gen| {
            let v = fl.verify(&rec, fref.loc.page, gen, key)?;
            let start = v.value.as_ptr() as usize - rec.as_ptr() as usize;
            Ok((v.meta, start..start + v.value.len()))
        });
        match r {
            Ok((meta, value)) => Ok(FlashValue { rec, meta, value }),
            Err(e) => {
                let n = if e == FlashReject::BadCrc {
                    &c.badcrc_from_extstore
                } else {
                    &c.miss_from_extstore
                };
                n.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Drops the slot `fref` came from, if it still names the same record.
    fn forget_flash(&self, key: &[u8], fref: &FlashRef, now: Time) {
        self.with_shard(fref.h, now, |s, env| {
            if let Some(pos) = s.refind_flash(env, key, fref, now) {
                s.remove_flash(env, pos, fref);
            }
        });
    }

    /// Brings `key`'s value back from flash into RAM, if it is there, before an operation
    /// that needs it in RAM (touch, gat, incr/decr, append/prepend, add/replace/cas). A record
    /// that fails verification, or has expired, is dropped instead.
    fn promote(&self, h: u64, key: &[u8], now: Time) {
        if self.flash.is_none() {
            return;
        }
        for _ in 0..FLASH_RETRIES {
            let found = self.with_shard(h, now, |s, env| match s.find(env, h, key, now) {
                Found::Flash { fref, .. } => Some(fref),
                _ => None,
            });
            let Some(fref) = found else { return };
            match self.read_flash(&fref, key) {
                Ok(v) if v.exp() == 0 || v.exp() > now => {
                    let back = self.with_shard(h, now, |s, env| {
                        let ok = s.recache(env, key, &fref, &v, now);
                        s.sync_overhead(env);
                        s.trim(env, now);
                        ok
                    });
                    if back {
                        return;
                    }
                }
                _ => self.forget_flash(key, &fref, now),
            }
        }
    }

    /// Whether a flash tier is configured (`ext_path`): without one no value is ever on flash.
    #[inline]
    pub fn has_flash(&self) -> bool {
        self.flash.is_some()
    }

    /// The flash file's I/O errors so far and the text of the latest (None without a flash
    /// tier). Cheap: an atomic and a short lock, for the server's once-a-second check.
    pub fn flash_io_errors(&self) -> Option<(u64, String)> {
        self.flash.as_ref().map(|f| f.io_errors())
    }

    /// Writes out the flash write buffer and waits for the writer (tests; a clean shutdown).
    pub fn flash_sync(&self) {
        if let Some(f) = &self.flash {
            f.sync();
        }
    }

    /// Reads an item without counting the read: the item is not marked fetched and its
    /// frequency is not raised (memcached's meta `u` flag: "don't bump the item"; and
    /// administrative walks). An expired item is still reported (and unlinked) as by `get`.
    pub fn peek<R>(&self, key: &[u8], now: Time, f: impl FnOnce(Item<'_>) -> R) -> Lookup<R> {
        if !Self::valid_key(key) {
            return Lookup::Miss;
        }
        let h = Self::hash(key);
        let mut f = f;
        for _ in 0..FLASH_RETRIES {
            let r = self.with_shard(h, now, |s, env| {
                Ok(match s.find(env, h, key, now) {
                    Found::Live { pos, seg, off, hdr } => {
                        let mut it = s.item_at(env.geo, seg, off, &hdr);
                        it.fetched = index::slot::fetched(s.index.get(pos));
                        Lookup::Hit(f(it))
                    }
                    Found::Flash { pos, fref } => {
                        return Err((fref, index::slot::fetched(s.index.get(pos)), f))
                    }
                    Found::Dead(segment::DeadReason::Expired) => Lookup::Expired,
                    Found::Dead(segment::DeadReason::Flushed) => Lookup::Flushed,
                    Found::Absent => Lookup::Miss,
                })
            });
            match r {
                Ok(l) => return l,
                Err((fref, fetched, g)) => {
                    match self.finish_flash(key, fref, fetched, now, false, g) {
                        Ok(l) => return l,
                        Err(g) => f = g,
                    }
                }
            }
        }
        Lookup::Miss
    }

    /// A hint that `key` will be read soon, for a multi-key read that walks ahead of itself
    /// in stages ([`Prefetch`]: the index bucket, then the items and the overflow bucket it
    /// names, then that bucket's items), so a batch of lookups overlaps its memory misses
    /// instead of taking them one after another; `bytes` of each candidate item are pulled
    /// (PREFETCH_VALUE, PREFETCH_HEAD). Skipped when the shard is busy.
    pub fn prefetch(&self, key: &[u8], stage: Prefetch, bytes: usize) {
        if let Some(h) = Self::key_hash(key) {
            self.prefetch_hashed(h, stage, bytes);
        }
    }

    /// A key's hash for `prefetch_hashed`, so that a walk of several stages hashes each key
    /// once; None for a key no operation would find.
    pub fn key_hash(key: &[u8]) -> Option<KeyHash> {
        Self::valid_key(key).then(|| KeyHash(Self::hash(key)))
    }

    /// `prefetch`, for a key hashed before.
    pub fn prefetch_hashed(&self, h: KeyHash, stage: Prefetch, bytes: usize) {
        if let Some(shard) = self.shards[self.geo.shard_of(h.0)].try_lock() {
            shard.prefetch(h.0, stage, bytes);
        }
    }

    /// gat: sets a new exp and reads; the CAS stays.
    pub fn get_and_touch<R>(
        &self,
        key: &[u8],
        exp: Time,
        now: Time,
        f: impl FnOnce(Item<'_>) -> R,
    ) -> Lookup<R> {
        if !Self::valid_key(key) {
            return Lookup::Miss;
        }
        let h = Self::hash(key);
        self.promote(h, key, now);
        self.with_shard(h, now, |s, env| s.get_and_touch(env, h, key, exp, now, f))
    }

    /// Sets a new exp; the CAS stays. false if absent (or, with evict=false, if the item had to
    /// move to take an expiry and no memory was left).
    pub fn touch(&self, key: &[u8], exp: Time, now: Time) -> bool {
        if !Self::valid_key(key) {
            return false;
        }
        let h = Self::hash(key);
        self.promote(h, key, now);
        self.with_shard(h, now, |s, env| s.touch(env, h, key, exp, now))
    }

    /// memcached's set/add/replace/append/prepend/cas. Append/prepend whose result would exceed
    /// item_size_max, or find no memory, answer NotStored (as memcached does).
    pub fn store(
        &self,
        mode: Mode,
        key: &[u8],
        flags: u32,
        exp: Time,
        value: &[u8],
        now: Time,
    ) -> Result<StoreOutcome, StoreError> {
        self.store_cas(mode, key, flags, exp, value, now, None)
    }

    /// [`Store::store`] whose new version takes the CAS `cas_in` instead of one the store
    /// chooses (memcached's meta E flag: a CAS from an external versioning system). The
    /// caller owns its uniqueness; ignored under -C, where every CAS is 0.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn store_cas(
        &self,
        mode: Mode,
        key: &[u8],
        flags: u32,
        exp: Time,
        value: &[u8],
        now: Time,
        cas_in: Option<u64>,
    ) -> Result<StoreOutcome, StoreError> {
        if !Self::valid_key(key) || key.len() + value.len() > self.geo.item_size_max {
            if mode == Mode::Set {
                // memcached: a failed set must not leave the old value readable.
                self.delete(key, now);
            }
            return Err(StoreError::TooLarge);
        }
        let h = Self::hash(key);
        if mode == Mode::Add && self.flashed_live(h, key, now) {
            return Ok(StoreOutcome::NotStored);
        }
        if mode != Mode::Set {
            // These need the old value (or to know it exists): bring a flashed one back.
            self.promote(h, key, now);
        }
        self.with_shard(h, now, |s, env| {
            s.store(env, h, mode, key, flags, exp, value, now, cas_in)
        })
    }

    pub fn delete(&self, key: &[u8], now: Time) -> bool {
        if !Self::valid_key(key) {
            return false;
        }
        let h = Self::hash(key);
        if self.flash.is_some() {
            // A flashed item's expiry is in its record: read it, so that an expired (or
            // damaged) one is NOT_FOUND, as memcached answers for an expired item.
            for _ in 0..FLASH_RETRIES {
                // One lookup decides: an item in RAM (or none) is deleted as without flash.
                let found = self.with_shard(h, now, |s, env| match s.find(env, h, key, now) {
                    Found::Flash { fref, .. } => Err(fref),
                    Found::Live { pos, .. } => {
                        s.remove(env, pos);
                        Ok(true)
                    }
                    _ => Ok(false),
                });
                let fref = match found {
                    Ok(deleted) => return deleted,
                    Err(fref) => fref,
                };
                let live =
                    matches!(self.read_flash(&fref, key), Ok(v) if v.exp() == 0 || v.exp() > now);
                let gone = self.with_shard(h, now, |s, env| {
                    let pos = s.refind_flash(env, key, &fref, now)?;
                    s.remove_flash(env, pos, &fref);
                    Some(())
                });
                if gone.is_some() {
                    return live;
                }
            }
        }
        self.with_shard(h, now, |s, env| s.delete(env, h, key, now))
    }

    /// `cache_memlimit`: a new memory limit. Raising it takes effect at once; lowering it makes
    /// each shard evict down to it on its next operation.
    pub fn set_mem_limit(&self, bytes: usize) {
        self.budget.set_limit(bytes);
        // Lowering: each shard gives back its oldest segments down to its share of the new
        // limit now, so the very next write does not have to free many segments at once.
        let share = bytes / self.shards.len();
        let now = self.seen.load(Ordering::Relaxed);
        for (me, shard) in self.shards.iter().enumerate() {
            let env = self.env(me);
            let mut s = shard.lock();
            while self.budget.used() > bytes && s.used() > share {
                if !s.evict_head(&env, now, None) {
                    break;
                }
            }
        }
    }

    /// incr/decr. `parse` is memcached's safe_strtoull. Returns the new number and new CAS.
    pub fn delta(
        &self,
        key: &[u8],
        incr: bool,
        delta: u64,
        now: Time,
        parse: impl FnOnce(&[u8]) -> Option<u64>,
    ) -> Result<(u64, u64), DeltaError> {
        self.delta_padded(key, incr, delta, now, parse, true)
    }

    /// incr/decr choosing memcached's two outcomes for a number that got shorter: `pad`
    /// keeps the old length, space-padded (memcached's in-place rewrite, taken when nobody
    /// else holds the item); otherwise the value is just the digits (memcached's new item,
    /// taken when e.g. a reply still being sent references the old one).
    pub fn delta_padded(
        &self,
        key: &[u8],
        incr: bool,
        delta: u64,
        now: Time,
        parse: impl FnOnce(&[u8]) -> Option<u64>,
        pad: bool,
    ) -> Result<(u64, u64), DeltaError> {
        if !Self::valid_key(key) {
            return Err(DeltaError::NotFound);
        }
        let h = Self::hash(key);
        self.promote(h, key, now);
        self.with_shard(h, now, |s, env| {
            s.delta(env, h, key, incr, delta, now, parse, pad)
        })
    }

    /// Invalidates everything written before the store first sees `now >= at`. O(shards) here;
    /// each shard pays O(its segments) on its first operation at or after `at`.
    pub fn flush_all(&self, at: Time) {
        let seen = self.seen.load(Ordering::Relaxed);
        for me in 0..self.shards.len() {
            let env = self.env(me);
            let mut s = self.shards[me].lock();
            // A flush that is already due for the rest of the store must not be cancelled
            // here just because no operation reached this shard yet.
            s.apply_flush(&env, seen);
            s.set_flush(at);
        }
    }

    pub fn stats(&self) -> StoreStats {
        let mut st = StoreStats {
            limit_maxbytes: self.budget.limit() as u64,
            segment_size: self.geo.seg_size as u64,
            shards: self.geo.shards as u64,
            ..Default::default()
        };
        for s in self.shards.iter() {
            s.lock().add_stats(&mut st);
        }
        st.mem_used = self.budget.used() as u64;
        st.segments_total = (self.budget.limit() / self.geo.seg_size) as u64;
        st.segments_free =
            (self.budget.limit().saturating_sub(self.budget.used()) / self.geo.seg_size) as u64;
        st.flash = self.flash.as_ref().map(|f| {
            let mut fs = FlashStats {
                entries: st.flash_items,
                entry_bytes: st.flash_entry_bytes,
                ..Default::default()
            };
            f.add_stats(&mut fs);
            fs
        });
        st
    }

    /// `stats reset`: zero the cumulative counters.
    pub fn reset_stats(&self) {
        for s in self.shards.iter() {
            s.lock().reset_stats();
        }
        if let Some(f) = &self.flash {
            f.reset_stats();
        }
    }

    /// Background work, about once a second: apply due flushes, drop segments whose items have
    /// all expired (without reading them), and sweep index slots that still point at them.
    /// Holds each shard lock only for bounded steps.
    pub fn maintain(&self, now: Time) {
        self.observe(now);
        for me in 0..self.shards.len() {
            let env = self.env(me);
            {
                let mut s = self.shards[me].lock();
                s.apply_flush(&env, now);
                s.expire_segments(&env, now);
                s.age_out(&env, now);
                // Freed segment ids can grow the shard's metadata, charged after the fact.
                s.trim(&env, now);
            }
            // The sweep runs in slices so that requests on this shard wait at most one slice.
            loop {
                let mut s = self.shards[me].lock();
                let more = s.sweep_step(&env);
                // Released dead references free segment ids, which can grow the metadata.
                s.trim(&env, now);
                if !more {
                    break;
                }
            }
        }
        self.compact_flash(now);
    }

    /// `stats extstore`: the flash file's pages; None without flash.
    pub fn flash_pages(&self) -> Option<Vec<PageStat>> {
        self.flash.as_deref().map(Flash::pages)
    }

    /// `Shard::flashable` summed over shards (one shard lock at a time); None without flash.
    pub fn flashable_in_ram(&self, now: Time) -> Option<(u64, u64)> {
        self.flash.as_ref()?;
        Some((0..self.shards.len()).fold((0, 0), |(n, b), me| {
            let (dn, db) = self.shards[me].lock().flashable(&self.env(me), now);
            (n + dn, b + db)
        }))
    }
}

#[cfg(test)]
mod send_sync {
    fn assert_send_sync<T: Send + Sync>() {}
    #[test]
    fn store_is_send_sync() {
        assert_send_sync::<super::Store>();
    }
}
