//! The model checker shared by the proptest model test (tests/model.rs), the seeded replay test
//! (tests/fuzz_replay.rs) and the cargo-fuzz target (fuzz/fuzz_targets/store_model.rs, which
//! includes this file by `#[path]`).
//!
//! Operations run on the Store and on a HashMap model under a manual clock, and every answer is
//! compared:
//! * exact regime: memory is ample, so every answer must match the model exactly (and the
//!   store must report no eviction);
//! * eviction regime: memory is tiny; the store may forget items (then the model forgets them
//!   too), but whatever it returns must be the model's current item -- value, flags, exp and
//!   CAS -- never a stale or foreign one, and memory must stay within the limit;
//! * flash regime (the eviction regime with a small flash file, [`flash_config`]): the same,
//!   and every item the model sees vanish (a miss, or a write that acts as on a miss, while the
//!   model holds it live) must be one the store counted lost -- evicted from RAM, on an evicted
//!   page, dropped by ext_drop_unread's compaction ([`losses`]). A record that expired, or a
//!   whole page reclaimed because all its records expired, is a miss the model expects anyway
//!   (the item's own expiry); nothing else may disappear.
//!
//! CAS values are checked for what the protocol promises: a read returns the CAS of the last
//! modification, every modification gets a CAS the key never had, touch keeps it.
//!
//! Why a plain file included three ways rather than a crate feature or a helper crate: the
//! checker needs nothing but the store's public API, so it stays test code (no test-only
//! surface in mnemo-store), and stable `cargo test` runs the very code the fuzzer runs.
//!
//! `decode` turns arbitrary bytes into a Case (config + operations); it never fails, so any
//! fuzz input, and any seeded random byte string, is a valid test.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};

use mnemo_store::*;

#[derive(Clone, Debug)]
pub enum Op {
    /// mode 0..5 = set add replace append prepend
    Store {
        mode: u8,
        key: u16,
        value: Vec<u8>,
        flags: u32,
        ttl: i32,
    },
    Cas {
        key: u16,
        value: Vec<u8>,
        flags: u32,
        ttl: i32,
        right: bool,
    },
    Get(u16),
    Gat(u16, i32),
    Touch(u16, i32),
    Delete(u16),
    Delta {
        key: u16,
        incr: bool,
        by: u64,
    },
    Advance(u32),
    Flush(u8),
    Maintain,
    /// Waits for the flash writer to write every queued buffer (`Store::flash_sync`).
    Sync,
}

/// Which checks a case runs under (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Regime {
    Exact,
    Evict,
    /// The eviction regime with a flash tier (a small file, small pages).
    Flash,
}

/// One test: a store configuration, the regime and the operations.
#[derive(Debug)]
pub struct Case {
    pub cfg: StoreConfig,
    pub lenient: bool,
    pub ops: Vec<Op>,
    /// The flash file of a flash-regime case, removed with the case.
    pub file: Option<FlashFile>,
}

/// A flash file for one case, removed after it.
#[derive(Debug)]
pub struct FlashFile(pub std::path::PathBuf);

impl FlashFile {
    pub fn new() -> FlashFile {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        FlashFile(
            std::env::temp_dir().join(format!("mnemo-model-flash-{}-{n}", std::process::id())),
        )
    }

    /// Small pages so that pages are recycled within a case (stale entries, generations), a
    /// low item size so most values go to flash, and a high recache rate so flash hits come
    /// back to RAM often.
    pub fn config(&self, pages: u64) -> FlashConfig {
        FlashConfig {
            page_size: 64 << 10,
            wbuf_size: 16 << 10,
            item_size: 16,
            recache_rate: 3,
            ..FlashConfig::new(&self.0, pages * (64 << 10))
        }
    }
}

impl Drop for FlashFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let mut lock = self.0.clone().into_os_string();
        lock.push(".lock");
        let _ = std::fs::remove_file(lock);
    }
}

/// What a case reached on the flash tier (all 0 without one), from the store's counters at
/// its end: the model tests sum these over their cases, so a regime that stops reaching a
/// path fails rather than passing on nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reached {
    /// Pages reclaimed (`extstore_page_reclaims`): emptied, or every record expired.
    pub page_reclaims: u64,
    /// Of those, pages reclaimed whole because every record on them expired.
    pub pages_expired: u64,
    /// Records ext_drop_unread's compaction dropped with their items.
    pub drops: u64,
    /// `extstore_compact_skipped`: those drops, and records left for want of a write buffer.
    pub skipped: u64,
    /// Records compaction copied out (`extstore_compact_rescues`).
    pub rescues: u64,
    /// Items the model saw gone before their time (a miss, or a write acting as on a miss).
    pub vanished: u64,
    /// Flash hits (`get_extstore`).
    pub flash_hits: u64,
}

impl std::ops::AddAssign for Reached {
    fn add_assign(&mut self, o: Reached) {
        self.page_reclaims += o.page_reclaims;
        self.pages_expired += o.pages_expired;
        self.drops += o.drops;
        self.skipped += o.skipped;
        self.rescues += o.rescues;
        self.vanished += o.vanished;
        self.flash_hits += o.flash_hits;
    }
}

/// Items the store may have lost so far, each counted once where it was lost: evicted from
/// RAM, a record lost with its evicted page, a record dropped (or skipped) by compaction.
/// With a flash tier every item the model sees vanish must be among them: nothing else may
/// disappear (an expired item is not a vanished one; the model never expects it).
fn losses(st: &StoreStats) -> u64 {
    let f = st
        .flash
        .as_ref()
        .map_or(0, |f| f.objects_evicted + f.unread_dropped);
    st.evictions + f
}

pub fn key_bytes(k: u16) -> Vec<u8> {
    // A few binary keys and a few of the longest allowed among the plain ones.
    if k % 7 == 3 {
        vec![0, (k >> 8) as u8, k as u8, b'\r', 0x7f]
    } else if k % 13 == 6 {
        let mut v = format!("long:{k}:").into_bytes();
        v.resize(MAX_KEY_LEN, b'x');
        v
    } else {
        format!("key:{k}").into_bytes()
    }
}

/// memcached's safe_strtoull as the server passes it: digits, then only whitespace.
pub fn parse(b: &[u8]) -> Option<u64> {
    let digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 || !b[digits..].iter().all(|c| c.is_ascii_whitespace()) {
        return None;
    }
    std::str::from_utf8(&b[..digits]).ok()?.parse().ok()
}

#[derive(Clone, Debug, PartialEq)]
struct MItem {
    value: Vec<u8>,
    flags: u32,
    exp: Time,
    cas: u64,
}

struct Model {
    items: HashMap<Vec<u8>, MItem>,
    now: Time,
    /// Largest `now` an operation passed to the store: flush_all applies a pending flush due by
    /// that time (it has no `now` of its own).
    seen: Time,
    pending: Option<Time>,
    cas_seen: HashMap<Vec<u8>, HashSet<u64>>,
    /// Eviction regime: the store may have dropped any item.
    lenient: bool,
    item_size_max: usize,
    /// Live items the store no longer had (eviction regime): see [`losses`].
    vanished: u64,
}

impl Model {
    /// The store no longer has `k`, which the model holds live: it was lost (lenient only).
    fn vanish(&mut self, k: &[u8]) {
        assert!(self.lenient, "{k:?} vanished in the exact regime");
        self.items.remove(k);
        self.vanished += 1;
    }
    fn tick(&mut self) {
        self.seen = self.seen.max(self.now);
        self.flush_due(self.seen);
    }
    fn flush_due(&mut self, t: Time) {
        if let Some(at) = self.pending {
            if t >= at {
                self.items.clear();
                self.pending = None;
            }
        }
    }
    /// The key's item if it has not expired. An expired item stays in `items`: the store may
    /// still count it (curr_items) until it reclaims it, and it may never look at the key
    /// (e.g. a TooLarge append is refused before any lookup), so the model must not forget it
    /// first or its upper bound on curr_items would be wrong.
    fn live(&mut self, k: &[u8]) -> Option<MItem> {
        let it = self.items.get(k)?;
        if it.exp != 0 && it.exp <= self.now {
            return None;
        }
        Some(it.clone())
    }
    fn exp_of(&self, ttl: i32) -> Time {
        if ttl == 0 {
            0
        } else {
            (self.now as i64 + ttl as i64).clamp(1, Time::MAX as i64) as Time
        }
    }
    fn fresh_cas(&mut self, k: &[u8], cas: u64) {
        assert!(cas != 0);
        assert!(
            self.cas_seen.entry(k.to_vec()).or_default().insert(cas),
            "cas {cas} reused"
        );
    }
}

/// What a store op should do given the current item: (outcome kind, new item sans cas).
fn expect_store(
    mode: Mode,
    cur: Option<&MItem>,
    key_len: usize,
    item_size_max: usize,
    value: &[u8],
    flags: u32,
    exp: Time,
) -> (StoreOutcome, Option<MItem>) {
    let stored = StoreOutcome::Stored { cas: 0 };
    let new = |value: Vec<u8>, flags, exp| {
        Some(MItem {
            value,
            flags,
            exp,
            cas: 0,
        })
    };
    match (mode, cur) {
        (Mode::Set, _) | (Mode::Add, None) => (stored, new(value.to_vec(), flags, exp)),
        (Mode::Replace, Some(_)) => (stored, new(value.to_vec(), flags, exp)),
        (Mode::Add, Some(_)) | (Mode::Replace | Mode::Append | Mode::Prepend, None) => {
            (StoreOutcome::NotStored, None)
        }
        // memcached: an append whose result no longer fits is NOT_STORED, the item unchanged.
        (Mode::Append | Mode::Prepend, Some(c))
            if key_len + c.value.len() + value.len() > item_size_max =>
        {
            (StoreOutcome::NotStored, None)
        }
        (Mode::Append, Some(c)) => (stored, new([&c.value[..], value].concat(), c.flags, c.exp)),
        (Mode::Prepend, Some(c)) => (stored, new([value, &c.value[..]].concat(), c.flags, c.exp)),
        (Mode::Cas(_), None) => (StoreOutcome::NotFound, None),
        (Mode::Cas(x), Some(c)) if x != c.cas => (StoreOutcome::Exists, None),
        (Mode::Cas(_), Some(_)) => (stored, new(value.to_vec(), flags, exp)),
    }
}

fn kind(o: &StoreOutcome) -> StoreOutcome {
    match o {
        StoreOutcome::Stored { .. } => StoreOutcome::Stored { cas: 0 },
        o => *o,
    }
}

/// Every read of a large item declares its pages lent, as a zero-copy send does, so the
/// store's renewal of lent buffers (before they are written again) runs in every regime.
fn read_item(it: Item<'_>) -> MItem {
    if let Some(p) = it.pages {
        p.lend();
    }
    MItem {
        value: it.value.to_vec(),
        flags: it.flags,
        exp: it.exp,
        cas: it.cas,
    }
}

/// Runs `ops` on a fresh store and the model; panics at the first disagreement. Returns what
/// the case reached on the flash tier.
pub fn run(cfg: StoreConfig, ops: &[Op], lenient: bool) -> Reached {
    let limit = cfg.mem_limit as u64;
    let item_size_max = cfg.item_size_max;
    let flash = cfg.flash.is_some();
    let store = Store::new(cfg);
    let mut m = Model {
        items: HashMap::new(),
        now: 1000,
        seen: 0,
        pending: None,
        cas_seen: HashMap::new(),
        lenient,
        item_size_max,
        vanished: 0,
    };
    for (i, op) in ops.iter().enumerate() {
        if !matches!(op, Op::Advance(_) | Op::Flush(_)) {
            m.tick();
        }
        match op {
            Op::Store {
                mode,
                key,
                value,
                flags,
                ttl,
            } => {
                let mode = [
                    Mode::Set,
                    Mode::Add,
                    Mode::Replace,
                    Mode::Append,
                    Mode::Prepend,
                ][*mode as usize % 5];
                do_store(&store, &mut m, mode, &key_bytes(*key), value, *flags, *ttl);
            }
            Op::Cas {
                key,
                value,
                flags,
                ttl,
                right,
            } => {
                let k = key_bytes(*key);
                let c = match m.live(&k) {
                    Some(it) if *right => it.cas,
                    Some(it) => it.cas ^ 1,
                    None => 12345,
                };
                do_store(&store, &mut m, Mode::Cas(c), &k, value, *flags, *ttl);
            }
            Op::Get(key) => {
                let k = key_bytes(*key);
                let got = store.get(&k, m.now, read_item);
                check_read(&mut m, &k, got.hit());
            }
            Op::Gat(key, ttl) => {
                let k = key_bytes(*key);
                let exp = m.exp_of(*ttl);
                let got = store.get_and_touch(&k, exp, m.now, read_item);
                // memcached's gat returns the item with its new exp even when that exp is
                // already past (the item is dead right after).
                let cur = m.live(&k).map(|it| MItem { exp, ..it });
                match (cur, got.hit()) {
                    (Some(c), Some(g)) => {
                        assert_eq!(c, g, "gat {k:?}");
                        m.items.insert(k.clone(), c);
                    }
                    (None, None) => {}
                    (Some(_), None) if m.lenient => m.vanish(&k),
                    (c, g) => panic!("gat {k:?}: model {c:?} store {g:?}"),
                }
            }
            Op::Touch(key, ttl) => {
                let k = key_bytes(*key);
                let exp = m.exp_of(*ttl);
                let cur = m.live(&k);
                let ok = store.touch(&k, exp, m.now);
                match (cur.is_some(), ok) {
                    (true, true) => m.items.get_mut(&k).unwrap().exp = exp,
                    (false, false) => {}
                    (true, false) if m.lenient => m.vanish(&k),
                    other => panic!("touch {k:?}: model/store {other:?}"),
                }
            }
            Op::Delete(key) => {
                let k = key_bytes(*key);
                let cur = m.live(&k);
                let ok = store.delete(&k, m.now);
                match (cur.is_some(), ok) {
                    (a, b) if a == b => {}
                    (true, false) if m.lenient => m.vanish(&k),
                    other => panic!("delete {k:?}: model/store {other:?}"),
                }
                m.items.remove(&k);
            }
            Op::Delta { key, incr, by } => {
                let k = key_bytes(*key);
                let cur = m.live(&k);
                let got = store.delta(&k, *incr, *by, m.now, parse);
                let want = match &cur {
                    None => Err(DeltaError::NotFound),
                    Some(c) if c.value.is_empty() => Err(DeltaError::NonNumeric),
                    Some(c) => match parse(&c.value) {
                        None => Err(DeltaError::NonNumeric),
                        Some(v) => Ok(if *incr {
                            v.wrapping_add(*by)
                        } else {
                            v.saturating_sub(*by)
                        }),
                    },
                };
                match (want, got) {
                    (Ok(n), Ok((g, cas))) => {
                        assert_eq!(n, g, "delta {k:?}");
                        m.fresh_cas(&k, cas);
                        let it = m.items.get_mut(&k).unwrap();
                        let mut v = n.to_string().into_bytes();
                        if v.len() < it.value.len() {
                            v.resize(it.value.len(), b' ');
                        }
                        it.value = v;
                        it.cas = cas;
                    }
                    (Err(a), Err(b)) if a == b => {}
                    (_, Err(DeltaError::NotFound)) if m.lenient => m.vanish(&k),
                    (a, b) => panic!("delta {k:?}: model {a:?} store {b:?}"),
                }
            }
            Op::Advance(d) => m.now = m.now.saturating_add(*d),
            Op::Flush(delay) => {
                // The store applies a pending flush that is due by the last time it saw.
                m.flush_due(m.seen);
                let at = if *delay == 0 {
                    0
                } else {
                    m.now + *delay as Time
                };
                store.flush_all(at);
                m.pending = Some(at);
            }
            Op::Sync => store.flash_sync(),
            Op::Maintain => {
                store.maintain(m.now);
                let st = store.stats();
                if !m.lenient {
                    let live = m
                        .items
                        .values()
                        .filter(|it| it.exp == 0 || it.exp > m.now)
                        .count();
                    // curr_items may still count expired items in segments not yet dropped.
                    assert!(st.curr_items >= live as u64, "{st:?} live {live}");
                    assert!(
                        st.curr_items <= m.items.len() as u64,
                        "{st:?} model {}",
                        m.items.len()
                    );
                }
            }
        }
        let st = store.stats();
        if m.lenient {
            // Index and metadata growth is charged after the fact, and every operation that
            // can grow them trims right after, taking a segment from another shard when its own
            // shard has none (fuzzing found a freed segment id growing the free list of an
            // empty shard: 32 bytes over until the next write, before that fix). So after
            // each operation the store is within its limit, to the byte.
            assert!(st.mem_used <= limit, "over budget: {st:?}");
        } else {
            assert_eq!(st.evictions, 0, "exact regime must not evict");
        }
        if flash && m.vanished > losses(&st) {
            let mut op = format!("{op:?}");
            op.truncate(120);
            panic!(
                "op {i} ({op}...): {} items vanished, {} lost by count: {st:?}",
                m.vanished,
                losses(&st)
            );
        }
    }
    let st = store.stats();
    let f = st.flash.unwrap_or_default();
    Reached {
        page_reclaims: f.page_reclaims,
        pages_expired: f.pages_expired,
        drops: f.unread_dropped,
        skipped: f.compact_skipped,
        rescues: f.compact_rescues,
        vanished: m.vanished,
        flash_hits: f.get_extstore,
    }
}

fn check_read(m: &mut Model, k: &[u8], got: Option<MItem>) {
    let cur = m.live(k);
    match (cur, got) {
        (Some(c), Some(g)) => assert_eq!(c, g, "read {k:?}"),
        (None, None) => {}
        (Some(_), None) if m.lenient => m.vanish(k),
        (c, g) => panic!("read {k:?}: model {c:?} store {g:?}"),
    }
}

fn do_store(
    store: &Store,
    m: &mut Model,
    mode: Mode,
    k: &[u8],
    value: &[u8],
    flags: u32,
    ttl: i32,
) {
    let exp = m.exp_of(ttl);
    let cur = m.live(k);
    let got = store.store(mode, k, flags, exp, value, m.now);
    let got = match got {
        Ok(o) => o,
        Err(StoreError::TooLarge) => {
            assert!(
                k.len() + value.len() > m.item_size_max,
                "{mode:?} {k:?}: TooLarge"
            );
            if mode == Mode::Set {
                // memcached: a set that fails must not leave the old value readable.
                m.items.remove(k);
            }
            return;
        }
        Err(StoreError::OutOfMemory) if m.lenient => {
            // Nothing was stored: the key keeps its last stored item (or none, if it was
            // evicted meanwhile -- the next read tells, and either is acceptable).
            return;
        }
        Err(e) => panic!("{mode:?} {k:?}: {e:?}"),
    };
    assert!(
        k.len() + value.len() <= m.item_size_max,
        "{mode:?} {k:?}: stored past item_size_max"
    );
    let isz = m.item_size_max;
    let (mut want, mut new) = expect_store(mode, cur.as_ref(), k.len(), isz, value, flags, exp);
    if m.lenient && kind(&got) != want && cur.is_some() {
        // Evicted behind the model's back: then it must act as if absent.
        m.vanish(k);
        (want, new) = expect_store(mode, None, k.len(), isz, value, flags, exp);
    }
    assert_eq!(kind(&got), want, "{mode:?} {k:?} (model had {cur:?})");
    if let (StoreOutcome::Stored { cas }, Some(mut it)) = (got, new) {
        m.fresh_cas(k, cas);
        it.cas = cas;
        m.items.insert(k.to_vec(), it);
    }
}

/// Reads bytes of a fuzz input; past its end every read is 0, so decoding never fails.
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn more(&self) -> bool {
        self.pos < self.data.len()
    }
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
}

/// Most operations an input may decode to: bounds the time of one fuzz execution.
pub const MAX_OPS: usize = 3000;

/// Decodes any bytes into a Case. Byte 0 picks the configuration (bit 0: regime, exact or
/// eviction, unless `force` names one; bits 1-2: shards; bits 3-4: memory in the eviction
/// regimes; bits 5-6: 0 gives a 2 KiB item_size_max, so TooLarge and the append limit are
/// reached; bit 7: the fifo eviction policy instead of the default s3fifo). The flash regime
/// (only when forced: the regime of an unforced input stays its first byte's) reads one byte
/// more, the flash tier's settings ([`flash_config`]). Then one byte per operation picks its
/// kind, followed by its arguments.
pub fn decode(data: &[u8], force: Option<Regime>) -> Case {
    let mut r = Input { data, pos: 0 };
    let c = r.u8();
    let regime = force.unwrap_or(if c & 1 == 1 {
        Regime::Evict
    } else {
        Regime::Exact
    });
    let lenient = regime != Regime::Exact;
    let shards = [1, 2, 4, 8][(c as usize >> 1) & 3];
    let mem_limit = if lenient {
        [64 << 10, 96 << 10, 128 << 10, 256 << 10][(c as usize >> 3) & 3]
    } else {
        32 << 20
    };
    let item_size_max = if (c >> 5) & 3 == 0 { 2048 } else { 1 << 20 };
    let eviction = if c >> 7 == 1 {
        Eviction::Fifo
    } else {
        Eviction::S3Fifo
    };
    let (file, flash) = match regime {
        Regime::Flash => {
            let file = FlashFile::new();
            let fc = flash_config(&file, r.u8());
            (Some(file), Some(fc))
        }
        _ => (None, None),
    };
    let cfg = StoreConfig {
        mem_limit,
        shards,
        item_size_max,
        eviction,
        flash,
        ..Default::default()
    };
    // The flash regime has one kind more: waiting for the writer.
    let kinds = if regime == Regime::Flash { 37 } else { 36 };
    // Few keys when nothing is evicted (so operations meet), many under pressure.
    let keys: u16 = if lenient { 256 } else { 24 };
    let mut serial = 0u32;
    let mut ops = Vec::new();
    while r.more() && ops.len() < MAX_OPS {
        let o = r.u8() % kinds;
        let op = match o {
            0..=11 => {
                let (mode, key) = (r.u8() % 5, r.u8() as u16 % keys);
                let value = value(&mut r, lenient, &mut serial);
                Op::Store {
                    mode,
                    key,
                    value,
                    flags: flags(&mut r),
                    ttl: ttl(&mut r),
                }
            }
            12..=14 => {
                let key = r.u8() as u16 % keys;
                let value = value(&mut r, lenient, &mut serial);
                let (flags, ttl, right) = (flags(&mut r), ttl(&mut r), r.u8() & 1 == 1);
                Op::Cas {
                    key,
                    value,
                    flags,
                    ttl,
                    right,
                }
            }
            15..=22 => Op::Get(r.u8() as u16 % keys),
            23..=24 => Op::Gat(r.u8() as u16 % keys, ttl(&mut r)),
            25..=26 => Op::Touch(r.u8() as u16 % keys, ttl(&mut r)),
            27..=28 => Op::Delete(r.u8() as u16 % keys),
            29..=30 => {
                let (key, b) = (r.u8() as u16 % keys, r.u8());
                let by = if b >= 250 {
                    u64::MAX - u64::from(b & 3)
                } else {
                    u64::from(b % 20)
                };
                Op::Delta {
                    key,
                    incr: b & 0x80 == 0,
                    by,
                }
            }
            31..=33 => {
                let b = r.u8();
                // Mostly small steps; sometimes past every short TTL, or far ahead.
                Op::Advance(match b % 16 {
                    0..=12 => u32::from(b % 4),
                    13 | 14 => 5 + u32::from(b >> 4),
                    _ => 1000 * u32::from(b >> 4),
                })
            }
            34 => Op::Flush(r.u8() % 4),
            35 => Op::Maintain,
            _ => Op::Sync,
        };
        ops.push(op);
    }
    Case {
        cfg,
        lenient,
        ops,
        file,
    }
}

/// The flash regime's settings from one byte: bits 0-2 the pages (1-8 of 64 KiB), bit 3
/// memcached's low-TTL pages (ext_low_ttl 4 s), bit 4 ext_drop_unread, bit 5 compaction and
/// dropping while any page is in use (else memcached's default, a quarter of the pages free),
/// bit 6 ext_max_frag 0 (no page is fragmented enough: only drop_unread compacts), bit 7 no
/// recaching (else one flash hit in 3 comes back to RAM).
pub fn flash_config(file: &FlashFile, b: u8) -> FlashConfig {
    let pages = 1 + u64::from(b & 7);
    let base = file.config(pages);
    let under = (b & 32 != 0).then_some(pages as usize);
    FlashConfig {
        low_ttl: if b & 8 != 0 { 4 } else { 0 },
        drop_unread: b & 16 != 0,
        compact_under: under,
        drop_under: under,
        max_frag_permille: if b & 64 != 0 {
            0
        } else {
            base.max_frag_permille
        },
        recache_rate: if b & 128 != 0 { 0 } else { base.recache_rate },
        ..base
    }
}

fn flags(r: &mut Input<'_>) -> u32 {
    match r.u8() {
        0..=127 => 0,
        b if b < 250 => u32::from(b),
        _ => r.u32(),
    }
}

fn ttl(r: &mut Input<'_>) -> i32 {
    let b = r.u8();
    match b % 16 {
        0..=6 => 0,
        7..=12 => i32::from(b % 16) - 6,    // 1..=6 s
        13 => -i32::from(b >> 4),           // already past (0 = no TTL is excluded above)
        14 => 60 + 37 * i32::from(b >> 4),  // minutes
        _ => 3_000_000 + i32::from(b >> 4), // far future (past memcached's 30-day switch)
    }
}

fn value(r: &mut Input<'_>, lenient: bool, serial: &mut u32) -> Vec<u8> {
    let b = r.u8();
    // Generated values start with a serial number, so two writes never store equal bytes and a
    // stale read shows even where the CAS would not.
    let mut filled = |len: usize| {
        *serial += 1;
        let s = *serial;
        (0..len)
            .map(|i| (s as usize).wrapping_mul(31).wrapping_add(i * 7) as u8 ^ (s >> 8) as u8)
            .collect::<Vec<u8>>()
    };
    match b % 10 {
        0..=2 => {
            let n = (r.u8() % 24) as usize;
            (0..n).map(|_| r.u8()).collect()
        }
        3 => filled((b >> 4) as usize),
        4 | 5 => r.u16().to_string().into_bytes(),
        6 => {
            let specials: [&[u8]; 8] = [
                b"18446744073709551615",
                b"18446744073709551616",
                b"10",
                b"0",
                b"12  ",
                b" 5",
                b"",
                b"007",
            ];
            specials[(b >> 4) as usize % specials.len()].to_vec()
        }
        7 | 8 => filled(100 + r.u16() as usize % 1400),
        _ if lenient => filled(3000 + r.u16() as usize % 6000),
        _ => filled(1000 + r.u16() as usize % 2000),
    }
}

/// Decodes and runs; what the fuzz target and the replay test call.
pub fn check(data: &[u8], force: Option<Regime>) -> Reached {
    let case = decode(data, force);
    run(case.cfg, &case.ops, case.lenient)
}
