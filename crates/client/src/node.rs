//! One server as the client sees it: its idle connections (a small pool), a bound on
//! connections in use, and its health (consecutive failures, ejected until when).
//!
//! ```text
//!   ok ──fail──> failures=1 ── ... ──fail (failure_limit)──> ejected until now+retry_interval
//!    ^                                                          │ keys go to the next point
//!    └──────────── success on a retry (after the interval) ─────┘ on the ring meanwhile
//! ```

use crate::conn::Conn;
use crate::ketama::ServerSpec;
use crate::Config;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use tokio::sync::{Semaphore, SemaphorePermit};

pub(crate) struct Node {
    pub spec: ServerSpec,
    pub addr: String,
    idle: Mutex<Vec<Conn>>,
    in_use: Semaphore,
    failures: AtomicU32,
    ejected_until: Mutex<Option<Instant>>,
}

impl Node {
    pub fn new(spec: ServerSpec, cfg: &Config) -> Node {
        Node {
            addr: spec.addr(),
            spec,
            idle: Mutex::new(Vec::new()),
            in_use: Semaphore::new(cfg.max_connections.max(1)),
            failures: AtomicU32::new(0),
            ejected_until: Mutex::new(None),
        }
    }

    /// Not ejected, or ejected but its retry time has come (the next request tries it).
    pub fn is_live(&self, now: Instant) -> bool {
        match *self.ejected_until.lock().unwrap() {
            None => true,
            Some(t) => now >= t,
        }
    }

    pub fn is_ejected(&self) -> bool {
        !self.is_live(Instant::now())
    }

    /// A permit to use a connection, bounding this server's connections.
    pub async fn permit(&self) -> SemaphorePermit<'_> {
        self.in_use.acquire().await.expect("semaphore never closed")
    }

    /// An idle connection, if one is pooled.
    pub fn take_idle(&self) -> Option<Conn> {
        self.idle.lock().unwrap().pop()
    }

    /// Return a healthy connection to the pool (dropped, i.e. closed, when the pool is full).
    pub fn put_idle(&self, conn: Conn, cfg: &Config) {
        let mut idle = self.idle.lock().unwrap();
        if idle.len() < cfg.pool_size {
            idle.push(conn);
        }
    }

    pub fn record_success(&self) {
        if self.failures.swap(0, Ordering::Relaxed) != 0 {
            *self.ejected_until.lock().unwrap() = None;
        }
    }

    /// Count a failure; the `failure_limit`th in a row ejects the server for `retry_interval`
    /// (at once again when a retry after the interval fails). Idle connections are dropped:
    /// after a failure they are suspect.
    pub fn record_failure(&self, cfg: &Config) {
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        self.idle.lock().unwrap().clear();
        if let Some(limit) = cfg.failure_limit {
            if n >= limit.max(1) {
                *self.ejected_until.lock().unwrap() = Some(Instant::now() + cfg.retry_interval);
            }
        }
    }
}
