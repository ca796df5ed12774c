//! The connection layer: what a worker does with its connections, whichever loop moves their
//! bytes. It owns the slots, adopting and closing, the turns (-R yields), the read-ahead and
//! `-o idle_timeout`; a [`Transport`] (epoll.rs, uring.rs) owns only the waiting and the I/O.
//!
//! ```text
//!   Worker<T>::run, one iteration:
//!     T::poll(wait)            wait (no wait while -R yielders wait; IDLE_SWEEP at most with
//!                              idle_timeout), mark the slots with work, say if woken
//!     share                    held the core for RUN_BUDGET without a switch: offer it
//!                              (share.rs; only where the workers outnumber the cores)
//!     adopt                    if woken: every socket in the channel gets a slot and a turn
//!     deliver                  if woken: finished jobs' replies (jobs.rs) go to their
//!                              connections, which are marked for a turn
//!     sweep                    if woken, once per clock tick, if due (below)
//!     read-ahead               the marked connections' first reads, then prefetches
//!     drive each marked slot   T::before_turn, Conn::turn, Turn -> yield | close, T::settle
//!     drive the -R yielders    (those of the round before)
//!     -o idle_timeout:         once per clock tick, kick idle connections, and the sweep
//! ```
//!
//! Memory at rest (issue 36): a connection takes its input and output buffers when input first
//! arrives (conn.rs `fill`) and keeps them while it is busy; the sweep, once per clock tick
//! while any connection may hold some, gives back the buffers of every connection that has
//! completed no command for a whole second and has nothing pending ([`Conn::release_idle`]).
//! A connection taking buffers, a close, or a sweep that left work sets the worker's "sweep
//! due" flag; the ticker (worker.rs) wakes the worker once a second while it is set. So the
//! worker still waits without a timeout and reads the clock only in rounds it was woken in.
//! A sweep that finds nothing read since the last one also gives back the loop's own idle
//! memory (io_uring: the receive buffers' pages).
//! Nothing is taken or given back on a request's path: a busy connection is never swept, and
//! one that is swept pays one allocation on its next request. After closes or sweeps have
//! freed many buffers, the sweep also drops the slots past the last one in use and returns the
//! heap's free pages to the system (`malloc_trim`), so waves of connections leave nothing
//! behind.
//!
//! A slot's index and generation name its connection to the loop (an epoll token, an
//! io_uring tag) and to the job pool (a job's reply); a slot is reused only once its
//! transport holds nothing of the old one, and under a new generation, so a reply for a
//! closed connection is dropped, never given to the slot's next one.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

use mnemo_store::{Prefetch, PREFETCH_HEAD};

use super::share::{self, CoreShare, RUN_BUDGET};
use crate::admin::stats::{bump, Counters};
use crate::conn::{Conn, Io, Stream, Turn};
use crate::offload::mailbox::Mailbox;
use crate::offload::Job;
use crate::Shared;

/// Polls with fewer events than this, or read-aheads that bring fewer keys, prefetch nothing:
/// each pass would follow the one before too closely for its lines to have arrived.
const READ_AHEAD_MIN: usize = 4;

/// With `-o idle_timeout`, the longest a worker waits before looking for idle connections.
const IDLE_SWEEP: Duration = Duration::from_millis(250);

/// Seconds without a completed command before an idle connection's buffers go back: 2 is a
/// whole second at least (the clock counts whole seconds), so a connection in steady use is
/// never swept between its requests.
const BUF_IDLE_SECS: u32 = 2;

/// Connections closed or swept since the heap was last trimmed that make the sweep trim it
/// (and drop free trailing slots): 64 pairs of 16 KiB buffers, 2 MiB.
const TRIM_AFTER: usize = 64;

/// How one event loop waits and moves bytes. Everything else about a connection is the
/// [`Worker`]'s.
pub trait Transport {
    /// What a connection reads from and writes to on this loop.
    type Io: Io;

    /// On the worker's own thread, before the first wait.
    fn start(&mut self) {}

    /// Take a socket from the accept thread for slot `i`, generation `gen`. An error refuses
    /// it (the socket closes).
    fn attach(&mut self, sock: Stream, i: usize, gen: u32) -> std::io::Result<Self::Io>;

    /// Wait for events (no longer than `wait`; None: until one comes) and mark the slots they
    /// concern ([`Slots::mark`]). Returns whether the accept thread woke the worker.
    fn poll(&mut self, wait: Option<Duration>, slots: &mut Slots<Self::Io>) -> bool;

    /// Just before a connection's turn.
    #[inline]
    fn before_turn(&mut self, _io: &mut Self::Io) {}

    /// After a turn of slot `i` (or, on this loop's own account, an I/O completion): move what
    /// the connection queued. With `closed`, the connection is closed: stop its I/O and say
    /// (true) once the loop holds nothing of it, so its descriptor may close.
    fn settle(&mut self, i: usize, gen: u32, io: &mut Self::Io, closed: bool) -> bool;

    /// After a turn and its settling.
    #[inline]
    fn after_turn(&mut self) {}

    /// The worker is quiet (no turn for a whole clock tick), at the end of a round: give back
    /// memory the loop touched for its connections and does not need until more input comes.
    fn release_idle(&mut self) {}
}

struct Slot<S> {
    gen: u32,
    conn: Option<Conn<S>>,
    /// Closed: its transport is finishing with it before the slot is reused.
    closed: bool,
    /// Queued for a turn in this iteration.
    marked: bool,
    /// Input may have arrived (the read-ahead reads only these).
    readable: bool,
}

/// A worker's connections by slot, and the slots marked for a turn in this iteration.
pub struct Slots<S> {
    slots: Vec<Slot<S>>,
    free: Vec<usize>,
    marked: Vec<usize>,
}

impl<S: Io> Slots<S> {
    /// Slot `i` has work: take a turn (or, once closed, settle) in this iteration.
    #[inline]
    pub fn mark(&mut self, i: usize, readable: bool) {
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        slot.readable |= readable;
        if !slot.marked {
            slot.marked = true;
            self.marked.push(i);
        }
    }

    /// Slot `i`'s connection (open, or closed and still settling).
    pub fn conn_mut(&mut self, i: usize) -> Option<&mut Conn<S>> {
        self.slots.get_mut(i)?.conn.as_mut()
    }

    /// Slot `i`'s stream, if `current(gen)` says the slot's generation is the one the event
    /// was for.
    pub fn io(&mut self, i: usize, current: impl Fn(u32) -> bool) -> Option<&mut S> {
        let slot = self.slots.get_mut(i)?;
        if !current(slot.gen) {
            return None;
        }
        slot.conn.as_mut().map(|c| &mut c.stream)
    }

    /// Let the transport move slot `i`'s bytes; free the slot once a closed connection is done.
    #[inline]
    pub fn settle<T: Transport<Io = S>>(&mut self, io: &mut T, i: usize) {
        let slot = &mut self.slots[i];
        let Some(conn) = slot.conn.as_mut() else {
            return;
        };
        if io.settle(i, slot.gen, &mut conn.stream, slot.closed) {
            // The descriptor closes here, with the connection.
            slot.conn = None;
            slot.closed = false;
            self.free.push(i);
        }
    }

    /// A slot for a new connection: a free one, or a new one (counted in conn_structs).
    fn take(&mut self, sh: &Shared) -> usize {
        if let Some(i) = self.free.pop() {
            return i;
        }
        self.slots.push(Slot {
            gen: 0,
            conn: None,
            closed: false,
            marked: false,
            readable: false,
        });
        sh.conn_counts.structs.fetch_add(1, Relaxed);
        self.slots.len() - 1
    }
}

/// One worker: its connections and the loop that serves them.
pub struct Worker<T: Transport> {
    io: T,
    incoming: Receiver<Stream>,
    sh: Arc<Shared>,
    counters: Arc<Counters>,
    slots: Slots<T::Io>,
    /// Connections that spent their request budget with work left (memcached's -R yield).
    ready: Vec<usize>,
    /// The yielders being driven this round (kept for its allocation).
    yielded: Vec<usize>,
    ahead: ReadAhead,
    /// Where the job pool leaves this worker's replies.
    mailbox: Arc<Mailbox>,
    /// The generation of the last connection adopted (slots name connections by index and
    /// generation; counted per worker, so that a slot dropped by the sweep and made again
    /// never repeats a generation a job's reply may still carry).
    gen: u32,
    /// Memory at rest (module docs): the last sweep left some connection holding buffers;
    /// connections closed or swept since the heap was last trimmed; the loop served something
    /// since it last gave back its own memory; `bytes_read` at the last sweep (it moved: the
    /// worker served since); and whether a sweep is due, set by a connection taking buffers,
    /// a close, or a sweep that left work, read by the ticker ([`crate::worker::Ticker`]).
    holding: usize,
    freed: usize,
    touched: bool,
    read_at_sweep: u64,
    pub(super) sweep_due: Arc<std::sync::atomic::AtomicBool>,
    /// How long it has held its core (share.rs); None when the workers do not outnumber the
    /// cores they may run on (`share::needed`), where no worker waits behind another.
    share: Option<CoreShare>,
}

impl<T: Transport> Worker<T> {
    pub fn new(
        io: T,
        sh: Arc<Shared>,
        counters: Arc<Counters>,
        incoming: Receiver<Stream>,
        mailbox: Arc<Mailbox>,
    ) -> Self {
        Worker {
            io,
            incoming,
            counters,
            slots: Slots {
                slots: Vec::new(),
                free: Vec::new(),
                marked: Vec::new(),
            },
            ready: Vec::new(),
            yielded: Vec::new(),
            ahead: ReadAhead::default(),
            mailbox,
            gen: 0,
            holding: 0,
            freed: 0,
            touched: false,
            read_at_sweep: 0,
            sweep_due: Arc::default(),
            share: share::needed(sh.config.threads).then(|| CoreShare::new(RUN_BUDGET)),
            sh,
        }
    }

    pub fn run(mut self) {
        self.io.start();
        let idle_timeout = self.sh.config.ext.idle_timeout;
        let mut last_sweep = self.sh.clock.now();
        loop {
            self.round(idle_timeout, &mut last_sweep);
        }
    }

    /// One iteration of the loop (module doc); `last_sweep` is the clock tick of the last
    /// look for idle connections.
    fn round(&mut self, idle_timeout: u32, last_sweep: &mut mnemo_store::Time) {
        let wait = if !self.ready.is_empty() {
            Some(Duration::ZERO)
        } else if idle_timeout > 0 {
            Some(IDLE_SWEEP)
        } else {
            None
        };
        let woken = self.io.poll(wait, &mut self.slots);
        // After the wait, with the last round's replies on their way: the core's other
        // workers get their turn (share.rs).
        if let Some(share) = self.share.as_mut() {
            share.check();
        }
        if woken {
            self.adopt();
            self.deliver();
            // The ticker's wakes come this way (worker.rs): the clock is read only when woken.
            if idle_timeout == 0 {
                self.tick(0, last_sweep);
            }
        }
        self.read_ahead();
        let mut k = 0;
        while k < self.slots.marked.len() {
            let i = self.slots.marked[k];
            let slot = &mut self.slots.slots[i];
            (slot.marked, slot.readable) = (false, false);
            self.drive(i);
            k += 1;
        }
        self.slots.marked.clear();
        if !self.ready.is_empty() {
            std::mem::swap(&mut self.ready, &mut self.yielded);
            for k in 0..self.yielded.len() {
                self.drive(self.yielded[k]);
            }
            self.yielded.clear();
        }
        if idle_timeout > 0 {
            self.tick(idle_timeout, last_sweep);
        }
    }

    /// Once per clock tick: -o idle_timeout's kicks, and the sweep if one is due.
    fn tick(&mut self, idle_timeout: u32, last_sweep: &mut mnemo_store::Time) {
        let now = self.sh.clock.now();
        // The clock moves once a second: one look per tick at most.
        if now != *last_sweep {
            *last_sweep = now;
            if idle_timeout > 0 {
                self.kick_idle(now, idle_timeout);
            }
            if self.sweep_due.load(Relaxed) {
                self.sweep(now);
            }
        }
    }

    /// Every socket waiting in the channel: a slot, a `stats conns` row, and a first turn
    /// (data may have arrived before the loop watched the socket).
    fn adopt(&mut self) {
        while let Ok(sock) = self.incoming.try_recv() {
            let i = self.slots.take(&self.sh);
            self.gen = self.gen.wrapping_add(1);
            let gen = self.gen;
            let Ok(io) = self.io.attach(sock, i, gen) else {
                self.slots.free.push(i);
                self.sh.conn_counts.curr.fetch_sub(1, Relaxed);
                continue;
            };
            let mut conn = Conn::new(io);
            conn.sweep_due = Some(self.sweep_due.clone());
            conn.set_last_active(self.sh.clock.now());
            conn.account(&self.counters);
            let (addr, listen_addr) = conn
                .stream
                .socket()
                .addrs(self.sh.config.unix_socket.as_deref());
            self.sh
                .conn_table
                .add(conn.fd, addr, listen_addr, conn.info.clone());
            if self.sh.verbosity.load(Relaxed) > 1 {
                eprintln!("<{i} new client connection");
            }
            if self.sh.watch.wants(crate::watch::CONNEVENTS) {
                let s = conn.stream.socket();
                crate::watch::conn_event(&self.sh, s.peer(), s.raw_fd(), None);
            }
            let slot = &mut self.slots.slots[i];
            (slot.gen, slot.conn, slot.closed) = (gen, Some(conn), false);
            self.drive(i);
        }
    }

    /// Finished jobs' replies to the connections that still wait for them; a connection that
    /// closed meanwhile (its slot closed, or reused under a new generation) gets nothing.
    fn deliver(&mut self) {
        for (i, gen) in self.mailbox.take_nudged() {
            if self
                .slots
                .slots
                .get(i)
                .is_some_and(|s| s.gen == gen && !s.closed)
            {
                self.slots.mark(i, false);
            }
        }
        let done = self.mailbox.take();
        if done.is_empty() {
            return;
        }
        let now = self.sh.clock.now();
        for d in done {
            let Some(slot) = self.slots.slots.get_mut(d.slot) else {
                continue;
            };
            if slot.gen != d.gen || slot.closed {
                continue;
            }
            let Some(conn) = slot.conn.as_mut() else {
                continue;
            };
            conn.complete(&d.reply, d.answered, now);
            self.slots.mark(d.slot, false);
        }
    }

    /// The read-ahead ([`ReadAhead`]) of this iteration's readable connections.
    fn read_ahead(&mut self) {
        self.ahead.clear();
        // Too few to prefetch for: the turns read for themselves (no instruction spent here).
        if self.slots.marked.len() < READ_AHEAD_MIN {
            return;
        }
        for &i in &self.slots.marked {
            let slot = &mut self.slots.slots[i];
            if let (Some(conn), false, true) = (slot.conn.as_mut(), slot.closed, slot.readable) {
                self.ahead.read(&self.sh, &self.counters, conn);
            }
        }
        self.ahead.prefetch(&self.sh);
    }

    /// Slot `i`'s turn, and what it asks for after.
    fn drive(&mut self, i: usize) {
        let slot = &mut self.slots.slots[i];
        if slot.closed {
            self.slots.settle(&mut self.io, i);
            return;
        }
        let gen = slot.gen;
        let Some(conn) = slot.conn.as_mut() else {
            return;
        };
        self.io.before_turn(&mut conn.stream);
        // Still open: its settling cannot free the slot (a direct call, nothing for epoll).
        match conn.turn(&self.sh, &self.counters) {
            Turn::Wait => {
                self.io.settle(i, gen, &mut conn.stream, false);
            }
            Turn::Yield => {
                if !self.ready.contains(&i) {
                    self.ready.push(i);
                }
                self.io.settle(i, gen, &mut conn.stream, false);
            }
            Turn::Later => {
                if let Some(work) = conn.take_job() {
                    crate::offload::submit(
                        &self.sh,
                        Job {
                            work,
                            to: self.mailbox.clone(),
                            slot: i,
                            gen,
                        },
                    );
                } else if let Some(w) = conn.watcher() {
                    // `watch`: lines wake this slot from now on (watch.rs).
                    w.attach(self.mailbox.clone(), i, gen);
                }
                self.io.settle(i, gen, &mut conn.stream, false);
            }
            Turn::Close => {
                let reason = conn.close_reason();
                self.close_for(i, reason);
            }
            Turn::Shutdown => {
                self.close_for(i, crate::watch::Reason::Shutdown);
                self.sh.shutdown_by_client();
            }
        }
        self.io.after_turn();
    }

    /// Stop serving slot `i`'s connection now, as an ordinary close.
    #[cfg(test)]
    fn close(&mut self, i: usize) {
        self.close_for(i, crate::watch::Reason::Normal);
    }

    /// Stop serving slot `i`'s connection now; its slot is freed once its transport is done.
    /// `reason`: why, for `watch connevents`.
    fn close_for(&mut self, i: usize, reason: crate::watch::Reason) {
        let slot = &mut self.slots.slots[i];
        if slot.closed {
            return;
        }
        let Some(conn) = slot.conn.as_mut() else {
            return;
        };
        slot.closed = true;
        if self.sh.watch.wants(crate::watch::CONNEVENTS) {
            let s = conn.stream.socket();
            crate::watch::conn_event(&self.sh, s.peer(), s.raw_fd(), Some(reason));
        }
        conn.release(&self.counters);
        self.freed += 1;
        self.sweep_due.store(true, Relaxed);
        // Removed while the descriptor is still open: a new connection cannot reuse it yet.
        self.sh.conn_table.remove(conn.fd);
        self.sh.conn_counts.curr.fetch_sub(1, Relaxed);
        self.ready.retain(|&r| r != i);
        if self.sh.verbosity.load(Relaxed) > 1 {
            eprintln!("<{i} connection closed.");
        }
        self.slots.settle(&mut self.io, i);
    }

    /// Once a tick (module docs, "Memory at rest"): the buffers of connections idle for
    /// [`BUF_IDLE_SECS`] go back; after many closes or releases, so do the free slots past the
    /// last one in use and the heap's free pages.
    #[cold]
    #[inline(never)]
    fn sweep(&mut self, now: mnemo_store::Time) {
        // Nothing read since the last sweep: the loop's own idle memory goes back too (not
        // while connections wait for this round's turns: their input may be in it).
        let read = self.counters.bytes_read.load(Relaxed);
        if read != std::mem::replace(&mut self.read_at_sweep, read) {
            self.touched = true;
        } else if self.touched && self.slots.marked.is_empty() {
            self.touched = false;
            self.io.release_idle();
        }
        self.holding = 0;
        for slot in &mut self.slots.slots {
            let Some(conn) = slot.conn.as_mut().filter(|_| !slot.closed) else {
                continue;
            };
            if now.saturating_sub(conn.last_active()) >= BUF_IDLE_SECS
                && conn.release_idle(&self.counters)
            {
                self.freed += 1;
            }
            if conn.holds_buffers() {
                self.holding += 1;
            }
        }
        self.sweep_due
            .store(self.holding > 0 || self.touched, Relaxed);
        if self.freed < TRIM_AFTER {
            return;
        }
        self.freed = 0;
        let slots = &mut self.slots;
        // A free slot's transport holds nothing of its last connection: it may go.
        while slots
            .slots
            .last()
            .is_some_and(|s| s.conn.is_none() && !s.marked)
        {
            slots.slots.pop();
            self.sh.conn_counts.structs.fetch_sub(1, Relaxed);
        }
        let len = slots.slots.len();
        slots.free.retain(|&i| i < len);
        slots.slots.shrink_to_fit();
        slots.free.shrink_to_fit();
        slots.marked.shrink_to_fit();
        self.ready.shrink_to_fit();
        self.yielded.shrink_to_fit();
        crate::worker::give_back_heap();
    }

    /// `-o idle_timeout`: close connections that have completed no command for longer than
    /// the timeout (memcached's idle_kicks), a half-sent one included. A walk over this worker's slots once a second.
    fn kick_idle(&mut self, now: mnemo_store::Time, timeout: u32) {
        for i in 0..self.slots.slots.len() {
            let slot = &self.slots.slots[i];
            let Some(conn) = slot.conn.as_ref().filter(|_| !slot.closed) else {
                continue;
            };
            if now.saturating_sub(conn.last_active()) > timeout && conn.is_idle() {
                bump(&self.counters.idle_kicks, 1);
                if self.sh.verbosity.load(Relaxed) > 0 {
                    eprintln!("<{i} idle timeout, closing");
                }
                self.close_for(i, crate::watch::Reason::IdleTimeout);
            }
        }
    }
}

/// Read-ahead, on either loop: the reads that an iteration's readable connections would start
/// their turns with, all done first, each followed by the prefetch of its key's index bucket;
/// then two passes over the keys prefetch the items and overflow buckets those buckets name,
/// then the overflow buckets' items (mnemo_store::Prefetch), so that each turn finds its lines
/// in cache instead of taking a lookup's misses one after another, connection after
/// connection. Costs no system call: each read is one the turn would have made (on io_uring,
/// a copy out of the ring's buffers).
#[derive(Default)]
struct ReadAhead {
    /// The keys of the gets read ahead, hashed once for all the passes.
    keys: Vec<mnemo_store::KeyHash>,
}

impl ReadAhead {
    fn clear(&mut self) {
        self.keys.clear();
    }

    /// A connection's read, and the prefetch of its key's bucket.
    fn read<S: Io>(&mut self, sh: &Shared, c: &Counters, conn: &mut Conn<S>) {
        let Some(key) = conn.read_ahead(c) else {
            return;
        };
        if let Some(h) = mnemo_store::Store::key_hash(&conn.input()[key]) {
            // The bucket's miss overlaps the next connections' reads: issued after all of
            // them, it had not arrived by the next pass, which then waited for it (perf: half
            // of the prefetch's time on that load).
            sh.store.prefetch_hashed(h, Prefetch::Bucket, PREFETCH_HEAD);
            self.keys.push(h);
        }
    }

    /// The passes after the reads.
    fn prefetch(&self, sh: &Shared) {
        if self.keys.len() < READ_AHEAD_MIN {
            return;
        }
        for stage in [Prefetch::Home, Prefetch::Chain] {
            for &h in &self.keys {
                sh.store.prefetch_hashed(h, stage, PREFETCH_HEAD);
            }
        }
    }
}

#[cfg(test)]
mod tests;
