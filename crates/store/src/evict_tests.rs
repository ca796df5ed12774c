//! Tests of evict.rs's policies (S3-FIFO, its size awareness, fifo) on small one-shard stores.

use crate::segment::Queue;
use crate::shard::Found;
use crate::{Eviction, Mode, Store, StoreConfig};

/// One shard of 1 MiB: segments of 128 KiB, 8 of them.
fn store(eviction: Eviction) -> Store {
    Store::new(StoreConfig {
        mem_limit: 1 << 20,
        shards: 1,
        eviction,
        huge_pages: false,
        ..Default::default()
    })
}

/// Sets `key` to `len` bytes.
fn put(s: &Store, key: &str, len: usize) {
    s.store(Mode::Set, key.as_bytes(), 0, 0, &vec![b'v'; len], 1)
        .unwrap();
}

/// Whether `key` is stored (a peek: not a read, so no eviction decision changes).
fn holds(s: &Store, key: &str) -> bool {
    s.peek(key.as_bytes(), 1, |_| ()).is_hit()
}

/// A read of `key` (counts for eviction): whether it hit.
fn fetch(s: &Store, key: &str) -> bool {
    s.get(key.as_bytes(), 1, |_| ()).is_hit()
}

/// The small items most tests use: `key:{k}`, 200 bytes.
fn set(s: &Store, k: u32) {
    put(s, &format!("key:{k}"), 200);
}

fn has(s: &Store, k: u32) -> bool {
    holds(s, &format!("key:{k}"))
}

fn read(s: &Store, k: u32) -> bool {
    fetch(s, &format!("key:{k}"))
}

/// The FIFO holding `key` (which must be stored) in a one-shard store.
fn queue_of(s: &Store, key: &[u8]) -> Queue {
    let h = crate::Store::hash(key);
    let mut sh = s.shards[0].lock();
    match sh.find(&s.env(0), h, key, 1) {
        Found::Live { seg, .. } => sh.segs.metas[seg as usize].queue,
        _ => panic!("{key:?} not stored"),
    }
}

/// A scan of keys read once never again (one-hit wonders, 20x the cache) passes through
/// the small FIFO and leaves main alone: keys read once while they were new stay. Under
/// fifo the scan pushes them out (their one read is worth one pass).
#[test]
fn a_scan_does_not_evict_what_was_read_in_small() {
    for (eviction, want_kept) in [(Eviction::S3Fifo, true), (Eviction::Fifo, false)] {
        let s = store(eviction);
        for k in 0..200 {
            set(&s, k);
            assert!(read(&s, k));
        }
        for k in 1000..100_000 {
            set(&s, k);
        }
        let kept = (0..200).filter(|&k| has(&s, k)).count();
        assert!(s.stats().evictions > 90_000);
        if want_kept {
            assert!(kept >= 190, "{eviction:?}: {kept} of 200 kept");
        } else {
            assert!(kept <= 10, "{eviction:?}: {kept} of 200 kept");
        }
    }
}

/// A key evicted unread from small is remembered by the ghost: set again (look-aside after
/// its miss), it goes straight to main, and the next scan leaves it there.
#[test]
fn a_key_back_from_the_ghost_goes_to_main() {
    let s = store(Eviction::S3Fifo);
    for k in 0..200 {
        set(&s, k);
    }
    // The cache holds about 4,300 such items: these push the oldest 900 or so out, which
    // the ghost (about three quarters of the cache's item count) still remembers.
    for k in 1000..6000 {
        set(&s, k);
    }
    assert!((0..200).all(|k| !has(&s, k)), "unread keys left small");
    for k in 0..200 {
        set(&s, k);
    }
    for k in 6000..100_000 {
        set(&s, k);
    }
    let kept = (0..200).filter(|&k| has(&s, k)).count();
    assert!(kept >= 190, "{kept} of 200 back from the ghost kept");
    // The ghost is counted: the store stays within its limit.
    let st = s.stats();
    assert!(st.mem_used <= st.limit_maxbytes, "{st:?}");
}

/// Under S3-FIFO a large item (own buffer) read once in main is not worth its memory:
/// the next eviction that reaches it drops it, where one read twice is moved to main's tail.
/// (Out of small one read still promotes it, as any item.)
#[test]
fn a_large_item_read_once_in_main_is_not_spared() {
    const N_MAIN: u32 = 15_000;
    let s = store(Eviction::S3Fifo);
    let key = |k: u32| format!("big:{k}");
    let read_big = |k: u32| assert!(fetch(&s, &key(k)));
    for k in [1, 2] {
        put(&s, &key(k), 40 << 10);
        read_big(k);
    }
    // 1.4 times the cache (about 4,300 of these) in unread small items: both large ones
    // leave small for main (read once there), which the unread ones never enter.
    for k in 0..6000 {
        set(&s, k);
    }
    let kept = |k: u32| holds(&s, &key(k));
    assert!(kept(1) && kept(2));
    read_big(1);
    read_big(2);
    read_big(2);
    // Small items read once each enter main behind them and push main's head around.
    for k in 10_000..N_MAIN {
        set(&s, k);
        assert!(read(&s, k));
    }
    assert_eq!((kept(1), kept(2)), (false, true));
}

/// Size awareness: a stream of large items (own buffers) read once each, many times the
/// cache, pushes out large items only, once they hold their share: small items that were
/// read (in main) stay. Under fifo (size-blind) they go.
#[test]
fn large_items_over_their_share_push_out_large_items() {
    for (eviction, want_kept) in [(Eviction::S3Fifo, true), (Eviction::Fifo, false)] {
        let s = store(eviction);
        for k in 0..500 {
            set(&s, k);
            assert!(read(&s, k));
        }
        // Unread small items push the read ones on to main.
        for k in 1000..2000 {
            set(&s, k);
        }
        for k in 0..400u32 {
            let key = format!("big:{k}");
            put(&s, &key, 40 << 10);
            assert!(fetch(&s, &key));
        }
        let kept = (0..500).filter(|&k| has(&s, k)).count();
        if want_kept {
            assert!(kept >= 450, "{eviction:?}: {kept} of 500 kept");
        } else {
            assert!(kept <= 50, "{eviction:?}: {kept} of 500 kept");
        }
        let st = s.stats();
        assert!(st.mem_used <= st.limit_maxbytes, "{st:?}");
    }
}

/// Size awareness: once the shard evicts, a new small item among large ones skips probation
/// (main at once), so a flood of unread large items does not push it out before its first
/// read; a new item as large as the others starts in small. Before the first eviction
/// everything starts in small (one active segment filling, not two).
#[test]
fn a_small_item_among_large_ones_goes_to_main() {
    let s = store(Eviction::S3Fifo);
    let set_mid = |k: &str| put(&s, k, 8 << 10);
    for k in 0..60u32 {
        set_mid(&format!("mid:{k}"));
    }
    set(&s, 1);
    assert_eq!(queue_of(&s, b"key:1"), Queue::Small);
    // Twice the cache: now it evicts.
    for k in 60..300u32 {
        set_mid(&format!("mid:{k}"));
    }
    assert!(s.stats().evictions > 0);
    set(&s, 2);
    set_mid("mid:new");
    assert_eq!(queue_of(&s, b"key:2"), Queue::Main);
    assert_eq!(queue_of(&s, b"mid:new"), Queue::Small);
}

/// Size awareness: an item of more than `GHOST_MAX_LEN` evicted unread is not remembered,
/// so set again it starts in small; a small one comes back to main (the test above).
#[test]
fn the_ghost_does_not_remember_large_items() {
    let s = store(Eviction::S3Fifo);
    let mid = |k: u32| format!("mid:{k}");
    for k in 0..20u32 {
        put(&s, &mid(k), 6 << 10);
    }
    for k in 1000..8000 {
        set(&s, k);
    }
    assert!((0..20).all(|k| !holds(&s, &mid(k))));
    for k in 0..20u32 {
        put(&s, &mid(k), 6 << 10);
    }
    for k in 0..20u32 {
        let key = format!("mid:{k}");
        assert_eq!(queue_of(&s, key.as_bytes()), Queue::Small, "{key}");
    }
}

/// Under fifo there is no small FIFO and no ghost: nothing is remembered, no byte spent.
#[test]
fn fifo_keeps_no_ghost() {
    let s = store(Eviction::Fifo);
    for k in 0..50_000 {
        set(&s, k);
    }
    let sh = s.shards[0].lock();
    assert_eq!(sh.ghost.bytes(), 0);
    assert_eq!(sh.segs.small_bytes, 0);
}

/// The adaptive split (ghost.rs): small's target share grows while returning keys come back
/// from small's ghost (a larger small would have kept them), and shrinks back once they come
/// back from main's ghost (a larger main would have kept them).
#[test]
fn the_split_follows_where_returning_keys_left() {
    use crate::ghost::SPLIT_ONE;
    let s = store(Eviction::S3Fifo);
    let split = || s.shards[0].lock().ghost.split();
    let floor = split();
    assert_eq!(floor, SPLIT_ONE / 20, "starts at its floor");
    // Main holds read keys: with the split at its floor, small is one segment or two.
    for k in 0..3000 {
        set(&s, k);
        assert!(read(&s, k));
    }
    for k in 10_000..16_000 {
        set(&s, k);
    }
    assert_eq!(split(), floor, "nothing came back yet");
    // Every new key comes back once, 1,500 new keys later: past small (about 1,100 of these
    // items at the floor) but within the ghost's memory (about 3,200 keys). Each return would
    // have been a hit with a larger small.
    let fresh = |i: u32| 100_000 + i;
    for i in 0..20_000 {
        set(&s, fresh(i));
        if i >= 1500 {
            set(&s, fresh(i - 1500));
        }
    }
    let grown = split();
    assert!(
        grown >= SPLIT_ONE / 5,
        "returns from small's ghost grow small: {grown} of {SPLIT_ONE}"
    );
    // A cycle of sets over 4,800 keys (1.1 times the cache), never read: each key back from
    // the ghost goes to main, leaves it unread, and comes back within the ghost's memory.
    for _ in 0..10 {
        for k in 200_000..204_800 {
            set(&s, k);
        }
    }
    let shrunk = split();
    assert!(
        shrunk < grown / 2 && shrunk <= SPLIT_ONE / 10,
        "returns from main's ghost shrink small: {grown} -> {shrunk}"
    );
    let st = s.stats();
    assert!(st.mem_used <= st.limit_maxbytes, "{st:?}");
}

/// Items kept by an eviction go to their own TTL group's segment when it has room, not the
/// writer's: a read item without a TTL in a TTL group's segment would keep that segment from
/// expiring whole. Read keys without a TTL are kept pass after pass while new keys, half of
/// them with a TTL, stream through.
#[test]
fn kept_items_stay_in_their_ttl_group() {
    let s = store(Eviction::S3Fifo);
    let hot = |k: u32| format!("hot:{k}");
    for k in 0..300 {
        put(&s, &hot(k), 200);
    }
    for round in 0..200u32 {
        for k in 0..300 {
            fetch(&s, &hot(k));
        }
        for i in 0..100 {
            let key = format!("new:{round}:{i}");
            let exp = if i % 2 == 0 { 1000 } else { 0 };
            s.store(Mode::Set, key.as_bytes(), 0, exp, &[b'v'; 200], 1)
                .unwrap();
        }
    }
    assert!(s.stats().evictions > 10_000);
    // Live items without a TTL, by whether their segment is a TTL group's.
    let (mut home, mut away) = (0, 0);
    let sh = s.shards[0].lock();
    for id in sh.segs.live_ids() {
        let m = &sh.segs.metas[id as usize];
        let mut off = 0;
        while off < m.write {
            let hdr = sh.header_at(id, off);
            if !hdr.is_dead() && hdr.exp == 0 {
                *(if m.ttl == 0 { &mut home } else { &mut away }) += 1;
            }
            off += hdr.total_len();
        }
    }
    drop(sh);
    assert!((0..300).all(|k| holds(&s, &hot(k))), "the read keys stay");
    assert!(
        away * 20 < home,
        "{away} items without a TTL in TTL segments, {home} in their own"
    );
}

/// Under S3-FIFO a key whose item expired after being read goes to main when it is set
/// again (the ghost remembers it as `Left::Expired`), whether a read found it expired or its
/// segment expired whole first; a key whose item expired unread goes through small.
#[test]
fn a_key_read_before_it_expired_skips_probation_when_set_again() {
    let s = store(Eviction::S3Fifo);
    for k in 0..6000 {
        set(&s, k);
    }
    assert!(
        s.stats().evictions > 0,
        "the ghost is used once the shard evicts"
    );
    let with_ttl = |key: &str, now| {
        s.store(Mode::Set, key.as_bytes(), 0, 5, &[b'v'; 200], now)
            .unwrap()
    };
    let split = || s.shards[0].lock().ghost.split();
    for key in ["read:1", "unread:1", "read:2", "unread:2"] {
        with_ttl(key, 1);
    }
    for key in ["read:1", "read:2"] {
        assert!(s.get(key.as_bytes(), 2, |_| ()).is_hit());
    }
    // 1: a read meets the expired item.
    for key in ["read:1", "unread:1"] {
        assert!(s.get(key.as_bytes(), 5, |_| ()) == crate::Lookup::Expired);
    }
    // 2: the whole segment expires first (the maintenance pass a server runs each second).
    s.maintain(6);
    assert!(!holds(&s, "read:2") && !holds(&s, "unread:2"));
    let before = split();
    for key in ["read:1", "unread:1", "read:2", "unread:2"] {
        put(&s, key, 200);
    }
    assert_eq!(queue_of(&s, b"read:1"), Queue::Main);
    assert_eq!(queue_of(&s, b"read:2"), Queue::Main);
    assert_eq!(queue_of(&s, b"unread:1"), Queue::Small);
    assert_eq!(queue_of(&s, b"unread:2"), Queue::Small);
    assert_eq!(
        split(),
        before,
        "an expiry says nothing about small's share"
    );
}

/// The module doc's picture quotes two constants: it must say what the code does.
#[test]
fn the_module_doc_quotes_the_constants() {
    let src = include_str!("evict.rs");
    let ghost = format!("(if <= {} KiB)", super::GHOST_MAX_LEN / 1024);
    let large = format!("over 1/{} of the shard", super::LARGE_SHARE);
    assert!(src.contains(&ghost), "evict.rs's doc should say {ghost}");
    assert!(src.contains(&large), "evict.rs's doc should say {large}");
}
