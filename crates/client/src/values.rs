//! What the client runs every value through: its serde (mnemo's and python's flags, or a
//! language family's), compression, and the profiles it also reads ([`ValueCodec`]). It
//! joins serde.rs (value types and flags) with profile.rs (each family's flag layout), which
//! import neither it nor each other's callers.

use std::borrow::Cow;

use crate::compress::Compression;
use crate::error::Result;
use crate::profile::FlagProfile;
use crate::serde::{Serde, Value, ValueRef};

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
    use crate::serde::*;

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
