//! `stats conns`: every listening socket and connection, by descriptor, as memcached 1.6.18
//! lists them:
//!
//! ```text
//!   STAT <fd>:addr tcp:127.0.0.1:11211          listening socket
//!   STAT <fd>:state conn_listening
//!   STAT <fd>:secs_since_last_cmd <s>
//!   STAT <fd>:UDP UDP                           a UDP thread's socket (one per -t thread)
//!   STAT <fd>:addr udp:127.0.0.1:11211
//!   STAT <fd>:state conn_read
//!   STAT <fd>:secs_since_last_cmd <s>
//!   STAT <fd>:addr tcp:127.0.0.1:40212          connection
//!   STAT <fd>:listen_addr tcp:127.0.0.1:11211
//!   STAT <fd>:state conn_parse_cmd              (the one asking; others conn_read, conn_mwrite
//!                                                or conn_nread: a command awaiting its data)
//!   STAT <fd>:secs_since_last_cmd <s>
//! ```
//!
//! Connections live on their workers; each shares a small [`ConnInfo`] (when its last command
//! completed, whether replies are waiting) that its worker updates once per turn, and registers
//! it here when adopted. The table is touched on accept and close only.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::Arc;

use mnemo_proto::reply::{line, stat};
use parking_lot::Mutex;

use crate::Shared;

/// What other threads may read of one connection.
#[derive(Default, Debug)]
pub struct ConnInfo {
    /// When a command last completed (the clock's seconds): memcached's last_cmd_time.
    pub last_cmd: AtomicU32,
    /// Replies are waiting for the socket (memcached's conn_mwrite).
    pub writing: AtomicBool,
    /// A command waits for its data block (memcached's conn_nread).
    pub reading_data: AtomicBool,
}

struct Row {
    addr: String,
    /// None: a listening socket (or a UDP thread's socket, `udp`).
    listen_addr: Option<String>,
    /// A UDP thread's socket: memcached's UDP connection, always in conn_read.
    udp: bool,
    info: Arc<ConnInfo>,
}

/// memcached's connection counters (`stats`: curr_connections, total_connections,
/// rejected_connections, connection_structures).
#[derive(Default, Debug)]
pub struct ConnCounts {
    pub curr: std::sync::atomic::AtomicUsize,
    pub total: std::sync::atomic::AtomicU64,
    pub rejected: std::sync::atomic::AtomicU64,
    /// Listening sockets plus the connection slots the workers have made (a slot is kept for
    /// reuse once made).
    pub structs: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
pub struct ConnTable {
    rows: Mutex<BTreeMap<i32, Row>>,
}

thread_local! {
    /// The descriptor of the connection whose request this thread is executing.
    static CURRENT: Cell<i32> = const { Cell::new(-1) };
}

/// Called by a connection before it executes requests, so `stats conns` knows who asks.
pub fn set_current(fd: i32) {
    CURRENT.with(|c| c.set(fd));
}

/// The descriptor [`set_current`] last named on this thread (-1: none), for `watch`'s `cfd=`.
pub fn current() -> i32 {
    CURRENT.with(Cell::get)
}

impl ConnTable {
    /// A listening socket, open since `now`.
    pub fn add_listener(&self, fd: i32, addr: String, now: u32) {
        let info = Arc::new(ConnInfo {
            last_cmd: AtomicU32::new(now),
            ..ConnInfo::default()
        });
        self.rows.lock().insert(
            fd,
            Row {
                addr,
                listen_addr: None,
                udp: false,
                info,
            },
        );
    }

    /// A UDP thread's socket (udp.rs), as memcached lists each thread's UDP connection.
    pub fn add_udp(&self, fd: i32, addr: String, info: Arc<ConnInfo>) {
        self.rows.lock().insert(
            fd,
            Row {
                addr,
                listen_addr: None,
                udp: true,
                info,
            },
        );
    }

    pub fn add(&self, fd: i32, addr: String, listen_addr: String, info: Arc<ConnInfo>) {
        self.rows.lock().insert(
            fd,
            Row {
                addr,
                listen_addr: Some(listen_addr),
                udp: false,
                info,
            },
        );
    }

    pub fn remove(&self, fd: i32) {
        self.rows.lock().remove(&fd);
    }
}

/// memcached's address form: `tcp:1.2.3.4:port`, `tcp6:[::1]:port`, `unix:/path`.
pub fn tcp_addr(a: std::net::SocketAddr) -> String {
    match a {
        std::net::SocketAddr::V4(a) => format!("tcp:{a}"),
        std::net::SocketAddr::V6(a) => format!("tcp6:{a}"),
    }
}

/// The same for a UDP socket: `udp:1.2.3.4:port`, `udp6:[::1]:port`.
pub fn udp_addr(a: std::net::SocketAddr) -> String {
    match a {
        std::net::SocketAddr::V4(a) => format!("udp:{a}"),
        std::net::SocketAddr::V6(a) => format!("udp6:{a}"),
    }
}

pub fn unix_addr(path: &str) -> String {
    format!("unix:{path}")
}

/// `stats conns`.
pub fn stats(sh: &Shared, out: &mut Vec<u8>) {
    let now = sh.clock.now();
    let me = CURRENT.with(Cell::get);
    for (fd, row) in sh.conn_table.rows.lock().iter() {
        if row.udp {
            stat(out, &format!("{fd}:UDP"), "UDP");
        }
        stat(out, &format!("{fd}:addr"), &row.addr);
        let state = match &row.listen_addr {
            None if row.udp => "conn_read",
            None => "conn_listening",
            Some(listen) => {
                stat(out, &format!("{fd}:listen_addr"), listen);
                if *fd == me {
                    "conn_parse_cmd"
                } else if row.info.writing.load(Relaxed) {
                    "conn_mwrite"
                } else if row.info.reading_data.load(Relaxed) {
                    "conn_nread"
                } else {
                    "conn_read"
                }
            }
        };
        stat(out, &format!("{fd}:state"), state);
        stat(
            out,
            &format!("{fd}:secs_since_last_cmd"),
            now.saturating_sub(row.info.last_cmd.load(Relaxed)),
        );
    }
    line(out, b"END");
}
