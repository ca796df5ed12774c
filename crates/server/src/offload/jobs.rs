//! The job pool: where a filter call runs, off the event loops, and how its reply (or a flash
//! read's, flashio.rs, through the same mailbox) gets back to the connection that asked for
//! it. Its queue and threads are pool.rs's; the deadlines and the watchdog are this module's.
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
//! A job may have a deadline (a WebAssembly filter call: `--filter-timeout-ms` plus 2 ms, see
//! fget.rs `Call::deadline`), counted from its submission: its time in the queue counts. If it
//! has not finished when that passes, still queued or running (one uninterruptible
//! instruction, such as `memory.fill` over 64 MiB of fresh pages, runs to its end whatever
//! the deadline, and the calls queued behind it waited: 25-113 ms at a 5 ms deadline), the
//! watchdog thread posts the job's late reply (`SERVER_ERROR filter timeout`); a queued job is
//! then never run, and a running job's own result is dropped when it comes ([`Watch::claim`]
//! settles which of the two answers). Either way the job's counters say what the client got:
//! a timeout.
//!
//! Worst case, a job's reply reaches its worker's mailbox by its submission + its deadline,
//! plus the time the watchdog thread takes to wake (a scheduling delay), whatever the queue
//! holds or the job does.
//!
//! ```text
//!   submit: queue += {job, due: now + deadline}  ──────────────────────> watchdog wakes
//!   pool thread k: pop; past due? answer late, next            watchdog, at the earliest due:
//!                  running[k] = {slot, gen, mailbox, due}        queued past due: remove, post
//!                  run ... Watch::claim: due = None              running past due: take, post
//!                  done: take running[k]: Some -> post the result
//!                                         None -> the watchdog answered
//! ```
//!
//! The queue is FIFO and every job with a deadline has the same one, so dues grow along the
//! queue: the watchdog looks at its front only, up to the first job not yet due.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::mailbox::{Answered, Done, Mailbox};
use super::Job;
use crate::command::Lane;
use crate::Shared;

/// A job waiting for a thread, and when its reply is due (with that reply) if it has a deadline.
struct Queued {
    job: Job,
    due: Option<(Instant, Vec<u8>)>,
}

/// The pool: a queue and the threads that run it (pool.rs), and the watchdog.
pub(crate) struct Pool {
    lanes: crate::offload::pool::Pool<Queued>,
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
    /// The job is done: true if its own reply is to be posted (the watchdog will not answer
    /// for it any more), false if the watchdog answered already.
    pub fn claim(&self) -> bool {
        match self.pool.running[self.thread].lock().as_mut() {
            Some(r) => {
                r.due = None;
                true
            }
            None => false,
        }
    }
}

impl Pool {
    pub fn new(threads: usize) -> Pool {
        let lanes = crate::offload::pool::Pool::new(threads);
        Pool {
            running: (0..lanes.threads()).map(|_| Mutex::new(None)).collect(),
            lanes,
            armed: Mutex::new(0),
            rearm: Condvar::new(),
        }
    }

    /// Queue a job of [`Lane::Jobs`]; the threads start with the first one (a server without
    /// filters has none).
    pub fn submit(&self, sh: &Arc<Shared>, job: Job) {
        debug_assert_eq!(job.work.lane(), Lane::Jobs);
        let threads = sh.clone();
        if self
            .lanes
            .start("mnemo-job", Some(crate::WORKER_STACK), move |i| {
                run(&threads, i)
            })
        {
            let sh = sh.clone();
            if let Err(e) = std::thread::Builder::new()
                .name("mnemo-job-watch".into())
                .spawn(move || watchdog(&sh.jobs))
            {
                eprintln!("mnemod: cannot start the job watchdog: {e}");
                std::process::exit(1);
            }
        }
        // Due from now: the time it waits in the queue counts (module docs).
        let due = job
            .work
            .deadline(sh)
            .map(|(within, late)| (Instant::now() + within, late));
        let timed = due.is_some();
        self.lanes.push(Queued { job, due });
        if timed {
            self.wake_watchdog();
        }
    }

    /// Tell the watchdog a due was set, so that it plans its next wake with it.
    fn wake_watchdog(&self) {
        *self.armed.lock() += 1;
        self.rearm.notify_one();
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
    // This thread's own counters block, summed nowhere: a filter call counts none (its keys
    // count as the store's gets and in `stats detail`, fget.rs).
    let counters = crate::admin::stats::Counters::default();
    loop {
        let Queued { job, due } = pool.lanes.pop();
        let Job {
            work,
            to,
            slot,
            gen,
        } = job;
        if due.as_ref().is_some_and(|d| d.0 <= Instant::now()) {
            // Due before a thread was free (the watchdog had not come to it yet): answered
            // now, and not run.
            work.answered_late();
            to.post(Done {
                slot,
                gen,
                reply: due.map(|d| d.1).unwrap_or_default(),
                answered: Answered::All,
            });
            continue;
        }
        let timed = due.is_some();
        *pool.running[me].lock() = Some(Running { to, slot, gen, due });
        if timed {
            // The watchdog may have looked while the job was neither queued nor running.
            pool.wake_watchdog();
        }
        let watch = Watch { pool, thread: me };
        let (reply, answered) = work.run(sh, &counters, &|| watch.claim());
        // None: the watchdog answered already; this result is dropped.
        let finished = pool.running[me].lock().take();
        if let Some(r) = finished {
            r.to.post(Done {
                slot: r.slot,
                gen: r.gen,
                reply,
                answered,
            });
        }
    }
}

/// The watchdog: sleeps until the earliest job is due (or a new due is set), answers the jobs
/// past due, running or queued, with their late replies.
fn watchdog(pool: &Pool) {
    let mut late = Vec::new();
    loop {
        let seen = *pool.armed.lock();
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        {
            // Dues grow along the queue (module docs): its front, up to the first not yet due.
            let mut q = pool.lanes.queue();
            let mut i = 0;
            while i < q.len() {
                match q[i].due.as_ref().map(|d| d.0) {
                    None => i += 1,
                    Some(due) if due <= now => late.extend(q.remove(i)),
                    Some(due) => {
                        next = Some(due);
                        break;
                    }
                }
            }
        }
        for Queued { job, due } in late.drain(..) {
            job.work.answered_late();
            let reply = due.map(|d| d.1).unwrap_or_default();
            job.to.post(Done {
                slot: job.slot,
                gen: job.gen,
                reply,
                answered: Answered::All,
            });
        }
        for slot in &pool.running {
            let mut r = slot.lock();
            let Some(due) = r.as_ref().and_then(|r| r.due.as_ref().map(|d| d.0)) else {
                continue;
            };
            if due <= now {
                if let Some(Running {
                    to,
                    slot,
                    gen,
                    due: Some((_, late)),
                }) = r.take()
                {
                    drop(r);
                    to.post(Done {
                        slot,
                        gen,
                        reply: late,
                        answered: Answered::All,
                    });
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
    use std::time::Duration;

    /// A mailbox whose wakes go to a poll nobody waits on.
    fn mailbox() -> (Arc<Mailbox>, mio::Poll) {
        let poll = mio::Poll::new().unwrap();
        let waker = mio::Waker::new(poll.registry(), mio::Token(0)).unwrap();
        (Arc::new(Mailbox::new(move || waker.wake())), poll)
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

    /// A job on pool thread 0, due `within` from now.
    fn running(pool: &Pool, to: &Arc<Mailbox>, slot: usize, within: Duration) {
        let due = Some((Instant::now() + within, b"LATE\r\n".to_vec()));
        *pool.running[0].lock() = Some(Running {
            to: to.clone(),
            slot,
            gen: 9,
            due,
        });
        pool.wake_watchdog();
    }

    #[test]
    fn the_watchdog_answers_a_job_past_due_and_its_own_result_is_dropped() {
        let pool = Arc::new(Pool::new(1));
        let (m, _poll) = mailbox();
        let p = pool.clone();
        std::thread::spawn(move || watchdog(&p));
        let t = Instant::now();
        running(&pool, &m, 3, Duration::from_millis(20));
        let d = wait_for(&m);
        assert!(t.elapsed() >= Duration::from_millis(20));
        assert_eq!(
            (d.len(), d[0].slot, d[0].gen, &d[0].reply[..]),
            (1, 3, 9, &b"LATE\r\n"[..])
        );
        assert!(
            !Watch {
                pool: &pool,
                thread: 0
            }
            .claim(),
            "the job's own result finds nothing to post to"
        );
    }

    #[test]
    fn a_job_that_claims_its_reply_before_its_due_is_answered_by_itself_only() {
        let pool = Arc::new(Pool::new(1));
        let (m, _poll) = mailbox();
        let p = pool.clone();
        std::thread::spawn(move || watchdog(&p));
        // Due far enough away that no stall between these two lines reaches it.
        running(&pool, &m, 1, Duration::from_millis(500));
        assert!(Watch {
            pool: &pool,
            thread: 0
        }
        .claim());
        // Past the due time, the watchdog has nothing to post.
        std::thread::sleep(Duration::from_millis(600));
        assert!(m.take().is_empty());
        let r = pool.running[0].lock().take().unwrap();
        r.to.post(Done {
            slot: r.slot,
            gen: r.gen,
            reply: b"OK\r\n".to_vec(),
            answered: Answered::All,
        });
        let d = m.take();
        assert_eq!((d.len(), &d[0].reply[..]), (1, &b"OK\r\n"[..]));
    }
}
