//! Property checker for the client's reply decoder (`mnemo_client::codec::ReplyDecoder`),
//! shared by the cargo-fuzz target fuzz/fuzz_targets/client_reply.rs (included by `#[path]`)
//! and the stable seeded test tests/reply_fuzz_replay.rs, which also replays
//! fuzz/regressions/client_reply/.
//!
//! An input is one config byte followed by a payload:
//!
//! ```text
//!   byte 0:  bit 7    payload is the reply stream as is (0) or drives the generator of
//!                     near-valid replies below (1), so the fuzzer reaches deep paths quickly
//!            bits 0-3 the `Expect` (mod 10, see `expect_of`)
//!            bits 4-6 mixed into the chunking seed
//! ```
//!
//! Checked per `decode` call: no panic; `Done(_, used)` has 1 <= used <= len and ends on a
//! `\n`, and its reply is what those bytes say (every VALUE's data is exactly as long as its
//! line declared and sits where it declared; stats/lines one per line, error = the last
//! line); the same reply from exactly those bytes, `Incomplete` from one byte less;
//! `Incomplete(need)` asks for more than it has and for at most one more byte (a line) or
//! the pending VALUE's declared length + 2 (never more than `MAX_VALUE_LEN` + 2 past what it
//! has, so a hostile length cannot make a connection reserve an unbounded buffer);
//! `LineTooLong` only with a run of more than `MAX_LINE` bytes without a newline; determinism
//! (a resumed decoder agrees with a fresh one on the same bytes). Per stream: fed whole vs
//! fed in random pieces as conn.rs does (the grown buffer passed again after `Incomplete`,
//! the rest with a reset decoder after `Done`) gives the same sequence of outcomes, and so
//! does `decode_from` on a `BytesMut` fed in random pieces (the way conn.rs reads: decoded
//! bytes leave the buffer, values become slices of it), reply for reply.

#![allow(dead_code)]

use mnemo_client::codec::{
    BytesMut, CodecError, Decoded, Expect, Reply, ReplyDecoder, Step, MAX_VALUE_LEN,
};

/// codec.rs's `MAX_LINE` (private there).
pub const MAX_LINE: usize = 64 * 1024;

#[path = "../../../../fuzz/support/rng.rs"]
mod rng;
pub use rng::{hash, Rng};

pub fn expect_of(b: u8) -> Expect {
    match (b & 0x0f) % 10 {
        0 => Expect::Values { cas: false },
        1 => Expect::Values { cas: true },
        2 => Expect::Storage,
        3 => Expect::Delete,
        4 => Expect::Arith,
        5 => Expect::Touch,
        6 => Expect::Ok,
        7 => Expect::Version,
        8 => Expect::Stats,
        _ => Expect::Lines,
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    Done(Reply, usize),
    Incomplete(usize),
    Err(CodecError),
}

impl From<Result<Decoded, CodecError>> for Out {
    fn from(r: Result<Decoded, CodecError>) -> Out {
        match r {
            Ok(Decoded::Done(r, n)) => Out::Done(r, n),
            Ok(Decoded::Incomplete(n)) => Out::Incomplete(n),
            Err(e) => Out::Err(e),
        }
    }
}

/// The whole check on one fuzz input.
pub fn check(data: &[u8]) {
    let Some((&cfg, body)) = data.split_first() else {
        return;
    };
    let expect = expect_of(cfg);
    let generated;
    let input = if cfg & 0x80 != 0 {
        generated = generate(body);
        &generated[..]
    } else {
        body
    };
    check_stream(input, expect, hash(data) ^ u64::from(cfg >> 4));
}

pub fn check_stream(input: &[u8], expect: Expect, chunk_seed: u64) {
    let whole = feed_whole(input, expect);
    let chunked = feed_chunked(input, expect, chunk_seed);
    let taken = feed_from(input, expect, chunk_seed);
    let replies: Vec<Result<Option<Reply>, CodecError>> = whole
        .iter()
        .map(|o| match o {
            Out::Done(r, _) => Ok(Some(r.clone())),
            Out::Incomplete(_) => Ok(None),
            Out::Err(e) => Err(e.clone()),
        })
        .collect();
    if replies != taken {
        let short = |s: String| s.chars().take(400).collect::<String>();
        panic!(
            "decode vs decode_from differ:\n decode {}\n decode_from {}",
            short(format!("{replies:?}")),
            short(format!("{taken:?}"))
        );
    }
    if whole != chunked {
        let short = |o: &[Out]| format!("{o:?}").chars().take(400).collect::<String>();
        let head = String::from_utf8_lossy(&input[..input.len().min(200)]).into_owned();
        panic!(
            "whole vs chunked feeding differ on {head:?}...:\n whole {}\n chunked {}",
            short(&whole),
            short(&chunked)
        );
    }
}

/// Each reply decoded from the rest of the input by a fresh decoder.
fn feed_whole(input: &[u8], expect: Expect) -> Vec<Out> {
    let mut outs = Vec::new();
    let mut start = 0;
    loop {
        let mut dec = ReplyDecoder::new(expect);
        let out = call(&mut dec, &input[start..], expect);
        outs.push(out.clone());
        match out {
            Out::Done(_, used) => start += used,
            _ => return outs,
        }
    }
}

/// As conn.rs: one decoder reset per reply, the buffer grown by reads of random sizes and
/// passed again (from the first unconsumed byte) after every read.
fn feed_chunked(input: &[u8], expect: Expect, seed: u64) -> Vec<Out> {
    let mut rng = Rng::new(seed);
    let mut outs = Vec::new();
    let mut rbuf: Vec<u8> = Vec::new();
    let mut start = 0;
    let mut fed = 0;
    let mut dec = ReplyDecoder::new(Expect::Ok);
    loop {
        dec.reset(expect);
        loop {
            match call(&mut dec, &rbuf[start..], expect) {
                Out::Done(r, used) => {
                    start += used;
                    outs.push(Out::Done(r, used));
                    break;
                }
                Out::Incomplete(need) => {
                    if fed == input.len() {
                        outs.push(Out::Incomplete(need));
                        return outs;
                    }
                    let n = match rng.below(4) {
                        0 => 1 + rng.below(3),
                        1 | 2 => 1 + rng.below(32),
                        _ => 1 + rng.below(1024),
                    } as usize;
                    let n = n.min(input.len() - fed);
                    rbuf.extend_from_slice(&input[fed..fed + n]);
                    fed += n;
                }
                e @ Out::Err(_) => {
                    outs.push(e);
                    return outs;
                }
            }
        }
    }
}

/// As conn.rs reads: `decode_from` on a BytesMut fed in random pieces. Each reply, then
/// `Ok(None)` if the input ends mid-reply, or the error.
fn feed_from(input: &[u8], expect: Expect, seed: u64) -> Vec<Result<Option<Reply>, CodecError>> {
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut outs = Vec::new();
    let mut buf = BytesMut::new();
    let mut fed = 0;
    let mut dec = ReplyDecoder::new(Expect::Ok);
    loop {
        dec.reset(expect);
        loop {
            match dec.decode_from(&mut buf) {
                Ok(Step::Reply(r)) => {
                    outs.push(Ok(Some(r)));
                    break;
                }
                Ok(Step::Need(need)) => {
                    assert!(
                        need > buf.len(),
                        "Need({need}) with {} bytes held",
                        buf.len()
                    );
                    if fed == input.len() {
                        outs.push(Ok(None));
                        return outs;
                    }
                    let most = if rng.below(2) == 0 { 8 } else { 2048 };
                    let n = (1 + rng.below(most) as usize).min(input.len() - fed);
                    buf.extend_from_slice(&input[fed..fed + n]);
                    fed += n;
                }
                Err(e) => {
                    outs.push(Err(e));
                    return outs;
                }
            }
        }
    }
}

/// One `decode` call with the per-call properties checked.
fn call(dec: &mut ReplyDecoder, buf: &[u8], expect: Expect) -> Out {
    let out = Out::from(dec.decode(buf));
    let fresh = Out::from(ReplyDecoder::new(expect).decode(buf));
    assert_eq!(out, fresh, "resumed decoder and fresh decoder differ");
    match &out {
        Out::Done(reply, used) => {
            let used = *used;
            assert!(
                (1..=buf.len()).contains(&used),
                "Done used {used} of {}",
                buf.len()
            );
            assert_eq!(buf[used - 1], b'\n', "Done does not end on a newline");
            check_reply(&buf[..used], reply, expect);
            if used < buf.len() {
                let exact = Out::from(ReplyDecoder::new(expect).decode(&buf[..used]));
                assert_eq!(exact, out, "not decided by the bytes it used");
            }
            let short = Out::from(ReplyDecoder::new(expect).decode(&buf[..used - 1]));
            match short {
                Out::Incomplete(n) => {
                    assert!(n >= used, "one byte short: Incomplete({n}), used {used}")
                }
                other => panic!("one byte short of a Done({used}): {other:?}"),
            }
        }
        Out::Incomplete(need) => {
            let need = *need;
            assert!(
                need > buf.len(),
                "Incomplete({need}) with {} bytes",
                buf.len()
            );
            if need != buf.len() + 1 {
                assert!(
                    matches!(expect, Expect::Values { .. }),
                    "Incomplete({need}), {} bytes",
                    buf.len()
                );
                let declared = max_declared(buf);
                assert!(
                    need - buf.len() <= declared.saturating_add(2),
                    "Incomplete({need}) with {} bytes, largest declared value {declared}",
                    buf.len()
                );
                assert!(
                    need - buf.len() <= MAX_VALUE_LEN + 2,
                    "Incomplete({need}) past the value limit"
                );
            }
        }
        Out::Err(CodecError::LineTooLong) => {
            let longest = buf
                .split(|&b| b == b'\n')
                .map(<[u8]>::len)
                .max()
                .unwrap_or(0);
            assert!(
                longest > MAX_LINE,
                "LineTooLong, longest run without newline {longest}"
            );
        }
        Out::Err(CodecError::BadDataEnd) => assert!(matches!(expect, Expect::Values { .. })),
        Out::Err(CodecError::Unexpected(_)) => {}
    }
    out
}

/// The largest length any `VALUE` line in `buf` declares.
fn max_declared(buf: &[u8]) -> usize {
    buf.split(|&b| b == b'\n')
        .filter_map(|l| {
            let mut t = l.strip_suffix(b"\r").unwrap_or(l).split(|&b| b == b' ');
            if t.next()? != b"VALUE" {
                return None;
            }
            std::str::from_utf8(t.nth(2)?).ok()?.parse::<usize>().ok()
        })
        .max()
        .unwrap_or(0)
}

/// The line starting at `pos` (without `\r\n` / `\n`) and the offset after its newline.
fn line_at(c: &[u8], pos: usize) -> (&[u8], usize) {
    let nl = pos + c[pos..].iter().position(|&b| b == b'\n').expect("a line");
    let l = &c[pos..nl];
    (l.strip_suffix(b"\r").unwrap_or(l), nl + 1)
}

fn is_error_line(l: &[u8]) -> bool {
    l == b"ERROR"
        || l.starts_with(b"ERROR ")
        || l.starts_with(b"CLIENT_ERROR")
        || l.starts_with(b"SERVER_ERROR")
}

/// `reply` is what the consumed bytes `c` say.
fn check_reply(c: &[u8], reply: &Reply, expect: Expect) {
    let lossy = |l: &[u8]| String::from_utf8_lossy(l).into_owned();
    let (first, first_end) = line_at(c, 0);
    match (expect, reply) {
        (_, Reply::Error(s)) => {
            // The last line, after whatever complete parts came before it.
            let start = c[..c.len() - 1]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            let (l, end) = line_at(c, start);
            assert_eq!(end, c.len());
            assert_eq!(&lossy(l), s);
            assert!(
                is_error_line(l) || (expect == Expect::Lines && l.starts_with(b"BUSY")),
                "error {s:?}"
            );
        }
        (Expect::Values { cas }, Reply::Values(entries)) => {
            let mut pos = 0;
            for e in entries {
                let (l, le) = line_at(c, pos);
                let t: Vec<&[u8]> = l.split(|&b| b == b' ').collect();
                assert!(t.len() == 4 || t.len() == 5, "VALUE line {:?}", lossy(l));
                assert_eq!(t[0], b"VALUE");
                assert_eq!(t[1], &e.key[..]);
                assert_eq!(
                    std::str::from_utf8(t[2]).unwrap().parse::<u32>().unwrap(),
                    e.flags
                );
                let declared: usize = std::str::from_utf8(t[3]).unwrap().parse().unwrap();
                assert_eq!(e.data.len(), declared, "data length vs VALUE line");
                assert_eq!(&c[le..le + declared], &e.data[..]);
                assert_eq!(&c[le + declared..le + declared + 2], b"\r\n");
                assert_eq!(
                    e.cas,
                    t.get(4)
                        .map(|c| std::str::from_utf8(c).unwrap().parse::<u64>().unwrap())
                );
                assert!(!cas || e.cas.is_some(), "gets reply without cas");
                pos = le + declared + 2;
            }
            let (l, end) = line_at(c, pos);
            assert_eq!((l, end), (&b"END"[..], c.len()));
        }
        (Expect::Stats, Reply::Stats(stats)) => {
            let mut pos = 0;
            for (k, v) in stats {
                let (l, le) = line_at(c, pos);
                let l = lossy(l);
                let rest = l.strip_prefix("STAT ").expect("STAT line");
                assert_eq!(
                    rest.split_once(' ').map_or((rest, ""), |p| p),
                    (k.as_str(), v.as_str())
                );
                pos = le;
            }
            assert_eq!(line_at(c, pos), (&b"END"[..], c.len()));
        }
        (Expect::Lines, Reply::Lines(lines)) => {
            // A dump may open with OK (memcached 1.6.43, mnemod): not one of its lines.
            let mut pos = if first == b"OK" { first_end } else { 0 };
            for s in lines {
                let (l, le) = line_at(c, pos);
                assert_eq!(&lossy(l), s);
                assert!(l != b"END" && !l.starts_with(b"BUSY"));
                pos = le;
            }
            assert_eq!(line_at(c, pos), (&b"END"[..], c.len()));
        }
        (single, r) => {
            assert_eq!(
                first_end,
                c.len(),
                "single-line reply used more than its line"
            );
            let ok = match (single, r) {
                (Expect::Storage, Reply::Stored) => first == b"STORED",
                (Expect::Storage, Reply::NotStored) => first == b"NOT_STORED",
                (Expect::Storage, Reply::Exists) => first == b"EXISTS",
                (Expect::Delete, Reply::Deleted) => first == b"DELETED",
                (Expect::Touch, Reply::Touched) => first == b"TOUCHED",
                (Expect::Ok, Reply::Ok) => first == b"OK",
                (
                    Expect::Storage | Expect::Delete | Expect::Touch | Expect::Arith,
                    Reply::NotFound,
                ) => first == b"NOT_FOUND",
                (Expect::Arith, Reply::Number(n)) => {
                    first.iter().all(u8::is_ascii_digit)
                        && lossy(first).parse::<u64>().ok() == Some(*n)
                }
                (Expect::Version, Reply::Version(v)) => {
                    first.starts_with(b"VERSION ") && lossy(&first[8..]) == *v
                }
                _ => false,
            };
            assert!(ok, "{expect:?} got {r:?} from {:?}", lossy(first));
        }
    }
}

/// Reads the generator's choices from the fuzz payload, zeros past its end.
struct Src<'a>(&'a [u8]);

impl Src<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n
    }
    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

const KEYS: &[&[u8]] = &[b"k", b"a", b"key:1", b"\xff\xfe", b"VALUE"];
const LINES: &[&[u8]] = &[
    b"END\r\n",
    b"STORED\r\n",
    b"NOT_STORED\r\n",
    b"EXISTS\r\n",
    b"NOT_FOUND\r\n",
    b"DELETED\r\n",
    b"TOUCHED\r\n",
    b"OK\r\n",
    b"VERSION 1.6.21\r\n",
    b"123\r\n",
    b"18446744073709551615\r\n",
    b"18446744073709551616\r\n",
    b"STAT pid 1\r\n",
    b"STAT version 1.6.21 x\r\n",
    b"STAT x\r\n",
    b"SERVER_ERROR out of memory\r\n",
    b"CLIENT_ERROR bad data chunk\r\n",
    b"ERROR\r\n",
    b"BUSY currently processing crawler request\r\n",
    b"key=a exp=-1 la=1700000000 cas=2 fetch=no cls=1 size=63\n",
    b"END",
    b"\r\n",
    b"\n",
];

/// A stream of near-valid replies: VALUE blocks (some with wrong, huge or unparsable
/// lengths), the fixed lines above, random bytes, then a few mutations.
pub fn generate(payload: &[u8]) -> Vec<u8> {
    let (params, body) = payload.split_at(payload.len().min(7));
    let mut s = Src(body);
    let mut out = Vec::new();
    while !s.done() && out.len() < 1 << 16 {
        match s.below(8) {
            0..=2 => {
                let key = KEYS[s.below(KEYS.len())];
                let len = match s.below(4) {
                    0 => s.below(4),
                    1 | 2 => s.below(64),
                    _ => usize::from(s.byte()) * 16,
                };
                let declared = match s.below(8) {
                    0 => format!("{}", len + 1 + s.below(3)),
                    1 => format!("{}", len.saturating_sub(1 + s.below(3))),
                    2 => [
                        "18446744073709551615",
                        "99999999999",
                        "1073741825",
                        "4294967296",
                        "-1",
                        "x",
                        "",
                    ][s.below(7)]
                    .to_owned(),
                    _ => len.to_string(),
                };
                let flags = ["0", "1", "4294967295", "4294967296"][s.below(4)];
                out.extend_from_slice(b"VALUE ");
                out.extend_from_slice(key);
                out.extend_from_slice(format!(" {flags} {declared}").as_bytes());
                match s.below(4) {
                    0 => out.extend_from_slice(b" 99"),
                    1 => out.extend_from_slice(b" 18446744073709551616"),
                    _ => {}
                }
                out.extend_from_slice(if s.below(4) == 0 { b"\n" } else { b"\r\n" });
                let fill = s.byte();
                out.extend(std::iter::repeat_n(fill, len));
                out.extend_from_slice(if s.below(8) == 0 { b"\n" } else { b"\r\n" });
            }
            3..=6 => out.extend_from_slice(LINES[s.below(LINES.len())]),
            _ => {
                let n = s.below(16);
                for _ in 0..n {
                    out.push(s.byte());
                }
            }
        }
    }
    // Mutations: flip, insert or delete a byte.
    let mut s = Src(params);
    for _ in 0..s.below(3) {
        if out.is_empty() {
            break;
        }
        let at = (usize::from(s.byte()) << 8 | usize::from(s.byte())) % out.len();
        match s.below(3) {
            0 => out[at] ^= s.byte().max(1),
            1 => out.insert(at, [b'\n', b'\r', b' ', b'0'][s.below(4)]),
            _ => {
                out.remove(at);
            }
        }
    }
    out
}
