//! memcached's `watch`: a connection that asks for log streams (fetchers, mutations,
//! evictions, connevents, deletions) stops taking commands and receives one line per event,
//! in memcached's `ts= gid= type= key= ...` formats, until it closes.
//!
//! ```text
//!   producers (any thread, never blocked)            the watcher's worker (its event loop)
//!   ─────────────────────────────────────            ──────────────────────────────────────
//!   command layer: get/set/delete/touch ─┐
//!   store: an eviction (shard lock held) ├─ Hub::flags & stream? (one relaxed load; no
//!   worker: connection adopted / closed ─┘    watcher: nothing more is done)
//!        │ yes (cold): format the line once, gid = ++Hub::gid
//!        v
//!   for each watcher of that stream:  lock its buffer (a leaf lock)
//!        room (256 KiB, memcached's)? ── no ──> skipped += 1 (the line is lost)
//!        │ yes: `skipped=N\n` first if lines were lost, then the line
//!        └─ first line since the watcher's last turn? post its (slot, gen) to its
//!           worker's mailbox (jobs.rs) ─────────────> deliver: mark the slot for a turn
//!                                                     Conn::watch_turn: drop any input (a
//!                                                     read of 0 closes it), and while the
//!                                                     socket takes all: move the buffer into
//!                                                     the output, write it
//! ```
//!
//! The bound is per watcher: a watcher that reads slowly loses lines (memcached's
//! `skipped=N`), never slows a producer or grows the server's memory beyond its buffer and
//! one connection output. A producer's cost while nobody watches its stream is the load of
//! [`Hub::flags`] and one branch (the get/set path: `read::count`, `write::store`).
//!
//! How a connection becomes a watcher: `watch ...` (protocol/text.rs) registers a [`Watcher`] and
//! answers `OK`; the command is a [`Pending::Watch`] job that never completes, so the
//! connection writes its replies and parses nothing more (conn.rs, as for any job), and the
//! job pool's submit attaches the connection's slot to the watcher instead of running it
//! (jobs.rs). The connection's [`Handle`] removes the watcher when the connection goes.
//!
//! What mnemod reports differs from memcached where its engine differs (docs/compatibility.md):
//! `clsid` is 1 for every item (no slab classes; 0 on a miss, as memcached), `status=flushed`
//! and `expired` come from the store's lookup, and `sysevents`, `rawcmds` and the proxy streams
//! are accepted but carry nothing. `evictions` carries the items the store evicts to make room
//! (mnemo_store's evicted.rs says which evictions it reports), one line each, written from
//! under the item's shard lock only while someone watches evictions.
//!
//! [`Pending::Watch`]: crate::command::Pending::Watch

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use mnemo_store::{Lookup, Mode, Time};
use parking_lot::{Mutex, RwLock};

use crate::offload::mailbox::Mailbox;
use crate::Shared;

/// The streams, as bits of [`Hub::flags`].
pub const FETCHERS: u32 = 1 << 0;
pub const MUTATIONS: u32 = 1 << 1;
pub const EVICTIONS: u32 = 1 << 2;
pub const CONNEVENTS: u32 = 1 << 3;
pub const DELETIONS: u32 = 1 << 4;
/// Accepted as memcached does; mnemod has no events for them (module docs).
const SILENT: u32 = 1 << 5;

/// memcached's WATCHER_LIMIT.
const WATCHER_LIMIT: usize = 20;
/// memcached's LOGGER_WATCHER_BUF_SIZE (its default `watcher_logbuf_size`).
const BUF_CAP: usize = 256 * 1024;
/// A line needs this much room beyond its length (memcached reserves the same for `skipped=`).
const SKIP_ROOM: usize = 128;

/// Every watcher, and the union of the streams they asked for.
#[derive(Default)]
pub struct Hub {
    flags: AtomicU32,
    gid: AtomicU64,
    list: RwLock<Vec<Arc<Watcher>>>,
    /// Lines produced (memcached's log_worker_written), put in a watcher's buffer
    /// (log_watcher_sent), lost to a full buffer (log_watcher_skipped).
    written: AtomicU64,
    sent: AtomicU64,
    skipped: AtomicU64,
}

/// One watching connection's streams and buffer.
pub struct Watcher {
    flags: u32,
    state: Mutex<State>,
}

struct State {
    buf: Vec<u8>,
    /// Lines lost since the last one buffered.
    skipped: u64,
    /// Where a wake goes: the connection's worker mailbox, slot and generation (None until the
    /// job pool attached it).
    to: Option<(Arc<Mailbox>, usize, u32)>,
    /// A wake is on its way and the connection has not taken a turn since.
    notified: bool,
}

impl Hub {
    /// The streams someone watches: the one load a producer makes.
    #[inline(always)]
    pub fn flags(&self) -> u32 {
        self.flags.load(Relaxed)
    }

    /// Whether anyone watches `stream`.
    #[inline(always)]
    pub fn wants(&self, stream: u32) -> bool {
        self.flags() & stream != 0
    }

    /// `stats`: log_worker_written, log_watcher_sent, log_watcher_skipped, log_watchers.
    pub fn stats(&self) -> [u64; 4] {
        let n = self.list.read().len() as u64;
        [
            self.written.load(Relaxed),
            self.sent.load(Relaxed),
            self.skipped.load(Relaxed),
            n,
        ]
    }

    fn refresh_flags(&self, list: &[Arc<Watcher>]) {
        self.flags
            .store(list.iter().fold(0, |f, w| f | (w.flags & !SILENT)), Relaxed);
    }

    /// A line for the watchers of `stream`: `body` writes what follows `ts=.. gid=.. `.
    #[cold]
    #[inline(never)]
    fn emit(&self, stream: u32, body: impl FnOnce(&mut Vec<u8>)) {
        let list = self.list.read();
        if !list.iter().any(|w| w.flags & stream != 0) {
            return;
        }
        let gid = self.gid.fetch_add(1, Relaxed) + 1;
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let mut line = Vec::with_capacity(160);
        // memcached prints the microseconds with %d: no zero padding.
        line.extend_from_slice(
            format!("ts={}.{} gid={gid} ", ts.as_secs(), ts.subsec_micros()).as_bytes(),
        );
        body(&mut line);
        line.push(b'\n');
        self.written.fetch_add(1, Relaxed);
        for w in list.iter().filter(|w| w.flags & stream != 0) {
            if w.offer(&line) {
                self.sent.fetch_add(1, Relaxed);
            } else {
                self.skipped.fetch_add(1, Relaxed);
            }
        }
    }
}

impl Watcher {
    /// Buffer a line, or count it lost; wake the connection if it has not been woken since
    /// its last turn. Returns whether the line was buffered.
    fn offer(&self, line: &[u8]) -> bool {
        let wake = {
            let mut st = self.state.lock();
            if st.buf.len() + line.len() + SKIP_ROOM > BUF_CAP {
                st.skipped += 1;
                return false;
            }
            if st.skipped > 0 {
                let skipped = format!("skipped={}\n", st.skipped);
                st.buf.extend_from_slice(skipped.as_bytes());
                st.skipped = 0;
            }
            st.buf.extend_from_slice(line);
            st.wake()
        };
        if let Some((to, slot, gen)) = wake {
            to.nudge(slot, gen);
        }
        true
    }

    /// The job pool's side (jobs.rs): where wakes go from now on.
    pub(crate) fn attach(&self, to: Arc<Mailbox>, slot: usize, gen: u32) {
        let wake = {
            let mut st = self.state.lock();
            st.to = Some((to, slot, gen));
            if st.buf.is_empty() {
                None
            } else {
                st.wake()
            }
        };
        if let Some((to, slot, gen)) = wake {
            to.nudge(slot, gen);
        }
    }

    /// The connection's turn: move what is buffered to `out` (false: nothing was). Lines
    /// offered from here on wake it again.
    pub fn drain_into(&self, out: &mut Vec<u8>) -> bool {
        let mut st = self.state.lock();
        st.notified = false;
        if st.buf.is_empty() {
            return false;
        }
        out.extend_from_slice(&st.buf);
        st.buf.clear();
        true
    }
}

impl State {
    fn wake(&mut self) -> Option<(Arc<Mailbox>, usize, u32)> {
        if self.notified {
            return None;
        }
        let (to, slot, gen) = self.to.as_ref()?;
        self.notified = true;
        Some((to.clone(), *slot, *gen))
    }
}

/// `watch evictions`: the store calls in with the evicted item's shard lock held (the hub's
/// locks are below it: nothing under them calls the store).
impl mnemo_store::EvictionWatch for Hub {
    #[inline]
    fn wants(&self) -> bool {
        self.wants(EVICTIONS)
    }

    fn evicted(&self, it: &mnemo_store::Evicted<'_>, now: Time) {
        self.emit(EVICTIONS, |l| {
            l.extend_from_slice(b"type=eviction ");
            key(l, it.key);
            // memcached's fields: ttl left (-1: none), seconds since the last access (mnemo
            // knows the segment's write time only), the class, the value's length.
            let ttl = if it.exp == 0 {
                -1
            } else {
                i64::from(it.exp) - i64::from(now)
            };
            let fetch = if it.fetched { "yes" } else { "no" };
            let la = now.saturating_sub(it.written);
            let size = it.value_len;
            l.extend_from_slice(
                format!(" fetch={fetch} ttl={ttl} la={la} clsid=1 size={size}").as_bytes(),
            );
        });
    }
}

/// A watching connection's hold on its watcher: dropped with the connection, it removes it.
pub struct Handle {
    hub: Arc<Hub>,
    pub watcher: Arc<Watcher>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        let mut list = self.hub.list.write();
        list.retain(|w| !Arc::ptr_eq(w, &self.watcher));
        self.hub.refresh_flags(&list);
    }
}

/// `watch [stream ...]` (protocol/text.rs): memcached's reply, and for `OK` the handle that
/// makes the connection a watcher (module docs); None after an error reply.
pub fn subscribe(
    args: mnemo_proto::text::Keys<'_>,
    sh: &Shared,
    out: &mut Vec<u8>,
) -> Option<Handle> {
    if !sh.config.watch_enabled {
        out.extend_from_slice(b"CLIENT_ERROR watch commands not allowed\r\n");
        return None;
    }
    // memcached 1.6.45: the connection must have no reply waiting (earlier pipelined commands).
    if !out.is_empty() {
        out.extend_from_slice(b"ERROR cannot pipeline other commands before watch\r\n");
        return None;
    }
    let mut flags = 0;
    for word in args.iter() {
        flags |= match word {
            b"fetchers" => FETCHERS,
            b"mutations" => MUTATIONS,
            b"evictions" => EVICTIONS,
            b"connevents" => CONNEVENTS,
            b"deletions" => DELETIONS,
            b"rawcmds" | b"sysevents" | b"proxyreqs" | b"proxyevents" | b"proxyuser" => SILENT,
            _ => {
                out.extend_from_slice(b"ERROR\r\n");
                return None;
            }
        };
    }
    if flags == 0 {
        flags = FETCHERS;
    }
    let watcher = Arc::new(Watcher {
        flags,
        state: Mutex::new(State {
            buf: Vec::new(),
            skipped: 0,
            to: None,
            notified: false,
        }),
    });
    {
        let mut list = sh.watch.list.write();
        if list.len() >= WATCHER_LIMIT {
            out.extend_from_slice(b"WATCHER_TOO_MANY log watcher limit reached\r\n");
            return None;
        }
        list.push(watcher.clone());
        sh.watch.refresh_flags(&list);
    }
    out.extend_from_slice(b"OK\r\n");
    Some(Handle {
        hub: sh.watch.clone(),
        watcher,
    })
}

/// memcached's uriencode: RFC 3986 unreserved bytes as they are, every other byte as %XX.
fn key(out: &mut Vec<u8>, key: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.extend_from_slice(b"key=");
    for &c in key {
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') {
            out.push(c);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(c >> 4)], HEX[usize::from(c & 15)]]);
        }
    }
}

/// The descriptor of the connection whose command runs on this thread.
fn cfd() -> i32 {
    crate::admin::conns::current()
}

/// A fetch (memcached logs every item lookup: gets, and the lookup a set, delete, touch or
/// incr makes first). `size`: the value's length on a hit.
#[cold]
#[inline(never)]
pub fn fetched(sh: &Shared, k: &[u8], found: Lookup<()>, size: usize) {
    let (status, clsid) = match found {
        Lookup::Hit(()) => ("found", 1),
        Lookup::Miss => ("not_found", 0),
        Lookup::Flushed => ("flushed", 0),
        Lookup::Expired => ("expired", 0),
    };
    let size = if found.is_hit() { size } else { 0 };
    sh.watch.emit(FETCHERS, |l| {
        l.extend_from_slice(b"type=item_get ");
        key(l, k);
        l.extend_from_slice(
            format!(" status={status} clsid={clsid} cfd={} size={size}", cfd()).as_bytes(),
        );
    });
}

/// A get's lookup, for [`fetched`]: the value's length read again (only while someone
/// watches fetchers; the get's own closure stays as it is).
#[cold]
#[inline(never)]
pub fn fetched_lookup(sh: &Shared, k: &[u8], found: Lookup<()>) {
    let size = if found.is_hit() {
        sh.store
            .peek(k, sh.clock.now(), |it| it.value.len())
            .hit()
            .unwrap_or(0)
    } else {
        0
    };
    fetched(sh, k, found, size);
}

/// The lookup a write makes first, as memcached's logs it: the key's state before the write.
#[cold]
#[inline(never)]
pub fn looked_up(sh: &Shared, k: &[u8]) {
    if sh.watch.wants(FETCHERS) {
        let (found, size) = match sh.store.peek(k, sh.clock.now(), |it| it.value.len()) {
            Lookup::Hit(n) => (Lookup::Hit(()), n),
            Lookup::Miss => (Lookup::Miss, 0),
            Lookup::Expired => (Lookup::Expired, 0),
            Lookup::Flushed => (Lookup::Flushed, 0),
        };
        fetched(sh, k, found, size);
    }
}

/// A store's outcome (`status`: memcached's word for it), with the value's length and expiry.
#[cold]
#[inline(never)]
pub fn stored(sh: &Shared, k: &[u8], mode: Mode, status: &str, exp: Time, size: usize) {
    let cmd = match mode {
        Mode::Add => "add",
        Mode::Set => "set",
        Mode::Replace => "replace",
        Mode::Append => "append",
        Mode::Prepend => "prepend",
        Mode::Cas(_) => "cas",
    };
    let ttl = if exp == 0 {
        0
    } else {
        exp.saturating_sub(sh.clock.now())
    };
    sh.watch.emit(MUTATIONS, |l| {
        l.extend_from_slice(b"type=item_store ");
        key(l, k);
        l.extend_from_slice(
            format!(
                " status={status} cmd={cmd} ttl={ttl} clsid=1 cfd={} size={size}",
                cfd()
            )
            .as_bytes(),
        );
    });
}

/// A delete that removed an item (`md`: meta's, else text's `delete`).
#[cold]
#[inline(never)]
pub fn deleted(sh: &Shared, k: &[u8], meta: bool, size: usize) {
    let cmd = if meta { "md" } else { "delete" };
    sh.watch.emit(DELETIONS, |l| {
        l.extend_from_slice(b"type=deleted ");
        key(l, k);
        l.extend_from_slice(format!(" cmd={cmd} clsid=1 size={size}").as_bytes());
    });
}

/// Why a connection closed, in memcached's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Error,
    Normal,
    IdleTimeout,
    Shutdown,
}

/// A connection opened (`close`: None) or closed: its TCP peer (None: a UNIX socket),
/// and its descriptor.
#[cold]
#[inline(never)]
pub fn conn_event(sh: &Shared, peer: Option<SocketAddr>, fd: i32, close: Option<Reason>) {
    let (rip, rport, transport) = match peer {
        Some(a) => (a.ip().to_string(), a.port(), "tcp"),
        None => ("unix".to_string(), 0, "local"),
    };
    sh.watch.emit(CONNEVENTS, |l| {
        let text = match close {
            None => format!("type=conn_new rip={rip} rport={rport} transport={transport} cfd={fd}"),
            Some(r) => {
                let reason = match r {
                    Reason::Error => "error",
                    Reason::Normal => "normal",
                    Reason::IdleTimeout => "idle_timeout",
                    Reason::Shutdown => "shutdown",
                };
                format!("type=conn_close rip={rip} rport={rport} transport={transport} reason={reason} cfd={fd}")
            }
        };
        l.extend_from_slice(text.as_bytes());
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watcher(flags: u32) -> Arc<Watcher> {
        Arc::new(Watcher {
            flags,
            state: Mutex::new(State {
                buf: Vec::new(),
                skipped: 0,
                to: None,
                notified: false,
            }),
        })
    }

    #[test]
    fn a_full_buffer_counts_lost_lines_and_reports_them_before_the_next() {
        let hub = Hub::default();
        let w = watcher(FETCHERS);
        hub.list.write().push(w.clone());
        hub.refresh_flags(&hub.list.read());
        let line = vec![b'x'; 1000];
        let mut kept = 0;
        for _ in 0..300 {
            hub.emit(FETCHERS, |l| l.extend_from_slice(&line));
            kept += 1;
        }
        let [written, sent, skipped, n] = hub.stats();
        assert_eq!((written, n), (kept, 1));
        assert!(skipped > 0 && sent + skipped == written, "{sent} {skipped}");
        assert!(w.state.lock().buf.len() <= BUF_CAP);
        let mut out = Vec::new();
        assert!(w.drain_into(&mut out));
        hub.emit(FETCHERS, |l| l.extend_from_slice(b"after"));
        out.clear();
        w.drain_into(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with(&format!("skipped={skipped}\nts=")),
            "{text}"
        );
        assert!(text.ends_with("after\n"));
    }

    #[test]
    fn streams_nobody_watches_cost_no_line() {
        let hub = Hub::default();
        let w = watcher(MUTATIONS | SILENT);
        hub.list.write().push(w.clone());
        hub.refresh_flags(&hub.list.read());
        assert_eq!(hub.flags(), MUTATIONS);
        hub.emit(FETCHERS, |l| l.extend_from_slice(b"no"));
        assert_eq!(hub.stats()[0], 0);
        let mut k = Vec::new();
        key(&mut k, b"n,foo#~");
        assert_eq!(k, b"key=n%2Cfoo%23~");
    }
}
