//! The `snapshot_restore` fuzz checker (snapshot_check/) on stable Rust: seeded random damage to
//! a real snapshot and seeded random files, plus every input saved under
//! fuzz/regressions/snapshot_restore/.
//!
//!   FUZZ_REPLAY_CASES=20000 cargo test -p mnemo-store --release --test snapshot_fuzz_replay

mod snapshot_check;

use std::path::Path;

#[path = "../../../fuzz/support/rng.rs"]
mod rng;
use rng::Rng;

fn cases() -> u64 {
    std::env::var("FUZZ_REPLAY_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

#[test]
fn seeded_damage_and_random_files() {
    for i in 0..cases() {
        let mut rng = Rng((i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5a5a);
        let len = 1 + rng.next() as usize % 64;
        let data = rng.bytes(len);
        if std::panic::catch_unwind(|| snapshot_check::check(&data)).is_err() {
            let path =
                Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("snapshot_replay_{i}.bin"));
            std::fs::write(&path, &data).expect("write failing input");
            panic!(
                "case {i} failed (panic above); input saved to {}",
                path.display()
            );
        }
    }
}

#[test]
fn saved_regressions() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/snapshot_restore");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for e in entries {
        let path = e.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        snapshot_check::check(&data);
    }
}
