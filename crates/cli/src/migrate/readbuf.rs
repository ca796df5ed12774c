//! The connections a migration makes ([`connect`]) and the buffer their replies are read into
//! (the unread bytes at its front, grown to fit one whole reply). A leaf: lane.rs, verify.rs
//! and rawkeys.rs all use it.

use super::MigrateError;
use std::io::Read;
use std::net::TcpStream;
use std::time::Duration;

/// A server that answers nothing for this long is taken as gone.
const IO_TIMEOUT: Duration = Duration::from_secs(60);

/// A connection to `addr` with TCP_NODELAY and [`IO_TIMEOUT`] both ways.
pub(super) fn connect(addr: &str) -> Result<TcpStream, MigrateError> {
    let s = TcpStream::connect(addr).map_err(|e| MigrateError::Connect(addr.to_owned(), e))?;
    let io = |e| MigrateError::Io(addr.to_owned(), e);
    s.set_nodelay(true).map_err(io)?;
    s.set_read_timeout(Some(IO_TIMEOUT)).map_err(io)?;
    s.set_write_timeout(Some(IO_TIMEOUT)).map_err(io)?;
    Ok(s)
}

/// A read buffer that keeps the unread bytes at its front and grows to fit one whole reply.
pub(super) struct ReadBuf {
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
}

impl ReadBuf {
    pub(super) fn new() -> ReadBuf {
        ReadBuf {
            buf: vec![0; 1 << 18],
            lo: 0,
            hi: 0,
        }
    }

    pub(super) fn data(&self) -> &[u8] {
        &self.buf[self.lo..self.hi]
    }

    pub(super) fn consume(&mut self, n: usize) {
        self.lo += n;
        if self.lo == self.hi {
            self.lo = 0;
            self.hi = 0;
        }
    }

    /// Read more; the connection closing before a reply is whole is an error.
    pub(super) fn fill(&mut self, mut conn: &TcpStream, addr: &str) -> Result<(), MigrateError> {
        if self.lo > 0 {
            self.buf.copy_within(self.lo..self.hi, 0);
            self.hi -= self.lo;
            self.lo = 0;
        }
        if self.hi == self.buf.len() {
            let n = self.buf.len() * 2;
            self.buf.resize(n, 0);
        }
        match conn.read(&mut self.buf[self.hi..]) {
            Ok(0) => Err(MigrateError::Closed(addr.to_owned())),
            Ok(n) => {
                self.hi += n;
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(MigrateError::Io(addr.to_owned(), e)),
        }
    }
}
