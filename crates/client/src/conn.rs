//! One TCP connection to one server: TCP_NODELAY, every batch of requests written with one
//! vectored write (seed 002: a request split over two writes stalls on Nagle and delayed ACK),
//! replies read concurrently with the write so a long pipeline cannot deadlock on full socket
//! buffers, and a read buffer reused across requests. The socket is driven by tokio or, for the
//! blocking facades, by blocking system calls (conn/blocking.rs).

use crate::codec::CodecError;
use crate::codec::{Encoder, Expect, Reply, ReplyDecoder, Step};
use bytes::BytesMut;
use std::io::{self, IoSlice};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod blocking;

/// Read buffer kept between requests; larger ones (after a big value) are dropped.
const KEEP_RBUF: usize = 1 << 20;
/// Bytes asked of the socket per read, at least.
const READ_CHUNK: usize = 64 * 1024;
/// iovecs per writev (Linux allows 1024).
const MAX_IOV: usize = 512;

#[derive(Debug)]
pub(crate) enum ConnError {
    Io(io::Error),
    Codec(CodecError),
    /// A blocking socket's read or write timed out.
    Timeout,
}

impl From<io::Error> for ConnError {
    fn from(e: io::Error) -> Self {
        ConnError::Io(e)
    }
}

pub(crate) struct Conn {
    sock: Sock,
    /// Bytes read and not yet decoded. Decoded values are split off it as slices (no copy);
    /// once the caller drops them, the same memory is reused.
    rbuf: BytesMut,
    /// Whether this connection served a request before (a stale pooled connection fails on its
    /// next use without the server being down).
    pub reused: bool,
}

/// How the socket is driven.
///
/// ```text
///   Async     writev ─> epoll_wait (runtime parks) ─> read       3 system calls a request
///   Blocking  writev ─> recv (sleeps in the kernel until the reply) 2 system calls a request
/// ```
///
/// The blocking facades (Python's sync client, [`crate::blocking::Client`]) own their thread,
/// so they can wait in `recv` itself, as libmemcached does; a fan-out writes to every server
/// before it waits on any (see [`crate::client::join_all`]).
enum Sock {
    Async(TcpStream),
    /// A blocking socket whose timeouts are the kernel's (`SO_RCVTIMEO`, `SO_SNDTIMEO`); the
    /// value is the timeout they are set to now. Reads poll briefly before they sleep
    /// ([`blocking::Spin`]).
    Blocking(socket2::Socket, Duration, blocking::Spin),
}

impl Conn {
    /// A connection; `blocking`: made as a blocking socket with this I/O timeout and reply spin
    /// (`Config::reply_spin`).
    pub async fn connect(
        addr: &str,
        timeout: Duration,
        blocking: Option<(Duration, Duration)>,
    ) -> io::Result<Conn> {
        let sock = match blocking {
            Some((io_timeout, spin)) => Sock::Blocking(
                blocking::connect(addr, timeout, io_timeout)?,
                io_timeout,
                blocking::Spin::new(spin),
            ),
            None => {
                let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
                    Ok(s) => s?,
                    Err(_) => {
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))
                    }
                };
                stream.set_nodelay(true)?;
                Sock::Async(stream)
            }
        };
        Ok(Conn {
            sock,
            rbuf: BytesMut::new(),
            reused: false,
        })
    }

    /// Whether this connection waits in the kernel (the caller's timeout is then the socket's,
    /// applied to each read and write, not a deadline over the whole exchange).
    pub fn is_blocking(&self) -> bool {
        matches!(self.sock, Sock::Blocking(..))
    }

    /// Write the encoded requests and read one reply per `expects` entry, in order. On error the
    /// connection is in an unknown state and must be dropped.
    pub async fn exchange(
        &mut self,
        enc: &Encoder<'_>,
        expects: &[Expect],
        timeout: Duration,
    ) -> Result<Vec<Reply>, ConnError> {
        let slices = enc.io_slices();
        let mut replies = Replies::new(expects.len());
        match &mut self.sock {
            Sock::Async(stream) => {
                let (mut r, mut w) = stream.split();
                let write = async move {
                    write_all_vectored(&mut w, &slices).await?;
                    Ok::<(), ConnError>(())
                };
                let rbuf = &mut self.rbuf;
                let replies = &mut replies;
                let read = async move {
                    while let Some(want) = replies.advance(expects, rbuf)? {
                        rbuf.reserve(want - rbuf.len());
                        if r.read_buf(rbuf).await? == 0 {
                            return Err(closed());
                        }
                    }
                    Ok::<_, ConnError>(())
                };
                tokio::try_join!(write, read)?;
            }
            Sock::Blocking(sock, set_to, spin) => {
                if *set_to != timeout {
                    sock.set_read_timeout(Some(timeout))?;
                    sock.set_write_timeout(Some(timeout))?;
                    *set_to = timeout;
                }
                blocking::send(sock, &slices, &mut self.rbuf, timeout)?;
                // In a fan-out, the other servers' requests go out before this one's replies
                // are waited for.
                crate::fanout::fan_out_barrier().await;
                while let Some(want) = replies.advance(expects, &mut self.rbuf)? {
                    if blocking::recv(sock, &mut self.rbuf, want, spin)? == 0 {
                        return Err(closed());
                    }
                }
            }
        }
        if self.rbuf.is_empty() && self.rbuf.capacity() > KEEP_RBUF {
            self.rbuf = BytesMut::new();
        }
        self.reused = true;
        Ok(replies.done)
    }

    /// Whether bytes arrived that no request asked for (the stream is out of step).
    pub fn has_leftover(&self) -> bool {
        !self.rbuf.is_empty()
    }
}

fn closed() -> ConnError {
    ConnError::Io(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "server closed the connection",
    ))
}

/// The replies decoded so far; I/O-free, shared by both ways of driving the socket.
struct Replies {
    done: Vec<Reply>,
    dec: ReplyDecoder,
    /// The decoder has yet to start on the next reply.
    fresh: bool,
}

impl Replies {
    fn new(n: usize) -> Replies {
        Replies {
            done: Vec::with_capacity(n),
            dec: ReplyDecoder::new(Expect::Ok),
            fresh: true,
        }
    }

    /// Decode what `rbuf` holds. `None`: every reply is in; `Some(len)`: read more, with room
    /// in `rbuf` up to `len`.
    fn advance(
        &mut self,
        expects: &[Expect],
        rbuf: &mut BytesMut,
    ) -> Result<Option<usize>, ConnError> {
        while self.done.len() < expects.len() {
            if self.fresh {
                self.dec.reset(expects[self.done.len()]);
                self.fresh = false;
            }
            match self.dec.decode_from(rbuf).map_err(ConnError::Codec)? {
                Step::Reply(reply) => {
                    self.done.push(reply);
                    self.fresh = true;
                }
                Step::Need(need) => {
                    // Room for what the decoder needs, but grown at most by doubling per
                    // read: a declared length is the server's word, so memory follows the
                    // bytes that actually arrive (a server that declares 1 GiB and sends 10
                    // bytes costs 64 KiB, not 1 GiB).
                    let cap = rbuf.capacity().max(READ_CHUNK);
                    let want = need.min(rbuf.len() + cap).max(rbuf.len() + READ_CHUNK);
                    return Ok(Some(want));
                }
            }
        }
        Ok(None)
    }
}

/// One writev for the whole batch; more only when the kernel takes part of it.
async fn write_all_vectored<W: AsyncWriteExt + Unpin>(
    w: &mut W,
    parts: &[IoSlice<'_>],
) -> io::Result<()> {
    let mut at = Written::default();
    while !at.all(parts) {
        let n = w.write_vectored(&at.rest(parts)).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "server stopped reading",
            ));
        }
        at.advance(parts, n);
    }
    Ok(())
}

/// How far a vectored write of `parts` has got, over however many system calls it takes.
#[derive(Default)]
struct Written {
    /// First part not fully written.
    idx: usize,
    /// Bytes of `parts[idx]` already written.
    off: usize,
}

impl Written {
    fn all(&self, parts: &[IoSlice<'_>]) -> bool {
        self.idx >= parts.len()
    }

    /// The iovecs still to write (at most [`MAX_IOV`]); borrowed when no part was cut.
    fn rest<'p>(&self, parts: &'p [IoSlice<'p>]) -> std::borrow::Cow<'p, [IoSlice<'p>]> {
        let (idx, off) = (self.idx, self.off);
        if off == 0 && parts.len() - idx <= MAX_IOV {
            return std::borrow::Cow::Borrowed(&parts[idx..]);
        }
        let mut v = Vec::with_capacity((parts.len() - idx).min(MAX_IOV));
        v.push(IoSlice::new(&parts[idx][off..]));
        v.extend(parts[idx + 1..].iter().take(MAX_IOV - 1).copied());
        std::borrow::Cow::Owned(v)
    }

    /// Count `n` more bytes written.
    fn advance(&mut self, parts: &[IoSlice<'_>], mut n: usize) {
        while n > 0 {
            let left = parts[self.idx].len() - self.off;
            if n >= left {
                n -= left;
                self.idx += 1;
                self.off = 0;
            } else {
                self.off += n;
                n = 0;
            }
        }
        while self.idx < parts.len() && parts[self.idx].is_empty() {
            self.idx += 1;
        }
    }
}
