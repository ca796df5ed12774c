//! The files one mnemod owns: `-e`'s snapshot and each flash file (`-o ext_path`). Two
//! processes on one of them would lie: a second server writing the flash file's pages hands
//! both of them each other's values, and two snapshots written to one path leave one cache
//! (or a mix) under the other's name. So each file is locked before anything is bound or read,
//! and a start that finds one locked refuses, as memcached refuses a locked extstore file.
//!
//! ```text
//!   own(path, "-e" | "-o ext_path")
//!     open path itself (created empty when missing; a symlink leads to its target)
//!     (dev, inode) already owned by this process?  -> "the same file as <option> <path>"
//!     flock(LOCK_EX | LOCK_NB) on that descriptor  -> held?  "in use by another mnemod (pid N)"
//!     keep the descriptor open to exit: the kernel drops the lock however the process ends
//! ```
//!
//! The lock is on the file's inode, not on a name beside it: a symlink, a second path through
//! a bind mount, or a deleted side file cannot get round it. The owner's pid comes from
//! /proc/locks (the kernel's table of held locks), so the refusal can name it.
//!
//! `-e`'s snapshot is replaced by a rename at each graceful stop (restart.rs), so the lock
//! taken at the start holds the inode that start read; the process exits right after the
//! rename, and the next start locks the new file.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A file this process owns.
struct Owned {
    file: File,
    dev: u64,
    ino: u64,
    /// How it was named (`-e`, `-o ext_path`) and the path as given, for messages.
    option: String,
    path: PathBuf,
}

/// The owned files, open to exit (their locks live as long as their descriptors).
static OWNED: Mutex<Vec<Owned>> = Mutex::new(Vec::new());

fn owned() -> std::sync::MutexGuard<'static, Vec<Owned>> {
    OWNED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Makes this process the one owner of `path` (named by `option`, such as `-e` or
/// `-o ext_path`): see the module doc. Returns the path with its symlinks resolved, the one
/// to read, write and rename over. The error is the line to print.
pub fn own(path: &Path, option: &str) -> Result<PathBuf, String> {
    let say = |why: String| format!("{option} {}: {why}", path.display());
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| say(format!("cannot open: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| say(format!("cannot stat: {e}")))?;
    let (dev, ino) = (meta.dev(), meta.ino());
    if let Some(o) = owned().iter().find(|o| o.dev == dev && o.ino == ino) {
        return Err(say(format!(
            "the same file as {} {}; each needs a file of its own",
            o.option,
            o.path.display()
        )));
    }
    // SAFETY: flock on a descriptor we own, open for the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(say(format!("cannot lock: {e}")));
        }
        let who = match holder(dev, ino) {
            Some(pid) => format!("another mnemod (pid {pid})"),
            None => "another process".to_string(),
        };
        return Err(say(format!("in use by {who}; refusing to start")));
    }
    let real = std::fs::canonicalize(path).map_err(|e| say(format!("cannot resolve: {e}")))?;
    owned().push(Owned {
        file,
        dev,
        ino,
        option: option.to_string(),
        path: path.to_path_buf(),
    });
    Ok(real)
}

/// Empties the owned file at `path` (its resolved path, as [`own`] returned it) through the
/// locked descriptor and syncs it: `-e`'s snapshot once it has been restored, so that no later
/// crash can bring it back (restart.rs).
pub fn empty(real: &Path) -> std::io::Result<()> {
    let meta = std::fs::metadata(real)?;
    let list = owned();
    let o = list
        .iter()
        .find(|o| o.dev == meta.dev() && o.ino == meta.ino())
        .ok_or_else(|| std::io::Error::other("not owned by this process"))?;
    o.file.set_len(0)?;
    o.file.sync_all()
}

/// The pid holding a flock on (dev, ino), from /proc/locks: lines like
/// `1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF` (device major:minor in hex, inode in
/// decimal). None when the table cannot be read or names no holder.
fn holder(dev: u64, ino: u64) -> Option<u32> {
    let mut text = String::new();
    let mut f = File::open("/proc/locks").ok()?;
    f.seek(SeekFrom::Start(0)).ok()?;
    f.read_to_string(&mut text).ok()?;
    let want = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    text.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        // A blocked waiter's line starts "N: ->"; only holders are wanted.
        (w.len() >= 6 && w[1] == "FLOCK" && w[5] == want)
            .then(|| w[4].parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mnemo-owner-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_same_file_twice_is_named_whatever_the_path() {
        let dir = temp("twice");
        let file = dir.join("flash");
        let link = dir.join("link");
        let real = own(&file, "-o ext_path").unwrap();
        assert_eq!(real, std::fs::canonicalize(&file).unwrap());
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let e = own(&link, "-e").unwrap_err();
        assert_eq!(
            e,
            format!(
                "-e {}: the same file as -o ext_path {}; each needs a file of its own",
                link.display(),
                file.display()
            )
        );
    }

    #[test]
    fn another_process_holding_the_lock_is_named_by_its_pid() {
        let dir = temp("held");
        let file = dir.join("snap");
        std::fs::write(&file, b"").unwrap();
        // flock(1) from util-linux may be missing; a second descriptor in this process
        // conflicts the same way (flock locks belong to open file descriptions).
        let other = File::open(&file).unwrap();
        assert_eq!(
            unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
            0
        );
        let e = own(&file, "-e").unwrap_err();
        assert_eq!(
            e,
            format!(
                "-e {}: in use by another mnemod (pid {}); refusing to start",
                file.display(),
                std::process::id()
            )
        );
    }
}
