//! The ghost: fingerprints of keys that S3-FIFO's small queue recently let go without a read.
//!
//! Owns a compact table of 32-bit entries and nothing else. A key whose set finds its
//! fingerprint here was evicted too early once (it came back before the ghost forgot it), so
//! the new item goes straight to the main FIFO (evict.rs).
//!
//! ```text
//! entry (u32), 0 = empty
//!  31                                  4 3      0
//! +-------------------------------------+--------+
//! |   fingerprint: key hash bits 32..60 | epoch  |
//! +-------------------------------------+--------+
//! bucket = 8 entries (32 bytes), chosen by the hash's low 32 bits (multiply-shift)
//! ```
//!
//! Forgetting in FIFO order without a queue: inserts are counted in epochs of a sixteenth of
//! the table's entries (the epoch is 4 bits). An entry older than `LIVE_EPOCHS` is forgotten
//! (free for an insert, never matched), so the ghost remembers about the last half-table of
//! inserts, oldest forgotten first; at each new epoch one sweep clears entries about to become
//! ambiguous (the 4-bit age would wrap). A full bucket gives its oldest entry to an insert.
//! Sized from the shard's item count: one entry (4 bytes) per item, so it remembers about half
//! as many keys as the shard holds (S3-FIFO's ghost is as long as its main queue; half of that
//! measured as good on the traces and costs half the memory), grown (emptied) when the shard
//! holds a third more, and allocated only on the first insert: a cache that never evicts pays
//! nothing for it. The table's bytes count against `-m` (shard.rs `sync_overhead`).

const BUCKET: usize = 8;
const EPOCH_BITS: u32 = 4;
const EPOCH_MASK: u32 = (1 << EPOCH_BITS) - 1;
/// Entries at most this many epochs old are remembered: 8 of 16 epochs of a table's
/// sixteenth = half a table of inserts, the other half of the entries being free or stale.
const LIVE_EPOCHS: u32 = 8;
/// Smallest table (entries).
const MIN_ENTRIES: usize = 64;


pub(crate) struct Ghost {
    table: Vec<u32>,
    epoch: u32,
    /// Inserts in the current epoch.
    inserts: usize,
}

#[inline]
fn fingerprint(h: u64) -> u32 {
    // Bits 32..60: apart from the bucket's (the low 32); never 0.
    ((((h >> 32) as u32) & 0x0fff_ffff) << EPOCH_BITS).max(1 << EPOCH_BITS)
}

impl Ghost {
    pub fn new() -> Ghost {
        Ghost { table: Vec::new(), epoch: 0, inserts: 0 }
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

    /// Remembers key hash `h`; `items` (the shard's item count) sizes the table.
    pub fn insert(&mut self, h: u64, items: usize) {
        let want = items.max(MIN_ENTRIES).next_multiple_of(BUCKET);
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
            if e == 0 || e & !EPOCH_MASK == fp {
                victim = i;
                break;
            }
            let age = self.age(e);
            if age >= oldest {
                (victim, oldest) = (i, age);
            }
        }
        self.table[victim] = fp | self.epoch;
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

    /// Whether `h` was remembered; it is forgotten either way (a key comes back from the ghost
    /// once per eviction).
    pub fn take(&mut self, h: u64) -> bool {
        if self.table.is_empty() {
            return false;
        }
        let b = self.bucket(h);
        let fp = fingerprint(h);
        for i in b..b + BUCKET {
            let e = self.table[i];
            if e != 0 && e & !EPOCH_MASK == fp {
                self.table[i] = 0;
                return self.age(e) < LIVE_EPOCHS;
            }
        }
        false
    }

    /// Forgets everything (flush_all: no key may come back as if it had been evicted).
    pub fn clear(&mut self) {
        self.table.iter_mut().for_each(|e| *e = 0);
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
        assert!(!g.take(h(1)));
        assert_eq!(g.bytes(), 0);
        g.insert(h(1), 1000);
        assert_eq!(g.bytes(), 1000 * 4);
        assert!(g.take(h(1)));
        assert!(!g.take(h(1)), "taken once");
    }

    #[test]
    fn remembers_recent_inserts_and_forgets_old_ones() {
        let mut g = Ghost::new();
        let items = 8192; // 8192 entries: remembers about 4096 keys
        for i in 0..4096 {
            g.insert(h(i), items);
        }
        // 4096 inserts are 8 epochs of 512: all but the first epoch's are remembered.
        let recent = (512..4096).filter(|&i| g.take(h(i))).count();
        assert!(recent > 3500, "{recent} of the last 3584 inserts remembered");
        let first = (0..512).filter(|&i| g.take(h(i))).count();
        assert!(first < 10, "{first} of the oldest epoch remembered");
        for i in 10_000..30_000 {
            g.insert(h(i), items);
        }
        let old = (10_000..14_000).filter(|&i| g.take(h(i))).count();
        assert!(old < 40, "{old} of 4000 old inserts still remembered");
        let never = (100_000..110_000).filter(|&i| g.take(h(i))).count();
        assert!(never < 20, "{never} false positives in 10000");
    }
}
