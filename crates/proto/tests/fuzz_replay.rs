//! The parser fuzz targets' checker (parse_check/) on stable Rust: seeded random inputs, raw
//! and through the generator of near-valid commands, for the text and the binary protocol,
//! plus every input saved under fuzz/regressions/text_parse/ and binary_parse/ (reproducers
//! of past findings, kept so each stays fixed) and the fuzzers' seeds in fuzz/seeds/.
//!
//!   FUZZ_REPLAY_CASES=50000 cargo test -p mnemo-proto --release --test fuzz_replay

mod parse_check;

use std::path::Path;

use parse_check::Rng;

fn cases() -> u64 {
    std::env::var("FUZZ_REPLAY_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000)
}

/// `cases()` inputs: a config byte (structured or raw as asked, the rest random) and a body
/// of mostly short, sometimes longer random bytes, like a fuzzer's.
fn replay_seeded(name: &str, structured: bool, salt: u64, check: fn(&[u8])) {
    for i in 0..cases() {
        let mut rng = Rng::new((i + 1) ^ salt);
        let len = match rng.next() % 8 {
            0..=5 => rng.next() as usize % 256,
            _ => rng.next() as usize % 2048,
        };
        let mut data = rng.bytes(len + 1);
        data[0] = if structured {
            data[0] | 0x80
        } else {
            data[0] & 0x7f
        };
        if !structured && rng.next() & 1 == 0 {
            // Raw bytes that start like a request, so some get past the first check.
            let start: &[u8] = if name == "binary_parse" {
                &[0x80]
            } else {
                b"set k 0 0 5\r\n"
            };
            data.splice(1..1, start.iter().copied());
        }
        let r = std::panic::catch_unwind(|| check(&data));
        if r.is_err() {
            // Copy it to fuzz/regressions/<name>/ to keep it, or `cargo +nightly fuzz run <name> FILE`.
            let path =
                Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}_{salt:x}_{i}.bin"));
            std::fs::write(&path, &data).expect("write failing input");
            panic!(
                "{name} case {i} failed (panic above); input saved to {}",
                path.display()
            );
        }
    }
}

#[test]
fn text_generated() {
    replay_seeded("text_parse", true, 0x7e57_0001, parse_check::check_text);
}

#[test]
fn text_raw() {
    replay_seeded("text_parse", false, 0x7e57_0002, parse_check::check_text);
}

#[test]
fn binary_generated() {
    replay_seeded("binary_parse", true, 0xb1_0001, parse_check::check_binary);
}

#[test]
fn binary_raw() {
    replay_seeded("binary_parse", false, 0xb1_0002, parse_check::check_binary);
}

/// Hand-written inputs: the command lines the generator mutates, as the fuzzer's seeds.
#[test]
fn known_lines() {
    let text: &[&[u8]] = &[
        b"set k 0 0 5\r\nhello\r\n",
        b"get a b c\r\n",
        b"mg key v f t\r\n",
        b"ms key 5 T30 F1\r\nhello\r\nmn\r\n",
        b"set k 0 0 2000\r\n",
        b"gat 10 a b\r\ngets a\r\ndelete a noreply\r\nincr a 5\r\n",
        b"GET / HTTP/1.1\r\n",
    ];
    for t in text {
        for cfg in [0u8, 1, 2, 3, 4] {
            parse_check::check_text(&[&[cfg][..], t].concat());
        }
    }
    let mut get = vec![
        0x80, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, b'k',
    ];
    get.extend_from_slice(&[
        0x80, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ]);
    for cfg in [0u8, 1, 2, 3] {
        parse_check::check_binary(&[&[cfg][..], &get].concat());
    }
}

fn replay_dir(kind: &str, name: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz")
        .join(kind)
        .join(name);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for e in entries {
        let path = e.expect("dir entry").path();
        let data = std::fs::read(&path).expect("read input");
        eprintln!("replaying {}", path.display());
        check(&data);
    }
}

/// Past findings (fuzz/regressions/) and the fuzzers' starting points (fuzz/seeds/).
#[test]
fn saved_fuzz_inputs() {
    for kind in ["regressions", "seeds"] {
        replay_dir(kind, "text_parse", parse_check::check_text);
        replay_dir(kind, "binary_parse", parse_check::check_binary);
    }
}
