//! Black-box tests of the binary protocol against the real `mnemod` binary on a free port:
//! every opcode, the silence of quiet variants and NOOP as the batch end, CAS, incr/decr with
//! initial values, SASL PLAIN, and hostile headers (never a large allocation, other clients
//! keep being served).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const GET: u8 = 0x00;
const SET: u8 = 0x01;
const ADD: u8 = 0x02;
const REPLACE: u8 = 0x03;
const DELETE: u8 = 0x04;
const INCREMENT: u8 = 0x05;
const DECREMENT: u8 = 0x06;
const QUIT: u8 = 0x07;
const FLUSH: u8 = 0x08;
const GETQ: u8 = 0x09;
const NOOP: u8 = 0x0a;
const VERSION: u8 = 0x0b;
const GETK: u8 = 0x0c;
const GETKQ: u8 = 0x0d;
const APPEND: u8 = 0x0e;
const PREPEND: u8 = 0x0f;
const STAT: u8 = 0x10;
const SETQ: u8 = 0x11;
const ADDQ: u8 = 0x12;
const REPLACEQ: u8 = 0x13;
const DELETEQ: u8 = 0x14;
const INCREMENTQ: u8 = 0x15;
const DECREMENTQ: u8 = 0x16;
const QUITQ: u8 = 0x17;
const FLUSHQ: u8 = 0x18;
const APPENDQ: u8 = 0x19;
const PREPENDQ: u8 = 0x1a;
const VERBOSITY: u8 = 0x1b;
const TOUCH: u8 = 0x1c;
const GAT: u8 = 0x1d;
const GATQ: u8 = 0x1e;
const SASL_LIST_MECHS: u8 = 0x20;
const SASL_AUTH: u8 = 0x21;
const SASL_STEP: u8 = 0x22;
const GATK: u8 = 0x23;
const GATKQ: u8 = 0x24;

const OK: u16 = 0x00;
const NOT_FOUND: u16 = 0x01;
const EXISTS: u16 = 0x02;
const TOO_LARGE: u16 = 0x03;
const INVALID: u16 = 0x04;
const NOT_STORED: u16 = 0x05;
const NON_NUMERIC: u16 = 0x06;
const AUTH_ERROR: u16 = 0x20;
const AUTH_CONTINUE: u16 = 0x21;
const UNKNOWN: u16 = 0x81;

mod common;
use common::Server;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Resp {
    op: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    extras: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
}

fn req_full(op: u8, extras: &[u8], key: &[u8], value: &[u8], cas: u64, opaque: u32) -> Vec<u8> {
    let mut v = vec![0x80, op];
    v.extend_from_slice(&(key.len() as u16).to_be_bytes());
    v.push(extras.len() as u8);
    v.extend_from_slice(&[0, 0, 0]);
    v.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    v.extend_from_slice(&opaque.to_be_bytes());
    v.extend_from_slice(&cas.to_be_bytes());
    v.extend_from_slice(extras);
    v.extend_from_slice(key);
    v.extend_from_slice(value);
    v
}

fn req(op: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    req_full(op, extras, key, value, 0, 0)
}

fn store_ext(flags: u32, exptime: u32) -> Vec<u8> {
    let mut v = flags.to_be_bytes().to_vec();
    v.extend_from_slice(&exptime.to_be_bytes());
    v
}

fn set(key: &[u8], value: &[u8]) -> Vec<u8> {
    req(SET, &store_ext(0, 0), key, value)
}

fn delta_ext(delta: u64, initial: u64, exptime: u32) -> Vec<u8> {
    let mut v = delta.to_be_bytes().to_vec();
    v.extend_from_slice(&initial.to_be_bytes());
    v.extend_from_slice(&exptime.to_be_bytes());
    v
}

fn with_body_len(mut r: Vec<u8>, body: u32) -> Vec<u8> {
    r[8..12].copy_from_slice(&body.to_be_bytes());
    r
}

/// One response; None at EOF.
fn read_resp(s: &mut TcpStream) -> Option<Resp> {
    let mut h = [0u8; 24];
    match s.read_exact(&mut h) {
        Ok(()) => {}
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
            ) =>
        {
            return None
        }
        Err(e) => panic!("read: {e}"),
    }
    assert_eq!(h[0], 0x81, "response magic");
    let kl = u16::from_be_bytes([h[2], h[3]]) as usize;
    let el = h[4] as usize;
    let bl = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
    let mut body = vec![0; bl];
    s.read_exact(&mut body).unwrap();
    Some(Resp {
        op: h[1],
        status: u16::from_be_bytes([h[6], h[7]]),
        opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
        cas: u64::from_be_bytes(h[16..24].try_into().unwrap()),
        extras: body[..el].to_vec(),
        key: body[el..el + kl].to_vec(),
        value: body[el + kl..].to_vec(),
    })
}

/// Send `data` plus a NOOP, return every response before the NOOP's.
fn batch(s: &mut TcpStream, data: &[u8]) -> Vec<Resp> {
    let mut d = data.to_vec();
    d.extend(req_full(NOOP, &[], &[], &[], 0, 0xfeed));
    s.write_all(&d).unwrap();
    let mut out = Vec::new();
    loop {
        let r = read_resp(s).expect("connection closed before the NOOP's answer");
        if r.op == NOOP && r.opaque == 0xfeed {
            return out;
        }
        out.push(r);
    }
}

/// Send one request and read one response.
fn one(s: &mut TcpStream, data: &[u8]) -> Resp {
    s.write_all(data).unwrap();
    read_resp(s).expect("connection closed")
}

/// Everything up to EOF (the server must close).
fn until_close(s: &mut TcpStream) -> Vec<Resp> {
    let mut out = Vec::new();
    while let Some(r) = read_resp(s) {
        out.push(r);
    }
    out
}

fn statuses(rs: &[Resp]) -> Vec<(u8, u16)> {
    rs.iter().map(|r| (r.op, r.status)).collect()
}

#[test]
fn get_family_and_storage() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let r = one(&mut c, &req_full(GET, &[], b"k", &[], 0, 0x1234));
    assert_eq!(
        (r.status, r.opaque, r.value.as_slice()),
        (NOT_FOUND, 0x1234, &b"Not found"[..])
    );
    let r = one(&mut c, &req(GETK, &[], b"k", &[]));
    assert_eq!(
        (r.status, r.key.as_slice(), r.value.len()),
        (NOT_FOUND, &b"k"[..], 0)
    );

    let r = one(&mut c, &req(SET, &store_ext(7, 0), b"k", b"val"));
    assert_eq!(r.status, OK);
    assert_ne!(r.cas, 0);
    let cas = r.cas;
    let r = one(&mut c, &req(GET, &[], b"k", &[]));
    assert_eq!(
        (
            r.status,
            r.extras.as_slice(),
            r.key.len(),
            r.value.as_slice(),
            r.cas
        ),
        (OK, &7u32.to_be_bytes()[..], 0, &b"val"[..], cas)
    );
    let r = one(&mut c, &req(GETK, &[], b"k", &[]));
    assert_eq!(
        (r.key.as_slice(), r.value.as_slice()),
        (&b"k"[..], &b"val"[..])
    );

    assert_eq!(
        one(&mut c, &req(ADD, &store_ext(0, 0), b"k", b"x")).value,
        b"Data exists for key."
    );
    assert_eq!(
        one(&mut c, &req(ADD, &store_ext(0, 0), b"k2", b"x")).status,
        OK
    );
    assert_eq!(
        one(&mut c, &req(REPLACE, &store_ext(0, 0), b"nope", b"x")).status,
        NOT_FOUND
    );
    assert_eq!(
        one(&mut c, &req(REPLACE, &store_ext(1, 0), b"k2", b"y")).status,
        OK
    );
    assert_eq!(
        one(&mut c, &req(APPEND, &[], b"nope", b"x")).value,
        b"Not stored."
    );
    assert_eq!(one(&mut c, &req(APPEND, &[], b"k", b">")).status, OK);
    assert_eq!(one(&mut c, &req(PREPEND, &[], b"k", b"<")).status, OK);
    let r = one(&mut c, &req(GET, &[], b"k", &[]));
    assert_eq!(
        (r.value.as_slice(), r.extras.as_slice()),
        (&b"<val>"[..], &7u32.to_be_bytes()[..])
    );
    assert_eq!(one(&mut c, &req(DELETE, &[], b"k", &[])).status, OK);
    assert_eq!(one(&mut c, &req(DELETE, &[], b"k", &[])).status, NOT_FOUND);

    // TOUCH answers with the flags and no value; GAT with both; GATK with the key too.
    assert_eq!(
        one(&mut c, &req(TOUCH, &100u32.to_be_bytes(), b"nope", &[])).status,
        NOT_FOUND
    );
    let r = one(&mut c, &req(TOUCH, &100u32.to_be_bytes(), b"k2", &[]));
    assert_eq!(
        (r.status, r.extras.as_slice(), r.value.len()),
        (OK, &1u32.to_be_bytes()[..], 0)
    );
    let r = one(&mut c, &req(GAT, &100u32.to_be_bytes(), b"k2", &[]));
    assert_eq!((r.status, r.value.as_slice()), (OK, &b"y"[..]));
    let r = one(&mut c, &req(GATK, &100u32.to_be_bytes(), b"k2", &[]));
    assert_eq!(
        (r.key.as_slice(), r.value.as_slice()),
        (&b"k2"[..], &b"y"[..])
    );
    let r = one(&mut c, &req(GATK, &100u32.to_be_bytes(), b"nope", &[]));
    assert_eq!(
        (r.status, r.key.as_slice(), r.value.len()),
        (NOT_FOUND, &b"nope"[..], 0)
    );
    // Touching with an absolute time in the past expires the item.
    assert_eq!(
        one(
            &mut c,
            &req(TOUCH, &(30 * 86400 + 1u32).to_be_bytes(), b"k2", &[])
        )
        .status,
        OK
    );
    assert_eq!(one(&mut c, &req(GET, &[], b"k2", &[])).status, NOT_FOUND);

    let r = one(&mut c, &req(VERSION, &[], &[], &[]));
    assert_eq!(r.status, OK);
    assert!(!r.value.is_empty() && r.value.iter().all(|b| b.is_ascii_graphic()));
    assert_eq!(
        one(&mut c, &req(VERBOSITY, &1u32.to_be_bytes(), &[], &[])).status,
        OK
    );
}

#[test]
fn quiet_variants_are_silent_until_noop() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let mut b = Vec::new();
    b.extend(req(SETQ, &store_ext(0, 0), b"a", b"1"));
    b.extend(req(SETQ, &store_ext(0, 0), b"s", b"abc"));
    b.extend(req(ADDQ, &store_ext(0, 0), b"b", b"2"));
    b.extend(req(REPLACEQ, &store_ext(0, 0), b"b", b"3"));
    b.extend(req(APPENDQ, &[], b"b", b"4"));
    b.extend(req(PREPENDQ, &[], b"b", b"5"));
    b.extend(req(INCREMENTQ, &delta_ext(1, 10, 0), b"n", &[]));
    b.extend(req(DECREMENTQ, &delta_ext(3, 0, 0), b"n", &[]));
    b.extend(req(GETQ, &[], b"missing", &[]));
    b.extend(req(GETKQ, &[], b"missing", &[]));
    b.extend(req(GATQ, &0u32.to_be_bytes(), b"missing", &[]));
    b.extend(req(GATKQ, &0u32.to_be_bytes(), b"missing", &[]));
    b.extend(req(DELETEQ, &[], b"a", &[]));
    // Nothing is answered before the NOOP.
    c.write_all(&b).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut probe = [0u8; 1];
    assert!(
        matches!(c.read(&mut probe), Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
    );
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(batch(&mut c, &[]), vec![]);

    // Hits of quiet gets are answered; failures of quiet writes are answered.
    let mut b = Vec::new();
    b.extend(req(GETQ, &[], b"b", &[]));
    b.extend(req(GETKQ, &[], b"n", &[]));
    b.extend(req(GATQ, &0u32.to_be_bytes(), b"b", &[]));
    b.extend(req(GATKQ, &0u32.to_be_bytes(), b"b", &[]));
    b.extend(req(ADDQ, &store_ext(0, 0), b"b", b"x"));
    b.extend(req(REPLACEQ, &store_ext(0, 0), b"zz", b"x"));
    b.extend(req(APPENDQ, &[], b"zz", b"x"));
    b.extend(req(DELETEQ, &[], b"zz", &[]));
    b.extend(req(INCREMENTQ, &delta_ext(1, 0, u32::MAX), b"zz", &[]));
    b.extend(req(INCREMENTQ, &delta_ext(1, 0, 0), b"s", &[]));
    b.extend(req(FLUSHQ, &[], &[], &[]));
    b.extend(req(GETQ, &[], b"b", &[]));
    let rs = batch(&mut c, &b);
    assert_eq!(
        statuses(&rs),
        vec![
            (GETQ, OK),
            (GETKQ, OK),
            (0x1e, OK),
            (GATKQ, OK),
            (ADDQ, EXISTS),
            (REPLACEQ, NOT_FOUND),
            (APPENDQ, NOT_STORED),
            (DELETEQ, NOT_FOUND),
            (INCREMENTQ, NOT_FOUND),
            (INCREMENTQ, NON_NUMERIC),
        ]
    );
    assert_eq!(rs[0].value, b"534");
    assert_eq!(
        (rs[1].key.as_slice(), rs[1].value.as_slice()),
        (&b"n"[..], &b"7 "[..])
    );

    // QUITQ closes without a word; QUIT answers first.
    let mut q = srv.connect();
    q.write_all(&req(QUITQ, &[], &[], &[])).unwrap();
    assert_eq!(until_close(&mut q), vec![]);
    let mut q = srv.connect();
    q.write_all(&req_full(QUIT, &[], &[], &[], 0, 9)).unwrap();
    assert_eq!(statuses(&until_close(&mut q)), vec![(QUIT, OK)]);
}

#[test]
fn cas_rules() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let cas = one(&mut c, &set(b"k", b"1")).cas;
    let wrong = cas.wrapping_add(1_000_000);
    assert_eq!(
        one(
            &mut c,
            &req_full(SET, &store_ext(0, 0), b"k", b"2", wrong, 0)
        )
        .status,
        EXISTS
    );
    assert_eq!(
        one(
            &mut c,
            &req_full(SET, &store_ext(0, 0), b"missing", b"2", wrong, 0)
        )
        .status,
        NOT_FOUND
    );
    assert_eq!(
        one(&mut c, &req_full(APPEND, &[], b"k", b"2", wrong, 0)).status,
        EXISTS
    );
    assert_eq!(
        one(
            &mut c,
            &req_full(INCREMENT, &delta_ext(1, 0, 0), b"k", &[], wrong, 0)
        )
        .status,
        EXISTS
    );
    assert_eq!(
        one(&mut c, &req_full(DELETE, &[], b"k", &[], wrong, 0)).status,
        EXISTS
    );
    // GAT ignores a CAS; it does not change the item's CAS either.
    assert_eq!(
        one(
            &mut c,
            &req_full(GAT, &0u32.to_be_bytes(), b"k", &[], wrong, 0)
        )
        .cas,
        cas
    );

    let r = one(&mut c, &req_full(APPEND, &[], b"k", b"0", cas, 0));
    assert_eq!(r.status, OK);
    assert_ne!(r.cas, cas);
    let r = one(
        &mut c,
        &req_full(INCREMENT, &delta_ext(5, 0, 0), b"k", &[], r.cas, 0),
    );
    assert_eq!(
        (r.status, r.value.as_slice()),
        (OK, &15u64.to_be_bytes()[..])
    );
    let r = one(
        &mut c,
        &req_full(REPLACE, &store_ext(0, 0), b"k", b"x", r.cas, 0),
    );
    assert_eq!(r.status, OK);
    let r2 = one(&mut c, &req(GET, &[], b"k", &[]));
    assert_eq!((r2.cas, r2.value.as_slice()), (r.cas, &b"x"[..]));
    assert_eq!(
        one(&mut c, &req_full(DELETE, &[], b"k", &[], r.cas, 0)).status,
        OK
    );
    assert_eq!(one(&mut c, &req(GET, &[], b"k", &[])).status, NOT_FOUND);
}

#[test]
fn incr_decr_initial_and_wrap() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let num = |r: &Resp| u64::from_be_bytes(r.value.as_slice().try_into().unwrap());
    assert_eq!(
        one(
            &mut c,
            &req(INCREMENT, &delta_ext(1, 5, u32::MAX), b"n", &[])
        )
        .status,
        NOT_FOUND
    );
    let r = one(&mut c, &req(INCREMENT, &delta_ext(1, 5, 0), b"n", &[]));
    assert_eq!((r.status, num(&r)), (OK, 5));
    let r = one(&mut c, &req(DECREMENT, &delta_ext(1, 99, 0), b"n", &[]));
    assert_eq!(num(&r), 4);
    let r = one(&mut c, &req(DECREMENT, &delta_ext(100, 0, 0), b"n", &[]));
    assert_eq!(num(&r), 0);
    let r = one(
        &mut c,
        &req(INCREMENT, &delta_ext(u64::MAX, 0, 0), b"n", &[]),
    );
    assert_eq!(num(&r), u64::MAX);
    let r = one(&mut c, &req(INCREMENT, &delta_ext(2, 0, 0), b"n", &[]));
    assert_eq!(num(&r), 1);
    // The stored text keeps its longest length, padded (memcached rewrites in place).
    let r = one(&mut c, &req(GET, &[], b"n", &[]));
    assert_eq!(r.value, b"1                   ");
    let r = one(&mut c, &req(DECREMENT, &delta_ext(1, 7, 0), b"d", &[]));
    assert_eq!(num(&r), 7);
    assert_eq!(one(&mut c, &req(GET, &[], b"d", &[])).value, b"7");
    assert_eq!(one(&mut c, &set(b"s", b"abc")).status, OK);
    let r = one(&mut c, &req(INCREMENT, &delta_ext(1, 0, 0), b"s", &[]));
    assert_eq!(
        (r.status, r.value.as_slice()),
        (
            NON_NUMERIC,
            &b"Non-numeric server-side value for incr or decr"[..]
        )
    );
}

#[test]
fn many_clients_race_to_create_a_counter() {
    let srv = Server::start(&[]);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let mut c = srv.connect();
            std::thread::spawn(move || {
                let mut b = Vec::new();
                for _ in 0..50 {
                    b.extend(req(INCREMENTQ, &delta_ext(1, 1, 0), b"race", &[]));
                }
                assert_eq!(batch(&mut c, &b), vec![]);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut c = srv.connect();
    // One creation (value 1) and 199 increments.
    assert_eq!(one(&mut c, &req(GET, &[], b"race", &[])).value, b"200");
}

#[test]
fn flush_stat_and_unknown() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    one(&mut c, &set(b"k", b"v"));
    assert_eq!(one(&mut c, &req(FLUSH, &[], &[], &[])).status, OK);
    assert_eq!(one(&mut c, &req(GET, &[], b"k", &[])).status, NOT_FOUND);
    one(&mut c, &set(b"k", b"v"));
    assert_eq!(
        one(&mut c, &req(FLUSH, &3600u32.to_be_bytes(), &[], &[])).status,
        OK
    );
    assert_eq!(
        one(&mut c, &req(GET, &[], b"k", &[])).status,
        OK,
        "a delayed flush leaves items until then"
    );

    let rs = batch(&mut c, &req(STAT, &[], &[], &[]));
    let (last, stats) = rs.split_last().unwrap();
    assert!(last.key.is_empty() && last.value.is_empty() && last.status == OK);
    let get = |name: &[u8]| {
        stats
            .iter()
            .find(|r| r.key == name)
            .map(|r| r.value.clone())
    };
    assert!(get(b"pid").is_some());
    assert_eq!(get(b"curr_items"), Some(b"1".to_vec()));
    let rs = batch(&mut c, &req(STAT, &[], b"settings", &[]));
    assert!(rs
        .iter()
        .any(|r| r.key == b"item_size_max" && r.value == b"1048576"));
    assert_eq!(
        statuses(&batch(&mut c, &req(STAT, &[], b"reset", &[]))),
        vec![(STAT, OK)]
    );
    assert_eq!(
        statuses(&batch(&mut c, &req(STAT, &[], b"nonsense", &[]))),
        vec![(STAT, NOT_FOUND)]
    );

    // Unknown opcodes: "unknown command", the body skipped, the connection kept.
    let rs = batch(
        &mut c,
        &[req(0x40, &[], &[], b"xyz"), req(0xfe, &[], &[], &[])].concat(),
    );
    assert_eq!(statuses(&rs), vec![(0x40, UNKNOWN), (0xfe, UNKNOWN)]);
    assert_eq!(rs[0].value, b"Unknown command");
    // Without -S the SASL opcodes are unknown too.
    let rs = batch(
        &mut c,
        &[
            req(SASL_LIST_MECHS, &[], &[], &[]),
            req(SASL_AUTH, &[], b"PLAIN", b"\0u\0p"),
        ]
        .concat(),
    );
    assert_eq!(
        statuses(&rs),
        vec![(SASL_LIST_MECHS, UNKNOWN), (SASL_AUTH, UNKNOWN)]
    );
}

#[test]
fn flush_disabled_and_cas_disabled() {
    let srv = Server::start(&["-F", "-C"]);
    let mut c = srv.connect();
    let rs = batch(
        &mut c,
        &[req(FLUSH, &[], &[], &[]), req(FLUSHQ, &[], &[], &[])].concat(),
    );
    assert_eq!(
        statuses(&rs),
        vec![(FLUSH, AUTH_ERROR), (FLUSHQ, AUTH_ERROR)]
    );
    let r = one(&mut c, &set(b"k", b"v"));
    assert_eq!((r.status, r.cas), (OK, 0));
    // -C: a CAS on a set is ignored, on a delete it never matches (every item's CAS is 0).
    assert_eq!(
        one(&mut c, &req_full(SET, &store_ext(0, 0), b"k", b"w", 5, 0)).status,
        OK
    );
    assert_eq!(
        one(&mut c, &req_full(DELETE, &[], b"k", &[], 5, 0)).status,
        EXISTS
    );
}

fn sasl_server(users: &str) -> (Server, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!(
        "mnemo-bin-users-{}-{}",
        std::process::id(),
        users.len()
    ));
    std::fs::write(&path, users).unwrap();
    (Server::start(&["-S", "-Y", path.to_str().unwrap()]), path)
}

#[test]
fn sasl_plain() {
    let (srv, path) = sasl_server("alice:secret\nbob:pa:ss\n");
    // Before authentication: VERSION and the SASL opcodes only; anything else closes.
    let mut c = srv.connect();
    assert_eq!(one(&mut c, &req(VERSION, &[], &[], &[])).status, OK);
    let r = one(&mut c, &req(SASL_LIST_MECHS, &[], &[], &[]));
    assert_eq!((r.status, r.value.as_slice()), (OK, &b"PLAIN"[..]));
    c.write_all(&req(GETQ, &[], b"k", &[])).unwrap();
    let rs = until_close(&mut c);
    assert_eq!(statuses(&rs), vec![(GETQ, AUTH_ERROR)]);
    assert_eq!(rs[0].value, b"Auth failure.");

    let mut c = srv.connect();
    let r = one(&mut c, &req(SASL_AUTH, &[], b"PLAIN", b"\0alice\0wrong"));
    assert_eq!(r.status, AUTH_ERROR);
    let r = one(
        &mut c,
        &req(SASL_AUTH, &[], b"CRAM-MD5", b"\0alice\0secret"),
    );
    assert_eq!(r.status, AUTH_ERROR);
    let r = one(&mut c, &req(SASL_AUTH, &[], b"PLAIN", b"\0alice\0secret"));
    assert_eq!((r.status, r.value.as_slice()), (OK, &b"Authenticated"[..]));
    assert_eq!(one(&mut c, &set(b"k", b"v")).status, OK);
    assert_eq!(one(&mut c, &req(GET, &[], b"k", &[])).value, b"v");

    // authzid equal to the user is fine; a password may hold ':'; continue + step.
    let mut c = srv.connect();
    assert_eq!(
        one(&mut c, &req(SASL_AUTH, &[], b"PLAIN", b"bob\0bob\0pa:ss")).status,
        OK
    );
    let mut c = srv.connect();
    assert_eq!(
        one(
            &mut c,
            &req(SASL_AUTH, &[], b"PLAIN", b"bob\0alice\0secret")
        )
        .status,
        AUTH_ERROR
    );
    let mut c = srv.connect();
    assert_eq!(
        one(&mut c, &req(SASL_STEP, &[], b"PLAIN", b"\0alice\0secret")).status,
        AUTH_ERROR
    );
    assert_eq!(
        one(&mut c, &req(SASL_AUTH, &[], b"PLAIN", &[])).status,
        AUTH_CONTINUE
    );
    assert_eq!(
        one(&mut c, &req(SASL_STEP, &[], b"PLAIN", b"\0alice\0secret")).status,
        OK
    );
    assert_eq!(one(&mut c, &req(GET, &[], b"k", &[])).status, OK);
    // A failed re-authentication drops the connection's authentication.
    assert_eq!(
        one(&mut c, &req(SASL_AUTH, &[], b"PLAIN", b"\0alice\0nope")).status,
        AUTH_ERROR
    );
    c.write_all(&req(NOOP, &[], &[], &[])).unwrap();
    assert_eq!(statuses(&until_close(&mut c)), vec![(NOOP, AUTH_ERROR)]);
    let _ = std::fs::remove_file(path);
}

/// Each malformed request: memcached's status, then the connection closes.
#[test]
fn hostile_headers_get_an_error_and_close() {
    let srv = Server::start(&[]);
    type Case = (&'static str, Vec<u8>, Vec<(u8, u16)>);
    let cases: Vec<Case> = vec![
        (
            "key longer than body",
            with_body_len(req(GET, &[], b"abc", &[]), 2),
            vec![(GET, UNKNOWN)],
        ),
        (
            "key + extras longer than body",
            with_body_len(set(b"abc", b""), 10),
            vec![(SET, UNKNOWN)],
        ),
        (
            "key over 250",
            req(GET, &[], &[b'a'; 251], &[]),
            vec![(GET, INVALID)],
        ),
        (
            "get with extras",
            req(GET, b"1234", b"k", &[]),
            vec![(GET, INVALID)],
        ),
        (
            "get with value",
            req(GET, &[], b"k", b"v"),
            vec![(GET, INVALID)],
        ),
        (
            "set without extras",
            req(SET, &[], b"k", b"v"),
            vec![(SET, INVALID)],
        ),
        (
            "delete with value",
            req(DELETE, &[], b"k", b"v"),
            vec![(DELETE, INVALID)],
        ),
        (
            "incr with 8 bytes of extras",
            req(INCREMENT, &[0; 8], b"k", &[]),
            vec![(INCREMENT, INVALID)],
        ),
        (
            "noop with key",
            req(NOOP, &[], b"k", &[]),
            vec![(NOOP, INVALID)],
        ),
        (
            "flush with key",
            req(FLUSH, &[], b"k", &[]),
            vec![(FLUSH, INVALID)],
        ),
        (
            "touch without extras",
            req(TOUCH, &[], b"k", &[]),
            vec![(TOUCH, INVALID)],
        ),
        (
            "4 GB get",
            with_body_len(req(GET, &[], b"k", &[]), u32::MAX),
            vec![(GET, INVALID)],
        ),
        (
            "4 GB set",
            with_body_len(set(b"k", b""), u32::MAX),
            vec![(SET, TOO_LARGE)],
        ),
        (
            "4 GB append",
            with_body_len(req(APPEND, &[], b"k", &[]), u32::MAX),
            vec![(APPEND, TOO_LARGE)],
        ),
        (
            "wrong magic",
            {
                let mut r = req(NOOP, &[], &[], &[]);
                r.extend_from_slice(&[0x81; 24]);
                r
            },
            vec![(NOOP, OK)],
        ),
    ];
    for (name, data, want) in cases {
        let mut c = srv.connect();
        c.write_all(&data).unwrap();
        assert_eq!(statuses(&until_close(&mut c)), want, "{name}");
    }
    // A 4 GB unknown command is answered and its body skipped as it comes.
    let mut c = srv.connect();
    c.write_all(&with_body_len(req(0x77, &[], &[], &[]), u32::MAX))
        .unwrap();
    assert_eq!(read_resp(&mut c).map(|r| r.status), Some(UNKNOWN));
    c.write_all(&[0u8; 100_000]).unwrap();
    let mut other = srv.connect();
    assert_eq!(one(&mut other, &req(VERSION, &[], &[], &[])).status, OK);
}

#[test]
fn oversized_values_are_refused_and_skipped() {
    let srv = Server::start(&["-I", "1m"]);
    let mut c = srv.connect();
    assert_eq!(one(&mut c, &set(b"big", b"old")).status, OK);
    // 2 MiB sent in full: refused from the header, the bytes skipped, the old value dropped.
    let rs = batch(&mut c, &set(b"big", &vec![b'x'; 2 << 20]));
    assert_eq!(statuses(&rs), vec![(SET, TOO_LARGE)]);
    assert_eq!(rs[0].value, b"Too large.");
    assert_eq!(one(&mut c, &req(GET, &[], b"big", &[])).status, NOT_FOUND);
    // Exactly at memcached's limit (48-byte header + key + 1 + value + 2 + 8 CAS <= 1 MiB).
    let fits = (1 << 20) - 48 - 3 - 1 - 2 - 8;
    assert_eq!(
        statuses(&batch(&mut c, &set(b"big", &vec![b'y'; fits]))),
        vec![(SET, OK)]
    );
    assert_eq!(
        statuses(&batch(&mut c, &set(b"big", &vec![b'y'; fits + 1]))),
        vec![(SET, TOO_LARGE)]
    );
    // An append whose result would pass the limit is not stored.
    assert_eq!(one(&mut c, &set(b"ap", &vec![b'y'; fits - 10])).status, OK);
    assert_eq!(
        one(&mut c, &req(APPEND, &[], b"ap", &[b'z'; 20])).status,
        NOT_STORED
    );
    assert_eq!(one(&mut c, &req(APPEND, &[], b"ap", &[b'z'; 5])).status, OK);
}

#[test]
fn declared_huge_bodies_do_not_allocate_and_others_are_served() {
    let srv = Server::start(&[]);
    let mut warm = srv.connect();
    assert_eq!(one(&mut warm, &set(b"k", b"v")).status, OK);
    // Touch what 40 ordinary connections touch anyway (every worker's buffers, and with
    // --io-loop=uring its receive-buffer ring, which huge pages can make resident 2 MiB at a
    // time), so that what is measured below is what declaring huge bodies adds.
    let ordinary: Vec<TcpStream> = (0..40)
        .map(|_| {
            let mut c = srv.connect();
            assert_eq!(one(&mut c, &req(GET, &[], b"k", &[])).value, b"v");
            c.write_all(&req(GET, &[], &[b'a'; 1000], &[])[..600])
                .unwrap();
            c
        })
        .collect();
    assert_eq!(one(&mut warm, &req(GET, &[], b"k", &[])).value, b"v");
    drop(ordinary);
    let before = srv.rss_kb();
    // Many connections each declare a 1 GiB - 4 GiB value or a 64 KiB key and stall.
    let mut stalled = Vec::new();
    for i in 0..40u32 {
        let mut c = srv.connect();
        let data = match i % 4 {
            0 => with_body_len(set(b"x", b""), u32::MAX - i),
            1 => with_body_len(req(APPEND, &[], b"x", &[]), 0x7fff_0000 + i),
            2 => with_body_len(req(0x70, &[], &[], &[]), 0x4000_0000),
            _ => {
                // Header of a 65535-byte key, and only part of it.
                let mut r = req(GET, &[], &[], &[]);
                r[2..4].copy_from_slice(&u16::MAX.to_be_bytes());
                r[8..12].copy_from_slice(&u32::from(u16::MAX).to_be_bytes());
                r.extend_from_slice(&[b'a'; 1000]);
                r
            }
        };
        c.write_all(&data).unwrap();
        stalled.push(c);
    }
    // Meanwhile another client is served as usual.
    let mut c = srv.connect();
    for _ in 0..20 {
        assert_eq!(one(&mut c, &req(GET, &[], b"k", &[])).value, b"v");
    }
    let grown = srv.rss_kb().saturating_sub(before);
    // 40 connections' ordinary buffers plus at most ten 64 KiB keys; never a declared body.
    assert!(
        grown < 32 * 1024,
        "RSS grew by {grown} KiB: {}",
        srv.memory_report()
    );
    drop(stalled);
    assert_eq!(one(&mut warm, &req(GET, &[], b"k", &[])).value, b"v");
}

#[test]
fn pipelined_batch_in_one_write() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let mut b = Vec::new();
    for i in 0..200u32 {
        b.extend(req_full(
            SETQ,
            &store_ext(i, 0),
            format!("key{i}").as_bytes(),
            &i.to_be_bytes(),
            0,
            i,
        ));
    }
    for i in 0..200u32 {
        b.extend(req_full(
            GETKQ,
            &[],
            format!("key{i}").as_bytes(),
            &[],
            0,
            i,
        ));
    }
    let rs = batch(&mut c, &b);
    assert_eq!(rs.len(), 200);
    for (i, r) in rs.iter().enumerate() {
        let i = i as u32;
        assert_eq!(
            (r.op, r.opaque, r.key.as_slice()),
            (GETKQ, i, format!("key{i}").as_bytes())
        );
        assert_eq!(
            (r.extras.as_slice(), r.value.as_slice()),
            (&i.to_be_bytes()[..], &i.to_be_bytes()[..])
        );
    }
}
