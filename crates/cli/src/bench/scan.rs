//! Reply scanning: counts complete replies in a byte stream without copying or allocating.
//!
//! The generator does not need reply contents, only where each reply ends and how many
//! `VALUE` blocks a get reply carried (its hits). Value bodies are skipped by their declared
//! length, so a 100 KB value is never looked at, and a body split over many reads needs no
//! buffering: the scanner remembers how many bytes are still to skip. Only a partial reply
//! *line* (at most [`MAX_LINE`] bytes) is left for the caller to keep at the front of its buffer.
//!
//! ```text
//!   VALUE <key> <flags> <bytes> [<cas>]\r\n  -> skip <bytes> + 2, hits += 1, bytes += <bytes>
//!   END\r\n                                  -> Reply::Get { hits, bytes }
//!   STORED\r\n                               -> Reply::Stored
//!   anything else\r\n                        -> Reply::Other(class)  (NOT_STORED, ERROR, ...)
//! ```

/// A reply line longer than this is a protocol error (memcached's keys are <= 250 bytes).
pub const MAX_LINE: usize = 2048;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A complete get / multi-get reply with this many values, of `bytes` value bytes in all.
    Get {
        hits: u32,
        bytes: u64,
    },
    Stored,
    Other(Class),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// NOT_STORED, EXISTS, NOT_FOUND, DELETED, TOUCHED, OK, a number: answers, not errors.
    Status,
    /// ERROR, CLIENT_ERROR ..., SERVER_ERROR ...
    Error,
}

#[derive(Debug, PartialEq, Eq)]
pub enum ScanError {
    LineTooLong,
    BadValueLine,
}

impl std::fmt::Display for ScanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScanError::LineTooLong => write!(f, "reply line longer than {MAX_LINE} bytes"),
            ScanError::BadValueLine => write!(f, "malformed VALUE line"),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Scanner {
    /// Bytes of a value body (and its \r\n) still to skip.
    skip: usize,
    /// VALUE blocks seen in the get reply in progress.
    hits: u32,
    /// Their declared value bytes.
    bytes: u64,
}

impl Scanner {
    pub fn new() -> Scanner {
        Scanner::default()
    }

    /// Bytes of a value body (and its \r\n) still to come, which the caller may drop unread.
    pub fn skipping(&self) -> usize {
        self.skip
    }

    /// The caller dropped `n <= skipping()` of those bytes itself.
    pub fn skipped(&mut self, n: usize) {
        debug_assert!(n <= self.skip);
        self.skip -= n;
    }

    /// True when no reply is partly scanned (no value body pending, no VALUE seen without END).
    #[cfg(test)]
    pub fn idle(&self) -> bool {
        self.skip == 0 && self.hits == 0 && self.bytes == 0
    }

    /// Scans `buf`, calling `on_reply` once per complete reply, in order. Returns how many bytes
    /// were consumed; the rest (a partial line) must be passed again, with more bytes after it.
    #[inline]
    pub fn scan(
        &mut self,
        buf: &[u8],
        mut on_reply: impl FnMut(Reply),
    ) -> Result<usize, ScanError> {
        let mut pos = 0;
        loop {
            if self.skip > 0 {
                let n = self.skip.min(buf.len() - pos);
                pos += n;
                self.skip -= n;
                if self.skip > 0 {
                    return Ok(pos);
                }
            }
            let rest = &buf[pos..];
            let Some(nl) = memchr::memchr(b'\n', rest) else {
                if rest.len() > MAX_LINE {
                    return Err(ScanError::LineTooLong);
                }
                return Ok(pos);
            };
            let mut line = &rest[..nl];
            if let [head @ .., b'\r'] = line {
                line = head;
            }
            pos += nl + 1;
            match line {
                b"END" => {
                    on_reply(Reply::Get {
                        hits: self.hits,
                        bytes: self.bytes,
                    });
                    self.hits = 0;
                    self.bytes = 0;
                }
                b"STORED" => on_reply(Reply::Stored),
                _ if line.starts_with(b"VALUE ") => {
                    let len = value_len(line).ok_or(ScanError::BadValueLine)?;
                    self.skip = len + 2;
                    self.hits += 1;
                    self.bytes += len as u64;
                }
                _ => {
                    let class = if line.starts_with(b"ERROR")
                        || line.starts_with(b"CLIENT_ERROR")
                        || line.starts_with(b"SERVER_ERROR")
                    {
                        Class::Error
                    } else {
                        Class::Status
                    };
                    // An error in the middle of a multi-get ends that reply, as memcached does.
                    self.hits = 0;
                    self.bytes = 0;
                    on_reply(Reply::Other(class));
                }
            }
        }
    }
}

/// The `<bytes>` field (4th token) of `VALUE <key> <flags> <bytes> [<cas>]`.
fn value_len(line: &[u8]) -> Option<usize> {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let field = fields.nth(3)?;
    if field.is_empty() || field.len() > 19 {
        return None;
    }
    let mut n = 0usize;
    for &b in field {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + (b - b'0') as usize;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_all(chunks: &[&[u8]]) -> Result<Vec<Reply>, ScanError> {
        // Mimics a connection: unconsumed bytes stay at the front of the buffer.
        let mut s = Scanner::new();
        let mut buf = Vec::new();
        let mut out = Vec::new();
        for c in chunks {
            buf.extend_from_slice(c);
            let used = s.scan(&buf, |r| out.push(r))?;
            buf.drain(..used);
        }
        assert!(
            buf.is_empty(),
            "left over: {:?}",
            String::from_utf8_lossy(&buf)
        );
        assert!(s.idle());
        Ok(out)
    }

    const STREAM: &[u8] = b"VALUE k1 0 5\r\nhello\r\nEND\r\nEND\r\nSTORED\r\n\
VALUE k1 0 11\r\nEND\r\nEND\r\nx\r\nVALUE k2 7 0 99\r\n\r\nEND\r\nNOT_STORED\r\nSERVER_ERROR out of memory\r\n";

    fn expected() -> Vec<Reply> {
        vec![
            Reply::Get { hits: 1, bytes: 5 },
            Reply::Get { hits: 0, bytes: 0 },
            Reply::Stored,
            Reply::Get { hits: 2, bytes: 11 },
            Reply::Other(Class::Status),
            Reply::Other(Class::Error),
        ]
    }

    #[test]
    fn whole_stream() {
        assert_eq!(scan_all(&[STREAM]).unwrap(), expected());
    }

    #[test]
    fn every_two_way_split() {
        // A value body containing "END\r\n" must be skipped by length, not scanned.
        for cut in 0..=STREAM.len() {
            let (a, b) = STREAM.split_at(cut);
            assert_eq!(scan_all(&[a, b]).unwrap(), expected(), "cut at {cut}");
        }
    }

    #[test]
    fn byte_at_a_time() {
        let chunks: Vec<&[u8]> = STREAM.chunks(1).collect();
        assert_eq!(scan_all(&chunks).unwrap(), expected());
    }

    #[test]
    fn large_value_skipped_across_reads() {
        let body = vec![b'\n'; 100_000];
        let mut stream = b"VALUE big 0 100000\r\n".to_vec();
        stream.extend_from_slice(&body);
        stream.extend_from_slice(b"\r\nEND\r\n");
        let chunks: Vec<&[u8]> = stream.chunks(4096).collect();
        assert_eq!(
            scan_all(&chunks).unwrap(),
            vec![Reply::Get {
                hits: 1,
                bytes: 100_000
            }]
        );
    }

    #[test]
    fn partial_line_is_left_unconsumed() {
        let mut s = Scanner::new();
        let mut n = 0;
        assert_eq!(s.scan(b"STORED\r\nST", |_| n += 1), Ok(8));
        assert_eq!(n, 1);
        assert_eq!(s.scan(b"", |_| n += 1), Ok(0));
    }

    #[test]
    fn bad_input() {
        let mut s = Scanner::new();
        assert_eq!(
            s.scan(b"VALUE k 0 x\r\n", |_| {}),
            Err(ScanError::BadValueLine)
        );
        let mut s = Scanner::new();
        assert_eq!(
            s.scan(b"VALUE k 0\r\n", |_| {}),
            Err(ScanError::BadValueLine)
        );
        let mut s = Scanner::new();
        assert_eq!(
            s.scan(&[b'a'; MAX_LINE + 1], |_| {}),
            Err(ScanError::LineTooLong)
        );
    }

    #[test]
    fn value_len_field() {
        assert_eq!(value_len(b"VALUE k 0 32"), Some(32));
        assert_eq!(value_len(b"VALUE k 0 32 12345"), Some(32));
        assert_eq!(value_len(b"VALUE k 0"), None);
    }
}
