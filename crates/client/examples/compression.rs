//! Seed 000's experiment with mnemo-client: random text of N words from a word list, stored and
//! read back `loops` times with compression off, zstd and zlib; prints one markdown row per
//! (size, mode): mean time per set and per get, stored bytes, and the ratios to the plain value.
//!
//! ```text
//!   cargo run --release -p mnemo-client --example compression -- \
//!       --server 127.0.0.1:11211 --words /usr/share/dict/words --counts 5000,50000,500000 --loops 20
//! ```

use mnemo_client::{blocking, Algorithm, Compression, Config, FlagProfile, ServerSpec, Value};
use std::time::{Duration, Instant};

struct Args {
    server: String,
    words: String,
    counts: Vec<usize>,
    loops: usize,
    zstd_level: i32,
}

fn parse_args() -> Args {
    let mut a = Args {
        server: "127.0.0.1:11211".into(),
        words: "/usr/share/dict/words".into(),
        counts: vec![5_000, 50_000, 500_000],
        loops: 20,
        zstd_level: Algorithm::ZSTD_DEFAULT_LEVEL,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--server" => a.server = v,
            "--words" => a.words = v,
            "--counts" => a.counts = v.split(',').map(|c| c.parse().expect("count")).collect(),
            "--loops" => a.loops = v.parse().expect("loops"),
            "--zstd-level" => a.zstd_level = v.parse().expect("level"),
            _ => panic!("unknown flag {flag}"),
        }
    }
    a
}

/// `n` words drawn from the list with a seeded xorshift, space separated (seed 000's data).
fn random_text(words: &[&str], n: usize, seed: u64) -> String {
    let mut x = seed | 1;
    let mut out = String::with_capacity(n * 10);
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if i > 0 {
            out.push(' ');
        }
        out.push_str(words[(x % words.len() as u64) as usize]);
    }
    out
}

fn mean_ms(total: Duration, loops: usize) -> f64 {
    total.as_secs_f64() * 1000.0 / loops as f64
}

fn main() {
    let a = parse_args();
    let list = std::fs::read_to_string(&a.words).unwrap_or_else(|e| panic!("{}: {e}", a.words));
    let words: Vec<&str> = list.lines().filter(|w| !w.is_empty()).collect();
    let (host, port) = a.server.rsplit_once(':').expect("host:port");
    let spec = ServerSpec::new(host, port.parse().expect("port"));
    let zstd = |level| Compression {
        algorithm: Algorithm::Zstd { level },
        ..Compression::default()
    };
    let modes = [
        ("off".to_string(), Compression::off()),
        (format!("zstd {}", a.zstd_level), zstd(a.zstd_level)),
        ("zstd 1".to_string(), zstd(1)),
        (
            "zlib 6".to_string(),
            Compression {
                algorithm: Algorithm::zlib(),
                ..Compression::default()
            },
        ),
    ];
    println!("| words | bytes | compression | stored bytes | saved | set ms | get ms | set / off | get / off |");
    println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|");
    for &n in &a.counts {
        let text = random_text(&words, n, 0x5eed_0000 + n as u64);
        let mut base = (0.0, 0.0);
        for (name, comp) in &modes {
            let cfg = Config {
                compression: *comp,
                profile: FlagProfile::Mnemo,
                ..Config::default()
            };
            let c = blocking::Client::new(vec![spec.clone()], cfg).expect("client");
            let key = format!("seed000:{n}:{}", name.replace(' ', "-"));
            // One untimed round trip: connection made, allocations warm.
            c.set(&key, text.as_str(), 0).expect("set");
            let (mut set_t, mut get_t) = (Duration::ZERO, Duration::ZERO);
            for _ in 0..a.loops {
                let t = Instant::now();
                c.set(&key, text.as_str(), 0).expect("set");
                set_t += t.elapsed();
                let t = Instant::now();
                let v = c.get(&key).expect("get");
                get_t += t.elapsed();
                match v {
                    Some(Value::Text(s)) if s.len() == text.len() => {}
                    other => panic!(
                        "read back something else: {:?}",
                        other.map(|v| v.into_bytes().len())
                    ),
                }
            }
            let stored = c
                .get_raw(&key)
                .expect("get_raw")
                .expect("stored")
                .data
                .len();
            let (s, g) = (mean_ms(set_t, a.loops), mean_ms(get_t, a.loops));
            if name == "off" {
                base = (s, g);
            }
            println!(
                "| {n} | {} | {name} | {stored} | {:.0}% | {s:.3} | {g:.3} | {:.2}x | {:.2}x |",
                text.len(),
                100.0 * (1.0 - stored as f64 / text.len() as f64),
                s / base.0,
                g / base.1
            );
        }
    }
}
