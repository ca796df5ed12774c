//! The flash I/O pool: where the reads of flashed values run, so that an event loop never
//! waits for the disk (issue 37). Its own threads (`-o ext_threads`, memcached's option for
//! its extstore I/O threads), not the job pool's: a flash read must not queue behind a
//! filter call. Its queue and threads are pool.rs's, as the job pool's are.
//!
//! ```text
//!   worker i (event loop)                       flash I/O pool (ext_threads, started on first use)
//!   ─────────────────────                       ──────────────────────────────────────────────────
//!   read::get: the lookup finds the value on    queue (mutex + condvar), FIFO across workers
//!     flash -> Answer::Later(Flashed)           thread k: Read::run(sh, counters k)
//!   protocol: Pending::FlashRead(Read) ───────>   read the records (pread, or a write buffer's
//!     owning the key(s) and its reply's shape       copy), verify, write the reply in the
//!   Conn: Turn::Later, parses nothing more          request's protocol, count the outcome
//!   jobs.rs submit routes it here                 to.post(Done { slot, gen, reply })
//!   mailbox i <──────────── Done ──────────────┘  (jobs.rs's Mailbox: wakes worker i)
//!     the reply takes its place in the output; the connection goes on
//! ```
//!
//! Only reads that would wait for the disk come here: a record in a write buffer or in the
//! page cache is served on the worker at once (read.rs `cached`, `preadv2(RWF_NOWAIT)`).
//!
//! The deferred read's lookup already ran on the worker (under the shard lock, marking the
//! item fetched and counting `cmd_get`), so the job starts from its location and does not
//! look the key up again. A job is a flash batch (command/batch.rs, written once for the three
//! protocols): a text multi-get hands over every key from the first flashed one on, and the
//! connection gathers the gets pipelined after the deferred request into it (single-key
//! `get`/`gets`; mg and mn; the binary GET family and NOOP), stopping at any other request,
//! which runs on the worker once the job's replies are in place. The job looks the keys up
//! (RAM hits written at once), reads all their flashed records together
//! (`Store::read_flash_many`: one io_uring submission of the thread's own ring), then writes
//! the replies in request order:
//!
//! ```text
//!   input: GETQ f1 | GETQ r2 | GETKQ f3 | GETQ miss | NOOP | SET k | GETQ k
//!          └─ deferred ─┴──────── gathered into its job ─────────┘  └ after the job ┘
//!   job:   locate r2 (RAM hit, written), f3 (flashed), miss (quiet: nothing)
//!          read f1 and f3 together; replies in request order, the NOOP's last
//! ```
//!
//! The pause: a job stops where a RAM multi-get pauses (`GET_PAUSE_BYTES`), so a client that
//! asks for many flashed values and never reads pins what it pins for RAM values (issue 47:
//! 20 such clients of `get` over 600 x 100 KB took 1.2 GB when a job built its whole reply);
//! command/batch.rs says how. The connection (conn.rs) keeps the input the job took until
//! its reply arrives; then a text get runs on from the key the job stopped at (as after
//! `Next::Resume`, once the output drains), and a pipeline's unanswered requests are parsed
//! again. Replies stay in request order, byte for byte what one pass would write.
//!
//! ```text
//!   get f1 f2 f3 f4 f5 (100 KB each, cold)   job 1: f1 f2 f3 (300 KB >= 256 KiB), Keys(3)
//!   output drained below WBUF_HIGH ─────────> worker: get from f4: deferred, job 2: f4 f5 END
//! ```
//!
//! Counting: each pool thread has a block of its own in `Shared::counters` (after the
//! workers' and the UDP threads'), since a block is written by one thread only (stats.rs).
//!
//! A page recycled between the lookup and the read is safe: the read checks the page's
//! generation before it reads and the record carries its page and generation under its
//! checksum, so a recycled or half-rewritten location is a miss (`miss_from_extstore` or
//! `badcrc_from_extstore`), never another item's bytes.

use std::sync::Arc;

use super::mailbox::Done;
use super::Job;
use crate::command::Lane;
use crate::{Config, Shared};

/// How many pool threads `config` asks for: none without a flash tier.
pub(crate) fn threads(config: &Config) -> usize {
    if config.ext.flash.path.is_some() {
        (config.ext.flash.threads as usize).max(1)
    } else {
        0
    }
}

/// The pool: a queue and the threads that serve it (pool.rs).
pub(crate) struct Pool {
    lanes: crate::offload::pool::Pool<Job>,
    /// The first pool thread's block in `Shared::counters`.
    counters: usize,
}

impl Pool {
    pub fn new(threads: usize, counters: usize) -> Pool {
        Pool {
            lanes: crate::offload::pool::Pool::new(threads),
            counters,
        }
    }

    /// Queue a flash batch (a job of [`Lane::FlashIo`]); the threads start with the first.
    pub fn submit(&self, sh: &Arc<Shared>, job: Job) {
        debug_assert_eq!(job.work.lane(), Lane::FlashIo);
        let threads = sh.clone();
        self.lanes
            .start("mnemo-flash-io", None, move |i| run(&threads, i));
        self.lanes.push(job);
    }
}

/// Pool thread `me`: serve the queue for ever.
fn run(sh: &Shared, me: usize) {
    let pool = &sh.flash_io;
    let c = sh.counters[pool.counters + me].clone();
    loop {
        let job = pool.lanes.pop();
        let (reply, answered) = job.work.run(sh, &c, &|| true);
        job.to.post(Done {
            slot: job.slot,
            gen: job.gen,
            reply,
            answered,
        });
    }
}
