//! The `flash_read` fuzz checker (flash_check/) on stable Rust: seeded random damage to a
//! flash file under a running store, plus every input saved under fuzz/regressions/flash_read/.
//!
//!   FUZZ_REPLAY_CASES=2000 cargo test -p mnemo-store --release --test flash_fuzz_replay

mod flash_check;

use std::path::Path;

#[path = "../../../fuzz/support/rng.rs"]
mod rng;
use rng::Rng;

fn cases() -> u64 {
    std::env::var("FUZZ_REPLAY_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40)
}

#[test]
fn seeded_damage() {
    for i in 0..cases() {
        let mut rng = Rng((i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xf1a5);
        let len = 1 + rng.next() as usize % 200;
        let data = rng.bytes(len);
        if std::panic::catch_unwind(|| flash_check::check(&data)).is_err() {
            let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("flash_replay_{i}.bin"));
            std::fs::write(&path, &data).expect("write failing input");
            panic!(
                "case {i} failed (panic above); input saved to {}",
                path.display()
            );
        }
    }
}

/// No damage at all: everything the store kept is served.
#[test]
fn undamaged() {
    flash_check::check(&[]);
}

#[test]
fn saved_regressions() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/flash_read");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for e in entries {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "md") {
            continue;
        }
        let data = std::fs::read(&path).unwrap();
        flash_check::check(&data);
    }
}
