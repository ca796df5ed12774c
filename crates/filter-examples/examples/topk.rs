//! Seed 001's top-k filter: the K newest records over all the values of a request.
//!
//! args: K in ASCII decimal, 1..=100000. Output: the K newest records (fewer if there are
//! fewer) in newest order, encoded as records; flags 0. One sorted buffer of at most K records
//! and no allocation per record: K = 10 over 3,000 records costs a few microseconds.

use mnemo_filter_sdk::records::{self, RECORD_LEN};
use mnemo_filter_sdk::{args, export_filter, Input, Output};

/// The largest K the filter accepts.
pub const MAX_K: u64 = 100_000;

pub fn parse_k(arg: &[u8]) -> Result<usize, String> {
    match args::decimal_u64(arg) {
        Some(k) if (1..=MAX_K).contains(&k) => Ok(k as usize),
        _ => Err(format!(
            "bad argument: K must be a decimal number from 1 to {MAX_K}"
        )),
    }
}

pub fn topk(input: &Input, out: &mut Output) -> Result<(), String> {
    let k = parse_k(input.args())?;
    let newest = records::top_k_encoded(input.values().flatten().map(|value| value.data), k);
    out.reserve(newest.len() * RECORD_LEN);
    for record in &newest {
        record.encode(out.vec_mut());
    }
    Ok(())
}

export_filter!(topk);
