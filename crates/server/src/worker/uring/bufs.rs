//! The worker's provided-buffer ring: `count` receive buffers of `size` bytes that the
//! kernel picks from for every multishot receive (IORING_REGISTER_PBUF_RING).
//!
//! ```text
//!   ring (shared with the kernel, page aligned)       buffers (one anonymous mapping)
//!   +----------------------+----------------------+   +--------+--------+-----+--------+
//!   | addr len bid [tail]  | addr len bid resv    |.. | bid 0  | bid 1  | ... | bid n-1|
//!   +----------------------+----------------------+   +--------+--------+-----+--------+
//!     entry 0's last u16 is the tail we publish;       the kernel writes a received segment
//!     the kernel consumes entries from its head        into the next published buffer and
//!                                                      reports its bid in the completion
//! ```
//!
//! A buffer goes back to the ring (`recycle`) as soon as its bytes are copied out, within
//! the loop iteration that received them (uring/stream.rs), so the ring never runs dry
//! because one connection stopped reading.

use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;

use super::UringError;

/// The group id of the worker's one buffer ring.
pub const GROUP: u16 = 0;

pub struct BufRing {
    /// The entries the kernel reads: `count` of them, page aligned.
    entries: *mut BufRingEntry,
    entries_len: usize,
    /// `count * size` bytes of receive buffers.
    data: *mut u8,
    data_len: usize,
    count: u16,
    size: u32,
    /// Our tail (the kernel sees it once published); one thread uses the ring, the atomic
    /// only makes the type shareable through an `Arc` with the connections' streams.
    tail: AtomicU16,
}

// SAFETY: the mappings are owned by the BufRing and freed only on drop; the one worker thread
// that owns the ring is the only user (streams hold an Arc but run on that same thread).
unsafe impl Send for BufRing {}
// SAFETY: as above; every mutation goes through the atomic tail or the kernel.
unsafe impl Sync for BufRing {}

fn map(len: usize) -> Result<*mut u8, UringError> {
    // SAFETY: an anonymous private mapping; the result is checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(UringError::Buffers(std::io::Error::last_os_error()));
    }
    Ok(p.cast())
}

impl BufRing {
    /// Map the ring and its buffers and register them with `ring` as group [`GROUP`].
    pub fn new(ring: &io_uring::IoUring, count: u16, size: u32) -> Result<BufRing, UringError> {
        assert!(count.is_power_of_two(), "the kernel wants a power of two");
        let entries_len = usize::from(count) * std::mem::size_of::<BufRingEntry>();
        let data_len = usize::from(count) * size as usize;
        let entries = map(entries_len)?.cast::<BufRingEntry>();
        let data = match map(data_len) {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: mapped just above with this length.
                unsafe { libc::munmap(entries.cast(), entries_len) };
                return Err(e);
            }
        };
        let bufs = BufRing {
            entries,
            entries_len,
            data,
            data_len,
            count,
            size,
            tail: AtomicU16::new(0),
        };
        // SAFETY: both mappings live as long as `bufs`, which the worker drops after its ring.
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(entries as u64, count, GROUP, 0)
        }
        .map_err(UringError::Buffers)?;
        for bid in 0..count {
            bufs.push(bid);
        }
        bufs.publish();
        Ok(bufs)
    }

    /// Bytes of buffer `bid` the kernel reported as received.
    pub fn get(&self, bid: u16, len: usize) -> &[u8] {
        debug_assert!(bid < self.count && len <= self.size as usize);
        // SAFETY: bid < count and len <= size (the kernel never reports more than the buffer's
        // length); the kernel does not write a buffer between reporting it and its recycle.
        unsafe {
            std::slice::from_raw_parts(self.data.add(usize::from(bid) * self.size as usize), len)
        }
    }

    /// Give buffer `bid` back to the kernel.
    pub fn recycle(&self, bid: u16) {
        self.push(bid);
        self.publish();
    }

    /// Give the buffers' pages back to the system (see `Ring::release_idle` for when that is
    /// safe). Touched as the ring cycles through them, all of them stay resident otherwise.
    pub fn release_pages(&self) {
        // SAFETY: the range is our own mapping and holds no bytes anyone will read.
        unsafe { libc::madvise(self.data.cast(), self.data_len, libc::MADV_DONTNEED) };
    }

    fn push(&self, bid: u16) {
        let tail = self.tail.load(Ordering::Relaxed);
        let idx = usize::from(tail & (self.count - 1));
        // SAFETY: idx < count; the kernel reads only entries between its head and the
        // published tail, and this one is past the tail until `publish`.
        unsafe {
            let e = &mut *self.entries.add(idx);
            e.set_addr(self.data.add(usize::from(bid) * self.size as usize) as u64);
            e.set_len(self.size);
            e.set_bid(bid);
        }
        self.tail.store(tail.wrapping_add(1), Ordering::Relaxed);
    }

    fn publish(&self) {
        // SAFETY: the tail field lies inside entry 0 of our mapping; the kernel reads it with
        // acquire semantics, so a release store makes the entries written before it visible.
        unsafe {
            let tail = BufRingEntry::tail(self.entries).cast_mut();
            (*(tail as *const AtomicU16))
                .store(self.tail.load(Ordering::Relaxed), Ordering::Release);
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: both were mapped in `new` with these lengths; the ring that used them is
        // gone (the worker drops it first).
        unsafe {
            libc::munmap(self.entries.cast(), self.entries_len);
            libc::munmap(self.data.cast(), self.data_len);
        }
    }
}
