//! One TCP connection to one server: TCP_NODELAY, every batch of requests written with one
//! vectored write (seed 002: a request split over two writes stalls on Nagle and delayed ACK),
//! replies read concurrently with the write so a long pipeline cannot deadlock on full socket
//! buffers, and a read buffer reused across requests.

use crate::codec::CodecError;
use crate::codec::{Decoded, Encoder, Expect, Reply, ReplyDecoder};
use std::io::{self, IoSlice};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
}

impl From<io::Error> for ConnError {
    fn from(e: io::Error) -> Self {
        ConnError::Io(e)
    }
}

pub(crate) struct Conn {
    stream: TcpStream,
    rbuf: Vec<u8>,
    /// Bytes of `rbuf` before this are consumed.
    start: usize,
    /// Whether this connection served a request before (a stale pooled connection fails on its
    /// next use without the server being down).
    pub reused: bool,
}

impl Conn {
    pub async fn connect(addr: &str, timeout: Duration) -> io::Result<Conn> {
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(s) => s?,
            Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
        };
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            rbuf: Vec::new(),
            start: 0,
            reused: false,
        })
    }

    /// Write the encoded requests and read one reply per `expects` entry, in order. On error the
    /// connection is in an unknown state and must be dropped.
    pub async fn exchange(
        &mut self,
        enc: &Encoder<'_>,
        expects: &[Expect],
    ) -> Result<Vec<Reply>, ConnError> {
        let slices = enc.io_slices();
        let (mut r, mut w) = self.stream.split();
        let write = async move {
            write_all_vectored(&mut w, &slices).await?;
            Ok::<(), ConnError>(())
        };
        let rbuf = &mut self.rbuf;
        let start = &mut self.start;
        let read = async move {
            let mut replies = Vec::with_capacity(expects.len());
            let mut dec = ReplyDecoder::new(Expect::Ok);
            for &e in expects {
                dec.reset(e);
                loop {
                    match dec.decode(&rbuf[*start..]).map_err(ConnError::Codec)? {
                        Decoded::Done(reply, used) => {
                            *start += used;
                            replies.push(reply);
                            break;
                        }
                        Decoded::Incomplete(need) => {
                            if *start == rbuf.len() {
                                rbuf.clear();
                                *start = 0;
                            } else if *start > 0 && need > rbuf.capacity() - *start {
                                rbuf.drain(..*start);
                                *start = 0;
                            }
                            // Room for what the decoder needs, but grown at most by doubling
                            // per read: a declared length is the server's word, so memory
                            // follows the bytes that actually arrive (a server that declares
                            // 1 GiB and sends 10 bytes costs 64 KiB, not 1 GiB).
                            let cap = rbuf.capacity().max(READ_CHUNK);
                            let want = (*start + need)
                                .min(rbuf.len() + cap)
                                .max(rbuf.len() + READ_CHUNK);
                            rbuf.reserve(want - rbuf.len());
                            if r.read_buf(rbuf).await? == 0 {
                                return Err(ConnError::Io(io::Error::new(
                                    io::ErrorKind::UnexpectedEof,
                                    "server closed the connection",
                                )));
                            }
                        }
                    }
                }
            }
            Ok::<_, ConnError>(replies)
        };
        let ((), replies) = tokio::try_join!(write, read)?;
        if self.start == self.rbuf.len() {
            self.rbuf.clear();
            self.start = 0;
            if self.rbuf.capacity() > KEEP_RBUF {
                self.rbuf = Vec::new();
            }
        }
        self.reused = true;
        Ok(replies)
    }

    /// Whether bytes arrived that no request asked for (the stream is out of step).
    pub fn has_leftover(&self) -> bool {
        self.start != self.rbuf.len()
    }
}

/// One writev for the whole batch; more only when the kernel takes part of it.
async fn write_all_vectored<W: AsyncWriteExt + Unpin>(
    w: &mut W,
    parts: &[IoSlice<'_>],
) -> io::Result<()> {
    let mut idx = 0; // first part not fully written
    let mut off = 0; // bytes of parts[idx] already written
    while idx < parts.len() {
        let n = if off == 0 && parts.len() - idx <= MAX_IOV {
            w.write_vectored(&parts[idx..]).await?
        } else {
            let mut v = Vec::with_capacity((parts.len() - idx).min(MAX_IOV));
            v.push(IoSlice::new(&parts[idx][off..]));
            v.extend(
                parts[idx + 1..]
                    .iter()
                    .take(MAX_IOV - 1)
                    .map(|p| IoSlice::new(p)),
            );
            w.write_vectored(&v).await?
        };
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "server stopped reading",
            ));
        }
        let mut n = n;
        while n > 0 {
            let left = parts[idx].len() - off;
            if n >= left {
                n -= left;
                idx += 1;
                off = 0;
            } else {
                off += n;
                n = 0;
            }
        }
        while idx < parts.len() && parts[idx].is_empty() {
            idx += 1;
        }
    }
    Ok(())
}
