//! The server real pylibmc (libmemcached, `ketama_weighted`) stores each key on is the one
//! mnemo-client routes it to: 10,000 keys over 3 and over 5 memcached servers with mixed weights.

mod common;

use common::{python, run_python, Server};
use mnemo_client::ketama::{Ketama, ServerSpec};

fn keys() -> Vec<String> {
    // Short, long, numeric-looking and punctuated keys; all valid text-protocol keys.
    (0..10_000)
        .map(|i| match i % 4 {
            0 => format!("key:{i}"),
            1 => format!("user/{}/profile#{}", i * 7919, i % 13),
            2 => format!("{i}"),
            _ => format!("{}-{i}", "x".repeat(1 + i % 200)),
        })
        .collect()
}

fn check(weights: &[u32]) {
    let Some(py) = python() else { return };
    let servers: Vec<Server> = weights.iter().map(|_| Server::memcached(&[])).collect();
    let specs: Vec<ServerSpec> = servers
        .iter()
        .zip(weights)
        .map(|(s, &w)| ServerSpec::new("127.0.0.1", s.port).with_weight(w))
        .collect();
    let list = specs
        .iter()
        .map(|s| format!("{}:{}:{}", s.host, s.port, s.weight))
        .collect::<Vec<_>>()
        .join(",");
    let keys = keys();
    let keyfile = std::env::temp_dir().join(format!(
        "mnemo-ketama-{}-{}.txt",
        std::process::id(),
        weights.len()
    ));
    std::fs::write(&keyfile, keys.join("\n")).unwrap();
    let out = run_python(
        &py,
        "ketama_pylibmc.py",
        &[&list, keyfile.to_str().unwrap()],
    );
    let _ = std::fs::remove_file(&keyfile);

    let ring = Ketama::new(&specs);
    let mut seen = 0;
    let mut per_server = vec![0usize; specs.len()];
    let mut wrong = Vec::new();
    for line in out.lines() {
        let (key, owner) = line.split_once('\t').unwrap();
        let ours = ring.route(key.as_bytes(), false).unwrap();
        per_server[ours] += 1;
        if specs[ours].addr() != owner {
            wrong.push(format!(
                "{key}: pylibmc {owner}, mnemo {}",
                specs[ours].addr()
            ));
        }
        seen += 1;
    }
    assert_eq!(seen, keys.len());
    assert!(
        wrong.is_empty(),
        "{} of {} keys routed differently, e.g. {:?}",
        wrong.len(),
        seen,
        &wrong[..wrong.len().min(5)]
    );
    eprintln!(
        "weights {weights:?}: all {seen} keys agree; keys per server {per_server:?}; points {:?}",
        ring.point_counts()
    );
}

#[test]
fn three_servers_mixed_weights_agree_with_pylibmc() {
    check(&[1, 3, 2]);
}

#[test]
fn five_servers_mixed_weights_agree_with_pylibmc() {
    check(&[1, 2, 5, 1, 3]);
}
