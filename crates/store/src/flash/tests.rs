//! The flash tier through the file API (torn, flipped, truncated and recycled pages) and
//! through the store (demotion, reads, overwrite, delete, flush, the commands that bring an
//! item back to RAM).

use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use super::*;
use crate::{Lookup, Mode, Store, StoreConfig};

/// A flash file under the temp dir, removed when dropped.
pub(crate) struct TempFile(pub PathBuf);

impl TempFile {
    pub fn new(tag: &str) -> TempFile {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Relaxed);
        TempFile(std::env::temp_dir().join(format!("mnemo-flash-{}-{tag}-{n}", std::process::id())))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn cfg(path: &TempFile, size: u64, page: usize, wbuf: usize) -> FlashConfig {
    FlashConfig {
        page_size: page,
        wbuf_size: wbuf,
        item_size: 64,
        ..FlashConfig::new(&path.0, size)
    }
}

const META: Meta = Meta {
    flags: 5,
    exp: 0,
    cas: 77,
};

/// Appends, waiting for the writer when both buffers are busy (demotion would evict instead).
fn append(f: &Flash, key: &[u8], value: &[u8]) -> Loc {
    loop {
        if let Some(l) = f.append(key, value, META) {
            return l;
        }
        f.sync();
    }
}

fn read(f: &Flash, loc: &Loc, key: &[u8]) -> Result<Vec<u8>, Reject> {
    let mut buf = Vec::new();
    let gen = f.read(loc, &mut buf)?;
    record::verify(
        &buf,
        Place {
            page: loc.page,
            gen,
        },
        key,
    )
    .map(|v| v.value.to_vec())
}

#[test]
fn settings_are_checked() {
    let t = TempFile::new("cfg");
    assert!(matches!(
        Flash::open(&cfg(&t, 8 << 20, 1 << 20, 3 << 18)),
        Err(FlashError::WbufSize)
    ));
    assert!(matches!(
        Flash::open(&cfg(&t, 1 << 19, 1 << 20, 1 << 18)),
        Err(FlashError::TooSmall)
    ));
    assert!(matches!(
        Flash::open(&cfg(&t, 1 << 30, 256 << 20, 1 << 20)),
        Err(FlashError::PageSize)
    ));
    let missing = FlashConfig {
        page_size: 1 << 20,
        wbuf_size: 1 << 18,
        ..FlashConfig::new("/nonexistent-dir/flash", 8 << 20)
    };
    assert!(matches!(Flash::open(&missing), Err(FlashError::Open(_))));
}

#[test]
fn several_files_make_one_page_space() {
    let (t1, t2) = (TempFile::new("jbod1"), TempFile::new("jbod2"));
    // 2 pages in the first file, 3 in the second: 5 pages of 1 MiB, all used before any
    // is recycled.
    let c = FlashConfig {
        more: vec![(t2.0.clone(), 3 << 20)],
        ..cfg(&t1, 2 << 20, 1 << 20, 256 << 10)
    };
    assert_eq!(c.pages(), 5);
    let f = Flash::open(&c).unwrap();
    assert_eq!(
        (
            std::fs::metadata(&t1.0).unwrap().len(),
            std::fs::metadata(&t2.0).unwrap().len()
        ),
        (2 << 20, 3 << 20)
    );
    // 1,400 records of 3 KB: 4.2 MB, into pages 0..=4.
    let locs: Vec<Loc> = (0..1400u32)
        .map(|i| append(&f, format!("k{i}").as_bytes(), &vec![i as u8; 3000]))
        .collect();
    f.sync();
    assert_eq!(locs.iter().map(|l| l.page).max(), Some(4));
    for (i, loc) in locs.iter().enumerate() {
        assert_eq!(
            read(&f, loc, format!("k{i}").as_bytes()).unwrap(),
            vec![i as u8; 3000],
            "record {i}"
        );
    }
    // Page 2 is the second file's first page: its first record is at the start of that file.
    let first = locs.iter().find(|l| l.page == 2).unwrap();
    let mut head = vec![0u8; first.len as usize];
    std::fs::File::open(&t2.0)
        .unwrap()
        .read_exact_at(&mut head, u64::from(first.off))
        .unwrap();
    assert!(record::verify(
        &head,
        Place { page: 2, gen: 0 },
        format!("k{}", locs.iter().position(|l| l == first).unwrap()).as_bytes()
    )
    .is_ok());
    assert_eq!(f.counters().page_evictions.load(Relaxed), 0);
}

#[test]
fn records_read_back_from_buffers_and_from_the_file() {
    let t = TempFile::new("rw");
    let f = Flash::open(&cfg(&t, 4 << 20, 1 << 20, 64 << 10)).unwrap();
    let locs: Vec<Loc> = (0..100u32)
        .map(|i| append(&f, format!("k{i}").as_bytes(), &vec![i as u8; 3000]))
        .collect();
    // Some are still in the buffer being filled, some queued or written.
    for (i, loc) in locs.iter().enumerate() {
        assert_eq!(
            read(&f, loc, format!("k{i}").as_bytes()).unwrap(),
            vec![i as u8; 3000]
        );
    }
    f.sync();
    for (i, loc) in locs.iter().enumerate() {
        assert_eq!(
            read(&f, loc, format!("k{i}").as_bytes()).unwrap(),
            vec![i as u8; 3000]
        );
        assert_eq!(read(&f, loc, b"other"), Err(Reject::OtherKey));
    }
    let mut st = FlashStats::default();
    f.add_stats(&mut st);
    assert_eq!(
        (st.objects_written, st.objects_used, st.pages_used),
        (100, 100, 1)
    );
    assert_eq!(st.bytes_used, 100 * record::len(3, 3000) as u64);
}

#[test]
fn flipped_torn_and_truncated_pages_are_misses() {
    let t = TempFile::new("damage");
    let f = Flash::open(&cfg(&t, 4 << 20, 1 << 20, 64 << 10)).unwrap();
    let locs: Vec<Loc> = (0..40u32)
        .map(|i| append(&f, format!("k{i}").as_bytes(), &[7u8; 2000]))
        .collect();
    f.sync();
    let file = std::fs::OpenOptions::new().write(true).open(&t.0).unwrap();
    let at = |l: &Loc| l.page as u64 * (1 << 20) + u64::from(l.off);
    // A flipped byte in the value of record 3, and in the header of record 5.
    file.write_at(&[0xff], at(&locs[3]) + 100).unwrap();
    file.write_at(&[0x01], at(&locs[5]) + 9).unwrap();
    // Torn: the second half of record 7 never made it.
    file.write_at(&[0u8; 1000], at(&locs[7]) + 1000).unwrap();
    assert_eq!(read(&f, &locs[3], b"k3"), Err(Reject::BadCrc));
    assert!(read(&f, &locs[5], b"k5").is_err());
    assert_eq!(read(&f, &locs[7], b"k7"), Err(Reject::BadCrc));
    assert_eq!(read(&f, &locs[4], b"k4").unwrap(), vec![7u8; 2000]);
    // Truncated file: everything from record 20 on is gone.
    file.set_len(at(&locs[20]) + 10).unwrap();
    assert_eq!(read(&f, &locs[19], b"k19").unwrap(), vec![7u8; 2000]);
    for (i, loc) in locs.iter().enumerate().skip(20) {
        assert!(
            read(&f, loc, format!("k{i}").as_bytes()).is_err(),
            "record {i}"
        );
    }
}

#[test]
fn a_recycled_page_is_a_miss_never_another_items_bytes() {
    let t = TempFile::new("recycle");
    // Two pages of 256 KiB: the third page's worth of records recycles page 0.
    let f = Flash::open(&cfg(&t, 512 << 10, 256 << 10, 64 << 10)).unwrap();
    let mut locs = Vec::new();
    for i in 0..200u32 {
        locs.push(append(&f, format!("k{i}").as_bytes(), &[i as u8; 3000]));
    }
    f.sync();
    let first_page = locs[0].page;
    let recycled = locs
        .iter()
        .position(|l| l.page == first_page && l.gen != locs[0].gen)
        .unwrap();
    // Same page and offset as record 0, new generation, another key: record 0 is gone.
    assert_eq!(locs[recycled].off, 0);
    assert!(!f.current(&locs[0]));
    assert_eq!(read(&f, &locs[0], b"k0"), Err(Reject::Gone));
    // Even with the generation check skipped (an index entry that wrapped its 16 bits), the
    // record there names another key and generation.
    let mut buf = Vec::new();
    let gen = f.read(&locs[recycled], &mut buf).unwrap();
    assert_eq!(
        record::verify(
            &buf,
            Place {
                page: first_page,
                gen
            },
            b"k0"
        ),
        Err(Reject::OtherKey)
    );
    let mut st = FlashStats::default();
    f.add_stats(&mut st);
    assert!(st.page_evictions >= 1 && st.objects_evicted > 0, "{st:?}");
}

#[test]
fn a_read_that_needs_no_disk_io_gives_the_same_bytes_or_declines() {
    let t = TempFile::new("cached");
    let f = Flash::open(&cfg(&t, 4 << 20, 1 << 20, 256 << 10)).unwrap();
    let loc = append(&f, b"k", &[7; 3000]);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    // Still in a write buffer: always served.
    assert_eq!(
        f.read_cached(&loc, &mut a),
        Ok(Some(f.read(&loc, &mut b).unwrap()))
    );
    assert_eq!(a, b);
    f.sync();
    // On the file: from the page cache, or declined (it would wait); never other bytes.
    a.clear();
    match f.read_cached(&loc, &mut a) {
        Ok(Some(_)) => assert_eq!(a, b),
        Ok(None) => {}
        Err(e) => panic!("{e}"),
    }
    // A location of another generation is gone, as for `read`.
    let stale = Loc {
        gen: loc.gen.wrapping_add(1),
        ..loc
    };
    assert_eq!(f.read_cached(&stale, &mut a), Err(Reject::Gone));
}

// ---- through the store --------------------------------------------------------------------

/// 1 shard, 1 MiB of RAM, 16 MiB of flash in 1 MiB pages.
fn store(t: &TempFile, item_size: usize) -> Store {
    let mut fc = cfg(t, 16 << 20, 1 << 20, 256 << 10);
    fc.item_size = item_size;
    fc.recache_rate = 0;
    Store::new(StoreConfig {
        mem_limit: 1 << 20,
        shards: 1,
        huge_pages: false,
        flash: Some(fc),
        ..Default::default()
    })
}

fn value(i: u32, len: usize) -> Vec<u8> {
    format!("{i:08}")
        .into_bytes()
        .into_iter()
        .cycle()
        .take(len)
        .collect()
}

fn get(s: &Store, key: &str) -> Option<Vec<u8>> {
    s.get(key.as_bytes(), 1, |it| it.value.to_vec()).hit()
}

/// Keys k0..kn, waiting for the writer every 100 values: on a loaded machine it could fall
/// behind (its buffers all busy) and demotions would turn into evictions.
fn fill(s: &Store, n: u32, len: usize) {
    for i in 0..n {
        s.store(
            Mode::Set,
            format!("k{i}").as_bytes(),
            i,
            0,
            &value(i, len),
            1,
        )
        .unwrap();
        if i % 100 == 99 {
            s.flash_sync();
        }
    }
}

#[test]
fn eviction_sends_large_values_to_flash_and_they_read_back() {
    let t = TempFile::new("store");
    let s = store(&t, 1000);
    // 6 MiB of 2 KB values into 1 MiB of RAM.
    fill(&s, 3000, 2000);
    let st = s.stats();
    let fs = st.flash.clone().unwrap();
    assert!(fs.objects_written > 2000, "{fs:?}");
    assert!(
        st.flash_items > 2000 && st.curr_items >= st.flash_items,
        "{st:?}"
    );
    let mut served = 0;
    for i in 0..3000 {
        if let Some(v) = s
            .get(format!("k{i}").as_bytes(), 1, |it| {
                (it.flags, it.value.to_vec())
            })
            .hit()
        {
            assert_eq!(v, (i, value(i, 2000)), "key {i}");
            served += 1;
        }
    }
    assert!(served > 2900, "{served} of 3000 served");
    assert!(s.stats().flash.unwrap().get_extstore > 2000);
    // Small values are evicted, never flashed.
    let t2 = TempFile::new("small");
    let s2 = store(&t2, 1000);
    fill(&s2, 20_000, 200);
    assert_eq!(s2.stats().flash.unwrap().objects_written, 0);
    assert!(s2.stats().evictions > 0);
}

#[test]
fn overwrite_delete_and_flush_make_flashed_copies_unreachable() {
    let t = TempFile::new("stale");
    let s = store(&t, 1000);
    fill(&s, 3000, 2000);
    let on_flash = |s: &Store, i: u32| {
        let sh = s.shards[0].lock();
        drop(sh);
        let before = s.stats().flash.unwrap().get_extstore;
        let hit = get(s, &format!("k{i}")).is_some();
        hit && s.stats().flash.unwrap().get_extstore > before
    };
    assert!(on_flash(&s, 10) && on_flash(&s, 11) && on_flash(&s, 12));
    // Overwrite: the new value, and after it too is pushed to flash, still the new value.
    s.store(Mode::Set, b"k10", 0, 0, b"fresh", 1).unwrap();
    assert_eq!(get(&s, "k10").unwrap(), b"fresh");
    s.store(Mode::Set, b"k11", 0, 0, &value(999_999, 3000), 1)
        .unwrap();
    s.delete(b"k12", 1);
    assert_eq!(get(&s, "k12"), None);
    for i in 3000..6000 {
        s.store(
            Mode::Set,
            format!("k{i}").as_bytes(),
            0,
            0,
            &value(i, 2000),
            1,
        )
        .unwrap();
        // The writer keeps up (on a loaded machine it may not, and k11 would be evicted).
        if i % 100 == 0 {
            s.flash_sync();
        }
    }
    assert_eq!(get(&s, "k11").unwrap(), value(999_999, 3000));
    assert_eq!(get(&s, "k12"), None);
    if let Some(v) = get(&s, "k10") {
        assert_eq!(v, b"fresh");
    }
    let before = s.stats().flash.unwrap().objects_used;
    assert!(before > 1000);
    s.flush_all(2);
    for i in 0..6000 {
        assert!(
            !s.get(format!("k{i}").as_bytes(), 2, |_| ()).is_hit(),
            "key {i}"
        );
    }
    let st = s.stats();
    assert_eq!((st.flash_items, st.flash.unwrap().objects_used), (0, 0));
}

#[test]
fn commands_that_change_a_flashed_item_bring_it_back_first() {
    let t = TempFile::new("modify");
    let s = store(&t, 8);
    // Numbers of 20 digits: flashed like the rest (item_size 8).
    for i in 0..100u64 {
        s.store(
            Mode::Set,
            format!("n{i}").as_bytes(),
            3,
            0,
            format!("{:020}", i * 1000).as_bytes(),
            1,
        )
        .unwrap();
    }
    let cas_before = s.peek(b"n5", 1, |it| it.cas).hit().unwrap();
    fill(&s, 3000, 2000);
    let st = s.stats().flash.unwrap();
    assert!(st.objects_written > 0);
    // Still served, same CAS (it travelled in the record).
    assert_eq!(s.peek(b"n5", 1, |it| it.cas).hit(), Some(cas_before));
    let parse = |b: &[u8]| core::str::from_utf8(b).ok()?.trim().parse::<u64>().ok();
    let n = |i: u64| format!("n{i}").into_bytes();
    assert_eq!(s.delta(&n(1), true, 5, 1, parse).unwrap().0, 1005);
    assert_eq!(s.delta(&n(2), false, 1, 1, parse).unwrap().0, 1999);
    assert_eq!(
        s.store(Mode::Append, &n(3), 0, 0, b"+a", 1),
        Ok(crate::StoreOutcome::Stored {
            cas: s.peek(&n(3), 1, |it| it.cas).hit().unwrap()
        })
    );
    assert_eq!(
        get(&s, "n3").unwrap(),
        format!("{:020}+a", 3000).into_bytes()
    );
    s.store(Mode::Prepend, &n(4), 0, 0, b"p-", 1).unwrap();
    assert_eq!(
        get(&s, "n4").unwrap(),
        format!("p-{:020}", 4000).into_bytes()
    );
    // add reads the record to know the item lives, but leaves it on flash (as memcached's add).
    let on_flash = s.stats().flash_items;
    assert!(on_flash > 0);
    assert_eq!(
        s.store(Mode::Add, &n(6), 0, 0, b"x", 1),
        Ok(crate::StoreOutcome::NotStored)
    );
    assert_eq!(s.stats().flash_items, on_flash);
    assert_eq!(get(&s, "n6").unwrap(), format!("{:020}", 6000).into_bytes());
    assert!(s.touch(&n(7), 100, 1));
    assert_eq!(s.get_and_touch(&n(8), 100, 1, |it| it.exp).hit(), Some(100));
    let c = s.peek(&n(9), 1, |it| it.cas).hit().unwrap();
    assert!(matches!(
        s.store(Mode::Cas(c), &n(9), 0, 0, b"swapped", 1),
        Ok(crate::StoreOutcome::Stored { .. })
    ));
    assert_eq!(get(&s, "n9").unwrap(), b"swapped");
    assert_eq!(
        s.store(Mode::Replace, &n(10), 0, 0, b"r", 1)
            .map(|o| matches!(o, crate::StoreOutcome::Stored { .. })),
        Ok(true)
    );
    // Expiry travels too: a flashed item past its exp is a miss.
    s.store(Mode::Set, b"short", 0, 50, &value(1, 2000), 1)
        .unwrap();
    fill(&s, 3000, 2000);
    assert_eq!(s.get(b"short", 60, |_| ()), Lookup::Expired);
}

#[test]
fn a_damaged_file_yields_misses_and_counts_badcrc() {
    let t = TempFile::new("storedamage");
    let s = store(&t, 1000);
    fill(&s, 3000, 2000);
    s.flash_sync();
    // Overwrite the whole written part of the file with a pattern.
    let file = std::fs::OpenOptions::new().write(true).open(&t.0).unwrap();
    let junk = vec![0x5au8; 1 << 20];
    for p in 0..4 {
        file.write_at(&junk, p << 20).unwrap();
    }
    let mut served = 0;
    for i in 0..3000 {
        if let Some(v) = get(&s, &format!("k{i}")) {
            assert_eq!(v, value(i, 2000), "key {i}: a wrong value");
            served += 1;
        }
    }
    let fs = s.stats().flash.unwrap();
    assert!(
        fs.miss_from_extstore + fs.badcrc_from_extstore > 0,
        "{fs:?}"
    );
    assert!(served < 3000);
    // The damaged entries are gone: a second pass reads nothing from the damaged pages.
    let again = s.stats().flash.unwrap().get_extstore;
    for i in 0..3000 {
        let _ = get(&s, &format!("k{i}"));
    }
    let extra = s.stats().flash.unwrap().get_extstore - again;
    assert!(
        extra <= served as u64,
        "{extra} reads of {served} still served"
    );
}

/// RAM per flashed item: its index slot (the index's bytes per entry) and its 16-byte entry.
/// memcached keeps the whole item header (48 bytes with CAS), the key and a 12-byte flash
/// pointer in a slab chunk (96 bytes for a 9-byte key), plus 8 bytes of hash bucket.
#[test]
fn ram_per_flashed_item_is_index_slot_plus_sixteen_bytes() {
    let t = TempFile::new("ram");
    let mut fc = cfg(&t, 256 << 20, 1 << 20, 256 << 10);
    fc.recache_rate = 0;
    let s = Store::new(StoreConfig {
        mem_limit: 4 << 20,
        shards: 1,
        huge_pages: false,
        flash: Some(fc),
        ..Default::default()
    });
    for i in 0..60_000u32 {
        s.store(
            Mode::Set,
            format!("fk:{i:06}").as_bytes(),
            0,
            0,
            &value(i, 4000),
            1,
        )
        .unwrap();
        // The writer keeps up: with it behind, demotion turns into eviction.
        if i % 64 == 0 {
            s.flash_sync();
        }
    }
    let st = s.stats();
    assert!(st.flash_items > 50_000, "{st:?}");
    let per_slot = st.index_bytes as f64 / st.index_entries as f64;
    let per_entry = st.flash_entry_bytes as f64 / st.flash_items as f64;
    let per_item = per_slot + per_entry;
    println!("RAM per flashed item: {per_item:.1} B (index {per_slot:.1} + entry {per_entry:.1}); memcached: 104");
    assert!(per_item <= 32.0, "{per_item}");
}

/// Warm restart: flashed items are written to the snapshot (read back from flash) and a
/// restore into a store with a flash tier sends what overflows RAM back to flash. Deleted and
/// overwritten keys stay so.
#[test]
fn a_snapshot_keeps_flashed_items_across_a_restart() {
    let t = TempFile::new("snap-a");
    let s = store(&t, 1000);
    fill(&s, 3000, 2000);
    s.delete(b"k5", 1);
    s.store(Mode::Set, b"k6", 0, 0, b"six", 1).unwrap();
    let before: Vec<u32> = (0..3000)
        .filter(|&i| get(&s, &format!("k{i}")).is_some())
        .collect();
    assert!(s.stats().flash_items > 2000);
    let mut snap = Vec::new();
    s.write_snapshot(&mut snap, 1, 1_000_000).unwrap();
    drop(s);
    let t2 = TempFile::new("snap-b");
    let r = store(&t2, 1000);
    let rep = r
        .restore_snapshot(&snap[..], snap.len() as u64, 1, 1_000_000)
        .unwrap();
    assert!(rep.complete, "{rep:?}");
    let mut served = 0;
    for &i in &before {
        if let Some(v) = get(&r, &format!("k{i}")) {
            let want = if i == 6 {
                b"six".to_vec()
            } else {
                value(i, 2000)
            };
            assert_eq!(v, want, "key {i}");
            served += 1;
        }
    }
    assert_eq!(get(&r, "k5"), None, "a deleted key came back");
    assert!(
        served * 100 >= before.len() * 99,
        "{served} of {} served after the restart",
        before.len()
    );
    assert!(r.stats().flash.unwrap().objects_written > 2000);
}

/// Issue 47: a restore that outran the flash writer evicted what it could not demote (about a
/// snapshot block's worth per restart on a busy machine) and still said "complete". The
/// restore now waits for a write buffer (`Flash::patient`; here against a writer slowed to a
/// loaded machine's pace): every item comes back, nothing is
/// evicted or turned away for want of a buffer, and the report says so.
#[test]
fn a_restore_never_evicts_for_want_of_a_write_buffer() {
    let t = TempFile::new("patient-a");
    let s = store(&t, 1000);
    fill(&s, 5000, 2000);
    s.flash_sync();
    let before: Vec<u32> = (0..5000)
        .filter(|&i| get(&s, &format!("k{i}")).is_some())
        .collect();
    let mut snap = Vec::new();
    s.write_snapshot(&mut snap, 1, 1_000_000).unwrap();
    drop(s);
    let t2 = TempFile::new("patient-b");
    // Write buffers a quarter of a snapshot block: one block's demotions need several.
    let mut fc = cfg(&t2, 16 << 20, 1 << 20, 64 << 10);
    fc.item_size = 1000;
    fc.recache_rate = 0;
    let r = Store::new(StoreConfig {
        mem_limit: 1 << 20,
        shards: 1,
        huge_pages: false,
        flash: Some(fc),
        ..Default::default()
    });
    // A writer as slow as a loaded machine's: without the wait, the restore evicted hundreds.
    r.flash
        .as_ref()
        .unwrap()
        .sh
        .writer_delay_us
        .store(5_000, Relaxed);
    let rep = r
        .restore_snapshot(&snap[..], snap.len() as u64, 1, 1_000_000)
        .unwrap();
    let fs = r.stats().flash.unwrap();
    assert_eq!((rep.evicted, fs.write_behind), (0, 0), "{rep:?} {fs:?}");
    assert!(rep.complete, "{rep:?}");
    let served = before
        .iter()
        .filter(|&&i| get(&r, &format!("k{i}")) == Some(value(i, 2000)))
        .count();
    assert_eq!(served, before.len());
    // Patience ends with the restore: a demotion with no buffer free fails again at once.
    assert!(!r.flash.as_ref().unwrap().patient.load(Relaxed));
}

/// Threads setting, reading, deleting and appending the same keys while eviction moves their
/// values to flash and reads bring them back: every value read is one that was written for
/// that key (never another key's bytes, never a torn mix), and nothing deadlocks.
#[test]
fn concurrent_readers_and_writers_never_see_another_keys_value() {
    let t = TempFile::new("threads");
    let mut fc = cfg(&t, 8 << 20, 1 << 20, 128 << 10);
    fc.item_size = 64;
    fc.recache_rate = 7;
    let s = std::sync::Arc::new(Store::new(StoreConfig {
        mem_limit: 1 << 20,
        shards: 2,
        huge_pages: false,
        flash: Some(fc),
        ..Default::default()
    }));
    // A value names its key and version in every 16-byte stripe.
    let make = |k: u32, v: u32, len: usize| -> Vec<u8> {
        format!("{k:07}.{v:07}|")
            .into_bytes()
            .into_iter()
            .cycle()
            .take(len)
            .collect()
    };
    let check = |k: u32, val: &[u8]| {
        assert!(val.len() >= 16, "key {k}: short value {}", val.len());
        let head = &val[..16];
        assert!(
            head.starts_with(format!("{k:07}.").as_bytes()),
            "key {k}: {:?}",
            String::from_utf8_lossy(head)
        );
        for c in val.chunks(16) {
            assert_eq!(c, &head[..c.len()], "key {k}: a torn value");
        }
    };
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let s = std::sync::Arc::clone(&s);
            std::thread::spawn(move || {
                let mut x = 0x9e37_79b9u32.wrapping_mul(t + 1);
                for n in 0..20_000u32 {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    let k = x % 1500;
                    let key = format!("key:{k}");
                    match x % 10 {
                        0..=3 => {
                            let len = 512 + (x as usize >> 8) % 3000 / 16 * 16;
                            s.store(Mode::Set, key.as_bytes(), 0, 0, &make(k, n, len), 1)
                                .unwrap();
                        }
                        4 => {
                            s.delete(key.as_bytes(), 1);
                        }
                        5 => {
                            s.touch(key.as_bytes(), 0, 1);
                        }
                        _ => {
                            if let Some(v) = s.get(key.as_bytes(), 1, |it| it.value.to_vec()).hit()
                            {
                                check(k, &v);
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    let st = s.stats();
    assert!(st.flash.as_ref().unwrap().objects_written > 1000, "{st:?}");
    assert!(st.mem_used <= st.limit_maxbytes);
}

/// Compaction: while free pages run short, a page mostly dead (>= ext_max_frag) has its live
/// records copied out, so they outlive the page's reuse; without it they go with the page.
#[test]
fn compaction_rescues_the_live_records_of_fragmented_pages() {
    let run = |compact: bool| -> (usize, FlashStats) {
        let t = TempFile::new("compact");
        let mut fc = cfg(&t, 16 << 20, 1 << 20, 256 << 10);
        fc.item_size = 1000;
        fc.recache_rate = 0;
        fc.compact_under = Some(if compact { 8 } else { 0 });
        if !compact {
            fc.max_frag_permille = 0; // never (memcached: live bytes below 0)
        }
        let s = Store::new(StoreConfig {
            mem_limit: 1 << 20,
            shards: 1,
            huge_pages: false,
            flash: Some(fc),
            ..Default::default()
        });
        // Synced every 64 stores (128 KB, half a write buffer), so that the writer never falls
        // behind, whatever the machine's load: an item it is behind on is evicted, not flashed
        // (a loaded run kept under 200 so).
        let store_synced = |n: u32| {
            s.store(
                Mode::Set,
                format!("k{n}").as_bytes(),
                n,
                0,
                &value(n, 2000),
                1,
            )
            .unwrap();
            if n % 64 == 63 {
                s.flash_sync();
            }
        };
        (0..3000).for_each(store_synced);
        s.flash_sync();
        // Nine in ten overwritten (small values: they stay in RAM or are evicted): the pages
        // of the first fill are 90% dead.
        for i in (0..3000).filter(|i| i % 10 != 0) {
            s.store(Mode::Set, format!("k{i}").as_bytes(), 0, 0, b"x", 1)
                .unwrap();
        }
        // New data fills the file and makes the first pages the oldest full ones.
        for round in 0..9u32 {
            (0..1000).for_each(|i| store_synced(10_000 + round * 1000 + i));
            s.flash_sync();
            s.maintain(1);
            s.flash_sync();
        }
        let kept = (0..3000)
            .step_by(10)
            .filter(|&i| match get(&s, &format!("k{i}")) {
                Some(v) => {
                    assert_eq!(v, value(i, 2000), "key {i}");
                    true
                }
                None => false,
            });
        (kept.count(), s.stats().flash.unwrap())
    };
    let (with, st) = run(true);
    let (without, st0) = run(false);
    assert!(st.compact_rescues > 0 && st0.compact_rescues == 0, "{st:?}");
    assert!(
        with >= 200 && without <= 50,
        "kept {with} with compaction, {without} without"
    );
}

/// The two halves of a flash hit as an asynchronous caller would run them: the lookup under
/// the lock, the read elsewhere, the answer later.
#[test]
fn a_get_in_two_halves() {
    let t = TempFile::new("halves");
    let s = store(&t, 1000);
    fill(&s, 3000, 2000);
    let (mut flash, mut ram) = (0, 0);
    for i in 0..3000u32 {
        let key = format!("k{i}");
        let f = |it: crate::Item<'_>| (it.flags, it.value.to_vec());
        match s.get_located(key.as_bytes(), 1, f) {
            crate::Located::Done(l) => {
                ram += 1;
                assert_eq!(l.hit(), Some((i, value(i, 2000))));
            }
            crate::Located::Flash { fref, fetched, f } => {
                flash += 1;
                let read = std::thread::scope(|sc| {
                    sc.spawn(|| s.read_flash(&fref, key.as_bytes()))
                        .join()
                        .unwrap()
                });
                assert_eq!(
                    s.finish_get(key.as_bytes(), fref, fetched, read, 1, f)
                        .hit(),
                    Some((i, value(i, 2000)))
                );
            }
        }
    }
    assert!(flash > 2000 && ram > 0, "{flash} {ram}");
}

/// ext_item_age: with room to spare in RAM, the large values of segments at least that old go
/// to flash at the maintenance pass (and read back); the small ones and the young stay.
#[test]
fn item_age_sends_idle_large_values_to_flash_before_memory_is_full() {
    let t = TempFile::new("age");
    let mut fc = cfg(&t, 16 << 20, 1 << 20, 256 << 10);
    (fc.item_size, fc.recache_rate, fc.item_age) = (1000, 0, 5);
    let s = Store::new(StoreConfig {
        mem_limit: 4 << 20,
        shards: 1,
        huge_pages: false,
        flash: Some(fc),
        ..Default::default()
    });
    // About 200 KB of large values and a few small ones: far from the 4 MiB limit.
    fill(&s, 100, 2000);
    for i in 0..10u32 {
        s.store(
            Mode::Set,
            format!("small{i}").as_bytes(),
            i,
            0,
            &value(i, 100),
            1,
        )
        .unwrap();
    }
    assert_eq!(s.flashable_in_ram(1).unwrap().0, 100);
    // Not old enough yet (written at 1, age 5): nothing moves.
    s.maintain(5);
    s.flash_sync();
    assert_eq!(s.stats().flash.unwrap().objects_written, 0);
    assert_eq!(s.flashable_in_ram(5).unwrap().0, 100);
    s.maintain(6);
    s.flash_sync();
    let st = s.stats();
    assert_eq!(
        (
            st.flash.clone().unwrap().objects_written,
            st.flash_items,
            st.evictions
        ),
        (100, 100, 0),
        "{st:?}"
    );
    assert_eq!(s.flashable_in_ram(6), Some((0, 0)));
    assert_eq!(st.curr_items, 110);
    for i in 0..100 {
        assert_eq!(get(&s, &format!("k{i}")), Some(value(i, 2000)), "key {i}");
    }
    for i in 0..10 {
        assert_eq!(
            get(&s, &format!("small{i}")),
            Some(value(i, 100)),
            "key small{i}"
        );
    }
    // What is written after the pass is young again: it stays until its own segment ages.
    s.store(Mode::Set, b"late", 0, 0, &value(7, 2000), 6)
        .unwrap();
    s.maintain(7);
    assert_eq!(s.flashable_in_ram(7).unwrap().0, 1);
    s.maintain(11);
    s.flash_sync();
    assert_eq!(s.flashable_in_ram(11), Some((0, 0)));
    assert_eq!(s.stats().flash.unwrap().objects_written, 101);
}

/// Without ext_item_age (memcached's default), nothing goes to flash before eviction.
#[test]
fn without_item_age_nothing_goes_to_flash_while_ram_has_room() {
    let t = TempFile::new("noage");
    let s = store(&t, 1000);
    fill(&s, 100, 2000);
    s.maintain(1_000_000);
    s.flash_sync();
    assert_eq!(s.stats().flash.unwrap().objects_written, 0);
    assert_eq!(s.flashable_in_ram(1).unwrap().0, 100);
}

/// Appends to `stream`, waiting for the writer as [`append`] does.
fn append_to(f: &Flash, key: &[u8], value: &[u8], meta: Meta, stream: Stream) -> Loc {
    loop {
        if let Some(l) = f.append_to(key, value, meta, stream) {
            return l;
        }
        f.sync();
    }
}

/// ext_low_ttl: short-lived records go to pages of their own, which compaction leaves alone
/// and the maintenance pass reclaims whole once their latest expiry has passed; the default
/// stream's records are untouched by it.
#[test]
fn low_ttl_records_fill_pages_of_their_own_reclaimed_whole_when_expired() {
    let t = TempFile::new("lowttl");
    let mut c = cfg(&t, 8 << 20, 1 << 20, 256 << 10);
    (c.compact_under, c.max_frag_permille) = (Some(8), 1000);
    let f = Flash::open(&c).unwrap();
    let short = |i: u32| Meta {
        flags: i,
        exp: 90 + i % 10,
        cas: 1,
    };
    // Interleaved: 700 short-lived records of 3 KB (2.1 MB: two full pages and an open one)
    // and 100 that never expire.
    let (mut low, mut default) = (Vec::new(), Vec::new());
    for i in 0..700u32 {
        low.push(append_to(
            &f,
            format!("s{i}").as_bytes(),
            &[1u8; 3000],
            short(i),
            Stream::LowTtl,
        ));
        if i % 7 == 0 {
            default.push(append_to(
                &f,
                format!("d{i}").as_bytes(),
                &[2u8; 3000],
                META,
                Stream::Default,
            ));
        }
    }
    f.sync();
    let pages = |locs: &[Loc]| {
        locs.iter()
            .map(|l| l.page)
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert!(
        pages(&low).is_disjoint(&pages(&default)),
        "{:?} {:?}",
        pages(&low),
        pages(&default)
    );
    assert_eq!(pages(&low).len(), 3);
    // Two full low-TTL pages, nearly all fragmented by the rule: compaction still picks none.
    assert_eq!(f.compaction_victim(), None);
    // Not all expired yet (the latest expiry on each page is 99).
    f.reclaim_expired(98);
    assert_eq!(f.counters().page_reclaims.load(Relaxed), 0);
    f.reclaim_expired(99);
    assert_eq!(f.counters().page_reclaims.load(Relaxed), 2);
    let open = low.last().unwrap().page;
    for (i, loc) in low.iter().enumerate() {
        let r = read(&f, loc, format!("s{i}").as_bytes());
        // The open page is never reclaimed (memcached's active page neither).
        assert_eq!(
            r.is_ok(),
            loc.page == open,
            "record s{i} on page {}",
            loc.page
        );
    }
    for (n, loc) in default.iter().enumerate() {
        assert_eq!(
            read(&f, loc, format!("d{}", n * 7).as_bytes()).unwrap(),
            vec![2u8; 3000]
        );
    }
    let mut st = FlashStats::default();
    f.add_stats(&mut st);
    assert_eq!(st.pages_free, 8 - 2, "{st:?}");
    // The reclaimed pages are reused first, by either stream.
    let next = append_to(&f, b"again", &[3u8; 3000], META, Stream::Default);
    let l = append_to(&f, b"low", &[3u8; 3000], short(0), Stream::LowTtl);
    assert!(
        pages(&low).contains(&next.page) || next.page == default[0].page,
        "{next:?}"
    );
    assert_eq!(read(&f, &l, b"low").unwrap(), vec![3u8; 3000]);
}

/// A one-page file still takes both streams: the page goes from one stream to the other.
#[test]
fn one_page_serves_both_streams() {
    let t = TempFile::new("onepage");
    let f = Flash::open(&cfg(&t, 1 << 20, 1 << 20, 256 << 10)).unwrap();
    for i in 0..600u32 {
        let (meta, stream) = if i % 2 == 0 {
            (META, Stream::Default)
        } else {
            (Meta { exp: 5, ..META }, Stream::LowTtl)
        };
        let l = append_to(
            &f,
            format!("k{i}").as_bytes(),
            &[i as u8; 3000],
            meta,
            stream,
        );
        assert_eq!(
            read(&f, &l, format!("k{i}").as_bytes()).unwrap(),
            vec![i as u8; 3000],
            "record {i}"
        );
    }
    assert!(f.counters().page_evictions.load(Relaxed) > 0);
}

/// ext_drop_unread: while few pages are free and none is fragmented enough, the oldest page
/// is compacted anyway; its records read since they went to flash are kept (copied out),
/// the others dropped with their items and counted as compaction skips.
#[test]
fn drop_unread_compaction_keeps_only_the_records_read_since_written() {
    let t = TempFile::new("dropunread");
    let mut fc = cfg(&t, 16 << 20, 1 << 20, 256 << 10);
    (fc.item_size, fc.recache_rate, fc.item_age) = (1000, 0, 5);
    (fc.compact_under, fc.drop_under, fc.max_frag_permille) = (Some(16), Some(16), 0);
    let s = Store::new(StoreConfig {
        mem_limit: 8 << 20,
        shards: 1,
        huge_pages: false,
        flash: Some(fc),
        ..Default::default()
    });
    // 1,000 values of 2 KB (2 MB: pages 0 and 1 full, 2 open), all to flash by ext_item_age.
    fill(&s, 1000, 2000);
    // Until all are on flash (a pass stops when the writer is behind; the next goes on).
    for _ in 0..100 {
        s.maintain(6);
        s.flash_sync();
        if s.flashable_in_ram(6) == Some((0, 0)) {
            break;
        }
    }
    let st = s.stats();
    assert_eq!(
        (st.flash_items, st.flash.as_ref().unwrap().compact_skipped),
        (1000, 0),
        "{st:?}"
    );
    // Off (the default): no page qualifies, nothing happens.
    s.maintain(7);
    assert_eq!(s.stats().flash_items, 1000);
    // Every third key read.
    for i in (0..1000).step_by(3) {
        assert_eq!(get(&s, &format!("k{i}")), Some(value(i, 2000)), "key {i}");
    }
    assert!(s.tune_flash(FlashSetting::DropUnread(true)));
    s.maintain(8);
    s.flash_sync();
    let fs = s.stats().flash.unwrap();
    // The oldest page, about 520 records: a third kept, two thirds dropped.
    assert!(
        fs.compact_rescues > 150 && fs.compact_skipped > 300,
        "{fs:?}"
    );
    // The dropped items stay (memcached keeps their headers) until a lookup finds them gone.
    assert_eq!(s.stats().flash_items, 1000);
    let mut served = 0;
    for i in 0..1000u32 {
        match get(&s, &format!("k{i}")) {
            Some(v) => {
                assert_eq!(v, value(i, 2000), "key {i}");
                served += 1;
            }
            None => assert!(i % 3 != 0, "key {i} was read, and is gone"),
        }
    }
    assert_eq!(served, 1000 - fs.compact_skipped);
    let after = s.stats();
    let missed = after.flash.as_ref().unwrap().miss_from_extstore - fs.miss_from_extstore;
    assert_eq!(
        (missed, after.flash_items),
        (fs.compact_skipped, 1000 - fs.compact_skipped),
        "{after:?}"
    );
    // Too many pages free for drop_under: the pass stops.
    assert!(s.tune_flash(FlashSetting::DropUnder(Some(0))));
    let before = s.stats().flash.unwrap();
    s.maintain(9);
    assert_eq!(
        s.stats().flash.unwrap().compact_skipped,
        before.compact_skipped
    );
}

/// Through the store: with ext_low_ttl, items about to expire go to flash (by ext_item_age)
/// on low-TTL pages, which the maintenance pass reclaims once they have all expired; the items
/// without a TTL are still served from their own pages.
#[test]
fn the_store_sends_short_lived_items_to_low_ttl_pages_and_reclaims_them() {
    let t = TempFile::new("storelow");
    let mut fc = cfg(&t, 16 << 20, 1 << 20, 256 << 10);
    (fc.item_size, fc.recache_rate, fc.item_age, fc.low_ttl) = (1000, 0, 2, 60);
    let s = Store::new(StoreConfig {
        mem_limit: 16 << 20,
        shards: 1,
        huge_pages: false,
        flash: Some(fc),
        ..Default::default()
    });
    // 1,200 short-lived values of 2 KB (2.4 MB: two full low-TTL pages) expiring at 30, and
    // 100 without a TTL.
    for i in 0..1200u32 {
        s.store(
            Mode::Set,
            format!("s{i}").as_bytes(),
            i,
            30,
            &value(i, 2000),
            1,
        )
        .unwrap();
    }
    fill(&s, 100, 2000);
    // A pass stops when no write buffer is free (a loaded machine's writer falls behind);
    // the next one goes on.
    for _ in 0..100 {
        s.maintain(3);
        s.flash_sync();
        if s.flashable_in_ram(3) == Some((0, 0)) {
            break;
        }
    }
    let st = s.stats();
    assert_eq!(st.flash_items, 1300, "{st:?}");
    let low = s
        .flash_pages()
        .unwrap()
        .iter()
        .filter(|p| p.bucket == PAGE_BUCKET_LOW_TTL)
        .count();
    assert_eq!(low, 3);
    s.maintain(29);
    assert_eq!(s.stats().flash.unwrap().page_reclaims, 0);
    s.maintain(30);
    let fs = s.stats().flash.unwrap();
    assert_eq!((fs.page_reclaims, fs.compact_rescues), (2, 0), "{fs:?}");
    for i in 0..100 {
        assert_eq!(get(&s, &format!("k{i}")), Some(value(i, 2000)), "key {i}");
    }
    assert!((0..1200).all(|i| s
        .get(format!("s{i}").as_bytes(), 30, |_| ())
        .hit()
        .is_none()));
}
