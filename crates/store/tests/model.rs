//! Model-based property tests: random operation sequences run on the Store and on a HashMap
//! model under a manual clock (the model and the comparison live in model_check/, shared with
//! tests/fuzz_replay.rs and the cargo-fuzz target).
//!
//! * exact regime: memory is ample, so every answer must match the model exactly.
//! * eviction regime: memory is tiny; the store may forget items (then the model forgets them
//!   too), but whatever it returns must be the model's current value, never a stale or wrong one,
//!   and memory must stay within the limit. Under both eviction policies: s3fifo (small and
//!   main FIFOs, the ghost, promotion) and fifo.

mod model_check;

use mnemo_store::*;
use model_check::{run, Op};
use proptest::prelude::*;

fn value_strategy(big: bool) -> BoxedStrategy<Vec<u8>> {
    let small = prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..24),
        3 => (0u64..2000).prop_map(|n| n.to_string().into_bytes()),
        1 => Just(u64::MAX.to_string().into_bytes()),
        1 => Just(b"10".to_vec()),
        1 => proptest::collection::vec(any::<u8>(), 0..40),
    ];
    if !big {
        return small.boxed();
    }
    // Memory pressure: mid-size values fill segments, the largest take the own-buffer path.
    prop_oneof![
        3 => small,
        4 => proptest::collection::vec(any::<u8>(), 100..1500),
        1 => proptest::collection::vec(any::<u8>(), 3000..9000),
    ]
    .boxed()
}

fn op_strategy(keys: u16, big: bool) -> impl Strategy<Value = Op> {
    let k = 0..keys;
    let ttl = prop_oneof![4 => Just(0i8), 3 => 1i8..8, 1 => -3i8..=0].prop_map(i32::from);
    let flush_weight = if big { 0 } else { 1 };
    prop_oneof![
        12 => (0u8..5, k.clone(), value_strategy(big), prop_oneof![Just(0u32), any::<u32>()], ttl.clone())
            .prop_map(|(mode, key, value, flags, ttl)| Op::Store { mode, key, value, flags, ttl }),
        3 => (k.clone(), value_strategy(big), any::<u32>(), ttl.clone(), any::<bool>())
            .prop_map(|(key, value, flags, ttl, right)| Op::Cas { key, value, flags, ttl, right }),
        10 => k.clone().prop_map(Op::Get),
        2 => (k.clone(), ttl.clone()).prop_map(|(a, b)| Op::Gat(a, b)),
        2 => (k.clone(), ttl).prop_map(|(a, b)| Op::Touch(a, b)),
        2 => k.clone().prop_map(Op::Delete),
        3 => (k, any::<bool>(), prop_oneof![0u64..20, Just(u64::MAX)])
            .prop_map(|(key, incr, by)| Op::Delta { key, incr, by }),
        2 => (0u8..4).prop_map(|d| Op::Advance(d.into())),
        flush_weight => (0u8..4).prop_map(Op::Flush),
        1 => Just(Op::Maintain),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn exact_regime(ops in proptest::collection::vec(op_strategy(24, false), 1..400)) {
        let cfg = StoreConfig { mem_limit: 32 << 20, shards: 4, ..Default::default() };
        run(cfg, &ops, false);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn eviction_regime(ops in proptest::collection::vec(op_strategy(300, true), 300..900)) {
        let cfg = StoreConfig { mem_limit: 64 << 10, shards: 2, eviction: Eviction::S3Fifo, ..Default::default() };
        run(cfg, &ops, true);
    }

    #[test]
    fn eviction_regime_fifo(ops in proptest::collection::vec(op_strategy(300, true), 300..900)) {
        let cfg = StoreConfig { mem_limit: 64 << 10, shards: 2, eviction: Eviction::Fifo, ..Default::default() };
        run(cfg, &ops, true);
    }
}

/// A flash file for one case, removed after it.
struct FlashFile(std::path::PathBuf);

impl FlashFile {
    fn new() -> FlashFile {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        FlashFile(std::env::temp_dir().join(format!("mnemo-model-flash-{}-{n}", std::process::id())))
    }

    /// Small pages so that pages are recycled within a case (stale entries, generations), a
    /// low item size so most values go to flash, and a high recache rate so flash hits come
    /// back to RAM often.
    fn config(&self, pages: u64) -> FlashConfig {
        FlashConfig {
            page_size: 64 << 10,
            wbuf_size: 16 << 10,
            item_size: 16,
            recache_rate: 3,
            ..FlashConfig::new(&self.0, pages * (64 << 10))
        }
    }
}

impl Drop for FlashFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// The eviction regime with a flash tier: items leave RAM for flash (and come back, by
    /// reads, recaching and the commands that change them), flash pages are recycled; the
    /// store may still forget items, but never returns a stale or wrong value.
    #[test]
    fn eviction_regime_flash(ops in proptest::collection::vec(op_strategy(300, true), 300..900), pages in 1u64..6) {
        let f = FlashFile::new();
        let cfg = StoreConfig { mem_limit: 64 << 10, shards: 2, flash: Some(f.config(pages)), ..Default::default() };
        run(cfg, &ops, true);
    }

    /// With memcached's low-TTL pages (most items here live under 4 s: their own page stream,
    /// reclaimed whole once expired) and ext_drop_unread on at every maintenance pass (the
    /// oldest page compacted, unread records dropped with their items): expired records are
    /// never served, and whatever is kept is still the model's.
    #[test]
    fn eviction_regime_flash_low_ttl_and_drop_unread(ops in proptest::collection::vec(op_strategy(300, true), 300..900), pages in 1u64..12) {
        let f = FlashFile::new();
        let fc = FlashConfig {
            low_ttl: 4,
            drop_unread: true,
            compact_under: Some(pages as usize),
            drop_under: Some(pages as usize),
            max_frag_permille: 0,
            ..f.config(pages)
        };
        let cfg = StoreConfig { mem_limit: 64 << 10, shards: 2, flash: Some(fc), ..Default::default() };
        run(cfg, &ops, true);
    }

    /// The same with a flash file that never fills: with the writer keeping up, far fewer
    /// items are forgotten, and those kept are still exactly the model's.
    #[test]
    fn eviction_regime_flash_roomy(ops in proptest::collection::vec(op_strategy(300, true), 300..900)) {
        let f = FlashFile::new();
        let cfg = StoreConfig { mem_limit: 64 << 10, shards: 2, eviction: Eviction::Fifo, flash: Some(f.config(256)), ..Default::default() };
        run(cfg, &ops, true);
    }
}
