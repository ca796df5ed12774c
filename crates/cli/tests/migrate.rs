//! `mnemo migrate` against real servers: memcached -> mnemod and mnemod -> memcached keep every
//! key, flag, value and TTL, and never overwrite a key the destination holds; fleet mode moves
//! exactly the keys whose ketama owner changes (memcached and mnemod in one fleet). A scripted
//! source covers what a real one cannot be made to do on cue (a busy crawler, a key gone
//! between the dump and the fetch).

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::Server;
use mnemo_client::ketama::Ketama;
use mnemo_client::ServerSpec;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};

fn mnemo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(args)
        .output()
        .expect("run mnemo")
}

fn ok(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "mnemo failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The number on the summary line that starts with `what`.
fn summary(text: &str, what: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(what))
        .unwrap_or_else(|| panic!("no {what} in {text}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// key, flags, exptime, value
type Item = (Vec<u8>, u32, i64, Vec<u8>);

struct Conn(BufReader<TcpStream>);

impl Conn {
    fn new(addr: &str) -> Conn {
        let s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        Conn(BufReader::new(s))
    }

    fn send(&mut self, b: &[u8]) {
        self.0.get_mut().write_all(b).unwrap();
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.0.read_line(&mut l).unwrap();
        l.trim_end().to_owned()
    }

    /// Store many items in one pipelined write, checking each answer.
    fn set_all(&mut self, items: &[Item]) {
        let mut req = Vec::new();
        for (k, f, t, v) in items {
            req.extend_from_slice(
                format!("ms {} {}{} F{f} T{t}\r\n", key_token(k), v.len(), b_flag(k)).as_bytes(),
            );
            req.extend_from_slice(v);
            req.extend_from_slice(b"\r\n");
        }
        self.send(&req);
        for _ in items {
            assert_eq!(self.line(), "HD");
        }
    }

    /// (flags, remaining ttl, value) of a key, or None.
    fn get(&mut self, key: &[u8]) -> Option<(u32, i64, Vec<u8>)> {
        self.send(format!("mg {}{} v f t\r\n", key_token(key), b_flag(key)).as_bytes());
        let l = self.line();
        if l == "EN" {
            return None;
        }
        let mut t = l.split(' ');
        assert_eq!(t.next(), Some("VA"), "{l}");
        let len: usize = t.next().unwrap().parse().unwrap();
        let (mut flags, mut ttl) = (0, 0);
        for tok in t {
            match tok.split_at(1) {
                ("f", v) => flags = v.parse().unwrap(),
                ("t", v) => ttl = v.parse().unwrap(),
                _ => {}
            }
        }
        let mut v = vec![0; len + 2];
        self.0.read_exact(&mut v).unwrap();
        v.truncate(len);
        Some((flags, ttl, v))
    }

    fn curr_items(&mut self) -> u64 {
        self.send(b"stats\r\n");
        let mut n = None;
        loop {
            let l = self.line();
            if l == "END" {
                return n.unwrap();
            }
            if let Some(v) = l.strip_prefix("STAT curr_items ") {
                n = Some(v.parse().unwrap());
            }
        }
    }
}

/// Keys the meta protocol cannot take as they are travel base64-encoded (flag `b`).
fn plain(k: &[u8]) -> bool {
    k.iter().all(|&b| b > b' ' && b < 0x7f)
}

fn key_token(k: &[u8]) -> String {
    use base64::Engine as _;
    if plain(k) {
        String::from_utf8(k.to_vec()).unwrap()
    } else {
        base64::engine::general_purpose::STANDARD.encode(k)
    }
}

fn b_flag(k: &[u8]) -> &'static str {
    if plain(k) {
        ""
    } else {
        " b"
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Items of every kind a cache holds: no TTL, short and long relative TTLs, a TTL past 30 days
/// (a Unix time on the wire), empty and 200 KB values, odd flags, keys the text protocol
/// cannot name (a space, control bytes, 250 bytes).
fn items() -> Vec<Item> {
    let mut v = Vec::new();
    for i in 0..3000u32 {
        let ttl = match i % 4 {
            0 => 0,
            1 => 100 + i64::from(i % 50),
            2 => 86_400,
            _ => now() + 40 * 86_400,
        };
        v.push((
            format!("key:{i}").into_bytes(),
            i.wrapping_mul(2_654_435_761),
            ttl,
            format!("value {i}")
                .repeat(1 + i as usize % 30)
                .into_bytes(),
        ));
    }
    v.push((b"a key with spaces".to_vec(), 1, 0, b"spaced".to_vec()));
    v.push((
        b"ctl\x01\x7f\xff".to_vec(),
        2,
        500,
        b"\x00\r\n\x00".to_vec(),
    ));
    v.push((vec![b'L'; 250], 3, 0, vec![b'x'; 200 * 1024]));
    v.push((b"empty".to_vec(), u32::MAX, 0, Vec::new()));
    v
}

/// The source's TTL as the destination should show it: none stays none, the rest within 2 s
/// (each server's clock ticks once a second, at its own moment).
fn ttl_close(src: i64, dst: i64) -> bool {
    if src == -1 {
        return dst == -1;
    }
    dst > 0 && (src - dst).abs() <= 2
}

fn copies_everything(from: &Server, to: &Server) {
    let items = items();
    let mut src = Conn::new(&from.addr());
    src.set_all(&items);
    // The destination already holds a newer value for one key: the copy must not replace it.
    let mut dst = Conn::new(&to.addr());
    dst.set_all(&[(b"key:5".to_vec(), 99, 0, b"newer".to_vec())]);
    let out = ok(&mnemo(&[
        "migrate",
        "--from",
        &from.addr(),
        "--to",
        &to.addr(),
        "--connections",
        "3",
        "--batch",
        "64",
    ]));
    let n = items.len() as u64;
    // The hash walk lists every key once: nothing for a second listing to find.
    assert_eq!(summary(&out, "listed"), n, "{out}");
    assert_eq!(summary(&out, "relisted"), 0, "{out}");
    assert_eq!(summary(&out, "stored"), n - 1, "{out}");
    assert_eq!(summary(&out, "kept"), 1, "{out}");
    assert_eq!(summary(&out, "failed"), 0, "{out}");
    // Listed with their CAS and expiry, unchanged since: fetched by multi-key gets, with no
    // item fetched twice.
    assert_eq!(summary(&out, "refetched"), 0, "{out}");
    for (k, f, _, v) in &items {
        let (sf, st, sv) = src.get(k).unwrap();
        let got = dst.get(k).unwrap_or_else(|| {
            panic!(
                "{} -> {}: {:?} missing",
                from.name,
                to.name,
                String::from_utf8_lossy(k)
            )
        });
        if k == b"key:5" {
            assert_eq!((got.0, &got.2[..]), (99, &b"newer"[..]));
            continue;
        }
        assert_eq!((sf, &sv), (*f, v));
        assert_eq!(
            (got.0, &got.2),
            (sf, &sv),
            "{} -> {}: {:?}",
            from.name,
            to.name,
            String::from_utf8_lossy(k)
        );
        assert!(
            ttl_close(st, got.1),
            "{} -> {}: {:?} ttl {st} became {}",
            from.name,
            to.name,
            String::from_utf8_lossy(k),
            got.1
        );
    }
    assert_eq!(dst.curr_items(), n);
    // Again: everything is there, nothing is overwritten.
    let again = ok(&mnemo(&[
        "migrate",
        "--from",
        &from.addr(),
        "--to",
        &to.addr(),
    ]));
    assert_eq!(
        (summary(&again, "stored"), summary(&again, "kept")),
        (0, n),
        "{again}"
    );
}

#[test]
fn memcached_into_mnemod() {
    copies_everything(&Server::memcached(&[]), &Server::mnemod(&[]));
}

#[test]
fn mnemod_into_memcached() {
    copies_everything(&Server::mnemod(&[]), &Server::memcached(&[]));
}

/// Batches of long keys go as several gets lines (each at most 64 KiB), from either server:
/// one line for these 9,000 keys would be 2.3 MB, more than mnemod takes in a get line.
#[test]
fn long_keys_in_large_batches() {
    for (from, to) in [
        (Server::memcached(&[]), Server::mnemod(&[])),
        (Server::mnemod(&[]), Server::memcached(&[])),
    ] {
        let items: Vec<Item> = (0..9000u32)
            .map(|i| {
                let ttl = if i % 2 == 0 { 0 } else { 500 };
                (
                    format!("{i:0>250}").into_bytes(),
                    i,
                    ttl,
                    format!("v{i}").into_bytes(),
                )
            })
            .collect();
        let mut src = Conn::new(&from.addr());
        src.set_all(&items);
        let out = ok(&mnemo(&[
            "migrate",
            "--from",
            &from.addr(),
            "--to",
            &to.addr(),
            "--batch",
            "9000",
            "--connections",
            "1",
        ]));
        assert_eq!(
            (summary(&out, "stored"), summary(&out, "refetched")),
            (9000, 0),
            "{} -> {}: {out}",
            from.name,
            to.name
        );
        // Each TTL against the source's as it is now: the 500 s set above are fewer by the
        // time the copy has run, which on a loaded machine is more than ttl_close's 2 s (the
        // cause of this test's one failure under load).
        let mut dst = Conn::new(&to.addr());
        for (k, f, t, v) in items.iter().step_by(7) {
            let (sf, st, sv) = src.get(k).unwrap();
            assert_eq!((sf, &sv), (*f, v));
            assert_eq!(st == -1, *t == 0, "{t} at the source is {st}");
            let (gf, gt, gv) = dst.get(k).unwrap();
            assert_eq!((gf, &gv), (*f, v));
            assert!(ttl_close(st, gt), "{st} became {gt}");
        }
    }
}

/// A source without CAS (`-C`) lists every item with CAS 0, which cannot show a change: its
/// items are fetched with meta gets, which say their TTL.
#[test]
fn memcached_without_cas_into_mnemod() {
    copies_everything(&Server::memcached(&["-C"]), &Server::mnemod(&[]));
}

/// A destination that takes only the text protocols gets quiet meta sets, not binary adds.
#[test]
fn mnemod_into_memcached_that_speaks_only_text() {
    copies_everything(&Server::mnemod(&[]), &Server::memcached(&["-B", "ascii"]));
}

#[test]
fn a_full_destination_is_reported_not_hidden() {
    let from = Server::mnemod(&["-I", "4m"]);
    // memcached's largest item is 1 MB by default: a 2 MB value cannot go there.
    let to = Server::memcached(&[]);
    let big = (b"big".to_vec(), 0, 0, vec![b'b'; 2 << 20]);
    Conn::new(&from.addr()).set_all(&[big, (b"small".to_vec(), 0, 0, b"s".to_vec())]);
    let out = mnemo(&["migrate", "--from", &from.addr(), "--to", &to.addr()]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        (summary(&text, "stored"), summary(&text, "failed")),
        (1, 1),
        "{text}"
    );
    // memcached's binary answer to the quiet add it could not store.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("binary status 0x0003: Too large."), "{err}");
    assert!(Conn::new(&to.addr()).get(b"small").is_some());
}

#[test]
fn unreachable_servers_fail_fast() {
    let to = Server::mnemod(&[]);
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let out = mnemo(&["migrate", "--from", &dead, "--to", &to.addr()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot connect"),
        "{out:?}"
    );
    assert_eq!(
        mnemo(&["migrate", "--from", &to.addr()]).status.code(),
        Some(2)
    );
}

/// A source without the hash walk (as memcached before 1.6.9) that is busy crawling at first,
/// then lists two keys of which one is gone by the time it is fetched, and on the second
/// listing a third key the first passed over (as memcached's LRU crawler can).
fn scripted_source() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let dumps = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    std::thread::spawn(move || {
        for s in l.incoming() {
            let dumps = dumps.clone();
            std::thread::spawn(move || serve_script(s.unwrap(), &dumps));
        }
    });
    addr
}

fn serve_script(s: TcpStream, dumps: &std::sync::atomic::AtomicUsize) {
    let mut s = BufReader::new(s);
    let mut line = String::new();
    while s.read_line(&mut line).unwrap_or(0) > 0 {
        let reply: Vec<u8> = match line.trim_end() {
            "lru_crawler metadump hash" => b"BADCLASS invalid class id\r\n".to_vec(),
            "lru_crawler metadump all" => {
                let first = b"key=a exp=-1 la=1 cas=1 fetch=no cls=1 size=60\nkey=gone exp=-1 la=1 cas=2 fetch=no cls=1 size=60\nkey=changed exp=-1 la=1 cas=4 fetch=no cls=1 size=60\nkey=timed exp=TIMED la=1 cas=5 fetch=no cls=1 size=60\n";
                let first = String::from_utf8_lossy(first)
                    .replace("TIMED", &(now() + 1000).to_string())
                    .into_bytes();
                match dumps.fetch_add(1, std::sync::atomic::Ordering::Relaxed) {
                    0 => b"BUSY currently processing crawler request\r\n".to_vec(),
                    1 => [&first[..], b"END\r\n"].concat(),
                    // The second listing's batch: "c d" travels base64-encoded, in a meta get.
                    _ => [
                        &first[..],
                        b"key=c%20d exp=-1 la=1 cas=3 fetch=no cls=1 size=60\nEND\r\n",
                    ]
                    .concat(),
                }
            }
            "stats" => b"STAT curr_items 5\r\nEND\r\n".to_vec(),
            // "gone" went; "changed" was stored again since listed (another CAS), with a
            // TTL its meta get says; "timed" keeps the expiry its listing gave.
            "gets a gone changed timed" => b"VALUE a 1 1 1\r\nA\r\nVALUE changed 3 3 9\r\nOLD\r\nVALUE timed 4 1 5\r\nT\r\nEND\r\n".to_vec(),
            "mg changed v f t u" => b"VA 3 f6 t77\r\nNEW\r\n".to_vec(),
            // "c d" travels base64-encoded.
            "mg YyBk b v f t u" => b"VA 2 f2 t50\r\nCD\r\n".to_vec(),
            other => format!("ERROR unexpected {other}\r\n").into_bytes(),
        };
        s.get_mut().write_all(&reply).unwrap();
        line.clear();
    }
}

#[test]
fn busy_crawler_and_keys_gone_meanwhile() {
    let to = Server::mnemod(&[]);
    let out = ok(&mnemo(&[
        "migrate",
        "--from",
        &scripted_source(),
        "--to",
        &to.addr(),
    ]));
    assert_eq!(
        (
            summary(&out, "listed"),
            summary(&out, "relisted"),
            summary(&out, "refetched"),
            summary(&out, "stored"),
            summary(&out, "gone")
        ),
        (4, 1, 1, 4, 1),
        "{out}"
    );
    let mut d = Conn::new(&to.addr());
    assert_eq!(d.get(b"a"), Some((1, -1, b"A".to_vec())));
    let (f, t, v) = d.get(b"changed").unwrap();
    assert_eq!((f, v), (6, b"NEW".to_vec()));
    assert!((75..=77).contains(&t), "{t}");
    let (f, t, v) = d.get(b"timed").unwrap();
    assert_eq!((f, v), (4, b"T".to_vec()));
    assert!((997..=1000).contains(&t), "{t}");
    let (f, t, v) = d.get(b"c d").unwrap();
    assert_eq!((f, v), (2, b"CD".to_vec()));
    assert!((48..=50).contains(&t), "{t}");
    assert_eq!(d.get(b"gone"), None);
}

/// A destination that answers quiet sets as a server may: nothing for a stored key (`new:`),
/// `NS` for a key it holds (`exists:`), an error for one it cannot store (`fail:`), and `HD`
/// anyway for `loud:` keys (a server that ignores `q`); the check after the copy (`mg <key> u`)
/// finds every key but the `fail:` ones. Anything else is an error.
fn scripted_destination() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for s in l.incoming() {
            std::thread::spawn(move || {
                let mut s = BufReader::new(s.unwrap());
                let mut line = String::new();
                while s.read_line(&mut line).unwrap_or(0) > 0 {
                    let t: Vec<&str> = line.split_whitespace().collect();
                    let reply: &[u8] = match t.as_slice() {
                        ["mn"] => b"MN\r\n",
                        ["ms", key, len, .., "ME", "q"] => {
                            let mut data = vec![0; len.parse::<usize>().unwrap() + 2];
                            s.read_exact(&mut data).unwrap();
                            match key.split(':').next().unwrap() {
                                "exists" => b"NS\r\n",
                                "fail" => b"SERVER_ERROR out of memory storing object\r\n",
                                "loud" => b"HD\r\n",
                                _ => b"",
                            }
                        }
                        ["mg", key, "u"] if key.starts_with("fail:") => b"EN\r\n",
                        ["mg", _, "u"] => b"HD\r\n",
                        _ => b"ERROR\r\n",
                    };
                    s.get_mut().write_all(reply).unwrap();
                    line.clear();
                }
            });
        }
    });
    addr
}

#[test]
fn quiet_sets_still_count_what_was_kept_and_refused() {
    let from = Server::mnemod(&[]);
    let keys = [
        "new:1", "exists:1", "new:2", "fail:1", "loud:1", "new:3", "exists:2", "loud:2",
    ];
    let items: Vec<Item> = keys
        .iter()
        .map(|k| (k.as_bytes().to_vec(), 0, 0, b"v".to_vec()))
        .collect();
    Conn::new(&from.addr()).set_all(&items);
    let out = mnemo(&[
        "migrate",
        "--from",
        &from.addr(),
        "--to",
        &scripted_destination(),
        "--connections",
        "2",
        "--batch",
        "3",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert_eq!(
        (
            summary(&text, "fetched"),
            summary(&text, "stored"),
            summary(&text, "kept"),
            summary(&text, "failed")
        ),
        (8, 5, 2, 1),
        "{text}"
    );
    assert_eq!(
        (summary(&text, "present"), summary(&text, "missing")),
        (7, 1),
        "{text}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("SERVER_ERROR out of memory storing object"),
        "{out:?}"
    );
}

/// Keys the withholding source lists: with 240-byte keys, a dump of ~28 MB, more than the
/// sockets between it and the tool can buffer.
const WITHHELD: usize = 100_000;

/// A source whose gets answer only once its whole dump has been read, as memcached's hash walk
/// can make them: it keeps the lock of the bucket it is in while it waits to send the dump, and
/// a worker thread that needs that lock for a get waits with it. Every key is gone by then.
fn withholding_source() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let sent = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    std::thread::spawn(move || {
        for s in l.incoming() {
            let sent = sent.clone();
            std::thread::spawn(move || {
                let s = s.unwrap();
                s.set_nodelay(true).unwrap();
                let mut s = BufReader::new(s);
                let mut line = String::new();
                while s.read_line(&mut line).unwrap_or(0) > 0 {
                    let w = s.get_mut();
                    if line == "lru_crawler metadump hash\r\n" {
                        let pad = "k".repeat(230);
                        let mut dump = String::new();
                        for i in 0..WITHHELD {
                            dump += &format!(
                                "key={pad}{i:09} exp=-1 la=1 cas=1 fetch=no cls=1 size=300\n"
                            );
                        }
                        dump += "END\r\n";
                        // Returns once the tool has read all but what the sockets buffer.
                        w.write_all(dump.as_bytes()).unwrap();
                        *sent.0.lock().unwrap() = true;
                        sent.1.notify_all();
                    } else if line.starts_with("mg ") || line.starts_with("gets ") {
                        let mut done = sent.0.lock().unwrap();
                        while !*done {
                            done = sent.1.wait(done).unwrap();
                        }
                        drop(done);
                        let gone: &[u8] = if line.starts_with("mg ") {
                            b"EN\r\n"
                        } else {
                            b"END\r\n"
                        };
                        if w.write_all(gone).is_err() {
                            return;
                        }
                    } else if line == "stats\r\n" {
                        let _ = w.write_all(b"STAT curr_items 0\r\nEND\r\n");
                    }
                    line.clear();
                }
            });
        }
    });
    addr
}

#[test]
fn a_source_that_answers_only_once_its_dump_is_read() {
    let to = Server::mnemod(&[]);
    let out = ok(&mnemo(&[
        "migrate",
        "--from",
        &withholding_source(),
        "--to",
        &to.addr(),
        "--connections",
        "1",
        "--batch",
        "16",
    ]));
    let n = WITHHELD as u64;
    assert_eq!(
        (summary(&out, "listed"), summary(&out, "gone")),
        (n, n),
        "{out}"
    );
}

/// A node joins a weighted fleet of memcached and mnemod servers (and one leaves): afterwards
/// every key sits on the server ketama names under the new list, and only moved keys moved.
fn fleet_change(hash_tags: bool) {
    let servers = [
        Server::memcached(&[]),
        Server::mnemod(&[]),
        Server::memcached(&[]),
        Server::mnemod(&[]),
    ];
    let a: Vec<String> = servers.iter().map(Server::addr).collect();
    let old_list = format!("{}:2,{},{}", a[0], a[1], a[2]);
    let new_list = format!("{}:2,{},{}:3", a[0], a[1], a[3]);
    let old = ServerSpec::parse_list(&old_list).unwrap();
    let new = ServerSpec::parse_list(&new_list).unwrap();
    let (old_ring, new_ring) = (Ketama::new(&old), Ketama::new(&new));
    let mut conns: HashMap<String, Conn> = a.iter().map(|s| (s.clone(), Conn::new(s))).collect();
    let keys: Vec<Vec<u8>> = (0..4000)
        .map(|i| format!("{{user:{}}}:item:{i}", i % 700).into_bytes())
        .collect();
    let mut per_old: HashMap<String, Vec<Item>> = HashMap::new();
    for k in &keys {
        let owner = old[old_ring.route(k, hash_tags).unwrap()].addr();
        per_old
            .entry(owner)
            .or_default()
            .push((k.clone(), 7, 0, k.clone()));
    }
    for (s, items) in &per_old {
        conns.get_mut(s).unwrap().set_all(items);
    }
    let moved = keys
        .iter()
        .filter(|k| {
            old[old_ring.route(k, hash_tags).unwrap()].addr()
                != new[new_ring.route(k, hash_tags).unwrap()].addr()
        })
        .count() as u64;
    assert!(moved > 500 && moved < 3500, "{moved}");
    let mut args = vec![
        "migrate",
        "--from-servers",
        &old_list,
        "--to-servers",
        &new_list,
    ];
    if hash_tags {
        args.insert(0, "--hash-tags");
    }
    let out = ok(&mnemo(&args));
    assert_eq!(summary(&out, "stored"), moved, "{out}");
    assert_eq!(summary(&out, "stayed"), keys.len() as u64 - moved, "{out}");
    for k in &keys {
        let owner = new[new_ring.route(k, hash_tags).unwrap()].addr();
        let got = conns.get_mut(&owner).unwrap().get(k);
        assert_eq!(
            got,
            Some((7, -1, k.clone())),
            "{} not on {owner}",
            String::from_utf8_lossy(k)
        );
    }
    // The new node holds exactly the keys it now owns: nothing else was copied to it.
    let to_new = keys
        .iter()
        .filter(|k| new[new_ring.route(k, hash_tags).unwrap()].addr() == a[3])
        .count() as u64;
    assert_eq!(conns.get_mut(&a[3]).unwrap().curr_items(), to_new);
}

#[test]
fn fleet_change_moves_exactly_the_keys_whose_owner_changes() {
    fleet_change(false);
}

#[test]
fn fleet_change_with_hash_tags() {
    fleet_change(true);
}
