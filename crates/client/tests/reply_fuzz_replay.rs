//! The client_reply fuzz target's checker (reply_check/) on stable Rust: seeded random inputs,
//! raw (some starting like a reply) and through the generator of near-valid replies, the
//! replies the generator mutates, and every input saved under fuzz/regressions/client_reply/
//! (reproducers of past findings, kept so each stays fixed).
//!
//!   FUZZ_REPLAY_CASES=50000 cargo test -p mnemo-client --release --test reply_fuzz_replay

mod reply_check;

use std::path::Path;

use mnemo_client::codec::Expect;
use reply_check::Rng;

fn cases() -> u64 {
    std::env::var("FUZZ_REPLAY_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000)
}

const STARTS: &[&[u8]] = &[
    b"VALUE k 0 5\r\nhello\r\nEND\r\n",
    b"VALUE k 1 3 99\r\nabc\r\nEND\r\n",
    b"STAT pid 1\r\nEND\r\n",
    b"STORED\r\n",
    b"123\r\n",
    b"SERVER_ERROR x\r\n",
    b"key=a exp=-1 la=1 cas=2 fetch=no cls=1 size=63\nEND\r\n",
];

fn run(name: &str, data: &[u8]) {
    if std::panic::catch_unwind(|| reply_check::check(data)).is_err() {
        // Copy it to fuzz/regressions/client_reply/ to keep it, or `cargo +nightly fuzz run client_reply FILE`.
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("client_reply_{name}.bin"));
        std::fs::write(&path, data).expect("write failing input");
        panic!(
            "client_reply {name} failed (panic above); input saved to {}",
            path.display()
        );
    }
}

/// `cases()` inputs: a config byte (structured or raw as asked) and mostly short random bytes.
fn replay_seeded(structured: bool, salt: u64) {
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
            let start = STARTS[rng.below(STARTS.len() as u64) as usize];
            data.splice(1..1, start.iter().copied());
        }
        run(&format!("{salt:x}_{i}"), &data);
    }
}

#[test]
fn generated() {
    replay_seeded(true, 0xc1_0001);
}

#[test]
fn raw() {
    replay_seeded(false, 0xc1_0002);
}

/// Valid replies, then each mutated: a byte flipped, dropped or duplicated, cut short,
/// repeated (pipelined), and the declared length changed.
#[test]
fn mutated_replies() {
    let mut rng = Rng::new(0xc1_0003);
    for (n, start) in STARTS.iter().enumerate() {
        for cfg in 0u8..10 {
            run(&format!("start{n}_{cfg}"), &[&[cfg][..], start].concat());
            run(
                &format!("twice{n}_{cfg}"),
                &[&[cfg | 0x30][..], start, start].concat(),
            );
            for m in 0..40 {
                let mut r = start.to_vec();
                let at = rng.below(r.len() as u64) as usize;
                match m % 5 {
                    0 => r[at] ^= 1 << rng.below(8),
                    1 => {
                        r.remove(at);
                    }
                    2 => r.insert(at, r[at]),
                    3 => r.truncate(at),
                    _ => r
                        .splice(
                            at..at,
                            [b'0', b'9', b' ', b'\n'][m % 4..m % 4 + 1].iter().copied(),
                        )
                        .for_each(drop),
                }
                run(
                    &format!("mut{n}_{cfg}_{m}"),
                    &[&[cfg | (m as u8 & 7) << 4][..], &r].concat(),
                );
            }
        }
    }
    for len in [
        "6",
        "4",
        "18446744073709551615",
        "18446744073709551614",
        "1073741824",
        "1073741825",
        "99999999999",
    ] {
        for tail in [&b""[..], b"hello\r\nEND\r\n"] {
            let r = [format!("VALUE k 0 {len}\r\n").as_bytes(), tail].concat();
            for cfg in [0u8, 0x10, 0x20] {
                run(&format!("len{len}_{cfg}"), &[&[cfg][..], &r].concat());
            }
        }
    }
}

/// Lines around the line limit, whole and in pieces: a line is refused by its length
/// whatever the reads it arrives in.
#[test]
fn long_lines() {
    for n in [
        reply_check::MAX_LINE - 1,
        reply_check::MAX_LINE,
        reply_check::MAX_LINE + 1,
        reply_check::MAX_LINE + 5000,
    ] {
        let mut line = vec![b'x'; n];
        line.extend_from_slice(b"\r\nEND\r\n");
        for (seed, e) in [
            Expect::Stats,
            Expect::Lines,
            Expect::Ok,
            Expect::Values { cas: false },
        ]
        .into_iter()
        .enumerate()
        {
            reply_check::check_stream(&line, e, seed as u64);
            reply_check::check_stream(&line[..n], e, seed as u64 + 7);
        }
    }
}

/// Past findings (fuzz/regressions/client_reply/).
#[test]
fn saved_fuzz_inputs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/client_reply");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for e in entries {
        let path = e.expect("dir entry").path();
        let data = std::fs::read(&path).expect("read input");
        eprintln!("replaying {}", path.display());
        reply_check::check(&data);
    }
}
