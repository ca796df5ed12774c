//! The RAM half of flashed items: one 16-byte entry per item, per shard, found through the
//! item's index slot (index.rs `slot::flash`).
//!
//! ```text
//!  word 0: [ key hash bits 0..40 | page (24) ]
//!  word 1: [ gen (16) | offset / 8 (24) | record length (24) ]     all ones: free
//!  free entries form a list through word 0
//! ```
//!
//! The hash bits are what linear hashing needs to split a bucket (the tag and the shard give
//! the rest of the hash), and with the tag they are the key check made before a read: a slot
//! whose 55 hash bits match is the key's own (a 64-bit hash collision aside, which the read
//! catches: the record carries the key). Nothing else is in RAM: flags, expiry, CAS, key and
//! value are in the record.

use super::Loc;

const FREE: u64 = u64::MAX;
const NONE: u32 = u32::MAX;
const HASH_BITS: u64 = (1 << 40) - 1;
const F24: u64 = (1 << 24) - 1;
/// Entries a shard can hold (the slot encoding's limit: 16 segment ids × 2^20 offsets).
pub(crate) const MAX_ENTRIES: u32 = 1 << 24;

pub(crate) struct Entries {
    v: Vec<[u64; 2]>,
    free: u32,
    live: usize,
}

/// The key-hash bits an entry keeps.
#[inline]
pub(crate) fn hash_check(h: u64) -> u64 {
    h & HASH_BITS
}

impl Entries {
    pub fn new() -> Entries {
        Entries {
            v: Vec::new(),
            free: NONE,
            live: 0,
        }
    }

    pub fn bytes(&self) -> usize {
        self.v.capacity() * 16
    }

    pub fn live(&self) -> usize {
        self.live
    }

    /// A new entry; None when the shard's entry space is exhausted.
    pub fn alloc(&mut self, h: u64, loc: Loc) -> Option<u32> {
        let i = if self.free != NONE {
            let i = self.free;
            self.free = self.v[i as usize][0] as u32;
            i
        } else {
            if self.v.len() as u32 >= MAX_ENTRIES {
                return None;
            }
            if self.v.len() == self.v.capacity() {
                // Modest steps: the capacity is what the budget is charged for.
                self.v.reserve_exact((self.v.len() / 4).max(64));
            }
            self.v.push([0, 0]);
            (self.v.len() - 1) as u32
        };
        debug_assert!(
            loc.off.is_multiple_of(8) && u64::from(loc.off / 8) <= F24 && u64::from(loc.len) <= F24
        );
        self.v[i as usize] = [
            hash_check(h) | (u64::from(loc.page) & F24) << 40,
            u64::from(loc.gen) << 48 | u64::from(loc.off / 8) << 24 | u64::from(loc.len),
        ];
        self.live += 1;
        Some(i)
    }

    /// The entry's hash bits and location (None if free).
    #[inline]
    pub fn get(&self, i: u32) -> Option<(u64, Loc)> {
        let [a, b] = *self.v.get(i as usize)?;
        if b == FREE {
            return None;
        }
        let loc = Loc {
            page: (a >> 40) as u32,
            gen: (b >> 48) as u16,
            off: ((b >> 24) & F24) as u32 * 8,
            len: (b & F24) as u32,
        };
        Some((a & HASH_BITS, loc))
    }

    /// Points entry `i` at a new location (compaction copied its record), keeping its hash.
    pub fn relocate(&mut self, i: u32, loc: Loc) {
        let (check, _) = self.get(i).expect("a live entry");
        self.v[i as usize] = [
            check | (u64::from(loc.page) & F24) << 40,
            u64::from(loc.gen) << 48 | u64::from(loc.off / 8) << 24 | u64::from(loc.len),
        ];
    }

    pub fn free(&mut self, i: u32) {
        debug_assert!(self.get(i).is_some(), "double free of flash entry {i}");
        self.v[i as usize] = [u64::from(self.free), FREE];
        self.free = i;
        self.live -= 1;
    }

    /// Every entry in use (flush_all).
    pub fn each(&self, mut f: impl FnMut(u32, Loc)) {
        for i in 0..self.v.len() as u32 {
            if let Some((_, loc)) = self.get(i) {
                f(i, loc);
            }
        }
    }

    /// Forgets every entry.
    pub fn clear(&mut self) {
        self.v.clear();
        self.free = NONE;
        self.live = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_reuse() {
        let mut e = Entries::new();
        let loc = Loc {
            page: (1 << 24) - 1,
            gen: 0xbeef,
            off: ((1 << 24) - 1) * 8,
            len: (1 << 24) - 1,
        };
        let a = e.alloc(u64::MAX, loc).unwrap();
        let b = e
            .alloc(
                0x1234_5678_9abc,
                Loc {
                    page: 0,
                    gen: 0,
                    off: 8,
                    len: 48,
                },
            )
            .unwrap();
        assert_eq!(e.get(a), Some((HASH_BITS, loc)));
        assert_eq!(e.get(b).unwrap().0, 0x1234_5678_9abc & HASH_BITS);
        assert_eq!(e.live(), 2);
        e.free(a);
        assert_eq!(e.get(a), None);
        assert_eq!(e.alloc(1, loc), Some(a), "freed entries are reused first");
        assert_eq!(e.live(), 2);
        let mut n = 0;
        e.each(|_, _| n += 1);
        assert_eq!(n, 2);
        assert!(e.bytes() >= 32);
    }
}
