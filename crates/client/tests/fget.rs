//! `fget` against scripted servers (tests/common/fake.rs; black-box tests against mnemod's own
//! fget live with the server): what each server receives, how partial results merge, how the
//! servers' error replies come back, and routing around an ejected server.

mod common;

use common::fake::{parse_fget, value_reply, Fake};
use mnemo_client::{blocking, filter, Config, Error, ServerSpec};
use mnemo_filter_sdk::records::{self, Record};
use std::net::TcpListener;
use std::time::Duration;

fn spec(port: u16) -> ServerSpec {
    ServerSpec::new("127.0.0.1", port)
}

fn client(ports: &[u16], cfg: Config) -> blocking::Client {
    blocking::Client::new(ports.iter().map(|&p| spec(p)).collect(), cfg).unwrap()
}

/// Answers every fget with its keys, comma separated, as the filter's output.
fn echo_keys() -> Fake {
    Fake::start(|req| {
        let (filter, _, keys) = parse_fget(req);
        value_reply(&filter, 0, keys.join(",").as_bytes())
    })
}

fn keys() -> Vec<String> {
    // Forty plain keys: both servers get some whatever ring their (random) ports make.
    let mut keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    keys.insert(3, "{user:7}:a".into());
    keys.insert(11, "{user:7}:b".into());
    keys
}

/// A key's server, as an index into `ports`.
fn owner(c: &blocking::Client, ports: &[u16], key: &str) -> usize {
    let port = c.route(key).unwrap().port;
    ports.iter().position(|&p| p == port).unwrap()
}

#[test]
fn each_server_gets_its_keys_in_order_in_one_write() {
    let fakes = [echo_keys(), echo_keys()];
    let ports = [fakes[0].port, fakes[1].port];
    let cfg = Config {
        hash_tags: true,
        ..Config::default()
    };
    let c = client(&ports, cfg);
    let keys = keys();
    // The routing every other command uses (get_multi groups keys with it too).
    let owners: Vec<usize> = keys.iter().map(|k| owner(&c, &ports, k)).collect();
    assert!(owners.contains(&0) && owners.contains(&1), "{owners:?}");
    assert_eq!(
        owners[3], owners[11],
        "hash tags keep {{user:7}} on one server"
    );

    let parts = c.fget("topk", b"10", &keys).unwrap();

    assert_eq!(parts.len(), 2);
    for (i, fake) in fakes.iter().enumerate() {
        let mine: Vec<&str> = keys
            .iter()
            .zip(&owners)
            .filter(|(_, &o)| o == i)
            .map(|(k, _)| k.as_str())
            .collect();
        let got = fake.received();
        assert_eq!(got.len(), 1, "server {i}: one request");
        let want = format!("fget topk 2 {}\r\n10\r\n", mine.join(" "));
        assert_eq!(
            String::from_utf8_lossy(&got[0].bytes),
            want,
            "server {i}: its keys, in request order"
        );
        assert!(got[0].whole_in_first_read, "server {i}: one write");
        // Parts in server order, each with what its server said.
        assert_eq!(parts[i].server, spec(ports[i]));
        assert_eq!(parts[i].flags, 0);
        assert_eq!(parts[i].keys, mine.len());
        assert_eq!(parts[i].data, mine.join(",").into_bytes());
    }
    let tagged = &parts[owners[3]].data;
    let tagged = String::from_utf8_lossy(tagged);
    assert!(tagged.contains("{user:7}:a") && tagged.contains("{user:7}:b"));

    // No keys: nothing sent, nothing returned.
    let none: [&str; 0] = [];
    assert!(c.fget("topk", b"10", &none).unwrap().is_empty());
    assert_eq!(fakes[0].received().len() + fakes[1].received().len(), 2);
}

fn rec(user: u64, article: u64, ts: u64) -> Record {
    Record { user, article, ts }
}

#[test]
fn top_k_merges_the_servers_partial_results() {
    // Each server's filter answers with its own k newest (newest first).
    let part0 = records::encode_all(&[rec(5, 1, 100), rec(2, 1, 90), rec(5, 2, 50), rec(5, 3, 40)]);
    let part1 = records::encode_all(&[rec(3, 7, 95), rec(1, 9, 90), rec(3, 8, 10)]);
    let scripted = |data: Vec<u8>| {
        Fake::start(move |req| {
            let (filter, args, _) = parse_fget(req);
            assert_eq!(args, b"4");
            value_reply(&filter, 0, &data)
        })
    };
    let fakes = [scripted(part0.clone()), scripted(part1.clone())];
    let ports = [fakes[0].port, fakes[1].port];
    let c = client(&ports, Config::default());
    let keys = keys();

    let top = c.fget_merge("topk", b"4", &keys, filter::top_k(4)).unwrap();
    // ts 100, 95, then the tie at ts 90 broken by user (1 before 2).
    let want = [rec(5, 1, 100), rec(3, 7, 95), rec(1, 9, 90), rec(2, 1, 90)];
    assert_eq!(records::iter(&top).collect::<Vec<_>>(), want);

    let all = c.fget_merge("topk", b"4", &keys, filter::concat).unwrap();
    assert_eq!(all, [part0, part1].concat());
}

#[test]
fn error_replies_carry_the_server_message() {
    // Server 0 answers by filter name; server 1 always succeeds.
    let fake0 = Fake::start(|req| {
        let (filter, _, _) = parse_fget(req);
        match filter.as_str() {
            "slow" => b"SERVER_ERROR filter timeout\r\n".to_vec(),
            "picky" => b"SERVER_ERROR filter failed: bad argument: k\r\n".to_vec(),
            "nope" => b"CLIENT_ERROR unknown filter\r\n".to_vec(),
            "old" => b"ERROR\r\n".to_vec(),
            "empty" => b"END\r\n".to_vec(),
            "other" => value_reply("select", 0, b"x"),
            f => value_reply(f, 3, b"ok"),
        }
    });
    let fake1 = echo_keys();
    let ports = [fake0.port, fake1.port];
    let cfg = Config {
        failure_limit: Some(1),
        ..Config::default()
    };
    let c = client(&ports, cfg);
    let keys = keys();

    for (filter, want) in [
        ("slow", "SERVER_ERROR filter timeout"),
        ("picky", "SERVER_ERROR filter failed: bad argument: k"),
        ("nope", "CLIENT_ERROR unknown filter"),
        ("old", "ERROR"),
    ] {
        // Server 1's part arrived, but one failed server fails the call.
        match c.fget(filter, b"", &keys) {
            Err(Error::Server { server, line }) => {
                assert_eq!(server, format!("127.0.0.1:{}", ports[0]), "{filter}");
                assert_eq!(line, want, "{filter}");
            }
            other => panic!("{filter}: {other:?}"),
        }
        // A filter's failure is not the server's: no ejection.
        assert!(!c.async_client().is_ejected(0), "{filter}");
    }
    // Well framed but not an answer to this fget: a protocol error naming the line.
    for (filter, line) in [("empty", "END"), ("other", "VALUE select ...")] {
        match c.fget(filter, b"", &keys) {
            Err(Error::Protocol { source, .. }) => {
                assert!(source.to_string().contains(line), "{filter}: {source}")
            }
            other => panic!("{filter}: {other:?}"),
        }
    }
    // The connection stayed in step: the next call works on it.
    let parts = c.fget("topk", b"", &keys).unwrap();
    assert_eq!((parts[0].flags, &parts[0].data[..]), (3, &b"ok"[..]));
    assert!(fake0.received().iter().all(|r| r.conn == 0));

    // A name the protocol cannot carry never reaches a server.
    let sent = fake0.received().len();
    assert!(matches!(
        c.fget("top k", b"", &keys),
        Err(Error::BadFilter(_))
    ));
    assert!(matches!(c.fget("", b"", &keys), Err(Error::BadFilter(_))));
    assert!(matches!(
        c.fget("topk", b"", &["bad key"]),
        Err(Error::BadKey(_))
    ));
    assert_eq!(fake0.received().len(), sent);
}

#[test]
fn keys_of_an_ejected_server_go_to_the_next_one() {
    let live = echo_keys();
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let ports = [live.port, dead];
    let cfg = Config {
        failure_limit: Some(1),
        retry_interval: Duration::from_secs(600),
        ..Config::default()
    };
    let c = client(&ports, cfg);
    let keys = keys();
    assert!(keys.iter().any(|k| owner(&c, &ports, k) == 1));

    // The dead server fails the call, and is ejected.
    let err = c.fget("topk", b"1", &keys).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(c.async_client().is_ejected(1));

    // Now every key goes to the live server, in request order, in one fget.
    let parts = c.fget("topk", b"1", &keys).unwrap();
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].server, spec(live.port));
    assert_eq!(parts[0].keys, keys.len());
    assert_eq!(parts[0].data, keys.join(",").into_bytes());
}
