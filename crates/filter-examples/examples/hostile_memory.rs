//! Hostile filter: allocates 1 MiB blocks, touching every byte, until allocation fails, which
//! aborts (a trap on wasm32). The host's memory cap must stop it
//! (`SERVER_ERROR filter out of memory`). Natively it would eat the process: wasm32 only.

use mnemo_filter_sdk::{export_filter, Input, Output};
use std::hint::black_box;

pub fn hog(_input: &Input, _out: &mut Output) -> Result<(), String> {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        hoard.push(black_box(vec![0x5A; 1 << 20]));
        black_box(&mut hoard);
    }
}

export_filter!(hog);
