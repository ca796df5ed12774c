//! Item header codec: how one item is laid out inside a segment.
//!
//! Owns only the byte format; it knows nothing about segments, the index or time.
//!
//! ```text
//!  byte 0                      byte 1      variable part (each only if present)
//! +----------------+---------+ +---------+ +------------+-------------+---------+----------+-----+-------+
//! | vlen code:4    | bits:4  | | key len | | vlen extra | flags varint| exp u32 | cas u64  | key | value |
//! +----------------+---------+ +---------+ +------------+-------------+---------+----------+-----+-------+
//!                               1..=250     0/1/2/4 B    HAS_FLAGS     HAS_EXP   HAS_CAS
//! vlen code  0..=12: the value length itself (no extra bytes)
//!           13: 1 extra byte,  length = 13 + byte            (13 ..= 268)
//!           14: 2 extra bytes, length = 269 + u16 LE         (269 ..= 65,804)
//!           15: 4 extra bytes, length = u32 LE
//! bits: HAS_FLAGS=1 HAS_EXP=2 HAS_CAS=4 DEAD=8
//! ```
//!
//! The common small item (flags 0, no expiry, value up to 12 bytes) costs 2 header bytes, a value
//! up to 268 bytes costs 3, up to 64 KiB 4. (A plain varint would need 4 bytes from 128 bytes on:
//! with the 50-300 byte values of a typical session cache that is 0.6 bytes more per item.) `exp` is fixed-width so `touch` can rewrite it in place; `cas` is only written
//! when an item is relocated (eviction copy-forward, touch) and must keep the CAS it had, because
//! otherwise the CAS is derived from where the item lives. `DEAD` marks an item that was
//! overwritten or deleted, so eviction can skip it without hashing its key.

use crate::Time;

pub(crate) const HAS_FLAGS: u8 = 1;
pub(crate) const HAS_EXP: u8 = 2;
pub(crate) const HAS_CAS: u8 = 4;
pub(crate) const DEAD: u8 = 8;

/// Value lengths up to this fit in the high nibble of byte 0.
const VLEN_INLINE_MAX: u32 = 12;
const VLEN_U8: u8 = 13;
const VLEN_U16: u8 = 14;
const VLEN_U32: u8 = 15;
/// Smallest length coded with one extra byte, and with two.
const VLEN_U8_BASE: u32 = VLEN_INLINE_MAX + 1;
const VLEN_U16_BASE: u32 = VLEN_U8_BASE + 256;
const VLEN_U16_MAX: u32 = VLEN_U16_BASE + 0xffff;

/// The code in byte 0's high nibble for a value length, and how many bytes follow for it.
#[inline]
fn vlen_code(v: u32) -> (u8, usize) {
    if v <= VLEN_INLINE_MAX {
        (v as u8, 0)
    } else if v < VLEN_U16_BASE {
        (VLEN_U8, 1)
    } else if v <= VLEN_U16_MAX {
        (VLEN_U16, 2)
    } else {
        (VLEN_U32, 4)
    }
}

/// Largest key the format (and memcached) allows.
pub const MAX_KEY_LEN: usize = 250;

/// Longest possible header: 2 fixed + 4 vlen + 5 flags + 4 exp + 8 cas.
#[cfg(test)]
pub(crate) const MAX_HEADER_LEN: usize = 23;

/// A decoded header. Offsets are relative to the start of the item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub bits: u8,
    pub key_len: u8,
    pub value_len: u32,
    pub flags: u32,
    /// 0 when absent (never expires).
    pub exp: Time,
    /// Explicit CAS, valid only when `bits & HAS_CAS`.
    pub cas: u64,
    pub header_len: u8,
}

impl Header {
    #[inline]
    pub fn total_len(&self) -> usize {
        self.header_len as usize + self.key_len as usize + self.value_len as usize
    }
    #[inline]
    pub fn key_range(&self) -> core::ops::Range<usize> {
        let s = self.header_len as usize;
        s..s + self.key_len as usize
    }
    #[inline]
    pub fn value_range(&self) -> core::ops::Range<usize> {
        let s = self.header_len as usize + self.key_len as usize;
        s..s + self.value_len as usize
    }
    #[inline]
    pub fn is_dead(&self) -> bool {
        self.bits & DEAD != 0
    }
    #[inline]
    pub fn explicit_cas(&self) -> Option<u64> {
        (self.bits & HAS_CAS != 0).then_some(self.cas)
    }
    /// Offset of the fixed-width exp field, if the item has one (for in-place touch).
    pub fn exp_offset(&self) -> Option<usize> {
        if self.bits & HAS_EXP == 0 {
            return None;
        }
        let mut off = 2 + vlen_code(self.value_len).1;
        if self.bits & HAS_FLAGS != 0 {
            off += varint_len(self.flags);
        }
        Some(off)
    }
}

/// What a new item's header will say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NewHeader {
    pub key_len: u8,
    pub value_len: u32,
    pub flags: u32,
    pub exp: Time,
    /// Explicit CAS to carry (relocated items); `None` lets the CAS derive from the location.
    pub cas: Option<u64>,
}

impl NewHeader {
    pub fn header_len(&self) -> usize {
        let mut n = 2 + vlen_code(self.value_len).1;
        if self.flags != 0 {
            n += varint_len(self.flags);
        }
        if self.exp != 0 {
            n += 4;
        }
        if self.cas.is_some() {
            n += 8;
        }
        n
    }

    pub fn total_len(&self) -> usize {
        self.header_len() + self.key_len as usize + self.value_len as usize
    }

    /// Writes the header at the start of `out` and returns its length.
    pub fn encode(&self, out: &mut [u8]) -> usize {
        let mut bits = 0u8;
        if self.flags != 0 {
            bits |= HAS_FLAGS;
        }
        if self.exp != 0 {
            bits |= HAS_EXP;
        }
        if self.cas.is_some() {
            bits |= HAS_CAS;
        }
        let (code, extra) = vlen_code(self.value_len);
        out[0] = (code << 4) | bits;
        out[1] = self.key_len;
        let v = self.value_len;
        match code {
            VLEN_U8 => out[2] = (v - VLEN_U8_BASE) as u8,
            VLEN_U16 => out[2..4].copy_from_slice(&((v - VLEN_U16_BASE) as u16).to_le_bytes()),
            VLEN_U32 => out[2..6].copy_from_slice(&v.to_le_bytes()),
            _ => {}
        }
        let mut p = 2 + extra;
        if self.flags != 0 {
            p += write_varint(&mut out[p..], self.flags);
        }
        if self.exp != 0 {
            out[p..p + 4].copy_from_slice(&self.exp.to_le_bytes());
            p += 4;
        }
        if let Some(cas) = self.cas {
            out[p..p + 8].copy_from_slice(&cas.to_le_bytes());
            p += 8;
        }
        p
    }
}

/// Decodes the header of the item starting at `buf[0]`. The bytes are our own, written by
/// [`NewHeader::encode`]; a short buffer is a bug and panics on the slice index.
#[inline]
pub(crate) fn decode(buf: &[u8]) -> Header {
    let b0 = buf[0];
    let bits = b0 & 0x0f;
    let code = b0 >> 4;
    let key_len = buf[1];
    let (value_len, mut p) = match code {
        VLEN_U8 => (VLEN_U8_BASE + buf[2] as u32, 3),
        VLEN_U16 => (
            VLEN_U16_BASE + u16::from_le_bytes([buf[2], buf[3]]) as u32,
            4,
        ),
        VLEN_U32 => (u32::from_le_bytes(buf[2..6].try_into().unwrap()), 6),
        inline => (inline as u32, 2),
    };
    let mut flags = 0;
    if bits & HAS_FLAGS != 0 {
        let (v, n) = read_varint(&buf[p..]);
        flags = v;
        p += n;
    }
    let mut exp = 0;
    if bits & HAS_EXP != 0 {
        exp = u32::from_le_bytes(buf[p..p + 4].try_into().unwrap());
        p += 4;
    }
    let mut cas = 0;
    if bits & HAS_CAS != 0 {
        cas = u64::from_le_bytes(buf[p..p + 8].try_into().unwrap());
        p += 8;
    }
    Header {
        bits,
        key_len,
        value_len,
        flags,
        exp,
        cas,
        header_len: p as u8,
    }
}

/// Where the key of the item at `buf[0]` lies: `decode(buf).key_range()` without reading the
/// value length, flags, exp or CAS, only skipping them. The index's split rehashes every entry
/// of a bucket it splits by its key (a fresh cache's fill pays about one per item), and the
/// whole decode was 72 instructions of it (callgrind), this about a third of that.
#[inline]
pub(crate) fn key_range(buf: &[u8]) -> core::ops::Range<usize> {
    let b0 = buf[0];
    let bits = b0 & 0x0f;
    let mut p = match b0 >> 4 {
        VLEN_U8 => 3,
        VLEN_U16 => 4,
        VLEN_U32 => 6,
        _ => 2,
    };
    if bits & HAS_FLAGS != 0 {
        while buf[p] & 0x80 != 0 {
            p += 1;
        }
        p += 1;
    }
    if bits & HAS_EXP != 0 {
        p += 4;
    }
    if bits & HAS_CAS != 0 {
        p += 8;
    }
    p..p + buf[1] as usize
}

/// Sets the DEAD bit of the item at `buf[0]`.
#[inline]
pub(crate) fn mark_dead(buf: &mut [u8]) {
    buf[0] |= DEAD;
}

#[inline]
pub(crate) fn varint_len(v: u32) -> usize {
    match v {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        0x4000..=0x1f_ffff => 3,
        0x20_0000..=0xfff_ffff => 4,
        _ => 5,
    }
}

fn write_varint(out: &mut [u8], mut v: u32) -> usize {
    let mut i = 0;
    while v >= 0x80 {
        out[i] = (v as u8) | 0x80;
        v >>= 7;
        i += 1;
    }
    out[i] = v as u8;
    i + 1
}

#[inline]
fn read_varint(buf: &[u8]) -> (u32, usize) {
    let mut v = 0u32;
    let mut shift = 0;
    for (i, &b) in buf.iter().enumerate().take(5) {
        v |= ((b & 0x7f) as u32) << shift;
        if b & 0x80 == 0 {
            return (v, i + 1);
        }
        shift += 7;
    }
    panic!("corrupt varint in item header");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(h: NewHeader) {
        let mut buf = [0u8; MAX_HEADER_LEN + 4];
        let n = h.encode(&mut buf);
        assert_eq!(n, h.header_len());
        assert!(n <= MAX_HEADER_LEN);
        let d = decode(&buf);
        assert_eq!(d.header_len as usize, n);
        assert_eq!(d.key_len, h.key_len);
        assert_eq!(d.value_len, h.value_len);
        assert_eq!(d.flags, h.flags);
        assert_eq!(d.exp, h.exp);
        assert_eq!(d.explicit_cas(), h.cas);
        assert!(!d.is_dead());
        assert_eq!(d.total_len(), h.total_len());
        assert_eq!(key_range(&buf), d.key_range());
        if h.exp != 0 {
            let off = d.exp_offset().unwrap();
            assert_eq!(&buf[off..off + 4], &h.exp.to_le_bytes());
        } else {
            assert_eq!(d.exp_offset(), None);
        }
    }

    #[test]
    fn small_item_header_is_two_bytes() {
        let h = NewHeader {
            key_len: 8,
            value_len: 8,
            flags: 0,
            exp: 0,
            cas: None,
        };
        assert_eq!(h.header_len(), 2);
        roundtrip(h);
        let h = NewHeader {
            key_len: 8,
            value_len: 100,
            flags: 0,
            exp: 0,
            cas: None,
        };
        assert_eq!(h.header_len(), 3);
        // Every length at a code boundary takes the bytes the format says.
        for (vl, len) in [
            (12, 2),
            (13, 3),
            (268, 3),
            (269, 4),
            (65_804, 4),
            (65_805, 6),
            (u32::MAX, 6),
        ] {
            let h = NewHeader {
                key_len: 8,
                value_len: vl,
                flags: 0,
                exp: 0,
                cas: None,
            };
            assert_eq!(h.header_len(), len, "value length {vl}");
            roundtrip(h);
        }
    }

    #[test]
    fn all_fields_roundtrip() {
        for &vl in &[
            0u32,
            1,
            12,
            13,
            14,
            15,
            127,
            128,
            268,
            269,
            270,
            16383,
            16384,
            65_804,
            65_805,
            1 << 21,
            1 << 28,
            1 << 30,
        ] {
            for &flags in &[0u32, 1, 127, 128, u32::MAX] {
                for &exp in &[0u32, 1, u32::MAX] {
                    for cas in [None, Some(0), Some(u64::MAX), Some(0x1234_5678_9abc)] {
                        roundtrip(NewHeader {
                            key_len: 250,
                            value_len: vl,
                            flags,
                            exp,
                            cas,
                        });
                    }
                }
            }
        }
    }

    #[test]
    fn dead_bit_survives_decode() {
        let mut buf = [0u8; 32];
        NewHeader {
            key_len: 1,
            value_len: 3,
            flags: 7,
            exp: 9,
            cas: None,
        }
        .encode(&mut buf);
        mark_dead(&mut buf);
        let d = decode(&buf);
        assert!(d.is_dead());
        assert_eq!((d.flags, d.exp, d.value_len), (7, 9, 3));
    }

    #[test]
    fn varint_lengths_match_encoding() {
        for v in [
            0u32,
            0x7f,
            0x80,
            0x3fff,
            0x4000,
            0x1f_ffff,
            0x20_0000,
            0xfff_ffff,
            0x1000_0000,
            u32::MAX,
        ] {
            let mut b = [0u8; 5];
            assert_eq!(write_varint(&mut b, v), varint_len(v));
            assert_eq!(read_varint(&b), (v, varint_len(v)));
        }
    }
}
