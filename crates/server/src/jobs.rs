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
//!
//! A job may also bound its own reply time ([`Watch::arm`]): a WebAssembly filter call arms
//! the watchdog with its deadline once its input is written. If the job has not finished when
//! that passes (one uninterruptible instruction, such as `memory.fill` over 64 MiB of fresh
//! pages, runs to its end whatever the deadline), the watchdog thread posts the job's late
//! reply (`SERVER_ERROR filter timeout`) and the job's own result is dropped when it comes.
//!
//! ```text
//!   pool thread k: running[k] = {slot, gen, mailbox, due: None}
//!                  run ... Watch::arm(within, reply): due = now + within ──> watchdog wakes
//!                  done: take running[k]: Some -> post the result      watchdog: past due?
//!                                         None -> the watchdog answered  take running[k], post
//! ```

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

    pub fn post(&self, d: Done) {
        self.done.lock().push(d);
        // A failed wake (the eventfd's counter full) still leaves an unread wake-up pending.
        let _ = self.wake.wake();
    }

    /// Everything finished since the last call (the worker's side).
    pub fn take(&self) -> Vec<Done> {
        std::mem::take(&mut *self.done.lock())
    }
}

/// The pool: a queue, the threads that run it, and the watchdog.
pub(crate) struct Pool {
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
    threads: usize,
    started: AtomicBool,
    /// Per pool thread: the job it runs, until its reply is posted (by it or the watchdog).
    running: Vec<Mutex<Option<Running>>>,
    /// Arms so far (under its lock), so that an arm between the watchdog's scan and its wait
    /// is not missed.
    armed: Mutex<u64>,
    rearm: Condvar,
}

/// A job being run: where its reply goes, and when it is due if it armed the watchdog.
struct Running {
    to: Arc<Mailbox>,
    slot: usize,
    gen: u32,
    due: Option<(Instant, Vec<u8>)>,
}

/// What a running job may ask of the pool.
pub(crate) struct Watch<'a> {
    pool: &'a Pool,
    thread: usize,
}

impl Watch<'_> {
    /// If the job has not finished `within` from now, `late` is its reply (see the module docs).
    pub fn arm(&self, within: Duration, late: Vec<u8>) {
        if let Some(r) = self.pool.running[self.thread].lock().as_mut() {
            r.due = Some((Instant::now() + within, late));
        }
        *self.pool.armed.lock() += 1;
        self.pool.rearm.notify_one();
    }
}

impl Pool {
    pub fn new(threads: usize) -> Pool {
        let threads = threads.max(1);
        Pool {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            threads,
            started: AtomicBool::new(false),
            running: (0..threads).map(|_| Mutex::new(None)).collect(),
            armed: Mutex::new(0),
            rearm: Condvar::new(),
        }
    }

    /// Queue a job; the threads start with the first one (a server without filters has none).
    pub fn submit(&self, sh: &Arc<Shared>, job: Job) {
        // A flash read goes to the flash I/O pool (flashio.rs): never behind a filter call.
        let job = match job.work {
            Pending::FlashRead(read) => return sh.flash_io.submit(sh, read, job.to, job.slot, job.gen),
            work => Job { work, ..job },
        };
        if !self.started.load(Relaxed) && !self.started.swap(true, Relaxed) {
            for i in 0..self.threads {
                let sh = sh.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("mnemo-job-{i}"))
                    .stack_size(crate::WORKER_STACK)
                    .spawn(move || run(&sh, i));
                if let Err(e) = spawned {
                    // The threads that did start serve the queue; with none, no job could end.
                    if i == 0 {
                        eprintln!("mnemod: cannot start a job thread: {e}");
                        std::process::exit(1);
                    }
                }
            }
            let sh = sh.clone();
            if let Err(e) = std::thread::Builder::new().name("mnemo-job-watch".into()).spawn(move || watchdog(&sh.jobs)) {
                eprintln!("mnemod: cannot start the job watchdog: {e}");
                std::process::exit(1);
            }
        }
        self.queue.lock().push_back(job);
        self.ready.notify_one();
    }
}

/// Pool thread `me`: run jobs for ever.
fn run(sh: &Shared, me: usize) {
    // SCHED_BATCH: a job thread is CPU-bound and must not take a core from an event loop
    // waking up (a worker's wake-up preempts it, not the other way round). No privilege is
    // needed; if refused, the thread runs as an ordinary one.
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a live, initialised struct.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    let pool = &sh.jobs;
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
        *pool.running[me].lock() = Some(Running { to: job.to, slot: job.slot, gen: job.gen, due: None });
        let reply = job.work.run(sh, &Watch { pool, thread: me });
        // None: the watchdog answered already; this result is dropped.
        let finished = pool.running[me].lock().take();
        if let Some(r) = finished {
            r.to.post(Done { slot: r.slot, gen: r.gen, reply });
        }
    }
}

/// The watchdog: sleeps until the earliest armed job is due (or an arm), answers the jobs
/// past due with their late replies.
fn watchdog(pool: &Pool) {
    loop {
        let seen = *pool.armed.lock();
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        for slot in &pool.running {
            let mut r = slot.lock();
            let Some(due) = r.as_ref().and_then(|r| r.due.as_ref().map(|d| d.0)) else { continue };
            if due <= now {
                if let Some(Running { to, slot, gen, due: Some((_, late)) }) = r.take() {
                    drop(r);
                    to.post(Done { slot, gen, reply: late });
                }
            } else {
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        let mut armed = pool.armed.lock();
        if *armed == seen {
            match next {
                Some(t) => {
                    pool.rearm.wait_until(&mut armed, t);
                }
                None => pool.rearm.wait(&mut armed),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mailbox whose wakes go to a poll nobody waits on.
    fn mailbox() -> (Arc<Mailbox>, mio::Poll) {
        let poll = mio::Poll::new().unwrap();
        let waker = mio::Waker::new(poll.registry(), mio::Token(0)).unwrap();
        (Arc::new(Mailbox::new(Wake::Epoll(Arc::new(waker)))), poll)
    }

    fn wait_for(m: &Mailbox) -> Vec<Done> {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let d = m.take();
            if !d.is_empty() {
                return d;
            }
            assert!(Instant::now() < until, "nothing was posted");
            std::thread::yield_now();
        }
    }

    #[test]
    fn the_watchdog_answers_a_job_past_due_and_its_own_result_is_dropped() {
        let pool = Arc::new(Pool::new(1));
        let (m, _poll) = mailbox();
        *pool.running[0].lock() = Some(Running { to: m.clone(), slot: 3, gen: 9, due: None });
        let p = pool.clone();
        std::thread::spawn(move || watchdog(&p));
        let t = Instant::now();
        Watch { pool: &pool, thread: 0 }.arm(Duration::from_millis(20), b"LATE\r\n".to_vec());
        let d = wait_for(&m);
        assert!(t.elapsed() >= Duration::from_millis(20));
        assert_eq!((d.len(), d[0].slot, d[0].gen, &d[0].reply[..]), (1, 3, 9, &b"LATE\r\n"[..]));
        assert!(pool.running[0].lock().is_none(), "the job's own result finds nothing to post to");
    }

    #[test]
    fn a_job_done_before_its_due_is_answered_by_itself_only() {
        let pool = Arc::new(Pool::new(1));
        let (m, _poll) = mailbox();
        *pool.running[0].lock() = Some(Running { to: m.clone(), slot: 1, gen: 1, due: None });
        let p = pool.clone();
        std::thread::spawn(move || watchdog(&p));
        Watch { pool: &pool, thread: 0 }.arm(Duration::from_millis(30), b"LATE\r\n".to_vec());
        let r = pool.running[0].lock().take().unwrap();
        r.to.post(Done { slot: r.slot, gen: r.gen, reply: b"OK\r\n".to_vec() });
        // Past the due time, the watchdog has nothing to post.
        std::thread::sleep(Duration::from_millis(60));
        let d = m.take();
        assert_eq!((d.len(), &d[0].reply[..]), (1, &b"OK\r\n"[..]));
    }
}
