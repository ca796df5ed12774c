//! The job pool: where work that would hold an event loop runs (a filter call today, a flash
//! read next), and how its reply gets back to the connection that asked for it.
//!
//! ```text
//!   worker i (event loop)                     job pool (--job-threads, started on first use)
//!   ─────────────────────                     ─────────────────────────────────────────────
//!   Conn::turn -> Turn::Later                 queue (mutex + condvar), FIFO across workers
//!   submit(Job { work, slot, gen, to }) ────> thread: work.run(sh) -> reply bytes
//!                                             to.post(Done { slot, gen, reply })
//!   mailbox i <────────────── Done ──────────┘   then wake worker i: the waker the accept
//!   poll says "woken": adopt, then deliver:        thread uses (mio's eventfd on epoll, the
//!     slot i still generation gen? its reply      ring's eventfd read on io_uring)
//!     takes its place, the connection's turn
//!     goes on; else the reply is dropped
//! ```
//!
//! A job owns everything it reads (the filter, the arguments, the keys): the connection may
//! close while it runs. Its slot is named by index and generation, so a reply for a closed
//! connection never reaches a new connection that reused the slot.
//!
//! The worst-case wait a job causes another connection is none of its run time: the event
//! loop only queues it and later copies its reply in.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::command::Pending;
use crate::worker::Wake;
use crate::Shared;

/// A job, and where its reply goes.
pub(crate) struct Job {
    pub work: Pending,
    pub to: Arc<Mailbox>,
    /// The connection's slot on its worker and the slot's generation when the job was made.
    pub slot: usize,
    pub gen: u32,
}

/// A finished job's reply, for the worker that owns its connection.
pub(crate) struct Done {
    pub slot: usize,
    pub gen: u32,
    pub reply: Vec<u8>,
}

/// One worker's finished jobs, and how to wake it.
pub(crate) struct Mailbox {
    done: Mutex<Vec<Done>>,
    wake: Wake,
}

impl Mailbox {
    pub fn new(wake: Wake) -> Mailbox {
        Mailbox { done: Mutex::new(Vec::new()), wake }
    }

    fn post(&self, d: Done) {
        self.done.lock().push(d);
        // A failed wake (the eventfd's counter full) still leaves an unread wake-up pending.
        let _ = self.wake.wake();
    }

    /// Everything finished since the last call (the worker's side).
    pub fn take(&self) -> Vec<Done> {
        std::mem::take(&mut *self.done.lock())
    }
}

/// The pool: a queue and the threads that run it.
pub(crate) struct Pool {
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
    threads: usize,
    started: AtomicBool,
}

impl Pool {
    pub fn new(threads: usize) -> Pool {
        Pool { queue: Mutex::new(VecDeque::new()), ready: Condvar::new(), threads: threads.max(1), started: AtomicBool::new(false) }
    }

    /// Queue a job; the threads start with the first one (a server without filters has none).
    pub fn submit(&self, sh: &Arc<Shared>, job: Job) {
        if !self.started.load(Relaxed) && !self.started.swap(true, Relaxed) {
            for i in 0..self.threads {
                let sh = sh.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("mnemo-job-{i}"))
                    .stack_size(crate::WORKER_STACK)
                    .spawn(move || run(&sh));
                if let Err(e) = spawned {
                    // The threads that did start serve the queue; with none, no job could end.
                    if i == 0 {
                        eprintln!("mnemod: cannot start a job thread: {e}");
                        std::process::exit(1);
                    }
                }
            }
        }
        self.queue.lock().push_back(job);
        self.ready.notify_one();
    }
}

/// A pool thread: run jobs for ever.
fn run(sh: &Shared) {
    loop {
        let job = {
            let mut q = sh.jobs.queue.lock();
            loop {
                if let Some(j) = q.pop_front() {
                    break j;
                }
                sh.jobs.ready.wait(&mut q);
            }
        };
        let reply = job.work.run(sh);
        job.to.post(Done { slot: job.slot, gen: job.gen, reply });
    }
}
