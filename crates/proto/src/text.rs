//! The classic text protocol, server side: bytes in, [`Request`] out, with memcached 1.6's
//! exact dispatch and validation rules (which token counts each command takes, which number
//! parser reads each field, which error line each mistake earns).
//!
//! The parser never allocates and never blocks. It looks at the connection's buffered input
//! and says one of:
//!
//! ```text
//!   Parsed::Request(req, n)   a whole request (line + data block) is in buf[..n]
//!   Parsed::Incomplete(need)  buffer at least `need` bytes in total, then call again
//!   Parsed::Error{..}         consume n bytes, reply with memcached's error line (unless noreply)
//!   Parsed::Close             memcached drops the connection here (runaway line, HTTP request)
//! ```
//!
//! A line ends at `\n`; a `\r` before it is dropped unless the line is only `\r` (memcached
//! does the same). A storage command's data block is checked against the item size limit
//! *before* anything is buffered, so a client announcing 4 GB makes the server allocate nothing.

use crate::num::{parse_i32, parse_u32_flags, parse_u64, tok_i32, tok_u32, tok_u64};
use crate::reply::ErrorReply;
use crate::tokens::{Tokens, MAX_TOKENS};

pub use crate::request::{
    Automove, KeyIter, Keys, Limits, Parsed, Request, ShutdownMode, StoreKind, FGET_ARG_MAX,
    GET_LINE_MAX, KEY_MAX, LINE_MAX,
};

/// Parse one request from the front of `buf`.
pub fn parse<'a>(buf: &'a [u8], limits: &Limits) -> Parsed<'a> {
    let Some(nl) = memchr::memchr(b'\n', buf) else {
        return no_newline_yet(buf);
    };
    let mut line = &buf[..nl];
    if line.len() > 1 && line[line.len() - 1] == b'\r' {
        line = &line[..line.len() - 1];
    }
    command(line, nl + 1, buf, limits)
}

/// memcached waits for more input unless 2048 bytes arrived without a newline; then only a
/// multi-get (after at most 100 leading spaces) may keep growing. mnemo's `fget` is a
/// multi-key line too, but only while it still can be one (see [`could_be_fget`]); any
/// other line closes there, as in memcached, which knows no `fget`.
fn no_newline_yet(buf: &[u8]) -> Parsed<'_> {
    if buf.len() <= LINE_MAX {
        return Parsed::Incomplete(buf.len() + 1);
    }
    let spaces = buf.iter().take_while(|&&b| b == b' ').count();
    let rest = &buf[spaces..];
    let is_get = rest.starts_with(b"get ") || rest.starts_with(b"gets ") || could_be_fget(rest);
    if spaces > 100 || !is_get || buf.len() > GET_LINE_MAX {
        return Parsed::Close;
    }
    Parsed::Incomplete(buf.len() + 1)
}

/// The start of `fget <filter> <arglen> <key>*` with no word longer than a key and a
/// numeric length: a line that is anything else cannot become a valid fget, so it is not
/// held past LINE_MAX waiting for its newline.
fn could_be_fget(line: &[u8]) -> bool {
    let Some(rest) = line.strip_prefix(b"fget ") else {
        return false;
    };
    let mut words = rest.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let filter = words.next().is_none_or(|w| w.len() <= KEY_MAX);
    let arglen = words
        .next()
        .is_none_or(|w| w.len() <= 20 && w.iter().all(u8::is_ascii_digit));
    filter && arglen && words.all(|w| w.len() <= KEY_MAX)
}

fn err<'a>(reply: ErrorReply, consumed: usize, noreply: bool) -> Parsed<'a> {
    Parsed::Error {
        reply,
        consumed,
        noreply,
    }
}

fn req(r: Request<'_>, consumed: usize) -> Parsed<'_> {
    Parsed::Request(r, consumed)
}

/// memcached 1.6.40's dispatch (proto_parser.c's `process_request`): the command is the line's
/// bytes up to its first space, so a line starting with a space names no command; a command
/// missing some of its words is "CLIENT_ERROR bad command line format" (1.6.39 and before:
/// "ERROR"). Commands outside that table (the admin ones) are then looked up by their first
/// word, and for them and for an unknown command a last `noreply` silences every reply.
fn command<'a>(line: &'a [u8], after: usize, buf: &'a [u8], limits: &Limits) -> Parsed<'a> {
    if let Some(p) = fast_get(line, after) {
        return p;
    }
    // A line shorter than 4 bytes with its newline (a blank line, `x\r\n`) is malformed
    // before any word is read.
    if after < 4 {
        return err(ErrorReply::BadFormat, after, false);
    }
    let t = Tokens::split(line);
    let n = t.n;
    let word = match memchr::memchr(b' ', line) {
        Some(i) => &line[..i],
        None => line,
    };
    let bad = |noreply| err(ErrorReply::BadFormat, after, noreply);
    match word {
        b"get" | b"gets" => {
            if n < 2 {
                return bad(false);
            }
            get_family(word, line, None, after)
        }
        b"gat" | b"gats" => {
            if n < 3 {
                return bad(false);
            }
            let Some(exptime) = tok_i32(t.get(1)) else {
                return err(ErrorReply::BadExptime, after, false);
            };
            get_family(word, line, Some((t.get(1), exptime)), after)
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            if n < 5 {
                return bad(false);
            }
            let kind = match word {
                b"set" => StoreKind::Set,
                b"add" => StoreKind::Add,
                b"replace" => StoreKind::Replace,
                b"append" => StoreKind::Append,
                b"prepend" => StoreKind::Prepend,
                _ => StoreKind::Cas,
            };
            storage(kind, &t, after, buf, limits)
        }
        b"incr" | b"decr" => {
            if n < 3 {
                return bad(false);
            }
            let (noreply, key) = (t.noreply(), t.get(1));
            if key.len() > KEY_MAX {
                return bad(noreply);
            }
            match tok_u64(t.get(2)) {
                Some(delta) => req(
                    Request::Delta {
                        key,
                        incr: word == b"incr",
                        delta,
                        noreply,
                    },
                    after,
                ),
                None => err(ErrorReply::BadDelta, after, noreply),
            }
        }
        // Whatever follows the key is ignored (1.6.18 checked the old hold-time form).
        b"delete" => {
            if n < 2 {
                return bad(false);
            }
            let (noreply, key) = (t.noreply(), t.get(1));
            if key.len() > KEY_MAX {
                return bad(noreply);
            }
            req(Request::Delete { key, noreply }, after)
        }
        b"touch" => {
            if n < 3 {
                return bad(false);
            }
            let (noreply, key) = (t.noreply(), t.get(1));
            if key.len() > KEY_MAX {
                return bad(noreply);
            }
            match tok_i32(t.get(2)) {
                Some(exptime) => req(
                    Request::Touch {
                        key,
                        exptime,
                        noreply,
                    },
                    after,
                ),
                None => err(ErrorReply::BadExptime, after, noreply),
            }
        }
        // Meta no-op: answered whatever follows (clients use it to end a batch).
        b"mn" => req(Request::MetaNoop, after),
        b"mg" | b"ms" | b"md" | b"ma" | b"me" => crate::meta::command(&t, after, buf, limits),
        b"version" => req(Request::Version, after),
        b"quit" => req(Request::Quit, after),
        b"stats" => req(
            Request::Stats {
                args: Keys::new(skip_token(line, word)),
            },
            after,
        ),
        _ => admin(&t, line, after, buf),
    }
}

/// The commands memcached 1.6.40 finds by their first word after its parser's table (so a
/// leading space is allowed), and the unknown ones. A last `noreply` silences all their
/// replies, errors and a plain "ERROR" included.
fn admin<'a>(t: &Tokens<'a>, line: &'a [u8], after: usize, buf: &'a [u8]) -> Parsed<'a> {
    let (n, cmd, noreply) = (t.n, t.get(0), t.noreply());
    match cmd {
        b"flush_all" => {
            let mut delay = 0;
            if n != if noreply { 2 } else { 1 } {
                match tok_i32(t.get(1)) {
                    Some(d) => delay = d,
                    None => return err(ErrorReply::BadExptime, after, noreply),
                }
            }
            req(Request::FlushAll { delay, noreply }, after)
        }
        // A bad number is a plain ERROR here.
        b"cache_memlimit" => match tok_u32(t.get(1)) {
            Some(mb) if n > 1 => req(
                Request::CacheMemlimit {
                    megabytes: u64::from(mb),
                    noreply,
                },
                after,
            ),
            _ => err(ErrorReply::Error, after, noreply),
        },
        b"refresh_certs" => req(Request::RefreshCerts { noreply }, after),
        b"verbosity" => match tok_u32(t.get(1)) {
            Some(level) if n > 1 => req(Request::Verbosity { level, noreply }, after),
            _ => err(ErrorReply::BadFormat, after, noreply),
        },
        // memcached 1.6.40 counts a last `noreply` as one more word: these two commands then
        // match none of their forms, and the error is silenced (nothing done, nothing said).
        b"shutdown" | b"lru_crawler" if noreply => err(ErrorReply::Error, after, true),
        // The mode is judged only after shutdown is known to be enabled (by the executor).
        b"shutdown" => {
            let mode = match n {
                1 => ShutdownMode::Immediate,
                2 if prefix_of(t.get(1), b"graceful") => ShutdownMode::Graceful,
                _ => ShutdownMode::Invalid,
            };
            req(Request::Shutdown { mode }, after)
        }
        b"lru_crawler" => req(
            Request::LruCrawler {
                args: Keys::new(skip_token(line, cmd)),
            },
            after,
        ),
        b"slabs" => slabs(t, after),
        b"watch" => req(
            Request::Watch {
                args: Keys::new(skip_token(line, cmd)),
            },
            after,
        ),
        // memcached: a bare `extstore` is an ERROR, noreply or not.
        b"extstore" => {
            if n < 2 {
                return err(ErrorReply::Error, after, false);
            }
            req(
                Request::Extstore {
                    args: Keys::new(skip_token(line, cmd)),
                    noreply,
                },
                after,
            )
        }
        b"fget" => {
            if n < 3 {
                return err(ErrorReply::Error, after, false);
            }
            fget(line, after, buf)
        }
        _ => {
            // memcached closes on what looks like an HTTP request line.
            if n > 1 && t.get(n - 1).starts_with(b"HTTP/") {
                return Parsed::Close;
            }
            err(ErrorReply::Error, after, noreply)
        }
    }
}

/// memcached compares a subcommand with `strncmp(word, name, len(word))`: any prefix of the
/// name (`slabs r 1 2` is a reassign) names it.
fn prefix_of(word: &[u8], name: &[u8]) -> bool {
    !word.is_empty() && name.starts_with(word)
}

/// The hot path: a plain `get`/`gets` line, parsed in one pass over its keys (memchr for the
/// spaces) without the general tokenizer. A NUL is a key byte like any other (memcached
/// 1.6.40; 1.6.39 and before ended the line there).
fn fast_get(line: &[u8], after: usize) -> Option<Parsed<'_>> {
    let (rest, cas) = if let Some(r) = line.strip_prefix(b"get ") {
        (r, false)
    } else {
        (line.strip_prefix(b"gets ")?, true)
    };
    let (mut any, mut too_long, mut spaced) = (false, false, false);
    let mut start = 0;
    for end in memchr::memchr_iter(b' ', rest).chain(std::iter::once(rest.len())) {
        spaced |= end < rest.len();
        let len = end - start;
        too_long |= len > KEY_MAX;
        any |= len > 0;
        start = end + 1;
    }
    if !any {
        // memcached 1.6.40: a get needs a key.
        return Some(err(ErrorReply::BadFormat, after, false));
    }
    if too_long {
        return Some(err(ErrorReply::BadKeyInGet, after, false));
    }
    Some(req(
        Request::Get {
            keys: Keys {
                bytes: rest,
                one: !spaced,
            },
            cas,
            touch: None,
        },
        after,
    ))
}

/// The line after its first token (the command), NUL-truncated like memcached's C string.
fn skip_token<'a>(line: &'a [u8], cmd: &[u8]) -> &'a [u8] {
    let line = match memchr::memchr(0, line) {
        Some(p) => &line[..p],
        None => line,
    };
    let start = line.iter().position(|&b| b != b' ').unwrap_or(line.len());
    &line[(start + cmd.len()).min(line.len())..]
}

/// The keys of a get-family line: after the command, or for gat/gats after the exptime
/// token (`exptime`: that token and its value).
fn get_family<'a>(
    cmd: &'a [u8],
    line: &'a [u8],
    exptime: Option<(&'a [u8], i32)>,
    after: usize,
) -> Parsed<'a> {
    let cas = cmd.ends_with(b"s");
    let (rest, touch) = match exptime {
        // Keys start after the exptime token.
        Some((tok, e)) => (
            &line[tok.as_ptr() as usize - line.as_ptr() as usize + tok.len()..],
            Some(e),
        ),
        None => (&line[cmd.len()..], None),
    };
    let keys = Keys::new(rest);
    if keys.iter().any(|k| k.len() > KEY_MAX) {
        return err(ErrorReply::BadKeyInGet, after, false);
    }
    req(Request::Get { keys, cas, touch }, after)
}

/// A storage command's line, checked: what its data block is for and where it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreHead<'a> {
    pub kind: StoreKind,
    pub key: &'a [u8],
    pub flags: u32,
    pub exptime: i32,
    /// The compared CAS of `cas` (0 for the others).
    pub cas: u64,
    pub noreply: bool,
    /// Offset of the data block in the buffer (just past the line).
    pub data_at: usize,
    /// Length of the data block without its "\r\n".
    pub len: usize,
}

/// Commands whose first argument is a key that they look up (see [`lookup_key`]).
const KEY_FIRST: [&[u8]; 7] = [
    b"get ", b"gets ", b"mg ", b"set ", b"ms ", b"delete ", b"md ",
];

/// Where the key that the request at the start of `buf` looks up first sits in `buf`, without
/// parsing the request: a hint for prefetching its lookup before [`parse`] runs (the request
/// may still turn out invalid). None for other commands, a key not yet whole, or one longer
/// than [`KEY_MAX`].
pub fn lookup_key(buf: &[u8]) -> Option<core::ops::Range<usize>> {
    let rest = KEY_FIRST.iter().find_map(|cmd| buf.strip_prefix(*cmd))?;
    let len = rest
        .iter()
        .take(KEY_MAX + 1)
        .position(|&b| b == b' ' || b == b'\r' || b == b'\n')?;
    let start = buf.len() - rest.len();
    Some(start..start + len)
}

/// The buffer holds a valid storage command's whole line but not all of its data block (what
/// [`parse`] answers with `Incomplete`): the line's fields, so that a server can read a large
/// block straight to where it will be stored instead of buffering it. None in every other
/// case, including a line [`parse`] refuses or a block too large for the item limit.
pub fn pending_store<'a>(buf: &'a [u8], limits: &Limits) -> Option<StoreHead<'a>> {
    let nl = memchr::memchr(b'\n', buf)?;
    let mut line = &buf[..nl];
    if line.len() > 1 && line[line.len() - 1] == b'\r' {
        line = &line[..line.len() - 1];
    }
    // A leading space names no command (see `command`).
    if line.first() == Some(&b' ') {
        return None;
    }
    let t = Tokens::split(line);
    let kind = match t.get(0) {
        b"set" => StoreKind::Set,
        b"add" => StoreKind::Add,
        b"replace" => StoreKind::Replace,
        b"append" => StoreKind::Append,
        b"prepend" => StoreKind::Prepend,
        b"cas" => StoreKind::Cas,
        _ => return None,
    };
    if t.n < 5 {
        return None;
    }
    let head = storage_head(kind, &t, nl + 1).ok()?;
    let fits = limits.item_fits(head.key.len(), head.flags, head.len);
    (fits && buf.len() < head.data_at + head.len + 2).then_some(head)
}

/// Why a storage line is refused ("CLIENT_ERROR bad command line format").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreLineError {
    /// The data length is missing or bad: nothing is swallowed, and `noreply` is not read
    /// yet (memcached 1.6.40's parser checks the length first).
    Length,
    /// Key, flags, exptime or CAS: the data block of the valid length is swallowed.
    Fields { noreply: bool, len: usize },
}

/// memcached 1.6.40's storage checks, in its order, before the item size and any data are
/// looked at: the data length (its strict reader), then `noreply`, the key's length, the
/// flags and exptime (still read with `strtoul`/`strtol`), the CAS (strict again).
#[inline]
fn storage_head<'a>(
    kind: StoreKind,
    t: &Tokens<'a>,
    after: usize,
) -> Result<StoreHead<'a>, StoreLineError> {
    let Some(vlen) = tok_i32(t.get(4)).filter(|v| (0..=i32::MAX - 2).contains(v)) else {
        return Err(StoreLineError::Length);
    };
    let (noreply, len) = (t.noreply(), vlen as usize);
    let refused = StoreLineError::Fields { noreply, len };
    let key = t.get(1);
    if key.len() > KEY_MAX {
        return Err(refused);
    }
    let (Some(flags), Some(exptime)) = (parse_u32_flags(t.get(2)), parse_i32(t.get(3))) else {
        return Err(refused);
    };
    let mut cas = 0;
    if kind == StoreKind::Cas {
        cas = if t.n > 5 { tok_u64(t.get(5)) } else { None }.ok_or(refused)?;
    }
    Ok(StoreHead {
        kind,
        key,
        flags,
        exptime,
        cas,
        noreply,
        data_at: after,
        len,
    })
}

/// memcached's storage command: the line's checks, then its data-block checks.
fn storage<'a>(
    kind: StoreKind,
    t: &Tokens<'a>,
    after: usize,
    buf: &'a [u8],
    limits: &Limits,
) -> Parsed<'a> {
    let h = match storage_head(kind, t, after) {
        Ok(h) => h,
        Err(StoreLineError::Length) => return err(ErrorReply::BadFormat, after, false),
        Err(StoreLineError::Fields { noreply, len }) => {
            return req(
                Request::BadStoreLine {
                    swallow: len + 2,
                    reply: ErrorReply::BadFormat,
                    noreply,
                },
                after,
            )
        }
    };
    if !limits.item_fits(h.key.len(), h.flags, h.len) {
        return req(
            Request::TooLarge {
                kind,
                key: h.key,
                swallow: h.len + 2,
                noreply: h.noreply,
            },
            after,
        );
    }
    let end = after + h.len + 2;
    if buf.len() < end {
        return Parsed::Incomplete(end);
    }
    if &buf[end - 2..end] != b"\r\n" {
        return err(ErrorReply::BadDataChunk, end, h.noreply);
    }
    let data = &buf[after..end - 2];
    let StoreHead {
        key,
        flags,
        exptime,
        cas,
        noreply,
        ..
    } = h;
    req(
        Request::Store {
            kind,
            key,
            flags,
            exptime,
            data,
            cas,
            noreply,
        },
        end,
    )
}

/// memcached 1.6.40's `process_slabs_command`: `reassign` takes exactly two ids (its strict
/// signed reader); `automove` takes a level or `ratio <r>`; subcommands may be abbreviated.
/// A last `noreply` silences every reply. Which ids exist is the executor's business (it
/// depends on the server's flags).
fn slabs<'a>(t: &Tokens<'a>, after: usize) -> Parsed<'a> {
    let (n, sub, noreply) = (t.n, t.get(1), t.noreply());
    if n == 4 && prefix_of(sub, b"reassign") {
        return match (tok_i32(t.get(2)), tok_i32(t.get(3))) {
            (Some(src), Some(dst)) => req(Request::SlabsReassign { src, dst }, after),
            _ => err(ErrorReply::BadFormat, after, noreply),
        };
    }
    if !(n >= 3 && prefix_of(sub, b"automove")) {
        return err(ErrorReply::Error, after, noreply);
    }
    // A bad or missing ratio is a plain ERROR, not a format error. memcached copies the
    // ratio into a 32-byte buffer: a longer token is refused.
    let ratio = || parse_strtod(t.get(3)).filter(|_| t.get(3).len() < 32 && n >= 4);
    let setting = if prefix_of(t.get(2), b"ratio") {
        match ratio() {
            Some(r) => Automove::Ratio(r.to_bits()),
            None => return err(ErrorReply::Error, after, noreply),
        }
    } else if prefix_of(t.get(2), b"freeratio") {
        match ratio() {
            Some(r) => Automove::FreeRatio(r.to_bits()),
            None => return err(ErrorReply::Error, after, noreply),
        }
    } else if prefix_of(t.get(2), b"window") {
        match tok_u32(t.get(3)).filter(|_| n >= 4) {
            Some(w @ 3..=1800) => Automove::Window(w),
            Some(_) => return err(ErrorReply::AutomoveWindow, after, noreply),
            None => return err(ErrorReply::BadFormat, after, noreply),
        }
    } else {
        match tok_u32(t.get(2)) {
            Some(level @ 0..=2) => Automove::Level(level),
            Some(_) => return err(ErrorReply::Error, after, noreply),
            None => return err(ErrorReply::BadFormat, after, noreply),
        }
    };
    req(Request::SlabsAutomove { setting, noreply }, after)
}

/// memcached's `safe_strtod` on one token: a decimal float (or inf / nan); an overflow or
/// underflow (C's ERANGE) is refused. C's hexadecimal floats ("0x10") are not read: Rust's
/// parser has none, and nothing but this one tuning knob takes a float.
fn parse_strtod(tok: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(tok).ok()?;
    let v: f64 = s.parse().ok()?;
    let lower = s.to_ascii_lowercase();
    let overflow = v.is_infinite() && !lower.contains("inf");
    let mantissa = lower.split('e').next().unwrap_or("");
    let underflow =
        (v == 0.0 && mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b))) || v.is_subnormal();
    (!overflow && !underflow).then_some(v)
}

/// `fget <filter> <arglen> <key>*` and its argument block. Keys are not tokenized (there may
/// be thousands, like a multi-get's); the block is bounded before anything is buffered.
fn fget<'a>(line: &'a [u8], after: usize, buf: &'a [u8]) -> Parsed<'a> {
    let mut rest = skip_token(line, b"fget");
    let mut word = || {
        let start = rest.iter().position(|&b| b != b' ').unwrap_or(rest.len());
        let len = rest[start..]
            .iter()
            .position(|&b| b == b' ')
            .unwrap_or(rest.len() - start);
        let w = &rest[start..start + len];
        rest = &rest[start + len..];
        w
    };
    let (filter, arglen) = (word(), word());
    // Unlike memcached's lengths, no 32-bit truncation: 4294967296 is not 0.
    let Some(arglen) = parse_u64(arglen)
        .filter(|&n| n <= i32::MAX as u64)
        .map(|n| n as usize)
    else {
        return err(ErrorReply::BadFormat, after, false);
    };
    if arglen > FGET_ARG_MAX {
        return req(
            Request::FgetArgsTooLong {
                swallow: arglen + 2,
            },
            after,
        );
    }
    let end = after + arglen + 2;
    if buf.len() < end {
        return Parsed::Incomplete(end);
    }
    if &buf[end - 2..end] != b"\r\n" {
        return err(ErrorReply::BadDataChunk, end, false);
    }
    let keys = Keys::new(rest);
    if filter.len() > KEY_MAX || keys.iter().any(|k| k.len() > KEY_MAX) {
        return err(ErrorReply::BadFormat, end, false);
    }
    req(
        Request::Fget {
            filter,
            args: &buf[after..end - 2],
            keys,
        },
        end,
    )
}

const _: () = assert!(MAX_TOKENS == 24);

#[cfg(test)]
mod tests;
