//! The flash tier: values of large-enough items leave RAM for a file (memcached's extstore,
//! `-o ext_path=FILE:SIZE`), and their index slots keep where.
//!
//! Owns the file, its pages, the write buffers (this file), the writer thread (writer.rs), the
//! record format (record.rs), the per-shard table of flashed items (entries.rs) and the shard
//! operations on them (ops.rs: demote, recache, drop), the settings that change at run
//! time (tune.rs: memcached's `extstore <name> <value>`), the list of flashed items a
//! graceful stop leaves beside the file for the next start (keep.rs), the page choice,
//! expired pages' reclaim and compaction's choice (pages.rs), and the reads of
//! several records together (batch.rs: a multi-get's). The shards decide
//! what goes to flash (evict.rs: what eviction would otherwise drop) and serve reads
//! (lib.rs, shard.rs); this module only writes records and reads them back.
//!
//! ```text
//!  file (SIZE bytes) = pages of ext_page_size; several files (repeated ext_path) number
//!  their pages on from the previous file's last, and `Shared::at` maps a page to its file
//!  +-----------------+-----------------+-----------------+-----+
//!  | page 0  gen 3   | page 1  gen 1   | page 2  gen 0   | ... |      gen: bumped each time the
//!  | [rec][rec][rec] | [rec][rec]..... | (free)          |     |      page is recycled
//!  +-----------------+-----------------+-----------------+-----+
//!          ^ full, oldest first            ^ free list
//!  write buffers (ext_wbuf_size, four): demotion (under a shard lock) appends a record to the
//!    buffer being filled; a full buffer is queued to the writer thread, which writes it at its
//!    page offset in paced pieces (writer.rs); no buffer free = flash is behind = the item is
//!    evicted as before (a set never waits for the disk). Queued and filling buffers are read
//!    from RAM.
//!  page choice when the open page is full: a free page; else a full page with no live
//!    record left (reclaimed); else the oldest full page (evicted: its records become
//!    unreachable because their generation no longer matches).
//!  two streams of pages (memcached's page buckets), each with its open page and buffer:
//!    default    everything else, and compaction's copies
//!    low TTL    items with less than ext_low_ttl seconds to live when they go to flash:
//!               their pages empty together; a full one whose latest expiry has passed is
//!               reclaimed whole by the maintenance pass (`reclaim_expired`), and
//!               compaction never picks one
//!  compaction (`compaction_victim`, memcached's rule): while few pages are free, the
//!    oldest fragmented page; with ext_drop_unread, while at most ext_drop_under pages are
//!    free, the oldest page anyway, keeping only the records read since they were written
//!
//!  per shard (entries.rs), one 16-byte entry per flashed item:
//!    [ key hash bits 0..40 | page (24) ]  [ gen (16) | offset / 8 (24) | record length (24) ]
//!  index slot of a flashed item: its tag and access bits, with a reserved segment id range
//!    naming the entry (index.rs `slot::flash`)
//! ```
//!
//! Reads happen outside the shard lock: a lookup under the lock yields a [`FlashRef`] (where
//! the record is, which generation), [`crate::Store::read_flash`] reads and verifies it without
//! any lock, and the caller finishes the request with the value. The store's closure-under-lock
//! entry points (`get`, `peek`, ...) do exactly that in sequence; an asynchronous caller runs
//! `Store::get_located`, the read elsewhere (an I/O thread, io_uring), and `Store::finish_get`.

mod batch;
pub(crate) mod entries;
mod keep;
mod ops;
mod pages;
pub(crate) mod record;
mod tune;
mod writer;

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

pub use keep::FlashRestore;
pub use record::Reject;
pub(crate) use record::{Meta, Place};
pub use tune::FlashSetting;

/// memcached's defaults for the `ext_*` options the store uses.
pub const DEFAULT_PAGE_SIZE: usize = 64 << 20;
pub const DEFAULT_WBUF_SIZE: usize = 4 << 20;
pub const DEFAULT_ITEM_SIZE: usize = 512;
pub const DEFAULT_RECACHE_RATE: u32 = 2000;
pub const DEFAULT_LOW_TTL: u32 = 0;
pub const DEFAULT_MAX_FRAG_PERMILLE: u32 = 800;
/// memcached's ext_drop_unread default: compaction rescues every live record.
pub const DEFAULT_DROP_UNREAD: bool = false;
/// memcached 1.6.18's ext_item_age default: no age, items go to flash only when evicted.
pub const DEFAULT_ITEM_AGE: u32 = u32::MAX;
/// Largest page: record offsets are kept in 24 bits of 8-byte units (entries.rs).
pub const MAX_PAGE_SIZE: usize = 128 << 20;
/// Largest record: its length is kept in 24 bits.
pub const MAX_RECORD: usize = (1 << 24) - 8;
/// Write buffers: one being filled, the others queued for the writer thread. Two were not
/// enough for issue 37's setting (-m 64, 120,000 sets of 4 KB in batches of 100 as fast as
/// a client sends them, file on this machine's disk): 1,007 and 4,439 items were evicted
/// while both buffers were busy; with four, none (120,000 of 120,000 served). memcached
/// keeps page_size / wbuf_size buffers (16 by default).
const WBUFS: usize = 4;
/// Entries of recycled pages are swept once they hold more than this share (1/N) of the
/// memory limit ([`Flash::sweep_due`]).
const STALE_SHARE: usize = 64;
/// RAM one such entry holds: its 16-byte entry and its 8-byte index slot.
const STALE_ENTRY_BYTES: u64 = 24;

/// The flash tier's settings (memcached's `ext_*` options that the store acts on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlashConfig {
    pub path: PathBuf,
    /// Bytes of file; whole pages of it are used.
    pub size: u64,
    /// Further files and their sizes (memcached's repeated `ext_path`, "JBOD"): their pages
    /// are numbered after the first file's, in order, and used as one file's would be.
    pub more: Vec<(PathBuf, u64)>,
    pub page_size: usize,
    pub wbuf_size: usize,
    /// Items whose value has at least this many bytes go to flash rather than being evicted.
    pub item_size: usize,
    /// Items with less than this many seconds to live go to pages of their own (the low-TTL
    /// stream, module doc); 0: none do.
    pub low_ttl: u32,
    /// One flash hit in this many brings its item back to RAM (0: never).
    pub recache_rate: u32,
    /// Compaction runs while at most this many pages are free (None: a quarter of the file's
    /// pages, memcached's default for ext_compact_under).
    pub compact_under: Option<usize>,
    /// memcached's ext_max_frag (0.80 = 800), per mille: a full page is compacted while its
    /// live bytes are under this share of the page, scaled by the used share of the file
    /// (pages.rs `compaction_victim`).
    pub max_frag_permille: u32,
    /// memcached's ext_drop_unread: while at most `drop_under` pages are free and no page is
    /// fragmented enough, compaction takes the oldest page anyway and drops its records
    /// that were not read since they were written (pages.rs `compaction_victim`).
    pub drop_unread: bool,
    /// Pages (None: a quarter of the file's pages, memcached's default for ext_drop_under).
    pub drop_under: Option<usize>,
    /// memcached's ext_item_age: seconds after which an item that would go to flash goes
    /// there before memory is full ([`DEFAULT_ITEM_AGE`]: never). Items carry no time of their
    /// own: the age is their segment's (`Shard::age_out`).
    pub item_age: u32,
}

impl FlashConfig {
    pub fn new(path: impl Into<PathBuf>, size: u64) -> FlashConfig {
        FlashConfig {
            path: path.into(),
            size,
            more: Vec::new(),
            page_size: DEFAULT_PAGE_SIZE,
            wbuf_size: DEFAULT_WBUF_SIZE,
            item_size: DEFAULT_ITEM_SIZE,
            low_ttl: DEFAULT_LOW_TTL,
            recache_rate: DEFAULT_RECACHE_RATE,
            compact_under: None,
            max_frag_permille: DEFAULT_MAX_FRAG_PERMILLE,
            drop_unread: DEFAULT_DROP_UNREAD,
            drop_under: None,
            item_age: DEFAULT_ITEM_AGE,
        }
    }
    /// Pages of all the files together.
    pub fn pages(&self) -> usize {
        self.files().map(|(_, size)| self.pages_of(size)).sum()
    }

    fn pages_of(&self, size: u64) -> usize {
        (size / self.page_size.max(1) as u64) as usize
    }

    /// Each file and its size, the first one first.
    fn files(&self) -> impl Iterator<Item = (&std::path::Path, u64)> {
        std::iter::once((self.path.as_path(), self.size))
            .chain(self.more.iter().map(|(p, s)| (p.as_path(), *s)))
    }

    /// Checks the settings and makes the file (its space reserved): what `Store::open` would
    /// refuse, found before the server starts.
    pub fn check(&self) -> Result<(), FlashError> {
        self.open_files().map(drop)
    }

    /// The files, opened and their space reserved, each with its first page's number.
    fn open_files(&self) -> Result<Vec<(File, u32)>, FlashError> {
        if self.page_size == 0
            || self.page_size > MAX_PAGE_SIZE
            || !self.page_size.is_multiple_of(record::ALIGN)
        {
            return Err(FlashError::PageSize);
        }
        if self.wbuf_size == 0 || !self.page_size.is_multiple_of(self.wbuf_size) {
            return Err(FlashError::WbufSize);
        }
        let mut first = 0u32;
        let mut out = Vec::new();
        for (path, size) in self.files() {
            let pages = self.pages_of(size);
            if pages < 1 {
                return Err(FlashError::TooSmall);
            }
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .map_err(FlashError::Open)?;
            reserve(&file, (pages * self.page_size) as u64).map_err(FlashError::Allocate)?;
            out.push((file, first));
            first += pages as u32;
        }
        Ok(out)
    }
}

/// Why the flash file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    #[error("page_size must be divisible by wbuf_size")]
    WbufSize,
    #[error("page size must be between 1 and {} MB", MAX_PAGE_SIZE >> 20)]
    PageSize,
    #[error("the file must hold at least one page (ext_page_size)")]
    TooSmall,
    #[error("failed to open file: {0}")]
    Open(std::io::Error),
    #[error("cannot reserve the file's space: {0}")]
    Allocate(std::io::Error),
}

/// Where a flashed item's record is: what a lookup under the shard lock hands to the read
/// that runs without it ([`crate::Store::read_flash`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashRef {
    pub(crate) h: u64,
    pub(crate) entry: u32,
    pub(crate) loc: Loc,
}

impl FlashRef {
    /// The record's length in the file (its header, key and value): what reading it costs in
    /// memory, known before it is read (the server bounds a batch of flash reads by it).
    pub fn record_len(&self) -> usize {
        self.loc.len as usize
    }
}

/// Which stream of pages a record is written to (module doc; memcached's page buckets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stream {
    Default = 0,
    LowTtl = 1,
}
const STREAMS: usize = 2;

/// A record's place in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub page: u32,
    /// The page's generation when the record was written (low 16 bits, as entries keep it).
    pub gen: u16,
    pub off: u32,
    pub len: u32,
}

/// A flashed item read back and verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlashValue {
    pub(crate) rec: Vec<u8>,
    pub(crate) meta: Meta,
    pub(crate) value: core::ops::Range<usize>,
}

impl FlashValue {
    pub fn value(&self) -> &[u8] {
        &self.rec[self.value.clone()]
    }
    pub fn flags(&self) -> u32 {
        self.meta.flags
    }
    pub fn exp(&self) -> crate::Time {
        self.meta.exp
    }
}

/// Counters, named after memcached's `stats` fields.
#[derive(Default)]
pub(crate) struct Counters {
    pub get_extstore: AtomicU64,
    pub recache_from_extstore: AtomicU64,
    pub miss_from_extstore: AtomicU64,
    pub badcrc_from_extstore: AtomicU64,
    pub page_allocs: AtomicU64,
    pub page_evictions: AtomicU64,
    pub page_reclaims: AtomicU64,
    pub objects_evicted: AtomicU64,
    pub objects_read: AtomicU64,
    pub objects_written: AtomicU64,
    pub bytes_evicted: AtomicU64,
    pub bytes_written: AtomicU64,
    pub bytes_read: AtomicU64,
    /// Demotions refused because no write buffer was free (the item was evicted instead).
    pub write_behind: AtomicU64,
    pub io_errors: AtomicU64,
    /// System calls that read records for a read that may wait: a `pread` each, or one
    /// io_uring submission for a batch (batch.rs).
    pub io_submits: AtomicU64,
    /// Compaction: live records copied out of a page before it is recycled, and the live ones
    /// it did not copy (dropped by ext_drop_unread, or left in place for want of a write
    /// buffer: tried again next time). An expired record is neither, as in memcached.
    pub compact_rescues: AtomicU64,
    pub compact_skipped: AtomicU64,
    /// The parts of page_reclaims and compact_skipped that the model checker must see reached
    /// (crates/store/tests/model.rs): pages reclaimed because every record on them expired
    /// (`reclaim_expired`), and records ext_drop_unread's pass dropped with their items.
    pub pages_expired: AtomicU64,
    pub unread_dropped: AtomicU64,
}

/// What `stats` reports about the flash tier (memcached's extstore fields).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlashStats {
    pub get_extstore: u64,
    pub recache_from_extstore: u64,
    pub miss_from_extstore: u64,
    pub badcrc_from_extstore: u64,
    pub page_allocs: u64,
    pub page_evictions: u64,
    pub page_reclaims: u64,
    pub pages_free: u64,
    pub pages_used: u64,
    pub objects_evicted: u64,
    pub objects_read: u64,
    pub objects_written: u64,
    pub objects_used: u64,
    pub bytes_evicted: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub bytes_used: u64,
    pub bytes_fragmented: u64,
    pub limit_maxbytes: u64,
    pub io_queue: u64,
    pub write_behind: u64,
    pub io_errors: u64,
    pub io_submits: u64,
    pub compact_rescues: u64,
    pub compact_skipped: u64,
    /// Not memcached's (no `stats` line): of page_reclaims, the pages reclaimed whole because
    /// all their records had expired; of compact_skipped, the records ext_drop_unread dropped.
    pub pages_expired: u64,
    pub unread_dropped: u64,
    /// RAM of the per-shard entry tables (bytes), and entries in use.
    pub entry_bytes: u64,
    pub entries: u64,
}

struct Buf {
    page: u32,
    /// Offset in the page of `data[0]`.
    at: usize,
    data: Vec<u8>,
}

impl Buf {
    fn holds(&self, loc: &Loc) -> bool {
        self.page == loc.page
            && self.at <= loc.off as usize
            && loc.off as usize + loc.len as usize <= self.at + self.data.len()
    }
}

const NO_PAGE: u32 = u32::MAX;
/// A page's latest expiry when one of its records never expires (or it is not known).
const NEVER: u32 = u32::MAX;

/// A stream's open page and the buffer being filled for it.
struct Open {
    filling: Option<Buf>,
    page: u32,
    used: usize,
}

struct Writes {
    /// Per [`Stream`].
    open: [Open; STREAMS],
    /// Sealed buffers, oldest first; the writer thread writes the front one.
    queue: VecDeque<Arc<Buf>>,
    spare: Vec<Vec<u8>>,
    /// Closed pages, in the order they were closed.
    full: VecDeque<u32>,
    free: Vec<u32>,
    stop: bool,
}

impl Writes {
    /// Records not on disk yet: the buffers being filled, then the queued ones.
    fn in_ram(&self) -> impl Iterator<Item = &Buf> {
        self.open
            .iter()
            .filter_map(|o| o.filling.as_ref())
            .chain(self.queue.iter().map(|b| &**b))
    }

    /// The pages open for writing.
    fn open_pages(&self) -> impl Iterator<Item = u32> + '_ {
        self.open.iter().map(|o| o.page).filter(|&p| p != NO_PAGE)
    }
}

struct Shared {
    /// The files and the number of each one's first page (ascending from 0).
    files: Box<[(File, u32)]>,
    page_size: usize,
    gens: Box<[AtomicU32]>,
    live_objects: Box<[AtomicU64]>,
    live_bytes: Box<[AtomicU64]>,
    /// Per page, its opening in order of all pages' openings (1, 2, ...; 0: never opened):
    /// memcached's page `version` (`stats extstore`).
    versions: Box<[AtomicU64]>,
    /// Per page, whether it was opened for the low-TTL stream (compaction skips it).
    low: Box<[AtomicBool]>,
    /// Per page, the latest expiry of the records written to it ([`NEVER`] if one never
    /// expires or it is not known: a page kept from an earlier process).
    expires: Box<[AtomicU32]>,
    w: Mutex<Writes>,
    wake: Condvar,
    c: Counters,
    /// The text of the latest I/O error ([`Shared::io_error`]); empty while there was none.
    last_io_error: Mutex<String>,
    /// Tests: the writer pauses this long (µs) before each buffer, as a busy machine makes it.
    #[cfg(test)]
    writer_delay_us: AtomicU64,
    /// Pages recycled so far: a shard that has not swept since holds stale entries.
    recycled: AtomicU64,
    /// Entries (all shards) that name a record of a recycled page: added when a page is
    /// recycled (its live records), taken off when such an entry is dropped ([`Flash::release`]).
    stale: AtomicU64,
    /// Per page, the clock its records' expiry is in when they were kept from an earlier
    /// process (keep.rs `epoch`: that generation and that process's origin; 0: this one's).
    epochs: Box<[AtomicU64]>,
    /// The unix time of this process's Time 0 (keep.rs; set at the start).
    origin: AtomicU64,
    /// Page openings before this process (a kept page table's versions go on from there).
    opened_base: AtomicU64,
}

/// One page as `stats extstore` shows it (memcached's `N:version`, `N:bytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageStat {
    /// Which opening of a page this page's contents come from (1 for the first page ever
    /// opened, and so on); 0: never written.
    pub version: u64,
    /// Bytes of live records on it.
    pub bytes: u64,
    /// memcached's page bucket number: [`PAGE_BUCKET_LOW_TTL`] for a low-TTL stream's page,
    /// else 0.
    pub bucket: u32,
}

/// memcached's number for the low-TTL page bucket (storage.c `PAGE_BUCKET_LOWTTL`), as
/// `stats extstore` shows it.
pub const PAGE_BUCKET_LOW_TTL: u32 = 3;

/// The open flash file; see the module doc.
pub(crate) struct Flash {
    sh: Arc<Shared>,
    writer: Option<std::thread::JoinHandle<()>>,
    pub cfg: FlashConfig,
    /// The settings `extstore <name> <value>` changes (tune.rs): read from here, not `cfg`.
    pub tune: tune::Tune,
    /// Flash hits, for `recache_rate`.
    hits: AtomicU64,
    /// While set ([`Flash::patient`]), a demotion that finds no write buffer free waits for
    /// one instead of failing (which evicts the item).
    patient: AtomicBool,
}

/// While alive, demotions wait for a free write buffer rather than evict ([`Flash::patient`]).
pub(crate) struct Patient<'a>(&'a Flash);

impl Drop for Patient<'_> {
    fn drop(&mut self) {
        self.0.patient.store(false, Relaxed);
    }
}

impl Flash {
    /// Demotions wait for the writer until the guard drops. For the snapshot's restore only:
    /// it runs before anything is served, so no client waits behind it, and an item it
    /// restored must not be evicted just because the writer was slower than the reader (an
    /// earlier version lost a block's worth of items per restart on a busy machine while
    /// reporting the restore complete). The wait happens under a shard lock; the writer
    /// thread takes none, so it always makes progress.
    pub(crate) fn patient(&self) -> Patient<'_> {
        self.patient.store(true, Relaxed);
        Patient(self)
    }

    pub fn open(cfg: &FlashConfig) -> Result<Flash, FlashError> {
        let files = cfg.open_files()?.into_boxed_slice();
        let pages = cfg.pages();
        let zeros = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect::<Box<[_]>>();
        let sh = Arc::new(Shared {
            files,
            page_size: cfg.page_size,
            gens: (0..pages).map(|_| AtomicU32::new(0)).collect(),
            live_objects: zeros(pages),
            live_bytes: zeros(pages),
            versions: zeros(pages),
            low: (0..pages).map(|_| AtomicBool::new(false)).collect(),
            expires: (0..pages).map(|_| AtomicU32::new(NEVER)).collect(),
            w: Mutex::new(Writes {
                open: [(); STREAMS].map(|()| Open {
                    filling: None,
                    page: NO_PAGE,
                    used: 0,
                }),
                queue: VecDeque::new(),
                spare: (0..WBUFS)
                    .map(|_| Vec::with_capacity(cfg.wbuf_size))
                    .collect(),
                full: VecDeque::new(),
                // Lowest page first: pop from the end.
                free: (0..pages as u32).rev().collect(),
                stop: false,
            }),
            wake: Condvar::new(),
            c: Counters::default(),
            last_io_error: Mutex::new(String::new()),
            #[cfg(test)]
            writer_delay_us: AtomicU64::new(0),
            recycled: AtomicU64::new(0),
            stale: AtomicU64::new(0),
            epochs: zeros(pages),
            origin: AtomicU64::new(0),
            opened_base: AtomicU64::new(0),
        });
        let worker = Arc::clone(&sh);
        let writer = std::thread::Builder::new()
            .name("mnemo-flash-w".into())
            .spawn(move || writer::write_loop(&worker))
            .map_err(FlashError::Open)?;
        Ok(Flash {
            sh,
            writer: Some(writer),
            cfg: cfg.clone(),
            tune: tune::Tune::new(cfg),
            hits: AtomicU64::new(0),
            patient: AtomicBool::new(false),
        })
    }

    pub fn counters(&self) -> &Counters {
        &self.sh.c
    }

    /// Whether an item of this value length may go to flash.
    #[inline]
    pub fn wants(&self, key_len: usize, value_len: usize) -> bool {
        value_len >= self.tune.item_size()
            && record::len(key_len, value_len) <= self.cfg.wbuf_size.min(MAX_RECORD)
    }

    /// The stream an item expiring at `exp` goes to now (memcached: less than ext_low_ttl
    /// seconds left, the low-TTL bucket).
    #[inline]
    pub fn stream_for(&self, exp: crate::Time, now: crate::Time) -> Stream {
        let low_ttl = self.tune.low_ttl();
        if exp != 0 && exp.saturating_sub(now) < low_ttl {
            Stream::LowTtl
        } else {
            Stream::Default
        }
    }

    /// Pages recycled so far (shards compare it to sweep their stale entries).
    pub fn recycled(&self) -> u64 {
        self.sh.recycled.load(Relaxed)
    }

    /// Whether the maintenance sweep should drop the entries of recycled pages now. Until
    /// then such an entry stays, as memcached keeps an item header whose page it evicted: the
    /// key's next lookup reads nothing (the page generation differs) and counts
    /// `miss_from_extstore`, as memcached's does, and drops it. The sweep comes once they hold
    /// more than 1/[`STALE_SHARE`] of `mem_limit` (entry and index slot, 24 bytes each).
    pub fn sweep_due(&self, mem_limit: usize) -> bool {
        self.sh
            .stale
            .load(Relaxed)
            .saturating_mul(STALE_ENTRY_BYTES)
            > (mem_limit / STALE_SHARE) as u64
    }

    /// Whether `loc`'s page is still the generation it was written in.
    #[inline]
    pub fn current(&self, loc: &Loc) -> bool {
        self.sh
            .gens
            .get(loc.page as usize)
            .is_some_and(|g| g.load(Relaxed) as u16 == loc.gen)
    }

    /// Appends a record to the default stream's write buffer ([`Flash::append_to`]).
    pub fn append(&self, key: &[u8], value: &[u8], meta: Meta) -> Option<Loc> {
        self.append_to(key, value, meta, Stream::Default)
    }

    /// Appends a record to `stream`'s write buffer. None: no buffer free (the writer is
    /// behind), so the caller evicts as it would without flash.
    pub fn append_to(&self, key: &[u8], value: &[u8], meta: Meta, stream: Stream) -> Option<Loc> {
        let n = record::len(key.len(), value.len());
        if n > self.cfg.wbuf_size.min(MAX_RECORD) {
            return None;
        }
        let sh = &*self.sh;
        let k = stream as usize;
        let mut w = sh.w.lock();
        let o = &w.open[k];
        let new_page = o.page == NO_PAGE || o.used + n > sh.page_size;
        let new_buf = o
            .filling
            .as_ref()
            .is_none_or(|b| b.data.len() + n > self.cfg.wbuf_size);
        if new_page || new_buf {
            while w.spare.is_empty() && self.patient.load(Relaxed) {
                // The writer notifies `wake` after each buffer it writes.
                sh.wake.wait(&mut w);
            }
            if w.spare.is_empty() {
                sh.c.write_behind.fetch_add(1, Relaxed);
                return None;
            }
            if let Some(b) = w.open[k].filling.take() {
                w.queue.push_back(Arc::new(b));
                sh.wake.notify_all();
            }
            if new_page {
                self.next_page(&mut w, stream);
            }
            let mut data = w.spare.pop().expect("checked");
            data.clear();
            let o = &mut w.open[k];
            o.filling = Some(Buf {
                page: o.page,
                at: o.used,
                data,
            });
        }
        let o = &mut w.open[k];
        let (page, off) = (o.page, o.used);
        let gen = sh.gens[page as usize].load(Relaxed);
        let b = o.filling.as_mut().expect("set above");
        let start = b.data.len();
        b.data.resize(start + n, 0);
        record::encode(&mut b.data[start..], Place { page, gen }, key, value, meta);
        o.used += n;
        sh.expires[page as usize].fetch_max(if meta.exp == 0 { NEVER } else { meta.exp }, Relaxed);
        sh.live_objects[page as usize].fetch_add(1, Relaxed);
        sh.live_bytes[page as usize].fetch_add(n as u64, Relaxed);
        sh.c.objects_written.fetch_add(1, Relaxed);
        sh.c.bytes_written.fetch_add(n as u64, Relaxed);
        Some(Loc {
            page,
            gen: gen as u16,
            off: off as u32,
            len: n as u32,
        })
    }

    /// `stats extstore`: each page's version and live bytes, in page order.
    pub fn pages(&self) -> Vec<PageStat> {
        let sh = &*self.sh;
        (0..sh.versions.len())
            .map(|p| PageStat {
                version: sh.versions[p].load(Relaxed),
                bytes: sh.live_bytes[p].load(Relaxed),
                bucket: if sh.low[p].load(Relaxed) {
                    PAGE_BUCKET_LOW_TTL
                } else {
                    0
                },
            })
            .collect()
    }

    /// An entry for `loc` was dropped (overwritten, deleted, recached, flushed): its record
    /// no longer counts as live, unless its page was recycled meanwhile (already counted).
    pub fn release(&self, loc: &Loc) {
        let sub = |a: &AtomicU64, n: u64| {
            let _ = a.fetch_update(Relaxed, Relaxed, |v| Some(v.saturating_sub(n)));
        };
        if !self.current(loc) {
            sub(&self.sh.stale, 1);
            return;
        }
        sub(&self.sh.live_objects[loc.page as usize], 1);
        sub(&self.sh.live_bytes[loc.page as usize], u64::from(loc.len));
    }

    /// ext_drop_unread's drop of the record at `loc` with its entry kept, as memcached keeps
    /// the item's header (storage.c's compaction skips the record; the page, emptied, is
    /// freed and its version moves on): the page no longer counts the record, and the entry
    /// is to be repointed at the returned place, a generation of the page already past, so
    /// the key's next lookup reads nothing, counts miss_from_extstore as memcached's does,
    /// and drops it; the sweep drops it with the entries of recycled pages.
    pub(crate) fn drop_kept(&self, loc: &Loc) -> Loc {
        self.release(loc);
        self.sh.stale.fetch_add(1, Relaxed);
        Loc {
            gen: loc.gen.wrapping_sub(1),
            ..*loc
        }
    }

    /// Reads the record at `loc` into `out` (from a write buffer if it is not on disk yet).
    /// Err: the page was recycled or the file could not be read (a miss either way).
    pub fn read(&self, loc: &Loc, out: &mut Vec<u8>) -> Result<u32, Reject> {
        match self.read_as(loc, out, false) {
            Ok(Some(gen)) => Ok(gen),
            // Only a read that may not wait gives up.
            Ok(None) => Err(Reject::Gone),
            Err(e) => Err(e),
        }
    }

    /// [`Flash::read`] only if that needs no disk I/O: the record is in a write buffer, or
    /// every byte of it is in the page cache (`preadv2` with `RWF_NOWAIT`, which fails rather
    /// than wait for the disk). Ok(None): it would have to wait, or the file or the kernel
    /// cannot read it so; read it with [`Flash::read`] where waiting is fine.
    pub fn read_cached(&self, loc: &Loc, out: &mut Vec<u8>) -> Result<Option<u32>, Reject> {
        self.read_as(loc, out, true)
    }

    fn read_as(&self, loc: &Loc, out: &mut Vec<u8>, nowait: bool) -> Result<Option<u32>, Reject> {
        let sh = &*self.sh;
        let Some(g) = sh.gens.get(loc.page as usize) else {
            return Err(Reject::Gone);
        };
        let gen = g.load(Relaxed);
        if gen as u16 != loc.gen {
            return Err(Reject::Gone);
        }
        out.clear();
        {
            let w = sh.w.lock();
            for b in w.in_ram() {
                if b.holds(loc) {
                    let s = loc.off as usize - b.at;
                    out.extend_from_slice(&b.data[s..s + loc.len as usize]);
                    return Ok(Some(gen));
                }
            }
        }
        let want = loc.len as usize;
        let (file, at) = sh.at(loc.page, u64::from(loc.off));
        let mut got = 0;
        if nowait {
            // All of it from the page cache, or nothing: a short count (part cached, or
            // the end of a truncated file) is left to the read that may wait. Read into the
            // buffer's spare room: zeroing it first cost a memset of the record per flashed
            // get on the event loop (1% of the server's CPU in bench/flash.sh's throughput
            // phase, `perf record`).
            out.reserve(want);
            if cached_read(file, &mut out.spare_capacity_mut()[..want], at) != Some(want) {
                return Ok(None);
            }
            // SAFETY: the kernel wrote all `want` bytes (the count it returned) of the
            // spare room, which `reserve` made at least that long.
            unsafe { out.set_len(want) };
            got = want;
        } else {
            out.resize(want, 0);
        }
        while got < out.len() {
            sh.c.io_submits.fetch_add(1, Relaxed);
            match file.read_at(&mut out[got..], at + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    sh.io_error(
                        format_args!(
                            "reading {} bytes at page {} offset {}",
                            want, loc.page, loc.off
                        ),
                        &e,
                    );
                    break;
                }
            }
        }
        // A short read (truncated file) keeps only what was read: verification rejects it.
        out.truncate(got);
        sh.c.objects_read.fetch_add(1, Relaxed);
        sh.c.bytes_read.fetch_add(got as u64, Relaxed);
        // Recycled while we read: whatever came back is not this record.
        if g.load(Relaxed) != gen {
            return Err(Reject::Gone);
        }
        Ok(Some(gen))
    }

    /// Counts a flash hit; true when this one should bring its item back to RAM.
    pub fn recache_due(&self) -> bool {
        let rate = u64::from(self.tune.recache_rate());
        rate != 0 && (self.hits.fetch_add(1, Relaxed) + 1).is_multiple_of(rate)
    }

    /// Writes out the buffer being filled and waits until nothing is queued (tests, shutdown).
    pub fn sync(&self) {
        let sh = &*self.sh;
        let mut w = sh.w.lock();
        for k in 0..STREAMS {
            if let Some(b) = w.open[k].filling.take() {
                w.queue.push_back(Arc::new(b));
                sh.wake.notify_all();
            }
        }
        while !w.queue.is_empty() {
            sh.wake.wait(&mut w);
        }
    }

    /// Waits until a write buffer is free (a bulk load, the snapshot's restore, must not run
    /// ahead of the writer: its demotions would turn into evictions).
    pub fn settle(&self) {
        let sh = &*self.sh;
        let mut w = sh.w.lock();
        while w.spare.is_empty() {
            sh.wake.wait(&mut w);
        }
    }

    /// I/O errors so far and the text of the latest ([`Shared::io_error`]).
    pub fn io_errors(&self) -> (u64, String) {
        (
            self.sh.c.io_errors.load(Relaxed),
            self.sh.last_io_error.lock().clone(),
        )
    }

    pub fn add_stats(&self, st: &mut FlashStats) {
        let sh = &*self.sh;
        let c = &sh.c;
        let get = |a: &AtomicU64| a.load(Relaxed);
        let w = sh.w.lock();
        let pages = sh.gens.len() as u64;
        st.pages_free = self.free_pages(&w) as u64;
        st.pages_used = pages - st.pages_free;
        st.io_queue = w.queue.len() as u64;
        drop(w);
        st.get_extstore = get(&c.get_extstore);
        st.recache_from_extstore = get(&c.recache_from_extstore);
        st.miss_from_extstore = get(&c.miss_from_extstore);
        st.badcrc_from_extstore = get(&c.badcrc_from_extstore);
        st.page_allocs = get(&c.page_allocs);
        st.page_evictions = get(&c.page_evictions);
        st.page_reclaims = get(&c.page_reclaims);
        st.objects_evicted = get(&c.objects_evicted);
        st.objects_read = get(&c.objects_read);
        st.objects_written = get(&c.objects_written);
        st.bytes_evicted = get(&c.bytes_evicted);
        st.bytes_written = get(&c.bytes_written);
        st.bytes_read = get(&c.bytes_read);
        st.write_behind = get(&c.write_behind);
        st.compact_rescues = get(&c.compact_rescues);
        st.compact_skipped = get(&c.compact_skipped);
        st.pages_expired = get(&c.pages_expired);
        st.unread_dropped = get(&c.unread_dropped);
        st.io_errors = get(&c.io_errors);
        st.io_submits = get(&c.io_submits);
        st.objects_used = sh.live_objects.iter().map(get).sum();
        st.bytes_used = sh.live_bytes.iter().map(get).sum();
        st.bytes_fragmented = (st.pages_used * sh.page_size as u64).saturating_sub(st.bytes_used);
        st.limit_maxbytes = pages * sh.page_size as u64;
    }

    /// `stats reset`: memcached zeroes the get/recache/miss/badcrc counters.
    pub fn reset_stats(&self) {
        let c = &self.sh.c;
        for a in [
            &c.get_extstore,
            &c.recache_from_extstore,
            &c.miss_from_extstore,
            &c.badcrc_from_extstore,
        ] {
            a.store(0, Relaxed);
        }
    }
}

impl Drop for Flash {
    fn drop(&mut self) {
        self.sh.w.lock().stop = true;
        self.sh.wake.notify_all();
        if let Some(t) = self.writer.take() {
            let _ = t.join();
        }
    }
}

impl Shared {
    /// Counts a failed read or write of the flash file and keeps its text for the server's
    /// log (`Store::flash_io_errors`): a write that fails loses the records of its buffer
    /// (they read back as misses), and an operator must be able to see that happen.
    fn io_error(&self, what: std::fmt::Arguments<'_>, e: &std::io::Error) {
        self.c.io_errors.fetch_add(1, Relaxed);
        *self.last_io_error.lock() = format!("{what}: {e}");
    }

    /// The file holding `page` and the offset in it of byte `off` of that page.
    fn at(&self, page: u32, off: u64) -> (&File, u64) {
        let i = self.files.partition_point(|&(_, first)| first <= page) - 1;
        let (file, first) = &self.files[i];
        (file, u64::from(page - first) * self.page_size as u64 + off)
    }
}

/// Reserves the file's blocks up front, so a full disk shows at start, not as lost writes.
fn reserve(file: &File, bytes: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain syscall on a descriptor we own.
    let r = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, bytes as libc::off_t) };
    match r {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => file.set_len(bytes.max(file.metadata()?.len())),
        e => Err(std::io::Error::from_raw_os_error(e)),
    }
}

/// One `preadv2(RWF_NOWAIT)` of `buf` at `at`: the bytes the page cache had, without waiting
/// for the disk; None when it would have had to wait or the call is refused (an old kernel, a
/// file system without it).
/// `buf` may be uninitialised: the kernel only writes it, and the count says how much.
fn cached_read(file: &File, buf: &mut [std::mem::MaybeUninit<u8>], at: u64) -> Option<usize> {
    use std::os::fd::AsRawFd;
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: one iovec over `buf`, live and writable for the call (the kernel writes, never
    // reads, the bytes); the descriptor is the open file's.
    let n = unsafe {
        libc::preadv2(
            file.as_raw_fd(),
            &iov,
            1,
            at as libc::off_t,
            libc::RWF_NOWAIT,
        )
    };
    usize::try_from(n).ok()
}

#[cfg(test)]
pub(crate) mod tests;
