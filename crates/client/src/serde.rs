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

use crate::compress::Compression;
use crate::error::{Error, Result};
pub use crate::profile::FlagProfile;
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
                return Err(crate::profile::unreadable(format, "mnemo and python"))
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

/// Serde + compression + profile: what the client runs every value through.
pub(crate) struct ValueCodec {
    pub serde: Box<dyn Serde>,
    pub compression: Compression,
    /// The writing profile first, then those also read ([`crate::Config::also_read`]).
    pub readers: Vec<FlagProfile>,
    /// Largest value a decompression may produce.
    pub max_inflated: usize,
}

impl ValueCodec {
    pub fn profile(&self) -> FlagProfile {
        self.readers[0]
    }

    pub fn check(&self) -> Result<()> {
        crate::profile::check(
            self.profile(),
            &self.readers[1..],
            self.compression.algorithm,
        )
    }

    /// Any compression bit of any profile read.
    pub fn compression_bits(&self) -> u32 {
        self.readers.iter().fold(0, |b, p| b | p.compression_bits())
    }

    /// Bytes and flags for a value: the type by the serde (mnemo, python) or the family's
    /// profile, then compression, framed as the family frames it.
    pub fn encode<'a>(
        &self,
        value: ValueRef<'a>,
        compress: Option<bool>,
    ) -> Result<(Cow<'a, [u8]>, u32)> {
        let (data, flags) = self.encode_type(value)?;
        let original = data.len();
        let (data, algo) = self.compression.apply(data, compress)?;
        Ok(match algo {
            None => (data, flags),
            Some(algo) => {
                let (framed, bits) = self.profile().frame(algo, original, data.into_owned());
                (Cow::Owned(framed), flags | bits)
            }
        })
    }

    /// The value's bytes and type flags, uncompressed (append/prepend store these).
    pub fn encode_type<'a>(&self, value: ValueRef<'a>) -> Result<(Cow<'a, [u8]>, u32)> {
        if self.profile().has_own_types() {
            self.profile().encode(value)
        } else {
            self.serde.encode(value)
        }
    }

    /// Undo compression by the flags, whatever this client's settings.
    pub fn decompress(&self, data: Vec<u8>, flags: u32) -> Result<(Vec<u8>, u32)> {
        Ok(self.inflate(&data, flags)?.unwrap_or((data, flags)))
    }

    /// As [`Self::decompress`], for bytes that are a slice of a read buffer: uncompressed ones
    /// come back as they are, without a copy.
    pub fn decompress_shared(&self, data: bytes::Bytes, flags: u32) -> Result<(bytes::Bytes, u32)> {
        Ok(match self.inflate(&data, flags)? {
            Some((out, flags)) => (out.into(), flags),
            None => (data, flags),
        })
    }

    /// The inflated bytes and the flags without the compression bit; None: not compressed.
    fn inflate(&self, data: &[u8], flags: u32) -> Result<Option<(Vec<u8>, u32)>> {
        crate::profile::reader_for(&self.readers, flags).inflate(data, flags, self.max_inflated)
    }

    /// A decompressed value by its flags: the serde's types under mnemo and python, the
    /// family's under the others.
    pub fn decode_plain(&self, data: Vec<u8>, flags: u32) -> Result<Value> {
        let p = crate::profile::reader_for(&self.readers, flags);
        if p.has_own_types() {
            p.decode_plain(data, flags)
        } else {
            self.serde.decode(data, flags)
        }
    }

    pub fn decode(&self, data: Vec<u8>, flags: u32) -> Result<Value> {
        let (data, flags) = self.decompress(data, flags)?;
        self.decode_plain(data, flags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::compress::{self, Algorithm};

    fn codec(profile: FlagProfile, compression: Compression) -> ValueCodec {
        ValueCodec {
            serde: Box::new(FlagSerde),
            compression,
            readers: vec![profile],
            max_inflated: 1 << 20,
        }
    }

    #[test]
    fn round_trips_every_kind() {
        let long = "word ".repeat(1000);
        for profile in [FlagProfile::Mnemo, FlagProfile::Python] {
            let algo = if profile == FlagProfile::Mnemo {
                Algorithm::zstd()
            } else {
                Algorithm::zlib()
            };
            let c = codec(
                profile,
                Compression {
                    algorithm: algo,
                    ..Compression::default()
                },
            );
            c.check().unwrap();
            for (v, want_flags) in [
                (ValueRef::Bytes(b"raw"), 0),
                (ValueRef::Text("héllo"), FLAG_TEXT),
                (ValueRef::Int(-42), FLAG_INT),
                (
                    ValueRef::Text(&long),
                    FLAG_TEXT
                        | if profile == FlagProfile::Mnemo {
                            FLAG_ZSTD
                        } else {
                            FLAG_ZLIB
                        },
                ),
            ] {
                let (d, f) = c.encode(v, None).unwrap();
                assert_eq!(f, want_flags, "{v:?}");
                let back = c.decode(d.into_owned(), f).unwrap();
                assert_eq!(ValueRef::from(&back), v);
            }
        }
    }

    #[test]
    fn caller_made_pickles_are_stored_with_flag_1() {
        let c = codec(FlagProfile::Mnemo, Compression::default());
        let (d, f) = c
            .encode(ValueRef::Pickled(b"\x80\x04K\x01."), None)
            .unwrap();
        assert_eq!((&d[..], f), (&b"\x80\x04K\x01."[..], FLAG_PICKLE));
        let big = vec![b'p'; 4096];
        let (d, f) = c.encode(ValueRef::Pickled(&big), None).unwrap();
        assert_eq!(f, FLAG_PICKLE | FLAG_ZSTD);
        assert_eq!(c.decode(d.into_owned(), f).unwrap(), Value::Pickled(big));
    }

    #[test]
    fn reads_other_clients_flags() {
        let c = codec(FlagProfile::Mnemo, Compression::default());
        assert_eq!(c.decode(b"12".to_vec(), FLAG_LONG).unwrap(), Value::Int(12));
        assert_eq!(
            c.decode(b"\x80\x04K\x01.".to_vec(), FLAG_PICKLE).unwrap(),
            Value::Pickled(b"\x80\x04K\x01.".to_vec())
        );
        let z = compress::zlib_compress("é".repeat(500).as_bytes(), 6);
        assert_eq!(
            c.decode(z, FLAG_TEXT | FLAG_ZLIB).unwrap(),
            Value::Text("é".repeat(500))
        );
        assert_eq!(
            c.decode(b"x".to_vec(), 1 << 20).unwrap(),
            Value::Other {
                flags: 1 << 20,
                data: b"x".to_vec()
            }
        );
        assert!(c.decode(vec![0xff], FLAG_TEXT).is_err());
        assert!(c.decode(b"zz".to_vec(), FLAG_ZLIB).is_err());
        // The Python profile does not know zstd: bit 32 is just an unknown flag there.
        let p = codec(
            FlagProfile::Python,
            Compression {
                algorithm: Algorithm::zlib(),
                ..Compression::default()
            },
        );
        assert_eq!(
            p.decode(b"x".to_vec(), FLAG_ZSTD).unwrap(),
            Value::Other {
                flags: FLAG_ZSTD,
                data: b"x".to_vec()
            }
        );
        assert!(codec(FlagProfile::Python, Compression::default())
            .check()
            .is_err());
    }
}
