//! The blocking way to drive a connection: a socket in blocking mode whose reads and writes are
//! bounded by the kernel's timeouts (`SO_RCVTIMEO`, `SO_SNDTIMEO`), as libmemcached and
//! pymemcache do. A request costs a `writev` and a `recv` that sleeps until the reply is in; the
//! tokio path pays an `epoll_wait` on top.
//!
//! A batch is written with `MSG_DONTWAIT`: when the kernel's buffers fill (a long pipeline whose
//! replies the server cannot send because nobody reads them), the writer waits in `poll` for
//! either room or replies, and reads what arrived, so the two sides cannot block each other.

use super::{ConnError, Written, READ_CHUNK};
use bytes::BytesMut;
use socket2::Socket;
use std::io::{self, IoSlice};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Connect within `timeout` (each resolved address in turn), with TCP_NODELAY and `io_timeout`
/// on every read and write.
pub(super) fn connect(addr: &str, timeout: Duration, io_timeout: Duration) -> io::Result<Socket> {
    let mut last = None;
    for sa in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&sa, timeout) {
            Ok(s) => {
                s.set_nodelay(true)?;
                let sock = Socket::from(s);
                sock.set_read_timeout(Some(io_timeout))?;
                sock.set_write_timeout(Some(io_timeout))?;
                return Ok(sock);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address")))
}

/// Write every part (one `sendmsg` when the kernel takes it all); replies that arrive while the
/// kernel pushes back are appended to `rbuf`.
pub(super) fn send(
    sock: &Socket,
    parts: &[IoSlice<'_>],
    rbuf: &mut BytesMut,
    timeout: Duration,
) -> Result<(), ConnError> {
    let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
    let mut at = Written::default();
    while !at.all(parts) {
        let n = match sock.send_vectored_with_flags(&at.rest(parts), flags) {
            Ok(0) => {
                return Err(ConnError::Io(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "server stopped reading",
                )))
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if wait(sock, timeout)? {
                    read_nowait(sock, rbuf)?;
                }
                continue;
            }
            Err(e) => return Err(ConnError::Io(e)),
        };
        at.advance(parts, n);
    }
    Ok(())
}

/// Spin-then-sleep for replies. A thread that sleeps in `recv` is woken when the reply lands;
/// when the server runs on another CPU (a server on the same host, or a sibling in a fan-out)
/// that wakeup is an inter-processor interrupt and, on a VM whose CPU went idle, an exit to
/// the hypervisor: tens of microseconds, as much as the server's whole work on a 100-key get.
/// So a read first polls the socket (non-blocking `recv`, yielding the CPU between tries) for
/// up to `limit`.
///
/// ```text
///   reply within limit   -> returned; nothing slept           (fails = 0)
///   limit passed         -> sleep in recv as before           (fails += 1)
///   FAILS_TO_BACK_OFF in a row -> the next BACK_OFF reads do not spin, then one tries again
/// ```
///
/// A connection to a distant server (replies after hundreds of microseconds) thus spins on one
/// read in BACK_OFF + FAILS_TO_BACK_OFF: at most `limit` of CPU per ~70 reads.
pub(crate) struct Spin {
    limit: Duration,
    /// Spins in a row that ended without the reply.
    fails: u32,
    /// Reads left that sleep at once.
    skip: u32,
}

const FAILS_TO_BACK_OFF: u32 = 4;
const BACK_OFF: u32 = 64;

impl Spin {
    pub(crate) fn new(limit: Duration) -> Spin {
        Spin {
            limit,
            fails: 0,
            skip: 0,
        }
    }

    /// Whether this read should spin first.
    fn wanted(&mut self) -> bool {
        if self.limit.is_zero() {
            return false;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        true
    }

    fn outcome(&mut self, got_it: bool) {
        if got_it {
            self.fails = 0;
        } else {
            self.fails += 1;
            if self.fails >= FAILS_TO_BACK_OFF {
                self.fails = 0;
                self.skip = BACK_OFF;
            }
        }
    }
}

/// Read once, blocking until bytes arrive (or the socket's timeout), into `rbuf` with room up
/// to `want` bytes, after polling for them for up to the spin limit. Ok(0): the server closed
/// the connection.
pub(super) fn recv(
    sock: &Socket,
    rbuf: &mut BytesMut,
    want: usize,
    spin: &mut Spin,
) -> Result<usize, ConnError> {
    rbuf.reserve(want.saturating_sub(rbuf.len()));
    if spin.wanted() {
        let start = std::time::Instant::now();
        loop {
            match recv_into(sock, rbuf, libc::MSG_DONTWAIT) {
                Ok(n) => {
                    spin.outcome(true);
                    return Ok(n);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                // Reported by the blocking read below.
                Err(_) => break,
            }
            if start.elapsed() >= spin.limit {
                spin.outcome(false);
                break;
            }
            // Not a bare spin: a server on this same CPU (a sidecar, or a test box) can only
            // answer if we give way; with nothing else runnable here this returns at once.
            std::thread::yield_now();
        }
    }
    loop {
        match recv_into(sock, rbuf, 0) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // SO_RCVTIMEO expired.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(ConnError::Timeout)
            }
            Err(e) => return Err(ConnError::Io(e)),
        }
    }
}

/// One `recv` into `rbuf`'s spare capacity (reserved by the caller), appended to what it holds.
fn recv_into(sock: &Socket, rbuf: &mut BytesMut, flags: libc::c_int) -> io::Result<usize> {
    let len = rbuf.len();
    let n = sock.recv_with_flags(rbuf.spare_capacity_mut(), flags)?;
    // SAFETY: recv initialized the first n bytes of the spare capacity.
    unsafe { rbuf.set_len(len + n) };
    Ok(n)
}

/// Read what has arrived, without waiting.
fn read_nowait(sock: &Socket, rbuf: &mut BytesMut) -> Result<(), ConnError> {
    rbuf.reserve(READ_CHUNK);
    match recv_into(sock, rbuf, libc::MSG_DONTWAIT) {
        Ok(0) => Err(super::closed()),
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(ConnError::Io(e)),
    }
}

/// Wait for room to write or bytes to read. Ok(true): readable.
fn wait(sock: &Socket, timeout: Duration) -> Result<bool, ConnError> {
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLIN | libc::POLLOUT,
        revents: 0,
    };
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
    loop {
        // SAFETY: one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        match r {
            0 => return Err(ConnError::Timeout),
            r if r > 0 => {
                return Ok(pfd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0)
            }
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(ConnError::Io(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    /// A connected pair: our end as a blocking Socket (as `connect` makes it), the peer's as a
    /// TcpStream.
    fn pair() -> (Socket, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let ours = connect(&addr, Duration::from_secs(5), Duration::from_secs(5)).unwrap();
        let (peer, _) = l.accept().unwrap();
        (ours, peer)
    }

    #[test]
    fn spinning_stops_while_replies_keep_coming_late_and_comes_back() {
        let mut s = Spin::new(Duration::from_micros(50));
        for _ in 0..FAILS_TO_BACK_OFF {
            assert!(s.wanted());
            s.outcome(false);
        }
        for _ in 0..BACK_OFF {
            assert!(!s.wanted(), "backing off");
        }
        // One try after the back-off; a reply within the limit keeps spinning on.
        assert!(s.wanted());
        s.outcome(true);
        for _ in 0..3 * FAILS_TO_BACK_OFF {
            assert!(s.wanted());
            s.outcome(true);
        }
        // Failures only count in a row.
        for _ in 0..3 {
            for _ in 0..FAILS_TO_BACK_OFF - 1 {
                assert!(s.wanted());
                s.outcome(false);
            }
            assert!(s.wanted());
            s.outcome(true);
        }
        assert!(!Spin::new(Duration::ZERO).wanted(), "zero: never spins");
    }

    #[test]
    fn replies_are_read_whether_they_come_while_spinning_or_after() {
        let (ours, mut peer) = pair();
        let mut rbuf = BytesMut::new();
        let mut spin = Spin::new(Duration::from_micros(200));
        // Already there: the spin's first poll takes it.
        peer.write_all(b"VALUE").unwrap();
        while rbuf.len() < 5 {
            recv(&ours, &mut rbuf, 64, &mut spin).unwrap();
        }
        assert_eq!(&rbuf[..], b"VALUE");
        // Later than the spin: the read sleeps and is woken by it.
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            peer.write_all(b" k 0 1\r\n").unwrap();
            peer
        });
        while rbuf.len() < 13 {
            assert!(recv(&ours, &mut rbuf, 64, &mut spin).unwrap() > 0);
        }
        assert_eq!(&rbuf[..], b"VALUE k 0 1\r\n");
        // The server closing shows as 0, spinning or not.
        drop(writer.join().unwrap());
        assert_eq!(recv(&ours, &mut rbuf, 64, &mut spin).unwrap(), 0);
        assert_eq!(
            recv(&ours, &mut rbuf, 64, &mut Spin::new(Duration::ZERO)).unwrap(),
            0
        );
    }
}
