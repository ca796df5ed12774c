//! Configuration and the geometry derived from it.
//!
//! Owns the numbers every shard must agree on (segment size, shard count, fair share).

/// Number of shards unless configured otherwise, where memory allows (`SHARD_MIN_MEMORY`). Each
/// is one mutex; 16 keeps contention low for the usual handful of worker threads while every
/// shard still holds a useful number of segments.
pub const DEFAULT_SHARDS: usize = 16;
/// With the shard count left to the store (`StoreConfig::shards` 0), a shard gets at least this
/// much of the limit: fewer shards below 16 x 16 MiB, one below 32 MiB. Each shard evicts on
/// its own, so a small cache cut into 16 pieces decides with a sixteenth of the evidence (a
/// few dozen large items per shard, segments of a few KiB) and its shards' fill levels drift
/// apart. Store-level replay (examples/replay.rs), miss ratio with 16 shards -> this rule:
/// values of 10 B..500 KB at 45 / 88 MiB 0.2767 / 0.2346 -> 0.2616 / 0.2263 (2 / 4 shards;
/// memcached through the server at 44 / 88 MiB: 0.2693 / 0.2471); Zipf at 7 / 25 MiB 0.3106
/// / 0.2257 -> 0.3116 / 0.2233 (1 shard), zipf-shift 0.3415 / 0.2837 -> 0.3432 / 0.2812;
/// orm-night at 23 / 34 MiB 0.0191 / 0.0148 -> 0.0186 / 0.0142; web12 at 0.5 / 1 / 2 MiB
/// 0.3767 / 0.2772 / 0.1867 -> 0.2835 / 0.2178 / 0.1621. The cost: at 64 MiB (memcached's and
/// mnemod's default `-m`) four worker threads share four locks; from 256 MiB on nothing changes.
pub const SHARD_MIN_MEMORY: usize = 16 << 20;
/// Largest number of shards (the shard index uses the top 8 bits of the key hash).
pub const MAX_SHARDS: usize = 256;
/// Regular segment size when memory allows; never more, because offsets have 20 bits.
pub const MAX_SEGMENT_SIZE: usize = 1 << 20;
/// Smallest regular segment: below this the per-segment bookkeeping stops being negligible.
pub const MIN_SEGMENT_SIZE: usize = 4 << 10;
/// A shard aims to hold at least this many regular segments, so eviction is fine-grained.
/// With the shard count left to the store, segments are sized as with `DEFAULT_SHARDS` shards
/// (limit / 128 then; limit / 256 now, `AUTO_SEGMENTS_PER_SHARD`) even where
/// `SHARD_MIN_MEMORY` chose fewer, so a small cache's shard holds more, smaller segments:
/// finer FIFO steps, less room left unwritten in the active segments, and more TTL groups
/// (`Geometry::ttl_groups`), so items of different TTLs share segments less and segments
/// expire whole sooner. Store-level replay (examples/replay.rs), miss ratio
/// a shard's share / 8 -> limit / 128 (with evict.rs's keepers in their own TTL group):
/// zipf-ttl at 7 / 25 MiB 0.3527 / 0.2759 -> 0.3415 / 0.2674; zipf-shift 0.3432 / 0.2812 ->
/// 0.3381 / 0.2797; Zipf 0.3116 / 0.2233 -> 0.3049 / 0.2209; orm-night at 23 / 34 MiB 0.0186 /
/// 0.0142 -> 0.0181 / 0.0140; mixed sizes at 45 / 88 MiB 0.2616 / 0.2263 -> 0.2635 / 0.2258;
/// web12 at 0.5 / 1 / 2 MiB 0.2835 / 0.2178 / 0.1621 -> 0.3148 / 0.2388 / 0.1667 (4..16 KiB
/// segments make its 1..16 KB values large items, `Geometry::large_min`; sizes the server
/// bench cannot reach at equal memory: memcached holds ~24 MiB there).
const SEGMENTS_PER_SHARD: usize = 8;
/// With the shard count left to the store, segments are limit / (16 x this): 256 where the
/// figures above say 128. Smaller still, active segments leave less room unwritten and TTL
/// groups are finer. Store-level replay, miss ratio limit / 128 -> limit / 256: zipf-ttl at
/// 7 / 25 MiB 0.3378 / 0.2638 -> 0.3376 / 0.2623 (unwritten 625 -> 444 KB, expired items
/// held 327 -> 172 KB at the end); Zipf 0.3049 / 0.2209 -> 0.3056 / 0.2208; zipf-shift 0.3381
/// / 0.2797 -> 0.3386 / 0.2798; orm-night at 23 / 34 MiB 0.0181 / 0.0140 -> 0.0183 / 0.0140;
/// mixed sizes at 45 / 88 MiB 0.2635 / 0.2258 -> 0.2638 / 0.2252. (limit / 512: zipf-ttl at
/// 25 MiB 0.2621, 7 MiB 0.3391.)
const AUTO_SEGMENTS_PER_SHARD: usize = 16;
/// ... but not below this (nor above a shard's share / 8, as with an explicit count): under
/// 16 MiB, segments of a few KiB made web12's 1..16 KB values large items (`large_min`), each
/// in a buffer of its own. Store-level replay, web12 at 0.5 / 1 / 2 MiB (with ghost.rs's
/// `LIVE_EPOCHS` 12): 0.3181 / 0.2400 / 0.1689 -> 0.2847 / 0.2088 / 0.1515 (0.2835 / 0.2178 /
/// 0.1621 with a share / 8 everywhere, before limit / 128); a floor of 32 KiB 0.2942 / 0.2343
/// / 0.1673. The cost, at 7 MiB (16 -> 64 KiB): zipf-ttl 0.3316 -> 0.3355, Zipf 0.3054 ->
/// 0.3049, zipf-shift 0.3350 -> 0.3346.
const AUTO_SEGMENT_FLOOR: usize = 64 << 10;
/// Index buckets a shard starts with (64 bytes each).
const INITIAL_BUCKETS: usize = 64;
/// Items of more than this many bytes always get a buffer of their own (see `large_min`).
pub const LARGE_ITEM_MIN: usize = 32 << 10;

/// Which items eviction keeps (evict.rs has the policies).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Eviction {
    /// S3-FIFO adapted to segments: new items enter a small FIFO; read there, they move on to
    /// the main FIFO, else they leave and their key enters a ghost; a key the ghost remembers
    /// goes straight to main; main copies forward what was read since it was written.
    #[default]
    S3Fifo,
    /// One FIFO of segments; the oldest is evicted and its items read since they were written
    /// are copied forward (FIFO-reinsertion, at segment granularity). The policy before S3-FIFO.
    Fifo,
}

impl Eviction {
    /// The name the server's `--eviction` flag and `stats settings` use.
    pub fn name(self) -> &'static str {
        match self {
            Eviction::S3Fifo => "s3fifo",
            Eviction::Fifo => "fifo",
        }
    }
}

impl core::str::FromStr for Eviction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "s3fifo" => Ok(Eviction::S3Fifo),
            "fifo" => Ok(Eviction::Fifo),
            _ => Err(format!("unknown eviction policy {s:?} (s3fifo, fifo)")),
        }
    }
}

/// Store configuration; the server fills it from its flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// Bytes: everything the store owns, index and metadata included (memcached `-m`).
    pub mem_limit: usize,
    /// Largest key + value accepted (memcached `-I`; the server applies memcached's exact check).
    pub item_size_max: usize,
    /// false = memcached `-M`: return OutOfMemory instead of evicting.
    pub evict: bool,
    /// false = memcached `-C`: every CAS reported is 0.
    pub use_cas: bool,
    /// Power of two (rounded up if not), 1..=256; 0 (the default): `DEFAULT_SHARDS`, fewer
    /// where the limit gives a shard less than `SHARD_MIN_MEMORY`.
    pub shards: usize,
    /// Regular segments on 2 MiB huge pages (buf.rs says why); memcached's `-L`, but on by
    /// default: without it a large cache read at random misses the TLB on every item.
    pub huge_pages: bool,
    /// The eviction policy.
    pub eviction: Eviction,
    /// The flash tier (memcached's `-o ext_path=FILE:SIZE` and `ext_*`): None = RAM only.
    pub flash: Option<crate::FlashConfig>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            mem_limit: 64 << 20,
            item_size_max: 1 << 20,
            evict: true,
            use_cas: true,
            shards: 0,
            huge_pages: true,
            eviction: Eviction::default(),
            flash: None,
        }
    }
}

/// Derived sizes, fixed for the store's lifetime.
#[derive(Clone, Debug)]
pub(crate) struct Geometry {
    pub limit: usize,
    pub item_size_max: usize,
    pub evict: bool,
    pub use_cas: bool,
    pub huge_pages: bool,
    pub eviction: Eviction,
    pub shards: usize,
    pub shard_bits: u32,
    pub seg_size: usize,
    /// Items whose encoded size exceeds this get a buffer of their own instead of a segment
    /// slice: it bounds the space wasted at segment ends to a quarter segment, and past
    /// `LARGE_ITEM_MIN` it makes a large item cheap to replace and to evict. In a segment, an
    /// overwritten 100 KB value leaves a hole that compaction or eviction later pays for by
    /// copying the segment's other values (measured with 100 KB values: eviction's
    /// copy-forward was 12% of the server's time under memcaslap, compaction 2% under
    /// `mnemo bench`), where memcached just frees the chunk; a buffer of its own is freed
    /// whole and recycled (budget.rs), and a second chance moves it in the FIFO without a copy.
    pub large_min: usize,
    /// limit / shards: a shard below this takes memory from richer shards before evicting its own.
    pub fair_share: usize,
    pub initial_buckets: usize,
    /// How many expiry groups (of the 128 fine TTL buckets) a shard keeps open segments for.
    /// Each group holds an active segment, so with few segments per shard the groups must be
    /// few, or active segments alone would use up memory and force evictions of live items.
    pub ttl_groups: usize,
}

impl Geometry {
    pub fn new(cfg: &StoreConfig) -> Geometry {
        let shards = match cfg.shards {
            0 => {
                // Largest power of two <= limit / SHARD_MIN_MEMORY, within 1..=DEFAULT_SHARDS.
                let fit = (cfg.mem_limit / SHARD_MIN_MEMORY).max(1);
                (1usize << fit.ilog2()).min(DEFAULT_SHARDS)
            }
            n => n.clamp(1, MAX_SHARDS).next_power_of_two(),
        };
        let fair_share = cfg.mem_limit / shards;
        // Segments as 16 shards would have them where the store chose fewer, within a floor
        // (`AUTO_SEGMENTS_PER_SHARD`, `AUTO_SEGMENT_FLOOR`); an explicit count keeps 8 per shard.
        let want = match cfg.shards {
            0 => (cfg.mem_limit / (DEFAULT_SHARDS * AUTO_SEGMENTS_PER_SHARD))
                .max(AUTO_SEGMENT_FLOOR.min(fair_share / SEGMENTS_PER_SHARD)),
            _ => fair_share / SEGMENTS_PER_SHARD,
        };
        // Largest power of two <= want, within bounds.
        let seg = if want < MIN_SEGMENT_SIZE {
            MIN_SEGMENT_SIZE
        } else {
            (1usize << (usize::BITS - 1 - want.leading_zeros())).min(MAX_SEGMENT_SIZE)
        };
        Geometry {
            limit: cfg.mem_limit,
            item_size_max: cfg.item_size_max,
            evict: cfg.evict,
            use_cas: cfg.use_cas,
            huge_pages: cfg.huge_pages,
            eviction: cfg.eviction,
            shards,
            shard_bits: shards.trailing_zeros(),
            seg_size: seg,
            large_min: (seg / 4).min(LARGE_ITEM_MIN),
            fair_share,
            initial_buckets: INITIAL_BUCKETS,
            ttl_groups: ((fair_share / seg) / 4).clamp(1, 128),
        }
    }

    /// Map a fine TTL bucket to the group whose segment receives it. "Never expires" keeps
    /// a group of its own; mixing TTLs in a segment only delays its bulk reclaim (each item's
    /// own expiry is still checked on read, and the segment's max expiry bounds the reclaim).
    #[inline]
    pub fn ttl_group(&self, bucket: u8) -> u8 {
        if bucket == 0 || self.ttl_groups >= 128 {
            return bucket;
        }
        let fine = usize::from(bucket.max(2)) - 2;
        (2 + fine * self.ttl_groups / 128) as u8
    }

    /// Shard of a key hash: its top bits (the index uses the low bits and bits 40..55).
    #[inline]
    pub fn shard_of(&self, h: u64) -> usize {
        if self.shard_bits == 0 {
            0
        } else {
            (h >> (64 - self.shard_bits)) as usize
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_scales_segments_with_memory() {
        let g = Geometry::new(&StoreConfig {
            shards: DEFAULT_SHARDS,
            ..Default::default()
        });
        assert_eq!(g.shards, 16);
        assert_eq!(g.seg_size, 512 << 10);
        let g = Geometry::new(&StoreConfig {
            mem_limit: 1 << 30,
            ..Default::default()
        });
        assert_eq!(g.seg_size, MAX_SEGMENT_SIZE);
        let g = Geometry::new(&StoreConfig {
            mem_limit: 1 << 20,
            shards: DEFAULT_SHARDS,
            ..Default::default()
        });
        assert_eq!(g.seg_size, 8 << 10);
        let g = Geometry::new(&StoreConfig {
            mem_limit: 1000,
            shards: 3,
            ..Default::default()
        });
        assert_eq!(
            (g.seg_size, g.shards, g.shard_bits),
            (MIN_SEGMENT_SIZE, 4, 2)
        );
        assert!(g.shard_of(u64::MAX) == 3 && g.shard_of(0) == 0);
    }

    #[test]
    fn default_shard_count_leaves_each_shard_its_minimum() {
        let shards = |mib: usize| {
            Geometry::new(&StoreConfig {
                mem_limit: mib << 20,
                ..Default::default()
            })
            .shards
        };
        assert_eq!(
            (shards(1), shards(31), shards(32), shards(45), shards(64)),
            (1, 1, 2, 2, 4)
        );
        assert_eq!((shards(255), shards(256), shards(4096)), (8, 16, 16));
        // Segments of limit / 256, whatever the count ...
        let g = Geometry::new(&StoreConfig {
            mem_limit: 64 << 20,
            ..Default::default()
        });
        assert_eq!((g.fair_share, g.seg_size), (16 << 20, 256 << 10));
        let g = Geometry::new(&StoreConfig {
            mem_limit: 25 << 20,
            ..Default::default()
        });
        assert_eq!((g.shards, g.seg_size, g.ttl_groups), (1, 64 << 10, 100));
        // ... but at least 64 KiB under 16 MiB, and at most a shard's share / 8.
        let seg = |limit: usize| {
            Geometry::new(&StoreConfig {
                mem_limit: limit,
                ..Default::default()
            })
            .seg_size
        };
        assert_eq!(
            (seg(7 << 20), seg(1 << 20), seg(256 << 10)),
            (64 << 10, 64 << 10, 32 << 10)
        );
        assert_eq!((seg(32 << 20), seg(4 << 30)), (128 << 10, MAX_SEGMENT_SIZE));
        // An explicit count is kept, however small the limit.
        let g = Geometry::new(&StoreConfig {
            mem_limit: 1 << 20,
            shards: 8,
            ..Default::default()
        });
        assert_eq!(g.shards, 8);
        // ... and its segments are a shard's share / 8.
        let g = Geometry::new(&StoreConfig {
            mem_limit: 25 << 20,
            shards: 1,
            ..Default::default()
        });
        assert_eq!(g.seg_size, MAX_SEGMENT_SIZE);
    }
}
