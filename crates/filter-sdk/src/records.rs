//! Seed 001's records: a value is a run of 24-byte records, each three little-endian u64s.
//!
//! ```text
//!   0        8          16         24
//!   +--------+----------+----------+
//!   | user   | article  | ts       |   x N; trailing bytes short of a record are ignored
//!   +--------+----------+----------+
//! ```
//!
//! "Newest" is one total order (timestamp descending, then user ascending, then article
//! ascending), so a top-k computed in a filter, merged across servers, or computed in a
//! client gives byte-identical results.

use std::cmp::Ordering;

/// Bytes per encoded record.
pub const RECORD_LEN: usize = 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Record {
    pub user: u64,
    pub article: u64,
    pub ts: u64,
}

impl Record {
    pub fn decode(b: &[u8; RECORD_LEN]) -> Record {
        let word = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        Record {
            user: word(0),
            article: word(1),
            ts: word(2),
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.user.to_le_bytes());
        out.extend_from_slice(&self.article.to_le_bytes());
        out.extend_from_slice(&self.ts.to_le_bytes());
    }
}

/// The whole records of a value, in order.
pub fn iter(value: &[u8]) -> impl Iterator<Item = Record> + '_ {
    value
        .chunks_exact(RECORD_LEN)
        .map(|c| Record::decode(c.try_into().expect("exact chunk")))
}

/// Encode records back to back.
pub fn encode_all(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::with_capacity(records.len() * RECORD_LEN);
    for r in records {
        r.encode(&mut out);
    }
    out
}

/// The "newest first" order: `Less` means `a` comes before `b`.
pub fn newest_first(a: &Record, b: &Record) -> Ordering {
    b.ts.cmp(&a.ts)
        .then(a.user.cmp(&b.user))
        .then(a.article.cmp(&b.article))
}

/// Below this `k`, a sorted buffer of at most `k` records: seed 001's feed (3,000 records,
/// k = 10) costs one comparison for most records. From it on, inserting into the buffer costs
/// O(k) per record when inputs interleave, so all records are collected and the k newest
/// selected in linear time, then sorted.
const SMALL_K: usize = 64;

/// The `k` newest records, newest first.
pub fn top_k<I: IntoIterator<Item = Record>>(records: I, k: usize) -> Vec<Record> {
    if k >= SMALL_K {
        return top_k_by_selection(records.into_iter().collect(), k);
    }
    let mut best = SmallTopK::new(k);
    records.into_iter().for_each(|r| best.offer(r));
    best.0
}

/// The `k` newest records of encoded values (what a filter or a client holds), newest first.
/// The same result as [`top_k`] over [`iter`] of each value, faster: a record older than the
/// oldest one kept is turned away on its timestamp alone, before the rest of it is decoded.
pub fn top_k_encoded<'a, I: IntoIterator<Item = &'a [u8]>>(values: I, k: usize) -> Vec<Record> {
    if k >= SMALL_K {
        return top_k_by_selection(values.into_iter().flat_map(iter).collect(), k);
    }
    let mut best = SmallTopK::new(k);
    for value in values {
        for c in value.chunks_exact(RECORD_LEN) {
            let ts = u64::from_le_bytes(c[16..24].try_into().expect("8 bytes"));
            if ts >= best.floor() {
                best.offer(Record::decode(c.try_into().expect("exact chunk")));
            }
        }
    }
    best.0
}

fn top_k_by_selection(mut all: Vec<Record>, k: usize) -> Vec<Record> {
    if all.len() > k {
        if k == 0 {
            return Vec::new();
        }
        all.select_nth_unstable_by(k - 1, newest_first);
        all.truncate(k);
    }
    // Equal records are identical, so an unstable sort gives the one possible order.
    all.sort_unstable_by(newest_first);
    all
}

/// A sorted buffer of at most k (< SMALL_K) records.
struct SmallTopK(Vec<Record>, usize);

impl SmallTopK {
    fn new(k: usize) -> SmallTopK {
        SmallTopK(Vec::with_capacity(k + 1), k)
    }

    /// The oldest timestamp that can still get in: most records of a long feed are older,
    /// and one integer comparison turns them away.
    fn floor(&self) -> u64 {
        if self.0.len() == self.1 && self.1 > 0 {
            self.0[self.1 - 1].ts
        } else {
            0
        }
    }

    fn offer(&mut self, r: Record) {
        let (best, k) = (&mut self.0, self.1);
        if k == 0 || (best.len() == k && newest_first(&r, &best[k - 1]) != Ordering::Less) {
            return;
        }
        // Insert after equal records.
        let pos = best.partition_point(|b| newest_first(b, &r) != Ordering::Greater);
        best.insert(pos, r);
        if best.len() > k {
            best.pop();
        }
    }
}

/// Merge encoded top-k results (e.g. one per server) into the `k` newest overall.
pub fn merge_top_k<'a, I: IntoIterator<Item = &'a [u8]>>(parts: I, k: usize) -> Vec<u8> {
    encode_all(&top_k_encoded(parts, k))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(user: u64, article: u64, ts: u64) -> Record {
        Record { user, article, ts }
    }

    #[test]
    fn round_trip_and_partial_tail_ignored() {
        let recs = [r(1, 2, 3), r(u64::MAX, 0, 7)];
        let mut bytes = encode_all(&recs);
        assert_eq!(bytes.len(), 48);
        bytes.extend_from_slice(&[9; 23]);
        assert_eq!(iter(&bytes).collect::<Vec<_>>(), recs);
    }

    #[test]
    fn top_k_matches_a_full_sort() {
        // A small deterministic generator: enough collisions in ts to exercise the tie-breaks.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for k in [0, 1, 3, 10, 63, 64, 65, 299, 300, 500] {
            let all: Vec<Record> = (0..300)
                .map(|_| r(next() % 5, next() % 5, next() % 20))
                .collect();
            let mut sorted = all.clone();
            sorted.sort_by(newest_first);
            sorted.truncate(k);
            assert_eq!(top_k(all.iter().copied(), k), sorted, "k={k}");
            let (a, b) = all.split_at(137);
            let values = [encode_all(a), encode_all(b)];
            assert_eq!(
                top_k_encoded(values.iter().map(|v| v.as_slice()), k),
                sorted,
                "k={k}"
            );
            // Merging two halves' top-k gives the same.
            let (a, b) = all.split_at(137);
            let parts = [
                encode_all(&top_k(a.iter().copied(), k)),
                encode_all(&top_k(b.iter().copied(), k)),
            ];
            assert_eq!(
                merge_top_k(parts.iter().map(|p| p.as_slice()), k),
                encode_all(&sorted)
            );
        }
    }
}
