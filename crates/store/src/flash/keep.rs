//! The flash file's contents kept across a restart without `-e`: at a graceful stop the live
//! entries' locations and the page table are written beside the file (FILE.entries); the next
//! start with the same `ext_path` reads that list, removes it, verifies each record it names
//! against the file (checksum, page, generation) and links the record's key in the index
//! again. Nothing is scanned: the file alone cannot tell a live record from one deleted or
//! overwritten in RAM before the stop (its record stays on disk until its page is reused).
//!
//! ```text
//!  FILE.entries, little-endian:
//!  header (48 bytes)
//!   0 "MNFLIST1" | 8 version u32 | 12 page size u32 | 16 pages u32 | 20 full pages u32 |
//!   24 origin u64 (unix time of the writer's Time 0) | 32 entries u64 | 40 xxh3 of 0..40
//!  page table: per page [ gen u32 | version u64 | origin u64 ] (20 bytes); then the full
//!   pages, oldest first (u32 each; the page being filled last); then xxh3 of the table (u64)
//!  entry blocks, to the end: [ count u32 (1..=256) | 0 u32 | xxh3 u64 of the entries ]
//!   then count x [ page u32 | offset u32 | length u32 | gen u32 ]
//! ```
//!
//! Safety: the list is read whole and removed before anything is linked, so a crash after
//! the start never reuses it (the next start finds none and starts empty). A header or page
//! table that fails its checksum or does not match the file's shape: nothing is kept. A bad
//! entry block: its entries are dropped (misses). Every record is verified before its key is
//! linked, and one that fails is dropped: a damaged list or file costs hits, never a wrong
//! value.
//!
//! Expiry: records keep the expiry in the clock of the process that wrote them (seconds
//! from its Time 0). Each page remembers that clock's origin for its current generation
//! ([`Shared::epochs`]); reads turn a record's expiry into this process's clock
//! ([`Flash::local_exp`]). The page being filled at the stop is closed at the start, so no
//! page mixes two clocks; a recycled page has a new generation and so this clock.

use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;

use xxhash_rust::xxh3::xxh3_64;

use super::record::{self, Place, View, HEADER};
use super::{Flash, Loc, Reject, NO_PAGE};
use crate::snapshot::Frozen;
use crate::{Store, Time};

const MAGIC: &[u8; 8] = b"MNFLIST1";
const VERSION: u32 = 1;
const HEAD: usize = 48;
const PAGE_ROW: usize = 20;
const BLOCK_HEAD: usize = 16;
const ENTRY: usize = 16;
/// Entries per block: a damaged block costs at most this many items.
const BLOCK_ENTRIES: usize = 256;
/// Bytes read at once when the start reads the records back (sorted by place, so the reads
/// go through each page in order).
const READ_CHUNK: usize = 1 << 20;
/// The smallest record (a 1-byte key, an empty value): bounds how many entries a file can hold.
const MIN_RECORD: usize = (HEADER + 1).div_ceil(record::ALIGN) * record::ALIGN;

/// What the start did with the list of a previous stop.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlashRestore {
    /// Entries the list named (its header's count).
    pub listed: u64,
    /// Items linked again: served from flash from now on.
    pub restored: u64,
    /// Expired while the server was down.
    pub expired: u64,
    /// Records that failed verification (damaged file), entries of damaged blocks and
    /// entries that name no record of the page table: dropped.
    pub dropped: u64,
    pub bad_blocks: u64,
    /// Why nothing was kept (a damaged header or page table, another file shape).
    pub refused: Option<String>,
}

/// The list's path: beside the first flash file.
pub(crate) fn list_path(file: &Path) -> PathBuf {
    let mut p = file.as_os_str().to_owned();
    p.push(".entries");
    PathBuf::from(p)
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

/// A clock origin and its page generation, packed into one word (so a reader sees both or
/// neither): [gen u32 | origin u32]. Origins are unix times (u32 until 2106).
fn epoch(gen: u32, origin: u64) -> u64 {
    u64::from(gen) << 32 | (origin & u64::from(u32::MAX))
}

/// The page table as a list carries it.
struct Table {
    gens: Vec<u32>,
    versions: Vec<u64>,
    origins: Vec<u64>,
    /// Full pages, oldest first.
    full: Vec<u32>,
}

impl Flash {
    /// The expiry `exp` of a record read from `page` (generation `gen`) in this process's
    /// clock: records of a page kept from an earlier process carry that process's.
    pub fn local_exp(&self, page: u32, gen: u32, exp: Time) -> Time {
        let Some(e) = self.sh.epochs.get(page as usize).map(|e| e.load(Relaxed)) else { return exp };
        let page_origin = e & u64::from(u32::MAX);
        // Origin 0: the page's records are this process's own.
        if exp == 0 || page_origin == 0 || (e >> 32) as u32 != gen {
            return exp;
        }
        let origin = self.sh.origin.load(Relaxed);
        // 1 is "already past" to every reader; never 0 ("never expires").
        (i64::from(exp) + page_origin as i64 - origin as i64).clamp(1, i64::from(Time::MAX)) as Time
    }

    /// `record::verify`, with the expiry in this process's clock.
    pub fn verify<'a>(&self, rec: &'a [u8], page: u32, gen: u32, key: &[u8]) -> Result<View<'a>, Reject> {
        let mut v = record::verify(rec, Place { page, gen }, key)?;
        v.meta.exp = self.local_exp(page, gen, v.meta.exp);
        Ok(v)
    }

    /// `record::verify_any`, with the expiry in this process's clock.
    pub fn verify_any<'a>(&self, rec: &'a [u8], page: u32, gen: u32) -> Result<(&'a [u8], View<'a>), Reject> {
        let (k, mut v) = record::verify_any(rec, Place { page, gen })?;
        v.meta.exp = self.local_exp(page, gen, v.meta.exp);
        Ok((k, v))
    }

    /// The clock origin of `page`'s records (`origin`: this process's).
    fn page_origin(&self, page: usize, origin: u64) -> u64 {
        let e = self.sh.epochs[page].load(Relaxed);
        let kept = e & u64::from(u32::MAX);
        if kept != 0 && (e >> 32) as u32 == self.sh.gens[page].load(Relaxed) {
            kept
        } else {
            origin
        }
    }

    /// The list for `locs` (the live entries), written after [`Flash::sync`]: header, page
    /// table, entry blocks. `origin`: the unix time of this process's Time 0.
    fn encode_list(&self, locs: &[Loc], origin: u64) -> Vec<u8> {
        let sh = &*self.sh;
        let pages = sh.gens.len();
        let w = sh.w.lock();
        let mut full: Vec<u32> = w.full.iter().copied().collect();
        full.extend(w.open_pages());
        drop(w);
        let mut out = Vec::with_capacity(HEAD + pages * PAGE_ROW + locs.len() * (ENTRY + 1));
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(sh.page_size as u32).to_le_bytes());
        out.extend_from_slice(&(pages as u32).to_le_bytes());
        out.extend_from_slice(&(full.len() as u32).to_le_bytes());
        out.extend_from_slice(&origin.to_le_bytes());
        out.extend_from_slice(&(locs.len() as u64).to_le_bytes());
        let sum = xxh3_64(&out[..40]);
        out.extend_from_slice(&sum.to_le_bytes());
        let table = out.len();
        for p in 0..pages {
            out.extend_from_slice(&sh.gens[p].load(Relaxed).to_le_bytes());
            out.extend_from_slice(&sh.versions[p].load(Relaxed).to_le_bytes());
            out.extend_from_slice(&self.page_origin(p, origin).to_le_bytes());
        }
        for p in &full {
            out.extend_from_slice(&p.to_le_bytes());
        }
        let sum = xxh3_64(&out[table..]);
        out.extend_from_slice(&sum.to_le_bytes());
        for block in locs.chunks(BLOCK_ENTRIES) {
            let head = out.len();
            out.extend_from_slice(&(block.len() as u32).to_le_bytes());
            out.extend_from_slice(&[0; 12]);
            for l in block {
                let gen = sh.gens[l.page as usize].load(Relaxed);
                for v in [l.page, l.off, l.len, gen] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            let sum = xxh3_64(&out[head + BLOCK_HEAD..]);
            out[head + 8..head + 16].copy_from_slice(&sum.to_le_bytes());
        }
        out
    }

    /// Reads the header and page table of a list; Err: why nothing of it can be kept.
    fn decode_table(&self, b: &[u8]) -> Result<(Table, usize, u64), String> {
        let sh = &*self.sh;
        if b.len() < HEAD || &b[..8] != MAGIC || u64_at(b, 40) != xxh3_64(&b[..40]) {
            return Err("the list's header is damaged".into());
        }
        if u32_at(b, 8) != VERSION {
            return Err(format!("list format version {}, this mnemod reads {VERSION}", u32_at(b, 8)));
        }
        let (page_size, pages, nfull) = (u32_at(b, 12) as usize, u32_at(b, 16) as usize, u32_at(b, 20) as usize);
        if page_size != sh.page_size || pages != sh.gens.len() {
            return Err(format!(
                "the list is of {pages} pages of {page_size} bytes, the file now {} of {}",
                sh.gens.len(),
                sh.page_size
            ));
        }
        let end = HEAD + pages * PAGE_ROW + nfull.min(pages + 1) * 4;
        if nfull > pages || b.len() < end + 8 || u64_at(b, end) != xxh3_64(&b[HEAD..end]) {
            return Err("the list's page table is damaged".into());
        }
        let row = |p: usize| HEAD + p * PAGE_ROW;
        let t = Table {
            gens: (0..pages).map(|p| u32_at(b, row(p))).collect(),
            versions: (0..pages).map(|p| u64_at(b, row(p) + 4)).collect(),
            origins: (0..pages).map(|p| u64_at(b, row(p) + 12)).collect(),
            full: (0..nfull).map(|i| u32_at(b, row(pages) + i * 4)).collect(),
        };
        let mut seen = vec![false; pages];
        for &p in &t.full {
            if p as usize >= pages || std::mem::replace(&mut seen[p as usize], true) {
                return Err("the list's page table names a page twice".into());
            }
        }
        Ok((t, end + 8, u64_at(b, 32)))
    }

    /// Takes the page table of a list (before anything was written): the pages' generations,
    /// versions and clocks, the full pages in their order (the one being filled at the stop
    /// closed with them), the others free.
    fn install(&self, t: &Table) {
        let sh = &*self.sh;
        let mut w = sh.w.lock();
        assert!(w.open_pages().next().is_none() && w.in_ram().next().is_none(), "a list is installed before any write");
        let is_full: std::collections::HashSet<u32> = t.full.iter().copied().collect();
        for p in 0..sh.gens.len() {
            sh.gens[p].store(t.gens[p], Relaxed);
            sh.versions[p].store(t.versions[p], Relaxed);
            // Only full pages keep records of the old clock: a free page is opened without a
            // new generation, and what is written to it then is this process's.
            let kept = if is_full.contains(&(p as u32)) { epoch(t.gens[p], t.origins[p]) } else { 0 };
            sh.epochs[p].store(kept, Relaxed);
        }
        w.full = t.full.iter().copied().collect();
        w.free = (0..sh.gens.len() as u32).rev().filter(|p| !is_full.contains(p)).collect();
        sh.opened_base.store(t.versions.iter().copied().max().unwrap_or(0), Relaxed);
    }

    /// A record linked again at the start: it counts as live on its page.
    fn count_live(&self, loc: &Loc) {
        self.sh.live_objects[loc.page as usize].fetch_add(1, Relaxed);
        self.sh.live_bytes[loc.page as usize].fetch_add(u64::from(loc.len), Relaxed);
    }

    /// Reads up to `n` bytes of `page` from `off` into `buf` (the start: nothing is in a write
    /// buffer yet); a short read (a truncated file) keeps what was read.
    fn read_span(&self, page: u32, off: u32, n: usize, buf: &mut Vec<u8>) {
        let (file, at) = self.sh.at(page, u64::from(off));
        buf.clear();
        buf.resize(n, 0);
        let mut got = 0;
        while got < n {
            match file.read_at(&mut buf[got..], at + got as u64) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.sh.io_error(format_args!("reading {n} bytes at page {page} offset {off}"), &e);
                    break;
                }
            }
        }
        buf.truncate(got);
    }

    /// Writes the records still in memory and syncs the files: what a list names is on disk.
    fn sync_files(&self) -> io::Result<()> {
        self.sync();
        self.sh.files.iter().try_for_each(|(f, _)| f.sync_data())
    }
}

/// The entries of the sound blocks from `at` on, checked against the page table; the count of
/// bad blocks and of entries dropped.
fn decode_entries(b: &[u8], mut at: usize, t: &Table, page_size: usize) -> (Vec<Loc>, u64, u64) {
    let full: std::collections::HashSet<u32> = t.full.iter().copied().collect();
    let (mut locs, mut bad_blocks, mut dropped) = (Vec::new(), 0, 0);
    while at < b.len() {
        if b.len() - at < BLOCK_HEAD {
            bad_blocks += 1;
            break;
        }
        let n = u32_at(b, at) as usize;
        let end = at + BLOCK_HEAD + n * ENTRY;
        if n == 0 || n > BLOCK_ENTRIES || end > b.len() {
            // Its length is damaged: where the next block starts is unknown.
            bad_blocks += 1;
            break;
        }
        if u64_at(b, at + 8) != xxh3_64(&b[at + BLOCK_HEAD..end]) {
            bad_blocks += 1;
            dropped += n as u64;
            at = end;
            continue;
        }
        for e in b[at + BLOCK_HEAD..end].chunks_exact(ENTRY) {
            let (page, off, len, gen) = (u32_at(e, 0), u32_at(e, 4), u32_at(e, 8), u32_at(e, 12));
            let sound = full.contains(&page)
                && t.gens[page as usize] == gen
                && (off as usize).is_multiple_of(record::ALIGN)
                && (len as usize) >= MIN_RECORD
                && (len as usize) <= super::MAX_RECORD
                && off as usize + len as usize <= page_size;
            if sound {
                locs.push(Loc { page, gen: gen as u16, off, len });
            } else {
                dropped += 1;
            }
        }
        at = end;
    }
    (locs, bad_blocks, dropped)
}

impl Frozen<'_> {
    /// Writes the flash tier's list (module doc) beside its first file: to FILE.entries.tmp,
    /// synced, renamed over FILE.entries. The store stays frozen, so nothing changes after
    /// it. `origin`: the unix time of the store's Time 0. None without a flash tier; else
    /// the entries written.
    pub fn write_flash_list(&mut self, now: Time, origin: u64) -> io::Result<Option<u64>> {
        let Some(f) = self.store.flash.as_deref() else { return Ok(None) };
        f.sync_files()?;
        let mut locs = Vec::new();
        let st = self.store;
        for (me, s) in self.shards.iter_mut().enumerate() {
            // A flush_all already due must not be undone by the list: its items go now (an
            // earlier version listed them, and the next start served flushed values). One
            // delayed past the stop cannot be kept in a record's expiry, so its shard's
            // flashed items are forgotten instead.
            s.apply_flush(&st.env(me), now);
            if s.flush_at.is_some() {
                continue;
            }
            s.flash.each(|_, loc| {
                if f.current(&loc) {
                    locs.push(loc);
                }
            });
        }
        let bytes = f.encode_list(&locs, origin);
        let path = list_path(&f.cfg.path);
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let written = std::fs::File::create(&tmp).and_then(|mut file| {
            file.write_all(&bytes)?;
            file.sync_all()
        });
        if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, &path)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(Some(locs.len() as u64))
    }
}

impl Store {
    /// The list's path (FILE.entries); None without a flash tier.
    pub fn flash_list_path(&self) -> Option<PathBuf> {
        self.flash.as_deref().map(|f| list_path(&f.cfg.path))
    }

    /// At start, before anything is stored: reads the list a graceful stop left beside the
    /// flash file, removes it, and links every record it names that verifies and has not
    /// expired (`now`, `origin`: this process's clock and the unix time of its Time 0). None:
    /// no flash tier or no list (the file starts empty).
    pub fn restore_flash_list(&self, now: Time, origin: u64) -> Option<FlashRestore> {
        let f = self.flash.as_deref()?;
        f.sh.origin.store(origin, Relaxed);
        let path = list_path(&f.cfg.path);
        let refused = |why: String| Some(FlashRestore { refused: Some(why), ..FlashRestore::default() });
        let mut file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => return refused(format!("cannot open {}: {e}", path.display())),
        };
        // No list of this file can be longer: every entry names a record of at least
        // MIN_RECORD bytes.
        let pages = f.sh.gens.len();
        let most = pages as u64 * f.sh.page_size as u64 / MIN_RECORD as u64;
        let cap = (HEAD + pages * (PAGE_ROW + 4) + 8) as u64 + most * ENTRY as u64 + most.div_ceil(BLOCK_ENTRIES as u64) * BLOCK_HEAD as u64;
        let mut b = Vec::new();
        let read = (&mut file).take(cap + 1).read_to_end(&mut b);
        // Removed before anything is linked: a crash after this start must not find it again.
        if let Err(e) = std::fs::remove_file(&path) {
            return refused(format!("cannot remove {}: {e}", path.display()));
        }
        if let Err(e) = read {
            return refused(format!("cannot read {}: {e}", path.display()));
        }
        if b.len() as u64 > cap {
            return refused("the list is longer than the file could need".into());
        }
        let (table, at, listed) = match f.decode_table(&b) {
            Ok(t) => t,
            Err(why) => return refused(why),
        };
        f.install(&table);
        let (mut locs, bad_blocks, mut dropped) = decode_entries(&b, at, &table, f.sh.page_size);
        drop(b);
        locs.sort_unstable_by_key(|l| (l.page, l.off));
        let mut rep = FlashRestore { listed, bad_blocks, ..FlashRestore::default() };
        let (mut buf, mut span) = (Vec::new(), (NO_PAGE, 0u32));
        for loc in locs {
            let (s_page, s_off) = span;
            let within = s_page == loc.page && s_off <= loc.off && (loc.off - s_off + loc.len) as usize <= buf.len();
            if !within {
                let n = READ_CHUNK.max(loc.len as usize).min(f.sh.page_size - loc.off as usize);
                f.read_span(loc.page, loc.off, n, &mut buf);
                span = (loc.page, loc.off);
            }
            let from = (loc.off - span.1) as usize;
            let rec = buf.get(from..from + loc.len as usize).unwrap_or(&[]);
            let gen = table.gens[loc.page as usize];
            let Ok((key, v)) = f.verify_any(rec, loc.page, gen) else {
                dropped += 1;
                continue;
            };
            if v.meta.exp != 0 && v.meta.exp <= now {
                rep.expired += 1;
                continue;
            }
            let h = Self::hash(key);
            if self.with_shard(h, now, |s, env| s.link_flashed(env, h, key, loc, now)) {
                f.count_live(&loc);
                rep.restored += 1;
            } else {
                dropped += 1;
            }
        }
        // Entries the header counted that no sound block carried.
        rep.dropped = dropped.max(listed.saturating_sub(rep.restored + rep.expired));
        Some(rep)
    }

    /// Removes a list left beside the flash file without reading it (a start that restores
    /// from `-e`'s snapshot instead: both would bring the same keys back). True if there was one.
    pub fn discard_flash_list(&self) -> io::Result<bool> {
        let Some(f) = self.flash.as_deref() else { return Ok(false) };
        match std::fs::remove_file(list_path(&f.cfg.path)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests;
