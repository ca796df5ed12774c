//! The memory budget: one global byte count against `mem_limit`, and one spare segment buffer.
//!
//! Owns what counts as used memory. Segment buffers are reserved with `try_add` before they are
//! allocated; index and metadata growth is charged with `force_add` after the fact (it is small
//! and must not fail), and the next reservation evicts to make up for it.
//!
//! The spare: the last retired regular segment buffer is kept for the next segment any shard
//! opens, instead of being unmapped. Why: fresh memory costs a page fault and the zeroing of a
//! page per 4 KiB on first write, and here (a VM) that zeroing cost ten times a memcpy of the
//! same bytes: with 100 KB values, page faults were 31% of the worker's time while the copy of
//! every value into its segment was 2.5%. With the spare, eviction's copy-forward segment and
//! compaction (shard.rs) reuse the buffer their previous victim left.
//! ```text
//!   victim V ──live items──> new segment on buffer S (the spare, left by the previous victim)
//!   V retired ──> V's buffer becomes the spare
//! ```
//! The spare is not charged to `used`: the budget counts memory that holds the cache (segments
//! in use, index, metadata), and a buffer enters the spare only as it leaves that count, so the
//! process holds at most one regular segment (≤ 1 MiB) beyond `mem_limit` for it.

use core::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::buf::SegBuf;

pub(crate) struct Budget {
    /// Changeable at run time (`cache_memlimit`); shards trim down to it on their next use.
    limit: AtomicUsize,
    used: AtomicUsize,
    /// Length of a regular segment: only those are kept as the spare.
    regular: usize,
    /// Regular buffers from huge-page chunks (`StoreConfig::huge_pages`).
    huge: bool,
    /// Not charged to `used`. A leaf lock: nothing else is locked while it is held.
    spare: Mutex<Option<SegBuf>>,
}

impl Budget {
    pub fn new(limit: usize, regular: usize, huge: bool) -> Budget {
        Budget {
            limit: AtomicUsize::new(limit),
            used: AtomicUsize::new(0),
            regular,
            huge,
            spare: Mutex::new(None),
        }
    }
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }
    pub fn try_add(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(n).filter(|&t| t <= self.limit())
            })
            .is_ok()
    }
    pub fn force_add(&self, n: usize) {
        self.used.fetch_add(n, Ordering::AcqRel);
    }
    pub fn sub(&self, n: usize) {
        let prev = self.used.fetch_sub(n, Ordering::AcqRel);
        debug_assert!(prev >= n);
    }
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// A regular segment buffer, charged: the spare if there is one, else fresh memory; `None`
    /// if the limit does not allow it (`force`: charge it anyway, for eviction's copy-forward
    /// segment, whose victim is uncharged right after).
    pub fn regular_buffer(&self, force: bool) -> Option<SegBuf> {
        if force {
            self.force_add(self.regular);
        } else if !self.try_add(self.regular) {
            return None;
        }
        if let Some(b) = self.spare.lock().take() {
            return Some(b);
        }
        Some(SegBuf::regular(self.regular, self.huge))
    }

    /// A retired buffer leaves the count; a regular one is kept as the spare if the slot is
    /// free, any other is unmapped.
    pub fn release(&self, buf: SegBuf) {
        self.sub(buf.len());
        if buf.len() == self.regular {
            let mut spare = self.spare.lock();
            if spare.is_none() {
                *spare = Some(buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_refuses_past_limit() {
        let b = Budget::new(100, 10, false);
        assert!(b.try_add(60));
        assert!(!b.try_add(41));
        assert!(b.try_add(40));
        b.sub(50);
        b.force_add(70);
        assert_eq!(b.used(), 120);
        assert!(!b.try_add(1));
    }

    #[test]
    fn spare_is_reused_and_never_charged() {
        let b = Budget::new(100, 40, false);
        let x = b.regular_buffer(false).unwrap();
        let mut y = b.regular_buffer(false).unwrap();
        assert_eq!(b.used(), 80);
        assert!(
            b.regular_buffer(false).is_none(),
            "a third would pass the limit"
        );
        y[0] = 7;
        b.release(y);
        assert_eq!(b.used(), 40, "a released buffer leaves the count at once");
        b.release(x);
        assert_eq!(b.used(), 0, "a second one is unmapped");
        let z = b.regular_buffer(false).unwrap();
        assert_eq!(
            (z.len(), z[0], b.used()),
            (40, 7, 40),
            "the spare comes back, charged"
        );
        let w = b.regular_buffer(true).unwrap();
        assert_eq!(
            (w[0], b.used()),
            (0, 80),
            "no spare left: fresh zeroed memory"
        );
        b.force_add(7);
        b.release(SegBuf::zeroed(7));
        assert_eq!(b.used(), 80, "odd sizes leave the count too");
    }
}
