use super::*;

const L: Limits = Limits {
    item_size_max: 1024 * 1024,
    use_cas: true,
};

fn req(op: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    encode_request(&mut v, op, 0xdead_beef, 0, extras, key, value);
    v
}

fn with_body_len(mut v: Vec<u8>, body: u32) -> Vec<u8> {
    v[8..12].copy_from_slice(&body.to_be_bytes());
    v
}

fn parse(buf: &[u8]) -> Parsed<'_> {
    match frame(buf) {
        Frame::Ready(h) => request(&h, buf, &L),
        other => panic!("not ready: {other:?}"),
    }
}

#[test]
fn header_round_trip() {
    let h = Header {
        magic: MAGIC_REQUEST,
        opcode: opcode::GATK,
        key_len: 0x0102,
        extras_len: 4,
        data_type: 7,
        vbucket_or_status: 0xbeef,
        body_len: 0x0a0b_0c0d,
        opaque: 0x1122_3344,
        cas: 0x0102_0304_0506_0708,
    };
    let mut out = Vec::new();
    h.encode(&mut out);
    assert_eq!(out.len(), HEADER_LEN);
    assert_eq!(&out[..8], &[0x80, 0x23, 0x01, 0x02, 4, 7, 0xbe, 0xef]);
    assert_eq!(Header::decode(&out), Some(h));
    assert_eq!(Header::decode(&out[..23]), None);
}

#[test]
fn framing_stages() {
    let get = req(opcode::GET, &[], b"key", &[]);
    assert_eq!(frame(&get[..10]), Frame::Incomplete(24));
    assert_eq!(frame(&get[..25]), Frame::Incomplete(27));
    assert!(matches!(frame(&get), Frame::Ready(_)));
    let mut bad = get.clone();
    bad[0] = 0x81;
    assert_eq!(frame(&bad), Frame::BadMagic);
    // key longer than the body
    let short = with_body_len(get.clone(), 2);
    assert!(matches!(frame(&short), Frame::Inconsistent(_)));
    // key + extras longer than the body
    let set = with_body_len(req(opcode::SET, &[0; 8], b"abc", b""), 10);
    assert!(matches!(frame(&set), Frame::Inconsistent(_)));
    // A 64 KiB key is waited for (bounded), never more.
    let mut huge = req(opcode::GET, &[], b"", &[]);
    huge[2] = 0xff;
    huge[3] = 0xff;
    huge[4] = 0xff;
    assert_eq!(frame(&huge), Frame::Incomplete(24 + 255 + 65535));
}

#[test]
fn shapes() {
    assert_eq!(
        parse(&req(opcode::NOOP, &[], b"", b"")),
        Parsed::Request(Request::Noop, 24)
    );
    assert_eq!(parse(&req(opcode::NOOP, &[], b"k", b"")), Parsed::Invalid);
    assert_eq!(
        parse(&req(opcode::VERSION, &[], b"", b"x")),
        Parsed::Invalid
    );
    assert_eq!(parse(&req(opcode::GET, &[], b"", b"")), Parsed::Invalid);
    assert_eq!(
        parse(&req(opcode::GET, &[1, 2, 3, 4], b"k", b"")),
        Parsed::Invalid
    );
    assert_eq!(parse(&req(opcode::GET, &[], b"k", b"v")), Parsed::Invalid);
    assert_eq!(
        parse(&req(opcode::GET, &[], &[b'a'; 251], b"")),
        Parsed::Invalid
    );
    assert!(matches!(
        parse(&req(opcode::GET, &[], &[b'a'; 250], b"")),
        Parsed::Request(Request::Get { .. }, 274)
    ));
    assert_eq!(
        parse(&req(opcode::SET, &[0; 4], b"k", b"v")),
        Parsed::Invalid
    );
    assert_eq!(
        parse(&req(opcode::FLUSH, &[0; 3], b"", b"")),
        Parsed::Invalid
    );
    assert_eq!(
        parse(&req(opcode::DELETE, &[0; 4], b"k", b"")),
        Parsed::Invalid
    );
    assert_eq!(
        parse(&req(opcode::INCREMENT, &[0; 8], b"k", b"")),
        Parsed::Invalid
    );
    assert_eq!(
        parse(&req(opcode::APPEND, &[0; 4], b"k", b"v")),
        Parsed::Invalid
    );
    assert_eq!(parse(&req(opcode::TOUCH, &[], b"k", b"")), Parsed::Invalid);
    assert_eq!(
        parse(&req(opcode::SASL_AUTH, &[], b"", b"x")),
        Parsed::Invalid
    );
    assert_eq!(
        parse(&req(opcode::SASL_LIST_MECHS, &[], b"k", b"")),
        Parsed::Invalid
    );
    assert_eq!(
        parse(&req(opcode::STAT, &[0; 4], b"", b"")),
        Parsed::Invalid
    );
    assert_eq!(
        parse(&req(opcode::VERBOSITY, &[], b"k", b"")),
        Parsed::Invalid
    );
    // No extras at all: memcached's "unknown command", and the stream goes on.
    assert_eq!(
        parse(&req(opcode::VERBOSITY, &[], b"", b"")),
        Parsed::Unknown {
            consumed: 24,
            skip: 0
        }
    );
}

#[test]
fn decodes_fields() {
    let mut ext = Vec::new();
    ext.extend_from_slice(&7u32.to_be_bytes());
    ext.extend_from_slice(&100u32.to_be_bytes());
    let mut buf = Vec::new();
    encode_request(&mut buf, opcode::ADDQ, 1, 42, &ext, b"key", b"value");
    assert_eq!(
        parse(&buf),
        Parsed::Request(
            Request::Store {
                op: StoreOp::Add,
                key: b"key",
                flags: 7,
                exptime: 100,
                value: b"value",
                cas: 42,
                quiet: true
            },
            buf.len()
        )
    );
    // The value is waited for.
    assert_eq!(
        match frame(&buf[..36]) {
            Frame::Ready(h) => request(&h, &buf[..36], &L),
            f => panic!("{f:?}"),
        },
        Parsed::Incomplete(buf.len())
    );
    let mut ext = Vec::new();
    ext.extend_from_slice(&5u64.to_be_bytes());
    ext.extend_from_slice(&9u64.to_be_bytes());
    ext.extend_from_slice(&DELTA_NO_CREATE.to_be_bytes());
    assert_eq!(
        parse(&req(opcode::DECREMENTQ, &ext, b"n", b"")),
        Parsed::Request(
            Request::Delta {
                incr: false,
                key: b"n",
                delta: 5,
                initial: 9,
                exptime: DELTA_NO_CREATE,
                cas: 0,
                quiet: true
            },
            24 + 21
        )
    );
    assert_eq!(
        parse(&req(opcode::GATKQ, &10u32.to_be_bytes(), b"k", b"")),
        Parsed::Request(
            Request::Get {
                key: b"k",
                with_key: true,
                quiet: true,
                touch: Some(10)
            },
            29
        )
    );
    // TOUCH and STAT use header + extras + key only, as memcached does.
    assert_eq!(
        parse(&req(opcode::TOUCH, &10u32.to_be_bytes(), b"k", b"zz")),
        Parsed::Request(
            Request::Touch {
                key: b"k",
                exptime: 10
            },
            29
        )
    );
    assert_eq!(
        parse(&req(opcode::STAT, &[], b"items", b"")),
        Parsed::Request(Request::Stat { key: b"items" }, 29)
    );
    assert_eq!(
        parse(&req(opcode::FLUSHQ, &[], b"", b"")),
        Parsed::Request(
            Request::Flush {
                exptime: 0,
                quiet: true
            },
            24
        )
    );
    assert_eq!(
        parse(&req(opcode::SASL_STEP, &[], b"PLAIN", b"\0u\0p")),
        Parsed::Request(
            Request::Sasl {
                step: true,
                mech: b"PLAIN",
                data: b"\0u\0p"
            },
            24 + 9
        )
    );
    assert_eq!(
        parse(&req(opcode::SASL_AUTH, &[], &[b'M'; 33], b"abc")),
        Parsed::Request(Request::SaslMechTooLong { skip: 3 }, 24 + 33)
    );
}

#[test]
fn unknown_opcode_skips_its_value() {
    assert_eq!(
        parse(&req(0x45, &[1, 2], b"kk", b"vvv")),
        Parsed::Unknown {
            consumed: 28,
            skip: 3
        }
    );
    let huge = with_body_len(req(0x45, &[], b"", b""), u32::MAX);
    assert_eq!(
        parse(&huge),
        Parsed::Unknown {
            consumed: 24,
            skip: u32::MAX
        }
    );
}

#[test]
fn item_limit_is_memcacheds() {
    // 48-byte item header + key + 1 + value + 2 + 8 (CAS) <= 1 MiB.
    let fits = 1024 * 1024 - 48 - 3 - 1 - 2 - 8;
    let head = |vlen: usize, flags: u32| {
        let mut ext = flags.to_be_bytes().to_vec();
        ext.extend_from_slice(&[0; 4]);
        with_body_len(req(opcode::SET, &ext, b"big", b""), (8 + 3 + vlen) as u32)
    };
    assert_eq!(parse(&head(fits, 0)), Parsed::Incomplete(24 + 11 + fits));
    assert_eq!(
        parse(&head(fits + 1, 0)),
        Parsed::Request(
            Request::TooLarge {
                op: LargeOp::Store(StoreOp::Set),
                key: b"big",
                skip: fits as u32 + 1,
                close: false
            },
            35
        )
    );
    // Non-zero flags cost 4 bytes.
    assert!(matches!(parse(&head(fits - 4, 1)), Parsed::Incomplete(_)));
    assert!(matches!(
        parse(&head(fits - 3, 1)),
        Parsed::Request(Request::TooLarge { .. }, _)
    ));
}

#[test]
fn declared_4gb_body_is_refused_from_the_header() {
    let mut ext = vec![0; 8];
    ext[3] = 1;
    let set = with_body_len(req(opcode::SET, &ext, b"k", b""), u32::MAX);
    assert_eq!(
        parse(&set),
        Parsed::Request(
            Request::TooLarge {
                op: LargeOp::Store(StoreOp::Set),
                key: b"k",
                skip: 0,
                close: true
            },
            33
        )
    );
    let app = with_body_len(req(opcode::APPEND, &[], b"k", b""), 0x7fff_ffff);
    assert_eq!(
        parse(&app),
        Parsed::Request(
            Request::TooLarge {
                op: LargeOp::Concat,
                key: b"k",
                skip: 0x7fff_fffe,
                close: false
            },
            25
        )
    );
    let get = with_body_len(req(opcode::GET, &[], b"k", b""), u32::MAX);
    assert_eq!(parse(&get), Parsed::Invalid);
}

#[test]
fn responses_round_trip() {
    let mut out = Vec::new();
    response(
        &mut out,
        opcode::GETK,
        Status::Ok,
        9,
        77,
        &[0, 0, 0, 5],
        b"key",
        b"value",
    );
    error(&mut out, opcode::ADD, 10, Status::KeyExists);
    let ParsedResponse::Response(r, n) = parse_response(&out) else {
        panic!()
    };
    assert_eq!(
        (r.header.opcode, r.status(), r.header.opaque, r.header.cas),
        (opcode::GETK, 0, 9, 77)
    );
    assert_eq!(
        (r.extras, r.key, r.value),
        (&[0, 0, 0, 5][..], &b"key"[..], &b"value"[..])
    );
    let ParsedResponse::Response(r, m) = parse_response(&out[n..]) else {
        panic!()
    };
    assert_eq!(Status::from_u16(r.status()), Some(Status::KeyExists));
    assert_eq!(r.value, b"Data exists for key.");
    assert_eq!(n + m, out.len());
    assert_eq!(parse_response(&out[..30]), ParsedResponse::Incomplete(n));
    assert_eq!(parse_response(&[0x80; 24]), ParsedResponse::Malformed);
}

proptest::proptest! {
    /// No input makes the parser panic or ask for more than its bound.
    #[test]
    fn any_bytes_are_safe(buf in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400), magic in proptest::bool::ANY) {
        let mut buf = buf;
        if magic && !buf.is_empty() {
            buf[0] = MAGIC_REQUEST;
        }
        let bound = HEADER_LEN + 255 + 65535 + L.item_size_max + 1024;
        match frame(&buf) {
            Frame::Incomplete(n) => proptest::prop_assert!(n > buf.len() && n <= bound),
            Frame::Ready(h) => match request(&h, &buf, &L) {
                Parsed::Incomplete(n) => proptest::prop_assert!(n > buf.len() && n <= bound),
                Parsed::Request(_, used) => proptest::prop_assert!(used <= buf.len()),
                Parsed::Unknown { consumed, .. } => proptest::prop_assert!(consumed <= buf.len()),
                Parsed::Invalid => {}
            },
            Frame::BadMagic | Frame::Inconsistent(_) => {}
        }
    }
}
