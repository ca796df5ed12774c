//! The process's signals, in one place. Each handler only stores to an atomic (the one thing a
//! handler may safely do); the maintenance thread (start.rs `maintenance`) polls the flags once
//! a second and does the work on its own stack.
//!
//! ```text
//!   signal                   installed                        flag     the maintenance thread
//!   SIGHUP                   always, before any listener     RELOAD   reloads the password
//!                            (a reload sent as soon as the              file, the filters and
//!                            port answers must not kill us)             (-Z) the certificates
//!   SIGTERM SIGINT SIGUSR1   with -e or a flash tier         STOP     Shared::shutdown: the
//!                                                                     snapshot or flash list,
//!                                                                     then exit (restart.rs)
//!   (without -e or flash, SIGTERM/SIGINT/SIGUSR1 keep their default action: exit, as in
//!   memcached)
//! ```

use core::sync::atomic::{AtomicBool, Ordering};

static RELOAD: AtomicBool = AtomicBool::new(false);
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_reload(_: libc::c_int) {
    RELOAD.store(true, Ordering::Relaxed);
}

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn install(sig: libc::c_int, handler: extern "C" fn(libc::c_int)) {
    // SAFETY: both handlers only store to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(sig, handler as libc::sighandler_t);
    }
}

/// SIGHUP: reload credentials, filters and certificates (auth.rs, fget's filter host, tls.rs).
pub fn install_reload() {
    install(libc::SIGHUP, on_reload);
}

/// SIGUSR1, SIGTERM and SIGINT: stop keeping the cache (a Ctrl-C in a terminal keeps it as
/// SIGTERM does). Only with `-e` or a flash tier: without a snapshot or a flash list to write
/// they keep their default action.
pub fn install_stop() {
    for sig in [libc::SIGUSR1, libc::SIGTERM, libc::SIGINT] {
        install(sig, on_stop);
    }
}

/// True once after each SIGHUP.
pub fn reload_requested() -> bool {
    RELOAD.swap(false, Ordering::Relaxed)
}

/// Whether a stop signal arrived.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
