//! Segment buffers: zeroed byte arrays that go back to the OS when dropped.
//!
//! Owns the one place that talks to the OS about memory. Buffers of `MMAP_MIN` bytes or more are
//! mapped with mmap and unmapped on drop. Why not `Box<[u8]>`: glibc raises its mmap threshold
//! after the first large free, so later segments come from the heap, and freed heap segments
//! stay resident. Measured: writing 2x a 256 MiB limit left 308 MiB resident with Box and
//! 245 MiB with the threshold pinned; mapping directly gives the latter without touching
//! process-wide malloc settings. Fresh mappings are zero pages, so an untouched segment tail
//! costs no RSS either.

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
            SegBuf::Mapped { ptr, len } => unsafe { core::slice::from_raw_parts(ptr.as_ptr(), *len) },
        }
    }
}

impl DerefMut for SegBuf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            SegBuf::Heap(b) => b,
            // SAFETY: as in deref, plus &mut self guarantees this is the only access.
            SegBuf::Mapped { ptr, len } => unsafe {
                core::slice::from_raw_parts_mut(ptr.as_ptr(), *len)
            },
        }
    }
}

impl Drop for SegBuf {
    fn drop(&mut self) {
        if let SegBuf::Mapped { ptr, len } = *self {
            // SAFETY: (ptr, len) is exactly the mapping created in zeroed, unmapped only here,
            // once; no borrow of it can outlive self.
            let rc = unsafe { libc::munmap(ptr.as_ptr() as *mut libc::c_void, len) };
            debug_assert_eq!(rc, 0);
        }
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
}
