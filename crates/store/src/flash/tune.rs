//! The flash tier's settings that change at run time: memcached's `extstore <name> <value>`
//! command (proto_text.c) sets them on a running server. The file's shape (path, size, page
//! and write buffer sizes) stays what [`FlashConfig`] opened it with; these eight are read
//! where they act, on every decision, so a change applies to the next item, hit or
//! compaction check.
//!
//! ```text
//!   extstore item_size N     -> Tune::item_size      Flash::wants (which items go to flash)
//!   extstore low_ttl N       -> Tune::low_ttl        Flash::stream_for (low-TTL pages)
//!   extstore item_age N      -> Tune::item_age       Shard::age_out
//!   extstore recache_rate N  -> Tune::recache_rate   Flash::recache_due
//!   extstore compact_under N -> Tune::compact_under  Flash::compaction_victim
//!   extstore max_frag F      -> Tune::max_frag       Flash::compaction_victim
//!   extstore drop_unread N   -> Tune::drop_unread    Flash::compaction_victim
//!   extstore drop_under N    -> Tune::drop_under     Flash::compaction_victim
//! ```

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};

use super::FlashConfig;

/// One run-time setting, in the store's units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlashSetting {
    ItemSize(usize),
    /// Seconds; [`super::DEFAULT_ITEM_AGE`]: never.
    ItemAge(u32),
    LowTtl(u32),
    RecacheRate(u32),
    /// Pages; None: a quarter of the file's pages.
    CompactUnder(Option<usize>),
    /// Per mille of a page's bytes.
    MaxFragPermille(u32),
    DropUnread(bool),
    /// Pages; None: a quarter of the file's pages.
    DropUnder(Option<usize>),
}

/// `compact_under` / `drop_under` unset: a quarter of the pages (kept apart so the default
/// follows the file).
const UNSET: usize = usize::MAX;

/// The current values; each is read and written on its own (no setting depends on another).
#[derive(Debug)]
pub(crate) struct Tune {
    item_size: AtomicUsize,
    item_age: AtomicU32,
    low_ttl: AtomicU32,
    recache_rate: AtomicU32,
    compact_under: AtomicUsize,
    max_frag_permille: AtomicU32,
    drop_unread: AtomicBool,
    drop_under: AtomicUsize,
}

impl Tune {
    pub fn new(cfg: &FlashConfig) -> Tune {
        Tune {
            item_size: AtomicUsize::new(cfg.item_size),
            item_age: AtomicU32::new(cfg.item_age),
            low_ttl: AtomicU32::new(cfg.low_ttl),
            recache_rate: AtomicU32::new(cfg.recache_rate),
            compact_under: AtomicUsize::new(cfg.compact_under.unwrap_or(UNSET)),
            max_frag_permille: AtomicU32::new(cfg.max_frag_permille),
            drop_unread: AtomicBool::new(cfg.drop_unread),
            drop_under: AtomicUsize::new(cfg.drop_under.unwrap_or(UNSET)),
        }
    }

    pub fn set(&self, s: FlashSetting) {
        match s {
            FlashSetting::ItemSize(v) => self.item_size.store(v, Relaxed),
            FlashSetting::ItemAge(v) => self.item_age.store(v, Relaxed),
            FlashSetting::LowTtl(v) => self.low_ttl.store(v, Relaxed),
            FlashSetting::RecacheRate(v) => self.recache_rate.store(v, Relaxed),
            FlashSetting::CompactUnder(v) => self.compact_under.store(v.unwrap_or(UNSET), Relaxed),
            FlashSetting::MaxFragPermille(v) => self.max_frag_permille.store(v, Relaxed),
            FlashSetting::DropUnread(v) => self.drop_unread.store(v, Relaxed),
            FlashSetting::DropUnder(v) => self.drop_under.store(v.unwrap_or(UNSET), Relaxed),
        }
    }

    pub fn item_size(&self) -> usize {
        self.item_size.load(Relaxed)
    }
    pub fn item_age(&self) -> u32 {
        self.item_age.load(Relaxed)
    }
    pub fn low_ttl(&self) -> u32 {
        self.low_ttl.load(Relaxed)
    }
    pub fn recache_rate(&self) -> u32 {
        self.recache_rate.load(Relaxed)
    }
    /// Pages, given the file's page count for the default.
    pub fn compact_under(&self, pages: usize) -> usize {
        match self.compact_under.load(Relaxed) {
            UNSET => pages / 4,
            n => n,
        }
    }
    pub fn max_frag_permille(&self) -> u32 {
        self.max_frag_permille.load(Relaxed)
    }
    pub fn drop_unread(&self) -> bool {
        self.drop_unread.load(Relaxed)
    }
    /// Pages, given the file's page count for the default.
    pub fn drop_under(&self, pages: usize) -> usize {
        match self.drop_under.load(Relaxed) {
            UNSET => pages / 4,
            n => n,
        }
    }
}

impl crate::Store {
    /// Changes one flash setting on the running store; false without a flash tier.
    pub fn tune_flash(&self, s: FlashSetting) -> bool {
        match self.flash.as_deref() {
            Some(f) => {
                f.tune.set(s);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_start_from_the_config_and_change_one_at_a_time() {
        let mut cfg = FlashConfig::new("/nonexistent", 1 << 30);
        cfg.item_size = 100;
        let t = Tune::new(&cfg);
        assert_eq!(
            (t.item_size(), t.compact_under(16), t.recache_rate()),
            (100, 4, super::super::DEFAULT_RECACHE_RATE)
        );
        t.set(FlashSetting::CompactUnder(Some(0)));
        t.set(FlashSetting::ItemSize(7));
        assert_eq!((t.item_size(), t.compact_under(16)), (7, 0));
        t.set(FlashSetting::CompactUnder(None));
        assert_eq!(t.compact_under(16), 4);
        t.set(FlashSetting::MaxFragPermille(0));
        t.set(FlashSetting::RecacheRate(1));
        t.set(FlashSetting::LowTtl(5));
        t.set(FlashSetting::ItemAge(9));
        assert_eq!(
            (
                t.max_frag_permille(),
                t.recache_rate(),
                t.low_ttl(),
                t.item_age()
            ),
            (0, 1, 5, 9)
        );
        assert_eq!((t.drop_unread(), t.drop_under(16)), (false, 4));
        t.set(FlashSetting::DropUnread(true));
        t.set(FlashSetting::DropUnder(Some(3)));
        assert_eq!((t.drop_unread(), t.drop_under(16)), (true, 3));
    }
}
