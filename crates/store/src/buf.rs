//! Segment buffers: zeroed byte arrays that go back to the OS when dropped.
//!
//! Owns the one place that talks to the OS about memory (the index's growable arrays are in
//! buf/table.rs). Buffers of `MMAP_MIN` bytes or more are mapped with mmap and unmapped on drop. Why not `Box<[u8]>`: glibc raises its mmap threshold
//! after the first large free, so later segments come from the heap, and freed heap segments
//! stay resident. Measured: writing 2x a 256 MiB limit left 308 MiB resident with Box and
//! 245 MiB with the threshold pinned; mapping directly gives the latter without touching
//! process-wide malloc settings. Fresh mappings are zero pages, so an untouched segment tail
//! costs no RSS either.
//!
//! Regular segments (power-of-two sizes up to 2 MiB) can come from huge-page chunks instead:
//! 2 MiB-aligned mappings, each cut into slots of one size. Why: a large cache read at random
//! (a multi-get, an fget over 100 keys) misses the TLB on nearly every item with 4 KiB pages:
//! 750 MB of segments are 190k pages, while 2 MiB pages make them 375 entries, which the CPU's
//! second-level TLB holds whole. A freed slot is emptied with `MADV_DONTNEED` (its memory goes
//! back to the OS and reads as zeros again) and kept for the next segment of its size; the
//! address space itself is never unmapped.
//!
//! When a slot becomes a huge page: only once it is sealed (its segment is full and no longer
//! written, `SegBuf::sealed`), which marks it `MADV_HUGEPAGE`; once every slot of a chunk is
//! marked, khugepaged turns the chunk into one huge page in the background. Until then the
//! slot is on small pages (`MADV_NOHUGEPAGE`, also where THP is "always"), so a segment
//! being filled holds only the pages it has written. Why not from the first write, as
//! a49eb0a did: a huge page is resident whole from its first write, so every active segment
//! (one per shard, FIFO and TTL group) held up to its whole size unwritten: bench/memory.sh
//! grew 278.6 -> 282.8 MiB (10M small items) and 395.0 -> 404.6 MiB (2M mixed) with it. The
//! price: a segment's first write faults once per 4 KiB instead of once per 2 MiB (a49eb0a
//! measured `mnemo bench` d, 100 KB values churning, 7% faster with first-write huge pages
//! than with small pages; a synchronous MADV_COLLAPSE per full segment cost it 7% instead),
//! and a filled chunk reaches the TLB's benefit only after khugepaged's next pass over it.
//! Once the store is full, eviction recycles resident buffers in place, so neither applies.
//! ```text
//!   chunk (2 MiB, aligned)                       a slot is NOHUGEPAGE while free or being
//!   [ slot 0 (1 MiB) | slot 1 (1 MiB) ]          filled, HUGEPAGE once sealed;
//!     sealed            active                   free slots: per size, LIFO
//! ```
//!
//! Lent pages. A large item's buffer (`pages`, always a mapping of its own) may be lent to the
//! kernel: the server hands its value to a socket by reference (vmsplice, then splice) instead
//! of copying it, and the socket keeps referencing those physical pages until the client has
//! read them, which nothing tells us. Item values are never rewritten in place (every write
//! lands at a new location), so the only hazard is the buffer's reuse once the item is gone.
//! Before that, `reclaim` drops the buffer's pages with `MADV_DONTNEED`: the kernel's
//! references keep the old pages (and the bytes the client is owed) alive, and the buffer
//! reads as fresh zero pages; `prefault` maps them again in one call before the next write.
//! ```text
//!   Normal --lend (a get spliced its value)--> Lent --reclaim (retired)--> Zapped --prefault--> Normal
//! ```
//! The price is a page fault and a zeroing per 4 KiB for a buffer that was lent, once per
//! item lifetime; measured here (a VM) 27 µs per 100 KB, against a copy per get saved.

pub(crate) mod table;

use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, Ordering};

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

/// Lent-pages states of a mapping (module doc).
const PAGES_NORMAL: u8 = 0;
const PAGES_LENT: u8 = 1;
const PAGES_ZAPPED: u8 = 2;

/// A large item's buffer, whose value a reader may hand to the kernel by reference.
#[derive(Clone, Copy, Debug)]
pub struct Pages<'a>(&'a AtomicU8);

impl Pages<'_> {
    /// Declares that the kernel may from now on reference this buffer's pages (vmsplice):
    /// the store will swap them for fresh ones before it writes the buffer again. Call it
    /// before handing them over.
    pub fn lend(self) {
        self.0.store(PAGES_LENT, Ordering::Relaxed);
    }
}

impl PartialEq for Pages<'_> {
    fn eq(&self, other: &Self) -> bool {
        core::ptr::eq(self.0, other.0)
    }
}
impl Eq for Pages<'_> {}

pub(crate) enum SegBuf {
    Heap(Box<[u8]>),
    /// `lent`: the lent-pages state (module doc), one of the `PAGES_*` values.
    Mapped {
        ptr: NonNull<u8>,
        len: usize,
        lent: AtomicU8,
    },
    /// A slot of a huge-page chunk, handed back to `huge` on drop.
    Huge {
        ptr: NonNull<u8>,
        len: usize,
    },
}

// SAFETY: a Mapped buffer is uniquely owned memory, exactly like a Box<[u8]>: it is only
// reachable through this value, and &/&mut access follows the usual borrow rules via Deref.
unsafe impl Send for SegBuf {}
// SAFETY: as above; shared access only hands out &[u8].
unsafe impl Sync for SegBuf {}

impl SegBuf {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> SegBuf {
        SegBuf::zeroed_mapped_from(len, MMAP_MIN, 0)
    }

    /// `len` zero bytes in a mapping of their own whatever the size, so that they can be
    /// lent (module doc): a large item's buffer (whole pages). Its pages are faulted in by
    /// the mmap call itself (MAP_POPULATE), since the value is written whole at once: the
    /// copy into it would otherwise fault once per 4 KiB, inside the kernel's receive
    /// (bench/fresh_pages.sh: 40 against 49 µs per 100 KB on a VM whose host backs the pages).
    pub fn pages(len: usize) -> SegBuf {
        SegBuf::zeroed_mapped_from(len, 1, libc::MAP_POPULATE)
    }

    /// A mapping for `len >= min` bytes, else (or if the OS refuses one) heap memory.
    fn zeroed_mapped_from(len: usize, min: usize, populate: libc::c_int) -> SegBuf {
        if len >= min {
            // SAFETY: anonymous private mapping with no address hint; the arguments are valid
            // for any len > 0 and the result is checked against MAP_FAILED.
            let p = unsafe {
                libc::mmap(
                    core::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | populate,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                if let Some(ptr) = NonNull::new(p as *mut u8) {
                    return SegBuf::Mapped {
                        ptr,
                        len,
                        lent: AtomicU8::new(PAGES_NORMAL),
                    };
                }
            }
            // Mapping refused (e.g. map count limit): the heap may still have room.
        }
        SegBuf::Heap(vec![0u8; len].into_boxed_slice())
    }

    /// The handle a reader may lend this buffer's pages with: only mappings of their own
    /// (module doc); None for heap memory and huge-page slots, whose memory is reused by
    /// others.
    pub fn lendable(&self) -> Option<Pages<'_>> {
        match self {
            SegBuf::Mapped { lent, .. } => Some(Pages(lent)),
            _ => None,
        }
    }

    /// Before the buffer is reused: if its pages were lent, swap them for fresh ones (module
    /// doc). Costs nothing otherwise. False: the pages could not be taken back, and the buffer
    /// must be dropped (unmapped), never written again.
    #[must_use]
    pub fn reclaim(&mut self) -> bool {
        if let SegBuf::Mapped { ptr, len, lent } = self {
            if *lent.get_mut() == PAGES_LENT {
                // SAFETY: (ptr, len) is this buffer's own private anonymous mapping, and
                // &mut self means no borrow of it is live; DONTNEED only drops its pages.
                let rc = unsafe { libc::madvise(ptr.as_ptr().cast(), *len, libc::MADV_DONTNEED) };
                if rc != 0 {
                    return false;
                }
                *lent.get_mut() = PAGES_ZAPPED;
            }
        }
        true
    }

    /// Before a reclaimed buffer is written: fault its fresh pages in with one call (the
    /// writes would otherwise fault once per page). Costs nothing otherwise.
    pub fn prefault(&mut self) {
        if let SegBuf::Mapped { ptr, len, lent } = self {
            if *lent.get_mut() == PAGES_ZAPPED {
                // SAFETY: as in reclaim. MADV_POPULATE_WRITE (Linux 5.14) only faults pages
                // in; where it is refused the writes fault them instead.
                unsafe { libc::madvise(ptr.as_ptr().cast(), *len, libc::MADV_POPULATE_WRITE) };
                *lent.get_mut() = PAGES_NORMAL;
            }
        }
    }

    /// The segment in this buffer is full and will not be written again until it is emptied:
    /// a huge-page slot may now become part of a huge page (module doc). One madvise call per
    /// sealed segment; nothing for other buffers.
    pub fn sealed(&self) {
        if let SegBuf::Huge { ptr, len } = *self {
            huge::advise(ptr.as_ptr() as usize, len, libc::MADV_HUGEPAGE);
        }
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
            SegBuf::Mapped { ptr, len, .. } | SegBuf::Huge { ptr, len } => unsafe {
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
            SegBuf::Mapped { ptr, len, .. } | SegBuf::Huge { ptr, len } => unsafe {
                core::slice::from_raw_parts_mut(ptr.as_ptr(), *len)
            },
        }
    }
}

impl Drop for SegBuf {
    fn drop(&mut self) {
        match *self {
            SegBuf::Mapped { ptr, len, .. } => {
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
        // Its next segment starts on small pages again (module doc).
        advise(ptr.as_ptr() as usize, len, libc::MADV_NOHUGEPAGE);
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
        }
        // Small pages until its slots are sealed (module doc).
        advise(aligned, CHUNK, libc::MADV_NOHUGEPAGE);
        Some(aligned)
    }

    /// Marks a slot (or a whole chunk) for or against huge pages. A hint: where the kernel has
    /// no huge pages (or THP is off, or the VMA count limit refuses the split) the memory
    /// simply stays on small pages, which is correct, so the result is not checked.
    pub fn advise(addr: usize, len: usize, advice: libc::c_int) {
        // SAFETY: (addr, len) is a slot or chunk of a live chunk mapping (never unmapped);
        // MADV_(NO)HUGEPAGE only changes the VMA's flags, never the contents.
        unsafe { libc::madvise(addr as *mut libc::c_void, len, advice) };
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

    /// The bytes the kernel was lent keep their content however the buffer is written after
    /// `reclaim`, and the buffer reads as zeros again: a pipe stands in for a socket.
    #[test]
    fn lent_pages_keep_their_bytes_for_the_kernel_after_reclaim() {
        let len = 8 * 4096;
        let mut b = SegBuf::pages(len);
        b.fill(b'a');
        let mut fds = [0; 2];
        // SAFETY: fds has room for two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: F_SETPIPE_SZ on our own pipe; the default 64 KiB would do too.
        unsafe { libc::fcntl(fds[1], libc::F_SETPIPE_SZ, 1 << 20) };
        b.lendable().expect("a mapping of its own").lend();
        let iov = libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: iov describes the live buffer; the pipe references its pages.
        assert_eq!(unsafe { libc::vmsplice(fds[1], &iov, 1, 0) }, len as isize);

        assert!(b.reclaim());
        b.prefault();
        assert!(
            b.iter().all(|&x| x == 0),
            "reclaimed pages read as fresh zeros"
        );
        b.fill(b'b');

        let mut got = vec![0u8; len];
        // SAFETY: got is a live buffer of len bytes.
        assert_eq!(
            unsafe { libc::read(fds[0], got.as_mut_ptr().cast(), len) },
            len as isize
        );
        assert!(
            got.iter().all(|&x| x == b'a'),
            "the kernel's bytes changed under it"
        );
        // SAFETY: our own descriptors, closed once.
        unsafe { (libc::close(fds[0]), libc::close(fds[1])) };
        // Not lent: reclaim keeps the pages (and the bytes).
        assert!(b.reclaim());
        assert!(b.iter().all(|&x| x == b'b'));
        // Only mappings of their own can be lent.
        assert!(SegBuf::zeroed(100).lendable().is_none());
        assert!(SegBuf::pages(100).lendable().is_some());
    }

    /// Pages of `b` the kernel has mapped in (mincore).
    fn resident(b: &SegBuf) -> usize {
        let pages = b.len().div_ceil(4096);
        let mut vec = vec![0u8; pages];
        // SAFETY: (ptr, len) is b's own page-aligned mapping; vec has a byte per page.
        assert_eq!(
            unsafe { libc::mincore(b.as_ptr() as *mut libc::c_void, b.len(), vec.as_mut_ptr()) },
            0
        );
        vec.iter().filter(|&&v| v & 1 == 1).count()
    }

    /// A large item's value is written whole at once: its buffer comes with its pages mapped,
    /// so the write (the kernel's receive into it) faults none. Other mappings stay lazy.
    #[test]
    fn a_large_items_buffer_is_resident_from_the_start() {
        let b = SegBuf::pages(25 * 4096);
        assert_eq!(resident(&b), 25);
        let lazy = SegBuf::zeroed(2 * MMAP_MIN);
        assert!(matches!(lazy, SegBuf::Mapped { .. }));
        assert_eq!(
            resident(&lazy),
            0,
            "an untouched segment tail costs no memory"
        );
    }

    /// The VmFlags line of the mapping that holds `addr` (/proc/self/smaps).
    fn vm_flags(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line
                .split_once(' ')
                .filter(|(r, _)| r.contains('-') && !r.ends_with(':'))
            {
                let (a, b) = range.split_once('-').unwrap();
                let (a, b) = (
                    usize::from_str_radix(a, 16).unwrap(),
                    usize::from_str_radix(b, 16).unwrap(),
                );
                inside = (a..b).contains(&addr);
            } else if inside && line.starts_with("VmFlags:") {
                return line.to_string();
            }
        }
        panic!("{addr:#x} is not mapped");
    }

    /// A slot being filled is on small pages (only what was written is resident) and is
    /// marked for huge pages once sealed; a freed slot is on small pages again.
    #[test]
    fn huge_slots_are_small_pages_until_sealed() {
        let len = huge::CHUNK / 4;
        let mut a = SegBuf::regular(len, true);
        assert!(matches!(a, SegBuf::Huge { .. }));
        let addr = a.as_ptr() as usize;
        a[0] = 1;
        a[5000] = 2;
        assert_eq!(
            resident(&a),
            2,
            "an unwritten tail of an active segment costs no memory"
        );
        assert!(vm_flags(addr).contains(" nh"), "{}", vm_flags(addr));
        a.sealed();
        let flags = vm_flags(addr);
        assert!(flags.contains(" hg") && !flags.contains(" nh"), "{flags}");
        drop(a);
        assert!(vm_flags(addr).contains(" nh"), "{}", vm_flags(addr));
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
