//! Large values against the real `mnemod`: storage commands whose data block is read straight
//! into the item (exec/largeset.rs) must answer, consume and store exactly what the buffered
//! path does, whatever way the block arrives; and meta/binary reads of large values (sent
//! from the item without a copy) must carry the same bytes.

use std::io::{Read, Write};
use std::net::TcpStream;

mod common;
use common::Server;

/// Send `req`, then read exactly `want.len()` bytes and compare.
fn talk(s: &mut TcpStream, req: &[u8], want: &[u8]) {
    s.write_all(req).unwrap();
    let mut got = vec![0; want.len()];
    s.read_exact(&mut got).unwrap();
    assert!(
        got == want,
        "got {:?}\nwant {:?}",
        String::from_utf8_lossy(&got[..got.len().min(200)]),
        String::from_utf8_lossy(&want[..want.len().min(200)])
    );
}

fn value(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| b'a' + ((i + seed as usize) % 26) as u8)
        .collect()
}

fn set_cmd(cmd: &str, key: &str, flags: u32, v: &[u8], tail: &[u8]) -> Vec<u8> {
    [
        format!("{cmd} {key} {flags} 0 {}\r\n", v.len()).as_bytes(),
        v,
        tail,
    ]
    .concat()
}

fn get_reply(key: &str, flags: u32, v: &[u8]) -> Vec<u8> {
    [
        format!("VALUE {key} {flags} {}\r\n", v.len()).as_bytes(),
        v,
        b"\r\nEND\r\n",
    ]
    .concat()
}

#[test]
fn a_large_set_in_pieces_or_pipelined_is_stored_whole() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let v = value(100_000, 1);
    // Split at awkward places: inside the line, inside the value, between \r and \n.
    let req = set_cmd("set", "k", 3, &v, b"\r\n");
    for cut in [
        &[5usize, 40, 70_000, req.len() - 1][..],
        &[30, 17_000][..],
        &[req.len() - 2][..],
    ] {
        let mut at = 0;
        for &end in cut {
            c.write_all(&req[at..end]).unwrap();
            at = end;
        }
        talk(&mut c, &req[at..], b"STORED\r\n");
        talk(&mut c, b"get k\r\n", &get_reply("k", 3, &v));
    }
    // Whole, with requests before and after it in the same write.
    let w = value(300_000, 2);
    let batch = [
        b"get k\r\n".as_slice(),
        &set_cmd("set", "k", 4, &w, b"\r\n"),
        b"get k\r\n",
    ]
    .concat();
    talk(
        &mut c,
        &batch,
        &[
            get_reply("k", 3, &v),
            b"STORED\r\n".to_vec(),
            get_reply("k", 4, &w),
        ]
        .concat(),
    );
    // noreply: the next reply is the get's.
    let quiet = [
        format!("set k 5 0 {} noreply\r\n", v.len()).as_bytes(),
        &v,
        b"\r\nget k\r\n",
    ]
    .concat();
    talk(&mut c, &quiet, &get_reply("k", 5, &v));
}

/// A value that trickles in, in small writes, reaches its item over many reads (and on the
/// io_uring loop over many receive buffers): it must still be stored whole, followed by the
/// requests behind it.
#[test]
fn a_large_value_trickling_in_is_stored_whole() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    c.set_nodelay(true).unwrap();
    let v = value(300_000, 7);
    let req = [set_cmd("set", "t", 9, &v, b"\r\n").as_slice(), b"get t\r\n"].concat();
    for piece in req.chunks(997) {
        c.write_all(piece).unwrap();
    }
    let mut got = vec![0; b"STORED\r\n".len() + get_reply("t", 9, &v).len()];
    c.read_exact(&mut got).unwrap();
    assert!(
        got == [b"STORED\r\n".to_vec(), get_reply("t", 9, &v)].concat(),
        "the trickled value came back different"
    );
    // And a second one on the same connection, the stream still in step.
    talk(
        &mut c,
        &set_cmd("set", "t", 1, &v[..50_000], b"\r\n"),
        b"STORED\r\n",
    );
    talk(&mut c, b"get t\r\n", &get_reply("t", 1, &v[..50_000]));
}

#[test]
fn a_bad_data_chunk_stores_nothing_and_keeps_the_stream_in_step() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let (old, new) = (value(60_000, 1), value(60_000, 9));
    talk(
        &mut c,
        &set_cmd("set", "k", 1, &old, b"\r\n"),
        b"STORED\r\n",
    );
    // The two bytes after the block are consumed whatever they are, as for a small value.
    talk(
        &mut c,
        &set_cmd("set", "k", 2, &new, b"XYget k\r\n"),
        &[
            b"CLIENT_ERROR bad data chunk\r\n".to_vec(),
            get_reply("k", 1, &old),
        ]
        .concat(),
    );
    talk(
        &mut c,
        &set_cmd("set", "k", 2, &new, b"\rXget k\r\n"),
        &[
            b"CLIENT_ERROR bad data chunk\r\n".to_vec(),
            get_reply("k", 1, &old),
        ]
        .concat(),
    );
    talk(
        &mut c,
        &set_cmd("set", "small", 2, b"abc", b"XYget k\r\n"),
        &[
            b"CLIENT_ERROR bad data chunk\r\n".to_vec(),
            get_reply("k", 1, &old),
        ]
        .concat(),
    );
    // noreply silences the error as well.
    let quiet = [
        format!("set k 2 0 {} noreply\r\n", new.len()).as_bytes(),
        &new,
        b"XYget k\r\n",
    ]
    .concat();
    talk(&mut c, &quiet, &get_reply("k", 1, &old));
}

#[test]
fn a_client_gone_half_way_leaves_nothing_behind() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let old = value(50_000, 3);
    talk(
        &mut c,
        &set_cmd("set", "k", 1, &old, b"\r\n"),
        b"STORED\r\n",
    );
    for _ in 0..20 {
        let mut gone = srv.connect();
        gone.write_all(&set_cmd("set", "k", 2, &value(500_000, 4), b"\r\n")[..250_000])
            .unwrap();
        drop(gone);
    }
    talk(&mut c, b"get k\r\n", &get_reply("k", 1, &old));
    talk(&mut c, b"stats\r\n", b"STAT pid ");
    let mut rest = Vec::new();
    while !rest.ends_with(b"END\r\n") {
        let mut b = [0u8; 4096];
        let n = c.read(&mut b).unwrap();
        rest.extend_from_slice(&b[..n]);
    }
    let stats = String::from_utf8(rest).unwrap();
    assert!(stats.contains("STAT curr_items 1\r\n"), "{stats}");
}

#[test]
fn add_replace_cas_and_concat_answer_as_for_small_values() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let (a, b) = (value(80_000, 1), value(80_000, 2));
    talk(
        &mut c,
        &set_cmd("replace", "k", 0, &a, b"\r\n"),
        b"NOT_STORED\r\n",
    );
    talk(&mut c, &set_cmd("add", "k", 1, &a, b"\r\n"), b"STORED\r\n");
    talk(
        &mut c,
        &set_cmd("add", "k", 2, &b, b"\r\n"),
        b"NOT_STORED\r\n",
    );
    talk(
        &mut c,
        &[b"cas k 0 0 80000 1\r\n".as_slice(), &b, b"\r\n"].concat(),
        b"EXISTS\r\n",
    );
    talk(
        &mut c,
        &[b"cas nope 0 0 80000 1\r\n".as_slice(), &b, b"\r\n"].concat(),
        b"NOT_FOUND\r\n",
    );
    c.write_all(b"gets k\r\n").unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n") {
        let mut byte = [0u8];
        c.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let cas: u64 = String::from_utf8(head)
        .unwrap()
        .split_whitespace()
        .nth(4)
        .unwrap()
        .parse()
        .unwrap();
    let mut rest = vec![0u8; a.len() + 7];
    c.read_exact(&mut rest).unwrap();
    talk(
        &mut c,
        &[format!("cas k 7 0 80000 {cas}\r\n").as_bytes(), &b, b"\r\n"].concat(),
        b"STORED\r\n",
    );
    talk(&mut c, b"get k\r\n", &get_reply("k", 7, &b));
    talk(
        &mut c,
        &set_cmd("append", "k", 0, &a, b"\r\n"),
        b"STORED\r\n",
    );
    talk(
        &mut c,
        b"get k\r\n",
        &get_reply("k", 7, &[b.as_slice(), &a].concat()),
    );
    // Past -I: refused and swallowed before any of it is read into an item.
    let huge = value(2 << 20, 5);
    talk(
        &mut c,
        &[
            set_cmd("set", "k", 0, &huge, b"\r\n"),
            b"get k\r\n".to_vec(),
        ]
        .concat(),
        b"SERVER_ERROR object too large for cache\r\nEND\r\n",
    );
}

#[test]
fn large_values_churn_within_the_memory_limit() {
    // 8 MB: every set of a 100 KB value past the first ~70 evicts.
    let srv = Server::start(&["-m", "8"]);
    let mut c = srv.connect();
    for i in 0..400u32 {
        let v = value(100_000, i as u8);
        let key = format!("k{}", i % 150);
        talk(&mut c, &set_cmd("set", &key, i, &v, b"\r\n"), b"STORED\r\n");
        talk(
            &mut c,
            format!("get {key}\r\n").as_bytes(),
            &get_reply(&key, i, &v),
        );
    }
    let rss = srv.rss_kb();
    assert!(rss < 64 * 1024, "rss {rss} KiB");
}

#[test]
fn meta_get_of_a_large_value_carries_the_same_bytes() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    let v = value(120_000, 6);
    talk(&mut c, &set_cmd("set", "k", 9, &v, b"\r\n"), b"STORED\r\n");
    let one = [b"VA 120000 f9 s120000\r\n".as_slice(), &v, b"\r\n"].concat();
    // Pipelined with small replies before, between and after the values.
    talk(
        &mut c,
        b"mn\r\nmg k v f s\r\nmg nope v\r\nmg k v f s\r\nmn\r\n",
        &[b"MN\r\n".as_slice(), &one, b"EN\r\n", &one, b"MN\r\n"].concat(),
    );
    talk(&mut c, b"mg k s\r\n", b"HD s120000\r\n");
}

/// A binary GET request for `key` with `opaque`.
fn bin_get(key: &[u8], opaque: u32) -> Vec<u8> {
    let mut r = vec![0x80, 0x00];
    r.extend_from_slice(&(key.len() as u16).to_be_bytes());
    r.extend_from_slice(&[0, 0, 0, 0]);
    r.extend_from_slice(&(key.len() as u32).to_be_bytes());
    r.extend_from_slice(&opaque.to_be_bytes());
    r.extend_from_slice(&[0; 8]);
    r.extend_from_slice(key);
    r
}

#[test]
fn binary_get_of_a_large_value_carries_the_same_bytes() {
    let srv = Server::start(&[]);
    let mut text = srv.connect();
    let v = value(200_000, 8);
    talk(
        &mut text,
        &set_cmd("set", "k", 0x0102_0304, &v, b"\r\n"),
        b"STORED\r\n",
    );
    let mut c = srv.connect();
    c.write_all(&[bin_get(b"k", 7), bin_get(b"nope", 8), bin_get(b"k", 9)].concat())
        .unwrap();
    for (opaque, hit) in [(7u32, true), (8, false), (9, true)] {
        let mut h = [0u8; 24];
        c.read_exact(&mut h).unwrap();
        let body = u32::from_be_bytes(h[8..12].try_into().unwrap()) as usize;
        assert_eq!(
            (
                h[0],
                h[1],
                u32::from_be_bytes(h[12..16].try_into().unwrap())
            ),
            (0x81, 0x00, opaque)
        );
        let mut b = vec![0u8; body];
        c.read_exact(&mut b).unwrap();
        if hit {
            assert_eq!(
                (h[4], u16::from_be_bytes([h[6], h[7]]), body),
                (4, 0, 4 + v.len())
            );
            assert_eq!(&b[..4], &[1, 2, 3, 4]);
            assert!(b[4..] == v[..], "value bytes differ");
        } else {
            assert_eq!(u16::from_be_bytes([h[6], h[7]]), 1, "key not found");
        }
    }
}

/// Zero-copy sends (splice.rs) hand the socket references to an item's pages. Replies the
/// client has not read yet when the item is overwritten, and its buffer reused for another
/// value, must still carry the bytes they were answered with; with `--zero-copy off` and the
/// default `auto` too.
#[test]
fn unread_replies_keep_their_bytes_when_the_item_is_overwritten_and_its_buffer_reused() {
    const N: usize = 500_000;
    const GETS: usize = 16;
    for (mode, want) in [("on", "yes"), ("off", "no"), ("auto", "auto")] {
        let srv = Server::start(&["--zero-copy", mode, "-m", "64"]);
        let mut reader = srv.connect();
        let mut writer = srv.connect();
        writer.write_all(b"stats settings\r\n").unwrap();
        let mut settings = Vec::new();
        while !settings.ends_with(b"END\r\n") {
            let mut buf = [0; 4096];
            let n = writer.read(&mut buf).unwrap();
            assert!(n > 0);
            settings.extend_from_slice(&buf[..n]);
        }
        assert!(String::from_utf8_lossy(&settings).contains(&format!("STAT zero_copy {want}\r\n")));

        talk(
            &mut writer,
            &set_cmd("set", "k", 0, &[b'1'; N], b"\r\n"),
            b"STORED\r\n",
        );
        // 8 MB of replies asked for and none read: the first ones sit in the sockets.
        reader.write_all(&b"get k\r\n".repeat(GETS)).unwrap();
        let mut first = [0; 1];
        reader.peek(&mut first).unwrap();
        // k's buffer is retired, then taken from the pool for j and filled with '3'.
        talk(
            &mut writer,
            &set_cmd("set", "k", 0, &[b'2'; N], b"\r\n"),
            b"STORED\r\n",
        );
        talk(
            &mut writer,
            &set_cmd("set", "j", 0, &[b'3'; N], b"\r\n"),
            b"STORED\r\n",
        );
        talk(
            &mut writer,
            &set_cmd("set", "i", 0, &[b'4'; N], b"\r\n"),
            b"STORED\r\n",
        );

        let head = format!("VALUE k 0 {N}\r\n");
        let mut seen = Vec::new();
        for i in 0..GETS {
            let mut reply = vec![0; head.len() + N + 7];
            reader.read_exact(&mut reply).unwrap();
            assert_eq!(&reply[..head.len()], head.as_bytes(), "reply {i} ({mode})");
            assert_eq!(
                &reply[head.len() + N..],
                b"\r\nEND\r\n",
                "reply {i} ({mode})"
            );
            let v = &reply[head.len()..head.len() + N];
            let byte = v[0];
            assert!(
                (byte == b'1' || byte == b'2') && v.iter().all(|&x| x == byte),
                "reply {i} ({mode}) carries bytes written after it was answered: {:?}",
                String::from_utf8_lossy(&v[..64])
            );
            seen.push(byte);
        }
        // Replies are answered in order: the old value, then (once the sockets drained) the new.
        assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
        assert_eq!(seen[0], b'1');

        // Several large values and a small one in one multi-get, each value sent on its own.
        talk(&mut writer, b"set s 0 0 2\r\nhi\r\n", b"STORED\r\n");
        let want = [
            format!("VALUE k 0 {N}\r\n").as_bytes(),
            &[b'2'; N],
            format!("\r\nVALUE s 0 2\r\nhi\r\nVALUE j 0 {N}\r\n").as_bytes(),
            &[b'3'; N],
            format!("\r\nVALUE i 0 {N}\r\n").as_bytes(),
            &[b'4'; N],
            b"\r\nEND\r\n",
        ]
        .concat();
        talk(&mut reader, b"get k s j i\r\n", &want);
    }
}
