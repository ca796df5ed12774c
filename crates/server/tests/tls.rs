//! `-Z`: the real binary over TLS, with a rustls client and certificates made by `openssl`
//! at test time (a CA, two server certificates, a client certificate).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use common::Server;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

/// A temporary directory of certificates, removed when dropped.
struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn new(tag: &str) -> Certs {
        let dir = std::env::temp_dir().join(format!("mnemo-tls-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .output()
                .expect("openssl");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        std::fs::write(
            dir.join("san.cnf"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        )
        .unwrap();
        // Extensions make these X.509 v3 certificates, the only version webpki accepts.
        std::fs::write(dir.join("client.cnf"), "extendedKeyUsage=clientAuth\n").unwrap();
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=mnemo test CA",
        ]);
        for (name, cn, ext) in [
            ("server", "localhost", "san.cnf"),
            ("server2", "localhost", "san.cnf"),
            ("client", "client", "client.cnf"),
        ] {
            run(&[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={cn}"),
            ]);
            let mut args = vec![
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
            ]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
            args.extend([
                "-out".into(),
                format!("{name}.crt"),
                "-extfile".into(),
                ext.into(),
            ]);
            run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        }
        Certs { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// `-Z -o ssl_chain_cert=...,ssl_key=...` plus `more` options.
    fn flags(&self, more: &str) -> Vec<String> {
        let mut o = format!(
            "ssl_chain_cert={},ssl_key={}",
            self.path("server.crt"),
            self.path("server.key")
        );
        if !more.is_empty() {
            o = format!("{o},{more}");
        }
        vec!["-Z".into(), "-o".into(), o]
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn client_config(certs: &Certs, client_cert: bool) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(certs.path("ca.crt")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let b = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = if client_cert {
        let chain = CertificateDer::pem_file_iter(certs.path("client.crt"))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        b.with_client_auth_cert(
            chain,
            PrivateKeyDer::from_pem_file(certs.path("client.key")).unwrap(),
        )
        .unwrap()
    } else {
        b.with_no_client_auth()
    };
    Arc::new(config)
}

type Tls = StreamOwned<ClientConnection, TcpStream>;

fn connect(server: &Server, config: &Arc<ClientConfig>) -> Tls {
    let conn =
        ClientConnection::new(config.clone(), ServerName::try_from("localhost").unwrap()).unwrap();
    StreamOwned::new(conn, server.connect())
}

/// Send `req`, read until the reply ends with `end`.
fn ask(s: &mut impl ReadWrite, req: &[u8], end: &[u8]) -> Vec<u8> {
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 16384];
    while !out.ends_with(end) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&buf[..n]);
    }
    out
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn stat(s: &mut impl ReadWrite, name: &str) -> Option<String> {
    let out = String::from_utf8(ask(s, b"stats\r\n", b"END\r\n")).unwrap();
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")).map(str::to_string))
}

fn handshake_errors(s: &mut impl ReadWrite) -> u64 {
    stat(s, "ssl_handshake_errors").unwrap().parse().unwrap()
}

/// The server counts a failed handshake when its worker sees the failure, which may be a
/// moment after the client gave up: wait for the count, with a deadline.
fn wait_handshake_errors(s: &mut impl ReadWrite, want: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while handshake_errors(s) != want {
        assert!(
            std::time::Instant::now() < deadline,
            "ssl_handshake_errors stayed {}",
            handshake_errors(s)
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn text_meta_and_binary_over_tls() {
    let certs = Certs::new("protos");
    let server = Server::start(
        &certs
            .flags("")
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let config = client_config(&certs, false);
    let mut s = connect(&server, &config);
    assert_eq!(
        ask(&mut s, b"set k 5 0 3\r\nabc\r\n", b"\r\n"),
        b"STORED\r\n"
    );
    assert_eq!(
        ask(&mut s, b"get k\r\n", b"END\r\n"),
        b"VALUE k 5 3\r\nabc\r\nEND\r\n"
    );
    assert_eq!(
        ask(&mut s, b"mg k v f\r\nmn\r\n", b"MN\r\n"),
        b"VA 3 f5\r\nabc\r\nMN\r\n"
    );
    // A pipelined batch and a value larger than a TLS record (and than rustls's buffer).
    let big = vec![b'x'; 300_000];
    let mut req = format!("set big 0 0 {}\r\n", big.len()).into_bytes();
    req.extend_from_slice(&big);
    req.extend_from_slice(b"\r\nget big\r\n");
    let out = ask(&mut s, &req, b"END\r\n");
    assert!(out.starts_with(b"STORED\r\nVALUE big 0 300000\r\nxxx"));
    assert_eq!(out.len(), 8 + 20 + 300_000 + 2 + 5);
    // Binary GET of k (the protocol is chosen by the first decrypted byte).
    let mut b = connect(&server, &config);
    let mut get = vec![
        0x80, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    get.push(b'k');
    b.write_all(&get).unwrap();
    let mut head = [0u8; 24];
    b.read_exact(&mut head).unwrap();
    assert_eq!((head[0], head[1], &head[6..8]), (0x81, 0x00, &[0u8, 0][..]));
    let mut body = vec![0u8; u32::from_be_bytes(head[8..12].try_into().unwrap()) as usize];
    b.read_exact(&mut body).unwrap();
    assert_eq!(&body[..4], &5u32.to_be_bytes());
    assert_eq!(&body[4..], b"abc");
}

#[test]
fn a_client_that_reads_late_gets_every_reply_and_costs_bounded_memory() {
    let certs = Certs::new("late");
    let server = Server::start(
        &certs
            .flags("")
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let mut s = connect(&server, &client_config(&certs, false));
    let value = (0..100_000u32)
        .map(|i| b'a' + (i % 26) as u8)
        .collect::<Vec<u8>>();
    let mut set = b"set big 0 0 100000\r\n".to_vec();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    assert_eq!(ask(&mut s, &set, b"\r\n"), b"STORED\r\n");
    let rss_before = server.rss_kb();
    // 20 MB of replies asked for at once; the server fills the socket, waits for it to drain
    // (WouldBlock, then a writable event) and must neither lose bytes nor buffer them all.
    s.write_all(&b"get big\r\n".repeat(200)).unwrap();
    // Measured once the server has stopped making progress (get_hits still over 10 polls,
    // seen from a second connection), not after a fixed wait.
    let mut t = connect(&server, &client_config(&certs, false));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (mut last, mut still) = (String::new(), 0);
    while still < 10 {
        assert!(
            std::time::Instant::now() < deadline,
            "get_hits never settled"
        );
        let hits = stat(&mut t, "get_hits").unwrap();
        still = if hits == last { still + 1 } else { 0 };
        last = hits;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let grown = server.rss_kb().saturating_sub(rss_before);
    assert!(
        grown < 8 * 1024,
        "the server grew {grown} KiB for a client that did not read"
    );
    let one = [b"VALUE big 0 100000\r\n".as_slice(), &value, b"\r\nEND\r\n"].concat();
    let mut got = vec![0u8; one.len() * 200];
    s.read_exact(&mut got).unwrap();
    assert!(got.chunks(one.len()).all(|c| c == one.as_slice()));
}

#[test]
fn client_certificates_when_verify_mode_requires_them() {
    let certs = Certs::new("verify");
    let flags = certs.flags(&format!(
        "ssl_verify_mode=2,ssl_ca_cert={}",
        certs.path("ca.crt")
    ));
    let server = Server::start(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    let mut with = connect(&server, &client_config(&certs, true));
    assert_eq!(
        ask(&mut with, b"version\r\n", b"\r\n"),
        b"VERSION 1.6.45\r\n"
    );
    // Server::start's readiness probe (a connect and a close) counts once; its close may be
    // seen by another worker after this connection is served, so wait for it first.
    wait_handshake_errors(&mut with, 1);
    let before = 1;
    let mut without = connect(&server, &client_config(&certs, false));
    let _ = without.write_all(b"version\r\n");
    let mut buf = [0u8; 64];
    assert!(
        !matches!(without.read(&mut buf), Ok(n) if n > 0),
        "served a client without a certificate"
    );
    wait_handshake_errors(&mut with, before + 1);
    let settings = String::from_utf8(ask(&mut with, b"stats settings\r\n", b"END\r\n")).unwrap();
    assert!(
        settings.contains("STAT ssl_verify_mode 3\r\n"),
        "{settings}"
    );
    assert!(settings.contains(&format!("STAT ssl_ca_cert {}\r\n", certs.path("ca.crt"))));
}

fn peer_cert(s: &Tls) -> Vec<u8> {
    s.conn.peer_certificates().unwrap()[0].to_vec()
}

#[test]
fn refresh_certs_gives_new_connections_the_new_certificate() {
    let certs = Certs::new("refresh");
    // The server reads its certificate from copies the test replaces.
    let (crt, key) = (certs.path("live.crt"), certs.path("live.key"));
    std::fs::copy(certs.path("server.crt"), &crt).unwrap();
    std::fs::copy(certs.path("server.key"), &key).unwrap();
    let o = format!("ssl_chain_cert={crt},ssl_key={key}");
    let server = Server::start(&["-Z", "-o", &o]);
    let config = client_config(&certs, false);
    let mut old = connect(&server, &config);
    assert_eq!(
        ask(&mut old, b"version\r\n", b"\r\n"),
        b"VERSION 1.6.45\r\n"
    );
    let first = peer_cert(&old);
    std::fs::copy(certs.path("server2.crt"), &crt).unwrap();
    std::fs::copy(certs.path("server2.key"), &key).unwrap();
    assert_eq!(ask(&mut old, b"refresh_certs\r\n", b"\r\n"), b"OK\r\n");
    // 0, or 1 where the server's clock ticked between the refresh and the stats.
    let since = stat(&mut old, "time_since_server_cert_refresh").unwrap();
    assert!(since == "0" || since == "1", "{since}");
    let mut new = connect(&server, &config);
    assert_eq!(
        ask(&mut new, b"version\r\n", b"\r\n"),
        b"VERSION 1.6.45\r\n"
    );
    assert_ne!(peer_cert(&new), first);
    assert_eq!(
        peer_cert(&new),
        CertificateDer::from_pem_file(&crt).unwrap().to_vec()
    );
    // The existing connection keeps going on the old one.
    assert_eq!(
        ask(&mut old, b"version\r\n", b"\r\n"),
        b"VERSION 1.6.45\r\n"
    );
    // A key that does not match: memcached's error, and the previous certificate stays.
    std::fs::copy(certs.path("client.key"), &key).unwrap();
    let err = ask(&mut old, b"refresh_certs noreply\r\n", b"\r\n");
    assert_eq!(
        err,
        format!("Error loading the key: {key} : key values mismatch\r\n").into_bytes()
    );
    std::fs::remove_file(&crt).unwrap();
    let err = String::from_utf8(ask(&mut old, b"refresh_certs\r\n", b"\r\n")).unwrap();
    assert_eq!(
        err,
        format!("Error loading the certificate chain: {crt} : No such file or directory\r\n")
    );
    let mut again = connect(&server, &config);
    assert_eq!(
        ask(&mut again, b"version\r\n", b"\r\n"),
        b"VERSION 1.6.45\r\n"
    );
    assert_eq!(peer_cert(&again), peer_cert(&new));
}

#[test]
fn a_plain_client_is_a_handshake_error() {
    let certs = Certs::new("plain");
    let server = Server::start(
        &certs
            .flags("ssl_session_cache")
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let mut s = connect(&server, &client_config(&certs, false));
    // Server::start's readiness probe counts once (a connect and a close, as memcached); its
    // close may be seen by another worker after this connection is served, so wait for it.
    wait_handshake_errors(&mut s, 1);
    let before = 1;
    let mut plain = server.connect();
    plain.write_all(b"version\r\n").unwrap();
    let mut buf = [0u8; 256];
    // rustls answers garbage with an alert (or a close), never with a reply.
    let n = plain.read(&mut buf).unwrap_or(0);
    assert!(!buf[..n].starts_with(b"VERSION"));
    drop(plain);
    wait_handshake_errors(&mut s, before + 1);
    assert_eq!(stat(&mut s, "ssl_new_sessions").as_deref(), Some("2"));
}

#[test]
fn a_stalled_handshake_does_not_hold_up_the_worker() {
    let certs = Certs::new("stall");
    let mut flags = certs.flags("");
    flags.extend(["-t".into(), "1".into()]);
    let server = Server::start(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    // The start of a ClientHello record, then nothing: the one worker must keep serving.
    let mut stalled = server.connect();
    stalled.write_all(&[0x16, 0x03, 0x01, 0x02]).unwrap();
    let mut silent = server.connect();
    let config = client_config(&certs, false);
    for _ in 0..3 {
        let mut s = connect(&server, &config);
        assert_eq!(ask(&mut s, b"version\r\n", b"\r\n"), b"VERSION 1.6.45\r\n");
    }
    stalled.write_all(&[0]).unwrap();
    let _ = silent.write_all(b"");
}

#[test]
fn without_z_refresh_certs_is_refused() {
    let server = Server::start(&[]);
    let mut s = server.connect();
    // memcached writes this line even for noreply.
    let out = ask(
        &mut s,
        b"refresh_certs\r\nrefresh_certs noreply\r\n",
        b"enabled\r\nError TLS not enabled\r\n",
    );
    assert_eq!(out, b"Error TLS not enabled\r\nError TLS not enabled\r\n");
    assert_eq!(stat(&mut s, "ssl_handshake_errors"), None);
    let settings = String::from_utf8(ask(&mut s, b"stats settings\r\n", b"END\r\n")).unwrap();
    assert!(settings.contains("STAT ssl_enabled no\r\nSTAT ssl_chain_cert (null)\r\n"));
}

#[test]
fn a_bad_certificate_stops_the_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_mnemod"))
        .args([
            "-Z",
            "-o",
            "ssl_chain_cert=/nonexistent/x.crt,ssl_key=/nonexistent/x.key",
            "-p",
            "1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "Error loading the certificate chain: /nonexistent/x.crt : No such file or directory"
        ),
        "{err}"
    );
}
