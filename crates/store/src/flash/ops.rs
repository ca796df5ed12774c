//! The shard's side of the flash tier: moving an item's value to flash (demotion, called by
//! eviction and by the age pass of ext_item_age), bringing it back (recache), dropping a
//! flashed copy, and the maintenance pass over the file (`Store::compact_flash`: expired
//! pages reclaimed, one page compacted). The flash module owns the file; these own the index
//! slot and the shard's entry table.
//!
//! A flashed item's slot keeps its read count (index.rs `slot::freq`): a demotion or a
//! compaction's copy sets it to 0 and a flash hit raises it, so it says whether the record
//! was read since it was written, what ext_drop_unread's compaction keeps.

use std::sync::atomic::Ordering::Relaxed;

use crate::flash::{FlashRef, Loc, Meta};
use crate::index::{slot, Pos};
use crate::item::{Header, NewHeader};
use crate::segment::{ttl_bucket, DeadReason, Queue};
use crate::shard::{Env, Found, Part, Reserve, Shard, MAX_ATTEMPTS};
use crate::Time;

impl Shard {
    /// Drops a flashed item's slot and entry: its record is unreachable from now on.
    pub fn remove_flash(&mut self, env: &Env<'_>, pos: Pos, fref: &FlashRef) {
        self.index.remove(pos);
        self.flash.free(fref.entry);
        if let Some(f) = env.flash {
            f.release(&fref.loc);
        }
    }

    /// A flashed copy found by a write that needs its item in RAM (replace, cas, append,
    /// prepend, incr, decr, touch, gat): the store brought it back, or found it in RAM, and
    /// making room for the write pushed it to flash again. The write fails as on an evicted
    /// item (memcached's, whose allocation for the write can evict the old item alike), and
    /// the item is counted evicted: it was, by the write's own room-making. Uncounted, it
    /// would be an item gone without any count saying so (the model checker's `losses`).
    pub fn evict_flashed(&mut self, env: &Env<'_>, pos: Pos, fref: &FlashRef) {
        self.remove_flash(env, pos, fref);
        self.stats.evictions += 1;
    }

    /// The slot of `fref` if it is still where a lookup left it (no write, delete, recache or
    /// page recycling since).
    pub fn refind_flash(
        &mut self,
        env: &Env<'_>,
        key: &[u8],
        fref: &FlashRef,
        now: Time,
    ) -> Option<Pos> {
        match self.find(env, fref.h, key, now) {
            Found::Flash { pos, fref: now_ref } if now_ref == *fref => Some(pos),
            _ => None,
        }
    }

    /// Brings a flashed item read back (`v`) into RAM, keeping its CAS, flags and expiry, and
    /// drops its flash entry. false if its slot changed since the lookup or no memory was had.
    pub fn recache(
        &mut self,
        env: &Env<'_>,
        key: &[u8],
        fref: &FlashRef,
        v: &crate::FlashValue,
        now: Time,
    ) -> bool {
        for _ in 0..MAX_ATTEMPTS {
            let Some(pos) = self.refind_flash(env, key, fref, now) else {
                return false;
            };
            let m = v.meta;
            let nh = NewHeader {
                key_len: key.len() as u8,
                value_len: v.value().len() as u32,
                flags: m.flags,
                exp: m.exp,
                cas: env.geo.use_cas.then_some(m.cas),
            };
            // Read from flash: it has proved itself, as an item promoted out of Small has.
            let (seg, off) = match self.reserve(
                env,
                nh.total_len(),
                ttl_bucket(m.exp, now),
                Queue::Main,
                now,
            ) {
                Ok(Reserve::At(a, b)) => (a, b),
                Ok(Reserve::Retry) => continue,
                Err(_) => return false,
            };
            self.place(seg, off, &nh, Part::Bytes(key), &[Part::Bytes(v.value())]);
            let s = self.index.get(pos);
            self.index.set(pos, slot::moved(s, seg, off as u32));
            self.flash.free(fref.entry);
            if let Some(f) = env.flash {
                f.release(&fref.loc);
            }
            return true;
        }
        false
    }

    /// Links `key` (hash `h`) to the record at `loc` again (the start, from the list a
    /// graceful stop left: flash/keep.rs), unless the key is already here. false: not linked
    /// (present, or the shard's entry space is full).
    pub(crate) fn link_flashed(
        &mut self,
        env: &Env<'_>,
        h: u64,
        key: &[u8],
        loc: Loc,
        now: Time,
    ) -> bool {
        if !matches!(self.find(env, h, key, now), Found::Absent | Found::Dead(_)) {
            return false;
        }
        let Some(i) = self.flash.alloc(h, loc) else {
            return false;
        };
        // Any segment id will do: `to_flash` replaces it and keeps the tag.
        self.index_insert(h, slot::to_flash(slot::new(slot::tag_of_hash(h), 1, 0), i));
        self.sync_overhead(env);
        true
    }

    /// Writes the live item at (seg, off) to flash if it qualifies (flash configured, value
    /// large enough, a write buffer free), on the low-TTL pages if it is about to expire.
    /// Returns its new entry; the caller repoints the slot and drops the RAM copy.
    pub(crate) fn demote(
        &mut self,
        env: &Env<'_>,
        seg: u32,
        off: usize,
        hdr: &Header,
        h: u64,
        now: Time,
    ) -> Option<u32> {
        let f = env.flash?;
        if !f.wants(hdr.key_len as usize, hdr.value_len as usize) {
            return None;
        }
        let cas = self.cas_of(env.geo, seg, off, hdr);
        let d = &self.segs.metas[seg as usize].data[off..];
        let meta = Meta {
            flags: hdr.flags,
            exp: hdr.exp,
            cas,
        };
        let loc: Loc = f.append_to(
            &d[hdr.key_range()],
            &d[hdr.value_range()],
            meta,
            f.stream_for(hdr.exp, now),
        )?;
        let i = self.flash.alloc(h, loc);
        if i.is_none() {
            f.release(&loc);
        }
        i
    }

    /// ext_item_age, from the maintenance pass: every segment opened at least `item_age`
    /// seconds ago sends its items that qualify for flash there now, before eviction would,
    /// and takes no more writes (so an item written later is not sent early next time).
    /// Items carry no access time, so "idle" is their segment's age: a read does not hold an
    /// item back. A segment left empty is freed. Stops when no write buffer is free (the
    /// next pass goes on), so one pass holds the shard lock for at most the buffers' bytes.
    pub(crate) fn age_out(&mut self, env: &Env<'_>, now: Time) {
        let Some(f) = env.flash else { return };
        let age = f.tune.item_age();
        if age == crate::DEFAULT_ITEM_AGE {
            return;
        }
        let mut v = self.segs.head();
        while v != 0 {
            let next = self.segs.next_of(v);
            let m = &self.segs.metas[v as usize];
            if !m.aged
                && m.items > 0
                && m.opened.saturating_add(age) <= now
                && !self.age_segment(env, v, now)
            {
                return;
            }
            v = next;
        }
    }

    /// `age_out` for segment `v`; false if it stopped for want of a write buffer.
    fn age_segment(&mut self, env: &Env<'_>, v: u32, now: Time) -> bool {
        let f = env.flash.expect("age_out checked");
        let end = self.segs.metas[v as usize].write;
        let (mut off, mut moved, mut complete) = (0, false, true);
        while off < end {
            let hdr = self.header_at(v, off);
            let len = hdr.total_len();
            let live = !hdr.is_dead() && (hdr.exp == 0 || hdr.exp > now);
            if !live || !f.wants(hdr.key_len as usize, hdr.value_len as usize) {
                off += len;
                continue;
            }
            let h = crate::Store::hash(&self.segs.metas[v as usize].data[off..][hdr.key_range()]);
            let Some(pos) = self.index.find_exact(h, v, off as u32) else {
                off += len;
                continue;
            };
            let s = self.index.get(pos);
            let Some(i) = self.demote(env, v, off, &hdr, h, now) else {
                complete = false;
                break;
            };
            // The value goes to flash; the slot stays, naming the flash entry.
            self.index.set(pos, slot::to_flash(slot::cleared(s), i));
            self.drop_from_victim(v, off, len);
            moved = true;
            off += len;
        }
        let m = &mut self.segs.metas[v as usize];
        if moved && m.active {
            // Sealed: what is written from now on starts a new segment, with its own age.
            m.active = false;
            self.active[m.queue as usize][m.ttl as usize] = 0;
        }
        if !m.active {
            m.aged = complete;
        }
        if m.items == 0 && !m.active {
            env.budget.release(self.segs.retire(v, DeadReason::Expired));
            self.sync_overhead(env);
        }
        complete
    }

    /// Items in RAM that would go to flash (live, value of at least ext_item_size), and their
    /// bytes: `stats items` shows them apart, as memcached's large slab classes, from the
    /// rest and the flashed items (whose RAM is a small header in memcached). A walk of the
    /// shard's item headers, for that rare command only.
    pub fn flashable(&self, env: &Env<'_>, now: Time) -> (u64, u64) {
        let Some(f) = env.flash else { return (0, 0) };
        let (mut n, mut bytes) = (0, 0);
        let mut v = self.segs.head();
        while v != 0 {
            let end = self.segs.metas[v as usize].write;
            let mut off = 0;
            while off < end {
                let hdr = self.header_at(v, off);
                let len = hdr.total_len();
                let live = !hdr.is_dead() && (hdr.exp == 0 || hdr.exp > now);
                if live && f.wants(hdr.key_len as usize, hdr.value_len as usize) {
                    n += 1;
                    bytes += len as u64;
                }
                off += len;
            }
            v = self.segs.next_of(v);
        }
        (n, bytes)
    }
}

impl crate::Store {
    /// For `add`: whether `key` is a live flashed item, read and checked but left on flash
    /// (memcached's `add` of an existing key does not bring its value back to RAM either; the
    /// other modes that need the old value promote it). A copy that fails verification or
    /// has expired is dropped, as a get would.
    pub(crate) fn flashed_live(&self, h: u64, key: &[u8], now: Time) -> bool {
        if self.flash.is_none() {
            return false;
        }
        for _ in 0..crate::FLASH_RETRIES {
            let found = self.with_shard(h, now, |s, env| match s.find(env, h, key, now) {
                Found::Flash { fref, .. } => Some(fref),
                _ => None,
            });
            let Some(fref) = found else { return false };
            match self.read_flash(&fref, key) {
                Ok(v) if v.exp() == 0 || v.exp() > now => return true,
                _ => self.forget_flash(key, &fref, now),
            }
        }
        false
    }

    /// The flash tier's share of `maintain`: full pages whose records have all expired are
    /// reclaimed, then one page is compacted (`Flash::compaction_victim`): its live records
    /// are read (no lock held), appended again and their entries repointed (the index slots
    /// name entries, so they do not change). A record that changed meanwhile (deleted,
    /// overwritten, recached) is skipped; an expired one is dropped with its item, uncounted,
    /// as memcached's compaction counts nothing for an expired item. On
    /// ext_drop_unread's pass a record not read since it was written is dropped instead
    /// (memcached drops its COLD items' records there), counted compact_skipped; its item
    /// stays until its key's next lookup finds the record gone (`Flash::drop_kept`).
    pub(crate) fn compact_flash(&self, now: Time) {
        let Some(f) = &self.flash else { return };
        f.reclaim_expired(now);
        let Some(victim) = f.compaction_victim() else {
            return;
        };
        let c = f.counters();
        let mut rec = Vec::new();
        for (me, shard) in self.shards.iter().enumerate() {
            let env = self.env(me);
            let mut victims = Vec::new();
            shard.lock().flash.each(|i, loc| {
                if loc.page == victim.page && loc.gen == victim.gen {
                    victims.push((i, loc));
                }
            });
            for (i, loc) in victims {
                let Ok(g) = f.read(&loc, &mut rec) else {
                    continue;
                };
                let Ok((key, v)) = f.verify_any(&rec, victim.page, g) else {
                    continue;
                };
                let mut s = shard.lock();
                if s.flash.get(i).map(|(_, l)| l) != Some(loc) {
                    continue;
                }
                let h = Self::hash(key);
                let pos = s
                    .index
                    .find_exact(h, slot::FLASH_BASE + (i >> 20), i & slot::OFF_MAX);
                if v.meta.exp != 0 && v.meta.exp <= now {
                    // Expired: dropped as its key's next lookup would drop it, so the page
                    // empties. Counted nowhere, as memcached's readback counts nothing for an
                    // item no longer valid (storage.c `storage_compact_readback`).
                    if let Some(pos) = pos {
                        s.remove_flash(&env, pos, &FlashRef { h, entry: i, loc });
                    }
                    continue;
                }
                if victim.drop_unread && pos.is_some_and(|p| slot::freq(s.index.get(p)) == 0) {
                    // The item stays, naming a place already gone: a miss from flash at its
                    // key's next lookup, as memcached's kept header is (Flash::drop_kept).
                    s.flash.relocate(i, f.drop_kept(&loc));
                    c.compact_skipped.fetch_add(1, Relaxed);
                    c.unread_dropped.fetch_add(1, Relaxed);
                    continue;
                }
                match f.append(key, v.value, v.meta) {
                    Some(nl) => {
                        s.flash.relocate(i, nl);
                        f.release(&loc);
                        // Written again: unread until its next hit.
                        if let Some(pos) = pos {
                            let cleared = slot::cleared(s.index.get(pos));
                            s.index.set(pos, cleared);
                        }
                        c.compact_rescues.fetch_add(1, Relaxed);
                    }
                    None => {
                        // The writer is behind: the rest of the page is left for the next call.
                        c.compact_skipped.fetch_add(1, Relaxed);
                        return;
                    }
                }
            }
        }
    }
}
