//! The per-thread event loop: one mio `Poll` (epoll) per thread, owning its connections.
//!
//! ```text
//!   thread t ── Poll ──┬── conn 0: wbuf (reused) ─ write ─>  server
//!                      │           rbuf (reused) <─ read ──  (replies scanned in place,
//!                      │           in flight: FIFO of (t0, kind, keys)   values skipped)
//!                      ├── conn 1 ...
//!                      └── rate mode: one schedule; request k is due at start + k/rate and
//!                          goes to conn k mod n; its latency counts from that due time.
//! ```
//!
//! Closed loop (`--rate` not given): a connection sends `pipeline` requests in one write and
//! sends the next batch when the whole batch is answered (`--refill`: as soon as any reply
//! arrives, keeping `pipeline` in flight). Latency = reply read - batch sent.
//!
//! Look-aside (`--look-aside`): a get that misses puts its key on the connection's `refill`
//! queue, and that connection's next request is a set of the key (what a cache user does after
//! reading the backend), before any random draw. Those sets are requests of the run like any
//! other: they count in ops, sets, the latencies and `--requests`.
//!
//! Fixed rate: requests are due on a schedule whatever the server does; a request that cannot
//! go out (its connection has `pipeline` in flight) waits in that connection's backlog, and its
//! latency still counts from when it was due. That is the coordinated-omission correction: a
//! stalled server shows as the latency every scheduled request would have seen, not as one slow
//! sample.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use super::encode;
use super::rng::Rng;
use super::scan::{Class, Reply, Scanner, MAX_LINE};
use super::timer::Timer;
use super::Config;

/// Per-connection read buffer: large values (100 KB) arrive in few reads.
const RBUF: usize = 256 * 1024;
/// Value bodies this long or longer are dropped inside the kernel (recv with MSG_TRUNC)
/// instead of copied out: the generator never looks at them, and with 100 KB values that copy
/// cost the load core as much as the server's whole reply, so the generator, not the server,
/// set the pace (workload d).
const TRUNC_MIN: usize = 16 * 1024;
/// With values that long, a read takes at most this much: the reply's line and the body's
/// first bytes; the rest of the body is dropped as above.
const HEAD_READ: usize = 4096;
const TIMER: Token = Token(usize::MAX);
/// Histograms hold nanoseconds up to a minute, 3 significant digits.
const HIST_MAX_NS: u64 = 60_000_000_000;

/// Counters and latencies of one thread (merged across threads for the report).
pub struct Stats {
    pub ops: u64,
    pub gets: u64,
    pub sets: u64,
    pub get_keys: u64,
    pub hits: u64,
    /// Value bytes the get replies carried (their VALUE lines' lengths).
    pub value_bytes: u64,
    /// Look-aside: sets sent because a get missed (included in `sets`).
    pub refills: u64,
    /// ERROR / CLIENT_ERROR / SERVER_ERROR replies, and replies of the wrong kind.
    pub errors: u64,
    /// Set replies other than STORED (NOT_STORED and the like).
    pub not_stored: u64,
    pub all: Histogram<u64>,
    pub get: Histogram<u64>,
    pub set: Histogram<u64>,
    /// Fixed rate: how late each request left after its due time (the client's own lag, which
    /// the latencies above include).
    pub lag: Histogram<u64>,
    /// Length of the measured window in ns.
    pub elapsed_ns: u64,
}

impl Stats {
    pub fn new() -> Stats {
        let h = || Histogram::new_with_bounds(1, HIST_MAX_NS, 3).expect("histogram bounds");
        Stats {
            ops: 0,
            gets: 0,
            sets: 0,
            get_keys: 0,
            hits: 0,
            value_bytes: 0,
            refills: 0,
            errors: 0,
            not_stored: 0,
            all: h(),
            get: h(),
            set: h(),
            lag: h(),
            elapsed_ns: 0,
        }
    }

    pub fn merge(&mut self, o: &Stats) {
        self.ops += o.ops;
        self.gets += o.gets;
        self.sets += o.sets;
        self.get_keys += o.get_keys;
        self.hits += o.hits;
        self.value_bytes += o.value_bytes;
        self.refills += o.refills;
        self.errors += o.errors;
        self.not_stored += o.not_stored;
        self.all.add(&o.all).expect("same bounds");
        self.get.add(&o.get).expect("same bounds");
        self.set.add(&o.set).expect("same bounds");
        self.lag.add(&o.lag).expect("same bounds");
        self.elapsed_ns = self.elapsed_ns.max(o.elapsed_ns);
    }
}

/// What a connection sends.
#[derive(Clone, Debug)]
pub enum Plan {
    /// Random sets and gets by the configured ratio, keys, sizes and multi-get width.
    Mixed,
    /// Sets of keys `next, next + stride, ...` below the key space, then nothing.
    Prefill { next: u64, stride: u64 },
}

/// A thread's share of the run.
pub struct Job {
    /// Global indices of this thread's connections (they seed the per-connection PRNGs).
    pub conns: std::ops::Range<usize>,
    pub plan: Plan,
    pub pipeline: usize,
    pub refill: bool,
    /// Requests this thread may send (requests bound); None: until the deadline.
    pub budget: Option<u64>,
    /// Requests per second for this thread (fixed-rate mode).
    pub rate: Option<f64>,
}

#[derive(Clone, Copy)]
struct Pending {
    /// Send time (closed loop) or due time (fixed rate), ns since the thread's start.
    t0: u64,
    keys: u32,
    is_set: bool,
    /// A get's (first) key: what a look-aside miss sets.
    key: u64,
    /// A look-aside set (sent because a get missed).
    refill: bool,
}

struct Conn {
    sock: TcpStream,
    wbuf: Vec<u8>,
    wpos: usize,
    rbuf: Box<[u8]>,
    rstart: usize,
    rend: usize,
    scanner: Scanner,
    inflight: VecDeque<Pending>,
    /// Look-aside: keys whose get missed, set before anything else is drawn.
    refill: VecDeque<u64>,
    /// Fixed rate: due times of requests not yet sent.
    backlog: VecDeque<u64>,
    rng: Rng,
    plan: Plan,
}

/// Connects, waits for every other thread at `barrier`, then runs `job` to its bound.
pub fn run(cfg: &Config, job: Job, barrier: &std::sync::Barrier) -> io::Result<Stats> {
    let mut poll = Poll::new()?;
    let mut conns = Vec::with_capacity(job.conns.len());
    let connected = connect_all(cfg, &job, &mut poll, &mut conns);
    // Every thread reaches the barrier even on error, so none waits forever.
    barrier.wait();
    connected?;
    Loop::new(cfg, job, poll, conns)?.run()
}

fn connect_all(cfg: &Config, job: &Job, poll: &mut Poll, conns: &mut Vec<Conn>) -> io::Result<()> {
    for (i, global) in job.conns.clone().enumerate() {
        let std_sock = std::net::TcpStream::connect_timeout(&cfg.server, Duration::from_secs(5))
            .map_err(|e| io::Error::new(e.kind(), format!("connect to {}: {e}", cfg.server)))?;
        std_sock.set_nodelay(true)?;
        std_sock.set_nonblocking(true)?;
        let mut sock = TcpStream::from_std(std_sock);
        poll.registry()
            .register(&mut sock, Token(i), Interest::READABLE | Interest::WRITABLE)?;
        let plan = match job.plan {
            Plan::Mixed => Plan::Mixed,
            Plan::Prefill { stride, .. } => Plan::Prefill {
                next: global as u64,
                stride,
            },
        };
        conns.push(Conn {
            sock,
            wbuf: Vec::with_capacity(4096),
            wpos: 0,
            rbuf: vec![0u8; RBUF].into_boxed_slice(),
            rstart: 0,
            rend: 0,
            scanner: Scanner::new(),
            inflight: VecDeque::with_capacity(job.pipeline),
            refill: VecDeque::new(),
            backlog: VecDeque::new(),
            rng: Rng::for_stream(cfg.seed, global as u64),
            plan,
        });
    }
    Ok(())
}

struct Loop<'a> {
    cfg: &'a Config,
    job: Job,
    poll: Poll,
    conns: Vec<Conn>,
    stats: Stats,
    start: Instant,
    /// Replies completing before this (ns since start) are not recorded (warm-up).
    measure_from: u64,
    /// No request is sent, nor reply recorded, from this time on (duration bound).
    measure_until: u64,
    value_blob: Vec<u8>,
    /// Fixed rate: index of the next scheduled request, ns between requests, next connection.
    next_k: u64,
    interval_ns: f64,
    rr: usize,
    timer: Option<Timer>,
    last_progress: u64,
}

impl<'a> Loop<'a> {
    fn new(cfg: &'a Config, job: Job, poll: Poll, conns: Vec<Conn>) -> io::Result<Loop<'a>> {
        let warm = cfg.warmup.as_nanos() as u64;
        let until = match (&job.plan, cfg.duration) {
            (Plan::Mixed, Some(d)) => warm + d.as_nanos() as u64,
            _ => u64::MAX,
        };
        let interval_ns = job.rate.map_or(0.0, |r| 1e9 / r);
        let timer = if job.rate.is_some() {
            Some(Timer::new(poll.registry(), TIMER)?)
        } else {
            None
        };
        Ok(Loop {
            cfg,
            poll,
            conns,
            stats: Stats::new(),
            start: Instant::now(),
            measure_from: if matches!(job.plan, Plan::Mixed) {
                warm
            } else {
                0
            },
            measure_until: until,
            value_blob: encode::value_blob(cfg.value_max),
            next_k: 0,
            interval_ns,
            rr: 0,
            timer,
            last_progress: 0,
            job,
        })
    }

    #[inline]
    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn run(mut self) -> io::Result<Stats> {
        let mut events = Events::with_capacity(1024);
        let n = self.conns.len();
        let timeout_ns = self.cfg.timeout.as_nanos() as u64;
        if self.job.rate.is_none() {
            for i in 0..n {
                self.send_more(i, 0)?;
            }
        }
        loop {
            let mut now = self.now();
            if self.job.rate.is_some() {
                self.schedule(now)?;
            }
            if now >= self.measure_until || self.finished() {
                break;
            }
            let wait = if self.cfg.busy_poll {
                0
            } else {
                self.measure_until.saturating_sub(now).min(1_000_000_000)
            };
            let due = self.due(self.next_k);
            if let Some(timer) = self.timer.as_mut() {
                if !matches!(self.job.budget, Some(0)) && due < self.measure_until {
                    timer.arm(due, now)?;
                }
            }
            self.poll
                .poll(&mut events, Some(Duration::from_nanos(wait)))?;
            now = self.now();
            for ev in events.iter() {
                if ev.token() == TIMER {
                    if let Some(t) = self.timer.as_mut() {
                        t.fired();
                    }
                    continue;
                }
                let i = ev.token().0;
                if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                    self.read(i, now)?;
                }
                if ev.is_writable() {
                    flush(&mut self.conns[i])?;
                }
                self.send_more(i, now)?;
            }
            if events.is_empty()
                && self.conns.iter().any(|c| !c.inflight.is_empty())
                && now - self.last_progress > timeout_ns
            {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no reply from {} for {:?}",
                        self.cfg.server, self.cfg.timeout
                    ),
                ));
            }
        }
        let end = self.now().min(self.measure_until);
        self.stats.elapsed_ns = end.saturating_sub(self.measure_from);
        // One record per reply in the hot path; the overall histogram is their sum.
        self.stats.all.add(&self.stats.get).expect("same bounds");
        self.stats.all.add(&self.stats.set).expect("same bounds");
        Ok(self.stats)
    }

    fn due(&self, k: u64) -> u64 {
        (k as f64 * self.interval_ns) as u64
    }

    fn budget_left(&self) -> bool {
        !matches!(self.job.budget, Some(0))
    }

    fn finished(&self) -> bool {
        let nothing_to_send = match self.job.plan {
            Plan::Mixed => !self.budget_left(),
            Plan::Prefill { .. } => self.conns.iter().all(|c| self.prefill_done(c)),
        };
        nothing_to_send
            && self
                .conns
                .iter()
                .all(|c| c.inflight.is_empty() && c.backlog.is_empty())
    }

    fn prefill_done(&self, c: &Conn) -> bool {
        matches!(c.plan, Plan::Prefill { next, .. } if next >= self.cfg.keys)
    }

    /// Fixed rate: hands every request due by `now` to a connection, then sends what fits.
    fn schedule(&mut self, now: u64) -> io::Result<()> {
        let n = self.conns.len();
        loop {
            let due = self.due(self.next_k);
            if due > now || due >= self.measure_until || !self.budget_left() {
                break;
            }
            if let Some(b) = self.job.budget.as_mut() {
                *b -= 1;
            }
            self.conns[self.rr].backlog.push_back(due);
            self.rr = (self.rr + 1) % n;
            self.next_k += 1;
        }
        for i in 0..n {
            if !self.conns[i].backlog.is_empty() {
                self.send_more(i, now)?;
            }
        }
        Ok(())
    }

    /// Reads everything the socket has, scanning replies as they come.
    fn read(&mut self, i: usize, now: u64) -> io::Result<()> {
        let (from, until) = (self.measure_from, self.measure_until);
        let large = self.cfg.value_max >= TRUNC_MIN;
        let c = &mut self.conns[i];
        loop {
            let skip = c.scanner.skipping();
            if large && skip >= TRUNC_MIN && c.rstart == c.rend {
                match drop_bytes(&c.sock, skip) {
                    Ok(0) => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "server closed the connection",
                        ))
                    }
                    Ok(n) => {
                        c.scanner.skipped(n);
                        self.last_progress = now;
                        if n < skip {
                            return Ok(()); // short: the socket is drained
                        }
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
            let end = if large {
                c.rbuf.len().min(c.rend + HEAD_READ)
            } else {
                c.rbuf.len()
            };
            let space = end - c.rend;
            let got = match c.sock.read(&mut c.rbuf[c.rend..end]) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "server closed the connection",
                    ))
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            c.rend += got;
            let stats = &mut self.stats;
            let inflight = &mut c.inflight;
            let refill = &mut c.refill;
            let look_aside = self.cfg.look_aside;
            let mut bad = None;
            let used = c
                .scanner
                .scan(&c.rbuf[c.rstart..c.rend], |reply| {
                    let Some(p) = inflight.pop_front() else {
                        bad = Some("reply without a request");
                        return;
                    };
                    // Warm-up misses are refilled too: the set is the miss's cost, not the window's.
                    if look_aside && !p.is_set && matches!(reply, Reply::Get { hits: 0, .. }) {
                        refill.push_back(p.key);
                    }
                    if now >= from && now < until {
                        record(stats, p, reply, now);
                    }
                })
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            if let Some(why) = bad {
                return Err(io::Error::new(io::ErrorKind::InvalidData, why));
            }
            self.last_progress = now;
            c.rstart += used;
            if c.rstart == c.rend {
                c.rstart = 0;
                c.rend = 0;
            } else if c.rbuf.len() - c.rend < MAX_LINE * 2 {
                c.rbuf.copy_within(c.rstart..c.rend, 0);
                c.rend -= c.rstart;
                c.rstart = 0;
            }
            // Edge-triggered: a short read drained the socket; new data raises a new edge.
            if got < space {
                return Ok(());
            }
        }
    }

    /// Builds and sends the requests connection `i` may send now, in one write.
    fn send_more(&mut self, i: usize, now: u64) -> io::Result<()> {
        let depth = self.job.pipeline;
        let rate_mode = self.job.rate.is_some();
        let c = &mut self.conns[i];
        let room = if rate_mode {
            (depth - c.inflight.len().min(depth)).min(c.backlog.len())
        } else if self.job.refill || c.inflight.is_empty() {
            depth - c.inflight.len().min(depth)
        } else {
            0
        };
        if room == 0 || now >= self.measure_until {
            return Ok(());
        }
        if c.wpos == c.wbuf.len() {
            c.wbuf.clear();
            c.wpos = 0;
        }
        let cfg = self.cfg;
        let mut built = 0;
        for _ in 0..room {
            let t0 = if rate_mode {
                let due = c.backlog.pop_front().expect("room <= backlog");
                if now >= self.measure_from {
                    self.stats
                        .lag
                        .saturating_record(now.saturating_sub(due).max(1));
                }
                due
            } else {
                match self.job.budget.as_mut() {
                    Some(0) => break,
                    Some(b) => *b -= 1,
                    None => {}
                }
                now
            };
            let Some(p) = build_request(cfg, c, &self.value_blob, t0) else {
                break;
            };
            c.inflight.push_back(p);
            built += 1;
        }
        if built > 0 {
            if c.inflight.len() == built {
                self.last_progress = self.last_progress.max(now);
            }
            flush(c)?;
        }
        Ok(())
    }
}

/// Appends one request to `c.wbuf`; None when the plan has nothing left.
#[inline]
fn build_request(cfg: &Config, c: &mut Conn, blob: &[u8], t0: u64) -> Option<Pending> {
    match &mut c.plan {
        Plan::Prefill { next, stride } => {
            if *next >= cfg.keys {
                return None;
            }
            let id = *next;
            *next += *stride;
            let len = c
                .rng
                .range_inclusive(cfg.value_min as u64, cfg.value_max as u64)
                as usize;
            encode::set(&mut c.wbuf, &cfg.key_format, id, &blob[..len]);
            Some(Pending {
                t0,
                keys: 1,
                is_set: true,
                key: id,
                refill: false,
            })
        }
        Plan::Mixed => {
            if let Some(id) = c.refill.pop_front() {
                let len = c
                    .rng
                    .range_inclusive(cfg.value_min as u64, cfg.value_max as u64)
                    as usize;
                encode::set(&mut c.wbuf, &cfg.key_format, id, &blob[..len]);
                return Some(Pending {
                    t0,
                    keys: 1,
                    is_set: true,
                    key: id,
                    refill: true,
                });
            }
            let total = cfg.set_weight as u64 + cfg.get_weight as u64;
            if c.rng.below(total) < cfg.set_weight as u64 {
                let id = cfg.pick_key(&mut c.rng);
                let len = c
                    .rng
                    .range_inclusive(cfg.value_min as u64, cfg.value_max as u64)
                    as usize;
                encode::set(&mut c.wbuf, &cfg.key_format, id, &blob[..len]);
                Some(Pending {
                    t0,
                    keys: 1,
                    is_set: true,
                    key: id,
                    refill: false,
                })
            } else {
                let rng = &mut c.rng;
                let mut first = 0;
                encode::get(
                    &mut c.wbuf,
                    &cfg.key_format,
                    (0..cfg.multiget).map(|i| {
                        let k = cfg.pick_key(rng);
                        if i == 0 {
                            first = k;
                        }
                        k
                    }),
                );
                Some(Pending {
                    t0,
                    keys: cfg.multiget as u32,
                    is_set: false,
                    key: first,
                    refill: false,
                })
            }
        }
    }
}

#[inline]
fn record(stats: &mut Stats, p: Pending, reply: Reply, now: u64) {
    let lat = now.saturating_sub(p.t0).max(1);
    stats.ops += 1;
    if p.is_set {
        stats.sets += 1;
        stats.refills += u64::from(p.refill);
        stats.set.saturating_record(lat);
        match reply {
            Reply::Stored => {}
            Reply::Other(Class::Status) => stats.not_stored += 1,
            _ => stats.errors += 1,
        }
    } else {
        stats.gets += 1;
        stats.get_keys += p.keys as u64;
        stats.get.saturating_record(lat);
        match reply {
            Reply::Get { hits, bytes } => {
                stats.hits += hits as u64;
                stats.value_bytes += bytes;
            }
            _ => stats.errors += 1,
        }
    }
}

/// Writes what is pending; the rest goes when the socket reports writable.
fn flush(c: &mut Conn) -> io::Result<()> {
    while c.wpos < c.wbuf.len() {
        match c.sock.write(&c.wbuf[c.wpos..]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "server closed the connection",
                ))
            }
            Ok(n) => c.wpos += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads and discards up to `len` bytes of `sock` without copying them (TCP's MSG_TRUNC).
fn drop_bytes(sock: &TcpStream, len: usize) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: with MSG_TRUNC a TCP socket discards the bytes and writes nothing to the buffer.
    let n = unsafe {
        libc::recv(
            sock.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            libc::MSG_TRUNC | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}
