//! examples/topk.rs against a full sort: its logic through `Input`/`Output`, and its native
//! entry point as the server calls it.

#[path = "../../filter-examples/examples/topk.rs"]
mod topk;

mod common;

use common::{call, input, random_values, reference_topk, Rng};
use mnemo_filter_sdk::records::{self, Record};
use mnemo_filter_sdk::{Input, Output};
use proptest::prelude::*;

fn run(args: &[u8], values: &common::Values) -> Result<Output, String> {
    let bytes = input(args, values);
    let input = Input::parse(&bytes).unwrap();
    let mut out = Output::new();
    topk::topk(&input, &mut out).map(|()| out)
}

#[test]
fn random_feeds_match_a_full_sort() {
    let mut rng = Rng::new(7);
    for round in 0..300 {
        let (keys, spread) = (1 + rng.below(8) as usize, 1 + rng.below(10));
        let values = random_values(&mut rng, keys, 60, spread);
        let k = match round % 4 {
            0 => 1,
            1 => 1 + rng.below(10) as usize,
            2 => 1 + rng.below(500) as usize,
            _ => 100_000,
        };
        let out = run(k.to_string().as_bytes(), &values).unwrap();
        assert_eq!(
            out.as_bytes(),
            reference_topk(&values, k),
            "round {round}, k {k}"
        );
        assert_eq!(out.flags(), 0);
    }
}

#[test]
fn seed_001_feed_size() {
    // The seed's case: one user's feed of 3,000 records over a few keys, K = 10.
    let mut rng = Rng::new(1);
    let values: common::Values = (0..30)
        .map(|_| {
            let recs: Vec<Record> = (0..100)
                .map(|_| Record {
                    user: rng.below(1000),
                    article: rng.next(),
                    ts: 1_700_000_000 + rng.below(86_400),
                })
                .collect();
            Some((0, records::encode_all(&recs)))
        })
        .collect();
    let out = run(b"10", &values).unwrap();
    assert_eq!(out.len(), 240);
    assert_eq!(out.as_bytes(), reference_topk(&values, 10));
}

#[test]
fn bad_arguments() {
    let values = vec![Some((
        0,
        records::encode_all(&[Record {
            user: 1,
            article: 2,
            ts: 3,
        }]),
    ))];
    let bads = [
        &b""[..],
        b"0",
        b"100001",
        b"-1",
        b"+1",
        b" 1",
        b"1 ",
        b"1\r\n",
        b"ten",
        b"99999999999999999999999",
    ];
    for bad in bads {
        let err = run(bad, &values).unwrap_err();
        assert!(err.starts_with("bad argument: "), "{bad:?}: {err}");
    }
    assert_eq!(run(b"100000", &values).unwrap().len(), 24);
    assert_eq!(run(b"007", &values).unwrap().len(), 24);
    assert!(run(b"3", &vec![]).unwrap().is_empty());
}

#[test]
fn native_entry_point() {
    let values = random_values(&mut Rng::new(3), 6, 40, 5);
    let bytes = input(b"25", &values);
    let want = reference_topk(&values, 25);
    assert_eq!(topk::mnemo_abi_version(), 1);
    let got = call(topk::mnemo_filter, &bytes, want.len());
    assert_eq!(
        (got.rc, got.data.as_slice(), got.flags),
        (0, want.as_slice(), 0)
    );
    if !want.is_empty() {
        let small = call(topk::mnemo_filter, &bytes, want.len() - 1);
        assert_eq!((small.rc, small.len), (2, want.len()));
    }
    let bad = call(topk::mnemo_filter, &input(b"x", &values), 200);
    assert_eq!(bad.rc, 1);
    assert!(
        bad.message().starts_with("bad argument: "),
        "{}",
        bad.message()
    );
}

proptest! {
    #[test]
    fn matches_a_full_sort(
        values in prop::collection::vec(
            prop::option::of(prop::collection::vec((0u64..4, 0u64..4, 0u64..8), 0..30)), 0..6),
        tail in 0usize..24,
        k in 1usize..40,
    ) {
        let values: common::Values = values
            .into_iter()
            .map(|v| v.map(|recs| {
                let recs: Vec<Record> =
                    recs.into_iter().map(|(user, article, ts)| Record { user, article, ts }).collect();
                let mut bytes = records::encode_all(&recs);
                bytes.extend(std::iter::repeat_n(0xEE, tail));
                (0, bytes)
            }))
            .collect();
        let out = run(k.to_string().as_bytes(), &values).unwrap();
        prop_assert_eq!(out.as_bytes(), reference_topk(&values, k));
    }
}
