//! The data and the queries of seed 001, both derived from seeds so they can be regenerated.
//!
//! A user's value depends only on (data seed, user id): the loader writes it, and a `run` given
//! the same data seed recomputes it to check what the server returned, without keeping a copy of
//! a gigabyte of values.

use mnemo_filter_sdk::records::{Record, RECORD_LEN};

/// Timestamps are drawn from 30 days after this instant (seconds), so ties happen now and then
/// at a million users and the tie-breaks of the "newest" order are exercised.
const TS_BASE: u64 = 1_700_000_000;
const TS_SPAN: u64 = 30 * 86_400;
/// Articles are ids in `0..ARTICLES`.
const ARTICLES: u64 = 10_000_000;

/// splitmix64 as the whole generator: one word of state, a handful of instructions per draw,
/// and any seed (0 included) gives a well-mixed stream. Statistical quality well beyond what
/// picking friends and timestamps needs.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// An independent stream `stream` of `seed` (one per connection, one per user).
    pub fn stream(seed: u64, stream: u64) -> Rng {
        let mut r = Rng(seed ^ stream.wrapping_mul(0xD6E8_FEB8_6659_FD93));
        Rng(r.next_u64())
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0) by multiply-shift: no division, bias below n / 2^64.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// The records of user `id`: `n` records with user = id, a random article and timestamp.
pub fn user_records(seed: u64, id: u64, n: usize) -> impl Iterator<Item = Record> {
    let mut rng = Rng::stream(seed, id);
    (0..n).map(move |_| Record {
        user: id,
        article: rng.below(ARTICLES),
        ts: TS_BASE + rng.below(TS_SPAN),
    })
}

/// Appends user `id`'s encoded value to `out`.
pub fn push_value(seed: u64, id: u64, n: usize, out: &mut Vec<u8>) {
    out.reserve(n * RECORD_LEN);
    for r in user_records(seed, id, n) {
        r.encode(out);
    }
}

/// Appends `n` in decimal (no allocation; the request path formats 100 keys per query).
#[inline]
pub fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Appends the key of user `id`: `u:<id>`.
#[inline]
pub fn push_key(out: &mut Vec<u8>, id: u64) {
    out.extend_from_slice(b"u:");
    push_decimal(out, id);
}

/// Picks distinct friends. A stamp per user (the number of the query that last took it) makes
/// each pick O(1) with no clearing between queries: 4 bytes per user per connection.
pub struct FriendPicker {
    stamp: Vec<u32>,
    query: u32,
}

impl FriendPicker {
    pub fn new(users: u64) -> FriendPicker {
        FriendPicker {
            stamp: vec![0; users as usize],
            query: 0,
        }
    }

    /// Fills `out` with `count` distinct ids in `0..users` (count <= users, checked by the caller).
    pub fn pick(&mut self, rng: &mut Rng, count: usize, out: &mut Vec<u64>) {
        let users = self.stamp.len() as u64;
        assert!(count as u64 <= users, "more friends than users");
        self.query = self.query.wrapping_add(1);
        if self.query == 0 {
            // Wrapped after 4 billion queries: old stamps could collide with new ones.
            self.stamp.fill(0);
            self.query = 1;
        }
        out.clear();
        while out.len() < count {
            let id = rng.below(users);
            let s = &mut self.stamp[id as usize];
            if *s != self.query {
                *s = self.query;
                out.push(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemo_filter_sdk::records;

    #[test]
    fn values_are_deterministic_and_per_user() {
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        push_value(7, 42, 30, &mut a);
        push_value(7, 42, 30, &mut b);
        push_value(7, 43, 30, &mut c);
        assert_eq!(a.len(), 720);
        assert_eq!(a, b);
        assert_ne!(a, c);
        for r in records::iter(&a) {
            assert_eq!(r.user, 42);
            assert!(r.article < ARTICLES && (TS_BASE..TS_BASE + TS_SPAN).contains(&r.ts));
        }
    }

    #[test]
    fn decimal_and_keys() {
        let mut out = Vec::new();
        for n in [0, 7, 10, 999_999, u64::MAX] {
            out.clear();
            push_decimal(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes());
        }
        out.clear();
        push_key(&mut out, 12);
        assert_eq!(out, b"u:12");
    }

    #[test]
    fn friends_are_distinct_and_in_range() {
        let mut rng = Rng::stream(1, 0);
        let mut picker = FriendPicker::new(150);
        let mut out = Vec::new();
        for _ in 0..200 {
            picker.pick(&mut rng, 100, &mut out);
            let mut sorted = out.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 100);
            assert!(sorted.iter().all(|&id| id < 150));
        }
        // Every user is a friend once when all are asked for.
        picker.pick(&mut rng, 150, &mut out);
        out.sort_unstable();
        assert_eq!(out, (0..150).collect::<Vec<_>>());
    }
}
