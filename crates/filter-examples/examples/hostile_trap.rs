//! Hostile filter: panics. On wasm32 a panic aborts, which is the `unreachable` trap the host
//! must contain (`SERVER_ERROR filter trapped`); natively the SDK catches it and reports
//! status 1 "panicked".

use mnemo_filter_sdk::{export_filter, Input, Output};

pub fn trap(input: &Input, _out: &mut Output) -> Result<(), String> {
    panic!("hostile_trap: told to trap ({} keys)", input.len());
}

export_filter!(trap);
