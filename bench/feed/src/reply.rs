//! A resumable parser for retrieval replies (`VALUE <key> <flags> <len> [<cas>]` ... `END`),
//! which serves both a 100-key `get` and an `fget` (one VALUE named after the filter).
//!
//! The whole reply accumulates in one connection buffer (reused across queries); the parser
//! keeps its position in it and records where each value lies, so a value is never copied and
//! nothing is allocated per value. After every read the caller calls [`Parser::advance`] with
//! the bytes so far; it goes on from where it stopped.

use std::fmt;
use std::ops::Range;

/// A header line longer than this without a newline is not a memcached reply.
const MAX_LINE: usize = 4096;

/// Where one VALUE's parts lie in the reply buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub key: Range<usize>,
    pub flags: u32,
    pub data: Range<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyError {
    /// The server answered with an error line (ERROR, CLIENT_ERROR ..., SERVER_ERROR ...).
    Server(String),
    /// Bytes that are no retrieval reply.
    Malformed(String),
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplyError::Server(line) => write!(f, "server replied: {line}"),
            ReplyError::Malformed(what) => write!(f, "malformed reply: {what}"),
        }
    }
}

impl std::error::Error for ReplyError {}

#[derive(Default)]
pub struct Parser {
    /// Start of the first line not parsed yet.
    pos: usize,
    values: Vec<Span>,
    done: bool,
}

impl Parser {
    /// Ready for the next reply, which starts at offset 0 of the buffer.
    pub fn reset(&mut self) {
        self.pos = 0;
        self.values.clear();
        self.done = false;
    }

    /// The values parsed so far, in reply order.
    pub fn values(&self) -> &[Span] {
        &self.values
    }

    /// Bytes of the buffer the reply used (valid once `advance` returned true).
    pub fn consumed(&self) -> usize {
        self.pos
    }

    /// Parses on with `buf`, the reply's bytes received so far (a longer prefix of the same
    /// reply each call). Ok(true) once `END` has been read.
    pub fn advance(&mut self, buf: &[u8]) -> Result<bool, ReplyError> {
        while !self.done {
            let rest = &buf[self.pos..];
            let Some(nl) = find_newline(rest) else {
                if rest.len() > MAX_LINE {
                    return Err(ReplyError::Malformed(format!(
                        "no line end in {} bytes",
                        rest.len()
                    )));
                }
                return Ok(false);
            };
            // Every server measured here ends reply lines with \r\n; a bare \n would mean
            // the stream is out of step.
            let eol = nl
                .checked_sub(1)
                .filter(|&i| rest[i] == b'\r')
                .ok_or_else(|| bad_line(&rest[..nl]))?;
            let line = &rest[..eol];
            if line == b"END" {
                self.pos += eol + 2;
                self.done = true;
            } else if let Some(header) = line.strip_prefix(b"VALUE ") {
                let (key, flags, len) = parse_header(header).ok_or_else(|| bad_line(line))?;
                let key_start = self.pos + 6;
                let data_start = self.pos + eol + 2;
                let end = data_start
                    .checked_add(len)
                    .filter(|&e| e <= usize::MAX - 2)
                    .ok_or_else(|| bad_line(line))?;
                if buf.len() < end + 2 {
                    // The header is parsed again when more has arrived: a few dozen bytes, and it
                    // keeps the parser's state to one offset.
                    return Ok(false);
                }
                if &buf[end..end + 2] != b"\r\n" {
                    return Err(ReplyError::Malformed(format!(
                        "value of {len} bytes not followed by \\r\\n"
                    )));
                }
                self.values.push(Span {
                    key: key_start..key_start + key,
                    flags,
                    data: data_start..end,
                });
                self.pos = end + 2;
            } else if line == b"ERROR"
                || line.starts_with(b"CLIENT_ERROR")
                || line.starts_with(b"SERVER_ERROR")
            {
                return Err(ReplyError::Server(
                    String::from_utf8_lossy(line).into_owned(),
                ));
            } else {
                return Err(bad_line(line));
            }
        }
        Ok(true)
    }
}

fn bad_line(line: &[u8]) -> ReplyError {
    let shown = &line[..line.len().min(120)];
    ReplyError::Malformed(format!(
        "unexpected line {:?}",
        String::from_utf8_lossy(shown)
    ))
}

/// Offset of the first `\n` in `b`.
#[inline]
fn find_newline(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

/// `<key> <flags> <len> [<cas>]` -> (key length, flags, len).
fn parse_header(h: &[u8]) -> Option<(usize, u32, usize)> {
    let mut words = h.split(|&c| c == b' ');
    let key = words.next().filter(|k| !k.is_empty())?;
    let flags = u32::try_from(parse_u64(words.next()?)?).ok()?;
    let len = usize::try_from(parse_u64(words.next()?)?).ok()?;
    match (words.next(), words.next()) {
        (None, _) => {}
        (Some(cas), None) => {
            parse_u64(cas)?;
        }
        _ => return None,
    }
    Some((key.len(), flags, len))
}

#[inline]
fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut n: u64 = 0;
    for &c in s {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(d as u64)?;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// key, flags, data
    type Expected = (&'static [u8], u32, &'static [u8]);

    /// A reply with values that contain the bytes of reply syntax, an empty value and a CAS.
    fn sample() -> (Vec<u8>, Vec<Expected>) {
        let values: Vec<Expected> = vec![
            (b"u:1", 0, b"plain bytes"),
            (b"u:22", 7, b"\r\nEND\r\nVALUE x 0 1\r\n"),
            (b"u:333", 4_294_967_295, b""),
            (b"topk", 0, &[0u8, 1, 2, 13, 10, 255]),
        ];
        let mut reply = Vec::new();
        for (i, (key, flags, data)) in values.iter().enumerate() {
            reply.extend_from_slice(
                format!(
                    "VALUE {} {flags} {}",
                    String::from_utf8_lossy(key),
                    data.len()
                )
                .as_bytes(),
            );
            if i == 1 {
                reply.extend_from_slice(b" 12345");
            }
            reply.extend_from_slice(b"\r\n");
            reply.extend_from_slice(data);
            reply.extend_from_slice(b"\r\n");
        }
        reply.extend_from_slice(b"END\r\n");
        (reply, values)
    }

    fn check(buf: &[u8], p: &Parser, want: &[Expected]) {
        assert_eq!(p.values().len(), want.len());
        for (s, (key, flags, data)) in p.values().iter().zip(want) {
            assert_eq!(&buf[s.key.clone()], *key);
            assert_eq!(s.flags, *flags);
            assert_eq!(&buf[s.data.clone()], *data);
        }
        assert_eq!(p.consumed(), buf.len());
    }

    #[test]
    fn whole_reply() {
        let (reply, want) = sample();
        let mut p = Parser::default();
        assert_eq!(p.advance(&reply), Ok(true));
        check(&reply, &p, &want);
    }

    #[test]
    fn split_at_every_byte_boundary() {
        let (reply, want) = sample();
        let mut p = Parser::default();
        for cut in 0..reply.len() {
            p.reset();
            assert_eq!(p.advance(&reply[..cut]), Ok(false), "cut {cut}");
            assert_eq!(p.advance(&reply), Ok(true), "cut {cut}");
            check(&reply, &p, &want);
        }
        // And arriving one byte at a time.
        p.reset();
        for end in 0..reply.len() {
            assert_eq!(p.advance(&reply[..end]), Ok(false), "end {end}");
        }
        assert_eq!(p.advance(&reply), Ok(true));
        check(&reply, &p, &want);
    }

    #[test]
    fn empty_reply_and_reuse() {
        let mut p = Parser::default();
        assert_eq!(p.advance(b"END\r\n"), Ok(true));
        assert!(p.values().is_empty());
        p.reset();
        let (reply, want) = sample();
        assert_eq!(p.advance(&reply), Ok(true));
        check(&reply, &p, &want);
    }

    #[test]
    fn errors() {
        let mut p = Parser::default();
        for (input, server) in [
            (&b"SERVER_ERROR filter timeout\r\n"[..], true),
            (b"CLIENT_ERROR unknown filter\r\n", true),
            (b"ERROR\r\n", true),
            (b"VALUE k 0 3\r\nabcX\r\nEND\r\n", false),
            (b"VALUE k x 3\r\nabc\r\nEND\r\n", false),
            (b"VALUE k 0 99999999999999999999999\r\n", false),
            (b"VALUE k 0 3 1 2\r\nabc\r\nEND\r\n", false),
            (b"VALUE  0 3\r\nabc\r\nEND\r\n", false),
            (b"STORED\r\n", false),
            (b"END\n", false),
        ] {
            p.reset();
            match p.advance(input) {
                Err(ReplyError::Server(_)) if server => {}
                Err(ReplyError::Malformed(_)) if !server => {}
                other => panic!("{:?}: {other:?}", String::from_utf8_lossy(input)),
            }
        }
        p.reset();
        assert!(matches!(
            p.advance(&[b'x'; MAX_LINE + 1]),
            Err(ReplyError::Malformed(_))
        ));
    }
}
