//! A thread pool's common part: a FIFO queue shared by the event loops, the condvar its
//! threads sleep on, and their start on first use. Two pools are made of it, each with its own
//! threads and sizing so that neither waits behind the other: the job pool (jobs.rs, filter
//! calls, `--job-threads`, plus its watchdog) and the flash I/O pool (flashio.rs, flash reads,
//! `-o ext_threads`).
//!
//! ```text
//!   worker 0..n ── push(item) ──> queue (mutex) ── notify_one ──> thread k: pop() -> item
//!                                   │                              (sleeps on `ready` while
//!   start(): the first caller spawns the threads, later ones see    the queue is empty)
//!   `started` and do nothing
//! ```
//!
//! What an item is and what a thread does with it stays with each pool: this module owns the
//! queue, the wake-up and the threads' existence only.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use parking_lot::{Condvar, Mutex, MutexGuard};

/// A queue of `T` and the threads that serve it (started by [`Pool::start`]).
pub(crate) struct Pool<T> {
    queue: Mutex<VecDeque<T>>,
    ready: Condvar,
    threads: usize,
    started: AtomicBool,
}

impl<T> Pool<T> {
    /// A pool of `threads` threads (at least one), none running yet.
    pub fn new(threads: usize) -> Pool<T> {
        Pool {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            threads: threads.max(1),
            started: AtomicBool::new(false),
        }
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Start the threads if no call did yet: thread `i` is named `{name}-{i}` and runs
    /// `body(i)`. True for the call that started them. A thread that cannot be spawned is
    /// left out (the others serve the queue); with none at all no item could ever be served,
    /// so the process exits.
    pub fn start<F>(&self, name: &str, stack: Option<usize>, body: F) -> bool
    where
        F: Fn(usize) + Clone + Send + 'static,
    {
        if self.started.load(Relaxed) || self.started.swap(true, Relaxed) {
            return false;
        }
        for i in 0..self.threads {
            let body = body.clone();
            let mut b = std::thread::Builder::new().name(format!("{name}-{i}"));
            if let Some(size) = stack {
                b = b.stack_size(size);
            }
            if let Err(e) = b.spawn(move || body(i)) {
                if i == 0 {
                    eprintln!("mnemod: cannot start thread {name}-0: {e}");
                    std::process::exit(1);
                }
            }
        }
        true
    }

    /// Queue an item and wake one thread for it.
    pub fn push(&self, item: T) {
        self.queue.lock().push_back(item);
        self.ready.notify_one();
    }

    /// The oldest item, waiting for one while the queue is empty (a pool thread's side).
    pub fn pop(&self) -> T {
        let mut q = self.queue.lock();
        loop {
            if let Some(item) = q.pop_front() {
                return item;
            }
            self.ready.wait(&mut q);
        }
    }

    /// The queue itself, for a pool that looks through it (jobs.rs's watchdog).
    pub fn queue(&self) -> MutexGuard<'_, VecDeque<T>> {
        self.queue.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;

    #[test]
    fn items_are_served_in_order_by_threads_started_once() {
        let pool: Arc<Pool<u32>> = Arc::new(Pool::new(1));
        let (tx, rx) = mpsc::channel();
        let p = pool.clone();
        let body = move |_| loop {
            tx.send(p.pop()).unwrap();
        };
        assert!(pool.start("test-pool", None, body.clone()));
        assert!(
            !pool.start("test-pool", None, body),
            "a second start spawns nothing"
        );
        for i in 0..5 {
            pool.push(i);
        }
        let got: Vec<u32> = (0..5)
            .map(|_| rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap())
            .collect();
        assert_eq!(got, [0, 1, 2, 3, 4]);
        assert!(pool.queue().is_empty());
    }

    #[test]
    fn a_pool_has_at_least_one_thread() {
        assert_eq!(Pool::<()>::new(0).threads(), 1);
        assert_eq!(Pool::<()>::new(3).threads(), 3);
    }
}
