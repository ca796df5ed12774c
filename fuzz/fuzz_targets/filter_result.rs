//! Fuzzing of what a WebAssembly filter hands back to mnemo-filter's host (the result record
//! and the memory it points into), with the checker of the stable test suite,
//! crates/filter/tests/result_check/: the host's answer must equal a model's, byte for byte.
//! `cargo test -p mnemo-filter --test result_fuzz_replay` runs the same code without nightly
//! and replays saved inputs from fuzz/regressions/filter_result/.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/filter/tests/result_check/mod.rs"]
mod result_check;

fuzz_target!(|data: &[u8]| {
    result_check::check(data);
});
