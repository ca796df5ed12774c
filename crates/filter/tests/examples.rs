//! The SDK's example filters through the host, both kinds, against the client-side
//! computation on random data (proptest): what `fget` returns is what a client computing from
//! the same values would get, byte for byte.

#[path = "support/examples.rs"]
mod examples;

use std::sync::OnceLock;

use mnemo_filter::{FilterHost, FilterKind, FilterSpec, InputSink, Limits};
use mnemo_filter_sdk::records::{self, Record};
use proptest::prelude::*;

fn host() -> &'static FilterHost {
    static HOST: OnceLock<FilterHost> = OnceLock::new();
    HOST.get_or_init(|| {
        let ex = examples::examples();
        let spec = |name: &str, kind| FilterSpec {
            name: format!(
                "{name}-{}",
                if kind == FilterKind::Wasm {
                    "wasm"
                } else {
                    "native"
                }
            ),
            path: if kind == FilterKind::Wasm {
                ex.wasm(name)
            } else {
                ex.native(name)
            },
            kind,
        };
        let specs = ["topk", "select"]
            .into_iter()
            .flat_map(|n| [spec(n, FilterKind::Wasm), spec(n, FilterKind::Native)])
            .collect();
        // Deadline far above what these filters need (a preempted thread must not time out).
        let limits = Limits {
            deadline: std::time::Duration::from_secs(2),
            ..Limits::default()
        };
        FilterHost::new(limits, specs).expect("load the examples")
    })
}

/// A value per key: None (missing), or records plus up to 23 stray trailing bytes.
type Values = Vec<Option<(Vec<Record>, Vec<u8>)>>;

fn call(filter: &str, args: &[u8], values: &Values) -> Result<(u32, Vec<u8>), String> {
    let f = host().get(filter.as_bytes()).expect("installed");
    let mut fill = |sink: &mut dyn InputSink| {
        for v in values {
            match v {
                Some((recs, tail)) => {
                    let mut bytes = records::encode_all(recs);
                    bytes.extend_from_slice(tail);
                    sink.value(0, &bytes);
                }
                None => sink.missing(),
            }
        }
    };
    let mut out = Vec::new();
    f.call(args, values.len() as u32, &mut fill, &mut out)
        .map(|flags| (flags, out))
        .map_err(|e| e.to_string())
}

fn values() -> impl Strategy<Value = Values> {
    // Small ranges so that timestamps tie and users/articles repeat: the tie-breaks matter.
    let record =
        (0u64..20, 0u64..20, 0u64..50).prop_map(|(user, article, ts)| Record { user, article, ts });
    let value = (
        prop::collection::vec(record, 0..40),
        prop::collection::vec(any::<u8>(), 0..24),
    );
    prop::collection::vec(prop::option::weighted(0.85, value), 0..60)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn topk_equals_the_client_side_top_k(values in values(), k in prop_oneof![1usize..12, 12usize..3000]) {
        let all = values.iter().flatten().flat_map(|(recs, _)| recs.iter().copied());
        let want = records::encode_all(&records::top_k(all, k));
        for filter in ["topk-wasm", "topk-native"] {
            prop_assert_eq!(call(filter, k.to_string().as_bytes(), &values), Ok((0, want.clone())), "{}", filter);
        }
    }

    #[test]
    fn select_equals_the_client_side_projection(values in values(), field in 0usize..3, want_v in 0u64..20) {
        let name = ["user", "article", "ts"][field];
        let pick = |r: &Record| [r.user, r.article, r.ts][field] == want_v;
        let all: Vec<Record> = values.iter().flatten().flat_map(|(recs, _)| recs.iter().copied()).filter(pick).collect();
        let want = records::encode_all(&all);
        for filter in ["select-wasm", "select-native"] {
            prop_assert_eq!(call(filter, format!("{name}={want_v}").as_bytes(), &values), Ok((0, want.clone())), "{}", filter);
        }
    }
}

#[test]
fn bad_arguments_are_the_filters_own_error_in_both_kinds() {
    for filter in ["topk-wasm", "topk-native"] {
        for args in [&b""[..], b"0", b"x", b"100001"] {
            let e = call(filter, args, &vec![None]).unwrap_err();
            assert!(
                e.starts_with("failed: bad argument"),
                "{filter} {args:?}: {e}"
            );
        }
    }
}

#[test]
fn a_native_filters_input_is_bounded_by_the_memory_limit() {
    let ex = examples::examples();
    let spec = FilterSpec {
        name: "n".into(),
        path: ex.native("topk"),
        kind: FilterKind::Native,
    };
    let host = FilterHost::new(
        Limits {
            memory: 64 << 10,
            ..Limits::default()
        },
        vec![spec],
    )
    .unwrap();
    let f = host.get(b"n").unwrap();
    let value = vec![0u8; 24 * 40];
    let mut out = Vec::new();
    // 100 values of 960 bytes: past 64 KiB, refused before the filter runs.
    let r = f.call(
        b"10",
        100,
        &mut |s: &mut dyn InputSink| (0..100).for_each(|_| s.value(0, &value)),
        &mut out,
    );
    assert!(
        matches!(r, Err(mnemo_filter::FilterError::OutOfMemory)),
        "{r:?}"
    );
    assert!(out.is_empty());
    // Ten fit.
    let r = f.call(
        b"10",
        10,
        &mut |s: &mut dyn InputSink| (0..10).for_each(|_| s.value(0, &value)),
        &mut out,
    );
    assert_eq!(r.unwrap(), 0);
    assert_eq!(out.len(), 10 * records::RECORD_LEN);
}
