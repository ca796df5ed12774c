//! Warm restart against the real binary: `-e PATH` is written on SIGTERM, SIGUSR1 and
//! `shutdown graceful`, and read back at start; every item a client was told was stored comes
//! back, a damaged file never yields a wrong value, and one process owns the file.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Server;

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("mnemo-restart-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
    fn file(&self) -> PathBuf {
        self.0.join("cache.snap")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn value(i: usize) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    v.resize(10 + i % 2000, b'a' + (i % 26) as u8);
    v
}

/// Pipelined sets of `range`, every reply read; returns key -> (flags, value).
fn set_all(
    s: &mut TcpStream,
    range: std::ops::Range<usize>,
    exptime: u32,
) -> HashMap<String, (u32, Vec<u8>)> {
    let mut req = Vec::new();
    let mut want = HashMap::new();
    for i in range.clone() {
        let (k, v) = (format!("key:{i}"), value(i));
        req.extend_from_slice(format!("set {k} {} {exptime} {}\r\n", i % 7, v.len()).as_bytes());
        req.extend_from_slice(&v);
        req.extend_from_slice(b"\r\n");
        want.insert(k, ((i % 7) as u32, v));
    }
    s.write_all(&req).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    for _ in range {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        assert_eq!(l, "STORED\r\n");
    }
    want
}

/// key -> (flags, value) for every key found.
fn get_all(s: &mut TcpStream, keys: &[&String]) -> HashMap<String, (u32, Vec<u8>)> {
    let mut found = HashMap::new();
    for chunk in keys.chunks(100) {
        let mut req = b"get".to_vec();
        for k in chunk {
            req.push(b' ');
            req.extend_from_slice(k.as_bytes());
        }
        req.extend_from_slice(b"\r\n");
        s.write_all(&req).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        loop {
            let mut l = String::new();
            r.read_line(&mut l).unwrap();
            if l == "END\r\n" {
                break;
            }
            let p: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(p[0], "VALUE", "{l}");
            let mut v = vec![0; p[3].parse::<usize>().unwrap() + 2];
            r.read_exact(&mut v).unwrap();
            v.truncate(v.len() - 2);
            found.insert(p[1].to_string(), (p[2].parse().unwrap(), v));
        }
    }
    found
}

fn stats(s: &mut TcpStream, group: &str) -> HashMap<String, String> {
    s.write_all(format!("stats {group}\r\n").as_bytes())
        .unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut out = HashMap::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        if l == "END\r\n" {
            return out;
        }
        let p: Vec<&str> = l.trim_end().splitn(3, ' ').collect();
        assert_eq!(p[0], "STAT", "{l}");
        out.insert(p[1].to_string(), p[2].to_string());
    }
}

/// Waits for the server to exit by itself; its exit status.
fn wait_exit(srv: &mut Server) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(st) = srv.child.try_wait().unwrap() {
            return st;
        }
        assert!(Instant::now() < deadline, "mnemod did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(srv: &Server, sig: libc::c_int) {
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(srv.child.id() as libc::pid_t, sig) }, 0);
}

fn start(path: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["-e", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    Server::start(&args)
}

#[test]
fn every_stop_writes_the_snapshot_and_a_restart_reads_every_item_back() {
    for how in ["SIGTERM", "SIGUSR1", "SIGINT", "shutdown graceful"] {
        let dir = TempDir::new(&how.replace(' ', "-"));
        let mut srv = start(&dir.file(), &["-A"]);
        let mut c = srv.connect();
        assert_eq!(stats(&mut c, "snapshot")["snapshot_restore"], "none");
        assert_eq!(
            stats(&mut c, "settings")["memory_file"],
            dir.file().display().to_string()
        );
        let mut want = set_all(&mut c, 0..3000, 0);
        want.extend(set_all(&mut c, 3000..3500, 3600));
        // Overwritten and deleted keys come back as they were last left.
        want.extend(set_all(&mut c, 0..100, 0));
        c.write_all(b"delete key:5\r\n").unwrap();
        let mut l = [0u8; 9];
        c.read_exact(&mut l).unwrap();
        assert_eq!(&l, b"DELETED\r\n");
        want.remove("key:5");
        match how {
            "SIGTERM" => signal(&srv, libc::SIGTERM),
            "SIGUSR1" => signal(&srv, libc::SIGUSR1),
            "SIGINT" => signal(&srv, libc::SIGINT),
            _ => c.write_all(b"shutdown graceful\r\n").unwrap(),
        }
        assert!(wait_exit(&mut srv).success(), "{how}");
        assert!(dir.file().exists() && !dir.0.join("cache.snap.tmp").exists());

        let srv = start(&dir.file(), &[]);
        let mut c = srv.connect();
        let keys: Vec<&String> = want.keys().collect();
        let mut all: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        all.push("key:5".into());
        let all: Vec<&String> = all.iter().collect();
        assert_eq!(get_all(&mut c, &all), want, "{how}");
        let st = stats(&mut c, "snapshot");
        assert_eq!(st["snapshot_restore"], "complete", "{st:?}");
        assert_eq!(st["snapshot_restored_items"], want.len().to_string());
    }
}

#[test]
fn no_acknowledged_write_is_lost_when_stopping_under_load() {
    let dir = TempDir::new("load");
    let mut srv = start(&dir.file(), &["-t", "4"]);
    let port = srv.port;
    // Writers set keys one at a time and keep the ones acknowledged, until the server goes.
    let writers: Vec<_> = (0..4)
        .map(|w| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut acked = Vec::new();
                for i in 0.. {
                    let k = format!("w{w}:{i}");
                    if s.write_all(format!("set {k} 0 0 5\r\nhello\r\n").as_bytes())
                        .is_err()
                    {
                        break;
                    }
                    let mut l = String::new();
                    match r.read_line(&mut l) {
                        Ok(_) if l == "STORED\r\n" => acked.push(k),
                        _ => break,
                    }
                }
                acked
            })
        })
        .collect();
    // Let them write a while (a few thousand sets), then stop the server under them.
    let mut c = srv.connect();
    loop {
        let n: u64 = stats(&mut c, "")["curr_items"].parse().unwrap();
        if n > 4000 {
            break;
        }
        std::thread::yield_now();
    }
    signal(&srv, libc::SIGTERM);
    assert!(wait_exit(&mut srv).success());
    let acked: Vec<String> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(acked.len() > 4000);

    let srv = start(&dir.file(), &[]);
    let mut c = srv.connect();
    let keys: Vec<&String> = acked.iter().collect();
    let found = get_all(&mut c, &keys);
    let lost: Vec<&&String> = keys.iter().filter(|k| !found.contains_key(**k)).collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged sets lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
}

#[test]
fn a_damaged_snapshot_never_gives_a_wrong_value() {
    let dir = TempDir::new("damage");
    let mut srv = start(&dir.file(), &[]);
    let mut c = srv.connect();
    let want = set_all(&mut c, 0..5000, 0);
    signal(&srv, libc::SIGTERM);
    assert!(wait_exit(&mut srv).success());
    let good = std::fs::read(dir.file()).unwrap();
    let keys: Vec<&String> = want.keys().collect();

    // A flipped byte in the middle: that block is dropped, the rest restored exactly.
    let mut bad = good.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x40;
    std::fs::write(dir.file(), &bad).unwrap();
    let srv = start(&dir.file(), &[]);
    let mut c = srv.connect();
    let found = get_all(&mut c, &keys);
    assert!(
        !found.is_empty() && found.len() < want.len(),
        "{} of {}",
        found.len(),
        want.len()
    );
    for (k, v) in &found {
        assert_eq!(&want[k], v, "{k}");
    }
    let st = stats(&mut c, "snapshot");
    assert_eq!(st["snapshot_restore"], "partial", "{st:?}");
    assert_eq!(st["snapshot_restored_bad_blocks"], "1", "{st:?}");
    drop(srv);

    // A flipped byte in the first block's length field: only that block is lost (the reader
    // finds the next one), where it used to cost every block after it.
    let mut bad = good.clone();
    bad[48 + 5] ^= 0x01;
    std::fs::write(dir.file(), &bad).unwrap();
    let srv = start(&dir.file(), &[]);
    let mut c = srv.connect();
    let found = get_all(&mut c, &keys);
    assert!(
        found.len() > want.len() * 3 / 4 && found.len() < want.len(),
        "{} of {}",
        found.len(),
        want.len()
    );
    for (k, v) in &found {
        assert_eq!(&want[k], v, "{k}");
    }
    assert_eq!(
        stats(&mut c, "snapshot")["snapshot_restored_bad_blocks"],
        "1"
    );
    drop(srv);

    // Cut short: what came before the cut is restored.
    std::fs::write(dir.file(), &good[..good.len() * 2 / 3]).unwrap();
    let srv = start(&dir.file(), &[]);
    let mut c = srv.connect();
    let found = get_all(&mut c, &keys);
    assert!(!found.is_empty() && found.len() < want.len());
    for (k, v) in &found {
        assert_eq!(&want[k], v, "{k}");
    }
    assert_eq!(stats(&mut c, "snapshot")["snapshot_restore"], "partial");
    drop(srv);

    // A damaged header: nothing restored, and the server serves.
    let mut bad = good.clone();
    bad[3] ^= 1;
    std::fs::write(dir.file(), &bad).unwrap();
    let srv = start(&dir.file(), &[]);
    let mut c = srv.connect();
    assert!(get_all(&mut c, &keys).is_empty());
    assert_eq!(stats(&mut c, "snapshot")["snapshot_restore"], "refused");
    set_all(&mut c, 0..10, 0);
}

/// Runs mnemod to its end (it is expected to refuse to start); its status and stderr.
fn run_refused(path: &Path) -> (std::process::ExitStatus, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mnemod"))
        .args([
            "-p",
            "0",
            "-l",
            "127.0.0.1",
            "-U",
            "0",
            "-e",
            path.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("a second mnemod on the same -e file kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (out.status, String::from_utf8(out.stderr).unwrap())
}

#[test]
fn a_second_instance_on_the_same_file_refuses_to_start() {
    let dir = TempDir::new("owned");
    let mut first = start(&dir.file(), &[]);
    let mut c = first.connect();
    let want = set_all(&mut c, 0..200, 0);

    let (status, err) = run_refused(&dir.file());
    assert_eq!(status.code(), Some(1), "{err}");
    let line = format!(
        "mnemod: -e {}: in use by another mnemod (pid {}); refusing to start\n",
        dir.file().display(),
        first.child.id()
    );
    assert_eq!(err, line);

    // The owner is untouched: it serves, and its stop writes its own cache.
    let keys: Vec<&String> = want.keys().collect();
    assert_eq!(get_all(&mut c, &keys), want);
    signal(&first, libc::SIGTERM);
    assert!(wait_exit(&mut first).success());
    let srv = start(&dir.file(), &[]);
    assert_eq!(get_all(&mut srv.connect(), &keys), want);

    // However the owner ends (kill -9 here), the kernel releases the lock. The snapshot
    // was spent by the start that read it, so the crashed server's successor starts empty:
    // the values it served may have changed since (the rule: forget, never lie).
    let mut srv = srv;
    srv.child.kill().unwrap();
    srv.child.wait().unwrap();
    let srv = start(&dir.file(), &[]);
    assert!(get_all(&mut srv.connect(), &keys).is_empty());
}

#[test]
fn a_stale_tmp_file_is_removed_at_start() {
    let dir = TempDir::new("stale");
    let tmp = dir.0.join("cache.snap.tmp");
    // What a kill mid-write (or a full disk) leaves: part of a snapshot nobody will rename.
    std::fs::write(&tmp, vec![0x5a; 1 << 20]).unwrap();
    let mut srv = start(&dir.file(), &[]);
    assert!(!tmp.exists(), "the stale {} is still there", tmp.display());
    let mut c = srv.connect();
    let want = set_all(&mut c, 0..50, 0);
    signal(&srv, libc::SIGTERM);
    assert!(wait_exit(&mut srv).success());
    assert!(!tmp.exists());
    let srv = start(&dir.file(), &[]);
    let keys: Vec<&String> = want.keys().collect();
    assert_eq!(get_all(&mut srv.connect(), &keys), want);
}

/// A one-line command's reply line.
fn ask(c: &mut TcpStream, cmd: &str) -> String {
    c.write_all(cmd.as_bytes()).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    l
}

/// Issue 47's first finding: the snapshot stayed in place after its restore, so any exit that
/// wrote no new one (kill -9 here) brought the previous cache back: overwritten values,
/// deleted keys and a flush undone.
#[test]
fn a_restored_snapshot_is_spent_so_a_crash_never_brings_it_back() {
    let dir = TempDir::new("spent");
    let mut srv = start(&dir.file(), &[]);
    let mut c = srv.connect();
    let old = set_all(&mut c, 0..300, 0);
    signal(&srv, libc::SIGTERM);
    assert!(wait_exit(&mut srv).success());

    let mut srv = start(&dir.file(), &[]);
    let mut c = srv.connect();
    let keys: Vec<&String> = old.keys().collect();
    assert_eq!(get_all(&mut c, &keys), old);
    assert_eq!(
        std::fs::metadata(dir.file()).unwrap().len(),
        0,
        "the restored snapshot is emptied before serving"
    );
    // New values for half the keys, the other half deleted; then a crash.
    let new = set_all(&mut c, 0..150, 0);
    for i in 150..300 {
        assert_eq!(ask(&mut c, &format!("delete key:{i}\r\n")), "DELETED\r\n");
    }
    srv.child.kill().unwrap();
    srv.child.wait().unwrap();

    let mut srv = start(&dir.file(), &[]);
    let mut c = srv.connect();
    let got = get_all(&mut c, &keys);
    for (k, v) in &got {
        assert_eq!(
            new.get(k),
            Some(v),
            "{k} came back with a value older than its last write, or deleted"
        );
    }
    assert_eq!(stats(&mut c, "snapshot")["snapshot_restore"], "none");

    // A flush, a graceful stop, a start, a crash: the flushed keys stay gone.
    set_all(&mut c, 0..100, 0);
    signal(&srv, libc::SIGTERM);
    assert!(wait_exit(&mut srv).success());
    let mut srv = start(&dir.file(), &[]);
    let mut c = srv.connect();
    assert_eq!(ask(&mut c, "flush_all\r\n"), "OK\r\n");
    srv.child.kill().unwrap();
    srv.child.wait().unwrap();
    let srv = start(&dir.file(), &[]);
    assert!(
        get_all(&mut srv.connect(), &keys).is_empty(),
        "a flush was undone by a crash"
    );
}

/// The lock is on the file itself: a second server reaching it through a symlink, or after a
/// side file was deleted, refuses as one naming it directly does.
#[test]
fn a_second_instance_through_a_symlink_refuses_too() {
    let dir = TempDir::new("symlink");
    let first = start(&dir.file(), &[]);
    let mut c = first.connect();
    let want = set_all(&mut c, 0..50, 0);
    let link = dir.0.join("link.snap");
    std::os::unix::fs::symlink(dir.file(), &link).unwrap();
    let _ = std::fs::remove_file(dir.0.join("cache.snap.lock"));
    let (status, err) = run_refused(&link);
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(
        err,
        format!(
            "mnemod: -e {}: in use by another mnemod (pid {}); refusing to start\n",
            link.display(),
            first.child.id()
        )
    );
    let keys: Vec<&String> = want.keys().collect();
    assert_eq!(get_all(&mut c, &keys), want);
}
