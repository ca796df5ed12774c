//! A worker thread: one mio event loop owning its connections. The listener hands it new
//! sockets through a channel and wakes it; after that nothing else touches them.
//!
//! [`start`] picks the loop a worker runs: this epoll one, or the io_uring one (uring.rs)
//! when `--io-loop` asks for it and the kernel allows it.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use mio::{Events, Interest, Poll, Token, Waker};
use mnemo_store::{Prefetch, PREFETCH_HEAD};

use crate::conn::{Conn, Stream, Turn};
use crate::stats::{bump, Counters};
use crate::Shared;

pub const WAKER: Token = Token(usize::MAX);
/// Polls with fewer events than this, or read-aheads that bring fewer keys, prefetch nothing:
/// each pass would follow the one before too closely for its lines to have arrived.
pub const READ_AHEAD_MIN: usize = 4;

/// How the accept thread tells a worker that sockets wait in its channel.
pub enum Wake {
    Epoll(Waker),
    Uring(Arc<crate::uring::EventFd>),
}

impl Wake {
    pub fn wake(&self) -> std::io::Result<()> {
        match self {
            Wake::Epoll(w) => w.wake(),
            Wake::Uring(e) => e.wake(),
        }
    }
}

/// A worker ready to run on its own thread.
pub type Run = Box<dyn FnOnce() + Send>;

/// What the accept thread keeps of a worker: its channel and how to wake it.
pub type Handoff = (Sender<Stream>, Wake);

/// Make worker `i`'s loop: io_uring when `uring` is set and its setup succeeds, else epoll.
/// The third value says why io_uring, though asked for, is not used (the caller logs it once).
pub fn start(sh: &Arc<Shared>, i: usize, uring: bool) -> std::io::Result<(Run, Handoff, Option<String>)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut why = None;
    if uring {
        match crate::uring::Setup::new(crate::uring::RingConfig::default()) {
            Ok(setup) => {
                let wake = Wake::Uring(setup.waker());
                let w = setup.worker(sh.clone(), sh.counters[i].clone(), rx);
                return Ok((Box::new(move || w.run()), (tx, wake), None));
            }
            Err(e) => why = Some(e.to_string()),
        }
    }
    let (w, waker) = Worker::new(sh.clone(), sh.counters[i].clone(), rx)?;
    Ok((Box::new(move || w.run()), (tx, Wake::Epoll(waker)), why))
}

/// With `-o idle_timeout`, the longest a worker sleeps before looking for idle connections.
const IDLE_SWEEP: Duration = Duration::from_millis(250);

pub struct Worker {
    poll: Poll,
    incoming: Receiver<Stream>,
    sh: Arc<Shared>,
    counters: Arc<Counters>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// Connections that spent their request budget with work left (memcached's -R yield).
    ready: VecDeque<usize>,
    ahead: ReadAhead,
}

/// Read-ahead, on either loop: the reads that a poll's readable connections would start their
/// turns with, all done first, each followed by the prefetch of its key's index bucket; then
/// two passes over the keys prefetch the items and overflow buckets those buckets name, then
/// the overflow buckets' items (mnemo_store::Prefetch), so that each turn finds its lines in
/// cache instead of taking a lookup's misses one after another, connection after connection.
/// Costs no system call: each read is one the turn would have made (on io_uring, a copy out
/// of the ring's buffers).
#[derive(Default)]
pub struct ReadAhead {
    /// The keys of the gets read ahead, hashed once for all the passes.
    keys: Vec<mnemo_store::KeyHash>,
}

impl ReadAhead {
    pub fn clear(&mut self) {
        self.keys.clear();
    }

    /// Connection `i`'s read, and the prefetch of its key's bucket.
    pub fn read(&mut self, sh: &Shared, c: &Counters, conn: &mut Conn) {
        let Some(key) = conn.read_ahead(sh, c) else { return };
        if let Some(h) = mnemo_store::Store::key_hash(&conn.input()[key]) {
            // The bucket's miss overlaps the next connections' reads: issued after all of
            // them, it had not arrived by the next pass, which then waited for it (perf: half
            // of the prefetch's time on that load).
            sh.store.prefetch_hashed(h, Prefetch::Bucket, PREFETCH_HEAD);
            self.keys.push(h);
        }
    }

    /// The passes after the reads.
    pub fn prefetch(&self, sh: &Shared) {
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

impl Worker {
    /// Create the loop; returns the waker the listener uses to announce new sockets.
    pub fn new(sh: Arc<Shared>, counters: Arc<Counters>, incoming: Receiver<Stream>) -> std::io::Result<(Worker, Waker)> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        Ok((Worker { poll, incoming, sh, counters, conns: Vec::new(), free: Vec::new(), ready: VecDeque::new(), ahead: ReadAhead::default() }, waker))
    }

    pub fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let idle_timeout = self.sh.config.ext.idle_timeout;
        let mut last_sweep = self.sh.clock.now();
        loop {
            let timeout = if !self.ready.is_empty() {
                Some(Duration::ZERO)
            } else if idle_timeout > 0 {
                Some(IDLE_SWEEP)
            } else {
                None
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                eprintln!("mnemod: worker poll failed: {e}");
                std::process::exit(1);
            }
            self.read_ahead(&events);
            for ev in events.iter() {
                if ev.token() == WAKER {
                    self.adopt();
                } else {
                    if ev.is_read_closed() {
                        if let Some(conn) = self.conns.get_mut(ev.token().0).and_then(|c| c.as_mut()) {
                            conn.peer_closed();
                        }
                    }
                    self.drive(ev.token().0);
                }
            }
            for _ in 0..self.ready.len() {
                if let Some(i) = self.ready.pop_front() {
                    self.drive(i);
                }
            }
            if idle_timeout > 0 {
                let now = self.sh.clock.now();
                // The clock moves once a second: one sweep per tick at most.
                if now != last_sweep {
                    last_sweep = now;
                    self.kick_idle(now, idle_timeout);
                }
            }
        }
    }

    /// `-o idle_timeout`: close connections that have sent nothing for longer than the
    /// timeout (memcached's idle_kicks). A walk over this worker's slots once a second.
    fn kick_idle(&mut self, now: mnemo_store::Time, timeout: u32) {
        for i in 0..self.conns.len() {
            let Some(conn) = &self.conns[i] else { continue };
            if now.saturating_sub(conn.last_active()) > timeout && conn.is_idle() {
                bump(&self.counters.idle_kicks, 1);
                if self.sh.verbosity.load(Relaxed) > 0 {
                    eprintln!("<{i} idle timeout, closing");
                }
                self.close(i);
            }
        }
    }

    fn adopt(&mut self) {
        while let Ok(stream) = self.incoming.try_recv() {
            let i = match self.free.pop() {
                Some(i) => i,
                None => {
                    self.conns.push(None);
                    self.sh.conn_structs.fetch_add(1, Relaxed);
                    self.conns.len() - 1
                }
            };
            let mut conn = Conn::new(stream);
            if self.poll.registry().register(conn.stream.source(), Token(i), Interest::READABLE | Interest::WRITABLE).is_err() {
                self.free.push(i);
                self.sh.curr_conns.fetch_sub(1, Relaxed);
                continue;
            }
            conn.set_last_active(self.sh.clock.now());
            conn.account(&self.counters);
            let (addr, listen_addr) = conn.stream.addrs(self.sh.config.unix_socket.as_deref());
            self.sh.conn_table.add(conn.fd, addr, listen_addr, conn.info.clone());
            if self.sh.verbosity.load(Relaxed) > 1 {
                eprintln!("<{i} new client connection");
            }
            self.conns[i] = Some(conn);
            // Data may have arrived before registration; edge-triggered polling would not
            // report it, so take a first turn now.
            self.drive(i);
        }
    }

    /// The read-ahead (`ReadAhead`) of this poll's readable connections.
    fn read_ahead(&mut self, events: &Events) {
        self.ahead.clear();
        // Too few to prefetch for: the turns read for themselves (no instruction spent here).
        if events.iter().take(READ_AHEAD_MIN).count() < READ_AHEAD_MIN {
            return;
        }
        for ev in events.iter() {
            let i = ev.token().0;
            if ev.token() == WAKER || !ev.is_readable() {
                continue;
            }
            if let Some(conn) = self.conns.get_mut(i).and_then(|c| c.as_mut()) {
                self.ahead.read(&self.sh, &self.counters, conn);
            }
        }
        self.ahead.prefetch(&self.sh);
    }

    fn drive(&mut self, i: usize) {
        let Some(conn) = self.conns.get_mut(i).and_then(|c| c.as_mut()) else { return };
        match conn.turn(&self.sh, &self.counters) {
            Turn::Wait => {}
            Turn::Yield => {
                if !self.ready.contains(&i) {
                    self.ready.push_back(i);
                }
            }
            Turn::Close => self.close(i),
            Turn::Shutdown => {
                self.close(i);
                self.sh.shutdown_by_client();
            }
        }
    }

    fn close(&mut self, i: usize) {
        if let Some(mut conn) = self.conns[i].take() {
            let _ = self.poll.registry().deregister(conn.stream.source());
            conn.release(&self.counters);
            // Before the descriptor closes (with `conn`) and can be reused by a new one.
            self.sh.conn_table.remove(conn.fd);
            self.free.push(i);
            self.sh.curr_conns.fetch_sub(1, Relaxed);
            self.ready.retain(|&r| r != i);
            if self.sh.verbosity.load(Relaxed) > 1 {
                eprintln!("<{i} connection closed.");
            }
        }
    }
}
