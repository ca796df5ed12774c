//! TLS for `-Z` (memcached's `--enable-ssl`), through rustls with the ring provider.
//!
//! ```text
//!   -o ssl_* ──> SslOptions (config/ext.rs) ──load/refresh──> Tls { ServerConfig in an Arc }
//!   accept thread: Tls::accept(tcp) ──> TlsStream { tcp, ServerConnection } (a conn::Stream)
//!   worker: reads drive the handshake; replies are encrypted into rustls and leave in one
//!           writev of its records (send_pending)
//!   refresh_certs, SIGHUP (memcached 1.6.40): new ServerConfigs are built and swapped in;
//!           connections keep the one they were accepted with, new ones get the new certificate
//!   -l prefixes (memcached 1.6.30): each listener picks its client-certificate rule
//!     (none)  ssl_verify_mode's         notls:  plain text
//!     btls:   never asks for one        mtls:   requires one, checked against ssl_ca_cert
//! ```
//!
//! The handshake is driven by socket readiness like every other read: nothing here blocks.
//! What cannot be honoured with rustls is mapped to the nearest safe setting (docs/compatibility.md "TLS"):
//! `ssl_min_version` 0 or 1 (TLS 1.0/1.1) serves TLS 1.2 and up; `ssl_ciphers` selects among
//! rustls's TLS 1.2 suites only (TLS 1.3 suites are not affected, as with OpenSSL).

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::{
    NoServerSessionStorage, ServerSessionMemoryCache, StoresServerSessions, WebPkiClientVerifier,
};
use rustls::{CipherSuite, RootCertStore, ServerConfig, ServerConnection, SupportedCipherSuite};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::ext::SslOptions;

mod no_ca;

/// OpenSSL's default server session cache size (SSL_SESSION_CACHE_MAX_SIZE_DEFAULT), which
/// memcached's `ssl_session_cache` turns on.
const SESSION_CACHE_SIZE: usize = 20 * 1024;

/// Why a TLS configuration could not be (re)loaded. The messages are memcached's (its
/// `refresh_certs` reply and start-up error), with rustls's reason where OpenSSL's would be.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("Error loading the certificate chain: {path} : {reason}")]
    Chain { path: String, reason: String },
    #[error("Error loading the key: {path} : {reason}")]
    Key { path: String, reason: String },
    #[error("Error loading the CA certificate: {path} : {reason}")]
    Ca { path: String, reason: String },
    #[error("Error setting the provided cipher(s): {0}")]
    Ciphers(String),
    #[error(
        "ssl_verify_mode {0} needs ssl_ca_cert (the CAs client certificates are checked against)"
    )]
    NoCa(u8),
    #[error("Error creating the TLS context: {0}")]
    Config(String),
}

/// What a TCP listener's connections speak (memcached's `-l` prefixes with -Z).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenTls {
    /// `notls:`
    Plain,
    /// No prefix: ssl_verify_mode's rule.
    Default,
    /// `btls:`: TLS, no client certificate asked for.
    NoPeer,
    /// `mtls:`: TLS, a client certificate required.
    Peer,
}

impl ListenTls {
    /// A `-l` entry's prefix and the address after it (None: no prefix). As memcached, a
    /// prefix is its name and one more character (the `:`).
    pub fn split(host: &str) -> (Option<ListenTls>, &str) {
        for (name, kind) in [
            ("notls", ListenTls::Plain),
            ("btls", ListenTls::NoPeer),
            ("mtls", ListenTls::Peer),
        ] {
            if let Some(rest) = host.strip_prefix(name) {
                return (Some(kind), rest.get(1..).unwrap_or(""));
            }
        }
        (None, host)
    }

    /// memcached's start-up error for a prefix without -Z (its mtls line says 'otls').
    pub fn needs_ssl(self) -> &'static str {
        match self {
            ListenTls::Plain => "'notls' option is valid only when SSL is enabled",
            ListenTls::NoPeer => "'btls' option is valid only when SSL is enabled",
            _ => "'otls' option is valid only when SSL is enabled",
        }
    }
}

/// The configurations new connections get, one per client-certificate rule in use.
struct Configs {
    default: Arc<ServerConfig>,
    no_peer: Option<Arc<ServerConfig>>,
    peer: Option<Arc<ServerConfig>>,
}

/// The process's TLS state: the settings, the configuration new connections get, and the
/// counters `stats` prints.
pub struct Tls {
    opts: SslOptions,
    /// Swapped whole by `refresh_certs`; a read lock and an Arc clone per accepted connection.
    current: parking_lot::RwLock<Configs>,
    /// Which of `btls:` / `mtls:` some listener uses (their configurations are built).
    kinds: (bool, bool),
    /// Kept across refreshes (memcached keeps one SSL_CTX, so its session cache survives).
    sessions: Option<Arc<CountingSessions>>,
    /// The clock's seconds at the last successful load. memcached loads its certificates
    /// before its clock starts, so this starts at 0 (stats then shows uptime + 60).
    last_refresh: AtomicU32,
    handshake_errors: AtomicU64,
    /// memcached's ssl_proto_errors (1.6.30): a TLS error after the handshake (a bad record,
    /// an unexpected message), which ends the connection.
    proto_errors: AtomicU64,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Load the certificates and build the first configurations (`-Z` at start-up), for
    /// `btls:` and `mtls:` listeners too when `kinds` says some exist.
    pub fn load(opts: &SslOptions, kinds: (bool, bool)) -> Result<Arc<Tls>, TlsError> {
        let sessions = opts.session_cache.then(|| {
            Arc::new(CountingSessions {
                inner: ServerSessionMemoryCache::new(SESSION_CACHE_SIZE),
                new: AtomicU64::new(0),
            })
        });
        let configs = build_all(opts, sessions.as_ref(), kinds)?;
        Ok(Arc::new(Tls {
            opts: opts.clone(),
            current: parking_lot::RwLock::new(configs),
            kinds,
            sessions,
            last_refresh: AtomicU32::new(0),
            handshake_errors: AtomicU64::new(0),
            proto_errors: AtomicU64::new(0),
        }))
    }

    /// `refresh_certs`: read the certificate, key and CA files again. On failure the old
    /// configuration stays in use.
    pub fn refresh(&self, now: mnemo_store::Time) -> Result<(), TlsError> {
        let configs = build_all(&self.opts, self.sessions.as_ref(), self.kinds)?;
        *self.current.write() = configs;
        self.last_refresh.store(now, Relaxed);
        Ok(())
    }

    /// Wrap a freshly accepted socket; the handshake happens on the worker's reads.
    pub fn accept(
        self: &Arc<Self>,
        tcp: mio::net::TcpStream,
        kind: ListenTls,
    ) -> Result<TlsStream, rustls::Error> {
        let config = {
            let c = self.current.read();
            let special = match kind {
                ListenTls::NoPeer => c.no_peer.as_ref(),
                ListenTls::Peer => c.peer.as_ref(),
                _ => None,
            };
            special.unwrap_or(&c.default).clone()
        };
        let conn = ServerConnection::new(config)?;
        Ok(TlsStream {
            tcp,
            conn,
            tls: self.clone(),
            failed: false,
            short: false,
        })
    }

    pub fn options(&self) -> &SslOptions {
        &self.opts
    }

    /// `stats`: ssl_new_sessions (None without a session cache, where memcached omits it).
    pub fn new_sessions(&self) -> Option<u64> {
        self.sessions.as_ref().map(|s| s.new.load(Relaxed))
    }

    pub fn handshake_errors(&self) -> u64 {
        self.handshake_errors.load(Relaxed)
    }

    pub fn proto_errors(&self) -> u64 {
        self.proto_errors.load(Relaxed)
    }

    /// `stats`: time_since_server_cert_refresh.
    pub fn since_refresh(&self, now: mnemo_store::Time) -> u32 {
        now.wrapping_sub(self.last_refresh.load(Relaxed))
    }

    /// `stats reset` (memcached zeroes these with its other global counters).
    pub fn reset_stats(&self) {
        self.handshake_errors.store(0, Relaxed);
        self.proto_errors.store(0, Relaxed);
        if let Some(s) = &self.sessions {
            s.new.store(0, Relaxed);
        }
    }
}

/// The session cache, counting what it stores (memcached's ssl_new_sessions counts the
/// sessions OpenSSL creates; a TLS 1.3 handshake makes two, one per ticket, here as there).
#[derive(Debug)]
struct CountingSessions {
    inner: Arc<ServerSessionMemoryCache>,
    new: AtomicU64,
}

impl StoresServerSessions for CountingSessions {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let stored = self.inner.put(key, value);
        if stored {
            self.new.fetch_add(1, Relaxed);
        }
        stored
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.inner.get(key)
    }
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.inner.take(key)
    }
    fn can_cache(&self) -> bool {
        self.inner.can_cache()
    }
}

fn build_all(
    opts: &SslOptions,
    sessions: Option<&Arc<CountingSessions>>,
    (no_peer, peer): (bool, bool),
) -> Result<Configs, TlsError> {
    // OpenSSL's SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, memcached's mode 2; with
    // no CA file, memcached starts and no client certificate verifies (no_ca.rs).
    let mtls = || build(opts, sessions, MTLS);
    Ok(Configs {
        default: build(opts, sessions, opts.verify_mode)?,
        no_peer: if no_peer {
            Some(build(opts, sessions, 0)?)
        } else {
            None
        },
        peer: if peer { Some(mtls()?) } else { None },
    })
}

/// An `mtls:` listener's rule: memcached's mode 2, and without `ssl_ca_cert` a certificate
/// required that none can satisfy (no_ca.rs) rather than a start-up error.
const MTLS: u8 = u8::MAX;

/// One configuration, with `verify_mode` (memcached's 0-3, or [`MTLS`]) as the
/// client-certificate rule.
fn build(
    opts: &SslOptions,
    sessions: Option<&Arc<CountingSessions>>,
    verify_mode: u8,
) -> Result<Arc<ServerConfig>, TlsError> {
    let chain_path = opts.chain_cert.as_deref().unwrap_or("(null)");
    let chain_err = |reason: String| TlsError::Chain {
        path: chain_path.to_string(),
        reason,
    };
    let chain = match &opts.chain_cert {
        None => return Err(chain_err("no file given (-o ssl_chain_cert=FILE)".into())),
        Some(path) => load_certs(path).map_err(chain_err)?,
    };
    let key_path = opts.key.as_deref().unwrap_or("(null)");
    let key_err = |reason: String| TlsError::Key {
        path: key_path.to_string(),
        reason,
    };
    let key = match &opts.key {
        None => return Err(key_err("no file given (-o ssl_key=FILE)".into())),
        Some(path) => load_key(path, opts.keyformat).map_err(key_err)?,
    };
    let provider = Arc::new(provider(opts)?);
    let versions: &[&rustls::SupportedProtocolVersion] = if opts.min_version >= 3 {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match verify_mode {
        0 => builder.with_no_client_auth(),
        MTLS if opts.ca_cert.is_none() => {
            builder.with_client_cert_verifier(Arc::new(no_ca::NoCa::new(&provider)))
        }
        MTLS => return build(opts, sessions, 2),
        mode => {
            let path = opts.ca_cert.as_deref().ok_or(TlsError::NoCa(mode))?;
            let ca_err = |reason: String| TlsError::Ca {
                path: path.to_string(),
                reason,
            };
            let mut roots = RootCertStore::empty();
            for cert in load_certs(path).map_err(ca_err)? {
                roots.add(cert).map_err(|e| ca_err(e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            // 1 (SSL_VERIFY_PEER alone): ask for a certificate, check it if one comes, accept
            // a client without one. 2 and 3 refuse such a client (3's "once" concerns
            // renegotiation, which neither memcached nor rustls allows).
            let verifier = if mode == 1 {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| ca_err(e.to_string()))?)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => key_err("key values mismatch".into()),
        // The leaf is parsed when the key is checked against it (webpki: X.509 v3 only).
        rustls::Error::InvalidCertificate(e) => chain_err(format!("{e:?}")),
        e => key_err(e.to_string()),
    })?;
    match sessions {
        Some(s) => config.session_storage = s.clone(),
        None => {
            // memcached without ssl_session_cache: no server-side sessions to resume.
            config.session_storage = Arc::new(NoServerSessionStorage {});
            config.send_tls13_tickets = 0;
        }
    }
    Ok(Arc::new(config))
}

fn load_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_reason(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_reason(&e))?;
    if certs.is_empty() {
        return Err("no PEM certificate found".into());
    }
    Ok(certs)
}

/// `ssl_keyformat`: 1 PEM, 2 DER (OpenSSL's SSL_FILETYPE_PEM / SSL_FILETYPE_ASN1).
fn load_key(path: &str, format: i32) -> Result<PrivateKeyDer<'static>, String> {
    match format {
        1 => PrivateKeyDer::from_pem_file(path).map_err(|e| pem_reason(&e)),
        2 => {
            let der = std::fs::read(path).map_err(|e| io_reason(&e))?;
            PrivateKeyDer::try_from(der).map_err(str::to_string)
        }
        _ => Err("bad ssl filetype".into()),
    }
}

fn pem_reason(e: &rustls_pki_types::pem::Error) -> String {
    match e {
        rustls_pki_types::pem::Error::Io(e) => io_reason(e),
        rustls_pki_types::pem::Error::NoItemsFound => "no PEM item found".into(),
        e => e.to_string(),
    }
}

/// OpenSSL's "system library::No such file or directory" carries the strerror text alone.
fn io_reason(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// The ring provider, its TLS 1.2 suites cut down to what `ssl_ciphers` selects.
fn provider(opts: &SslOptions) -> Result<CryptoProvider, TlsError> {
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(list) = &opts.ciphers {
        let tls12: Vec<SupportedCipherSuite> = provider
            .cipher_suites
            .iter()
            .copied()
            .filter(|s| s.tls13().is_none())
            .collect();
        let chosen = select_ciphers(list, &tls12);
        // OpenSSL refuses a list that selects no (TLS 1.2) cipher at all.
        if chosen.is_empty() {
            return Err(TlsError::Ciphers(list.clone()));
        }
        provider
            .cipher_suites
            .retain(|s| s.tls13().is_some() || chosen.iter().any(|c| c.suite() == s.suite()));
    }
    Ok(provider)
}

/// OpenSSL's name for a rustls TLS 1.2 suite.
fn openssl_name(suite: CipherSuite) -> &'static str {
    match suite {
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 => "ECDHE-ECDSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 => "ECDHE-ECDSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 => {
            "ECDHE-ECDSA-CHACHA20-POLY1305"
        }
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => "ECDHE-RSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => "ECDHE-RSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => "ECDHE-RSA-CHACHA20-POLY1305",
        _ => "",
    }
}

/// Whether an OpenSSL cipher-list word selects the suite named `name`: an exact name, or
/// one of the keywords that can describe rustls's suites (all are ECDHE, AEAD and "HIGH").
fn word_matches(word: &str, name: &str) -> bool {
    match word {
        "ALL" | "DEFAULT" | "HIGH" | "SECURE" | "TLSv1.2" | "ECDHE" | "EECDH" | "kECDHE"
        | "kEECDH" | "AEAD" => true,
        "AESGCM" => name.contains("-GCM-"),
        "AES" => name.contains("-AES"),
        "AES128" => name.contains("-AES128-"),
        "AES256" => name.contains("-AES256-"),
        "CHACHA20" => name.contains("CHACHA20"),
        "ECDSA" | "aECDSA" => name.contains("-ECDSA-"),
        "RSA" | "aRSA" => name.contains("-RSA-"),
        "SHA256" => name.ends_with("SHA256"),
        "SHA384" => name.ends_with("SHA384"),
        _ => word == name,
    }
}

/// The suites an OpenSSL cipher list selects, read left to right: `A+B` words must all
/// match, `!`/`-` remove, `+` (reordering) and `@` directives change nothing here.
fn select_ciphers(list: &str, suites: &[SupportedCipherSuite]) -> Vec<SupportedCipherSuite> {
    let mut chosen: Vec<SupportedCipherSuite> = Vec::new();
    for item in list.split([':', ',', ' ']).filter(|s| !s.is_empty()) {
        let (remove, body) = match item.as_bytes()[0] {
            b'!' | b'-' => (true, &item[1..]),
            b'+' | b'@' => continue,
            _ => (false, item),
        };
        let hits = |s: &SupportedCipherSuite| {
            let name = openssl_name(s.suite());
            !name.is_empty() && body.split('+').all(|w| word_matches(w, name))
        };
        if remove {
            chosen.retain(|s| !hits(s));
        } else {
            for s in suites.iter().filter(|s| hits(s)) {
                if !chosen.iter().any(|c| c.suite() == s.suite()) {
                    chosen.push(*s);
                }
            }
        }
    }
    chosen
}

/// A TLS connection: its socket and rustls's state. Boxed inside `conn::Stream` so the
/// plain-TCP variant stays small.
pub struct TlsStream {
    pub tcp: mio::net::TcpStream,
    conn: ServerConnection,
    tls: Arc<Tls>,
    /// Its failed handshake was counted (once per connection).
    failed: bool,
    /// The last socket read returned less than rustls asked for: the socket was empty then.
    short: bool,
}

/// The socket as rustls reads it, noting whether a read came back short.
struct NoteShort<'a> {
    tcp: &'a mut mio::net::TcpStream,
    short: &'a mut bool,
}

impl Read for NoteShort<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.tcp.read(buf)?;
        *self.short = n < buf.len();
        Ok(n)
    }
}

impl TlsStream {
    /// A connection that ends before its handshake completed is one of memcached's
    /// ssl_handshake_errors (a plain-text client or a port probe included).
    fn handshake_failed(&mut self) {
        if self.conn.is_handshaking() && !self.failed {
            self.failed = true;
            self.tls.handshake_errors.fetch_add(1, Relaxed);
        }
    }

    /// Whether a short plaintext read also means the socket is empty (conn.rs then skips the
    /// read that would return WouldBlock, as for plain sockets): rustls has decrypted every
    /// whole record it holds by then, so only the socket read matters.
    pub fn socket_drained(&self) -> bool {
        self.short
    }

    /// Write the TLS records rustls holds, all of them in one writev when the socket takes
    /// them. Ok(true): nothing is left; Ok(false): the socket is full.
    pub fn send_pending(&mut self) -> io::Result<bool> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.tcp) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

impl Drop for TlsStream {
    /// A connection closing after its handshake tells the peer so (close_notify, as
    /// memcached's SSL_shutdown), best effort: the socket is non-blocking and closes next.
    fn drop(&mut self) {
        if !self.conn.is_handshaking() {
            self.conn.send_close_notify();
            let _ = self.conn.write_tls(&mut self.tcp);
        }
    }
}

impl Read for TlsStream {
    /// Plaintext, reading and decrypting records until some is there or the socket is empty
    /// (WouldBlock). Handshake messages are answered on the way.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut eof = false;
        loop {
            match self.conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // Closed without close_notify: to the connection, an ordinary end.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    self.handshake_failed();
                    return Ok(0);
                }
                Err(e) => return Err(e),
            }
            if eof {
                self.handshake_failed();
                return Ok(0);
            }
            // The peer may be waiting for our handshake messages before it sends more.
            if let Err(e) = self.send_pending() {
                self.handshake_failed();
                return Err(e);
            }
            match self.conn.read_tls(&mut NoteShort {
                tcp: &mut self.tcp,
                short: &mut self.short,
            }) {
                Ok(0) => eof = true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(e),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.handshake_failed();
                    return Err(e);
                }
            }
            if let Err(e) = self.conn.process_new_packets() {
                // rustls queued an alert for the peer: a best-effort send before closing.
                let _ = self.conn.write_tls(&mut self.tcp);
                if !self.conn.is_handshaking() {
                    self.tls.proto_errors.fetch_add(1, Relaxed);
                }
                self.handshake_failed();
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[io::IoSlice::new(buf)])
    }

    /// Encrypt what rustls takes (up to its 64 KiB buffer limit) and send the records. While
    /// older records are unsent nothing new is taken: a client that does not read holds at
    /// most that much here, on top of the connection's own bounded output buffer.
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        if !self.send_pending()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self.conn.writer().write_vectored(bufs)?;
        self.send_pending()?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &str) -> Vec<&'static str> {
        let all: Vec<_> = rustls::crypto::ring::default_provider()
            .cipher_suites
            .into_iter()
            .filter(|s| s.tls13().is_none())
            .collect();
        select_ciphers(list, &all)
            .iter()
            .map(|s| openssl_name(s.suite()))
            .collect()
    }

    #[test]
    fn openssl_cipher_lists() {
        assert_eq!(names("HIGH:!aNULL").len(), 6);
        assert_eq!(
            names("ECDHE-RSA-AES128-GCM-SHA256"),
            vec!["ECDHE-RSA-AES128-GCM-SHA256"]
        );
        assert_eq!(names("ECDHE+AESGCM:!ECDSA").len(), 2);
        assert!(names("BOGUS").is_empty());
        assert!(names("AES128-SHA").is_empty());
    }

    #[test]
    fn missing_files_are_memcacheds_errors() {
        let opts = SslOptions {
            chain_cert: Some("/nonexistent/c.pem".into()),
            key: Some("/x".into()),
            ..Default::default()
        };
        let e = Tls::load(&opts, (false, false)).unwrap_err().to_string();
        assert_eq!(
            e,
            "Error loading the certificate chain: /nonexistent/c.pem : No such file or directory"
        );
    }
}
