//! Properties of the binary protocol's parsers: `frame` + `request` as the server calls them
//! (crates/server/src/protocol/binary.rs `step`, skipping refused values as its session does), the
//! client's `parse_response`, and the encoders against them.
//!
//! Per step: bounds (`Incomplete` asks for more than it has and never for more than header +
//! extras + key + the item limit, so a declared 4 GB body allocates nothing), what frame
//! decodes is the header's bytes, borrowed key/value are where the header says, and the
//! outcome is deterministic. Per decided outcome: the same from exactly the bytes it was
//! decided by, `Incomplete` (for no more than them) from fewer. Per stream: whole vs chunked
//! feeding gives the same outcomes.

use mnemo_proto::binary::{
    self as bin, frame, parse_response, request, Frame, Header, LargeOp, Parsed, ParsedResponse,
    Request, Status, HEADER_LEN, KEY_MAX, MAGIC_REQUEST, MAGIC_RESPONSE, SASL_MECH_MAX,
};
use mnemo_proto::text::Limits;

use super::{chunks, inside, prefix_points, Config, Rng};

/// What the server does with the front of its input (SASL off).
#[derive(Debug, PartialEq, Eq, Clone)]
pub enum Step {
    Incomplete(usize),
    /// Reply (Debug form), then close the connection.
    Close(String),
    /// Reply, use `n` bytes, then skip `skip` more as they arrive.
    Consumed {
        n: usize,
        what: String,
        skip: u64,
    },
}

fn head_len(h: &Header) -> usize {
    HEADER_LEN + usize::from(h.extras_len) + usize::from(h.key_len)
}

/// One server step on `input`, with every per-call property checked. Also returns how many
/// bytes decided the outcome.
pub fn step(input: &[u8], limits: &Limits) -> (Step, usize) {
    let f = frame(input);
    assert_eq!(frame(input), f, "frame not deterministic");
    let h = match f {
        Frame::Incomplete(n) => {
            assert!(
                n > input.len(),
                "frame Incomplete({n}) with {} bytes",
                input.len()
            );
            let want = match Header::decode(input) {
                None => HEADER_LEN,
                Some(h) => head_len(&h),
            };
            assert_eq!(n, want);
            return (Step::Incomplete(n), 0);
        }
        Frame::BadMagic => {
            assert!(input.len() >= HEADER_LEN && input[0] != MAGIC_REQUEST);
            return (Step::Close("bad magic".into()), HEADER_LEN);
        }
        Frame::Inconsistent(h) | Frame::Ready(h) => {
            assert_eq!(Header::decode(input), Some(h));
            assert!(h.magic == MAGIC_REQUEST && input.len() >= head_len(&h));
            let bad = u32::from(h.key_len) + u32::from(h.extras_len) > h.body_len;
            assert_eq!(bad, matches!(f, Frame::Inconsistent(_)), "{f:?}");
            if bad {
                return (Step::Close(format!("{f:?}")), head_len(&h));
            }
            h
        }
    };
    let head = head_len(&h);
    let total = HEADER_LEN + h.body_len as usize;
    let p = request(&h, input, limits);
    assert_eq!(request(&h, input, limits), p, "request not deterministic");
    match p {
        Parsed::Incomplete(n) => {
            assert!(
                n > input.len() && n == total,
                "request Incomplete({n}), {} bytes, body {}",
                input.len(),
                h.body_len
            );
            assert!(
                n <= HEADER_LEN + 255 + KEY_MAX + limits.item_size_max,
                "asks for {n} bytes: over the item limit"
            );
            (Step::Incomplete(n), 0)
        }
        Parsed::Invalid => (Step::Close("invalid".into()), head),
        Parsed::Unknown { consumed, skip } => {
            assert_eq!(consumed, head);
            assert_eq!(skip, h.value_len());
            (
                Step::Consumed {
                    n: consumed,
                    what: format!("unknown {h:?}"),
                    skip: u64::from(skip),
                },
                head,
            )
        }
        Parsed::Request(r, used) => {
            assert!(
                used <= input.len() && (used == head || used == total),
                "used {used}, head {head}, total {total}"
            );
            check_request(&input[..used], &h, &r, limits);
            let what = format!("{r:?}");
            let s = match r {
                Request::TooLarge { close: true, .. } | Request::Quit { .. } => Step::Close(what),
                Request::TooLarge { skip, .. } | Request::SaslMechTooLong { skip } => {
                    Step::Consumed {
                        n: used,
                        what,
                        skip: u64::from(skip),
                    }
                }
                _ => Step::Consumed {
                    n: used,
                    what,
                    skip: 0,
                },
            };
            (s, used)
        }
    }
}

fn check_request(used: &[u8], h: &Header, r: &Request<'_>, limits: &Limits) {
    let ext = usize::from(h.extras_len);
    let head = head_len(h);
    let wire_key = &used[HEADER_LEN + ext..head];
    let vlen = h.value_len();
    let key_is = |key: &[u8]| {
        assert!(inside(used, key) && key == wire_key, "key not the header's");
        assert!(key.len() <= KEY_MAX);
    };
    // A value is the rest of the body, and the request used exactly the body.
    let value_is = |value: &[u8]| {
        assert_eq!(used.len(), HEADER_LEN + h.body_len as usize);
        assert_eq!(value.len() as u64, u64::from(vlen));
        assert_eq!(value.as_ptr(), used[head..].as_ptr());
    };
    let line_only = used.len() == head;
    match *r {
        Request::Get { key, .. }
        | Request::Touch { key, .. }
        | Request::Delete { key, .. }
        | Request::Delta { key, .. } => {
            key_is(key);
            assert!(!key.is_empty() && line_only);
        }
        Request::Stat { key } => {
            key_is(key);
            assert!(line_only);
        }
        Request::Store {
            key, flags, value, ..
        } => {
            key_is(key);
            value_is(value);
            assert!(!key.is_empty() && limits.item_fits(key.len(), flags, value.len()));
            assert_eq!(
                flags,
                u32::from_be_bytes(used[HEADER_LEN..HEADER_LEN + 4].try_into().unwrap())
            );
        }
        Request::Concat { key, value, .. } => {
            key_is(key);
            value_is(value);
            assert!(!key.is_empty() && limits.item_fits(key.len(), 0, value.len()));
        }
        Request::Sasl { mech, data, .. } => {
            key_is(mech);
            value_is(data);
            assert!(!mech.is_empty() && mech.len() <= SASL_MECH_MAX);
        }
        Request::TooLarge {
            op,
            key,
            skip,
            close,
        } => {
            key_is(key);
            assert!(line_only);
            assert_eq!(close, vlen > i32::MAX as u32);
            if !close {
                assert_eq!(skip, vlen);
                let fits = match op {
                    LargeOp::Store(_) => limits.item_fits(key.len(), 1, vlen as usize),
                    LargeOp::Concat => limits.item_fits(key.len(), 0, vlen as usize),
                    LargeOp::Sasl => {
                        vlen as usize <= limits.item_size_max / 2
                            && limits.item_fits(key.len(), 0, vlen as usize)
                    }
                };
                assert!(!fits, "refused a value that fits");
            }
        }
        Request::SaslMechTooLong { skip } => {
            assert!(line_only && wire_key.len() > SASL_MECH_MAX && skip == vlen);
        }
        _ => assert!(line_only),
    }
}

/// A decided outcome: the same from exactly `d` bytes, Incomplete (for at most d) from fewer.
fn check_decided(input: &[u8], s: &Step, d: usize, limits: &Limits, rng: &mut Rng) {
    if d == 0 {
        return;
    }
    assert_eq!(
        step(&input[..d], limits).0,
        *s,
        "answer changes with the bytes after the {d} it was decided by"
    );
    let head = Header::decode(input).map(|h| head_len(&h)).unwrap_or(0);
    for q in prefix_points(d, &[HEADER_LEN, head], rng) {
        match step(&input[..q], limits).0 {
            Step::Incomplete(need) => assert!(
                need > q && need <= d,
                "prefix {q} of {d}: Incomplete({need})"
            ),
            other => panic!("prefix {q} of {d} bytes answered {other:?}, whole: {s:?}"),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Ev {
    Step {
        at: usize,
        step: Step,
    },
    End {
        at: usize,
        skip: u64,
        need: Option<usize>,
    },
}

/// Feed `stream` in reads of `sizes` bytes and step through it as the server does.
pub fn run(stream: &[u8], limits: &Limits, sizes: &[usize], whole: bool, rng: &mut Rng) -> Vec<Ev> {
    let mut evs = Vec::new();
    let (mut avail, mut pos, mut skip) = (0usize, 0usize, 0u64);
    let mut need: Option<usize>;
    let mut promise: Option<(usize, usize)> = None;
    let mut sizes = sizes.iter();
    loop {
        loop {
            if skip > 0 {
                let n = skip.min((avail - pos) as u64);
                pos += n as usize;
                skip -= n;
                if skip > 0 {
                    need = None;
                    break;
                }
            }
            if pos == avail {
                need = None;
                break;
            }
            let input = &stream[pos..avail];
            let (s, d) = step(input, limits);
            if let Some((at, promised)) = promise {
                if at == pos && input.len() < promised {
                    assert!(
                        matches!(s, Step::Incomplete(n) if n >= promised),
                        "asked for {promised}, got {s:?}"
                    );
                }
            }
            if whole {
                check_decided(input, &s, d, limits, rng);
            }
            match s {
                Step::Incomplete(n) => {
                    need = Some(n);
                    promise = Some((pos, n));
                    break;
                }
                Step::Close(_) => {
                    evs.push(Ev::Step { at: pos, step: s });
                    return evs;
                }
                Step::Consumed { n, skip: k, .. } => {
                    evs.push(Ev::Step { at: pos, step: s });
                    pos += n;
                    skip = k;
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
        skip,
        need,
    });
    evs
}

pub fn check_stream(stream: &[u8], cfg: &Config) {
    let mut rng = Rng::new(cfg.chunk_seed);
    let whole = run(stream, &cfg.limits, &[stream.len()], true, &mut rng);
    let sizes = chunks(stream.len(), cfg.chunk_seed);
    let part = run(stream, &cfg.limits, &sizes, false, &mut rng);
    assert_eq!(whole, part, "whole and chunked runs differ");
}

/// The client's response parser on the stream as it is and with request magic turned into
/// response magic (so generated requests become plausible responses).
pub fn check_responses(stream: &[u8]) {
    walk_responses(stream);
    let flipped: Vec<u8> = stream
        .iter()
        .map(|&b| {
            if b == MAGIC_REQUEST {
                MAGIC_RESPONSE
            } else {
                b
            }
        })
        .collect();
    walk_responses(&flipped);
}

fn walk_responses(stream: &[u8]) {
    let mut pos = 0;
    while pos < stream.len() {
        let buf = &stream[pos..];
        let p = parse_response(buf);
        assert_eq!(parse_response(buf), p);
        let d = match p {
            ParsedResponse::Incomplete(n) => {
                assert!(n > buf.len());
                let h = Header::decode(buf);
                assert!(
                    n == HEADER_LEN || h.is_some_and(|h| n == HEADER_LEN + h.body_len as usize)
                );
                return;
            }
            ParsedResponse::Malformed => {
                let h = Header::decode(buf).expect("malformed before 24 bytes");
                assert!(
                    h.magic != MAGIC_RESPONSE
                        || u32::from(h.key_len) + u32::from(h.extras_len) > h.body_len
                );
                HEADER_LEN
            }
            ParsedResponse::Response(r, n) => {
                let h = Header::decode(buf).unwrap();
                assert_eq!(r.header, h);
                assert_eq!(n, HEADER_LEN + h.body_len as usize);
                let body = &buf[HEADER_LEN..n];
                assert_eq!(r.extras.len(), usize::from(h.extras_len));
                assert_eq!(r.key.len(), usize::from(h.key_len));
                assert_eq!(r.extras.len() + r.key.len() + r.value.len(), body.len());
                assert!(inside(body, r.extras) && inside(body, r.key) && inside(body, r.value));
                assert_eq!([r.extras, r.key, r.value].concat(), body);
                n
            }
        };
        assert_eq!(
            parse_response(&buf[..d]),
            p,
            "response answer changes with later bytes"
        );
        for q in [0, 1, HEADER_LEN - 1, HEADER_LEN, d - 1]
            .into_iter()
            .filter(|&q| q < d)
        {
            match parse_response(&buf[..q]) {
                ParsedResponse::Incomplete(n) => assert!(n > q && n <= d),
                other => panic!("response prefix {q} of {d}: {other:?}"),
            }
        }
        if matches!(p, ParsedResponse::Malformed) {
            return;
        }
        pos += d;
    }
}

/// Encoders against decoders: header bytes, a request the client encodes is framed with the
/// same fields, a response the server encodes is parsed back into its parts.
pub fn check_round_trips(data: &[u8]) {
    if let Some(h) = Header::decode(data) {
        let mut out = Vec::new();
        h.encode(&mut out);
        assert_eq!(out, &data[..HEADER_LEN]);
    }
    let mut rng = Rng::new(super::hash(data));
    let take = |rng: &mut Rng, max: u64| -> &[u8] {
        let start = rng.below(data.len() as u64 + 1) as usize;
        let n = (rng.below(max + 1) as usize).min(data.len() - start);
        &data[start..start + n]
    };
    let (extras, key, value) = (take(&mut rng, 24), take(&mut rng, 300), take(&mut rng, 600));
    let (opcode, opaque, cas) = (rng.next() as u8, rng.next() as u32, rng.next());

    let mut out = Vec::new();
    bin::encode_request(&mut out, opcode, opaque, cas, extras, key, value);
    let Frame::Ready(h) = frame(&out) else {
        panic!("encoded request not framed: {:?}", frame(&out))
    };
    assert_eq!((h.opcode, h.opaque, h.cas), (opcode, opaque, cas));
    assert_eq!(
        (
            usize::from(h.extras_len),
            usize::from(h.key_len),
            h.body_len as usize
        ),
        (extras.len(), key.len(), out.len() - HEADER_LEN)
    );
    let limits = Limits {
        item_size_max: 1 << 20,
        use_cas: true,
    };
    assert!(
        !matches!(request(&h, &out, &limits), Parsed::Incomplete(_)),
        "whole encoded request incomplete"
    );

    out.clear();
    let status = [
        Status::Ok,
        Status::KeyNotFound,
        Status::TooLarge,
        Status::UnknownCommand,
    ][(opcode & 3) as usize];
    bin::response(&mut out, opcode, status, opaque, cas, extras, key, value);
    match parse_response(&out) {
        ParsedResponse::Response(r, n) => {
            assert_eq!(n, out.len());
            assert_eq!((r.extras, r.key, r.value), (extras, key, value));
            assert_eq!(
                (r.header.opcode, r.header.opaque, r.header.cas, r.status()),
                (opcode, opaque, cas, status as u16)
            );
        }
        other => panic!("encoded response parsed as {other:?}"),
    }
}
