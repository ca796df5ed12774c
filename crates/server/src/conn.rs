//! One client connection: its input and output buffers, and the loop that turns buffered
//! input into replies. It is written once over [`Io`] (conn/stream.rs): the epoll loop gives
//! it the socket itself, the io_uring loop the ring's buffers; the worker's connection layer
//! (worker/serve.rs) decides when it takes a turn.
//!
//! ```text
//!   read (until the socket is drained or a request is complete)
//!     -> parse + execute every whole request in the buffer (at most -R per turn)
//!     -> ONE write of every reply produced          (seeds 002/004: never a write per reply)
//! ```
//!
//! Memory at rest: a connection holds no input or output buffer until input arrives
//! (`fill_first`), and gives both back when its worker's sweep finds it idle
//! ([`Conn::release_idle`], worker/serve.rs): never on a request's path.
//!
//! Backpressure: while replies the client has not read exceed `WBUF_HIGH`, the connection
//! stops parsing and stops reading, so a client that pipelines forever without reading
//! costs a bounded amount of memory (the kernel's socket buffers hold the rest).
//!
//! A large `set` is read straight into its item (protocol/text/largeset.rs): while its value arrives,
//! each read is a readv of [rest of the value, input buffer].
//!
//! A reply that comes from a job (an fget's filter call, `Next::Later`) is made off the event
//! loop (jobs.rs): the turn ends with [`Turn::Later`] and the worker submits the job. Until the
//! worker hands the reply back ([`Conn::complete`]) the connection writes the replies before
//! it and parses nothing more, so the job's reply takes its place at the end of the output and
//! every later request's reply follows it; the input waits in the buffers and the socket
//! (backpressure: one job in flight per connection).
//!
//! ```text
//!   wbuf: [ replies before the fget ][ the fget's reply, once done ][ replies after it ... ]
//!          written while it runs       appended by complete()        parsed only after
//! ```
//!
//! The input a job answers stays in the input buffer, unconsumed, until its reply arrives
//! (`taken` holds the length of each request it took: the deferred one, then those a flash
//! read gathered after it); nothing is read into the buffer meanwhile, so those bytes stay
//! where they are. A flash read may stop at the multi-get pause (flashio.rs, "The pause"):
//! [`Conn::complete`] then consumes only what it answered. A text get keeps its request and
//! runs on from the key the job stopped at (`resume`, as after `Next::Resume`); a pipeline's
//! unanswered requests are parsed again. Either waits, as a RAM multi-get does, until the
//! output is below `WBUF_HIGH`.
//!
//! ```text
//!   rbuf: [ GETQ f1 | GETQ f2 | GETQ f3 | NOOP ]   job took all four, answered 2 (the pause)
//!          └ consumed by complete() ┘ └ parsed again once the output drains ┘
//! ```
//!
//! A `-Z` connection is a [`Stream::Tls`]: the same loop over plaintext, with the handshake
//! and the records inside the stream (tls.rs); the batch's replies are encrypted together
//! and leave in one writev of their records.

use std::io::{self, Write};

use mnemo_proto::text::{self, Parsed};

mod stream;

pub use stream::{Io, Stream};

use crate::admin::stats::{bump, regauge, Counters};
use crate::command::read::Direct;
use crate::command::Next;
use crate::command::Pending;
use crate::offload::mailbox::Answered;
use crate::protocol;
use crate::protocol::binary::{self, BinNext, BinSession};
use crate::Shared;

/// Smallest read; the input buffer is taken at this size when input first arrives.
const READ_CHUNK: usize = 16 * 1024;
/// Stop producing replies beyond this much unwritten output.
const WBUF_HIGH: usize = 256 * 1024;
/// Buffers that grew past this (a large value, a big multi-get) are given back when idle.
/// Large enough that a client moving 100 KB values does not reallocate on every request.
const BUF_KEEP: usize = 512 * 1024;

/// What the event loop should do with the connection after a turn.
#[derive(Debug, PartialEq, Eq)]
pub enum Turn {
    /// Wait for the socket to become readable or writable again.
    Wait,
    /// More work is buffered but this turn's request budget is spent: come back soon.
    Yield,
    Close,
    Shutdown,
    /// A request's reply comes from a job: submit it ([`Conn::take_job`]); the connection
    /// waits for [`Conn::complete`].
    Later,
}

enum Progress {
    NeedInput,
    Budget,
    OutputFull,
    Close,
    Shutdown,
    Later,
}

/// memcached picks the protocol per connection from its first byte.
enum Proto {
    Unknown,
    Text,
    Binary(BinSession),
}

/// A connection over the bytes one event loop moves (`S`: conn/stream.rs).
pub struct Conn<S> {
    pub stream: S,
    proto: Proto,
    /// -Y: whether this text connection has authenticated.
    authed: bool,
    /// Input; `rbuf[rpos..rend]` is unparsed. The Vec is kept fully initialised (its len is
    /// its size) so reads go straight into it without zeroing each time. Empty (with `wbuf`)
    /// until input arrives, and again once the worker's sweep finds the connection idle
    /// ([`Conn::release_idle`]): an idle connection holds no buffer.
    rbuf: Vec<u8>,
    rpos: usize,
    rend: usize,
    /// Bytes the parser said it needs (from rpos) before it can make progress.
    need: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    /// Input bytes still to discard (data of a refused storage command).
    swallow: usize,
    /// The reply to send once the swallowing is done.
    after_swallow: Option<mnemo_proto::ErrorReply>,
    /// Keys of the multi-get at the front of the input already answered.
    resume: usize,
    /// A metadump being streamed: its lines come before any later request's reply.
    dump: Option<Box<crate::admin::crawler::Metadump>>,
    /// A text request since the last write whose reply memcached would still hold (all but
    /// get/gets/gat/gats and mn, which make it write): it then refuses a metadump.
    stacked: bool,
    /// A storage command whose value is being read into its item.
    large: Option<Box<protocol::text::largeset::LargeSet>>,
    /// Keys whose values are in the unsent output (see `protocol::text::PendingReads`).
    reads: protocol::text::PendingReads,
    /// The job whose reply comes next, until the worker submits it.
    job: Option<Pending>,
    /// A job is in flight: its reply is the next output, and no request is parsed before it.
    waiting: bool,
    /// The lengths of the requests the job in flight took, from `rpos` on (module docs).
    taken: Vec<usize>,
    /// Close as soon as the pending output is written.
    closing: bool,
    shutdown: bool,
    /// The last read returned less than it had room for: the socket was empty then, and
    /// edge-triggered epoll reports any later arrival, so the EAGAIN read can be skipped.
    drained: bool,
    /// The worker saw the peer's FIN (EPOLLRDHUP). A short read no longer says "drained":
    /// the FIN may have come with the data whose event was already taken, so no later event
    /// would report it, and the end of input must be met by a read (`peer_closed`).
    read_closed: bool,
    /// Its descriptor (the key of `stats conns`).
    pub fd: i32,
    /// When a command last completed and whether replies wait, for `-o idle_timeout` and
    /// `stats conns` (read by other threads).
    pub info: std::sync::Arc<crate::admin::conns::ConnInfo>,
    /// The buffer sizes last reported to the worker's gauges (None: not yet counted).
    accounted: Option<(u64, u64)>,
    /// The worker's "a sweep is due" flag (worker.rs `Ticker`): set when the connection takes
    /// buffers, so that its worker is woken to give them back once it is idle.
    pub sweep_due: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// `watch`: the connection is a watcher (watch.rs); it stays `waiting` for good.
    watcher: Option<crate::watch::Handle>,
    /// It is closing for a protocol or socket error (`watch connevents` says reason=error).
    failed: bool,
}

/// The connection's side of [`Direct`] (the command layer decides when it is used): its socket and how much of its output is sent.
struct DirectSend<'a, S> {
    stream: &'a mut S,
    wpos: &'a mut usize,
    c: &'a Counters,
    /// `--zero-copy`: when values in pages of their own go by reference (splice.rs).
    zero_copy: crate::config::ZeroCopy,
}

impl<S: Io> Direct for DirectSend<'_, S> {
    fn send_value(
        &mut self,
        out: &mut Vec<u8>,
        value: &[u8],
        pages: Option<mnemo_store::Pages<'_>>,
        tail: &'static [u8],
    ) -> bool {
        let pending = out.len() - *self.wpos;
        // Asked for every large value, so that `auto` counts each in its current mode's rate
        // (splice.rs, "When"), also those that cannot be lent from here.
        let lend = pages.is_some() && crate::splice::by_reference(self.zero_copy, value.len());
        let iov = [
            io::IoSlice::new(&out[*self.wpos..]),
            io::IoSlice::new(value),
            io::IoSlice::new(tail),
        ];
        // Errors (and WouldBlock) leave everything to the ordinary flush, which reports them.
        let n = if self.stream.direct() {
            // On the io_uring loop too, a value goes straight to the socket as on epoll (one
            // copy by the kernel, or by reference) when nothing queued in the ring comes before
            // it: copied into the ring's send buffer, each 100 KB value cost a memcpy more.
            let sock = self.stream.socket_mut();
            let spliced = match (&*sock, pages) {
                (Stream::Tcp(s), Some(pages)) if lend => {
                    use std::os::fd::AsRawFd;
                    crate::splice::send(s.as_raw_fd(), &out[*self.wpos..], pages, value, tail)
                }
                _ => None,
            };
            spliced.unwrap_or_else(|| sock.write_vectored(&iov).unwrap_or_default())
        } else {
            self.stream.write_vectored(&iov).unwrap_or_default()
        };
        bump(&self.c.bytes_written, n as u64);
        if n < pending {
            *self.wpos += n;
            out.extend_from_slice(value);
            out.extend_from_slice(tail);
            return false;
        }
        out.clear();
        *self.wpos = 0;
        let sent = n - pending;
        if sent < value.len() {
            out.extend_from_slice(&value[sent..]);
            out.extend_from_slice(tail);
        } else {
            out.extend_from_slice(&tail[(sent - value.len()).min(tail.len())..]);
        }
        true
    }
}

impl<S: Io> Conn<S> {
    pub fn new(stream: S) -> Conn<S> {
        Conn {
            fd: stream.socket().raw_fd(),
            stream,
            proto: Proto::Unknown,
            authed: false,
            rbuf: Vec::new(),
            rpos: 0,
            rend: 0,
            need: 0,
            wbuf: Vec::new(),
            wpos: 0,
            swallow: 0,
            after_swallow: None,
            resume: 0,
            dump: None,
            stacked: false,
            large: None,
            reads: protocol::text::PendingReads::default(),
            job: None,
            waiting: false,
            taken: Vec::new(),
            closing: false,
            shutdown: false,
            drained: false,
            read_closed: false,
            info: Default::default(),
            accounted: None,
            sweep_due: None,
            watcher: None,
            failed: false,
        }
    }

    /// The read its turn would start with, done before the worker serves this poll's events
    /// (worker/serve.rs, `ReadAhead`): only when nothing is buffered or pending, so it is exactly
    /// that read, moved earlier. Returns where the first request's key sits
    /// (`text::lookup_key`), for the worker to prefetch its lookup.
    pub fn read_ahead(&mut self, c: &Counters) -> Option<core::ops::Range<usize>> {
        let plain = !self.stream.socket().is_tls();
        let idle = self.rpos == self.rend && self.wpos == self.wbuf.len() && self.swallow == 0;
        if !plain
            || !idle
            || self.waiting
            || self.drained
            || self.closing
            || self.large.is_some()
            || self.dump.is_some()
        {
            return None;
        }
        // EOF and errors are left for the turn's own read to meet again and act on.
        if !matches!(self.fill(c), Ok(n) if n > 0) {
            return None;
        }
        let key = text::lookup_key(&self.rbuf[self.rpos..self.rend])?;
        Some(self.rpos + key.start..self.rpos + key.end)
    }

    /// The worker's poll reported the peer's half-close: read on to the end of input even
    /// after a short read (`read_closed`), so the connection is closed, not left waiting for
    /// an event that will not come.
    pub fn peer_closed(&mut self) {
        self.read_closed = true;
        self.drained = false;
    }

    /// The connection's buffered input (for the key ranges `read_ahead` returns).
    pub fn input(&self) -> &[u8] {
        &self.rbuf
    }

    /// Run the connection as far as it can go without blocking.
    pub fn turn(&mut self, sh: &Shared, c: &Counters) -> Turn {
        crate::admin::conns::set_current(self.fd);
        // The one check a pending reply adds to a turn.
        if self.waiting {
            return self.waiting_turn(c);
        }
        let mut budget = sh.config.reqs_per_event;
        let t = self.run_turn(sh, c, &mut budget);
        if budget < sh.config.reqs_per_event {
            // A command completed: one relaxed store per turn that served any (-o
            // idle_timeout and `stats conns` count from the last complete command, as
            // memcached does, so a client trickling a line that never ends is still kicked).
            self.set_last_active(sh.clock.now());
        }
        self.account(c);
        self.info.writing.store(
            self.wpos < self.wbuf.len(),
            std::sync::atomic::Ordering::Relaxed,
        );
        // memcached's conn_nread: a command line is in, its data block is not (a large value
        // being read into its item, or a whole line left unparsed for want of its data).
        let rest = &self.rbuf[self.rpos..self.rend];
        let nread =
            self.large.is_some() || (!rest.is_empty() && memchr::memchr(b'\n', rest).is_some());
        self.info
            .reading_data
            .store(nread, std::sync::atomic::Ordering::Relaxed);
        t
    }

    /// A turn while a job is in flight: write the replies before it; read and parse nothing.
    #[cold]
    #[inline(never)]
    fn waiting_turn(&mut self, c: &Counters) -> Turn {
        if self.watcher.is_some() {
            return self.watch_turn(c);
        }
        let t = match self.flush(c) {
            Ok(_) => Turn::Wait,
            Err(_) => Turn::Close,
        };
        self.account(c);
        self.info.writing.store(
            self.wpos < self.wbuf.len(),
            std::sync::atomic::Ordering::Relaxed,
        );
        t
    }

    /// A watcher's turn (watch.rs): its input is dropped (a read of 0 closes it); while the
    /// socket takes everything, the watcher's buffered lines move to the output and go.
    #[cold]
    #[inline(never)]
    fn watch_turn(&mut self, c: &Counters) -> Turn {
        let mut scratch = [0u8; 512];
        loop {
            match self.stream.read(&mut scratch) {
                Ok(0) => return Turn::Close,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.failed = true;
                    return Turn::Close;
                }
            }
        }
        loop {
            match self.flush(c) {
                Ok(true) => {}
                Ok(false) => return Turn::Wait,
                Err(_) => {
                    self.failed = true;
                    return Turn::Close;
                }
            }
            let Some(h) = &self.watcher else {
                return Turn::Wait;
            };
            if !h.watcher.drain_into(&mut self.wbuf) {
                return Turn::Wait;
            }
        }
    }

    /// Its watcher, once `watch` made it one (the worker attaches the slot to it).
    pub fn watcher(&self) -> Option<&std::sync::Arc<crate::watch::Watcher>> {
        self.watcher.as_ref().map(|h| &h.watcher)
    }

    /// Why it closes, for `watch connevents` (the worker knows idle kicks and shutdowns).
    pub fn close_reason(&self) -> crate::watch::Reason {
        if self.failed {
            crate::watch::Reason::Error
        } else {
            crate::watch::Reason::Normal
        }
    }

    /// The job of the turn that returned [`Turn::Later`], for the worker to submit.
    pub fn take_job(&mut self) -> Option<Pending> {
        self.job.take()
    }

    /// The job's reply: it takes its place (the end of the output, as nothing was parsed
    /// since), the input it answered is consumed (module docs), and the connection goes on
    /// with the rest at its next turn. `now` counts as a command's completion for
    /// `-o idle_timeout`.
    pub fn complete(&mut self, reply: &[u8], answered: Answered, now: mnemo_store::Time) {
        debug_assert!(self.waiting);
        self.wbuf.extend_from_slice(reply);
        self.waiting = false;
        let answered = match answered {
            Answered::All => {
                self.resume = 0;
                self.taken.len()
            }
            // The request stays; it runs on from key `k`.
            Answered::Keys(k) => {
                self.resume = k;
                0
            }
            // The first request (a text get resumed from a later key, too) is answered whole.
            Answered::Requests(n) => {
                debug_assert!(n >= 1 && n < self.taken.len());
                self.resume = 0;
                n.min(self.taken.len())
            }
        };
        self.rpos += self.taken[..answered].iter().sum::<usize>();
        debug_assert!(self.rpos <= self.rend);
        self.taken.clear();
        // Input that arrived meanwhile was not read, and an edge-triggered loop reports it
        // only once: the next turn reads whatever the last one said.
        self.drained = false;
        self.set_last_active(now);
    }

    /// When a command last completed, or the connection was adopted (the clock's seconds).
    pub fn last_active(&self) -> mnemo_store::Time {
        self.info
            .last_cmd
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn set_last_active(&self, now: mnemo_store::Time) {
        self.info
            .last_cmd
            .store(now, std::sync::atomic::Ordering::Relaxed);
    }

    /// Keep the worker's buffer gauges (stats read_buf_*, response_obj_*) current: one
    /// comparison per turn unless a buffer grew or shrank.
    pub fn account(&mut self, c: &Counters) {
        let now = (self.rbuf.len() as u64, self.wbuf.capacity() as u64);
        let (old, n) = match self.accounted {
            Some(old) if old == now => return,
            Some(old) => (old, 0),
            None => ((0, 0), 1),
        };
        bump(&c.read_buf_count, n);
        bump(&c.response_obj_count, n);
        regauge(&c.read_buf_bytes, old.0, now.0);
        regauge(&c.response_obj_bytes, old.1, now.1);
        self.accounted = Some(now);
    }

    /// The connection is gone: take its buffers out of the gauges.
    pub fn release(&mut self, c: &Counters) {
        if let Some((r, w)) = self.accounted.take() {
            regauge(&c.read_buf_count, 1, 0);
            regauge(&c.response_obj_count, 1, 0);
            regauge(&c.read_buf_bytes, r, 0);
            regauge(&c.response_obj_bytes, w, 0);
        }
    }

    /// Whether `-o idle_timeout` may close it now: no reply or dump is being sent and no
    /// refused data block is being read (memcached kicks only connections that wait for a
    /// command, a partial command line included).
    pub fn is_idle(&self) -> bool {
        !self.waiting
            && self.wpos == self.wbuf.len()
            && self.dump.is_none()
            && self.swallow == 0
            && self.large.is_none()
            && !self.stream.sending()
    }

    /// Give the buffers back if nothing is pending in them: no unparsed input, no unsent
    /// reply, no job, dump, large value or refused data block in progress, nothing queued in
    /// the stream. Called by the worker's sweep (worker/serve.rs), never on a request's path;
    /// the next read takes a fresh input buffer (`fill`). Returns whether any was held.
    #[cold]
    pub fn release_idle(&mut self, c: &Counters) -> bool {
        let quiet = !self.waiting
            && self.job.is_none()
            && self.rpos == self.rend
            && self.wpos == self.wbuf.len()
            && self.swallow == 0
            && self.resume == 0
            && self.dump.is_none()
            && self.large.is_none();
        if !quiet || (self.rbuf.capacity() == 0 && self.wbuf.capacity() == 0) {
            return quiet && self.stream.release_idle();
        }
        (self.rbuf, self.wbuf, self.reads) = (
            Vec::new(),
            Vec::new(),
            protocol::text::PendingReads::default(),
        );
        (self.rpos, self.rend, self.wpos) = (0, 0, 0);
        self.stream.release_idle();
        self.account(c);
        true
    }

    /// Whether it holds an input or output buffer (the sweep comes back for those).
    pub fn holds_buffers(&self) -> bool {
        self.rbuf.capacity() > 0 || self.wbuf.capacity() > 0
    }

    /// The turn; `budget` counts down the requests it serves (-R).
    fn run_turn(&mut self, sh: &Shared, c: &Counters, budget: &mut usize) -> Turn {
        loop {
            let progress = self.process(sh, c, budget);
            // Replies wait while more input is arriving: a pipeline split across several
            // segments still gets one write (seed 004), issued once the socket is drained.
            if let (Progress::NeedInput, false) = (&progress, std::mem::take(&mut self.drained)) {
                match self.fill(c) {
                    Ok(0) => {
                        let _ = self.flush(c);
                        return Turn::Close;
                    }
                    Ok(_) => continue,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => {
                        self.failed = true;
                        return Turn::Close;
                    }
                }
            }
            match self.flush(c) {
                Ok(true) => {}
                // A job's turn ends in Later whatever the socket took: the job must be submitted.
                Ok(false) if matches!(progress, Progress::Later) => return Turn::Later,
                Ok(false) => return Turn::Wait,
                Err(_) => return Turn::Close,
            }
            match progress {
                Progress::Later => return Turn::Later,
                Progress::Close => return Turn::Close,
                Progress::Shutdown => return Turn::Shutdown,
                Progress::Budget => {
                    bump(&c.conn_yields, 1);
                    return Turn::Yield;
                }
                Progress::OutputFull => continue,
                Progress::NeedInput => {
                    self.shrink_idle();
                    return Turn::Wait;
                }
            }
        }
    }

    /// Parse and execute buffered requests.
    fn process(&mut self, sh: &Shared, c: &Counters, budget: &mut usize) -> Progress {
        let limits = text::Limits {
            item_size_max: sh.config.item_size_max,
            use_cas: sh.config.use_cas,
        };
        loop {
            if self.closing {
                return Progress::Close;
            }
            if self.shutdown {
                return Progress::Shutdown;
            }
            if self.swallow > 0 {
                let n = self.swallow.min(self.rend - self.rpos);
                self.rpos += n;
                self.swallow -= n;
                if self.swallow > 0 {
                    self.need = 1;
                    return Progress::NeedInput;
                }
                if let Some(reply) = self.after_swallow.take() {
                    reply.write(&mut self.wbuf);
                }
            }
            if self.large.is_some() {
                if let Some(p) = self.finish_large(sh, c, budget) {
                    return p;
                }
            }
            if self.wbuf.len() - self.wpos >= WBUF_HIGH {
                return Progress::OutputFull;
            }
            if let Some(dump) = &mut self.dump {
                // One store batch per request's worth of budget, so a long dump shares the
                // worker with its other connections; the output check above bounds memory.
                if *budget == 0 {
                    return Progress::Budget;
                }
                *budget -= 1;
                if dump.step(sh, &mut self.wbuf) {
                    self.dump = None;
                }
                continue;
            }
            if self.rpos == self.rend {
                self.need = 1;
                return Progress::NeedInput;
            }
            if *budget == 0 {
                return Progress::Budget;
            }
            let input = &self.rbuf[self.rpos..self.rend];
            if let Proto::Unknown = self.proto {
                self.proto = if input[0] == 0x80 {
                    Proto::Binary(BinSession::default())
                } else {
                    Proto::Text
                };
                // With -S, memcached serves only the binary protocol (the one SASL runs
                // over) and drops text connections: an open text port would bypass SASL.
                use crate::config::Protocols;
                let allowed = match (&self.proto, sh.config.protocol) {
                    (Proto::Text, Protocols::Binary) | (Proto::Binary(_), Protocols::Ascii) => {
                        false
                    }
                    (Proto::Text, _) => !sh.config.sasl,
                    _ => true,
                };
                if !allowed {
                    self.closing = true;
                    self.failed = true;
                    return Progress::Close;
                }
            }
            if let Proto::Binary(session) = &mut self.proto {
                let mut direct = DirectSend {
                    stream: &mut self.stream,
                    wpos: &mut self.wpos,
                    c,
                    zero_copy: sh.config.zero_copy,
                };
                match binary::step_direct(input, session, sh, c, &mut self.wbuf, Some(&mut direct))
                {
                    BinNext::Consumed(n) => {
                        *budget -= 1;
                        self.rpos += n;
                    }
                    BinNext::Incomplete(need) => {
                        self.need = need;
                        return Progress::NeedInput;
                    }
                    BinNext::Close => {
                        self.closing = true;
                        self.failed = true;
                        return Progress::Close;
                    }
                    BinNext::Later(n) => {
                        let job = session.job.take();
                        return self.defer(job, n, &limits, sh, budget);
                    }
                }
                continue;
            }
            match text::parse(input, &limits) {
                Parsed::Request(ref req, n) => {
                    *budget -= 1;
                    if sh.verbosity.load(std::sync::atomic::Ordering::Relaxed) > 1 {
                        let end = memchr::memchr(b'\n', input).unwrap_or(0);
                        eprintln!("<{}", String::from_utf8_lossy(&input[..end]).trim_end());
                    }
                    let next = if sh.config.text_auth && !self.authed {
                        protocol::text::unauthenticated(req, sh, &mut self.authed, &mut self.wbuf)
                    } else {
                        let mut direct = DirectSend {
                            stream: &mut self.stream,
                            wpos: &mut self.wpos,
                            c,
                            zero_copy: sh.config.zero_copy,
                        };
                        protocol::text::execute_from(
                            req,
                            self.resume,
                            sh,
                            c,
                            &mut self.wbuf,
                            &mut self.reads,
                            Some(&mut direct),
                        )
                    };
                    if let Next::Resume(done) = next {
                        // Leave the request in place; it continues once the output drains.
                        self.resume = done;
                        return Progress::OutputFull;
                    }
                    let stacked = std::mem::replace(
                        &mut self.stacked,
                        !matches!(req, text::Request::Get { .. }),
                    );
                    if let Next::Watch(h) = next {
                        // A watcher's turn never completes; the worker attaches it (watch.rs).
                        self.taken.push(n);
                        self.watcher = Some(h);
                        self.waiting = true;
                        return Progress::Later;
                    }
                    if let Next::Later(job) = next {
                        return self.defer(Some(job), n, &limits, sh, budget);
                    }
                    self.resume = 0;
                    self.rpos += n;
                    if let Next::Flush = next {
                        return Progress::OutputFull;
                    }
                    match next {
                        Next::Continue
                        | Next::Resume(_)
                        | Next::Flush
                        | Next::Later(_)
                        | Next::Watch(_) => {}
                        Next::Metadump(dump) => self.dump = dump.begin(stacked, sh, &mut self.wbuf),
                        Next::Swallow(s, reply) => {
                            self.swallow = s;
                            self.after_swallow = reply;
                        }
                        Next::Close => self.closing = true,
                        Next::Shutdown => self.shutdown = true,
                    }
                }
                Parsed::Error {
                    reply,
                    consumed,
                    noreply,
                } => {
                    *budget -= 1;
                    self.stacked = true;
                    if !noreply {
                        reply.write(&mut self.wbuf);
                    }
                    self.rpos += consumed;
                }
                Parsed::Incomplete(need) => {
                    if need - input.len() >= protocol::text::largeset::MISSING_MIN
                        && self.begin_large(sh, &limits)
                    {
                        continue;
                    }
                    self.need = need;
                    return Progress::NeedInput;
                }
                Parsed::Close => {
                    self.closing = true;
                    self.failed = true;
                    return Progress::Close;
                }
            }
        }
    }

    /// The request of `n` bytes at the front of the input made `job`: the request stays in
    /// place until the job's reply is in (`complete`), and the requests pipelined after it
    /// that the job can answer join it (a flash batch's: their flashed reads go together).
    fn defer(
        &mut self,
        mut job: Option<Pending>,
        n: usize,
        limits: &text::Limits,
        sh: &Shared,
        budget: &mut usize,
    ) -> Progress {
        self.taken.push(n);
        if let Some(job) = &mut job {
            let input = &self.rbuf[self.rpos + n..self.rend];
            job.gather(input, limits, sh, budget, &mut self.taken);
        }
        self.job = job;
        self.waiting = true;
        Progress::Later
    }

    /// A storage command at the front of the input waits for a large data block: receive it
    /// in place if it qualifies (protocol/text/largeset.rs). Not before -Y authentication, whose
    /// "set" carries credentials. Out of line: it must not weigh on the small-request loop.
    #[cold]
    #[inline(never)]
    fn begin_large(&mut self, sh: &Shared, limits: &text::Limits) -> bool {
        if sh.config.text_auth && !self.authed {
            return false;
        }
        let input = &self.rbuf[self.rpos..self.rend];
        let Some((large, n)) = protocol::text::largeset::begin(input, limits, sh) else {
            return false;
        };
        if sh.verbosity.load(std::sync::atomic::Ordering::Relaxed) > 1 {
            let end = memchr::memchr(b'\n', input).unwrap_or(0);
            eprintln!("<{}", String::from_utf8_lossy(&input[..end]).trim_end());
        }
        self.rpos += n;
        self.large = Some(large);
        true
    }

    /// The value being received in place: None once it is stored (or refused) and its reply
    /// written, else what the connection waits for.
    #[inline(never)]
    fn finish_large(&mut self, sh: &Shared, c: &Counters, budget: &mut usize) -> Option<Progress> {
        let whole = self.large.as_ref().is_some_and(|l| l.complete());
        if !whole || self.rend - self.rpos < 2 {
            // While the value is incomplete fill() reads into it; then the two bytes after it.
            self.need = 2;
            return Some(Progress::NeedInput);
        }
        let large = self.large.take()?;
        large.finish(&self.rbuf[self.rpos..self.rpos + 2], sh, c, &mut self.wbuf);
        self.rpos += 2;
        *budget = budget.saturating_sub(1);
        None
    }

    /// Write pending output. Ok(true): all written; Ok(false): the socket is full.
    fn flush(&mut self, c: &Counters) -> io::Result<bool> {
        // The io_uring loop takes the whole output buffer rather than a copy of it.
        if self.wpos == 0 && !self.wbuf.is_empty() {
            let n = self.wbuf.len();
            if self.stream.take_output(&mut self.wbuf) {
                bump(&c.bytes_written, n as u64);
            }
        }
        while self.wpos < self.wbuf.len() {
            match self.stream.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    bump(&c.bytes_written, n as u64);
                    self.wpos += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        self.reads.clear();
        self.stacked = false;
        // TLS: rustls took the plaintext; its records may still wait for the socket.
        self.stream.send_pending()
    }

    /// Read once into the input buffer, making room for what the parser asked for.
    fn fill(&mut self, c: &Counters) -> io::Result<usize> {
        if let Some(large) = self.large.as_mut().filter(|l| !l.complete()) {
            // Everything buffered went into the value; what follows it lands in rbuf.
            debug_assert_eq!(self.rpos, self.rend);
            let rest = large.rest_mut();
            let want = rest.len();
            // TLS reads one buffer at a time: a read that fills the value may leave the
            // plaintext after it inside the session, so only a short one says "drained".
            let (n, room) = if self.stream.socket().is_tls() {
                (self.stream.read(rest)?, want)
            } else {
                let mut iov = [
                    io::IoSliceMut::new(rest),
                    io::IoSliceMut::new(&mut self.rbuf),
                ];
                (self.stream.read_vectored(&mut iov)?, want + self.rbuf.len())
            };
            large.received(n.min(want));
            (self.rpos, self.rend) = (0, n.saturating_sub(want));
            self.drained =
                n > 0 && n < room && !self.read_closed && self.stream.short_read_drains();
            bump(&c.bytes_read, n as u64);
            return Ok(n);
        }
        if self.rpos == self.rend {
            self.rpos = 0;
            self.rend = 0;
        }
        let pending = self.rend - self.rpos;
        let want = self.need.max(pending + 1);
        if self.rpos + want > self.rbuf.len() || self.rbuf.len() - self.rend < READ_CHUNK / 4 {
            if self.rbuf.is_empty() {
                return self.fill_first(c);
            }
            // Move the unparsed bytes to the front before growing.
            self.rbuf.copy_within(self.rpos..self.rend, 0);
            self.rpos = 0;
            self.rend = pending;
            if want > self.rbuf.len() {
                let size = want.max(self.rbuf.len() * 2);
                self.rbuf.resize(size, 0);
            }
        }
        let room = self.rbuf.len() - self.rend;
        let n = self.stream.read(&mut self.rbuf[self.rend..])?;
        self.drained = n > 0 && n < room && !self.read_closed && self.stream.short_read_drains();
        self.rend += n;
        bump(&c.bytes_read, n as u64);
        Ok(n)
    }

    /// A read with no input buffer held (a new connection, or one the sweep found idle): take
    /// the buffers, and give them back at once if the read brought nothing, so that a
    /// connection that has sent nothing yet holds none. Out of line: the steady path's reads
    /// never come here.
    #[cold]
    #[inline(never)]
    fn fill_first(&mut self, c: &Counters) -> io::Result<usize> {
        debug_assert!(self.rpos == 0 && self.rend == 0);
        self.rbuf = vec![0; READ_CHUNK.max(self.need)];
        if self.wbuf.capacity() == 0 {
            self.wbuf.reserve(READ_CHUNK);
        }
        let n = self.stream.read(&mut self.rbuf);
        if let Ok(n) = n {
            self.drained = n > 0
                && n < self.rbuf.len()
                && !self.read_closed
                && self.stream.short_read_drains();
            self.rend = n;
            bump(&c.bytes_read, n as u64);
        }
        if let (true, Some(due)) = (self.rend > 0, &self.sweep_due) {
            due.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if self.rend == 0 {
            self.rbuf = Vec::new();
            if self.wbuf.is_empty() {
                self.wbuf = Vec::new();
            }
        }
        n
    }

    /// Give back buffers a big request grew, once nothing is pending in them.
    fn shrink_idle(&mut self) {
        if self.rpos == self.rend && self.rbuf.len() > BUF_KEEP {
            self.rbuf = vec![0; READ_CHUNK];
            self.rpos = 0;
            self.rend = 0;
        }
        if self.wbuf.is_empty() && self.wbuf.capacity() > BUF_KEEP {
            self.wbuf = Vec::with_capacity(READ_CHUNK);
        }
    }
}
