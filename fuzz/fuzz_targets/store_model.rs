//! Model-based fuzzing of mnemo-store: the input bytes decode to a store configuration and a
//! sequence of operations, run on the Store and on a HashMap model with a manual clock
//! (exact regime: every answer must match; eviction regime: reads may miss, but never return
//! anything but the key's last stored item). The checker is the stable test suite's own,
//! crates/store/tests/model_check/, so `cargo test -p mnemo-store --test fuzz_replay` runs the
//! same code without nightly, and replays saved crashes from fuzz/regressions/store_model/.
//!
//! The input's first byte picks the regime; STORE_MODEL_REGIME=exact or =evict pins one.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/store/tests/model_check/mod.rs"]
mod model_check;

fn forced_regime() -> Option<bool> {
    static REGIME: OnceLock<Option<bool>> = OnceLock::new();
    *REGIME.get_or_init(|| match std::env::var("STORE_MODEL_REGIME").as_deref() {
        Ok("exact") => Some(false),
        Ok("evict") => Some(true),
        _ => None,
    })
}

fuzz_target!(|data: &[u8]| {
    model_check::check(data, forced_regime());
});
