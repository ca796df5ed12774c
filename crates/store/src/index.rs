//! Hash index of one shard: key hash -> (segment, offset), plus a small access frequency.
//!
//! Owns the bucket arrays and nothing else; it never reads items. Where it needs a key (to split a
//! bucket) or to know whether a slot is still valid, the caller passes a closure.
//!
//! ```text
//! slot (u64), 0 = empty
//!  63  62           48 47 46  44 43                     20 19                  0
//! +---+---------------+--+------+-------------------------+---------------------+
//! | 0 |   tag (15)    |F | freq |   segment id (24)       |   offset (20)       |
//! +---+---------------+--+------+-------------------------+---------------------+
//! | 1 |             index of the next overflow bucket (63)                      |  link
//! +---+-------------------------------------------------------------------------+
//! F: fetched since written (for *_unfetched stats)   freq: reads, saturating at 7
//! segment id 0 is never used, so an item slot is never 0. The top 16 segment ids name
//! flash entries instead (`slot::FLASH_BASE`: an item whose value is on flash).
//!
//! bucket = [slot; 8] (one cache line); slot 7 holds a link when the chain continues
//!
//! primary buckets (linear hashing)            overflow arena
//! [0][1]...[split]...[2^level-1][2^level]...   [o0][o1]...   (free ones form a list through slot 0)
//!         ^ next to split; buckets below it and above 2^level use level+1 hash bits
//! ```
//!
//! Why linear hashing: the table grows one bucket at a time (split the bucket at `split`, which
//! touches ~8 entries), so there is never a stop-the-world rehash, and the load stays near the
//! target instead of oscillating between x and 2x as with doubling. Chained overflow buckets mean
//! an insert never fails for lack of a slot. The whole thing is counted in the memory budget.

/// Slot field accessors. Kept as plain functions on u64 so a bucket stays a `[u64; 8]`.
pub(crate) mod slot {
    pub const LINK: u64 = 1 << 63;
    const TAG_SHIFT: u32 = 48;
    const TAG_MASK: u64 = 0x7fff;
    const FETCHED: u64 = 1 << 47;
    const FREQ_SHIFT: u32 = 44;
    const FREQ_MASK: u64 = 0x7;
    const SEG_SHIFT: u32 = 20;
    pub const SEG_MAX: u32 = (1 << 24) - 1;
    pub const OFF_MAX: u32 = (1 << 20) - 1;

    /// The tag of a key hash: bits 40..55, disjoint from the shard bits (56..63) and from the
    /// bucket bits (low bits, < 2^40 buckets).
    #[inline]
    pub fn tag_of_hash(h: u64) -> u64 {
        (h >> 40) & TAG_MASK
    }
    #[inline]
    pub fn new(tag: u64, seg: u32, off: u32) -> u64 {
        debug_assert!(seg != 0 && seg <= SEG_MAX && off <= OFF_MAX);
        (tag << TAG_SHIFT) | ((seg as u64) << SEG_SHIFT) | off as u64
    }
    #[inline]
    pub fn tag(s: u64) -> u64 {
        (s >> TAG_SHIFT) & TAG_MASK
    }
    #[inline]
    pub fn seg(s: u64) -> u32 {
        ((s >> SEG_SHIFT) as u32) & SEG_MAX
    }
    #[inline]
    pub fn off(s: u64) -> u32 {
        (s as u32) & OFF_MAX
    }
    #[inline]
    pub fn freq(s: u64) -> u32 {
        ((s >> FREQ_SHIFT) & FREQ_MASK) as u32
    }
    #[inline]
    pub fn fetched(s: u64) -> bool {
        s & FETCHED != 0
    }
    /// A read: set the fetched bit, count up to 7.
    #[inline]
    pub fn touched(s: u64) -> u64 {
        let f = (freq(s) + 1).min(FREQ_MASK as u32) as u64;
        (s & !(FREQ_MASK << FREQ_SHIFT)) | FETCHED | (f << FREQ_SHIFT)
    }
    /// One eviction pass survived: min(freq, cap) - 1 (S3-FIFO's reinsertion rule), fetched
    /// bit kept.
    #[inline]
    pub fn decayed(s: u64, cap: u32) -> u64 {
        let f = freq(s).min(cap).saturating_sub(1) as u64;
        (s & !(FREQ_MASK << FREQ_SHIFT)) | (f << FREQ_SHIFT)
    }
    /// A large item spared (evict.rs): read count back to 0, fetched bit kept, so that it
    /// survives the next pass only if it is read again (CLOCK's reference bit).
    #[inline]
    pub fn cleared(s: u64) -> u64 {
        s & !(FREQ_MASK << FREQ_SHIFT)
    }
    /// The first of 16 segment ids that never name a segment: a slot with one of them names
    /// a flash entry instead (flash/entries.rs), index (id - FLASH_BASE) << 20 | offset.
    pub const FLASH_BASE: u32 = SEG_MAX - 15;
    #[inline]
    pub fn is_flash(s: u64) -> bool {
        seg(s) >= FLASH_BASE
    }
    #[inline]
    pub fn flash_entry(s: u64) -> u32 {
        ((seg(s) - FLASH_BASE) << 20) | off(s)
    }
    /// Same tag and access bits, now naming flash entry `i` (< 2^24).
    #[inline]
    pub fn to_flash(s: u64, i: u32) -> u64 {
        moved(s, FLASH_BASE + (i >> 20), i & OFF_MAX)
    }
    /// Same tag and access bits, new location.
    #[inline]
    pub fn moved(s: u64, seg: u32, off: u32) -> u64 {
        debug_assert!(seg != 0 && seg <= SEG_MAX && off <= OFF_MAX);
        (s & !((SEG_MAX as u64) << SEG_SHIFT | OFF_MAX as u64)) | ((seg as u64) << SEG_SHIFT) | off as u64
    }
}

pub(crate) const SLOTS: usize = 8;
type Bucket = [u64; SLOTS];
const BUCKET_BYTES: usize = core::mem::size_of::<Bucket>();

/// Bucket handle: a primary index, or OVF | overflow index.
const OVF: u64 = 1 << 63;
const NONE: u64 = u64::MAX;
/// Split when a primary bucket holds more than this many items on average. Index bytes per item
/// (primary plus overflow buckets in use), averaged over shards of 60k..700k items (linear
/// hashing's cost swings with where the split pointer is): 8 -> 11.5, 10 -> 11.0, 12 -> 10.7,
/// 14 -> 10.4. 12 keeps most of the saving while a hit still finds its item in the first
/// cache line most of the time (7 of the 12 fit there).
const SPLIT_LOAD: usize = 12;

/// Where a slot is. Valid until the next removal or insertion in the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pos {
    bucket: u64,
    prev: u64,
    slot: u8,
}

/// What a `find` visitor says about a tag-matching slot.
pub(crate) enum Visit {
    Match,
    Skip,
    /// The slot points at dead memory: clear it (the visitor did the bookkeeping).
    Purge,
}

pub(crate) struct Index {
    primary: Vec<Bucket>,
    level: u32,
    split: usize,
    overflow: Vec<Bucket>,
    free_ovf: u64,
    ovf_in_use: usize,
    items: usize,
    scratch: Vec<u64>,
}

impl Index {
    /// `initial_buckets` is rounded up to a power of two.
    pub fn new(initial_buckets: usize) -> Index {
        let n = initial_buckets.max(2).next_power_of_two();
        let mut primary = Vec::with_capacity(n);
        primary.resize(n, [0; SLOTS]);
        Index {
            primary,
            level: n.trailing_zeros(),
            split: 0,
            overflow: Vec::new(),
            free_ovf: NONE,
            ovf_in_use: 0,
            items: 0,
            scratch: Vec::new(),
        }
    }

    /// Bytes of memory owned (capacities, not lengths: that is what the allocator holds).
    pub fn bytes(&self) -> usize {
        (self.primary.capacity() + self.overflow.capacity()) * BUCKET_BYTES
            + self.scratch.capacity() * 8
    }
    /// Occupied item slots (live plus not-yet-purged dead ones).
    pub fn items(&self) -> usize {
        self.items
    }
    /// Slots in use as storage (primary plus live overflow buckets).
    pub fn slots(&self) -> usize {
        (self.primary.len() + self.ovf_in_use) * SLOTS
    }
    pub fn overflow_buckets(&self) -> usize {
        self.ovf_in_use
    }

    #[inline]
    fn home(&self, h: u64) -> u64 {
        let b = h & ((1u64 << self.level) - 1);
        if (b as usize) < self.split {
            h & ((1u64 << (self.level + 1)) - 1)
        } else {
            b
        }
    }

    #[inline]
    fn bucket(&self, handle: u64) -> &Bucket {
        if handle & OVF != 0 {
            &self.overflow[(handle & !OVF) as usize]
        } else {
            &self.primary[handle as usize]
        }
    }
    #[inline]
    fn bucket_mut(&mut self, handle: u64) -> &mut Bucket {
        if handle & OVF != 0 {
            &mut self.overflow[(handle & !OVF) as usize]
        } else {
            &mut self.primary[handle as usize]
        }
    }

    /// Visits every slot whose tag matches `h`'s, following the chain, until the visitor says
    /// `Match`.
    pub fn find(&mut self, h: u64, mut visit: impl FnMut(u64) -> Visit) -> Option<Pos> {
        let tag = slot::tag_of_hash(h);
        let mut handle = self.home(h);
        let mut prev = NONE;
        loop {
            let mut next = NONE;
            for i in 0..SLOTS {
                let s = self.bucket(handle)[i];
                if s == 0 {
                    continue;
                }
                if s & slot::LINK != 0 {
                    next = OVF | (s & !slot::LINK);
                    break;
                }
                if slot::tag(s) != tag {
                    continue;
                }
                match visit(s) {
                    Visit::Match => return Some(Pos { bucket: handle, prev, slot: i as u8 }),
                    Visit::Skip => {}
                    Visit::Purge => {
                        self.bucket_mut(handle)[i] = 0;
                        self.items -= 1;
                    }
                }
            }
            if next == NONE {
                return None;
            }
            prev = handle;
            handle = next;
        }
    }

    /// The slot holding exactly this location, if any (eviction walks a segment and asks
    /// which slot refers to each item).
    pub fn find_exact(&mut self, h: u64, seg: u32, off: u32) -> Option<Pos> {
        self.find(h, |s| {
            if slot::seg(s) == seg && slot::off(s) == off {
                Visit::Match
            } else {
                Visit::Skip
            }
        })
    }

    #[inline]
    pub fn get(&self, p: Pos) -> u64 {
        self.bucket(p.bucket)[p.slot as usize]
    }
    #[inline]
    pub fn set(&mut self, p: Pos, v: u64) {
        debug_assert!(v != 0 && v & slot::LINK == 0);
        self.bucket_mut(p.bucket)[p.slot as usize] = v;
    }

    /// Pull the home bucket of `h` toward the cache: a hint for a lookup coming soon.
    #[inline]
    pub fn prefetch(&self, h: u64) {
        crate::buf::prefetch(self.bucket(self.home(h)).as_ptr().cast());
    }

    /// The entries of `h`'s home bucket whose tag matches (the likely items of a lookup, for
    /// prefetching them), and the bucket after the one visited, if any. `chain` false visits
    /// the home bucket; `chain` true visits the first overflow bucket instead (a few keys
    /// later, once the home bucket's read has pulled it in) and names the second. Deeper
    /// buckets' items are left to the lookup: a tenth of the keys at `SPLIT_LOAD`.
    #[inline]
    pub fn candidates(&self, h: u64, chain: bool, mut f: impl FnMut(u64)) -> Option<*const u8> {
        let tag = slot::tag_of_hash(h);
        let mut b = self.bucket(self.home(h));
        if chain {
            let last = b[SLOTS - 1];
            if last & slot::LINK == 0 {
                return None;
            }
            b = self.bucket(OVF | (last & !slot::LINK));
        }
        let mut next = None;
        for &s in b {
            if s & slot::LINK != 0 {
                next = Some(self.bucket(OVF | (s & !slot::LINK)).as_ptr().cast());
            } else if s != 0 && slot::tag(s) == tag {
                f(s);
            }
        }
        next
    }

    /// Adds an entry. Never fails: a full chain gets another overflow bucket.
    pub fn insert(&mut self, h: u64, v: u64) -> Pos {
        let home = self.home(h);
        self.insert_at(home, v)
    }

    fn insert_at(&mut self, home: u64, v: u64) -> Pos {
        debug_assert!(v != 0 && v & slot::LINK == 0);
        self.items += 1;
        let mut handle = home;
        let mut prev = NONE;
        loop {
            let b = *self.bucket(handle);
            if let Some(i) = b.iter().position(|&s| s == 0) {
                self.bucket_mut(handle)[i] = v;
                return Pos { bucket: handle, prev, slot: i as u8 };
            }
            let last = b[SLOTS - 1];
            if last & slot::LINK != 0 {
                prev = handle;
                handle = OVF | (last & !slot::LINK);
                continue;
            }
            // Chain full: move the last entry into a new overflow bucket and link it.
            let n = self.alloc_overflow();
            let nb = self.bucket_mut(n);
            nb[0] = last;
            nb[1] = v;
            self.bucket_mut(handle)[SLOTS - 1] = slot::LINK | (n & !OVF);
            return Pos { bucket: n, prev: handle, slot: 1 };
        }
    }

    /// Clears a slot. The chain stays compact: the last entry of the chain moves into the hole,
    /// and an overflow bucket left empty is unlinked, so churn does not strand half-empty
    /// overflow buckets (they would cost memory and lookup time).
    pub fn remove(&mut self, p: Pos) {
        debug_assert!(self.get(p) != 0);
        self.bucket_mut(p.bucket)[p.slot as usize] = 0;
        self.items -= 1;
        // Walk to the chain's last bucket.
        let (mut prev, mut last) = (p.prev, p.bucket);
        loop {
            let l = self.bucket(last)[SLOTS - 1];
            if l & slot::LINK == 0 {
                break;
            }
            prev = last;
            last = OVF | (l & !slot::LINK);
        }
        if last != p.bucket {
            let b = self.bucket(last);
            if let Some(j) = (0..SLOTS).rev().find(|&j| b[j] != 0) {
                let e = b[j];
                self.bucket_mut(last)[j] = 0;
                self.bucket_mut(p.bucket)[p.slot as usize] = e;
            }
        }
        if last & OVF != 0 && prev != NONE && self.bucket(last).iter().all(|&s| s == 0) {
            debug_assert_eq!(self.bucket(prev)[SLOTS - 1], slot::LINK | (last & !OVF));
            self.bucket_mut(prev)[SLOTS - 1] = 0;
            self.free_overflow(last);
        }
    }

    fn alloc_overflow(&mut self) -> u64 {
        self.ovf_in_use += 1;
        if self.free_ovf != NONE {
            let h = self.free_ovf;
            let next = self.bucket(h)[0];
            self.free_ovf = next;
            *self.bucket_mut(h) = [0; SLOTS];
            return h;
        }
        if self.overflow.len() == self.overflow.capacity() {
            // Grow in modest steps: the capacity is what the budget is charged for.
            let step = (self.overflow.len() / 4).max(4);
            self.overflow.reserve_exact(step);
        }
        self.overflow.push([0; SLOTS]);
        OVF | (self.overflow.len() - 1) as u64
    }

    fn free_overflow(&mut self, h: u64) {
        self.ovf_in_use -= 1;
        let next = self.free_ovf;
        let b = self.bucket_mut(h);
        *b = [0; SLOTS];
        b[0] = next;
        self.free_ovf = h;
    }

    /// Whether the load asks for another bucket.
    pub fn wants_split(&self) -> bool {
        self.items > self.primary.len() * SPLIT_LOAD
    }

    /// Splits the next bucket (linear hashing). `rehash` returns an entry's full key hash, or
    /// `None` if the entry is dead (then it is dropped; the caller did its bookkeeping).
    pub fn split_one(&mut self, mut rehash: impl FnMut(u64) -> Option<u64>) {
        let s = self.split;
        if self.primary.len() == self.primary.capacity() {
            let step = (self.primary.len() / 16).max(16);
            self.primary.reserve_exact(step);
        }
        self.primary.push([0; SLOTS]);
        let mut entries = core::mem::take(&mut self.scratch);
        entries.clear();
        // Gather the whole chain of bucket s, freeing its overflow buckets.
        let mut handle = s as u64;
        loop {
            let b = core::mem::replace(self.bucket_mut(handle), [0; SLOTS]);
            if handle & OVF != 0 {
                self.free_overflow(handle);
            }
            let mut next = NONE;
            for &e in &b {
                if e & slot::LINK != 0 {
                    next = OVF | (e & !slot::LINK);
                } else if e != 0 {
                    entries.push(e);
                }
            }
            if next == NONE {
                break;
            }
            handle = next;
        }
        self.items -= entries.len();
        let mask = (1u64 << (self.level + 1)) - 1;
        for &e in &entries {
            if let Some(h) = rehash(e) {
                let b = h & mask;
                debug_assert!(b as usize == s || b as usize == s + (1 << self.level));
                self.insert_at(b, e);
            }
        }
        self.scratch = entries;
        self.split += 1;
        if self.split == 1 << self.level {
            self.level += 1;
            self.split = 0;
        }
    }

    /// Clears every entry in the chains of primary buckets `from..to` for which `dead` says so.
    /// Returns the next bucket to sweep (wraps to 0 at the end).
    pub fn sweep(&mut self, from: usize, count: usize, mut dead: impl FnMut(u64) -> bool) -> usize {
        let end = (from + count).min(self.primary.len());
        for b in from..end {
            let mut handle = b as u64;
            loop {
                let mut next = NONE;
                for i in 0..SLOTS {
                    let e = self.bucket(handle)[i];
                    if e & slot::LINK != 0 {
                        next = OVF | (e & !slot::LINK);
                    } else if e != 0 && dead(e) {
                        self.bucket_mut(handle)[i] = 0;
                        self.items -= 1;
                    }
                }
                if next == NONE {
                    break;
                }
                handle = next;
            }
        }
        if end >= self.primary.len() {
            0
        } else {
            end
        }
    }

    /// (level, split): which buckets exist and how many hash bits each uses. The table only
    /// grows, so a later geometry always refines an earlier one (metadump relies on it).
    pub fn geometry(&self) -> (u32, usize) {
        (self.level, self.split)
    }

    /// Primary buckets in use (2^level + split).
    pub fn buckets(&self) -> usize {
        self.primary.len()
    }

    /// Visits every item slot in the chain of primary bucket `b`, without changing anything.
    pub fn for_each_in_chain(&self, b: usize, mut f: impl FnMut(u64)) {
        let mut handle = b as u64;
        loop {
            let mut next = NONE;
            for &e in self.bucket(handle) {
                if e & slot::LINK != 0 {
                    next = OVF | (e & !slot::LINK);
                } else if e != 0 {
                    f(e);
                }
            }
            if next == NONE {
                return;
            }
            handle = next;
        }
    }

    /// Every entry (tests and debugging).
    #[cfg(test)]
    pub fn entries(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for b in 0..self.primary.len() {
            self.for_each_in_chain(b, |e| out.push(e));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn slot_fields_roundtrip() {
        let s = slot::new(0x7fff, slot::SEG_MAX, slot::OFF_MAX);
        assert_eq!(slot::tag(s), 0x7fff);
        assert_eq!(slot::seg(s), slot::SEG_MAX);
        assert_eq!(slot::off(s), slot::OFF_MAX);
        assert_eq!(s & slot::LINK, 0);
        let s = slot::new(5, 1, 0);
        assert!(s != 0);
        assert!(!slot::fetched(s));
        let t = slot::touched(slot::touched(s));
        assert!(slot::fetched(t));
        assert_eq!(slot::freq(t), 2);
        let mut u = t;
        for _ in 0..20 {
            u = slot::touched(u);
        }
        assert_eq!(slot::freq(u), 7);
        let d = slot::decayed(t, 7);
        assert_eq!((slot::freq(d), slot::fetched(d)), (1, true));
        let d = slot::decayed(u, 3);
        assert_eq!((slot::freq(d), slot::fetched(d)), (2, true));
        let m = slot::moved(t, 77, 1234);
        assert_eq!((slot::tag(m), slot::seg(m), slot::off(m), slot::freq(m)), (5, 77, 1234, 2));
    }

    fn h_of(k: u64) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&k.to_le_bytes())
    }

    /// Entries encode the key id in (seg, off) so the test can rehash them.
    fn entry(k: u64) -> u64 {
        slot::new(slot::tag_of_hash(h_of(k)), (k >> 20) as u32 + 1, (k & 0xfffff) as u32)
    }
    fn key_of(e: u64) -> u64 {
        ((slot::seg(e) as u64 - 1) << 20) | slot::off(e) as u64
    }

    fn lookup(ix: &mut Index, k: u64) -> Option<Pos> {
        let want = entry(k);
        ix.find(h_of(k), |s| if s == want { Visit::Match } else { Visit::Skip })
    }

    /// Keys 0..n inserted, the table split as it grows.
    fn grown(n: u64) -> Index {
        let mut ix = Index::new(4);
        for k in 0..n {
            ix.insert(h_of(k), entry(k));
            while ix.wants_split() {
                ix.split_one(|e| Some(h_of(key_of(e))));
            }
        }
        ix
    }

    #[test]
    fn prefetch_candidates_cover_the_home_bucket_and_its_first_overflow() {
        let n = 20_000u64;
        let ix = grown(n);
        let (mut home, mut chain, mut deeper) = (0, 0, 0);
        for k in 0..n {
            let want = entry(k);
            let mut seen = false;
            let next = ix.candidates(h_of(k), false, |s| seen |= s == want);
            if seen {
                home += 1;
                continue;
            }
            assert!(next.is_some(), "key {k} is not in its home bucket, so there is a chain");
            ix.candidates(h_of(k), true, |s| seen |= s == want);
            if seen {
                chain += 1;
            } else {
                deeper += 1;
            }
        }
        // At SPLIT_LOAD the two passes find most keys (here 57% + 31%); the rest sit deeper in
        // a chain, where the lookup finds at least the next bucket prefetched.
        assert_eq!(home + chain + deeper, n);
        assert!(home > n / 2 && chain > n / 5, "home {home} chain {chain} deeper {deeper}");
        assert!(deeper < n / 5, "home {home} chain {chain} deeper {deeper}");
    }

    #[test]
    fn insert_find_remove_with_growth() {
        let n = 20_000u64;
        let mut ix = grown(n);
        assert_eq!(ix.items(), n as usize);
        assert!(ix.buckets() * SPLIT_LOAD >= n as usize);
        for k in 0..n {
            let p = lookup(&mut ix, k).expect("present");
            assert_eq!(ix.get(p), entry(k));
        }
        for k in (0..n).filter(|k| k % 3 == 0) {
            let p = lookup(&mut ix, k).unwrap();
            ix.remove(p);
        }
        for k in 0..n {
            assert_eq!(lookup(&mut ix, k).is_some(), k % 3 != 0, "key {k}");
        }
        let mut seen: HashMap<u64, usize> = HashMap::new();
        for e in ix.entries() {
            *seen.entry(e).or_default() += 1;
        }
        assert!(seen.values().all(|&c| c == 1));
        assert_eq!(seen.len(), ix.items());
    }

    #[test]
    fn overflow_chains_never_fail_and_get_freed() {
        // Same home bucket for everything: a tiny table that is not allowed to split.
        let mut ix = Index::new(2);
        let h = 0u64; // home 0, tag 0
        let n = 100u32;
        let mut pos = Vec::new();
        for i in 0..n {
            pos.push(ix.insert(h, slot::new(0, 1, i)));
        }
        assert_eq!(ix.items(), n as usize);
        assert!(ix.overflow_buckets() >= (n as usize - 8) / 7);
        // Remove from the back so positions stay valid, and watch overflow buckets go away.
        for i in (0..n).rev() {
            let p = ix.find_exact(h, 1, i).unwrap();
            ix.remove(p);
        }
        assert_eq!(ix.items(), 0);
        assert_eq!(ix.overflow_buckets(), 0);
        let _ = pos;
    }

    #[test]
    fn purge_and_sweep_drop_entries() {
        let mut ix = Index::new(8);
        for k in 0..500u64 {
            ix.insert(h_of(k), entry(k));
        }
        // find purges tag matches the visitor says are dead
        let e5 = entry(5);
        assert!(ix.find(h_of(5), |s| if s == e5 { Visit::Purge } else { Visit::Skip }).is_none());
        assert!(lookup(&mut ix, 5).is_none());
        assert_eq!(ix.items(), 499);
        let mut cur = 0;
        loop {
            cur = ix.sweep(cur, 3, |e| key_of(e).is_multiple_of(2));
            if cur == 0 {
                break;
            }
        }
        assert_eq!(ix.items(), 249); // odd keys remain, less 5 which was purged
        assert_eq!(ix.items(), ix.entries().len());
    }
}
