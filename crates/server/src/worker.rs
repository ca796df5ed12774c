//! The worker threads: which event loop each runs, and how the accept thread hands it sockets.
//!
//! One connection layer (worker/serve.rs) runs on every worker; the two loops under it
//! differ only in how bytes move (the [`serve::Transport`] they implement):
//!
//! ```text
//!   accept thread ── Stream ──> channel ──> wake (mio Waker | eventfd) ──┐
//!                                                                        v
//!   worker thread:  serve::Worker<T>   slots, adopt, turns, -R yields, close, idle kicks
//!                     │  T::poll: wait, mark the connections that have work
//!                     ├── epoll::Epoll   readiness: the connection reads and writes its socket
//!                     └── uring::Ring    completions: the ring receives into buffers and
//!                                        sends what the connection queued
//!                     │
//!                     └── conn::Conn<T::Io>  parse, execute, reply (the same code on both)
//! ```
//!
//! A connection's life, on either loop:
//!
//! ```text
//!   adopt: slot (reused or new), T::attach, stats conns row, first turn
//!     -> marked by T::poll -> turn -> Wait | Yield (-R: again after this round) | Close
//!     -> close: counters, stats conns row removed, T::settle(closed) until the loop
//!        holds nothing of it (epoll: at once; io_uring: once its receive and send end)
//!     -> slot free (its descriptor closes with the connection)
//! ```
//!
//! [`start`] picks the loop: io_uring when `--io-loop` asks for it and the kernel allows it,
//! else epoll.

mod epoll;
pub mod serve;
mod uring;

use std::sync::mpsc::Sender;
use std::sync::Arc;

use crate::conn::Stream;
use crate::Shared;

/// How the accept thread tells a worker that sockets wait in its channel, and the job pool
/// that replies wait in its mailbox (jobs.rs).
#[derive(Clone)]
pub enum Wake {
    Epoll(Arc<mio::Waker>),
    Uring(Arc<uring::EventFd>),
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
        match uring::Ring::new(uring::RingConfig::default(), sh.counters[i].clone()) {
            Ok(ring) => {
                let wake = Wake::Uring(ring.waker());
                let mailbox = Arc::new(crate::jobs::Mailbox::new(wake.clone()));
                let w = serve::Worker::new(ring, sh.clone(), sh.counters[i].clone(), rx, mailbox);
                return Ok((Box::new(move || w.run()), (tx, wake), None));
            }
            Err(e) => why = Some(e.to_string()),
        }
    }
    let (epoll, waker) = epoll::Epoll::new()?;
    let wake = Wake::Epoll(Arc::new(waker));
    let mailbox = Arc::new(crate::jobs::Mailbox::new(wake.clone()));
    let w = serve::Worker::new(epoll, sh.clone(), sh.counters[i].clone(), rx, mailbox);
    Ok((Box::new(move || w.run()), (tx, wake), why))
}
