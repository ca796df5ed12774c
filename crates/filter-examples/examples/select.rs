//! Seed 001's select filter: every record whose field equals a value.
//!
//! args: `user=N`, `article=N` or `ts=N` (N a decimal u64). Output: every matching record, in
//! key order then record order, copied as it is; flags 0.

use mnemo_filter_sdk::records::RECORD_LEN;
use mnemo_filter_sdk::{args, export_filter, Input, Output};

/// Where the selected field sits in a record, and the value it must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selector {
    pub offset: usize,
    pub value: u64,
}

pub fn parse_selector(arg: &[u8]) -> Result<Selector, String> {
    let bad = || "bad argument: expected user=N, article=N or ts=N (N a decimal u64)".to_string();
    let (name, value) = args::key_value(arg).ok_or_else(bad)?;
    let offset = match name {
        b"user" => 0,
        b"article" => 8,
        b"ts" => 16,
        _ => return Err(bad()),
    };
    let value = args::decimal_u64(value).ok_or_else(bad)?;
    Ok(Selector { offset, value })
}

impl Selector {
    pub fn matches(&self, record: &[u8]) -> bool {
        let mut field = [0u8; 8];
        field.copy_from_slice(&record[self.offset..self.offset + 8]);
        u64::from_le_bytes(field) == self.value
    }
}

pub fn select(input: &Input, out: &mut Output) -> Result<(), String> {
    let selector = parse_selector(input.args())?;
    for value in input.values().flatten() {
        // Matching records are copied straight from the input: no decoding, no re-encoding.
        for record in value.data.chunks_exact(RECORD_LEN) {
            if selector.matches(record) {
                out.write(record);
            }
        }
    }
    Ok(())
}

export_filter!(select);
