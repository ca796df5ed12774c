//! The meta commands (`mg ms md ma me`; `mn` lives in the text dispatcher), parsed with
//! memcached 1.6.45's rules (doc/protocol.txt; docs/compatibility.md lists what changed since
//! 1.6.18: the E and x flags, M's token length): a key, then one-letter flags, some carrying a token
//! (`T30`, `Oabc`). Flags to return are kept in the order the client gave them, because
//! replies echo them in that order.
//!
//! Validation follows memcached's order (unchanged from 1.6.18 to 1.6.45): a line of more than 20 tokens is refused
//! outright ("options flags [are] too long"); then the flags are read in one pass, each checked
//! in turn for being a repeat, a letter memcached knows and a well-formed token, so the first
//! bad flag decides the error. `md` and `ma` report every flag problem as "invalid or
//! duplicate flag", `mg` and `ms` have a message per problem.

use base64::Engine;

use crate::num::{tok_i32, tok_u32, tok_u64};
use crate::reply::ErrorReply;
use crate::request::{Limits, Parsed, Request, KEY_MAX};
use crate::tokens::Tokens;

pub use crate::request::{KeyBuf, Meta, MetaFlags, MetaKind, OPAQUE_MAX};

/// Letters memcached accepts on mg, ms, md and ma alike (each command uses some and silently
/// ignores the rest).
fn known(letter: u8) -> bool {
    // E and x: memcached 1.6.27.
    b"bqukOcfhlstvxILPCENRTDFJM".contains(&letter)
}

/// memcached's MFLAG_MAX_OPT_LENGTH: a meta command line of more tokens (1.6.40 counts the
/// real ones; 1.6.39 and before counted a terminal empty token too, so 19 was the most) is
/// refused before any flag is read.
const MAX_META_TOKENS: usize = 20;

/// memcached 1.6.40's tokenizer refuses a meta line outright when a flag token starts with
/// anything but a letter (A to z in ASCII) or a digit.
fn flag_start_ok(tok: &[u8]) -> bool {
    matches!(tok[0], 65..=122 | b'0'..=b'9')
}

/// The error for a problem found while reading the flags: `ma` reports them all as "invalid
/// or duplicate flag" (memcached 1.6.40 still does); the others have a message per problem
/// (`md` since 1.6.40).
fn flag_error(kind: MetaKind, specific: ErrorReply) -> ErrorReply {
    match kind {
        MetaKind::Arith => ErrorReply::InvalidOrDuplicateFlag,
        _ => specific,
    }
}

/// A flag's token after its letter, read as memcached 1.6.40 reads it: not empty, then its
/// strict number reader.
fn flag_arg<T>(arg: &[u8], read: fn(&[u8]) -> Option<T>) -> Option<T> {
    if arg.is_empty() {
        return None;
    }
    read(arg)
}

/// Parse the flags (tokens from index `first`) of a meta command: memcached's preparse, in
/// its order (key length, token count, then each flag in turn).
fn parse_flags<'a>(
    kind: MetaKind,
    t: &Tokens<'a>,
    first: usize,
) -> Result<MetaFlags<'a>, ErrorReply> {
    if t.get(1).len() > KEY_MAX {
        return Err(flag_error(kind, ErrorReply::BadFormat));
    }
    if t.n > MAX_META_TOKENS {
        return Err(flag_error(kind, ErrorReply::GetFlagsTooLong));
    }
    let mut f = MetaFlags::default();
    let mut seen = [false; 128];
    for i in first..t.n {
        let tok = t.get(i);
        let letter = tok[0];
        let arg = &tok[1..];
        // memcached counts a byte of 127 or more as a repeat.
        if letter >= 127 || seen[letter as usize] {
            return Err(flag_error(kind, ErrorReply::DuplicateFlag));
        }
        seen[letter as usize] = true;
        if !known(letter) {
            return Err(flag_error(kind, ErrorReply::InvalidFlag));
        }
        let bad = |e| Err(flag_error(kind, e));
        match letter {
            b'b' => f.base64 = true,
            b'q' => f.quiet = true,
            b'I' => f.invalidate = true,
            b'x' => f.remove_value = true,
            b'N' | b'T' | b'R' => {
                let Some(v) = flag_arg(arg, tok_i32) else {
                    return bad(ErrorReply::BadToken);
                };
                match letter {
                    b'N' => f.vivify = Some(v),
                    b'T' => f.ttl = Some(v),
                    _ => f.recache = Some(v),
                }
            }
            b'C' => match flag_arg(arg, tok_u64) {
                Some(v) => f.compare_cas = Some(v),
                None => return bad(ErrorReply::BadToken),
            },
            b'E' => match flag_arg(arg, tok_u64) {
                Some(v) => f.cas_in = Some(v),
                None => return bad(ErrorReply::BadToken),
            },
            b'D' => match flag_arg(arg, tok_u64) {
                Some(v) => f.delta = Some(v),
                None => return bad(ErrorReply::BadDeltaValue),
            },
            b'J' => match flag_arg(arg, tok_u64) {
                Some(v) => f.initial = Some(v),
                None => return bad(ErrorReply::BadInitialValue),
            },
            b'F' => match flag_arg(arg, tok_u32) {
                Some(v) => f.client_flags = Some(v),
                None => return bad(ErrorReply::BadFormat),
            },
            // memcached 1.6.45 reads the byte after M whatever the token's length (up to
            // 1.6.38: "incorrect length for M token"); a bare M reads the separator after it,
            // which no command takes as a mode.
            b'M' => f.mode = Some(arg.first().copied().unwrap_or(b' ')),
            b'O' => {
                if arg.len() > OPAQUE_MAX {
                    return Err(ErrorReply::OpaqueTooLong);
                }
                f.opaque = Some(arg);
            }
            _ => {}
        }
        if f.n < f.order.len() {
            f.order[f.n] = letter;
            f.n += 1;
        }
    }
    if let Some(m) = f.mode {
        let ok = match kind {
            MetaKind::Set => b"SEAPR".contains(&m),
            MetaKind::Arith => b"I+D-".contains(&m),
            _ => true,
        };
        if !ok {
            return Err(if kind == MetaKind::Set {
                ErrorReply::SetMode
            } else {
                ErrorReply::ArithMode
            });
        }
    }
    Ok(f)
}

fn decode_key(raw: &[u8], base64: bool) -> Option<KeyBuf> {
    let mut k = KeyBuf {
        buf: [0; KEY_MAX],
        len: 0,
    };
    if !base64 {
        k.buf[..raw.len()].copy_from_slice(raw);
        k.len = raw.len() as u8;
        return Some(k);
    }
    let n = base64::engine::general_purpose::STANDARD
        .decode_slice(raw, &mut k.buf)
        .ok()?;
    if n == 0 {
        return None;
    }
    k.len = n as u8;
    Some(k)
}

fn err<'a>(reply: ErrorReply, consumed: usize) -> Parsed<'a> {
    Parsed::Error {
        reply,
        consumed,
        noreply: false,
    }
}

/// Parse a meta command whose line (without its terminator) is `line`; `after` is where the
/// line ends in `buf`. memcached 1.6.40's order: the line's shape (a key, and for `ms` a
/// valid length) is checked first and refused as "bad command line format" with nothing
/// swallowed; after that, `ms` swallows its data block whatever the error.
pub(crate) fn command<'a>(
    t: &Tokens<'a>,
    after: usize,
    buf: &'a [u8],
    limits: &Limits,
) -> Parsed<'a> {
    let kind = match t.get(0)[1] {
        b'g' => MetaKind::Get,
        b's' => MetaKind::Set,
        b'd' => MetaKind::Delete,
        b'a' => MetaKind::Arith,
        _ => MetaKind::Get, // `me`, below
    };
    let first_flag = if kind == MetaKind::Set { 3 } else { 2 };
    let least = first_flag;
    if t.n < least || (first_flag..t.n).any(|i| !flag_start_ok(t.get(i))) {
        return err(ErrorReply::BadFormat, after);
    }
    let raw_key = t.get(1);
    if t.get(0) == b"me" {
        if raw_key.len() > KEY_MAX {
            return err(ErrorReply::BadFormat, after);
        }
        return Parsed::Request(Request::MetaDebug { key: raw_key }, after);
    }
    if kind != MetaKind::Set {
        let flags = match parse_flags(kind, t, 2) {
            Ok(f) => f,
            Err(e) => return err(e, after),
        };
        let Some(key) = decode_key(raw_key, flags.base64) else {
            return err(flag_error(kind, ErrorReply::KeyDecode), after);
        };
        return Parsed::Request(
            Request::Meta(Meta {
                kind,
                raw_key,
                key,
                flags,
                data: &[],
            }),
            after,
        );
    }
    // ms <key> <datalen> <flags>*. memcached refuses a length whose +2 (the data's "\r\n")
    // overflows its int at once, before any data is awaited: `ms k 2147483647` must not
    // leave the client waiting on a 2 GiB swallow.
    let Some(vlen) = tok_i32(t.get(2)).filter(|v| (0..=i32::MAX - 2).contains(v)) else {
        return err(ErrorReply::BadFormat, after);
    };
    let vlen = vlen as usize;
    let refuse = |reply| {
        Parsed::Request(
            Request::BadStoreLine {
                swallow: vlen + 2,
                reply,
                noreply: false,
            },
            after,
        )
    };
    let flags = match parse_flags(kind, t, 3) {
        Ok(f) => f,
        Err(e) => return refuse(e),
    };
    let Some(key) = decode_key(raw_key, flags.base64) else {
        return refuse(ErrorReply::KeyDecode);
    };
    if !limits.item_fits(raw_key.len(), flags.client_flags.unwrap_or(0), vlen) {
        return Parsed::Request(
            Request::TooLarge {
                kind: crate::request::StoreKind::Set,
                key: raw_key,
                swallow: vlen + 2,
                noreply: false,
            },
            after,
        );
    }
    let end = after + vlen + 2;
    if buf.len() < end {
        return Parsed::Incomplete(end);
    }
    if &buf[end - 2..end] != b"\r\n" {
        return err(ErrorReply::BadDataChunk, end);
    }
    Parsed::Request(
        Request::Meta(Meta {
            kind,
            raw_key,
            key,
            flags,
            data: &buf[after..end - 2],
        }),
        end,
    )
}

#[cfg(test)]
mod tests {
    use crate::reply::ErrorReply;
    use crate::text::{parse, Limits, Parsed, Request};

    const L: Limits = Limits {
        item_size_max: 1024 * 1024,
        use_cas: true,
    };

    fn flags(req: &[u8]) -> super::MetaFlags<'_> {
        match parse(req, &L) {
            Parsed::Request(Request::Meta(m), _) => m.flags,
            other => panic!("{req:?}: {other:?}"),
        }
    }

    fn error(req: &[u8]) -> ErrorReply {
        match parse(req, &L) {
            Parsed::Error { reply, .. }
            | Parsed::Request(Request::BadStoreLine { reply, .. }, _) => reply,
            other => panic!("{req:?}: {other:?}"),
        }
    }

    #[test]
    fn e_is_an_explicit_cas_on_every_command() {
        assert_eq!(flags(b"ms k 2 E973\r\nhi\r\n").cas_in, Some(973));
        assert_eq!(flags(b"mg k N30 E55 c\r\n").cas_in, Some(55));
        assert_eq!(
            flags(b"md k E18446744073709551615\r\n").cas_in,
            Some(u64::MAX)
        );
        assert_eq!(flags(b"ma k E1 C2\r\n").cas_in, Some(1));
        assert_eq!(flags(b"mg k v\r\n").cas_in, None);
        assert_eq!(error(b"ms k 1 Ex\r\na\r\n"), ErrorReply::BadToken);
        assert_eq!(error(b"mg k E\r\n"), ErrorReply::BadToken);
        // md's own wording since memcached 1.6.40; ma keeps the catch-all.
        assert_eq!(error(b"md k E-1\r\n"), ErrorReply::BadToken);
        assert_eq!(error(b"ma k E-1\r\n"), ErrorReply::InvalidOrDuplicateFlag);
        assert_eq!(error(b"mg k E1 E2\r\n"), ErrorReply::DuplicateFlag);
    }

    #[test]
    fn x_is_known_to_every_command() {
        assert!(flags(b"md k x\r\n").remove_value);
        assert!(flags(b"md k x I T30\r\n").invalidate);
        assert!(flags(b"mg k x v\r\n").remove_value);
        assert!(!flags(b"md k I\r\n").remove_value);
        // Known now, so a later repeat is what is refused (1.6.18: "invalid flag").
        assert_eq!(error(b"mg k v x v\r\n"), ErrorReply::DuplicateFlag);
        assert_eq!(error(b"md k x x\r\n"), ErrorReply::DuplicateFlag);
    }

    #[test]
    fn m_reads_the_byte_after_it() {
        assert_eq!(flags(b"ms k 1 MSS\r\nx\r\n").mode, Some(b'S'));
        assert_eq!(flags(b"ma k MII\r\n").mode, Some(b'I'));
        assert_eq!(error(b"ms k 1 M\r\nx\r\n"), ErrorReply::SetMode);
        assert_eq!(error(b"ma k M\r\n"), ErrorReply::ArithMode);
        assert_eq!(error(b"ms k 1 MX\r\nx\r\n"), ErrorReply::SetMode);
        // mg and md take no mode: any M is read and left alone.
        assert_eq!(flags(b"mg k M v\r\n").mode, Some(b' '));
        assert_eq!(flags(b"md k MXYZ\r\n").mode, Some(b'X'));
    }

    #[test]
    fn the_other_flags_keep_their_fields() {
        let f = flags(b"mg k C5 T30 v c\r\n");
        assert_eq!(
            (f.compare_cas, f.ttl, f.has(b'v'), f.letters()),
            (Some(5), Some(30), true, &b"CTvc"[..])
        );
        let f = flags(b"ms k 2 MA N30 s\r\nhi\r\n");
        assert_eq!(
            (f.mode, f.vivify, f.has(b's')),
            (Some(b'A'), Some(30), true)
        );
    }
}
