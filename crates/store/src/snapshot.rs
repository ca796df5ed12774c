//! Snapshots: the whole store written to a file at shutdown and read back at start (warm
//! restart).
//!
//! Owns the file format and the two walks. A snapshot holds items, not memory: each live item's
//! key, flags, absolute expiry and value, so it reads back into a store of any size or
//! geometry (`-m`, shard count, segment size may all change between runs); items that no longer
//! fit (`-I`, `-m`) are dropped and counted.
//!
//! ```text
//!   header   "MNEMOSNP" | version u32 | reserved u32 | written unix u64 | cas_floor u64 | xxh3 u64
//!   block*   "BLK1" | payload_len u32 | items u32 | xxh3(len, items, payload) u64 | payload
//!            payload = item*:  key_len u8 | flags u32 | exp unix u32 (0 = never) | value_len u32
//!                              | key | value
//!   end      "END1" | blocks u32 | items u64 | xxh3 u64
//!   (integers little-endian; a block holds ~256 KiB of items, or one larger item)
//! ```
//!
//! Damage never yields a wrong value: a block whose checksum fails is dropped whole; a block
//! header that makes no sense (bad magic, a length past the end of the file) ends the read
//! there, keeping what came before; a bad file header drops everything (a clean start). The
//! `RestoreReport` says which happened.
//!
//! CAS: restored items get new CAS values, every one above `cas_floor` (the largest CAS the
//! writing store had handed out), so a CAS a client kept from before the restart can never
//! match an item by accident.
//!
//! Writing walks each shard under its lock, segments oldest first, so items come back in their
//! age order (eviction keeps its sense of old and new). The walk skips dead items (overwritten,
//! deleted), expired ones and segments that a due `flush_all` empties.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

use parking_lot::MutexGuard;
use xxhash_rust::xxh3::xxh3_64;

use crate::item;
use crate::segment::SegState;
use crate::shard::{Env, Shard};
use crate::{Mode, Store, Time};

const MAGIC: &[u8; 8] = b"MNEMOSNP";
const VERSION: u32 = 1;
const HEADER_LEN: usize = 40;
const BLOCK_MAGIC: &[u8; 4] = b"BLK1";
const BLOCK_HEADER_LEN: usize = 20;
const END_MAGIC: &[u8; 4] = b"END1";
const END_LEN: usize = 24;
/// Items are gathered into blocks of about this size: the unit a checksum protects (and a
/// damaged byte costs).
const BLOCK_TARGET: usize = 256 << 10;
/// Per item in a block, before key and value.
const ITEM_HEADER_LEN: usize = 13;

/// What a snapshot write did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    pub items: u64,
    pub blocks: u32,
    pub bytes: u64,
}

/// What a restore did. `complete` is false when the file ended early or a block header made no
/// sense; the items before that point are restored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreReport {
    pub items: u64,
    /// Expired while the server was down.
    pub expired: u64,
    /// Would not fit any more (-I smaller than the item, or -m full).
    pub dropped: u64,
    /// Blocks whose checksum failed, with their items.
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
    #[error("snapshot format version {0} (this mnemod reads version {VERSION})")]
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
        let mut h = [0u8; BLOCK_HEADER_LEN];
        h[0..4].copy_from_slice(BLOCK_MAGIC);
        h[4..8].copy_from_slice(&(self.payload.len() as u32).to_le_bytes());
        h[8..12].copy_from_slice(&self.items.to_le_bytes());
        let sum = block_sum(&h[4..12], &self.payload);
        h[12..20].copy_from_slice(&sum.to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(&self.payload)?;
        self.stats.items += u64::from(self.items);
        self.stats.blocks += 1;
        self.stats.bytes += (BLOCK_HEADER_LEN + self.payload.len()) as u64;
        self.payload.clear();
        self.items = 0;
        Ok(())
    }
}

fn block_sum(lens: &[u8], payload: &[u8]) -> u64 {
    xxh3_64(payload) ^ xxh3_64(lens).rotate_left(17)
}

/// Every shard of a store, locked: nothing can change it until this is dropped. A snapshot
/// taken at shutdown is written from here and the process exits without dropping it, so no
/// client is told "stored" for a write the snapshot missed.
pub struct Frozen<'a> {
    store: &'a Store,
    shards: Vec<MutexGuard<'a, Shard>>,
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
        let mut w = BlockWriter { out, payload: Vec::with_capacity(2 * BLOCK_TARGET), items: 0, stats: SnapshotStats::default() };
        // A bound on every CAS handed out so far: every derived CAS is below (next segment
        // sequence << 28), and explicit ones are copies of derived ones.
        let floor = self.shards.iter().map(|s| s.segs.next_seq() << 28).max().unwrap_or(0);
        let mut head = [0u8; HEADER_LEN];
        head[0..8].copy_from_slice(MAGIC);
        head[8..12].copy_from_slice(&VERSION.to_le_bytes());
        head[16..24].copy_from_slice(&(origin + u64::from(now)).to_le_bytes());
        head[24..32].copy_from_slice(&floor.to_le_bytes());
        let sum = xxh3_64(&head[..32]);
        head[32..40].copy_from_slice(&sum.to_le_bytes());
        w.out.write_all(&head)?;
        let st = self.store;
        for (me, s) in self.shards.iter_mut().enumerate() {
            let env = Env { geo: &st.geo, budget: &st.budget, shards: &st.shards, me };
            s.apply_flush(&env, now);
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
                        w.item(&d[hdr.key_range()], hdr.flags, to_unix(hdr.exp, origin), &d[hdr.value_range()])?;
                    }
                }
                id = s.segs.next_of(id);
            }
        }
        w.flush_block()?;
        let mut end = [0u8; END_LEN];
        end[0..4].copy_from_slice(END_MAGIC);
        end[4..8].copy_from_slice(&w.stats.blocks.to_le_bytes());
        end[8..16].copy_from_slice(&w.stats.items.to_le_bytes());
        let sum = xxh3_64(&end[..16]);
        end[16..24].copy_from_slice(&sum.to_le_bytes());
        w.out.write_all(&end)?;
        w.out.flush()?;
        w.stats.bytes += (HEADER_LEN + END_LEN) as u64;
        Ok(w.stats)
    }

    /// Writes the snapshot to `path` safely: to `path.tmp` first, synced, then renamed over
    /// `path`, so a crash mid-write leaves the previous snapshot (or none), never half of one.
    pub fn write_snapshot_file(&mut self, path: &Path, now: Time, origin: u64) -> io::Result<SnapshotStats> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = std::path::PathBuf::from(tmp);
        let file = File::create(&tmp)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let stats = self.write_snapshot(&mut out, now, origin)?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The rename itself is durable once the directory is synced.
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(stats)
    }
}

impl Store {
    /// Reads a snapshot written by `write_snapshot` into this store (meant for an empty store
    /// at start; items set meanwhile are overwritten by the file's). `len` is the input's
    /// length in bytes (a block claiming more is damage, not a reason to allocate).
    pub fn restore_snapshot(&self, mut input: impl Read, len: u64, now: Time, origin: u64) -> Result<RestoreReport, SnapshotError> {
        let mut head = [0u8; HEADER_LEN];
        input.read_exact(&mut head).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => SnapshotError::BadMagic,
            _ => SnapshotError::Io(e),
        })?;
        if &head[0..8] != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        if u64::from_le_bytes(head[32..40].try_into().unwrap()) != xxh3_64(&head[..32]) {
            return Err(SnapshotError::BadHeader);
        }
        let version = u32::from_le_bytes(head[8..12].try_into().unwrap());
        if version != VERSION {
            return Err(SnapshotError::Version(version));
        }
        let floor = u64::from_le_bytes(head[24..32].try_into().unwrap());
        self.raise_cas_floor(floor);
        let now_unix = origin + u64::from(now);
        let mut report = RestoreReport::default();
        let mut pos = HEADER_LEN as u64;
        let mut payload = Vec::new();
        let stop = |report: &mut RestoreReport, why: String| {
            report.stopped = Some(why);
        };
        loop {
            let mut h = [0u8; BLOCK_HEADER_LEN];
            // The end record is shorter than a block header: read its first 4 bytes first.
            if let Err(e) = input.read_exact(&mut h[..4]) {
                stop(&mut report, format!("the file ends at byte {pos} without its end record ({e})"));
                break;
            }
            if &h[..4] == END_MAGIC {
                let mut end = [0u8; END_LEN];
                end[..4].copy_from_slice(END_MAGIC);
                match input.read_exact(&mut end[4..]) {
                    Ok(()) if u64::from_le_bytes(end[16..24].try_into().unwrap()) == xxh3_64(&end[..16]) => {
                        report.complete = report.bad_blocks == 0;
                    }
                    _ => stop(&mut report, format!("the end record at byte {pos} is damaged")),
                }
                break;
            }
            if &h[..4] != BLOCK_MAGIC {
                stop(&mut report, format!("no block at byte {pos}: the rest of the file is dropped"));
                break;
            }
            if let Err(e) = input.read_exact(&mut h[4..]) {
                stop(&mut report, format!("the file ends inside the block at byte {pos} ({e})"));
                break;
            }
            let plen = u32::from_le_bytes(h[4..8].try_into().unwrap()) as u64;
            if pos + (BLOCK_HEADER_LEN as u64) + plen > len {
                stop(&mut report, format!("the block at byte {pos} runs past the end of the file"));
                break;
            }
            payload.resize(plen as usize, 0);
            if let Err(e) = input.read_exact(&mut payload) {
                stop(&mut report, format!("the file ends inside the block at byte {pos} ({e})"));
                break;
            }
            pos += BLOCK_HEADER_LEN as u64 + plen;
            let sum = u64::from_le_bytes(h[12..20].try_into().unwrap());
            if sum != block_sum(&h[4..12], &payload) {
                report.bad_blocks += 1;
                continue;
            }
            self.restore_block(&payload, now, now_unix, origin, &mut report);
        }
        Ok(report)
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
