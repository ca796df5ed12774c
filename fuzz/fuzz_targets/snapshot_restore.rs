//! Warm-restart snapshots read back from damaged or arbitrary files: no panic, no allocation
//! past the file's size, and never a value that was not stored. The checker is the stable test
//! suite's own, crates/store/tests/snapshot_check/ (`cargo test -p mnemo-store --test
//! snapshot_fuzz_replay` runs it without nightly and replays fuzz/regressions/snapshot_restore/).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/store/tests/snapshot_check/mod.rs"]
mod snapshot_check;

fuzz_target!(|data: &[u8]| {
    snapshot_check::check(data);
});
