//! Listening sockets and the accept loop: new connections are checked against -c, set to
//! TCP_NODELAY and handed to the workers round robin.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use mio::{Events, Interest, Poll, Token, Waker};

use crate::conn::Stream;
use crate::{Config, Shared};

/// memcached's reply to a connection beyond -c, sent just before closing it.
const TOO_MANY: &[u8] = b"ERROR Too many open connections\r\n";

pub enum Listener {
    Tcp(mio::net::TcpListener),
    Unix(mio::net::UnixListener),
}

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("failed to listen on {addr}: {source}")]
    Tcp { addr: String, source: std::io::Error },
    #[error("failed to listen on UNIX socket \"{path}\": {source}")]
    Unix { path: String, source: std::io::Error },
}

/// Open every socket the configuration asks for (-s replaces TCP, as in memcached).
pub fn bind(config: &Config) -> Result<Vec<Listener>, BindError> {
    if let Some(path) = &config.unix_socket {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let err = |source| BindError::Unix { path: path.clone(), source };
        // A socket left behind by an earlier run would make bind fail.
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if meta.file_type().is_socket() {
                let _ = std::fs::remove_file(path);
            }
        }
        let l = std::os::unix::net::UnixListener::bind(path).map_err(err)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(config.unix_mask)).map_err(err)?;
        relisten(l.as_raw_fd(), config.backlog);
        l.set_nonblocking(true).map_err(err)?;
        return Ok(vec![Listener::Unix(mio::net::UnixListener::from_std(l))]);
    }
    let mut out = Vec::new();
    for host in &config.listen {
        let addr = if host.contains(':') && !host.starts_with('[') && host.matches(':').count() == 1 {
            host.clone() // host:port
        } else if host.starts_with('[') && host.contains("]:") {
            host.clone()
        } else if host.contains(':') {
            format!("[{}]:{}", host.trim_matches(|c| c == '[' || c == ']'), config.port)
        } else {
            format!("{host}:{}", config.port)
        };
        let err = |source| BindError::Tcp { addr: addr.clone(), source };
        let l = std::net::TcpListener::bind(addr.as_str()).map_err(err)?;
        relisten(l.as_raw_fd(), config.backlog);
        l.set_nonblocking(true).map_err(err)?;
        out.push(Listener::Tcp(mio::net::TcpListener::from_std(l)));
    }
    Ok(out)
}

/// std listens with a fixed backlog; calling listen() again on Linux applies -b.
fn relisten(fd: i32, backlog: i32) {
    // SAFETY: fd is a valid listening socket owned by the caller.
    unsafe { libc::listen(fd, backlog) };
}

/// The accept loop; runs on its own thread for the life of the server.
pub fn run(mut listeners: Vec<Listener>, sh: Arc<Shared>, workers: Vec<(Sender<Stream>, Waker)>) {
    let mut poll = match Poll::new() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("mnemod: cannot create the accept loop: {e}");
            std::process::exit(1);
        }
    };
    for (i, l) in listeners.iter_mut().enumerate() {
        let src: &mut dyn mio::event::Source = match l {
            Listener::Tcp(l) => l,
            Listener::Unix(l) => l,
        };
        if let Err(e) = poll.registry().register(src, Token(i), Interest::READABLE) {
            eprintln!("mnemod: cannot watch a listening socket: {e}");
            std::process::exit(1);
        }
    }
    let mut events = Events::with_capacity(64);
    let mut next = 0usize;
    loop {
        if poll.poll(&mut events, None).is_err() {
            continue;
        }
        for ev in events.iter() {
            let l = &listeners[ev.token().0];
            loop {
                let stream = match l {
                    Listener::Tcp(l) => l.accept().map(|(s, _)| {
                        let _ = s.set_nodelay(true);
                        Stream::Tcp(s)
                    }),
                    Listener::Unix(l) => l.accept().map(|(s, _)| Stream::Unix(s)),
                };
                let mut stream = match stream {
                    Ok(s) => s,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        // Out of file descriptors and the like: report and keep serving.
                        if sh.verbosity.load(Relaxed) > 0 {
                            eprintln!("mnemod: accept failed: {e}");
                        }
                        break;
                    }
                };
                sh.total_conns.fetch_add(1, Relaxed);
                if sh.curr_conns.load(Relaxed) >= sh.config.max_conns {
                    sh.rejected_conns.fetch_add(1, Relaxed);
                    let _ = stream.write(TOO_MANY);
                    continue; // dropping the stream closes it
                }
                sh.curr_conns.fetch_add(1, Relaxed);
                let (tx, waker) = &workers[next % workers.len()];
                next = next.wrapping_add(1);
                if tx.send(stream).is_ok() {
                    let _ = waker.wake();
                } else {
                    sh.curr_conns.fetch_sub(1, Relaxed);
                }
            }
        }
    }
}
