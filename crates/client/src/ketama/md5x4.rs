//! The ketama hash of many keys at once: MD5 over four (or 8, or 16) keys in lockstep.
//!
//! A key's point on the ring is the first little-endian word of `md5(key)`. MD5's 64 steps form
//! one dependency chain, so a single digest leaves most of a core idle (~100 ns for a short key,
//! whatever the implementation); four independent chains, step by step in lanes, fill it (the
//! compiler turns the lane loops into SSE2 operations). A 100-key multi-get spent about a sixth of
//! its client CPU (a third of its user time) in MD5 before this. `cargo run --release -p mnemo-client --example md5x4_speed`:
//! 75 ns a key, against 130-150 one at a time.
//!
//! ```text
//!   keys  k0 k1 k2 k3 | k4 ...        one 64-byte block each (keys up to 55 bytes):
//!   lane   0  1  2  3                 key | 0x80 | zeros | bit length (u64 LE)
//!   state  a[4] b[4] c[4] d[4]        64 steps, each applied to the four lanes
//! ```
//!
//! Longer keys (two or more blocks) take the one-key path; the result is the same MD5.
//!
//! How many lanes depends on the CPU, found at run time (the default x86-64 target promises
//! only SSE2, where more than four lanes spill registers): 16 with AVX-512 (which also
//! rotates in one instruction), 8 with AVX2, else 4. The example above, on an AVX-512 machine:
//! 4 lanes 74 ns a key, 8 lanes (AVX2) 35, 16 lanes 28.

/// Per-step shift amounts (RFC 1321).
const S: [u32; 64] = [
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, //
    5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, //
    4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, //
    6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
];

/// Per-step constants, floor(abs(sin(i + 1)) * 2^32) (RFC 1321).
const K: [u32; 64] = [
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
];

const INIT: [u32; 4] = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476];

/// Longest key that fits one block with its padding.
const ONE_BLOCK: usize = 55;

/// `hashes[i]` = the ketama hash (first little-endian word of MD5) of `keys[i]`.
pub fn key_hashes<'k>(keys: impl ExactSizeIterator<Item = &'k [u8]>, hashes: &mut Vec<u32>) {
    #[cfg(target_arch = "x86_64")]
    {
        // The feature checks are cached by std (an atomic load each).
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            // SAFETY: the CPU has the features the function is compiled for.
            return unsafe { wide::avx512(keys, hashes) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: as above.
            return unsafe { wide::avx2(keys, hashes) };
        }
    }
    in_lanes::<4, _>(keys, hashes)
}

/// The same code, compiled for wider vectors (inlined into functions that enable them).
#[cfg(target_arch = "x86_64")]
mod wide {
    use super::in_lanes;

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn avx2<'k>(
        keys: impl ExactSizeIterator<Item = &'k [u8]>,
        hashes: &mut Vec<u32>,
    ) {
        in_lanes::<8, _>(keys, hashes)
    }

    #[target_feature(enable = "avx512f,avx512vl")]
    pub(super) unsafe fn avx512<'k>(
        keys: impl ExactSizeIterator<Item = &'k [u8]>,
        hashes: &mut Vec<u32>,
    ) {
        in_lanes::<16, _>(keys, hashes)
    }
}

#[inline(always)]
fn in_lanes<'k, const L: usize, I: ExactSizeIterator<Item = &'k [u8]>>(
    keys: I,
    hashes: &mut Vec<u32>,
) {
    hashes.clear();
    hashes.reserve(keys.len());
    let mut batch: [&[u8]; L] = [&[]; L];
    let mut n = 0;
    for key in keys {
        batch[n] = key;
        n += 1;
        if n == L {
            push_batch(&batch, n, hashes);
            n = 0;
        }
    }
    if n > 0 {
        push_batch(&batch, n, hashes);
    }
}

#[inline(always)]
fn push_batch<const L: usize>(batch: &[&[u8]; L], n: usize, hashes: &mut Vec<u32>) {
    if batch[..n].iter().all(|k| k.len() <= ONE_BLOCK) {
        hashes.extend_from_slice(&first_words(batch)[..n]);
    } else {
        hashes.extend(batch[..n].iter().map(|k| super::key_hash(k)));
    }
}

/// Which message word step `i` adds (RFC 1321).
const G: [usize; 64] = {
    let mut g = [0; 64];
    let mut i = 0;
    while i < 64 {
        g[i] = match i / 16 {
            0 => i,
            1 => (5 * i + 1) % 16,
            2 => (3 * i + 5) % 16,
            _ => (7 * i) % 16,
        };
        i += 1;
    }
    g
};

/// One MD5 step on every lane; `st` is (a, b, c, d), rotated as the step's output becomes b.
#[inline(always)]
fn step<const L: usize>(
    st: &mut [[u32; L]; 4],
    m: &[[u32; L]; 16],
    i: usize,
    f: impl Fn(u32, u32, u32) -> u32,
) {
    let [a, b, c, d] = *st;
    let mut t = [0u32; L];
    for l in 0..L {
        t[l] = b[l].wrapping_add(
            a[l].wrapping_add(f(b[l], c[l], d[l]))
                .wrapping_add(K[i])
                .wrapping_add(m[G[i]][l])
                .rotate_left(S[i]),
        );
    }
    *st = [d, t, b, c];
}

/// MD5's first output word for `L` keys of at most 55 bytes each (unused lanes: any key).
#[inline(always)]
fn first_words<const L: usize>(keys: &[&[u8]; L]) -> [u32; L] {
    // m[word][lane]: each key's one padded block as sixteen little-endian words.
    let mut m = [[0u32; L]; 16];
    for (lane, key) in keys.iter().enumerate() {
        let mut block = [0u8; 64];
        block[..key.len()].copy_from_slice(key);
        block[key.len()] = 0x80;
        block[56..].copy_from_slice(&((key.len() as u64) * 8).to_le_bytes());
        for (w, word) in block.chunks_exact(4).enumerate() {
            m[w][lane] = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
        }
    }
    let mut st = [[INIT[0]; L], [INIT[1]; L], [INIT[2]; L], [INIT[3]; L]];
    for i in 0..16 {
        step(&mut st, &m, i, |b, c, d| (b & c) | (!b & d));
    }
    for i in 16..32 {
        step(&mut st, &m, i, |b, c, d| (d & b) | (!d & c));
    }
    for i in 32..48 {
        step(&mut st, &m, i, |b, c, d| b ^ c ^ d);
    }
    for i in 48..64 {
        step(&mut st, &m, i, |b, c, d| c ^ (b | !d));
    }
    let a = st[0];
    let mut out = [0u32; L];
    for l in 0..L {
        out[l] = INIT[0].wrapping_add(a[l]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ketama::key_hash;

    #[test]
    fn equals_md5_for_every_length_and_batch_shape() {
        // Lengths 0..=130 cover one block, the 55/56 boundary and multi-block keys; batch sizes
        // 1..=9 cover full and partial batches, and mixes of short and long keys.
        let keys: Vec<Vec<u8>> = (0..=130u32)
            .map(|len| (0..len).map(|i| (i * 31 + len * 7) as u8).collect())
            .collect();
        let mut hashes = Vec::new();
        for size in 1..=33 {
            for chunk in keys.chunks(size) {
                let want: Vec<u32> = chunk.iter().map(|k| key_hash(k)).collect();
                let keys = || chunk.iter().map(|k| k.as_slice());
                key_hashes(keys(), &mut hashes);
                assert_eq!(hashes, want, "batch of {size}");
                // Every width, whatever this CPU picks above.
                in_lanes::<4, _>(keys(), &mut hashes);
                assert_eq!(hashes, want, "4 lanes, batch of {size}");
                in_lanes::<8, _>(keys(), &mut hashes);
                assert_eq!(hashes, want, "8 lanes, batch of {size}");
                in_lanes::<16, _>(keys(), &mut hashes);
                assert_eq!(hashes, want, "16 lanes, batch of {size}");
                #[cfg(target_arch = "x86_64")]
                {
                    if std::arch::is_x86_feature_detected!("avx2") {
                        unsafe { wide::avx2(keys(), &mut hashes) };
                        assert_eq!(hashes, want, "avx2, batch of {size}");
                    }
                    if std::arch::is_x86_feature_detected!("avx512f")
                        && std::arch::is_x86_feature_detected!("avx512vl")
                    {
                        unsafe { wide::avx512(keys(), &mut hashes) };
                        assert_eq!(hashes, want, "avx512, batch of {size}");
                    }
                }
            }
        }
    }

    #[test]
    fn rfc_1321_vectors() {
        // First words of the RFC's test-suite digests, little-endian.
        let cases: [(&[u8], u32); 3] = [
            (b"", 0xd98c1dd4),    // d41d8cd9...
            (b"a", 0xb975c10c),   // 0cc175b9...
            (b"abc", 0x98500190), // 90015098...
        ];
        let mut hashes = Vec::new();
        key_hashes(cases.iter().map(|(k, _)| *k), &mut hashes);
        assert_eq!(hashes, cases.map(|(_, h)| h));
    }
}
