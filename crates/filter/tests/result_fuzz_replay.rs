//! The filter_result fuzz target's checker (result_check/) on stable Rust: seeded inputs that
//! mostly aim the result record and output at memory the fuzzer wrote, and every input saved
//! under fuzz/regressions/filter_result/.
//!
//!   FUZZ_REPLAY_CASES=20000 cargo test -p mnemo-filter --release --test result_fuzz_replay

mod result_check;

use std::path::Path;

fn cases() -> u64 {
    std::env::var("FUZZ_REPLAY_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500)
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn run(name: &str, data: &[u8]) {
    if std::panic::catch_unwind(|| result_check::check(data)).is_err() {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("filter_result_{name}.bin"));
        std::fs::write(&path, data).expect("write failing input");
        panic!(
            "filter_result {name} failed (panic above); input saved to {}",
            path.display()
        );
    }
}

#[test]
fn seeded_result_records() {
    for i in 0..cases() {
        let mut rng = Rng(0x9e37_79b9 ^ (i + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
        let len = (rng.next() % 300) as usize;
        let mut data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        // Mostly a record inside what the fuzzer wrote, pointing at it, with small lengths
        // and statuses 0 and 1, so every branch of the host's checks is reached.
        if len >= 24 && !rng.next().is_multiple_of(4) {
            let rec = (rng.next() % (len as u64 - 20)) as u32;
            data[..4].copy_from_slice(&rec.to_le_bytes());
            let r = 4 + rec as usize;
            let fields = [
                (rng.next() % 3) as u32,
                rng.next() as u32,
                (rng.next() % len as u64) as u32,
                (rng.next() % 5000) as u32,
            ];
            for (k, v) in fields.iter().enumerate() {
                let at = r + 4 * k;
                if at + 4 <= data.len() {
                    data[at..at + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        run(&format!("seeded_{i}"), &data);
    }
}

#[test]
fn saved_regressions() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/filter_result");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for e in entries {
        let path = e.unwrap().path();
        run(
            &path.file_name().unwrap().to_string_lossy(),
            &std::fs::read(&path).unwrap(),
        );
    }
}
