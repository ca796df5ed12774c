//! Shared by the integration tests: random seed-001 data, the plain reference computations the
//! filters are checked against, and a caller for native `mnemo_filter` functions.

#![allow(dead_code)] // each test binary uses its own part of this module

use mnemo_filter_sdk::records::{self, Record};
use mnemo_filter_sdk::{encode_input, MnemoOutput};

/// A request's values: `None` for a missing key, else (flags, bytes).
pub type Values = Vec<Option<(u32, Vec<u8>)>>;

/// A small deterministic generator (xorshift64), enough for test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Random values: some keys missing, small field ranges (so ties exercise the order), and
/// sometimes a partial record at the end of a value.
pub fn random_values(rng: &mut Rng, keys: usize, max_records: u64, spread: u64) -> Values {
    (0..keys)
        .map(|_| {
            if rng.below(5) == 0 {
                return None;
            }
            let n = rng.below(max_records + 1);
            let recs: Vec<Record> = (0..n)
                .map(|_| Record {
                    user: rng.below(spread),
                    article: rng.below(spread),
                    ts: rng.below(spread * 4),
                })
                .collect();
            let mut bytes = records::encode_all(&recs);
            if rng.below(3) == 0 {
                bytes.extend((0..rng.below(24)).map(|i| i as u8));
            }
            Some((rng.next() as u32, bytes))
        })
        .collect()
}

pub fn input(args: &[u8], values: &Values) -> Vec<u8> {
    let borrowed: Vec<Option<(u32, &[u8])>> = values
        .iter()
        .map(|v| v.as_ref().map(|(f, b)| (*f, b.as_slice())))
        .collect();
    encode_input(args, &borrowed)
}

/// Every whole record of every present value, in key order then record order.
pub fn all_records(values: &Values) -> Vec<Record> {
    values
        .iter()
        .flatten()
        .flat_map(|(_, b)| records::iter(b))
        .collect()
}

/// Top-k the obvious way: sort everything, keep k.
pub fn reference_topk(values: &Values, k: usize) -> Vec<u8> {
    let mut all = all_records(values);
    all.sort_by(records::newest_first);
    all.truncate(k);
    records::encode_all(&all)
}

/// What a native `mnemo_filter` returned.
#[derive(Debug, PartialEq, Eq)]
pub struct Call {
    pub rc: i32,
    pub data: Vec<u8>,
    pub len: usize,
    pub flags: u32,
}

impl Call {
    pub fn message(&self) -> String {
        String::from_utf8_lossy(&self.data).into_owned()
    }
}

pub type FilterFn = unsafe extern "C" fn(*const u8, usize, *mut MnemoOutput) -> i32;
pub type VersionFn = extern "C" fn() -> u32;

/// Call a native filter with an output buffer of `cap` bytes (pre-filled with junk).
pub fn call(filter: FilterFn, input: &[u8], cap: usize) -> Call {
    let mut buf = vec![0xA5u8; cap];
    let mut out = MnemoOutput {
        data: buf.as_mut_ptr(),
        cap,
        len: usize::MAX,
        flags: u32::MAX,
    };
    // SAFETY: `input` and `buf` are valid for their lengths and live through the call.
    let rc = unsafe { filter(input.as_ptr(), input.len(), &mut out) };
    let data = if out.len <= cap {
        buf[..out.len].to_vec()
    } else {
        Vec::new()
    };
    Call {
        rc,
        data,
        len: out.len,
        flags: out.flags,
    }
}
