//! The `flash_read` fuzz checker: a store with a flash tier whose file is damaged under it
//! (bytes overwritten, runs of garbage, a truncation), then read. Whatever the damage, no
//! panic, and every value served is the one stored (a damaged record is a miss, never wrong
//! bytes); the store keeps working after it. Shared by fuzz/fuzz_targets/flash_read.rs and
//! tests/flash_fuzz_replay.rs (stable).
//!
//! Input: a sequence of damage operations, each one byte of kind and then its arguments:
//!   kind % 4 == 0: one byte overwritten       offset u24, byte
//!   kind % 4 == 1: a run of one byte           offset u24, len u8, byte
//!   kind % 4 == 2: bits flipped in a byte      offset u24, mask
//!   kind % 4 == 3: the file truncated          offset u24
//! (offsets modulo the file's length).

use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU32, Ordering};

use mnemo_store::{FlashConfig, Located, Lookup, Mode, Store, StoreConfig};

const ITEMS: u32 = 600;
const PAGE: usize = 64 << 10;
const PAGES: u64 = 4;

fn value(i: u32) -> Vec<u8> {
    let len = 100 + (i as usize * 37) % 1400;
    let pat = format!("{i:05}:");
    pat.bytes().cycle().take(len).collect()
}

fn key(i: u32) -> Vec<u8> {
    format!("key:{i}").into_bytes()
}

struct TempPath(std::path::PathBuf);

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub fn check(data: &[u8]) {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let path = TempPath(
        std::env::temp_dir().join(format!("mnemo-flash-check-{}-{n}", std::process::id())),
    );
    let flash = FlashConfig {
        page_size: PAGE,
        wbuf_size: 16 << 10,
        item_size: 32,
        recache_rate: 5,
        ..FlashConfig::new(&path.0, PAGES * PAGE as u64)
    };
    let s = Store::new(StoreConfig {
        mem_limit: 256 << 10,
        shards: 1,
        huge_pages: false,
        flash: Some(flash),
        ..Default::default()
    });
    for i in 0..ITEMS {
        s.store(Mode::Set, &key(i), i, 0, &value(i), 1).unwrap();
    }
    s.flash_sync();
    assert!(s.stats().flash_items > 0, "nothing went to flash");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path.0)
        .unwrap();
    let len = PAGES * PAGE as u64;
    let mut d = data;
    let mut take = |n: usize| -> Option<Vec<u8>> {
        let (a, b) = (d.get(..n)?, d.get(n..)?);
        d = b;
        Some(a.to_vec())
    };
    while let Some(op) = take(4) {
        let off = u64::from(u32::from_le_bytes([op[1], op[2], op[3], 0])) % len;
        match op[0] % 4 {
            0 => {
                let Some(b) = take(1) else { break };
                file.write_at(&b, off).unwrap();
            }
            1 => {
                let Some(b) = take(2) else { break };
                file.write_at(&vec![b[1]; usize::from(b[0])], off).unwrap();
            }
            2 => {
                let Some(m) = take(1) else { break };
                let mut cur = [0u8];
                if file.read_at(&mut cur, off).unwrap_or(0) == 1 {
                    file.write_at(&[cur[0] ^ m[0]], off).unwrap();
                }
            }
            _ => file.set_len(off).unwrap(),
        }
    }
    // Three passes: the first as a worker reads (the lookup, then the record from the page
    // cache, else as the I/O pool would), dropping what fails; the next two as a plain get
    // does, still right (and recaching).
    for pass in 0..3 {
        for i in 0..ITEMS {
            let k = key(i);
            let read = |it: mnemo_store::Item<'_>| (it.flags, it.value.to_vec());
            let found = if pass > 0 {
                s.get(&k, 1, read)
            } else {
                match s.get_located(&k, 1, read) {
                    Located::Flash { fref, fetched, f } => {
                        let v = s
                            .read_flash_cached(&fref, &k)
                            .unwrap_or_else(|| s.read_flash(&fref, &k));
                        s.finish_get(&k, fref, fetched, v, 1, f)
                    }
                    Located::Done(l) => l,
                }
            };
            match found {
                Lookup::Hit((flags, v)) => {
                    assert_eq!(flags, i, "key {i}: wrong flags");
                    assert!(v == value(i), "key {i}: a wrong value");
                }
                Lookup::Miss => {}
                other => panic!("key {i}: {other:?}"),
            }
        }
    }
    // Still a working store: new items go to flash and are served right. Only what holds
    // however the flash writer thread is scheduled is checked: with it behind, an item that
    // eviction would send to flash is evicted instead (a set never waits for the disk), and
    // the reads below recache (1 in 5 flash hits), which evicts from RAM, the newest items
    // included. Checking the newest item after those reads failed once under load: it had
    // been demoted when no write buffer was free (in runs here, every eviction of this check
    // was such a one, and the newest item had left RAM in about half of them).
    s.flash_sync();
    let written = s.stats().flash.map_or(0, |f| f.objects_written);
    for i in ITEMS..2 * ITEMS {
        s.store(Mode::Set, &key(i), i, 0, &value(i), 1).unwrap();
    }
    // Nothing was stored after it: still in RAM.
    assert!(
        s.get(&key(2 * ITEMS - 1), 1, |_| ()).is_hit(),
        "the newest item is gone"
    );
    // The first demotion found the write buffers all free (synced above).
    assert!(
        s.stats().flash.map_or(0, |f| f.objects_written) > written,
        "no new item went to flash"
    );
    for i in ITEMS..2 * ITEMS {
        if let Some(v) = s.get(&key(i), 1, |it| it.value.to_vec()).hit() {
            assert!(v == value(i), "key {i} after the damage: a wrong value");
        }
    }
}
