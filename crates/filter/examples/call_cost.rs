//! Time one filter call through the host, without a server or a network: seed 001's query
//! (100 values of 30 records, top 10) through every filter given, median of many calls.
//!
//!   cargo run --release -p mnemo-filter --example call_cost -- wasm:PATH.wasm native:PATH.so

use std::time::Instant;

use mnemo_filter::{FilterHost, FilterKind, FilterSpec, InputSink, Limits};

fn main() {
    let mut specs = Vec::new();
    for (i, a) in std::env::args().skip(1).enumerate() {
        let (kind, path) = a.split_once(':').expect("KIND:PATH");
        let kind = if kind == "native" {
            FilterKind::Native
        } else {
            FilterKind::Wasm
        };
        specs.push(FilterSpec {
            name: format!("f{i}"),
            path: path.into(),
            kind,
        });
    }
    let n = specs.len();
    let host = FilterHost::new(Limits::default(), specs.clone()).expect("load");
    // 100 values of 30 records (24 bytes each), pseudo-random timestamps.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let values: Vec<Vec<u8>> = (0..100u64)
        .map(|u| {
            (0..30u64)
                .flat_map(|a| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    [u, a, x % 1_000_000]
                        .into_iter()
                        .flat_map(|w| w.to_le_bytes())
                })
                .collect()
        })
        .collect();
    for (i, spec) in specs.iter().enumerate().take(n) {
        let f = host.get(format!("f{i}").as_bytes()).unwrap();
        let mut times = Vec::new();
        let mut out = Vec::new();
        for _ in 0..3000 {
            out.clear();
            let t = Instant::now();
            let mut fill = |s: &mut dyn InputSink| values.iter().for_each(|v| s.value(0, v));
            f.call(b"10", 100, &mut fill, &mut out).expect("call");
            times.push(t.elapsed().as_nanos() as u64);
        }
        times.sort_unstable();
        println!(
            "{} {}: median {:.1} us, p90 {:.1} us, output {} bytes",
            spec.kind.as_str(),
            spec.path.display(),
            times[times.len() / 2] as f64 / 1000.0,
            times[times.len() * 9 / 10] as f64 / 1000.0,
            out.len()
        );
    }
}
