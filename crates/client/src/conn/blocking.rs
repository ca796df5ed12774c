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

/// Read once, blocking until bytes arrive (or the socket's timeout), into `rbuf` with room up
/// to `want` bytes. Ok(0): the server closed the connection.
pub(super) fn recv(sock: &Socket, rbuf: &mut BytesMut, want: usize) -> Result<usize, ConnError> {
    rbuf.reserve(want.saturating_sub(rbuf.len()));
    loop {
        let len = rbuf.len();
        match sock.recv(rbuf.spare_capacity_mut()) {
            Ok(n) => {
                // SAFETY: recv initialized the first n bytes of the spare capacity.
                unsafe { rbuf.set_len(len + n) };
                return Ok(n);
            }
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

/// Read what has arrived, without waiting.
fn read_nowait(sock: &Socket, rbuf: &mut BytesMut) -> Result<(), ConnError> {
    rbuf.reserve(READ_CHUNK);
    let len = rbuf.len();
    match sock.recv_with_flags(rbuf.spare_capacity_mut(), libc::MSG_DONTWAIT) {
        Ok(0) => Err(super::closed()),
        Ok(n) => {
            // SAFETY: recv initialized the first n bytes of the spare capacity.
            unsafe { rbuf.set_len(len + n) };
            Ok(())
        }
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
