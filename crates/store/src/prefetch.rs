//! Prefetching for multi-key reads: a lookup's memory misses (index bucket, overflow bucket,
//! item) pulled toward the cache a few keys ahead of the lookup itself, so a batch overlaps
//! them instead of taking them one after another (mnemod's `fget`).

use crate::index::slot;
use crate::segment::SegState;
use crate::shard::Shard;

/// How much of each candidate item a prefetch pulls in, for a read that goes on to the value:
/// seed 001's 720-byte values whole (fget).
pub const PREFETCH_VALUE: usize = 1024;

/// ... for a lookup by a get or set of small values (mnemod's read-ahead): the header, the key
/// and what follows them. Two lines, as an item may straddle a line boundary. Pulling
/// PREFETCH_VALUE's 16 lines for each key there made the prefetch itself 2% of the worker's
/// time on bench/throughput.sh's workload a (32-byte values): lines never read, which took
/// the load queue's slots from the lines that were.
pub const PREFETCH_HEAD: usize = 128;

/// The stages of a lookup's prefetch, each run some keys after the one before, when what it
/// reads has arrived:
/// ```text
///   Bucket  pull the key's home bucket in the index                 (far ahead)
///   Home    read it; pull its candidate items and its overflow bucket
///   Chain   read the overflow bucket; pull its candidate items and the next bucket (near)
/// ```
/// Why the chain: at the index's load (12 items per 8-slot bucket on average) a key sits in
/// an overflow bucket 4 times in 10 (index.rs's test: 57% home, 18% first overflow, 25%
/// deeper since overflow buckets hold 4 slots; 31% and 11% with 8), and without this stage
/// that lookup took two misses in a row, the bucket's and then the item's. Measured on seed
/// 001's fget at 1M users, with 8-slot overflow buckets: `Index::find` went from 26% to 12%
/// of the worker's time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefetch {
    Bucket,
    Home,
    Chain,
}

impl Shard {
    /// Runs `stage` of the lookup of hash `h`, pulling in up to `bytes` of each candidate item
    /// (PREFETCH_VALUE, PREFETCH_HEAD).
    pub fn prefetch(&self, h: u64, stage: Prefetch, bytes: usize) {
        if stage == Prefetch::Bucket {
            return self.index.prefetch(h);
        }
        let next = self.index.candidates(h, stage == Prefetch::Chain, |s| {
            let Some(m) = self.segs.metas.get(slot::seg(s) as usize) else {
                return; // a flash entry: nothing in RAM to pull
            };
            if m.state == SegState::Live {
                // The header and key, and the value's first lines: small values are read
                // whole right after (a get's copy), and the CPU's own prefetcher takes over
                // along a large one.
                if let Some(d) = m.data.get(slot::off(s) as usize..) {
                    for line in (0..d.len().min(bytes)).step_by(64) {
                        crate::buf::prefetch(d[line..].as_ptr());
                    }
                }
            }
        });
        if let Some(b) = next {
            crate::buf::prefetch(b);
        }
    }
}
