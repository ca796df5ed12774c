//! Warm restart: with `-e PATH` (memcached's `--memory-file`), the store is written to PATH when
//! mnemod stops on `shutdown` (with `-A`), SIGUSR1 or SIGTERM, and read back when it starts, so
//! a restart (an upgrade, a reboot) keeps the cache warm. The file format and its checksums
//! are mnemo-store's (snapshot.rs).
//!
//! ```text
//!   start   PATH.lock: flock, exclusive, held to exit -> taken by another mnemod? refuse to start
//!           PATH.tmp there? a write that never finished (a kill, a full disk): removed
//!           PATH there? -> Store::restore_snapshot (before any listener serves)
//!                          -> one log line; `stats snapshot` keeps the report
//!   stop    a worker (`shutdown`) or the maintenance thread (SIGUSR1/SIGTERM, seen within a
//!           second) -> Store::freeze: every shard locked, so no write is acknowledged after
//!           this point -> PATH.tmp written, synced, renamed over PATH -> exit
//!
//!   without -e, with a flash tier (-o ext_path=FILE): the same stop writes FILE.entries (the
//!   flashed items' locations, mnemo-store flash/keep.rs) instead; the next start reads and
//!   removes it before serving ([`keep_flash_start`])
//! ```
//!
//! One process owns PATH: two writing the same PATH.tmp would leave one's cache, or a mix of
//! both, under the other's name. The lock is on PATH.lock, not PATH, because every snapshot
//! replaces PATH's inode; the kernel drops it when the process ends, however it ends. The
//! flash file (`-o ext_path`) is owned the same way ([`own`]), through its own PATH.lock.
//!
//! A missing file is a cold start. A damaged one never yields a wrong value: its bad blocks
//! (or everything, for a bad header) are dropped, and the log line says so.

use core::sync::atomic::{AtomicBool, Ordering};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
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

/// PATH with a suffix: PATH.lock, PATH.tmp.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// The open lock files (`-e`'s PATH.lock, the flash file's), so their locks live as long as
/// the process.
static LOCKS: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// Makes this process the one owner of `path` (a file named by `option`, such as `-e` or
/// `-o ext_path`) through an exclusive flock on PATH.lock, held to exit. The error is the
/// line to print when another process owns it, or the lock file cannot be had.
pub fn own(path: &Path, option: &str) -> Result<(), String> {
    let lock_path = beside(path, ".lock");
    let say = |why: String| format!("{option} {}: {why}", path.display());
    let mut file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(|e| say(format!("cannot open {}: {e}", lock_path.display())))?;
    // SAFETY: flock on a descriptor we own, open for the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(say(format!("cannot lock {}: {e}", lock_path.display())));
        }
        let mut pid = String::new();
        let _ = file.read_to_string(&mut pid);
        let pid = pid.trim();
        let who = if pid.is_empty() { "another process".to_string() } else { format!("another mnemod (pid {pid})") };
        return Err(say(format!("in use by {who}; refusing to start")));
    }
    // Who holds it, for the refusal above; the lock, not this text, is what excludes.
    let _ = file.set_len(0).and_then(|()| file.rewind()).and_then(|()| writeln!(file, "{}", std::process::id()));
    LOCKS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(file);
    Ok(())
}

/// Makes this process the one owner of `-e`'s `path` (before anything is bound or read), then
/// removes a PATH.tmp that a write which never finished left behind. The error is the line
/// to print when another process owns it, or the lock file cannot be had.
pub fn claim(path: &Path) -> Result<(), String> {
    own(path, "-e")?;
    let tmp = beside(path, ".tmp");
    match std::fs::remove_file(&tmp) {
        Ok(()) => eprintln!("mnemod: -e {}: removed {}, left by a snapshot write that did not finish", path.display(), tmp.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => eprintln!("mnemod: -e {}: cannot remove the stale {}: {e}", path.display(), tmp.display()),
    }
    Ok(())
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// SIGUSR1 and SIGTERM become a request the maintenance thread acts on (the handler itself
/// only stores a flag). Only with `-e` or a flash tier: without a snapshot or a flash list
/// to write, they keep their default action (exit), as in memcached.
pub fn install_stop_signals() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGUSR1, on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t);
    }
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Reads `path` into the (empty) store at start-up.
pub fn restore(store: &Store, path: &Path, now: Time, origin: u64) -> Restored {
    let t = Instant::now();
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("mnemod: -e {}: no snapshot yet; starting empty", path.display());
            return Restored::default();
        }
        Err(e) => return refused(path, e.to_string()),
    };
    let len = match file.metadata() {
        Ok(m) => m.len(),
        Err(e) => return refused(path, e.to_string()),
    };
    let input = std::io::BufReader::with_capacity(1 << 20, file);
    match store.restore_snapshot(input, len, now, origin) {
        Ok(r) => {
            let usec = t.elapsed().as_micros() as u64;
            let how = match &r.stopped {
                None if r.bad_blocks == 0 => "complete".to_string(),
                None => format!("{} damaged block(s) dropped", r.bad_blocks),
                Some(why) => format!("incomplete: {why}; {} damaged block(s) dropped", r.bad_blocks),
            };
            eprintln!(
                "mnemod: -e {}: restored {} items in {:.2} s ({} expired while down, {} no longer fit; {how})",
                path.display(),
                r.items,
                usec as f64 / 1e6,
                r.expired,
                r.dropped
            );
            Restored { report: Some(r), usec, refused: None }
        }
        Err(e) => refused(path, e.to_string()),
    }
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
            eprintln!("mnemod: -e {}: writing the snapshot failed: {e}; the previous one (if any) is kept", path.display());
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
pub fn keep_flash_start(store: &Store, memory_file: Option<&Path>, now: Time, origin: u64) {
    let Some(list) = store.flash_list_path() else { return };
    if memory_file.is_some_and(Path::exists) {
        match store.discard_flash_list() {
            Ok(true) => eprintln!("mnemod: {}: not read: -e's snapshot brings the flashed items back", list.display()),
            Ok(false) => {}
            Err(e) => eprintln!("mnemod: {}: cannot remove: {e}", list.display()),
        }
        return;
    }
    let t = Instant::now();
    let Some(r) = store.restore_flash_list(now, origin) else { return };
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
pub fn keep_flash_and_exit(store: &Store, origin: u64, cleanup: impl FnOnce()) -> ! {
    let t = Instant::now();
    let mut frozen = store.freeze();
    let list = store.flash_list_path().unwrap_or_default();
    let status = match frozen.write_flash_list(origin) {
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
    stat(out, "snapshot_restored_bad_blocks", rep.bad_blocks);
    stat(out, "snapshot_restore", r.state());
    stat(out, "snapshot_restore_usec", r.usec);
    line(out, b"END");
}
