//! Store-level trace replay: the miss ratio of the store's eviction on a trace, without a server,
//! so that policies can be compared in seconds before they are measured through mnemod
//! (bench/hitratio.sh does that, against memcached).
//!
//!   cargo run --release -p mnemo-store --example replay -- WORKLOAD MIB[,MIB...] [POLICY...]
//!
//! WORKLOAD: a trace file (`*.trace.xz`: big-endian u32 key ids, read through `xz -dc`), with
//! `@N` appended to replay only its first N requests; or `zipf:KEYS:REQUESTS` (Zipf 0.99, values
//! 200..1000 B); or `shift:KEYS:REQUESTS` (zipf, but the second half of the requests draws
//! from KEYS other keys, and only it counts: hitratio.py's zipf-shift); or `mixed:KEYS:REQUESTS` (Zipf 0.99, values log-uniform 10 B..500 KB);
//! or `ttl:KEYS:REQUESTS` (zipf, but 40% of the keys are set with a TTL of 2, 3, 5 or 8 s, and
//! the requests are paced at `TTL_RATE` per second, with `Store::maintain` once a second as the
//! server runs it: hitratio.py's zipf-ttl).
//! POLICY: a store policy (`Eviction`'s names), or `lru`: an exact LRU over bytes charging each
//! item memcached's way (a 56-byte header + key + value + 2, no slab classes), as a reference for
//! what memcached's policy does at that memory. Default: the store's default policy and `lru`.
//!
//! Replay is look-aside, as bench/hitratio.py does it: get; on a miss, set. The first 20% of
//! the requests are not counted. A trace key's value size is `trace_value_size(id)`, the same
//! pure function as hitratio.py's, so both store the same bytes. Prints one line per policy and
//! size: miss ratio, byte miss ratio, items held at the end, evictions. REPLAY_SHARDS=N sets the
//! shard count (default the store's choice for the limit, as mnemod runs it); REPLAY_MEMORY=1 also prints where the
//! memory went (item bytes, unwritten segment room, index, metadata); REPLAY_BANDS=1 the miss
//! ratio of the requests for each power-of-two value size (`2^k` = k..k+1 bits; size awareness)
//! and each size's share of the value bytes held at the end; REPLAY_CAUSES=1 the counted misses by
//! cause: a key's first request, its last set's TTL ran out (both unavoidable), evicted (a key
//! with a TTL, or without). With REPLAY_MEMORY=1 a `ttl`
//! workload also prints the expired items still held at the end (bytes no eviction has had
//! back yet). REPLAY_WINDOWS=N prints the miss ratio of every N counted requests, each with
//! the bytes of the uncounted part's keys still held then (zipf-shift: how long the old phase
//! lingers). REPLAY_FLUSH_AT_WARM=1 empties the cache where counting starts (zipf-shift: what
//! a policy that forgot the old phase at once would miss).

use std::io::Read;
use std::process::{Command, Stdio};

use mnemo_store::*;

/// The quantile function of trace value sizes (hitratio.py SIZE_KNOTS): log-linear pieces.
const SIZE_KNOTS: [(f64, f64); 4] = [(0.0, 32.0), (0.5, 230.0), (0.9, 1024.0), (1.0, 16384.0)];
const WARMUP: f64 = 0.2;
/// ttl: requests per (simulated) second, hitratio.sh's TTL_RATE; the share of keys with a TTL
/// and the TTLs, hitratio.py's TTL_SHARE and TTLS.
const TTL_RATE: usize = 20_000;
const TTL_SHARE: f64 = 0.4;
const TTLS: [u32; 4] = [2, 3, 5, 8];

fn splitmix64(x: u64) -> u64 {
    let mut x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Value bytes of trace key `id`: hitratio.py's `trace_value_size`, bit for bit.
fn trace_value_size(id: u64) -> usize {
    let u = (splitmix64(id) >> 11) as f64 / (1u64 << 53) as f64;
    for w in SIZE_KNOTS.windows(2) {
        let ((u0, s0), (u1, s1)) = (w[0], w[1]);
        if u < u1 {
            return (s0 * (s1 / s0).powf((u - u0) / (u1 - u0))).round() as usize;
        }
    }
    SIZE_KNOTS[3].1 as usize
}

/// A request stream: key ids and each id's value size.
struct Workload {
    keys: Vec<u32>,
    /// Share of the requests not counted.
    warm: f64,
    size: Box<dyn Fn(u32) -> usize>,
    /// Seconds a key's item lives after its set (0: no TTL); with any, requests are paced.
    ttl: Box<dyn Fn(u32) -> u32>,
}

fn no_ttl() -> Box<dyn Fn(u32) -> u32> {
    Box::new(|_| 0)
}

fn read_trace(path: &str, limit: usize) -> Vec<u32> {
    let mut child = Command::new("xz")
        .args(["-dc", path])
        .stdout(Stdio::piped())
        .spawn()
        .expect("xz");
    let mut b = Vec::new();
    let out = child.stdout.as_mut().expect("piped");
    if limit > 0 {
        out.take(4 * limit as u64)
            .read_to_end(&mut b)
            .expect("read trace");
    } else {
        out.read_to_end(&mut b).expect("read trace");
    }
    drop(child.kill());
    drop(child.wait());
    b.chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Zipf(0.99) ranks over `n` keys scattered over ids, `reqs` draws (seeded, reproducible);
/// rank r is key `first + r`.
fn zipf(n: usize, reqs: usize, seed: u64, first: u64) -> Vec<u32> {
    let mut cdf = Vec::with_capacity(n);
    let mut acc = 0.0;
    for i in 0..n {
        acc += 1.0 / ((i + 1) as f64).powf(0.99);
        cdf.push(acc);
    }
    let mut x = seed;
    (0..reqs)
        .map(|_| {
            x = splitmix64(x);
            let r = (x >> 11) as f64 / (1u64 << 53) as f64 * acc;
            let rank = cdf.partition_point(|&c| c < r).min(n - 1);
            // rank -> id: a bijection of 0..2^32, so popular keys are not neighbours.
            (splitmix64(first + rank as u64) & 0xffff_ffff) as u32
        })
        .collect()
}

fn workload(spec: &str) -> Workload {
    let (kind, rest) = spec.split_once(':').unwrap_or((spec, ""));
    if matches!(kind, "zipf" | "shift" | "mixed" | "ttl") {
        let mut it = rest
            .split(':')
            .map(|x| x.parse::<usize>().expect("KEYS:REQUESTS"));
        let (n, reqs) = (it.next().unwrap(), it.next().unwrap());
        let (keys, warm) = if kind == "shift" {
            // hitratio.py's zipf-shift: the second half draws from other keys; only it counts.
            let mut k = zipf(n, reqs / 2, 42, 0);
            k.extend(zipf(n, reqs - reqs / 2, 43, n as u64));
            (k, (reqs / 2) as f64 / reqs as f64)
        } else {
            (zipf(n, reqs, 42, 0), WARMUP)
        };
        let size: Box<dyn Fn(u32) -> usize> = if kind != "mixed" {
            Box::new(|id| 200 + (splitmix64(u64::from(id) ^ 7) % 801) as usize)
        } else {
            Box::new(|id| {
                let u = (splitmix64(u64::from(id) ^ 9) >> 11) as f64 / (1u64 << 53) as f64;
                (10.0 * (50_000.0f64).powf(u)) as usize
            })
        };
        let ttl: Box<dyn Fn(u32) -> u32> = if kind == "ttl" {
            Box::new(|id| {
                let r = splitmix64(u64::from(id) ^ 11);
                let u = (r >> 11) as f64 / (1u64 << 53) as f64;
                if u < TTL_SHARE {
                    TTLS[(r & 3) as usize]
                } else {
                    0
                }
            })
        } else {
            no_ttl()
        };
        return Workload {
            keys,
            warm,
            size,
            ttl,
        };
    }
    let (path, limit) = match spec.split_once('@') {
        Some((p, n)) => (p, n.parse().expect("@N")),
        None => (spec, 0),
    };
    Workload {
        keys: read_trace(path, limit),
        warm: WARMUP,
        size: Box::new(|id| trace_value_size(u64::from(id))),
        ttl: no_ttl(),
    }
}

fn replay(w: &Workload, mib: f64, policy: Eviction) -> String {
    let s = Store::new(StoreConfig {
        mem_limit: (mib * (1 << 20) as f64) as usize,
        huge_pages: false,
        eviction: policy,
        shards: std::env::var("REPLAY_SHARDS")
            .ok()
            .map_or(0, |v| v.parse().expect("REPLAY_SHARDS")),
        ..Default::default()
    });
    let warm = (w.keys.len() as f64 * w.warm) as usize;
    let (mut miss, mut counted, mut miss_bytes, mut bytes) = (0u64, 0u64, 0u64, 0u64);
    let value = vec![b'v'; 512 << 10];
    let mut bands = [[0u64; 2]; 24];
    let paced = w.keys.iter().any(|&id| (w.ttl)(id) != 0);
    let windows: usize = std::env::var("REPLAY_WINDOWS")
        .ok()
        .map_or(0, |v| v.parse().expect("REPLAY_WINDOWS"));
    let (mut window_line, mut window_miss) = (Vec::new(), 0u64);
    let old_ids: Vec<u32> = if windows > 0 {
        let mut v = w.keys[..warm].to_vec();
        v.sort_unstable();
        v.dedup();
        v
    } else {
        Vec::new()
    };
    // REPLAY_CAUSES: each key's last set (request index, exp) and the counted misses by cause.
    let causes = std::env::var_os("REPLAY_CAUSES").is_some();
    let mut last_set = std::collections::HashMap::<u32, Time>::new();
    let mut cause = [0u64; 4]; // first request, expired since its set, evicted (TTL key), evicted (no TTL)
    let mut now: Time = 1;
    for (i, &id) in w.keys.iter().enumerate() {
        if paced && 1 + (i / TTL_RATE) as Time != now {
            now = 1 + (i / TTL_RATE) as Time;
            s.maintain(now);
        }
        if i == warm && std::env::var_os("REPLAY_FLUSH_AT_WARM").is_some() {
            s.flush_all(now);
        }
        let key = format!("t:{id}");
        let n = (w.size)(id);
        let hit = s.get(key.as_bytes(), now, |it| it.value.len()).hit();
        if i >= warm && windows > 0 && (i - warm).is_multiple_of(windows) && i > warm {
            // The bytes of the uncounted part's keys still held (peeked: not reads).
            let old: usize = old_ids
                .iter()
                .filter(|&&id| s.peek(format!("t:{id}").as_bytes(), now, |_| ()).is_hit())
                .map(|&id| (w.size)(id))
                .sum();
            window_line.push(format!(
                "{:.3}/{:.1}M",
                (miss - window_miss) as f64 / windows as f64,
                old as f64 / 1e6
            ));
            window_miss = miss;
        }
        if i >= warm {
            counted += 1;
            bytes += n as u64;
            let b = &mut bands[(n.max(1).ilog2()) as usize];
            b[0] += 1;
            b[1] += u64::from(hit.is_none());
        }
        match hit {
            Some(len) => assert_eq!(len, n, "{key}"),
            None => {
                if i >= warm {
                    miss += 1;
                    miss_bytes += n as u64;
                }
                let exp = match (w.ttl)(id) {
                    0 => 0,
                    t => now + t,
                };
                if causes {
                    if i >= warm {
                        cause[match last_set.get(&id) {
                            None => 0,
                            Some(&e) if e != 0 && e <= now => 1,
                            Some(_) if exp != 0 => 2,
                            Some(_) => 3,
                        }] += 1;
                    }
                    last_set.insert(id, exp);
                }
                let _ = s.store(Mode::Set, key.as_bytes(), 0, exp, &value[..n], now);
            }
        }
    }
    let st = s.stats();
    if std::env::var_os("REPLAY_BANDS").is_some() {
        let line: Vec<String> = bands
            .iter()
            .enumerate()
            .filter(|(_, b)| b[0] > 0)
            .map(|(i, b)| format!("2^{i}:{:.2}", b[1] as f64 / b[0] as f64))
            .collect();
        eprintln!("  miss by size: {}", line.join(" "));
        // What each band holds at the end (a get per distinct key: the replay is over).
        let mut held = [0u64; 24];
        let mut ids: Vec<u32> = w.keys.clone();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let n = (w.size)(id);
            if s.get(format!("t:{id}").as_bytes(), now, |_| ())
                .hit()
                .is_some()
            {
                held[n.max(1).ilog2() as usize] += n as u64;
            }
        }
        let total = held.iter().sum::<u64>().max(1) as f64;
        let line: Vec<String> = held
            .iter()
            .enumerate()
            .filter(|(_, &b)| b > 0)
            .map(|(i, &b)| format!("2^{i}:{:.3}", b as f64 / total))
            .collect();
        eprintln!("  value bytes held by size: {}", line.join(" "));
    }
    if causes {
        let c = |k: usize| cause[k] as f64 / counted as f64;
        eprintln!(
            "  misses (share of counted requests): first {:.4} expired {:.4} evicted ttl-key {:.4} evicted no-ttl key {:.4}",
            c(0), c(1), c(2), c(3)
        );
    }
    if windows > 0 {
        eprintln!(
            "  miss per {windows} counted requests: {}",
            window_line.join(" ")
        );
    }
    if std::env::var_os("REPLAY_MEMORY").is_some() && paced {
        // Expired items still held at the end (a peek of each TTL key: the run is over).
        let mut ids: Vec<u32> = w
            .keys
            .iter()
            .copied()
            .filter(|&id| (w.ttl)(id) != 0)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let (mut n, mut b) = (0u64, 0u64);
        for id in ids {
            let key = format!("t:{id}");
            if s.peek(key.as_bytes(), now, |_| ()) == Lookup::Expired {
                n += 1;
                b += (key.len() + (w.size)(id)) as u64;
            }
        }
        eprintln!("  expired but held at the end: {n} items, {b} key+value bytes");
    }
    if std::env::var_os("REPLAY_MEMORY").is_some() {
        eprintln!(
            "  used {} bytes(items) {} dead {} unwritten {} index {} meta {} segments {} large {}/{}",
            st.mem_used, st.bytes, st.dead_bytes, st.unwritten_bytes, st.index_bytes, st.meta_bytes,
            st.segments_used, st.large_items, st.large_bytes
        );
    }
    format!(
        "{:>8.2} MiB {:>7} miss {:.4} byte-miss {:.4} items {:>8} evictions {:>9}",
        mib,
        policy.name(),
        miss as f64 / counted as f64,
        miss_bytes as f64 / bytes as f64,
        st.curr_items,
        st.evictions
    )
}

/// An exact LRU over bytes, items charged as memcached charges them (module doc).
fn replay_lru(w: &Workload, mib: f64) -> String {
    const NIL: usize = usize::MAX;
    struct Node {
        id: u32,
        size: usize,
        /// Request index from which it is expired (usize::MAX: never).
        exp: usize,
        prev: usize,
        next: usize,
    }
    let limit = (mib * (1 << 20) as f64) as usize;
    let mut map = std::collections::HashMap::<u32, usize>::new();
    let mut nodes: Vec<Node> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let (mut head, mut tail, mut used) = (NIL, NIL, 0usize); // head = most recent
    let unlink = |nodes: &mut Vec<Node>, head: &mut usize, tail: &mut usize, i: usize| {
        let (p, n) = (nodes[i].prev, nodes[i].next);
        if p == NIL {
            *head = n
        } else {
            nodes[p].next = n
        }
        if n == NIL {
            *tail = p
        } else {
            nodes[n].prev = p
        }
    };
    let push = |nodes: &mut Vec<Node>, head: &mut usize, tail: &mut usize, i: usize| {
        nodes[i].prev = NIL;
        nodes[i].next = *head;
        if *head != NIL {
            nodes[*head].prev = i
        } else {
            *tail = i
        }
        *head = i;
    };
    let warm = (w.keys.len() as f64 * w.warm) as usize;
    let (mut miss, mut counted, mut miss_bytes, mut bytes, mut evictions) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    for (r, &id) in w.keys.iter().enumerate() {
        let n = (w.size)(id);
        if r >= warm {
            counted += 1;
            bytes += n as u64;
        }
        if let Some(&i) = map.get(&id) {
            unlink(&mut nodes, &mut head, &mut tail, i);
            if nodes[i].exp > r {
                push(&mut nodes, &mut head, &mut tail, i);
                continue;
            }
            // Expired: a miss, and the set below replaces it.
            used -= nodes[i].size;
            map.remove(&id);
            free.push(i);
        }
        if r >= warm {
            miss += 1;
            miss_bytes += n as u64;
        }
        let size = 56 + format!("t:{id}").len() + n + 2;
        if size > limit {
            continue;
        }
        while used + size > limit {
            let t = tail;
            unlink(&mut nodes, &mut head, &mut tail, t);
            used -= nodes[t].size;
            map.remove(&nodes[t].id);
            free.push(t);
            evictions += 1;
        }
        // The store's clock: whole seconds from 1, an item of TTL t set in second s lives
        // until second s + t begins.
        let exp = match (w.ttl)(id) {
            0 => usize::MAX,
            t => (r / TTL_RATE + t as usize) * TTL_RATE,
        };
        let node = Node {
            id,
            size,
            exp,
            prev: NIL,
            next: NIL,
        };
        let i = match free.pop() {
            Some(i) => {
                nodes[i] = node;
                i
            }
            None => {
                nodes.push(node);
                nodes.len() - 1
            }
        };
        push(&mut nodes, &mut head, &mut tail, i);
        map.insert(id, i);
        used += size;
    }
    format!(
        "{:>8.2} MiB {:>7} miss {:.4} byte-miss {:.4} items {:>8} evictions {:>9}",
        mib,
        "lru",
        miss as f64 / counted as f64,
        miss_bytes as f64 / bytes as f64,
        map.len(),
        evictions
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: replay WORKLOAD MIB[,MIB...] [POLICY|lru ...]");
        std::process::exit(2);
    }
    let w = workload(&args[0]);
    let sizes: Vec<f64> = args[1]
        .split(',')
        .map(|x| x.parse().expect("MIB"))
        .collect();
    // None: the reference LRU.
    let policies: Vec<Option<Eviction>> = if args.len() > 2 {
        args[2..]
            .iter()
            .map(|p| (p != "lru").then(|| p.parse().expect("policy")))
            .collect()
    } else {
        vec![Some(Eviction::default()), None]
    };
    let mut uniq = w.keys.clone();
    uniq.sort_unstable();
    uniq.dedup();
    let fp: usize = uniq
        .iter()
        .map(|&id| format!("t:{id}").len() + (w.size)(id))
        .sum();
    println!(
        "# {}: {} requests, {} keys, footprint {:.1} MiB",
        args[0],
        w.keys.len(),
        uniq.len(),
        fp as f64 / (1 << 20) as f64
    );
    for &mib in &sizes {
        for &p in &policies {
            match p {
                Some(p) => println!("{}", replay(&w, mib, p)),
                None => println!("{}", replay_lru(&w, mib)),
            }
        }
    }
}
