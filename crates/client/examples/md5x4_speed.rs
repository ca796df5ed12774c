//! How long the ketama hash of 100 keys takes, one key at a time (md-5) and in lanes (md5x4:
//! 4, 8 or 16 at a time, as the CPU allows).
//!   cargo run --release -p mnemo-client --example md5x4_speed
use mnemo_client::ketama::{key_hash, md5x4};
use std::time::Instant;

fn main() {
    let keys: Vec<String> = (0..100).map(|i| format!("user:{i}:profile")).collect();
    let rounds = 20_000;
    let t = Instant::now();
    let mut sum = 0u32;
    for _ in 0..rounds {
        for k in &keys {
            sum = sum.wrapping_add(key_hash(k.as_bytes()));
        }
    }
    let one = t.elapsed().as_nanos() as f64 / (rounds * keys.len()) as f64;
    let mut hashes = Vec::new();
    let t = Instant::now();
    for _ in 0..rounds {
        md5x4::key_hashes(keys.iter().map(|k| k.as_bytes()), &mut hashes);
        sum = sum.wrapping_add(hashes[7]);
    }
    let four = t.elapsed().as_nanos() as f64 / (rounds * keys.len()) as f64;
    println!(
        "ns per key: one at a time {one:.1}, in lanes {four:.1} ({:.2}x) [{sum}]",
        one / four
    );
}
