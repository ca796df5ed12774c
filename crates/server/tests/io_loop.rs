//! Both worker event loops (`--io-loop=uring|epoll`) on the paths where they differ most:
//! replies larger than what a loop queues before saying "full" (backpressure), input far
//! beyond what it receives before pausing, peers that reset mid-reply, and connection counts
//! coming back down afterwards. Every other black-box test runs under either loop through
//! MNEMO_IO_LOOP (scripts/test.sh runs them under both). And a kernel without io_uring (a
//! seccomp filter): the fallback to epoll, and when it is reported.

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
    let line = text
        .lines()
        .find(|l| l.starts_with("STAT curr_connections "))
        .unwrap();
    // Minus the connection asking.
    line.rsplit(' ').next().unwrap().parse::<u64>().unwrap() - 1
}

fn wait_connections(srv: &Server, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while curr_connections(srv) > want {
        assert!(
            Instant::now() < deadline,
            "closed connections are still counted"
        );
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
        assert_eq!(
            reply.len(),
            40 * (b"VALUE big 0 100000\r\n".len() + 100_002) + 5,
            "{io_loop}"
        );
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
        while !out.ends_with(b"\r\nVERSION 1.6.45\r\n") && out != b"VERSION 1.6.45\r\n" {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "{io_loop}: server closed the connection");
            out.extend_from_slice(&buf[..n]);
        }
        writer.join().unwrap();
        assert_eq!(
            out.len(),
            20_000 * 5 + b"VERSION 1.6.45\r\n".len(),
            "{io_loop}"
        );
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
        assert_eq!(
            roundtrip(&mut s, b"version\r\n", b"\r\n"),
            b"VERSION 1.6.45\r\n",
            "{io_loop}"
        );
    }
}

/// SO_LINGER {on, 0}: close() then sends a reset instead of a FIN.
fn linger_zero(s: &std::net::TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
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

/// A kernel without io_uring, as a seccomp filter makes one: io_uring_setup fails with
/// ENOSYS in the server (the filter is installed in the child, before exec).
#[cfg(target_arch = "x86_64")]
fn without_io_uring(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only async-signal-safe calls (two prctl), on data that
    // lives in the closure.
    unsafe {
        cmd.pre_exec(|| {
            const IO_URING_SETUP: u32 = 425;
            const RET_ERRNO: u32 = 0x0005_0000;
            const RET_ALLOW: u32 = 0x7fff_0000;
            // A = syscall number; A == io_uring_setup ? ERRNO(ENOSYS) : ALLOW.
            let filter = [
                libc::sock_filter {
                    code: 0x20,
                    jt: 0,
                    jf: 0,
                    k: 0,
                },
                libc::sock_filter {
                    code: 0x15,
                    jt: 0,
                    jf: 1,
                    k: IO_URING_SETUP,
                },
                libc::sock_filter {
                    code: 0x06,
                    jt: 0,
                    jf: 0,
                    k: RET_ERRNO | libc::ENOSYS as u32,
                },
                libc::sock_filter {
                    code: 0x06,
                    jt: 0,
                    jf: 0,
                    k: RET_ALLOW,
                },
            ];
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut _,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    2, /* SECCOMP_MODE_FILTER */
                    &prog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Where io_uring is missing, the server serves on epoll. It says so in one line (however
/// many workers) only when asked for io_uring by name or run with -v: a server on its defaults
/// keeps stderr as memcached would.
#[cfg(target_arch = "x86_64")]
#[test]
fn without_io_uring_the_server_serves_on_epoll_and_says_so_only_when_asked() {
    use std::process::Stdio;
    let cases: [(&[&str], &[&str]); 3] = [
        (&["-t", "4"], &[]),
        (
            &["-t", "4", "--io-loop=uring"],
            &["mnemod: io_uring unavailable (io_uring setup: "],
        ),
        (
            &["-t", "2", "-v"],
            &[
                "mnemod: io_uring unavailable (",
                "mnemod: workers run the epoll event loop",
            ],
        ),
    ];
    for (args, want) in cases {
        let mut srv = Server::start_with(args, |cmd| {
            cmd.env_remove("MNEMO_IO_LOOP").stderr(Stdio::piped());
            without_io_uring(cmd);
        });
        let mut s = srv.connect();
        let mut set = b"set big 0 0 100000\r\n".to_vec();
        set.extend_from_slice(&vec![b'b'; 100_000]);
        set.extend_from_slice(b"\r\n");
        assert_eq!(roundtrip(&mut s, &set, b"\r\n"), b"STORED\r\n", "{args:?}");
        let reply = roundtrip(&mut s, b"get big\r\n", b"END\r\n");
        assert_eq!(
            reply.len(),
            "VALUE big 0 100000\r\n".len() + 100_000 + 7,
            "{args:?}"
        );
        srv.child.kill().unwrap();
        srv.child.wait().unwrap();
        let mut err = String::new();
        srv.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let fallback = err
            .lines()
            .filter(|l| l.contains("io_uring unavailable"))
            .collect::<Vec<_>>();
        if want.is_empty() {
            assert_eq!(err, "", "{args:?}: a server on its defaults says nothing");
            continue;
        }
        assert_eq!(
            fallback.len(),
            1,
            "{args:?}: one line however many workers:\n{err}"
        );
        assert!(fallback[0].ends_with("; using epoll"), "{err}");
        for w in want {
            assert!(
                err.lines().any(|l| l.starts_with(w)),
                "{args:?}: no line starting {w:?} in:\n{err}"
            );
        }
    }
}
