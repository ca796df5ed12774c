//! The writer thread: writes the queued write buffers to the file, oldest first, each at its
//! page offset, and hands each buffer back as spare once it is written.
//!
//! ```text
//!   queue (sealed buffers) ──front──> write_paced: 256 KiB pwrite, pause, 256 KiB, ... ──>
//!     done: popped, its Vec back to `spare`, `wake` notified (sync() and settle() wait on it)
//!   pause between pieces: WRITE_PAUSE asleep, unless another buffer is queued behind this
//!     one (then the pieces go back to back: flash must keep up, or sets evict instead)
//! ```
//!
//! Why in paced pieces: one pwrite of a whole 4 MiB buffer is one run of this thread on its
//! core while the page cache takes the copy: p90 6.4 ms, longest 8.2 ms, measured in
//! `bench/flash.sh`'s throughput setting (mnemod pinned to one core with `-t 4`; `perf record
//! -e sched:sched_switch`), during which no worker on that core runs (the kernel copy is not
//! preempted, `PREEMPT_NONE`, and a thread that slept has the scheduler's favour when it
//! wakes). In 256 KiB pieces with a 50 µs sleep between them: p99 0.2 ms, longest 0.3-1.4 ms.
//! A sleep, not a `sched_yield`: each yield pushes the yielding thread's deadline a slice back,
//! and 16 of them per buffer starved the writer behind four busy workers (hit ratio 0.76-0.79
//! against 0.88, the write buffers full and items evicted instead of flashed); a sleep keeps
//! its fair share (the scheduler keeps a sleeper's lag).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Duration;

use super::Shared;

/// Bytes per pwrite of a write buffer (module doc).
const WRITE_CHUNK: usize = 256 << 10;
/// Sleep between two pieces of a buffer while no other buffer waits (module doc): 16 per 4 MiB
/// buffer, under 2 ms of its write's time with the timer's slack.
const WRITE_PAUSE: Duration = Duration::from_micros(50);

/// The writer thread's loop, until the flash file is dropped.
pub(super) fn write_loop(sh: &Shared) {
    let mut w = sh.w.lock();
    loop {
        if let Some(b) = w.queue.front().cloned() {
            drop(w);
            #[cfg(test)]
            std::thread::sleep(Duration::from_micros(
                sh.writer_delay_us
                    .load(std::sync::atomic::Ordering::Relaxed),
            ));
            // A buffer lies within one page, so within one file.
            let (file, at) = sh.at(b.page, b.at as u64);
            let behind = || sh.w.lock().queue.len() > 1;
            if let Err(e) = write_paced(file, &b.data, at, WRITE_CHUNK, behind) {
                // The records stay unreadable (verification rejects what is there): their
                // items become misses. Counted and kept for the log (Shared::io_error).
                sh.io_error(
                    format_args!(
                        "writing {} bytes at page {} offset {}",
                        b.data.len(),
                        b.page,
                        b.at
                    ),
                    &e,
                );
            }
            w = sh.w.lock();
            let done = w.queue.pop_front().expect("only the writer pops");
            drop(b);
            let buf = Arc::try_unwrap(done).map(|b| b.data).unwrap_or_default();
            w.spare.push(buf);
            // sync() waits on the same condvar.
            sh.wake.notify_all();
            continue;
        }
        if w.stop {
            return;
        }
        sh.wake.wait(&mut w);
    }
}

/// Writes `data` at `at` in pieces of `chunk` bytes, sleeping [`WRITE_PAUSE`] between two
/// pieces unless `behind()` says more is waiting to be written.
fn write_paced(
    file: &File,
    data: &[u8],
    at: u64,
    chunk: usize,
    behind: impl Fn() -> bool,
) -> std::io::Result<()> {
    let mut done = 0;
    for piece in data.chunks(chunk.max(1)) {
        if done > 0 && !behind() {
            std::thread::sleep(WRITE_PAUSE);
        }
        file.write_all_at(piece, at + done as u64)?;
        done += piece.len();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::io::Read;

    #[test]
    fn a_buffer_written_in_pieces_lands_whole_at_its_offset() {
        let tmp = super::super::tests::TempFile::new("paced");
        let path = tmp.0.clone();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        file.write_all_at(&[0xee; 64], 0).unwrap();
        // Not a multiple of the piece size: the last piece is short.
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let asked = Cell::new(0);
        let behind = || {
            asked.set(asked.get() + 1);
            asked.get() % 2 == 0
        };
        write_paced(&file, &data, 10, 4096, behind).unwrap();
        // Asked before each piece but the first: 3 pieces of 4096, 4096, 1808.
        assert_eq!(asked.get(), 2);
        let mut back = Vec::new();
        std::fs::File::open(&path)
            .unwrap()
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(
            &back[..10],
            &[0xee; 10],
            "bytes before the offset untouched"
        );
        assert_eq!(&back[10..], &data[..]);
    }
}
