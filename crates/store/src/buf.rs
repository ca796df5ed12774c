//! Segment buffers: zeroed byte arrays that go back to the OS when dropped.
//!
//! Owns the one place that talks to the OS about memory. Buffers of `MMAP_MIN` bytes or more are
//! mapped with mmap and unmapped on drop. Why not `Box<[u8]>`: glibc raises its mmap threshold
//! after the first large free, so later segments come from the heap, and freed heap segments
//! stay resident. Measured: writing 2x a 256 MiB limit left 308 MiB resident with Box and
//! 245 MiB with the threshold pinned; mapping directly gives the latter without touching
//! process-wide malloc settings. Fresh mappings are zero pages, so an untouched segment tail
//! costs no RSS either.
//!
//! Regular segments (power-of-two sizes up to 2 MiB) can come from huge-page chunks instead:
//! 2 MiB-aligned mappings marked `MADV_HUGEPAGE`, each cut into slots of one size. Why: a
//! large cache read at random (a multi-get, an fget over 100 keys) misses the TLB on nearly
//! every item with 4 KiB pages: 750 MB of segments are 190k pages, while 2 MiB pages make them
//! 375 entries, which the CPU's second-level TLB holds whole. A freed slot is emptied with
//! `MADV_DONTNEED` (its memory goes back to the OS and reads as zeros again) and kept for the
//! next segment of its size; the address space itself is never unmapped.
//!
//! The cost, and why it is paid: a huge page is resident whole from its first write, so each
//! segment being filled (one per shard and TTL group) holds up to 1 MiB more than it has
//! written: bench/memory.sh grew 278.6 -> 282.8 MiB (10M small items) and 395.0 -> 404.6 MiB
//! (2M mixed). Turning only full segments into huge pages (MADV_COLLAPSE from the maintenance
//! thread) kept RSS as before but cost workload d (100 KB values, churning) 7% of its
//! throughput against small pages, while huge pages from the first write gave it 7% more (one
//! fault per 2 MiB instead of 512): 33.6k / 31.3k / 36.1k ops/s, `mnemo bench` d, 10 s runs.
//! ```text
//!   chunk (2 MiB, aligned, MADV_HUGEPAGE)
//!   [ slot 0 (1 MiB) | slot 1 (1 MiB) ]     free slots: per size, LIFO
//! ```

use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;

/// Ask the CPU to pull the cache line at `p` toward L1 (a hint: never faults, whatever `p`).
#[inline]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 has no architectural effect beyond the cache; any address is allowed.
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_mm_prefetch(p.cast(), core::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Below this, heap allocation is cheaper and its retention is negligible.
const MMAP_MIN: usize = 64 << 10;

pub(crate) enum SegBuf {
    Heap(Box<[u8]>),
    Mapped { ptr: NonNull<u8>, len: usize },
    /// A slot of a huge-page chunk, handed back to `huge` on drop.
    Huge { ptr: NonNull<u8>, len: usize },
}

// SAFETY: a Mapped buffer is uniquely owned memory, exactly like a Box<[u8]>: it is only
// reachable through this value, and &/&mut access follows the usual borrow rules via Deref.
unsafe impl Send for SegBuf {}
// SAFETY: as above; shared access only hands out &[u8].
unsafe impl Sync for SegBuf {}

impl SegBuf {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> SegBuf {
        if len >= MMAP_MIN {
            // SAFETY: anonymous private mapping with no address hint; the arguments are valid
            // for any len > 0 and the result is checked against MAP_FAILED.
            let p = unsafe {
                libc::mmap(
                    core::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                if let Some(ptr) = NonNull::new(p as *mut u8) {
                    return SegBuf::Mapped { ptr, len };
                }
            }
            // Mapping refused (e.g. map count limit): the heap may still have room.
        }
        SegBuf::Heap(vec![0u8; len].into_boxed_slice())
    }

    /// `len` zero bytes for a regular segment: a huge-page slot when `huge` and the size
    /// allows one (and the OS gives the chunk), else as `zeroed`.
    pub fn regular(len: usize, huge: bool) -> SegBuf {
        if huge && huge::fits(len) {
            if let Some(ptr) = huge::take(len) {
                return SegBuf::Huge { ptr, len };
            }
        }
        SegBuf::zeroed(len)
    }
}

impl Default for SegBuf {
    fn default() -> Self {
        SegBuf::Heap(Box::default())
    }
}

impl Deref for SegBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            SegBuf::Heap(b) => b,
            // SAFETY: ptr is a live mapping of len readable bytes owned by self (see zeroed),
            // valid until Drop; the returned borrow is tied to &self.
            SegBuf::Mapped { ptr, len } | SegBuf::Huge { ptr, len } => unsafe {
                core::slice::from_raw_parts(ptr.as_ptr(), *len)
            },
        }
    }
}

impl DerefMut for SegBuf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            SegBuf::Heap(b) => b,
            // SAFETY: as in deref, plus &mut self guarantees this is the only access.
            SegBuf::Mapped { ptr, len } | SegBuf::Huge { ptr, len } => unsafe {
                core::slice::from_raw_parts_mut(ptr.as_ptr(), *len)
            },
        }
    }
}

impl Drop for SegBuf {
    fn drop(&mut self) {
        match *self {
            SegBuf::Mapped { ptr, len } => {
                // SAFETY: (ptr, len) is exactly the mapping created in zeroed, unmapped only
                // here, once; no borrow of it can outlive self.
                let rc = unsafe { libc::munmap(ptr.as_ptr() as *mut libc::c_void, len) };
                debug_assert_eq!(rc, 0);
            }
            SegBuf::Huge { ptr, len } => huge::give(ptr, len),
            SegBuf::Heap(_) => {}
        }
    }
}

/// The huge-page chunks and their free slots, shared by every store of the process.
mod huge {
    use core::ptr::NonNull;

    use parking_lot::Mutex;

    pub const CHUNK: usize = 2 << 20;

    /// Free slots (addresses) per slot size; sizes are few (one per store geometry).
    static FREE: Mutex<Vec<(usize, Vec<usize>)>> = Mutex::new(Vec::new());

    /// A power of two that divides a chunk and is worth a mapping of its own.
    pub fn fits(len: usize) -> bool {
        len.is_power_of_two() && (super::MMAP_MIN..=CHUNK).contains(&len)
    }

    /// A zeroed slot of `len` bytes, or None if the OS refuses a new chunk.
    pub fn take(len: usize) -> Option<NonNull<u8>> {
        let mut free = FREE.lock();
        let i = match free.iter().position(|(l, _)| *l == len) {
            Some(i) => i,
            None => {
                free.push((len, Vec::new()));
                free.len() - 1
            }
        };
        let slots = &mut free[i].1;
        if slots.is_empty() {
            let chunk = map_chunk()?;
            // Highest address last in, so slots are handed out in address order (LIFO).
            slots.extend((0..CHUNK / len).rev().map(|k| chunk + k * len));
        }
        slots.pop().and_then(|a| NonNull::new(a as *mut u8))
    }

    /// Empties a slot (its pages go back to the OS and read as zeros) and keeps it.
    pub fn give(ptr: NonNull<u8>, len: usize) {
        // SAFETY: (ptr, len) is a slot of a live chunk mapping (chunks are never unmapped),
        // no longer reachable through any SegBuf; DONTNEED on private anonymous memory only
        // drops its pages.
        let rc = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_DONTNEED) };
        debug_assert_eq!(rc, 0);
        let mut free = FREE.lock();
        if let Some((_, slots)) = free.iter_mut().find(|(l, _)| *l == len) {
            slots.push(ptr.as_ptr() as usize);
        }
    }

    /// One 2 MiB-aligned chunk marked for huge pages: map twice the size and trim both ends.
    fn map_chunk() -> Option<usize> {
        // SAFETY: anonymous private mapping with no address hint, checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                2 * CHUNK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let start = p as usize;
        let aligned = (start + CHUNK - 1) & !(CHUNK - 1);
        // SAFETY: both ranges lie inside the mapping just made and nothing refers to them.
        unsafe {
            if aligned > start {
                libc::munmap(p, aligned - start);
            }
            let tail = start + 2 * CHUNK - (aligned + CHUNK);
            if tail > 0 {
                libc::munmap((aligned + CHUNK) as *mut libc::c_void, tail);
            }
            // A hint: where the kernel has no huge pages (or THP is off) the chunk is simply
            // backed by small pages.
            libc::madvise(aligned as *mut libc::c_void, CHUNK, libc::MADV_HUGEPAGE);
        }
        Some(aligned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_mapped_buffers_are_zeroed_and_writable() {
        for len in [0usize, 1, 4096, MMAP_MIN - 1, MMAP_MIN, 3 << 20] {
            let mut b = SegBuf::zeroed(len);
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0));
            if len > 1 {
                b[len - 1] = 7;
                b[0] = 9;
                assert_eq!((b[0], b[len - 1]), (9, 7));
            }
        }
        assert!(matches!(SegBuf::zeroed(MMAP_MIN), SegBuf::Mapped { .. }));
        assert_eq!(SegBuf::default().len(), 0);
    }

    #[test]
    fn huge_slots_are_aligned_zeroed_again_and_reused() {
        // Whole chunks: no store geometry uses this size, so no other test takes the slot.
        let len = huge::CHUNK;
        let mut a = SegBuf::regular(len, true);
        let b = SegBuf::regular(len, true);
        assert!(matches!(a, SegBuf::Huge { .. }) && matches!(b, SegBuf::Huge { .. }));
        assert_eq!(a.as_ptr() as usize % len, 0);
        assert!(a.iter().all(|&x| x == 0));
        a[0] = 1;
        a[len - 1] = 2;
        let addr = a.as_ptr() as usize;
        drop(a);
        // The slot comes back (LIFO) and reads as zeros again.
        let c = SegBuf::regular(len, true);
        assert_eq!(c.as_ptr() as usize, addr);
        assert!(c.iter().all(|&x| x == 0));
        // Sizes that are not a power of two, or too small or too large, are plain buffers.
        for len in [4 << 20, 1000, 3 << 18] {
            assert!(!matches!(SegBuf::regular(len, true), SegBuf::Huge { .. }));
        }
        assert!(matches!(SegBuf::regular(len, false), SegBuf::Mapped { .. }));
    }
}
