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
//!
//! Large items (their own buffer each, shard.rs) are recycled the same way, through a pool
//! instead of one slot: an overwritten or evicted 100 KB item leaves a buffer that the next
//! 100 KB item takes, so a churning cache of large values faults no fresh pages. A pooled
//! buffer serves an item at most a quarter smaller than itself (what is charged is the
//! buffer's length, so that bounds the waste), and the pool holds at most `POOL_SHARE`-th of
//! the limit (≤ `POOL_MAX`), dropping its oldest buffers first; like the spare, uncharged.
//! A buffer whose pages were lent to the kernel (a zero-copy send, buf.rs) gets fresh pages
//! on its way back, in `release`, the one door every retired buffer goes through.

use core::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::buf::SegBuf;

/// The large-buffer pool holds at most limit / POOL_SHARE bytes ...
const POOL_SHARE: usize = 64;
/// ... and never more than this, in at most this many buffers (each take scans them).
const POOL_MAX: usize = 16 << 20;
const POOL_ENTRIES: usize = 128;
/// Large buffers are whole pages: what the OS hands out anyway, and it lets a buffer serve
/// items of slightly different sizes.
pub(crate) const PAGE: usize = 4096;

/// A large item's buffer length for `size` bytes.
pub(crate) fn large_len(size: usize) -> usize {
    size.div_ceil(PAGE) * PAGE
}

#[derive(Default)]
struct Pool {
    /// Oldest first.
    bufs: Vec<SegBuf>,
    bytes: usize,
}

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
    /// Retired large-item buffers, uncharged (module doc). A leaf lock.
    pool: Mutex<Pool>,
}

impl Budget {
    pub fn new(limit: usize, regular: usize, huge: bool) -> Budget {
        Budget {
            limit: AtomicUsize::new(limit),
            used: AtomicUsize::new(0),
            regular,
            huge,
            spare: Mutex::new(None),
            pool: Mutex::new(Pool::default()),
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
    /// free, a large one goes to the pool.
    pub fn release(&self, mut buf: SegBuf) {
        self.sub(buf.len());
        if buf.len() == self.regular {
            // A large buffer may be this long too: its pages may be lent (buf.rs), as in give_large.
            if !buf.reclaim() {
                return;
            }
            let mut spare = self.spare.lock();
            if spare.is_none() {
                *spare = Some(buf);
            }
            return;
        }
        self.give_large(buf);
    }

    /// An uncharged buffer for a large item of `size` bytes (`size <= len`): the pool's
    /// smallest that fits without wasting more than a quarter of itself, else fresh memory
    /// of `large_len(size)`. The caller charges `len()` or gives it back.
    pub fn take_large(&self, size: usize) -> SegBuf {
        let want = large_len(size);
        let mut pool = self.pool.lock();
        let best = pool
            .bufs
            .iter()
            .enumerate()
            .filter(|(_, b)| b.len() >= want && (b.len() - want) * 4 <= b.len())
            .min_by_key(|(_, b)| b.len())
            .map(|(i, _)| i);
        if let Some(i) = best {
            let mut b = pool.bufs.remove(i);
            pool.bytes -= b.len();
            drop(pool);
            b.prefault();
            return b;
        }
        drop(pool);
        SegBuf::pages(want)
    }

    /// An uncharged large buffer back to the pool (the oldest go if it is full).
    pub fn give_large(&self, mut buf: SegBuf) {
        let max = (self.limit() / POOL_SHARE).min(POOL_MAX);
        // A large item's buffer whose pages the kernel may still reference gets fresh ones
        // before anything can write it again (buf.rs, "Lent pages").
        if !buf.reclaim() || buf.is_empty() || buf.len() > max || !buf.len().is_multiple_of(PAGE) {
            return;
        }
        let mut pool = self.pool.lock();
        let mut dropped = Vec::new();
        while pool.bytes + buf.len() > max || pool.bufs.len() >= POOL_ENTRIES {
            let old = pool.bufs.remove(0);
            pool.bytes -= old.len();
            dropped.push(old);
        }
        pool.bytes += buf.len();
        pool.bufs.push(buf);
        drop(pool);
        // Unmapped after the lock is let go.
        drop(dropped);
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

    #[test]
    fn large_buffers_are_recycled_within_a_quarter_and_bounded() {
        // limit / 64 = 1 MiB of pool.
        let b = Budget::new(64 << 20, 1 << 20, false);
        let x = b.take_large(100_000);
        assert_eq!(x.len(), large_len(100_000));
        assert_eq!(x.len() % PAGE, 0);
        let addr = x.as_ptr() as usize;
        b.give_large(x);
        assert_eq!(b.used(), 0, "the pool is not charged");
        // Too small to be worth that buffer (over a quarter wasted): fresh memory.
        let small = b.take_large(60_000);
        assert_ne!(small.as_ptr() as usize, addr);
        // Close enough: the pooled buffer comes back, as it was left.
        let again = b.take_large(90_000);
        assert_eq!(
            (again.as_ptr() as usize, again.len()),
            (addr, large_len(100_000))
        );
        // Released (charged) buffers join the pool too; past its bound the oldest go.
        b.force_add(again.len() + small.len());
        b.release(again);
        b.release(small);
        assert_eq!(b.used(), 0);
        for _ in 0..20 {
            b.give_large(SegBuf::zeroed(large_len(100_000)));
        }
        let pool = b.pool.lock();
        assert!(
            pool.bytes <= 1 << 20 && pool.bytes == pool.bufs.iter().map(|x| x.len()).sum::<usize>()
        );
        assert!(pool.bufs.len() < 20);
    }
}
