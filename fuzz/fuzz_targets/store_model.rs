//! Model-based fuzzing of mnemo-store: the input bytes decode to a store configuration and a
//! sequence of operations, run on the Store and on a HashMap model with a manual clock
//! (exact regime: every answer must match; eviction regime: reads may miss, but never return
//! anything but the key's last stored item). The checker is the stable test suite's own,
//! crates/store/tests/model_check/, so `cargo test -p mnemo-store --test fuzz_replay` runs the
//! same code without nightly, and replays saved crashes from fuzz/regressions/store_model/.
//!
//! The input's first byte picks the regime, exact or eviction; STORE_MODEL_REGIME=exact or
//! =evict pins one, and =flash runs the eviction regime with a flash tier (a small file per
//! input; its settings from the input's second byte: model_check's `flash_config`).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/store/tests/model_check/mod.rs"]
mod model_check;

use model_check::Regime;

fn forced_regime() -> Option<Regime> {
    static REGIME: OnceLock<Option<Regime>> = OnceLock::new();
    *REGIME.get_or_init(|| match std::env::var("STORE_MODEL_REGIME").as_deref() {
        Ok("exact") => Some(Regime::Exact),
        Ok("evict") => Some(Regime::Evict),
        Ok("flash") => Some(Regime::Flash),
        _ => None,
    })
}

fuzz_target!(|data: &[u8]| {
    model_check::check(data, forced_regime());
});
