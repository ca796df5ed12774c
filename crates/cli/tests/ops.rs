//! The `mnemo` binary's operator commands against real servers, and `mnemo route` against real
//! pylibmc: the server that holds each of 10,000 keys after pylibmc (`ketama_weighted`) stored
//! it is the one `mnemo route` names. `mnemo fget` against scripted servers (the client's
//! tests/common/fake.rs), until mnemod speaks fget.

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::fake::{parse_fget, value_reply, Fake};
use common::{python, Server};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn mnemo(servers: &str, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mnemo"));
    cmd.arg("--servers").arg(servers).args(args);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run mnemo");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "mnemo failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn operator_commands_on_both_servers() {
    for srv in Server::both(&[]) {
        let s = srv.addr();
        assert!(ok(&mnemo(&s, &["set", "greeting", "hello world"], None))
            .starts_with("STORED greeting on "));
        assert_eq!(ok(&mnemo(&s, &["get", "greeting"], None)), "hello world\n");
        // A value from stdin, stored as bytes.
        ok(&mnemo(
            &s,
            &["set", "--bytes", "blob", "-"],
            Some(b"\x00\x01\x02"),
        ));
        assert_eq!(mnemo(&s, &["get", "blob"], None).stdout, b"\x00\x01\x02\n");
        ok(&mnemo(&s, &["set", "n", "10"], None));
        assert_eq!(ok(&mnemo(&s, &["incr", "n", "5"], None)), "15\n");
        assert_eq!(ok(&mnemo(&s, &["decr", "n"], None)), "14\n");
        assert_eq!(ok(&mnemo(&s, &["touch", "n", "100"], None)), "TOUCHED n\n");
        assert_eq!(ok(&mnemo(&s, &["delete", "n"], None)), "DELETED n\n");
        // Missing keys: stderr and exit 1.
        let miss = mnemo(&s, &["get", "n"], None);
        assert_eq!(miss.status.code(), Some(1));
        assert_eq!(String::from_utf8_lossy(&miss.stderr), "n: not found\n");
        // stats: one block per server with the general counters.
        let stats = ok(&mnemo(&s, &["stats"], None));
        assert!(stats.starts_with(&format!("# {s}\n")), "{stats}");
        assert!(
            stats
                .lines()
                .any(|l| l.starts_with("cmd_set ") || l.starts_with("cmd_set  ")),
            "{stats}"
        );
        let settings = ok(&mnemo(&s, &["stats", "settings"], None));
        assert!(
            settings
                .lines()
                .any(|l| l.split_whitespace().next() == Some("maxconns")),
            "{settings}"
        );
        // flush: everything gone.
        assert_eq!(ok(&mnemo(&s, &["flush"], None)), format!("flushed {s}\n"));
        assert_eq!(mnemo(&s, &["get", "greeting"], None).status.code(), Some(1));
    }
    // A dead server is an error, not a hang.
    let dead = {
        let srv = Server::mnemod(&[]);
        srv.addr()
    };
    let out = mnemo(&dead, &["get", "x"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&dead));
}

#[test]
fn keys_lists_what_each_server_holds() {
    for srv in Server::both(&[]) {
        let s = srv.addr();
        for k in ["alpha", "beta/1", "gamma%2", "délta"] {
            ok(&mnemo(&s, &["set", k, "v"], None));
        }
        ok(&mnemo(&s, &["set", "--exptime", "1000", "ttl", "v"], None));
        ok(&mnemo(&s, &["delete", "alpha"], None));
        // memcached's crawler may skip an item it finds busy: ask until all keys show (mnemod's
        // dump is complete the first time).
        let mut keys = Vec::new();
        for _ in 0..100 {
            keys = ok(&mnemo(&s, &["keys"], None))
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>();
            keys.sort();
            if keys.len() == 4 || srv.name == "mnemod" {
                break;
            }
        }
        assert_eq!(keys, ["beta/1", "délta", "gamma%2", "ttl"], "{}", srv.name);
        let long = ok(&mnemo(&s, &["keys", "--long"], None));
        for l in long.lines() {
            let never = l.contains(&format!("\t{s}\texp=never\tsize="));
            let timed = l.starts_with("ttl\t") && l.contains("\texp=1") && !l.contains("never");
            assert!(never || timed, "{}: {l}", srv.name);
        }
    }
}

fn route_keys() -> Vec<String> {
    (0..10_000)
        .map(|i| match i % 3 {
            0 => format!("user:{i}"),
            1 => format!("session/{}/{}", i * 31, i % 7),
            _ => format!("{}{i}", "k".repeat(1 + i % 150)),
        })
        .collect()
}

fn route_matches_pylibmc(weights: &[u32]) {
    let Some(py) = python() else { return };
    let servers: Vec<Server> = weights.iter().map(|_| Server::memcached(&[])).collect();
    let list = servers
        .iter()
        .zip(weights)
        .map(|(s, w)| format!("{}:{w}", s.addr()))
        .collect::<Vec<_>>()
        .join(",");
    let keys = route_keys();
    let keyfile = std::env::temp_dir().join(format!(
        "mnemo-route-{}-{}.txt",
        std::process::id(),
        weights.len()
    ));
    std::fs::write(&keyfile, keys.join("\n")).unwrap();
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../client/tests/interop/ketama_pylibmc.py");
    let held = Command::new(py)
        .arg(script)
        .arg(&list)
        .arg(&keyfile)
        .output()
        .unwrap();
    assert!(
        held.status.success(),
        "{}",
        String::from_utf8_lossy(&held.stderr)
    );
    let ours = ok(&mnemo(
        &list,
        &["route", "-"],
        Some(keys.join("\n").as_bytes()),
    ));
    let _ = std::fs::remove_file(&keyfile);
    let held = String::from_utf8(held.stdout).unwrap();
    let (mut same, mut n) = (0, 0);
    for (theirs, ours) in held.lines().zip(ours.lines()) {
        let (k1, s1) = theirs.split_once('\t').unwrap();
        let (k2, s2) = ours.split_once('\t').unwrap();
        assert_eq!(k1, k2);
        n += 1;
        if s1 == s2 {
            same += 1;
        }
    }
    assert_eq!(n, keys.len());
    assert_eq!(
        same,
        n,
        "weights {weights:?}: {} of {n} keys routed elsewhere than pylibmc put them",
        n - same
    );
}

#[test]
fn route_names_the_server_pylibmc_used_three_servers() {
    route_matches_pylibmc(&[2, 1, 3]);
}

#[test]
fn route_names_the_server_pylibmc_used_five_servers() {
    route_matches_pylibmc(&[1, 4, 1, 2, 3]);
}

/// A scripted fget server: key `kN` holds the record (user N, article 2N, ts N); the filter's
/// output is every record of its keys. `echo` answers with its arguments; `slow` times out.
fn fget_server() -> Fake {
    Fake::start(|req| {
        let (filter, args, keys) = parse_fget(req);
        match filter.as_str() {
            "echo" => value_reply("echo", 0, &args),
            "slow" => b"SERVER_ERROR filter timeout\r\n".to_vec(),
            _ => {
                let mut data = Vec::new();
                for k in keys {
                    let n: u64 = k[1..].parse().unwrap();
                    for w in [n, 2 * n, n] {
                        data.extend_from_slice(&w.to_le_bytes());
                    }
                }
                value_reply(&filter, 0, &data)
            }
        }
    })
}

#[test]
fn fget_merges_what_each_server_filtered() {
    let fakes = [fget_server(), fget_server()];
    let list = format!("{},{}", fakes[0].addr(), fakes[1].addr());
    // Forty keys: enough that both servers get some whatever ring their ports make (with
    // twelve, one run in CI sent all of them to one server).
    let keys: Vec<String> = (1..=40).map(|n| format!("k{n}")).collect();
    let key_args: Vec<&str> = keys.iter().map(String::as_str).collect();
    let line = |n: u64| format!("{n}\t{}\t{n}", 2 * n);

    // topk:3: the three newest over both servers, newest first.
    let args = [
        &[
            "fget",
            "all",
            "--arg",
            "3",
            "--merge",
            "topk:3",
            "--records",
        ][..],
        &key_args,
    ]
    .concat();
    let top = ok(&mnemo(&list, &args, None));
    assert_eq!(top, [40, 39, 38].map(|n| line(n) + "\n").concat());
    // Both servers were asked (the keys spread over them).
    assert!(fakes.iter().all(|f| !f.received().is_empty()));

    // concat (the default), keys from stdin: every record, each server's in its key order.
    let all = ok(&mnemo(
        &list,
        &["fget", "all", "--records", "-"],
        Some(keys.join("\n").as_bytes()),
    ));
    let mut got: Vec<&str> = all.lines().collect();
    got.sort_by_key(|l| l.split('\t').next().unwrap().parse::<u64>().unwrap());
    assert_eq!(got, (1..=40).map(line).collect::<Vec<_>>());

    // Raw bytes out, arguments in hex.
    let raw = mnemo(&list, &["fget", "echo", "--arg-hex", "00ff0a", "k1"], None);
    assert!(raw.status.success());
    assert_eq!(raw.stdout, b"\x00\xff\x0a");

    // A filter failure: the server's message on stderr, exit 1, nothing on stdout.
    let failed = mnemo(&list, &["fget", "slow", "k1"], None);
    assert_eq!(failed.status.code(), Some(1));
    assert!(failed.stdout.is_empty());
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(
        err.starts_with("mnemo: ") && err.contains("SERVER_ERROR filter timeout"),
        "{err}"
    );

    // Bad arguments are refused before anything is sent.
    let bad = mnemo(&list, &["fget", "all", "--merge", "topk:0", "k1"], None);
    assert_eq!(bad.status.code(), Some(2));
}
