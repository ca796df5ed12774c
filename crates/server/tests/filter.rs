//! `fget` against the real `mnemod` with the SDK's example filters (WebAssembly and native):
//! results equal the client-side computation, protocol errors keep the connection in sync,
//! hostile filters fail only their own request, and SIGHUP reloads filters.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use mnemo_filter_sdk::records::{self, Record};

mod common;
use common::Server;

#[path = "../../filter/tests/support/examples.rs"]
mod examples;
use examples::examples;

/// A deterministic generator (xorshift64*), so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

struct Conn {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Conn {
    fn new(srv: &Server) -> Conn {
        let w = srv.connect();
        Conn {
            r: BufReader::new(w.try_clone().unwrap()),
            w,
        }
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        l
    }

    fn set(&mut self, key: &str, flags: u32, value: &[u8]) {
        write!(self.w, "set {key} {flags} 0 {}\r\n", value.len()).unwrap();
        self.w.write_all(value).unwrap();
        self.w.write_all(b"\r\n").unwrap();
        assert_eq!(self.line(), "STORED\r\n");
    }

    fn send_fget(&mut self, filter: &str, args: &[u8], keys: &[String]) {
        let mut req = format!("fget {filter} {}", args.len()).into_bytes();
        for k in keys {
            req.push(b' ');
            req.extend_from_slice(k.as_bytes());
        }
        req.extend_from_slice(b"\r\n");
        req.extend_from_slice(args);
        req.extend_from_slice(b"\r\n");
        self.w.write_all(&req).unwrap();
    }

    /// The reply to an fget: Ok((flags, data)) or Err(the error line).
    fn read_fget(&mut self, filter: &str) -> Result<(u32, Vec<u8>), String> {
        let l = self.line();
        let Some(rest) = l.strip_prefix("VALUE ") else {
            return Err(l.trim_end().to_string());
        };
        let mut words = rest.split_whitespace();
        assert_eq!(words.next(), Some(filter));
        let flags: u32 = words.next().unwrap().parse().unwrap();
        let len: usize = words.next().unwrap().parse().unwrap();
        let mut data = vec![0; len + 2];
        self.r.read_exact(&mut data).unwrap();
        assert_eq!(&data[len..], b"\r\n");
        data.truncate(len);
        assert_eq!(self.line(), "END\r\n");
        Ok((flags, data))
    }

    fn fget(
        &mut self,
        filter: &str,
        args: &[u8],
        keys: &[String],
    ) -> Result<(u32, Vec<u8>), String> {
        self.send_fget(filter, args, keys);
        self.read_fget(filter)
    }

    fn stats(&mut self, group: &str) -> Vec<(String, String)> {
        write!(self.w, "stats {group}\r\n").unwrap();
        let mut out = Vec::new();
        loop {
            let l = self.line();
            if l == "END\r\n" {
                return out;
            }
            let mut w = l.trim_end().splitn(3, ' ').skip(1);
            out.push((
                w.next().unwrap().to_string(),
                w.next().unwrap_or("").to_string(),
            ));
        }
    }

    fn stat(&mut self, group: &str, name: &str) -> String {
        self.stats(group)
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no {name}"))
    }
}

fn arg(name: &str, path: PathBuf) -> String {
    format!("{name}={}", path.display())
}

/// Users 0..n with random records; every seventh user is left out (a missing key), and some
/// values carry trailing bytes short of a record (ignored by the encoding's rule).
fn load_users(c: &mut Conn, rng: &mut Rng, n: u64) -> Vec<Option<Vec<u8>>> {
    (0..n)
        .map(|u| {
            if u % 7 == 3 {
                return None;
            }
            let recs: Vec<Record> = (0..rng.below(40))
                .map(|_| Record {
                    user: u,
                    article: rng.below(1000),
                    ts: rng.below(500),
                })
                .collect();
            let mut v = records::encode_all(&recs);
            if u % 5 == 0 {
                v.extend_from_slice(&[0xee; 11]);
            }
            c.set(&format!("u:{u}"), 0, &v);
            Some(v)
        })
        .collect()
}

#[test]
fn topk_and_select_equal_the_client_side_computation_for_both_kinds() {
    let ex = examples();
    // Deadlines far above what the filters need: a worker preempted on a loaded machine must
    // not time a well-behaved filter out.
    let srv = Server::start(&[
        "--filter-timeout-ms",
        "2000",
        "--filter",
        &arg("topk", ex.wasm("topk")),
        "--native-filter",
        &arg("ntopk", ex.native("topk")),
        "--filter",
        &arg("select", ex.wasm("select")),
        "--native-filter",
        &arg("nselect", ex.native("select")),
    ]);
    let mut c = Conn::new(&srv);
    let mut rng = Rng(0x5eed_0001);
    let users = load_users(&mut c, &mut rng, 300);
    for q in 0..60 {
        let n = 1 + rng.below(120) as usize;
        let picked: Vec<u64> = (0..n).map(|_| rng.below(320)).collect(); // some never stored
        let keys: Vec<String> = picked.iter().map(|u| format!("u:{u}")).collect();
        let values = || {
            picked
                .iter()
                .filter_map(|&u| users.get(u as usize).cloned().flatten())
        };
        let k = [1, 3, 10, 50, 5000][q % 5];
        let want = records::encode_all(&records::top_k(
            values().flat_map(|v| records::iter(&v).collect::<Vec<_>>()),
            k,
        ));
        for filter in ["topk", "ntopk"] {
            assert_eq!(
                c.fget(filter, k.to_string().as_bytes(), &keys),
                Ok((0, want.clone())),
                "{filter} query {q}"
            );
        }
        let article = rng.below(1000);
        let want: Vec<u8> = values()
            .flat_map(|v| {
                records::iter(&v)
                    .filter(|r| r.article == article)
                    .collect::<Vec<_>>()
            })
            .flat_map(|r| records::encode_all(&[r]))
            .collect();
        for filter in ["select", "nselect"] {
            let got = c.fget(filter, format!("article={article}").as_bytes(), &keys);
            assert_eq!(got, Ok((0, want.clone())), "{filter} query {q}");
        }
    }
    // A filter's own refusal of its arguments is a SERVER_ERROR naming the reason.
    let e = c.fget("topk", b"ten", &["u:1".into()]).unwrap_err();
    assert!(e.starts_with("SERVER_ERROR filter failed: "), "{e}");
    assert_eq!(c.stat("filters", "topk:calls"), "61");
    assert_eq!(c.stat("filters", "topk:errors"), "1");
}

#[test]
fn protocol_errors_keep_the_connection_in_sync() {
    let ex = examples();
    let srv = Server::start(&[
        "--filter",
        &arg("topk", ex.wasm("topk")),
        "--filter-max-keys",
        "3",
        "--filter-timeout-ms",
        "2000",
    ]);
    let mut c = Conn::new(&srv);
    c.set(
        "u:1",
        0,
        &records::encode_all(&[Record {
            user: 1,
            article: 2,
            ts: 3,
        }]),
    );
    let ok = Ok((
        0,
        records::encode_all(&[Record {
            user: 1,
            article: 2,
            ts: 3,
        }]),
    ));
    let keys = |n: usize| (0..n).map(|i| format!("u:{i}")).collect::<Vec<_>>();
    assert_eq!(
        c.fget("nope", b"10", &keys(2)),
        Err("CLIENT_ERROR unknown filter".into())
    );
    assert_eq!(
        c.fget("topk", b"10", &keys(4)),
        Err("CLIENT_ERROR too many keys".into())
    );
    assert_eq!(c.fget("topk", b"10", &keys(3)), ok);
    // An over-long argument block is swallowed whole, even arriving in pieces.
    let big = vec![b'1'; 64 * 1024 + 1];
    c.w.write_all(format!("fget topk {} u:1\r\n", big.len()).as_bytes())
        .unwrap();
    c.w.write_all(&big[..1000]).unwrap();
    c.w.flush().unwrap();
    c.w.write_all(&big[1000..]).unwrap();
    c.w.write_all(b"\r\n").unwrap();
    assert_eq!(c.line(), "CLIENT_ERROR filter arguments too long\r\n");
    assert_eq!(c.fget("topk", b"1", &keys(2)), ok);
    let long = "k".repeat(251);
    assert_eq!(
        c.fget("topk", b"1", &[long]),
        Err("CLIENT_ERROR bad command line format".into())
    );
    // A block that does not end in \r\n: the block is consumed, nothing more.
    c.w.write_all(b"fget topk\r\nfget topk 2 u:1\r\n1xyz")
        .unwrap();
    assert_eq!(c.line(), "ERROR\r\n");
    assert_eq!(c.line(), "CLIENT_ERROR bad data chunk\r\n");
    assert_eq!(c.fget("topk", b"1", &keys(2)), ok);
    c.w.write_all(b"get u:1\r\n").unwrap();
    assert!(c.line().starts_with("VALUE u:1 0 24"));
}

/// The tests that measure time against a deadline run one at a time: two of them side by side
/// fill both cores (cargo runs a binary's tests two at a time here) and measure each other.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TIMED: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TIMED.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn hostile_filters_fail_alone_within_their_limits() {
    let _alone = one_at_a_time();
    let ex = examples();
    let mut flags: Vec<String> = [
        "-t",
        "2",
        "--filter-timeout-ms",
        "200",
        "--filter-memory",
        "16m",
        "--filter-output-max",
        "64k",
    ]
    .map(String::from)
    .to_vec();
    for name in [
        "hostile_loop",
        "hostile_memory",
        "hostile_trap",
        "hostile_output",
        "hostile_stack",
        "topk",
    ] {
        flags.push("--filter".into());
        flags.push(arg(name, ex.wasm(name)));
    }
    let srv = Server::start(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    let mut c = Conn::new(&srv);
    let rec = records::encode_all(&[Record {
        user: 9,
        article: 8,
        ts: 7,
    }]);
    c.set("u:9", 0, &rec);
    let key = vec!["u:9".to_string()];
    let baseline = srv.rss_kb();
    let cases: [(&str, &[u8], &[&str]); 6] = [
        ("hostile_loop", b"", &["SERVER_ERROR filter timeout"]),
        (
            "hostile_memory",
            b"",
            &["SERVER_ERROR filter out of memory"],
        ),
        ("hostile_trap", b"", &["SERVER_ERROR filter trapped"]),
        ("hostile_stack", b"", &["SERVER_ERROR filter trapped"]),
        (
            "hostile_output",
            b"huge",
            &[
                "SERVER_ERROR filter output too large",
                "SERVER_ERROR filter out of memory",
            ],
        ),
        ("hostile_output", b"", &["SERVER_ERROR filter bad result"]),
    ];
    // Meanwhile another client keeps being answered, on its own connection.
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let bystander = s.spawn(|| {
            let mut b = Conn::new(&srv);
            let mut served = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                assert_eq!(b.fget("topk", b"5", &key), Ok((0, rec.clone())));
                b.w.write_all(b"get u:9\r\n").unwrap();
                assert!(b.line().starts_with("VALUE u:9 0 24"));
                let mut rest = vec![0; 24 + 2 + 5];
                b.r.read_exact(&mut rest).unwrap();
                served += 1;
            }
            served
        });
        for round in 0..5 {
            for (filter, args, want) in cases {
                let t = Instant::now();
                let got = c.fget(filter, args, &key).unwrap_err();
                assert!(
                    want.contains(&got.as_str()),
                    "{filter} round {round}: {got}"
                );
                // 200 ms deadline; a generous bound for a loaded test machine.
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "{filter} took {:?}",
                    t.elapsed()
                );
            }
            // The same connection goes on with a well-behaved filter.
            assert_eq!(c.fget("topk", b"5", &key), Ok((0, rec.clone())));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(
            bystander.join().unwrap() > 0,
            "the other client was never answered"
        );
    });
    // 30 hostile calls, several of which touched their whole 16 MiB: memory went back.
    let grown = srv.rss_kb().saturating_sub(baseline);
    assert!(grown < 64 * 1024, "RSS grew by {grown} KiB");
    // A call the job pool's watchdog answered (its deadline passed) is counted when its guest
    // stops, which on a loaded machine can come after the reply.
    let until = Instant::now() + Duration::from_secs(30);
    while c.stat("filters", "filter_errors") != "30" {
        assert!(
            Instant::now() < until,
            "{} errors counted",
            c.stat("filters", "filter_errors")
        );
        std::thread::yield_now();
    }
    assert_eq!(c.stat("filters", "filter_timeouts"), "5");
    assert_eq!(c.stat("filters", "hostile_memory:out_of_memory"), "5");
}

#[test]
fn sighup_reloads_filters_and_a_broken_one_keeps_the_last_good_version() {
    let dir = std::env::temp_dir().join(format!("mnemod-filter-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("f.wat");
    // Replies with flags N and no output.
    let module = |n: u32| {
        format!(
            r#"(module (memory (export "memory") 1)
  (func (export "mnemo_abi_version") (result i32) (i32.const 1))
  (func (export "mnemo_filter") (param i32 i32) (result i32)
    (i32.store (i32.const 4) (i32.const {n})) (i32.const 0)))"#
        )
    };
    std::fs::write(&path, module(1)).unwrap();
    let srv = Server::start(&[
        "--filter",
        &arg("f", path.clone()),
        "--filter-timeout-ms",
        "2000",
    ]);
    let mut c = Conn::new(&srv);
    assert_eq!(c.fget("f", b"", &[]), Ok((1, vec![])));
    let hup = || {
        // SAFETY: kill with a live child's pid.
        assert_eq!(
            unsafe { libc::kill(srv.child.id() as i32, libc::SIGHUP) },
            0
        );
    };
    // Polls until the reload shows (the maintenance thread reloads within about a second).
    let wait_for = |n: u32, c: &mut Conn| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got = c.fget("f", b"", &[]).expect("a filter always answers");
            if got.0 == n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "reload to {n} never showed (still {})",
                got.0
            );
            std::thread::yield_now();
        }
    };
    std::fs::write(&path, module(2)).unwrap();
    hup();
    wait_for(2, &mut c);
    // A broken file: every call in between is answered by version 2; then a good one again.
    std::fs::write(&path, "(module (func").unwrap();
    hup();
    std::fs::write(dir.join("marker"), "").unwrap();
    for _ in 0..50 {
        assert_eq!(c.fget("f", b"", &[]), Ok((2, vec![])));
    }
    std::fs::write(&path, module(3)).unwrap();
    hup();
    wait_for(3, &mut c);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_filter_that_cannot_load_stops_the_start_up_with_one_line() {
    let bad = std::env::temp_dir().join(format!("mnemod-bad-filter-{}.wasm", std::process::id()));
    std::fs::write(&bad, b"not wasm").unwrap();
    for flag in ["--filter", "--native-filter"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mnemod"))
            .args(["-p", "1", flag, &arg("f", bad.clone())])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("f") && err.contains(&bad.display().to_string()),
            "{err}"
        );
    }
    let _ = std::fs::remove_file(&bad);
}

#[test]
fn mnemo_client_splits_an_fget_by_server_and_merges_the_top_k() {
    let ex = examples();
    let flags = [
        "--filter-timeout-ms",
        "2000",
        "--filter",
        &arg("topk", ex.wasm("topk")),
    ];
    let servers = [Server::start(&flags), Server::start(&flags)];
    let list = format!(
        "127.0.0.1:{},127.0.0.1:{}",
        servers[0].port, servers[1].port
    );
    let cfg = mnemo_client::Config {
        hash_tags: true,
        ..mnemo_client::Config::default()
    };
    let client = mnemo_client::blocking::Client::from_list(&list, cfg).unwrap();
    let mut conns: Vec<Conn> = servers.iter().map(Conn::new).collect();
    let mut rng = Rng(0x5eed_0002);
    // Keys tagged by group: a group's keys share a server (the seed's colocation). Forty
    // groups, so both servers get some whatever ring their ports make.
    let keys: Vec<String> = (0..200)
        .map(|i| format!("{{g:{}}}:u:{i}", i % 40))
        .collect();
    let mut all = Vec::new();
    for key in &keys {
        let recs: Vec<Record> = (0..30)
            .map(|_| Record {
                user: rng.below(50),
                article: rng.below(9),
                ts: rng.below(400),
            })
            .collect();
        let port = client.route(key).unwrap().port;
        let c = conns
            .iter_mut()
            .zip(&servers)
            .find(|(_, s)| s.port == port)
            .unwrap()
            .0;
        c.set(key, 0, &records::encode_all(&recs));
        all.extend(recs);
    }
    let parts = client.fget("topk", b"10", &keys).unwrap();
    assert_eq!(parts.len(), 2, "both servers hold some keys");
    assert_eq!(parts.iter().map(|p| p.keys).sum::<usize>(), keys.len());
    for p in &parts {
        assert_eq!(p.data.len(), 10 * records::RECORD_LEN);
    }
    let merged = client
        .fget_merge("topk", b"10", &keys, mnemo_client::filter::top_k(10))
        .unwrap();
    assert_eq!(
        merged,
        records::encode_all(&records::top_k(all.iter().copied(), 10))
    );
    // One group's keys sit on one server: one part, already the final answer.
    let group: Vec<&String> = keys.iter().filter(|k| k.starts_with("{g:3}:")).collect();
    let parts = client.fget("topk", b"5", &group).unwrap();
    assert_eq!(parts.len(), 1);
    // A server's refusal reaches the caller with its message.
    let err = client.fget("nope", b"", &keys).unwrap_err().to_string();
    assert!(err.contains("CLIENT_ERROR unknown filter"), "{err}");
}

#[test]
fn an_unauthenticated_fget_keeps_the_connection_in_sync() {
    let ex = examples();
    let auth = std::env::temp_dir().join(format!("mnemod-fget-auth-{}", std::process::id()));
    std::fs::write(&auth, "alice:secret\n").unwrap();
    // A deadline far above the default 5 ms: the call must not time out on a loaded machine.
    let srv = Server::start(&[
        "-Y",
        &auth.display().to_string(),
        "--filter-timeout-ms",
        "2000",
        "--filter",
        &arg("topk", ex.wasm("topk")),
    ]);
    let mut c = Conn::new(&srv);
    // Refused whole, the over-long block included: its bytes are never read as commands.
    let big = vec![b'x'; 64 * 1024 + 10];
    c.w.write_all(format!("fget topk {} u:1\r\n", big.len()).as_bytes())
        .unwrap();
    c.w.write_all(&big).unwrap();
    c.w.write_all(b"\r\nfget topk 2 u:1\r\n10\r\n").unwrap();
    assert_eq!(c.line(), "CLIENT_ERROR unauthenticated\r\n");
    assert_eq!(c.line(), "CLIENT_ERROR unauthenticated\r\n");
    c.set("auth", 0, b"alice secret");
    assert_eq!(c.fget("topk", b"10", &["u:1".into()]), Ok((0, vec![])));
    let _ = std::fs::remove_file(&auth);
}

const LOOPS: [&str; 2] = ["--io-loop=uring", "--io-loop=epoll"];

/// The server's threads whose name starts with `prefix`.
fn threads(srv: &Server, prefix: &str) -> usize {
    let dir = format!("/proc/{}/task", srv.child.id());
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|t| {
            let comm = t.as_ref().unwrap().path().join("comm");
            std::fs::read_to_string(comm).is_ok_and(|n| n.starts_with(prefix))
        })
        .count()
}

/// Issue 49: a short call runs on the worker that read it (the job pool, which starts with
/// its first job, never starts), and a call that is not brief goes to the pool, which answers
/// it as before; the brief attempt given up is not counted as a call.
#[test]
fn a_brief_call_is_answered_on_the_worker_and_a_long_one_by_the_pool() {
    let ex = examples();
    let srv = Server::start(&[
        "--filter",
        &arg("topk", ex.wasm("topk")),
        "--filter",
        &arg("spin", ex.wasm("hostile_loop")),
    ]);
    let mut c = Conn::new(&srv);
    let mut rng = Rng(7);
    let users = load_users(&mut c, &mut rng, 50);
    let keys: Vec<String> = (0..50).map(|i| format!("u:{i}")).collect();
    // A worker preempted past two epoch ticks (a loaded test machine) gives its call up to the
    // pool, and that filter's calls go there for a second: calls until 20 were brief.
    let (mut calls, until) = (0, Instant::now() + Duration::from_secs(60));
    loop {
        let (_, out) = c.fget("topk", b"10", &keys).unwrap();
        assert!(!out.is_empty());
        calls += 1;
        let brief: u32 = c.stat("filters", "topk:brief").parse().unwrap();
        if brief >= 20 {
            break;
        }
        assert!(
            Instant::now() < until,
            "{brief} of {calls} calls were brief"
        );
    }
    assert!(users.iter().any(|u| u.is_some()));
    assert_eq!(c.stat("filters", "topk:calls"), calls.to_string());
    if calls == 20 {
        assert_eq!(
            threads(&srv, "mnemo-job"),
            0,
            "no call went to the job pool"
        );
    }
    assert_eq!(
        c.fget("spin", b"", &["k".into()]),
        Err("SERVER_ERROR filter timeout".into())
    );
    assert!(
        threads(&srv, "mnemo-job") > 0,
        "the long call ran on the pool"
    );
    let until = Instant::now() + Duration::from_secs(30);
    while c.stat("filters", "spin:calls") != "1" {
        assert!(Instant::now() < until, "the call was counted once");
        std::thread::yield_now();
    }
    assert_eq!(c.stat("filters", "spin:timeouts"), "1");
    assert_eq!(c.stat("filters", "spin:brief"), "0");
}

/// Issue 36's setting: one worker (`-t 1`, so every connection shares it), 8 clients each
/// pipelining 20 calls of a filter that runs to its deadline, and a `get` client on the same
/// worker. Filter calls run on the job pool, not on the event loop: the get's p50 stays within
/// the deadline and its p95 within four times it. (When the calls ran on the event loop, each get waited for other
/// clients' turns of 20 deadline-length calls: p50 in the hundreds of milliseconds.)
#[test]
fn a_get_waits_for_no_filter_call_on_its_worker() {
    let _alone = one_at_a_time();
    let ex = examples();
    // Long enough that a loaded 2-core machine's scheduling noise (other builds and tests)
    // stays well inside 2x; the calls ran on the worker before: 8 s of them per round here.
    const DEADLINE_MS: u64 = 25;
    const CLIENTS: usize = 8;
    const CALLS: usize = 20;
    for io_loop in LOOPS {
        let timeout = DEADLINE_MS.to_string();
        let spin = arg("spin", ex.wasm("hostile_loop"));
        let srv = Server::start(&[
            io_loop,
            "-t",
            "1",
            "--filter-timeout-ms",
            &timeout,
            "--filter",
            &spin,
        ]);
        let mut g = Conn::new(&srv);
        g.set("k", 0, b"v");
        // Connected before any call is sent: the get client is not queued behind them.
        let mut spinners: Vec<Conn> = (0..CLIENTS).map(|_| Conn::new(&srv)).collect();
        let done = std::sync::atomic::AtomicUsize::new(0);
        let mut waits = Vec::new();
        std::thread::scope(|s| {
            for c in spinners.iter_mut() {
                let done = &done;
                s.spawn(move || {
                    for _ in 0..CALLS {
                        c.send_fget("spin", b"", &["k".to_string()]);
                    }
                    for i in 0..CALLS {
                        assert_eq!(
                            c.read_fget("spin"),
                            Err("SERVER_ERROR filter timeout".into()),
                            "call {i}"
                        );
                    }
                    done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                });
            }
            while done.load(std::sync::atomic::Ordering::Relaxed) < CLIENTS {
                let t = Instant::now();
                g.w.write_all(b"get k\r\n").unwrap();
                assert_eq!(g.line(), "VALUE k 0 1\r\n");
                assert_eq!(g.line(), "v\r\n");
                assert_eq!(g.line(), "END\r\n");
                waits.push(t.elapsed());
            }
        });
        waits.sort();
        let p99 = waits[waits.len() * 99 / 100];
        let (p50, max) = (waits[waits.len() / 2], waits[waits.len() - 1]);
        eprintln!("{io_loop}: {} gets during {} calls of {DEADLINE_MS} ms: p50 {p50:?} p99 {p99:?} max {max:?}", waits.len(), CLIENTS * CALLS);
        // What this guards against is a p50 in the hundreds of milliseconds; a loaded machine's
        // scheduling puts a few gets of hundreds past 2x the deadline.
        let p95 = waits[waits.len() * 95 / 100];
        assert!(
            p50 <= Duration::from_millis(DEADLINE_MS),
            "{io_loop}: get p50 {p50:?} (p95 {p95:?}, max {max:?})"
        );
        assert!(
            p95 <= Duration::from_millis(4 * DEADLINE_MS),
            "{io_loop}: get p95 {p95:?} (p50 {p50:?}, max {max:?})"
        );
        assert!(
            waits.len() >= 20,
            "{io_loop}: only {} gets were answered while the calls ran",
            waits.len()
        );
        // Every call timed out. A call the job pool's watchdog answered is counted when its
        // guest stops, which on a loaded machine can come after the last reply.
        let until = Instant::now() + Duration::from_secs(30);
        while g.stat("filters", "spin:timeouts") != (CLIENTS * CALLS).to_string() {
            assert!(
                Instant::now() < until,
                "{io_loop}: {} timeouts counted",
                g.stat("filters", "spin:timeouts")
            );
            std::thread::yield_now();
        }
    }
}

/// Pipelined on one connection, replies come back in request order around the calls the job
/// pool runs, and each call reads the store as it stood at its place in the pipeline (a
/// later `set` of its key does not reach it), under both loops.
#[test]
fn pipelined_replies_around_filter_calls_leave_in_request_order() {
    let ex = examples();
    let one = |ts: u64| {
        records::encode_all(&[Record {
            user: 1,
            article: 2,
            ts,
        }])
    };
    for io_loop in LOOPS {
        let srv = Server::start(&[
            io_loop,
            "--filter-timeout-ms",
            "2000",
            "--filter",
            &arg("topk", ex.wasm("topk")),
        ]);
        let mut c = Conn::new(&srv);
        c.set("u:1", 0, &one(1));
        let mut req = Vec::new();
        for round in 0..50u64 {
            req.extend_from_slice(b"fget topk 1 u:1\r\n1\r\nget u:1\r\n");
            let v = one(round + 2);
            req.extend_from_slice(format!("set u:1 0 0 {}\r\n", v.len()).as_bytes());
            req.extend_from_slice(&v);
            req.extend_from_slice(b"\r\nfget nope 0 u:1\r\n\r\nversion\r\n");
        }
        c.w.write_all(&req).unwrap();
        for round in 0..50u64 {
            let before = one(round + 1);
            assert_eq!(
                c.read_fget("topk"),
                Ok((0, before.clone())),
                "{io_loop} round {round}"
            );
            assert_eq!(
                c.line(),
                format!("VALUE u:1 0 {}\r\n", before.len()),
                "{io_loop} round {round}"
            );
            let mut v = vec![0; before.len() + 2];
            c.r.read_exact(&mut v).unwrap();
            assert_eq!(&v[..before.len()], &before[..]);
            assert_eq!(c.line(), "END\r\n");
            assert_eq!(c.line(), "STORED\r\n");
            assert_eq!(c.line(), "CLIENT_ERROR unknown filter\r\n");
            assert_eq!(c.line(), "VERSION 1.6.45\r\n", "{io_loop} round {round}");
        }
    }
}

/// Issue 36: with `--filter-memory=256m` a filter producing 64 MiB of output overran a 5 ms
/// deadline to 40-52 ms (one `memory.fill` over fresh pages runs to its end, and the dead
/// instance's unmapping followed). The reply now leaves by the deadline whatever the guest
/// does: the job pool's watchdog answers for a call past it.
#[test]
fn the_deadline_holds_for_a_filter_filling_huge_output() {
    let _alone = one_at_a_time();
    let ex = examples();
    const DEADLINE_MS: u64 = 20;
    let timeout = DEADLINE_MS.to_string();
    let srv = Server::start(&[
        "--filter-timeout-ms",
        &timeout,
        "--filter-memory",
        "256m",
        "--filter",
        &arg("out", ex.wasm("hostile_output")),
    ]);
    let mut c = Conn::new(&srv);
    let mut times = Vec::new();
    for i in 0..5 {
        // The guest of the call before ran on after its reply (that is the point): each call
        // starts once the last one has ended (counted), with the job pool idle.
        let until = Instant::now() + Duration::from_secs(30);
        while c.stat("filters", "out:calls") != i.to_string() {
            assert!(Instant::now() < until, "call {} never ended", i - 1);
            std::thread::yield_now();
        }
        let t = Instant::now();
        let got = c.fget("out", b"huge", &["k".into()]).unwrap_err();
        times.push(t.elapsed());
        assert_eq!(got, "SERVER_ERROR filter timeout", "call {i}");
    }
    // The connection is in sync after the late results were dropped.
    c.w.write_all(b"version\r\n").unwrap();
    assert_eq!(c.line(), "VERSION 1.6.45\r\n");
    times.sort();
    eprintln!("huge output under a {DEADLINE_MS} ms deadline: {times:?}");
    // The best of five: the deadline, the watchdog's 2 ms, and room for scheduling (the best
    // was 31.7 ms at load average 10). (The others can also wait for a new instance's mapping
    // while the reaper unmaps the last one's 64 MiB, about 8 ms here, and for the machine's
    // other load.) Before the watchdog and the reaper, every call took the whole fill and
    // unmapping: 50.7-52.6 ms here.
    assert!(
        times[0] <= Duration::from_millis(DEADLINE_MS + 25),
        "fastest reply {:?}: {times:?}",
        times[0]
    );
}

/// Issue 36: the deadline counts from the call's submission, time in the job pool's queue
/// included. With one pool thread, calls of a filter filling huge output come back to back
/// from 4 clients: each guest runs on after its reply (one uninterruptible `memory.fill`), and
/// the calls behind it waited for it in the queue (25-113 ms at a 5 ms deadline). The
/// watchdog now answers a queued call too, at its submission + deadline + 2 ms; and `stats
/// filters` counts every call as the timeout its client got.
#[test]
fn the_deadline_counts_from_submission_whatever_the_queue() {
    let _alone = one_at_a_time();
    let ex = examples();
    const DEADLINE_MS: u64 = 20;
    const CLIENTS: usize = 4;
    const CALLS: usize = 5;
    let timeout = DEADLINE_MS.to_string();
    let out = arg("out", ex.wasm("hostile_output"));
    let srv = Server::start(&[
        "-t",
        "1",
        "--job-threads",
        "1",
        "--filter-timeout-ms",
        &timeout,
        "--filter-memory",
        "256m",
        "--filter",
        &out,
    ]);
    let mut clients: Vec<Conn> = (0..CLIENTS).map(|_| Conn::new(&srv)).collect();
    let mut times = std::thread::scope(|s| {
        let runs: Vec<_> = clients
            .iter_mut()
            .map(|c| {
                s.spawn(move || {
                    (0..CALLS)
                        .map(|i| {
                            let t = Instant::now();
                            assert_eq!(
                                c.fget("out", b"huge", &["k".into()]),
                                Err("SERVER_ERROR filter timeout".into()),
                                "call {i}"
                            );
                            t.elapsed()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        runs.into_iter()
            .flat_map(|r| r.join().unwrap())
            .collect::<Vec<_>>()
    });
    times.sort();
    let (p50, max) = (times[times.len() / 2], times[times.len() - 1]);
    eprintln!("{} huge-output calls from {CLIENTS} clients, 1 job thread, {DEADLINE_MS} ms deadline: p50 {p50:?} max {max:?}", times.len());
    // The deadline and the watchdog's 2 ms, with room for a loaded machine's scheduling (p50
    // reached 31 ms beside two builds). What this guards against is far above that: counted
    // from the start of its run, a queued call waited out the whole guest before it (its fill
    // takes ~50 ms) and then its own deadline, so p50 went past 70 ms with 4 clients.
    // p50 past 70 ms is what this guards against; the slowest call only shows no call waited
    // for the queue without bound (one scheduling stall of the watchdog can add 50 ms).
    assert!(
        p50 <= Duration::from_millis(DEADLINE_MS + 30),
        "p50 {p50:?}: {times:?}"
    );
    assert!(
        max <= Duration::from_millis(DEADLINE_MS * 10),
        "max {max:?}: {times:?}"
    );
    // Every call counts as what its client got: a timeout, once its guest (if it ran) stopped.
    let mut c = Conn::new(&srv);
    let n = (CLIENTS * CALLS).to_string();
    let until = Instant::now() + Duration::from_secs(30);
    while c.stat("filters", "out:calls") != n {
        assert!(
            Instant::now() < until,
            "{} calls counted",
            c.stat("filters", "out:calls")
        );
        std::thread::yield_now();
    }
    assert_eq!(
        (
            c.stat("filters", "out:timeouts"),
            c.stat("filters", "out:errors")
        ),
        (n.clone(), n)
    );
}
