//! Values cross between mnemo-client and the real Python clients, both ways, compression
//! included: pymemcache (CompressedSerde, zlib), pylibmc and python-memcached (min_compress_len)
//! write, mnemo-client (Python flag profile) reads; mnemo-client writes, all three read.

mod common;

use common::{python, run_python, Server};
use mnemo_client::blocking;
use mnemo_client::{Config, ServerSpec, Value};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn as_value(kind: &str, data: Vec<u8>) -> Option<Value> {
    match kind {
        "bytes" => Some(Value::Bytes(data)),
        "text" => Some(Value::Text(String::from_utf8(data).unwrap())),
        "int" => Some(Value::Int(
            std::str::from_utf8(&data).unwrap().parse().unwrap(),
        )),
        "miss" => None,
        other => panic!(
            "python read a value of kind {other}: {:?}",
            String::from_utf8_lossy(&data)
        ),
    }
}

#[test]
fn python_clients_write_mnemo_client_reads() {
    let Some(py) = python() else { return };
    for srv in Server::both(&[]) {
        let out = run_python(&py, "values.py", &["write", &srv.addr(), "w:"]);
        let c = blocking::Client::new(
            vec![ServerSpec::new("127.0.0.1", srv.port)],
            Config::python(),
        )
        .unwrap();
        let mut compressed = 0;
        let mut n = 0;
        for line in out.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let (key, lib, want) = (f[0], f[1], as_value(f[2], hex(f[3])));
            let raw = c
                .get_raw(key)
                .unwrap()
                .unwrap_or_else(|| panic!("{key} missing"));
            if raw.flags & 8 != 0 {
                compressed += 1;
            }
            assert_eq!(
                c.get(key).unwrap(),
                want,
                "{lib} wrote {key} (flags {}) on {}",
                raw.flags,
                srv.name
            );
            n += 1;
        }
        assert_eq!(n, 18);
        // Each library compressed its two long values (zlib, flag 8).
        assert_eq!(compressed, 6, "on {}", srv.name);
    }
}

#[test]
fn mnemo_client_writes_python_clients_read() {
    let Some(py) = python() else { return };
    let srv = Server::mnemod(&[]);
    let c = blocking::Client::new(
        vec![ServerSpec::new("127.0.0.1", srv.port)],
        Config::python(),
    )
    .unwrap();
    let long = (0..5000)
        .map(|i| format!("word{}", i % 97))
        .collect::<Vec<_>>()
        .join(" ");
    let cases: Vec<(&str, Value)> = vec![
        ("r:bytes", Value::Bytes(b"\x00\x01binary\xff".to_vec())),
        ("r:text", Value::Text("héllo wörld".into())),
        ("r:int", Value::Int(1234567)),
        ("r:neg", Value::Int(-42)),
        ("r:long_text", Value::Text(long.clone())),
        ("r:long_bytes", Value::Bytes(long.repeat(2).into_bytes())),
    ];
    for (k, v) in &cases {
        c.set(k, v, 0).unwrap();
    }
    assert_eq!(
        c.get_raw("r:long_text").unwrap().unwrap().flags,
        16 | 8,
        "stored zlib-compressed"
    );
    let keyfile = std::env::temp_dir().join(format!("mnemo-interop-{}.txt", std::process::id()));
    std::fs::write(
        &keyfile,
        cases.iter().map(|(k, _)| *k).collect::<Vec<_>>().join("\n"),
    )
    .unwrap();
    let out = run_python(
        &py,
        "values.py",
        &["read", &srv.addr(), keyfile.to_str().unwrap()],
    );
    let _ = std::fs::remove_file(&keyfile);
    let mut n = 0;
    for line in out.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let (key, lib, got) = (f[0], f[1], as_value(f[2], hex(f[3])));
        let want = &cases.iter().find(|(k, _)| *k == key).unwrap().1;
        assert_eq!(got.as_ref(), Some(want), "{lib} read {key}");
        n += 1;
    }
    assert_eq!(n, cases.len() * 3);
}
