//! The snapshot fuzz checker, shared by the cargo-fuzz target `snapshot_restore` and the stable
//! `snapshot_fuzz_replay` test: whatever bytes a snapshot file holds, a restore must not panic,
//! must not allocate past what the file could hold, and must never produce a value that was
//! not stored.
//!
//! The input's first byte picks the mode:
//! ```text
//!   even  a real snapshot of a small seeded store, damaged by the input: the rest of the
//!         input is (position u16, xor byte) pairs, and a final truncation length
//!         -> every restored item equals what was stored under its key
//!   odd   the rest of the input is the file itself (mostly refused at the header; with a
//!         valid header prefix pasted in front of it, the block reader sees arbitrary bytes)
//! ```

use std::collections::HashMap;

use mnemo_store::{Mode, Store, StoreConfig};

const ORIGIN: u64 = 1_700_000_000;

fn store() -> Store {
    Store::new(StoreConfig {
        mem_limit: 16 << 20,
        huge_pages: false,
        ..Default::default()
    })
}

/// What a snapshot must bring back: key -> (flags, value).
type Items = HashMap<Vec<u8>, (u32, Vec<u8>)>;

/// A snapshot of 300 items of 0..600 bytes (a few blocks are not needed: the damage can hit the
/// header, a block header, a payload and the end record all the same).
fn original() -> (Vec<u8>, Items) {
    let s = store();
    let mut want = HashMap::new();
    for i in 0..300u32 {
        let k = format!("k{i}").into_bytes();
        let v: Vec<u8> = (0..(i * 7 % 600)).map(|j| (i + j) as u8).collect();
        s.store(Mode::Set, &k, i, 0, &v, 1).unwrap();
        want.insert(k, (i, v));
    }
    let mut file = Vec::new();
    s.write_snapshot(&mut file, 1, ORIGIN).unwrap();
    (file, want)
}

pub fn check(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 1 {
        // A valid header in front of arbitrary bytes half the time, so blocks get parsed.
        let (mut file, _) = original();
        let file = if mode & 2 != 0 {
            file.truncate(48);
            file.extend_from_slice(rest);
            file
        } else {
            rest.to_vec()
        };
        let s = store();
        let _ = s.restore_snapshot(&file[..], file.len() as u64, 1, ORIGIN);
        // Whatever came back was checksummed as a block: about the file's bytes at most.
        assert!(s.stats().bytes <= 2 * file.len() as u64);
        return;
    }
    let (mut file, want) = original();
    let mut pairs = rest.chunks_exact(3);
    for p in pairs.by_ref() {
        let at = u16::from_le_bytes([p[0], p[1]]) as usize % file.len();
        file[at] ^= p[2].max(1);
    }
    if let [a, b] = pairs.remainder() {
        let cut = u16::from_le_bytes([*a, *b]) as usize % (file.len() + 1);
        file.truncate(cut);
    }
    let s = store();
    let Ok(report) = s.restore_snapshot(&file[..], file.len() as u64, 1, ORIGIN) else {
        return;
    };
    let mut found = 0u64;
    for (k, (flags, v)) in &want {
        if let Some((f, val)) = s.get(k, 1, |it| (it.flags, it.value.to_vec())).hit() {
            assert_eq!((&f, &val), (flags, v), "key {}", String::from_utf8_lossy(k));
            found += 1;
        }
    }
    // Nothing beyond the stored keys came back either (a damaged key would be a new key).
    assert_eq!(s.stats().curr_items, found);
    assert_eq!(report.items, found);
}
