//! Hostile filter: never returns. The host must stop it at its deadline
//! (`SERVER_ERROR filter timeout`). Natively nothing can stop it: wasm32 only.

use mnemo_filter_sdk::{export_filter, Input, Output};
use std::hint::black_box;

pub fn spin(_input: &Input, _out: &mut Output) -> Result<(), String> {
    // black_box keeps the loop real: an empty loop is the first thing an optimizer reasons about.
    let mut turns = 0u64;
    loop {
        turns = black_box(turns.wrapping_add(1));
    }
}

export_filter!(spin);
