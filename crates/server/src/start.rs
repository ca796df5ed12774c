//! Start-up and the maintenance thread: what `mnemod` does from its command line to its
//! exit. The top of the crate: it binds the listeners, builds the shared state
//! ([`crate::Shared`]), starts every thread (workers, UDP, metrics, the accept loop) and runs
//! the maintenance loop (clock, expiry, signals) until shutdown.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::{
    auth, config, listener, metrics, owner, restart, signals, udp, worker, Shared, WORKER_STACK,
};
use config::Config;

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
