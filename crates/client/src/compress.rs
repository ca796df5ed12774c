//! The compression layer: zstd by default, zlib for what Python clients read; a size threshold,
//! a minimum saving below which the plain value is stored, and a look at the first bytes to skip
//! data that is already compressed (seed 000: 3 KB JPEGs compressed on every set).
//!
//! The layer only adds and removes a flag bit ([`crate::FlagProfile`] says which); values are
//! decompressed on read by their flags, whatever this client's settings are.

use crate::error::{Error, Result};
use std::borrow::Cow;
use std::cell::RefCell;
use std::io::{Read, Write};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// zstd at this level (1 fast .. 19 small; negative: faster still).
    Zstd { level: i32 },
    /// zlib (RFC 1950, as Python's `zlib.compress`): what python-memcached, pymemcache and pylibmc
    /// read under flag 8.
    Zlib { level: u32 },
    /// gzip (RFC 1952, zlib's deflate in gzip's wrapper): what Perl's Cache::Memcached(::Fast)
    /// and Java's spymemcached/xmemcached read under their flag 2.
    Gzip { level: u32 },
}

impl Algorithm {
    pub const ZSTD_DEFAULT_LEVEL: i32 = 3;
    pub const ZLIB_DEFAULT_LEVEL: u32 = 6;

    pub fn zstd() -> Self {
        Algorithm::Zstd {
            level: Self::ZSTD_DEFAULT_LEVEL,
        }
    }

    pub fn zlib() -> Self {
        Algorithm::Zlib {
            level: Self::ZLIB_DEFAULT_LEVEL,
        }
    }

    pub fn gzip() -> Self {
        Algorithm::Gzip {
            level: Self::ZLIB_DEFAULT_LEVEL,
        }
    }
}

/// Client-wide compression settings; [`crate::SetOptions::compress`] switches it per call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Compression {
    /// Client-wide on/off.
    pub enabled: bool,
    pub algorithm: Algorithm,
    /// Values shorter than this are stored as they are.
    pub threshold: usize,
    /// The compressed form is kept only if it saves at least this fraction of the size.
    pub min_saving: f64,
    /// Skip values whose first bytes say they are compressed already (JPEG, PNG, GIF, WebP,
    /// gzip, zip, zstd, xz, bzip2).
    pub skip_compressed_formats: bool,
}

impl Compression {
    pub const DEFAULT_THRESHOLD: usize = 1024;
    pub const DEFAULT_MIN_SAVING: f64 = 0.20;

    pub fn off() -> Self {
        Compression {
            enabled: false,
            ..Self::default()
        }
    }
}

impl Default for Compression {
    fn default() -> Self {
        Compression {
            enabled: true,
            algorithm: Algorithm::zstd(),
            threshold: Self::DEFAULT_THRESHOLD,
            min_saving: Self::DEFAULT_MIN_SAVING,
            skip_compressed_formats: true,
        }
    }
}

/// Whether the data starts like a compressed file format.
pub fn looks_compressed(d: &[u8]) -> bool {
    d.starts_with(&[0xFF, 0xD8, 0xFF]) // JPEG
        || d.starts_with(&[0x89, b'P', b'N', b'G']) // PNG
        || d.starts_with(b"GIF8") // GIF87a / GIF89a
        || (d.len() >= 12 && &d[..4] == b"RIFF" && &d[8..12] == b"WEBP")
        || d.starts_with(&[0x1F, 0x8B]) // gzip
        || d.starts_with(&[b'P', b'K', 0x03, 0x04]) // zip
        || d.starts_with(&[0x28, 0xB5, 0x2F, 0xFD]) // zstd
        || d.starts_with(&[0xFD, b'7', b'z', b'X', b'Z', 0x00]) // xz
        || d.starts_with(b"BZh") // bzip2
}

thread_local! {
    static ZSTD_CCTX: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> = const { RefCell::new(None) };
}

pub fn zstd_compress(data: &[u8], level: i32) -> Result<Vec<u8>> {
    let err = |e: std::io::Error| Error::Config(format!("zstd: {e}"));
    ZSTD_CCTX.with(|c| {
        let mut c = c.borrow_mut();
        if c.as_ref().map(|(l, _)| *l) != Some(level) {
            *c = Some((level, zstd::bulk::Compressor::new(level).map_err(err)?));
        }
        c.as_mut().unwrap().1.compress(data).map_err(err)
    })
}

pub fn zlib_compress(data: &[u8], level: u32) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(
        Vec::with_capacity(data.len() / 2 + 64),
        flate2::Compression::new(level.min(9)),
    );
    e.write_all(data).expect("writing to a Vec");
    e.finish().expect("writing to a Vec")
}

pub fn gzip_compress(data: &[u8], level: u32) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(
        Vec::with_capacity(data.len() / 2 + 64),
        flate2::Compression::new(level.min(9)),
    );
    e.write_all(data).expect("writing to a Vec");
    e.finish().expect("writing to a Vec")
}

/// Undo gzip (one member, as Perl's and Java's clients write), refusing to inflate past `limit`
/// bytes.
pub fn gzip_decompress(data: &[u8], limit: usize) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .take(limit as u64 + 1)
        .read_to_end(&mut out)?;
    if out.len() > limit {
        return Err(std::io::Error::other(
            "decompressed value larger than the limit",
        ));
    }
    Ok(out)
}

impl Compression {
    /// Compress if it is on (client-wide or by `force`), the value is long enough, not already
    /// compressed, and compression saves enough. Returns the data to store and whether it was
    /// compressed.
    pub fn apply<'a>(
        &self,
        data: Cow<'a, [u8]>,
        per_call: Option<bool>,
    ) -> Result<(Cow<'a, [u8]>, Option<Algorithm>)> {
        let on = per_call.unwrap_or(self.enabled);
        if !on
            || data.len() < self.threshold
            || (self.skip_compressed_formats && looks_compressed(&data))
        {
            return Ok((data, None));
        }
        let packed = match self.algorithm {
            Algorithm::Zstd { level } => zstd_compress(&data, level)?,
            Algorithm::Zlib { level } => zlib_compress(&data, level),
            Algorithm::Gzip { level } => gzip_compress(&data, level),
        };
        if (packed.len() as f64) <= data.len() as f64 * (1.0 - self.min_saving) {
            Ok((Cow::Owned(packed), Some(self.algorithm)))
        } else {
            Ok((data, None))
        }
    }
}

/// Undo zstd, refusing to inflate past `limit` bytes.
pub fn zstd_decompress(data: &[u8], limit: usize) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut d = zstd::stream::read::Decoder::new(data)?;
    (&mut d).take(limit as u64 + 1).read_to_end(&mut out)?;
    if out.len() > limit {
        return Err(std::io::Error::other(
            "decompressed value larger than the limit",
        ));
    }
    Ok(out)
}

/// Undo zlib (with its header, as Python writes it), refusing to inflate past `limit` bytes.
pub fn zlib_decompress(data: &[u8], limit: usize) -> std::io::Result<Vec<u8>> {
    use flate2::Decompress;
    // Straight from the input into the output's spare room: a `read::ZlibDecoder` would copy
    // the input through a 32 KiB buffer of its own, and `read_to_end` zeroes the output first
    // (together a tenth of a zlib get_many's CPU).
    // One inflate state per thread, reset for each value: a new one is ~10 KB allocated and
    // zeroed, per value (a 100-value get_many's worth is a megabyte of memset).
    thread_local! {
        static STATE: std::cell::RefCell<Option<Decompress>> = const { std::cell::RefCell::new(None) };
    }
    STATE.with(|cell| match cell.try_borrow_mut() {
        Ok(mut slot) => {
            let d = slot.get_or_insert_with(|| Decompress::new(true));
            d.reset(true);
            inflate_into(d, data, limit)
        }
        // Re-entered on this thread (cannot happen today): a state of its own.
        Err(_) => inflate_into(&mut Decompress::new(true), data, limit),
    })
}

fn inflate_into(d: &mut flate2::Decompress, data: &[u8], limit: usize) -> std::io::Result<Vec<u8>> {
    use flate2::{FlushDecompress, Status};
    let mut out = Vec::with_capacity(data.len().saturating_mul(3).min(limit + 1));
    loop {
        let (seen_in, seen_out) = (d.total_in(), out.len());
        let status = d
            .decompress_vec(&data[seen_in as usize..], &mut out, FlushDecompress::Finish)
            .map_err(std::io::Error::other)?;
        if out.len() > limit {
            return Err(std::io::Error::other(
                "decompressed value larger than the limit",
            ));
        }
        match status {
            Status::StreamEnd => return Ok(out),
            _ if out.len() == out.capacity() => {
                // Grown by doubling, but never past limit + 1 (enough to tell it is over).
                let more = out.capacity().max(4096).min(limit + 1 - out.len());
                out.reserve_exact(more);
            }
            _ if d.total_in() == seen_in && out.len() == seen_out => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "compressed value ends early",
                ));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| b"the quick brown fox jumps "[i % 26])
            .collect()
    }

    #[test]
    fn threshold_saving_and_magic() {
        let c = Compression::default();
        // Below the threshold: untouched.
        let (d, a) = c.apply(Cow::Owned(text(1023)), None).unwrap();
        assert!(a.is_none() && d.len() == 1023);
        let (d, a) = c.apply(Cow::Owned(text(1024)), None).unwrap();
        assert_eq!(a, Some(Algorithm::zstd()));
        assert_eq!(zstd_decompress(&d, 1 << 20).unwrap(), text(1024));
        // Incompressible: stored plain.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                // xorshift64: bytes no compressor can shrink by 20%.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        assert!(c.apply(Cow::Borrowed(&noise), None).unwrap().1.is_none());
        // Already-compressed formats are not even tried, though this one would compress.
        for magic in [
            &b"\xFF\xD8\xFF"[..],
            b"\x89PNG",
            b"GIF89a",
            b"\x1F\x8B",
            b"PK\x03\x04",
            b"\x28\xB5\x2F\xFD",
            b"\xFD7zXZ\x00",
            b"BZh9",
        ] {
            let mut v = magic.to_vec();
            v.extend(text(4000));
            assert!(
                c.apply(Cow::Borrowed(&v), None).unwrap().1.is_none(),
                "{magic:?}"
            );
        }
        let mut webp = b"RIFF\0\0\0\0WEBP".to_vec();
        webp.extend(text(4000));
        assert!(looks_compressed(&webp));
        let mut riff = b"RIFF\0\0\0\0WAVE".to_vec();
        riff.extend(text(4000));
        assert!(!looks_compressed(&riff));
        // Per call: off wins over on, on wins over off.
        assert!(c
            .apply(Cow::Owned(text(5000)), Some(false))
            .unwrap()
            .1
            .is_none());
        assert!(Compression::off()
            .apply(Cow::Owned(text(5000)), Some(true))
            .unwrap()
            .1
            .is_some());
        assert!(Compression::off()
            .apply(Cow::Owned(text(5000)), None)
            .unwrap()
            .1
            .is_none());
    }

    #[test]
    fn zlib_round_trip_and_limits() {
        let c = Compression {
            algorithm: Algorithm::zlib(),
            ..Compression::default()
        };
        let (d, a) = c.apply(Cow::Owned(text(10_000)), None).unwrap();
        assert_eq!(a, Some(Algorithm::zlib()));
        assert_eq!(&d[..2], b"\x78\x9c"); // zlib header, default compression
        assert_eq!(zlib_decompress(&d, 10_000).unwrap(), text(10_000));
        assert!(zlib_decompress(&d, 9_999).is_err());
        // A stream cut short, bytes that are not zlib, and a small input that inflates far past
        // the limit (a bomb: the output stops growing at limit + 1) are errors, not hangs.
        for cut in [0, 1, 2, d.len() / 2, d.len() - 1] {
            assert!(zlib_decompress(&d[..cut], 10_000).is_err(), "cut at {cut}");
        }
        assert!(zlib_decompress(b"not zlib at all", 100).is_err());
        let (bomb, _) = c.apply(Cow::Owned(vec![0; 8 << 20]), None).unwrap();
        assert!(bomb.len() < 16 << 10);
        assert!(zlib_decompress(&bomb, 1 << 20).is_err());
        assert_eq!(zlib_decompress(&bomb, 8 << 20).unwrap().len(), 8 << 20);
        let z = zstd_compress(&text(10_000), 3).unwrap();
        assert!(zstd_decompress(&z, 9_999).is_err());
        assert!(zstd_decompress(b"not zstd", 100).is_err());
    }
}
