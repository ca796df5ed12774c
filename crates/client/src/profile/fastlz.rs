//! FastLZ decompression (levels 1 and 2): PHP's `memcached` extension compresses with FastLZ by
//! default (`memcached.compression_type = fastlz`, flag 0x40). mnemo only reads it; it writes
//! zlib, which every build of the extension reads.
//!
//! ```text
//!   first byte: top 3 bits = level - 1, low 5 bits = the first instruction's control bits
//!   instruction, control byte c:
//!     c < 32 : literal run, copy the next c + 1 bytes
//!     c >= 32: match, length (c >> 5) + 2 (length code 7: more length bytes follow),
//!              distance from ((c & 31) << 8) and the next byte
//!              (level 2: a distance byte of 255 with (c & 31) == 31 adds a 16-bit distance)
//! ```

/// Level 2's longest distance that fits the short form; longer ones follow as 16 bits.
const L2_MAX_SHORT: usize = 8191;

/// Why a FastLZ stream could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FastlzError {
    #[error("fastlz: stream ends inside an instruction")]
    Truncated,
    #[error("fastlz: match reaches before the start of the output")]
    BadDistance,
    #[error("fastlz: output longer than the {0} bytes announced")]
    TooLong(usize),
    #[error("fastlz: unknown level {0}")]
    Level(u8),
}

/// Decompress `input`, which must produce exactly `len` bytes (the caller read `len` from the
/// value's length prefix and checked it against its own limit).
pub fn decompress(input: &[u8], len: usize) -> Result<Vec<u8>, FastlzError> {
    let mut out = Vec::with_capacity(len);
    let Some(&first) = input.first() else {
        return Ok(out);
    };
    let level = (first >> 5) + 1;
    if level > 2 {
        return Err(FastlzError::Level(level));
    }
    let mut ip = 1;
    let mut ctrl = usize::from(first & 31);
    let next = |ip: &mut usize| -> Result<usize, FastlzError> {
        let b = *input.get(*ip).ok_or(FastlzError::Truncated)?;
        *ip += 1;
        Ok(usize::from(b))
    };
    loop {
        if ctrl >= 32 {
            let mut n = (ctrl >> 5) - 1;
            let ofs = (ctrl & 31) << 8;
            if n == 6 {
                if level == 1 {
                    n += next(&mut ip)?;
                } else {
                    loop {
                        let code = next(&mut ip)?;
                        n += code;
                        if code != 255 {
                            break;
                        }
                    }
                }
            }
            let code = next(&mut ip)?;
            let mut dist = ofs + code + 1;
            if level == 2 && code == 255 && ofs == 31 << 8 {
                let hi = next(&mut ip)?;
                let lo = next(&mut ip)?;
                dist = (hi << 8) + lo + L2_MAX_SHORT + 1;
            }
            n += 3;
            let from = out
                .len()
                .checked_sub(dist)
                .ok_or(FastlzError::BadDistance)?;
            if out.len() + n > len {
                return Err(FastlzError::TooLong(len));
            }
            // Byte by byte: a match may overlap the bytes it is making (a run).
            for i in 0..n {
                let b = out[from + i];
                out.push(b);
            }
        } else {
            let n = ctrl + 1;
            let lit = input.get(ip..ip + n).ok_or(FastlzError::Truncated)?;
            if out.len() + n > len {
                return Err(FastlzError::TooLong(len));
            }
            out.extend_from_slice(lit);
            ip += n;
        }
        if ip >= input.len() {
            return Ok(out);
        }
        ctrl = next(&mut ip)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What php-memcached 3.2 (Debian 12) stored for `str_repeat("the quick brown fox ", 200)`
    /// (4000 bytes), after its 4-byte length prefix.
    const PHP_FOX: &[u8] = b"\x13the quick brown fox \xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0&\x13\x02ox ";

    #[test]
    fn literal_runs_and_overlapping_matches() {
        // One literal run of 3, then a match of 5 at distance 3 (overlapping its own output).
        let s = [0x02, b'a', b'b', b'c', 0x60, 2];
        assert_eq!(decompress(&s, 8).unwrap(), b"abcabcab");
        assert_eq!(decompress(&[], 0).unwrap(), b"");
    }

    #[test]
    fn a_value_php_wrote() {
        // A literal run, long matches at distance 20, a last short literal run.
        let out = decompress(PHP_FOX, 4000).unwrap();
        assert_eq!(out, b"the quick brown fox ".repeat(200));
        assert!(decompress(PHP_FOX, 3999).is_err());
    }

    #[test]
    fn bad_streams_are_errors() {
        assert_eq!(decompress(&[0x05, b'a'], 10), Err(FastlzError::Truncated));
        assert_eq!(
            decompress(&[0x00, b'a', 0x20, 5], 10),
            Err(FastlzError::BadDistance)
        );
        assert_eq!(
            decompress(&[0x02, b'a', b'b', b'c'], 2),
            Err(FastlzError::TooLong(2))
        );
        assert_eq!(decompress(&[0x60], 2), Err(FastlzError::Level(4)));
        // A match whose length runs past the announced size stops there (no bomb).
        assert!(decompress(&[0x00, b'a', 0xe0, 255, 0], 100).is_err());
    }
}
