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
//! When (`--zero-copy`, `auto` by default): by reference saves the server a copy per reply,
//! but it costs elsewhere, and where it costs more depends on the client, which the server
//! cannot see. The store must give a lent buffer fresh pages before reusing it (~60 µs per
//! 100 KB on this host, against ~12 µs for the copy saved per get). A client on the same host
//! reads a lent value from the item's pages in DRAM, not from socket pages the server has
//! just written, still in cache: under memcaslap d (a client that reads every byte and sets
//! the pace) lending always gave 9.4k TPS against 17.5k copying. Under `mnemo bench` d (the
//! server sets the pace) lending gave 26.1k ops/s against 23.6k. Whether the worker is busy
//! does not tell these apart: both keep it busy (the rule `auto` had until now lent half of
//! memcaslap's values and lost 30% to copying). So `auto` measures instead, per worker:
//!
//! ```text
//!   probe: copy, lend, lend, copy   PROBE each; large-value bytes served per second in each
//!                                   (a mode's two probes summed, centred on the same
//!                                   instant, so a load that rises or falls favours neither)
//!   settle for SETTLE on lending    if it served DECISIVE_PCT more; on copying otherwise
//!                                   (a smaller lead, a tie, or too few values to tell); a
//!                                   mode that won by DECISIVE_PCT again settles twice as
//!                                   long (up to 8x)
//!   then probe again                (the load may have changed)
//!   a pause of PROBE or more between large values during the probes: start them again
//!                                   (the probe's rate would measure the pause, not its mode)
//! ```
//!
//! A mode's bytes per second is the throughput the whole loop (server and client) reaches
//! in it. Lending must lead clearly because part of its cost comes later than its probes: a
//! lent buffer gets fresh pages when its space is reused, which in a full cache is seconds
//! later, in whichever mode runs then. Copy's probes pay for the lending before them: under
//! memcaslap d with the cache full, lending won every verdict by 7-15% (the copy probes'
//! thread at 100% CPU) and `auto` lent 94% of values, moving 12% fewer bytes per second than
//! `off` (2026-11-27); under `mnemo bench` d lending leads by some 40%.
//! Every large value counts, whichever way it leaves (a TLS connection's, or one queued in
//! the io_uring loop's send buffer, is copied in either mode). Large values further apart
//! than PROBE keep the probes starting over, on copy: at that rate the choice costs nothing.
//! Time in the slower mode is 2 PROBE of every SETTLE + 4 PROBE (4.5%), or of 8 SETTLE +
//! 4 PROBE (0.6%) once the same mode has won clearly four times in a row. `on` always lends
//! (a client across a network: the NIC reads the pages), `off` never does.

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
        Some(Heads {
            base: core::ptr::NonNull::new(p.cast())?,
            size,
            used: 0,
        })
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
            if unsafe { libc::madvise(self.base.as_ptr().cast(), self.size, libc::MADV_DONTNEED) }
                != 0
            {
                return None;
            }
            self.used = 0;
        }
        // SAFETY: used + head.len() <= size, inside the mapping, and those bytes were never
        // handed out since the pages were last renewed.
        let dst = unsafe {
            core::slice::from_raw_parts_mut(self.base.as_ptr().add(self.used), head.len())
        };
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
    static TUNER: Cell<Tuner> = Cell::new(Tuner::new(Instant::now()));
}

/// How long each probe of `auto` serves in one mode (module doc, "When"): long enough for
/// hundreds of 100 KB values, and for the replies queued in the other mode to drain.
const PROBE: Duration = Duration::from_millis(25);
/// How long `auto` keeps the mode its probes chose before it probes again ...
const SETTLE: Duration = Duration::from_secs(1);
/// ... doubled each time the probes pick the same mode again by more than DECISIVE_PCT, up
/// to this many times (8 SETTLE). Why: a probe in the losing mode costs what the two modes
/// differ by, and lent values are given fresh pages later on top (buf.rs, ~60 µs per 100 KB
/// here). Under memcaslap d lending serves half as much, and probing every second cost
/// mnemod 4-9% against `--zero-copy off` (median of 5 alternated pairs 0.91); at 8 s the
/// losing probes are 0.6% of the time. A load that changes is met within 8 s.
const SETTLE_DOUBLINGS: u8 = 3;
/// Rates further apart than this (percent of the larger) make a decisive verdict; lending
/// is chosen only by one (module doc, "When").
const DECISIVE_PCT: u64 = 20;
/// A mode with fewer large values than this in its two probes tells nothing about the rates.
const PROBE_MIN_VALUES: u32 = 16;
/// Copy, lend, lend, copy.
const PROBES: u8 = 4;

/// Whether probe `step` (0..PROBES) lends.
fn probe_lends(step: u8) -> bool {
    step == 1 || step == 2
}

/// What `auto` measured in one mode's probes.
#[derive(Clone, Copy, Default)]
struct Probed {
    bytes: u64,
    values: u32,
    wall: Duration,
}

/// `auto`'s state on one worker thread (module doc, "When").
#[derive(Clone, Copy)]
struct Tuner {
    /// 0..PROBES: the probe under way (`probe_lends`); PROBES: settled.
    step: u8,
    since: Instant,
    /// When the last large value was served.
    last: Instant,
    /// The current probe's large-value bytes and values.
    bytes: u64,
    values: u32,
    /// Copy's probes, then lend's, summed.
    probed: [Probed; 2],
    lend: bool,
    /// The last verdict, if it was decisive (DECISIVE_PCT), and how many times in a row
    /// since it has been confirmed: the settled stretch is SETTLE << streak.
    decided: Option<bool>,
    streak: u8,
}

impl Tuner {
    fn new(now: Instant) -> Tuner {
        Tuner {
            step: 0,
            since: now,
            last: now,
            bytes: 0,
            values: 0,
            probed: [Probed::default(); 2],
            lend: false,
            decided: None,
            streak: 0,
        }
    }

    /// Whether a value of `len` bytes is lent at `now`.
    fn next(&mut self, now: Instant, len: usize) -> bool {
        let span = if self.step < PROBES {
            PROBE
        } else {
            SETTLE * (1 << self.streak)
        };
        if self.step < PROBES && now.saturating_duration_since(self.last) >= PROBE {
            // A pause during the probes: start them again (module doc), and settle for SETTLE
            // next time (the load changed).
            *self = Tuner::new(now);
        } else if now.saturating_duration_since(self.since) >= span {
            if self.step < PROBES {
                let p = &mut self.probed[usize::from(probe_lends(self.step))];
                p.bytes += self.bytes;
                p.values += self.values;
                p.wall += now.saturating_duration_since(self.since);
            }
            self.step = if self.step == PROBES {
                0
            } else {
                self.step + 1
            };
            if self.step == 0 {
                self.probed = [Probed::default(); 2];
            }
            self.lend = if self.step == PROBES {
                self.settle()
            } else {
                probe_lends(self.step)
            };
            (self.since, self.bytes, self.values) = (now, 0, 0);
        }
        self.last = now;
        self.bytes += len as u64;
        self.values += 1;
        self.lend
    }

    /// The probes' verdict, and how long it is kept (`streak`, SETTLE_DOUBLINGS).
    fn settle(&mut self) -> bool {
        let (lend, decisive) = self.verdict();
        self.streak = match (decisive, self.decided) {
            (true, Some(last)) if last == lend => (self.streak + 1).min(SETTLE_DOUBLINGS),
            _ => 0,
        };
        self.decided = decisive.then_some(lend);
        lend
    }

    /// The probes' verdict: lend? And was it decisive (DECISIVE_PCT)? (module doc, "When").
    fn verdict(&self) -> (bool, bool) {
        let [copy, lend] = self.probed;
        let per_sec = |p: Probed| (p.bytes as u128 * 1_000_000_000) / p.wall.as_nanos().max(1);
        let (rc, rl) = (per_sec(copy), per_sec(lend));
        let enough = copy.values >= PROBE_MIN_VALUES && lend.values >= PROBE_MIN_VALUES;
        let decisive = enough && rc.abs_diff(rl) * 100 > rc.max(rl) * u128::from(DECISIVE_PCT);
        // Lending only on a clear lead (module doc, "When"); a tie copies.
        (decisive && rl > rc, decisive)
    }
}

/// Whether a large value of `len` bytes should go by reference now (module doc, "When").
/// Every large value asks, whether or not its connection can lend (auto counts it in the
/// current mode's rate); small-value traffic pays nothing for `auto`.
pub fn by_reference(mode: ZeroCopy, len: usize) -> bool {
    match mode {
        ZeroCopy::On => true,
        ZeroCopy::Off => false,
        ZeroCopy::Auto => TUNER.with(|cell| {
            let mut t = cell.get();
            let lend = t.next(Instant::now(), len);
            cell.set(t);
            lend
        }),
    }
}

/// Where a partial send's leftovers go: /dev/null takes spliced pages without reading them.
fn dev_null() -> Option<RawFd> {
    static NULL: OnceLock<Option<File>> = OnceLock::new();
    NULL.get_or_init(|| File::options().write(true).open("/dev/null").ok())
        .as_ref()
        .map(|f| f.as_raw_fd())
}

fn new_pipe() -> io::Result<Pipe> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    let pipe = unsafe {
        Pipe {
            rd: OwnedFd::from_raw_fd(fds[0]),
            wr: OwnedFd::from_raw_fd(fds[1]),
        }
    };
    // SAFETY: F_SETPIPE_SZ on our own pipe; failure leaves its default size (see PIPE_SIZE).
    unsafe { libc::fcntl(pipe.wr.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE) };
    Ok(pipe)
}

/// Sends `head` (copied, then lent with the value: module doc), then `value` (its pages
/// lent) and `tail` to the TCP socket `fd`, as far as the socket takes them without
/// blocking, and returns how many bytes of head + value + tail it took (errors, WouldBlock
/// included, count as 0: the caller's ordinary write reports them). None: this thread has no
/// pipe (descriptors exhausted) and nothing was sent; the caller copies instead.
pub fn send(
    fd: RawFd,
    head: &[u8],
    pages: Pages<'_>,
    value: &[u8],
    tail: &'static [u8],
) -> Option<usize> {
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
            let placed = if head.is_empty() {
                Some(head)
            } else {
                heads.as_mut().and_then(|h| h.place(head))
            };
            if let Some(head) = placed {
                pages.lend();
                return send_pages(pipe, null, fd, 0, [head, value, tail]);
            }
            // A head too long to lend is copied into the pipe, so that the whole reply still
            // passes TCP's send path once, in one splice: a send() of its own before the value
            // cost 7% of the server's time (perf, workload d).
            // SAFETY: head is a live slice; write reads at most its length.
            let copied = unsafe {
                libc::write(pipe.wr.as_raw_fd(), head.as_ptr().cast(), head.len())
            }
            .max(0) as usize;
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
fn send_pages(
    pipe: &Pipe,
    null: RawFd,
    fd: RawFd,
    mut queued: usize,
    mut parts: [&[u8]; 3],
) -> (usize, bool) {
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
            unsafe {
                libc::vmsplice(
                    pipe.wr.as_raw_fd(),
                    iov.as_ptr(),
                    n,
                    libc::SPLICE_F_NONBLOCK,
                )
            }
            .max(0) as usize
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
        let more = if sent + queued < total {
            libc::SPLICE_F_MORE
        } else {
            0
        };
        let moved = splice_all(
            pipe.rd.as_raw_fd(),
            fd,
            queued,
            libc::SPLICE_F_NONBLOCK | more,
        );
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
    let mut iov = [libc::iovec {
        iov_base: core::ptr::null_mut(),
        iov_len: 0,
    }; 3];
    let mut n = 0;
    for p in parts.iter().filter(|p| !p.is_empty()) {
        iov[n] = libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        };
        n += 1;
    }
    (iov, n)
}

/// Moves up to `len` bytes from the pipe to `to`, stopping early when `to` takes no more.
fn splice_all(from: RawFd, to: RawFd, len: usize, flags: libc::c_uint) -> usize {
    let mut moved = 0;
    while moved < len {
        // SAFETY: plain descriptors and no offsets (both ends are a pipe or a socket/device).
        let n = unsafe {
            libc::splice(
                from,
                core::ptr::null_mut(),
                to,
                core::ptr::null_mut(),
                len - moved,
                flags,
            )
        };
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
        let n = unsafe {
            libc::read(
                pipe.rd.as_raw_fd(),
                scratch.as_mut_ptr().cast(),
                scratch.len().min(left),
            )
        };
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

    /// A worker serving 100 KB values for `span` under a load that takes `gap(lend)` between
    /// values; returns how many values were lent.
    fn serve(
        t: &mut Tuner,
        clock: &mut Instant,
        span: Duration,
        gap: impl Fn(bool) -> Duration,
    ) -> u32 {
        let end = *clock + span;
        let mut lent = 0;
        while *clock < end {
            let lend = t.next(*clock, 100_000);
            lent += u32::from(lend);
            *clock += gap(lend);
        }
        lent
    }

    /// Serves until the probes have settled on a mode; returns the modes of the values.
    fn probe(t: &mut Tuner, clock: &mut Instant, gap: impl Fn(bool) -> Duration) -> Vec<bool> {
        let mut modes = Vec::new();
        while t.step < PROBES || modes.is_empty() {
            let lend = t.next(*clock, 100_000);
            modes.push(lend);
            *clock += gap(lend);
        }
        modes.pop();
        modes
    }

    fn fresh() -> (Tuner, Instant) {
        let t0 = Instant::now();
        (Tuner::new(t0), t0)
    }

    #[test]
    fn auto_probes_copy_lend_lend_copy_and_settles_on_the_mode_that_serves_more() {
        // The client reads lent values slower (memcaslap d): 40 µs between values copying,
        // 60 µs lending.
        let (mut t, mut clock) = fresh();
        let gap = |lend| if lend { us(60) } else { us(40) };
        let mut modes = probe(&mut t, &mut clock, gap);
        modes.dedup();
        assert_eq!(
            modes,
            [false, true, false],
            "probes: copy, lend, lend, copy"
        );
        assert_eq!(
            serve(&mut t, &mut clock, SETTLE - us(100), gap),
            0,
            "settled on copying"
        );
        // The server sets the pace (mnemo bench d): lending is 40% faster, so the next round lends.
        let gap = |lend| if lend { us(30) } else { us(42) };
        serve(&mut t, &mut clock, us(200), gap);
        probe(&mut t, &mut clock, gap);
        let values = (SETTLE.as_micros() / 2 / 30) as u32;
        assert!(
            serve(&mut t, &mut clock, SETTLE / 2, gap) >= values,
            "settled on lending"
        );
    }

    #[test]
    fn auto_lends_only_on_a_clear_lead() {
        // Copy's probes pay for the lending before them (module doc, "When"), so a lead of
        // DECISIVE_PCT or less, or a tie, is no reason to lend.
        let settle = |copy_gap: u64, lend_gap: u64| {
            let (mut t, mut clock) = fresh();
            let gap = |lend| us(if lend { lend_gap } else { copy_gap });
            probe(&mut t, &mut clock, gap);
            serve(&mut t, &mut clock, SETTLE / 2, gap) > 0
        };
        assert!(!settle(100, 100), "the same pace either way: copy");
        assert!(!settle(100, 90), "lending 10% faster: copy");
        assert!(!settle(100, 81), "lending 19% faster: copy");
        assert!(settle(100, 75), "lending 25% faster: lend");
        assert!(!settle(75, 100), "copying 25% faster: copy");
    }

    #[test]
    fn auto_with_too_few_values_to_compare_copies() {
        // A value every 5-10 ms: a handful per probe, below PROBE_MIN_VALUES, and lending
        // looks twice as fast by chance: copy.
        let (mut t, mut clock) = fresh();
        let gap = |lend| if lend { us(5_000) } else { us(10_000) };
        probe(&mut t, &mut clock, gap);
        assert_eq!(serve(&mut t, &mut clock, SETTLE / 2, gap), 0);
    }

    #[test]
    fn heads_are_appended_and_lent_heads_keep_their_bytes_when_the_pages_are_renewed() {
        let mut heads = Heads::new(8192).expect("mapping");
        assert!(
            heads.place(&[b'x'; HEAD_MAX + 1]).is_none(),
            "a head past HEAD_MAX is copied instead"
        );
        let a = heads.place(b"VALUE a 0 100000\r\n").unwrap();
        assert_eq!(a, b"VALUE a 0 100000\r\n");
        let (a_ptr, a_len) = (a.as_ptr() as usize, a.len());
        // Lend a's bytes to a pipe, as send does, and leave them unread.
        let pipe = new_pipe().unwrap();
        let iov = libc::iovec {
            iov_base: a_ptr as *mut libc::c_void,
            iov_len: a_len,
        };
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
    fn a_pause_during_the_probes_starts_them_again_on_copy() {
        let (mut t, mut clock) = fresh();
        let gap = |lend| if lend { us(60) } else { us(40) };
        serve(&mut t, &mut clock, PROBE + us(500), gap);
        assert!(t.next(clock, 100_000), "second probe: lend");
        // 30 ms without a large value, then the load comes back: copy, from the first probe.
        clock += PROBE + us(5_000);
        assert!(!t.next(clock, 100_000));
        assert_eq!(
            (t.step, t.values, t.probed[0].values, t.probed[1].values),
            (0, 1, 0, 0)
        );
        // A steady load, the same pace in both modes: the probes run in order, none restarted.
        let mut modes = probe(&mut t, &mut clock, |_| us(50));
        modes.dedup();
        assert_eq!(modes, [false, true, false]);
    }

    #[test]
    fn a_load_that_speeds_up_during_the_probes_favours_neither_mode() {
        // Values come ever faster, lending and copying alike: 5,000 a second at first, twice
        // that 100 ms later. Probed copy, lend, copy, lend, lending would look 18% faster;
        // copy, lend, lend, copy measures both modes at the same rate (within 3%).
        let (mut t, mut clock) = fresh();
        let t0 = clock;
        let mut probed = t.probed;
        while t.step < PROBES {
            t.next(clock, 100_000);
            probed = t.probed;
            let rate = 5_000.0 + 50_000.0 * (clock - t0).as_secs_f64();
            clock += Duration::from_secs_f64(1.0 / rate);
        }
        let per_sec = |p: Probed| p.bytes as f64 / p.wall.as_secs_f64();
        let (copy, lend) = (per_sec(probed[0]), per_sec(probed[1]));
        assert!(
            (lend - copy).abs() < 0.03 * copy.max(lend),
            "a rising load read as a faster mode: copy {copy:.0} B/s, lend {lend:.0} B/s"
        );
        assert!(!t.lend);
    }

    /// Serves in the settled mode until the next probes begin; returns how long that was.
    fn settled_for(t: &mut Tuner, clock: &mut Instant, gap: impl Fn(bool) -> Duration) -> Duration {
        assert_eq!(t.step, PROBES, "settled");
        let start = *clock;
        while t.step == PROBES {
            let lend = t.next(*clock, 100_000);
            *clock += gap(lend);
        }
        *clock - start
    }

    /// To the nearest millisecond: a settled stretch ends with the first value past it.
    fn ms(d: Duration) -> u128 {
        (d.as_micros() + 500) / 1000
    }

    #[test]
    fn a_clear_winner_settles_twice_as_long_each_time_up_to_eight_settles() {
        // memcaslap d: lent values are read half as fast, so lending's probes cost the most.
        let (mut t, mut clock) = fresh();
        let gap_copy_wins: fn(bool) -> Duration = |lend| if lend { us(80) } else { us(40) };
        let mut settled = Vec::new();
        for _ in 0..6 {
            probe(&mut t, &mut clock, gap_copy_wins);
            assert!(!t.lend, "copy wins");
            settled.push(ms(settled_for(&mut t, &mut clock, gap_copy_wins)));
        }
        // In ms, each within one value's gap of SETTLE << streak.
        assert_eq!(settled, [1000, 2000, 4000, 8000, 8000, 8000]);
        // Rates 10% apart (a winner, not a clear one): back to SETTLE.
        let gap = |lend| if lend { us(44) } else { us(40) };
        probe(&mut t, &mut clock, gap);
        assert!(!t.lend);
        assert_eq!(ms(settled_for(&mut t, &mut clock, gap)), 1000);
        // A clear winner that changes sides starts over at SETTLE too.
        let lend_wins: fn(bool) -> Duration = |lend| if lend { us(40) } else { us(80) };
        for (gap, lend, want) in [
            (gap_copy_wins, false, 1000),
            (gap_copy_wins, false, 2000),
            (lend_wins, true, 1000),
            (lend_wins, true, 2000),
        ] {
            probe(&mut t, &mut clock, gap);
            assert_eq!(t.lend, lend);
            assert_eq!(ms(settled_for(&mut t, &mut clock, gap)), want);
        }
    }

    #[test]
    fn modes_on_and_off_ignore_the_tuner() {
        assert!(by_reference(ZeroCopy::On, 100_000));
        assert!(!by_reference(ZeroCopy::Off, 100_000));
    }
}
