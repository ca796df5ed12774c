//! A connection's socket as the io_uring loop serves it: `Read` and `Write` over buffers, so
//! the connection code (conn.rs) runs unchanged on either loop (`Io`, conn/stream.rs).
//!
//! ```text
//!   recv completions ──> chunks (bids in the buffer ring) ──read()──> Conn's input buffer
//!                            │ left unread at the end of a turn
//!                            └──> spill (copied; the ring buffer is recycled at once)
//!   Conn's replies ──write()──> out ──(loop: no send in flight)──> sending ──> SEND sqe
//! ```
//!
//! Reads copy straight from the ring's buffers; a connection's whole output is taken as it
//! is when nothing is queued (`take_output`: its buffer becomes `out`), and otherwise writes
//! are accepted (copied) until `out` holds [`SEND_HIGH`] bytes, after which they say
//! WouldBlock, exactly as a full socket would, so the connection's backpressure (WBUF_HIGH)
//! works as on epoll.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;

use super::bufs::BufRing;
use crate::conn::{Io, Stream};

/// Replies queued for the ring beyond this make writes say WouldBlock.
pub const SEND_HIGH: usize = 256 * 1024;
/// Input received but not yet read beyond this pauses receiving (the multishot receive is
/// cancelled, so the kernel's socket buffer and TCP flow control hold the rest).
pub const SPILL_HIGH: usize = 256 * 1024;
/// A send buffer that grew past this (a large value) is given back once sent.
const SEND_KEEP: usize = 512 * 1024;

pub struct RingStream {
    /// The descriptor's owner (a plain TCP or UNIX stream); closed when the stream drops.
    sock: Stream,
    bufs: Arc<BufRing>,
    /// Received segments still in ring buffers: (bid, start, end).
    chunks: VecDeque<(u16, u32, u32)>,
    /// Received bytes copied out of the ring (a turn that did not read them all).
    spill: Vec<u8>,
    spill_pos: usize,
    /// The peer closed its side: reads return 0 once everything before is read.
    pub(super) eof: bool,
    /// A receive or send failed (errno): the next read or write reports it.
    pub(super) err: Option<i32>,
    /// Replies written by the connection, not yet handed to the kernel.
    out: Vec<u8>,
    /// The bytes of the send in flight (never touched while the kernel reads them).
    sending: Vec<u8>,
    sent: usize,
    pub(super) send_in_flight: bool,
    /// A write said WouldBlock: drive the connection again when the send completes.
    pub(super) blocked: bool,
    /// The multishot receive is armed (its last completion carried MORE).
    pub(super) recv_armed: bool,
    /// A cancel of the receive was submitted (backpressure or close).
    pub(super) recv_cancelling: bool,
    /// The armed receive carries the worker's cap (uring.rs `recv_multi`): a kernel that
    /// refuses it says EINVAL, which then means "receive uncapped", not a failed socket.
    pub(super) recv_capped: bool,
    /// The worker's iteration that submitted the receive (uring.rs `epoch`).
    pub(super) armed_epoch: u64,
    /// Set by the worker for the length of a turn when the ring takes nothing from the socket
    /// until its next enter: a large value's read may then go to the socket itself.
    pub(super) settled: bool,
}

impl RingStream {
    pub fn new(sock: Stream, bufs: Arc<BufRing>) -> RingStream {
        RingStream {
            sock,
            bufs,
            chunks: VecDeque::new(),
            spill: Vec::new(),
            spill_pos: 0,
            eof: false,
            err: None,
            out: Vec::new(),
            sending: Vec::new(),
            sent: 0,
            send_in_flight: false,
            blocked: false,
            recv_armed: false,
            recv_cancelling: false,
            recv_capped: false,
            armed_epoch: 0,
            settled: false,
        }
    }

    /// A receive completion's buffer: held until read (or spilled at the end of the turn).
    pub(super) fn received(&mut self, bid: u16, len: u32) {
        self.chunks.push_back((bid, 0, len));
    }

    /// Input received and not yet read.
    pub(super) fn unread(&self) -> usize {
        self.spill.len() - self.spill_pos
            + self
                .chunks
                .iter()
                .map(|&(_, s, e)| (e - s) as usize)
                .sum::<usize>()
    }

    /// Copy what the connection left unread out of the ring and recycle those buffers, so no
    /// ring buffer is held past the loop iteration that filled it.
    pub(super) fn spill(&mut self) {
        if self.chunks.is_empty() {
            return;
        }
        // Drop what was read from the front first, so a connection that always has more
        // input coming (a long pipeline) does not grow the Vec by all it ever received.
        if self.spill_pos > 0 && self.spill_pos * 2 >= self.spill.len() {
            self.spill.drain(..self.spill_pos);
            self.spill_pos = 0;
        }
        while let Some((bid, s, e)) = self.chunks.pop_front() {
            self.spill
                .extend_from_slice(&self.bufs.get(bid, e as usize)[s as usize..]);
            self.bufs.recycle(bid);
        }
    }

    /// Replies to submit now, if none are in flight: (pointer, length) of the bytes that
    /// must stay untouched until the send's completion.
    pub(super) fn next_send(&mut self) -> Option<(*const u8, u32)> {
        if self.send_in_flight {
            return None;
        }
        if self.sent == self.sending.len() {
            if self.out.is_empty() {
                return None;
            }
            self.sending.clear();
            if self.sending.capacity() > SEND_KEEP {
                self.sending = Vec::new();
            }
            std::mem::swap(&mut self.out, &mut self.sending);
            self.sent = 0;
        }
        self.send_in_flight = true;
        let rest = &self.sending[self.sent..];
        // The kernel takes at most u32 bytes per send; a longer rest goes in further sends.
        Some((rest.as_ptr(), rest.len().min(u32::MAX as usize) as u32))
    }

    /// A send completed having sent `n` bytes (or failed with errno).
    pub(super) fn send_done(&mut self, res: Result<usize, i32>) {
        self.send_in_flight = false;
        match res {
            Ok(n) => self.sent += n,
            Err(e) => {
                self.err = Some(e);
                self.sending.clear();
                self.sent = 0;
                self.out.clear();
            }
        }
    }
}

/// The io_uring loop's `Io`: reads and writes meet the ring's buffers, not the socket.
impl Io for RingStream {
    fn socket(&self) -> &Stream {
        &self.sock
    }

    fn socket_mut(&mut self) -> &mut Stream {
        &mut self.sock
    }

    /// A read that came back short left nothing to report: no end of input or error is
    /// waiting behind the bytes it returned.
    fn short_read_drains(&self) -> bool {
        !self.eof && self.err.is_none()
    }

    /// Nothing queued or in flight comes before a direct write, and no failure is waiting to
    /// be reported.
    fn direct(&self) -> bool {
        !self.send_in_flight
            && self.sent == self.sending.len()
            && self.out.is_empty()
            && self.err.is_none()
    }

    fn sending(&self) -> bool {
        self.sent < self.sending.len() || !self.out.is_empty()
    }

    /// With nothing queued, the connection's output becomes the queue as it is: the send
    /// takes it from there (`next_send`). Copied into `out` instead, each 1-16 KiB reply cost
    /// a memcpy of its size on the worker (4.3% of the server's CPU in bench/flash.sh's
    /// throughput phase, `perf record`). The buffers circulate (output -> out -> sending ->
    /// output), so none is allocated per reply.
    fn take_output(&mut self, out: &mut Vec<u8>) -> bool {
        if self.err.is_some() || !self.out.is_empty() {
            return false;
        }
        std::mem::swap(&mut self.out, out);
        out.clear();
        true
    }

    /// Nothing in flight or queued: the send buffers go; nothing unread: so does the spill.
    fn release_idle(&mut self) -> bool {
        let held = self.out.capacity()
            + self.sending.capacity()
            + self.spill.capacity()
            + self.chunks.capacity()
            > 0;
        if !self.send_in_flight && !self.sending() {
            (self.out, self.sending, self.sent) = (Vec::new(), Vec::new(), 0);
        }
        if self.spill_pos == self.spill.len() {
            (self.spill, self.spill_pos) = (Vec::new(), 0);
        }
        if self.chunks.is_empty() {
            self.chunks = VecDeque::new();
        }
        held
    }
}

impl io::Read for RingStream {
    /// Fills every buffer in turn (the connection reads a large value and the input after
    /// it in one call, and takes a short total to mean "nothing left"). Only a large value's
    /// rest is read this way (conn.rs `fill`): once the ring's buffers are empty, and while
    /// the ring takes nothing from the socket (`settled`), the rest is read from the socket
    /// itself, as on epoll: the ring's receive ends after one buffer (uring.rs `RECV_CAP`),
    /// so most of a large value is still in the socket, and is copied once. Waiting for the
    /// ring instead cost each 100 KB set a loop iteration per segment that arrived after the
    /// turn began (`mnemo bench` d: sets' p50 1.5 ms against 1.0 on epoll).
    fn read_vectored(&mut self, bufs: &mut [io::IoSliceMut<'_>]) -> io::Result<usize> {
        let mut n = 0;
        // Where the ring's bytes ran out: buffer j, at offset `at`.
        let (mut j, mut at) = (bufs.len(), 0);
        for (k, b) in bufs.iter_mut().enumerate() {
            if b.is_empty() {
                continue;
            }
            match self.read(b) {
                Ok(got) => {
                    n += got;
                    if got < b.len() {
                        (j, at) = (k, got);
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    (j, at) = (k, 0);
                    break;
                }
                Err(e) if n == 0 => return Err(e),
                Err(_) => return Ok(n),
            }
        }
        if j < bufs.len() && self.settled && !self.eof && self.err.is_none() {
            let (first, later) = bufs[j..].split_first_mut().expect("j is in range");
            let mut iov = Vec::with_capacity(1 + later.len());
            iov.push(io::IoSliceMut::new(&mut first[at..]));
            iov.extend(later.iter_mut().map(|b| io::IoSliceMut::new(b)));
            match io::Read::read_vectored(&mut self.sock, &mut iov) {
                Ok(0) => self.eof = true,
                Ok(got) => n += got,
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => self.err = Some(e.raw_os_error().unwrap_or(libc::EIO)),
            }
        }
        if n == 0 {
            if let Some(e) = self.err {
                return Err(io::Error::from_raw_os_error(e));
            }
            if !self.eof {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        Ok(n)
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(e) = self.err {
            return Err(io::Error::from_raw_os_error(e));
        }
        let mut n = 0;
        if self.spill_pos < self.spill.len() {
            let k = (self.spill.len() - self.spill_pos).min(buf.len());
            buf[..k].copy_from_slice(&self.spill[self.spill_pos..self.spill_pos + k]);
            self.spill_pos += k;
            n = k;
            if self.spill_pos == self.spill.len() {
                self.spill.clear();
                self.spill_pos = 0;
                if self.spill.capacity() > SEND_KEEP {
                    self.spill = Vec::new();
                }
            }
        }
        // Fill as much as there is room for: a short read then means "nothing left", which
        // is what the connection takes it to mean (it skips the next read).
        while n < buf.len() {
            let Some((bid, s, e)) = self.chunks.front_mut() else {
                break;
            };
            let src = &self.bufs.get(*bid, *e as usize)[*s as usize..];
            let k = src.len().min(buf.len() - n);
            buf[n..n + k].copy_from_slice(&src[..k]);
            n += k;
            *s += k as u32;
            if *s == *e {
                let bid = *bid;
                self.chunks.pop_front();
                self.bufs.recycle(bid);
            }
        }
        if n == 0 && !buf.is_empty() && !self.eof {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }
}

impl io::Write for RingStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[io::IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        if let Some(e) = self.err {
            return Err(io::Error::from_raw_os_error(e));
        }
        if self.out.len() >= SEND_HIGH {
            self.blocked = true;
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut n = 0;
        for b in bufs {
            self.out.extend_from_slice(b);
            n += b.len();
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for RingStream {
    fn drop(&mut self) {
        // Buffers still held go back to the ring (the worker drops a stream only once its
        // receive has ended, so the kernel reports nothing more into them).
        while let Some((bid, ..)) = self.chunks.pop_front() {
            self.bufs.recycle(bid);
        }
    }
}
