//! The whole generator against a tiny in-process memcached stand-in on 127.0.0.1 port 0:
//! every request sent is answered and counted once, in every mode.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use clap::Parser;

use super::*;

/// Answers `set` with STORED and `get` with a VALUE for every key already set, then END.
/// Returns its address; its threads end when the test process does.
fn fake_server() -> SocketAddr {
    fake_server_logged().0
}

/// One request as the fake server saw it: (connection number, command, key, a get's hit).
type Logged = (usize, &'static str, Vec<u8>, bool);

/// [`fake_server`], also logging every single-key request in arrival order.
fn fake_server_logged() -> (SocketAddr, Arc<Mutex<Vec<Logged>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let store = Arc::new(Mutex::new(HashMap::<Vec<u8>, usize>::new()));
    let log = Arc::new(Mutex::new(Vec::new()));
    let log2 = log.clone();
    std::thread::spawn(move || {
        for (n, sock) in listener.incoming().enumerate() {
            let Ok(sock) = sock else { return };
            let (store, log) = (store.clone(), log2.clone());
            std::thread::spawn(move || serve(sock, &store, n, &log));
        }
    });
    (addr, log)
}

/// Answers set and get; a get returns a value of the length last set for the key.
fn serve(
    sock: std::net::TcpStream,
    store: &Mutex<HashMap<Vec<u8>, usize>>,
    conn: usize,
    log: &Mutex<Vec<Logged>>,
) {
    // One write per reply: without NODELAY, Nagle holds each next reply for a delayed ACK.
    sock.set_nodelay(true).unwrap();
    let mut out = sock.try_clone().unwrap();
    let mut r = BufReader::new(sock);
    let mut line = Vec::new();
    loop {
        line.clear();
        if r.read_until(b'\n', &mut line).unwrap_or(0) == 0 {
            return;
        }
        let words: Vec<&[u8]> = line.trim_ascii_end().split(|&b| b == b' ').collect();
        let mut reply = Vec::new();
        match words[0] {
            b"set" => {
                let len: usize = std::str::from_utf8(words[4]).unwrap().parse().unwrap();
                let mut data = vec![0u8; len + 2];
                r.read_exact(&mut data).unwrap();
                store.lock().unwrap().insert(words[1].to_vec(), len);
                log.lock()
                    .unwrap()
                    .push((conn, "set", words[1].to_vec(), false));
                reply.extend_from_slice(b"STORED\r\n");
            }
            b"get" => {
                let store = store.lock().unwrap();
                if words.len() == 2 {
                    let hit = store.contains_key(words[1]);
                    log.lock()
                        .unwrap()
                        .push((conn, "get", words[1].to_vec(), hit));
                }
                for k in &words[1..] {
                    if let Some(&len) = store.get(*k) {
                        reply.extend_from_slice(
                            format!("VALUE {} 0 {len}\r\n", String::from_utf8_lossy(k)).as_bytes(),
                        );
                        reply.resize(reply.len() + len, b'v');
                        reply.extend_from_slice(b"\r\n");
                    }
                }
                reply.extend_from_slice(b"END\r\n");
            }
            _ => reply.extend_from_slice(b"ERROR\r\n"),
        }
        if out.write_all(&reply).is_err() {
            return;
        }
    }
}

fn config(addr: SocketAddr, extra: &[&str]) -> Config {
    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        b: BenchArgs,
    }
    let server = addr.to_string();
    let mut argv = vec!["t", "--server", server.as_str()];
    argv.extend_from_slice(extra);
    Config::from_args(&T::try_parse_from(argv).unwrap().b).unwrap()
}

fn mixed(cfg: &Config) -> Stats {
    let budget = |t: usize| {
        cfg.requests
            .map(|n| n / cfg.threads as u64 + u64::from((t as u64) < n % cfg.threads as u64))
    };
    run_phase(
        cfg,
        |_| Plan::Mixed,
        cfg.pipeline,
        cfg.refill,
        budget,
        cfg.rate,
    )
    .unwrap()
}

/// Sets every key once, `depth` requests in flight per connection.
fn prefill(cfg: &Config, depth: usize) -> Stats {
    let stride = cfg.connections as u64;
    run_phase(
        cfg,
        |_| Plan::Prefill { next: 0, stride },
        depth,
        true,
        |_| None,
        None,
    )
    .unwrap()
}

#[test]
fn closed_loop_request_bound_counts_every_reply() {
    let addr = fake_server();
    let cfg = config(
        addr,
        &[
            "-c", "5", "-t", "2", "-n", "1003", "-p", "4", "-k", "50", "-r", "1:3",
        ],
    );
    let s = mixed(&cfg);
    assert_eq!(s.ops, 1003);
    assert_eq!(s.gets + s.sets, 1003);
    assert_eq!(s.errors, 0);
    assert_eq!(s.all.len(), 1003);
    assert!(
        s.sets > 150 && s.gets > 600,
        "{} sets, {} gets",
        s.sets,
        s.gets
    );
}

/// A fake server, every key set once (`depth` in flight per connection), then the mixed run:
/// the two phases' counts.
fn prefill_then_mix(args: &[&str], depth: usize) -> (Stats, Stats) {
    let cfg = config(fake_server(), args);
    (prefill(&cfg, depth), mixed(&cfg))
}

#[test]
fn prefill_sets_every_key_then_gets_hit() {
    let (pre, s) = prefill_then_mix(
        &[
            "-c", "3", "-k", "100", "-n", "200", "-r", "0:1", "-m", "5", "--refill", "-p", "3",
        ],
        8,
    );
    assert_eq!(pre.ops, 100);
    assert_eq!(pre.sets, 100);
    assert_eq!(s.ops, 200);
    assert_eq!(s.get_keys, 1000);
    assert_eq!(s.hits, 1000);
    // Every value is 32 bytes (the default --value-size).
    assert_eq!(s.value_bytes, 1000 * 32);
    assert_eq!(s.refills, 0);
}

/// `--look-aside` without a prefill: every get that misses is followed, on its connection, by a
/// set of the same key, and those sets are the run's own requests (ops = gets + sets, within -n).
#[test]
fn look_aside_sets_each_missed_key_next() {
    let (addr, log) = fake_server_logged();
    let cfg = config(
        addr,
        &[
            "-c",
            "3",
            "-k",
            "40",
            "-n",
            "600",
            "-r",
            "1:4",
            "--look-aside",
            "--value-size",
            "10-20",
        ],
    );
    let s = mixed(&cfg);
    assert_eq!(s.ops, 600);
    assert_eq!(s.gets + s.sets, 600);
    assert_eq!(s.errors, 0);
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 600);
    let misses = s.gets - s.hits;
    assert!(misses > 0 && s.hits > 0, "{misses} misses, {} hits", s.hits);
    // A connection's last request may be a miss whose set the budget no longer allowed.
    assert!(
        s.refills <= misses && misses - s.refills <= 3,
        "{} refills, {misses} misses",
        s.refills
    );
    assert!(
        s.refills < s.sets,
        "the 1:4 ratio's random sets come on top"
    );
    let mut followed = 0;
    for conn in 0..3 {
        let reqs: Vec<_> = log.iter().filter(|r| r.0 == conn).collect();
        for (i, r) in reqs.iter().enumerate() {
            if r.1 == "get" && !r.3 {
                if let Some(next) = reqs.get(i + 1) {
                    assert_eq!(
                        (next.1, &next.2),
                        ("set", &r.2),
                        "after the miss of {:?}",
                        r.2
                    );
                    followed += 1;
                }
            }
        }
    }
    assert_eq!(followed, s.refills);
    // Value bytes are what the hits carried: 10-20 bytes each.
    assert!(
        (10 * s.hits..=20 * s.hits).contains(&s.value_bytes),
        "{}",
        s.value_bytes
    );
}

#[test]
fn look_aside_refuses_multiget() {
    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        b: BenchArgs,
    }
    let argv = ["t", "--look-aside", "-m", "2"];
    let err = Config::from_args(&T::try_parse_from(argv).unwrap().b).unwrap_err();
    assert!(err.contains("--multiget 1"), "{err}");
}

/// Values of 16 KB and more are dropped unread (MSG_TRUNC) after a short read of their line:
/// every reply must still be counted, with its hits, across pipelines and multi-gets.
#[test]
fn large_values_dropped_unread_are_counted_like_any_other() {
    let (pre, s) = prefill_then_mix(
        &[
            "-c",
            "3",
            "-k",
            "20",
            "-n",
            "150",
            "-r",
            "0:1",
            "-m",
            "3",
            "--refill",
            "-p",
            "2",
            "--value-size",
            "100k",
        ],
        4,
    );
    assert_eq!(pre.sets, 20);
    assert_eq!((s.ops, s.errors), (150, 0));
    assert_eq!((s.get_keys, s.hits), (450, 450));
}

#[test]
fn fixed_rate_sends_on_schedule() {
    let addr = fake_server();
    let cfg = config(addr, &["-c", "4", "--rate", "2000", "-n", "100"]);
    let t = std::time::Instant::now();
    let s = mixed(&cfg);
    assert_eq!(s.ops, 100);
    assert_eq!(s.lag.len(), 100);
    // 100 requests at 2000/s are due over 50 ms: the run cannot be much shorter.
    assert!(
        t.elapsed() >= Duration::from_millis(45),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn duration_bound_stops() {
    let addr = fake_server();
    let cfg = config(addr, &["-c", "2", "-d", "0.2", "--warmup", "0.05"]);
    let t = std::time::Instant::now();
    let s = mixed(&cfg);
    assert!(s.ops > 0);
    assert!(t.elapsed() < Duration::from_secs(2));
    assert!(
        (200_000_000..300_000_000).contains(&s.elapsed_ns),
        "{}",
        s.elapsed_ns
    );
}

#[test]
fn unreachable_server_is_an_error() {
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    }; // closed again: nothing listens there
    let cfg = config(addr, &["-c", "2", "-n", "10"]);
    assert!(run_phase(&cfg, |_| Plan::Mixed, 1, false, |_| Some(5), None).is_err());
}

#[test]
fn busy_poll_counts_every_reply_and_refuses_fixed_rate() {
    let addr = fake_server();
    let cfg = config(addr, &["-c", "3", "-n", "501", "-p", "2", "--busy-poll"]);
    assert!(cfg.busy_poll);
    let s = mixed(&cfg);
    assert_eq!(s.ops, 501);
    assert_eq!(s.gets + s.sets, 501);
    assert_eq!(s.errors, 0);

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        b: BenchArgs,
    }
    let argv = ["t", "--rate", "1000", "--busy-poll"];
    let err = Config::from_args(&T::try_parse_from(argv).unwrap().b).unwrap_err();
    assert!(err.contains("--busy-poll"), "{err}");
}
