use super::*;

fn enc(reqs: &[Request<'_>]) -> Vec<u8> {
    let mut e = Encoder::new();
    for r in reqs {
        e.push(r);
    }
    let v = e.to_vec();
    assert_eq!(v.len(), e.len());
    v
}

#[test]
fn encodes_every_command() {
    let k: &[u8] = b"k";
    let cases: Vec<(Request<'_>, &[u8])> = vec![
        (
            Request::Store {
                cmd: StoreCmd::Set,
                key: k,
                flags: 5,
                exptime: 0,
                value: b"ab",
                cas: 0,
                noreply: false,
            },
            b"set k 5 0 2\r\nab\r\n",
        ),
        (
            Request::Store {
                cmd: StoreCmd::Cas,
                key: k,
                flags: 0,
                exptime: -1,
                value: b"",
                cas: 77,
                noreply: true,
            },
            b"cas k 0 -1 0 77 noreply\r\n\r\n",
        ),
        (
            Request::Store {
                cmd: StoreCmd::Prepend,
                key: k,
                flags: 0,
                exptime: 0,
                value: b"x",
                cas: 9,
                noreply: false,
            },
            b"prepend k 0 0 1\r\nx\r\n",
        ),
        (
            Request::Retrieve {
                cmd: RetrieveCmd::Get,
                keys: &[b"a", b"b"],
            },
            b"get a b\r\n",
        ),
        (
            Request::Retrieve {
                cmd: RetrieveCmd::Gats(100),
                keys: &[b"a"],
            },
            b"gats 100 a\r\n",
        ),
        (
            Request::Delete {
                key: k,
                noreply: false,
            },
            b"delete k\r\n",
        ),
        (
            Request::Incr {
                key: k,
                delta: u64::MAX,
                noreply: false,
            },
            b"incr k 18446744073709551615\r\n",
        ),
        (
            Request::Decr {
                key: k,
                delta: 1,
                noreply: true,
            },
            b"decr k 1 noreply\r\n",
        ),
        (
            Request::Touch {
                key: k,
                exptime: 10,
                noreply: false,
            },
            b"touch k 10\r\n",
        ),
        (
            Request::FlushAll {
                delay: None,
                noreply: false,
            },
            b"flush_all\r\n",
        ),
        (
            Request::FlushAll {
                delay: Some(3),
                noreply: true,
            },
            b"flush_all 3 noreply\r\n",
        ),
        (Request::Version, b"version\r\n"),
        (
            Request::Verbosity {
                level: 1,
                noreply: false,
            },
            b"verbosity 1\r\n",
        ),
        (Request::Stats { arg: None }, b"stats\r\n"),
        (
            Request::Stats {
                arg: Some("settings"),
            },
            b"stats settings\r\n",
        ),
        (Request::MetadumpAll, b"lru_crawler metadump all\r\n"),
        (
            Request::Fget {
                filter: b"topk",
                args: b"10",
                keys: &[b"a", b"{u:7}:b"],
            },
            b"fget topk 2 a {u:7}:b\r\n10\r\n",
        ),
        (
            Request::Fget {
                filter: b"select",
                args: b"",
                keys: &[b"k"],
            },
            b"fget select 0 k\r\n\r\n",
        ),
        (Request::Quit, b"quit\r\n"),
    ];
    for (req, want) in cases {
        assert_eq!(enc(&[req]), want, "{req:?}");
    }
}

#[test]
fn large_values_are_borrowed_not_copied() {
    let big = vec![b'x'; BORROW_MIN];
    let mut e = Encoder::new();
    e.push(&Request::Store {
        cmd: StoreCmd::Set,
        key: b"a",
        flags: 0,
        exptime: 0,
        value: &big,
        cas: 0,
        noreply: false,
    });
    e.push(&Request::Store {
        cmd: StoreCmd::Set,
        key: b"b",
        flags: 0,
        exptime: 0,
        value: &big,
        cas: 0,
        noreply: true,
    });
    let s = e.io_slices();
    assert_eq!(s.len(), 5); // head, big, "\r\nset b ..\r\n", big, "\r\n"
    assert_eq!(s[1].as_ptr(), big.as_ptr());
    let mut want = b"set a 0 0 16384\r\n".to_vec();
    want.extend_from_slice(&big);
    want.extend_from_slice(b"\r\nset b 0 0 16384 noreply\r\n");
    want.extend_from_slice(&big);
    want.extend_from_slice(b"\r\n");
    assert_eq!(e.to_vec(), want);
}

#[test]
fn large_filter_arguments_are_borrowed_and_fget_is_one_line() {
    let args = vec![0u8; BORROW_MIN];
    // Past MAX_GET_LINE: an fget is never split, whatever its length.
    let keys: Vec<Vec<u8>> = (0..100)
        .map(|i| format!("{i:0>100}").into_bytes())
        .collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    let req = Request::Fget {
        filter: b"f",
        args: &args,
        keys: &refs,
    };
    assert_eq!(req.expect(), Some(Expect::Values { cas: false }));
    let mut e = Encoder::new();
    e.push(&req);
    let s = e.io_slices();
    assert_eq!(s.len(), 3); // line, args, "\r\n"
    assert_eq!(s[1].as_ptr(), args.as_ptr());
    let bytes = e.to_vec();
    let line_end = bytes.iter().position(|&b| b == b'\n').unwrap() + 1;
    assert!(line_end > MAX_GET_LINE);
    assert!(bytes[..line_end].starts_with(b"fget f 16384 "));
    assert_eq!(bytes.len(), line_end + BORROW_MIN + 2);
}

#[test]
fn long_multi_get_is_split_into_lines_under_the_limit() {
    let keys: Vec<Vec<u8>> = (0..100)
        .map(|i| format!("{:0>100}", i).into_bytes())
        .collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    let bytes = enc(&[Request::Retrieve {
        cmd: RetrieveCmd::Get,
        keys: &refs,
    }]);
    let lines: Vec<&[u8]> = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), retrieve_lines(&refs));
    assert!(lines.len() > 1);
    let mut n = 0;
    for l in lines {
        assert!(l.len() <= MAX_GET_LINE + 2, "{}", l.len());
        n += l.split(|&b| b == b' ').count() - 1;
    }
    assert_eq!(n, 100);
}

fn decode_all(expect: Expect, bytes: &[u8]) -> (Reply, usize) {
    // Feed byte by byte: every prefix must be Incomplete with a correct hint, then Done.
    let mut d = ReplyDecoder::new(expect);
    for end in 0..bytes.len() {
        match d.decode(&bytes[..end]).unwrap() {
            Decoded::Incomplete(need) => assert!(need > end && need <= bytes.len(), "{need} {end}"),
            Decoded::Done(r, _) => panic!("done early at {end}: {r:?}"),
        }
    }
    match d.decode(bytes).unwrap() {
        Decoded::Done(r, used) => (r, used),
        Decoded::Incomplete(n) => panic!("incomplete {n}"),
    }
}

#[test]
fn decodes_values_resumably() {
    let bytes = b"VALUE a 3 2 10\r\nhi\r\nVALUE b 0 0 11\r\n\r\nEND\r\nextra";
    let (r, used) = decode_all(Expect::Values { cas: true }, &bytes[..bytes.len() - 5]);
    assert_eq!(used, bytes.len() - 5);
    assert_eq!(
        r,
        Reply::Values(vec![
            Entry {
                key: b"a".to_vec(),
                flags: 3,
                cas: Some(10),
                data: Bytes::from_static(b"hi")
            },
            Entry {
                key: b"b".to_vec(),
                flags: 0,
                cas: Some(11),
                data: Bytes::new()
            },
        ])
    );
    let (r, _) = decode_all(Expect::Values { cas: false }, b"END\r\n");
    assert_eq!(r, Reply::Values(vec![]));
}

#[test]
fn decodes_single_line_replies() {
    let cases: &[(Expect, &[u8], Reply)] = &[
        (Expect::Storage, b"STORED\r\n", Reply::Stored),
        (Expect::Storage, b"NOT_STORED\r\n", Reply::NotStored),
        (Expect::Storage, b"EXISTS\r\n", Reply::Exists),
        (Expect::Storage, b"NOT_FOUND\r\n", Reply::NotFound),
        (Expect::Delete, b"DELETED\r\n", Reply::Deleted),
        (Expect::Touch, b"TOUCHED\r\n", Reply::Touched),
        (
            Expect::Arith,
            b"18446744073709551615\r\n",
            Reply::Number(u64::MAX),
        ),
        (Expect::Arith, b"NOT_FOUND\r\n", Reply::NotFound),
        (Expect::Ok, b"OK\r\n", Reply::Ok),
        (
            Expect::Version,
            b"VERSION 1.6.18\r\n",
            Reply::Version("1.6.18".into()),
        ),
        (
            Expect::Storage,
            b"SERVER_ERROR object too large for cache\r\n",
            Reply::Error("SERVER_ERROR object too large for cache".into()),
        ),
        (
            Expect::Values { cas: false },
            b"ERROR\r\n",
            Reply::Error("ERROR".into()),
        ),
        (
            Expect::Lines,
            b"BUSY currently processing crawler request\r\n",
            Reply::Error("BUSY currently processing crawler request".into()),
        ),
        (Expect::Storage, b"STORED\n", Reply::Stored),
    ];
    for (e, b, want) in cases {
        assert_eq!(
            &decode_all(*e, b).0,
            want,
            "{:?}",
            String::from_utf8_lossy(b)
        );
    }
}

#[test]
fn decodes_stats_and_lines() {
    let (r, _) = decode_all(Expect::Stats, b"STAT pid 12\r\nSTAT version 1.6\r\nEND\r\n");
    assert_eq!(
        r,
        Reply::Stats(vec![
            ("pid".into(), "12".into()),
            ("version".into(), "1.6".into())
        ])
    );
    let (r, _) = decode_all(
        Expect::Lines,
        b"key=a exp=-1 la=1 cas=2 fetch=no cls=1 size=60\r\nEND\r\n",
    );
    assert_eq!(
        r,
        Reply::Lines(vec!["key=a exp=-1 la=1 cas=2 fetch=no cls=1 size=60".into()])
    );
    // memcached 1.6.43 and mnemod open a dump with OK.
    let (r, _) = decode_all(
        Expect::Lines,
        b"OK\r\nkey=a exp=-1 la=1 cas=2 fetch=no cls=1 size=60\r\nEND\r\n",
    );
    assert_eq!(
        r,
        Reply::Lines(vec!["key=a exp=-1 la=1 cas=2 fetch=no cls=1 size=60".into()])
    );
    // Only the first line may be that OK: a second is a line of the dump, whether the reply
    // comes whole or in pieces to decode_from (which drops decoded bytes mid-reply).
    let bytes = b"OK\r\nOK\r\nEND\r\n";
    assert_eq!(
        decode_all(Expect::Lines, bytes).0,
        Reply::Lines(vec!["OK".into()])
    );
    for piece in 1..bytes.len() {
        let mut d = ReplyDecoder::new(Expect::Lines);
        let (mut buf, mut fed) = (BytesMut::new(), 0);
        let reply = loop {
            match d.decode_from(&mut buf).unwrap() {
                Step::Reply(r) => break r,
                Step::Need(_) => {
                    let end = (fed + piece).min(bytes.len());
                    buf.extend_from_slice(&bytes[fed..end]);
                    fed = end;
                }
            }
        };
        assert_eq!(reply, Reply::Lines(vec!["OK".into()]), "pieces of {piece}");
    }
}

#[test]
fn rejects_desynchronised_streams() {
    let bad: &[(Expect, &[u8])] = &[
        (Expect::Storage, b"DELETED\r\n"),
        (Expect::Arith, b"12a\r\n"),
        (
            Expect::Values { cas: false },
            b"VALUE a x 1\r\nz\r\nEND\r\n",
        ),
        (Expect::Values { cas: true }, b"VALUE a 0 1\r\nz\r\nEND\r\n"),
        (Expect::Stats, b"garbage\r\n"),
    ];
    for (e, b) in bad {
        assert!(
            ReplyDecoder::new(*e).decode(b).is_err(),
            "{:?}",
            String::from_utf8_lossy(b)
        );
    }
    assert_eq!(
        ReplyDecoder::new(Expect::Values { cas: false }).decode(b"VALUE a 0 1\r\nzz\r\n"),
        Err(CodecError::BadDataEnd)
    );
    assert_eq!(
        ReplyDecoder::new(Expect::Ok).decode(&vec![b'x'; MAX_LINE + 1]),
        Err(CodecError::LineTooLong)
    );
}

#[test]
fn key_rules() {
    assert!(check_key(b"a"));
    assert!(check_key(&[b'k'; 250]));
    assert!(!check_key(&[b'k'; 251]));
    assert!(!check_key(b""));
    assert!(!check_key(b"a b"));
    assert!(!check_key(b"a\r\n"));
    assert!(!check_key(b"a\x7f"));
}

#[test]
fn decoding_from_a_buffer_keeps_one_value_in_it() {
    // A multi-get reply fed in pieces of every size to decode_from, which takes decoded bytes
    // out of the buffer (as conn.rs reads): the same reply as decoding it whole, and the buffer
    // never holds more than one value's line and data plus a piece.
    let mut bytes = Vec::new();
    for i in 0..40u32 {
        let v = vec![b'a' + (i % 26) as u8; (i as usize * 37) % 300];
        bytes.extend_from_slice(format!("VALUE k{i} {i} {}\r\n", v.len()).as_bytes());
        bytes.extend_from_slice(&v);
        bytes.extend_from_slice(b"\r\n");
    }
    bytes.extend_from_slice(b"END\r\nVERSION 1\r\n");
    let (whole, _) = decode_all(Expect::Values { cas: false }, &bytes[..bytes.len() - 11]);
    for piece in [1, 2, 7, 64, 333] {
        let mut d = ReplyDecoder::new(Expect::Values { cas: false });
        let (mut buf, mut fed, mut most) = (BytesMut::new(), 0, 0);
        let reply = loop {
            match d.decode_from(&mut buf).unwrap() {
                Step::Reply(r) => break r,
                Step::Need(need) => {
                    assert!(need > buf.len());
                    let end = (fed + piece).min(bytes.len());
                    buf.extend_from_slice(&bytes[fed..end]);
                    fed = end;
                    most = most.max(buf.len());
                }
            }
        };
        assert_eq!(reply, whole, "pieces of {piece}");
        assert!(
            most <= 300 + 30 + piece,
            "pieces of {piece}: buffer held {most} bytes"
        );
        // What follows the reply stays, for the next one.
        d.reset(Expect::Version);
        while let Step::Need(_) = d.decode_from(&mut buf).unwrap() {
            buf.extend_from_slice(&bytes[fed..(fed + piece).min(bytes.len())]);
            fed = (fed + piece).min(bytes.len());
        }
        assert!(buf.is_empty() && fed == bytes.len());
    }
}
