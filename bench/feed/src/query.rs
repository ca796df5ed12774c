//! The two ways to answer a feed query, as bytes: the requests, and the client-side ranking of
//! a `get` reply. Kept apart from the load loop so the tests can reach them without a server.

use mnemo_filter_sdk::records::{self, Record};

use crate::gen;
use crate::reply::Span;

/// `get u:a u:b ...\r\n`: one line, one write.
pub fn build_get(out: &mut Vec<u8>, ids: &[u64]) {
    out.clear();
    out.extend_from_slice(b"get");
    for &id in ids {
        out.push(b' ');
        gen::push_key(out, id);
    }
    out.extend_from_slice(b"\r\n");
}

/// `fget <filter> <arglen> u:a u:b ...\r\n<args>\r\n`: the argument block in the same write.
pub fn build_fget(out: &mut Vec<u8>, filter: &str, args: &[u8], ids: &[u64]) {
    out.clear();
    out.extend_from_slice(b"fget ");
    out.extend_from_slice(filter.as_bytes());
    out.push(b' ');
    gen::push_decimal(out, args.len() as u64);
    for &id in ids {
        out.push(b' ');
        gen::push_key(out, id);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(args);
    out.extend_from_slice(b"\r\n");
}

/// The client-side feed: the `k` newest records over every value of a reply, decoded in place
/// (the same ranking code the topk filter runs, so both sides do equal work).
pub fn rank(reply: &[u8], values: &[Span], k: usize) -> Vec<Record> {
    records::top_k_encoded(values.iter().map(|s| &reply[s.data.clone()]), k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::{FriendPicker, Rng};
    use crate::reply::Parser;

    #[test]
    fn requests() {
        let mut out = Vec::new();
        build_get(&mut out, &[3, 14, 0]);
        assert_eq!(out, b"get u:3 u:14 u:0\r\n");
        build_fget(&mut out, "topk", b"10", &[3, 14]);
        assert_eq!(out, b"fget topk 2 u:3 u:14\r\n10\r\n");
        build_fget(&mut out, "f", b"", &[]);
        assert_eq!(out, b"fget f 0\r\n\r\n");
    }

    /// The ranking of a real-shaped reply (100 friends x 30 records, some users with tied
    /// timestamps) equals a full sort of every record, for several k.
    #[test]
    fn rank_equals_a_full_sort() {
        let mut rng = Rng::stream(9, 0);
        let mut picker = FriendPicker::new(1000);
        let mut ids = Vec::new();
        for round in 0..20 {
            picker.pick(&mut rng, 100, &mut ids);
            let mut reply = Vec::new();
            let mut all = Vec::new();
            for &id in &ids {
                let mut value = Vec::new();
                gen::push_value(round, id, 30, &mut value);
                // Every fifth user copies a timestamp of the previous one: ties across users.
                if id % 5 == 0 && !all.is_empty() {
                    let prev: &Record = &all[all.len() - 1];
                    value[16..24].copy_from_slice(&prev.ts.to_le_bytes());
                }
                all.extend(records::iter(&value));
                reply.extend_from_slice(format!("VALUE u:{id} 0 {}\r\n", value.len()).as_bytes());
                reply.extend_from_slice(&value);
                reply.extend_from_slice(b"\r\n");
            }
            reply.extend_from_slice(b"END\r\n");
            let mut p = Parser::default();
            assert_eq!(p.advance(&reply), Ok(true));
            all.sort_by(records::newest_first);
            for k in [1, 10, 100, 3000, 5000] {
                assert_eq!(
                    rank(&reply, p.values(), k),
                    all[..k.min(all.len())],
                    "round {round} k {k}"
                );
            }
        }
    }
}
