//! `--metrics`: the real `mnemod` serving `/metrics` on a port of its own: the HTTP side (status
//! codes, headers, hostile clients) and that the page follows the commands served. The page is
//! parsed with a real Prometheus parser in tests/test_metrics.py.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

mod common;
use common::Server;

/// A free port for the metrics listener, from a range common::free_port does not use (it hands
/// out 20000-31999), so the two can never pick the same one; below the ephemeral range too.
fn metrics_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (15000 + (std::process::id() % 389 * 13 + n) % 5000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// mnemod with `--metrics PORT`, once the metrics port accepts connections (waited for by
/// connecting, as the memcached port is).
fn start(extra: &[&str]) -> (Server, u16) {
    let port = metrics_port();
    let p = port.to_string();
    let mut args = vec!["--metrics", &p];
    args.extend_from_slice(extra);
    let srv = Server::start(&args);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // A loopback self-connect (source port = destination port) is not the server.
        if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
            if s.local_addr().ok() != s.peer_addr().ok() {
                return (srv, port);
            }
        }
        assert!(Instant::now() < deadline, "the metrics port never accepted");
        std::thread::yield_now();
    }
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Send `req` and read the reply until the server closes: (status line, head, body).
fn http(port: u16, req: &[u8]) -> (String, String, String) {
    let mut s = connect(port);
    s.write_all(req).unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).unwrap();
    let reply = String::from_utf8(reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").expect("a head");
    (
        head.lines().next().unwrap().to_string(),
        head.to_string(),
        body.to_string(),
    )
}

fn scrape(port: u16) -> String {
    let (status, head, body) = http(port, b"GET /metrics HTTP/1.1\r\nHost: mnemo\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        head.contains("\r\nContent-Type: text/plain; version=0.0.4\r\n"),
        "{head}"
    );
    assert!(
        head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())),
        "{head}"
    );
    body
}

/// The value of one series, written exactly as the page writes it (`name{labels}`).
fn value(page: &str, series: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{series} not on the page"))
}

/// Send memcached requests and read until `end`.
fn memcache(srv: &Server, req: &[u8], end: &[u8]) -> Vec<u8> {
    let mut c = srv.connect();
    c.write_all(req).unwrap();
    let mut got = Vec::new();
    let mut buf = [0; 4096];
    while !got.ends_with(end) {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    got
}

#[test]
fn the_page_follows_the_commands() {
    let (srv, port) = start(&["-m", "32"]);
    let before = scrape(port);
    assert_eq!(value(&before, "memcached_up"), 1.0);
    assert_eq!(
        value(&before, "memcached_limit_bytes"),
        (32u64 << 20) as f64
    );
    assert_eq!(value(&before, "memcached_current_items"), 0.0);
    let set = "memcached_commands_total{command=\"set\",status=\"hit\"}";
    let miss = "memcached_commands_total{command=\"get\",status=\"miss\"}";
    let mut req = Vec::new();
    for i in 0..17 {
        req.extend_from_slice(format!("set k{i} 0 0 1\r\nx\r\n").as_bytes());
    }
    req.extend_from_slice(b"get nope\r\n");
    memcache(&srv, &req, b"END\r\n");
    let after = scrape(port);
    assert_eq!(value(&after, set) - value(&before, set), 17.0);
    assert_eq!(value(&after, miss) - value(&before, miss), 1.0);
    assert_eq!(value(&after, "memcached_current_items"), 17.0);
    assert_eq!(
        value(&after, "memcached_slab_current_items{slab=\"1\"}"),
        17.0
    );
    assert!(value(&after, "memcached_read_bytes_total") >= req.len() as f64);
}

#[test]
fn only_get_and_head_of_metrics_are_served() {
    let (_srv, port) = start(&[]);
    assert_eq!(
        http(port, b"GET / HTTP/1.1\r\n\r\n").0,
        "HTTP/1.1 404 Not Found"
    );
    assert_eq!(
        http(port, b"GET /metrics/x HTTP/1.1\r\n\r\n").0,
        "HTTP/1.1 404 Not Found"
    );
    let (status, head, _) = http(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
    assert!(head.contains("\r\nAllow: GET, HEAD"), "{head}");
    let (status, head, body) = http(port, b"HEAD /metrics HTTP/1.0\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        head.contains("\r\nConnection: close") && body.is_empty(),
        "{head}"
    );
    assert_eq!(http(port, b"BREW\r\n\r\n").0, "HTTP/1.1 400 Bad Request");
    // The most a head may be, with no end in sight.
    let (status, _, _) = http(port, &[b'a'; 8192]);
    assert_eq!(status, "HTTP/1.1 431 Request Header Fields Too Large");
    scrape(port);
}

#[test]
fn a_silent_or_slow_client_is_cut_off() {
    let (_srv, port) = start(&[]);
    // Says nothing: closed within the 2 s head deadline (10 s allowed for a loaded machine).
    let mut silent = connect(port);
    // Trickles a byte at a time: the deadline covers all its reads together.
    let mut slow = connect(port);
    let t = Instant::now();
    let mut buf = [0; 64];
    match silent.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("the silent client was not closed: {other:?}"),
    }
    for &b in b"GET /metrics HTTP/1.1\r\n".iter().cycle() {
        if slow.write_all(&[b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100)); // the slowness under test
        if t.elapsed() > Duration::from_secs(20) {
            panic!("the trickling client kept the server");
        }
    }
    // Both were cut off, and the next scrape is answered.
    scrape(port);
}

#[test]
fn bad_addresses_stop_the_start_up() {
    let run = |addr: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_mnemod"))
            .args(["-p", "0", "--metrics", addr])
            .output()
            .unwrap()
    };
    for bad in ["nine", "70000", ":9150", "::1", "127.0.0.1:x", "[::1]"] {
        let out = run(bad);
        assert_eq!(out.status.code(), Some(2), "--metrics {bad} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    // An address in use: one line naming the flag, exit 1.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let out = run(&taken.local_addr().unwrap().to_string());
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("(--metrics)"),
        "{out:?}"
    );
}
