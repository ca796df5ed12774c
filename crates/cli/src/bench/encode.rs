//! Request encoding: memcached text-protocol `get` / multi-`get` / `set` written straight into a
//! connection's reused send buffer. No allocation per request once the buffer has grown to the
//! batch size; keys are fixed-width (prefix + zero-padded decimal id), so a key costs a copy of
//! the prefix and a few digit stores, and every value is a slice of one pre-built blob.

/// How keys look: `prefix` followed by the id in decimal, zero-padded to `width` bytes in total.
#[derive(Clone, Debug)]
pub struct KeyFormat {
    prefix: Vec<u8>,
    digits: usize,
}

impl KeyFormat {
    /// Keys of exactly `key_size` bytes for ids `0..keys`.
    pub fn new(prefix: &str, key_size: usize, keys: u64) -> Result<KeyFormat, String> {
        if prefix.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err("key prefix must not contain spaces or control characters".into());
        }
        let need = decimal_len(keys.saturating_sub(1));
        if key_size > 250 {
            return Err("key size is at most 250 bytes (memcached's limit)".into());
        }
        if key_size < prefix.len() + need {
            return Err(format!(
                "key size {key_size} is too small for prefix {prefix:?} and {keys} keys (need {})",
                prefix.len() + need
            ));
        }
        Ok(KeyFormat {
            prefix: prefix.as_bytes().to_vec(),
            digits: key_size - prefix.len(),
        })
    }

    pub fn len(&self) -> usize {
        self.prefix.len() + self.digits
    }

    /// Appends the key for `id` to `out`.
    #[inline]
    pub fn write(&self, out: &mut Vec<u8>, id: u64) {
        out.extend_from_slice(&self.prefix);
        let start = out.len();
        out.resize(start + self.digits, b'0');
        write_digits_right(&mut out[start..], id);
    }
}

/// Fills `slot` with `v` in decimal, right-aligned; the caller pre-fills it with '0'.
#[inline]
fn write_digits_right(slot: &mut [u8], mut v: u64) {
    let mut i = slot.len();
    while v > 0 && i > 0 {
        i -= 1;
        slot[i] = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

pub fn decimal_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 10 {
        v /= 10;
        n += 1;
    }
    n
}

/// Appends `v` in decimal.
#[inline]
pub fn write_u64(out: &mut Vec<u8>, v: u64) {
    let mut tmp = [0u8; 20];
    let n = decimal_len(v);
    write_digits_right(&mut tmp[..n], v);
    if v == 0 {
        tmp[0] = b'0';
    }
    out.extend_from_slice(&tmp[..n]);
}

/// `get <key>\r\n`, or `get <k1> <k2> ... <kn>\r\n` for every id in `ids`.
#[inline]
pub fn get(out: &mut Vec<u8>, keys: &KeyFormat, ids: impl IntoIterator<Item = u64>) {
    out.extend_from_slice(b"get");
    for id in ids {
        out.push(b' ');
        keys.write(out, id);
    }
    out.extend_from_slice(b"\r\n");
}

/// `set <key> 0 0 <len>\r\n<value>\r\n`.
#[inline]
pub fn set(out: &mut Vec<u8>, keys: &KeyFormat, id: u64, value: &[u8]) {
    out.extend_from_slice(b"set ");
    keys.write(out, id);
    out.extend_from_slice(b" 0 0 ");
    write_u64(out, value.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The blob every value is cut from: printable, not all one byte (so no server-side compression
/// or dedup can flatter anyone), deterministic.
pub fn value_blob(max: usize) -> Vec<u8> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut state = 0x006d_6e65_6d6f_u64;
    (0..max)
        .map(|_| ALPHABET[(super::rng::splitmix64(&mut state) & 63) as usize])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_fixed_width_and_padded() {
        let k = KeyFormat::new("key:", 10, 100_000).unwrap();
        let mut out = Vec::new();
        k.write(&mut out, 0);
        assert_eq!(out, b"key:000000");
        out.clear();
        k.write(&mut out, 99_999);
        assert_eq!(out, b"key:099999");
        assert_eq!(k.len(), 10);
    }

    #[test]
    fn key_size_checked() {
        assert!(KeyFormat::new("k", 5, 100_000).is_err()); // 5 digits + 1 > 5
        assert!(KeyFormat::new("k", 6, 100_000).is_ok());
        assert!(KeyFormat::new("k", 251, 10).is_err());
        assert!(KeyFormat::new("a b", 16, 10).is_err());
        assert!(KeyFormat::new("", 1, 10).is_ok());
        assert!(KeyFormat::new("", 1, 11).is_err());
    }

    #[test]
    fn numbers() {
        for v in [0u64, 1, 9, 10, 99, 100, 12345, u64::MAX] {
            let mut out = Vec::new();
            write_u64(&mut out, v);
            assert_eq!(out, v.to_string().as_bytes());
            assert_eq!(decimal_len(v), v.to_string().len());
        }
    }

    #[test]
    fn get_and_multiget_bytes() {
        let k = KeyFormat::new("k", 4, 1000).unwrap();
        let mut out = Vec::new();
        get(&mut out, &k, [7]);
        assert_eq!(out, b"get k007\r\n");
        out.clear();
        get(&mut out, &k, [1, 22, 333]);
        assert_eq!(out, b"get k001 k022 k333\r\n");
    }

    #[test]
    fn set_bytes_and_batches_append() {
        let k = KeyFormat::new("k", 3, 100).unwrap();
        let mut out = Vec::new();
        set(&mut out, &k, 5, b"hello");
        get(&mut out, &k, [5]);
        assert_eq!(out, b"set k05 0 0 5\r\nhello\r\nget k05\r\n");
        out.clear();
        set(&mut out, &k, 0, b"");
        assert_eq!(out, b"set k00 0 0 0\r\n\r\n");
    }

    #[test]
    fn blob_is_deterministic_and_printable() {
        let a = value_blob(1000);
        assert_eq!(a, value_blob(1000));
        assert_eq!(&value_blob(10)[..], &a[..10]);
        assert!(a.iter().all(|b| b.is_ascii_graphic()));
        assert!(a.iter().any(|&b| b != a[0]));
    }
}
