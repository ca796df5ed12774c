//! mnemo-tlsbench: closed-loop get/set over TLS, one blocking connection per thread, against
//! any memcached-protocol server (mnemod -Z, memcached -Z). The same client drives both, so
//! the ratio between them is the servers' (bench/tls.sh runs them side by side).
//!
//! ```text
//!   thread i: TLS handshake (CA from --ca), then until --duration:
//!             pick key k (uniform over --keys), set (1 in ratio+1) or get, wait for the reply
//!             -> latency into the thread's histogram
//!   main:     prefill every key once, start the threads, merge, print key=value results
//! ```
//! Output (one line): ops=... secs=... ops_per_sec=... p50_us=... p99_us=... errors=...

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

#[derive(Parser)]
struct Args {
    /// host:port of a TLS server
    #[arg(long)]
    server: String,
    /// PEM file of the CA that signed the server's certificate
    #[arg(long)]
    ca: std::path::PathBuf,
    /// name the certificate is for
    #[arg(long, default_value = "localhost")]
    name: String,
    #[arg(long, default_value_t = 8)]
    conns: usize,
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    #[arg(long, default_value_t = 32)]
    value_size: usize,
    /// gets per set
    #[arg(long, default_value_t = 10)]
    ratio: u64,
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn connect(a: &Args, cfg: &Arc<rustls::ClientConfig>) -> BufReader<Tls> {
    let tcp = TcpStream::connect(&a.server).expect("connect");
    tcp.set_nodelay(true).unwrap();
    let name = ServerName::try_from(a.name.clone()).expect("server name");
    let conn = rustls::ClientConnection::new(cfg.clone(), name).expect("tls client");
    BufReader::with_capacity(64 * 1024, rustls::StreamOwned::new(conn, tcp))
}

/// One request and its whole reply; false on an unexpected reply.
fn request(
    s: &mut BufReader<Tls>,
    req: &[u8],
    get: bool,
    line: &mut Vec<u8>,
    value: &mut Vec<u8>,
) -> bool {
    s.get_mut().write_all(req).expect("write");
    line.clear();
    s.read_until(b'\n', line).expect("read");
    if !get {
        return line == b"STORED\r\n";
    }
    if line.starts_with(b"VALUE ") {
        let len: usize = std::str::from_utf8(&line[..line.len() - 2])
            .unwrap()
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        value.resize(len + 2, 0);
        s.read_exact(value).expect("read value");
        line.clear();
        s.read_until(b'\n', line).expect("read end");
    }
    line == b"END\r\n"
}

fn main() {
    let a = Args::parse();
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&a.ca).expect("read --ca") {
        roots.add(c.expect("CA certificate")).expect("add CA");
    }
    let cfg = Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth(),
    );
    let value = vec![b'v'; a.value_size];
    let set = |k: u64| {
        let mut r = format!("set key:{k:010} 0 0 {}\r\n", value.len()).into_bytes();
        r.extend_from_slice(&value);
        r.extend_from_slice(b"\r\n");
        r
    };
    {
        let mut s = connect(&a, &cfg);
        let (mut line, mut v) = (Vec::new(), Vec::new());
        for k in 0..a.keys {
            assert!(
                request(&mut s, &set(k), false, &mut line, &mut v),
                "prefill: {}",
                String::from_utf8_lossy(&line)
            );
        }
    }
    let deadline = Instant::now() + Duration::from_secs_f64(a.duration);
    let start = Instant::now();
    let results: Vec<(Histogram<u64>, u64)> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..a.conns)
            .map(|t| {
                let (a, cfg, set) = (&a, &cfg, &set);
                sc.spawn(move || {
                    let mut s = connect(a, cfg);
                    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
                    let (mut line, mut v, mut errors) = (Vec::new(), Vec::new(), 0u64);
                    // xorshift: a key stream per thread, no shared state.
                    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (t as u64 + 1);
                    let mut n = 0u64;
                    while Instant::now() < deadline {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let k = x % a.keys;
                        let is_set = n.is_multiple_of(a.ratio + 1);
                        let req = if is_set {
                            set(k)
                        } else {
                            format!("get key:{k:010}\r\n").into_bytes()
                        };
                        let t0 = Instant::now();
                        if !request(&mut s, &req, !is_set, &mut line, &mut v) {
                            errors += 1;
                        }
                        h.record(t0.elapsed().as_micros().max(1) as u64).unwrap();
                        n += 1;
                    }
                    (h, errors)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let mut errors = 0;
    for (h, e) in &results {
        all.add(h).unwrap();
        errors += e;
    }
    println!(
        "ops={} secs={secs:.2} ops_per_sec={:.0} p50_us={} p99_us={} errors={errors}",
        all.len(),
        all.len() as f64 / secs,
        all.value_at_quantile(0.5),
        all.value_at_quantile(0.99)
    );
}
