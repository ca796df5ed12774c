//! The cargo-fuzz target's checker (model_check/) on stable Rust: seeded random byte strings in
//! each regime (exact, eviction, flash), plus every input saved under
//! fuzz/regressions/store_model/ (crash reproducers from past fuzz runs, kept so each stays
//! fixed; those of the flash regime, STORE_MODEL_REGIME=flash, in its flash/ folder). CI needs
//! no nightly to run the fuzz checker.
//!
//!   FUZZ_REPLAY_CASES=20000 cargo test -p mnemo-store --release --test fuzz_replay

mod model_check;

use std::path::Path;

use model_check::Regime;

#[path = "../../../fuzz/support/rng.rs"]
mod rng;
use rng::Rng;

fn cases() -> u64 {
    std::env::var("FUZZ_REPLAY_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000)
}

fn replay_seeded(regime: Regime, salt: u64, share: u64) {
    for i in 0..cases() / share {
        let mut rng = Rng((i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt);
        // Mostly short inputs, like a fuzzer's, some long enough for thousands of operations.
        let len = match rng.next() % 8 {
            0..=5 => rng.next() as usize % 512,
            _ => rng.next() as usize % 8192,
        };
        let data = rng.bytes(len);
        let r = std::panic::catch_unwind(|| model_check::check(&data, Some(regime)));
        if r.is_err() {
            // The input as a file: copy it to fuzz/regressions/store_model/ to keep it, or run it
            // with `cargo +nightly fuzz run store_model FILE`.
            let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("fuzz_replay_{regime:?}_{i}.bin"));
            std::fs::write(&path, &data).expect("write failing input");
            panic!(
                "case {i} ({regime:?} regime) failed (panic above); input saved to {}",
                path.display()
            );
        }
    }
}

#[test]
fn seeded_exact_regime() {
    replay_seeded(Regime::Exact, 0x5eed_0001, 1);
}

#[test]
fn seeded_eviction_regime() {
    replay_seeded(Regime::Evict, 0x5eed_0002, 1);
}

/// A quarter of the cases: each makes a flash file and a writer thread.
#[test]
fn seeded_flash_regime() {
    replay_seeded(Regime::Flash, 0x5eed_0003, 4);
}

/// Replays the inputs saved in `dir` (its files; folders are other regimes') in `regime`.
fn replay_saved(dir: &str, regime: Option<Regime>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions")
        .join(dir);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for e in entries {
        let path = e.expect("dir entry").path();
        if path.is_dir() {
            continue;
        }
        let data = std::fs::read(&path).expect("read input");
        eprintln!("replaying {}", path.display());
        model_check::check(&data, regime);
    }
}

#[test]
fn saved_fuzz_inputs() {
    // Each saved input runs as the fuzzer ran it: regime from its first byte.
    replay_saved("store_model", None);
}

#[test]
fn saved_fuzz_inputs_flash() {
    replay_saved("store_model/flash", Some(Regime::Flash));
}

/// The flash regime's seed corpus (fuzz/seeds/store_model_flash/, where the fuzzer starts)
/// reaches the paths it was written for: an expired low-TTL page reclaimed, unread records
/// dropped and read ones rescued, a one-page file evicted under reads. Each seed runs the
/// full check as well.
#[test]
fn flash_seeds_reach_their_paths() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/store_model_flash");
    let run = |name: &str| {
        model_check::check(
            &std::fs::read(dir.join(name)).expect("seed"),
            Some(Regime::Flash),
        )
    };
    let r = run("low-ttl-pages-expire");
    assert!(r.pages_expired > 0 && r.vanished == 0, "{r:?}");
    let r = run("drop-unread-compaction");
    assert!(
        r.drops > 0 && r.rescues > 0 && r.vanished == r.drops,
        "{r:?}"
    );
    let r = run("one-page-recycled");
    // One page: each new page evicts it, so items are lost (counted, or the check fails).
    assert!(r.flash_hits > 0 && r.vanished > 0, "{r:?}");
}
