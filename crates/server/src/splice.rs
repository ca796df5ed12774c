//! Zero-copy sends of large values: a value that sits in pages of its own (a large item,
//! `mnemo_store::Pages`) goes to a TCP socket by reference instead of being copied into it.
//!
//! ```text
//!   copy the output before the value (the head) to the thread's head pages (append-only)
//!   vmsplice(pipe, [head, value, tail])    the pipe now references those pages
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
//! The head (`VALUE key flags bytes`, and any replies queued before it) goes by reference
//! too, from `Heads`: pages of the thread's own that are only appended to, so no byte the
//! kernel may still reference is written again, and that get fresh pages (MADV_DONTNEED, as
//! the store's lent buffers) once full. Why: written into the pipe, each head took a system
//! call and a fresh pipe page of its own for some 30 bytes, 4.3% of the server's time on
//! workload d (perf); a 256 KiB run of head pages is renewed once per thousands of replies.
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

/// The size of a thread's head pages (module doc): heads are some 30 bytes, so they are
/// renewed once per thousands of replies.
const HEADS_SIZE: usize = 256 << 10;
/// Output before a value longer than this (replies queued before it) is written into the
/// pipe instead: copying it once more to lend it would gain nothing.
const HEAD_MAX: usize = 4 << 10;

/// A thread's head pages (module doc): an anonymous mapping filled front to back.
struct Heads {
    base: core::ptr::NonNull<u8>,
    size: usize,
    used: usize,
}

impl Heads {
    /// `size` bytes of fresh pages, or None if the OS refuses the mapping.
    fn new(size: usize) -> Option<Heads> {
        // SAFETY: anonymous private mapping with no address hint, checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(Heads { base: core::ptr::NonNull::new(p.cast())?, size, used: 0 })
    }

    /// A copy of `head` in bytes never written again while this mapping lives (they may be
    /// lent), or None if it is too long or the pages cannot be renewed; the caller copies.
    fn place(&mut self, head: &[u8]) -> Option<&[u8]> {
        if head.len() > HEAD_MAX.min(self.size) {
            return None;
        }
        if self.size - self.used < head.len() {
            // Full: fresh pages for the whole run. The kernel keeps the old ones for as long
            // as it references them, so replies not yet read keep their heads.
            // SAFETY: (base, size) is this value's own private anonymous mapping; no slice
            // of it outlives the `send` that placed it, and DONTNEED only drops its pages.
            if unsafe { libc::madvise(self.base.as_ptr().cast(), self.size, libc::MADV_DONTNEED) } != 0 {
                return None;
            }
            self.used = 0;
        }
        // SAFETY: used + head.len() <= size, inside the mapping, and those bytes were never
        // handed out since the pages were last renewed.
        let dst = unsafe { core::slice::from_raw_parts_mut(self.base.as_ptr().add(self.used), head.len()) };
        dst.copy_from_slice(head);
        self.used += head.len();
        Some(dst)
    }
}

impl Drop for Heads {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new, unmapped once; the kernel keeps lent pages alive.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.size) };
    }
}

thread_local! {
    static PIPE: RefCell<Option<Pipe>> = const { RefCell::new(None) };
    static HEADS: RefCell<Option<Heads>> = const { RefCell::new(None) };
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

/// Sends `head` (copied, then lent with the value: module doc), then `value` (its pages
/// lent) and `tail` to the TCP socket `fd`, as far as the socket takes them without
/// blocking, and returns how many bytes of head + value + tail it took (errors, WouldBlock
/// included, count as 0: the caller's ordinary write reports them). None: this thread has no
/// pipe (descriptors exhausted) and nothing was sent; the caller copies instead.
pub fn send(fd: RawFd, head: &[u8], pages: Pages<'_>, value: &[u8], tail: &'static [u8]) -> Option<usize> {
    let null = dev_null()?;
    PIPE.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = Some(new_pipe().ok()?);
        }
        let pipe = cell.as_ref()?;
        let (sent, clean) = HEADS.with(|heads| {
            let mut heads = heads.borrow_mut();
            if heads.is_none() && !head.is_empty() {
                *heads = Heads::new(HEADS_SIZE);
            }
            let placed = if head.is_empty() { Some(head) } else { heads.as_mut().and_then(|h| h.place(head)) };
            if let Some(head) = placed {
                pages.lend();
                return send_pages(pipe, null, fd, 0, [head, value, tail]);
            }
            // A head too long to lend is copied into the pipe, so that the whole reply still
            // passes TCP's send path once, in one splice: a send() of its own before the value
            // cost 7% of the server's time (perf, workload d).
            // SAFETY: head is a live slice; write reads at most its length.
            let copied = unsafe { libc::write(pipe.wr.as_raw_fd(), head.as_ptr().cast(), head.len()) }.max(0) as usize;
            if copied < head.len() {
                // More output before the value than the pipe holds: send what it took, copy the rest.
                send_pages(pipe, null, fd, copied, [&[], &[], &[]])
            } else {
                pages.lend();
                send_pages(pipe, null, fd, copied, [&[], value, tail])
            }
        });
        if !clean {
            // Bytes that could not be drained would go out with the next reply.
            *cell = None;
        }
        Some(sent)
    })
}

/// The vmsplice/splice rounds of `send`: the `queued` bytes already in the pipe, then the
/// parts (head, value, tail), as far as the socket takes them. Returns the bytes sent and
/// whether the pipe was left empty.
fn send_pages(pipe: &Pipe, null: RawFd, fd: RawFd, mut queued: usize, mut parts: [&[u8]; 3]) -> (usize, bool) {
    let total = queued + parts.iter().map(|p| p.len()).sum::<usize>();
    let mut sent = 0;
    while sent < total {
        let (iov, n) = iovecs(&parts);
        // SAFETY: iov describes live slices; vmsplice only takes references to their pages,
        // which nothing writes again: the store's lent buffers (Pages::lend, module doc), the
        // append-only head pages, static tails.
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
fn iovecs(parts: &[&[u8]; 3]) -> ([libc::iovec; 3], usize) {
    let mut iov = [libc::iovec { iov_base: core::ptr::null_mut(), iov_len: 0 }; 3];
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
    fn heads_are_appended_and_lent_heads_keep_their_bytes_when_the_pages_are_renewed() {
        let mut heads = Heads::new(8192).expect("mapping");
        assert!(heads.place(&[b'x'; HEAD_MAX + 1]).is_none(), "a head past HEAD_MAX is copied instead");
        let a = heads.place(b"VALUE a 0 100000\r\n").unwrap();
        assert_eq!(a, b"VALUE a 0 100000\r\n");
        let (a_ptr, a_len) = (a.as_ptr() as usize, a.len());
        // Lend a's bytes to a pipe, as send does, and leave them unread.
        let pipe = new_pipe().unwrap();
        let iov = libc::iovec { iov_base: a_ptr as *mut libc::c_void, iov_len: a_len };
        // SAFETY: iov describes a_len bytes of the live head pages.
        let n = unsafe { libc::vmsplice(pipe.wr.as_raw_fd(), &iov, 1, libc::SPLICE_F_NONBLOCK) };
        assert_eq!(n, a_len as isize);
        // Later heads go after it, never over it, until the pages are full...
        let b = heads.place(b"VALUE b 0 7\r\n").unwrap();
        assert_eq!(b.as_ptr() as usize, a_ptr + a_len);
        let mut renewed = false;
        for i in 0..1000 {
            let h = format!("VALUE key{i:04} 0 100000\r\n");
            let placed = heads.place(h.as_bytes()).unwrap();
            assert_eq!(placed, h.as_bytes());
            if placed.as_ptr() as usize <= a_ptr {
                renewed = true;
                break;
            }
        }
        // ...then they start again at the front, over a's address, in fresh pages.
        assert!(renewed, "8 KiB of heads never renewed the pages");
        // The pipe still holds a's bytes as they were lent.
        let mut got = vec![0u8; a_len];
        // SAFETY: got is a live buffer of the length given.
        let n = unsafe { libc::read(pipe.rd.as_raw_fd(), got.as_mut_ptr().cast(), a_len) };
        assert_eq!(n, a_len as isize);
        assert_eq!(got, b"VALUE a 0 100000\r\n");
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
