//! Properties of `text::parse` (classic and meta commands; the server calls nothing else for
//! a text connection, see crates/server/src/conn.rs `process`).
//!
//! Per call: bounds, borrowed slices inside the consumed bytes, key rules, determinism.
//! Per decided outcome (whole-buffer run only): same answer from exactly the consumed bytes,
//! `Incomplete` from shorter prefixes; `get`/`gets` lines answer the same on the fast path
//! and on the general one (the same keys after `gat 0`).
//! Per stream: fed whole vs fed in chunks, the same sequence of outcomes, TooLarge data
//! being swallowed as the server does; the only allowed difference is memcached's: a chunk
//! boundary that leaves more than 2048 bytes without a newline closes the connection.

use mnemo_proto::meta::MetaKind;
use mnemo_proto::num::{is_c_space, parse_i32, parse_u32_flags, parse_u64};
use mnemo_proto::text::{parse, Limits, Parsed, Request, GET_LINE_MAX, KEY_MAX, LINE_MAX};

use super::{chunks, inside, prefix_points, Config, Rng};

#[derive(Debug, PartialEq, Eq, Clone)]
pub enum Ev {
    /// A request or an error at stream offset `at`: its Debug form and the bytes it used.
    Parsed {
        at: usize,
        what: String,
        used: usize,
    },
    Close {
        at: usize,
    },
    /// Input ran out: where parsing stood, data still to swallow, the last `Incomplete`.
    End {
        at: usize,
        swallow: usize,
        need: Option<usize>,
    },
}

pub fn check_stream(stream: &[u8], cfg: &Config) {
    let limits = &cfg.limits;
    let mut rng = Rng::new(cfg.chunk_seed);
    let whole = run(stream, limits, &[stream.len()], true, &mut rng);
    let sizes = chunks(stream.len(), cfg.chunk_seed);
    let part = run(stream, limits, &sizes, false, &mut rng);
    compare(stream, &whole, &part);
    check_numbers(stream);
}

/// Feed `stream` in reads of `sizes` bytes and parse as conn.rs does: every whole request in
/// the buffer, swallowing a refused data block, until the parser needs more.
pub fn run(stream: &[u8], limits: &Limits, sizes: &[usize], whole: bool, rng: &mut Rng) -> Vec<Ev> {
    let mut evs = Vec::new();
    let (mut avail, mut pos, mut swallow) = (0usize, 0usize, 0usize);
    let mut need: Option<usize>;
    // The last Incomplete: (offset, need). Until `need` bytes are there it must hold.
    let mut promise: Option<(usize, usize)> = None;
    let mut sizes = sizes.iter();
    loop {
        loop {
            if swallow > 0 {
                let n = swallow.min(avail - pos);
                pos += n;
                swallow -= n;
                if swallow > 0 {
                    need = None;
                    break;
                }
            }
            if pos == avail {
                need = None;
                break;
            }
            let buf = &stream[pos..avail];
            let p = parse(buf, limits);
            check_result(buf, &p, limits);
            if let Some((at, promised)) = promise {
                if at == pos && buf.len() < promised {
                    assert!(
                        matches!(p, Parsed::Incomplete(n) if n >= promised) || early_close(buf, &p),
                        "asked for {promised} bytes, got {p:?} from {}",
                        buf.len()
                    );
                }
            }
            if whole {
                check_decided(buf, &p, limits, rng);
            }
            match p {
                Parsed::Request(r, n) => {
                    if let Request::TooLarge { swallow: s, .. } = r {
                        swallow = s;
                    }
                    evs.push(Ev::Parsed {
                        at: pos,
                        what: format!("{r:?}"),
                        used: n,
                    });
                    pos += n;
                }
                Parsed::Error { consumed, .. } => {
                    evs.push(Ev::Parsed {
                        at: pos,
                        what: format!("{p:?}"),
                        used: consumed,
                    });
                    pos += consumed;
                }
                Parsed::Incomplete(n) => {
                    need = Some(n);
                    promise = Some((pos, n));
                    break;
                }
                Parsed::Close => {
                    evs.push(Ev::Close { at: pos });
                    return evs;
                }
            }
        }
        match sizes.next() {
            Some(&n) if avail < stream.len() => avail = (avail + n).min(stream.len()),
            _ => break,
        }
    }
    evs.push(Ev::End {
        at: pos,
        swallow,
        need,
    });
    evs
}

fn compare(stream: &[u8], whole: &[Ev], part: &[Ev]) {
    let Some(i) = whole.iter().zip(part).position(|(a, b)| a != b) else {
        assert_eq!(whole.len(), part.len(), "whole {whole:?}\nchunked {part:?}");
        return;
    };
    // Only a line over LINE_MAX split by a read may differ: the chunked run saw > 2048 bytes
    // without a newline and closed (check_result made sure that is why), the whole run saw the line.
    let Ev::Close { at } = part[i] else {
        panic!(
            "streams differ at event {i}: whole {:?}, chunked {:?}",
            whole[i], part[i]
        );
    };
    let nl = find_nl(&stream[at..]).unwrap_or(usize::MAX);
    assert!(
        nl > LINE_MAX,
        "chunked run closed at {at} on a line of {nl} bytes; whole run: {:?}",
        whole[i]
    );
}

/// memcached drops the connection when more than LINE_MAX bytes arrive without a newline
/// (unless it is a multi-get): the one place a prefix is answered before it is complete.
fn early_close(buf: &[u8], p: &Parsed<'_>) -> bool {
    matches!(p, Parsed::Close) && find_nl(buf).is_none() && buf.len() > LINE_MAX
}

/// Properties of one answer to one buffer.
fn check_result(buf: &[u8], p: &Parsed<'_>, limits: &Limits) {
    assert_eq!(parse(buf, limits), *p, "not deterministic");
    let nl = find_nl(buf);
    match (*p, nl) {
        (Parsed::Incomplete(need), None) => {
            assert_eq!(
                need,
                buf.len() + 1,
                "no newline yet: one more byte is all we know we need"
            );
            assert!(buf.len() <= GET_LINE_MAX);
        }
        (Parsed::Incomplete(need), Some(nl)) => {
            assert!(
                need > buf.len(),
                "Incomplete({need}) with {} bytes",
                buf.len()
            );
            // A declared length never asks for more than the item limit allows.
            assert!(
                need <= nl + 1 + limits.item_size_max + 2,
                "need {need} beyond the item limit"
            );
        }
        (Parsed::Close, None) => assert!(early_close(buf, p), "close on a short line"),
        (Parsed::Close, Some(nl)) => {
            let line = &buf[..nl];
            assert!(
                line.windows(5).any(|w| w == b"HTTP/"),
                "close on a non-HTTP line {:?}",
                show(line)
            );
        }
        (Parsed::Error { consumed, .. }, Some(nl)) => {
            assert!(
                consumed > nl && consumed <= buf.len(),
                "error consumed {consumed} of {}",
                buf.len()
            );
            // Past the line only a whole data block (+ its two terminator bytes) is swallowed.
            assert!(consumed == nl + 1 || consumed >= nl + 3);
        }
        (Parsed::Request(r, n), Some(nl)) => {
            assert!(
                n > nl && n <= buf.len(),
                "request used {n} of {}",
                buf.len()
            );
            check_request(&buf[..n], nl, &r, limits);
        }
        (p, None) => panic!("{p:?} without a newline"),
    }
}

fn key_ok(line: &[u8], key: &[u8]) {
    assert!(inside(line, key), "key not from the line");
    assert!(
        !key.is_empty() && key.len() <= KEY_MAX,
        "key length {}",
        key.len()
    );
    // A NUL is a key byte since memcached 1.6.40.
    assert!(!key.contains(&b' '), "key {:?}", show(key));
}

/// A request against the bytes it used (`used[..nl]` is its line).
fn check_request(used: &[u8], nl: usize, r: &Request<'_>, limits: &Limits) {
    let line = &used[..nl];
    let body = &used[nl + 1..];
    let line_only = used.len() == nl + 1;
    // A data block: everything after the line but the final "\r\n".
    let block = |data: &[u8]| {
        assert_eq!(body.len(), data.len() + 2, "data block length");
        assert!(body.ends_with(b"\r\n"), "data block not ended by \\r\\n");
        assert_eq!(
            data.as_ptr(),
            body.as_ptr(),
            "data not right after the line"
        );
    };
    match *r {
        Request::Get { keys, touch, .. } => {
            // memcached answers a bare `gat <exptime>` with END: only get/gets need a key.
            assert!(
                line_only && (touch.is_some() || !keys.is_empty()),
                "get without keys"
            );
            for k in keys.iter() {
                key_ok(line, k);
            }
        }
        Request::Store {
            key, flags, data, ..
        } => {
            key_ok(line, key);
            block(data);
            assert!(
                limits.item_fits(key.len(), flags, data.len()),
                "stored item over the limit"
            );
        }
        Request::TooLarge { key, swallow, .. } => {
            key_ok(line, key);
            assert!(line_only);
            assert!(swallow >= 2 && swallow - 2 <= i32::MAX as usize);
            assert!(
                !limits.item_fits(key.len(), 1, swallow - 2),
                "refused an item that fits"
            );
        }
        Request::Delete { key, .. }
        | Request::Delta { key, .. }
        | Request::Touch { key, .. }
        | Request::MetaDebug { key } => {
            key_ok(line, key);
            assert!(line_only);
        }
        Request::Meta(m) => {
            key_ok(line, m.raw_key);
            let key = m.key.as_bytes();
            assert!(!key.is_empty() && key.len() <= KEY_MAX);
            if !m.flags.base64 {
                assert_eq!(key, m.raw_key);
            }
            if let Some(o) = m.flags.opaque {
                assert!(inside(line, o) && o.len() <= mnemo_proto::meta::OPAQUE_MAX);
            }
            let cmd = line
                .iter()
                .position(|&b| b != b' ')
                .map(|i| &line[i..])
                .unwrap_or(&[]);
            let want = match m.kind {
                MetaKind::Get => b"mg",
                MetaKind::Set => b"ms",
                MetaKind::Delete => b"md",
                MetaKind::Arith => b"ma",
            };
            assert!(cmd.starts_with(want), "{:?} from {:?}", m.kind, show(line));
            if m.kind == MetaKind::Set {
                block(m.data);
                assert!(limits.item_fits(
                    m.raw_key.len(),
                    m.flags.client_flags.unwrap_or(0),
                    m.data.len()
                ));
            } else {
                assert!(line_only && m.data.is_empty());
            }
        }
        Request::Stats { args } | Request::LruCrawler { args } => {
            assert!(line_only);
            for a in args.iter() {
                assert!(inside(line, a));
            }
        }
        _ => assert!(line_only),
    }
}

/// An outcome is decided by the bytes it used: the same from exactly those, Incomplete (for no
/// more than them) from fewer.
fn check_decided(buf: &[u8], p: &Parsed<'_>, limits: &Limits, rng: &mut Rng) {
    let nl = find_nl(buf);
    let d = match (*p, nl) {
        (Parsed::Request(_, n), _) | (Parsed::Error { consumed: n, .. }, _) => n,
        (Parsed::Close, Some(nl)) => nl + 1,
        _ => return,
    };
    let nl = nl.expect("decided without a newline");
    assert_eq!(
        parse(&buf[..d], limits),
        *p,
        "answer changes with the bytes after those it used"
    );
    for q in prefix_points(d, &[nl, nl + 1], rng) {
        let pre = &buf[..q];
        match parse(pre, limits) {
            Parsed::Incomplete(need) => assert!(
                need > q && need <= d,
                "prefix {q} of {d}: Incomplete({need}) (line {:?})",
                show(&buf[..nl])
            ),
            r => assert!(
                early_close(pre, &r),
                "prefix {q} of {d} bytes answered {r:?}, whole: {p:?}"
            ),
        }
    }
    fast_path_agrees(buf, nl, p, limits);
}

/// `get`/`gets` lines take a one-pass fast path; the same keys after `gat 0`/`gats 0` take the
/// general tokenizer. Both must give the same keys or the same error.
fn fast_path_agrees(buf: &[u8], nl: usize, p: &Parsed<'_>, limits: &Limits) {
    let (cmd, rest) = if let Some(r) = buf[..nl + 1].strip_prefix(b"get ") {
        (&b"gat 0 "[..], r)
    } else if let Some(r) = buf[..nl + 1].strip_prefix(b"gets ") {
        (&b"gats 0 "[..], r)
    } else {
        return;
    };
    let general = [cmd, rest].concat();
    let q = parse(&general, limits);
    let line = show(&buf[..nl]);
    match (*p, q) {
        (
            Parsed::Request(
                Request::Get {
                    keys: k1,
                    cas: c1,
                    touch: t1,
                },
                n1,
            ),
            Parsed::Request(
                Request::Get {
                    keys: k2,
                    cas: c2,
                    touch: t2,
                },
                n2,
            ),
        ) => {
            assert!(
                k1.iter().eq(k2.iter())
                    && c1 == c2
                    && t1.is_none()
                    && t2 == Some(0)
                    && n2 == n1 + 2,
                "fast/general differ: {line:?}"
            );
        }
        (
            Parsed::Error {
                reply: r1,
                consumed: n1,
                noreply: q1,
            },
            Parsed::Error {
                reply: r2,
                consumed: n2,
                noreply: q2,
            },
        ) => {
            assert!(
                r1 == r2 && q1 == q2 && n2 == n1 + 2,
                "fast/general errors differ: {line:?}: {r1:?} / {r2:?}"
            );
        }
        (a, b) => panic!("fast path {a:?}, general path {b:?} for {line:?}"),
    }
}

/// The number parsers against a reference written from their documented rules (C's
/// `strtoull`/`strtol` plus memcached's `safe_*` checks), on the stream's tokens and on
/// numbers printed from its bytes.
fn check_numbers(stream: &[u8]) {
    for tok in stream
        .split(|&b| b == b' ' || b == b'\n')
        .filter(|t| t.len() <= 48)
        .take(64)
    {
        let r = reference(tok);
        assert_eq!(
            parse_u64(tok),
            r.and_then(|(neg, m)| ref_u64(neg, m)),
            "parse_u64 {:?}",
            show(tok)
        );
        assert_eq!(
            parse_u32_flags(tok),
            r.and_then(|(neg, m)| ref_u64(neg, m)).map(|v| v as u32)
        );
        assert_eq!(
            parse_i32(tok),
            r.and_then(|(neg, m)| ref_i64(neg, m)).map(|v| v as i32),
            "parse_i32 {:?}",
            show(tok)
        );
    }
    for w in stream.chunks(8).take(16) {
        let mut b = [0u8; 8];
        b[..w.len()].copy_from_slice(w);
        let v = u64::from_le_bytes(b);
        assert_eq!(parse_u64(v.to_string().as_bytes()), Some(v));
        assert_eq!(parse_i32((v as i64).to_string().as_bytes()), Some(v as i32));
    }
}

/// (negative, magnitude) of `[C space]* [+-]? digits` followed by the end or a C space.
fn reference(tok: &[u8]) -> Option<(bool, u128)> {
    let s = &tok[tok.iter().take_while(|&&b| is_c_space(b)).count()..];
    let (neg, s) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || (digits < s.len() && !is_c_space(s[digits])) {
        return None;
    }
    let t = s[..digits].iter().skip_while(|&&b| b == b'0').count();
    // More than 39 significant digits cannot fit in u128; anything past 20 overflows anyway.
    let m = if t > 38 {
        u128::MAX
    } else {
        std::str::from_utf8(&s[..digits])
            .ok()?
            .parse::<u128>()
            .ok()?
    };
    Some((neg, m))
}

fn ref_u64(neg: bool, m: u128) -> Option<u64> {
    let m = u64::try_from(m).ok()?;
    // strtoull negates; memcached refuses a '-' whose result looks negative as signed.
    let v = if neg { m.wrapping_neg() } else { m };
    (!(neg && (v as i64) < 0)).then_some(v)
}

fn ref_i64(neg: bool, m: u128) -> Option<i64> {
    let v = if neg {
        -i128::try_from(m).ok()?
    } else {
        i128::try_from(m).ok()?
    };
    i64::try_from(v).ok()
}

pub fn show(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(120)]).into_owned();
    if b.len() > 120 {
        format!("{s}... ({} bytes)", b.len())
    } else {
        s
    }
}

fn find_nl(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}
