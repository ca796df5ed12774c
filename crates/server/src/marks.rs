//! Meta-protocol item states that the store does not keep: "stale" (after `md I` or an
//! `ms I` that lost its CAS race) and "win token sent" (someone was told W: recache, vivify
//! or stale). They are rare, so they live in a small side table keyed by item key and tied
//! to the item's CAS: a mark applies only while the item it was set on is still the current
//! version, so a later write clears it without any bookkeeping.
//!
//! The table is bounded: past `MAX_MARKS` entries it is cleared (clients may then be offered
//! a win token again, which is what happens in memcached when such an item is evicted).

use std::collections::HashMap;

use parking_lot::Mutex;

const SHARDS: usize = 16;
const MAX_MARKS: usize = 65_536 / SHARDS;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mark {
    pub stale: bool,
    pub win_sent: bool,
}

/// One shard: key -> (the CAS of the item the mark belongs to, the mark).
type MarkShard = Mutex<HashMap<Vec<u8>, (u64, Mark)>>;

#[derive(Default)]
pub struct Marks {
    shards: [MarkShard; SHARDS],
}

fn shard_of(key: &[u8]) -> usize {
    // FNV-1a: cheap, and this table sees only the rare meta calls that use marks.
    let mut h: u32 = 0x811c_9dc5;
    for &b in key {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h as usize % SHARDS
}

impl Marks {
    /// The mark of the item version with this CAS.
    pub fn get(&self, key: &[u8], cas: u64) -> Mark {
        match self.shards[shard_of(key)].lock().get(key) {
            Some(&(c, m)) if c == cas => m,
            _ => Mark::default(),
        }
    }

    pub fn set(&self, key: &[u8], cas: u64, mark: Mark) {
        let mut map = self.shards[shard_of(key)].lock();
        if mark == Mark::default() {
            map.remove(key);
            return;
        }
        if map.len() >= MAX_MARKS && !map.contains_key(key) {
            map.clear();
        }
        map.insert(key.to_vec(), (cas, mark));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_follows_its_version_only() {
        let m = Marks::default();
        m.set(
            b"k",
            7,
            Mark {
                stale: true,
                win_sent: false,
            },
        );
        assert!(m.get(b"k", 7).stale);
        assert_eq!(m.get(b"k", 8), Mark::default());
        m.set(b"k", 8, Mark::default());
        assert_eq!(m.get(b"k", 7), Mark::default());
    }

    #[test]
    fn bounded() {
        let m = Marks::default();
        for i in 0..200_000u32 {
            m.set(
                &i.to_le_bytes(),
                1,
                Mark {
                    stale: false,
                    win_sent: true,
                },
            );
        }
        let total: usize = m.shards.iter().map(|s| s.lock().len()).sum();
        assert!(total <= MAX_MARKS * SHARDS);
    }
}
