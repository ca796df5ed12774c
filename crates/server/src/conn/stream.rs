//! What a connection reads from and writes to: the [`Io`] trait, and [`Stream`], the socket
//! the accept thread hands a worker.
//!
//! ```text
//!   Conn<S: Io>  ──read/write──>  S = Stream            epoll loop: the socket itself
//!                                 S = RingStream        io_uring loop: buffers the ring fills
//!                                     └── sock: Stream      and drains (worker/uring/stream.rs)
//! ```
//!
//! The connection's code (conn.rs) is written once over `Io`; each event loop supplies its
//! own. A stream never wraps another `Io`: the ring's buffers hold a plain `Stream` only for
//! its descriptor and for the writes that may go to it directly.

use std::io::{self, Read, Write};

/// A connection's bytes, as one event loop moves them.
pub trait Io: Read + Write {
    /// The socket underneath (its descriptor, addresses, and the direct sends of large values).
    fn socket(&self) -> &Stream;
    fn socket_mut(&mut self) -> &mut Stream;

    /// Whether a read that returned less than it had room for emptied the socket, so the next
    /// read may be skipped until the loop reports more.
    fn short_read_drains(&self) -> bool;

    /// Send output the stream still holds (TLS records the socket did not take). Ok(true):
    /// nothing left.
    fn send_pending(&mut self) -> io::Result<bool> {
        Ok(true)
    }

    /// Whether a write straight to [`Io::socket_mut`] now keeps the byte order (nothing this
    /// stream queued comes before it): a large value then goes by one copy in the kernel, or
    /// by reference, instead of through the stream's buffers.
    fn direct(&self) -> bool;

    /// Take every byte of `out` as written, by taking the buffer itself instead of copying
    /// it: `out` is left empty (holding a spare buffer of the stream's, for the next replies).
    /// False when the stream cannot (it writes to the socket, or still holds replies of its
    /// own, which must go first): the caller writes as usual.
    fn take_output(&mut self, _out: &mut Vec<u8>) -> bool {
        false
    }

    /// Replies accepted by the stream but not yet handed to the kernel (memcached's
    /// conn_mwrite): `-o idle_timeout` leaves such a connection alone.
    fn sending(&self) -> bool {
        false
    }

    /// The connection is idle (worker/serve.rs, `sweep`): give back buffers the stream holds
    /// while nothing is in them. Returns whether any was held.
    fn release_idle(&mut self) -> bool {
        false
    }
}

/// A connection's socket. An enum, not a trait object: the plain-TCP path stays a direct
/// call; TLS is boxed so it does not make every plain connection larger.
pub enum Stream {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
    Tls(Box<crate::tls::TlsStream>),
}

impl Stream {
    pub fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
            Stream::Tls(s) => &mut s.tcp,
        }
    }

    pub fn raw_fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tls(s) => s.tcp.as_raw_fd(),
        }
    }

    /// TLS: rustls decrypts into one buffer per read, so a read is never vectored.
    /// The TCP peer's address (None for a UNIX socket or one that is gone).
    pub fn peer(&self) -> Option<std::net::SocketAddr> {
        match self {
            Stream::Tcp(s) => s.peer_addr().ok(),
            Stream::Tls(s) => s.tcp.peer_addr().ok(),
            Stream::Unix(_) => None,
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }

    /// (its address, the listening address it came in on), in `stats conns`' form.
    pub fn addrs(&self, unix_path: Option<&str>) -> (String, String) {
        use crate::admin::conns::{tcp_addr, unix_addr};
        match self {
            Stream::Tcp(s) => (
                s.peer_addr().map(tcp_addr).unwrap_or_default(),
                s.local_addr().map(tcp_addr).unwrap_or_default(),
            ),
            Stream::Tls(s) => (
                s.tcp.peer_addr().map(tcp_addr).unwrap_or_default(),
                s.tcp.local_addr().map(tcp_addr).unwrap_or_default(),
            ),
            Stream::Unix(_) => {
                let a = unix_addr(unix_path.unwrap_or(""));
                (a.clone(), a)
            }
        }
    }
}

/// The epoll loop's `Io`: the socket itself, which the kernel reports readable and writable.
impl Io for Stream {
    #[inline]
    fn socket(&self) -> &Stream {
        self
    }

    #[inline]
    fn socket_mut(&mut self) -> &mut Stream {
        self
    }

    /// For TLS a short read says rustls's plaintext ran out; the socket's own last read decides.
    #[inline]
    fn short_read_drains(&self) -> bool {
        match self {
            Stream::Tls(s) => s.socket_drained(),
            _ => true,
        }
    }

    #[inline]
    fn send_pending(&mut self) -> io::Result<bool> {
        match self {
            Stream::Tls(s) => s.send_pending(),
            _ => Ok(true),
        }
    }

    #[inline]
    fn direct(&self) -> bool {
        true
    }
}

impl Read for Stream {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
    #[inline]
    fn read_vectored(&mut self, bufs: &mut [io::IoSliceMut<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read_vectored(bufs),
            Stream::Unix(s) => s.read_vectored(bufs),
            // rustls reads into the first buffer only; fill() does not ask TLS for readv.
            Stream::Tls(s) => s.read_vectored(bufs),
        }
    }
}

impl Write for Stream {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    #[inline]
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write_vectored(bufs),
            Stream::Unix(s) => s.write_vectored(bufs),
            Stream::Tls(s) => s.write_vectored(bufs),
        }
    }
    #[inline]
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
