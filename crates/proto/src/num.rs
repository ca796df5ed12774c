//! Number parsing with the exact acceptance rules of memcached's `safe_strtol`,
//! `safe_strtoul` and `safe_strtoull` (util.c), which wrap the C library's `strto*`.
//!
//! The C functions skip leading white space, take an optional sign and then digits; memcached
//! accepts the result only when the digits are followed by the end of the token or by white
//! space, when no overflow happened, and (for the unsigned variants) when a value that would be
//! negative as a signed number was not written with a minus sign.
//!
//! memcached 1.6.40's text parser reads most fields with its own stricter functions instead
//! (vendor/mcmc's `mcmc_toktou32`, `mcmc_toktou64`, `mcmc_tokto32`): [`tok_u32`], [`tok_u64`],
//! [`tok_i32`] (digits only, a `-` for the signed one, no `+`, no white space, no truncation).

/// C's `isspace` in the "C" locale.
pub fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Result of scanning `[space]* [+-]? digits` like `strtoull`: magnitude (saturated),
/// whether it overflowed u64, whether it was negative, and where parsing stopped.
struct Scan {
    magnitude: u64,
    overflow: bool,
    negative: bool,
    end: usize,
    any_digit: bool,
}

fn scan(s: &[u8]) -> Scan {
    let mut i = 0;
    while i < s.len() && is_c_space(s[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        negative = s[i] == b'-';
        i += 1;
    }
    let digits_start = i;
    let mut magnitude: u64 = 0;
    let mut overflow = false;
    while i < s.len() && s[i].is_ascii_digit() {
        let d = u64::from(s[i] - b'0');
        match magnitude.checked_mul(10).and_then(|m| m.checked_add(d)) {
            Some(m) => magnitude = m,
            None => overflow = true,
        }
        i += 1;
    }
    let any_digit = i > digits_start;
    Scan {
        magnitude,
        overflow,
        negative,
        end: if any_digit { i } else { 0 },
        any_digit,
    }
}

/// memcached accepts a number only when what follows it is the token's end or white space.
fn tail_ok(s: &[u8], end: usize) -> bool {
    end == s.len() || is_c_space(s[end])
}

/// `safe_strtoull`: a u64; "-1" style values are refused.
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    let sc = scan(s);
    if !sc.any_digit || sc.overflow || !tail_ok(s, sc.end) {
        return None;
    }
    // strtoull negates the magnitude for a leading '-'; memcached refuses it only when the
    // result looks negative as a signed value, so "-0" is accepted as 0.
    let v = if sc.negative {
        sc.magnitude.wrapping_neg()
    } else {
        sc.magnitude
    };
    if (v as i64) < 0 && sc.negative {
        return None;
    }
    Some(v)
}

/// `safe_strtoul` into a 32-bit value, as memcached does for client flags: the C call works
/// on a 64-bit `unsigned long` and the result is truncated to 32 bits.
pub fn parse_u32_flags(s: &[u8]) -> Option<u32> {
    parse_u64(s).map(|v| v as u32)
}

/// `safe_strtol` into an `int32_t`: overflow of the 64-bit `long` is refused (ERANGE); any
/// other value is truncated to 32 bits like memcached 1.6's plain C assignment, so
/// "4294967297" reads as 1 and "2147483648" as a negative number.
pub fn parse_i32(s: &[u8]) -> Option<i32> {
    let sc = scan(s);
    if !sc.any_digit || !tail_ok(s, sc.end) {
        return None;
    }
    // strtol range: [-2^63, 2^63-1]; ERANGE beyond it.
    let v: i64 = if sc.negative {
        if sc.overflow || sc.magnitude > (1u64 << 63) {
            return None;
        }
        (sc.magnitude as i64).wrapping_neg()
    } else {
        if sc.overflow || sc.magnitude > i64::MAX as u64 {
            return None;
        }
        sc.magnitude as i64
    };
    Some(v as i32)
}

/// mcmc's length caps: a longer token is refused before any digit is read.
const TOK32_MAX: usize = 11;
const TOK64_MAX: usize = 22;

/// Digits only, accumulated without overflow; an empty token reads as 0 (as in mcmc).
fn tok_digits(s: &[u8], max_len: usize, limit: u64) -> Option<u64> {
    if s.len() > max_len {
        return None;
    }
    s.iter().try_fold(0u64, |sum, &b| {
        let d = u64::from(b.wrapping_sub(b'0'));
        (d < 10).then_some(())?;
        sum.checked_mul(10)?.checked_add(d).filter(|&v| v <= limit)
    })
}

/// memcached 1.6.40's unsigned 32-bit field (`mcmc_toktou32`).
pub fn tok_u32(s: &[u8]) -> Option<u32> {
    tok_digits(s, TOK32_MAX, u64::from(u32::MAX)).map(|v| v as u32)
}

/// memcached 1.6.40's unsigned 64-bit field (`mcmc_toktou64`).
pub fn tok_u64(s: &[u8]) -> Option<u64> {
    tok_digits(s, TOK64_MAX, u64::MAX)
}

/// memcached 1.6.40's signed 32-bit field (`mcmc_tokto32`): an optional `-`, then digits.
pub fn tok_i32(s: &[u8]) -> Option<i32> {
    if s.len() > TOK32_MAX {
        return None;
    }
    match s.strip_prefix(b"-") {
        Some(digits) => {
            tok_digits(digits, TOK32_MAX, 1 << 31).map(|v| (v as i64).wrapping_neg() as i32)
        }
        None => tok_digits(s, TOK32_MAX, i32::MAX as u64).map(|v| v as i32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tok_rules() {
        assert_eq!(tok_i32(b"-2147483648"), Some(i32::MIN));
        assert_eq!(tok_i32(b"2147483647"), Some(i32::MAX));
        assert_eq!(tok_i32(b"2147483648"), None);
        assert_eq!(tok_i32(b"4294967297"), None);
        assert_eq!(tok_i32(b"+1"), None);
        assert_eq!(tok_i32(b"01"), Some(1));
        assert_eq!(tok_i32(b""), Some(0));
        assert_eq!(tok_i32(b"-"), Some(0));
        assert_eq!(tok_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(tok_u32(b"4294967296"), None);
        assert_eq!(tok_u32(b"-0"), None);
        assert_eq!(tok_u32(b"000000000001"), None);
        assert_eq!(tok_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(tok_u64(b"18446744073709551616"), None);
        assert_eq!(tok_u64(b"1.5"), None);
    }

    #[test]
    fn u64_rules() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b"-0"), Some(0));
        assert_eq!(parse_u64(b"+7"), Some(7));
        assert_eq!(parse_u64(b" 7"), Some(7));
        assert_eq!(parse_u64(b"7 "), Some(7));
        assert_eq!(parse_u64(b"7\r\n"), Some(7));
        assert_eq!(parse_u64(b"7a"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"a"), None);
    }

    #[test]
    fn i32_rules() {
        assert_eq!(parse_i32(b"2147483647"), Some(i32::MAX));
        assert_eq!(parse_i32(b"2147483648"), Some(i32::MIN));
        assert_eq!(parse_i32(b"-1"), Some(-1));
        assert_eq!(parse_i32(b"4294967295"), Some(-1));
        assert_eq!(parse_i32(b"4294967297"), Some(1));
        assert_eq!(parse_i32(b"99999999999999999999"), None);
        assert_eq!(parse_i32(b"x"), None);
    }

    #[test]
    fn flags_truncate_like_c() {
        assert_eq!(parse_u32_flags(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_u32_flags(b"4294967296"), Some(0));
        assert_eq!(parse_u32_flags(b"-1"), None);
    }
}
