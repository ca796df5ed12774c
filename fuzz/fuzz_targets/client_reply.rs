//! Fuzzing of mnemo-client's reply decoder (`codec::ReplyDecoder`) with the checker of the
//! stable test suite, crates/client/tests/reply_check/: bounds, determinism, decided by the
//! bytes used, the reply is what the wire said, whole vs chunked feeding (its docs say what).
//! `cargo test -p mnemo-client --test reply_fuzz_replay` runs the same code without nightly
//! and replays saved inputs from fuzz/regressions/client_reply/.
//!
//! The input's first byte picks the `Expect` (and salts the chunking); with its top bit set,
//! the rest drives a generator of near-valid replies instead of being decoded as is.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/client/tests/reply_check/mod.rs"]
mod reply_check;

fuzz_target!(|data: &[u8]| {
    reply_check::check(data);
});
