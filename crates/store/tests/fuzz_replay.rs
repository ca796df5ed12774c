//! The cargo-fuzz target's checker (model_check/) on stable Rust: seeded random byte strings in
//! both regimes, plus every input saved under fuzz/regressions/store_model/ (crash reproducers
//! from past fuzz runs, kept so each stays fixed). CI needs no nightly to run the fuzz checker.
//!
//!   FUZZ_REPLAY_CASES=20000 cargo test -p mnemo-store --release --test fuzz_replay

mod model_check;

use std::path::Path;

#[path = "../../../fuzz/support/rng.rs"]
mod rng;
use rng::Rng;

fn cases() -> u64 {
    std::env::var("FUZZ_REPLAY_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(2000)
}

fn replay_seeded(lenient: bool, salt: u64) {
    for i in 0..cases() {
        let mut rng = Rng((i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt);
        // Mostly short inputs, like a fuzzer's, some long enough for thousands of operations.
        let len = match rng.next() % 8 {
            0..=5 => rng.next() as usize % 512,
            _ => rng.next() as usize % 8192,
        };
        let data = rng.bytes(len);
        let r = std::panic::catch_unwind(|| model_check::check(&data, Some(lenient)));
        if r.is_err() {
            // The input as a file: copy it to fuzz/regressions/store_model/ to keep it, or run it
            // with `cargo +nightly fuzz run store_model FILE`.
            let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("fuzz_replay_{}_{i}.bin", if lenient { "evict" } else { "exact" }));
            std::fs::write(&path, &data).expect("write failing input");
            panic!(
                "case {i} (lenient {lenient}) failed (panic above); input saved to {}",
                path.display()
            );
        }
    }
}

#[test]
fn seeded_exact_regime() {
    replay_seeded(false, 0x5eed_0001);
}

#[test]
fn seeded_eviction_regime() {
    replay_seeded(true, 0x5eed_0002);
}

#[test]
fn saved_fuzz_inputs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/store_model");
    let Ok(entries) = std::fs::read_dir(&dir) else { return };
    for e in entries {
        let path = e.expect("dir entry").path();
        let data = std::fs::read(&path).expect("read input");
        eprintln!("replaying {}", path.display());
        // Each saved input runs as the fuzzer ran it: regime from its first byte.
        model_check::check(&data, None);
    }
}
