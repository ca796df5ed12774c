//! The mailbox a worker's finished off-loop work comes back through: a job pool reply
//! (jobs.rs), a flash read's (flashio.rs), a watcher's nudge (watch.rs). A leaf: it names no
//! pool, protocol or loop; the worker hands it the waker its own loop polls.
//!
//! ```text
//!   any thread: post(Done) / nudge(slot, gen) ──> lock, push, unlock, wake()
//!   worker i, woken by its poll: take() / take_nudged() ──> deliver each to its slot
//! ```

use parking_lot::Mutex;

/// A finished job's reply, for the worker that owns its connection.
pub(crate) struct Done {
    pub slot: usize,
    pub gen: u32,
    pub reply: Vec<u8>,
    /// How much of its requests the reply answers (a flash read stops at the multi-get pause).
    pub answered: Answered,
}

/// How much of the requests a job took its reply answers: all of them, or, for a flash read
/// that reached the multi-get pause (flashio.rs, "The pause"), the part before the key it
/// stopped at. The connection consumes the answered input and parses the rest again later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answered {
    All,
    /// A text get: its keys before this index (counted from the request's first key); the
    /// request runs on from there ([`crate::command::Next::Resume`]'s index).
    Keys(usize),
    /// A binary or meta pipeline: this many of the requests the job took (at least the first).
    Requests(usize),
}

/// One worker's finished jobs, and how to wake it.
pub(crate) struct Mailbox {
    done: Mutex<Vec<Done>>,
    /// Watchers with new lines (watch.rs): their slots and generations, for a turn.
    nudged: Mutex<Vec<(usize, u32)>>,
    /// The worker's own waker: mio's for epoll, the ring's eventfd for io_uring (worker.rs).
    wake: Box<dyn Fn() -> std::io::Result<()> + Send + Sync>,
}

impl Mailbox {
    pub fn new(wake: impl Fn() -> std::io::Result<()> + Send + Sync + 'static) -> Mailbox {
        Mailbox {
            done: Mutex::new(Vec::new()),
            nudged: Mutex::new(Vec::new()),
            wake: Box::new(wake),
        }
    }

    /// A watcher's connection has lines to send: give it a turn (watch.rs).
    pub fn nudge(&self, slot: usize, gen: u32) {
        self.nudged.lock().push((slot, gen));
        let _ = (self.wake)();
    }

    /// The watchers nudged since the last call (the worker's side).
    pub fn take_nudged(&self) -> Vec<(usize, u32)> {
        std::mem::take(&mut *self.nudged.lock())
    }

    pub fn post(&self, d: Done) {
        self.done.lock().push(d);
        // A failed wake (the eventfd's counter full) still leaves an unread wake-up pending.
        let _ = (self.wake)();
    }

    /// Everything finished since the last call (the worker's side).
    pub fn take(&self) -> Vec<Done> {
        std::mem::take(&mut *self.done.lock())
    }
}
