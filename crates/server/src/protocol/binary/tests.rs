//! `step` driven directly, without sockets: framing across partial input, skipping refused
//! values in pieces, bounded buffering, and the SASL session.

use mnemo_proto::binary::{encode_request, opcode, parse_response, ParsedResponse, Status};

use super::{step, BinNext, BinSession};
use crate::admin::stats::Counters;
use crate::{Config, Shared};

fn shared(config: Config) -> Shared {
    Shared::new(Config {
        memory_limit: 8 << 20,
        threads: 1,
        ..config
    })
}

fn req(op: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    encode_request(&mut v, op, 7, 0, extras, key, value);
    v
}

fn set(key: &[u8], value: &[u8]) -> Vec<u8> {
    req(opcode::SET, &[0; 8], key, value)
}

/// Feed `input` through `step` as a connection would; returns the statuses of the replies,
/// how much input was used, and whether the connection closed.
fn run(sh: &Shared, session: &mut BinSession, input: &[u8]) -> (Vec<(u8, u16)>, usize, bool) {
    let c = Counters::default();
    let mut out = Vec::new();
    let mut pos = 0;
    let mut closed = false;
    while pos < input.len() {
        match step(&input[pos..], session, sh, &c, &mut out) {
            BinNext::Consumed(n) => {
                assert!(n > 0 && pos + n <= input.len());
                pos += n;
            }
            BinNext::Incomplete(need) => {
                assert!(need > input.len() - pos);
                break;
            }
            BinNext::Close => {
                closed = true;
                break;
            }
            BinNext::Later(_) => panic!("no Direct, so a read never answers later"),
        }
    }
    let mut replies = Vec::new();
    let mut at = 0;
    while let ParsedResponse::Response(r, n) = parse_response(&out[at..]) {
        replies.push((r.header.opcode, r.status()));
        at += n;
    }
    assert_eq!(at, out.len(), "trailing bytes in the output");
    (replies, pos, closed)
}

#[test]
fn partial_input_waits() {
    let sh = shared(Config::default());
    let mut s = BinSession::default();
    let c = Counters::default();
    let mut out = Vec::new();
    let r = set(b"k", b"value");
    for cut in 0..r.len() {
        let got = step(&r[..cut], &mut s, &sh, &c, &mut out);
        assert!(
            matches!(got, BinNext::Incomplete(n) if n > cut && n <= r.len()),
            "{cut}: {got:?}"
        );
        assert!(out.is_empty());
    }
    assert_eq!(
        step(&r, &mut s, &sh, &c, &mut out),
        BinNext::Consumed(r.len())
    );
}

#[test]
fn too_large_value_is_skipped_in_pieces() {
    let sh = shared(Config {
        item_size_max: 1024,
        ..Config::default()
    });
    let mut s = BinSession::default();
    let c = Counters::default();
    let mut out = Vec::new();
    let big = set(b"k", &[b'x'; 5000]);
    // Only the header, extras and key are needed to refuse it.
    assert_eq!(
        step(&big[..33], &mut s, &sh, &c, &mut out),
        BinNext::Consumed(33)
    );
    let ParsedResponse::Response(r, _) = parse_response(&out) else {
        panic!()
    };
    assert_eq!(r.status(), Status::TooLarge as u16);
    // The value is then discarded as it arrives, whatever the chunking.
    let mut rest = &big[33..];
    while !rest.is_empty() {
        let chunk = &rest[..rest.len().min(700)];
        let BinNext::Consumed(n) = step(chunk, &mut s, &sh, &c, &mut out) else {
            panic!()
        };
        rest = &rest[n..];
    }
    let (replies, _, closed) = run(&sh, &mut s, &req(opcode::NOOP, &[], b"", b""));
    assert_eq!(replies, vec![(opcode::NOOP, 0)]);
    assert!(!closed);
}

#[test]
fn huge_declared_bodies_never_ask_for_the_body() {
    let sh = shared(Config::default());
    let limit = 24 + 255 + 65535 + sh.config.item_size_max;
    for op in [
        opcode::SET,
        opcode::APPEND,
        opcode::GET,
        opcode::SASL_AUTH,
        0x77,
    ] {
        let extras: &[u8] = if op == opcode::SET { &[0; 8] } else { &[] };
        let mut r = req(op, extras, b"key", b"");
        r[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        let mut s = BinSession::default();
        let c = Counters::default();
        let mut out = Vec::new();
        match step(&r, &mut s, &sh, &c, &mut out) {
            BinNext::Incomplete(n) => assert!(n <= limit, "{op:#x} asked for {n}"),
            BinNext::Consumed(_) | BinNext::Close => {
                assert!(!out.is_empty(), "{op:#x} closed silently")
            }
            BinNext::Later(_) => panic!("no Direct, so a read never answers later"),
        }
    }
}

#[test]
fn quiet_commands_are_silent_on_success_only() {
    let sh = shared(Config::default());
    let mut s = BinSession::default();
    let mut input = req(opcode::SETQ, &[0; 8], b"q", b"v");
    input.extend(req(opcode::ADDQ, &[0; 8], b"q", b"v"));
    input.extend(req(opcode::GETQ, &[], b"q", b""));
    input.extend(req(opcode::GETQ, &[], b"missing", b""));
    input.extend(req(opcode::DELETEQ, &[], b"q", b""));
    input.extend(req(opcode::DELETEQ, &[], b"q", b""));
    input.extend(req(opcode::NOOP, &[], b"", b""));
    let (replies, used, closed) = run(&sh, &mut s, &input);
    assert_eq!(
        replies,
        vec![
            (opcode::ADDQ, Status::KeyExists as u16),
            (opcode::GETQ, 0),
            (opcode::DELETEQ, Status::KeyNotFound as u16),
            (opcode::NOOP, 0)
        ]
    );
    assert_eq!((used, closed), (input.len(), false));
}

fn plain(user: &str, password: &str) -> Vec<u8> {
    format!("\0{user}\0{password}").into_bytes()
}

fn sasl_shared() -> Shared {
    let path = std::env::temp_dir().join(format!("mnemo-bin-sasl-{}", std::process::id()));
    std::fs::write(&path, "alice:secret\n").unwrap();
    let creds = crate::auth::Credentials::load(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    Shared::with_credentials(
        Config {
            sasl: true,
            memory_limit: 8 << 20,
            threads: 1,
            ..Config::default()
        },
        creds,
    )
}

#[test]
fn sasl_gates_everything_but_version_and_sasl() {
    let sh = sasl_shared();
    let mut s = BinSession::default();
    let (replies, _, closed) = run(&sh, &mut s, &req(opcode::VERSION, &[], b"", b""));
    assert_eq!((replies, closed), (vec![(opcode::VERSION, 0)], false));
    let (replies, _, closed) = run(&sh, &mut s, &req(opcode::GET, &[], b"k", b""));
    assert_eq!(
        (replies, closed),
        (vec![(opcode::GET, Status::AuthError as u16)], true)
    );

    let mut s = BinSession::default();
    let (replies, _, _) = run(
        &sh,
        &mut s,
        &req(opcode::SASL_AUTH, &[], b"PLAIN", &plain("alice", "nope")),
    );
    assert_eq!(replies, vec![(opcode::SASL_AUTH, Status::AuthError as u16)]);
    assert!(!s.authenticated);
    let (replies, _, _) = run(
        &sh,
        &mut s,
        &req(opcode::SASL_AUTH, &[], b"PLAIN", &plain("alice", "secret")),
    );
    assert_eq!(replies, vec![(opcode::SASL_AUTH, 0)]);
    assert!(s.authenticated);
    let (replies, _, closed) = run(&sh, &mut s, &set(b"k", b"v"));
    assert_eq!((replies, closed), (vec![(opcode::SET, 0)], false));

    // Continue + step.
    let mut s = BinSession::default();
    let (replies, _, _) = run(&sh, &mut s, &req(opcode::SASL_AUTH, &[], b"PLAIN", b""));
    assert_eq!(
        replies,
        vec![(opcode::SASL_AUTH, Status::AuthContinue as u16)]
    );
    let (replies, _, _) = run(
        &sh,
        &mut s,
        &req(opcode::SASL_STEP, &[], b"PLAIN", &plain("alice", "secret")),
    );
    assert_eq!(replies, vec![(opcode::SASL_STEP, 0)]);
    assert!(s.authenticated);
}

#[test]
fn sasl_commands_are_unknown_without_sasl() {
    let sh = shared(Config::default());
    let mut s = BinSession::default();
    let mut input = req(opcode::SASL_LIST_MECHS, &[], b"", b"");
    input.extend(req(
        opcode::SASL_AUTH,
        &[],
        b"PLAIN",
        &plain("alice", "secret"),
    ));
    input.extend(req(opcode::NOOP, &[], b"", b""));
    let (replies, used, closed) = run(&sh, &mut s, &input);
    let unknown = Status::UnknownCommand as u16;
    assert_eq!(
        replies,
        vec![
            (opcode::SASL_LIST_MECHS, unknown),
            (opcode::SASL_AUTH, unknown),
            (opcode::NOOP, 0)
        ]
    );
    assert_eq!((used, closed), (input.len(), false));
}

#[test]
fn a_set_with_a_cas_that_finds_no_memory_drops_the_old_value() {
    // -M: no eviction, so the store runs out of memory.
    let sh = shared(Config {
        evict: false,
        ..Config::default()
    });
    let mut s = BinSession::default();
    let (r, ..) = run(&sh, &mut s, &set(b"k", b"small"));
    assert_eq!(r, [(opcode::SET, Status::Ok as u16)]);
    let value = vec![b'x'; 100_000];
    let mut full = false;
    for i in 0..1000 {
        let (r, ..) = run(&sh, &mut s, &set(format!("fill{i}").as_bytes(), &value));
        if r[0].1 != Status::Ok as u16 {
            full = true;
            break;
        }
    }
    assert!(full, "the store never ran out of memory");
    // The item's own CAS: a compare that matches, then a store that finds no memory.
    let cas = sh
        .store
        .get(b"k", sh.clock.now(), |it| it.cas)
        .hit()
        .expect("k is stored");
    let mut with_cas = Vec::new();
    encode_request(&mut with_cas, opcode::SET, 7, cas, &[0; 8], b"k", &value);
    let (r, ..) = run(&sh, &mut s, &with_cas);
    assert_eq!(r, [(opcode::SET, Status::OutOfMemory as u16)]);
    let (r, ..) = run(&sh, &mut s, &req(opcode::GET, &[], b"k", &[]));
    assert_eq!(
        r,
        [(opcode::GET, Status::KeyNotFound as u16)],
        "memcached drops the old value"
    );
}
