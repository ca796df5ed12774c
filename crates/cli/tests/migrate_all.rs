//! `mnemo migrate` leaves nothing behind without saying so (issue 47): items whose values are
//! on a flash tier are listed and copied, binary keys of every allowed length travel (the
//! binary protocol carries those whose base64 form is too long for a meta key), and a
//! destination too small for what is copied into it fails the run, which says how many
//! items it did not keep.
//!
//! `MNEMO_BIN` runs these against another build of the tool (an older one, to see them fail).

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::Server;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn mnemo(args: &[&str]) -> Output {
    let bin = std::env::var("MNEMO_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mnemo").into());
    Command::new(bin).args(args).output().expect("run mnemo")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The number on the summary line that starts with `what`.
fn summary(text: &str, what: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(what))
        .unwrap_or_else(|| panic!("no {what} in {text}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// key, flags, value
type Item = (Vec<u8>, u32, Vec<u8>);

/// A binary-protocol connection: it names any key.
struct Bin(BufReader<TcpStream>);

const SETQ: u8 = 0x11;
const GET: u8 = 0x00;
const NOOP: u8 = 0x0a;

impl Bin {
    fn new(addr: &str) -> Bin {
        let s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Bin(BufReader::new(s))
    }

    fn request(out: &mut Vec<u8>, op: u8, key: &[u8], extras: &[u8], value: &[u8]) {
        let mut h = [0u8; 24];
        h[0] = 0x80;
        h[1] = op;
        h[2..4].copy_from_slice(&(key.len() as u16).to_be_bytes());
        h[4] = extras.len() as u8;
        let body = (extras.len() + key.len() + value.len()) as u32;
        h[8..12].copy_from_slice(&body.to_be_bytes());
        out.extend_from_slice(&h);
        out.extend_from_slice(extras);
        out.extend_from_slice(key);
        out.extend_from_slice(value);
    }

    /// (opcode, status, extras, value) of the next answer.
    fn answer(&mut self) -> (u8, u16, Vec<u8>, Vec<u8>) {
        let mut h = [0u8; 24];
        self.0.read_exact(&mut h).unwrap();
        let klen = u16::from_be_bytes([h[2], h[3]]) as usize;
        let elen = h[4] as usize;
        let body = u32::from_be_bytes(h[8..12].try_into().unwrap()) as usize;
        let mut b = vec![0; body];
        self.0.read_exact(&mut b).unwrap();
        let status = u16::from_be_bytes([h[6], h[7]]);
        (h[1], status, b[..elen].to_vec(), b[elen + klen..].to_vec())
    }

    /// Quiet sets, pipelined; only the no-op after them may answer.
    fn set_all(&mut self, items: &[Item], ttl: u32) {
        let mut req = Vec::new();
        for (k, f, v) in items {
            let mut extras = f.to_be_bytes().to_vec();
            extras.extend_from_slice(&ttl.to_be_bytes());
            Bin::request(&mut req, SETQ, k, &extras, v);
        }
        Bin::request(&mut req, NOOP, b"", b"", b"");
        self.0.get_mut().write_all(&req).unwrap();
        let (op, status, _, v) = self.answer();
        assert_eq!((op, status), (NOOP, 0), "{}", String::from_utf8_lossy(&v));
    }

    fn get(&mut self, key: &[u8]) -> Option<(u32, Vec<u8>)> {
        let mut req = Vec::new();
        Bin::request(&mut req, GET, key, b"", b"");
        self.0.get_mut().write_all(&req).unwrap();
        let (_, status, extras, v) = self.answer();
        match status {
            0 => Some((u32::from_be_bytes(extras[..4].try_into().unwrap()), v)),
            1 => None,
            s => panic!("status {s}: {}", String::from_utf8_lossy(&v)),
        }
    }
}

/// `stats` of a server.
fn stats(addr: &str) -> HashMap<String, String> {
    let mut c = BufReader::new(TcpStream::connect(addr).unwrap());
    c.get_mut().write_all(b"stats\r\n").unwrap();
    let mut out = HashMap::new();
    loop {
        let mut l = String::new();
        c.read_line(&mut l).unwrap();
        let l = l.trim_end();
        if l == "END" {
            return out;
        }
        let mut w = l.split(' ').skip(1);
        out.insert(
            w.next().unwrap().to_owned(),
            w.next().unwrap_or("").to_owned(),
        );
    }
}

/// Waits until the flash writer has written everything queued (docs/testing.md: a fill that
/// should reach flash waits for the writer, or demotion turns into eviction).
fn wait_flash_writes(addr: &str) {
    let until = Instant::now() + Duration::from_secs(60);
    while stats(addr)["extstore_io_queue"] != "0" {
        assert!(Instant::now() < until, "the flash writer never caught up");
    }
}

fn item(i: u32, len: usize) -> Item {
    let v: Vec<u8> = format!("{i:09}|")
        .into_bytes()
        .into_iter()
        .cycle()
        .take(len)
        .collect();
    (
        format!("fk:{i}").into_bytes(),
        i.wrapping_mul(2_654_435_761),
        v,
    )
}

/// Every item, with its flags and value, at `addr`; the keys missing or wrong, if any.
fn missing_or_wrong(addr: &str, items: &[Item]) -> Vec<String> {
    let mut c = Bin::new(addr);
    items
        .iter()
        .filter(|(k, f, v)| c.get(k).as_ref() != Some(&(*f, v.clone())))
        .map(|(k, ..)| String::from_utf8_lossy(k).into_owned())
        .collect()
}

/// 30,000 items of 1 KB into `-m 8` with a flash tier: most of them are on flash, and the
/// copy (into memcached and into mnemod) has every one, flags and value.
#[test]
fn flashed_items_are_copied() {
    let path = std::env::temp_dir().join(format!("mnemo-migrate-flash-{}", std::process::id()));
    let opts = format!(
        "ext_page_size=2,ext_wbuf_size=2,ext_path={}:128m",
        path.display()
    );
    let from = Server::mnemod(&["-m", "8", "-o", &opts]);
    let n = 30_000u32;
    let items: Vec<Item> = (0..n).map(|i| item(i, 1000)).collect();
    let mut src = Bin::new(&from.addr());
    for chunk in items.chunks(200) {
        src.set_all(chunk, 0);
        wait_flash_writes(&from.addr());
    }
    let st = stats(&from.addr());
    let on_flash: u64 = st["extstore_objects_used"].parse().unwrap();
    assert!(on_flash > u64::from(n) / 2, "{on_flash} of {n} on flash");
    assert_eq!(
        missing_or_wrong(&from.addr(), &items),
        Vec::<String>::new(),
        "at the source"
    );
    for to in [Server::memcached(&[]), Server::mnemod(&["-m", "128"])] {
        let out = mnemo(&[
            "migrate",
            "--quiet",
            "--from",
            &from.addr(),
            "--to",
            &to.addr(),
        ]);
        let (stdout, stderr) = text(&out);
        let lost = missing_or_wrong(&to.addr(), &items);
        assert!(
            lost.is_empty(),
            "{} of {n} not copied to {} ({on_flash} on flash at the source): {stdout}{stderr}",
            lost.len(),
            to.name
        );
        assert!(out.status.success(), "{stdout}{stderr}");
        assert_eq!(summary(&stdout, "listed"), u64::from(n), "{stdout}");
        assert_eq!(summary(&stdout, "present"), u64::from(n), "{stdout}");
    }
    let _ = std::fs::remove_file(&path);
}

/// Binary keys of every length up to 250 bytes: those up to 186 travel as base64 meta keys,
/// longer ones (base64 past 250 bytes) by the binary protocol, between mnemod and memcached
/// both ways.
#[test]
fn binary_keys_of_every_length_are_copied() {
    let keys: Vec<Vec<u8>> = [1usize, 100, 186, 187, 188, 200, 249, 250]
        .iter()
        .map(|&n| (0..n).map(|i| (i * 37 + n) as u8).collect())
        .collect();
    let items: Vec<Item> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.clone(), i as u32 + 1, format!("value {i}").into_bytes()))
        .chain([(b"plain".to_vec(), 9, b"p".to_vec())])
        .collect();
    for (from, to) in [
        (Server::mnemod(&[]), Server::memcached(&[])),
        (Server::memcached(&[]), Server::mnemod(&[])),
        (Server::mnemod(&[]), Server::mnemod(&[])),
    ] {
        Bin::new(&from.addr()).set_all(&items, 0);
        let out = mnemo(&["migrate", "--from", &from.addr(), "--to", &to.addr()]);
        let (stdout, stderr) = text(&out);
        assert!(
            out.status.success(),
            "{} -> {}: {stdout}{stderr}",
            from.name,
            to.name
        );
        assert_eq!(
            missing_or_wrong(&to.addr(), &items),
            Vec::<String>::new(),
            "{} -> {}: {stdout}",
            from.name,
            to.name
        );
        assert_eq!(summary(&stdout, "present"), items.len() as u64, "{stdout}");
    }
}

/// A destination that takes only the text protocols cannot be given a key the meta
/// protocol cannot name: the run copies the rest and fails, saying so.
#[test]
fn a_key_no_protocol_can_carry_is_reported() {
    let from = Server::mnemod(&[]);
    let to = Server::memcached(&["-B", "ascii"]);
    let long = vec![b' '; 250];
    let items: Vec<Item> = vec![
        (long, 1, b"L".to_vec()),
        (b"short key".to_vec(), 2, b"S".to_vec()),
    ];
    Bin::new(&from.addr()).set_all(&items, 0);
    let out = mnemo(&["migrate", "--from", &from.addr(), "--to", &to.addr()]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert_eq!(
        (summary(&stdout, "failed"), summary(&stdout, "present")),
        (1, 1),
        "{stdout}"
    );
    assert!(
        stderr.contains("a key of 250 bytes, too long for the meta protocol"),
        "{stderr}"
    );
    assert!(stderr.contains("1 listed and not sent"), "{stderr}");
}

/// 30,000 items of 1 KB into a mnemod of 8 MB: it acknowledges every set and keeps a fraction;
/// the run fails and says how many were not kept.
#[test]
fn a_destination_too_small_fails_the_run() {
    let from = Server::mnemod(&["-m", "64"]);
    let to = Server::mnemod(&["-m", "8"]);
    let n = 30_000u32;
    let items: Vec<Item> = (0..n).map(|i| item(i, 1000)).collect();
    let mut src = Bin::new(&from.addr());
    for chunk in items.chunks(1000) {
        src.set_all(chunk, 0);
    }
    let out = mnemo(&[
        "migrate",
        "--quiet",
        "--from",
        &from.addr(),
        "--to",
        &to.addr(),
    ]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let kept = n as usize - missing_or_wrong(&to.addr(), &items).len();
    assert!(kept < n as usize / 2, "{kept} kept: {stdout}");
    let (present, missing) = (summary(&stdout, "present"), summary(&stdout, "missing"));
    // Nothing was evicted since the check: what it found is what is there.
    assert_eq!(
        (present, present + missing),
        (kept as u64, u64::from(n)),
        "{stdout}"
    );
    let line = format!(
        "the destination kept {present} of {n} items sent; {missing} not kept (0 refused, {missing} evicted or deleted at the destination)"
    );
    assert!(stderr.contains(&line), "{stderr}");
}
