//! The io_uring transport (`--io-loop=uring`): the same connection layer as the epoll loop
//! (serve.rs), its bytes moved by one ring per worker, so that the sends and receives of all its
//! connections cost one system call per loop iteration instead of two or three per request.
//!
//! ```text
//!   accept thread ──(channel + eventfd write)──┐
//!                                              v
//!   worker thread (one ring, single issuer, deferred task work)
//!     loop {
//!       io_uring_enter: submit every queued SQE, wait for >= 1 completion
//!          (or up to 250 ms with -o idle_timeout, or no wait while -R yielders wait)
//!       completions:
//!         WAKE   eventfd read done  -> adopt new sockets, arm one multishot RECV each
//!         RECV   bytes in a provided buffer -> the connection's stream; mark it ready
//!                no MORE flag -> re-armed after the turn (unless EOF, error or paused);
//!                a receive ends after RECV_CAP bytes, leaving a large value in the socket
//!         SEND   n bytes sent -> the next batch of replies, or wake a blocked writer
//!       every marked connection takes a turn (serve.rs, conn.rs: parse, execute, reply);
//!         settle: its replies become one SEND sqe; input it left unread is copied out of
//!         the ring; its receive is armed again, or cancelled once it is closed
//!     }
//! ```
//!
//! The connections, their turns, slots and closing are the connection layer's (serve.rs);
//! this loop supplies only how bytes reach them and leave (uring/stream.rs). TLS connections
//! (-Z) stay on the epoll loop: the server uses it for every worker when -Z is given. A worker
//! whose ring cannot be set up (old kernel, seccomp, `kernel.io_uring_disabled`) runs the
//! epoll loop instead.

mod bufs;
mod stream;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use stream::RingStream;

use super::serve::{Slots, Transport};
use crate::admin::stats::Counters;
use crate::conn::{Io, Stream};

/// Sizes of one worker's ring and receive buffers.
#[derive(Debug, Clone, Copy)]
pub struct RingConfig {
    /// Submission queue entries (a full queue is submitted early, never lost).
    pub sq_entries: u32,
    /// Completion queue entries (multishot receives can post many per submission).
    pub cq_entries: u32,
    /// Provided receive buffers (a power of two) and the size of each.
    pub buf_count: u16,
    pub buf_size: u32,
    /// Bytes a connection's multishot receive takes before it ends and is armed again after
    /// the connection's turn (0: no cap). See [`RECV_CAP`].
    pub recv_cap: u32,
}

pub const DEFAULT_SQ_ENTRIES: u32 = 1024;
pub const DEFAULT_CQ_ENTRIES: u32 = 8192;
/// 256 x 16 KiB = 4 MiB of receive buffers per worker, touched only as they are used.
pub const DEFAULT_BUF_COUNT: u16 = 256;
pub const DEFAULT_BUF_SIZE: u32 = 16 * 1024;
/// One receive buffer: a large `set` then leaves its header and the value's first bytes in
/// the ring and the rest in the socket, from which the connection reads it straight into its
/// item (stream.rs `read_vectored`), as the epoll loop does. Uncapped, the multishot receive
/// took the whole 100 KB value into the ring before its header was parsed, and every byte was
/// copied twice: user-space `memmove` was 11.3% of the worker's time under `memcaslap` d
/// against memcached's 0.5%. A small-request load pays one re-arming SQE per 16 KB received,
/// and a burst of more than 16 KB of requests has its rest received in the next iteration.
pub const RECV_CAP: u32 = DEFAULT_BUF_SIZE;

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            sq_entries: DEFAULT_SQ_ENTRIES,
            cq_entries: DEFAULT_CQ_ENTRIES,
            buf_count: DEFAULT_BUF_COUNT,
            buf_size: DEFAULT_BUF_SIZE,
            recv_cap: RECV_CAP,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum UringError {
    #[error("io_uring setup: {0}")]
    Setup(std::io::Error),
    #[error("io_uring provided buffers: {0}")]
    Buffers(std::io::Error),
    #[error("eventfd: {0}")]
    EventFd(std::io::Error),
}

/// Replies of this many bytes written in one iteration make the worker submit what it has
/// queued at once (`drive`) instead of at the iteration's end: a small reply queued behind a
/// turn then waits for a few large values to be written, not for all of them. With 100 KB
/// values and 50 connections an iteration takes about a millisecond, and each `set`'s STORED
/// waited half of it (`mnemo bench` d: sets' p50 1.4 ms against 1.0 on epoll).
const SUBMIT_EARLY_BYTES: u64 = 256 * 1024;

/// user_data: kind in the top byte, the slot's generation in the next 24 bits, its index
/// in the low 32. A completion for a slot whose generation moved on is stale.
const RECV: u64 = 1;
const SEND: u64 = 2;
const WAKE: u64 = 3;
const CANCEL: u64 = 4;

const GEN_MASK: u32 = 0xff_ffff;

fn tag(kind: u64, gen: u32, i: usize) -> u64 {
    kind << 56 | u64::from(gen & GEN_MASK) << 32 | i as u64
}

/// A multishot receive into the worker's buffer ring that ends (its last completion without
/// MORE) once it has taken at least `cap` bytes; 0 means no cap.
fn recv_multi(fd: std::os::fd::RawFd, cap: u32) -> squeue::Entry {
    let e = opcode::RecvMulti::new(types::Fd(fd), bufs::GROUP).build();
    if cap == 0 {
        return e;
    }
    // The crate has no setter for it: the cap is the SQE's `optlen`, the u32 at byte 44 of
    // the kernel's 64-byte io_uring_sqe (io_uring 6.17, IORING_RECV_MSHOT_LIM).
    const _: () = assert!(std::mem::size_of::<squeue::Entry>() == 64);
    // SAFETY: squeue::Entry is #[repr(C)] around the kernel's io_uring_sqe (64 bytes, checked
    // above); every bit pattern of it is a valid SQE value, and bytes 44..48 are the union of
    // file_index and optlen, which RecvMulti leaves zero.
    let mut raw: [u8; 64] = unsafe { std::mem::transmute(e) };
    raw[44..48].copy_from_slice(&cap.to_ne_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute::<[u8; 64], squeue::Entry>(raw) }
}

/// The eventfd the accept thread writes to announce sockets in the channel.
pub struct EventFd(std::os::fd::OwnedFd);

impl EventFd {
    fn new() -> Result<EventFd, UringError> {
        use std::os::fd::FromRawFd;
        // Blocking: the ring's read of it waits inside the kernel, not in a retry loop.
        // SAFETY: eventfd has no preconditions; the result is checked before it is owned.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(UringError::EventFd(std::io::Error::last_os_error()));
        }
        // SAFETY: fd was just created and is owned by nothing else.
        Ok(EventFd(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }))
    }

    pub fn wake(&self) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let one = 1u64.to_ne_bytes();
        // SAFETY: an 8-byte write from a live buffer to our own eventfd.
        let n = unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), 8) };
        if n == 8 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

/// A worker's ring, buffers and eventfd: made on the starting thread (so a failure there can
/// still choose epoll), enabled by the worker thread, which so becomes its single issuer.
pub struct Ring {
    /// Declared before `bufs`: the ring goes (unregistering the buffers) before their memory.
    ring: IoUring,
    bufs: Arc<bufs::BufRing>,
    wake_fd: Arc<EventFd>,
    /// The eventfd read's target; boxed so its address stays put while the read is queued.
    wake_buf: Box<[u8; 8]>,
    counters: Arc<Counters>,
    cqes: Vec<(u64, i32, u32)>,
    /// Loop iterations (enters) so far: when each receive was armed (`RingStream::settled`).
    epoch: u64,
    /// The queue was submitted since the last enter in a way that may have let an earlier
    /// receive complete (`submit_now`): no stream reads its socket directly until the next.
    submitted_mid_turn: bool,
    /// `bytes_written` when the queue was last submitted (SUBMIT_EARLY_BYTES).
    written_at_submit: u64,
    /// RingConfig::recv_cap; 0 once the kernel refused a capped receive (before 6.17).
    recv_cap: u32,
    /// The queue was submitted since the last enter (`submit_now`): a receive it armed may
    /// have written a buffer whose completion is not reaped yet (`release_idle`).
    submitted: bool,
}

impl Ring {
    /// Any failure means "use epoll". The ring is created disabled (see [`Ring`]).
    pub fn new(rc: RingConfig, counters: Arc<Counters>) -> Result<Ring, UringError> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_r_disabled()
            .setup_submit_all()
            .setup_cqsize(rc.cq_entries)
            .build(rc.sq_entries)
            .map_err(UringError::Setup)?;
        let bufs = Arc::new(bufs::BufRing::new(&ring, rc.buf_count, rc.buf_size)?);
        Ok(Ring {
            ring,
            bufs,
            wake_fd: Arc::new(EventFd::new()?),
            wake_buf: Box::new([0; 8]),
            counters,
            cqes: Vec::with_capacity(256),
            epoch: 0,
            submitted_mid_turn: false,
            written_at_submit: 0,
            recv_cap: rc.recv_cap,
            submitted: false,
        })
    }

    /// What the accept thread writes to once a socket is in the channel.
    pub fn waker(&self) -> Arc<EventFd> {
        self.wake_fd.clone()
    }

    /// Submit what is queued and wait for completions (or for `wait` at most).
    fn enter(&mut self, wait: Option<Duration>) {
        let res = match wait {
            None => self.ring.submit_and_wait(1),
            Some(d) => {
                let ts = types::Timespec::from(d);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
        };
        match res {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                ) => {}
            Err(e) => {
                eprintln!("mnemod: worker io_uring_enter failed: {e}");
                std::process::exit(1);
            }
        }
    }

    fn push(&mut self, e: squeue::Entry) {
        // SAFETY: every entry's buffers outlive it: receive buffers belong to the buffer
        // ring, send bytes to a stream kept until the send completes, the eventfd buffer to
        // the worker.
        while unsafe { self.ring.submission().push(&e) }.is_err() {
            // A full queue goes to the kernel now; nothing waits for it.
            self.submit_now();
        }
    }

    fn arm_wake(&mut self) {
        use std::os::fd::AsRawFd;
        let e = opcode::Read::new(
            types::Fd(self.wake_fd.0.as_raw_fd()),
            self.wake_buf.as_mut_ptr(),
            8,
        )
        .build()
        .user_data(tag(WAKE, 0, 0));
        self.push(e);
    }

    /// Take the completions off the queue and act on them; true if the eventfd was read.
    fn reap(&mut self, slots: &mut Slots<RingStream>) -> bool {
        let mut woken = false;
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.extend(
            self.ring
                .completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        for &(ud, res, flags) in &cqes {
            let (kind, gen, i) = (ud >> 56, (ud >> 32) as u32 & GEN_MASK, ud as u32 as usize);
            match kind {
                WAKE => {
                    woken = true;
                    self.arm_wake();
                }
                RECV => self.on_recv(slots, i, gen, res, flags),
                SEND => self.on_send(slots, i, gen, res),
                _ => {} // CANCEL: its target's own completion is what matters
            }
        }
        cqes.clear();
        self.cqes = cqes;
        woken
    }

    fn on_recv(&mut self, slots: &mut Slots<RingStream>, i: usize, gen: u32, res: i32, flags: u32) {
        let bid = cqueue::buffer_select(flags);
        let more = cqueue::more(flags);
        let Some(s) = slots.io(i, |g| g & GEN_MASK == gen) else {
            if let Some(bid) = bid {
                self.bufs.recycle(bid);
            }
            return;
        };
        if !more {
            s.recv_armed = false;
            s.recv_cancelling = false;
        }
        match (res, bid) {
            (n, Some(bid)) if n > 0 => s.received(bid, n as u32),
            // A kernel without the cap (before 6.17) refuses the field: receive uncapped.
            (e, _) if e == -libc::EINVAL && s.recv_capped => self.recv_cap = 0,
            (0, _) => s.eof = true,
            // Out of buffers or cancelled: re-armed after the turn, when it may be.
            (e, _) if e == -libc::ENOBUFS || e == -libc::ECANCELED => {}
            (e, _) if e < 0 => s.err = Some(-e),
            _ => {}
        }
        if let (Some(bid), true) = (bid, res <= 0) {
            self.bufs.recycle(bid);
        }
        slots.mark(i, true);
    }

    fn on_send(&mut self, slots: &mut Slots<RingStream>, i: usize, gen: u32, res: i32) {
        let Some(s) = slots.io(i, |g| g & GEN_MASK == gen) else {
            return;
        };
        s.send_done(if res >= 0 {
            Ok(res as usize)
        } else {
            Err(-res)
        });
        if std::mem::take(&mut s.blocked) || res < 0 {
            // The connection waits for room (or must meet the error): its turn.
            slots.mark(i, false);
        } else {
            // Nothing to run: just send the rest, if any (or finish closing).
            slots.settle(self, i);
        }
    }

    /// Hand the kernel what is queued now, without waiting for completions: a full queue
    /// (`push`), or SUBMIT_EARLY_BYTES of replies. Receives it arms may complete at once, but
    /// they were armed in this iteration and so are not `settled`. Receives armed before are
    /// untouched unless the completion queue has overflowed: the submission then also runs the
    /// ring's deferred work (the io-uring crate asks for events), which may complete them.
    #[cold]
    fn submit_now(&mut self) {
        self.submitted = true;
        if self.ring.submission().cq_overflow() {
            self.submitted_mid_turn = true;
        }
        if let Err(e) = self.ring.submit() {
            if e.raw_os_error() != Some(libc::EBUSY) {
                eprintln!("mnemod: worker io_uring submit failed: {e}");
                std::process::exit(1);
            }
        }
    }
}

impl Transport for Ring {
    type Io = RingStream;

    fn start(&mut self) {
        if let Err(e) = self.ring.submitter().register_enable_rings() {
            eprintln!("mnemod: cannot enable the worker's io_uring: {e}");
            std::process::exit(1);
        }
        self.arm_wake();
    }

    fn attach(&mut self, sock: Stream, _i: usize, _gen: u32) -> std::io::Result<RingStream> {
        if sock.is_tls() {
            // Never sent here (Config::uring_wanted keeps -Z servers on epoll); were one to
            // come, serving it would bypass TLS, so it is refused.
            return Err(std::io::ErrorKind::Unsupported.into());
        }
        // Its receive is armed when it settles after its first turn.
        Ok(RingStream::new(sock, self.bufs.clone()))
    }

    fn poll(&mut self, wait: Option<Duration>, slots: &mut Slots<RingStream>) -> bool {
        self.enter(wait);
        self.epoch += 1;
        (self.submitted_mid_turn, self.submitted) = (false, false);
        self.written_at_submit = self.counters.bytes_written.load(Relaxed);
        self.reap(slots)
    }

    fn before_turn(&mut self, s: &mut RingStream) {
        // The ring takes nothing more from this socket before the next enter (deferred task
        // work runs only there): its receive is not being cancelled, and if armed, was
        // submitted by an earlier enter, whose completions are all reaped.
        s.settled = !s.recv_cancelling
            && (!s.recv_armed || s.armed_epoch < self.epoch)
            && !self.submitted_mid_turn;
    }

    /// Recycle what was left unread, queue the replies, and keep the receive armed unless the
    /// connection is paused, finished or closed.
    fn settle(&mut self, i: usize, gen: u32, s: &mut RingStream, closed: bool) -> bool {
        s.settled = false;
        s.spill();
        let fd = s.socket().raw_fd();
        let mut sqes: [Option<squeue::Entry>; 2] = [None, None];
        if closed {
            if s.recv_armed && !s.recv_cancelling {
                s.recv_cancelling = true;
                sqes[0] = Some(
                    opcode::AsyncCancel::new(tag(RECV, gen, i))
                        .build()
                        .user_data(tag(CANCEL, gen, i)),
                );
            }
        } else if !s.recv_armed && !s.eof && s.err.is_none() && s.unread() < stream::SPILL_HIGH {
            s.recv_armed = true;
            s.armed_epoch = self.epoch;
            s.recv_capped = self.recv_cap > 0;
            sqes[0] = Some(recv_multi(fd, self.recv_cap).user_data(tag(RECV, gen, i)));
        } else if s.recv_armed && !s.recv_cancelling && s.unread() >= stream::SPILL_HIGH {
            // Backpressure: stop receiving until the connection reads what it has.
            s.recv_cancelling = true;
            sqes[0] = Some(
                opcode::AsyncCancel::new(tag(RECV, gen, i))
                    .build()
                    .user_data(tag(CANCEL, gen, i)),
            );
        }
        if s.err.is_none() {
            if let Some((ptr, len)) = s.next_send() {
                sqes[1] = Some(
                    opcode::Send::new(types::Fd(fd), ptr, len)
                        .flags(libc::MSG_NOSIGNAL)
                        .build()
                        .user_data(tag(SEND, gen, i)),
                );
            }
        }
        let finished =
            closed && !s.recv_armed && !s.send_in_flight && (!s.sending() || s.err.is_some());
        for e in sqes.into_iter().flatten() {
            self.push(e);
        }
        // Finished: the ring holds nothing of it any more.
        finished
    }

    /// The receive buffers' pages go back to the system; they fault in again (zeroed) as the
    /// kernel next writes into them. Safe only while no buffer holds bytes not yet copied out:
    /// the kernel writes into them only inside an enter (deferred task work, and receives
    /// armed by a submit); every completion of the last enter was reaped and its connection
    /// driven in this round, which copied out and recycled every buffer named (stream.rs
    /// `spill`); and no submit since (`submitted`) can have filled one.
    fn release_idle(&mut self) {
        if !self.submitted && self.ring.completion().is_empty() {
            self.bufs.release_pages();
        }
    }

    fn after_turn(&mut self) {
        let written = self.counters.bytes_written.load(Relaxed);
        if written.wrapping_sub(self.written_at_submit) >= SUBMIT_EARLY_BYTES {
            self.written_at_submit = written;
            self.submit_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    /// Arms `recv_multi(cap)` on a socket holding 20 KiB and returns each completion's
    /// (result, MORE) once the receive has ended or has taken everything.
    fn receive(cap: u32) -> Vec<(i32, bool)> {
        let ring = IoUring::new(64).expect("io_uring (the server falls back to epoll without it)");
        let bufs = bufs::BufRing::new(&ring, 16, 4096).expect("buffer ring");
        let (mut tx, rx) = std::os::unix::net::UnixStream::pair().unwrap();
        tx.write_all(&[7u8; 20 * 1024]).unwrap();
        let e = recv_multi(rx.as_raw_fd(), cap).user_data(1);
        // SAFETY: the buffers belong to `bufs`, which outlives the ring's use of them here.
        unsafe { ring.submission_shared().push(&e).unwrap() };
        let mut got = Vec::new();
        let mut total = 0;
        while total < 20 * 1024 {
            ring.submit_and_wait(1).unwrap();
            // SAFETY: this thread is the completion queue's only user.
            for c in unsafe { ring.completion_shared() } {
                got.push((c.result(), cqueue::more(c.flags())));
                if let Some(bid) = cqueue::buffer_select(c.flags()) {
                    bufs.recycle(bid);
                }
                total += c.result().max(0) as usize;
            }
            if got.last().is_some_and(|&(_, more)| !more) {
                break;
            }
        }
        drop(ring);
        got
    }

    #[test]
    fn a_capped_receive_ends_after_one_buffer_and_leaves_the_rest_in_the_socket() {
        let got = receive(4096);
        if got == [(-libc::EINVAL, false)] {
            // A kernel before 6.17 refuses the cap; the worker then receives uncapped.
            return;
        }
        assert_eq!(got, [(4096, false)], "one buffer, then the receive ends");
    }

    #[test]
    fn an_uncapped_receive_takes_everything_and_stays_armed() {
        let got = receive(0);
        assert_eq!(got.iter().map(|&(n, _)| n).sum::<i32>(), 20 * 1024);
        assert!(got.iter().all(|&(n, more)| n == 4096 && more), "{got:?}");
    }
}
