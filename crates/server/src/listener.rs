//! Listening sockets and the accept loop: new connections are checked against -c, set to
//! TCP_NODELAY, wrapped in TLS with -Z (TCP only, as memcached: a UNIX socket stays plain)
//! and handed to the workers round robin.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};

use crate::conn::Stream;
use crate::{Config, Shared};

/// memcached's reply to a connection beyond -c, sent just before closing it.
const TOO_MANY: &[u8] = b"ERROR Too many open connections\r\n";

/// While accepting is paused, how often the accept loop looks again (memcached's 10 ms).
const PAUSE_RETRY: Duration = Duration::from_millis(10);

/// memcached's accepting_conns / listen_disabled_num / time_in_listen_disabled_us: accepting
/// pauses when the process is out of descriptors, or (with `-o no_maxconns_fast`) when -c
/// connections are open, and resumes once a retry finds room.
pub struct ListenStats {
    pub accepting: AtomicBool,
    pub disabled_num: AtomicU64,
    pub disabled_us: AtomicU64,
}

impl Default for ListenStats {
    fn default() -> Self {
        ListenStats {
            accepting: AtomicBool::new(true),
            disabled_num: AtomicU64::new(0),
            disabled_us: AtomicU64::new(0),
        }
    }
}

impl ListenStats {
    /// `stats reset` (accepting is a state, not a counter).
    pub fn reset(&self) {
        self.disabled_num.store(0, Relaxed);
        self.disabled_us.store(0, Relaxed);
    }
}

pub enum Listener {
    /// With what its connections speak (-Z, and the `-l` prefixes: tls.rs `ListenTls`).
    Tcp(mio::net::TcpListener, crate::tls::ListenTls),
    Unix(mio::net::UnixListener),
}

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("failed to listen on {addr}: {source}")]
    Tcp {
        addr: String,
        source: std::io::Error,
    },
    #[error("failed to listen on UDP {addr}: {source}")]
    Udp {
        addr: String,
        source: std::io::Error,
    },
    #[error("failed to listen on UNIX socket \"{path}\": {source}")]
    Unix {
        path: String,
        source: std::io::Error,
    },
}

/// Open every socket the configuration asks for (-s replaces TCP, as in memcached).
pub fn bind(config: &Config) -> Result<Vec<Listener>, BindError> {
    if let Some(path) = &config.unix_socket {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let err = |source| BindError::Unix {
            path: path.clone(),
            source,
        };
        // A socket left behind by an earlier run would make bind fail.
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if meta.file_type().is_socket() {
                let _ = std::fs::remove_file(path);
            }
        }
        let l = std::os::unix::net::UnixListener::bind(path).map_err(err)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(config.unix_mask))
            .map_err(err)?;
        relisten(l.as_raw_fd(), config.backlog);
        l.set_nonblocking(true).map_err(err)?;
        return Ok(vec![Listener::Unix(mio::net::UnixListener::from_std(l))]);
    }
    let mut out = Vec::new();
    let Some(port) = config.port else {
        return Ok(out);
    };
    for host in &config.listen {
        // memcached's `-l notls:ADDR`, `btls:`, `mtls:` (config.rs refuses them without -Z).
        let (prefix, host) = crate::tls::ListenTls::split(host);
        let tls = match (prefix, &config.tls) {
            (_, None) => crate::tls::ListenTls::Plain,
            (Some(kind), Some(_)) => kind,
            (None, Some(_)) => crate::tls::ListenTls::Default,
        };
        let addr = socket_addr(host, port);
        let err = |source| BindError::Tcp {
            addr: addr.clone(),
            source,
        };
        let l = std::net::TcpListener::bind(addr.as_str()).map_err(err)?;
        relisten(l.as_raw_fd(), config.backlog);
        l.set_nonblocking(true).map_err(err)?;
        out.push(Listener::Tcp(mio::net::TcpListener::from_std(l), tls));
    }
    Ok(out)
}

/// The environment variable naming memcached's port file (its test suite reads it).
const PORT_FILE_ENV: &str = "MEMCACHED_PORT_FILENAME";

/// As memcached: with MEMCACHED_PORT_FILENAME set, the ports bound ("TCP INET: 11211", "UDP
/// INET6: 11211" ...) are written to NAME.lck, then renamed to NAME once all are bound.
pub fn write_port_file(listeners: &[Listener], udp: &[std::net::UdpSocket]) -> std::io::Result<()> {
    let Some(path) = std::env::var_os(PORT_FILE_ENV) else {
        return Ok(());
    };
    let line = |kind: &str, addr: std::net::SocketAddr| {
        format!(
            "{kind} INET{}: {}\n",
            if addr.is_ipv6() { "6" } else { "" },
            addr.port()
        )
    };
    let mut text = String::new();
    for l in listeners {
        if let Listener::Tcp(l, _) = l {
            text += &line("TCP", l.local_addr()?);
        }
    }
    for s in udp {
        text += &line("UDP", s.local_addr()?);
    }
    let mut lck = path.clone();
    lck.push(".lck");
    std::fs::write(&lck, text)?;
    std::fs::rename(&lck, &path)
}

/// A `-l` entry as an address to bind: its own port when it names one, else `port`.
pub fn socket_addr(host: &str, port: u16) -> String {
    let with_port = host.contains(':') && !host.starts_with('[') && host.matches(':').count() == 1 // host:port
        || host.starts_with('[') && host.contains("]:"); // [v6]:port
    if with_port {
        host.to_string()
    } else if host.contains(':') {
        format!("[{}]:{}", host.trim_matches(|c| c == '[' || c == ']'), port)
    } else {
        format!("{host}:{port}")
    }
}

/// std listens with a fixed backlog; calling listen() again on Linux applies -b.
fn relisten(fd: i32, backlog: i32) {
    // SAFETY: fd is a valid listening socket owned by the caller.
    unsafe { libc::listen(fd, backlog) };
}

/// The accept loop; runs on its own thread for the life of the server.
pub fn run(mut listeners: Vec<Listener>, sh: Arc<Shared>, workers: Vec<crate::worker::Handoff>) {
    let mut poll = match Poll::new() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("mnemod: cannot create the accept loop: {e}");
            std::process::exit(1);
        }
    };
    for (i, l) in listeners.iter_mut().enumerate() {
        let src: &mut dyn mio::event::Source = match l {
            Listener::Tcp(l, _) => l,
            Listener::Unix(l) => l,
        };
        if let Err(e) = poll.registry().register(src, Token(i), Interest::READABLE) {
            eprintln!("mnemod: cannot watch a listening socket: {e}");
            std::process::exit(1);
        }
    }
    for l in &listeners {
        let (fd, addr) = match l {
            Listener::Tcp(l, _) => (
                l.as_raw_fd(),
                l.local_addr()
                    .map(crate::admin::conns::tcp_addr)
                    .unwrap_or_default(),
            ),
            Listener::Unix(l) => (
                l.as_raw_fd(),
                crate::admin::conns::unix_addr(sh.config.unix_socket.as_deref().unwrap_or("")),
            ),
        };
        sh.conn_table.add_listener(fd, addr, sh.clock.now());
    }
    let mut events = Events::with_capacity(64);
    let mut next = 0usize;
    // Some(since): accepting is paused; every listener is tried again each PAUSE_RETRY.
    let mut paused: Option<Instant> = None;
    loop {
        let timeout = paused.map(|_| PAUSE_RETRY);
        if poll.poll(&mut events, timeout).is_err() {
            continue;
        }
        // Edge-triggered: a listener with a backlog reports nothing new while paused, so a
        // retry walks all of them.
        let ready: Vec<usize> = if paused.is_some() {
            (0..listeners.len()).collect()
        } else {
            events.iter().map(|ev| ev.token().0).collect()
        };
        for i in ready {
            if let Some(since) = paused {
                if !sh.config.ext.maxconns_fast
                    && sh.conn_counts.curr.load(Relaxed) >= sh.config.max_conns
                {
                    break;
                }
                paused = None;
                set_backlog(&listeners, sh.config.backlog);
                sh.listen
                    .disabled_us
                    .fetch_add(since.elapsed().as_micros() as u64, Relaxed);
                sh.listen.accepting.store(true, Relaxed);
            }
            if !accept_all(&listeners[i], &sh, &workers, &mut next) {
                paused = Some(Instant::now());
                sh.listen.accepting.store(false, Relaxed);
                sh.listen.disabled_num.fetch_add(1, Relaxed);
                // As memcached: while paused, the kernel queues (almost) nothing, so new
                // clients wait in connect() instead of on an accepted socket nobody reads.
                set_backlog(&listeners, 0);
                break;
            }
        }
    }
}

fn set_backlog(listeners: &[Listener], backlog: i32) {
    for l in listeners {
        match l {
            Listener::Tcp(l, _) => relisten(l.as_raw_fd(), backlog),
            Listener::Unix(l) => relisten(l.as_raw_fd(), backlog),
        }
    }
}

/// Accept every pending connection of one listener. false: stop accepting for a while (out
/// of descriptors, or -c reached under `-o no_maxconns_fast`).
fn accept_all(
    l: &Listener,
    sh: &Shared,
    workers: &[crate::worker::Handoff],
    next: &mut usize,
) -> bool {
    loop {
        if !sh.config.ext.maxconns_fast && sh.conn_counts.curr.load(Relaxed) >= sh.config.max_conns
        {
            // memcached 1.4's way: the connection waits in the backlog until one closes.
            return false;
        }
        let stream = match l {
            Listener::Tcp(l, _) => l.accept().map(|(s, _)| {
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }),
            Listener::Unix(l) => l.accept().map(|(s, _)| Stream::Unix(s)),
        };
        let mut stream = match stream {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                if sh.verbosity.load(Relaxed) > 0 {
                    eprintln!("mnemod: accept failed: {e}");
                }
                // Out of descriptors (EMFILE, ENFILE) or memory: the connection stays in the
                // backlog; pause and retry, as memcached does, rather than spin on it.
                let paused = matches!(
                    e.raw_os_error(),
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                );
                return !paused;
            }
        };
        if sh.conn_counts.curr.load(Relaxed) >= sh.config.max_conns {
            sh.conn_counts.rejected.fetch_add(1, Relaxed);
            let _ = stream.write(TOO_MANY);
            continue; // dropping the stream closes it
        }
        // Only connections that are served: memcached counts a refused one as rejected alone.
        sh.conn_counts.total.fetch_add(1, Relaxed);
        // With -Z, the connection gets the certificates in force now (a later refresh_certs
        // does not change it); its handshake runs on the worker, driven by readiness.
        let stream = match (stream, &sh.config.tls, l) {
            (Stream::Tcp(tcp), Some(tls), Listener::Tcp(_, kind))
                if *kind != crate::tls::ListenTls::Plain =>
            {
                match tls.accept(tcp, *kind) {
                    Ok(s) => Stream::Tls(Box::new(s)),
                    Err(e) => {
                        if sh.verbosity.load(Relaxed) > 0 {
                            eprintln!("mnemod: cannot start TLS on a connection: {e}");
                        }
                        continue;
                    }
                }
            }
            (stream, ..) => stream,
        };
        sh.conn_counts.curr.fetch_add(1, Relaxed);
        let (tx, waker) = &workers[*next % workers.len()];
        *next = next.wrapping_add(1);
        if tx.send(stream).is_ok() {
            let _ = waker.wake();
        } else {
            sh.conn_counts.curr.fetch_sub(1, Relaxed);
        }
    }
}
