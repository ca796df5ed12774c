//! Page life: which page a stream opens next (a free one, an emptied one, or the oldest
//! evicted), full pages reclaimed once all their records have expired, and which page
//! compaction takes (memcached's rule, and ext_drop_unread's pass). The module doc of
//! flash/mod.rs draws the pages and the two streams.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::{Flash, Open, Stream, Writes, NEVER, NO_PAGE};

/// The page a flash-wide pass picked for compaction ([`Flash::compaction_victim`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Victim {
    pub page: u32,
    pub gen: u16,
    /// ext_drop_unread's pass: records not read since they were written are dropped.
    pub drop_unread: bool,
}

impl Flash {
    /// Opens `stream`'s next page: a free one, a full one whose records are all dead, or the
    /// oldest full one (its records are lost: they no longer match its generation).
    pub(super) fn next_page(&self, w: &mut Writes, stream: Stream) {
        let sh = &*self.sh;
        let k = stream as usize;
        if w.open[k].page != NO_PAGE {
            w.full.push_back(w.open[k].page);
        }
        if w.free.is_empty() && w.full.is_empty() {
            // A one-page file: the other stream's open page is closed and taken.
            for o in w.open.iter_mut().filter(|o| o.page != NO_PAGE) {
                if let Some(b) = o.filling.take() {
                    w.queue.push_back(Arc::new(b));
                    sh.wake.notify_all();
                }
                w.full.push_back(o.page);
                o.page = NO_PAGE;
            }
        }
        let p = if let Some(p) = w.free.pop() {
            sh.c.page_allocs.fetch_add(1, Relaxed);
            p
        } else {
            let empty = w
                .full
                .iter()
                .position(|&p| sh.live_objects[p as usize].load(Relaxed) == 0);
            let p = match empty {
                Some(i) => {
                    sh.c.page_reclaims.fetch_add(1, Relaxed);
                    w.full.remove(i).expect("in range")
                }
                None => {
                    sh.c.page_evictions.fetch_add(1, Relaxed);
                    // With one page, the page just closed is the one recycled.
                    w.full.pop_front().expect("at least one page")
                }
            };
            sh.gens[p as usize].fetch_add(1, Relaxed);
            let objs = sh.live_objects[p as usize].swap(0, Relaxed);
            sh.stale.fetch_add(objs, Relaxed);
            let bytes = sh.live_bytes[p as usize].swap(0, Relaxed);
            sh.c.objects_evicted.fetch_add(objs, Relaxed);
            sh.c.bytes_evicted.fetch_add(bytes, Relaxed);
            sh.recycled.fetch_add(1, Relaxed);
            p
        };
        let c = &sh.c;
        let opened: u64 = [&c.page_allocs, &c.page_reclaims, &c.page_evictions]
            .iter()
            .map(|a| a.load(Relaxed))
            .sum();
        let opened = opened + sh.opened_base.load(Relaxed);
        sh.versions[p as usize].store(opened, Relaxed);
        sh.low[p as usize].store(stream == Stream::LowTtl, Relaxed);
        sh.expires[p as usize].store(0, Relaxed);
        w.open[k] = Open {
            filling: None,
            page: p,
            used: 0,
        };
    }

    /// Reclaims every full page whose records have all expired (by the latest expiry written
    /// to it), as a page with no live record is: its generation moves on, its entries become
    /// stale (swept later, or dropped by their key's next lookup) and it is free. Low-TTL pages
    /// are made for this; a default page qualifies too once its last record expired. Counted
    /// as memcached counts a page freed when its last object goes (page_reclaims).
    pub fn reclaim_expired(&self, now: crate::Time) {
        let sh = &*self.sh;
        let mut w = sh.w.lock();
        let gone = |p: u32| {
            let e = sh.expires[p as usize].load(Relaxed);
            e != NEVER && e <= now && sh.live_objects[p as usize].load(Relaxed) > 0
        };
        while let Some(i) = w.full.iter().position(|&p| gone(p)) {
            let p = w.full.remove(i).expect("in range");
            sh.gens[p as usize].fetch_add(1, Relaxed);
            let objs = sh.live_objects[p as usize].swap(0, Relaxed);
            sh.live_bytes[p as usize].store(0, Relaxed);
            sh.stale.fetch_add(objs, Relaxed);
            sh.recycled.fetch_add(1, Relaxed);
            sh.c.page_reclaims.fetch_add(1, Relaxed);
            sh.c.pages_expired.fetch_add(1, Relaxed);
            // Reused before any never-written page (free pops from the end).
            w.free.push(p);
        }
    }

    /// The page to compact now, if any, by memcached's rule (storage.c
    /// `storage_compact_check`): while at most `compact_under` pages are free, the oldest full
    /// default-stream page that still holds live records and whose live bytes are below
    /// `page size × max_frag × (1 − free pages / pages)` (the fewer pages free, the fuller a
    /// page may be and still be compacted); if none is and ext_drop_unread is on while at
    /// most `drop_under` pages are free, the oldest such page whatever its bytes, its unread
    /// records to be dropped. Copying the kept records out (`Store::maintain`) leaves the
    /// page with none: free, and the next one reused before any page with live records is.
    pub(crate) fn compaction_victim(&self) -> Option<Victim> {
        let sh = &*self.sh;
        let w = sh.w.lock();
        let pages = sh.gens.len() as u128;
        let free = self.free_pages(&w);
        if free > self.tune.compact_under(sh.gens.len()) {
            return None;
        }
        // live < page × (permille / 1000) × (pages − free) / pages, in integers.
        let limit = sh.page_size as u128
            * u128::from(self.tune.max_frag_permille())
            * (pages - free as u128);
        let mut candidates = w.full.iter().copied().filter(|&p| {
            !sh.low[p as usize].load(Relaxed) && sh.live_objects[p as usize].load(Relaxed) > 0
        });
        let victim = |page: u32, drop_unread| Victim {
            page,
            gen: sh.gens[page as usize].load(Relaxed) as u16,
            drop_unread,
        };
        let oldest = candidates.clone().next();
        if let Some(p) = candidates
            .find(|&p| u128::from(sh.live_bytes[p as usize].load(Relaxed)) * 1000 * pages < limit)
        {
            return Some(victim(p, false));
        }
        if self.tune.drop_unread() && free <= self.tune.drop_under(sh.gens.len()) {
            return oldest.map(|p| victim(p, true));
        }
        None
    }

    /// Pages free: never written, or full with no live record left (memcached frees a page
    /// when its last object goes; here it waits in `full` until reused, first of all).
    pub(super) fn free_pages(&self, w: &Writes) -> usize {
        let sh = &*self.sh;
        w.free.len()
            + w.full
                .iter()
                .filter(|&&p| sh.live_objects[p as usize].load(Relaxed) == 0)
                .count()
    }
}
