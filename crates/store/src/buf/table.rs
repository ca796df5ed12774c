//! Growable arrays of plain values in mappings of their own: the index's bucket arrays.
//!
//! Owns the memory of one array, nothing about what is in it. Why not a `Vec`: a Vec grows by
//! allocating a larger block, copying into it and freeing the old one, and glibc serves blocks
//! below its mmap threshold from the heap, where the freed ones stay resident (the threshold
//! starts at 128 KiB and rises to the size of any mapping the process frees, up to 32 MiB).
//! A shard's index grows by a sixteenth at a time, so its arrays leave a trail of freed
//! copies: after bench/memory.sh's mixed load (2M items, 32 arrays over 16 shards)
//! `malloc_trim(0)` gave back 1,652 kB, 0.8 bytes per item. Here an array is a private
//! anonymous mapping from its first element on, grown with `mremap`, which moves page tables
//! rather than bytes and leaves nothing behind; pages past the written length are never
//! touched, so they cost no RSS (the budget still counts the whole capacity).
//! ```text
//!   [ written (len) | untouched room | ]     one mapping, capacity = its pages / size_of T
//!                                      ^ mremap grows it (in place, or moved by the kernel)
//! ```

use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;

const PAGE: usize = 4096;

/// A growable array of `T`. Elements are only ever written by `push` (no destructors run:
/// `T: Copy`).
pub(crate) struct Table<T: Copy> {
    /// Dangling while `cap` is 0 (no mapping yet).
    ptr: NonNull<T>,
    len: usize,
    cap: usize,
}

// SAFETY: a Table owns its mapping exclusively, like a Vec<T> owns its buffer; access follows
// the borrow rules through Deref/DerefMut.
unsafe impl<T: Copy + Send> Send for Table<T> {}
// SAFETY: as above; shared access only hands out &[T].
unsafe impl<T: Copy + Sync> Sync for Table<T> {}

impl<T: Copy> Table<T> {
    pub fn new() -> Table<T> {
        assert!(core::mem::size_of::<T>() > 0 && core::mem::align_of::<T>() <= PAGE);
        Table {
            ptr: NonNull::dangling(),
            len: 0,
            cap: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }
    /// Elements the mapping holds (its whole pages).
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Room for at least `additional` more elements, rounded up to whole pages.
    pub fn reserve_exact(&mut self, additional: usize) {
        let size = core::mem::size_of::<T>();
        let want = self
            .len
            .checked_add(additional)
            .and_then(|n| n.checked_mul(size))
            .expect("table size overflow");
        if want <= self.cap * size {
            return;
        }
        let bytes = want.div_ceil(PAGE) * PAGE;
        let old = self.cap * size;
        let p = if self.cap == 0 {
            // SAFETY: anonymous private mapping with no address hint; the result is checked
            // against MAP_FAILED.
            unsafe {
                libc::mmap(
                    core::ptr::null_mut(),
                    bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            }
        } else {
            // SAFETY: (ptr, old) is exactly this table's mapping; MAYMOVE lets the kernel
            // move it, and no reference into it is live (&mut self).
            unsafe { libc::mremap(self.ptr.as_ptr().cast(), old, bytes, libc::MREMAP_MAYMOVE) }
        };
        if p == libc::MAP_FAILED {
            // As a Vec would on a failed allocation.
            std::alloc::handle_alloc_error(
                std::alloc::Layout::from_size_align(bytes, PAGE).expect("layout"),
            );
        }
        self.ptr = NonNull::new(p.cast()).expect("mmap returned null");
        self.cap = bytes / size;
    }

    /// Appends `v`; grows by a page when full (callers reserve their own steps first).
    #[inline]
    pub fn push(&mut self, v: T) {
        if self.len == self.cap {
            self.reserve_exact(1);
        }
        // SAFETY: len < cap, so the slot is inside the mapping, and T: Copy needs no drop of
        // what was there (zero pages).
        unsafe { self.ptr.as_ptr().add(self.len).write(v) };
        self.len += 1;
    }
}

impl<T: Copy> Deref for Table<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: the first len elements are initialised (written by push); a dangling,
        // aligned pointer is valid for an empty slice.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> DerefMut for Table<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in deref, plus &mut self guarantees this is the only access.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Drop for Table<T> {
    fn drop(&mut self) {
        if self.cap != 0 {
            // SAFETY: (ptr, cap * size) is exactly this table's mapping, unmapped only here.
            let rc = unsafe {
                libc::munmap(
                    self.ptr.as_ptr().cast(),
                    self.cap * core::mem::size_of::<T>(),
                )
            };
            debug_assert_eq!(rc, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_in_pages_and_keeps_its_contents() {
        let mut t: Table<[u64; 8]> = Table::new();
        assert_eq!((t.len(), t.capacity()), (0, 0));
        assert!(t.is_empty());
        t.push([1; 8]);
        assert_eq!(t.capacity(), PAGE / 64, "one page");
        for i in 0..10_000u64 {
            if t.len() == t.capacity() {
                t.reserve_exact(t.len() / 16 + 1);
            }
            t.push([i; 8]);
        }
        assert_eq!(t.len(), 10_001);
        assert!(t.capacity() >= t.len() && (t.capacity() * 64).is_multiple_of(PAGE));
        assert_eq!(t[0], [1; 8]);
        assert!((0..10_000u64).all(|i| t[i as usize + 1] == [i; 8]));
        t[5][3] = 77;
        assert_eq!(t[5][3], 77);
        t.push([0; 8]);
        let cap = t.capacity();
        if cap > t.len() {
            t.reserve_exact(1); // room left: no change
            assert_eq!(t.capacity(), cap);
        }
    }

    #[test]
    fn an_empty_table_is_an_empty_slice() {
        let t: Table<u64> = Table::new();
        assert_eq!(&t[..], &[] as &[u64]);
    }
}
