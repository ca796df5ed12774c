//! Large items in huge-page chunks (chunks.rs), black-box through the store's API: values lent
//! to the kernel keep their bytes however the store churns afterwards, reads never see another
//! item's bytes, the chunks' slack never costs an item, and the limit holds.

use std::collections::HashMap;

use mnemo_store::{Lookup, Mode, Store, StoreConfig};

/// xorshift64: the same sequence on every run.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// The value written as version `ver` of key `k`: `len` bytes no other version shares.
fn value(k: u64, ver: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let mut x = (k << 32) ^ ver ^ 0x9e37_79b9_7f4a_7c15;
    while v.len() < len {
        v.extend_from_slice(&next(&mut x).to_le_bytes());
    }
    v.truncate(len);
    v
}

/// A pipe standing in for a socket: vmsplice hands it pages by reference, as a lent reply does.
struct Pipe([i32; 2]);

impl Pipe {
    fn new() -> Pipe {
        let mut fds = [0; 2];
        // SAFETY: fds has room for two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: our own pipe: 1 MiB (pipe-max-size's default), 256 pages, room for four
        // 200 KB values of 50-51 pages each.
        assert!(unsafe { libc::fcntl(fds[1], libc::F_SETPIPE_SZ, 1 << 20) } >= 1 << 20);
        Pipe(fds)
    }

    fn lend(&self, bytes: &[u8]) -> bool {
        let iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
        // SAFETY: iov describes live memory (the item, under the shard lock while `get`
        // runs); the pipe keeps references to its pages.
        let n = unsafe { libc::vmsplice(self.0[1], &iov, 1, libc::SPLICE_F_NONBLOCK) };
        n == bytes.len() as isize
    }

    fn read(&self, len: usize) -> Vec<u8> {
        let mut got = vec![0u8; len];
        let mut at = 0;
        while at < len {
            // SAFETY: got[at..] is live memory of len - at bytes.
            let n = unsafe { libc::read(self.0[0], got[at..].as_mut_ptr().cast(), len - at) };
            assert!(n > 0);
            at += n as usize;
        }
        got
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        // SAFETY: our own descriptors, closed once.
        unsafe { (libc::close(self.0[0]), libc::close(self.0[1])) };
    }
}

/// Overwrites, deletes and evictions of large values of several sizes, a third of the reads
/// lent to a pipe: the pipe yields exactly the bytes each lent read had when it was lent, every
/// hit is the key's latest version, and the budget stays within its limit.
#[test]
fn lent_values_keep_their_bytes_and_reads_their_own_through_churn() {
    let limit = 64usize << 20;
    let store = Store::new(StoreConfig { mem_limit: limit, item_size_max: 1 << 20, large_chunks: true, ..StoreConfig::default() });
    let sizes = [40_000usize, 100_000, 200_000];
    let pipe = Pipe::new();
    let mut x: u64 = 7;
    let mut latest: HashMap<u64, (u64, usize)> = HashMap::new();
    let mut in_pipe: Vec<Vec<u8>> = Vec::new();
    for i in 0..12_000u64 {
        let k = next(&mut x) % 1000;
        let key = format!("key{k}");
        match next(&mut x) % 10 {
            0..=2 => {
                let len = sizes[(next(&mut x) % 3) as usize];
                store.store(Mode::Set, key.as_bytes(), 0, 0, &value(k, i, len), 1).unwrap();
                latest.insert(k, (i, len));
            }
            3 => {
                store.delete(key.as_bytes(), 1);
                latest.remove(&k);
            }
            r => {
                let lend = r < 7 && in_pipe.len() < 4;
                let got = store.get(key.as_bytes(), 1, |it| {
                    let pages = it.pages.expect("a large item can be lent");
                    if lend {
                        pages.lend();
                        assert!(pipe.lend(it.value));
                    }
                    it.value.to_vec()
                });
                match got {
                    Lookup::Hit(v) => {
                        let (ver, len) = latest[&k];
                        assert!(v == value(k, ver, len), "key {k} read another item's bytes at op {i}");
                        if lend {
                            in_pipe.push(v);
                        }
                    }
                    _ => assert!(!latest.contains_key(&k) || store.stats().evictions > 0, "key {k} lost"),
                }
            }
        }
        // Drain the pipe now and then, after more churn has passed over the lent buffers
        // (about 90 sets and 30 deletes: some of the lent items are gone and their slots taken).
        if i % 300 == 299 {
            for want in in_pipe.drain(..) {
                assert!(pipe.read(want.len()) == want, "a lent value changed under the kernel at op {i}");
            }
        }
        let st = store.stats();
        assert!(st.mem_used <= limit as u64 + (2 << 20), "{} charged against {limit}", st.mem_used);
    }
    let st = store.stats();
    assert!(st.evictions > 0, "the run must have filled the cache");
    assert!(st.large_chunks > 0, "values of these sizes come from chunks");
}

/// A working set that fits, rewritten over and over with every read lent: the dead slots that
/// wait for their chunk may take the room the items leave, but never an item's place, and the
/// items moved out of mostly dead chunks keep their values.
#[test]
fn slack_never_evicts_an_item() {
    let limit = 64usize << 20;
    let store = Store::new(StoreConfig { mem_limit: limit, item_size_max: 1 << 20, large_chunks: true, ..StoreConfig::default() });
    let keys = 400u64; // 40 MB of 100 KB values in 64 MiB
    let mut x: u64 = 3;
    for round in 0..12u64 {
        for k in 0..keys {
            let key = format!("key{k}");
            store.store(Mode::Set, key.as_bytes(), 0, 0, &value(k, round, 100_000), 1).unwrap();
            let j = next(&mut x) % keys;
            let _ = store.get(format!("key{j}").as_bytes(), 1, |it| it.pages.map(|p| p.lend()));
        }
    }
    let st = store.stats();
    assert_eq!((st.evictions, st.curr_items), (0, keys));
    assert!(st.large_moved > 0, "mostly dead chunks were emptied by moving their items");
    for k in 0..keys {
        let got = store.get(format!("key{k}").as_bytes(), 1, |it| it.value.to_vec());
        assert!(matches!(got, Lookup::Hit(v) if v == value(k, 11, 100_000)), "key {k}");
    }
    assert!(st.mem_used <= limit as u64);
}
