//! Memory behaviour: eviction keeps serving, -M refuses, expired memory comes back without
//! reads, the budget holds under heavy writing and concurrency, read items survive eviction.

use std::sync::Arc;

use mnemo_store::*;

fn key(i: u64) -> Vec<u8> {
    format!("key:{i:010}").into_bytes()
}

/// A value that says which key and version it belongs to, so a wrong one is detectable.
fn value_for(i: u64, ver: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{i}:{ver}:").into_bytes();
    v.resize(len.max(v.len()), (i % 251) as u8);
    v
}

#[test]
fn eviction_keeps_serving_a_tiny_store() {
    // Single-threaded with evict=true the budget holds exactly after every operation.
    let limit = 1 << 20;
    let s = Store::new(StoreConfig {
        mem_limit: limit,
        ..Default::default()
    });
    let n = 1_000_000u64;
    for i in 0..n {
        let v = value_for(i, 0, 8 + (i % 90) as usize);
        let r = s.store(Mode::Set, &key(i), 0, 0, &v, 1);
        assert!(
            matches!(r, Ok(StoreOutcome::Stored { .. })),
            "set {i}: {r:?}"
        );
        if i % 10_000 == 0 {
            assert!(s.stats().mem_used <= limit as u64, "{:?}", s.stats());
        }
    }
    let st = s.stats();
    assert!(st.evictions > n / 2, "{st:?}");
    assert!(st.mem_used <= limit as u64 + 16 * 1024, "{st:?}");
    // Recent keys are there and correct; nothing returns a wrong value.
    let mut hits = 0;
    for i in n - 2000..n {
        if let Some(v) = s.get(&key(i), 1, |it| it.value.to_vec()).hit() {
            assert_eq!(v, value_for(i, 0, 8 + (i % 90) as usize));
            hits += 1;
        }
    }
    assert!(hits > 1000, "only {hits} of the last 2000 keys kept");
}

#[test]
fn no_evict_returns_out_of_memory_once_full() {
    let limit = 1 << 20;
    let s = Store::new(StoreConfig {
        mem_limit: limit,
        evict: false,
        ..Default::default()
    });
    let mut stored = 0u64;
    let mut first_err = None;
    for i in 0..200_000u64 {
        match s.store(Mode::Set, &key(i), 0, 0, &value_for(i, 0, 50), 1) {
            Ok(StoreOutcome::Stored { .. }) => stored += 1,
            Err(e) => {
                first_err = Some((i, e));
                break;
            }
            Ok(o) => panic!("{o:?}"),
        }
    }
    let (at, e) = first_err.expect("never ran out of memory");
    assert_eq!(e, StoreError::OutOfMemory);
    assert!(stored > 5_000, "only {stored} stored before OOM at {at}");
    let st = s.stats();
    assert_eq!(st.evictions, 0);
    assert!(st.mem_used <= limit as u64 + 16 * 1024, "{st:?}");
    // Everything stored is still there.
    for i in 0..stored {
        assert_eq!(
            s.get(&key(i), 1, |it| it.value.to_vec()).hit(),
            Some(value_for(i, 0, 50))
        );
    }
    // Deleting makes room again (empty segments are given back).
    for i in 0..stored {
        s.delete(&key(i), 1);
    }
    assert!(matches!(
        s.store(Mode::Set, b"again", 0, 0, b"v", 1),
        Ok(StoreOutcome::Stored { .. })
    ));
}

#[test]
fn expired_memory_is_given_back_without_reads() {
    // 16 shards: the 10 items that live on keep one active segment per shard, which the
    // ratio below was set for (with the 4 shards 64 MiB gets by default they hold 4 of 17 MiB).
    let s = Store::new(StoreConfig {
        mem_limit: 64 << 20,
        shards: DEFAULT_SHARDS,
        ..Default::default()
    });
    let base = s.stats().mem_used;
    for i in 0..100_000u64 {
        s.store(
            Mode::Set,
            &key(i),
            0,
            10 + (i % 3) as Time,
            &value_for(i, 0, 100),
            1,
        )
        .unwrap();
    }
    // A few that live on.
    for i in 0..10u64 {
        s.store(Mode::Set, &key(1_000_000 + i), 0, 0, b"forever", 1)
            .unwrap();
    }
    let full = s.stats();
    assert_eq!(full.curr_items, 100_010);
    s.maintain(5);
    assert_eq!(s.stats().curr_items, 100_010);
    s.maintain(13);
    let st = s.stats();
    assert_eq!(st.curr_items, 10, "{st:?}");
    assert!(st.bytes < 1000, "{st:?}");
    assert!(st.reclaimed >= 100_000, "{st:?}");
    assert_eq!(st.expired_unfetched, 100_000, "{st:?}");
    // The sweep dropped the index slots too, and the buffers are gone from the budget.
    assert_eq!(st.index_entries, 10, "{st:?}");
    assert!(st.mem_used < full.mem_used / 4, "{st:?} vs {full:?}");
    assert!(
        st.mem_used < base + (st.index_bytes + 8 * st.segment_size),
        "{st:?}"
    );
    for i in 0..10u64 {
        assert!(s.get(&key(1_000_000 + i), 13, |_| ()).is_hit());
    }
}

#[test]
fn writing_twice_the_limit_stays_within_it() {
    let limit = 8 << 20;
    let s = Store::new(StoreConfig {
        mem_limit: limit,
        item_size_max: 2 << 20,
        ..Default::default()
    });
    let mut written = 0usize;
    let mut i = 0u64;
    while written < 2 * limit {
        // Mostly small, some mid, a few larger than a segment's own-buffer threshold.
        let len = match i % 100 {
            0 => 300_000,
            1..=9 => 5_000,
            _ => 200,
        };
        s.store(Mode::Set, &key(i % 50_000), 0, 0, &value_for(i, 0, len), 1)
            .unwrap();
        written += len;
        i += 1;
        if i.is_multiple_of(1000) {
            let st = s.stats();
            assert!(st.mem_used <= limit as u64, "{st:?}");
        }
    }
    let st = s.stats();
    assert!(st.mem_used <= limit as u64 + 16 * 1024, "{st:?}");
    assert!(st.mem_used > limit as u64 / 2, "{st:?}");
}

#[test]
fn read_items_survive_eviction() {
    let s = Store::new(StoreConfig {
        mem_limit: 4 << 20,
        ..Default::default()
    });
    let hot: Vec<u64> = (0..2000).collect();
    for &i in &hot {
        s.store(Mode::Set, &key(i), 7, 0, &value_for(i, 0, 100), 1)
            .unwrap();
    }
    let mut cas_before = Vec::new();
    for &i in &hot {
        cas_before.push(s.get(&key(i), 1, |it| it.cas).hit().unwrap());
    }
    // Stream of one-hit wonders, several times the memory; hot keys read now and then.
    for j in 0..200_000u64 {
        s.store(
            Mode::Set,
            &key(1_000_000 + j),
            0,
            0,
            &value_for(j, 1, 100),
            1,
        )
        .unwrap();
        if j % 5 == 0 {
            let i = hot[(j / 5) as usize % hot.len()];
            s.get(&key(i), 1, |_| ());
        }
    }
    let st = s.stats();
    assert!(
        st.evictions > 100_000 && st.evictions_relocated > 0,
        "{st:?}"
    );
    let mut kept = 0;
    for (n, &i) in hot.iter().enumerate() {
        if let Some((v, f, c)) = s
            .get(&key(i), 1, |it| (it.value.to_vec(), it.flags, it.cas))
            .hit()
        {
            assert_eq!((v, f), (value_for(i, 0, 100), 7));
            // Moving an item must not change its CAS.
            assert_eq!(c, cas_before[n]);
            kept += 1;
        }
    }
    // 1,767 of 2,000 with the ghost at 1.5 entries per item (evict4; >= 1,800 at 1 entry):
    // its table counts against the limit, 1.3% of these 4 MiB, and a scan brings no key back.
    assert!(
        kept > hot.len() * 85 / 100,
        "only {kept} of {} hot keys kept: {st:?}",
        hot.len()
    );
}

#[test]
fn concurrent_writers_and_readers_never_see_wrong_values() {
    let limit = 2 << 20;
    let s = Arc::new(Store::new(StoreConfig {
        mem_limit: limit,
        shards: 4,
        ..Default::default()
    }));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut x = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) + 1;
                for n in 0..100_000u64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let i = x % 20_000;
                    let len = 20 + (x >> 40) as usize % 3000;
                    match n % 4 {
                        0 | 1 => {
                            let r = s.store(
                                Mode::Set,
                                &key(i),
                                i as u32,
                                0,
                                &value_for(i, x % 1000, len),
                                1,
                            );
                            assert!(matches!(r, Ok(StoreOutcome::Stored { .. })), "{r:?}");
                        }
                        2 => {
                            s.get(&key(i), 1, |it| {
                                let want = format!("{i}:");
                                assert!(
                                    it.value.starts_with(want.as_bytes()),
                                    "wrong value for {i}"
                                );
                                assert_eq!(it.flags, i as u32);
                            });
                        }
                        _ => match n % 16 {
                            3 => {
                                s.touch(&key(i), 5 + (n % 7) as Time, 1);
                            }
                            7 => {
                                s.delete(&key(i), 1);
                            }
                            11 => {
                                let r = s.get_and_touch(&key(i), 0, 1, |it| it.flags);
                                if let Lookup::Hit(f) = r {
                                    assert_eq!(f, i as u32);
                                }
                            }
                            _ => {
                                s.store(Mode::Append, &key(i), 0, 0, b"+", 1).unwrap();
                            }
                        },
                    }
                }
            })
        })
        .collect();
    // Maintenance and flushes race with the workers.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let maint = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut k = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                s.maintain(1 + k % 10);
                if k % 50 == 49 {
                    s.flush_all(0);
                }
                k += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    for t in threads {
        t.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    maint.join().unwrap();
    let st = s.stats();
    assert!(st.mem_used <= limit as u64 + 16 * 1024, "{st:?}");
    assert!(st.evictions > 0, "{st:?}");
}

/// Per-item overhead for tiny items: run with
/// `cargo test -p mnemo-store --release --test memory -- --ignored --nocapture overhead`.
#[test]
#[ignore]
fn overhead_per_item() {
    let n = 1_000_000u64;
    let s = Store::new(StoreConfig {
        mem_limit: 1 << 30,
        ..Default::default()
    });
    let base = s.stats();
    let t = std::time::Instant::now();
    for i in 0..n {
        let k = format!("{i:08}");
        s.store(Mode::Set, k.as_bytes(), 0, 0, &i.to_le_bytes(), 1)
            .unwrap();
    }
    let set_ns = t.elapsed().as_nanos() as f64 / n as f64;
    let t = std::time::Instant::now();
    let mut hits = 0u64;
    for i in 0..n {
        let k = format!("{i:08}");
        hits += s
            .get(k.as_bytes(), 1, |it| it.value.len() as u64)
            .hit()
            .unwrap_or(0);
    }
    let get_ns = t.elapsed().as_nanos() as f64 / n as f64;
    assert_eq!(hits, 8 * n);
    println!("single thread: set {set_ns:.0} ns/op, get {get_ns:.0} ns/op (incl. key formatting)");
    let st = s.stats();
    assert_eq!(st.curr_items, n);
    let payload = 16 * n;
    // What the allocator holds: buffers (whole segments), index, metadata.
    let held = st.mem_used - base.mem_used;
    // What is touched: written bytes of segments instead of their full size (segments are
    // zero-allocated, so unwritten pages never become resident).
    let touched = held - st.unwritten_bytes;
    let per = |b: u64| (b as f64 - payload as f64) / n as f64;
    println!(
        "items {n}, key 8 B, value 8 B, segment {} B, shards {}",
        st.segment_size, st.shards
    );
    println!(
        "item bytes (headers incl.) {:.2} B/item",
        st.bytes as f64 / n as f64
    );
    println!(
        "index {} B = {:.2} B/item (slots {}, entries {}, overflow buckets {})",
        st.index_bytes,
        st.index_bytes as f64 / n as f64,
        st.index_slots,
        st.index_entries,
        st.index_overflow_buckets
    );
    println!("overhead, resident view: {:.2} B/item", per(touched));
    println!(
        "overhead, allocated view: {:.2} B/item (unwritten segment tails {} B)",
        per(held),
        st.unwritten_bytes
    );
}

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// RSS after writing twice the limit (mixed sizes, some expiring): run with
/// `cargo test -p mnemo-store --release --test memory -- --ignored --nocapture rss`.
#[test]
#[ignore]
fn rss_after_writing_twice_the_limit() {
    let limit = 256usize << 20;
    let before = rss_bytes();
    let s = Store::new(StoreConfig {
        mem_limit: limit,
        item_size_max: 4 << 20,
        ..Default::default()
    });
    let empty = rss_bytes();
    let mut written = 0usize;
    let mut i = 0u64;
    let mut now = 1;
    let mut buf = Vec::with_capacity(2 << 20);
    let mut kbuf = Vec::with_capacity(32);
    while written < 2 * limit {
        let len = match i % 1000 {
            0 => 2 << 20,
            1..=99 => 20_000,
            _ => 10 + (i % 700) as usize,
        };
        let exp = if i.is_multiple_of(3) { now + 5 } else { 0 };
        // One reused buffer: the test's own allocations must not pollute the RSS figure.
        buf.clear();
        buf.resize(len, (i % 251) as u8);
        kbuf.clear();
        kbuf.extend_from_slice(format!("key:{:010}", i % 2_000_000).as_bytes());
        s.store(Mode::Set, &kbuf, 0, exp, &buf, now).unwrap();
        written += len;
        i += 1;
        if i.is_multiple_of(200_000) {
            now += 1;
            s.maintain(now);
        }
    }
    let st = s.stats();
    let after = rss_bytes();
    println!(
        "limit {} MiB; RSS before store {} MiB, empty store {} MiB, after writing {} MiB: {} MiB",
        limit >> 20,
        before >> 20,
        empty >> 20,
        written >> 20,
        after >> 20
    );
    println!(
        "mem_used {} MiB, items {}, evictions {}, index {} KiB",
        st.mem_used >> 20,
        st.curr_items,
        st.evictions,
        st.index_bytes >> 10
    );
}

#[test]
fn overwrites_reuse_dead_space_before_taking_more_memory() {
    // 2,000 keys of 1 KB (about 2 MB live) overwritten 100 times in a 64 MB store: the log
    // compacts its head instead of growing to the limit, and nothing is evicted or changed.
    let s = Store::new(StoreConfig {
        mem_limit: 64 << 20,
        ..Default::default()
    });
    let keys = 2000u64;
    let mut ver = vec![0u64; keys as usize];
    let mut cas = vec![0u64; keys as usize];
    for i in 0..keys {
        s.store(Mode::Set, &key(i), 3, 0, &value_for(i, 0, 1000), 1)
            .unwrap();
        cas[i as usize] = s.get(&key(i), 1, |it| it.cas).hit().unwrap();
    }
    let mut x = 7u64;
    for _ in 0..200_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let i = (x >> 33) % keys;
        let v = ver[i as usize] + 1;
        match s
            .store(Mode::Set, &key(i), 3, 0, &value_for(i, v, 1000), 1)
            .unwrap()
        {
            StoreOutcome::Stored { cas: c } => cas[i as usize] = c,
            o => panic!("{o:?}"),
        }
        ver[i as usize] = v;
    }
    let st = s.stats();
    assert!(st.compactions > 0 && st.evictions == 0, "{st:?}");
    assert!(
        st.mem_used < 12 << 20,
        "the log grew towards the limit: {st:?}"
    );
    for i in 0..keys {
        let got = s
            .get(&key(i), 1, |it| (it.value.to_vec(), it.flags, it.cas))
            .hit();
        // Moved items keep their value, flags and CAS.
        assert_eq!(
            got,
            Some((value_for(i, ver[i as usize], 1000), 3, cas[i as usize])),
            "key {i}"
        );
    }
}
