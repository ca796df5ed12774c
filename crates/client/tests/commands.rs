//! mnemo-client against real servers: every command on mnemod and on memcached (the same
//! assertions on both), multi-key commands fanned out over several servers, compression as
//! stored on the server, and ejection of a server that goes away.

mod common;

use common::Server;
use mnemo_client::blocking;
use mnemo_client::{
    Algorithm, Client, Compression, Config, ServerSpec, SetOptions, StoreCmd, StoreOutcome, Value,
};
use std::time::Duration;

fn spec(s: &Server) -> ServerSpec {
    ServerSpec::new("127.0.0.1", s.port)
}

fn client(servers: &[&Server], cfg: Config) -> blocking::Client {
    blocking::Client::new(servers.iter().map(|s| spec(s)).collect(), cfg).unwrap()
}

fn text(n: usize) -> String {
    let words = [
        "cache", "memory", "segment", "server", "value", "key", "flag", "mnemo",
    ];
    (0..n)
        .map(|i| words[(i * 7 + i / 3) % words.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn every_command_on_both_servers() {
    for srv in Server::both(&[]) {
        let c = client(&[&srv], Config::default());
        let who = srv.name;
        // set / get of each value kind.
        c.set("b", &b"\x00raw\xff"[..], 0).unwrap();
        c.set("t", "héllo", 0).unwrap();
        c.set("i", 41i64, 0).unwrap();
        assert_eq!(
            c.get("b").unwrap(),
            Some(Value::Bytes(b"\x00raw\xff".to_vec())),
            "{who}"
        );
        assert_eq!(
            c.get("t").unwrap(),
            Some(Value::Text("héllo".into())),
            "{who}"
        );
        assert_eq!(c.get("i").unwrap(), Some(Value::Int(41)), "{who}");
        assert_eq!(c.get("missing").unwrap(), None, "{who}");
        // incr/decr work on integers the serde stored.
        assert_eq!(c.incr("i", 1).unwrap(), Some(42), "{who}");
        assert_eq!(c.decr("i", 100).unwrap(), Some(0), "{who}");
        assert_eq!(c.incr("nope", 1).unwrap(), None, "{who}");
        // add / replace / append / prepend.
        let a = c.async_client();
        assert!(!c.block_on(a.add("t", "x", 0)).unwrap(), "{who}");
        assert!(c.block_on(a.add("new", "x", 0)).unwrap(), "{who}");
        assert!(!c.block_on(a.replace("absent", "x", 0)).unwrap(), "{who}");
        assert!(c.block_on(a.replace("new", "y", 0)).unwrap(), "{who}");
        assert!(c.block_on(a.append("b", b"<")).unwrap(), "{who}");
        assert!(c.block_on(a.prepend("b", b">")).unwrap(), "{who}");
        assert_eq!(
            c.get("b").unwrap(),
            Some(Value::Bytes(b">\x00raw\xff<".to_vec())),
            "{who}"
        );
        assert!(!c.block_on(a.append("absent", b"x")).unwrap(), "{who}");
        // cas: the token from gets works once.
        let (_, cas) = c.gets("new").unwrap().unwrap();
        assert_eq!(
            c.block_on(a.cas("new", "z", cas, 0)).unwrap(),
            StoreOutcome::Stored,
            "{who}"
        );
        assert_eq!(
            c.block_on(a.cas("new", "w", cas, 0)).unwrap(),
            StoreOutcome::Exists,
            "{who}"
        );
        assert_eq!(
            c.block_on(a.cas("absent", "w", cas, 0)).unwrap(),
            StoreOutcome::NotFound,
            "{who}"
        );
        assert_eq!(
            c.get("new").unwrap(),
            Some(Value::Text("z".into())),
            "{who}"
        );
        // touch / gat / gats.
        assert!(c.touch("new", 100).unwrap(), "{who}");
        assert!(!c.touch("absent", 100).unwrap(), "{who}");
        assert_eq!(
            c.block_on(a.gat("new", 200)).unwrap(),
            Some(Value::Text("z".into())),
            "{who}"
        );
        assert!(
            c.block_on(a.gats("new", 300)).unwrap().unwrap().1 > 0,
            "{who}"
        );
        // A past absolute exptime: stored, then gone.
        c.set_with("old", "x", &SetOptions::exptime(1_000_000_000))
            .unwrap();
        assert_eq!(c.get("old").unwrap(), None, "{who}");
        // delete, noreply (followed by a request, so the server has applied it).
        assert!(c.delete("new").unwrap(), "{who}");
        assert!(!c.delete("new").unwrap(), "{who}");
        c.set_with(
            "q",
            "quiet",
            &SetOptions {
                noreply: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            c.get("q").unwrap(),
            Some(Value::Text("quiet".into())),
            "{who}"
        );
        // multi-key.
        let keys: Vec<String> = (0..300).map(|i| format!("m{i}")).collect();
        let items: Vec<(&str, i64)> = keys
            .iter()
            .map(|k| (k.as_str(), k[1..].parse().unwrap()))
            .collect();
        let out = c.set_multi(&items, &SetOptions::default()).unwrap();
        assert!(out.iter().all(|o| *o == StoreOutcome::Stored), "{who}");
        let mut ask: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
        ask.push("missing");
        let got = c.get_multi(&ask).unwrap();
        assert_eq!(got.len(), 300, "{who}");
        assert_eq!(got[&b"m299".to_vec()], Value::Int(299), "{who}");
        assert_eq!(
            c.block_on(a.delete_multi(&["m1", "m2", "missing"]))
                .unwrap(),
            vec![true, true, false]
        );
        // Keys the protocol cannot carry are refused before anything is sent.
        assert!(
            matches!(c.get("bad key"), Err(mnemo_client::Error::BadKey(_))),
            "{who}"
        );
        assert!(
            matches!(c.get("k".repeat(251)), Err(mnemo_client::Error::BadKey(_))),
            "{who}"
        );
        // stats / version / flush_all.
        let stats = c.stats(None);
        let (_, s) = &stats[0];
        let s = s.as_ref().unwrap();
        assert!(
            s.iter()
                .any(|(k, v)| k == "cmd_get" && v.parse::<u64>().unwrap() > 0),
            "{who}"
        );
        assert!(
            c.version()[0].1.as_ref().unwrap().starts_with("1."),
            "{who}"
        );
        assert!(c.flush_all(None)[0].1.is_ok(), "{who}");
        assert_eq!(c.get("t").unwrap(), None, "{who}");
    }
}

#[test]
fn server_errors_come_back_as_errors() {
    for srv in Server::both(&[]) {
        let c = client(
            &[&srv],
            Config {
                compression: Compression::off(),
                ..Config::default()
            },
        );
        // Over the default 1 MB item limit.
        let err = c.set("big", &vec![b'x'; 2 << 20][..], 0).unwrap_err();
        assert!(
            matches!(&err, mnemo_client::Error::Server { line, .. } if line == "SERVER_ERROR object too large for cache"),
            "{}: {err}",
            srv.name
        );
        // The connection is still usable after the error.
        c.set("small", "ok", 0).unwrap();
        assert_eq!(c.get("small").unwrap(), Some(Value::Text("ok".into())));
    }
}

#[test]
fn compression_as_stored_on_the_server() {
    let srv = Server::mnemod(&[]);
    let long = text(20_000);
    for (cfg, bit) in [(Config::default(), 32), (Config::python(), 8)] {
        let c = client(&[&srv], cfg);
        c.set("long", long.as_str(), 0).unwrap();
        let raw = c.get_raw("long").unwrap().unwrap();
        assert_eq!(raw.flags, 16 | bit, "text, compressed");
        assert!(
            raw.data.len() * 5 < long.len(),
            "{} of {} bytes stored",
            raw.data.len(),
            long.len()
        );
        assert_eq!(c.get("long").unwrap(), Some(Value::Text(long.clone())));
        // The per-call switch stores it plain.
        c.set_with(
            "plain",
            long.as_str(),
            &SetOptions {
                compress: Some(false),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(c.get_raw("plain").unwrap().unwrap().data.len(), long.len());
        // Below the threshold, or already compressed (a JPEG header): stored as given.
        c.set("short", "a".repeat(1000).as_str(), 0).unwrap();
        assert_eq!(c.get_raw("short").unwrap().unwrap().flags, 16);
        let mut jpeg = b"\xFF\xD8\xFF\xE0".to_vec();
        jpeg.extend(long.as_bytes());
        c.set("jpeg", &jpeg, 0).unwrap();
        assert_eq!(c.get_raw("jpeg").unwrap().unwrap().data, jpeg);
        // Either client reads what the other wrote (flags say how).
        let other = client(&[&srv], Config::default());
        assert_eq!(other.get("long").unwrap(), Some(Value::Text(long.clone())));
    }
    // zlib under the mnemo profile is readable by the Python profile and the reverse.
    let zlib = client(
        &[&srv],
        Config {
            compression: Compression {
                algorithm: Algorithm::zlib(),
                ..Compression::default()
            },
            ..Config::default()
        },
    );
    zlib.set("z", long.as_str(), 0).unwrap();
    assert_eq!(zlib.get_raw("z").unwrap().unwrap().flags, 16 | 8);
    assert_eq!(
        client(&[&srv], Config::python()).get("z").unwrap(),
        Some(Value::Text(long))
    );
}

#[test]
fn multi_key_commands_fan_out_over_servers() {
    let servers = [
        Server::mnemod(&[]),
        Server::memcached(&[]),
        Server::mnemod(&["-t", "1"]),
    ];
    let refs: Vec<&Server> = servers.iter().collect();
    let c = client(&refs, Config::default());
    let keys: Vec<String> = (0..3000).map(|i| format!("user:{i}")).collect();
    let items: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), k.as_str())).collect();
    assert!(c
        .set_multi(&items, &SetOptions::default())
        .unwrap()
        .iter()
        .all(|o| *o == StoreOutcome::Stored));
    // Each key is on the server the ring names, and only there.
    let mut per_server = [0usize; 3];
    for k in &keys {
        let owner = c.async_client().route_index(k).unwrap();
        per_server[owner] += 1;
        for (i, s) in servers.iter().enumerate() {
            let one = client(&[s], Config::default());
            assert_eq!(
                one.get(k).unwrap().is_some(),
                i == owner,
                "{k} on server {i}, owner {owner}"
            );
        }
    }
    assert!(per_server.iter().all(|&n| n > 500), "{per_server:?}");
    let got = c.get_multi(&keys).unwrap();
    assert_eq!(got.len(), keys.len());
    assert!(keys
        .iter()
        .all(|k| got[k.as_bytes()] == Value::Text(k.clone())));
    // Hash tags put related keys on one server.
    let tagged = client(
        &refs,
        Config {
            hash_tags: true,
            ..Config::default()
        },
    );
    let friends: Vec<String> = (0..100).map(|i| format!("{{user:7}}:friend:{i}")).collect();
    let owners: std::collections::HashSet<usize> = friends
        .iter()
        .map(|k| tagged.async_client().route_index(k).unwrap())
        .collect();
    assert_eq!(owners.len(), 1);
}

#[test]
fn a_dead_server_is_ejected_and_its_keys_move() {
    let mut servers = [Server::mnemod(&[]), Server::mnemod(&[])];
    let cfg = Config {
        failure_limit: Some(1),
        retry_interval: Duration::from_secs(3600),
        connect_timeout: Duration::from_millis(500),
        ..Config::default()
    };
    let refs: Vec<&Server> = servers.iter().collect();
    let c = client(&refs, cfg);
    let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
    let on_1: Vec<&String> = keys
        .iter()
        .filter(|k| c.async_client().route_index(k).unwrap() == 1)
        .collect();
    assert!(!on_1.is_empty());
    for k in &keys {
        c.set(k, "v", 0).unwrap();
    }
    servers[1].kill();
    // The first request to the dead server fails and ejects it...
    assert!(c.get(on_1[0]).unwrap_err().is_server_failure());
    assert!(c.async_client().is_ejected(1));
    // ...then its keys go to the live server: misses at first, and stores work.
    assert_eq!(c.get(on_1[0]).unwrap(), None);
    c.set(on_1[0], "moved", 0).unwrap();
    assert_eq!(c.get(on_1[0]).unwrap(), Some(Value::Text("moved".into())));
    assert_eq!(c.route(on_1[0]).unwrap().port, servers[0].port);
    // A get_multi over both servers' keys returns what the live one holds.
    let got = c.get_multi(&keys).unwrap();
    assert_eq!(got.len(), keys.len() - on_1.len() + 1);
}

#[test]
fn async_client_many_tasks_share_the_pool() {
    let srv = Server::mnemod(&[]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = Client::new(vec![spec(&srv)], Config::default()).unwrap();
        let mut tasks = Vec::new();
        for t in 0..32 {
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..50 {
                    let k = format!("t{t}:{i}");
                    c.set(&k, i, 0).await.unwrap();
                    assert_eq!(c.get(&k).await.unwrap(), Some(Value::Int(i)));
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let v = c
            .store(StoreCmd::Add, "t0:0", "x", 0, &SetOptions::default())
            .await
            .unwrap();
        assert_eq!(v, StoreOutcome::NotStored);
    });
}

/// A pipeline far larger than the socket buffers whose replies are larger still: the server
/// stops reading while its replies wait to be read, so a client that wrote everything before
/// reading anything would stall until its timeout. Both ways of driving sockets (blocking and
/// tokio) must read while they write.
#[test]
fn a_long_pipeline_with_large_replies_cannot_deadlock() {
    let srv = Server::mnemod(&["-m", "256"]);
    let cfg = Config {
        io_timeout: Duration::from_secs(20),
        ..Config::default()
    };
    let c = client(&[&srv], cfg.clone());
    assert!(c.async_client().config().blocking_io);
    // 250-byte keys, 2 KB values: ~5 MB of requests, ~45 MB of replies.
    let keys: Vec<String> = (0..20_000).map(|i| format!("{i:0>250}")).collect();
    let value = "v".repeat(2048);
    let items: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), value.as_str())).collect();
    assert!(c
        .set_multi(&items, &SetOptions::default())
        .unwrap()
        .iter()
        .all(|o| *o == StoreOutcome::Stored));
    let got = c.get_multi(&keys).unwrap();
    assert_eq!(got.len(), keys.len());
    assert!(got.values().all(|v| *v == Value::Text(value.clone())));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let a = Client::new(vec![spec(&srv)], cfg).unwrap();
    assert!(!a.config().blocking_io);
    let got = rt.block_on(a.get_multi(&keys)).unwrap();
    assert_eq!(got.len(), keys.len());
}
