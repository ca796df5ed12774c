//! mnemo-server: the `mnemod` binary's library: flags, listeners, event loops, connections,
//! the command layer and stats. A private crate: `main.rs` uses [`Config`], [`Cli`] and
//! [`run`]; every module is internal.
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

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Bind(#[from] listener::BindError),
    #[error(transparent)]
    Auth(#[from] auth::AuthError),
    #[error("{0}")]
    User(String),
    #[error("{0}")]
    MemoryFile(String),
    #[error("{0}")]
    FlashFile(String),
    #[error("cannot write MEMCACHED_PORT_FILENAME: {0}")]
    PortFile(std::io::Error),
    #[error("cannot write pid file {0}: {1}")]
    Pidfile(String, std::io::Error),
    #[error("cannot start a thread: {0}")]
    Thread(#[from] std::io::Error),
    #[error(transparent)]
    Filter(#[from] mnemo_filter::FilterError),
}

/// Worker and job threads (jobs.rs runs WebAssembly filters on its own stacks): room for the
/// largest `--filter-stack` on top of the server's own needs.
pub(crate) const WORKER_STACK: usize = 2 * 1024 * 1024 + config::MAX_FILTER_STACK;

/// Bind, start every thread, and serve until shutdown.
pub fn run(mut config: Config) -> Result<(), ServerError> {
    // Before the listeners are bound: a client may connect as soon as they are, and a SIGHUP
    // sent then (a test's reload right after the port answered, an operator's config push)
    // met the default action and killed the server.
    signals::install_reload();
    let credentials = auth::Credentials::from_config(&config)?;
    // The path as given, for the restore's log line; the config keeps the resolved one.
    let memory_file_given = config.memory_file.clone();
    if let Some(path) = &config.memory_file {
        // Before binding: a second instance on the same file refuses whatever its port.
        config.memory_file = Some(restart::claim(path).map_err(ServerError::MemoryFile)?);
    }
    for (path, _) in config.ext.flash.paths() {
        // The flash file's records are addressed by this process's index alone: a second
        // server writing its pages would hand both wrong values (memcached refuses too).
        owner::own(std::path::Path::new(path), "-o ext_path").map_err(ServerError::FlashFile)?;
    }
    // Filters load (and compile) before anything is bound: a bad one stops the start-up.
    let filters = mnemo_filter::FilterHost::new(config.filter_limits, config.filters.clone())?;
    let listeners = listener::bind(&config)?;
    let udp_sockets = udp::bind(&config)?;
    listener::write_port_file(&listeners, &udp_sockets).map_err(ServerError::PortFile)?;
    let metrics_listener = config.metrics.as_deref().map(metrics::bind).transpose()?;
    process_setup(&config)?;
    for opt in &config.ext.ignored {
        eprintln!("mnemod: -o {opt}: accepted for compatibility; mnemo has nothing it tunes (docs/operations.md)");
    }
    for ((path, _), bucket) in config.ext.flash.paths().zip(&config.ext.flash.buckets) {
        if *bucket != config::ext::Bucket::Default {
            eprintln!(
                "mnemod: -o ext_path={path}: bucket {}: accepted for compatibility; mnemo's flash pages are one pool, this file's serve every write (docs/flash.md \"Buckets\")",
                bucket.name()
            );
        }
    }
    let sh = Arc::new(Shared::build(config, credentials, filters));
    if sh.store.has_flash() {
        // Before -e's restore, which may write to the flash file.
        restart::keep_flash_start(
            &sh.store,
            sh.config.memory_file.as_deref(),
            sh.clock.now(),
            sh.clock.process_started(),
        );
        signals::install_stop();
    }
    if let Some(path) = &sh.config.memory_file {
        // Before any connection is served: the listeners are bound, so clients that connect
        // meanwhile wait in the backlog.
        let shown = memory_file_given.as_deref().unwrap_or(path);
        let _ = sh.restored.set(restart::restore(
            &sh.store,
            path,
            shown,
            sh.clock.now(),
            sh.clock.process_started(),
        ));
        signals::install_stop();
    }
    sh.conn_counts
        .structs
        .fetch_add(listeners.len() as u64, Relaxed);
    let mut handles = Vec::new();
    let mut senders = Vec::new();
    let uring = sh.config.uring_wanted();
    let mut fallback_logged = false;
    for i in 0..sh.config.threads {
        let (run, handoff, fallback) = worker::start(&sh, i, uring)?;
        let report = sh.config.io_loop_named || sh.verbosity.load(Relaxed) > 0;
        if let (Some(why), false, true) = (fallback, fallback_logged, report) {
            // One line, however many workers: the server runs on epoll just the same.
            eprintln!("mnemod: io_uring unavailable ({why}); using epoll");
            fallback_logged = true;
        }
        senders.push(handoff);
        handles.push(
            std::thread::Builder::new()
                .name(format!("mnemo-worker-{i}"))
                .stack_size(WORKER_STACK)
                .spawn(run)?,
        );
    }
    udp::spawn(udp_sockets, &sh, sh.config.threads)?;
    let maint = sh.clone();
    std::thread::Builder::new()
        .name("mnemo-maint".into())
        .spawn(move || maintenance(&maint))?;
    if let Some(l) = metrics_listener {
        metrics::spawn(l, sh.clone())?;
    }
    if sh.verbosity.load(Relaxed) > 0 {
        eprintln!(
            "mnemod {} serving with {} threads",
            config::VERSION,
            sh.config.threads
        );
        let kind = if senders
            .iter()
            .any(|(_, w)| matches!(w, worker::Wake::Uring(_)))
        {
            "io_uring"
        } else {
            "epoll"
        };
        eprintln!("mnemod: workers run the {kind} event loop");
    }
    listener::run(listeners, sh, senders);
    Ok(())
}

/// After binding (a privileged port needs root): -r, -u, -P, as memcached orders them.
fn process_setup(config: &Config) -> Result<(), ServerError> {
    if config.coredumps {
        // SAFETY: plain libc calls on a local struct.
        unsafe {
            let mut rl: libc::rlimit = std::mem::zeroed();
            if libc::getrlimit(libc::RLIMIT_CORE, &mut rl) == 0 {
                rl.rlim_cur = rl.rlim_max;
                libc::setrlimit(libc::RLIMIT_CORE, &rl);
            }
        }
    }
    // SAFETY: geteuid has no preconditions.
    if let (Some(user), 0) = (&config.user, unsafe { libc::geteuid() }) {
        drop_privileges(user).map_err(ServerError::User)?;
    }
    if let Some(path) = &config.pidfile {
        std::fs::write(path, format!("{}\n", std::process::id()))
            .map_err(|e| ServerError::Pidfile(path.display().to_string(), e))?;
    }
    Ok(())
}

fn drop_privileges(user: &str) -> Result<(), String> {
    let name = std::ffi::CString::new(user).map_err(|_| format!("bad user name {user:?}"))?;
    // SAFETY: getpwnam returns a pointer into static storage, read at once; the id-changing
    // calls take plain integers. Group first: once the uid changes, setgid is not allowed.
    unsafe {
        let pw = libc::getpwnam(name.as_ptr());
        if pw.is_null() {
            return Err(format!("can't find the user {user} to switch to"));
        }
        let (uid, gid) = ((*pw).pw_uid, (*pw).pw_gid);
        if libc::setgroups(0, std::ptr::null()) != 0 && uid != 0 {
            return Err(format!("failed to drop supplementary groups for {user}"));
        }
        if libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
            return Err(format!("failed to assume the identity of {user}"));
        }
    }
    Ok(())
}

/// One line for the flash file's I/O errors of the last second (`new` of `all` so far).
fn log_flash_errors(new: u64, all: u64, last: &str) {
    eprintln!(
        "mnemod: flash file: {new} I/O error(s) in the last second, {all} in all (stats: extstore_io_errors); \
         the latest: {last}; the values in a failed write are lost (misses)"
    );
}

/// Advance the clock at each second boundary and let the store reclaim expired segments.
fn maintenance(sh: &Shared) {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};
    // Flash I/O errors already logged: each second with new ones gets one line.
    let mut io_errors_logged = 0;
    loop {
        let sub = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        std::thread::sleep(
            Duration::from_nanos(u64::from(1_000_000_000 - sub.min(999_999_999)))
                + Duration::from_millis(1),
        );
        let now = sh.clock.tick();
        if signals::stop_requested() {
            if sh.verbosity.load(Relaxed) > 0 {
                eprintln!("mnemod: stopping on a signal");
            }
            sh.shutdown();
        }
        sh.store.maintain(now);
        if let Some((n, last)) = sh.store.flash_io_errors() {
            // Fewer than logged: `stats reset` zeroed the count.
            if n > io_errors_logged {
                log_flash_errors(n - io_errors_logged, n, &last);
            }
            io_errors_logged = n;
        }
        if signals::reload_requested() {
            if sh.config.auth_file.is_some() || sh.config.sasldb.is_some() {
                match auth::Credentials::from_config(&sh.config) {
                    Ok(c) => *sh.credentials.write() = c,
                    // Keep serving with the old users rather than locking everyone out.
                    Err(e) => eprintln!("mnemod: SIGHUP: {e}; keeping the previous credentials"),
                }
            }
            // Compiling happens here, on the maintenance thread: workers keep serving with
            // the filters they have until each new one is swapped in.
            for (name, e) in sh.filters.reload() {
                eprintln!("mnemod: SIGHUP: filter {name}: {e}; keeping the previous version");
            }
            // memcached 1.6.40: SIGHUP reloads the certificates too, as `refresh_certs` does;
            // a bad file keeps the ones in force.
            if let Some(tls) = &sh.config.tls {
                if let Err(e) = tls.refresh(sh.clock.now()) {
                    eprintln!("mnemod: Could not reload TLS certificates on SIGHUP: {e}");
                }
            }
        }
    }
}
