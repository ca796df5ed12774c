//! `--metrics ADDR`: the server's counters as a Prometheus text page (format 0.0.4) at
//! `http://ADDR/metrics`. This module owns the page (what is exported, under which names) and
//! the tiny HTTP server that hands it out.
//!
//! ```text
//!   mnemo-metrics thread: accept ─> read the request head (≤ 8 KiB, 2 s in all) ─> route
//!                           GET|HEAD /metrics  200, page rendered now from Shared's counters
//!                           other path 404 · other method 405 · bad or oversized head 400/431
//!                         ─> write (2 s at most) ─> close
//! ```
//!
//! Nothing is counted for the page: it reads what `stats` reads, when scraped, so serving it
//! costs the request path nothing. Names, labels and types are those of the Prometheus
//! memcached_exporter (and a family is present exactly when the exporter would emit it from the
//! same `stats`, `stats settings`, `stats items` and `stats slabs` replies), so dashboards built
//! on it work unchanged; mnemo's own figures (segments, index, filters, snapshot) are under
//! `mnemo_`. One thread serves one connection at a time, and every connection is bounded in
//! size and time (2 s to send its head, 2 s for the reply to leave), so a slow or hostile client
//! delays a scrape by a few seconds at most and cannot keep the thread.

use std::fmt::{Display, Write as _};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::admin::stats::Totals;
use crate::config::{PROTOCOL_VERSION, VERSION};
use crate::Shared;

/// Largest request head read; a scraper's is a few hundred bytes.
const REQUEST_MAX: usize = 8 * 1024;
/// Time one client has to send its request head, all reads together.
const READ_DEADLINE: Duration = Duration::from_secs(2);
/// Time the reply may take to leave, all writes together (a client that does not read cannot
/// hold the thread).
const WRITE_DEADLINE: Duration = Duration::from_secs(2);
/// Pause after a failed accept (out of descriptors, say) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
const CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// Bind `--metrics`' address (before privileges are dropped, like the memcached listeners).
pub fn bind(addr: &str) -> Result<TcpListener, crate::listener::BindError> {
    TcpListener::bind(addr).map_err(|source| crate::listener::BindError::Tcp {
        addr: format!("{addr} (--metrics)"),
        source,
    })
}

/// Serve the page on its own thread for the life of the process.
pub fn spawn(listener: TcpListener, sh: Arc<Shared>) -> io::Result<()> {
    std::thread::Builder::new()
        .name("mnemo-metrics".into())
        .spawn(move || serve(&listener, &sh))?;
    Ok(())
}

fn serve(listener: &TcpListener, sh: &Shared) {
    loop {
        match listener.accept() {
            // A failed exchange concerns that client only.
            Ok((stream, _)) => {
                let _ = answer(stream, sh);
            }
            Err(e) => {
                if sh.verbosity.load(Relaxed) > 0 {
                    eprintln!("mnemod: --metrics accept: {e}");
                }
                std::thread::sleep(ACCEPT_BACKOFF);
            }
        }
    }
}

/// One exchange: read the head, reply, close.
fn answer(mut s: TcpStream, sh: &Shared) -> io::Result<()> {
    let deadline = Instant::now() + READ_DEADLINE;
    let mut buf = vec![0; REQUEST_MAX];
    let mut len = 0;
    let reply = loop {
        if let Some(end) = head_end(&buf[..len]) {
            break respond(&buf[..end], || render(sh));
        }
        if len == buf.len() {
            break status_only(431, "Request Header Fields Too Large");
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(()); // too slow: just close
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf[len..]) {
            Ok(0) => return Ok(()),
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    // The deadline covers all the writes: a client reading a byte at a time cannot stretch it.
    let deadline = Instant::now() + WRITE_DEADLINE;
    let mut rest = &reply[..];
    while !rest.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        s.set_write_timeout(Some(left))?;
        match s.write(rest) {
            Ok(0) => return Ok(()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    s.shutdown(std::net::Shutdown::Write)?;
    // Closing with unread input (a body, a pipelined request) would send a reset that can make
    // the client drop our reply: take what has already arrived, without waiting for more, and
    // no more than a request's worth (a client that keeps sending gets its reset).
    s.set_nonblocking(true)?;
    let mut sink = [0; 1024];
    for _ in 0..REQUEST_MAX / sink.len() {
        if !matches!(s.read(&mut sink), Ok(n) if n > 0) {
            break;
        }
    }
    Ok(())
}

/// Where the head ends (its blank line; bare LFs tolerated), if it has arrived.
fn head_end(b: &[u8]) -> Option<usize> {
    let crlf = b.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = b.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The reply to a complete head. `page` runs only for a request that gets the page.
fn respond(head: &[u8], page: impl FnOnce() -> String) -> Vec<u8> {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return status_only(400, "Bad Request");
    };
    if !version.starts_with(b"HTTP/") || !target.starts_with(b"/") {
        return status_only(400, "Bad Request");
    }
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    if path != b"/metrics" {
        return status_only(404, "Not Found");
    }
    let body = match method {
        b"GET" | b"HEAD" => page(),
        _ => return status_only(405, "Method Not Allowed"),
    };
    let mut out = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method == b"GET" {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

fn status_only(code: u16, reason: &str) -> Vec<u8> {
    let body = format!("{code} {reason}\n");
    let allow = if code == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\n{allow}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

// --- the page --------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
}

/// The text being written. Each family's HELP and TYPE come once, followed by all its samples
/// (the format requires a family's samples together).
#[derive(Default)]
struct Page {
    out: String,
}

impl Page {
    fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// Values print as integers (u64, exact beyond 2^53) or Rust's shortest f64 form, which
    /// the format accepts (every f64 here is finite).
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: impl Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"");
                escape_label(&mut self.out, val);
                self.out.push('"');
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {v}");
    }

    /// A family of one sample without labels.
    fn one(&mut self, name: &str, kind: Kind, help: &str, v: impl Display) {
        self.family(name, kind, help);
        self.sample(name, &[], v);
    }
}

/// Label values escape backslash, double quote and newline (filter names and paths come from
/// the command line and may hold any of them).
fn escape_label(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

use Kind::{Counter, Gauge};

/// The whole page, read now.
pub fn render(sh: &Shared) -> String {
    let t = sh.totals();
    let s = sh.store.stats();
    let mut p = Page::default();
    general(&mut p, sh, &t, &s);
    settings(&mut p, sh);
    items(&mut p, sh, &t, &s);
    slabs(&mut p, &t, &s);
    store(&mut p, &s);
    filters(&mut p, sh);
    snapshot(&mut p, sh);
    p.one(
        "memcached_up",
        Gauge,
        "Whether the server answered (always 1: it is the one answering).",
        1,
    );
    p.out
}

/// What the exporter takes from `stats`.
fn general(p: &mut Page, sh: &Shared, t: &Totals, s: &mnemo_store::StoreStats) {
    // The figures and presence rules `stats` uses (stats::Figures).
    let f = crate::admin::stats::Figures::now(sh);
    p.one(
        "memcached_uptime_seconds",
        Counter,
        "Seconds since the server started.",
        f.uptime,
    );
    p.one(
        "memcached_time_seconds",
        Gauge,
        "Current UNIX time according to the server.",
        f.time,
    );
    p.family(
        "memcached_version",
        Gauge,
        "The memcached release this server answers as (mnemo_build_info has mnemo's).",
    );
    p.sample("memcached_version", &[("version", PROTOCOL_VERSION)], 1);
    p.one(
        "memcached_process_user_cpu_seconds_total",
        Counter,
        "User CPU time of the server process.",
        f.cpu_user.seconds(),
    );
    p.one(
        "memcached_process_system_cpu_seconds_total",
        Counter,
        "System CPU time of the server process.",
        f.cpu_system.seconds(),
    );
    p.one(
        "memcached_read_bytes_total",
        Counter,
        "Bytes read from clients.",
        t.bytes_read,
    );
    p.one(
        "memcached_written_bytes_total",
        Counter,
        "Bytes sent to clients.",
        t.bytes_written,
    );
    p.one(
        "memcached_current_connections",
        Gauge,
        "Open client connections.",
        sh.conn_counts.curr.load(Relaxed),
    );
    p.one(
        "memcached_connections_total",
        Counter,
        "Connections opened since start.",
        sh.conn_counts.total.load(Relaxed),
    );
    if f.show_rejected {
        let rejected = sh.conn_counts.rejected.load(Relaxed);
        p.one(
            "memcached_connections_rejected_total",
            Counter,
            "Connections refused at the -c limit (maxconns_fast).",
            rejected,
        );
    }
    p.one(
        "memcached_connections_yielded_total",
        Counter,
        "Times a connection yielded at the -R limit.",
        t.conn_yields,
    );
    let disabled = sh.listen.disabled_num.load(Relaxed);
    p.one(
        "memcached_connections_listener_disabled_total",
        Counter,
        "Times the -c limit stopped accepting.",
        disabled,
    );
    p.one(
        "memcached_accepting_connections",
        Gauge,
        "Whether new connections are accepted.",
        u8::from(sh.listen.accepting.load(Relaxed)),
    );
    p.one(
        "memcached_current_bytes",
        Gauge,
        "Bytes of live items.",
        s.bytes,
    );
    p.one(
        "memcached_limit_bytes",
        Gauge,
        "Item memory limit (-m).",
        s.limit_maxbytes,
    );
    p.one(
        "memcached_malloced_bytes",
        Gauge,
        "Memory charged to -m (stats slabs total_malloced).",
        s.mem_used,
    );

    p.family(
        "memcached_commands_total",
        Counter,
        "Requests by command and outcome.",
    );
    let cmd = |p: &mut Page, command: &str, status: &str, v: u64| {
        p.sample(
            "memcached_commands_total",
            &[("command", command), ("status", status)],
            v,
        );
    };
    for (command, hits, misses) in [
        ("get", t.get_hits, t.get_misses),
        ("delete", t.delete_hits, t.delete_misses),
        ("incr", t.incr_hits, t.incr_misses),
        ("decr", t.decr_hits, t.decr_misses),
        ("cas", t.cas_hits, t.cas_misses),
        ("touch", t.touch_hits, t.touch_misses),
    ] {
        cmd(p, command, "hit", hits);
        cmd(p, command, "miss", misses);
    }
    cmd(p, "cas", "badval", t.cas_badval);
    cmd(p, "flush", "hit", t.cmd_flush);
    // cmd_set counts cas too (as memcached's does); the exporter's set is the rest.
    cmd(
        p,
        "set",
        "hit",
        t.cmd_set
            .saturating_sub(t.cas_hits + t.cas_misses + t.cas_badval),
    );

    p.one(
        "memcached_current_items",
        Gauge,
        "Live items.",
        s.curr_items,
    );
    p.one(
        "memcached_items_total",
        Counter,
        "Items stored since start.",
        s.total_items,
    );
    p.one(
        "memcached_items_evicted_total",
        Counter,
        "Live items removed to make room.",
        s.evictions,
    );
    p.one(
        "memcached_items_reclaimed_total",
        Counter,
        "Expired items whose memory was taken back.",
        s.reclaimed,
    );
    p.one(
        "memcached_item_too_large_total",
        Counter,
        "Stores refused: larger than -I.",
        t.store_too_large,
    );
    p.one(
        "memcached_item_no_memory_total",
        Counter,
        "Stores refused: out of memory.",
        t.store_no_memory,
    );
    if let Some(x) = &s.flash {
        extstore(p, x);
    }
    if f.show_crawler {
        p.one(
            "memcached_lru_crawler_starts_total",
            Counter,
            "Crawls and metadumps started.",
            sh.crawler.starts.load(Relaxed),
        );
    }
    // No crawler runs in the background (see stats.rs): these stay 0, as `stats` says.
    p.one(
        "memcached_lru_crawler_items_checked_total",
        Counter,
        "Items examined by the LRU crawler.",
        0,
    );
    p.one(
        "memcached_lru_crawler_reclaimed_total",
        Counter,
        "Items freed by the LRU crawler.",
        0,
    );
    if f.show_lru_maintainer {
        p.one(
            "memcached_direct_reclaims_total",
            Counter,
            "Times a worker reclaimed or evicted directly.",
            0,
        );
        for (name, help) in [
            (
                "memcached_lru_crawler_moves_to_cold_total",
                "Items moved to the COLD LRU (mnemo has no LRUs).",
            ),
            (
                "memcached_lru_crawler_moves_to_warm_total",
                "Items moved to the WARM LRU (mnemo has no LRUs).",
            ),
            (
                "memcached_lru_crawler_moves_within_lru_total",
                "Items moved within an LRU (mnemo has no LRUs).",
            ),
        ] {
            p.one(name, Counter, help, 0);
        }
    }
}

/// The flash tier, as memcached_exporter names memcached's extstore fields (present only
/// with `-o ext_path`, as in `stats`).
fn extstore(p: &mut Page, x: &mnemo_store::FlashStats) {
    for (name, help, v) in [
        (
            "memcached_extstore_get_total",
            "Gets that read a value from flash (get_extstore).",
            x.get_extstore,
        ),
        (
            "memcached_extstore_recache_total",
            "Flashed items brought back to RAM by reads.",
            x.recache_from_extstore,
        ),
        (
            "memcached_extstore_miss_total",
            "Flash reads that found the record gone.",
            x.miss_from_extstore,
        ),
        (
            "memcached_extstore_badcrc_total",
            "Flash reads whose record failed its checksum.",
            x.badcrc_from_extstore,
        ),
        (
            "memcached_extstore_page_allocs_total",
            "Flash pages taken from the free list.",
            x.page_allocs,
        ),
        (
            "memcached_extstore_page_evictions_total",
            "Flash pages recycled with live records.",
            x.page_evictions,
        ),
        (
            "memcached_extstore_page_reclaims_total",
            "Flash pages recycled with no live record.",
            x.page_reclaims,
        ),
        (
            "memcached_extstore_objects_evicted_total",
            "Flashed items lost to page recycling.",
            x.objects_evicted,
        ),
        (
            "memcached_extstore_objects_read_total",
            "Records read from the flash file.",
            x.objects_read,
        ),
        (
            "memcached_extstore_objects_written_total",
            "Records written to flash.",
            x.objects_written,
        ),
        (
            "memcached_extstore_bytes_evicted_total",
            "Bytes of records lost to page recycling.",
            x.bytes_evicted,
        ),
        (
            "memcached_extstore_bytes_written_total",
            "Bytes of records written to flash.",
            x.bytes_written,
        ),
        (
            "memcached_extstore_bytes_read_total",
            "Bytes read from the flash file.",
            x.bytes_read,
        ),
        (
            "memcached_extstore_compact_rescues_total",
            "Live records compaction copied out of a page.",
            x.compact_rescues,
        ),
        (
            "memcached_extstore_compact_skipped_total",
            "Records compaction left in place.",
            x.compact_skipped,
        ),
        (
            "mnemo_extstore_io_errors_total",
            "Failed reads and writes of the flash file (its records are lost).",
            x.io_errors,
        ),
    ] {
        p.one(name, Counter, help, v);
    }
    for (name, help, v) in [
        (
            "memcached_extstore_pages_free",
            "Flash pages never written.",
            x.pages_free,
        ),
        (
            "memcached_extstore_pages_used",
            "Flash pages written.",
            x.pages_used,
        ),
        (
            "memcached_extstore_objects_used",
            "Live records on flash.",
            x.objects_used,
        ),
        (
            "memcached_extstore_bytes_used",
            "Bytes of live records on flash.",
            x.bytes_used,
        ),
        (
            "memcached_extstore_bytes_fragmented",
            "Bytes of used pages not held by live records.",
            x.bytes_fragmented,
        ),
        (
            "memcached_extstore_limit_maxbytes",
            "Bytes of flash in whole pages.",
            x.limit_maxbytes,
        ),
        (
            "memcached_extstore_io_queue",
            "Write buffers waiting for the writer.",
            x.io_queue,
        ),
    ] {
        p.one(name, Gauge, help, v);
    }
}

/// What the exporter takes from `stats settings` (the LRU ones only while the crawler is on,
/// as it does).
fn settings(p: &mut Page, sh: &Shared) {
    let ext = &sh.config.ext;
    p.one(
        "memcached_max_connections",
        Gauge,
        "Connection limit (-c).",
        sh.config.max_conns,
    );
    if !sh.crawler.enabled.load(Relaxed) {
        return;
    }
    p.one(
        "memcached_lru_crawler_enabled",
        Gauge,
        "Whether the LRU crawler is enabled.",
        1,
    );
    p.one(
        "memcached_lru_crawler_sleep",
        Gauge,
        "lru_crawler sleep, microseconds.",
        sh.crawler.sleep.load(Relaxed),
    );
    p.one(
        "memcached_lru_crawler_to_crawl",
        Gauge,
        "lru_crawler tocrawl: items per class per run.",
        sh.crawler.tocrawl.load(Relaxed),
    );
    let maintainer = u8::from(ext.lru_maintainer);
    p.one(
        "memcached_lru_crawler_maintainer_thread",
        Gauge,
        "Whether the LRU maintainer setting is on.",
        maintainer,
    );
    // memcached's defaults, as `stats settings` reports them (mnemo has no segmented LRU).
    p.one(
        "memcached_lru_crawler_hot_percent",
        Gauge,
        "hot_lru_pct setting.",
        20,
    );
    p.one(
        "memcached_lru_crawler_warm_percent",
        Gauge,
        "warm_lru_pct setting.",
        40,
    );
    p.one(
        "memcached_lru_crawler_hot_max_factor",
        Gauge,
        "hot_max_factor setting.",
        0.2,
    );
    p.one(
        "memcached_lru_crawler_warm_max_factor",
        Gauge,
        "warm_max_factor setting.",
        2.0,
    );
}

/// `stats items`: mnemo's one class, numbered 1, listed once it holds items (stats.rs items).
fn items(p: &mut Page, sh: &Shared, t: &Totals, s: &mnemo_store::StoreStats) {
    if s.curr_items == 0 {
        return;
    }
    let lru = sh.config.ext.lru_maintainer;
    let slab = [("slab", "1")];
    let one = |p: &mut Page, name: &str, kind: Kind, help: &str, v: u64| {
        p.family(name, kind, help);
        p.sample(name, &slab, v);
    };
    one(
        p,
        "memcached_slab_current_items",
        Gauge,
        "Items in this slab class.",
        s.curr_items,
    );
    // Items carry no access time (see crawler.rs on `la`): `stats items` says 0.
    one(
        p,
        "memcached_slab_items_age_seconds",
        Gauge,
        "Age of the oldest item in the class.",
        0,
    );
    one(
        p,
        "memcached_slab_mem_requested_bytes",
        Gauge,
        "Bytes the class's items take.",
        s.bytes,
    );
    one(
        p,
        "memcached_slab_items_evicted_total",
        Counter,
        "Items evicted before they expired.",
        s.evictions,
    );
    one(
        p,
        "memcached_slab_items_evicted_nonzero_total",
        Counter,
        "Items with an expiry evicted before it.",
        0,
    );
    // A counter though it is not one: the exporter types it so.
    one(
        p,
        "memcached_slab_items_evicted_time_seconds",
        Counter,
        "Seconds since the last evicted item was read.",
        0,
    );
    one(
        p,
        "memcached_slab_items_outofmemory_total",
        Counter,
        "Stores in the class that ran out of memory.",
        t.store_no_memory,
    );
    one(
        p,
        "memcached_slab_items_tailrepairs_total",
        Counter,
        "LRU tail repairs.",
        0,
    );
    one(
        p,
        "memcached_slab_items_reclaimed_total",
        Counter,
        "Expired items whose memory was reused.",
        s.reclaimed,
    );
    one(
        p,
        "memcached_slab_items_expired_unfetched_total",
        Counter,
        "Items expired without being read.",
        s.expired_unfetched,
    );
    one(
        p,
        "memcached_slab_items_evicted_unfetched_total",
        Counter,
        "Items evicted without being read.",
        s.evicted_unfetched,
    );
    one(
        p,
        "memcached_slab_items_crawler_reclaimed_total",
        Counter,
        "Items freed by the LRU crawler.",
        0,
    );
    if !lru {
        return;
    }
    // The segmented-LRU fields `stats items` shows under the maintainer: one FIFO here, so
    // everything is "cold" and nothing moves.
    one(
        p,
        "memcached_slab_hot_items",
        Gauge,
        "Items in the HOT LRU.",
        0,
    );
    one(
        p,
        "memcached_slab_warm_items",
        Gauge,
        "Items in the WARM LRU.",
        0,
    );
    one(
        p,
        "memcached_slab_cold_items",
        Gauge,
        "Items in the COLD LRU.",
        s.curr_items,
    );
    one(
        p,
        "memcached_slab_hot_age_seconds",
        Gauge,
        "Age of the oldest HOT item.",
        0,
    );
    one(
        p,
        "memcached_slab_warm_age_seconds",
        Gauge,
        "Age of the oldest WARM item.",
        0,
    );
    // Counters without _total: the exporter's names.
    one(
        p,
        "memcached_slab_items_moves_to_cold",
        Counter,
        "Items moved to COLD.",
        0,
    );
    one(
        p,
        "memcached_slab_items_moves_to_warm",
        Counter,
        "Items moved to WARM.",
        0,
    );
    one(
        p,
        "memcached_slab_items_moves_within_lru",
        Counter,
        "Items bumped within HOT or WARM.",
        0,
    );
    p.family("memcached_slab_lru_hits_total", Counter, "get hits by LRU.");
    for lru in ["hot", "warm", "cold", "temporary"] {
        p.sample(
            "memcached_slab_lru_hits_total",
            &[("slab", "1"), ("lru", lru)],
            0,
        );
    }
}

/// `stats slabs`: class 1 is the segment pool, listed once the store holds item memory.
fn slabs(p: &mut Page, t: &Totals, s: &mnemo_store::StoreStats) {
    if s.segments_used + s.large_items == 0 {
        return;
    }
    let slab = [("slab", "1")];
    for (name, help, v) in [
        (
            "memcached_slab_chunk_size_bytes",
            "Chunk size of the class (a segment).",
            s.segment_size,
        ),
        (
            "memcached_slab_chunks_per_page",
            "Chunks per page (1: a page is a segment).",
            1,
        ),
        (
            "memcached_slab_current_pages",
            "Pages of the class (segments in use).",
            s.segments_used,
        ),
        (
            "memcached_slab_current_chunks",
            "Chunks of the class (segments in use).",
            s.segments_used,
        ),
        (
            "memcached_slab_chunks_used",
            "Chunks holding an item (items).",
            s.curr_items,
        ),
        (
            "memcached_slab_chunks_free",
            "Free chunks (segments -m still has room for).",
            s.segments_free,
        ),
        (
            "memcached_slab_chunks_free_end",
            "Free chunks at the end of the last page.",
            0,
        ),
    ] {
        p.family(name, Gauge, help);
        p.sample(name, &slab, v);
    }
    let name = "memcached_slab_commands_total";
    p.family(name, Counter, "Requests by class, command and outcome.");
    for (command, v) in [
        ("get", t.get_hits),
        ("delete", t.delete_hits),
        ("incr", t.incr_hits),
        ("decr", t.decr_hits),
        ("cas", t.cas_hits),
        ("touch", t.touch_hits),
    ] {
        p.sample(
            name,
            &[("slab", "1"), ("command", command), ("status", "hit")],
            v,
        );
    }
    p.sample(
        name,
        &[("slab", "1"), ("command", "cas"), ("status", "badval")],
        t.cas_badval,
    );
    // The exporter's per-class set: cmd_set less the cas that stored or found a newer value.
    let set = t.cmd_set.saturating_sub(t.cas_hits + t.cas_badval);
    p.sample(
        name,
        &[("slab", "1"), ("command", "set"), ("status", "hit")],
        set,
    );
}

/// mnemo's own: the segment store and its index.
fn store(p: &mut Page, s: &mnemo_store::StoreStats) {
    p.family(
        "mnemo_build_info",
        Gauge,
        "mnemo's release (memcached_version is the protocol's).",
    );
    p.sample("mnemo_build_info", &[("version", VERSION)], 1);
    for (name, kind, help, v) in [
        (
            "mnemo_segment_size_bytes",
            Gauge,
            "Size of one segment.",
            s.segment_size,
        ),
        (
            "mnemo_segments_used",
            Gauge,
            "Segments holding items.",
            s.segments_used,
        ),
        (
            "mnemo_segments_free",
            Gauge,
            "Whole segments the unused part of -m still has room for.",
            s.segments_free,
        ),
        (
            "mnemo_segments_limit",
            Gauge,
            "Segments -m holds (limit / segment size).",
            s.segments_total,
        ),
        (
            "mnemo_large_items",
            Gauge,
            "Items too big for a segment, each in a buffer of its own.",
            s.large_items,
        ),
        (
            "mnemo_large_items_bytes",
            Gauge,
            "Bytes of those buffers.",
            s.large_bytes,
        ),
        (
            "mnemo_dead_bytes",
            Gauge,
            "Segment bytes overwritten or deleted, awaiting reuse.",
            s.dead_bytes,
        ),
        (
            "mnemo_unwritten_bytes",
            Gauge,
            "Segment bytes not yet written.",
            s.unwritten_bytes,
        ),
        (
            "mnemo_compactions_total",
            Counter,
            "Segments compacted (live items moved so the segment is reused).",
            s.compactions,
        ),
        (
            "mnemo_items_relocated_total",
            Counter,
            "Live items copied forward instead of evicted (read since stored).",
            s.evictions_relocated,
        ),
        (
            "mnemo_items_flushed_total",
            Counter,
            "Live items invalidated by flush_all.",
            s.flushed,
        ),
        (
            "mnemo_index_bytes",
            Gauge,
            "Memory of the hash index.",
            s.index_bytes,
        ),
        (
            "mnemo_index_slots",
            Gauge,
            "Slots of the hash index.",
            s.index_slots,
        ),
        (
            "mnemo_index_entries",
            Gauge,
            "Occupied index slots (some may point at expired items).",
            s.index_entries,
        ),
        (
            "mnemo_index_overflow_buckets",
            Gauge,
            "Overflow buckets in use.",
            s.index_overflow_buckets,
        ),
        (
            "mnemo_metadata_bytes",
            Gauge,
            "Memory of segment metadata.",
            s.meta_bytes,
        ),
        (
            "mnemo_shards",
            Gauge,
            "Store shards (one lock each).",
            s.shards,
        ),
    ] {
        p.one(name, kind, help, v);
    }
}

/// `stats filters`: one series per installed filter.
fn filters(p: &mut Page, sh: &Shared) {
    let all = sh.filters.stats();
    p.family(
        "mnemo_filter_info",
        Gauge,
        "An installed fget filter and its kind.",
    );
    for (spec, _) in &all {
        p.sample(
            "mnemo_filter_info",
            &[("filter", &spec.name), ("kind", spec.kind.as_str())],
            1,
        );
    }
    type Get = fn(&mnemo_filter::StatsSnapshot) -> u64;
    let families: [(&str, &str, Get); 5] = [
        ("mnemo_filter_calls_total", "fget calls per filter.", |s| {
            s.calls
        }),
        (
            "mnemo_filter_errors_total",
            "Filter calls that failed.",
            |s| s.errors,
        ),
        (
            "mnemo_filter_timeouts_total",
            "Filter calls stopped at their deadline.",
            |s| s.timeouts,
        ),
        (
            "mnemo_filter_out_of_memory_total",
            "Filter calls stopped at their memory limit.",
            |s| s.out_of_memory,
        ),
        (
            "mnemo_filter_brief_total",
            "Filter calls answered on the worker that read them (brief), not the job pool.",
            |s| s.brief,
        ),
    ];
    for (name, help, get) in families {
        p.family(name, Counter, help);
        for (spec, st) in &all {
            p.sample(name, &[("filter", &spec.name)], get(st));
        }
    }
    p.family(
        "mnemo_filter_seconds_total",
        Counter,
        "Wall time spent in filter calls.",
    );
    for (spec, st) in &all {
        p.sample(
            "mnemo_filter_seconds_total",
            &[("filter", &spec.name)],
            st.usec as f64 / 1e6,
        );
    }
}

/// `stats snapshot`: what the start-up restore from `-e` did.
fn snapshot(p: &mut Page, sh: &Shared) {
    let none = crate::restart::Restored::default();
    let r = sh.restored.get().unwrap_or(&none);
    let rep = r.report.clone().unwrap_or_default();
    // The same states as `stats snapshot` snapshot_restore (restart.rs), one series each.
    let state = r.state();
    p.family(
        "mnemo_snapshot_restore",
        Gauge,
        "Outcome of the start-up restore from -e (1 on the outcome).",
    );
    for s in ["none", "complete", "partial", "refused"] {
        p.sample(
            "mnemo_snapshot_restore",
            &[("state", s)],
            u8::from(s == state),
        );
    }
    for (name, help, v) in [
        (
            "mnemo_snapshot_restored_items",
            "Items restored at start.",
            rep.items,
        ),
        (
            "mnemo_snapshot_restored_expired",
            "Items in the snapshot that had expired.",
            rep.expired,
        ),
        (
            "mnemo_snapshot_restored_dropped",
            "Items in the snapshot that no longer fit.",
            rep.dropped,
        ),
        (
            "mnemo_snapshot_restored_evicted",
            "Restored items evicted by later ones of the same restore.",
            rep.evicted,
        ),
        (
            "mnemo_snapshot_restored_bad_blocks",
            "Snapshot blocks dropped for a bad checksum.",
            u64::from(rep.bad_blocks),
        ),
    ] {
        p.one(name, Gauge, help, v);
    }
    p.one(
        "mnemo_snapshot_restore_seconds",
        Gauge,
        "Time the start-up restore took.",
        r.usec as f64 / 1e6,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    fn shared() -> Shared {
        Shared::new(Config {
            memory_limit: 8 << 20,
            threads: 1,
            ..Config::default()
        })
    }

    /// Every family declared once, every sample under the family declared just before it.
    fn check_shape(page: &str) {
        let mut seen = std::collections::HashSet::new();
        let mut current = String::new();
        for line in page.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap().to_string();
                assert!(seen.insert(name.clone()), "{name} declared twice");
                current = name;
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                assert_eq!(name, current, "{line}");
                let value = line.rsplit(' ').next().unwrap();
                assert!(value.parse::<f64>().is_ok(), "{line}");
            }
        }
    }

    fn value(page: &str, series: &str) -> Option<f64> {
        page.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn page_is_well_formed_and_reads_the_counters() {
        let sh = shared();
        let empty = render(&sh);
        check_shape(&empty);
        assert_eq!(value(&empty, "memcached_up"), Some(1.0));
        assert_eq!(
            value(
                &empty,
                &format!(
                    "memcached_version{{version=\"{}\"}}",
                    crate::config::PROTOCOL_VERSION
                )
            ),
            Some(1.0)
        );
        assert_eq!(
            value(&empty, "memcached_limit_bytes"),
            Some((8 << 20) as f64)
        );
        // No items yet: no class, as `stats items` and `stats slabs` list none.
        assert!(!empty.contains("memcached_slab_"));
        assert_eq!(
            value(&empty, "mnemo_snapshot_restore{state=\"none\"}"),
            Some(1.0)
        );

        sh.store
            .store(mnemo_store::Mode::Set, b"k", 0, 0, b"v", sh.clock.now())
            .unwrap();
        let c = &sh.counters[0];
        crate::admin::stats::bump(&c.cmd_set, 3);
        crate::admin::stats::bump(&c.cas_hits, 1);
        crate::admin::stats::bump(&c.get_misses, 2);
        let page = render(&sh);
        check_shape(&page);
        assert_eq!(
            value(
                &page,
                "memcached_commands_total{command=\"set\",status=\"hit\"}"
            ),
            Some(2.0)
        );
        assert_eq!(
            value(
                &page,
                "memcached_commands_total{command=\"cas\",status=\"hit\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            value(
                &page,
                "memcached_commands_total{command=\"get\",status=\"miss\"}"
            ),
            Some(2.0)
        );
        assert_eq!(value(&page, "memcached_current_items"), Some(1.0));
        assert_eq!(
            value(&page, "memcached_slab_current_items{slab=\"1\"}"),
            Some(1.0)
        );
        assert_eq!(
            value(
                &page,
                "memcached_slab_commands_total{slab=\"1\",command=\"set\",status=\"hit\"}"
            ),
            Some(2.0)
        );
    }

    #[test]
    fn optional_families_follow_the_settings() {
        let mut cfg = Config {
            memory_limit: 8 << 20,
            threads: 1,
            ..Config::default()
        };
        cfg.ext.lru_maintainer = false;
        cfg.ext.lru_crawler = false;
        cfg.ext.maxconns_fast = false;
        let page = render(&Shared::new(cfg));
        check_shape(&page);
        for absent in [
            "memcached_lru_crawler_enabled",
            "memcached_direct_reclaims_total",
            "memcached_connections_rejected_total",
        ] {
            assert!(!page.contains(absent), "{absent}");
        }
        let page = render(&shared());
        for present in [
            "memcached_lru_crawler_enabled 1",
            "memcached_direct_reclaims_total 0",
            "memcached_max_connections 1024",
        ] {
            assert!(page.contains(present), "{present}");
        }
    }

    #[test]
    fn labels_are_escaped() {
        let mut p = Page::default();
        p.sample("m", &[("a", "x\"y\\z\nw")], 1);
        assert_eq!(p.out, "m{a=\"x\\\"y\\\\z\\nw\"} 1\n");
    }

    fn status(reply: &[u8]) -> &str {
        let line = reply.split(|&b| b == b'\r').next().unwrap();
        std::str::from_utf8(line).unwrap()
    }

    #[test]
    fn routing() {
        let page = || "x 1\n".to_string();
        let ok = respond(b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n", page);
        assert_eq!(status(&ok), "HTTP/1.1 200 OK");
        let text = String::from_utf8(ok).unwrap();
        assert!(
            text.contains("\r\nContent-Type: text/plain; version=0.0.4\r\n"),
            "{text}"
        );
        assert!(
            text.contains("\r\nContent-Length: 4\r\n") && text.ends_with("\r\n\r\nx 1\n"),
            "{text}"
        );
        assert_eq!(
            status(&respond(b"GET /metrics?x=1 HTTP/1.0\n\n", page)),
            "HTTP/1.1 200 OK"
        );
        let head = respond(b"HEAD /metrics HTTP/1.1\r\n\r\n", page);
        assert!(head.ends_with(b"Content-Length: 4\r\nConnection: close\r\n\r\n"));
        assert_eq!(
            status(&respond(b"GET / HTTP/1.1\r\n\r\n", page)),
            "HTTP/1.1 404 Not Found"
        );
        assert_eq!(
            status(&respond(b"GET /metricsx HTTP/1.1\r\n\r\n", page)),
            "HTTP/1.1 404 Not Found"
        );
        assert_eq!(
            status(&respond(b"POST /metrics HTTP/1.1\r\n\r\n", page)),
            "HTTP/1.1 405 Method Not Allowed"
        );
        for bad in [
            &b"\r\n\r\n"[..],
            b"GET\r\n\r\n",
            b"GET /metrics\r\n\r\n",
            b"GET /metrics HTTP/1.1 x\r\n\r\n",
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"\xff\xfe /metrics HTTP/1.1\r\n\r\n",
        ] {
            let reply = respond(bad, page);
            assert!(
                status(&reply).starts_with("HTTP/1.1 4"),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn head_end_needs_the_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n"), None);
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.0\n\n"), Some(16));
    }

    #[test]
    fn any_bytes_get_an_answer_without_panicking() {
        // A cheap deterministic fuzz of the request parser.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..2000 {
            let mut req = b"GET /metrics HTTP/1.1\r\n\r\n".to_vec();
            for _ in 0..(x % 6) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x % req.len() as u64) as usize;
                req[i] = (x >> 32) as u8;
            }
            let reply = respond(&req, String::new);
            assert!(reply.starts_with(b"HTTP/1.1 "));
        }
    }
}
