//! Warm restart: with `-e PATH` (memcached's `--memory-file`), the store is written to PATH when
//! mnemod stops on `shutdown` (with `-A`), SIGUSR1, SIGTERM or SIGINT, and read back when it
//! starts, so a restart (an upgrade, a reboot) keeps the cache warm. The file format and its
//! checksums are mnemo-store's (snapshot.rs).
//!
//! ```text
//!   start   PATH: owned (owner.rs: flock on the file itself, held to exit) -> another
//!           mnemod has it? refuse to start
//!           PATH.tmp there? a write that never finished (a kill, a full disk): removed
//!           PATH non-empty? -> Store::restore_snapshot (before any listener serves)
//!                          -> PATH emptied and synced: this snapshot is spent
//!                          -> one log line; `stats snapshot` keeps the report
//!   stop    a worker (`shutdown`) or the maintenance thread (SIGUSR1/SIGTERM/SIGINT, seen
//!           within a second) -> Store::freeze: every shard locked, so no write is
//!           acknowledged after this point -> PATH.tmp written, synced, renamed over PATH
//!           -> exit
//!
//!   without -e, with a flash tier (-o ext_path=FILE): the same stop writes FILE.entries (the
//!   flashed items' locations, mnemo-store flash/keep.rs) instead; the next start reads and
//!   removes it before serving ([`keep_flash_start`])
//! ```
//!
//! The rule: a cache may forget, never lie. A snapshot describes the cache at the moment of
//! the stop that wrote it; once a start has read it, every write acknowledged after that
//! start makes it stale. So it is emptied right after the restore, before anything is
//! served: a stop that writes no new one (kill -9, the OOM killer, power loss, a failed write)
//! leads to an empty start, never to the older cache. The same holds for FILE.entries.
//!
//! The exception no file can show: a server run on the same keys *without* `-e` (or with
//! another file) in between leaves PATH as its own last graceful stop wrote it, and a later
//! start with `-e PATH` restores that older cache. The start's log line says when the snapshot
//! was written (docs/operations.md).
//!
//! A missing or empty file is a cold start. A damaged one never yields a wrong value: its bad
//! blocks (or everything, for a bad header) are dropped, and the log line says so.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

use mnemo_proto::reply::{line, stat};
use mnemo_store::{RestoreReport, Store, Time};

/// What the start-up restore did, for `stats snapshot`.
#[derive(Debug, Default)]
pub struct Restored {
    pub report: Option<RestoreReport>,
    pub usec: u64,
    /// Why nothing was restored (a refused file); None for a cold start or a restore.
    pub refused: Option<String>,
}

impl Restored {
    /// `none` (no -e, or no file yet), `complete`, `partial` (damage dropped some), `refused`.
    pub fn state(&self) -> &'static str {
        match (&self.report, &self.refused) {
            (_, Some(_)) => "refused",
            (None, None) => "none",
            (Some(rep), _) if rep.complete => "complete",
            (Some(_), _) => "partial",
        }
    }
}

/// PATH with a suffix (PATH.tmp).
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// Makes this process the one owner of `-e`'s `path` (before anything is bound or read,
/// owner.rs), then removes a PATH.tmp that a write which never finished left behind. Returns
/// the path with its symlinks resolved: the snapshot is written beside and renamed over the
/// file itself, never over a link to it. The error is the line to print.
pub fn claim(path: &Path) -> Result<PathBuf, String> {
    let real = crate::owner::own(path, "-e")?;
    let tmp = beside(&real, ".tmp");
    match std::fs::remove_file(&tmp) {
        Ok(()) => eprintln!("mnemod: -e {}: removed {}, left by a snapshot write that did not finish", path.display(), tmp.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => eprintln!("mnemod: -e {}: cannot remove the stale {}: {e}", path.display(), tmp.display()),
    }
    Ok(real)
}

/// Reads `path` (as [`claim`] resolved it) into the (empty) store at start-up, then empties
/// it (module doc: a snapshot is spent once read). `shown` is the path as given, for the log.
pub fn restore(store: &Store, path: &Path, shown: &Path, now: Time, origin: u64) -> Restored {
    let t = Instant::now();
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) => return refused(shown, e.to_string()),
    };
    let len = match file.metadata() {
        Ok(m) => m.len(),
        Err(e) => return refused(shown, e.to_string()),
    };
    if len == 0 {
        // What owner.rs creates, and what a restore or a crash after one leaves.
        eprintln!("mnemod: -e {}: no snapshot (the file is empty); starting empty", shown.display());
        return Restored::default();
    }
    let input = std::io::BufReader::with_capacity(1 << 20, file);
    let restored = match store.restore_snapshot(input, len, now, origin) {
        Ok(r) => {
            let usec = t.elapsed().as_micros() as u64;
            let ago = (origin + u64::from(now)).saturating_sub(r.written_unix);
            eprintln!(
                "mnemod: -e {}: restored {} items in {:.2} s from a snapshot written {ago} s ago ({} expired while \
                 down; {})",
                shown.display(),
                r.items,
                usec as f64 / 1e6,
                r.expired,
                how(&r)
            );
            Restored { report: Some(r), usec, refused: None }
        }
        Err(e) => refused(shown, e.to_string()),
    };
    // Spent, whatever it held: a later crash must find no snapshot rather than this one.
    match crate::owner::empty(path) {
        Ok(()) => eprintln!(
            "mnemod: -e {}: emptied; the next graceful stop writes it again (a crash before then starts empty)",
            shown.display()
        ),
        Err(e) => {
            // Serving with a snapshot that a crash would bring back could serve stale values.
            eprintln!("mnemod: -e {}: cannot empty the restored snapshot: {e}; starting empty instead", shown.display());
            store.flush_all(now);
            return Restored { refused: Some(format!("cannot empty the file: {e}")), ..Restored::default() };
        }
    }
    restored
}

/// "complete", or "partial: ..." with every count of what did not come back.
fn how(r: &RestoreReport) -> String {
    if r.complete {
        return "complete".to_string();
    }
    let mut parts = Vec::new();
    if r.dropped > 0 {
        parts.push(format!("{} did not fit (-I, -m)", r.dropped));
    }
    if r.evicted > 0 {
        parts.push(format!("{} evicted by the restore itself", r.evicted));
    }
    if r.bad_blocks > 0 {
        parts.push(format!("{} damaged block(s) dropped", r.bad_blocks));
    }
    if let Some(why) = &r.stopped {
        parts.push(format!("incomplete: {why}"));
    }
    format!("partial: {}", parts.join(", "))
}

fn refused(path: &Path, why: String) -> Restored {
    eprintln!("mnemod: -e {}: {why}; nothing restored, starting empty", path.display());
    Restored { refused: Some(why), ..Restored::default() }
}

/// Freezes the store, writes the snapshot and exits the process (status 0 when written).
/// The store stays frozen to the end: other workers' writes wait and are never acknowledged.
pub fn save_and_exit(store: &Store, path: &Path, now: Time, origin: u64, cleanup: impl FnOnce()) -> ! {
    let t = Instant::now();
    let mut frozen = store.freeze();
    let status = match frozen.write_snapshot_file(path, now, origin) {
        Ok(s) => {
            eprintln!(
                "mnemod: -e {}: wrote {} items ({:.1} MiB) in {:.2} s",
                path.display(),
                s.items,
                s.bytes as f64 / (1 << 20) as f64,
                t.elapsed().as_secs_f64()
            );
            0
        }
        Err(e) => {
            eprintln!("mnemod: -e {}: writing the snapshot failed: {e}; the next start begins empty", path.display());
            1
        }
    };
    cleanup();
    std::process::exit(status);
}

/// At start with a flash tier (before `-e`'s restore and before anything is served): the
/// list a graceful stop left beside the flash file (mnemo-store flash/keep.rs) brings its
/// items back, and is removed. With `-e` and a snapshot to restore, the snapshot brings them
/// back instead (it holds the flashed values too), and the list is removed unread.
///
/// Both there means runs with and without `-e` took turns on this flash file, and the one
/// written last holds the newer values: an older snapshot restored over a newer list would
/// serve values overwritten since. So the newer one (by modification time) is read and the
/// other is spent unread.
pub fn keep_flash_start(store: &Store, memory_file: Option<&Path>, now: Time, origin: u64) {
    let Some(list) = store.flash_list_path() else { return };
    let modified = |p: &Path| std::fs::metadata(p).ok().filter(|m| m.len() > 0).and_then(|m| m.modified().ok());
    // A snapshot to restore (owner.rs leaves an empty file where there is none).
    let snapshot = memory_file.and_then(modified);
    if let Some(snap_at) = snapshot {
        if modified(&list).is_some_and(|list_at| list_at > snap_at) {
            let path = memory_file.expect("a snapshot has a path");
            eprintln!(
                "mnemod: -e {}: older than {}, which a later stop without -e wrote: not read",
                path.display(),
                list.display()
            );
            if let Err(e) = crate::owner::empty(path) {
                // Restoring it would serve values overwritten since: refuse to start instead.
                eprintln!("mnemod: -e {}: cannot empty it: {e}", path.display());
                std::process::exit(1);
            }
        } else {
            match store.discard_flash_list() {
                Ok(true) => eprintln!("mnemod: {}: not read: -e's snapshot brings the flashed items back", list.display()),
                Ok(false) => {}
                Err(e) => eprintln!("mnemod: {}: cannot remove: {e}", list.display()),
            }
            return;
        }
    }
    let t = Instant::now();
    let Some(r) = store.restore_flash_list(now, origin) else {
        if memory_file.is_none() {
            eprintln!("mnemod: {}: no list of kept items; the flash file starts empty", list.display());
        }
        return;
    };
    match &r.refused {
        Some(why) => eprintln!("mnemod: {}: {why}; the flash file starts empty", list.display()),
        None => eprintln!(
            "mnemod: {}: {} items kept on flash in {:.2} s ({} listed, {} expired while down, {} dropped: \
             damaged, {} damaged block(s))",
            list.display(),
            r.restored,
            t.elapsed().as_secs_f64(),
            r.listed,
            r.expired,
            r.dropped,
            r.bad_blocks
        ),
    }
}

/// A graceful stop without `-e` but with a flash tier: freezes the store, writes the list of
/// what is on flash beside the file (so the next start keeps it) and exits the process.
pub fn keep_flash_and_exit(store: &Store, now: Time, origin: u64, cleanup: impl FnOnce()) -> ! {
    let t = Instant::now();
    let mut frozen = store.freeze();
    let list = store.flash_list_path().unwrap_or_default();
    let status = match frozen.write_flash_list(now, origin) {
        Ok(n) => {
            let n = n.unwrap_or(0);
            eprintln!("mnemod: {}: listed {n} items on flash in {:.2} s", list.display(), t.elapsed().as_secs_f64());
            0
        }
        Err(e) => {
            eprintln!("mnemod: {}: writing the list failed: {e}; the next start begins with an empty flash file", list.display());
            1
        }
    };
    cleanup();
    std::process::exit(status);
}

/// `stats snapshot`: where the snapshot lives and what the start-up restore did.
pub fn stats(path: Option<&Path>, r: &Restored, out: &mut Vec<u8>) {
    stat(out, "snapshot_file", path.map_or_else(|| "none".into(), |p| p.display().to_string()));
    let rep = r.report.clone().unwrap_or_default();
    stat(out, "snapshot_restored_items", rep.items);
    stat(out, "snapshot_restored_expired", rep.expired);
    stat(out, "snapshot_restored_dropped", rep.dropped);
    stat(out, "snapshot_restored_evicted", rep.evicted);
    stat(out, "snapshot_restored_bad_blocks", rep.bad_blocks);
    stat(out, "snapshot_restore", r.state());
    stat(out, "snapshot_restore_usec", r.usec);
    line(out, b"END");
}
