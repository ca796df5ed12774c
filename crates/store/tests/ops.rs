//! Semantics of each operation, memcached's rules, on a store large enough never to evict.

use mnemo_store::*;

fn store() -> Store {
    Store::new(StoreConfig {
        mem_limit: 64 << 20,
        ..Default::default()
    })
}

type Got = (Vec<u8>, u32, u64, Time);

fn get(s: &Store, k: &[u8], now: Time) -> Option<Got> {
    s.get(k, now, |it| (it.value.to_vec(), it.flags, it.cas, it.exp))
        .hit()
}

fn set(s: &Store, k: &[u8], v: &[u8], now: Time) -> u64 {
    match s.store(Mode::Set, k, 0, 0, v, now).unwrap() {
        StoreOutcome::Stored { cas } => cas,
        o => panic!("set: {o:?}"),
    }
}

/// memcached's safe_strtoull as the server passes it: digits, then only whitespace.
fn parse(b: &[u8]) -> Option<u64> {
    let digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 || !b[digits..].iter().all(|c| c.is_ascii_whitespace()) {
        return None;
    }
    std::str::from_utf8(&b[..digits]).ok()?.parse().ok()
}

#[test]
fn set_get_flags_and_odd_keys() {
    let s = store();
    let now = 10;
    assert_eq!(s.get(b"nope", now, |_| ()), Lookup::Miss);
    let keys: Vec<Vec<u8>> = vec![
        b"a".to_vec(),
        vec![0u8, 1, 2, 0x7f, 0xff],
        vec![b'k'; MAX_KEY_LEN],
        b"\x00".to_vec(),
    ];
    for (i, k) in keys.iter().enumerate() {
        let v = vec![i as u8; i * 100];
        assert!(matches!(
            s.store(Mode::Set, k, 0xdead_beef, 0, &v, now),
            Ok(StoreOutcome::Stored { .. })
        ));
        assert_eq!(get(&s, k, now).map(|g| (g.0, g.1)), Some((v, 0xdead_beef)));
    }
    // empty value, zero flags
    set(&s, b"empty", b"", now);
    assert_eq!(get(&s, b"empty", now).unwrap().0, b"");
    // keys out of range
    assert_eq!(
        s.store(Mode::Set, &[b'k'; 251], 0, 0, b"v", now),
        Err(StoreError::TooLarge)
    );
    assert_eq!(
        s.store(Mode::Set, b"", 0, 0, b"v", now),
        Err(StoreError::TooLarge)
    );
    let st = s.stats();
    assert_eq!(st.curr_items, 5);
    assert_eq!(st.total_items, 5);
}

#[test]
fn too_large_set_removes_old_value() {
    let s = Store::new(StoreConfig {
        mem_limit: 8 << 20,
        item_size_max: 1000,
        ..Default::default()
    });
    set(&s, b"k", b"old", 1);
    assert_eq!(
        s.store(Mode::Set, b"k", 0, 0, &[0u8; 1000], 1),
        Err(StoreError::TooLarge)
    );
    assert_eq!(get(&s, b"k", 1), None);
    // add of a too large value does not touch the old one
    set(&s, b"k", b"old", 1);
    assert_eq!(
        s.store(Mode::Add, b"k", 0, 0, &[0u8; 1000], 1),
        Err(StoreError::TooLarge)
    );
    assert!(get(&s, b"k", 1).is_some());
}

#[test]
fn add_replace_semantics() {
    let s = store();
    assert_eq!(
        s.store(Mode::Replace, b"k", 0, 0, b"x", 1),
        Ok(StoreOutcome::NotStored)
    );
    assert!(matches!(
        s.store(Mode::Add, b"k", 1, 0, b"a", 1),
        Ok(StoreOutcome::Stored { .. })
    ));
    assert_eq!(
        s.store(Mode::Add, b"k", 2, 0, b"b", 1),
        Ok(StoreOutcome::NotStored)
    );
    assert_eq!(
        get(&s, b"k", 1).map(|g| (g.0, g.1)),
        Some((b"a".to_vec(), 1))
    );
    assert!(matches!(
        s.store(Mode::Replace, b"k", 3, 0, b"c", 1),
        Ok(StoreOutcome::Stored { .. })
    ));
    assert_eq!(
        get(&s, b"k", 1).map(|g| (g.0, g.1)),
        Some((b"c".to_vec(), 3))
    );
    // add succeeds over an expired item
    s.store(Mode::Set, b"t", 0, 5, b"v", 1).unwrap();
    assert_eq!(
        s.store(Mode::Add, b"t", 0, 0, b"w", 4),
        Ok(StoreOutcome::NotStored)
    );
    assert!(matches!(
        s.store(Mode::Add, b"t", 0, 0, b"w", 5),
        Ok(StoreOutcome::Stored { .. })
    ));
    assert_eq!(get(&s, b"t", 5).unwrap().0, b"w");
}

#[test]
fn append_prepend_keep_flags_and_exp() {
    let s = store();
    assert_eq!(
        s.store(Mode::Append, b"k", 0, 0, b"x", 1),
        Ok(StoreOutcome::NotStored)
    );
    assert_eq!(
        s.store(Mode::Prepend, b"k", 0, 0, b"x", 1),
        Ok(StoreOutcome::NotStored)
    );
    s.store(Mode::Set, b"k", 42, 100, b"mid", 1).unwrap();
    let c0 = get(&s, b"k", 1).unwrap().2;
    assert!(matches!(
        s.store(Mode::Append, b"k", 7, 0, b">>", 1),
        Ok(StoreOutcome::Stored { .. })
    ));
    assert!(matches!(
        s.store(Mode::Prepend, b"k", 7, 0, b"<<", 1),
        Ok(StoreOutcome::Stored { .. })
    ));
    let (v, f, c, e) = get(&s, b"k", 1).unwrap();
    assert_eq!((v.as_slice(), f, e), (&b"<<mid>>"[..], 42, 100));
    assert_ne!(c, c0);
    // the kept exp still applies
    assert_eq!(s.get(b"k", 100, |_| ()), Lookup::Expired);
    // append beyond item_size_max: NOT_STORED, old value intact
    let s = Store::new(StoreConfig {
        item_size_max: 100,
        ..Default::default()
    });
    set(&s, b"k", &[1u8; 90], 1);
    assert_eq!(
        s.store(Mode::Append, b"k", 0, 0, &[2u8; 20], 1),
        Ok(StoreOutcome::NotStored)
    );
    assert_eq!(get(&s, b"k", 1).unwrap().0.len(), 90);
}

#[test]
fn cas_semantics_and_uniqueness() {
    let s = store();
    assert_eq!(
        s.store(Mode::Cas(1), b"k", 0, 0, b"x", 1),
        Ok(StoreOutcome::NotFound)
    );
    let mut seen = std::collections::HashSet::new();
    let c1 = set(&s, b"k", b"a", 1);
    assert!(c1 != 0 && seen.insert(c1));
    assert_eq!(get(&s, b"k", 1).unwrap().2, c1);
    assert_eq!(
        s.store(Mode::Cas(c1 + 1), b"k", 0, 0, b"b", 1),
        Ok(StoreOutcome::Exists)
    );
    let c2 = match s.store(Mode::Cas(c1), b"k", 5, 0, b"b", 1).unwrap() {
        StoreOutcome::Stored { cas } => cas,
        o => panic!("{o:?}"),
    };
    assert!(seen.insert(c2));
    assert_eq!(get(&s, b"k", 1).unwrap(), (b"b".to_vec(), 5, c2, 0));
    assert_eq!(
        s.store(Mode::Cas(c1), b"k", 0, 0, b"c", 1),
        Ok(StoreOutcome::Exists)
    );
    for i in 0..1000u32 {
        let c = set(&s, b"k", &i.to_le_bytes(), 1);
        assert!(seen.insert(c), "cas {c} repeated");
    }
    // cas on an expired item: NotFound
    s.store(Mode::Set, b"e", 0, 3, b"v", 1).unwrap();
    let ce = get(&s, b"e", 1).unwrap().2;
    assert_eq!(
        s.store(Mode::Cas(ce), b"e", 0, 0, b"w", 3),
        Ok(StoreOutcome::NotFound)
    );
}

#[test]
fn cas_disabled_reports_zero_and_cas_always_matches() {
    let s = Store::new(StoreConfig {
        use_cas: false,
        ..Default::default()
    });
    assert_eq!(
        s.store(Mode::Set, b"k", 0, 0, b"a", 1),
        Ok(StoreOutcome::Stored { cas: 0 })
    );
    assert_eq!(get(&s, b"k", 1).unwrap().2, 0);
    assert_eq!(
        s.store(Mode::Cas(12345), b"k", 0, 0, b"b", 1),
        Ok(StoreOutcome::Stored { cas: 0 })
    );
    assert_eq!(
        s.store(Mode::Cas(1), b"zz", 0, 0, b"b", 1),
        Ok(StoreOutcome::NotFound)
    );
    assert_eq!(s.delta(b"n", true, 1, 1, parse), Err(DeltaError::NotFound));
    set(&s, b"n", b"5", 1);
    assert_eq!(s.delta(b"n", true, 1, 1, parse), Ok((6, 0)));
}

#[test]
fn incr_decr_and_the_padding_quirk() {
    let s = store();
    assert_eq!(s.delta(b"n", true, 1, 1, parse), Err(DeltaError::NotFound));
    s.store(Mode::Set, b"n", 9, 50, b"10", 1).unwrap();
    let c0 = get(&s, b"n", 1).unwrap().2;
    let (v, c1) = s.delta(b"n", false, 1, 1, parse).unwrap();
    assert_eq!(v, 9);
    assert_ne!(c1, c0);
    let (val, flags, cas, exp) = get(&s, b"n", 1).unwrap();
    assert_eq!((val.as_slice(), flags, cas, exp), (&b"9 "[..], 9, c1, 50));
    // "9 " parses; incr to 10 fills the old length exactly
    assert_eq!(s.delta(b"n", true, 1, 1, parse).unwrap().0, 10);
    assert_eq!(get(&s, b"n", 1).unwrap().0, b"10");
    // growing: just the digits
    assert_eq!(s.delta(b"n", true, 990, 1, parse).unwrap().0, 1000);
    assert_eq!(get(&s, b"n", 1).unwrap().0, b"1000");
    // decr floors at 0, padded to the old length
    assert_eq!(s.delta(b"n", false, 5000, 1, parse).unwrap().0, 0);
    assert_eq!(get(&s, b"n", 1).unwrap().0, b"0   ");
    // incr wraps
    set(&s, b"m", u64::MAX.to_string().as_bytes(), 1);
    assert_eq!(s.delta(b"m", true, 2, 1, parse).unwrap().0, 1);
    assert_eq!(
        get(&s, b"m", 1).unwrap().0,
        format!("1{}", " ".repeat(19)).as_bytes()
    );
    // non-numeric and empty
    set(&s, b"x", b"abc", 1);
    assert_eq!(
        s.delta(b"x", true, 1, 1, parse),
        Err(DeltaError::NonNumeric)
    );
    set(&s, b"e", b"", 1);
    assert_eq!(
        s.delta(b"e", true, 1, 1, |_| Some(0)),
        Err(DeltaError::NonNumeric)
    );
    // expired -> NotFound
    s.store(Mode::Set, b"t", 0, 5, b"1", 1).unwrap();
    assert_eq!(s.delta(b"t", true, 1, 5, parse), Err(DeltaError::NotFound));
}

#[test]
fn touch_and_gat_keep_cas() {
    let s = store();
    assert!(!s.touch(b"k", 10, 1));
    // no exp yet: the item must move to get one, and keeps its CAS
    let c = set(&s, b"k", b"v", 1);
    assert!(s.touch(b"k", 10, 1));
    assert_eq!(get(&s, b"k", 9).unwrap(), (b"v".to_vec(), 0, c, 10));
    assert_eq!(s.get(b"k", 10, |_| ()), Lookup::Expired);
    // has exp: rewritten in place
    s.store(Mode::Set, b"k", 3, 5, b"v", 1).unwrap();
    let c = get(&s, b"k", 1).unwrap().2;
    assert!(s.touch(b"k", 20, 4));
    assert_eq!(get(&s, b"k", 19).unwrap(), (b"v".to_vec(), 3, c, 20));
    // back to never expiring
    assert!(s.touch(b"k", 0, 4));
    assert_eq!(get(&s, b"k", 1_000_000).unwrap().3, 0);
    // gat
    assert_eq!(s.get_and_touch(b"none", 5, 1, |_| ()), Lookup::Miss);
    let r = s.get_and_touch(b"k", 30, 5, |it| (it.value.to_vec(), it.cas, it.exp));
    assert_eq!(r, Lookup::Hit((b"v".to_vec(), c, 30)));
    assert_eq!(s.get(b"k", 30, |_| ()), Lookup::Expired);
    // cas still matches after touches
    s.store(Mode::Set, b"j", 0, 0, b"v", 1).unwrap();
    let cj = get(&s, b"j", 1).unwrap().2;
    assert!(s.touch(b"j", 100, 2));
    assert!(matches!(
        s.store(Mode::Cas(cj), b"j", 0, 0, b"w", 2),
        Ok(StoreOutcome::Stored { .. })
    ));
    // touch with a past time kills the item
    assert!(s.touch(b"j", 1, 2));
    assert_eq!(s.get(b"j", 2, |_| ()), Lookup::Expired);
}

#[test]
fn expiry_boundaries() {
    let s = store();
    s.store(Mode::Set, b"k", 0, 11, b"v", 10).unwrap();
    assert!(get(&s, b"k", 10).is_some());
    assert_eq!(s.get(b"k", 11, |_| ()), Lookup::Expired);
    // and it is gone for good, not expired again
    assert_eq!(s.get(b"k", 11, |_| ()), Lookup::Miss);
    // an exp already in the past: stored, immediately dead, the old value is gone
    set(&s, b"p", b"old", 10);
    assert!(matches!(
        s.store(Mode::Set, b"p", 0, 9, b"new", 10),
        Ok(StoreOutcome::Stored { .. })
    ));
    assert_eq!(s.get(b"p", 10, |_| ()), Lookup::Expired);
    s.store(Mode::Set, b"q", 0, 10, b"new", 10).unwrap();
    assert!(get(&s, b"q", 10).is_none());
    assert!(!s.delete(b"q", 10));
}

#[test]
fn delete() {
    let s = store();
    assert!(!s.delete(b"k", 1));
    set(&s, b"k", b"v", 1);
    assert!(s.delete(b"k", 1));
    assert!(!s.delete(b"k", 1));
    assert_eq!(get(&s, b"k", 1), None);
    assert_eq!(s.stats().curr_items, 0);
    assert_eq!(s.stats().bytes, 0);
}

#[test]
fn flush_all_now_and_delayed() {
    let s = store();
    for i in 0..100u32 {
        set(&s, format!("k{i}").as_bytes(), b"v", 10);
    }
    s.flush_all(10);
    assert_eq!(s.get(b"k1", 10, |_| ()), Lookup::Flushed);
    assert_eq!(s.get(b"k1", 10, |_| ()), Lookup::Miss);
    set(&s, b"after", b"v", 10);
    assert!(get(&s, b"after", 10).is_some());
    for i in 0..100u32 {
        assert!(get(&s, format!("k{i}").as_bytes(), 10).is_none());
    }
    s.maintain(10);
    assert_eq!(s.stats().curr_items, 1);

    // delayed: visible until the time comes; what is written meanwhile goes too
    s.flush_all(20);
    assert!(get(&s, b"after", 19).is_some());
    set(&s, b"meanwhile", b"v", 19);
    assert!(get(&s, b"after", 20).is_none());
    assert!(get(&s, b"meanwhile", 20).is_none());
    set(&s, b"later", b"v", 20);
    assert!(get(&s, b"later", 21).is_some());

    // a later flush_all replaces a pending one
    s.flush_all(30);
    s.flush_all(40);
    assert!(get(&s, b"later", 35).is_some());
    assert!(get(&s, b"later", 40).is_none());

    // flush_all(0) = everything so far
    set(&s, b"z", b"v", 41);
    s.flush_all(0);
    assert!(get(&s, b"z", 41).is_none());
    let st = s.stats();
    assert_eq!(st.curr_items, 0);
}

#[test]
fn large_items_bigger_than_a_segment() {
    let s = Store::new(StoreConfig {
        mem_limit: 64 << 20,
        item_size_max: 8 << 20,
        ..Default::default()
    });
    assert!(s.stats().segment_size <= 1 << 20);
    let big: Vec<u8> = (0..5 << 20).map(|i| (i * 7 + 3) as u8).collect();
    let c = set(&s, b"big", &big, 1);
    let (v, _, c2, _) = get(&s, b"big", 1).unwrap();
    assert!(v == big && c2 == c);
    assert!(s.stats().mem_used >= 5 << 20);
    // append onto a large item, touch it, replace it
    assert!(matches!(
        s.store(Mode::Append, b"big", 0, 0, b"tail", 1),
        Ok(StoreOutcome::Stored { .. })
    ));
    assert_eq!(get(&s, b"big", 1).unwrap().0.len(), (5 << 20) + 4);
    assert!(s.touch(b"big", 100, 1));
    set(&s, b"big", b"small", 1);
    assert_eq!(get(&s, b"big", 1).unwrap().0, b"small");
    assert!(
        s.stats().mem_used < 4 << 20,
        "large buffer not given back: {:?}",
        s.stats()
    );
}

#[test]
fn stats_counters_and_reset() {
    let s = store();
    set(&s, b"a", b"1234", 1);
    set(&s, b"b", b"1234", 1);
    set(&s, b"a", b"12", 1);
    let st = s.stats();
    assert_eq!((st.curr_items, st.total_items), (2, 3));
    assert_eq!(st.bytes, (2 + 1 + 4) + (2 + 1 + 2));
    assert!(st.index_bytes > 0 && st.index_slots > 0);
    s.reset_stats();
    let st = s.stats();
    assert_eq!((st.curr_items, st.total_items, st.bytes), (2, 0, 12));
    // expired-unfetched counting
    s.store(Mode::Set, b"e", 0, 5, b"v", 1).unwrap();
    assert_eq!(s.get(b"e", 5, |_| ()), Lookup::Expired);
    assert_eq!(s.stats().expired_unfetched, 1);
}
