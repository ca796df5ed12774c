//! Record codec: how one flashed item is laid out in a page, and how a read is verified.
//!
//! Owns only the bytes; it knows nothing about files, pages or the index.
//!
//! ```text
//!  0      2     3     4          8          12        16       20        24            32            40
//! +------+-----+-----+----------+----------+---------+--------+---------+-------------+-------------+-----+-------+------+
//! |magic | klen| 0   | page gen | value len| flags   | exp    | page no | cas u64     | xxh3 u64    | key | value | pad  |
//! +------+-----+-----+----------+----------+---------+--------+---------+-------------+-------------+-----+-------+------+
//!  "MF"                 u32 LE     u32 LE     u32 LE    u32 LE   u32 LE                 of bytes 0..32    padded to 8 bytes
//!                                                                                       and 40..end
//! ```
//!
//! A read is served only if every check passes: magic, lengths within the bytes read, the
//! checksum, the page number and generation the index expected, and the key asked for. So a
//! read of a recycled page (other generation), of a location another item now occupies, of a
//! torn or flipped write, or of a truncated file is a miss, never another item's bytes.

use crate::Time;

const MAGIC: [u8; 2] = *b"MF";
/// Bytes before the key.
pub(crate) const HEADER: usize = 40;
/// Records start at multiples of this (so a location fits the index entry in 8-byte units).
pub(crate) const ALIGN: usize = 8;

/// What a record says besides its key and value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    pub flags: u32,
    pub exp: Time,
    pub cas: u64,
}

/// Where a record was written: it carries both, so a copy found elsewhere is rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub page: u32,
    pub gen: u32,
}

/// The encoded length of a record (padding included).
pub(crate) fn len(key_len: usize, value_len: usize) -> usize {
    (HEADER + key_len + value_len).div_ceil(ALIGN) * ALIGN
}

/// Writes a record into `out`, which is exactly `len(key.len(), value.len())` bytes.
pub(crate) fn encode(out: &mut [u8], at: Place, key: &[u8], value: &[u8], meta: Meta) {
    debug_assert_eq!(out.len(), len(key.len(), value.len()));
    out[0..2].copy_from_slice(&MAGIC);
    out[2] = key.len() as u8;
    out[3] = 0;
    out[4..8].copy_from_slice(&at.gen.to_le_bytes());
    out[8..12].copy_from_slice(&(value.len() as u32).to_le_bytes());
    out[12..16].copy_from_slice(&meta.flags.to_le_bytes());
    out[16..20].copy_from_slice(&meta.exp.to_le_bytes());
    out[20..24].copy_from_slice(&at.page.to_le_bytes());
    out[24..32].copy_from_slice(&meta.cas.to_le_bytes());
    let k = HEADER + key.len();
    out[HEADER..k].copy_from_slice(key);
    out[k..k + value.len()].copy_from_slice(value);
    out[k + value.len()..].fill(0);
    let sum = checksum(out);
    out[32..40].copy_from_slice(&sum.to_le_bytes());
}

fn checksum(rec: &[u8]) -> u64 {
    // Header fields and body hashed as one stream: the checksum field itself is skipped.
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&rec[..32]);
    h.update(&rec[HEADER..]);
    h.digest()
}

/// Why a read was not served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    /// Not a record written where the index expected it (recycled page, other generation,
    /// short read): an ordinary miss.
    #[error("no record of this generation there")]
    Gone,
    /// A record that fails its checksum (torn or flipped bytes): memcached's badcrc.
    #[error("record checksum mismatch")]
    BadCrc,
    /// A sound record of another key (an index tag collision).
    #[error("record of another key")]
    OtherKey,
}

/// A verified record, borrowed from the bytes read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct View<'a> {
    pub meta: Meta,
    pub value: &'a [u8],
}

/// Checks `rec` (the bytes read at the location the index gave) against what the index
/// expects: the place it was written, and the key.
pub(crate) fn verify<'a>(rec: &'a [u8], at: Place, key: &[u8]) -> Result<View<'a>, Reject> {
    let (k, v) = verify_any(rec, at)?;
    if k != key {
        return Err(Reject::OtherKey);
    }
    Ok(v)
}

/// `verify` without a key to compare: the record's own key and its view (a walk over the
/// index entries, which keep no key: the snapshot).
pub(crate) fn verify_any(rec: &[u8], at: Place) -> Result<(&[u8], View<'_>), Reject> {
    if rec.len() < HEADER || rec[0..2] != MAGIC {
        return Err(Reject::Gone);
    }
    let u32_at = |i: usize| u32::from_le_bytes(rec[i..i + 4].try_into().unwrap());
    let klen = rec[2] as usize;
    let vlen = u32_at(8) as usize;
    if len(klen, vlen) != rec.len() {
        // A length that disagrees with the index's is either another record or damage;
        // only the checksum can tell, and it cannot be computed over bytes not read.
        return Err(if u32_at(4) == at.gen && u32_at(20) == at.page {
            Reject::BadCrc
        } else {
            Reject::Gone
        });
    }
    let sum = u64::from_le_bytes(rec[32..40].try_into().unwrap());
    if checksum(rec) != sum {
        return Err(Reject::BadCrc);
    }
    if u32_at(4) != at.gen || u32_at(20) != at.page {
        return Err(Reject::Gone);
    }
    let meta = Meta {
        flags: u32_at(12),
        exp: u32_at(16),
        cas: u64::from_le_bytes(rec[24..32].try_into().unwrap()),
    };
    Ok((
        &rec[HEADER..HEADER + klen],
        View {
            meta,
            value: &rec[HEADER + klen..HEADER + klen + vlen],
        },
    ))
}

/// Bytes from a record's start that hold its key, whatever the key's length (its length is
/// one byte): what a reader that needs only the key and the header reads ([`verify_head`]).
pub(crate) const HEAD_MAX: usize = HEADER + u8::MAX as usize;

/// What a record's head says: its key, header fields and value length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head<'a> {
    pub key: &'a [u8],
    pub meta: Meta,
    pub value_len: usize,
}

/// Checks the first bytes of a record (at least `min(rec_len, HEAD_MAX)` of them) against what
/// the index expects: the magic, the place it was written (page and generation) and a length
/// that agrees with the index's `rec_len`. The checksum covers the whole record and cannot be
/// checked on a head: a caller that lists the key must also compare the key's hash with the
/// hash bits its index entry keeps, so a record it did not write is never taken for its own.
pub(crate) fn verify_head(head: &[u8], at: Place, rec_len: usize) -> Result<Head<'_>, Reject> {
    if head.len() < HEADER || head[0..2] != MAGIC {
        return Err(Reject::Gone);
    }
    let u32_at = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().unwrap());
    let klen = head[2] as usize;
    let vlen = u32_at(8) as usize;
    if u32_at(4) != at.gen
        || u32_at(20) != at.page
        || len(klen, vlen) != rec_len
        || head.len() < HEADER + klen
    {
        return Err(Reject::Gone);
    }
    let meta = Meta {
        flags: u32_at(12),
        exp: u32_at(16),
        cas: u64::from_le_bytes(head[24..32].try_into().unwrap()),
    };
    Ok(Head {
        key: &head[HEADER..HEADER + klen],
        meta,
        value_len: vlen,
    })
}

/// The store's key hash (for tests).
#[cfg(test)]
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    crate::Store::hash(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(key: &[u8], value: &[u8], at: Place) -> Vec<u8> {
        let mut v = vec![0u8; len(key.len(), value.len())];
        encode(
            &mut v,
            at,
            key,
            value,
            Meta {
                flags: 7,
                exp: 99,
                cas: 12345,
            },
        );
        v
    }

    const AT: Place = Place { page: 3, gen: 9 };

    #[test]
    fn round_trip() {
        let r = rec(b"key", b"hello world", AT);
        assert_eq!(r.len() % ALIGN, 0);
        let v = verify(&r, AT, b"key").unwrap();
        assert_eq!(v.value, b"hello world");
        assert_eq!(
            v.meta,
            Meta {
                flags: 7,
                exp: 99,
                cas: 12345
            }
        );
        assert_eq!(verify_any(&r, AT).unwrap().0, b"key");
        assert_ne!(key_hash(b"key"), 0);
    }

    #[test]
    fn other_generation_page_or_key_is_a_miss() {
        let r = rec(b"key", b"v", AT);
        assert_eq!(
            verify(&r, Place { gen: 10, ..AT }, b"key"),
            Err(Reject::Gone)
        );
        assert_eq!(
            verify(&r, Place { page: 4, ..AT }, b"key"),
            Err(Reject::Gone)
        );
        assert_eq!(verify(&r, AT, b"kez"), Err(Reject::OtherKey));
    }

    #[test]
    fn every_flipped_byte_is_rejected() {
        let r = rec(b"some-key", &[0xab; 100], AT);
        for i in 0..r.len() {
            for bit in [0x01u8, 0x80] {
                let mut d = r.clone();
                d[i] ^= bit;
                assert!(
                    verify(&d, AT, b"some-key").is_err(),
                    "byte {i} bit {bit:#x}"
                );
            }
        }
    }

    #[test]
    fn heads_give_the_key_only_where_it_was_written() {
        let r = rec(b"some-key", &[7u8; 900], AT);
        let head = &r[..HEAD_MAX.min(r.len())];
        let h = verify_head(head, AT, r.len()).unwrap();
        assert_eq!(
            (h.key, h.value_len, h.meta.cas),
            (&b"some-key"[..], 900, 12345)
        );
        // Another generation or page, a length the index does not expect, a head cut before
        // the key's end, zeroes: not this record.
        assert_eq!(
            verify_head(head, Place { gen: 10, ..AT }, r.len()),
            Err(Reject::Gone)
        );
        assert_eq!(
            verify_head(head, Place { page: 4, ..AT }, r.len()),
            Err(Reject::Gone)
        );
        assert_eq!(verify_head(head, AT, r.len() + 8), Err(Reject::Gone));
        assert_eq!(
            verify_head(&r[..HEADER + 3], AT, r.len()),
            Err(Reject::Gone)
        );
        assert_eq!(verify_head(&[0u8; 64], AT, r.len()), Err(Reject::Gone));
    }

    #[test]
    fn torn_truncated_and_zeroed_records_are_rejected() {
        let r = rec(b"k", &[1u8; 4000], AT);
        // Torn: the second half is still the previous contents of the page.
        let mut torn = r.clone();
        torn[2048..].fill(0x55);
        assert_eq!(verify(&torn, AT, b"k"), Err(Reject::BadCrc));
        // Truncated file: a short read.
        for cut in [0, 10, HEADER, 2000, r.len() - 1] {
            assert!(verify(&r[..cut], AT, b"k").is_err(), "cut at {cut}");
        }
        assert_eq!(verify(&vec![0u8; r.len()], AT, b"k"), Err(Reject::Gone));
    }
}
