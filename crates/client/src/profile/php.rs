//! PHP's two memcache extensions, as Debian 12's php-memcached 3.2 and php-memcache 8.2 write
//! (checked byte for byte against values they stored in memcached).
//!
//! ```text
//!   php-memcached: flags & 0xffff (user flags live above 16 bits and are ignored)
//!     bits 0-3 type   0 string  1 long (decimal)  2 double (decimal)  3 bool ("1" or "")
//!                     4 PHP serialize()  5 igbinary  6 JSON  7 msgpack
//!     bit 4  0x10 compressed: data = original length (u32, little-endian) + compressed bytes
//!     bit 5  0x20 zlib   bit 6  0x40 FastLZ (the extension's default)   bit 7  0x80 zstd
//!   php-memcache:
//!     0 string   0x100 bool ("1"/"0")   0x300 long (decimal)   0x700 double (decimal)
//!     1 PHP serialize()   2 zlib (RFC 1950, no prefix), combined with the others
//! ```

use crate::error::{Error, Result};
use crate::serde::{Serialization, Value, ValueRef};
use std::borrow::Cow;

pub const MEMCACHED_TYPE_MASK: u32 = 0xf;
pub const MEMCACHED_LONG: u32 = 1;
pub const MEMCACHED_DOUBLE: u32 = 2;
pub const MEMCACHED_BOOL: u32 = 3;
pub const MEMCACHED_SERIALIZED: u32 = 4;
pub const MEMCACHED_IGBINARY: u32 = 5;
pub const MEMCACHED_JSON: u32 = 6;
pub const MEMCACHED_MSGPACK: u32 = 7;
pub const MEMCACHED_COMPRESSED: u32 = 0x10;
pub const MEMCACHED_ZLIB: u32 = 0x20;
pub const MEMCACHED_FASTLZ: u32 = 0x40;
pub const MEMCACHED_ZSTD: u32 = 0x80;
/// The extension's own bits; the caller's user flags are shifted above them.
pub const MEMCACHED_INTERNAL: u32 = 0xffff;

pub const MEMCACHE_SERIALIZED: u32 = 1;
pub const MEMCACHE_COMPRESSED: u32 = 2;
pub const MEMCACHE_BOOL: u32 = 0x100;
pub const MEMCACHE_LONG: u32 = 0x300;
pub const MEMCACHE_DOUBLE: u32 = 0x700;

/// Whether php-memcached could have written these flags.
pub fn memcached_knows(flags: u32) -> bool {
    let f = flags & MEMCACHED_INTERNAL;
    let algos = f & (MEMCACHED_ZLIB | MEMCACHED_FASTLZ | MEMCACHED_ZSTD);
    f & 0xff00 == 0
        && f & MEMCACHED_TYPE_MASK <= MEMCACHED_MSGPACK
        && if f & MEMCACHED_COMPRESSED != 0 {
            algos.count_ones() == 1
        } else {
            algos == 0
        }
}

/// Whether php-memcache could have written these flags.
pub fn memcache_knows(flags: u32) -> bool {
    let ty = flags & !(MEMCACHE_SERIALIZED | MEMCACHE_COMPRESSED);
    match ty {
        0 => true,
        MEMCACHE_BOOL | MEMCACHE_LONG | MEMCACHE_DOUBLE => flags & MEMCACHE_SERIALIZED == 0,
        _ => false,
    }
}

/// A PHP string: text when it is UTF-8 (almost all of them), else bytes (PHP strings are bytes).
fn string(data: Vec<u8>) -> Value {
    match String::from_utf8(data) {
        Ok(s) => Value::Text(s),
        Err(e) => Value::Bytes(e.into_bytes()),
    }
}

fn parse_float(data: &[u8], flags: u32) -> Result<f64> {
    std::str::from_utf8(data)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| Error::Decode {
            flags,
            why: "not a decimal floating-point number".to_owned(),
        })
}

/// A float as decimal text PHP's strtod reads back to the same double (Rust's shortest
/// round-trip form: `0.1`, `1e100`, `3.0`). PHP has no text for infinities or NaN.
pub fn float_text(f: f64) -> Result<Vec<u8>> {
    if !f.is_finite() {
        return Err(Error::Unsupported(format!(
            "PHP reads no infinite or NaN double from decimal text ({f})"
        )));
    }
    Ok(format!("{f:?}").into_bytes())
}

fn int_text(i: i64) -> Vec<u8> {
    itoa::Buffer::new().format(i).as_bytes().to_vec()
}

pub(crate) fn no_pickles(profile: &str) -> Error {
    Error::Unsupported(format!(
        "a Python pickle cannot be stored for {profile} clients (they cannot read it)"
    ))
}

/// php-memcached's type bits for a value, decompressed.
pub fn memcached_decode(data: Vec<u8>, flags: u32) -> Result<Value> {
    let format = match flags & MEMCACHED_TYPE_MASK {
        0 => return Ok(string(data)),
        MEMCACHED_LONG => return Ok(Value::Int(crate::serde::parse_int(&data, flags)?)),
        MEMCACHED_DOUBLE => return Ok(Value::Float(parse_float(&data, flags)?)),
        // The extension's own test: the first byte is '1'.
        MEMCACHED_BOOL => return Ok(Value::Bool(data.first() == Some(&b'1'))),
        MEMCACHED_SERIALIZED => Serialization::Php,
        MEMCACHED_IGBINARY => Serialization::Igbinary,
        MEMCACHED_JSON => Serialization::Json,
        MEMCACHED_MSGPACK => Serialization::Msgpack,
        _ => return Ok(Value::Other { flags, data }),
    };
    Ok(Value::Serialized { format, data })
}

pub fn memcached_encode(value: ValueRef<'_>) -> Result<(Cow<'_, [u8]>, u32)> {
    Ok(match value {
        ValueRef::Bytes(b) => (Cow::Borrowed(b), 0),
        ValueRef::Text(s) => (Cow::Borrowed(s.as_bytes()), 0),
        ValueRef::Int(i) => (Cow::Owned(int_text(i)), MEMCACHED_LONG),
        ValueRef::Float(f) => (Cow::Owned(float_text(f)?), MEMCACHED_DOUBLE),
        ValueRef::Bool(b) => (
            Cow::Borrowed(if b { &b"1"[..] } else { b"" }),
            MEMCACHED_BOOL,
        ),
        ValueRef::Pickled(_) => return Err(no_pickles("PHP")),
        ValueRef::Serialized { format, data } => (
            Cow::Borrowed(data),
            match format {
                Serialization::Php => MEMCACHED_SERIALIZED,
                Serialization::Igbinary => MEMCACHED_IGBINARY,
                Serialization::Json => MEMCACHED_JSON,
                Serialization::Msgpack => MEMCACHED_MSGPACK,
                f => return Err(crate::serde::unreadable(f, "php-memcached")),
            },
        ),
    })
}

/// php-memcache's type bits for a value, decompressed.
pub fn memcache_decode(data: Vec<u8>, flags: u32) -> Result<Value> {
    if flags & MEMCACHE_SERIALIZED != 0 {
        return Ok(Value::Serialized {
            format: Serialization::Php,
            data,
        });
    }
    Ok(match flags {
        0 => string(data),
        MEMCACHE_BOOL => Value::Bool(data.first() == Some(&b'1')),
        MEMCACHE_LONG => Value::Int(crate::serde::parse_int(&data, flags)?),
        MEMCACHE_DOUBLE => Value::Float(parse_float(&data, flags)?),
        _ => Value::Other { flags, data },
    })
}

pub fn memcache_encode(value: ValueRef<'_>) -> Result<(Cow<'_, [u8]>, u32)> {
    Ok(match value {
        ValueRef::Bytes(b) => (Cow::Borrowed(b), 0),
        ValueRef::Text(s) => (Cow::Borrowed(s.as_bytes()), 0),
        ValueRef::Int(i) => (Cow::Owned(int_text(i)), MEMCACHE_LONG),
        ValueRef::Float(f) => (Cow::Owned(float_text(f)?), MEMCACHE_DOUBLE),
        ValueRef::Bool(b) => (
            Cow::Borrowed(if b { &b"1"[..] } else { b"0" }),
            MEMCACHE_BOOL,
        ),
        ValueRef::Pickled(_) => return Err(no_pickles("PHP")),
        ValueRef::Serialized {
            format: Serialization::Php,
            data,
        } => (Cow::Borrowed(data), MEMCACHE_SERIALIZED),
        ValueRef::Serialized { format, .. } => {
            return Err(crate::serde::unreadable(format, "php-memcache"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_php_memcached_wrote() {
        // As stored by php-memcached 3.2: string, long, double, bool, serialize, igbinary,
        // json, msgpack, FastLZ- and zlib-compressed strings, a serialized array compressed.
        for f in [0, 1, 2, 3, 4, 5, 6, 7, 0x50, 0x30, 0x54, 0x90, 0x3_0000] {
            assert!(memcached_knows(f), "{f:#x}");
        }
        for f in [8, 0x10, 0x20, 0x70, 0x100] {
            assert!(!memcached_knows(f), "{f:#x}");
        }
        assert_eq!(memcached_decode(b"-7".to_vec(), 1).unwrap(), Value::Int(-7));
        assert_eq!(
            memcached_decode(b".1".to_vec(), 2).unwrap(),
            Value::Float(0.1)
        );
        assert_eq!(
            memcached_decode(b"1e+100".to_vec(), 2).unwrap(),
            Value::Float(1e100)
        );
        assert_eq!(
            memcached_decode(b"".to_vec(), 3).unwrap(),
            Value::Bool(false)
        );
        assert_eq!(
            memcached_decode(b"1".to_vec(), 3).unwrap(),
            Value::Bool(true)
        );
        assert_eq!(
            memcached_decode(b"h\xc3\xa9".to_vec(), 0).unwrap(),
            Value::Text("hé".into())
        );
        assert_eq!(
            memcached_decode(b"\xff".to_vec(), 0).unwrap(),
            Value::Bytes(vec![0xff])
        );
        assert_eq!(
            memcached_decode(b"a:0:{}".to_vec(), 4).unwrap(),
            Value::Serialized {
                format: Serialization::Php,
                data: b"a:0:{}".to_vec()
            }
        );
        assert!(memcached_decode(b"x".to_vec(), 2).is_err());
        assert!(memcached_encode(ValueRef::Float(f64::NAN)).is_err());
        assert!(memcached_encode(ValueRef::Pickled(b"x")).is_err());
    }

    #[test]
    fn flags_php_memcache_wrote() {
        for f in [0, 1, 2, 3, 0x100, 0x300, 0x700, 0x302] {
            assert!(memcache_knows(f), "{f:#x}");
        }
        for f in [4, 0x200, 0x301, 0x10] {
            assert!(!memcache_knows(f), "{f:#x}");
        }
        assert_eq!(
            memcache_decode(b"0".to_vec(), 0x100).unwrap(),
            Value::Bool(false)
        );
        assert_eq!(
            memcache_decode(b"1.5".to_vec(), 0x700).unwrap(),
            Value::Float(1.5)
        );
        let (d, f) = memcache_encode(ValueRef::Bool(false)).unwrap();
        assert_eq!((&d[..], f), (&b"0"[..], 0x100));
        // Serialized objects go back with the flags they came with; others are refused.
        let ser = |format| ValueRef::Serialized { format, data: b"x" };
        assert_eq!(memcache_encode(ser(Serialization::Php)).unwrap().1, 1);
        assert!(memcache_encode(ser(Serialization::Igbinary)).is_err());
        assert_eq!(memcached_encode(ser(Serialization::Msgpack)).unwrap().1, 7);
        assert!(memcached_encode(ser(Serialization::Java)).is_err());
    }
}
