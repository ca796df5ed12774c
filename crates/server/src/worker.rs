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
//!                     │  share: after RUN_BUDGET on the core without a switch, offer it
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
mod share;
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

/// glibc's thresholds for giving memory back, fixed (issue 36). Left dynamic, freeing one
/// block of 128 KiB or more (a worker's slot table after a wave of connections) raises both,
/// and a worker thread's heap then keeps up to twice that block free and resident at its top
/// for good: `malloc_trim` gives back free pages inside a heap but does not shrink a thread's
/// heap from its top; only `free` does, past M_TRIM_THRESHOLD. Fixed, blocks from 128 KiB are
/// mapped and unmapped whole, and a heap's free top beyond 128 KiB is given back. The store's
/// segments are its own mappings; of a connection's buffers only those a big request grows
/// pass 128 KiB, and they are kept until the connection is idle.
const MALLOC_RETURN: libc::c_int = 128 * 1024;

fn fix_malloc_thresholds() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: mallopt only sets allocator parameters; a refusal (0) leaves them dynamic.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_RETURN);
            libc::mallopt(libc::M_TRIM_THRESHOLD, MALLOC_RETURN);
        }
    });
}

/// Return the heap's free memory to the system, after a sweep or a wave of closes freed many
/// buffers (serve.rs). `malloc_trim` gives back the free pages inside every heap but never a
/// thread heap's free top, and its first step merges the small chunks freed last (a
/// connection's smallest buffers) into that top: the buffers freed below them then became top
/// and stayed resident (11 MiB per io_uring worker after 1,000 idle connections each). Only
/// a `free` that leaves a top past M_TRIM_THRESHOLD shrinks it: so one block between 64 KiB
/// (glibc's consolidation threshold) and MALLOC_RETURN is taken and freed here first.
pub fn give_back_heap() {
    const NUDGE: usize = 96 * 1024;
    const _: () = assert!(NUDGE >= 64 * 1024 && NUDGE < MALLOC_RETURN as usize);
    drop(std::hint::black_box(Vec::<u8>::with_capacity(NUDGE)));
    // SAFETY: malloc_trim only returns free memory to the system.
    unsafe { libc::malloc_trim(0) };
}

/// Once a second, wakes the workers that asked for it: a worker whose connections may hold
/// buffers sweeps them at the next tick (serve.rs), and this wake lets it wait without a
/// timeout meanwhile, so its rounds pay nothing for the sweep: no timed wait to convert, no
/// clock to read. One thread for the process, started with the first worker.
pub struct Ticker;

/// How often the ticker looks at the workers' flags.
const TICK: std::time::Duration = std::time::Duration::from_secs(1);

impl Ticker {
    /// Wake `wake` once a tick while `asked` is set (the worker sets and clears it).
    fn watch(asked: Arc<std::sync::atomic::AtomicBool>, wake: Wake) {
        use std::sync::atomic::Ordering::Relaxed;
        type Watched = Vec<(Arc<std::sync::atomic::AtomicBool>, Wake)>;
        static WATCHED: std::sync::Mutex<Watched> = std::sync::Mutex::new(Vec::new());
        static STARTED: std::sync::Once = std::sync::Once::new();
        WATCHED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((asked, wake));
        STARTED.call_once(|| {
            let spawned = std::thread::Builder::new()
                .name("mnemo-ticker".into())
                .spawn(|| loop {
                    std::thread::sleep(TICK);
                    for (asked, wake) in WATCHED.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                        if asked.load(Relaxed) {
                            // A failed wake (the eventfd's counter full) leaves one pending anyway.
                            let _ = wake.wake();
                        }
                    }
                });
            if let Err(e) = spawned {
                // Without it, idle connections keep their buffers until their next request.
                eprintln!("mnemod: cannot start the ticker thread: {e}");
            }
        });
    }
}

/// Make worker `i`'s loop: io_uring when `uring` is set and its setup succeeds, else epoll.
/// The third value says why io_uring, though asked for, is not used (the caller logs it once).
pub fn start(
    sh: &Arc<Shared>,
    i: usize,
    uring: bool,
) -> std::io::Result<(Run, Handoff, Option<String>)> {
    fix_malloc_thresholds();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut why = None;
    if uring {
        match uring::Ring::new(uring::RingConfig::default(), sh.counters[i].clone()) {
            Ok(ring) => {
                let wake = Wake::Uring(ring.waker());
                let mailbox = Arc::new(crate::offload::mailbox::Mailbox::new({
                    let wake = wake.clone();
                    move || wake.wake()
                }));
                let w = serve::Worker::new(ring, sh.clone(), sh.counters[i].clone(), rx, mailbox);
                Ticker::watch(w.sweep_due.clone(), wake.clone());
                return Ok((Box::new(move || w.run()), (tx, wake), None));
            }
            Err(e) => why = Some(e.to_string()),
        }
    }
    let (epoll, waker) = epoll::Epoll::new()?;
    let wake = Wake::Epoll(Arc::new(waker));
    let mailbox = Arc::new(crate::offload::mailbox::Mailbox::new({
        let wake = wake.clone();
        move || wake.wake()
    }));
    let w = serve::Worker::new(epoll, sh.clone(), sh.counters[i].clone(), rx, mailbox);
    Ticker::watch(w.sweep_due.clone(), wake.clone());
    Ok((Box::new(move || w.run()), (tx, wake), why))
}
