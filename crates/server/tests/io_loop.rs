//! Both worker event loops (`--io-loop=uring|epoll`) on the paths where they differ most:
//! replies larger than what a loop queues before saying "full" (backpressure), input far
//! beyond what it receives before pausing, peers that reset mid-reply, and connection counts
//! coming back down afterwards. Every other black-box test runs under either loop through
//! MNEMO_IO_LOOP (scripts/test.sh runs them under both).

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::Server;

const LOOPS: [&str; 2] = ["--io-loop=uring", "--io-loop=epoll"];

fn roundtrip(s: &mut std::net::TcpStream, req: &[u8], end: &[u8]) -> Vec<u8> {
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while !out.ends_with(end) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "server closed the connection");
        out.extend_from_slice(&buf[..n]);
    }
    out
}

fn curr_connections(srv: &Server) -> u64 {
    let mut s = srv.connect();
    let out = roundtrip(&mut s, b"stats\r\n", b"END\r\n");
    let text = String::from_utf8(out).unwrap();
    let line = text.lines().find(|l| l.starts_with("STAT curr_connections ")).unwrap();
    // Minus the connection asking.
    line.rsplit(' ').next().unwrap().parse::<u64>().unwrap() - 1
}

fn wait_connections(srv: &Server, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while curr_connections(srv) > want {
        assert!(Instant::now() < deadline, "closed connections are still counted");
        std::thread::yield_now();
    }
}

#[test]
fn large_replies_and_long_pipelines_arrive_whole_on_both_loops() {
    for io_loop in LOOPS {
        let srv = Server::start(&[io_loop, "-m", "64"]);
        let mut s = srv.connect();
        let value = vec![b'v'; 100_000];
        let mut set = b"set big 0 0 100000\r\n".to_vec();
        set.extend_from_slice(&value);
        set.extend_from_slice(b"\r\n");
        assert_eq!(roundtrip(&mut s, &set, b"\r\n"), b"STORED\r\n", "{io_loop}");
        // 40 copies of a 100 KB value in one reply: 4 MB, far past any queue's high mark.
        let mut get = b"get".to_vec();
        for _ in 0..40 {
            get.extend_from_slice(b" big");
        }
        get.extend_from_slice(b"\r\n");
        let reply = roundtrip(&mut s, &get, b"END\r\n");
        assert_eq!(reply.len(), 40 * (b"VALUE big 0 100000\r\n".len() + 100_002) + 5, "{io_loop}");
        // 20,000 pipelined gets written before any reply is read (the client's writes
        // outrun the server's input high marks), then every reply in order.
        let writer = {
            let mut w = s.try_clone().unwrap();
            std::thread::spawn(move || {
                for i in 0..20_000 {
                    w.write_all(format!("get k{i}\r\n").as_bytes()).unwrap();
                }
                w.write_all(b"version\r\n").unwrap();
            })
        };
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        while !out.ends_with(b"\r\nVERSION 1.6.18\r\n") && out != b"VERSION 1.6.18\r\n" {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "{io_loop}: server closed the connection");
            out.extend_from_slice(&buf[..n]);
        }
        writer.join().unwrap();
        assert_eq!(out.len(), 20_000 * 5 + b"VERSION 1.6.18\r\n".len(), "{io_loop}");
    }
}

#[test]
fn peers_that_reset_mid_reply_are_closed_and_uncounted_on_both_loops() {
    for io_loop in LOOPS {
        let srv = Server::start(&[io_loop]);
        let mut s = srv.connect();
        let mut set = b"set big 0 0 200000\r\n".to_vec();
        set.extend_from_slice(&vec![b'x'; 200_000]);
        set.extend_from_slice(b"\r\n");
        assert_eq!(roundtrip(&mut s, &set, b"\r\n"), b"STORED\r\n");
        for round in 0..50 {
            let c = srv.connect();
            // A 2 MB reply the client never reads, then a reset (SO_LINGER 0 closes with RST).
            let mut w = &c;
            let mut get = b"get".to_vec();
            for _ in 0..10 {
                get.extend_from_slice(b" big");
            }
            get.extend_from_slice(b"\r\n");
            w.write_all(&get).unwrap();
            if round % 2 == 0 {
                w.write_all(b"get big\r\n").unwrap();
            }
            assert!(linger_zero(&c), "SO_LINGER");
            drop(c);
        }
        wait_connections(&srv, 1);
        // The server still answers.
        assert_eq!(roundtrip(&mut s, b"version\r\n", b"\r\n"), b"VERSION 1.6.18\r\n", "{io_loop}");
    }
}

/// SO_LINGER {on, 0}: close() then sends a reset instead of a FIN.
fn linger_zero(s: &std::net::TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let l = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: setsockopt on a live socket with a correctly sized option value.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as u32,
        ) == 0
    }
}
