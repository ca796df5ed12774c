//! Deterministic randomness for the fuzz checkers' stable replays: one generator and one input
//! hash, shared by the store, parser and client-reply checkers (each includes this file by
//! `#[path]`, as the cargo-fuzz targets include the checkers).
#![allow(dead_code)] // each includer uses part of it

/// xorshift64*: varied, repeatable choices (chunk sizes, prefix samples, seeded inputs).
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// FNV-1a of a whole input: a seed derived from it, so the chunking varies with the input.
pub fn hash(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}
