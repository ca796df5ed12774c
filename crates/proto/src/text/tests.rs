use super::*;

const L: Limits = Limits {
    item_size_max: 1024 * 1024,
    use_cas: true,
};

fn p(buf: &[u8]) -> Parsed<'_> {
    parse(buf, &L)
}

#[test]
fn set_with_data_and_bare_newline() {
    let buf = b"set k 5 10 3\r\nabc\r\nget k\n";
    match p(buf) {
        Parsed::Request(
            Request::Store {
                kind,
                key,
                flags,
                exptime,
                data,
                noreply,
                ..
            },
            n,
        ) => {
            assert_eq!(
                (kind, key, flags, exptime, data, noreply),
                (StoreKind::Set, &b"k"[..], 5, 10, &b"abc"[..], false)
            );
            assert_eq!(n, 19);
            match p(&buf[n..]) {
                Parsed::Request(
                    Request::Get {
                        keys,
                        cas: false,
                        touch: None,
                    },
                    6,
                ) => {
                    assert_eq!(keys.iter().collect::<Vec<_>>(), vec![&b"k"[..]]);
                }
                other => panic!("{other:?}"),
            }
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn incomplete_line_and_data() {
    assert_eq!(p(b"set k 0 0 3"), Parsed::Incomplete(12));
    assert_eq!(p(b"set k 0 0 3\r\nab"), Parsed::Incomplete(18));
}

#[test]
fn bad_data_chunk_consumes_declared_length() {
    assert_eq!(
        p(b"set k 0 0 1\r\nxyz\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadDataChunk,
            consumed: 16,
            noreply: false
        }
    );
}

#[test]
fn huge_length_is_refused_before_buffering() {
    // 4294967295 truncates to -1 in memcached's safe_strtol: a format error.
    assert_eq!(
        p(b"set k 0 0 4294967295\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadFormat,
            consumed: 22,
            noreply: false
        }
    );
    match p(b"set k 0 0 2000000 noreply\r\n") {
        Parsed::Request(
            Request::TooLarge {
                swallow,
                noreply: true,
                ..
            },
            _,
        ) => assert_eq!(swallow, 2000002),
        other => panic!("{other:?}"),
    }
}

#[test]
fn item_size_boundary_matches_memcached() {
    // Measured against memcached 1.6.18 -I 1m: key "kkk", flags 0 stores 1048514 bytes.
    assert!(L.item_fits(3, 0, 1_048_514));
    assert!(!L.item_fits(3, 0, 1_048_515));
    assert!(L.item_fits(3, 1, 1_048_510));
    assert!(!L.item_fits(3, 1, 1_048_511));
}

#[test]
fn token_counts_and_unknown_commands() {
    // memcached 1.6.40: a known command missing words is malformed (1.6.39: ERROR).
    for line in [
        &b"get\r\n"[..],
        b"gat 1\r\n",
        b"incr k\r\n",
        b"touch k\r\n",
        b"verbosity\r\n",
        b"cas k 0 0\r\n",
        b"delete\r\n",
    ] {
        assert!(
            matches!(
                p(line),
                Parsed::Error {
                    reply: ErrorReply::BadFormat,
                    noreply: false,
                    ..
                }
            ),
            "{line:?}"
        );
    }
    for line in [
        &b"ab\r\n"[..],
        b"GET x\r\n",
        b" get k\r\n",
        b"get\0 k\r\n",
        b"stats\0\r\n",
    ] {
        assert!(
            matches!(
                p(line),
                Parsed::Error {
                    reply: ErrorReply::Error,
                    noreply: false,
                    ..
                }
            ),
            "{line:?}"
        );
    }
    // Words past the ones needed are ignored.
    assert!(matches!(
        p(b"incr k 1 2 3\r\n"),
        Parsed::Request(
            Request::Delta {
                delta: 1,
                noreply: false,
                ..
            },
            _
        )
    ));
    assert!(matches!(
        p(b"verbosity 1 2 3\r\n"),
        Parsed::Request(
            Request::Verbosity {
                level: 1,
                noreply: false
            },
            _
        )
    ));
    // The admin commands are found by their first word, and a last noreply silences them all,
    // as it does an unknown command's ERROR.
    assert!(matches!(
        p(b" flush_all\r\n"),
        Parsed::Request(
            Request::FlushAll {
                delay: 0,
                noreply: false
            },
            _
        )
    ));
    assert!(matches!(
        p(b"foo noreply\r\n"),
        Parsed::Error {
            reply: ErrorReply::Error,
            noreply: true,
            ..
        }
    ));
    assert!(matches!(
        p(b"verbosity noreply\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadFormat,
            noreply: true,
            ..
        }
    ));
    assert_eq!(p(b"foo bar HTTP/1.1\r\n"), Parsed::Close);
}

#[test]
fn delete_forms() {
    assert!(matches!(
        p(b"delete a 0\r\n"),
        Parsed::Request(Request::Delete { noreply: false, .. }, _)
    ));
    assert!(matches!(
        p(b"delete a noreply\r\n"),
        Parsed::Request(Request::Delete { noreply: true, .. }, _)
    ));
    assert!(matches!(
        p(b"delete a 0 noreply\r\n"),
        Parsed::Request(Request::Delete { noreply: true, .. }, _)
    ));
    // memcached 1.6.40: what follows the key is ignored, but a last noreply.
    assert!(matches!(
        p(b"delete a 1\r\n"),
        Parsed::Request(Request::Delete { noreply: false, .. }, _)
    ));
    assert!(matches!(
        p(b"delete a x y z\r\n"),
        Parsed::Request(
            Request::Delete {
                key: b"a",
                noreply: false
            },
            _
        )
    ));
    assert!(matches!(
        p(b"delete a 10 noreply\r\n"),
        Parsed::Request(Request::Delete { noreply: true, .. }, _)
    ));
    assert!(matches!(
        p(b"delete\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadFormat,
            ..
        }
    ));
}

/// memcached 1.6.40's parser: a line under 4 bytes with its newline is malformed; from 4 on,
/// an unknown one is an ERROR.
#[test]
fn short_lines_are_malformed() {
    for line in [&b"\r\n"[..], b"\n", b"x\r\n", b"mn\n", b" \n"] {
        assert!(
            matches!(
                p(line),
                Parsed::Error {
                    reply: ErrorReply::BadFormat,
                    noreply: false,
                    ..
                }
            ),
            "{line:?}"
        );
    }
    for line in [&b"xy\r\n"[..], b"   \r\n"] {
        assert!(
            matches!(
                p(line),
                Parsed::Error {
                    reply: ErrorReply::Error,
                    ..
                }
            ),
            "{line:?}"
        );
    }
    assert!(matches!(
        p(b"mn\r\n"),
        Parsed::Request(Request::MetaNoop, 4)
    ));
}

/// memcached 1.6.40: a storage line refused once its data length is known swallows the data.
#[test]
fn refused_storage_lines_swallow_their_data() {
    assert!(matches!(
        p(b"cas k 0 0 1\r\ny\r\n"),
        Parsed::Request(
            Request::BadStoreLine {
                swallow: 3,
                noreply: false,
                ..
            },
            13
        )
    ));
    assert!(matches!(
        p(b"cas k 0 0 1 noreply\r\ny\r\n"),
        Parsed::Request(
            Request::BadStoreLine {
                swallow: 3,
                noreply: true,
                ..
            },
            _
        )
    ));
    assert!(matches!(
        p(b"set k x 0 2\r\nab\r\n"),
        Parsed::Request(Request::BadStoreLine { swallow: 4, .. }, _)
    ));
    // A bad length: nothing to swallow.
    assert!(matches!(
        p(b"set k 0 0 x\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadFormat,
            ..
        }
    ));
    assert!(matches!(
        p(b"cas k 0 0\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadFormat,
            ..
        }
    ));
    // The length is read strictly: no sign, no 32-bit wrap; noreply is not read yet.
    for line in [
        &b"set k 0 0 +1\r\n"[..],
        b"set k 0 0 4294967297\r\n",
        b"set a 0 0 -1 noreply\r\n",
    ] {
        assert!(
            matches!(
                p(line),
                Parsed::Error {
                    reply: ErrorReply::BadFormat,
                    noreply: false,
                    ..
                }
            ),
            "{line:?}"
        );
    }
    // A NUL is a key byte (memcached 1.6.40; 1.6.39 ended the line there).
    assert!(matches!(
        p(b"set a\0b 0 0 1\r\nx\r\n"),
        Parsed::Request(Request::Store { key: b"a\0b", .. }, _)
    ));
    // Words past the ones a storage command needs are ignored, but a last noreply.
    assert!(matches!(
        p(b"set k 0 0 1 noreply extra\r\nx\r\n"),
        Parsed::Request(Request::Store { noreply: false, .. }, _)
    ));
    assert!(matches!(
        p(b"cas k 0 0 1 5 x noreply\r\nx\r\n"),
        Parsed::Request(
            Request::Store {
                cas: 5,
                noreply: true,
                ..
            },
            _
        )
    ));
}

#[test]
fn numeric_errors() {
    assert!(matches!(
        p(b"incr k abc\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadDelta,
            ..
        }
    ));
    assert!(matches!(
        p(b"incr k -1\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadDelta,
            ..
        }
    ));
    assert!(matches!(
        p(b"incr k +1\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadDelta,
            ..
        }
    ));
    assert!(matches!(
        p(b"flush_all 99999999999\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadExptime,
            ..
        }
    ));
    assert!(matches!(
        p(b"flush_all 1 2 3\r\n"),
        Parsed::Request(Request::FlushAll { delay: 1, .. }, _)
    ));
    assert!(matches!(
        p(b"touch k abc\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadExptime,
            ..
        }
    ));
    assert!(matches!(
        p(b"gat abc k\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadExptime,
            ..
        }
    ));
    assert!(matches!(
        p(b"flush_all x\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadExptime,
            ..
        }
    ));
    assert!(matches!(
        p(b"verbosity x\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadFormat,
            ..
        }
    ));
    // Bad flags with a valid length: the data is swallowed (memcached 1.6.40).
    assert!(matches!(
        p(b"set k -1 0 1\r\nx\r\n"),
        Parsed::Request(Request::BadStoreLine { swallow: 3, .. }, 14)
    ));
    assert!(matches!(
        p(b"set k 0 0 -1 noreply\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadFormat,
            noreply: false,
            ..
        }
    ));
}

#[test]
fn gat_keys_follow_exptime() {
    match p(b"gats 10 a b\r\n") {
        Parsed::Request(
            Request::Get {
                keys,
                cas: true,
                touch: Some(10),
            },
            _,
        ) => {
            assert_eq!(keys.iter().collect::<Vec<_>>(), vec![&b"a"[..], b"b"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        p(b"gat 10\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadFormat,
            ..
        }
    ));
}

#[test]
fn key_limits_and_control_bytes() {
    let mut line = b"get ".to_vec();
    line.extend(std::iter::repeat_n(b'k', 251));
    line.extend_from_slice(b"\r\n");
    // memcached 1.6.40 follows the error line with an empty one.
    assert!(matches!(
        p(&line),
        Parsed::Error {
            reply: ErrorReply::BadKeyInGet,
            ..
        }
    ));
    let mut out = Vec::new();
    ErrorReply::BadKeyInGet.write(&mut out);
    assert_eq!(out, b"CLIENT_ERROR bad command line format\r\n\r\n");
    match p(b"set \x01\x7f\xff 0 0 1\r\nx\r\n") {
        Parsed::Request(Request::Store { key, .. }, _) => assert_eq!(key, b"\x01\x7f\xff"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn runaway_lines() {
    let junk = vec![b'x'; LINE_MAX + 1];
    assert_eq!(p(&junk), Parsed::Close);
    let mut get = b"get ".to_vec();
    get.extend(std::iter::repeat_n(b'k', LINE_MAX));
    assert!(matches!(p(&get), Parsed::Incomplete(_)));
    let short = vec![b'x'; 100];
    assert!(matches!(p(&short), Parsed::Incomplete(_)));
}

#[test]
fn runaway_fget_lines_close_unless_they_can_still_be_an_fget() {
    // Many keys: mnemo's multi-get, held like `get` up to GET_LINE_MAX.
    let mut many = b"fget topk 0".to_vec();
    while many.len() <= LINE_MAX {
        many.extend_from_slice(b" user:12345");
    }
    assert!(matches!(p(&many), Parsed::Incomplete(_)));
    // Anything that cannot become an fget closes at LINE_MAX, as memcached closes any line.
    let junk = [b"fget ".as_slice(), &[b'x'; LINE_MAX]].concat();
    assert_eq!(p(&junk), Parsed::Close);
    let bad_len = [b"fget topk 1x".as_slice(), &many[11..]].concat();
    assert_eq!(p(&bad_len), Parsed::Close);
    let long_key = [many.as_slice(), b" ", &[b'k'; KEY_MAX + 1]].concat();
    assert_eq!(p(&long_key), Parsed::Close);
    let long_filter = [b"fget ".as_slice(), &[b'f'; KEY_MAX + 1], &many[9..]].concat();
    assert_eq!(p(&long_filter), Parsed::Close);
    let past_bound = [many.as_slice(), &b" k".repeat(GET_LINE_MAX / 2)].concat();
    assert_eq!(p(&past_bound), Parsed::Close);
}

#[test]
fn meta_commands_without_a_key_are_an_error() {
    for line in [
        &b"ms\r\n"[..],
        b"md\r\n",
        b"ma\r\n",
        b"mg\r\n",
        b"ms \r\n",
        b"md  \r\n",
    ] {
        assert_eq!(
            p(line),
            Parsed::Error {
                reply: ErrorReply::BadFormat,
                consumed: line.len(),
                noreply: false
            },
            "{line:?}"
        );
    }
    // With a key but no length, ms is a format error.
    assert!(matches!(
        p(b"ms k\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadFormat,
            consumed: 6,
            ..
        }
    ));
}

#[test]
fn ms_lengths_whose_data_line_overflows_an_int_are_refused_at_once() {
    // memcached: vlen + 2 must fit its int; refused before any data is awaited, and nothing is
    // swallowed (the next line is a command). 32-bit truncation first: 6442450943 is 2^31-1.
    // memcached 1.6.40 reads the length strictly: no 32-bit truncation.
    for n in [
        "2147483646",
        "2147483647",
        "2147483648",
        "4294967295",
        "6442450942",
        "6442450943",
        "-1",
        "4294967297",
    ] {
        let line = format!("ms k {n} T0\r\n");
        assert_eq!(
            p(line.as_bytes()),
            Parsed::Error {
                reply: ErrorReply::BadFormat,
                consumed: line.len(),
                noreply: false
            },
            "{n}"
        );
    }
    // The largest that parses: over -I, refused with its data swallowed (memcached answers once
    // it is gone), never buffered.
    match p(b"ms k 2147483645\r\n") {
        Parsed::Request(Request::TooLarge { swallow, .. }, 17) => assert_eq!(swallow, 2147483647),
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(p(b"ms k 1\r\nx\r\n"), Parsed::Request(Request::Meta(m), 11) if m.data == b"x")
    );
}

#[test]
fn flush_all_forms() {
    assert_eq!(
        p(b"flush_all\r\n"),
        Parsed::Request(
            Request::FlushAll {
                delay: 0,
                noreply: false
            },
            11
        )
    );
    assert!(matches!(
        p(b"flush_all noreply\r\n"),
        Parsed::Request(
            Request::FlushAll {
                delay: 0,
                noreply: true
            },
            _
        )
    ));
    assert!(matches!(
        p(b"flush_all 5 noreply\r\n"),
        Parsed::Request(
            Request::FlushAll {
                delay: 5,
                noreply: true
            },
            _
        )
    ));
    assert!(matches!(
        p(b"flush_all -1\r\n"),
        Parsed::Request(Request::FlushAll { delay: -1, .. }, _)
    ));
}

proptest::proptest! {
    /// Whatever the bytes, the parser answers without panicking, never claims more bytes than
    /// it was given, and never asks to buffer more than the item limit allows.
    #[test]
    fn never_panics_or_overreaches(buf in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
        match p(&buf) {
            Parsed::Request(_, n) => proptest::prop_assert!(n <= buf.len() && n > 0),
            Parsed::Error { consumed, .. } => proptest::prop_assert!(consumed <= buf.len() && consumed > 0),
            Parsed::Incomplete(need) => proptest::prop_assert!(need > buf.len() && need <= GET_LINE_MAX + L.item_size_max + 4096),
            Parsed::Close => {}
        }
    }
}

#[test]
fn fast_get_path_agrees_with_the_general_one() {
    // Each line's keys parsed both ways: `get` via the fast path, `gat 0` (which shares the
    // general path's key reading) with the same keys; the answers must agree.
    let long = "k".repeat(251);
    let nul = format!("a\0 {long}");
    for keys in [
        "a",
        "a b  c",
        " ",
        "a HTTP/1.1",
        &format!("a {long}"),
        "a\tb",
        "",
        "a\0b",
        &nul,
    ] {
        let fast_in = format!("get {keys}\r\n");
        let fast = p(fast_in.as_bytes());
        let slow_in = format!("gat 0 {keys}\r\n");
        let slow = p(slow_in.as_bytes());
        match (fast, slow) {
            (
                Parsed::Request(Request::Get { keys: a, .. }, _),
                Parsed::Request(Request::Get { keys: b, .. }, _),
            ) => {
                assert_eq!(
                    a.iter().collect::<Vec<_>>(),
                    b.iter().collect::<Vec<_>>(),
                    "{keys:?}"
                );
            }
            (Parsed::Error { reply: r1, .. }, Parsed::Error { reply: r2, .. }) => {
                assert_eq!(r1, r2, "{keys:?}")
            }
            (f, s) => panic!("{keys:?}: fast {f:?} vs general {s:?}"),
        }
    }
}

#[test]
fn lru_crawler_carries_its_words() {
    match p(b"lru_crawler metadump all\r\n") {
        Parsed::Request(Request::LruCrawler { args }, 26) => {
            assert_eq!(
                args.iter().collect::<Vec<_>>(),
                vec![&b"metadump"[..], &b"all"[..]]
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(p(b"lru_crawler\n"), Parsed::Request(Request::LruCrawler { args }, 12) if args.is_empty())
    );
}

#[test]
fn extstore_carries_its_words_and_noreply() {
    match p(b"extstore recache_rate 5 noreply\r\n") {
        Parsed::Request(
            Request::Extstore {
                args,
                noreply: true,
            },
            33,
        ) => {
            assert_eq!(
                args.iter().collect::<Vec<_>>(),
                vec![&b"recache_rate"[..], &b"5"[..], &b"noreply"[..]]
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        p(b"extstore foo\r\n"),
        Parsed::Request(Request::Extstore { noreply: false, .. }, 14)
    ));
    // memcached's WANT_TOKENS_MIN(3): a bare `extstore` is an ERROR, and noreply does not
    // silence it.
    assert!(matches!(
        p(b"extstore\r\n"),
        Parsed::Error {
            reply: ErrorReply::Error,
            noreply: false,
            ..
        }
    ));
}

/// The request, or the error reply and its noreply, a one-line command gives.
type Outcome<'a> = Result<Request<'a>, (ErrorReply, bool)>;

fn slabs_outcome(line: &[u8]) -> Outcome<'_> {
    match p(line) {
        Parsed::Request(r, n) if n == line.len() => Ok(r),
        Parsed::Error {
            reply,
            consumed,
            noreply,
        } if consumed == line.len() => Err((reply, noreply)),
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(line)),
    }
}

#[test]
fn slabs_commands_as_memcached_judges_them() {
    use ErrorReply::{BadFormat, Error};
    let automove = |setting, noreply| Ok(Request::SlabsAutomove { setting, noreply });
    let ratio = |r: f64| Automove::Ratio(r.to_bits());
    // Replies of memcached 1.6.45 (tests/tables/slabs.txt holds them too).
    let cases: &[(&[u8], Outcome<'_>)] = &[
        (b"slabs automove 0\r\n", automove(Automove::Level(0), false)),
        (
            b"slabs automove 2 x y\r\n",
            automove(Automove::Level(2), false),
        ),
        (
            b"slabs automove 1 noreply\r\n",
            automove(Automove::Level(1), true),
        ),
        (b"slabs automove +1\r\n", Err((BadFormat, false))),
        (b"slabs automove 4294967297\r\n", Err((BadFormat, false))),
        (b"slabs a 1\r\n", automove(Automove::Level(1), false)),
        (b"slabs automove r 0.5\r\n", automove(ratio(0.5), false)),
        (b"slabs automove 3\r\n", Err((Error, false))),
        (b"slabs automove 3 noreply\r\n", Err((Error, true))),
        (b"slabs automove x\r\n", Err((BadFormat, false))),
        (b"slabs automove -1\r\n", Err((BadFormat, false))),
        (b"slabs automove 1x\r\n", Err((BadFormat, false))),
        (b"slabs automove noreply\r\n", Err((BadFormat, true))),
        (b"slabs automove\r\n", Err((Error, false))),
        (b"slabs automove ratio 0.5\r\n", automove(ratio(0.5), false)),
        (
            b"slabs automove ratio -3 noreply\r\n",
            automove(ratio(-3.0), true),
        ),
        (b"slabs automove ratio\r\n", Err((Error, false))),
        (b"slabs automove ratio x\r\n", Err((Error, false))),
        (b"slabs automove ratio 0.5x\r\n", Err((Error, false))),
        (b"slabs automove ratio 1e400\r\n", Err((Error, false))),
        (b"slabs automove ratio 1e-400\r\n", Err((Error, false))),
        (b"slabs automove ratio noreply\r\n", Err((Error, true))),
        (
            b"slabs reassign 1 2\r\n",
            Ok(Request::SlabsReassign { src: 1, dst: 2 }),
        ),
        (b"slabs reassign -1 4294967297\r\n", Err((BadFormat, false))),
        (b"slabs reassign +1 2\r\n", Err((BadFormat, false))),
        (
            b"slabs r -1 2\r\n",
            Ok(Request::SlabsReassign { src: -1, dst: 2 }),
        ),
        (b"slabs reassign x 1\r\n", Err((BadFormat, false))),
        (b"slabs reassign 1 2x\r\n", Err((BadFormat, false))),
        (
            b"slabs reassign 99999999999999999999 1\r\n",
            Err((BadFormat, false)),
        ),
        (b"slabs reassign 1\r\n", Err((Error, false))),
        (b"slabs reassign 1 2 noreply\r\n", Err((Error, true))),
        (b"slabs\r\n", Err((Error, false))),
        (b"slabs foo 1\r\n", Err((Error, false))),
        (b"slabs Automove 1\r\n", Err((Error, false))),
    ];
    for (line, want) in cases {
        assert_eq!(
            &slabs_outcome(line),
            want,
            "{:?}",
            String::from_utf8_lossy(line)
        );
    }
    assert!(
        matches!(slabs_outcome(b"slabs automove ratio nan\r\n"), Ok(Request::SlabsAutomove { setting: Automove::Ratio(b), .. }) if f64::from_bits(b).is_nan())
    );
}

#[test]
fn fget_line_and_argument_block() {
    let input = b"fget topk 2 u:1 u:2  u:3\r\n10\r\nget x\r\n";
    match p(input) {
        Parsed::Request(Request::Fget { filter, args, keys }, n) => {
            assert_eq!((filter, args, n), (&b"topk"[..], &b"10"[..], 30));
            assert_eq!(
                keys.iter().collect::<Vec<_>>(),
                vec![&b"u:1"[..], b"u:2", b"u:3"]
            );
        }
        other => panic!("{other:?}"),
    }
    // Zero-length arguments still end with their own line; no keys is allowed.
    assert!(matches!(
        p(b"fget f 0\r\n\r\n"),
        Parsed::Request(Request::Fget { args: b"", .. }, 12)
    ));
    // The block is waited for, and bounded before it is buffered.
    assert_eq!(p(b"fget f 10 k\r\n0123"), Parsed::Incomplete(25));
    let huge = format!("fget f {} k\r\n", FGET_ARG_MAX + 1);
    assert!(
        matches!(p(huge.as_bytes()), Parsed::Request(Request::FgetArgsTooLong { swallow }, _) if swallow == FGET_ARG_MAX + 3)
    );
    assert!(matches!(
        p(b"fget f 4294967296 k\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadFormat,
            consumed: 21,
            ..
        }
    ));
    assert!(matches!(
        p(b"fget f -1 k\r\n"),
        Parsed::Error {
            reply: ErrorReply::BadFormat,
            consumed: 13,
            ..
        }
    ));
    // A bad block end consumes the block, like a storage command's.
    assert!(matches!(
        p(b"fget f 2 k\r\nabcd"),
        Parsed::Error {
            reply: ErrorReply::BadDataChunk,
            consumed: 16,
            ..
        }
    ));
    // Key and filter names follow get's rule, after the block is consumed.
    let long = format!("fget f 0 a {}\r\n\r\n", "k".repeat(251));
    assert!(
        matches!(p(long.as_bytes()), Parsed::Error { reply: ErrorReply::BadFormat, consumed, .. } if consumed == long.len())
    );
    let long = format!("fget {} 0 a\r\n\r\n", "f".repeat(251));
    assert!(matches!(
        p(long.as_bytes()),
        Parsed::Error {
            reply: ErrorReply::BadFormat,
            ..
        }
    ));
    assert!(matches!(
        p(b"fget f\r\n"),
        Parsed::Error {
            reply: ErrorReply::Error,
            consumed: 8,
            ..
        }
    ));
    // Like a multi-get, an fget line may pass 2048 bytes before its newline.
    let many = format!("fget f 0 {}", "key ".repeat(1000));
    assert!(matches!(p(many.as_bytes()), Parsed::Incomplete(_)));
}

#[test]
fn pending_store_names_the_block_parse_waits_for() {
    let cases: &[&[u8]] = &[
        b"set k 5 10 3\r\nab",
        b"add key 0 -1 100 noreply\r\n",
        b"cas k 1 2 40 77\r\n0123",
        b"replace k 0 0 10\nx",
        b"append k 0 0 4\r\nabc",
        b"prepend k 0 0 4\r\n",
    ];
    for &buf in cases {
        let h = pending_store(buf, &L).unwrap_or_else(|| panic!("{buf:?}"));
        assert_eq!(p(buf), Parsed::Incomplete(h.data_at + h.len + 2), "{buf:?}");
        // With its block and terminator, parse returns the same fields.
        let mut whole = buf[..h.data_at].to_vec();
        whole.extend(std::iter::repeat_n(b'v', h.len));
        whole.extend_from_slice(b"\r\n");
        match p(&whole) {
            Parsed::Request(
                Request::Store {
                    kind,
                    key,
                    flags,
                    exptime,
                    data,
                    cas,
                    noreply,
                },
                n,
            ) => {
                assert_eq!(
                    (kind, key, flags, exptime, cas, noreply),
                    (h.kind, h.key, h.flags, h.exptime, h.cas, h.noreply)
                );
                assert_eq!((data.len(), n), (h.len, whole.len()));
            }
            other => panic!("{other:?}"),
        }
    }
    let h = pending_store(b"cas k 1 2 40 77 noreply\r\n", &L).unwrap();
    assert_eq!(
        (h.kind, h.cas, h.noreply, h.len, h.data_at),
        (StoreKind::Cas, 77, true, 40, 25)
    );
    // Whole requests, lines parse refuses, other commands and unfinished lines: None.
    let none: &[&[u8]] = &[
        b"set k 0 0 3\r\nabc\r\n",
        b"set k 0 0 3\r\nabcXY",
        b"set k 0 0\r\n",
        b"set k x 0 3\r\nab",
        b"set k 0 0 2000000\r\nab",
        b"get k\r\n",
        b"set k 0 0 3",
        b"cas k 0 0 3\r\nab",
    ];
    for &buf in none {
        assert_eq!(pending_store(buf, &L), None, "{buf:?}");
    }
}

proptest::proptest! {
    /// pending_store says Some exactly when parse waits for a storage command's data block.
    #[test]
    fn pending_store_agrees_with_parse(buf in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200), cmd in 0usize..4) {
        let line: &[u8] = [&b"set k 1 2 30\r\n"[..], b"cas k 1 2 30 5 noreply\r\n", b"get k\r\n", b"set k 1 2 3x\r\n"][cmd];
        let mut input = line.to_vec();
        input.extend_from_slice(&buf);
        match (pending_store(&input, &L), p(&input)) {
            (Some(h), Parsed::Incomplete(need)) => proptest::prop_assert_eq!(need, h.data_at + h.len + 2),
            (Some(h), other) => proptest::prop_assert!(false, "{:?} vs {:?}", h, other),
            (None, Parsed::Incomplete(_)) => proptest::prop_assert!(false, "parse waits, pending_store says None"),
            (None, _) => {}
        }
    }
}

#[test]
fn lookup_key_finds_the_first_key_of_key_first_commands_only() {
    let at = |buf: &[u8]| lookup_key(buf).map(|r| buf[r].to_vec());
    assert_eq!(at(b"get foo\r\n"), Some(b"foo".to_vec()));
    assert_eq!(at(b"gets a b c\r\n"), Some(b"a".to_vec()));
    assert_eq!(at(b"set k 0 0 1\r\nx\r\n"), Some(b"k".to_vec()));
    assert_eq!(at(b"mg key v\n"), Some(b"key".to_vec()));
    assert_eq!(at(b"delete gone\r\n"), Some(b"gone".to_vec()));
    // Not yet whole, other commands, binary, a key past KEY_MAX.
    assert_eq!(at(b"get fo"), None);
    assert_eq!(at(b"incr k 1\r\n"), None);
    assert_eq!(at(b"\x80\x00"), None);
    let long = [b"get ".as_slice(), &[b'k'; KEY_MAX + 1], b"\r\n"].concat();
    assert_eq!(at(&long), None);
    let max = [b"get ".as_slice(), &[b'k'; KEY_MAX], b"\r\n"].concat();
    assert_eq!(at(&max).map(|k| k.len()), Some(KEY_MAX));
}
