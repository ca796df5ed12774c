//! Large items' buffers cut from 2 MiB huge-page chunks, so that a buffer lent to the kernel
//! is renewed a whole huge page at a time.
//!
//! Owns the chunks of one shard (their mappings, slots and slack); the budget (budget.rs)
//! owns one arena per shard and charges what the arena keeps resident.
//!
//! Why: a buffer whose pages were lent (buf.rs, "Lent pages") must get fresh pages before it
//! is written again. Renewing a 100 KB buffer of 4 KiB pages costs a page fault, a zeroing and
//! per-page bookkeeping for each of its 25 pages: 54-58 µs per 100 KB here, against 10 µs per
//! 100 KB for a whole 2 MiB huge page (`bash bench/fresh_pages.sh`). Under `mnemo bench` d
//! that renewal was 16-18% of the server's samples. So a lent slot is not renewed on its
//! own: it waits, "dirty", until no live item is left in its chunk, and the chunk is then
//! renewed whole (one MADV_DONTNEED of 2 MiB; the next take faults in one fresh huge page).
//! ```text
//!   chunk (2 MiB, aligned, MADV_HUGEPAGE), slots of one length (whole pages), then a tail
//!   [ Live | Dirty | Clean | Live | Zapped | ... | tail ]
//!
//!   Zapped --take (populate: the whole chunk when all of it is zapped)--> Live
//!   Clean  --take------------------------------------------------------> Live
//!   Live   --give (its pages were lent)--> Dirty     Live --give (never lent)--> Clean
//!   chunk with no Live slot and a Dirty one --DONTNEED 2 MiB--> every slot Zapped
//!   Dirty / Clean --shed (the budget needs the memory)--> Zapped (DONTNEED of the slot:
//!                                                         the huge page is split)
//! ```
//! Memory: every resident byte of a chunk is charged to the budget. A live slot is charged
//! by its item (as any large buffer); the rest (Clean and Dirty slots, and the tail of a
//! chunk populated whole) is the arena's slack, charged by the arena. Slack is never kept at
//! the cost of an item: whenever the budget refuses a reservation it first sheds slack
//! (`Budget::try_add`), and only then does the store evict. A Dirty slot is never handed
//! out: only Clean slots (never lent) and Zapped ones (fresh pages) are.
//!
//! Compaction. Items die in random order, so a chunk would wait for the last of its ~20 items
//! (several item lifetimes) while its dead slots hold memory. When the arena's slack passes
//! half its live bytes, the shard (which holds its lock, and owns every item in its chunks)
//! moves the few live items of a chunk that is at most half live and has a Dirty slot into
//! other slots (a few per large write), and the chunk is renewed whole:
//! copying 100 KB costs less than renewing 100 KB of small pages, and the chunk comes back as
//! a huge page. A moved item keeps its segment (id, FIFO place, CAS); only the segment's
//! buffer changes. Only while the budget has room for a chunk, or Clean slots elsewhere for
//! the moves: past that, slack is shed.
//! ```text
//!   victim [ L D D L D D ... ]   L -> copied into a slot elsewhere;  victim: no L left,
//!                                                                   a D in it -> renewed whole
//! ```

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use crate::budget::PAGE;
use crate::buf::SegBuf;

/// A chunk: one transparent huge page on x86-64.
pub(crate) const CHUNK: usize = 2 << 20;

/// Compaction starts once the slack passes the live bytes divided by this ...
const SLACK_SHARE: usize = 2;
/// ... and empties chunks at most 1 / VICTIM_LIVE live.
const VICTIM_LIVE: usize = 2;

/// Fewest slots a chunk is cut into; larger buffers keep mappings of their own.
const MIN_SLOTS: usize = 4;

/// Whether buffers of `len` bytes (whole pages) come from chunks: at least `MIN_SLOTS` per
/// chunk, and at most an eighth of the chunk left over as its tail.
pub(crate) fn fits(len: usize) -> bool {
    len > 0 && len.is_multiple_of(PAGE) && len * MIN_SLOTS <= CHUNK && (CHUNK % len) * 8 <= CHUNK
}

/// One chunk's mapping, unmapped when the arena and every buffer cut from it are gone.
pub(crate) struct Map {
    base: NonNull<u8>,
    /// Slots whose buffer was dropped without coming back (a value being received whose
    /// connection went away, incoming.rs): the arena takes them back on its next pass.
    orphans: [AtomicU64; CHUNK / PAGE / 64],
}

// SAFETY: the mapping is plain memory owned by this value; access goes through SegBuf,
// whose borrow rules apply (see buf.rs).
unsafe impl Send for Map {}
// SAFETY: as above.
unsafe impl Sync for Map {}

impl Map {
    /// A 2 MiB-aligned chunk marked for huge pages, not yet resident.
    fn new() -> Option<Map> {
        // SAFETY: anonymous private mapping with no address hint, checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                2 * CHUNK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let start = p as usize;
        let aligned = (start + CHUNK - 1) & !(CHUNK - 1);
        // SAFETY: both trimmed ranges lie inside the mapping just made; nothing refers to them.
        unsafe {
            if aligned > start {
                libc::munmap(p, aligned - start);
            }
            let tail = start + 2 * CHUNK - (aligned + CHUNK);
            if tail > 0 {
                libc::munmap((aligned + CHUNK) as *mut libc::c_void, tail);
            }
            // A hint: without huge pages the chunk is backed by small pages, and still works.
            libc::madvise(aligned as *mut libc::c_void, CHUNK, libc::MADV_HUGEPAGE);
        }
        NonNull::new(aligned as *mut u8).map(|base| Map { base, orphans: Default::default() })
    }

    fn at(&self, off: usize) -> *mut u8 {
        // SAFETY (of the arithmetic): off < CHUNK, inside the mapping.
        self.base.as_ptr().wrapping_add(off)
    }

    /// Slot `k`'s buffer was dropped without coming back (buf.rs).
    pub(crate) fn orphan(&self, k: u16) {
        let k = usize::from(k);
        self.orphans[k / 64].fetch_or(1 << (k % 64), Ordering::Release);
    }

    /// Takes the orphaned slots' marks.
    fn take_orphans(&self) -> impl Iterator<Item = usize> + '_ {
        self.orphans.iter().enumerate().flat_map(|(w, a)| {
            let mut bits = if a.load(Ordering::Relaxed) == 0 { 0 } else { a.swap(0, Ordering::Acquire) };
            core::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    w * 64 + b
                })
            })
        })
    }

    /// No more huge pages for this chunk: once it is resident in part, a huge page would
    /// make all of it resident (at a fault, or khugepaged's collapse) while only part is charged.
    fn small_pages(&self) {
        // SAFETY: advice on this mapping's own range; it changes no content.
        unsafe { libc::madvise(self.base.as_ptr().cast(), CHUNK, libc::MADV_NOHUGEPAGE) };
    }

    /// Drops the pages of `[off, off + len)`: they read as zeros again, while whatever the
    /// kernel still references (lent pages) stays alive for it.
    fn zap(&self, off: usize, len: usize) {
        // SAFETY: the range lies inside this private anonymous mapping; DONTNEED only drops
        // its pages, and no live item is in it (the arena's states say so).
        let rc = unsafe { libc::madvise(self.at(off).cast(), len, libc::MADV_DONTNEED) };
        debug_assert_eq!(rc, 0);
    }

    /// Faults `[off, off + len)` in with one call (MADV_POPULATE_WRITE, Linux 5.14; where it
    /// is refused the writes fault the pages instead).
    fn populate(&self, off: usize, len: usize) {
        // SAFETY: the range lies inside this mapping; populating only maps pages.
        unsafe { libc::madvise(self.at(off).cast(), len, libc::MADV_POPULATE_WRITE) };
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: exactly the aligned chunk mapped in `new`, unmapped only here; no buffer
        // refers to it any more (each holds an Arc of this Map).
        unsafe { libc::munmap(self.base.as_ptr().cast(), CHUNK) };
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Slot {
    /// No pages: reads as zeros, costs nothing, may be handed out after populating.
    Zapped,
    /// Resident, never lent: may be handed out as is.
    Clean,
    /// Resident, lent to the kernel while it held an item: never handed out until zapped.
    Dirty,
    /// Holds a buffer out there (an item, or a value being received).
    Live,
}

struct Chunk {
    map: Arc<Map>,
    /// Length of each slot; 0 while the chunk is wholly zapped and unassigned.
    slot_len: usize,
    slots: Vec<Slot>,
    live: usize,
    /// Resident bytes not in a Live slot (Clean and Dirty slots, and the tail if `whole`):
    /// charged by the arena.
    slack: usize,
    /// Populated in one piece (one huge page, tail included) and never zapped in part.
    whole: bool,
    /// Populated or zapped in part since it was mapped: on small pages (`Map::small_pages`)
    /// until it is mapped afresh.
    split: bool,
}

impl Chunk {
    fn all_zapped(&self) -> bool {
        self.slots.iter().all(|s| *s == Slot::Zapped)
    }

    /// Marks it resident in part from now on.
    fn split(&mut self) {
        if !self.split {
            self.map.small_pages();
            self.split = true;
        }
        self.whole = false;
    }

    fn tail(&self) -> usize {
        CHUNK - self.slots.len() * self.slot_len
    }

    /// Gives the chunk slots of `len` bytes (it must be wholly zapped).
    fn assign(&mut self, len: usize) {
        debug_assert!(self.live == 0 && self.slack == 0 && self.all_zapped());
        self.slot_len = len;
        self.slots = vec![Slot::Zapped; CHUNK / len];
        self.whole = false;
    }
}

/// What the arena needs from the budget (budget.rs implements it; tests fake it).
pub(crate) trait Charge {
    /// Charges `n` bytes if the limit allows, without shedding slack (the caller holds an
    /// arena's lock).
    fn reserve(&self, n: usize) -> bool;
    fn force(&self, n: usize);
    fn refund(&self, n: usize);
}

/// One shard's chunks (module doc).
#[derive(Default)]
pub(crate) struct Arena {
    /// Which shard's (it is written into every buffer, for the way back).
    shard: u16,
    chunks: Vec<Chunk>,
    /// Sum of the chunks' slack.
    slack: usize,
}

/// Counters for `stats`.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct ArenaStats {
    pub chunks: usize,
    pub slack: usize,
    pub live_slots: usize,
    pub dirty_slots: usize,
}

impl Arena {
    pub fn new(shard: u16) -> Arena {
        Arena { shard, ..Default::default() }
    }

    pub fn slack(&self) -> usize {
        self.slack
    }

    pub fn stats(&self) -> ArenaStats {
        let mut st = ArenaStats { chunks: self.chunks.len(), slack: self.slack, ..Default::default() };
        for c in &self.chunks {
            st.live_slots += c.live;
            st.dirty_slots += c.slots.iter().filter(|s| **s == Slot::Dirty).count();
        }
        st
    }

    /// An uncharged buffer of `len` bytes (`fits(len)`): a Clean slot, else a Zapped one
    /// (populated), in a chunk of that slot length, or in a wholly zapped chunk, or a new one.
    /// None if no chunk can be mapped.
    pub fn take(&mut self, charge: &dyn Charge, len: usize) -> Option<SegBuf> {
        self.take_outside(charge, len, usize::MAX)
    }

    /// `take`, in any chunk but `skip` (compaction's victim).
    pub fn take_outside(&mut self, charge: &dyn Charge, len: usize, skip: usize) -> Option<SegBuf> {
        debug_assert!(fits(len));
        self.adopt_orphans(charge);
        // A Clean slot, from the chunk with the most live items: the emptier chunks are left
        // to drain, so that they can be renewed whole.
        let clean = (self.chunks.iter().enumerate())
            .filter(|(i, c)| *i != skip && c.slot_len == len && c.slots.contains(&Slot::Clean))
            .max_by_key(|(_, c)| c.live)
            .map(|(i, _)| i);
        if let Some(i) = clean {
            let c = &mut self.chunks[i];
            let k = c.slots.iter().position(|s| *s == Slot::Clean)?;
            c.slack -= len;
            self.slack -= len;
            charge.refund(len);
            return Some(self.hand_out(i, k));
        }
        // A Zapped slot in a chunk of this length that is in use, else a wholly zapped chunk.
        let find = |f: &dyn Fn(&Chunk) -> bool| (self.chunks.iter().enumerate()).position(|(i, c)| i != skip && f(c));
        let partial = find(&|c| c.slot_len == len && !c.all_zapped() && c.slots.contains(&Slot::Zapped));
        let i = match partial {
            Some(i) => i,
            None => match find(&|c| c.slot_len == len && c.all_zapped()) {
                Some(i) => i,
                None => match find(&Chunk::all_zapped) {
                    Some(i) => {
                        self.chunks[i].assign(len);
                        i
                    }
                    None => {
                        let mut c = Chunk {
                            map: Arc::new(Map::new()?),
                            slot_len: 0,
                            slots: Vec::new(),
                            live: 0,
                            slack: 0,
                            whole: false,
                            split: false,
                        };
                        c.assign(len);
                        self.chunks.push(c);
                        self.chunks.len() - 1
                    }
                },
            },
        };
        let c = &mut self.chunks[i];
        let k = c.slots.iter().position(|s| *s == Slot::Zapped)?;
        // A wholly zapped chunk comes back as one huge page if the budget has room for the
        // rest of it (as slack): one fault and one zeroing of 2 MiB instead of per 4 KiB. One
        // that was split is mapped afresh first (its small pages' tables would stay).
        if c.all_zapped() && charge.reserve(CHUNK - len) {
            if c.split {
                let Some(map) = Map::new() else {
                    charge.refund(CHUNK - len);
                    return None;
                };
                c.map = Arc::new(map);
                c.split = false;
            }
            c.map.populate(0, CHUNK);
            for s in c.slots.iter_mut() {
                *s = Slot::Clean;
            }
            c.whole = true;
            c.slack = CHUNK - len;
            self.slack += CHUNK - len;
        } else {
            c.split();
            c.map.populate(k * len, len);
        }
        Some(self.hand_out(i, k))
    }

    fn hand_out(&mut self, i: usize, k: usize) -> SegBuf {
        let shard = self.shard;
        let c = &mut self.chunks[i];
        c.slots[k] = Slot::Live;
        c.live += 1;
        let len = c.slot_len;
        SegBuf::Slot {
            ptr: NonNull::new(c.map.at(k * len)).expect("a mapping is never at 0"),
            len,
            lent: AtomicU8::new(crate::buf::PAGES_NORMAL),
            chunk: i as u32,
            slot: k as u16,
            shard,
            map: c.map.clone(),
        }
    }

    /// Bytes of the Live slots.
    pub fn live_bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.live * c.slot_len).sum()
    }

    /// The chunk of `len`-byte slots worth emptying by moving its items elsewhere, if any
    /// (module doc, "Compaction"): while dead space is over half the live bytes, the chunk
    /// with a Dirty slot and at most half its slots live that has the fewest. `room`: the
    /// budget can take a new chunk for the moves; without it, only if Clean slots elsewhere
    /// can take them all.
    pub fn victim(&self, len: usize, room: bool) -> Option<usize> {
        if self.slack <= self.live_bytes() / SLACK_SHARE {
            return None;
        }
        let (i, c) = (self.chunks.iter().enumerate())
            .filter(|(_, c)| c.slot_len == len && c.live > 0 && c.live * VICTIM_LIVE <= c.slots.len() && c.slots.contains(&Slot::Dirty))
            .min_by_key(|(_, c)| c.live)?;
        let clean = |(j, d): (usize, &Chunk)| if j == i || d.slot_len != len { 0 } else { d.slots.iter().filter(|s| **s == Slot::Clean).count() };
        (room || self.chunks.iter().enumerate().map(clean).sum::<usize>() >= c.live).then_some(i)
    }

    /// A slot buffer comes back: Dirty if its pages were lent, else Clean. `charged`: the
    /// buffer is charged to the budget (an item's), and its charge becomes the arena's;
    /// else the arena charges it. A chunk left with no live item and a Dirty slot is renewed
    /// whole. Returns false (and does nothing) for a buffer not from this arena.
    pub fn give(&mut self, charge: &dyn Charge, buf: SegBuf, charged: bool) -> bool {
        let SegBuf::Slot { len, ref lent, chunk, slot, ref map, .. } = buf else {
            return false;
        };
        let (i, k) = (chunk as usize, slot as usize);
        let Some(c) = self.chunks.get_mut(i) else {
            return false;
        };
        if !Arc::ptr_eq(&c.map, map) || c.slot_len != len || c.slots.get(k) != Some(&Slot::Live) {
            return false;
        }
        let dirty = lent.swap(crate::buf::PAGES_RETURNED, Ordering::Relaxed) != crate::buf::PAGES_NORMAL;
        if !charged {
            charge.force(len);
        }
        self.retire(charge, i, k, dirty);
        true
    }

    /// Live slot `k` of chunk `i` holds nothing any more (its charge is the arena's now).
    fn retire(&mut self, charge: &dyn Charge, i: usize, k: usize, dirty: bool) {
        let c = &mut self.chunks[i];
        debug_assert_eq!(c.slots[k], Slot::Live);
        c.slots[k] = if dirty { Slot::Dirty } else { Slot::Clean };
        c.live -= 1;
        c.slack += c.slot_len;
        self.slack += c.slot_len;
        if c.live == 0 && c.slots.contains(&Slot::Dirty) {
            c.map.zap(0, CHUNK);
            c.slots.fill(Slot::Zapped);
            c.whole = false;
            charge.refund(c.slack);
            self.slack -= c.slack;
            c.slack = 0;
        }
    }

    /// Takes back slots whose buffers were dropped instead of given back (`Map::orphan`):
    /// uncharged, and maybe lent, so charged now and Dirty.
    fn adopt_orphans(&mut self, charge: &dyn Charge) {
        for i in 0..self.chunks.len() {
            let found: Vec<usize> = self.chunks[i].map.take_orphans().collect();
            for k in found {
                if self.chunks[i].slots.get(k) == Some(&Slot::Live) {
                    charge.force(self.chunks[i].slot_len);
                    self.retire(charge, i, k, true);
                }
            }
        }
    }

    /// Gives back up to `want` bytes of slack (at least one slot's worth if there is any):
    /// chunks with no live item first (whole), then single slots (splitting their huge
    /// page). Returns the bytes refunded.
    pub fn shed(&mut self, charge: &dyn Charge, want: usize) -> usize {
        self.adopt_orphans(charge);
        let mut freed = 0;
        for c in self.chunks.iter_mut().filter(|c| c.live == 0 && c.slack > 0) {
            if freed >= want {
                break;
            }
            c.map.zap(0, CHUNK);
            c.slots.fill(Slot::Zapped);
            c.whole = false;
            freed += c.slack;
            c.slack = 0;
        }
        for c in self.chunks.iter_mut().filter(|c| c.slack > 0) {
            if freed >= want {
                break;
            }
            if c.whole {
                let tail = c.tail();
                if tail > 0 {
                    c.map.zap(CHUNK - tail, tail);
                    c.slack -= tail;
                    freed += tail;
                }
            }
            c.split();
            for k in 0..c.slots.len() {
                if freed >= want {
                    break;
                }
                if matches!(c.slots[k], Slot::Clean | Slot::Dirty) {
                    c.map.zap(k * c.slot_len, c.slot_len);
                    c.slots[k] = Slot::Zapped;
                    c.slack -= c.slot_len;
                    freed += c.slot_len;
                }
            }
        }
        self.slack -= freed;
        charge.refund(freed);
        freed
    }
}

#[cfg(test)]
mod tests {
    use core::cell::Cell;

    use super::*;

    /// A budget of `limit` bytes.
    struct Fake {
        used: Cell<usize>,
        limit: usize,
    }
    impl Charge for Fake {
        fn reserve(&self, n: usize) -> bool {
            let ok = self.used.get() + n <= self.limit;
            if ok {
                self.used.set(self.used.get() + n);
            }
            ok
        }
        fn force(&self, n: usize) {
            self.used.set(self.used.get() + n);
        }
        fn refund(&self, n: usize) {
            self.used.set(self.used.get() - n);
        }
    }

    const LEN: usize = 25 * PAGE;

    fn lend(b: &SegBuf) {
        b.lendable().expect("a slot can be lent").lend();
    }

    /// Resident pages of `[p, p + len)` (mincore).
    fn resident(p: *const u8, len: usize) -> usize {
        let mut v = vec![0u8; len.div_ceil(PAGE)];
        // SAFETY: the range is page-aligned memory of a live chunk; v has a byte per page.
        assert_eq!(unsafe { libc::mincore(p as *mut libc::c_void, len, v.as_mut_ptr()) }, 0);
        v.iter().filter(|&&x| x & 1 == 1).count()
    }

    #[test]
    fn which_lengths_come_from_chunks() {
        assert!(fits(25 * PAGE) && fits(PAGE) && fits(CHUNK / 4));
        assert!(!fits(CHUNK / 4 + PAGE), "fewer than 4 slots");
        assert!(!fits(86 * PAGE), "5 slots leave 82 of 512 pages, over an eighth");
        assert!(!fits(1000) && !fits(0));
    }

    /// The first take populates the chunk whole (the rest is charged as slack); freed slots
    /// that were never lent are handed out again at once, and every charge balances.
    #[test]
    fn a_chunk_is_charged_whole_and_clean_slots_are_reused() {
        let f = Fake { used: Cell::new(0), limit: 64 << 20 };
        let mut a = Arena::default();
        let mut b = a.take(&f, LEN).unwrap();
        assert_eq!((b.len(), b.as_ptr() as usize % CHUNK), (LEN, 0));
        assert!(b.iter().all(|&x| x == 0));
        assert_eq!(f.used.get(), CHUNK - LEN, "the rest of the chunk is slack; the caller charges the slot");
        assert_eq!(resident(b.as_ptr(), CHUNK), CHUNK / PAGE, "populated whole");
        b.fill(7);
        let addr = b.as_ptr() as usize;
        f.force(LEN); // the item's charge
        assert!(a.give(&f, b, true));
        assert_eq!((f.used.get(), a.slack()), (CHUNK, CHUNK));
        // Never lent: the same slot comes back as it was (the chunk has no Dirty slot).
        let c = a.take(&f, LEN).unwrap();
        assert_eq!(c.as_ptr() as usize, addr);
        assert_eq!(f.used.get(), CHUNK - LEN);
        assert!(a.give(&f, c, false));
        assert_eq!(f.used.get(), CHUNK, "an uncharged buffer is charged on its way back");
        // A buffer of another arena is refused.
        let mut other = Arena::default();
        let x = other.take(&f, LEN).unwrap();
        assert!(!a.give(&f, x, false));
    }

    /// The hazard: a lent slot must never be handed out again while its chunk has live items,
    /// and once the last one goes the chunk is renewed whole: the kernel keeps the bytes it
    /// was lent (a pipe stands in for a socket) and the slots read as zeros again.
    #[test]
    fn lent_slots_wait_for_their_chunk_to_empty_and_the_kernel_keeps_its_bytes() {
        let f = Fake { used: Cell::new(0), limit: 64 << 20 };
        let mut a = Arena::default();
        let n = CHUNK / LEN;
        let mut bufs: Vec<SegBuf> = (0..n).map(|_| a.take(&f, LEN).unwrap()).collect();
        for b in &mut bufs {
            b.fill(b'a');
        }
        let mut fds = [0; 2];
        // SAFETY: fds has room for two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: our own pipe.
        unsafe { libc::fcntl(fds[1], libc::F_SETPIPE_SZ, 1 << 20) };
        lend(&bufs[0]);
        let iov = libc::iovec { iov_base: bufs[0].as_ptr() as *mut libc::c_void, iov_len: LEN };
        // SAFETY: iov describes a live buffer; the pipe references its pages.
        assert_eq!(unsafe { libc::vmsplice(fds[1], &iov, 1, 0) }, LEN as isize);
        let lent_at = bufs[0].as_ptr() as usize;
        assert!(a.give(&f, bufs.remove(0), false));
        // The chunk is full apart from the Dirty slot: a new take goes to a new chunk.
        let other = a.take(&f, LEN).unwrap();
        assert_ne!(other.as_ptr() as usize & !(CHUNK - 1), lent_at & !(CHUNK - 1));
        assert!(a.give(&f, other, false));
        assert_eq!(a.stats().dirty_slots, 1);
        // The last live item of the first chunk goes: renewed whole, nothing resident.
        for b in bufs.drain(..) {
            assert!(a.give(&f, b, false));
        }
        assert_eq!(a.stats().dirty_slots, 0);
        assert_eq!(resident(lent_at as *const u8, CHUNK), 0);
        // Its slots come back as zeros (the other chunk's Clean slot first: it has no Dirty).
        let mut again: Vec<SegBuf> = (0..n + 1).map(|_| a.take(&f, LEN).unwrap()).collect();
        assert!(again.iter().any(|b| b.as_ptr() as usize == lent_at));
        for b in &mut again {
            if b.as_ptr() as usize == lent_at {
                assert!(b.iter().all(|&x| x == 0), "a renewed slot reads as fresh zeros");
                b.fill(b'b');
            }
        }
        let mut got = vec![0u8; LEN];
        // SAFETY: got is a live buffer of LEN bytes.
        assert_eq!(unsafe { libc::read(fds[0], got.as_mut_ptr().cast(), LEN) }, LEN as isize);
        assert!(got.iter().all(|&x| x == b'a'), "the kernel's bytes changed under it");
        // SAFETY: our own descriptors, closed once.
        unsafe { (libc::close(fds[0]), libc::close(fds[1])) };
    }

    /// Shedding gives slack back to the budget, chunks without live items first, then single
    /// slots; it never touches a live slot, and the charges balance to the live items alone.
    #[test]
    fn shedding_refunds_slack_and_spares_live_items() {
        let f = Fake { used: Cell::new(0), limit: 64 << 20 };
        let mut a = Arena::default();
        let n = CHUNK / LEN;
        let mut bufs: Vec<SegBuf> = (0..2 * n).map(|_| a.take(&f, LEN).unwrap()).collect();
        f.force(2 * n * LEN); // the items' charges
        for (i, b) in bufs.iter_mut().enumerate() {
            b.fill(i as u8);
        }
        // The second chunk empties (never lent, so it stays Clean); one slot of the first goes.
        for b in bufs.drain(n..) {
            assert!(a.give(&f, b, true));
        }
        assert!(a.give(&f, bufs.pop().unwrap(), true));
        let live = (n - 1) * LEN;
        assert_eq!(f.used.get(), live + a.slack());
        assert_eq!(a.shed(&f, 1), CHUNK, "the empty chunk goes whole first");
        let freed = a.shed(&f, usize::MAX);
        assert_eq!(freed, LEN + (CHUNK - n * LEN), "then the free slot and the tail");
        assert_eq!((a.slack(), f.used.get()), (0, live));
        for (i, b) in bufs.iter().enumerate() {
            assert!(b.iter().all(|&x| x == i as u8), "a live item was touched");
        }
        assert_eq!(resident(bufs[0].as_ptr(), CHUNK), (n - 1) * LEN / PAGE);
        // With no room for a whole chunk, a take populates its slot alone.
        let tight = Fake { used: Cell::new(0), limit: LEN };
        let mut b = Arena::default();
        let x = b.take(&tight, LEN).unwrap();
        assert_eq!((tight.used.get(), b.slack()), (0, 0));
        assert_eq!(resident(x.as_ptr(), CHUNK), LEN / PAGE);
        // A wholly zapped chunk takes another slot length.
        assert!(b.give(&tight, x, false));
        assert_eq!(b.shed(&tight, usize::MAX), LEN);
        let y = b.take(&tight, 2 * LEN).unwrap();
        assert_eq!((y.len(), b.stats().chunks), (2 * LEN, 1));
    }
}
