//! Java's spymemcached and xmemcached (their `SerializingTranscoder`): strings carry no flag,
//! other primitives a type code in the second byte, in big-endian binary with leading zero bytes
//! dropped (0 is stored as no bytes at all).
//!
//! ```text
//!   0       String (UTF-8)             0x0100  boolean ("1" / "0")
//!   1       java.io.Serializable       0x0200  int      (up to 4 bytes)
//!   2       gzip (RFC 1952),           0x0300  long     (up to 8 bytes)
//!           with the others            0x0400  Date     (long, ms since 1970)
//!                                      0x0500  byte     0x0600 float (int bits)
//!                                      0x0700  double (long bits)   0x0800 byte[]
//! ```

use super::php::no_pickles;
use super::serialized_format;
use crate::error::{Error, Result};
use crate::serde::{Serialization, Value, ValueRef};
use std::borrow::Cow;

pub const SERIALIZED: u32 = 1;
pub const COMPRESSED: u32 = 2;
pub const SPECIAL_MASK: u32 = 0xff00;
pub const BOOLEAN: u32 = 0x100;
pub const INT: u32 = 0x200;
pub const LONG: u32 = 0x300;
pub const DATE: u32 = 0x400;
pub const BYTE: u32 = 0x500;
pub const FLOAT: u32 = 0x600;
pub const DOUBLE: u32 = 0x700;
pub const BYTE_ARRAY: u32 = 0x800;

pub fn knows(flags: u32) -> bool {
    let special = flags & SPECIAL_MASK;
    flags & !(SPECIAL_MASK | SERIALIZED | COMPRESSED) == 0
        && special <= BYTE_ARRAY
        && !(special != 0 && flags & SERIALIZED != 0)
}

/// Big-endian bytes, at most `width` of them, as the transcoder packs a number.
fn number(data: &[u8], width: usize, flags: u32) -> Result<u64> {
    if data.len() > width {
        return Err(Error::Decode {
            flags,
            why: format!("{} bytes for a {width}-byte number", data.len()),
        });
    }
    Ok(data.iter().fold(0u64, |n, &b| (n << 8) | u64::from(b)))
}

/// The transcoder's packing: big-endian, leading zero bytes dropped.
fn packed(n: u64) -> Vec<u8> {
    let b = n.to_be_bytes();
    let first = b.iter().position(|&x| x != 0).unwrap_or(b.len());
    b[first..].to_vec()
}

/// A value, decompressed.
pub fn decode(data: Vec<u8>, flags: u32) -> Result<Value> {
    if flags & SERIALIZED != 0 {
        return Ok(Value::Serialized {
            format: serialized_format(&data),
            data,
        });
    }
    Ok(match flags & SPECIAL_MASK {
        0 => match String::from_utf8(data) {
            Ok(s) => Value::Text(s),
            Err(e) => Value::Bytes(e.into_bytes()),
        },
        BOOLEAN => Value::Bool(data.first() == Some(&b'1')),
        INT => Value::Int(i64::from(number(&data, 4, flags)? as u32 as i32)),
        LONG | DATE => Value::Int(number(&data, 8, flags)? as i64),
        BYTE => Value::Int(i64::from(number(&data, 1, flags)? as u8 as i8)),
        FLOAT => Value::Float(f64::from(f32::from_bits(number(&data, 4, flags)? as u32))),
        DOUBLE => Value::Float(f64::from_bits(number(&data, 8, flags)?)),
        BYTE_ARRAY => Value::Bytes(data),
        _ => Value::Other { flags, data },
    })
}

/// Integers as `Long` (mnemo's integers are 64-bit), floats as `Double`, bytes as `byte[]`.
pub fn encode(value: ValueRef<'_>) -> Result<(Cow<'_, [u8]>, u32)> {
    Ok(match value {
        ValueRef::Bytes(b) => (Cow::Borrowed(b), BYTE_ARRAY),
        ValueRef::Text(s) => (Cow::Borrowed(s.as_bytes()), 0),
        ValueRef::Int(i) => (Cow::Owned(packed(i as u64)), LONG),
        ValueRef::Float(f) => (Cow::Owned(packed(f.to_bits())), DOUBLE),
        ValueRef::Bool(b) => (Cow::Borrowed(if b { &b"1"[..] } else { b"0" }), BOOLEAN),
        ValueRef::Pickled(_) => return Err(no_pickles("Java")),
        ValueRef::Serialized {
            format: Serialization::Java,
            data,
        } => (Cow::Borrowed(data), SERIALIZED),
        ValueRef::Serialized { format, .. } => {
            return Err(crate::serde::unreadable(format, "Java"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_pack_and_unpack() {
        for i in [0i64, 1, 255, 256, -1, i64::MIN, i64::MAX, 1 << 40] {
            let (d, f) = encode(ValueRef::Int(i)).unwrap();
            assert_eq!(decode(d.into_owned(), f).unwrap(), Value::Int(i), "{i}");
        }
        assert!(encode(ValueRef::Int(0)).unwrap().0.is_empty());
        assert_eq!(&encode(ValueRef::Int(256)).unwrap().0[..], &[1, 0]);
        for x in [0.0, -0.0, 1.5, f64::INFINITY, 1e-300] {
            let (d, f) = encode(ValueRef::Float(x)).unwrap();
            let Value::Float(y) = decode(d.into_owned(), f).unwrap() else {
                panic!()
            };
            assert_eq!(x.to_bits(), y.to_bits());
        }
        // int -1 is four 0xff bytes; a float's int bits; a byte.
        assert_eq!(decode(vec![0xff; 4], INT).unwrap(), Value::Int(-1));
        assert_eq!(
            decode(1.5f32.to_bits().to_be_bytes().to_vec(), FLOAT).unwrap(),
            Value::Float(1.5)
        );
        assert_eq!(decode(vec![0x80], BYTE).unwrap(), Value::Int(-128));
        assert!(decode(vec![1; 5], INT).is_err());
        assert!(knows(0x302) && knows(3) && !knows(0x301) && !knows(0x900) && !knows(4));
    }
}
