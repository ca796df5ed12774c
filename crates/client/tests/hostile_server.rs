//! A server that lies: declared value lengths are the server's word, so the client's memory
//! must follow the bytes that actually arrive, and a length past memcached's largest item is
//! refused outright. The same holds for an `fget` result.

use mnemo_client::{blocking, Config, Error, ServerSpec};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

fn vm_peak_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmPeak:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A one-connection server that answers any request with `reply` and then keeps the
/// connection open without sending more.
fn liar(reply: &'static [u8]) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf);
        s.write_all(reply).unwrap();
        // Hold the connection until the client gives up.
        let _ = s.read(&mut buf);
    });
    port
}

fn client(port: u16) -> blocking::Client {
    let cfg = Config {
        io_timeout: Duration::from_millis(300),
        failure_limit: None,
        ..Config::default()
    };
    blocking::Client::new(vec![ServerSpec::new("127.0.0.1", port)], cfg).unwrap()
}

#[test]
fn a_declared_gigabyte_costs_only_what_arrives() {
    let before = vm_peak_kb();
    let c = client(liar(b"VALUE k 0 1073741000\r\nabc"));
    let err = c.get("k").unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    let grew = vm_peak_kb().saturating_sub(before);
    // Peak address space (the buffer is gone once the connection is dropped). A buffer
    // reserved for the declared 1 GB shows as ~1,050,000 kB. Without one, the growth is
    // threads and their glibc malloc arenas (64 MiB of address space each), and the other test
    // of this binary runs its own runtime at the same time: a CI run saw 200,868 kB.
    assert!(
        grew < 500_000,
        "address space grew by {grew} kB for a 3-byte value"
    );
}

#[test]
fn a_length_past_the_largest_item_is_a_protocol_error() {
    let c = client(liar(b"VALUE k 0 18446744073709551615\r\n"));
    let err = c.get("k").unwrap_err();
    assert!(matches!(err, Error::Protocol { .. }), "{err}");
}

#[test]
fn a_declared_gigabyte_filter_result_costs_only_what_arrives() {
    let before = vm_peak_kb();
    let c = client(liar(b"VALUE topk 0 1073741000\r\nabc"));
    let err = c.fget("topk", b"10", &["k"]).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    let grew = vm_peak_kb().saturating_sub(before);
    // As for get above (this binary's other tests run alongside).
    assert!(
        grew < 500_000,
        "address space grew by {grew} kB for a 3-byte filter result"
    );
}

#[test]
fn a_filter_result_past_the_largest_item_is_a_protocol_error() {
    let c = client(liar(b"VALUE topk 0 18446744073709551615\r\n"));
    let err = c.fget("topk", b"10", &["k"]).unwrap_err();
    assert!(matches!(err, Error::Protocol { .. }), "{err}");
}
