//! Zero-copy sends of large values: a value that sits in pages of its own (a large item,
//! `mnemo_store::Pages`) goes to a TCP socket by reference instead of being copied into it.
//!
//! ```text
//!   write(pipe, output before the value)   small: copied, as it would be into the socket
//!   vmsplice(pipe, [value, tail])          the pipe now references the item's pages
//!   splice(pipe -> socket)                 the socket's buffers take those references over
//!   (socket full: what the pipe still holds goes to /dev/null; the caller copies the rest)
//! ```
//!
//! Why: with 100 KB values (bench/throughput.sh workload d) the kernel's copy of each reply
//! into socket buffers was 45% of mnemod's time (perf), and memcached pays the same copy, so
//! nothing in user space could put mnemod ahead there. By reference, the bytes are read once
//! more only by the receiver (on loopback) or by the NIC's DMA.
//!
//! Safety rests on the store: the socket reads the pages until the client has received them,
//! which nothing reports, so the item's pages must never be written again. `Pages::lend`
//! marks the buffer before the pages are handed over, and the store swaps a lent buffer's
//! pages for fresh ones before it reuses it (mnemo-store buf.rs, "Lent pages"); the `tail`
//! must be static for the same reason. TCP only: TLS encrypts a copy anyway. The io_uring
//! loop uses it too, for a value with nothing queued in the ring before it (conn.rs).
//!
//! One pipe per worker thread, created on first use and empty between calls, so no
//! connection holds a pipe and no descriptor is spent per connection.
//!
//! When (`--zero-copy`, `auto` by default): by reference saves the server the copy, but it
//! costs elsewhere. The store must give a lent buffer fresh pages before reusing it (17% of
//! the server's time on workload d), and a client on the same host reads the value from the
//! item's pages in DRAM, not from socket pages the server has just written, still in cache.
//! So `auto` lends pages only while the worker is busy:
//!
//! ```text
//!   a large value, SPARE_WINDOW after the last verdict: the thread's CPU time since then
//!   off the CPU >= SPARE_SHARE of the window?  yes: copy until the next verdict (time to spare)
//!                                              no:  lend (the worker sets the pace)
//! ```
//!
//! Copying takes back the time that was spare, so a worker whose client sets the pace settles
//! near SPARE_SHARE off the CPU, and one that sets the pace itself always lends. The thread's
//! CPU time, not the time spent in its polls, is what tells: an `io_uring_enter` also runs
//! the receives' copies (deferred task work), so on the io_uring loop a busy worker "waits" in
//! it for a third of its time and timing the wait made it copy under load (memcaslap d: the
//! worker at 96% of its core, 35% of it the copies). Time taken by other threads on the core
//! counts as spare; the servers this is for own their cores. Measured, bench/throughput.sh d:
//! under memcaslap (a client on the same host that reads every byte and sets the pace against
//! `on`) `auto` moved 5-28% (median 12%) more bytes per second than `on`; under `mnemo bench`
//! (the server sets the pace) the same as `on`. `on` always lends (a client across a network:
//! the NIC reads the pages), `off` never does.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use mnemo_store::Pages;

use crate::config::ZeroCopy;

/// The pipe's capacity asked for: a 100 KB value fits in one round, and 1 MiB is the most an
/// unprivileged process may ask (/proc/sys/fs/pipe-max-size); refused, the default 64 KiB
/// only means more rounds.
const PIPE_SIZE: i32 = 1 << 20;

struct Pipe {
    rd: OwnedFd,
    wr: OwnedFd,
}

thread_local! {
    static PIPE: RefCell<Option<Pipe>> = const { RefCell::new(None) };
    static SPARE: Cell<Spare> = Cell::new(Spare { since: Instant::now(), cpu: thread_cpu(), spare: false });
}

/// How often `auto` decides again whether the worker has time to spare: long enough to hold
/// many requests, short enough to follow a load that changes. Between verdicts a large value
/// costs a clock read (vDSO); a verdict costs one clock_gettime system call.
const SPARE_WINDOW: Duration = Duration::from_millis(2);

/// The share of a window (percent) the worker spent off the CPU above which it has time to
/// spare and `auto` copies. Copying then takes that time back until the share falls under
/// it, so the worker settles about here.
const SPARE_SHARE: u32 = 5;

/// The last verdict, when it was made, and the thread's CPU time then.
#[derive(Clone, Copy)]
struct Spare {
    since: Instant,
    cpu: Duration,
    spare: bool,
}

impl Spare {
    /// The verdict for the window that ends at `now`, with the thread's CPU time `cpu`.
    fn closed(self, now: Instant, cpu: Duration) -> Spare {
        let span = now - self.since;
        let off_cpu = span.saturating_sub(cpu.saturating_sub(self.cpu));
        Spare { since: now, cpu, spare: off_cpu * 100 >= span * SPARE_SHARE }
    }
}

/// The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID; zero should the clock fail, which
/// then reads as a worker that never runs: copy, the safe side).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a live timespec for clock_gettime to fill.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Whether a large value should go by reference now (module doc, "When"). Only large values
/// ask, so small-value traffic pays nothing for `auto`.
pub fn by_reference(mode: ZeroCopy) -> bool {
    match mode {
        ZeroCopy::On => true,
        ZeroCopy::Off => false,
        ZeroCopy::Auto => SPARE.with(|cell| {
            let mut s = cell.get();
            let now = Instant::now();
            if now - s.since >= SPARE_WINDOW {
                s = s.closed(now, thread_cpu());
                cell.set(s);
            }
            !s.spare
        }),
    }
}

/// Where a partial send's leftovers go: /dev/null takes spliced pages without reading them.
fn dev_null() -> Option<RawFd> {
    static NULL: OnceLock<Option<File>> = OnceLock::new();
    NULL.get_or_init(|| File::options().write(true).open("/dev/null").ok()).as_ref().map(|f| f.as_raw_fd())
}

fn new_pipe() -> io::Result<Pipe> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    let pipe = unsafe { Pipe { rd: OwnedFd::from_raw_fd(fds[0]), wr: OwnedFd::from_raw_fd(fds[1]) } };
    // SAFETY: F_SETPIPE_SZ on our own pipe; failure leaves its default size (see PIPE_SIZE).
    unsafe { libc::fcntl(pipe.wr.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE) };
    Ok(pipe)
}

/// Sends `head` (copied), then `value` (its pages lent) and `tail` to the TCP socket `fd`, as
/// far as the socket takes them without blocking, and returns how many bytes of
/// head + value + tail it took (errors, WouldBlock included, count as 0: the caller's ordinary
/// write reports them). None: this thread has no pipe (descriptors exhausted) and nothing was
/// sent; the caller copies instead.
pub fn send(fd: RawFd, head: &[u8], pages: Pages<'_>, value: &[u8], tail: &'static [u8]) -> Option<usize> {
    let null = dev_null()?;
    PIPE.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = Some(new_pipe().ok()?);
        }
        let pipe = cell.as_ref()?;
        // The head is copied into the pipe, so that the whole reply passes TCP's send path once,
        // in one splice: a send() of its own before the value cost 7% of the server's time
        // (perf, workload d).
        let copied = if head.is_empty() {
            0
        } else {
            // SAFETY: head is a live slice; write reads at most its length.
            unsafe { libc::write(pipe.wr.as_raw_fd(), head.as_ptr().cast(), head.len()) }.max(0) as usize
        };
        let (sent, clean) = if copied < head.len() {
            // More output before the value than the pipe holds: send what it took, copy the rest.
            send_pages(pipe, null, fd, copied, &[], &[])
        } else {
            pages.lend();
            send_pages(pipe, null, fd, copied, value, tail)
        };
        if !clean {
            // Bytes that could not be drained would go out with the next reply.
            *cell = None;
        }
        Some(sent)
    })
}

/// The vmsplice/splice rounds of `send`: the `queued` bytes already in the pipe, then value
/// and tail, as far as the socket takes them. Returns the bytes sent and whether the pipe was
/// left empty.
fn send_pages(pipe: &Pipe, null: RawFd, fd: RawFd, mut queued: usize, value: &[u8], tail: &'static [u8]) -> (usize, bool) {
    let mut parts = [value, tail];
    let total = queued + value.len() + tail.len();
    let mut sent = 0;
    while sent < total {
        let (iov, n) = iovecs(&parts);
        // SAFETY: iov describes live slices; vmsplice only takes references to their pages,
        // which the store keeps unwritten (Pages::lend, module doc).
        let took = if n == 0 {
            0
        } else {
            unsafe { libc::vmsplice(pipe.wr.as_raw_fd(), iov.as_ptr(), n, libc::SPLICE_F_NONBLOCK) }.max(0) as usize
        };
        let mut left = took;
        for p in &mut parts {
            let k = left.min(p.len());
            *p = &p[k..];
            left -= k;
        }
        queued += took;
        if queued == 0 {
            break; // vmsplice refused and nothing waits in the pipe: the caller copies the rest
        }
        let more = if sent + queued < total { libc::SPLICE_F_MORE } else { 0 };
        let moved = splice_all(pipe.rd.as_raw_fd(), fd, queued, libc::SPLICE_F_NONBLOCK | more);
        sent += moved;
        if moved < queued {
            // The socket is full: the pipe must be empty for the next call.
            return (sent, drain(pipe, null, queued - moved));
        }
        queued = 0;
        if took == 0 {
            break;
        }
    }
    (sent, true)
}

/// The non-empty parts as vmsplice's iovecs, and how many there are.
fn iovecs(parts: &[&[u8]; 2]) -> ([libc::iovec; 2], usize) {
    let mut iov = [libc::iovec { iov_base: core::ptr::null_mut(), iov_len: 0 }; 2];
    let mut n = 0;
    for p in parts.iter().filter(|p| !p.is_empty()) {
        iov[n] = libc::iovec { iov_base: p.as_ptr() as *mut libc::c_void, iov_len: p.len() };
        n += 1;
    }
    (iov, n)
}

/// Moves up to `len` bytes from the pipe to `to`, stopping early when `to` takes no more.
fn splice_all(from: RawFd, to: RawFd, len: usize, flags: libc::c_uint) -> usize {
    let mut moved = 0;
    while moved < len {
        // SAFETY: plain descriptors and no offsets (both ends are a pipe or a socket/device).
        let n = unsafe { libc::splice(from, core::ptr::null_mut(), to, core::ptr::null_mut(), len - moved, flags) };
        if n <= 0 {
            break;
        }
        moved += n as usize;
    }
    moved
}

/// Empties `len` bytes from the pipe: into /dev/null, or read out should that refuse.
/// Returns whether the pipe is empty.
fn drain(pipe: &Pipe, null: RawFd, len: usize) -> bool {
    let mut left = len - splice_all(pipe.rd.as_raw_fd(), null, len, libc::SPLICE_F_NONBLOCK);
    let mut scratch = [0u8; 4096];
    while left > 0 {
        // SAFETY: scratch is a live buffer of the length given.
        let n = unsafe { libc::read(pipe.rd.as_raw_fd(), scratch.as_mut_ptr().cast(), scratch.len().min(left)) };
        if n <= 0 {
            return false;
        }
        left -= n as usize;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn a_window_off_the_cpu_over_the_share_gives_time_to_spare() {
        let t0 = Instant::now();
        let s = Spare { since: t0, cpu: us(7000), spare: true };
        // 2 ms, of which 1,950 µs on the CPU (2.5% off it): busy, lend.
        let s = s.closed(t0 + us(2000), us(8950));
        assert!(!s.spare);
        assert_eq!((s.since, s.cpu), (t0 + us(2000), us(8950)));
        // The next 2 ms, 1,800 µs on the CPU (10% off): spare, copy.
        let s = s.closed(t0 + us(4000), us(10750));
        assert!(s.spare);
        // At the share exactly (100 µs of 2 ms): spare; just under it: busy.
        assert!(s.closed(t0 + us(6000), us(12650)).spare);
        assert!(!s.closed(t0 + us(6000), us(12651)).spare);
        // A long idle stretch before the window: spare.
        assert!(s.closed(t0 + us(900_000), us(10800)).spare);
        // CPU time past the wall clock (its own granularity): busy, never an underflow.
        assert!(!s.closed(t0 + us(6000), us(20000)).spare);
    }

    #[test]
    fn modes_on_and_off_ignore_the_workers_time() {
        let spare = |spare| SPARE.with(|c| c.set(Spare { since: Instant::now(), cpu: thread_cpu(), spare }));
        spare(true);
        assert!(by_reference(ZeroCopy::On));
        assert!(!by_reference(ZeroCopy::Off));
        assert!(!by_reference(ZeroCopy::Auto));
        spare(false);
        assert!(by_reference(ZeroCopy::Auto));
    }

    #[test]
    fn a_thread_that_spins_is_busy_and_one_that_sleeps_has_time_to_spare() {
        let verdict = |work: &dyn Fn()| {
            SPARE.with(|c| c.set(Spare { since: Instant::now(), cpu: thread_cpu(), spare: false }));
            work();
            by_reference(ZeroCopy::Auto)
        };
        let sleep = || std::thread::sleep(SPARE_WINDOW * 2);
        assert!(!verdict(&sleep), "a sleeping worker copies");
        // Spinning counts as busy only if the scheduler lets this thread run, so allow the
        // machine a few tries (a test host can be loaded).
        let spin = || {
            let t = Instant::now();
            while t.elapsed() < SPARE_WINDOW * 5 {
                std::hint::spin_loop();
            }
        };
        assert!((0..20).any(|_| verdict(&spin)), "a spinning worker lends");
    }
}
