//! Counters: the per-shard ones kept under the shard lock, and the summed public view.

/// Per-shard counters, updated under the shard lock (no atomics on the hot path).
#[derive(Clone, Debug, Default)]
pub(crate) struct Counters {
    pub curr_items: u64,
    /// Bytes of live items, headers included.
    pub bytes: u64,
    pub total_items: u64,
    pub evictions: u64,
    pub reclaimed: u64,
    pub expired_unfetched: u64,
    pub evicted_unfetched: u64,
    /// Items copied forward by eviction because they had been read.
    pub relocated: u64,
    /// Live items dropped by flush_all.
    pub flushed: u64,
    /// Segments compacted (live items moved) instead of taking new memory.
    pub compactions: u64,
}

impl Counters {
    /// `stats reset` keeps the gauges (curr_items, bytes) and zeroes the rest.
    pub fn reset(&mut self) {
        *self = Counters {
            curr_items: self.curr_items,
            bytes: self.bytes,
            ..Default::default()
        };
    }
}

/// What `Store::stats` reports, summed over shards.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Live items (memcached `curr_items`).
    pub curr_items: u64,
    /// Successful stores since start or reset.
    pub total_items: u64,
    /// Bytes of live items, their headers included.
    pub bytes: u64,
    /// Live items dropped to make room.
    pub evictions: u64,
    /// Items whose memory was taken back because they had expired.
    pub reclaimed: u64,
    pub expired_unfetched: u64,
    pub evicted_unfetched: u64,
    /// Live items copied forward instead of evicted because they had been read.
    pub evictions_relocated: u64,
    /// Live items invalidated by flush_all.
    pub flushed: u64,
    /// Segments whose dead space was reclaimed by moving their live items (counted in
    /// `evictions_relocated` too) before more memory was taken.
    pub compactions: u64,
    /// mem_limit.
    pub limit_maxbytes: u64,
    /// Everything charged against mem_limit: buffers, index, metadata.
    pub mem_used: u64,
    /// limit_maxbytes / segment_size.
    pub segments_total: u64,
    /// Whole segments that still fit in the unused part of the budget.
    pub segments_free: u64,
    /// Regular segments with a buffer.
    pub segments_used: u64,
    pub segment_size: u64,
    /// Large items (more than 32 KiB, or a quarter segment), each in a buffer of its own.
    pub large_items: u64,
    pub large_bytes: u64,
    /// Bytes of segment buffers written but no longer live (overwritten, deleted), waiting for
    /// their segment to be evicted or emptied.
    pub dead_bytes: u64,
    /// Bytes of segment buffers not yet written.
    pub unwritten_bytes: u64,
    /// Memory of the hash index (capacity).
    pub index_bytes: u64,
    /// Slots in primary and in-use overflow buckets.
    pub index_slots: u64,
    /// Occupied slots, including ones still pointing at expired/flushed segments.
    pub index_entries: u64,
    pub index_overflow_buckets: u64,
    /// Segment metadata.
    pub meta_bytes: u64,
    pub shards: u64,
    /// Items whose value is on flash (counted in `curr_items` too), and the RAM of their
    /// entries (flash/entries.rs; their index slots are in `index_bytes`).
    pub flash_items: u64,
    pub flash_entry_bytes: u64,
    /// The flash tier's counters (None without `ext_path`).
    pub flash: Option<crate::FlashStats>,
}
