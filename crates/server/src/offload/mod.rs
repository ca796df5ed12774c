//! Work that finishes off the event loops, and its way back to the connection that asked:
//!
//! ```text
//!   jobs.rs     the job pool: fget's filter calls that are not brief (--job-threads), the
//!               deadline and its watchdog
//!   flashio.rs  the flash I/O pool: reads of flashed values (-o ext_threads)
//!   pool.rs     what both pools share: a FIFO queue, a condvar, threads started on first use
//!   mailbox.rs  a worker's mailbox: finished jobs' replies and their wake-up (a leaf)
//! ```

pub(crate) mod flashio;
pub(crate) mod jobs;
pub(crate) mod mailbox;
pub(crate) mod pool;

use std::sync::Arc;

use crate::command::{Lane, Pending};
use crate::Shared;
use mailbox::Mailbox;

/// A job, and where its reply goes.
pub(crate) struct Job {
    pub work: Pending,
    pub to: Arc<Mailbox>,
    /// The connection's slot on its worker and the slot's generation when the job was made.
    pub slot: usize,
    pub gen: u32,
}

/// Hand a job to the pool its work names (a flash read never queues behind a filter call).
pub(crate) fn submit(sh: &Arc<Shared>, job: Job) {
    match job.work.lane() {
        Lane::Jobs => sh.jobs.submit(sh, job),
        Lane::FlashIo => sh.flash_io.submit(sh, job),
    }
}
