//! Several records read together (a multi-get's flashed keys): their reads go to the disk at
//! once, through an io_uring of the calling thread, instead of one `pread` after another, so
//! the device works on all of them in parallel and the thread waits once.
//!
//! ```text
//!   read_many(locs)
//!     under the writer's lock, once: each record's page generation checked (recycled: a
//!       miss, no I/O), records still in a write buffer copied
//!     the rest: one READ sqe each (user_data = its index), up to RING_ENTRIES per
//!       io_uring_enter(submit, wait for all); a short or failed one, or every one when the
//!       thread has no ring (old kernel, io_uring disabled), finished by pread
//!     each record's generation checked again (recycled while read: a miss)
//! ```
//!
//! The ring is the thread's own (made on its first batch, kept for the thread's life): the
//! flash I/O pool's threads are the callers, one batch at a time each. Every buffer a read
//! was submitted for stays alive until its completion is reaped.

use std::cell::RefCell;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::Relaxed;

use io_uring::{opcode, types, IoUring};

use super::{record, Flash, Loc, Reject};

/// Reads in flight at once per thread (a larger batch goes in several submissions).
const RING_ENTRIES: u32 = 64;

thread_local! {
    /// None: not tried yet; Some(None): this thread cannot have one.
    static RING: RefCell<Option<Option<IoUring>>> = const { RefCell::new(None) };
}

impl Flash {
    /// Reads the records at `locs` into `outs` (one each), together: see the module doc.
    /// Each result is what [`Flash::read`] gives for that record.
    pub fn read_many(&self, locs: &[Loc], outs: &mut [Vec<u8>]) -> Vec<Result<u32, Reject>> {
        assert_eq!(locs.len(), outs.len());
        let sh = &*self.sh;
        let mut res: Vec<Result<u32, Reject>> = vec![Err(Reject::Gone); locs.len()];
        let mut disk = Vec::new();
        {
            let w = sh.w.lock();
            for (i, loc) in locs.iter().enumerate() {
                let Some(g) = sh.gens.get(loc.page as usize) else {
                    continue;
                };
                let gen = g.load(Relaxed);
                if gen as u16 != loc.gen {
                    continue;
                }
                outs[i].clear();
                let mut bufs = w.in_ram();
                if let Some(b) = bufs.find(|b| b.holds(loc)) {
                    let s = loc.off as usize - b.at;
                    outs[i].extend_from_slice(&b.data[s..s + loc.len as usize]);
                    res[i] = Ok(gen);
                } else {
                    outs[i].resize(loc.len as usize, 0);
                    disk.push((i, gen));
                }
            }
        }
        let mut got = vec![0usize; locs.len()];
        if disk.len() > 1 {
            self.ring_reads(locs, outs, &disk, &mut got);
        }
        for &(i, gen) in &disk {
            let (loc, out) = (&locs[i], &mut outs[i]);
            let (file, at) = sh.at(loc.page, u64::from(loc.off));
            while got[i] < out.len() {
                sh.c.io_submits.fetch_add(1, Relaxed);
                match file.read_at(&mut out[got[i]..], at + got[i] as u64) {
                    Ok(0) => break,
                    Ok(n) => got[i] += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        sh.io_error(
                            format_args!(
                                "reading {} bytes at page {} offset {}",
                                loc.len, loc.page, loc.off
                            ),
                            &e,
                        );
                        break;
                    }
                }
            }
            // A short read (truncated file) keeps only what was read: verification rejects it.
            out.truncate(got[i]);
            sh.c.objects_read.fetch_add(1, Relaxed);
            sh.c.bytes_read.fetch_add(got[i] as u64, Relaxed);
            // Recycled while we read: whatever came back is not this record.
            res[i] = if sh.gens[loc.page as usize].load(Relaxed) == gen {
                Ok(gen)
            } else {
                Err(Reject::Gone)
            };
        }
        res
    }

    /// The heads of the records at `locs` (their first [`record::HEAD_MAX`] bytes, or all of a
    /// shorter one: header and key) into `outs`: [`Flash::read_many`]'s reads, cut short, for
    /// a reader that wants the keys, not the values (the dump's, dump.rs).
    pub fn read_heads(&self, locs: &[Loc], outs: &mut [Vec<u8>]) -> Vec<Result<u32, Reject>> {
        let heads: Vec<Loc> = locs
            .iter()
            .map(|l| Loc {
                len: l.len.min(record::HEAD_MAX as u32),
                ..*l
            })
            .collect();
        self.read_many(&heads, outs)
    }

    /// The disk reads of `disk` (indexes into `locs`/`outs`) through this thread's ring,
    /// RING_ENTRIES at a time; `got[i]`: the bytes each one read (0 when it failed or the
    /// thread has no ring: the caller's pread finishes it).
    fn ring_reads(
        &self,
        locs: &[Loc],
        outs: &mut [Vec<u8>],
        disk: &[(usize, u32)],
        got: &mut [usize],
    ) {
        RING.with(|cell| {
            let mut cell = cell.borrow_mut();
            let Some(ring) = cell
                .get_or_insert_with(|| IoUring::new(RING_ENTRIES).ok())
                .as_mut()
            else {
                return;
            };
            for chunk in disk.chunks(RING_ENTRIES as usize) {
                if !self.ring_chunk(ring, locs, outs, chunk, got) {
                    abandon(&mut cell, outs, chunk, got);
                    return;
                }
            }
        });
    }

    /// One submission of `chunk`'s reads, waiting for all of them. false: the ring failed
    /// with reads possibly in flight.
    fn ring_chunk(
        &self,
        ring: &mut IoUring,
        locs: &[Loc],
        outs: &mut [Vec<u8>],
        chunk: &[(usize, u32)],
        got: &mut [usize],
    ) -> bool {
        // Every earlier chunk was reaped whole, so the submission queue is empty.
        for &(i, _) in chunk {
            let (file, at) = self.sh.at(locs[i].page, u64::from(locs[i].off));
            let out = &mut outs[i];
            let e = opcode::Read::new(
                types::Fd(file.as_raw_fd()),
                out.as_mut_ptr(),
                out.len() as u32,
            )
            .offset(at)
            .build()
            .user_data(i as u64);
            // SAFETY: the buffer is `outs[i]`, which is neither moved nor dropped before this
            // chunk's completions are all reaped below (or, should the ring fail with reads in
            // flight, ever: see `abandon`).
            unsafe { ring.submission().push(&e) }.expect("a chunk fits the empty ring");
        }
        let mut left = chunk.len();
        while left > 0 {
            self.sh.c.io_submits.fetch_add(1, Relaxed);
            match ring.submit_and_wait(left) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) => {}
                Err(_) => return false,
            }
            for c in ring.completion() {
                let i = c.user_data() as usize;
                got[i] = usize::try_from(c.result()).unwrap_or(0);
                left -= 1;
            }
        }
        true
    }
}

/// The ring failed with reads possibly still in flight: the kernel may yet write into their
/// buffers, so the buffers and the ring are leaked (never freed or reused) and the thread
/// reads by pread from now on. Not seen in practice; memory is the price of never letting a
/// late completion write into freed memory.
#[cold]
fn abandon(
    cell: &mut Option<Option<IoUring>>,
    outs: &mut [Vec<u8>],
    chunk: &[(usize, u32)],
    got: &mut [usize],
) {
    for &(i, _) in chunk {
        let len = outs[i].len();
        std::mem::forget(std::mem::replace(&mut outs[i], vec![0; len]));
        got[i] = 0;
    }
    if let Some(ring) = cell.replace(None).flatten() {
        std::mem::forget(ring);
    }
}

impl crate::Store {
    /// [`crate::Store::read_flash`] for several records (a multi-get's flashed keys), their
    /// disk reads issued together; the results in the order asked.
    pub fn read_flash_many(
        &self,
        reads: &[(&super::FlashRef, &[u8])],
    ) -> Vec<Result<super::FlashValue, Reject>> {
        let Some(fl) = self.flash.as_deref() else {
            return reads.iter().map(|_| Err(Reject::Gone)).collect();
        };
        let locs: Vec<Loc> = reads.iter().map(|(f, _)| f.loc).collect();
        let mut recs = vec![Vec::new(); reads.len()];
        let got = fl.read_many(&locs, &mut recs);
        reads
            .iter()
            .zip(recs)
            .zip(got)
            .map(|(((fref, key), rec), read)| Self::verify_flash(fl, fref, key, rec, read))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flash::tests::TempFile;
    use crate::flash::{FlashConfig, Meta};

    /// Records in the file, in a write buffer, recycled and past the file's end: each read
    /// together gives what a read alone gives, and the disk reads take one submission.
    #[test]
    fn records_read_together_match_reads_alone() {
        let t = TempFile::new("batch");
        let cfg = FlashConfig {
            page_size: 64 << 10,
            wbuf_size: 16 << 10,
            item_size: 64,
            ..FlashConfig::new(&t.0, 4 * (64 << 10))
        };
        let f = Flash::open(&cfg).unwrap();
        let meta = Meta {
            flags: 1,
            exp: 0,
            cas: 2,
        };
        let mut locs = Vec::new();
        for i in 0..400u32 {
            let v = vec![i as u8; 900 + i as usize % 300];
            loop {
                if let Some(l) = f.append(format!("k{i}").as_bytes(), &v, meta) {
                    locs.push(l);
                    break;
                }
                f.sync();
            }
        }
        // The first page recycled (its records gone), the last records still in a buffer.
        let alone: Vec<_> = locs.iter().map(|l| f.read(l, &mut Vec::new())).collect();
        assert!(alone.iter().any(|r| r.is_err()) && alone.iter().any(|r| r.is_ok()));
        let mut bogus = locs[390];
        bogus.off = (64 << 10) - 8;
        bogus.len = 48;
        locs.push(bogus);
        let before = f.counters().io_submits.load(Relaxed);
        let mut outs = vec![Vec::new(); locs.len()];
        let together = f.read_many(&locs, &mut outs);
        let submits = f.counters().io_submits.load(Relaxed) - before;
        for (i, l) in locs.iter().enumerate() {
            let mut one = Vec::new();
            let r = f.read(l, &mut one);
            assert_eq!(together[i], r, "record {i}");
            if r.is_ok() {
                assert_eq!(outs[i], one, "record {i}");
            }
        }
        let on_disk = together.iter().filter(|r| r.is_ok()).count() as u64;
        // One submission per 64 records with a ring; a pread each without one.
        let ring = IoUring::new(4).is_ok();
        assert!(
            if ring {
                submits <= on_disk.div_ceil(u64::from(RING_ENTRIES)) + 1
            } else {
                submits >= on_disk
            },
            "{submits} submissions for {on_disk} reads"
        );
    }
}
