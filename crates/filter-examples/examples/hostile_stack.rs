//! Hostile filter: recurses without bound until the stack runs out (on wasm32 either the
//! engine's call-stack limit or the shadow stack running off the bottom of memory: both trap,
//! `SERVER_ERROR filter trapped`). Natively it overflows the loading thread's stack: wasm32
//! only.

use mnemo_filter_sdk::{export_filter, Input, Output};
use std::hint::black_box;

/// Not a tail call (the result is used after the call) and every frame keeps a buffer the
/// optimizer cannot see through, so this cannot become a loop.
#[inline(never)]
fn dive(depth: u64) -> u64 {
    let frame = black_box([depth; 8]);
    if black_box(depth) == u64::MAX {
        return frame[0];
    }
    dive(black_box(depth + 1)).wrapping_add(black_box(frame)[7])
}

pub fn stack(_input: &Input, _out: &mut Output) -> Result<(), String> {
    Err(format!("hostile_stack: came back from depth {}", dive(0)))
}

export_filter!(stack);
