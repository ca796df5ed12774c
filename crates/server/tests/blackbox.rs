//! Black-box tests against the real `mnemod` binary on a free port.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

mod common;
use common::Server;

/// Send `req`, then read exactly `want.len()` bytes and compare.
fn talk(s: &mut TcpStream, req: &[u8], want: &[u8]) {
    s.write_all(req).unwrap();
    let mut got = vec![0; want.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
}

#[test]
fn storage_and_retrieval() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    talk(&mut c, b"set a 5 0 3\r\nabc\r\n", b"STORED\r\n");
    talk(&mut c, b"get a b\r\n", b"VALUE a 5 3\r\nabc\r\nEND\r\n");
    talk(
        &mut c,
        b"append a 0 0 2\r\nde\r\nprepend a 0 0 1\r\nz\r\nget a\r\n",
        b"STORED\r\nSTORED\r\nVALUE a 5 6\r\nzabcde\r\nEND\r\n",
    );
    talk(
        &mut c,
        b"add a 0 0 1\r\nx\r\nreplace nope 0 0 1\r\nx\r\n",
        b"NOT_STORED\r\nNOT_STORED\r\n",
    );
    talk(
        &mut c,
        b"set n 0 0 2\r\n10\r\ndecr n 1\r\nget n\r\n",
        b"STORED\r\n9\r\nVALUE n 0 2\r\n9 \r\nEND\r\n",
    );
    talk(&mut c, b"incr n 18446744073709551615\r\n", b"8\r\n");
    talk(
        &mut c,
        b"delete a\r\ndelete a\r\n",
        b"DELETED\r\nNOT_FOUND\r\n",
    );
    talk(
        &mut c,
        b"set q 0 0 1 noreply\r\nq\r\nget q\r\n",
        b"VALUE q 0 1\r\nq\r\nEND\r\n",
    );
}

#[test]
fn cas_changes_on_every_write() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    talk(&mut c, b"set k 0 0 1\r\nx\r\n", b"STORED\r\n");
    c.write_all(b"gets k\r\n").unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let mut header = String::new();
    r.read_line(&mut header).unwrap();
    let cas: u64 = header
        .trim_end()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let mut rest = String::new();
    r.read_line(&mut rest).unwrap();
    r.read_line(&mut rest).unwrap();
    talk(
        &mut c,
        format!("cas k 0 0 1 {}\r\ny\r\n", cas + 1000).as_bytes(),
        b"EXISTS\r\n",
    );
    talk(
        &mut c,
        format!("cas k 0 0 1 {cas}\r\ny\r\n").as_bytes(),
        b"STORED\r\n",
    );
    talk(
        &mut c,
        format!("cas k 0 0 1 {cas}\r\nz\r\n").as_bytes(),
        b"EXISTS\r\n",
    );
    talk(&mut c, b"cas nope 0 0 1 1\r\nz\r\n", b"NOT_FOUND\r\n");
}

#[test]
fn pipelined_requests_answer_in_order() {
    let srv = Server::start(&["-t", "2"]);
    let mut c = srv.connect();
    let mut req = Vec::new();
    let mut want = Vec::new();
    for i in 0..5000 {
        req.extend_from_slice(
            format!(
                "set k{i} 0 0 {}\r\n{i}\r\nget k{i}\r\n",
                i.to_string().len()
            )
            .as_bytes(),
        );
        want.extend_from_slice(
            format!(
                "STORED\r\nVALUE k{i} 0 {}\r\n{i}\r\nEND\r\n",
                i.to_string().len()
            )
            .as_bytes(),
        );
    }
    let mut w = c.try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(&req).unwrap());
    let mut got = vec![0; want.len()];
    c.read_exact(&mut got).unwrap();
    writer.join().unwrap();
    assert!(got == want, "pipelined replies differ");
}

#[test]
fn oversized_value_is_swallowed_and_old_value_dropped() {
    let srv = Server::start(&[]);
    let mut c = srv.connect();
    talk(&mut c, b"set big 0 0 1\r\nx\r\n", b"STORED\r\n");
    let mut req = b"set big 0 0 2000000\r\n".to_vec();
    req.extend(std::iter::repeat_n(b'v', 2_000_000));
    req.extend_from_slice(b"\r\nget big\r\n");
    talk(
        &mut c,
        &req,
        b"SERVER_ERROR object too large for cache\r\nEND\r\n",
    );
}

#[test]
fn other_clients_are_served_while_one_never_reads() {
    let srv = Server::start(&["-t", "1"]);
    let mut greedy = srv.connect();
    talk(&mut greedy, b"set k 0 0 1000\r\n", b"");
    greedy.write_all(&[b'v'; 1000]).unwrap();
    talk(&mut greedy, b"\r\n", b"STORED\r\n");
    greedy.set_nonblocking(true).unwrap();
    let batch = b"get k\r\n".repeat(10_000);
    // Push until the kernel refuses more: the server must stop reading, not buffer forever.
    let mut sent = 0usize;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && sent < 500_000_000 {
        match greedy.write(&batch) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    let mut polite = srv.connect();
    talk(
        &mut polite,
        b"get k\r\n",
        format!("VALUE k 0 1000\r\n{}\r\nEND\r\n", "v".repeat(1000)).as_bytes(),
    );
    let rss_kb = srv.rss_kb();
    assert!(rss_kb < 200_000, "RSS grew to {rss_kb} kB");
}

fn curr_connections(s: &mut TcpStream) -> u64 {
    stat(s, "curr_connections")
}

/// One general statistic's value, by name (0 when absent).
fn stat(s: &mut TcpStream, name: &str) -> u64 {
    s.write_all(b"stats\r\n").unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let prefix = format!("STAT {name} ");
    let mut n = 0;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "END\r\n" {
            return n;
        }
        if let Some(v) = line.strip_prefix(&prefix) {
            n = v.trim().parse().unwrap();
        }
    }
}

#[test]
fn overwrites_are_compacted_and_counted() {
    let srv = Server::start(&["-m", "64"]);
    let mut s = srv.connect();
    assert_eq!(stat(&mut s, "slabs_moved"), 0);
    // 500 keys of 4 KB (2 MB live) written 40 times: 80 MB of writes into a 64 MB cache.
    let value = "c".repeat(4000);
    for round in 0..40 {
        let mut batch = Vec::new();
        for k in 0..500 {
            batch.extend_from_slice(
                format!("set k{k} {round} 0 4000 noreply\r\n{value}\r\n").as_bytes(),
            );
        }
        s.write_all(&batch).unwrap();
    }
    talk(
        &mut s,
        b"get k499\r\n",
        format!("VALUE k499 39 4000\r\n{value}\r\nEND\r\n").as_bytes(),
    );
    assert!(
        stat(&mut s, "slabs_moved") > 0,
        "80 MB of overwrites never compacted"
    );
    assert_eq!(stat(&mut s, "evictions"), 0);
    assert!(stat(&mut s, "bytes") <= 2_100_000);
}

#[test]
fn connection_limit_rejects_then_recovers() {
    let srv = Server::start(&["-c", "3"]);
    let mut keep: Vec<TcpStream> = vec![srv.connect()];
    // The start-up probe's connection may not be closed on the server side yet.
    let deadline = Instant::now() + Duration::from_secs(10);
    while curr_connections(&mut keep[0]) != 1 {
        assert!(
            Instant::now() < deadline,
            "probe connection never went away"
        );
    }
    keep.push(srv.connect());
    keep.push(srv.connect());
    for s in keep.iter_mut() {
        talk(s, b"version\r\n", b"VERSION ");
        let mut line = String::new();
        BufReader::new(s.try_clone().unwrap())
            .read_line(&mut line)
            .unwrap();
    }
    let mut extra = srv.connect();
    let mut buf = String::new();
    extra.read_to_string(&mut buf).unwrap();
    assert_eq!(buf, "ERROR Too many open connections\r\n");
    drop(keep.pop());
    // The slot frees once the server sees the close; retry until it does.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut s = srv.connect();
        let mut b = [0u8; 8];
        // A connection still refused is closed at once, so the write may fail too (reset).
        if s.write_all(b"version\r\n").is_ok() && s.read_exact(&mut b).is_ok() && &b == b"VERSION "
        {
            break;
        }
        assert!(Instant::now() < deadline, "slot never freed");
    }
}

#[test]
fn huge_multiget_output_is_streamed_not_buffered() {
    let srv = Server::start(&["-t", "1"]);
    let mut c = srv.connect();
    let value = vec![b'v'; 900_000];
    c.write_all(b"set big 0 0 900000\r\n").unwrap();
    c.write_all(&value).unwrap();
    talk(&mut c, b"\r\n", b"STORED\r\n");
    // 300 copies of a 900 KB value: 270 MB of reply to one request.
    let keys = " big".repeat(300);
    c.write_all(format!("get{keys}\r\n").as_bytes()).unwrap();
    let header = b"VALUE big 0 900000\r\n";
    let mut buf = vec![0; header.len() + value.len() + 2];
    let mut peak_kb = 0;
    for i in 0..300 {
        c.read_exact(&mut buf).unwrap();
        assert_eq!(&buf[..header.len()], header, "item {i}");
        assert!(buf[header.len()..header.len() + value.len()] == value[..]);
        if i % 50 == 0 {
            peak_kb = peak_kb.max(srv.rss_kb());
        }
    }
    let mut end = [0u8; 5];
    c.read_exact(&mut end).unwrap();
    assert_eq!(&end, b"END\r\n");
    assert!(
        peak_kb < 100_000,
        "RSS reached {peak_kb} kB while streaming"
    );
}

/// Large values go to the socket straight from the store (one writev with the replies before
/// them); whatever the socket does not take is buffered. Replies must come out whole and in
/// order however the socket splits them: a pipeline mixing large and small values, incr on a
/// key read earlier in the same batch, and a client that reads only after sending everything
/// (so the server meets a full socket buffer in the middle of a value).
#[test]
fn large_values_sent_directly_stay_in_order() {
    let srv = Server::start(&["-t", "1", "-I", "2m"]);
    let mut c = srv.connect();
    let big: Vec<Vec<u8>> = (0..4u8)
        .map(|i| {
            (0..(40_000 + 150_000 * i as usize))
                .map(|j| b'a' + ((j + i as usize) % 26) as u8)
                .collect()
        })
        .collect();
    for (i, v) in big.iter().enumerate() {
        let mut req = format!("set big{i} {i} 0 {}\r\n", v.len()).into_bytes();
        req.extend_from_slice(v);
        req.extend_from_slice(b"\r\n");
        talk(&mut c, &req, b"STORED\r\n");
    }
    talk(&mut c, b"set n 0 0 2\r\n10\r\n", b"STORED\r\n");
    let mut req = Vec::new();
    let mut want = Vec::new();
    for round in 0..30 {
        let i = round % 4;
        req.extend_from_slice(format!("get n big{i} n\r\nincr n 1\r\n").as_bytes());
        let n = (10 + round).to_string();
        for part in [
            format!("VALUE n 0 {}\r\n{n}\r\n", n.len()).into_bytes(),
            format!("VALUE big{i} {i} {}\r\n", big[i].len()).into_bytes(),
            big[i].clone(),
            format!(
                "\r\nVALUE n 0 {}\r\n{n}\r\nEND\r\n{}\r\n",
                n.len(),
                11 + round
            )
            .into_bytes(),
        ] {
            want.extend_from_slice(&part);
        }
        req.extend_from_slice(format!("gets big{i}\r\n").as_bytes());
        want.extend_from_slice(format!("VALUE big{i} {i} {} ", big[i].len()).as_bytes());
        want.push(b'#'); // the cas value: checked loosely below
    }
    // Every request first (they are small), then read: the server fills the socket buffer
    // and meets it full in the middle of values.
    c.write_all(&req).unwrap();
    let mut r = BufReader::new(c);
    let mut pos = 0;
    while pos < want.len() {
        if want[pos] == b'#' {
            // "<cas>\r\n<value>\r\nEND\r\n" of a gets: the value must be the stored one.
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            assert!(line.trim_end().parse::<u64>().is_ok(), "cas line {line:?}");
            // The gets line before '#' names the key: find which big value by length.
            let header_start = want[..pos].iter().rposition(|&b| b == b'V').unwrap();
            let header = String::from_utf8_lossy(&want[header_start..pos]).to_string();
            let idx: usize = header.split_whitespace().nth(1).unwrap()[3..]
                .parse()
                .unwrap();
            let mut body = vec![0; big[idx].len() + 7];
            r.read_exact(&mut body).unwrap();
            assert!(
                body[..big[idx].len()] == big[idx][..],
                "gets value of big{idx}"
            );
            assert_eq!(&body[big[idx].len()..], b"\r\nEND\r\n");
            pos += 1;
            continue;
        }
        let end = want[pos..]
            .iter()
            .position(|&b| b == b'#')
            .map_or(want.len(), |p| pos + p);
        let mut got = vec![0; end - pos];
        r.read_exact(&mut got).unwrap();
        if got != want[pos..end] {
            let at = got
                .iter()
                .zip(&want[pos..end])
                .position(|(a, b)| a != b)
                .unwrap_or(got.len());
            panic!(
                "reply differs at byte {}: got {:?}, want {:?}",
                pos + at,
                String::from_utf8_lossy(&got[at.saturating_sub(20)..(at + 40).min(got.len())]),
                String::from_utf8_lossy(
                    &want[pos + at.saturating_sub(20)..(pos + at + 40).min(end)]
                )
            );
        }
        pos = end;
    }
    // Nothing extra (such as a second END after a value sent directly) follows the last reply.
    r.get_mut().write_all(b"version\r\n").unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("VERSION "), "after the pipeline: {line:?}");
}

/// Items far larger than a segment (up to -I 128m) come back byte for byte, and memory stays
/// within -m while two of them no longer fit together.
#[test]
fn items_up_to_128_mb_round_trip_within_the_memory_limit() {
    let srv = Server::start(&["-m", "256", "-I", "128m", "-t", "1"]);
    let mut c = srv.connect();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let len = 128 * 1024 * 1024 - 512; // the -I limit counts key and item overhead too
    let value_of = |seed: u8| -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    };
    for (round, key) in ["huge1", "huge2", "huge3"].iter().enumerate() {
        let v = value_of(round as u8);
        c.write_all(format!("set {key} 7 0 {len}\r\n").as_bytes())
            .unwrap();
        c.write_all(&v).unwrap();
        talk(&mut c, b"\r\n", b"STORED\r\n");
        c.write_all(format!("get {key}\r\n").as_bytes()).unwrap();
        let header = format!("VALUE {key} 7 {len}\r\n");
        let mut got = vec![0; header.len() + len + 7];
        c.read_exact(&mut got).unwrap();
        assert_eq!(&got[..header.len()], header.as_bytes());
        assert!(
            got[header.len()..header.len() + len] == v[..],
            "{key} came back different"
        );
        assert_eq!(&got[header.len() + len..], b"\r\nEND\r\n");
        // Two 128 MB items and the index do not fit in 256 MB: the older ones were evicted.
        assert!(
            srv.rss_kb() < 256 * 1024 + 48 * 1024,
            "RSS {} kB after {key}",
            srv.rss_kb()
        );
    }
    c.write_all(b"get huge1\r\n").unwrap();
    let mut end = [0u8; 5];
    c.read_exact(&mut end).unwrap();
    assert_eq!(
        &end, b"END\r\n",
        "huge1 should have been evicted to make room"
    );
}
