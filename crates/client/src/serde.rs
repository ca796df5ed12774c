//! Values and their flags: a pluggable [`Serde`] turns a value into bytes and flags and back;
//! the compression layer ([`crate::compress`]) sits between it and the wire.
//!
//! The built-in serde's flags, those of the mnemo and python profiles (the PHP, Perl and Java
//! families' types are their profiles' own: [`crate::profile`]):
//!
//! ```text
//!   bit   value  Python family (python-memcached 1.62, pymemcache 4, pylibmc 1.6)   mnemo
//!   -     0      bytes                                                              bytes
//!   0     1      pickle (read as Value::Pickled; written only as ValueRef::Pickled)  same
//!   1     2      int  (decimal text; pylibmc writes bool as 2)                     int
//!   2     4      long (decimal text; pylibmc writes int as 4) -> read as int       same
//!   3     8      zlib-compressed (RFC 1950), combined with a type bit               zlib
//!   4     16     UTF-8 text                                                         text
//!   5     32     -                                                                  zstd-compressed
//! ```
//!
//! The bits were checked against each library's source and against values the real libraries
//! stored (tests/interop). Integers are stored as decimal text, so incr/decr work on them.
//! A custom [`Serde`] replaces these types under the mnemo and python profiles only.

use crate::error::{Error, Result};
use std::borrow::Cow;

pub const FLAG_PICKLE: u32 = 1;
pub const FLAG_INT: u32 = 2;
pub const FLAG_LONG: u32 = 4;
pub const FLAG_ZLIB: u32 = 8;
pub const FLAG_TEXT: u32 = 16;
pub const FLAG_ZSTD: u32 = 32;

/// A value read back.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Bytes(Vec<u8>),
    Text(String),
    Int(i64),
    /// A PHP double, a Java double or float (Perl's numbers are text: they read as bytes).
    Float(f64),
    /// A PHP or Java boolean.
    Bool(bool),
    /// A Python pickle (flag 1): the raw pickle bytes, for the caller to deal with.
    Pickled(Vec<u8>),
    /// An object another language serialized: its raw bytes, and which serialization it is.
    Serialized {
        format: Serialization,
        data: Vec<u8>,
    },
    /// Flags no profile knows: the bytes (decompressed) as stored.
    Other {
        flags: u32,
        data: Vec<u8>,
    },
}

impl Value {
    /// The bytes, for any value (numbers, booleans and text as their UTF-8 text).
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Value::Bytes(b)
            | Value::Pickled(b)
            | Value::Serialized { data: b, .. }
            | Value::Other { data: b, .. } => b,
            Value::Text(s) => s.into_bytes(),
            Value::Int(i) => i.to_string().into_bytes(),
            Value::Float(f) => f.to_string().into_bytes(),
            Value::Bool(b) => b.to_string().into_bytes(),
        }
    }

    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }
}

/// Which serialization a [`Value::Serialized`] is, by the flags (and for Perl's and Java's
/// flag 1, the first bytes) it was stored with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Serialization {
    /// PHP's `serialize()` (php-memcached type 4, php-memcache flag 1).
    Php,
    /// PHP's igbinary (php-memcached type 5).
    Igbinary,
    /// JSON (php-memcached type 6).
    Json,
    /// MessagePack (php-memcached type 7).
    Msgpack,
    /// Perl's `Storable::nfreeze` (Perl flag 1).
    PerlStorable,
    /// Java object serialization (Java flag 1; starts with 0xACED).
    Java,
}

impl Serialization {
    pub const ALL: [Serialization; 6] = [
        Serialization::Php,
        Serialization::Igbinary,
        Serialization::Json,
        Serialization::Msgpack,
        Serialization::PerlStorable,
        Serialization::Java,
    ];

    /// The serialization [`Self::name`] names.
    pub fn from_name(name: &str) -> Option<Serialization> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Serialization::Php => "php",
            Serialization::Igbinary => "igbinary",
            Serialization::Json => "json",
            Serialization::Msgpack => "msgpack",
            Serialization::PerlStorable => "perl-storable",
            Serialization::Java => "java",
        }
    }
}

/// A value to store, borrowed (a 4 MB value is not copied to be sent).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    Bytes(&'a [u8]),
    Text(&'a str),
    Int(i64),
    /// Stored as the profile's double (PHP, Java) or its decimal text (Perl); the mnemo and
    /// python profiles have no float flag (Python pickles them): an error there.
    Float(f64),
    /// Stored as the profile's boolean (PHP, Java) or 1 / "" (Perl); an error under the mnemo
    /// and python profiles, as floats.
    Bool(bool),
    /// A pickle made by the caller (the Python client), stored with flag 1 so the Python
    /// clients unpickle it.
    Pickled(&'a [u8]),
    /// An object serialized for another language (a [`Value::Serialized`] read back, say),
    /// stored with the flags that family's clients deserialize it by; an error under a profile
    /// whose clients do not read that serialization.
    Serialized {
        format: Serialization,
        data: &'a [u8],
    },
}

impl<'a> From<&'a [u8]> for ValueRef<'a> {
    fn from(b: &'a [u8]) -> Self {
        ValueRef::Bytes(b)
    }
}
impl<'a, const N: usize> From<&'a [u8; N]> for ValueRef<'a> {
    fn from(b: &'a [u8; N]) -> Self {
        ValueRef::Bytes(b)
    }
}
impl<'a> From<&'a Vec<u8>> for ValueRef<'a> {
    fn from(b: &'a Vec<u8>) -> Self {
        ValueRef::Bytes(b)
    }
}
impl<'a> From<&'a str> for ValueRef<'a> {
    fn from(s: &'a str) -> Self {
        ValueRef::Text(s)
    }
}
impl<'a> From<&'a String> for ValueRef<'a> {
    fn from(s: &'a String) -> Self {
        ValueRef::Text(s)
    }
}
impl From<i64> for ValueRef<'_> {
    fn from(i: i64) -> Self {
        ValueRef::Int(i)
    }
}
impl From<i32> for ValueRef<'_> {
    fn from(i: i32) -> Self {
        ValueRef::Int(i.into())
    }
}
impl From<f64> for ValueRef<'_> {
    fn from(f: f64) -> Self {
        ValueRef::Float(f)
    }
}
impl From<bool> for ValueRef<'_> {
    fn from(b: bool) -> Self {
        ValueRef::Bool(b)
    }
}
impl<'a> From<&'a Value> for ValueRef<'a> {
    /// Pickled and unknown values are stored back as bytes (their flags are not kept);
    /// serialized ones as what they are.
    fn from(v: &'a Value) -> Self {
        match v {
            Value::Bytes(b) | Value::Pickled(b) | Value::Other { data: b, .. } => {
                ValueRef::Bytes(b)
            }
            Value::Serialized { format, data } => ValueRef::Serialized {
                format: *format,
                data,
            },
            Value::Text(s) => ValueRef::Text(s),
            Value::Int(i) => ValueRef::Int(*i),
            Value::Float(f) => ValueRef::Float(*f),
            Value::Bool(b) => ValueRef::Bool(*b),
        }
    }
}

/// Turns values into (bytes, flags) and back. Compression bits are the layer's business: a
/// serde never sees them.
pub trait Serde: Send + Sync + 'static {
    fn encode<'a>(&self, value: ValueRef<'a>) -> Result<(Cow<'a, [u8]>, u32)>;
    fn decode(&self, data: Vec<u8>, flags: u32) -> Result<Value>;
}

/// What decompressed bytes are, by their flags ([`FlagSerde`]'s reading, shared with callers
/// that make values themselves, such as the Python package).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bytes,
    /// UTF-8 text.
    Text,
    /// A decimal integer that fits an i64 ([`parse_int`]).
    Int,
    Pickled,
    Other,
}

impl Kind {
    pub fn of(flags: u32) -> Kind {
        match flags {
            0 => Kind::Bytes,
            FLAG_TEXT => Kind::Text,
            FLAG_INT | FLAG_LONG => Kind::Int,
            FLAG_PICKLE => Kind::Pickled,
            _ => Kind::Other,
        }
    }
}

/// The error for text that is not UTF-8.
pub fn not_utf8(flags: u32) -> Error {
    Error::Decode {
        flags,
        why: "text is not UTF-8".to_owned(),
    }
}

/// An integer value's bytes (decimal ASCII, surrounding whitespace allowed).
pub fn parse_int(data: &[u8], flags: u32) -> Result<i64> {
    let bad = |why: &str| Error::Decode {
        flags,
        why: why.to_owned(),
    };
    let s = std::str::from_utf8(data).map_err(|_| bad("integer is not ASCII"))?;
    s.trim().parse().map_err(|_| bad("not a 64-bit integer"))
}

/// The built-in serde: bytes (0), text (16), integers (2, read also as 4), pickles read as raw.
#[derive(Debug, Clone, Copy)]
pub struct FlagSerde;

impl Serde for FlagSerde {
    fn encode<'a>(&self, value: ValueRef<'a>) -> Result<(Cow<'a, [u8]>, u32)> {
        Ok(match value {
            ValueRef::Bytes(b) => (Cow::Borrowed(b), 0),
            ValueRef::Text(s) => (Cow::Borrowed(s.as_bytes()), FLAG_TEXT),
            ValueRef::Int(i) => (
                Cow::Owned(itoa::Buffer::new().format(i).as_bytes().to_vec()),
                FLAG_INT,
            ),
            ValueRef::Pickled(b) => (Cow::Borrowed(b), FLAG_PICKLE),
            ValueRef::Float(_) | ValueRef::Bool(_) => return Err(Error::Unsupported(
                "the mnemo and python profiles have no float or bool flag (Python pickles them)"
                    .to_owned(),
            )),
            ValueRef::Serialized { format, .. } => {
                return Err(unreadable(format, "mnemo and python"))
            }
        })
    }

    fn decode(&self, data: Vec<u8>, flags: u32) -> Result<Value> {
        Ok(match Kind::of(flags) {
            Kind::Bytes => Value::Bytes(data),
            Kind::Text => Value::Text(String::from_utf8(data).map_err(|_| not_utf8(flags))?),
            Kind::Int => Value::Int(parse_int(&data, flags)?),
            Kind::Pickled => Value::Pickled(data),
            Kind::Other => Value::Other { flags, data },
        })
    }
}

/// The error for storing a serialization the profile's clients do not read.
pub(crate) fn unreadable(format: Serialization, profile: &str) -> Error {
    Error::Unsupported(format!(
        "{profile} clients do not read {} serialization",
        format.name()
    ))
}
