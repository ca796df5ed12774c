//! Snapshots: the whole store written to a file at shutdown and read back at start (warm
//! restart).
//!
//! Owns the file format and the two walks. A snapshot holds items, not memory: each live item's
//! key, flags, absolute expiry and value, so it reads back into a store of any size or
//! geometry (`-m`, shard count, segment size may all change between runs); items that no longer
//! fit (`-I`, `-m`) are dropped and counted.
//!
//! ```text
//!   version 2 (written):
//!   header   "MNEMOSNP" | version u32 | reserved u32 | written unix u64 | cas_floor u64
//!            | salt u64 | xxh3(bytes 0..40) u64                                     48 bytes
//!   block*   "BLK2" | payload_len u32 | items u32 | head_sum u32 | payload_sum u64 | payload
//!            head_sum    = low 32 bits of xxh3(bytes 0..12, seed salt)
//!            payload_sum = xxh3(payload, seed salt ^ bytes 4..12)
//!            payload = item*:  key_len u8 | flags u32 | exp unix u32 (0 = never) | value_len u32
//!                              | key | value
//!   end      "END2" | blocks u32 | items u64 | xxh3(bytes 0..16, seed salt) u64
//!   (integers little-endian; a block holds ~256 KiB of items, or one larger item)
//!
//!   version 1 (still read): 40-byte header without the salt; "BLK1" | payload_len | items
//!   | xxh3(payload) ^ rotl(xxh3(bytes 4..12), 17) u64; "END1" with an unseeded xxh3.
//! ```
//!
//! Damage never yields a wrong value, and costs only the block it hits:
//! - a payload whose sum fails (its header being sound) is stepped over by its length;
//! - a block header whose `head_sum` fails (a flipped length, a flipped magic) is not trusted
//!   for anything: the reader resyncs, scanning forward for the next `BLK2`/`END2` whose own
//!   sum holds. The sums are seeded with the file's random salt, so bytes inside a value (a
//!   client's data) cannot pose as a block: forging one means guessing 64 secret bits. The
//!   header sum makes each candidate an O(1) check, so the scan is linear in the file.
//! - a bad file header drops everything (a clean start): without it there is no salt.
//!
//! A version 1 file has no salt, so its reader does not resync: a bad block header ends the
//! read there, keeping what came before. The `RestoreReport` says which happened.
//!
//! CAS: restored items get new CAS values, every one above `cas_floor` (the largest CAS the
//! writing store had handed out), so a CAS a client kept from before the restart can never
//! match an item by accident.
//!
//! Writing walks each shard under its lock, segments oldest first, so items come back in their
//! age order (eviction keeps its sense of old and new). Items whose value is on flash (the
//! flash tier) come first, read back from the file and verified: the snapshot holds them as
//! any item, and restoring them into a store with a flash tier sends what overflows RAM back
//! to flash (the restore waits for the flash writer between blocks). A key deleted or
//! overwritten before the snapshot cannot come back: only the index's live entries are read. The walk skips dead items (overwritten,
//! deleted), expired ones and segments that a due `flush_all` empties.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

use parking_lot::MutexGuard;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::item;
use crate::segment::SegState;
use crate::shard::Shard;
use crate::{Mode, Store, Time};

const MAGIC: &[u8; 8] = b"MNEMOSNP";
/// The version written; 1 is still read.
const VERSION: u32 = 2;
/// Items are gathered into blocks of about this size: the unit a checksum protects (and a
/// damaged byte costs).
const BLOCK_TARGET: usize = 256 << 10;
/// Per item in a block, before key and value.
const ITEM_HEADER_LEN: usize = 13;
/// Bytes read at a time while scanning for the next block after damage.
const SCAN_CHUNK: usize = 64 << 10;
/// The end record, in both versions: magic | blocks u32 | items u64 | sum u64.
const END_LEN: usize = 24;

/// What differs between the versions: lengths, magics and how each part is summed.
#[derive(Clone, Copy)]
struct Format {
    version: u32,
    header_len: usize,
    block_magic: &'static [u8; 4],
    block_header_len: usize,
    end_magic: &'static [u8; 4],
    /// 0 in version 1 (unseeded sums).
    salt: u64,
}

const V1: Format = Format { version: 1, header_len: 40, block_magic: b"BLK1", block_header_len: 20, end_magic: b"END1", salt: 0 };
const V2: Format = Format { version: 2, header_len: 48, block_magic: b"BLK2", block_header_len: 24, end_magic: b"END2", salt: 0 };

impl Format {
    fn of(version: u32) -> Option<Format> {
        match version {
            1 => Some(V1),
            2 => Some(V2),
            _ => None,
        }
    }

    /// Whether the reader may scan for the next block after damage (only with a salt).
    fn resyncs(&self) -> bool {
        self.version >= 2
    }

    /// Fills a block header for `payload` (its magic, lengths and sums).
    fn block_header(&self, payload: &[u8], items: u32) -> Vec<u8> {
        let mut h = vec![0u8; self.block_header_len];
        h[0..4].copy_from_slice(self.block_magic);
        h[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        h[8..12].copy_from_slice(&items.to_le_bytes());
        if self.version == 1 {
            let sum = xxh3_64(payload) ^ xxh3_64(&h[4..12]).rotate_left(17);
            h[12..20].copy_from_slice(&sum.to_le_bytes());
        } else {
            let head = self.head_sum(&h[..12]);
            h[12..16].copy_from_slice(&head.to_le_bytes());
            let sum = self.payload_sum(&h[4..12], payload);
            h[16..24].copy_from_slice(&sum.to_le_bytes());
        }
        h
    }

    /// Version 2: the header's own sum, so a candidate found while resyncing costs O(1).
    fn head_sum(&self, first12: &[u8]) -> u32 {
        xxh3_64_with_seed(first12, self.salt) as u32
    }

    fn payload_sum(&self, lens: &[u8], payload: &[u8]) -> u64 {
        xxh3_64_with_seed(payload, self.salt ^ u64::from_le_bytes(lens.try_into().unwrap()))
    }

    /// Whether a block header (its full length) can be trusted for its length. Version 1
    /// headers carry no sum of their own: only the magic says anything.
    fn header_ok(&self, h: &[u8]) -> bool {
        &h[0..4] == self.block_magic && (self.version == 1 || u32::from_le_bytes(h[12..16].try_into().unwrap()) == self.head_sum(&h[..12]))
    }

    fn payload_ok(&self, h: &[u8], payload: &[u8]) -> bool {
        let stored = u64::from_le_bytes(h[self.block_header_len - 8..].try_into().unwrap());
        if self.version == 1 {
            stored == xxh3_64(payload) ^ xxh3_64(&h[4..12]).rotate_left(17)
        } else {
            stored == self.payload_sum(&h[4..12], payload)
        }
    }

    fn end_sum(&self, first16: &[u8]) -> u64 {
        xxh3_64_with_seed(first16, self.salt)
    }

    fn end_record(&self, blocks: u32, items: u64) -> [u8; END_LEN] {
        let mut end = [0u8; END_LEN];
        end[0..4].copy_from_slice(self.end_magic);
        end[4..8].copy_from_slice(&blocks.to_le_bytes());
        end[8..16].copy_from_slice(&items.to_le_bytes());
        let sum = self.end_sum(&end[..16]);
        end[16..24].copy_from_slice(&sum.to_le_bytes());
        end
    }

    /// The block count of a sound end record.
    fn end_ok(&self, end: &[u8]) -> Option<u32> {
        (&end[0..4] == self.end_magic && u64::from_le_bytes(end[16..24].try_into().unwrap()) == self.end_sum(&end[..16]))
            .then(|| u32::from_le_bytes(end[4..8].try_into().unwrap()))
    }
}

/// A salt no client can predict: std's RandomState is keyed from the OS's random source.
fn fresh_salt() -> u64 {
    use std::hash::BuildHasher;
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    std::collections::hash_map::RandomState::new().hash_one(t)
}

/// What a snapshot write did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    pub items: u64,
    pub blocks: u32,
    pub bytes: u64,
}

/// What a restore did. `complete` is false when the file ended early, a block header made no
/// sense or a block was damaged; every sound block is restored all the same.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Items stored. Some of them may have been evicted again by later ones (`evicted`).
    pub items: u64,
    /// Expired while the server was down.
    pub expired: u64,
    /// Would not fit any more (-I smaller than the item, or -m full).
    pub dropped: u64,
    /// Items the restore itself evicted (from RAM, or with a flash page) to make room for later
    /// ones: a snapshot larger than this store's `-m` (and flash file).
    pub evicted: u64,
    /// When the snapshot was written (unix seconds, from its header).
    pub written_unix: u64,
    /// Blocks lost to damage, with their items (counted from the end record when it is sound,
    /// else one per damaged place).
    pub bad_blocks: u32,
    pub complete: bool,
    /// Why the read stopped early, if it did.
    pub stopped: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("not a mnemo snapshot (bad magic)")]
    BadMagic,
    #[error("snapshot format version {0} (this mnemod reads versions 1 to {VERSION})")]
    Version(u32),
    #[error("snapshot header is damaged (checksum)")]
    BadHeader,
}

/// Unix seconds <-> the store's relative clock: `origin` is the unix time of relative 0.
fn to_unix(exp: Time, origin: u64) -> u32 {
    if exp == 0 {
        0
    } else {
        (origin + u64::from(exp)).min(u64::from(u32::MAX)) as u32
    }
}

struct BlockWriter<W: Write> {
    out: W,
    fmt: Format,
    payload: Vec<u8>,
    items: u32,
    stats: SnapshotStats,
}

impl<W: Write> BlockWriter<W> {
    fn item(&mut self, key: &[u8], flags: u32, exp_unix: u32, value: &[u8]) -> io::Result<()> {
        let p = &mut self.payload;
        p.push(key.len() as u8);
        p.extend_from_slice(&flags.to_le_bytes());
        p.extend_from_slice(&exp_unix.to_le_bytes());
        p.extend_from_slice(&(value.len() as u32).to_le_bytes());
        p.extend_from_slice(key);
        p.extend_from_slice(value);
        self.items += 1;
        if self.payload.len() >= BLOCK_TARGET {
            self.flush_block()?;
        }
        Ok(())
    }

    fn flush_block(&mut self) -> io::Result<()> {
        if self.items == 0 {
            return Ok(());
        }
        let h = self.fmt.block_header(&self.payload, self.items);
        self.out.write_all(&h)?;
        self.out.write_all(&self.payload)?;
        self.stats.items += u64::from(self.items);
        self.stats.blocks += 1;
        self.stats.bytes += (h.len() + self.payload.len()) as u64;
        self.payload.clear();
        self.items = 0;
        Ok(())
    }
}

/// Every shard of a store, locked: nothing can change it until this is dropped. A snapshot
/// taken at shutdown is written from here and the process exits without dropping it, so no
/// client is told "stored" for a write the snapshot missed.
pub struct Frozen<'a> {
    pub(crate) store: &'a Store,
    pub(crate) shards: Vec<MutexGuard<'a, Shard>>,
}

impl Store {
    /// Locks every shard (in order; nothing else ever waits for a second shard's lock).
    pub fn freeze(&self) -> Frozen<'_> {
        Frozen { store: self, shards: self.shards.iter().map(|s| s.lock()).collect() }
    }

    /// `freeze().write_snapshot(...)`, unfrozen after.
    pub fn write_snapshot(&self, out: impl Write, now: Time, origin: u64) -> io::Result<SnapshotStats> {
        self.freeze().write_snapshot(out, now, origin)
    }

    /// `freeze().write_snapshot_file(...)`, unfrozen after.
    pub fn write_snapshot_file(&self, path: &Path, now: Time, origin: u64) -> io::Result<SnapshotStats> {
        self.freeze().write_snapshot_file(path, now, origin)
    }
}

impl Frozen<'_> {
    /// Writes every live item to `out` (format above). `now` is the store's clock and `origin`
    /// the unix time of its 0.
    pub fn write_snapshot(&mut self, out: impl Write, now: Time, origin: u64) -> io::Result<SnapshotStats> {
        let fmt = Format { salt: fresh_salt(), ..V2 };
        let mut w = BlockWriter { out, fmt, payload: Vec::with_capacity(2 * BLOCK_TARGET), items: 0, stats: SnapshotStats::default() };
        // A bound on every CAS handed out so far: every derived CAS is below (next segment
        // sequence << 28), and explicit ones are copies of derived ones.
        let floor = self.shards.iter().map(|s| s.segs.next_seq() << 28).max().unwrap_or(0);
        let mut head = vec![0u8; fmt.header_len];
        head[0..8].copy_from_slice(MAGIC);
        head[8..12].copy_from_slice(&VERSION.to_le_bytes());
        head[16..24].copy_from_slice(&(origin + u64::from(now)).to_le_bytes());
        head[24..32].copy_from_slice(&floor.to_le_bytes());
        head[32..40].copy_from_slice(&fmt.salt.to_le_bytes());
        let sum = xxh3_64(&head[..40]);
        head[40..48].copy_from_slice(&sum.to_le_bytes());
        w.out.write_all(&head)?;
        let st = self.store;
        let mut rec = Vec::new();
        for (me, s) in self.shards.iter_mut().enumerate() {
            let env = st.env(me);
            s.apply_flush(&env, now);
            // A delayed flush_all not due yet invalidates, once due, every item stored before
            // it: that is an expiry, and the snapshot keeps it as one (the flush itself is
            // not in the file), so no item outlives the flush a client was told of.
            let exp = |e: Time| match s.flush_at {
                Some(at) if e == 0 || e > at => at,
                _ => e,
            };
            // Items whose value is on flash first: they are older than what is in RAM, and a
            // restore that fills RAM sends them back to flash. Each is read and verified; one
            // that fails is left out, as a read would miss it.
            if let Some(f) = env.flash {
                let mut locs = Vec::new();
                s.flash.each(|_, loc| locs.push(loc));
                for loc in locs {
                    let Ok(gen) = f.read(&loc, &mut rec) else { continue };
                    let Ok((key, v)) = f.verify_any(&rec, loc.page, gen) else { continue };
                    if v.meta.exp != 0 && v.meta.exp <= now {
                        continue;
                    }
                    w.item(key, v.meta.flags, to_unix(exp(v.meta.exp), origin), v.value)?;
                }
            }
            let mut id = s.segs.head();
            while id != 0 {
                let m = &s.segs.metas[id as usize];
                if m.state == SegState::Live {
                    let mut off = 0;
                    while off < m.write {
                        let d = &m.data[off..];
                        let hdr = item::decode(d);
                        off += hdr.total_len();
                        if hdr.is_dead() || (hdr.exp != 0 && hdr.exp <= now) {
                            continue;
                        }
                        w.item(&d[hdr.key_range()], hdr.flags, to_unix(exp(hdr.exp), origin), &d[hdr.value_range()])?;
                    }
                }
                id = s.segs.next_of(id);
            }
        }
        w.flush_block()?;
        let end = fmt.end_record(w.stats.blocks, w.stats.items);
        w.out.write_all(&end)?;
        w.out.flush()?;
        w.stats.bytes += (fmt.header_len + END_LEN) as u64;
        Ok(w.stats)
    }

    /// Writes the snapshot to `path` safely: to `path.tmp` first, synced, then renamed over
    /// `path`, so a crash mid-write leaves the previous snapshot (or none), never half of one.
    /// A write that fails removes `path.tmp`.
    pub fn write_snapshot_file(&mut self, path: &Path, now: Time, origin: u64) -> io::Result<SnapshotStats> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = std::path::PathBuf::from(tmp);
        let written = File::create(&tmp).and_then(|file| {
            let mut out = BufWriter::with_capacity(1 << 20, file);
            let stats = self.write_snapshot(&mut out, now, origin)?;
            let file = out.into_inner().map_err(|e| e.into_error())?;
            file.sync_all()?;
            drop(file);
            std::fs::rename(&tmp, path)?;
            Ok(stats)
        });
        let stats = match written {
            Ok(s) => s,
            Err(e) => {
                // A full disk must not stay full of a snapshot that will never be used.
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The rename itself is durable once the directory is synced.
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(stats)
    }
}

/// The reader's view of its input: the bytes from the cursor on, read as they are needed. It
/// holds one block at most (whose length was checked against the file's) or a scan chunk.
struct Window<R: Read> {
    input: R,
    /// `buf[at..end]` is input not yet consumed; the rest of `buf` is room already
    /// initialized, kept so that each block is not zeroed before it is read over.
    buf: Vec<u8>,
    at: usize,
    end: usize,
    /// The cursor's offset in the file.
    pos: u64,
}

impl<R: Read> Window<R> {
    fn avail(&self) -> &[u8] {
        &self.buf[self.at..self.end]
    }

    fn advance(&mut self, n: usize) {
        self.at += n;
        self.pos += n as u64;
    }

    /// Makes `n` bytes available from the cursor; false when the input ends first (what it
    /// had is available all the same).
    fn fill(&mut self, n: usize) -> io::Result<bool> {
        if self.end - self.at >= n {
            return Ok(true);
        }
        self.buf.copy_within(self.at..self.end, 0);
        self.end -= self.at;
        self.at = 0;
        if self.buf.len() < n {
            self.buf.resize(n, 0);
        }
        while self.end < n {
            match self.input.read(&mut self.buf[self.end..n]) {
                Ok(0) => return Ok(false),
                Ok(k) => self.end += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// After damage at the cursor: moves to the next place past it where a block header or
    /// the end record checks out (false when the input ends first). Each candidate costs one
    /// header sum, and every byte is searched once.
    fn resync(&mut self, fmt: &Format) -> io::Result<bool> {
        let need = fmt.block_header_len.max(END_LEN);
        self.advance(1);
        loop {
            if self.avail().len() < need {
                self.fill(SCAN_CHUNK)?;
                if self.avail().len() < need {
                    return Ok(false);
                }
            }
            let a = self.avail();
            let Some(i) = a.windows(4).position(|m| m == fmt.block_magic || m == fmt.end_magic) else {
                self.advance(a.len() - 3);
                continue;
            };
            self.advance(i);
            if !self.fill(need)? {
                return Ok(false);
            }
            let c = &self.avail()[..need];
            if fmt.header_ok(&c[..fmt.block_header_len]) || fmt.end_ok(&c[..END_LEN]).is_some() {
                return Ok(true);
            }
            self.advance(1);
        }
    }
}

impl Store {
    /// Reads a snapshot written by `write_snapshot` into this store (meant for an empty store
    /// at start; items set meanwhile are overwritten by the file's). `len` is the input's
    /// length in bytes (a block claiming more is damage, not a reason to allocate).
    pub fn restore_snapshot(&self, input: impl Read, len: u64, now: Time, origin: u64) -> Result<RestoreReport, SnapshotError> {
        let mut w = Window { input, buf: Vec::new(), at: 0, end: 0, pos: 0 };
        if !w.fill(12)? || &w.avail()[0..8] != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        let version = u32::from_le_bytes(w.avail()[8..12].try_into().unwrap());
        let mut fmt = Format::of(version).ok_or(SnapshotError::Version(version))?;
        if !w.fill(fmt.header_len)? {
            return Err(SnapshotError::BadHeader);
        }
        let head = &w.avail()[..fmt.header_len];
        let n = fmt.header_len - 8;
        if u64::from_le_bytes(head[n..].try_into().unwrap()) != xxh3_64(&head[..n]) {
            return Err(SnapshotError::BadHeader);
        }
        if fmt.resyncs() {
            fmt.salt = u64::from_le_bytes(head[32..40].try_into().unwrap());
        }
        let written_unix = u64::from_le_bytes(head[16..24].try_into().unwrap());
        self.raise_cas_floor(u64::from_le_bytes(head[24..32].try_into().unwrap()));
        w.advance(fmt.header_len);
        let now_unix = origin + u64::from(now);
        let bh = fmt.block_header_len;
        let mut report = RestoreReport { written_unix, ..RestoreReport::default() };
        let (mut good, mut damaged) = (0u32, 0u32);
        // Items the restore pushes out of RAM wait for a flash write buffer rather than being
        // evicted for want of one; what is evicted anyway (the file larger than RAM and flash
        // together) is counted from the store's own counts.
        let _patient = self.flash.as_ref().map(|f| f.patient());
        let evicted_before = self.evicted_total();
        let mut written: Option<u32> = None;
        loop {
            let pos = w.pos;
            let ended = |e: io::Result<bool>| match e {
                Ok(true) => None,
                Ok(false) => Some(format!("the file ends at byte {pos}, inside what begins there")),
                Err(e) => Some(format!("reading byte {pos}: {e}")),
            };
            if let Some(why) = ended(w.fill(4)) {
                report.stopped = Some(format!("{why}; no end record"));
                break;
            }
            let why = if &w.avail()[..4] == fmt.end_magic {
                if let Some(why) = ended(w.fill(END_LEN)) {
                    report.stopped = Some(why);
                    break;
                }
                if let Some(blocks) = fmt.end_ok(&w.avail()[..END_LEN]) {
                    written = Some(blocks);
                    break;
                }
                format!("the end record at byte {pos} is damaged")
            } else if &w.avail()[..4] == fmt.block_magic {
                if let Some(why) = ended(w.fill(bh)) {
                    report.stopped = Some(why);
                    break;
                }
                let mut h = [0u8; 24];
                h[..bh].copy_from_slice(&w.avail()[..bh]);
                let h = &h[..bh];
                let plen = u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize;
                if !fmt.header_ok(h) {
                    format!("the block header at byte {pos} is damaged")
                } else if pos + (bh + plen) as u64 > len {
                    report.stopped = Some(format!("the block at byte {pos} runs past the end of the file"));
                    break;
                } else {
                    if let Some(why) = ended(w.fill(bh + plen)) {
                        report.stopped = Some(why);
                        break;
                    }
                    let payload = &w.avail()[bh..bh + plen];
                    if fmt.payload_ok(h, payload) {
                        self.restore_block(payload, now, now_unix, origin, &mut report);
                        if let Some(f) = &self.flash {
                            // Items that overflow RAM go to flash: let the writer keep up.
                            f.settle();
                        }
                        good += 1;
                    } else {
                        // The header is sound (or, in version 1, all there is to go by): its
                        // length leads to the next block.
                        damaged += 1;
                    }
                    w.advance(bh + plen);
                    continue;
                }
            } else {
                format!("no block at byte {pos}")
            };
            // A block never fits in END_LEN bytes: damage there is the end record's.
            if pos + END_LEN as u64 != len {
                damaged += 1;
            }
            if !fmt.resyncs() {
                report.stopped = Some(format!("{why}: the rest of the file is dropped"));
                break;
            }
            match w.resync(&fmt) {
                Ok(true) => {}
                Ok(false) => {
                    report.stopped = Some(format!("{why}, and no sound block follows"));
                    break;
                }
                Err(e) => {
                    report.stopped = Some(format!("{why}; reading on: {e}"));
                    break;
                }
            }
        }
        report.bad_blocks = written.map_or(damaged, |n| n.saturating_sub(good));
        report.evicted = self.evicted_total().saturating_sub(evicted_before);
        report.complete = written.is_some()
            && report.bad_blocks == 0
            && report.stopped.is_none()
            && report.dropped == 0
            && report.evicted == 0;
        Ok(report)
    }

    /// Items evicted so far, from RAM and with flash pages.
    fn evicted_total(&self) -> u64 {
        let st = self.stats();
        st.evictions + st.flash.map_or(0, |f| f.objects_evicted)
    }

    fn restore_block(&self, mut p: &[u8], now: Time, now_unix: u64, origin: u64, report: &mut RestoreReport) {
        while p.len() >= ITEM_HEADER_LEN {
            let klen = p[0] as usize;
            let flags = u32::from_le_bytes(p[1..5].try_into().unwrap());
            let exp_unix = u32::from_le_bytes(p[5..9].try_into().unwrap());
            let vlen = u32::from_le_bytes(p[9..13].try_into().unwrap()) as usize;
            let Some(rest) = p.get(ITEM_HEADER_LEN..ITEM_HEADER_LEN + klen + vlen) else {
                // A checksummed block is ours; a malformed one can only be a bug. Stop
                // reading this block rather than guess.
                report.dropped += 1;
                return;
            };
            let (key, value) = rest.split_at(klen);
            p = &p[ITEM_HEADER_LEN + klen + vlen..];
            let exp = match u64::from(exp_unix) {
                0 => 0,
                e if e <= now_unix => {
                    report.expired += 1;
                    continue;
                }
                // Below the relative clock's start (the new process began after the item's
                // expiry... but it is still in the future): never 0, which means "never".
                e => e.saturating_sub(origin).clamp(1, u64::from(Time::MAX)) as Time,
            };
            match self.store(Mode::Set, key, flags, exp, value, now) {
                Ok(_) => report.items += 1,
                Err(_) => report.dropped += 1,
            }
        }
    }

    /// Every CAS handed out from now on is above `floor`.
    fn raise_cas_floor(&self, floor: u64) {
        for s in self.shards.iter() {
            s.lock().segs.raise_seq((floor >> 28) + 1);
        }
    }
}

#[cfg(test)]
mod tests;
