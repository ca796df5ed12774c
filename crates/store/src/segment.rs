//! Segments of one shard: buffers, their metadata, the FIFO they are evicted in, TTL groups.
//!
//! Owns segment ids, buffers and per-segment counters. It does not read items (item.rs does)
//! or know the index (shard.rs ties them together).
//!
//! ```text
//! metas[id]  (id 0 unused: an index slot never has segment 0)
//!   Free ----open----> Live ----retire(expired/flushed, items > 0)----> Dead ---last ref gone--> Free
//!                       |  \---retire(items == 0, or after eviction)------------------------> Free
//!                       \--reuse (eviction recycles the buffer in place: new seq, empty)
//!
//! Two FIFOs of Live segments, oldest first (evict.rs picks which one gives up its head):
//!   Main:  head -> s7 -> s2 -> s9 -> tail
//!   Small: head -> s4 -> s8 -> tail          (S3-FIFO's probationary pool; empty under fifo)
//! A walk over all of them (`head`, `next_of`) goes through Main, then Small.
//! TTL groups: ttl_bucket(exp - now) picks one of 130 groups; each group appends to its own
//! "active" segment, so a segment holds items of similar remaining TTL and its max_exp passes
//! soon after most of its items die; then the whole segment is dropped without being read.
//! ```
//!
//! A Dead segment has no buffer any more, but index slots may still point at it: its id stays
//! reserved (so a slot can never be mistaken for an item in a recycled segment) until lookups or
//! the maintenance sweep have dropped every such slot (`items` counts them).

use crate::buf::SegBuf;
use crate::Time;

/// `max_exp` of a segment holding an item that never expires.
pub(crate) const NEVER: Time = Time::MAX;

/// 0: exp == 0 (never), 1: already dead, then 4 groups per power of two of the remaining TTL.
pub(crate) const TTL_BUCKETS: usize = 2 + 32 * 4;

/// The TTL group for an item: items of similar remaining lifetime share segments. Widths grow
/// with the TTL (a quarter octave), so a segment's items die within ~25% of each other.
pub(crate) fn ttl_bucket(exp: Time, now: Time) -> u8 {
    if exp == 0 {
        return 0;
    }
    if exp <= now {
        return 1;
    }
    let ttl = exp - now;
    let l = 31 - ttl.leading_zeros();
    let sub = if l >= 2 {
        (ttl >> (l - 2)) & 3
    } else {
        ttl & 3
    };
    (2 + l * 4 + sub) as u8
}

/// exp as an upper bound on lifetime (0 = never becomes NEVER).
#[inline]
pub(crate) fn exp_bound(exp: Time) -> Time {
    if exp == 0 {
        NEVER
    } else {
        exp
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum DeadReason {
    Expired,
    Flushed,
}

/// Which FIFO a Live segment is in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Queue {
    /// New items under S3-FIFO: they leave at the head unless read there.
    Small = 0,
    /// Items that proved themselves (read in Small, or back from the ghost), and every item
    /// under the fifo policy.
    Main = 1,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SegState {
    Free,
    Live,
    Dead(DeadReason),
}

pub(crate) struct SegMeta {
    /// Empty unless Live.
    pub data: SegBuf,
    /// CAS generation: new every time the segment is (re)opened, never reused in this shard.
    pub seq: u64,
    /// Next free byte.
    pub write: usize,
    /// Index slots pointing here: the live items while Live, leftover references while Dead.
    pub items: u32,
    pub live_bytes: usize,
    /// Largest exp_bound of the items written or touched here; 0 while empty.
    pub max_exp: Time,
    pub state: SegState,
    pub ttl: u8,
    /// Currently the append target of its TTL group.
    pub active: bool,
    /// Holds one large item (`Geometry::large_min`), in a buffer of whole pages.
    pub large: bool,
    /// The FIFO it is in while Live.
    pub queue: Queue,
    /// When the segment was (re)opened: every item in it was written at or after this time.
    /// Items carry no time of their own, so this is the store's only "written at" (metadump).
    pub opened: Time,
    /// Walked by the flash tier's age pass (`Shard::age_out`) since it was opened or reused:
    /// its large values went to flash and it takes no more writes, so it is not walked again.
    pub aged: bool,
    prev: u32,
    next: u32,
}

impl SegMeta {
    fn empty() -> SegMeta {
        SegMeta {
            data: SegBuf::default(),
            seq: 0,
            write: 0,
            items: 0,
            live_bytes: 0,
            max_exp: 0,
            state: SegState::Free,
            ttl: 0,
            active: false,
            large: false,
            queue: Queue::Main,
            opened: 0,
            aged: false,
            prev: 0,
            next: 0,
        }
    }
    #[inline]
    pub fn room(&self) -> usize {
        self.data.len() - self.write
    }
    /// Every item here has expired (an empty segment has max_exp 0 and is not "expired").
    #[inline]
    pub fn expired(&self, now: Time) -> bool {
        self.max_exp != 0 && self.max_exp <= now
    }
}

pub(crate) struct SegTable {
    pub metas: Vec<SegMeta>,
    free_ids: Vec<u32>,
    /// (head, tail) of each FIFO, by `Queue`.
    ends: [(u32, u32); 2],
    next_seq: u64,
    /// Bytes of all buffers currently held.
    pub buffer_bytes: usize,
    /// Bytes of the buffers in the Small FIFO.
    pub small_bytes: usize,
    pub regular_segments: usize,
    pub large_segments: usize,
    /// Bytes of the large segments' buffers (both FIFOs).
    pub large_bytes: usize,
    /// Index slots still pointing at Dead segments (the sweep's work list size).
    pub dead_refs: usize,
}

impl SegTable {
    pub fn new() -> SegTable {
        SegTable {
            metas: vec![SegMeta::empty()],
            free_ids: Vec::new(),
            ends: [(0, 0); 2],
            next_seq: 1,
            buffer_bytes: 0,
            small_bytes: 0,
            regular_segments: 0,
            large_segments: 0,
            large_bytes: 0,
            dead_refs: 0,
        }
    }

    /// Memory held by the metadata itself (counted in the budget like the index).
    pub fn meta_bytes(&self) -> usize {
        self.metas.capacity() * core::mem::size_of::<SegMeta>() + self.free_ids.capacity() * 4
    }

    /// The sequence number the next opened segment gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Segments opened from now on get at least `seq` (a restored store's CAS values must be
    /// above the ones handed out before the restart).
    pub fn raise_seq(&mut self, seq: u64) {
        self.next_seq = self.next_seq.max(seq);
    }

    /// The first Live segment of a walk over all of them (Main's oldest, or Small's if Main is
    /// empty), 0 if none.
    pub fn head(&self) -> u32 {
        match self.ends[Queue::Main as usize].0 {
            0 => self.ends[Queue::Small as usize].0,
            h => h,
        }
    }

    /// The oldest Live segment of FIFO `q`, 0 if it is empty.
    #[inline]
    pub fn head_of(&self, q: Queue) -> u32 {
        self.ends[q as usize].0
    }

    /// The Live segment after `id` in the walk (its FIFO, then from Main's tail on to Small's
    /// head), 0 at the end.
    #[inline]
    pub fn next_of(&self, id: u32) -> u32 {
        let m = &self.metas[id as usize];
        if m.next == 0 && m.queue == Queue::Main {
            return self.ends[Queue::Small as usize].0;
        }
        m.next
    }

    /// Ids of Live segments in walk order (Main head first, then Small).
    pub fn live_ids(&self) -> Vec<u32> {
        let mut v = Vec::new();
        let mut id = self.head();
        while id != 0 {
            v.push(id);
            id = self.next_of(id);
        }
        v
    }

    /// A free id, or None when the 24-bit id space is exhausted.
    pub fn alloc_id(&mut self) -> Option<u32> {
        if let Some(id) = self.free_ids.pop() {
            return Some(id);
        }
        let id = self.metas.len();
        if id >= crate::index::slot::FLASH_BASE as usize {
            return None;
        }
        if self.metas.len() == self.metas.capacity() {
            let step = (self.metas.len() / 4).max(8);
            self.metas.reserve_exact(step);
        }
        self.metas.push(SegMeta::empty());
        Some(id as u32)
    }

    /// Gives back an id obtained from `alloc_id` that was never opened.
    #[cfg(test)]
    pub fn unalloc_id(&mut self, id: u32) {
        debug_assert_eq!(self.metas[id as usize].state, SegState::Free);
        self.push_free(id);
    }

    fn push_free(&mut self, id: u32) {
        if self.free_ids.len() == self.free_ids.capacity() {
            let step = (self.free_ids.len() / 4).max(8);
            self.free_ids.reserve_exact(step);
        }
        self.free_ids.push(id);
    }

    /// Makes `id` Live with `data` and appends it to FIFO `q`.
    pub fn open(&mut self, id: u32, data: SegBuf, large: bool, ttl: u8, q: Queue, now: Time) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.buffer_bytes += data.len();
        if large {
            self.large_segments += 1;
            self.large_bytes += data.len();
        } else {
            self.regular_segments += 1;
        }
        let m = &mut self.metas[id as usize];
        debug_assert_eq!(m.state, SegState::Free);
        *m = SegMeta {
            data,
            seq,
            ttl,
            large,
            queue: q,
            opened: now,
            state: SegState::Live,
            ..SegMeta::empty()
        };
        self.push_tail(id);
    }

    /// Eviction emptied a regular segment: keep its buffer, start over as a new segment
    /// (new seq, so new CAS values) at the tail of FIFO `q`.
    pub fn reuse(&mut self, id: u32, ttl: u8, q: Queue, now: Time) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.unlink(id);
        self.metas[id as usize].queue = q;
        let m = &mut self.metas[id as usize];
        debug_assert!(m.state == SegState::Live && m.items == 0 && !m.large);
        m.seq = seq;
        m.write = 0;
        m.live_bytes = 0;
        m.max_exp = 0;
        m.ttl = ttl;
        m.active = false;
        m.opened = now;
        m.aged = false;
        self.push_tail(id);
    }

    /// Drops a Live segment's buffer. With no index slots left the id is free at once,
    /// otherwise it stays Dead until they are gone. Returns the buffer (for `Budget::release`).
    #[must_use]
    pub fn retire(&mut self, id: u32, reason: DeadReason) -> SegBuf {
        self.unlink(id);
        let m = &mut self.metas[id as usize];
        debug_assert_eq!(m.state, SegState::Live);
        let data = core::mem::take(&mut m.data);
        let freed = data.len();
        if m.large {
            self.large_segments -= 1;
            self.large_bytes -= freed;
        } else {
            self.regular_segments -= 1;
        }
        self.buffer_bytes -= freed;
        m.write = 0;
        m.live_bytes = 0;
        m.max_exp = 0;
        m.active = false;
        if m.items == 0 {
            m.state = SegState::Free;
            self.push_free(id);
        } else {
            m.state = SegState::Dead(reason);
            self.dead_refs += m.items as usize;
        }
        data
    }

    /// An index slot pointing at a Dead segment was dropped.
    pub fn release_dead_ref(&mut self, id: u32) {
        let m = &mut self.metas[id as usize];
        debug_assert!(matches!(m.state, SegState::Dead(_)) && m.items > 0);
        m.items -= 1;
        self.dead_refs -= 1;
        if m.items == 0 {
            m.state = SegState::Free;
            self.push_free(id);
        }
    }

    /// To the tail of FIFO `q` (its own or the other).
    pub fn move_to_tail(&mut self, id: u32, q: Queue) {
        self.unlink(id);
        self.metas[id as usize].queue = q;
        self.push_tail(id);
    }

    fn push_tail(&mut self, id: u32) {
        let (q, len) = {
            let m = &self.metas[id as usize];
            (m.queue as usize, m.data.len())
        };
        if q == Queue::Small as usize {
            self.small_bytes += len;
        }
        let t = self.ends[q].1;
        {
            let m = &mut self.metas[id as usize];
            m.prev = t;
            m.next = 0;
        }
        if t == 0 {
            self.ends[q].0 = id;
        } else {
            self.metas[t as usize].next = id;
        }
        self.ends[q].1 = id;
    }

    fn unlink(&mut self, id: u32) {
        let (p, n, q, len) = {
            let m = &self.metas[id as usize];
            (m.prev, m.next, m.queue as usize, m.data.len())
        };
        if q == Queue::Small as usize {
            self.small_bytes -= len;
        }
        if p == 0 {
            self.ends[q].0 = n;
        } else {
            self.metas[p as usize].next = n;
        }
        if n == 0 {
            self.ends[q].1 = p;
        } else {
            self.metas[n as usize].prev = p;
        }
        let m = &mut self.metas[id as usize];
        m.prev = 0;
        m.next = 0;
    }

    /// Two distinct segments' buffers, one to read and one to write (copying between segments).
    pub fn pair_mut(&mut self, src: u32, dst: u32) -> (&[u8], &mut [u8]) {
        assert_ne!(src, dst);
        let (s, d) = (src as usize, dst as usize);
        if s < d {
            let (a, b) = self.metas.split_at_mut(d);
            (&a[s].data, &mut b[0].data[..])
        } else {
            let (a, b) = self.metas.split_at_mut(s);
            (&b[0].data, &mut a[d].data[..])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_buckets_are_monotonic_and_bounded() {
        assert_eq!(ttl_bucket(0, 100), 0);
        assert_eq!(ttl_bucket(100, 100), 1);
        assert_eq!(ttl_bucket(5, 100), 1);
        let mut last = 1;
        for ttl in 1..100_000u32 {
            let b = ttl_bucket(1000 + ttl, 1000);
            assert!(b >= last, "ttl {ttl}");
            last = b;
        }
        assert!((ttl_bucket(u32::MAX, 0) as usize) < TTL_BUCKETS);
        // Neighbouring TTLs mostly share a group; distant ones don't.
        assert_eq!(ttl_bucket(3600 + 10, 10), ttl_bucket(3601 + 10, 10));
        assert_ne!(ttl_bucket(60, 0), ttl_bucket(3600, 0));
    }

    #[test]
    fn fifo_order_and_lifecycle() {
        let mut t = SegTable::new();
        let ids: Vec<u32> = (0..4).map(|_| t.alloc_id().unwrap()).collect();
        for &id in &ids {
            t.open(id, SegBuf::zeroed(64), false, 0, Queue::Main, 0);
        }
        assert_eq!(t.live_ids(), ids);
        assert_eq!(t.buffer_bytes, 256);
        t.move_to_tail(ids[0], Queue::Main);
        assert_eq!(t.live_ids(), vec![ids[1], ids[2], ids[3], ids[0]]);
        // retire with references left -> Dead, id reserved
        t.metas[ids[1] as usize].items = 2;
        assert_eq!(t.retire(ids[1], DeadReason::Expired).len(), 64);
        assert_eq!(
            t.metas[ids[1] as usize].state,
            SegState::Dead(DeadReason::Expired)
        );
        assert_eq!(t.dead_refs, 2);
        let fresh = t.alloc_id().unwrap();
        assert!(!ids.contains(&fresh));
        t.unalloc_id(fresh);
        t.release_dead_ref(ids[1]);
        t.release_dead_ref(ids[1]);
        assert_eq!(t.metas[ids[1] as usize].state, SegState::Free);
        assert_eq!(t.dead_refs, 0);
        // retire with nothing left -> Free at once
        let _ = t.retire(ids[2], DeadReason::Flushed);
        assert_eq!(t.metas[ids[2] as usize].state, SegState::Free);
        assert_eq!(t.live_ids(), vec![ids[3], ids[0]]);
        let old_seq = t.metas[ids[3] as usize].seq;
        t.reuse(ids[3], 5, Queue::Main, 0);
        assert!(t.metas[ids[3] as usize].seq > old_seq);
        assert_eq!(t.live_ids(), vec![ids[0], ids[3]]);
        assert_eq!(t.buffer_bytes, 128);
    }

    #[test]
    fn large_bytes_count_large_buffers_in_either_fifo() {
        let mut t = SegTable::new();
        let ids: Vec<u32> = (0..3).map(|_| t.alloc_id().unwrap()).collect();
        t.open(ids[0], SegBuf::zeroed(64), false, 0, Queue::Small, 0);
        t.open(ids[1], SegBuf::zeroed(4096), true, 0, Queue::Small, 0);
        t.open(ids[2], SegBuf::zeroed(8192), true, 0, Queue::Main, 0);
        assert_eq!((t.large_bytes, t.buffer_bytes), (12288, 12352));
        t.move_to_tail(ids[1], Queue::Main);
        assert_eq!(t.large_bytes, 12288);
        let _ = t.retire(ids[2], DeadReason::Expired);
        let _ = t.retire(ids[0], DeadReason::Expired);
        assert_eq!((t.large_bytes, t.buffer_bytes), (4096, 4096));
    }

    #[test]
    fn two_fifos_walk_main_then_small() {
        let mut t = SegTable::new();
        let ids: Vec<u32> = (0..4).map(|_| t.alloc_id().unwrap()).collect();
        t.open(ids[0], SegBuf::zeroed(64), false, 0, Queue::Small, 0);
        assert_eq!(
            (t.head(), t.head_of(Queue::Main), t.small_bytes),
            (ids[0], 0, 64)
        );
        t.open(ids[1], SegBuf::zeroed(64), false, 0, Queue::Main, 0);
        t.open(ids[2], SegBuf::zeroed(64), false, 0, Queue::Small, 0);
        t.open(ids[3], SegBuf::zeroed(64), false, 0, Queue::Main, 0);
        assert_eq!(t.live_ids(), vec![ids[1], ids[3], ids[0], ids[2]]);
        assert_eq!(
            (
                t.head_of(Queue::Small),
                t.head_of(Queue::Main),
                t.small_bytes
            ),
            (ids[0], ids[1], 128)
        );
        // Promotion: the Small head moves to Main's tail.
        t.move_to_tail(ids[0], Queue::Main);
        assert_eq!(t.live_ids(), vec![ids[1], ids[3], ids[0], ids[2]]);
        assert_eq!((t.head_of(Queue::Small), t.small_bytes), (ids[2], 64));
        let _ = t.retire(ids[2], DeadReason::Expired);
        assert_eq!((t.head_of(Queue::Small), t.small_bytes), (0, 0));
        t.reuse(ids[1], 0, Queue::Small, 0);
        assert_eq!(t.live_ids(), vec![ids[3], ids[0], ids[1]]);
        assert_eq!(t.small_bytes, 64);
    }
}
