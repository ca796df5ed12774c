//! examples/select.rs against a plain filter over decoded records.

#[path = "../../filter-examples/examples/select.rs"]
mod select;

mod common;

use common::{all_records, call, input, random_values, Rng};
use mnemo_filter_sdk::records::{self, Record};
use mnemo_filter_sdk::{Input, Output};

fn run(args: &[u8], values: &common::Values) -> Result<Output, String> {
    let bytes = input(args, values);
    let input = Input::parse(&bytes).unwrap();
    let mut out = Output::new();
    select::select(&input, &mut out).map(|()| out)
}

fn reference(values: &common::Values, keep: impl Fn(&Record) -> bool) -> Vec<u8> {
    records::encode_all(
        &all_records(values)
            .into_iter()
            .filter(|r| keep(r))
            .collect::<Vec<_>>(),
    )
}

#[test]
fn random_data_matches_a_plain_filter() {
    let mut rng = Rng::new(11);
    for round in 0..300 {
        let (keys, spread) = (1 + rng.below(8) as usize, 1 + rng.below(6));
        let values = random_values(&mut rng, keys, 60, spread);
        let n = rng.below(8);
        let (args, want) = match round % 3 {
            0 => (format!("user={n}"), reference(&values, |r| r.user == n)),
            1 => (
                format!("article={n}"),
                reference(&values, |r| r.article == n),
            ),
            _ => (format!("ts={n}"), reference(&values, |r| r.ts == n)),
        };
        let out = run(args.as_bytes(), &values).unwrap();
        assert_eq!(out.as_bytes(), want, "round {round}: {args}");
        assert_eq!(out.flags(), 0);
    }
}

#[test]
fn full_range_values() {
    let recs = [
        Record {
            user: u64::MAX,
            article: 0,
            ts: 5,
        },
        Record {
            user: 1,
            article: u64::MAX,
            ts: u64::MAX,
        },
    ];
    let values = vec![Some((0, records::encode_all(&recs))), None];
    assert_eq!(
        run(b"user=18446744073709551615", &values)
            .unwrap()
            .as_bytes(),
        records::encode_all(&recs[..1])
    );
    assert_eq!(
        run(b"ts=18446744073709551615", &values).unwrap().as_bytes(),
        records::encode_all(&recs[1..])
    );
    assert_eq!(
        run(b"article=0", &values).unwrap().as_bytes(),
        records::encode_all(&recs[..1])
    );
    assert!(run(b"user=2", &values).unwrap().is_empty());
}

#[test]
fn bad_arguments() {
    let values = vec![None];
    for bad in [
        &b""[..],
        b"user",
        b"user=",
        b"=1",
        b"users=1",
        b"User=1",
        b"user=1x",
        b"user= 1",
        b"user=-1",
        b"ts=18446744073709551616",
    ] {
        let err = run(bad, &values).unwrap_err();
        assert!(err.starts_with("bad argument: "), "{bad:?}: {err}");
    }
    assert_eq!(
        select::parse_selector(b"article=007"),
        Ok(select::Selector {
            offset: 8,
            value: 7
        })
    );
}

#[test]
fn native_entry_point() {
    let values = random_values(&mut Rng::new(5), 6, 40, 3);
    let want = reference(&values, |r| r.user == 1);
    let got = call(select::mnemo_filter, &input(b"user=1", &values), 1 << 16);
    assert_eq!((got.rc, got.data, got.flags), (0, want, 0));
}
