//! memcached's binary protocol: the 24-byte header, request framing and validation, and
//! response encoding. I/O-free like the rest of this crate.
//!
//! ```text
//!   byte  0        1        2        3        4        5        6        7
//!       +--------+--------+--------+--------+--------+--------+--------+--------+
//!    0  | magic  | opcode |   key length    | ext len| dtype  | vbucket/status  |
//!       +--------+--------+--------+--------+--------+--------+--------+--------+
//!    8  |        total body length          |             opaque                |
//!       +--------+--------+--------+--------+--------+--------+--------+--------+
//!   16  |                                  cas                                  |
//!       +--------+--------+--------+--------+--------+--------+--------+--------+
//!   24  | extras (ext len) | key (key length) | value (body - ext - key) ...
//! ```
//! All numbers are big-endian. Requests carry magic 0x80, responses 0x81; a response echoes
//! the request's opcode and opaque, and puts its status where the request had the vbucket.
//!
//! Server side, a request is read in the stages memcached uses, so that every malformed
//! input gets memcached's answer at the same point:
//!
//! ```text
//!   frame(buf):  < 24 bytes                       -> Frame::Incomplete(24)
//!                magic != 0x80                    -> Frame::BadMagic            (close)
//!                < 24 + ext + key bytes           -> Frame::Incomplete(24+ext+key)
//!                key > body or key + ext > body   -> Frame::Inconsistent        (unknown command, close)
//!                otherwise                        -> Frame::Ready(header)
//!   (the server checks SASL here: it needs the connection's state)
//!   request(h, buf, limits):
//!                key > 250                        -> Parsed::Invalid            (invalid arguments, close)
//!                lengths wrong for the opcode     -> Parsed::Invalid
//!                opcode unknown                   -> Parsed::Unknown            (unknown command, skip body)
//!                value over the item limit        -> Request::TooLarge          (too large, skip value)
//!                value not all here yet           -> Parsed::Incomplete(24+body)
//!                otherwise                        -> Parsed::Request(req, consumed)
//! ```
//! No stage asks for more than `24 + 255 + 65535 + item limit` bytes, so a declared 4 GB body
//! never makes the caller allocate: an oversized value is refused from its header and its bytes
//! are skipped as they arrive.

use crate::text::Limits;

/// Bytes in every request and response header.
pub const HEADER_LEN: usize = 24;
pub const MAGIC_REQUEST: u8 = 0x80;
pub const MAGIC_RESPONSE: u8 = 0x81;
/// memcached's KEY_MAX_LENGTH: the header allows 65535, the server 250.
pub const KEY_MAX: usize = 250;
/// memcached's MAX_SASL_MECH_LEN.
pub const SASL_MECH_MAX: usize = 32;
/// The expiration of a binary incr/decr that means "do not create the item".
pub const DELTA_NO_CREATE: u32 = 0xffff_ffff;
/// Largest value length memcached treats as a number (it computes it in an `int`).
const VALUE_LEN_MAX: u32 = i32::MAX as u32;

/// Opcodes memcached 1.6 serves.
pub mod opcode {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const VERBOSITY: u8 = 0x1b;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const SASL_LIST_MECHS: u8 = 0x20;
    pub const SASL_AUTH: u8 = 0x21;
    pub const SASL_STEP: u8 = 0x22;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
}

/// Response statuses, with memcached's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    Ok = 0x00,
    KeyNotFound = 0x01,
    KeyExists = 0x02,
    TooLarge = 0x03,
    InvalidArguments = 0x04,
    NotStored = 0x05,
    NonNumeric = 0x06,
    AuthError = 0x20,
    AuthContinue = 0x21,
    UnknownCommand = 0x81,
    OutOfMemory = 0x82,
}

impl Status {
    /// The body memcached sends with this status when it has nothing else to say.
    pub fn message(self) -> &'static [u8] {
        match self {
            Status::Ok | Status::AuthContinue => b"",
            Status::KeyNotFound => b"Not found",
            Status::KeyExists => b"Data exists for key.",
            Status::TooLarge => b"Too large.",
            Status::InvalidArguments => b"Invalid arguments",
            Status::NotStored => b"Not stored.",
            Status::NonNumeric => b"Non-numeric server-side value for incr or decr",
            Status::AuthError => b"Auth failure.",
            Status::UnknownCommand => b"Unknown command",
            Status::OutOfMemory => b"Out of memory",
        }
    }

    pub fn from_u16(v: u16) -> Option<Status> {
        Some(match v {
            0x00 => Status::Ok,
            0x01 => Status::KeyNotFound,
            0x02 => Status::KeyExists,
            0x03 => Status::TooLarge,
            0x04 => Status::InvalidArguments,
            0x05 => Status::NotStored,
            0x06 => Status::NonNumeric,
            0x20 => Status::AuthError,
            0x21 => Status::AuthContinue,
            0x81 => Status::UnknownCommand,
            0x82 => Status::OutOfMemory,
            _ => return None,
        })
    }
}

/// A request or response header. `vbucket_or_status` is the vbucket id in a request and
/// the status in a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    pub magic: u8,
    pub opcode: u8,
    pub key_len: u16,
    pub extras_len: u8,
    pub data_type: u8,
    pub vbucket_or_status: u16,
    pub body_len: u32,
    pub opaque: u32,
    pub cas: u64,
}

impl Header {
    /// Reads the first 24 bytes of `buf`; None if there are fewer.
    pub fn decode(buf: &[u8]) -> Option<Header> {
        let b: &[u8; HEADER_LEN] = buf.get(..HEADER_LEN)?.try_into().ok()?;
        Some(Header {
            magic: b[0],
            opcode: b[1],
            key_len: u16::from_be_bytes([b[2], b[3]]),
            extras_len: b[4],
            data_type: b[5],
            vbucket_or_status: u16::from_be_bytes([b[6], b[7]]),
            body_len: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            opaque: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
            cas: u64::from_be_bytes([b[16], b[17], b[18], b[19], b[20], b[21], b[22], b[23]]),
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.magic);
        out.push(self.opcode);
        out.extend_from_slice(&self.key_len.to_be_bytes());
        out.push(self.extras_len);
        out.push(self.data_type);
        out.extend_from_slice(&self.vbucket_or_status.to_be_bytes());
        out.extend_from_slice(&self.body_len.to_be_bytes());
        out.extend_from_slice(&self.opaque.to_be_bytes());
        out.extend_from_slice(&self.cas.to_be_bytes());
    }

    /// Length of the value part of the body (callers check the sum first).
    pub fn value_len(&self) -> u32 {
        self.body_len
            .saturating_sub(u32::from(self.key_len) + u32::from(self.extras_len))
    }

    /// Header + extras + key: what memcached reads before it looks at the opcode.
    fn head_len(&self) -> usize {
        HEADER_LEN + usize::from(self.extras_len) + usize::from(self.key_len)
    }

    fn extras<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[HEADER_LEN..HEADER_LEN + usize::from(self.extras_len)]
    }

    fn key<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[HEADER_LEN + usize::from(self.extras_len)..self.head_len()]
    }
}

/// First stage of reading a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// Buffer at least this many bytes (counted from the request's first byte).
    Incomplete(usize),
    /// Not a request: memcached closes the connection without a reply.
    BadMagic,
    /// Key or key + extras longer than the body: memcached answers "unknown command" and
    /// closes.
    Inconsistent(Header),
    /// Header, extras and key are in the buffer and their lengths add up.
    Ready(Header),
}

pub fn frame(buf: &[u8]) -> Frame {
    let Some(h) = Header::decode(buf) else {
        return Frame::Incomplete(HEADER_LEN);
    };
    if h.magic != MAGIC_REQUEST {
        return Frame::BadMagic;
    }
    if buf.len() < h.head_len() {
        return Frame::Incomplete(h.head_len());
    }
    if u32::from(h.key_len) + u32::from(h.extras_len) > h.body_len {
        return Frame::Inconsistent(h);
    }
    Frame::Ready(h)
}

/// The storage modes of SET/ADD/REPLACE (and their quiet forms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOp {
    Set,
    Add,
    Replace,
}

/// Which command an oversized value belonged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LargeOp {
    Store(StoreOp),
    Concat,
    Sasl,
}

/// A valid request, borrowing key and value from the input buffer. `quiet` is set for the
/// Q opcodes: success is not answered (for the get family: a miss is not answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// GET GETQ GETK GETKQ, and GAT GATQ GATK GATKQ when `touch` carries an expiration.
    Get {
        key: &'a [u8],
        with_key: bool,
        quiet: bool,
        touch: Option<u32>,
    },
    /// TOUCH: a hit is answered with the flags, no value.
    Touch {
        key: &'a [u8],
        exptime: u32,
    },
    Store {
        op: StoreOp,
        key: &'a [u8],
        flags: u32,
        exptime: u32,
        value: &'a [u8],
        cas: u64,
        quiet: bool,
    },
    /// APPEND / PREPEND (and quiet forms).
    Concat {
        append: bool,
        key: &'a [u8],
        value: &'a [u8],
        cas: u64,
        quiet: bool,
    },
    /// A value over the item size limit: reply "too large", then skip `skip` input bytes
    /// (or close, for lengths memcached cannot even represent).
    TooLarge {
        op: LargeOp,
        key: &'a [u8],
        skip: u32,
        close: bool,
    },
    Delete {
        key: &'a [u8],
        cas: u64,
        quiet: bool,
    },
    Delta {
        incr: bool,
        key: &'a [u8],
        delta: u64,
        initial: u64,
        exptime: u32,
        cas: u64,
        quiet: bool,
    },
    Quit {
        quiet: bool,
    },
    Flush {
        exptime: u32,
        quiet: bool,
    },
    Noop,
    Version,
    Verbosity {
        level: u32,
    },
    /// An empty key asks for the general statistics.
    Stat {
        key: &'a [u8],
    },
    SaslListMechs,
    /// SASL_AUTH / SASL_STEP.
    Sasl {
        step: bool,
        mech: &'a [u8],
        data: &'a [u8],
    },
    /// A mechanism name over 32 bytes: memcached answers "invalid arguments" and skips the
    /// `skip` bytes of data, keeping the connection.
    SaslMechTooLong {
        skip: u32,
    },
}

/// Second stage of reading a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// Buffer at least this many bytes (the whole request), then call again.
    Incomplete(usize),
    /// The request and how many input bytes it used. Note that TOUCH/GAT and STAT, like in
    /// memcached, use only header + extras + key: a value sent with them is read as the
    /// next request.
    Request(Request<'a>, usize),
    /// Lengths wrong for the opcode, or a key over 250 bytes: "invalid arguments", close.
    Invalid,
    /// Unknown opcode: "unknown command", having used `consumed` bytes, then skip `skip`.
    Unknown { consumed: usize, skip: u32 },
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Decode a request whose header `frame` accepted. `buf` starts at the request.
pub fn request<'a>(h: &Header, buf: &'a [u8], limits: &Limits) -> Parsed<'a> {
    use opcode::*;
    let (ext, key_len, body) = (
        usize::from(h.extras_len),
        usize::from(h.key_len),
        h.body_len as usize,
    );
    if key_len > KEY_MAX {
        return Parsed::Invalid;
    }
    let head = h.head_len();
    let extras = h.extras(buf);
    let key = h.key(buf);
    let vlen = h.value_len();
    let quiet = matches!(
        h.opcode,
        GETQ | GETKQ
            | SETQ
            | ADDQ
            | REPLACEQ
            | DELETEQ
            | INCREMENTQ
            | DECREMENTQ
            | QUITQ
            | FLUSHQ
            | APPENDQ
            | PREPENDQ
            | GATQ
            | GATKQ
    );
    // Everything whose body holds only extras and key is complete once `frame` said Ready.
    let done = |r: Request<'a>| Parsed::Request(r, head);
    let no_body = ext == 0 && key_len == 0 && body == 0;
    match h.opcode {
        VERSION if no_body => done(Request::Version),
        NOOP if no_body => done(Request::Noop),
        QUIT | QUITQ if no_body => done(Request::Quit { quiet }),
        SASL_LIST_MECHS if no_body => done(Request::SaslListMechs),
        FLUSH | FLUSHQ if key_len == 0 && body == ext && (ext == 0 || ext == 4) => {
            done(Request::Flush {
                exptime: if ext == 4 { be32(extras) } else { 0 },
                quiet,
            })
        }
        VERBOSITY if ext == 4 && key_len == 0 && body == 4 => done(Request::Verbosity {
            level: be32(extras),
        }),
        // memcached 1.6.18 knows no binary VERBOSITY: with nothing to skip, its "unknown
        // command" leaves the stream in step, and the connection goes on.
        VERBOSITY if no_body => Parsed::Unknown {
            consumed: head,
            skip: 0,
        },
        GET | GETQ | GETK | GETKQ if ext == 0 && key_len > 0 && body == key_len => {
            done(Request::Get {
                key,
                with_key: matches!(h.opcode, GETK | GETKQ),
                quiet,
                touch: None,
            })
        }
        TOUCH if ext == 4 && key_len > 0 => done(Request::Touch {
            key,
            exptime: be32(extras),
        }),
        GAT | GATQ | GATK | GATKQ if ext == 4 && key_len > 0 => done(Request::Get {
            key,
            with_key: matches!(h.opcode, GATK | GATKQ),
            quiet,
            touch: Some(be32(extras)),
        }),
        DELETE | DELETEQ if ext == 0 && key_len > 0 && body == key_len => done(Request::Delete {
            key,
            cas: h.cas,
            quiet,
        }),
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ
            if ext == 20 && key_len > 0 && body == key_len + 20 =>
        {
            done(Request::Delta {
                incr: matches!(h.opcode, INCREMENT | INCREMENTQ),
                key,
                delta: be64(extras),
                initial: be64(&extras[8..]),
                exptime: be32(&extras[16..]),
                cas: h.cas,
                quiet,
            })
        }
        STAT if ext == 0 => done(Request::Stat { key }),
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ if ext == 8 && key_len > 0 => {
            let op = match h.opcode {
                SET | SETQ => StoreOp::Set,
                ADD | ADDQ => StoreOp::Add,
                _ => StoreOp::Replace,
            };
            let flags = be32(extras);
            if vlen > VALUE_LEN_MAX || !limits.item_fits(key_len, flags, vlen as usize) {
                return too_large(LargeOp::Store(op), key, vlen, head);
            }
            with_value(buf, head, body, |value| Request::Store {
                op,
                key,
                flags,
                exptime: be32(&extras[4..]),
                value,
                cas: h.cas,
                quiet,
            })
        }
        APPEND | APPENDQ | PREPEND | PREPENDQ if ext == 0 && key_len > 0 => {
            if vlen > VALUE_LEN_MAX || !limits.item_fits(key_len, 0, vlen as usize) {
                return too_large(LargeOp::Concat, key, vlen, head);
            }
            let append = matches!(h.opcode, APPEND | APPENDQ);
            with_value(buf, head, body, |value| Request::Concat {
                append,
                key,
                value,
                cas: h.cas,
                quiet,
            })
        }
        SASL_AUTH | SASL_STEP if ext == 0 && key_len > 0 => {
            if key_len > SASL_MECH_MAX {
                return Parsed::Request(Request::SaslMechTooLong { skip: vlen }, head);
            }
            // memcached copies the data into an item that must not be chunked: half the
            // item limit at most.
            if vlen > VALUE_LEN_MAX
                || !limits.item_fits(key_len, 0, vlen as usize)
                || vlen as usize > limits.item_size_max / 2
            {
                return too_large(LargeOp::Sasl, key, vlen, head);
            }
            let step = h.opcode == SASL_STEP;
            with_value(buf, head, body, |data| Request::Sasl {
                step,
                mech: key,
                data,
            })
        }
        GET | GETQ | GETK | GETKQ | SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ | DELETE
        | DELETEQ | INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ | QUIT | QUITQ | FLUSH
        | FLUSHQ | NOOP | VERSION | APPEND | APPENDQ | PREPEND | PREPENDQ | STAT | VERBOSITY
        | TOUCH | GAT | GATQ | GATK | GATKQ | SASL_LIST_MECHS | SASL_AUTH | SASL_STEP => {
            Parsed::Invalid
        }
        // The body's value part is skipped: memcached skips the whole body length again after
        // having read extras and key, which desynchronises the stream when either is present.
        _ => Parsed::Unknown {
            consumed: head,
            skip: vlen,
        },
    }
}

fn too_large<'a>(op: LargeOp, key: &'a [u8], vlen: u32, head: usize) -> Parsed<'a> {
    let close = vlen > VALUE_LEN_MAX;
    Parsed::Request(
        Request::TooLarge {
            op,
            key,
            skip: if close { 0 } else { vlen },
            close,
        },
        head,
    )
}

fn with_value<'a>(
    buf: &'a [u8],
    head: usize,
    body: usize,
    make: impl FnOnce(&'a [u8]) -> Request<'a>,
) -> Parsed<'a> {
    let total = HEADER_LEN + body;
    if buf.len() < total {
        return Parsed::Incomplete(total);
    }
    Parsed::Request(make(&buf[head..total]), total)
}

// ---- encoding ---------------------------------------------------------------------------------

/// Append a response header announcing `extras_len + key_len + value_len` body bytes; the
/// caller appends the body.
#[allow(clippy::too_many_arguments)]
pub fn response_header(
    out: &mut Vec<u8>,
    opcode: u8,
    status: Status,
    opaque: u32,
    cas: u64,
    extras_len: u8,
    key_len: u16,
    value_len: usize,
) {
    Header {
        magic: MAGIC_RESPONSE,
        opcode,
        key_len,
        extras_len,
        data_type: 0,
        vbucket_or_status: status as u16,
        body_len: (usize::from(extras_len) + usize::from(key_len) + value_len) as u32,
        opaque,
        cas,
    }
    .encode(out);
}

/// Append a whole response.
#[allow(clippy::too_many_arguments)]
pub fn response(
    out: &mut Vec<u8>,
    opcode: u8,
    status: Status,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    response_header(
        out,
        opcode,
        status,
        opaque,
        cas,
        extras.len() as u8,
        key.len() as u16,
        value.len(),
    );
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Append an error response with memcached's message for `status`.
pub fn error(out: &mut Vec<u8>, opcode: u8, opaque: u32, status: Status) {
    response(out, opcode, status, opaque, 0, &[], &[], status.message());
}

/// Client side: append a request.
pub fn encode_request(
    out: &mut Vec<u8>,
    opcode: u8,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    Header {
        magic: MAGIC_REQUEST,
        opcode,
        key_len: key.len() as u16,
        extras_len: extras.len() as u8,
        data_type: 0,
        vbucket_or_status: 0,
        body_len: (extras.len() + key.len() + value.len()) as u32,
        opaque,
        cas,
    }
    .encode(out);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Client side: one response, borrowing its parts from the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response<'a> {
    pub header: Header,
    pub extras: &'a [u8],
    pub key: &'a [u8],
    pub value: &'a [u8],
}

impl Response<'_> {
    /// The raw status number (`Status::from_u16` names the known ones).
    pub fn status(&self) -> u16 {
        self.header.vbucket_or_status
    }
}

/// Client side: decode the response at the front of `buf`.
#[derive(Debug, PartialEq, Eq)]
pub enum ParsedResponse<'a> {
    Incomplete(usize),
    /// Not a response, or lengths that do not add up.
    Malformed,
    Response(Response<'a>, usize),
}

pub fn parse_response(buf: &[u8]) -> ParsedResponse<'_> {
    let Some(header) = Header::decode(buf) else {
        return ParsedResponse::Incomplete(HEADER_LEN);
    };
    let (ext, key) = (usize::from(header.extras_len), usize::from(header.key_len));
    if header.magic != MAGIC_RESPONSE || ext + key > header.body_len as usize {
        return ParsedResponse::Malformed;
    }
    let total = HEADER_LEN + header.body_len as usize;
    if buf.len() < total {
        return ParsedResponse::Incomplete(total);
    }
    let body = &buf[HEADER_LEN..total];
    let resp = Response {
        header,
        extras: &body[..ext],
        key: &body[ext..ext + key],
        value: &body[ext + key..],
    };
    ParsedResponse::Response(resp, total)
}

#[cfg(test)]
mod tests;
