//! A worker thread: one mio event loop owning its connections. The listener hands it new
//! sockets through a channel and wakes it; after that nothing else touches them.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

use mio::{Events, Interest, Poll, Token, Waker};

use crate::conn::{Conn, Stream, Turn};
use crate::stats::Counters;
use crate::Shared;

pub const WAKER: Token = Token(usize::MAX);

pub struct Worker {
    poll: Poll,
    incoming: Receiver<Stream>,
    sh: Arc<Shared>,
    counters: Arc<Counters>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// Connections that spent their request budget with work left (memcached's -R yield).
    ready: VecDeque<usize>,
}

impl Worker {
    /// Create the loop; returns the waker the listener uses to announce new sockets.
    pub fn new(sh: Arc<Shared>, counters: Arc<Counters>, incoming: Receiver<Stream>) -> std::io::Result<(Worker, Waker)> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        Ok((Worker { poll, incoming, sh, counters, conns: Vec::new(), free: Vec::new(), ready: VecDeque::new() }, waker))
    }

    pub fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        loop {
            let timeout = if self.ready.is_empty() { None } else { Some(Duration::ZERO) };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                eprintln!("mnemod: worker poll failed: {e}");
                std::process::exit(1);
            }
            for ev in events.iter() {
                if ev.token() == WAKER {
                    self.adopt();
                } else {
                    self.drive(ev.token().0);
                }
            }
            for _ in 0..self.ready.len() {
                if let Some(i) = self.ready.pop_front() {
                    self.drive(i);
                }
            }
        }
    }

    fn adopt(&mut self) {
        while let Ok(stream) = self.incoming.try_recv() {
            let i = match self.free.pop() {
                Some(i) => i,
                None => {
                    self.conns.push(None);
                    self.conns.len() - 1
                }
            };
            let mut conn = Conn::new(stream);
            if self.poll.registry().register(conn.stream.source(), Token(i), Interest::READABLE | Interest::WRITABLE).is_err() {
                self.free.push(i);
                self.sh.curr_conns.fetch_sub(1, Relaxed);
                continue;
            }
            if self.sh.verbosity.load(Relaxed) > 1 {
                eprintln!("<{i} new client connection");
            }
            self.conns[i] = Some(conn);
            // Data may have arrived before registration; edge-triggered polling would not
            // report it, so take a first turn now.
            self.drive(i);
        }
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
                if self.sh.verbosity.load(Relaxed) > 0 {
                    eprintln!("mnemod: shutdown requested by a client");
                }
                self.close(i);
                self.sh.shutdown();
            }
        }
    }

    fn close(&mut self, i: usize) {
        if let Some(mut conn) = self.conns[i].take() {
            let _ = self.poll.registry().deregister(conn.stream.source());
            self.free.push(i);
            self.sh.curr_conns.fetch_sub(1, Relaxed);
            self.ready.retain(|&r| r != i);
            if self.sh.verbosity.load(Relaxed) > 1 {
                eprintln!("<{i} connection closed.");
            }
        }
    }
}
