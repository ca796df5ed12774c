//! Perl's Cache::Memcached (1.30) and Cache::Memcached::Fast (0.28), as Debian 12 packages
//! them (checked against values they stored in memcached).
//!
//! ```text
//!   bit 0  1  Storable::nfreeze of a reference (starts with 0x05 0x0b: network order, v2.11)
//!   bit 1  2  gzip (RFC 1952: IO::Compress::Gzip / Compress::Zlib::memGzip), with the others
//!   bit 2  4  a character string stored as UTF-8 (Cache::Memcached::Fast with utf8 => 1)
//!   0         a byte string: Perl numbers too ("42", "1.5"), scalars carry no type
//! ```

use super::php::no_pickles;
use super::serialized_format;
use crate::error::Result;
use crate::serde::{not_utf8, Serialization, Value, ValueRef};
use std::borrow::Cow;

pub const STORABLE: u32 = 1;
pub const COMPRESSED: u32 = 2;
pub const UTF8: u32 = 4;

pub fn knows(flags: u32) -> bool {
    flags & !(STORABLE | COMPRESSED | UTF8) == 0 && flags & (STORABLE | UTF8) != STORABLE | UTF8
}

/// A value, decompressed.
pub fn decode(data: Vec<u8>, flags: u32) -> Result<Value> {
    Ok(match flags {
        0 => Value::Bytes(data),
        UTF8 => Value::Text(String::from_utf8(data).map_err(|_| not_utf8(flags))?),
        STORABLE => Value::Serialized {
            format: serialized_format(&data),
            data,
        },
        _ => Value::Other { flags, data },
    })
}

/// Numbers as Perl prints them (decimal text, flag 0); booleans as Perl's 1 and "".
pub fn encode(value: ValueRef<'_>) -> Result<(Cow<'_, [u8]>, u32)> {
    Ok(match value {
        ValueRef::Bytes(b) => (Cow::Borrowed(b), 0),
        ValueRef::Text(s) => (Cow::Borrowed(s.as_bytes()), UTF8),
        ValueRef::Int(i) => (
            Cow::Owned(itoa::Buffer::new().format(i).as_bytes().to_vec()),
            0,
        ),
        ValueRef::Float(f) => (Cow::Owned(perl_number(f).into_bytes()), 0),
        ValueRef::Bool(b) => (Cow::Borrowed(if b { &b"1"[..] } else { b"" }), 0),
        ValueRef::Pickled(_) => return Err(no_pickles("Perl")),
        ValueRef::Serialized {
            format: Serialization::PerlStorable,
            data,
        } => (Cow::Borrowed(data), STORABLE),
        ValueRef::Serialized { format, .. } => {
            return Err(crate::serde::unreadable(format, "Perl"))
        }
    })
}

/// Decimal text Perl numifies back to the same double (`Inf`, `-Inf`, `NaN` for the others).
fn perl_number(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "Inf" } else { "-Inf" }.into()
    } else {
        format!("{f:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_perl_wrote() {
        for f in [0, 1, 2, 3, 4, 6] {
            assert!(knows(f), "{f}");
        }
        for f in [5, 8, 0x100] {
            assert!(!knows(f), "{f}");
        }
        // nfreeze([1, 2]) as Cache::Memcached::Fast stored it.
        let frozen = b"\x05\x0b\x02\x00\x00\x00\x02\x08\x81\x08\x82".to_vec();
        assert_eq!(
            decode(frozen.clone(), STORABLE).unwrap(),
            Value::Serialized {
                format: Serialization::PerlStorable,
                data: frozen
            }
        );
        assert_eq!(
            decode(b"42".to_vec(), 0).unwrap(),
            Value::Bytes(b"42".to_vec())
        );
        assert_eq!(
            decode("☺x".as_bytes().to_vec(), UTF8).unwrap(),
            Value::Text("☺x".into())
        );
        assert!(decode(vec![0xff], UTF8).is_err());
        assert_eq!(&encode(ValueRef::Float(1.5)).unwrap().0[..], b"1.5");
        assert_eq!(
            &encode(ValueRef::Float(f64::NEG_INFINITY)).unwrap().0[..],
            b"-Inf"
        );
    }
}
