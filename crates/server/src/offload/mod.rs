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
