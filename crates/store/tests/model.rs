//! Model-based tests: random operation sequences run on the Store and on a HashMap model under a
//! manual clock.
//!
//! * exact regime: memory is ample, so every answer must match the model exactly.
//! * eviction regime: memory is tiny; the store may forget items (then the model forgets them
//!   too), but whatever it returns must be the model's current value, never a stale or wrong one,
//!   and memory must stay within the limit.
//!
//! CAS values are checked for what the protocol promises: a read returns the CAS of the last
//! modification, every modification gets a CAS the key never had, touch keeps it.

use std::collections::{HashMap, HashSet};

use mnemo_store::*;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    /// mode 0..5 = set add replace append prepend
    Store { mode: u8, key: u16, value: Vec<u8>, flags: u32, ttl: i8 },
    Cas { key: u16, value: Vec<u8>, flags: u32, ttl: i8, right: bool },
    Get(u16),
    Gat(u16, i8),
    Touch(u16, i8),
    Delete(u16),
    Delta { key: u16, incr: bool, by: u64 },
    Advance(u8),
    Flush(u8),
    Maintain,
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
    let k = 0..keys;
    let ttl = prop_oneof![4 => Just(0i8), 3 => 1i8..8, 1 => -3i8..=0];
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
        2 => (0u8..4).prop_map(Op::Advance),
        flush_weight => (0u8..4).prop_map(Op::Flush),
        1 => Just(Op::Maintain),
    ]
}

fn key_bytes(k: u16) -> Vec<u8> {
    // A few binary keys among the plain ones.
    if k % 7 == 3 {
        vec![0, (k >> 8) as u8, k as u8, b'\r', 0x7f]
    } else {
        format!("key:{k}").into_bytes()
    }
}

fn parse(b: &[u8]) -> Option<u64> {
    let digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 || !b[digits..].iter().all(|c| c.is_ascii_whitespace()) {
        return None;
    }
    std::str::from_utf8(&b[..digits]).ok()?.parse().ok()
}

#[derive(Clone, Debug, PartialEq)]
struct MItem {
    value: Vec<u8>,
    flags: u32,
    exp: Time,
    cas: u64,
}

struct Model {
    items: HashMap<Vec<u8>, MItem>,
    now: Time,
    /// Largest `now` an operation passed to the store: flush_all applies a pending flush due by
    /// that time (it has no `now` of its own).
    seen: Time,
    pending: Option<Time>,
    cas_seen: HashMap<Vec<u8>, HashSet<u64>>,
    /// Eviction regime: the store may have dropped any item.
    lenient: bool,
}

impl Model {
    fn tick(&mut self) {
        self.seen = self.seen.max(self.now);
        self.flush_due(self.seen);
    }
    fn flush_due(&mut self, t: Time) {
        if let Some(at) = self.pending {
            if t >= at {
                self.items.clear();
                self.pending = None;
            }
        }
    }
    fn live(&mut self, k: &[u8]) -> Option<MItem> {
        let it = self.items.get(k)?;
        if it.exp != 0 && it.exp <= self.now {
            self.items.remove(k);
            return None;
        }
        Some(it.clone())
    }
    fn exp_of(&self, ttl: i8) -> Time {
        if ttl == 0 {
            0
        } else {
            (self.now as i64 + ttl as i64) as Time
        }
    }
    fn fresh_cas(&mut self, k: &[u8], cas: u64) {
        assert!(cas != 0);
        assert!(self.cas_seen.entry(k.to_vec()).or_default().insert(cas), "cas {cas} reused");
    }
}

/// What a store op should do given the current item: (outcome kind, new item sans cas).
fn expect_store(
    mode: Mode,
    cur: Option<&MItem>,
    value: &[u8],
    flags: u32,
    exp: Time,
) -> (StoreOutcome, Option<MItem>) {
    let stored = StoreOutcome::Stored { cas: 0 };
    let new = |value: Vec<u8>, flags, exp| Some(MItem { value, flags, exp, cas: 0 });
    match (mode, cur) {
        (Mode::Set, _) | (Mode::Add, None) => (stored, new(value.to_vec(), flags, exp)),
        (Mode::Replace, Some(_)) => (stored, new(value.to_vec(), flags, exp)),
        (Mode::Add, Some(_)) | (Mode::Replace | Mode::Append | Mode::Prepend, None) => {
            (StoreOutcome::NotStored, None)
        }
        (Mode::Append, Some(c)) => (stored, new([&c.value[..], value].concat(), c.flags, c.exp)),
        (Mode::Prepend, Some(c)) => (stored, new([value, &c.value[..]].concat(), c.flags, c.exp)),
        (Mode::Cas(_), None) => (StoreOutcome::NotFound, None),
        (Mode::Cas(x), Some(c)) if x != c.cas => (StoreOutcome::Exists, None),
        (Mode::Cas(_), Some(_)) => (stored, new(value.to_vec(), flags, exp)),
    }
}

fn kind(o: &StoreOutcome) -> StoreOutcome {
    match o {
        StoreOutcome::Stored { .. } => StoreOutcome::Stored { cas: 0 },
        o => *o,
    }
}

fn run(cfg: StoreConfig, ops: &[Op], lenient: bool) {
    let limit = cfg.mem_limit as u64;
    let store = Store::new(cfg);
    let mut m = Model { items: HashMap::new(), now: 1000, seen: 0, pending: None, cas_seen: HashMap::new(), lenient };
    for op in ops {
        if !matches!(op, Op::Advance(_) | Op::Flush(_)) {
            m.tick();
        }
        match op {
            Op::Store { mode, key, value, flags, ttl } => {
                let mode = [Mode::Set, Mode::Add, Mode::Replace, Mode::Append, Mode::Prepend][*mode as usize];
                do_store(&store, &mut m, mode, &key_bytes(*key), value, *flags, *ttl);
            }
            Op::Cas { key, value, flags, ttl, right } => {
                let k = key_bytes(*key);
                let c = match m.live(&k) {
                    Some(it) if *right => it.cas,
                    Some(it) => it.cas ^ 1,
                    None => 12345,
                };
                do_store(&store, &mut m, Mode::Cas(c), &k, value, *flags, *ttl);
            }
            Op::Get(key) => {
                let k = key_bytes(*key);
                let got = store.get(&k, m.now, |it| MItem { value: it.value.to_vec(), flags: it.flags, exp: it.exp, cas: it.cas });
                check_read(&mut m, &k, got.hit());
            }
            Op::Gat(key, ttl) => {
                let k = key_bytes(*key);
                let exp = m.exp_of(*ttl);
                let got = store.get_and_touch(&k, exp, m.now, |it| MItem { value: it.value.to_vec(), flags: it.flags, exp: it.exp, cas: it.cas });
                // memcached's gat returns the item with its new exp even when that exp is
                // already past (the item is dead right after).
                let cur = m.live(&k).map(|it| MItem { exp, ..it });
                match (cur, got.hit()) {
                    (Some(c), Some(g)) => {
                        assert_eq!(c, g, "gat {k:?}");
                        m.items.insert(k.clone(), c);
                    }
                    (None, None) => {}
                    (Some(_), None) if m.lenient => {
                        m.items.remove(&k);
                    }
                    (c, g) => panic!("gat {k:?}: model {c:?} store {g:?}"),
                }
            }
            Op::Touch(key, ttl) => {
                let k = key_bytes(*key);
                let exp = m.exp_of(*ttl);
                let cur = m.live(&k);
                let ok = store.touch(&k, exp, m.now);
                match (cur.is_some(), ok) {
                    (true, true) => m.items.get_mut(&k).unwrap().exp = exp,
                    (false, false) => {}
                    (true, false) if m.lenient => {
                        m.items.remove(&k);
                    }
                    other => panic!("touch {k:?}: model/store {other:?}"),
                }
            }
            Op::Delete(key) => {
                let k = key_bytes(*key);
                let cur = m.live(&k);
                let ok = store.delete(&k, m.now);
                match (cur.is_some(), ok) {
                    (a, b) if a == b => {}
                    (true, false) if m.lenient => {}
                    other => panic!("delete {k:?}: model/store {other:?}"),
                }
                m.items.remove(&k);
            }
            Op::Delta { key, incr, by } => {
                let k = key_bytes(*key);
                let cur = m.live(&k);
                let got = store.delta(&k, *incr, *by, m.now, parse);
                let want = match &cur {
                    None => Err(DeltaError::NotFound),
                    Some(c) if c.value.is_empty() => Err(DeltaError::NonNumeric),
                    Some(c) => match parse(&c.value) {
                        None => Err(DeltaError::NonNumeric),
                        Some(v) => Ok(if *incr { v.wrapping_add(*by) } else { v.saturating_sub(*by) }),
                    },
                };
                match (want, got) {
                    (Ok(n), Ok((g, cas))) => {
                        assert_eq!(n, g, "delta {k:?}");
                        m.fresh_cas(&k, cas);
                        let it = m.items.get_mut(&k).unwrap();
                        let mut v = n.to_string().into_bytes();
                        if v.len() < it.value.len() {
                            v.resize(it.value.len(), b' ');
                        }
                        it.value = v;
                        it.cas = cas;
                    }
                    (Err(a), Err(b)) if a == b => {}
                    (_, Err(DeltaError::NotFound)) if m.lenient => {
                        m.items.remove(&k);
                    }
                    (a, b) => panic!("delta {k:?}: model {a:?} store {b:?}"),
                }
            }
            Op::Advance(d) => m.now += *d as Time,
            Op::Flush(delay) => {
                // The store applies a pending flush that is due by the last time it saw.
                m.flush_due(m.seen);
                let at = if *delay == 0 { 0 } else { m.now + *delay as Time };
                store.flush_all(at);
                m.pending = Some(at);
            }
            Op::Maintain => {
                store.maintain(m.now);
                let st = store.stats();
                if !m.lenient {
                    let live = m.items.values().filter(|it| it.exp == 0 || it.exp > m.now).count();
                    // curr_items may still count expired items in segments not yet dropped.
                    assert!(st.curr_items >= live as u64, "{st:?} live {live}");
                    assert!(st.curr_items <= m.items.len() as u64, "{st:?} model {}", m.items.len());
                }
            }
        }
        let st = store.stats();
        if m.lenient {
            assert!(st.mem_used <= limit, "over budget: {st:?}");
        } else {
            assert_eq!(st.evictions, 0, "exact regime must not evict");
        }
    }
    debug_end(&store);
}

#[allow(dead_code)]
fn debug_end(store: &Store) {
    if std::env::var("MODEL_DEBUG").is_ok() {
        let st = store.stats();
        eprintln!("evictions {} relocated {} items {} mem {} limit {}", st.evictions, st.evictions_relocated, st.curr_items, st.mem_used, st.limit_maxbytes);
    }
}

fn check_read(m: &mut Model, k: &[u8], got: Option<MItem>) {
    let cur = m.live(k);
    match (cur, got) {
        (Some(c), Some(g)) => assert_eq!(c, g, "read {k:?}"),
        (None, None) => {}
        (Some(_), None) if m.lenient => {
            m.items.remove(k);
        }
        (c, g) => panic!("read {k:?}: model {c:?} store {g:?}"),
    }
}

fn do_store(store: &Store, m: &mut Model, mode: Mode, k: &[u8], value: &[u8], flags: u32, ttl: i8) {
    let exp = m.exp_of(ttl);
    let cur = m.live(k);
    let got = store.store(mode, k, flags, exp, value, m.now).expect("store error");
    let (mut want, mut new) = expect_store(mode, cur.as_ref(), value, flags, exp);
    if m.lenient && kind(&got) != want && cur.is_some() {
        // Evicted behind the model's back: then it must act as if absent.
        m.items.remove(k);
        (want, new) = expect_store(mode, None, value, flags, exp);
    }
    assert_eq!(kind(&got), want, "{mode:?} {k:?} (model had {cur:?})");
    if let (StoreOutcome::Stored { cas }, Some(mut it)) = (got, new) {
        m.fresh_cas(k, cas);
        it.cas = cas;
        m.items.insert(k.to_vec(), it);
    }
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
        let cfg = StoreConfig { mem_limit: 64 << 10, shards: 2, ..Default::default() };
        run(cfg, &ops, true);
    }
}
