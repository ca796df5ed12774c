//! The ghost: fingerprints of keys that S3-FIFO recently let go without a read (or that
//! expired after one), and the split between the small and main FIFOs that their returns
//! argue for.
//!
//! Owns a compact table of 32-bit entries and the split. A key whose set finds its
//! fingerprint here was evicted too early once (it came back before the ghost forgot it), so
//! the new item goes straight to the main FIFO (evict.rs).
//!
//! ```text
//! entry (u32), 0 = empty
//!  31                                 6     5      4     3      0
//! +------------------------------------+-------+------+--------+
//! |  fingerprint: key hash bits 32..57 |expired| main | epoch  |
//! +------------------------------------+-------+------+--------+
//! bucket = 8 entries (32 bytes), chosen by the hash's low 32 bits (multiply-shift)
//! main: the key left from main (else from small); expired: it was not evicted but expired
//! after a read (its return goes to main and leaves the split alone)
//! ```
//!
//! Forgetting in FIFO order without a queue: inserts are counted in epochs of a sixteenth of
//! the table's entries (the epoch is 4 bits). An entry older than `LIVE_EPOCHS` is forgotten
//! (free for an insert, never matched), so the ghost remembers about the last 3/4 table of
//! inserts, oldest forgotten first; at each new epoch one sweep clears entries about to become
//! ambiguous (the 4-bit age would wrap). A full bucket gives its oldest entry to an insert.
//! Sized from the shard's item count: `ENTRIES_PER_ITEM` (1.5) entries of 4 bytes per item, so
//! it remembers about as many keys as the shard holds (S3-FIFO's ghost is as long as its
//! main queue; buckets that fill first forget a little sooner), grown (emptied) when the shard
//! holds a third more, and allocated only on the first insert: a cache that never evicts pays
//! nothing for it. The table's bytes count against `-m` (shard.rs `sync_overhead`).
//!
//! The split (ARC's adaptation, on S3-FIFO's two FIFOs): small's target share of the shard's
//! segment bytes, between `SPLIT_MIN` (1/20) and `SPLIT_MAX` (1/2). A key back from small's
//! ghost would have been a hit with a larger small: the split grows by the item's share of
//! the shard's bytes. A key back from main's ghost would have been a hit with a larger main:
//! the split shrinks by `MAIN_RETURN_WEIGHT` times that (a return from main is rarer and
//! costlier: it was in the cache a whole main pass). Why: after a popularity shift the old
//! phase's keys hold main, and under a fixed 1/10 main hardly turns over (its evictions only
//! make room for promotions); no evicted key of main comes back, so small grows, main is
//! evicted more often and the old keys leave. Where main's evictees do come back (Zipf, the
//! traces) the split stays near its floor.
//! ```text
//!   return from small's ghost: split += len / bytes           (capped at SPLIT_MAX)
//!   return from main's ghost:  split -= 8 * len / bytes       (floored at SPLIT_MIN)
//!   victim: small's head while small's bytes > split * segment bytes, else main's head
//! ```

const BUCKET: usize = 8;
const EPOCH_BITS: u32 = 4;
const EPOCH_MASK: u32 = (1 << EPOCH_BITS) - 1;
/// Entries at most this many epochs old are remembered: 12 of 16 epochs of a table's
/// sixteenth = three quarters of a table of inserts (a full bucket still gives its oldest
/// entry away first), the rest of the entries being free or stale. Store-level replay
/// (examples/replay.rs; segments of limit / 128, `Left::Expired` on reads only), miss ratio
/// with 8 / 12: zipf-shift at 7 / 25 MiB 0.3381 / 0.2797 -> 0.3345 / 0.2791; zipf-ttl 0.3378
/// / 0.2638 -> 0.3329 / 0.2631; Zipf 0.3049 / 0.2209 -> 0.3046 / 0.2205; orm-night at 23 /
/// 34 MiB and mixed sizes at 45 / 88 MiB unchanged; web12 at 0.5 / 1 / 2 MiB 0.3148 / 0.2388
/// / 0.1667 -> 0.3181 / 0.2412 / 0.1670 (4..16 KiB segments then).
const LIVE_EPOCHS: u32 = 12;
/// Smallest table (entries).
const MIN_ENTRIES: usize = 64;
/// Table entries per item the shard holds, as a fraction (3 / 2): remembers ~3/4 of the item
/// count. Store-level replay (examples/replay.rs), miss ratio with 1 / 1.5 entries per item
/// (and the split): zipf-shift at 7 / 25 MiB 0.3479 / 0.2829 -> 0.3430 / 0.2842, Zipf at 7 /
/// 25 MiB 0.3130 / 0.2315 -> 0.3105 / 0.2299; orm-night, web12 and mixed sizes within 0.0010.
const ENTRIES_PER_ITEM: (usize, usize) = (3, 2);
/// Entry bit above the epoch: the key left from main (else from small).
const FROM_MAIN: u32 = 1 << EPOCH_BITS;
/// Entry bit above `FROM_MAIN`: the key expired after a read (`Left::Expired`).
const FROM_EXPIRY: u32 = FROM_MAIN << 1;
/// Fingerprint bits of an entry.
const FP_MASK: u32 = !(EPOCH_MASK | FROM_MAIN | FROM_EXPIRY);

/// The split's unit: small's target share is `split / SPLIT_ONE` of the segment bytes.
pub(crate) const SPLIT_ONE: u64 = 1 << 16;
/// Small's least target share: 1/20. Replay, miss ratio with floors of 1/10 and 1/20 (with the
/// rest of the split): orm-night at 23 / 27 MiB 0.0197 / 0.0173 -> 0.0189 / 0.0166; zipf-shift
/// at 25 MiB 0.2865 -> 0.2877, Zipf and mixed sizes within 0.0032.
const SPLIT_MIN: u64 = SPLIT_ONE / 20;
/// Small's greatest target share: 1/2 (3/10: zipf-shift at 25 MiB 0.2931 instead of 0.2866).
const SPLIT_MAX: u64 = SPLIT_ONE / 2;
/// How much farther a return from main's ghost moves the split than one from small's. Replay,
/// miss ratio with 1 / 4 / 16 / 64: Zipf at 7 MiB 0.3411 / 0.3320 / 0.3135 / 0.3120, at 25 MiB
/// 0.2378 / 0.2343 / 0.2318 / 0.2307; zipf-shift at 25 MiB 0.2853 / 0.2854 / 0.2865 / 0.2882.
/// With evict.rs's `SIZE_BAR_FLOOR` (items to 1 KiB kept on one read) and `LARGE_SHARE` 4,
/// 4 / 8 / 16: Zipf at 7 / 25 MiB 0.3169 / 0.2275, 0.3101 / 0.2256, 0.3084 / 0.2244;
/// zipf-shift at 25 MiB 0.2795 / 0.2832 / 0.2877 (7 MiB: 0.3447 / 0.3409 / -): 8 keeps
/// zipf-shift where it was (0.2837 before the floor) and most of Zipf's gain.
const MAIN_RETURN_WEIGHT: u64 = 8;

/// Where a remembered key was evicted from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Left {
    Small,
    Main,
    /// Not evicted: it expired after being read (evict.rs `remember_read`, shard.rs
    /// `expired_read`). Its return goes to main like the others' but says nothing about the
    /// split.
    Expired,
}

pub(crate) struct Ghost {
    /// Small's target share of the segment bytes, in 1/`SPLIT_ONE`.
    split: u64,
    table: Vec<u32>,
    epoch: u32,
    /// Inserts in the current epoch.
    inserts: usize,
}

#[inline]
fn fingerprint(h: u64) -> u32 {
    // Bits 32..57: apart from the bucket's (the low 32); never 0.
    ((((h >> 32) as u32) & 0x03ff_ffff) << (EPOCH_BITS + 2)).max(1 << (EPOCH_BITS + 2))
}

impl Ghost {
    pub fn new() -> Ghost {
        Ghost {
            split: SPLIT_MIN,
            table: Vec::new(),
            epoch: 0,
            inserts: 0,
        }
    }

    /// Small's target share of the segment bytes, in 1/`SPLIT_ONE`.
    pub fn split(&self) -> u64 {
        self.split
    }

    /// A key of `len` bytes came back from where it `left`, in a shard holding `bytes` of
    /// items: the split moves (module doc).
    pub fn returned(&mut self, left: Left, len: usize, bytes: u64) {
        let step = (len as u64 * SPLIT_ONE / bytes.max(1)).max(1);
        self.split = match left {
            Left::Small => (self.split + step).min(SPLIT_MAX),
            Left::Main => self
                .split
                .saturating_sub(step * MAIN_RETURN_WEIGHT)
                .max(SPLIT_MIN),
            Left::Expired => self.split,
        };
    }

    /// Bytes held (counted in the budget).
    pub fn bytes(&self) -> usize {
        self.table.capacity() * 4
    }

    #[inline]
    fn age(&self, e: u32) -> u32 {
        self.epoch.wrapping_sub(e & EPOCH_MASK) & EPOCH_MASK
    }

    #[inline]
    fn bucket(&self, h: u64) -> usize {
        let buckets = (self.table.len() / BUCKET) as u64;
        (((h & 0xffff_ffff) * buckets) >> 32) as usize * BUCKET
    }

    /// Remembers key hash `h`, evicted unread from `left`; `items` (the shard's item count)
    /// sizes the table.
    pub fn insert(&mut self, h: u64, items: usize, left: Left) {
        let (num, den) = ENTRIES_PER_ITEM;
        let want = (items * num / den)
            .max(MIN_ENTRIES)
            .next_multiple_of(BUCKET);
        if self.table.len() * 4 < want * 3 {
            // Grown empty: what it remembered was about a smaller cache.
            self.table = vec![0; want];
            self.epoch = 0;
            self.inserts = 0;
        }
        let b = self.bucket(h);
        let fp = fingerprint(h);
        let mut victim = b;
        let mut oldest = 0;
        for i in b..b + BUCKET {
            let e = self.table[i];
            if e == 0 || e & FP_MASK == fp {
                victim = i;
                break;
            }
            let age = self.age(e);
            if age >= oldest {
                (victim, oldest) = (i, age);
            }
        }
        let from = match left {
            Left::Small => 0,
            Left::Main => FROM_MAIN,
            Left::Expired => FROM_EXPIRY,
        };
        self.table[victim] = fp | from | self.epoch;
        self.inserts += 1;
        if self.inserts * 16 >= self.table.len() {
            self.inserts = 0;
            self.epoch = (self.epoch + 1) & EPOCH_MASK;
            // Clear what would otherwise look young again once the age wraps.
            let epoch = self.epoch;
            for e in self.table.iter_mut() {
                if *e != 0 && epoch.wrapping_sub(*e & EPOCH_MASK) & EPOCH_MASK >= EPOCH_MASK {
                    *e = 0;
                }
            }
        }
    }

    /// Where `h` left from, if it is remembered; it is forgotten either way (a key comes back
    /// from the ghost once per eviction).
    pub fn take(&mut self, h: u64) -> Option<Left> {
        if self.table.is_empty() {
            return None;
        }
        let b = self.bucket(h);
        let fp = fingerprint(h);
        for i in b..b + BUCKET {
            let e = self.table[i];
            if e != 0 && e & FP_MASK == fp {
                self.table[i] = 0;
                let left = match (e & FROM_MAIN != 0, e & FROM_EXPIRY != 0) {
                    (_, true) => Left::Expired,
                    (true, false) => Left::Main,
                    (false, false) => Left::Small,
                };
                return (self.age(e) < LIVE_EPOCHS).then_some(left);
            }
        }
        None
    }

    /// Forgets everything (flush_all: no key may come back as if it had been evicted), the
    /// split included.
    pub fn clear(&mut self) {
        self.table.iter_mut().for_each(|e| *e = 0);
        self.split = SPLIT_MIN;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(i: u64) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes())
    }

    #[test]
    fn empty_until_first_insert_and_then_sized_by_items() {
        let mut g = Ghost::new();
        assert_eq!(g.bytes(), 0);
        assert_eq!(g.take(h(1)), None);
        assert_eq!(g.bytes(), 0);
        g.insert(h(1), 1000, Left::Small);
        assert_eq!(g.bytes(), 1504 * 4, "1.5 entries per item, whole buckets");
        g.insert(h(2), 1000, Left::Main);
        assert_eq!(g.take(h(1)), Some(Left::Small));
        assert_eq!(g.take(h(1)), None, "taken once");
        assert_eq!(g.take(h(2)), Some(Left::Main));
    }

    #[test]
    fn remembers_recent_inserts_and_forgets_old_ones() {
        let mut g = Ghost::new();
        let items = 8192 * 2 / 3; // 8192 entries: remembers about 6144 keys
        for i in 0..6144 {
            g.insert(h(i), items, Left::Small);
        }
        // 6144 inserts are 12 epochs of 512: all but the first epoch's are remembered (but
        // for buckets that filled up and gave their oldest entries away).
        let recent = (512..6144).filter(|&i| g.take(h(i)).is_some()).count();
        assert!(
            recent > 5000,
            "{recent} of the last 5632 inserts remembered"
        );
        let first = (0..512).filter(|&i| g.take(h(i)).is_some()).count();
        assert!(first < 10, "{first} of the oldest epoch remembered");
        for i in 10_000..30_000 {
            g.insert(h(i), items, Left::Main);
        }
        let old = (10_000..14_000).filter(|&i| g.take(h(i)).is_some()).count();
        assert!(old < 40, "{old} of 4000 old inserts still remembered");
        let never = (100_000..110_000)
            .filter(|&i| g.take(h(i)).is_some())
            .count();
        assert!(never < 20, "{never} false positives in 10000");
    }

    #[test]
    fn an_expired_key_is_remembered_apart_and_leaves_the_split_alone() {
        let mut g = Ghost::new();
        g.insert(h(1), 1000, Left::Expired);
        g.insert(h(2), 1000, Left::Main);
        g.insert(h(3), 1000, Left::Small);
        assert_eq!(g.take(h(1)), Some(Left::Expired));
        assert_eq!(g.take(h(2)), Some(Left::Main));
        assert_eq!(g.take(h(3)), Some(Left::Small));
        g.returned(Left::Small, 100, 100_000);
        let split = g.split();
        assert!(split > SPLIT_MIN);
        g.returned(Left::Expired, 100, 100_000);
        assert_eq!(g.split(), split);
        // Re-inserting a key keeps one entry, marked as the last insert says.
        g.insert(h(4), 1000, Left::Expired);
        g.insert(h(4), 1000, Left::Small);
        assert_eq!(g.take(h(4)), Some(Left::Small));
        assert_eq!(g.take(h(4)), None);
    }

    #[test]
    fn returns_from_small_grow_the_split_and_from_main_shrink_it_faster() {
        let mut g = Ghost::new();
        assert_eq!(g.split(), SPLIT_MIN);
        // Items of 100 bytes in a shard of 100,000 bytes: each return is 1/1000 of it.
        let step = 100 * SPLIT_ONE / 100_000;
        for _ in 0..100 {
            g.returned(Left::Small, 100, 100_000);
        }
        assert_eq!(g.split(), SPLIT_MIN + 100 * step);
        for _ in 0..10_000 {
            g.returned(Left::Small, 100, 100_000);
        }
        assert_eq!(g.split(), SPLIT_MAX, "capped");
        g.returned(Left::Main, 100, 100_000);
        assert_eq!(g.split(), SPLIT_MAX - MAIN_RETURN_WEIGHT * step);
        for _ in 0..10_000 {
            g.returned(Left::Main, 100, 100_000);
        }
        assert_eq!(g.split(), SPLIT_MIN, "floored");
        g.returned(Left::Small, 100, 100_000);
        g.clear();
        assert_eq!(g.split(), SPLIT_MIN, "flush_all starts over");
    }
}
