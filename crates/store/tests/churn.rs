//! Regression: a few live keys rewritten and touched with many different TTLs must never be
//! evicted while the store is almost empty (active segments per TTL group, and segments full
//! of dead copies, once used up all memory and pushed live, never-read items out).

use std::collections::HashMap;

use mnemo_store::{Lookup, Mode, Store, StoreConfig};

#[test]
fn churn_on_few_keys_with_many_ttls_never_evicts() {
    let store = Store::new(StoreConfig {
        mem_limit: 64 << 20,
        item_size_max: 1024,
        ..StoreConfig::default()
    });
    let mut now = 100;
    let mut x: u64 = 1;
    let mut want: HashMap<String, String> = HashMap::new();
    for i in 0..300_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = format!("k{}", x % 50);
        if i % 3 == 0 {
            // TTLs of 100 s to ~18 min spread the items over many TTL buckets.
            store.touch(key.as_bytes(), now + 100 + (x % 1000) as u32, now);
        } else {
            let v = format!("{i}");
            assert!(store
                .store(Mode::Set, key.as_bytes(), 0, 0, v.as_bytes(), now)
                .is_ok());
            want.insert(key, v);
        }
        if i % 10_000 == 0 {
            now += 1;
            store.maintain(now);
        }
    }
    for (k, v) in &want {
        match store.get(k.as_bytes(), now, |it| it.value.to_vec()) {
            Lookup::Hit(got) => assert_eq!(got, v.as_bytes()),
            other => panic!("{k} lost ({other:?}) from a nearly empty store"),
        }
    }
    assert_eq!(store.stats().evictions, 0);
}

#[test]
fn lowering_the_limit_trims_memory_and_raising_it_lets_more_in() {
    let store = Store::new(StoreConfig {
        mem_limit: 64 << 20,
        item_size_max: 1 << 20,
        ..StoreConfig::default()
    });
    let v = vec![b'v'; 1000];
    for i in 0..40_000u32 {
        store
            .store(Mode::Set, format!("a{i}").as_bytes(), 0, 0, &v, 100)
            .unwrap();
    }
    assert!(store.stats().mem_used > 32 << 20);
    store.set_mem_limit(16 << 20);
    // Each shard trims on its next operation.
    for i in 0..4_000u32 {
        store
            .store(Mode::Set, format!("b{i}").as_bytes(), 0, 0, &v, 100)
            .unwrap();
    }
    let st = store.stats();
    assert_eq!(st.limit_maxbytes, 16 << 20);
    assert!(
        st.mem_used <= 16 << 20,
        "{} bytes used over a 16 MiB limit",
        st.mem_used
    );
    store.set_mem_limit(64 << 20);
    for i in 0..40_000u32 {
        store
            .store(Mode::Set, format!("c{i}").as_bytes(), 0, 0, &v, 100)
            .unwrap();
    }
    assert!(store.stats().mem_used > 32 << 20);
}
