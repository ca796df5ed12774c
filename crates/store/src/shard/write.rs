//! The write path of a shard: reserve space -> write the new copy -> repoint the index slot ->
//! retire the old copy; and the operations built on it (store, touch, delta).
//!
//! ```text
//!   store/touch/delta ──> find (shard.rs) ──> reserve (may evict: evict.rs) ──Retry──┐
//!                                               │ At(seg, off)                        │
//!                                               v                                     │
//!                                   place: copy the parts, index slot -> new copy      │
//!                                               │                                     │
//!                                               └── old copy retired (item_gone) <─────┘ starts over
//! ```
//!
//! Every modification writes a new copy at a location never used before, which is what makes
//! the derived CAS new. Reserving space may evict, and eviction may move or drop any item, so a
//! write that had to make room starts over from the lookup (`Reserve::Retry`).

use super::*;

pub(crate) enum Reserve {
    At(u32, usize),
    Retry,
}

impl Shard {
    /// Makes `id` the append target of TTL group `ttl` in its FIFO; the previous one is closed
    /// (and dropped if nothing in it is live any more).
    pub fn set_active(&mut self, env: &Env<'_>, ttl: u8, id: u32) {
        let q = self.segs.metas[id as usize].queue as usize;
        let old = self.active[q][ttl as usize];
        if old != 0 && old != id {
            let m = &mut self.segs.metas[old as usize];
            m.active = false;
            if m.items == 0 && m.state == SegState::Live {
                env.budget
                    .release(self.segs.retire(old, DeadReason::Expired));
            } else {
                // Full: its pages may become a huge page now (buf.rs).
                m.data.sealed();
            }
        }
        self.active[q][ttl as usize] = id;
        let m = &mut self.segs.metas[id as usize];
        m.active = true;
        m.ttl = ttl;
    }

    /// Finds `size` bytes for a new item in TTL group `ttl` of FIFO `q`: in the group's
    /// segment, a new segment, or a buffer of its own for a large item. `Retry` means memory
    /// was made by evicting, which may have moved anything: look the key up again.
    pub fn reserve(
        &mut self,
        env: &Env<'_>,
        size: usize,
        ttl: u8,
        q: Queue,
        now: Time,
    ) -> Result<Reserve, StoreError> {
        let geo = env.geo;
        let ttl = geo.ttl_group(ttl);
        if size > geo.large_min {
            if crate::budget::large_len(size) > env.budget.limit() {
                return Err(StoreError::OutOfMemory);
            }
            let buf = env.budget.take_large(size);
            if env.budget.try_add(buf.len()) {
                let Some(id) = self.segs.alloc_id() else {
                    env.budget.release(buf);
                    return Err(StoreError::OutOfMemory);
                };
                self.segs.open(id, buf, true, ttl, q, now);
                return Ok(Reserve::At(id, 0));
            }
            env.budget.give_large(buf);
            self.make_room_large(env, now)?;
            return Ok(Reserve::Retry);
        }
        let a = self.active[q as usize][ttl as usize];
        if a != 0 {
            let m = &self.segs.metas[a as usize];
            if m.room() >= size {
                return Ok(Reserve::At(a, m.write));
            }
        }
        // Before taking more memory, reclaim dead space: a log of overwritten values would
        // otherwise grow to the limit before anything is reused (budget.rs says what fresh
        // memory costs). Compaction moves every live item of a mostly dead segment to a new
        // segment (the spare's buffer, usually) and frees it. Only while memory is left: once
        // the budget is full, eviction decides what stays.
        if let Some(v) = self.compaction_victim(env, ttl, q, size) {
            self.compact(env, now, v, (ttl, size, q));
            self.stats.compactions += 1;
            return Ok(Reserve::Retry);
        }
        if let Some(buf) = env.budget.regular_buffer(false) {
            let Some(id) = self.segs.alloc_id() else {
                env.budget.release(buf);
                return Err(StoreError::OutOfMemory);
            };
            self.segs.open(id, buf, false, ttl, q, now);
            self.set_active(env, ttl, id);
            return Ok(Reserve::At(id, 0));
        }
        self.make_room(env, now, Some((ttl, size, q)))?;
        Ok(Reserve::Retry)
    }

    /// The segment to compact before opening a new one, if any: only while the budget still
    /// has room (the alternative is fresh memory, not eviction); of the regular segments of
    /// TTL group `ttl` in FIFO `q` (the moved items join that group's new segment, so groups
    /// stay apart and still expire whole, and compaction never moves items between FIFOs), the one with the most dead bytes (overwritten, deleted, expired
    /// items), if at least `1 / COMPACT_DEAD_SHARE` of a segment is dead and its live items
    /// (each maybe growing by an explicit CAS) plus the `size` bytes asked for fit in one
    /// segment. Greedy, as in
    /// log-structured file systems: the deadest segment frees the most per byte copied. At a
    /// quarter dead, compaction copies at most 3 bytes per byte it frees; fresh memory costs a
    /// fault and a zeroing per page, several times that (budget.rs). O(segments of the shard),
    /// once per segment filled.
    fn compaction_victim(&self, env: &Env<'_>, ttl: u8, q: Queue, size: usize) -> Option<u32> {
        let seg = env.geo.seg_size;
        if env.budget.used() + seg > env.budget.limit() {
            return None;
        }
        let (mut best, mut best_dead) = (0u32, 0usize);
        let mut id = self.segs.head();
        while id != 0 {
            let m = &self.segs.metas[id as usize];
            let dead = m.write - m.live_bytes;
            if !m.large
                && m.ttl == ttl
                && m.queue == q
                && dead > best_dead
                && m.live_bytes + 8 * m.items as usize + size <= seg
            {
                (best, best_dead) = (id, dead);
            }
            id = self.segs.next_of(id);
        }
        (best != 0 && best_dead * COMPACT_DEAD_SHARE >= seg).then_some(best)
    }

    /// Writes `part` at `at` in segment `seg`. A request's bytes (every set's key and value)
    /// are copied inline: this and the boxed flash tier (lib.rs) took a set from 2,854 to
    /// 2,805 instructions (callgrind, bench/instructions.sh), most of it the two calls here.
    #[inline(always)]
    fn copy_part(&mut self, seg: u32, at: usize, part: &Part<'_>) {
        match *part {
            Part::Bytes(b) => {
                self.segs.metas[seg as usize].data[at..at + b.len()].copy_from_slice(b)
            }
            _ => self.copy_other(seg, at, part),
        }
    }

    /// `copy_part` for bytes that are not the request's: moved or padding.
    #[inline(never)]
    fn copy_other(&mut self, seg: u32, at: usize, part: &Part<'_>) {
        match *part {
            Part::Bytes(b) => {
                self.segs.metas[seg as usize].data[at..at + b.len()].copy_from_slice(b)
            }
            Part::Spaces(n) => self.segs.metas[seg as usize].data[at..at + n].fill(b' '),
            Part::Old {
                seg: src,
                start,
                len,
            } if src == seg => self.segs.metas[seg as usize]
                .data
                .copy_within(start..start + len, at),
            Part::Old {
                seg: src,
                start,
                len,
            } => {
                let (from, to) = self.segs.pair_mut(src, seg);
                to[at..at + len].copy_from_slice(&from[start..start + len]);
            }
        }
    }

    /// Writes an item at a reserved place and counts it live. Returns its length.
    pub fn place(
        &mut self,
        seg: u32,
        off: usize,
        nh: &NewHeader,
        key: Part<'_>,
        value: &[Part<'_>],
    ) -> usize {
        let len = nh.total_len();
        let mut w = off + nh.encode(&mut self.segs.metas[seg as usize].data[off..off + len]);
        self.copy_part(seg, w, &key);
        w += key.len();
        for p in value {
            self.copy_part(seg, w, p);
            w += p.len();
        }
        debug_assert_eq!(w, off + len);
        let m = &mut self.segs.metas[seg as usize];
        debug_assert!(m.large || m.write == off);
        m.write = off + len;
        m.items += 1;
        m.live_bytes += len;
        m.max_exp = m.max_exp.max(exp_bound(nh.exp));
        self.stats.curr_items += 1;
        self.stats.bytes += len as u64;
        len
    }

    /// Adds a slot for a new key, growing the index by a bucket when it is loaded.
    pub(crate) fn index_insert(&mut self, h: u64, s: u64) {
        self.index.insert(h, s);
        while self.index.wants_split() {
            // The split reads the key of every item in the bucket's chain, each in a segment
            // written at some other time, so most are cache misses: ask for all of them first,
            // so they load side by side rather than one after another.
            let metas = &self.segs.metas;
            self.index.for_each_in_chain(self.index.geometry().1, |e| {
                if !slot::is_flash(e) {
                    if let Some(d) = metas[slot::seg(e) as usize].data.get(slot::off(e) as usize) {
                        crate::buf::prefetch(d);
                    }
                }
            });
            let segs = &mut self.segs;
            let stats = &mut self.stats;
            let flash = &self.flash;
            self.index.split_one(|e| {
                if slot::is_flash(e) {
                    // The entry keeps the hash bits below the tag: all a bucket is chosen by.
                    return flash
                        .get(slot::flash_entry(e))
                        .map(|(check, _)| check | slot::tag(e) << 40);
                }
                let sg = slot::seg(e);
                match segs.metas[sg as usize].state {
                    SegState::Live => {
                        let d = &segs.metas[sg as usize].data[slot::off(e) as usize..];
                        Some(crate::Store::hash(&d[item::key_range(d)]))
                    }
                    SegState::Dead(r) => {
                        segs.release_dead_ref(sg);
                        if r == DeadReason::Expired && !slot::fetched(e) {
                            stats.expired_unfetched += 1;
                        }
                        None
                    }
                    SegState::Free => None,
                }
            });
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn store(
        &mut self,
        env: &Env<'_>,
        h: u64,
        mode: Mode,
        key: &[u8],
        flags: u32,
        exp: Time,
        value: &[u8],
        now: Time,
        cas_in: Option<u64>,
    ) -> Result<StoreOutcome, StoreError> {
        let r = self.store_inner(env, h, mode, key, flags, exp, value, now, cas_in);
        if r.is_err() && mode == Mode::Set {
            // memcached: a failed set must not leave the old value readable.
            self.delete(env, h, key, now);
        }
        self.sync_overhead(env);
        self.trim(env, now);
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn store_inner(
        &mut self,
        env: &Env<'_>,
        h: u64,
        mode: Mode,
        key: &[u8],
        flags: u32,
        exp: Time,
        value: &[u8],
        now: Time,
        cas_in: Option<u64>,
    ) -> Result<StoreOutcome, StoreError> {
        let geo = env.geo;
        let concat = matches!(mode, Mode::Append | Mode::Prepend);
        // The FIFO of a new key, decided once: the ghost forgets a key it is asked about.
        let mut new_key_queue = None;
        for _ in 0..MAX_ATTEMPTS {
            let old = match self.find(env, h, key, now) {
                Found::Live { pos, seg, off, hdr } => Some((pos, seg, off, hdr)),
                // The store layer brought a flashed item back to RAM first where the mode needs
                // the old value; a flashed copy still here is overwritten: it must never be
                // found again after this write.
                Found::Flash { pos, fref } if mode == Mode::Set => {
                    self.remove_flash(env, pos, &fref);
                    continue;
                }
                // Back on flash: making room for this write pushed it there (ops.rs).
                Found::Flash { pos, fref } => {
                    self.evict_flashed(env, pos, &fref);
                    continue;
                }
                _ => None,
            };
            match (mode, &old) {
                (Mode::Add, Some(_)) => return Ok(StoreOutcome::NotStored),
                (Mode::Replace | Mode::Append | Mode::Prepend, None) => {
                    return Ok(StoreOutcome::NotStored)
                }
                (Mode::Cas(_), None) => return Ok(StoreOutcome::NotFound),
                // With CAS disabled every item's CAS is 0 and memcached compares the item's
                // (0) with the old one's (0): the cas command always succeeds.
                (Mode::Cas(c), Some((_, seg, off, hdr)))
                    if geo.use_cas && self.cas_of(geo, *seg, *off, hdr) != c =>
                {
                    return Ok(StoreOutcome::Exists)
                }
                _ => {}
            }
            let (nflags, nexp, vlen) = match (&old, concat) {
                (Some((_, _, _, o)), true) => (o.flags, o.exp, o.value_len as usize + value.len()),
                _ => (flags, exp, value.len()),
            };
            if key.len() + vlen > geo.item_size_max {
                // Only reachable by append/prepend: memcached's failed allocation -> NOT_STORED.
                return Ok(StoreOutcome::NotStored);
            }
            let nh = NewHeader {
                key_len: key.len() as u8,
                value_len: vlen as u32,
                flags: nflags,
                exp: nexp,
                // An explicit CAS (meta E) is carried in the header; with -C every CAS is 0.
                cas: cas_in.filter(|_| geo.use_cas),
            };
            let ttl = ttl_bucket(nexp, now);
            let q = match &old {
                Some((_, oseg, _, _)) => self.admit(geo, h, Some(*oseg), nh.total_len()),
                None => {
                    *new_key_queue.get_or_insert_with(|| self.admit(geo, h, None, nh.total_len()))
                }
            };
            let (seg, off) = match self.reserve(env, nh.total_len(), ttl, q, now) {
                Ok(Reserve::At(seg, off)) => (seg, off),
                Ok(Reserve::Retry) => continue,
                Err(_) if concat => return Ok(StoreOutcome::NotStored),
                Err(e) => return Err(e),
            };
            let old_value = old.as_ref().map(|(_, oseg, ooff, o)| {
                let r = o.value_range();
                Part::Old {
                    seg: *oseg,
                    start: ooff + r.start,
                    len: r.len(),
                }
            });
            match (mode, old_value) {
                (Mode::Append, Some(ov)) => {
                    self.place(seg, off, &nh, Part::Bytes(key), &[ov, Part::Bytes(value)])
                }
                (Mode::Prepend, Some(ov)) => {
                    self.place(seg, off, &nh, Part::Bytes(key), &[Part::Bytes(value), ov])
                }
                _ => self.place(seg, off, &nh, Part::Bytes(key), &[Part::Bytes(value)]),
            };
            let new_slot = slot::new(slot::tag_of_hash(h), seg, off as u32);
            match old {
                Some((pos, oseg, ooff, _)) => {
                    self.index.set(pos, new_slot);
                    self.item_gone(env, oseg, ooff);
                }
                None => self.index_insert(h, new_slot),
            }
            self.stats.total_items += 1;
            let cas = if geo.use_cas {
                nh.cas.unwrap_or_else(|| self.derived_cas(seg, off))
            } else {
                0
            };
            return Ok(StoreOutcome::Stored { cas });
        }
        Err(StoreError::OutOfMemory)
    }

    /// Gives a live item a new exp, keeping its CAS. In place when the header has an exp
    /// field; otherwise the item is rewritten with one (and with its CAS made explicit).
    fn retime(
        &mut self,
        env: &Env<'_>,
        h: u64,
        key: &[u8],
        exp: Time,
        now: Time,
    ) -> Result<Found, StoreError> {
        for _ in 0..MAX_ATTEMPTS {
            let (pos, seg, off, hdr) = match self.find(env, h, key, now) {
                Found::Live { pos, seg, off, hdr } => (pos, seg, off, hdr),
                // The store brought it back to RAM before; on flash again means making room
                // for the rewrite evicted it there: this change fails as for an evicted item,
                // and the old copy must not outlive the failure.
                Found::Flash { pos, fref } => {
                    self.evict_flashed(env, pos, &fref);
                    return Ok(Found::Absent);
                }
                other => return Ok(other),
            };
            let s = self.index.get(pos);
            if let Some(eo) = hdr.exp_offset() {
                let m = &mut self.segs.metas[seg as usize];
                m.data[off + eo..off + eo + 4].copy_from_slice(&exp.to_le_bytes());
                // The segment must not be dropped as expired before this item is.
                m.max_exp = m.max_exp.max(exp_bound(exp));
                self.index.set(pos, slot::touched(s));
                let hdr = self.header_at(seg, off);
                return Ok(Found::Live { pos, seg, off, hdr });
            }
            if exp == 0 {
                self.index.set(pos, slot::touched(s));
                return Ok(Found::Live { pos, seg, off, hdr });
            }
            let cas = env
                .geo
                .use_cas
                .then(|| self.cas_of(env.geo, seg, off, &hdr));
            let nh = NewHeader {
                key_len: hdr.key_len,
                value_len: hdr.value_len,
                flags: hdr.flags,
                exp,
                cas,
            };
            let q = self.admit(env.geo, h, Some(seg), 0);
            let (nseg, noff) = match self.reserve(env, nh.total_len(), ttl_bucket(exp, now), q, now)
            {
                Ok(Reserve::At(a, b)) => (a, b),
                Ok(Reserve::Retry) => continue,
                Err(e) => return self.retime_failed(env, h, key, now, e),
            };
            let (kr, vr) = (hdr.key_range(), hdr.value_range());
            self.place(
                nseg,
                noff,
                &nh,
                Part::Old {
                    seg,
                    start: off + kr.start,
                    len: kr.len(),
                },
                &[Part::Old {
                    seg,
                    start: off + vr.start,
                    len: vr.len(),
                }],
            );
            self.index
                .set(pos, slot::moved(slot::touched(s), nseg, noff as u32));
            self.item_gone(env, seg, off);
            let hdr = self.header_at(nseg, noff);
            return Ok(Found::Live {
                pos,
                seg: nseg,
                off: noff,
                hdr,
            });
        }
        self.retime_failed(env, h, key, now, StoreError::OutOfMemory)
    }

    /// No room to rewrite an item under its new expiry. With eviction on, the item is evicted
    /// (the change fails as it would for an item evicted just before it): serving it on with
    /// its old expiry would tell a `gat` client a lifetime the item does not have. With `-M` the
    /// caller serves it unchanged, since nothing may vanish there.
    fn retime_failed(
        &mut self,
        env: &Env<'_>,
        h: u64,
        key: &[u8],
        now: Time,
        e: StoreError,
    ) -> Result<Found, StoreError> {
        if !env.geo.evict {
            return Err(e);
        }
        if let Found::Live { pos, .. } = self.find(env, h, key, now) {
            self.remove(env, pos);
            self.stats.evictions += 1;
        }
        Ok(Found::Absent)
    }

    pub fn touch(&mut self, env: &Env<'_>, h: u64, key: &[u8], exp: Time, now: Time) -> bool {
        let r = matches!(self.retime(env, h, key, exp, now), Ok(Found::Live { .. }));
        self.sync_overhead(env);
        self.trim(env, now);
        r
    }

    pub fn get_and_touch<R>(
        &mut self,
        env: &Env<'_>,
        h: u64,
        key: &[u8],
        exp: Time,
        now: Time,
        f: impl FnOnce(Item<'_>) -> R,
    ) -> Lookup<R> {
        let r = self.retime(env, h, key, exp, now);
        self.sync_overhead(env);
        let out = match r {
            Ok(Found::Live { pos, seg, off, hdr }) => {
                let s = self.index.get(pos);
                self.index.set(pos, slot::touched(s));
                let mut it = self.item_at(env.geo, seg, off, &hdr);
                it.fetched = slot::fetched(s);
                Lookup::Hit(f(it))
            }
            Ok(Found::Dead(DeadReason::Expired)) => Lookup::Expired,
            Ok(Found::Dead(DeadReason::Flushed)) => Lookup::Flushed,
            // Still on flash: the store could not bring it back (no memory with evict=false).
            Ok(Found::Absent | Found::Flash { .. }) => Lookup::Miss,
            // No memory to give the item an expiry (evict=false): serve it unchanged.
            Err(_) => self.get(env, h, key, now, f).unwrap_or(Lookup::Miss),
        };
        // After the read: trimming may evict the segment the item was just read from.
        self.trim(env, now);
        out
    }

    #[allow(clippy::too_many_arguments)]
    pub fn delta(
        &mut self,
        env: &Env<'_>,
        h: u64,
        key: &[u8],
        incr: bool,
        delta: u64,
        now: Time,
        parse: impl FnOnce(&[u8]) -> Option<u64>,
        pad: bool,
    ) -> Result<(u64, u64), DeltaError> {
        let r = self.delta_inner(env, h, key, incr, delta, now, parse, pad);
        self.sync_overhead(env);
        self.trim(env, now);
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn delta_inner(
        &mut self,
        env: &Env<'_>,
        h: u64,
        key: &[u8],
        incr: bool,
        delta: u64,
        now: Time,
        parse: impl FnOnce(&[u8]) -> Option<u64>,
        pad: bool,
    ) -> Result<(u64, u64), DeltaError> {
        let mut parse = Some(parse);
        // Computed once: a retry after eviction finds the same value (eviction moves, never
        // changes, items) or none.
        let mut result: Option<(u64, [u8; 20], usize)> = None;
        for _ in 0..MAX_ATTEMPTS {
            let (pos, seg, off, hdr) = match self.find(env, h, key, now) {
                Found::Live { pos, seg, off, hdr } => (pos, seg, off, hdr),
                // As in retime: back on flash after the store brought it to RAM.
                Found::Flash { pos, fref } => {
                    self.evict_flashed(env, pos, &fref);
                    return Err(DeltaError::NotFound);
                }
                _ => return Err(DeltaError::NotFound),
            };
            let old_len = hdr.value_len as usize;
            if result.is_none() {
                if old_len == 0 {
                    return Err(DeltaError::NonNumeric);
                }
                let d = &self.segs.metas[seg as usize].data[off..];
                let parse = parse.take().expect("parse runs once");
                let v = parse(&d[hdr.value_range()]).ok_or(DeltaError::NonNumeric)?;
                let n = if incr {
                    v.wrapping_add(delta)
                } else {
                    v.saturating_sub(delta)
                };
                let (digits, dl) = decimal(n);
                result = Some((n, digits, dl));
            }
            let (n, digits, dl) = result.unwrap();
            // memcached rewrites in place when the number got shorter, leaving the old length
            // padded with spaces ("10" decr 1 -> "9 "); we reproduce the bytes.
            let vlen = if pad { dl.max(old_len) } else { dl };
            let nh = NewHeader {
                key_len: hdr.key_len,
                value_len: vlen as u32,
                flags: hdr.flags,
                exp: hdr.exp,
                cas: None,
            };
            let q = self.admit(env.geo, h, Some(seg), 0);
            let (nseg, noff) =
                match self.reserve(env, nh.total_len(), ttl_bucket(hdr.exp, now), q, now) {
                    Ok(Reserve::At(a, b)) => (a, b),
                    Ok(Reserve::Retry) => continue,
                    // No variant for it in the API; only reachable with evict=false and full memory.
                    Err(_) => return Err(DeltaError::NotFound),
                };
            self.place(
                nseg,
                noff,
                &nh,
                Part::Bytes(key),
                &[Part::Bytes(&digits[..dl]), Part::Spaces(vlen - dl)],
            );
            let s = self.index.get(pos);
            self.index
                .set(pos, slot::moved(slot::touched(s), nseg, noff as u32));
            self.item_gone(env, seg, off);
            let cas = if env.geo.use_cas {
                self.derived_cas(nseg, noff)
            } else {
                0
            };
            return Ok((n, cas));
        }
        Err(DeltaError::NotFound)
    }
}
