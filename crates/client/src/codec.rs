//! Client side of the memcached text protocol, I/O-free: [`Request`] -> bytes and bytes ->
//! [`Reply`]. No sockets, no clock, no async; written so that it can move into mnemo-proto
//! (which today holds only the server side) without change.
//!
//! ```text
//!   Request ──encode──> Encoder { head bytes, borrowed large values } ──io_slices()──> writev
//!   socket bytes ──> ReplyDecoder::decode(buf) ──> Decoded::Done(Reply, consumed)
//!                                               └─> Decoded::Incomplete(total bytes needed)
//!   read buffer  ──> ReplyDecoder::decode_from(&mut BytesMut) ──> Step::Reply / Step::Need
//!                    (values are slices of the buffer, split off as they are decoded)
//! ```
//!
//! The decoder must be told what reply to expect ([`Expect`]): `VALUE ... END`, a stats block and a
//! number all start differently, but `END` alone means "no values" after a get and "no stats"
//! after `stats`, and a line of digits is a value only after incr/decr.

use bytes::Buf;
/// The buffer types of [`ReplyDecoder::decode_from`] and [`Entry::data`].
pub use bytes::{Bytes, BytesMut};
use std::io::IoSlice;

/// Values at least this long are written from the caller's buffer (their own iovec) instead of
/// being copied next to the command line: a copy costs more than an extra iovec past this size.
pub const BORROW_MIN: usize = 16 * 1024;

/// memcached's longest key.
pub const MAX_KEY_LEN: usize = 250;

/// Longest reply line accepted before the stream is declared out of sync.
const MAX_LINE: usize = 64 * 1024;

/// Longest value accepted in a `VALUE` line: memcached's (and mnemod's) largest item size
/// limit (`-I 1024m`). A longer declared length is refused before a buffer grows for it.
pub const MAX_VALUE_LEN: usize = 1024 * 1024 * 1024;

/// memcached refuses command lines past 2048 bytes (get lines too, in mnemod); multi-key
/// retrieval lines are split below this.
pub const MAX_GET_LINE: usize = 2000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCmd {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

impl StoreCmd {
    fn name(self) -> &'static [u8] {
        match self {
            StoreCmd::Set => b"set",
            StoreCmd::Add => b"add",
            StoreCmd::Replace => b"replace",
            StoreCmd::Append => b"append",
            StoreCmd::Prepend => b"prepend",
            StoreCmd::Cas => b"cas",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetrieveCmd {
    Get,
    Gets,
    Gat(i64),
    Gats(i64),
}

/// One classic text-protocol request. Keys are checked by [`check_key`] before they get here.
#[derive(Debug, Clone, Copy)]
pub enum Request<'a> {
    Store {
        cmd: StoreCmd,
        key: &'a [u8],
        flags: u32,
        exptime: i64,
        value: &'a [u8],
        /// Sent only with [`StoreCmd::Cas`].
        cas: u64,
        noreply: bool,
    },
    Retrieve {
        cmd: RetrieveCmd,
        keys: &'a [&'a [u8]],
    },
    Delete {
        key: &'a [u8],
        noreply: bool,
    },
    Incr {
        key: &'a [u8],
        delta: u64,
        noreply: bool,
    },
    Decr {
        key: &'a [u8],
        delta: u64,
        noreply: bool,
    },
    Touch {
        key: &'a [u8],
        exptime: i64,
        noreply: bool,
    },
    FlushAll {
        delay: Option<u32>,
        noreply: bool,
    },
    Version,
    Verbosity {
        level: u32,
        noreply: bool,
    },
    /// `stats` or `stats <arg>`.
    Stats {
        arg: Option<&'a str>,
    },
    /// `lru_crawler metadump all`: one line per item (memcached >= 1.4.31).
    MetadumpAll,
    /// `fget <filter> <arglen> <key>...` and its argument block: run an installed filter over
    /// the keys' values (mnemod only). The filter name follows the key rules ([`check_key`]).
    /// Never split over lines as a retrieval is: one filter call sees all of its keys.
    Fget {
        filter: &'a [u8],
        args: &'a [u8],
        keys: &'a [&'a [u8]],
    },
    Quit,
}

impl Request<'_> {
    /// The reply this request gets, or `None` when the server sends none (noreply, quit).
    pub fn expect(&self) -> Option<Expect> {
        match *self {
            Request::Store { noreply: true, .. }
            | Request::Delete { noreply: true, .. }
            | Request::Incr { noreply: true, .. }
            | Request::Decr { noreply: true, .. }
            | Request::Touch { noreply: true, .. }
            | Request::FlushAll { noreply: true, .. }
            | Request::Verbosity { noreply: true, .. }
            | Request::Quit => None,
            Request::Store { .. } => Some(Expect::Storage),
            Request::Retrieve { cmd, .. } => Some(Expect::Values {
                cas: matches!(cmd, RetrieveCmd::Gets | RetrieveCmd::Gats(_)),
            }),
            // The result comes as one `VALUE <filter> <flags> <len>` block and `END`: the
            // get decoder reads it, with its bounds on lines and declared lengths.
            Request::Fget { .. } => Some(Expect::Values { cas: false }),
            Request::Delete { .. } => Some(Expect::Delete),
            Request::Incr { .. } | Request::Decr { .. } => Some(Expect::Arith),
            Request::Touch { .. } => Some(Expect::Touch),
            Request::FlushAll { .. } | Request::Verbosity { .. } => Some(Expect::Ok),
            Request::Version => Some(Expect::Version),
            Request::Stats { .. } => Some(Expect::Stats),
            Request::MetadumpAll => Some(Expect::Lines),
        }
    }
}

/// A key the text protocol can carry: 1..=250 bytes, no control characters or spaces.
pub fn check_key(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN && key.iter().all(|&b| b > b' ' && b != 0x7f)
}

#[derive(Debug, Clone, Copy)]
enum Part<'a> {
    /// Head bytes up to this offset.
    Head(usize),
    Borrowed(&'a [u8]),
}

/// Encoded requests, ready for one vectored write: command lines and small values are copied
/// into one buffer, large values stay where the caller has them.
#[derive(Debug, Default)]
pub struct Encoder<'a> {
    head: Vec<u8>,
    parts: Vec<Part<'a>>,
}

impl<'a> Encoder<'a> {
    pub fn new() -> Self {
        Encoder {
            head: Vec::with_capacity(256),
            parts: Vec::new(),
        }
    }

    /// Total bytes to write.
    pub fn len(&self) -> usize {
        let borrowed: usize = self
            .parts
            .iter()
            .map(|p| match p {
                Part::Borrowed(v) => v.len(),
                Part::Head(_) => 0,
            })
            .sum();
        self.head.len() + borrowed
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn push_value(&mut self, value: &'a [u8]) {
        if value.len() >= BORROW_MIN {
            self.parts.push(Part::Head(self.head.len()));
            self.parts.push(Part::Borrowed(value));
        } else {
            self.head.extend_from_slice(value);
        }
    }

    fn num(&mut self, n: impl itoa::Integer) {
        let mut b = itoa::Buffer::new();
        self.head.extend_from_slice(b.format(n).as_bytes());
    }

    fn sp(&mut self, s: &[u8]) {
        self.head.push(b' ');
        self.head.extend_from_slice(s);
    }

    fn noreply(&mut self, noreply: bool) {
        if noreply {
            self.head.extend_from_slice(b" noreply");
        }
    }

    /// Append one request.
    pub fn push(&mut self, req: &Request<'a>) {
        let h = &mut self.head;
        match *req {
            Request::Store {
                cmd,
                key,
                flags,
                exptime,
                value,
                cas,
                noreply,
            } => {
                h.extend_from_slice(cmd.name());
                self.sp(key);
                self.head.push(b' ');
                self.num(flags);
                self.head.push(b' ');
                self.num(exptime);
                self.head.push(b' ');
                self.num(value.len());
                if cmd == StoreCmd::Cas {
                    self.head.push(b' ');
                    self.num(cas);
                }
                self.noreply(noreply);
                self.head.extend_from_slice(b"\r\n");
                self.push_value(value);
                self.head.extend_from_slice(b"\r\n");
            }
            Request::Retrieve { cmd, keys } => {
                // One line per MAX_GET_LINE bytes of keys: each line gets its own END, which
                // the caller expects once per line (see `retrieve_lines`).
                for chunk in retrieve_chunks(keys) {
                    let (name, t): (&[u8], Option<i64>) = match cmd {
                        RetrieveCmd::Get => (b"get", None),
                        RetrieveCmd::Gets => (b"gets", None),
                        RetrieveCmd::Gat(t) => (b"gat", Some(t)),
                        RetrieveCmd::Gats(t) => (b"gats", Some(t)),
                    };
                    self.head.extend_from_slice(name);
                    if let Some(t) = t {
                        self.head.push(b' ');
                        self.num(t);
                    }
                    for k in chunk {
                        self.sp(k);
                    }
                    self.head.extend_from_slice(b"\r\n");
                }
            }
            Request::Delete { key, noreply } => {
                h.extend_from_slice(b"delete");
                self.sp(key);
                self.noreply(noreply);
                self.head.extend_from_slice(b"\r\n");
            }
            Request::Incr {
                key,
                delta,
                noreply,
            }
            | Request::Decr {
                key,
                delta,
                noreply,
            } => {
                h.extend_from_slice(if matches!(req, Request::Incr { .. }) {
                    b"incr"
                } else {
                    b"decr"
                });
                self.sp(key);
                self.head.push(b' ');
                self.num(delta);
                self.noreply(noreply);
                self.head.extend_from_slice(b"\r\n");
            }
            Request::Touch {
                key,
                exptime,
                noreply,
            } => {
                h.extend_from_slice(b"touch");
                self.sp(key);
                self.head.push(b' ');
                self.num(exptime);
                self.noreply(noreply);
                self.head.extend_from_slice(b"\r\n");
            }
            Request::FlushAll { delay, noreply } => {
                h.extend_from_slice(b"flush_all");
                if let Some(d) = delay {
                    self.head.push(b' ');
                    self.num(d);
                }
                self.noreply(noreply);
                self.head.extend_from_slice(b"\r\n");
            }
            Request::Version => h.extend_from_slice(b"version\r\n"),
            Request::Verbosity { level, noreply } => {
                h.extend_from_slice(b"verbosity ");
                self.num(level);
                self.noreply(noreply);
                self.head.extend_from_slice(b"\r\n");
            }
            Request::Stats { arg } => {
                h.extend_from_slice(b"stats");
                if let Some(a) = arg {
                    self.sp(a.as_bytes());
                }
                self.head.extend_from_slice(b"\r\n");
            }
            Request::MetadumpAll => h.extend_from_slice(b"lru_crawler metadump all\r\n"),
            Request::Fget { filter, args, keys } => {
                h.extend_from_slice(b"fget");
                self.sp(filter);
                self.head.push(b' ');
                self.num(args.len());
                for k in keys {
                    self.sp(k);
                }
                self.head.extend_from_slice(b"\r\n");
                // The block and its \r\n are sent even when empty: the server always reads it.
                self.push_value(args);
                self.head.extend_from_slice(b"\r\n");
            }
            Request::Quit => h.extend_from_slice(b"quit\r\n"),
        }
    }

    /// The buffers for one `writev`, in order.
    pub fn io_slices(&self) -> Vec<IoSlice<'_>> {
        let mut out = Vec::with_capacity(self.parts.len() + 1);
        let mut start = 0;
        for p in &self.parts {
            match *p {
                Part::Head(end) => {
                    if end > start {
                        out.push(IoSlice::new(&self.head[start..end]));
                    }
                    start = end;
                }
                Part::Borrowed(v) => out.push(IoSlice::new(v)),
            }
        }
        if start < self.head.len() {
            out.push(IoSlice::new(&self.head[start..]));
        }
        out
    }

    /// Everything as one contiguous buffer (tests, small requests).
    pub fn to_vec(&self) -> Vec<u8> {
        self.io_slices()
            .iter()
            .flat_map(|s| s.iter().copied())
            .collect()
    }
}

/// Keys split so that each retrieval line stays under [`MAX_GET_LINE`].
pub fn retrieve_chunks<'k, 'a>(keys: &'k [&'a [u8]]) -> impl Iterator<Item = &'k [&'a [u8]]> {
    let mut rest = keys;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut line = 16; // "gats <exptime>"
        let mut n = 0;
        while n < rest.len() && (n == 0 || line + 1 + rest[n].len() <= MAX_GET_LINE) {
            line += 1 + rest[n].len();
            n += 1;
        }
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        Some(chunk)
    })
}

/// How many `END`-terminated replies a retrieval of these keys produces.
pub fn retrieve_lines(keys: &[&[u8]]) -> usize {
    retrieve_chunks(keys).count()
}

/// What kind of reply the next bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// `VALUE key flags bytes [cas]` blocks ending with `END`.
    Values { cas: bool },
    /// STORED / NOT_STORED / EXISTS / NOT_FOUND.
    Storage,
    /// DELETED / NOT_FOUND.
    Delete,
    /// A number / NOT_FOUND.
    Arith,
    /// TOUCHED / NOT_FOUND.
    Touch,
    /// OK.
    Ok,
    /// `VERSION x`.
    Version,
    /// `STAT name value` lines ending with `END`.
    Stats,
    /// Arbitrary lines ending with `END` (metadump).
    Lines,
}

/// One `VALUE` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: Vec<u8>,
    pub flags: u32,
    pub cas: Option<u64>,
    /// From [`ReplyDecoder::decode_from`], a slice of the connection's read buffer: no copy is
    /// made of it, and the buffer's memory (one read's worth) lives as long as any such slice.
    pub data: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Values(Vec<Entry>),
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    Ok,
    Number(u64),
    Version(String),
    Stats(Vec<(String, String)>),
    Lines(Vec<String>),
    /// `ERROR`, `CLIENT_ERROR ...` or `SERVER_ERROR ...`, or a reply this request cannot get
    /// (`BUSY ...` from the crawler): the whole line.
    Error(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("protocol error: unexpected reply line {0:?}")]
    Unexpected(String),
    #[error("protocol error: reply line longer than {MAX_LINE} bytes")]
    LineTooLong,
    #[error("protocol error: value not followed by \\r\\n")]
    BadDataEnd,
}

/// What [`ReplyDecoder::decode_from`] made of the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// A whole reply; its bytes are gone from the buffer.
    Reply(Reply),
    /// The buffer (what is left of it) must grow to at least this many bytes.
    Need(usize),
}

#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// A whole reply and the bytes it took from the start of the buffer.
    Done(Reply, usize),
    /// The buffer must grow to at least this many bytes before anything new can be decoded.
    Incomplete(usize),
}

/// Decodes one reply, resumably: bytes already examined are not looked at again when more
/// arrive (a multi-get of thousands of values is decoded in one pass, however it is split).
/// The buffer given to successive calls must keep its first bytes until `Done`.
#[derive(Debug)]
pub struct ReplyDecoder {
    expect: Expect,
    pos: usize,
    values: Vec<Entry>,
    /// Under `decode_from`: values whose data is still to be cut from the buffer, as (index in
    /// `values`, start, end) of the buffer given to this call.
    spans: Vec<(usize, usize, usize)>,
    shared: bool,
    stats: Vec<(String, String)>,
    lines: Vec<String>,
    /// A line of this reply has been decoded: `pos` alone cannot say, as `decode_from` drops
    /// decoded bytes from the buffer mid-reply.
    begun: bool,
}

impl ReplyDecoder {
    pub fn new(expect: Expect) -> Self {
        ReplyDecoder {
            expect,
            pos: 0,
            values: Vec::new(),
            spans: Vec::new(),
            shared: false,
            stats: Vec::new(),
            lines: Vec::new(),
            begun: false,
        }
    }

    /// Start on a new reply.
    pub fn reset(&mut self, expect: Expect) {
        self.expect = expect;
        self.pos = 0;
        self.values.clear();
        self.spans.clear();
        self.stats.clear();
        self.lines.clear();
        self.begun = false;
    }

    /// Decode from a read buffer, taking what is decoded out of it: values become slices of
    /// the buffer (no copy), and bytes already decoded into a reply still in progress leave the
    /// buffer too, so a multi-get needs a buffer the size of one value, not of the whole reply.
    pub fn decode_from(&mut self, buf: &mut BytesMut) -> Result<Step, CodecError> {
        self.shared = true;
        let decoded = self.decode(&buf[..]);
        self.shared = false;
        match decoded? {
            Decoded::Done(mut reply, used) => {
                let chunk = buf.split_to(used).freeze();
                if let Reply::Values(v) = &mut reply {
                    Self::cut(&mut self.spans, v, &chunk);
                }
                Ok(Step::Reply(reply))
            }
            Decoded::Incomplete(need) => {
                let used = std::mem::take(&mut self.pos);
                if self.spans.is_empty() {
                    buf.advance(used);
                } else {
                    let chunk = buf.split_to(used).freeze();
                    Self::cut(&mut self.spans, &mut self.values, &chunk);
                }
                Ok(Step::Need(need - used))
            }
        }
    }

    fn cut(spans: &mut Vec<(usize, usize, usize)>, values: &mut [Entry], chunk: &Bytes) {
        for (i, start, end) in spans.drain(..) {
            values[i].data = chunk.slice(start..end);
        }
    }

    fn done(&mut self, reply: Reply) -> Decoded {
        let used = self.pos;
        self.pos = 0;
        self.begun = false;
        Decoded::Done(reply, used)
    }

    pub fn decode(&mut self, buf: &[u8]) -> Result<Decoded, CodecError> {
        loop {
            let rest = &buf[self.pos..];
            let Some(nl) = memchr::memchr(b'\n', rest) else {
                if rest.len() > MAX_LINE {
                    return Err(CodecError::LineTooLong);
                }
                return Ok(Decoded::Incomplete(buf.len() + 1));
            };
            if nl > MAX_LINE {
                // As without the newline: whether a line is too long must not depend on the
                // reads it arrived in.
                return Err(CodecError::LineTooLong);
            }
            let line_end = self.pos + nl + 1;
            let line = &rest[..nl];
            let line = line.strip_suffix(b"\r").unwrap_or(line);

            if let Some(err) = error_line(line) {
                // An error ends whatever was in progress.
                self.pos = line_end;
                return Ok(self.done(Reply::Error(err)));
            }
            match self.expect {
                Expect::Values { cas } => {
                    if line == b"END" {
                        self.pos = line_end;
                        let v = std::mem::take(&mut self.values);
                        return Ok(self.done(Reply::Values(v)));
                    }
                    let (key, flags, len, c) = parse_value_line(line, cas)?;
                    let data_end = line_end + len;
                    if buf.len() < data_end + 2 {
                        return Ok(Decoded::Incomplete(data_end + 2));
                    }
                    if &buf[data_end..data_end + 2] != b"\r\n" {
                        return Err(CodecError::BadDataEnd);
                    }
                    let data = if self.shared {
                        self.spans.push((self.values.len(), line_end, data_end));
                        Bytes::new()
                    } else {
                        Bytes::copy_from_slice(&buf[line_end..data_end])
                    };
                    self.values.push(Entry {
                        key: key.to_vec(),
                        flags,
                        cas: c,
                        data,
                    });
                    self.pos = data_end + 2;
                }
                Expect::Stats => {
                    self.pos = line_end;
                    if line == b"END" {
                        let s = std::mem::take(&mut self.stats);
                        return Ok(self.done(Reply::Stats(s)));
                    }
                    let l = String::from_utf8_lossy(line);
                    let Some(rest) = l.strip_prefix("STAT ") else {
                        return Err(CodecError::Unexpected(l.into_owned()));
                    };
                    let (k, v) = rest.split_once(' ').unwrap_or((rest, ""));
                    self.stats.push((k.to_owned(), v.to_owned()));
                }
                Expect::Lines => {
                    let first_line = !std::mem::replace(&mut self.begun, true);
                    self.pos = line_end;
                    if line == b"END" {
                        let l = std::mem::take(&mut self.lines);
                        return Ok(self.done(Reply::Lines(l)));
                    }
                    if line.starts_with(b"BUSY") {
                        let l = String::from_utf8_lossy(line).into_owned();
                        return Ok(self.done(Reply::Error(l)));
                    }
                    // memcached 1.6.43 (and mnemod) open a dump with OK: not a dump line.
                    // Only the reply's first line: a second OK is a line of the dump.
                    if line == b"OK" && first_line {
                        continue;
                    }
                    self.lines.push(String::from_utf8_lossy(line).into_owned());
                }
                single => {
                    self.pos = line_end;
                    let reply = match (single, line) {
                        (Expect::Storage, b"STORED") => Reply::Stored,
                        (Expect::Storage, b"NOT_STORED") => Reply::NotStored,
                        (Expect::Storage, b"EXISTS") => Reply::Exists,
                        (Expect::Delete, b"DELETED") => Reply::Deleted,
                        (Expect::Touch, b"TOUCHED") => Reply::Touched,
                        (Expect::Ok, b"OK") => Reply::Ok,
                        (
                            Expect::Storage | Expect::Delete | Expect::Touch | Expect::Arith,
                            b"NOT_FOUND",
                        ) => Reply::NotFound,
                        (Expect::Arith, digits) => match parse_u64(digits) {
                            Some(n) => Reply::Number(n),
                            None => return Err(unexpected(line)),
                        },
                        (Expect::Version, l) if l.starts_with(b"VERSION ") => {
                            Reply::Version(String::from_utf8_lossy(&l[8..]).into_owned())
                        }
                        _ => return Err(unexpected(line)),
                    };
                    return Ok(self.done(reply));
                }
            }
        }
    }
}

fn unexpected(line: &[u8]) -> CodecError {
    CodecError::Unexpected(String::from_utf8_lossy(line).into_owned())
}

fn error_line(line: &[u8]) -> Option<String> {
    if line == b"ERROR"
        || line.starts_with(b"ERROR ")
        || line.starts_with(b"CLIENT_ERROR")
        || line.starts_with(b"SERVER_ERROR")
    {
        Some(String::from_utf8_lossy(line).into_owned())
    } else {
        None
    }
}

fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// A `VALUE` line's key, flags, data length and cas.
type ValueLine<'a> = (&'a [u8], u32, usize, Option<u64>);

fn parse_value_line(line: &[u8], cas: bool) -> Result<ValueLine<'_>, CodecError> {
    let mut it = line.split(|&b| b == b' ');
    let bad = || unexpected(line);
    if it.next() != Some(b"VALUE") {
        return Err(bad());
    }
    let key = it.next().filter(|k| !k.is_empty()).ok_or_else(bad)?;
    let flags = it
        .next()
        .and_then(parse_u64)
        .and_then(|f| u32::try_from(f).ok())
        .ok_or_else(bad)?;
    let len = it
        .next()
        .and_then(parse_u64)
        .and_then(|l| usize::try_from(l).ok())
        .filter(|&l| l <= MAX_VALUE_LEN)
        .ok_or_else(bad)?;
    let c = match it.next() {
        Some(c) => Some(parse_u64(c).ok_or_else(bad)?),
        None if cas => return Err(bad()),
        None => None,
    };
    if it.next().is_some() {
        return Err(bad());
    }
    Ok((key, flags, len, c))
}

#[cfg(test)]
mod tests;
