//! One blocking TCP connection with one request outstanding: writes a request in one write,
//! reads the reply into a buffer reused for every query, and counts the bytes both ways.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};

use crate::reply::{Parser, Span};
use crate::Error;

/// Room for a 100-key reply of 720-byte values (about 75 KB) without growing.
const INITIAL_BUF: usize = 128 * 1024;

pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    filled: usize,
    parser: Parser,
    /// Bytes written to and read from the socket since the last `reset_counters`.
    pub sent: u64,
    pub received: u64,
}

impl Conn {
    pub fn connect(addr: SocketAddr) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr)?;
        // A query is one write followed by a wait for the reply: Nagle would hold nothing
        // back here, but the reply's last segment could wait for a delayed ACK otherwise.
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: vec![0; INITIAL_BUF],
            filled: 0,
            parser: Parser::default(),
            sent: 0,
            received: 0,
        })
    }

    pub fn reset_counters(&mut self) {
        self.sent = 0;
        self.received = 0;
    }

    pub fn send(&mut self, req: &[u8]) -> io::Result<()> {
        self.stream.write_all(req)?;
        self.sent += req.len() as u64;
        Ok(())
    }

    /// Reads one whole retrieval reply; its values are then in `values()` / `bytes()`.
    pub fn recv_reply(&mut self) -> Result<(), Error> {
        self.parser.reset();
        self.filled = 0;
        loop {
            if self.filled == self.buf.len() {
                let grown = self.buf.len() * 2;
                self.buf.resize(grown, 0);
            }
            let n = self.stream.read(&mut self.buf[self.filled..])?;
            if n == 0 {
                return Err("server closed the connection".into());
            }
            self.filled += n;
            self.received += n as u64;
            if self.parser.advance(&self.buf[..self.filled])? {
                break;
            }
        }
        if self.parser.consumed() != self.filled {
            // One request in flight: anything after END is a reply nobody asked for.
            return Err(format!(
                "{} unexpected bytes after END",
                self.filled - self.parser.consumed()
            )
            .into());
        }
        Ok(())
    }

    pub fn values(&self) -> &[Span] {
        self.parser.values()
    }

    /// The reply buffer the spans of `values()` point into.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.filled]
    }

    /// Reads until a line equal to `last` (or starting with it plus a space) ends the reply;
    /// for replies other than VALUE/END (`stats`, `version`). Returns the reply's text.
    pub fn recv_until_line(&mut self, last: &str) -> Result<String, Error> {
        let mut text = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err("server closed the connection".into());
            }
            self.received += n as u64;
            text.extend_from_slice(&chunk[..n]);
            if text.ends_with(b"\r\n") {
                let body = &text[..text.len() - 2];
                let line = body.rsplit(|&c| c == b'\n').next().unwrap_or(body);
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                if line == last.as_bytes()
                    || (line.starts_with(last.as_bytes()) && line.get(last.len()) == Some(&b' '))
                {
                    return Ok(String::from_utf8_lossy(&text).into_owned());
                }
            }
        }
    }

    /// A second handle on the socket (for a thread that drains replies while another writes).
    pub fn try_clone_stream(&self) -> io::Result<TcpStream> {
        self.stream.try_clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A reply bigger than the initial buffer, written in 7-byte pieces, then a second reply
    /// on the same connection: the buffer grows, the counters count every byte.
    #[test]
    fn reply_in_fragments_over_a_socket() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let big: Vec<u8> = (0..INITIAL_BUF + 1000).map(|i| (i % 251) as u8).collect();
        let mut first = format!("VALUE a 3 {}\r\n", big.len()).into_bytes();
        first.extend_from_slice(&big);
        first.extend_from_slice(b"\r\nVALUE b 0 2\r\nhi\r\nEND\r\n");
        let second = b"VALUE topk 0 0\r\n\r\nEND\r\n".to_vec();
        let (f, s) = (first.clone(), second.clone());
        let server = std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            sock.set_nodelay(true).unwrap();
            let mut line = [0u8; 64];
            for reply in [f, s] {
                let n = sock.read(&mut line).unwrap();
                assert_eq!(&line[..n], b"get a b\r\n");
                for piece in reply.chunks(7) {
                    sock.write_all(piece).unwrap();
                }
            }
        });
        let mut c = Conn::connect(addr).unwrap();
        c.send(b"get a b\r\n").unwrap();
        c.recv_reply().unwrap();
        assert_eq!(c.values().len(), 2);
        assert_eq!(c.values()[0].flags, 3);
        assert_eq!(&c.bytes()[c.values()[0].data.clone()], &big[..]);
        assert_eq!(&c.bytes()[c.values()[1].data.clone()], b"hi");
        c.send(b"get a b\r\n").unwrap();
        c.recv_reply().unwrap();
        assert_eq!(c.values().len(), 1);
        assert!(c.values()[0].data.is_empty());
        assert_eq!(
            (c.sent, c.received),
            (18, (first.len() + second.len()) as u64)
        );
        server.join().unwrap();
    }
}
