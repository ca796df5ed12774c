//! A flash file damaged under a running store, then read: no panic, and never a value that
//! was not stored. The checker is the stable test suite's own, crates/store/tests/flash_check/
//! (`cargo test -p mnemo-store --test flash_fuzz_replay` runs it without nightly and replays
//! fuzz/regressions/flash_read/).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/store/tests/flash_check/mod.rs"]
mod flash_check;

fuzz_target!(|data: &[u8]| {
    flash_check::check(data);
});
