//! mnemo-server: the `mnemod` binary's library: flags, listeners, event loops, connections,
//! the command layer and stats. A private crate: `main.rs` uses [`Config`], [`Cli`] and
//! [`start::run`]; every other module is internal. This file holds [`Shared`], the state
//! every thread reads (the bottom of the crate: nearly every module takes it); start.rs, the
//! top, starts the threads that use it.
//!
//! Thread model:
//!
//! ```text
//!              accept thread                       worker threads (-t, default 4)
//!   listen ──> accept, -c check, TCP_NODELAY ──┬──> worker 0: io_uring (worker/uring.rs) ──┐
//!   sockets    round robin via channel + waker ├──> worker 1:   or epoll (worker/epoll.rs) ├─> Store
//!                                              └──> worker N-1                           │  (sharded,
//!   maintenance thread: advances the clock once a second, reclaims expired segments ─────┤   lock per shard)
//!   -U: per interface, -t UDP threads (udp.rs): a datagram in, its replies out ──────────┤
//!   job pool (offload/jobs.rs, --job-threads): fget's calls that are not brief; ─────────┘
//!     a reply goes back to its worker's mailbox and wakes it (the accept thread's waker)
//! ```
//!
//! Layers, top to bottom:
//!
//! ```text
//!   listener.rs, worker/ (serve.rs: the one       bytes in and out, connection slots, turns,
//!   connection layer; epoll.rs, uring.rs move     idle kicks; conn.rs: one connection's
//!   the bytes), conn.rs, udp.rs                   buffers and state
//!   protocol/ (text, meta, binary)               parse a request, encode the answer
//!   admin/ (stats, crawler: dumps and slabs,     the admin commands and the counters
//!     detail, conns, extstore)
//!   command/                                     what a get, a store or a delete does: the
//!                                                store call, counters, stats detail, CAS/TTL
//!   offload/ (jobs, flashio, pool, mailbox)      work finished off the event loops (filter
//!                                                calls, flash reads) and its way back
//!   mnemo_store                                  items, memory, shards
//! ```
//!
//! Which loop a worker runs is chosen at start-up (`--io-loop`, docs/operations.md "Event loops"):
//! io_uring by default, epoll when asked, when the kernel refuses io_uring, or with -Z. A
//! connection never moves between workers; a request is parsed, executed and answered on the
//! worker that read it (an fget's filter call excepted: it runs on the job pool, and its
//! reply leaves from the worker in its place), and all replies of a batch leave in one write.
//!
//! Invariants:
//! - A shard lock is held only inside one store call, never across a wait. The one I/O done
//!   under it is deliberate: a value of `command::read::DIRECT_MIN` bytes or more is handed to
//!   the socket by one nonblocking writev (or vmsplice) from inside the store's read callback
//!   (`command::read::Direct`), which cannot block, so that the value is not first copied
//!   under the same lock. The other exception is warm restart's snapshot (`-e`): at shutdown
//!   every shard is locked and stays locked while the file is written, so that no write is
//!   acknowledged after the snapshot; the process exits after it.
//! - Replies on a connection leave in request order.
//! - Counters are per worker (`stats::Counters`), summed when read.

mod admin;
mod auth;
mod clock;
mod command;
mod config;
mod conn;
mod fget;
mod listener;
mod marks;
mod metrics;
mod offload;
mod owner;
mod protocol;
mod restart;
mod signals;
mod splice;
pub mod start;
mod tls;
mod udp;
mod watch;
mod worker;

use admin::{conns, crawler, detail, stats};
use offload::{flashio, jobs};

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;

pub use config::{Cli, Config};
use mnemo_store::{Store, StoreConfig};

/// Highest level the `verbosity` command sets (-vv).
pub(crate) const MAX_VERBOSITY: u8 = 2;

/// State every thread reads.
pub(crate) struct Shared {
    pub config: Config,
    pub store: Store,
    pub clock: clock::Clock,
    /// One block per worker; index = worker number.
    pub counters: Vec<Arc<stats::Counters>>,
    /// Connections open, accepted, refused, and connection structures (conns.rs).
    pub conn_counts: conns::ConnCounts,
    /// Authentication attempts (text -Y and SASL) and the failed ones.
    pub auth: auth::Attempts,
    pub verbosity: AtomicU8,
    /// Users for -Y / -S; empty when authentication is off.
    pub credentials: parking_lot::RwLock<auth::Credentials>,
    /// `stats detail` per-prefix counters.
    pub detail: detail::Detail,
    /// Meta stale / win-token states.
    pub marks: marks::Marks,
    /// `lru_crawler`'s switch, counter and pacing knobs (crawler.rs).
    pub crawler: crawler::Knobs,
    /// The filters `fget` may run (none unless the operator installed some).
    pub filters: mnemo_filter::FilterHost,
    /// Where filter calls run, off the event loops (jobs.rs).
    pub jobs: jobs::Pool,
    /// Where flash reads run, off the event loops (flashio.rs).
    pub flash_io: flashio::Pool,
    /// The `ext_*` settings as `-o` gave them and `extstore <name> <value>` changed them
    /// since (extstore.rs); `stats settings` reports these.
    pub extstore: parking_lot::Mutex<config::ext::FlashOptions>,
    /// `slabs automove` as clients last set it (reported by `stats settings`).
    pub slab_automove: config::SlabAutomove,
    /// `stats sizes` tracking, on with `-o track_sizes` (memcached 1.6.25 dropped the runtime switch).
    pub sizes_enabled: AtomicBool,
    /// The accept loop's state, for `stats`.
    pub listen: listener::ListenStats,
    /// Listening sockets and connections by descriptor, for `stats conns`.
    pub conn_table: conns::ConnTable,
    /// `watch` connections and the streams they asked for (watch.rs).
    pub watch: Arc<watch::Hub>,
    /// What the start-up restore from `-e` did (`stats snapshot`); unset before it ran.
    pub restored: std::sync::OnceLock<restart::Restored>,
    stopping: AtomicBool,
}

impl Shared {
    /// Unit tests' Shared: no users, no filters.
    #[cfg(test)]
    pub fn new(config: Config) -> Shared {
        Shared::with_credentials(config, auth::Credentials::default())
    }

    /// Without filters, whatever the config lists (tests that need none).
    #[cfg(test)]
    pub fn with_credentials(config: Config, credentials: auth::Credentials) -> Shared {
        let filters = mnemo_filter::FilterHost::new(config.filter_limits, Vec::new())
            .expect("an empty filter host");
        Shared::build(config, credentials, filters)
    }

    pub fn build(
        config: Config,
        credentials: auth::Credentials,
        filters: mnemo_filter::FilterHost,
    ) -> Shared {
        let store = Store::new(StoreConfig {
            mem_limit: config.memory_limit,
            item_size_max: config.item_size_max,
            evict: config.evict,
            eviction: config.eviction,
            use_cas: config.use_cas,
            flash: config.ext.flash.store_config(),
            ..StoreConfig::default()
        });
        let watch: Arc<watch::Hub> = Arc::default();
        store.watch_evictions(watch.clone());
        let ext = config.ext.clone();
        let jobs = jobs::Pool::new(config.job_threads);
        // The workers' counters blocks, then the UDP threads' (udp.rs), then the flash I/O
        // threads' (flashio.rs).
        let io_first = config.threads + udp::threads(&config);
        let flash_io = flashio::Pool::new(flashio::threads(&config), io_first);
        Shared {
            counters: (0..io_first + flashio::threads(&config))
                .map(|_| Arc::new(stats::Counters::default()))
                .collect(),
            flash_io,
            extstore: parking_lot::Mutex::new(config.ext.flash.clone()),
            verbosity: AtomicU8::new(config.verbose.min(MAX_VERBOSITY)),
            config,
            store,
            clock: clock::Clock::new(),
            conn_counts: conns::ConnCounts::default(),
            auth: auth::Attempts::default(),
            credentials: parking_lot::RwLock::new(credentials),
            marks: marks::Marks::default(),
            detail: detail::Detail::default(),
            crawler: crawler::Knobs::new(
                ext.lru_crawler,
                ext.lru_crawler_sleep,
                ext.lru_crawler_tocrawl,
            ),
            filters,
            jobs,
            slab_automove: config::SlabAutomove::new(
                ext.slab_automove,
                ext.slab_automove_ratio,
                ext.slab_automove_window,
            ),
            sizes_enabled: AtomicBool::new(ext.track_sizes),
            listen: listener::ListenStats::default(),
            conn_table: conns::ConnTable::default(),
            watch,
            restored: std::sync::OnceLock::new(),
            stopping: AtomicBool::new(false),
        }
    }

    /// Count an authentication attempt.
    pub fn count_auth(&self, ok: bool) {
        self.auth.cmds.fetch_add(1, Relaxed);
        if !ok {
            self.auth.errors.fetch_add(1, Relaxed);
        }
    }

    /// A client's `shutdown` command (either event loop): said on stderr with -v, then
    /// [`Shared::shutdown`].
    pub fn shutdown_by_client(&self) -> ! {
        if self.verbosity.load(Relaxed) > 0 {
            eprintln!("mnemod: shutdown requested by a client");
        }
        self.shutdown()
    }

    /// `shutdown`, SIGUSR1/SIGTERM with `-e` or a flash tier: stop serving and exit the
    /// process, writing the warm-restart snapshot first when `-e` names one, else the list of
    /// what is on flash when there is a flash tier (restart.rs).
    pub fn shutdown(&self) -> ! {
        self.stopping.store(true, Relaxed);
        let cleanup = || {
            if let Some(path) = &self.config.unix_socket {
                let _ = std::fs::remove_file(path);
            }
            if let Some(path) = &self.config.pidfile {
                let _ = std::fs::remove_file(path);
            }
        };
        if let Some(path) = &self.config.memory_file {
            restart::save_and_exit(
                &self.store,
                path,
                self.clock.now(),
                self.clock.process_started(),
                cleanup,
            );
        }
        if self.store.has_flash() {
            restart::keep_flash_and_exit(
                &self.store,
                self.clock.now(),
                self.clock.process_started(),
                cleanup,
            );
        }
        cleanup();
        std::process::exit(0);
    }
}

/// Worker and job threads (jobs.rs runs WebAssembly filters on its own stacks): room for the
/// largest `--filter-stack` on top of the server's own needs.
pub(crate) const WORKER_STACK: usize = 2 * 1024 * 1024 + config::MAX_FILTER_STACK;
