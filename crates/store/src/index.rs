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
//! primary bucket = [slot; 8] (one cache line), overflow bucket = [slot; 4] (half a line,
//! aligned); a bucket's last slot holds a link when the chain continues
//!
//! primary buckets (linear hashing)            overflow arena (32-byte buckets)
//! [0][1]...[split]...[2^level-1][2^level]...   [o0][o1]...   (free ones form a list through slot 0)
//!         ^ next to split; buckets below it and above 2^level use level+1 hash bits
//!
//! a chain of 12 items: [ 7 items | link ]->[ 3 | link ]->[ 2 | 0 ]
//! ```
//!
//! Memory: 10.4 B per item at 125k items in a shard (bench/memory.sh's mixed workload, 2M
//! items), 10.4 at 625k (its small one), `bytes_per_item_at_the_benchmarks_loads`: primary
//! buckets 5.3, overflow buckets 4.7, growth room (never touched, so budget only) 0-0.6 as
//! the arrays' last step falls. With 8-slot overflow buckets grown by
//! a quarter it was 11.7 / 11.2: a chain's last bucket is half empty on average, and the
//! smaller it is the less that costs. The price: fewer keys sit in the first two buckets of
//! their chain (75% against 88%), which is what the lookup prefetch covers (prefetch.rs).
//!
//! Why not two choices per key (a second primary bucket from other hash bits, insert into
//! the emptier): measured at those loads it saved at most 0.3 B per item (12-24% of keys
//! still overflowed: buckets not yet split carry twice the load of split ones, and a full
//! bucket cannot hand an entry to its other choice without reading its key), for a second
//! bucket scan on every miss (docs/benchmarks.md, "Memory per item").
//!
//! Both bucket arrays are mappings of their own grown with mremap (buf/table.rs): as Vecs,
//! their old copies stayed resident in the heap (1.6 MB, 0.8 B per item, at 2M items).
//!
//! Why linear hashing: the table grows one bucket at a time (split the bucket at `split`, which
//! touches ~12 entries), so there is never a stop-the-world rehash, and the load stays near the
//! target instead of oscillating between x and 2x as with doubling. The price: a slot keeps no
//! spare hash bits, so a split rehashes each entry from its key (the caller reads it), about one
//! rehash per item inserted into a growing table; the split writes the two new chains in one
//! pass, appending. Chained overflow buckets mean
//! an insert never fails for lack of a slot. The whole thing is counted in the memory budget.

use crate::buf::table::Table;

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
        (s & !((SEG_MAX as u64) << SEG_SHIFT | OFF_MAX as u64))
            | ((seg as u64) << SEG_SHIFT)
            | off as u64
    }
}

pub(crate) const SLOTS: usize = 8;
type Bucket = [u64; SLOTS];
const BUCKET_BYTES: usize = core::mem::size_of::<Bucket>();
/// Slots of an overflow bucket. Half a primary bucket: a chain's last bucket is on average
/// half empty, and the smaller it is, the less that costs. Modelled (Poisson loads over
/// linear hashing's split and unsplit buckets, `SPLIT_LOAD` 12) at 2M items over 16 shards:
/// 10.6 B of buckets per item with 8 slots, 10.1 with 4, 11.2 with 2 (a link per item).
const OVF_SLOTS: usize = 4;
/// Aligned to its size, so it never straddles two cache lines.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct OvfBucket([u64; OVF_SLOTS]);
const OVF_BYTES: usize = core::mem::size_of::<OvfBucket>();

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
    /// Mappings of their own (buf/table.rs): a Vec's growth left its old copies resident.
    primary: Table<Bucket>,
    level: u32,
    split: usize,
    overflow: Table<OvfBucket>,
    free_ovf: u64,
    ovf_in_use: usize,
    items: usize,
    scratch: Vec<u64>,
    /// Where the last `find` that missed would insert `h`: see `Hint`.
    hint: Hint,
}

/// A store looks a key up before it inserts it (a set replaces, an add refuses), so an insert
/// of a new key follows a `find` that walked the key's whole chain and missed. That walk notes
/// the chain's first empty slot, or its end when it has none, and `insert` of the same hash
/// starts there instead of walking the chain again (145 instructions per insert of a fresh
/// fill, callgrind, most of them that second walk). Any change of the index's layout between
/// the two (an insert, a removal, a split, a sweep) voids it: `insert` then walks as before.
#[derive(Clone, Copy)]
struct Hint {
    h: u64,
    /// `slot` < the bucket's length: an empty slot; `FULL`: the chain's last bucket, full;
    /// `bucket` NONE: no hint.
    at: Pos,
}
/// `Hint::at`'s slot when the chain has no empty slot.
const FULL: u8 = u8::MAX;
/// No hint (`Hint::at`).
const NO_HINT: Pos = Pos {
    bucket: NONE,
    prev: NONE,
    slot: FULL,
};

impl Index {
    /// `initial_buckets` is rounded up to a power of two.
    pub fn new(initial_buckets: usize) -> Index {
        let n = initial_buckets.max(2).next_power_of_two();
        let mut primary = Table::new();
        primary.reserve_exact(n);
        for _ in 0..n {
            primary.push([0; SLOTS]);
        }
        Index {
            primary,
            level: n.trailing_zeros(),
            split: 0,
            overflow: Table::new(),
            free_ovf: NONE,
            ovf_in_use: 0,
            items: 0,
            scratch: Vec::new(),
            hint: Hint { h: 0, at: NO_HINT },
        }
    }

    /// Bytes of memory owned (capacities, not lengths: that is what the allocator holds).
    pub fn bytes(&self) -> usize {
        self.primary.capacity() * BUCKET_BYTES
            + self.overflow.capacity() * OVF_BYTES
            + self.scratch.capacity() * 8
    }
    /// Occupied item slots (live plus not-yet-purged dead ones).
    pub fn items(&self) -> usize {
        self.items
    }
    /// Slots in use as storage (primary plus live overflow buckets).
    pub fn slots(&self) -> usize {
        self.primary.len() * SLOTS + self.ovf_in_use * OVF_SLOTS
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

    /// A bucket's slots: `SLOTS` of a primary bucket, `OVF_SLOTS` of an overflow one. The last
    /// slot holds the link when the chain goes on.
    #[inline]
    fn bucket(&self, handle: u64) -> &[u64] {
        if handle & OVF != 0 {
            &self.overflow[(handle & !OVF) as usize].0
        } else {
            &self.primary[handle as usize]
        }
    }
    #[inline]
    fn bucket_mut(&mut self, handle: u64) -> &mut [u64] {
        if handle & OVF != 0 {
            &mut self.overflow[(handle & !OVF) as usize].0
        } else {
            &mut self.primary[handle as usize]
        }
    }
    /// The link slot of a bucket (its last), which is a link only if the chain goes on.
    #[inline]
    fn last(&self, handle: u64) -> u64 {
        let b = self.bucket(handle);
        b[b.len() - 1]
    }

    /// Visits every slot whose tag matches `h`'s, following the chain, until the visitor says
    /// `Match`.
    pub fn find(&mut self, h: u64, mut visit: impl FnMut(u64) -> Visit) -> Option<Pos> {
        let tag = slot::tag_of_hash(h);
        let mut handle = self.home(h);
        let mut prev = NONE;
        // The chain's first empty slot, for `insert` after a miss (`Hint`).
        let mut free = NO_HINT;
        loop {
            // Each bucket size gets its own fixed-length scan: over a slice of either length
            // a get hit took 22 more instructions (bench/instructions.sh), with no chain at all.
            let here = Pos {
                bucket: handle,
                prev,
                slot: FULL,
            };
            let found = if handle & OVF != 0 {
                scan(
                    &mut self.overflow[(handle & !OVF) as usize].0,
                    tag,
                    &mut self.items,
                    &mut visit,
                    here,
                    &mut free,
                )
            } else {
                scan(
                    &mut self.primary[handle as usize],
                    tag,
                    &mut self.items,
                    &mut visit,
                    here,
                    &mut free,
                )
            };
            match found {
                Ok(i) => {
                    return Some(Pos {
                        bucket: handle,
                        prev,
                        slot: i as u8,
                    })
                }
                Err(NONE) => {
                    self.hint = Hint {
                        h,
                        at: if free.slot == FULL { here } else { free },
                    };
                    return None;
                }
                Err(next) => {
                    prev = handle;
                    handle = next;
                }
            }
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
    /// buckets' items are left to the lookup: a quarter of the keys at `SPLIT_LOAD`.
    #[inline]
    pub fn candidates(&self, h: u64, chain: bool, mut f: impl FnMut(u64)) -> Option<*const u8> {
        let tag = slot::tag_of_hash(h);
        let home = &self.primary[self.home(h) as usize];
        if !chain {
            return self.pick(home, tag, &mut f);
        }
        let last = home[SLOTS - 1];
        if last & slot::LINK == 0 {
            return None;
        }
        self.pick(&self.overflow[(last & !slot::LINK) as usize].0, tag, &mut f)
    }

    /// `candidates`' visit of one bucket (fixed length per bucket size, as in `scan`).
    #[inline(always)]
    fn pick<const N: usize>(
        &self,
        b: &[u64; N],
        tag: u64,
        f: &mut impl FnMut(u64),
    ) -> Option<*const u8> {
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
        let Hint { h: hh, at } = self.hint;
        if hh == h && at.bucket != NONE {
            self.hint.at = NO_HINT;
            self.items += 1;
            if at.slot == FULL {
                // A `find` since may have purged the chain's last entry (it only empties
                // slots, so the chain still ends here).
                let b = self.bucket_mut(at.bucket);
                let j = b.len() - 1;
                if b[j] != 0 {
                    return self.extend(at.bucket, v);
                }
                b[j] = v;
                return Pos {
                    slot: j as u8,
                    ..at
                };
            }
            debug_assert_eq!(self.get(at), 0);
            self.bucket_mut(at.bucket)[at.slot as usize] = v;
            return at;
        }
        let home = self.home(h);
        self.insert_at(home, v)
    }

    fn insert_at(&mut self, home: u64, v: u64) -> Pos {
        debug_assert!(v != 0 && v & slot::LINK == 0);
        self.hint.at = NO_HINT;
        self.items += 1;
        let mut handle = home;
        let mut prev = NONE;
        loop {
            if let Some(i) = self.bucket(handle).iter().position(|&s| s == 0) {
                self.bucket_mut(handle)[i] = v;
                return Pos {
                    bucket: handle,
                    prev,
                    slot: i as u8,
                };
            }
            let last = self.last(handle);
            if last & slot::LINK != 0 {
                prev = handle;
                handle = OVF | (last & !slot::LINK);
                continue;
            }
            return self.extend(handle, v);
        }
    }

    /// A full chain whose last bucket is `handle` gets another overflow bucket: the last entry
    /// moves into it, beside `v`, and its slot becomes the link.
    fn extend(&mut self, handle: u64, v: u64) -> Pos {
        let n = self.alloc_overflow();
        let b = self.bucket_mut(handle);
        let last = b[b.len() - 1];
        debug_assert!(last != 0 && last & slot::LINK == 0);
        b[b.len() - 1] = slot::LINK | (n & !OVF);
        let nb = self.bucket_mut(n);
        nb[0] = last;
        nb[1] = v;
        Pos {
            bucket: n,
            prev: handle,
            slot: 1,
        }
    }

    /// Clears a slot. The chain stays compact: the last entry of the chain moves into the hole,
    /// and an overflow bucket left empty is unlinked, so churn does not strand half-empty
    /// overflow buckets (they would cost memory and lookup time).
    pub fn remove(&mut self, p: Pos) {
        debug_assert!(self.get(p) != 0);
        self.hint.at = NO_HINT;
        self.bucket_mut(p.bucket)[p.slot as usize] = 0;
        self.items -= 1;
        // Walk to the chain's last bucket.
        let (mut prev, mut last) = (p.prev, p.bucket);
        loop {
            let l = self.last(last);
            if l & slot::LINK == 0 {
                break;
            }
            prev = last;
            last = OVF | (l & !slot::LINK);
        }
        if last != p.bucket {
            let b = self.bucket(last);
            if let Some(j) = (0..b.len()).rev().find(|&j| b[j] != 0) {
                let e = b[j];
                self.bucket_mut(last)[j] = 0;
                self.bucket_mut(p.bucket)[p.slot as usize] = e;
            }
        }
        if last & OVF != 0 && prev != NONE && self.bucket(last).iter().all(|&s| s == 0) {
            debug_assert_eq!(self.last(prev), slot::LINK | (last & !OVF));
            let b = self.bucket_mut(prev);
            b[b.len() - 1] = 0;
            self.free_overflow(last);
        }
    }

    fn alloc_overflow(&mut self) -> u64 {
        self.ovf_in_use += 1;
        if self.free_ovf != NONE {
            let h = self.free_ovf;
            let next = self.bucket(h)[0];
            self.free_ovf = next;
            self.bucket_mut(h).fill(0);
            return h;
        }
        if self.overflow.len() == self.overflow.capacity() {
            // Grow in small steps, as the primary array does: the capacity is what the budget
            // is charged for, and steps of a quarter left 12% of it unused on average (0.8 B
            // per item at 2M items).
            let step = (self.overflow.len() / 16).max(4);
            self.overflow.reserve_exact(step);
        }
        self.overflow.push(OvfBucket([0; OVF_SLOTS]));
        OVF | (self.overflow.len() - 1) as u64
    }

    fn free_overflow(&mut self, h: u64) {
        self.ovf_in_use -= 1;
        let next = self.free_ovf;
        let b = self.bucket_mut(h);
        b.fill(0);
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
            let mut b = [0u64; SLOTS];
            let len = {
                let src = self.bucket_mut(handle);
                b[..src.len()].copy_from_slice(src);
                src.fill(0);
                src.len()
            };
            if handle & OVF != 0 {
                self.free_overflow(handle);
            }
            let mut next = NONE;
            for &e in &b[..len] {
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
        self.hint.at = NO_HINT;
        // Both chains are built from empty, so each entry goes where the last one of its
        // chain went, not through `insert_at`'s walk from the chain's start (77 instructions
        // an entry, callgrind, on a fresh fill, which rehashes about one entry per insert).
        let high = 1u64 << self.level;
        let mut tails = [(s as u64, 0usize), (s as u64 + high, 0usize)];
        for &e in &entries {
            if let Some(h) = rehash(e) {
                debug_assert_eq!(h & (high - 1), s as u64 & (high - 1));
                let t = &mut tails[(h & high != 0) as usize];
                self.items += 1;
                let len = if t.0 & OVF != 0 { OVF_SLOTS } else { SLOTS };
                if t.1 < len {
                    self.bucket_mut(t.0)[t.1] = e;
                    t.1 += 1;
                } else {
                    *t = (self.extend(t.0, e).bucket, 2);
                }
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
        // It only empties slots, which leaves a hint's slot empty, but its `FULL` no longer
        // true: void it rather than reason about which.
        self.hint.at = NO_HINT;
        let end = (from + count).min(self.primary.len());
        for b in from..end {
            let mut handle = b as u64;
            loop {
                let mut next = NONE;
                for i in 0..self.bucket(handle).len() {
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

/// `find`'s visit of one bucket: Ok(slot) on a match, else Err(the next bucket's handle, or
/// NONE at the chain's end). `free`: set to the first empty slot met (in bucket `here`) if it
/// names none yet (`FULL`).
#[inline(always)]
fn scan<const N: usize>(
    b: &mut [u64; N],
    tag: u64,
    items: &mut usize,
    visit: &mut impl FnMut(u64) -> Visit,
    here: Pos,
    free: &mut Pos,
) -> Result<usize, u64> {
    for (i, e) in b.iter_mut().enumerate() {
        let s = *e;
        if s == 0 {
            if free.slot == FULL {
                *free = Pos {
                    slot: i as u8,
                    ..here
                };
            }
            continue;
        }
        if s & slot::LINK != 0 {
            return Err(OVF | (s & !slot::LINK));
        }
        if slot::tag(s) != tag {
            continue;
        }
        match visit(s) {
            Visit::Match => return Ok(i),
            Visit::Skip => {}
            Visit::Purge => {
                *e = 0;
                *items -= 1;
                if free.slot == FULL {
                    *free = Pos {
                        slot: i as u8,
                        ..here
                    };
                }
            }
        }
    }
    Err(NONE)
}

#[cfg(test)]
mod tests;
