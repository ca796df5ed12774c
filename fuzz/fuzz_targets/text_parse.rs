//! Fuzzing of mnemo-proto's text protocol parser (classic and meta commands, `text::parse`)
//! with the checker of the stable test suite, crates/proto/tests/parse_check/: bounds,
//! determinism, decided-by-a-prefix, whole vs chunked feeding, and more (its docs say what).
//! `cargo test -p mnemo-proto --test fuzz_replay` runs the same code without nightly and
//! replays saved inputs from fuzz/regressions/text_parse/.
//!
//! The input's first byte is a config (item size limit, -C, chunking seed); with its top bit
//! set, the rest drives a generator of near-valid commands instead of being sent as is.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/proto/tests/parse_check/mod.rs"]
mod parse_check;

fuzz_target!(|data: &[u8]| {
    parse_check::check_text(data);
});
