//! Flag profiles: what each client family means by an item's flags, so that mnemo's clients
//! read what PHP, Perl, Java and Python clients store, and store what they read.
//!
//! ```text
//!   profile        types                                   compression written / read
//!   mnemo          0 bytes 1 pickle 2,4 int 16 text        32 zstd, 8 zlib        / both
//!   python         same, without 32                        8 zlib                 / 8
//!   php            low 4 bits: 0..7 (php.rs)               0x30 zlib (+length)    / 0x30, 0x50 FastLZ, 0x90 zstd
//!   php-memcache   0, 1 serialized, 0x100/0x300/0x700      2 zlib                 / 2
//!   perl           0 bytes, 4 UTF-8, 1 Storable            2 gzip                 / 2
//!   java           0 String, 1 serialized, 0x100..0x800    2 gzip                 / 2
//! ```
//!
//! A client writes with one profile and may read with more where no flags value means
//! different things in two of them ([`FlagProfile::combines_with`]): mnemo with python (mnemo's
//! bits are a superset), perl with java (1 serialized and 2 gzip in both, the serialization told
//! apart by its first bytes; their other bits are disjoint). The others collide: PHP's 1 is a
//! long, Python's a pickle, Perl's and Java's a serialized object; Python's 2 is an int where
//! Perl and Java compress; php-memcache's 0x300 long is decimal text where Java's is binary.
//!
//! The compression layer ([`crate::compress`]) decides whether to compress (threshold, minimum
//! saving, already-compressed data, the per-call switch) in every profile; the profile says
//! which algorithm its clients read, which bits mark it, and how the bytes are framed.

mod fastlz;
pub mod java;
pub mod perl;
pub mod php;

use crate::compress::{self, Algorithm, Compression};
use crate::error::{Error, Result};
use crate::serde::{Serialization, Value, ValueRef, FLAG_ZLIB, FLAG_ZSTD};
use std::borrow::Cow;

pub use fastlz::FastlzError;

/// Which flag bits mean what (see the module docs for each family's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlagProfile {
    /// mnemo's own: the Python family's type bits and zlib, plus zstd (32).
    Mnemo,
    /// python-memcached, pymemcache, pylibmc: type bits and zlib only; zstd cannot be used.
    Python,
    /// PHP's `memcached` extension (pecl, Debian's php-memcached).
    PhpMemcached,
    /// PHP's older `memcache` extension (pecl, Debian's php-memcache).
    PhpMemcache,
    /// Perl's Cache::Memcached and Cache::Memcached::Fast.
    Perl,
    /// Java's spymemcached and xmemcached (SerializingTranscoder).
    Java,
}

impl FlagProfile {
    pub const ALL: [FlagProfile; 6] = [
        FlagProfile::Mnemo,
        FlagProfile::Python,
        FlagProfile::PhpMemcached,
        FlagProfile::PhpMemcache,
        FlagProfile::Perl,
        FlagProfile::Java,
    ];

    /// The name `mnemo --profile`, `mnemo.Client(profile=...)` and [`Self::from_name`] use.
    pub fn name(self) -> &'static str {
        match self {
            FlagProfile::Mnemo => "mnemo",
            FlagProfile::Python => "python",
            FlagProfile::PhpMemcached => "php",
            FlagProfile::PhpMemcache => "php-memcache",
            FlagProfile::Perl => "perl",
            FlagProfile::Java => "java",
        }
    }

    /// A profile by [`Self::name`] (`php-memcached` is `php` too).
    pub fn from_name(name: &str) -> Result<FlagProfile> {
        if name == "php-memcached" {
            return Ok(FlagProfile::PhpMemcached);
        }
        Self::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|p| p.name()).collect();
                Error::Config(format!(
                    "unknown profile {name:?}: one of {}",
                    names.join(", ")
                ))
            })
    }

    /// The family's own compression defaults: the algorithm its clients read, and their
    /// threshold and minimum saving where they have one.
    pub fn default_compression(self) -> Compression {
        let base = Compression::default();
        match self {
            FlagProfile::Mnemo => base,
            FlagProfile::Python => Compression {
                algorithm: Algorithm::zlib(),
                ..base
            },
            // memcached.compression_threshold = 2000, compression_factor = 1.3: kept when the
            // value is 1.3 times the compressed size, a saving of 1 - 1/1.3.
            FlagProfile::PhpMemcached => Compression {
                algorithm: Algorithm::zlib(),
                threshold: PHP_THRESHOLD,
                min_saving: 1.0 - 1.0 / PHP_FACTOR,
                ..base
            },
            // memcache.compress_threshold = 20000; setCompressThreshold's min_savings 0.2.
            FlagProfile::PhpMemcache => Compression {
                algorithm: Algorithm::zlib(),
                threshold: PHP_MEMCACHE_THRESHOLD,
                ..base
            },
            // Neither Perl client compresses unless given a threshold; Fast's compress_ratio
            // 0.8 is the 20% saving.
            FlagProfile::Perl => Compression {
                algorithm: Algorithm::gzip(),
                ..base
            },
            // The transcoders' 16 KB threshold.
            FlagProfile::Java => Compression {
                algorithm: Algorithm::gzip(),
                threshold: JAVA_THRESHOLD,
                ..base
            },
        }
    }

    /// Whether this family's clients read values compressed with `a`.
    pub fn writes(self, a: Algorithm) -> bool {
        matches!(
            (self, a),
            (
                FlagProfile::Mnemo,
                Algorithm::Zstd { .. } | Algorithm::Zlib { .. }
            ) | (
                FlagProfile::Python | FlagProfile::PhpMemcached | FlagProfile::PhpMemcache,
                Algorithm::Zlib { .. }
            ) | (
                FlagProfile::Perl | FlagProfile::Java,
                Algorithm::Gzip { .. }
            )
        )
    }

    pub fn zstd_flag(self) -> Option<u32> {
        match self {
            FlagProfile::Mnemo => Some(FLAG_ZSTD),
            FlagProfile::PhpMemcached => Some(php::MEMCACHED_COMPRESSED | php::MEMCACHED_ZSTD),
            _ => None,
        }
    }

    /// The bits any compressed value of this family has one of.
    pub fn compression_bits(self) -> u32 {
        match self {
            FlagProfile::Mnemo => FLAG_ZLIB | FLAG_ZSTD,
            FlagProfile::Python => FLAG_ZLIB,
            FlagProfile::PhpMemcached => php::MEMCACHED_COMPRESSED,
            FlagProfile::PhpMemcache => php::MEMCACHE_COMPRESSED,
            FlagProfile::Perl => perl::COMPRESSED,
            FlagProfile::Java => java::COMPRESSED,
        }
    }

    /// Whether a client may read with both: no flags value both know means different things.
    pub fn combines_with(self, other: FlagProfile) -> bool {
        use FlagProfile::*;
        self == other
            || matches!(
                (self, other),
                (Mnemo, Python) | (Python, Mnemo) | (Perl, Java) | (Java, Perl)
            )
    }

    /// Whether this family's clients write values with these flags.
    pub fn knows(self, flags: u32) -> bool {
        match self {
            FlagProfile::Mnemo => flags & !0x3f == 0,
            FlagProfile::Python => flags & !0x1f == 0,
            FlagProfile::PhpMemcached => php::memcached_knows(flags),
            FlagProfile::PhpMemcache => php::memcache_knows(flags),
            FlagProfile::Perl => perl::knows(flags),
            FlagProfile::Java => java::knows(flags),
        }
    }

    /// mnemo and python: the types are the serde's business ([`crate::Serde`]); the other
    /// families' types are theirs, in this module.
    pub fn has_own_types(self) -> bool {
        !matches!(self, FlagProfile::Mnemo | FlagProfile::Python)
    }

    /// The family's bytes and type flags for a value (families with their own types).
    pub(crate) fn encode(self, value: ValueRef<'_>) -> Result<(Cow<'_, [u8]>, u32)> {
        match self {
            FlagProfile::PhpMemcached => php::memcached_encode(value),
            FlagProfile::PhpMemcache => php::memcache_encode(value),
            FlagProfile::Perl => perl::encode(value),
            FlagProfile::Java => java::encode(value),
            FlagProfile::Mnemo | FlagProfile::Python => {
                unreachable!("mnemo and python values go through the serde")
            }
        }
    }

    /// A decompressed value by this family's type flags (families with their own types).
    pub fn decode_plain(self, data: Vec<u8>, flags: u32) -> Result<Value> {
        match self {
            FlagProfile::PhpMemcached => {
                php::memcached_decode(data, flags & php::MEMCACHED_INTERNAL)
            }
            FlagProfile::PhpMemcache => php::memcache_decode(data, flags),
            FlagProfile::Perl => perl::decode(data, flags),
            FlagProfile::Java => java::decode(data, flags),
            FlagProfile::Mnemo | FlagProfile::Python => {
                crate::serde::Serde::decode(&crate::serde::FlagSerde, data, flags)
            }
        }
    }

    /// Compressed bytes as this family stores them, and the flag bits that say so.
    pub(crate) fn frame(self, algo: Algorithm, original: usize, packed: Vec<u8>) -> (Vec<u8>, u32) {
        match (self, algo) {
            (FlagProfile::Mnemo, Algorithm::Zstd { .. }) => (packed, FLAG_ZSTD),
            (FlagProfile::Mnemo | FlagProfile::Python, _) => (packed, FLAG_ZLIB),
            (FlagProfile::PhpMemcached, _) => {
                // The original length first, little-endian, as the extension writes it.
                let mut out = Vec::with_capacity(packed.len() + 4);
                out.extend_from_slice(&(original as u32).to_le_bytes());
                out.extend_from_slice(&packed);
                (out, php::MEMCACHED_COMPRESSED | php::MEMCACHED_ZLIB)
            }
            (FlagProfile::PhpMemcache, _) => (packed, php::MEMCACHE_COMPRESSED),
            (FlagProfile::Perl | FlagProfile::Java, _) => (packed, perl::COMPRESSED),
        }
    }

    /// The inflated bytes and the flags without the compression bits; None: not compressed.
    /// Refuses to inflate past `limit` bytes.
    pub(crate) fn inflate(
        self,
        data: &[u8],
        flags: u32,
        limit: usize,
    ) -> Result<Option<(Vec<u8>, u32)>> {
        let bad = |why: String| Error::Decode { flags, why };
        let io = |e: std::io::Error| bad(e.to_string());
        Ok(Some(match self {
            FlagProfile::Mnemo | FlagProfile::Python => {
                if self == FlagProfile::Mnemo && flags & FLAG_ZSTD != 0 {
                    (
                        compress::zstd_decompress(data, limit).map_err(io)?,
                        flags & !FLAG_ZSTD,
                    )
                } else if flags & FLAG_ZLIB != 0 {
                    (
                        compress::zlib_decompress(data, limit).map_err(io)?,
                        flags & !FLAG_ZLIB,
                    )
                } else {
                    return Ok(None);
                }
            }
            FlagProfile::PhpMemcached => {
                if flags & php::MEMCACHED_COMPRESSED == 0 {
                    return Ok(None);
                }
                let (len, body) = match data {
                    [a, b, c, d, body @ ..] => {
                        (u32::from_le_bytes([*a, *b, *c, *d]) as usize, body)
                    }
                    _ => return Err(bad("compressed value shorter than its length prefix".into())),
                };
                if len > limit {
                    return Err(bad("decompressed value larger than the limit".into()));
                }
                let out = if flags & php::MEMCACHED_FASTLZ != 0 {
                    fastlz::decompress(body, len).map_err(|e| bad(e.to_string()))?
                } else if flags & php::MEMCACHED_ZSTD != 0 {
                    compress::zstd_decompress(body, len).map_err(io)?
                } else {
                    compress::zlib_decompress(body, len).map_err(io)?
                };
                if out.len() != len {
                    return Err(bad(format!(
                        "decompressed to {} bytes, the prefix says {len}",
                        out.len()
                    )));
                }
                (out, flags & !0xf0)
            }
            FlagProfile::PhpMemcache => {
                if flags & php::MEMCACHE_COMPRESSED == 0 {
                    return Ok(None);
                }
                (
                    compress::zlib_decompress(data, limit).map_err(io)?,
                    flags & !php::MEMCACHE_COMPRESSED,
                )
            }
            FlagProfile::Perl | FlagProfile::Java => {
                if flags & perl::COMPRESSED == 0 {
                    return Ok(None);
                }
                (
                    compress::gzip_decompress(data, limit).map_err(io)?,
                    flags & !perl::COMPRESSED,
                )
            }
        }))
    }
}

const PHP_THRESHOLD: usize = 2000;
const PHP_FACTOR: f64 = 1.3;
const PHP_MEMCACHE_THRESHOLD: usize = 20_000;
const JAVA_THRESHOLD: usize = 16 * 1024;

/// Flag 1 of Perl and Java: Java's object streams start with 0xACED; anything else is Storable.
pub(crate) fn serialized_format(data: &[u8]) -> Serialization {
    if data.starts_with(&[0xAC, 0xED]) {
        Serialization::Java
    } else {
        Serialization::PerlStorable
    }
}

/// The profile that reads a value with these flags: the first of `readers` that knows them,
/// else the first (the writing profile).
pub fn reader_for(readers: &[FlagProfile], flags: u32) -> FlagProfile {
    readers
        .iter()
        .copied()
        .find(|p| p.knows(flags))
        .unwrap_or(readers[0])
}

/// Check that a writing profile and the ones also read combine, and that the writing one's
/// clients read `algorithm`.
pub fn check(profile: FlagProfile, also_read: &[FlagProfile], algorithm: Algorithm) -> Result<()> {
    if !profile.writes(algorithm) {
        return Err(Error::Config(format!(
            "{} clients do not read {algorithm:?}: use {:?}",
            profile.name(),
            profile.default_compression().algorithm
        )));
    }
    let all: Vec<_> = std::iter::once(profile)
        .chain(also_read.iter().copied())
        .collect();
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            if !a.combines_with(*b) {
                return Err(Error::Config(format!(
                    "profiles {} and {} cannot be read together: their flags collide",
                    a.name(),
                    b.name()
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
