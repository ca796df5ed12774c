//! Model-based property tests: random operation sequences run on the Store and on a HashMap
//! model under a manual clock (the model and the comparison live in model_check/, shared with
//! tests/fuzz_replay.rs and the cargo-fuzz target).
//!
//! * exact regime: memory is ample, so every answer must match the model exactly.
//! * eviction regime: memory is tiny; the store may forget items (then the model forgets them
//!   too), but whatever it returns must be the model's current value, never a stale or wrong one,
//!   and memory must stay within the limit. Under both eviction policies: s3fifo (small and
//!   main FIFOs, the ghost, promotion) and fifo.
//! * the eviction regime with a flash tier: the same, and every item that vanishes must be one
//!   the store counted lost (model_check's `losses`). The low-TTL / ext_drop_unread regime
//!   sums what its cases reached and fails unless some case reclaimed an expired low-TTL page,
//!   dropped an unread record and rescued a read one; deterministic cases pin each of those
//!   and that exactly the items they count are gone afterwards.

mod model_check;

use mnemo_store::*;
use model_check::{run, FlashFile, Op, Reached};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

/// Values for the low-TTL regime: mostly a few KB, so that RAM and the small pages fill in
/// a few dozen operations, before the short TTLs run out.
fn value_strategy_kb() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        1 => value_strategy(false),
        3 => proptest::collection::vec(any::<u8>(), 500..2000),
        2 => proptest::collection::vec(any::<u8>(), 3000..6000),
    ]
    .boxed()
}

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
    let ttl = prop_oneof![4 => Just(0i8), 3 => 1i8..8, 1 => -3i8..=0].prop_map(i32::from);
    op_mix(keys, value_strategy(big), !big, ttl.boxed(), 2, 1)
}

/// The operations, with TTLs from `ttl` and the clock's steps and maintenance passes weighted
/// `advance` and `maintain` (out of about 41).
fn op_mix(
    keys: u16,
    values: BoxedStrategy<Vec<u8>>,
    flush: bool,
    ttl: BoxedStrategy<i32>,
    advance: u32,
    maintain: u32,
) -> impl Strategy<Value = Op> {
    let k = 0..keys;
    let flush_weight = u32::from(flush);
    prop_oneof![
        12 => (0u8..5, k.clone(), values.clone(), prop_oneof![Just(0u32), any::<u32>()], ttl.clone())
            .prop_map(|(mode, key, value, flags, ttl)| Op::Store { mode, key, value, flags, ttl }),
        3 => (k.clone(), values, any::<u32>(), ttl.clone(), any::<bool>())
            .prop_map(|(key, value, flags, ttl, right)| Op::Cas { key, value, flags, ttl, right }),
        10 => k.clone().prop_map(Op::Get),
        2 => (k.clone(), ttl.clone()).prop_map(|(a, b)| Op::Gat(a, b)),
        2 => (k.clone(), ttl).prop_map(|(a, b)| Op::Touch(a, b)),
        2 => k.clone().prop_map(Op::Delete),
        3 => (k, any::<bool>(), prop_oneof![0u64..20, Just(u64::MAX)])
            .prop_map(|(key, incr, by)| Op::Delta { key, incr, by }),
        advance => (0u8..4).prop_map(|d| Op::Advance(d.into())),
        flush_weight => (0u8..4).prop_map(Op::Flush),
        maintain => Just(Op::Maintain),
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// The eviction regime with a flash tier: items leave RAM for flash (and come back, by
    /// reads, recaching and the commands that change them), flash pages are recycled; the
    /// store may still forget items, but only those it counts lost, and never returns a stale
    /// or wrong value.
    #[test]
    fn eviction_regime_flash(ops in proptest::collection::vec(op_strategy(300, true), 300..900), pages in 1u64..6) {
        let f = FlashFile::new();
        let cfg = StoreConfig { mem_limit: 64 << 10, shards: 2, flash: Some(f.config(pages)), ..Default::default() };
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

/// memcached's low-TTL pages (ext_low_ttl 4 s, so items of 1-3 s go to their own page
/// stream, reclaimed whole once expired) and ext_drop_unread at every maintenance pass (the
/// oldest page compacted, unread records dropped with their items), on 1-11 pages of 16 KiB. Most TTLs
/// are short, the clock steps and maintenance passes are frequent and few keys are rewritten,
/// so that low-TTL pages fill, close and expire with their records still counted live (the
/// reclaim's condition; a page emptied by overwrites is reclaimed by the page choice
/// instead). Expired records are never served, whatever is kept is still the model's, and
/// what vanishes is what the store counted lost. The cases' sums must show each path
/// reached: an expired page reclaimed, an unread record dropped, a read one rescued.
/// 64 cases: a case rescues in about one in four (the rarest of the three), so the chance
/// that none of them does, with every path still working, is about 1e-9.
#[test]
fn eviction_regime_flash_low_ttl_and_drop_unread() {
    const CASES: u32 = 64;
    let ttl = prop_oneof![2 => Just(0i8), 6 => 1i8..5, 1 => -3i8..=0]
        .prop_map(i32::from)
        .boxed();
    let strategy = (
        proptest::collection::vec(op_mix(200, value_strategy_kb(), false, ttl, 1, 3), 300..900),
        1u64..12,
    );
    let mut runner = TestRunner::new(ProptestConfig {
        cases: CASES,
        ..ProptestConfig::default()
    });
    // The sums, and how many cases reclaimed, dropped, rescued.
    let total = std::sync::Mutex::new((Reached::default(), [0u32; 3]));
    let result = runner.run(&strategy, |(ops, pages)| {
        let f = FlashFile::new();
        let fc = FlashConfig {
            low_ttl: 4,
            drop_unread: true,
            compact_under: Some(pages as usize),
            drop_under: Some(pages as usize),
            max_frag_permille: 0,
            // Pages of one write buffer: a few records of a few KB fill one.
            page_size: 16 << 10,
            // A flash hit leaves its record on flash, read: what the drop pass rescues.
            recache_rate: 0,
            size: pages * (16 << 10),
            ..f.config(pages)
        };
        let cfg = StoreConfig {
            mem_limit: 64 << 10,
            shards: 2,
            flash: Some(fc),
            ..Default::default()
        };
        let r = run(cfg, &ops, true);
        let mut t = total.lock().unwrap();
        t.0 += r;
        for (n, x) in t.1.iter_mut().zip([r.pages_expired, r.drops, r.rescues]) {
            *n += u32::from(x > 0);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let (t, cases) = total.into_inner().unwrap();
    eprintln!(
        "reached over {CASES} cases: {t:?}; cases that reclaimed, dropped, rescued: {cases:?}"
    );
    assert!(
        t.pages_expired > 0,
        "no expired low-TTL page reclaimed in any case: {t:?}"
    );
    assert!(t.drops > 0, "no unread record dropped in any case: {t:?}");
    assert!(t.rescues > 0, "no read record rescued in any case: {t:?}");
}

/// `n` values of about 1 KB, each distinct (the model tells a stale value by its bytes).
fn kb(i: u16) -> Vec<u8> {
    let mut v = format!("value {i} ").into_bytes();
    v.resize(1000, b'a' + (i % 26) as u8);
    v
}

fn set(key: u16, ttl: i32) -> Op {
    Op::Store {
        mode: 0,
        key,
        value: kb(key),
        flags: u32::from(key),
        ttl,
    }
}

/// An expired low-TTL page is reclaimed whole, and exactly its items are gone: 80 items of
/// 3 s (the low-TTL stream: more than a page of them) then 120 without expiry go through 64
/// KiB of RAM to a roomy file, the writer waited for after each set (so nothing is evicted
/// for want of a write buffer); 4 s later a maintenance pass reclaims the low-TTL pages whose
/// records have all expired. The short items are misses (the model expects them expired),
/// every long one is still served: nothing vanished.
#[test]
fn flash_expired_low_ttl_page_is_reclaimed_and_nothing_else_vanishes() {
    let f = FlashFile::new();
    let fc = FlashConfig {
        low_ttl: 4,
        recache_rate: 0,
        ..f.config(12)
    };
    let cfg = StoreConfig {
        mem_limit: 64 << 10,
        shards: 1,
        flash: Some(fc),
        ..Default::default()
    };
    let mut ops = Vec::new();
    for k in 0..80 {
        ops.extend([set(k, 3), Op::Sync]);
    }
    for k in 100..220 {
        ops.extend([set(k, 0), Op::Sync]);
    }
    ops.extend([Op::Advance(4), Op::Maintain]);
    ops.extend((0..80).chain(100..220).map(Op::Get));
    let r = run(cfg, &ops, true);
    assert!(r.pages_expired >= 1, "{r:?}");
    assert_eq!(r.vanished, 0, "{r:?}");
}

/// One shard with 64 KiB of RAM over a flash file of 12 pages, ext_drop_unread's pass on at
/// every maintenance pass whatever the fragmentation, and no recaching (a flash hit leaves
/// the item on flash, counted read).
fn drop_unread_store(f: &FlashFile) -> StoreConfig {
    let fc = FlashConfig {
        drop_unread: true,
        compact_under: Some(12),
        drop_under: Some(12),
        max_frag_permille: 0,
        recache_rate: 0,
        ..f.config(12)
    };
    StoreConfig {
        mem_limit: 64 << 10,
        shards: 1,
        flash: Some(fc),
        ..Default::default()
    }
}

/// ext_drop_unread drops exactly the unread records of the page it compacts, items and all,
/// and rescues the read ones: 200 items of 1 KB without expiry through 64 KiB of RAM to the
/// file (the writer waited for after each set), every even one read once (no recaching: a
/// flash hit leaves it on flash, counted read), then one maintenance pass with no page
/// fragmented enough and every page counted as few free. Afterwards every key is read: the
/// ones that vanished are exactly the records counted dropped, and some were rescued.
#[test]
fn flash_drop_unread_drops_exactly_the_unread_records() {
    let f = FlashFile::new();
    let cfg = drop_unread_store(&f);
    let mut ops = Vec::new();
    for k in 0..200 {
        ops.extend([set(k, 0), Op::Sync]);
    }
    ops.extend((0..200).step_by(2).map(Op::Get));
    ops.extend([Op::Maintain, Op::Sync]);
    ops.extend((0..200).map(Op::Get));
    let r = run(cfg, &ops, true);
    assert!(r.drops > 0 && r.rescues > 0, "{r:?}");
    assert_eq!(r.vanished, r.drops, "{r:?}");
}

/// Compaction counts nothing for an expired record (memcached's readback counts none) and
/// drops it, so that its page empties: 200 items of 1 KB, every other one with 3 s to live,
/// through 64 KiB of RAM to the file; every flashed long-lived one read (kept), then, past
/// the short ones' expiry, ext_drop_unread's pass on the oldest page. Nothing is skipped
/// (before: each expired record counted, at every pass), nothing live vanishes.
#[test]
fn flash_compaction_counts_no_expired_record() {
    let f = FlashFile::new();
    let cfg = drop_unread_store(&f);
    let mut ops = Vec::new();
    for k in 0..200 {
        ops.extend([set(k, if k % 2 == 0 { 3 } else { 0 }), Op::Sync]);
    }
    ops.extend((1..200).step_by(2).map(Op::Get));
    ops.extend([
        Op::Advance(4),
        Op::Maintain,
        Op::Sync,
        Op::Maintain,
        Op::Sync,
    ]);
    ops.extend((0..200).map(Op::Get));
    let r = run(cfg, &ops, true);
    assert!(r.rescues > 0, "{r:?}");
    assert_eq!((r.skipped, r.drops, r.vanished), (0, 0, 0), "{r:?}");
}
