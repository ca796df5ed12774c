//! Small, strict parsers for a filter's argument bytes. Arguments come straight from a client
//! request, so they accept exactly one spelling and never allocate.

/// A decimal `u64`: one or more ASCII digits, nothing else (no sign, no spaces). `None` when
/// malformed or above `u64::MAX`.
pub fn decimal_u64(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &b in bytes {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(n)
}

/// Split `name=value` at the first `=`.
pub fn key_value(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let eq = bytes.iter().position(|&b| b == b'=')?;
    Some((&bytes[..eq], &bytes[eq + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal() {
        assert_eq!(decimal_u64(b"0"), Some(0));
        assert_eq!(decimal_u64(b"0010"), Some(10));
        assert_eq!(decimal_u64(b"18446744073709551615"), Some(u64::MAX));
        for bad in [
            &b""[..],
            b"18446744073709551616",
            b"+1",
            b"-1",
            b" 1",
            b"1 ",
            b"1\r\n",
            b"0x10",
            b"1e3",
        ] {
            assert_eq!(decimal_u64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn split() {
        assert_eq!(key_value(b"user=5"), Some((&b"user"[..], &b"5"[..])));
        assert_eq!(key_value(b"a=b=c"), Some((&b"a"[..], &b"b=c"[..])));
        assert_eq!(key_value(b"=1"), Some((&b""[..], &b"1"[..])));
        assert_eq!(key_value(b"user"), None);
    }
}
