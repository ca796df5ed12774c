//! Counters and the `stats` family of replies.
//!
//! Each worker owns one [`Counters`] block and is its only writer, so a bump is a plain
//! relaxed load and store (no locked instruction on the request path); `stats` sums every
//! worker's block. Field names and meanings are memcached's, so monitoring tools read them
//! unchanged.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use mnemo_proto::reply::{line, stat};

use crate::Shared;

macro_rules! counters {
    (counters: $($name:ident),* ; gauges: $($gauge:ident),* $(,)?) => {
        /// One worker's counters (cache-line padded so workers never share a line).
        #[derive(Default)]
        #[repr(align(128))]
        pub struct Counters { $(pub $name: AtomicU64,)* $(pub $gauge: AtomicU64,)* }

        /// The sum over workers.
        #[derive(Default, Clone, Copy, Debug)]
        pub struct Totals { $(pub $name: u64,)* $(pub $gauge: u64,)* }

        impl Counters {
            pub fn add_to(&self, t: &mut Totals) {
                $( t.$name += self.$name.load(Relaxed); )*
                // Gauges go up and down (wrapping): their sum is right even when one worker's
                // share alone would be negative.
                $( t.$gauge = t.$gauge.wrapping_add(self.$gauge.load(Relaxed)); )*
            }
            /// `stats reset`: counters only; gauges describe what exists now.
            pub fn reset(&self) { $( self.$name.store(0, Relaxed); )* }
        }
    };
}

counters!(
    counters: cmd_get, cmd_set, cmd_flush, cmd_touch, cmd_meta, get_hits, get_misses, get_expired,
    get_flushed, delete_misses, delete_hits, incr_misses, incr_hits, decr_misses, decr_hits,
    cas_misses, cas_hits, cas_badval, touch_hits, touch_misses, store_too_large, store_no_memory,
    bytes_read, bytes_written, conn_yields, idle_kicks;
    // Connection buffers (memcached's read buffers and response objects): how many and their
    // bytes, kept current by each connection (conn.rs `account`).
    gauges: read_buf_count, read_buf_bytes, response_obj_count, response_obj_bytes,
);

/// Add to a counter this thread alone writes.
#[inline]
pub fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

/// Move a gauge this thread alone writes from `old` to `new`.
#[inline]
pub fn regauge(c: &AtomicU64, old: u64, new: u64) {
    c.store(c.load(Relaxed).wrapping_add(new).wrapping_sub(old), Relaxed);
}

impl Shared {
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for c in &self.counters {
            c.add_to(&mut t);
        }
        t
    }

    /// `stats reset`: cumulative counters back to zero (current values such as curr_items
    /// and curr_connections are not counters and stay).
    pub fn reset_stats(&self) {
        for c in &self.counters {
            c.reset();
        }
        self.conn_counts.total.store(0, Relaxed);
        self.conn_counts.rejected.store(0, Relaxed);
        self.auth.cmds.store(0, Relaxed);
        self.auth.errors.store(0, Relaxed);
        self.crawler.starts.store(0, Relaxed);
        self.listen.reset();
        if let Some(tls) = &self.config.tls {
            tls.reset_stats();
        }
        self.store.reset_stats();
        self.detail.reset();
        self.filters.reset_stats();
    }
}

/// The process figures `stats` (and so binary STAT, which renders it) and `/metrics` both
/// report, computed here once, with memcached's rules for which optional lines are shown.
pub(crate) struct Figures {
    /// Seconds since start (the clock starts 60 s in, as memcached's does).
    pub uptime: u64,
    /// Current UNIX time by the server's clock.
    pub time: u64,
    /// CPU time of the process (getrusage), user and system.
    pub cpu_user: CpuTime,
    pub cpu_system: CpuTime,
    /// rejected_connections: only with maxconns_fast (memcached's default).
    pub show_rejected: bool,
    /// idle_kicks: only with `-o idle_timeout`.
    pub show_idle_kicks: bool,
    /// lru_crawler_running/starts: only while `lru_crawler enable` holds.
    pub show_crawler: bool,
    /// The LRU maintainer's lines: only without `-o no_lru_maintainer`.
    pub show_lru_maintainer: bool,
}

#[derive(Clone, Copy)]
pub(crate) struct CpuTime(libc::timeval);

impl CpuTime {
    /// memcached's `seconds.microseconds`, six digits.
    pub fn text(self) -> String {
        format!("{}.{:06}", self.0.tv_sec, self.0.tv_usec)
    }

    pub fn seconds(self) -> f64 {
        self.0.tv_sec as f64 + self.0.tv_usec as f64 / 1e6
    }
}

impl Figures {
    pub fn now(sh: &Shared) -> Figures {
        let now = sh.clock.now();
        // SAFETY: getrusage only writes the struct we hand it.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        let ext = &sh.config.ext;
        Figures {
            uptime: u64::from(now).saturating_sub(60),
            time: u64::from(now) + sh.clock.process_started(),
            cpu_user: CpuTime(ru.ru_utime),
            cpu_system: CpuTime(ru.ru_stime),
            show_rejected: ext.maxconns_fast,
            show_idle_kicks: ext.idle_timeout > 0,
            show_crawler: sh.crawler.enabled.load(Relaxed),
            show_lru_maintainer: ext.lru_maintainer,
        }
    }
}

/// `stats` with no argument: memcached 1.6.18's fields in its order (monitoring tools and
/// the differential tests read them by name and position). Where mnemo has the mechanism the
/// value is its own; where it has none (slab page moves, the LRU maintainer, the logger,
/// NAPI ids) the value is 0. Lines memcached prints only under a setting follow the same
/// setting here (`-o idle_timeout`, `-o no_maxconns_fast`, `lru_crawler enable|disable`,
/// `-o no_lru_crawler`, `-o no_lru_maintainer`).
pub fn general(sh: &Shared, out: &mut Vec<u8>) {
    let now = sh.clock.now();
    let t = sh.totals();
    let s = sh.store.stats();
    let ext = &sh.config.ext;
    let f = Figures::now(sh);
    stat(out, "pid", std::process::id());
    stat(out, "uptime", f.uptime);
    stat(out, "time", f.time);
    stat(out, "version", crate::config::PROTOCOL_VERSION);
    // memcached prints its libevent's version; mnemo's event loops are mio's.
    stat(out, "libevent", "mio");
    stat(out, "pointer_size", usize::BITS);
    stat(out, "rusage_user", f.cpu_user.text());
    stat(out, "rusage_system", f.cpu_system.text());
    stat(out, "max_connections", sh.config.max_conns);
    stat(out, "curr_connections", sh.conn_counts.curr.load(Relaxed));
    stat(out, "total_connections", sh.conn_counts.total.load(Relaxed));
    if f.show_rejected {
        stat(
            out,
            "rejected_connections",
            sh.conn_counts.rejected.load(Relaxed),
        );
    }
    // Listening sockets plus the connection slots the workers have made (kept for reuse).
    stat(
        out,
        "connection_structures",
        sh.conn_counts.structs.load(Relaxed),
    );
    // memcached's response objects and read buffers are mnemo's per-connection output and
    // input buffers; mnemo keeps no pool of free ones and aborts rather than fail an alloc.
    stat(out, "response_obj_oom", 0);
    stat(out, "response_obj_count", t.response_obj_count);
    stat(out, "response_obj_bytes", t.response_obj_bytes);
    stat(out, "read_buf_count", t.read_buf_count);
    stat(out, "read_buf_bytes", t.read_buf_bytes);
    stat(out, "read_buf_bytes_free", 0);
    stat(out, "read_buf_oom", 0);
    // memcached sets aside descriptors to keep serving at its -c limit; mnemo sets none aside.
    stat(out, "reserved_fds", 0);
    stat(out, "cmd_get", t.cmd_get);
    stat(out, "cmd_set", t.cmd_set);
    stat(out, "cmd_flush", t.cmd_flush);
    stat(out, "cmd_touch", t.cmd_touch);
    // memcached 1.6.18 counts `me` here (and no other meta command): so does mnemo.
    stat(out, "cmd_meta", t.cmd_meta);
    stat(out, "get_hits", t.get_hits);
    stat(out, "get_misses", t.get_misses);
    stat(out, "get_expired", t.get_expired);
    stat(out, "get_flushed", t.get_flushed);
    // memcached prints these only with ext_path; aborted/oom: a flash read here never
    // gives up half-way, and needs no item memory.
    if let Some(x) = &s.flash {
        stat(out, "get_extstore", x.get_extstore);
        stat(out, "get_aborted_extstore", 0);
        stat(out, "get_oom_extstore", 0);
        stat(out, "recache_from_extstore", x.recache_from_extstore);
        stat(out, "miss_from_extstore", x.miss_from_extstore);
        stat(out, "badcrc_from_extstore", x.badcrc_from_extstore);
    }
    stat(out, "delete_misses", t.delete_misses);
    stat(out, "delete_hits", t.delete_hits);
    stat(out, "incr_misses", t.incr_misses);
    stat(out, "incr_hits", t.incr_hits);
    stat(out, "decr_misses", t.decr_misses);
    stat(out, "decr_hits", t.decr_hits);
    stat(out, "cas_misses", t.cas_misses);
    stat(out, "cas_hits", t.cas_hits);
    stat(out, "cas_badval", t.cas_badval);
    stat(out, "touch_hits", t.touch_hits);
    stat(out, "touch_misses", t.touch_misses);
    stat(out, "store_too_large", t.store_too_large);
    stat(out, "store_no_memory", t.store_no_memory);
    stat(out, "auth_cmds", sh.auth.cmds.load(Relaxed));
    stat(out, "auth_errors", sh.auth.errors.load(Relaxed));
    if f.show_idle_kicks {
        stat(out, "idle_kicks", t.idle_kicks);
    }
    stat(out, "bytes_read", t.bytes_read);
    stat(out, "bytes_written", t.bytes_written);
    stat(out, "limit_maxbytes", s.limit_maxbytes);
    let l = &sh.listen;
    stat(out, "accepting_conns", u8::from(l.accepting.load(Relaxed)));
    stat(out, "listen_disabled_num", l.disabled_num.load(Relaxed));
    stat(
        out,
        "time_in_listen_disabled_us",
        l.disabled_us.load(Relaxed),
    );
    stat(out, "threads", sh.config.threads);
    stat(out, "conn_yields", t.conn_yields);
    // The hash index: its slots play memcached's bucket pointers (8 bytes each); it grows a
    // bucket at a time (linear hashing), so it is never in a bulk expansion.
    stat(out, "hash_power_level", s.index_slots.max(1).ilog2());
    stat(out, "hash_bytes", s.index_bytes);
    stat(out, "hash_is_expanding", 0);
    if ext.slab_reassign {
        // 1.6.45's slab mover counters (1.6.34 replaced evictions_nomem with busy_nomem, 1.6.40
        // added last_busy_status): no slab classes here, so no page ever moves.
        for name in [
            "slab_reassign_rescues",
            "slab_reassign_chunk_rescues",
            "slab_reassign_inline_reclaim",
            "slab_reassign_busy_items",
            "slab_reassign_busy_deletes",
            "slab_reassign_busy_nomem",
        ] {
            stat(out, name, 0);
        }
        stat(out, "slab_reassign_last_busy_status", "none");
        stat(out, "slab_reassign_running", 0);
        // memcached's "slab pages moved" to reuse memory; here, segments compacted (their
        // live items moved so the segment is reused instead of fresh memory taken; docs/architecture.md).
        stat(out, "slabs_moved", s.compactions);
    }
    if f.show_crawler {
        // No crawler runs in the background (the maintenance thread drops expired segments);
        // starts are the crawls and metadumps clients asked for.
        stat(out, "lru_crawler_running", 0);
        stat(out, "lru_crawler_starts", sh.crawler.starts.load(Relaxed));
    }
    if f.show_lru_maintainer {
        stat(out, "lru_maintainer_juggles", 0);
    }
    stat(out, "malloc_fails", 0);
    // `watch` (watch.rs): producers never drop a line, a full watcher's buffer skips it.
    let [written, sent, skipped, watchers] = sh.watch.stats();
    stat(out, "log_worker_dropped", 0);
    stat(out, "log_worker_written", written);
    stat(out, "log_watcher_skipped", skipped);
    stat(out, "log_watcher_sent", sent);
    stat(out, "log_watchers", watchers);
    if let Some(x) = &s.flash {
        extstore(x, out);
    }
    // memcached 1.6.18 built with TLS prints these with -Z only, ssl_new_sessions only with
    // -o ssl_session_cache.
    if let Some(tls) = &sh.config.tls {
        if let Some(n) = tls.new_sessions() {
            stat(out, "ssl_new_sessions", n);
        }
        stat(out, "ssl_handshake_errors", tls.handshake_errors());
        stat(out, "ssl_proto_errors", tls.proto_errors());
        stat(
            out,
            "time_since_server_cert_refresh",
            tls.since_refresh(now),
        );
    }
    stat(out, "unexpected_napi_ids", 0);
    stat(out, "round_robin_fallback", 0);
    stat(out, "bytes", s.bytes);
    stat(out, "curr_items", s.curr_items);
    stat(out, "total_items", s.total_items);
    stat(out, "slab_global_page_pool", 0);
    stat(out, "expired_unfetched", s.expired_unfetched);
    stat(out, "evicted_unfetched", s.evicted_unfetched);
    if f.show_lru_maintainer {
        stat(out, "evicted_active", 0);
    }
    stat(out, "evictions", s.evictions);
    stat(out, "reclaimed", s.reclaimed);
    stat(out, "crawler_reclaimed", 0);
    stat(out, "crawler_items_checked", 0);
    stat(out, "lrutail_reflocked", 0);
    if f.show_lru_maintainer {
        for name in [
            "moves_to_cold",
            "moves_to_warm",
            "moves_within_lru",
            "direct_reclaims",
            "lru_bumps_dropped",
        ] {
            stat(out, name, 0);
        }
    }
    line(out, b"END");
}

/// memcached's extstore_* lines of `stats`. compact_lost stays 0: a record compaction could
/// not copy is left in place and tried again (compact_skipped), not dropped.
fn extstore(x: &mnemo_store::FlashStats, out: &mut Vec<u8>) {
    for (name, v) in [
        ("extstore_compact_lost", 0),
        ("extstore_compact_rescues", x.compact_rescues),
        ("extstore_compact_skipped", x.compact_skipped),
        ("extstore_page_allocs", x.page_allocs),
        ("extstore_page_evictions", x.page_evictions),
        ("extstore_page_reclaims", x.page_reclaims),
        ("extstore_pages_free", x.pages_free),
        ("extstore_pages_used", x.pages_used),
        ("extstore_objects_evicted", x.objects_evicted),
        ("extstore_objects_read", x.objects_read),
        ("extstore_objects_written", x.objects_written),
        ("extstore_objects_used", x.objects_used),
        ("extstore_bytes_evicted", x.bytes_evicted),
        ("extstore_bytes_written", x.bytes_written),
        ("extstore_bytes_read", x.bytes_read),
        ("extstore_bytes_used", x.bytes_used),
        ("extstore_bytes_fragmented", x.bytes_fragmented),
        ("extstore_limit_maxbytes", x.limit_maxbytes),
        ("extstore_io_queue", x.io_queue),
        // mnemo's own (memcached only prints "read/write op failed" on stderr): failed reads
        // and writes of the flash file; the log says which and why.
        ("extstore_io_errors", x.io_errors),
    ] {
        stat(out, name, v);
    }
}

/// `stats settings`: memcached 1.6.18's lines in its order, then mnemo's own. Values are the
/// settings in effect; for knobs of mechanisms mnemo does not have (its LRU segments,
/// extstore, TLS, the logger), memcached's defaults, which say the mechanism is off or idle
/// (docs/operations.md lists the `-o` options accepted and ignored).
pub fn settings(sh: &Shared, out: &mut Vec<u8>) {
    let c = &sh.config;
    let ext = &c.ext;
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    stat(out, "maxbytes", sh.store.stats().limit_maxbytes);
    stat(out, "maxconns", c.max_conns);
    // memcached's settings as given: -1 for "any free port", 0 for none.
    let given = |p: Option<u16>| p.map_or(0, |p| if p == 0 { -1 } else { i32::from(p) });
    stat(out, "tcpport", given(c.port));
    stat(out, "udpport", given(c.udp_port));
    stat(out, "inter", c.listen.join(","));
    stat(out, "verbosity", sh.verbosity.load(Relaxed));
    stat(out, "oldest", 0);
    stat(out, "evictions", if c.evict { "on" } else { "off" });
    stat(
        out,
        "domain_socket",
        c.unix_socket.as_deref().unwrap_or("NULL"),
    );
    stat(out, "umask", format!("{:o}", c.unix_mask));
    stat(out, "shutdown_command", yes_no(c.enable_shutdown));
    stat(out, "growth_factor", format!("{:.2}", c.growth_factor));
    stat(out, "chunk_size", c.chunk_size);
    stat(out, "num_threads", c.threads);
    stat(out, "num_threads_per_udp", c.threads);
    stat(out, "stat_key_prefix", c.prefix_delimiter as char);
    stat(out, "detail_enabled", yes_no(sh.detail.enabled()));
    stat(out, "reqs_per_event", c.reqs_per_event);
    stat(out, "cas_enabled", yes_no(c.use_cas));
    stat(out, "tcp_backlog", c.backlog);
    // Text and binary are both served, chosen per connection (binary only with -S).
    use crate::config::Protocols;
    let binding = match c.protocol {
        Protocols::Binary => "binary",
        Protocols::Ascii => "ascii",
        Protocols::Auto if c.sasl => "binary",
        Protocols::Auto => "auto-negotiate",
    };
    stat(out, "binding_protocol", binding);
    stat(out, "auth_enabled_sasl", yes_no(c.sasl));
    stat(out, "auth_enabled_ascii", yes_no(c.text_auth && !c.sasl));
    stat(out, "item_size_max", c.item_size_max);
    stat(out, "maxconns_fast", yes_no(ext.maxconns_fast));
    stat(out, "hashpower_init", ext.hashpower_init);
    // `slabs reassign` is accepted (it never finds a page to move) and `slabs automove` sets
    // these, so they read as memcached's do.
    stat(out, "slab_reassign", yes_no(ext.slab_reassign));
    stat(out, "slab_automove", sh.slab_automove.level());
    stat(
        out,
        "slab_automove_ratio",
        c_fixed2(sh.slab_automove.ratio()),
    );
    stat(out, "slab_automove_window", sh.slab_automove.window());
    stat(out, "slab_chunk_max", sh.config.ext.slab_chunk_max);
    stat(out, "lru_crawler", yes_no(sh.crawler.enabled.load(Relaxed)));
    stat(out, "lru_crawler_sleep", sh.crawler.sleep.load(Relaxed));
    stat(out, "lru_crawler_tocrawl", sh.crawler.tocrawl.load(Relaxed));
    stat(out, "tail_repair_time", 0);
    stat(out, "flush_enabled", yes_no(c.flush_enabled));
    stat(out, "dump_enabled", yes_no(c.dump_enabled));
    // mnemo's index hashes keys with xxh3 whatever -o hash_algorithm says.
    stat(out, "hash_algorithm", "xxh3");
    stat(out, "lru_maintainer_thread", yes_no(ext.lru_maintainer));
    stat(out, "lru_segmented", yes_no(ext.lru_maintainer));
    stat(out, "hot_lru_pct", 20);
    stat(out, "warm_lru_pct", 40);
    stat(out, "hot_max_factor", "0.20");
    stat(out, "warm_max_factor", "2.00");
    stat(out, "temp_lru", "no");
    stat(out, "temporary_ttl", 61);
    stat(out, "idle_timeout", ext.idle_timeout);
    stat(out, "watcher_logbuf_size", 262_144);
    stat(out, "worker_logbuf_size", 65_536);
    stat(out, "read_buf_mem_limit", 0);
    stat(out, "track_sizes", yes_no(sh.sizes_enabled.load(Relaxed)));
    stat(out, "inline_ascii_response", "no");
    // As last set (`extstore <name> <value>` changes them at run time).
    let x = &*sh.extstore.lock();
    stat(out, "ext_item_size", x.item_size);
    stat(out, "ext_item_age", x.item_age);
    stat(out, "ext_low_ttl", x.low_ttl);
    stat(out, "ext_recache_rate", x.recache_rate);
    stat(out, "ext_wbuf_size", u64::from(x.wbuf_size_mb) << 20);
    stat(out, "ext_compact_under", x.compact_under());
    stat(out, "ext_drop_under", x.drop_under());
    stat(out, "ext_max_sleep", x.max_sleep);
    stat(out, "ext_max_frag", c_fixed2(x.max_frag));
    stat(
        out,
        "slab_automove_freeratio",
        format!("{:.3}", x.automove_freeratio),
    );
    stat(out, "ext_drop_unread", yes_no(x.drop_unread));
    // As given, in memcached's forms (its NULL and "(null)" spellings for unset files
    // included), with -Z or without.
    let ssl = &ext.ssl;
    stat(out, "ssl_enabled", yes_no(sh.config.ssl_enabled));
    stat(
        out,
        "ssl_chain_cert",
        ssl.chain_cert.as_deref().unwrap_or("(null)"),
    );
    stat(out, "ssl_key", ssl.key.as_deref().unwrap_or("(null)"));
    stat(out, "ssl_verify_mode", ssl.openssl_verify_flags());
    stat(out, "ssl_keyformat", ssl.keyformat);
    stat(out, "ssl_ciphers", ssl.ciphers.as_deref().unwrap_or("NULL"));
    stat(out, "ssl_ca_cert", ssl.ca_cert.as_deref().unwrap_or("NULL"));
    stat(out, "ssl_wbuf_size", ssl.wbuf_size);
    stat(out, "ssl_session_cache", yes_no(ssl.session_cache));
    stat(out, "ssl_kernel_tls", yes_no(ssl.kernel_tls));
    stat(out, "ssl_min_version", ssl.min_version_name());
    // 1.6.40 prints it as a number (1.6.18 to 1.6.39 passed the 0 to "%s": "(null)").
    stat(out, "num_napi_ids", 0);
    // -e: the warm-restart snapshot (memcached: its memory file).
    match &sh.config.memory_file {
        Some(p) => stat(out, "memory_file", p.display()),
        None => stat(out, "memory_file", "(null)"),
    }
    // 1.6.38 (client flags are 32 bits, as here).
    stat(out, "client_flags_size", 4);
    // mnemo's own, after memcached's.
    stat(out, "segment_size", sh.store.stats().segment_size);
    stat(out, "eviction", sh.config.eviction.name());
    // mnemo's own release: `version` and `stats` must read exactly as memcached's.
    stat(out, "mnemo_version", crate::config::VERSION);
    use crate::config::ZeroCopy;
    let zero_copy = match sh.config.zero_copy {
        ZeroCopy::Auto => "auto",
        ZeroCopy::On => "yes",
        ZeroCopy::Off => "no",
    };
    stat(out, "zero_copy", zero_copy);
    if !ext.ignored.is_empty() {
        stat(out, "extended_options_ignored", ext.ignored.join(","));
    }
    let fl = &c.filter_limits;
    stat(out, "filter_timeout_ms", fl.deadline.as_millis());
    stat(out, "filter_memory", fl.memory);
    stat(out, "filter_stack", fl.stack);
    stat(out, "filter_output_max", fl.output_max);
    stat(out, "filter_max_keys", c.filter_max_keys);
    stat(out, "filter_arg_max", mnemo_proto::text::FGET_ARG_MAX);
    for f in sh.filters.specs() {
        stat(
            out,
            &format!("filter:{}", f.name),
            format!("{}:{}", f.kind.as_str(), f.path.display()),
        );
    }
    line(out, b"END");
}

/// C's "%.2f" (memcached's format for ratios), whose NaN reads "nan" or "-nan".
fn c_fixed2(v: f64) -> String {
    match (v.is_nan(), v.is_sign_negative()) {
        (true, false) => "nan".into(),
        (true, true) => "-nan".into(),
        _ => format!("{v:.2}"),
    }
}

/// `stats items`: mnemo has no slab classes; everything lives in one class, numbered 1 so
/// tools that walk `items:<class>:*` (memcached-tool, dump scripts) find it. The fields are
/// memcached 1.6.18's, in its order; the segmented-LRU ones (hot/warm/cold, moves, hits_to_*)
/// are there only under its LRU maintainer, as in memcached, and are 0 (mnemo has one FIFO
/// of segments, not LRUs).
///
/// With a flash tier, the items in RAM that would go to flash (value of at least
/// ext_item_size) are listed apart, in class [`FLASHABLE_CLASS`], as memcached lists them in
/// its large classes; a flashed item counts in class 1, as memcached's does (what stays in
/// its RAM is a small header). memcached's suite waits on that: class 3 and up falling to 0
/// means every large item went to flash.
pub fn items(sh: &Shared, out: &mut Vec<u8>) {
    let s = sh.store.stats();
    let lru = sh.config.ext.lru_maintainer;
    let (flashable, flashable_bytes) = sh.store.flashable_in_ram(sh.clock.now()).unwrap_or((0, 0));
    // Two readings taken apart: a set in between must not underflow.
    let (rest, rest_bytes) = (
        s.curr_items.saturating_sub(flashable),
        s.bytes.saturating_sub(flashable_bytes),
    );
    if rest > 0 {
        let oom = sh.totals().store_no_memory;
        item_class(out, lru, 1, &|name| match name {
            "number" | "number_cold" => rest,
            "mem_requested" => rest_bytes,
            "evicted" => s.evictions,
            "outofmemory" => oom,
            "reclaimed" => s.reclaimed,
            "expired_unfetched" => s.expired_unfetched,
            "evicted_unfetched" => s.evicted_unfetched,
            _ => 0,
        });
    }
    if flashable > 0 {
        item_class(out, lru, FLASHABLE_CLASS, &|name| match name {
            "number" | "number_cold" => flashable,
            "mem_requested" => flashable_bytes,
            _ => 0,
        });
    }
    line(out, b"END");
}

/// The `stats items` class of RAM items that would go to flash: the first that memcached's
/// suite (`wait_for_ext`) counts as holding them.
pub const FLASHABLE_CLASS: u32 = 3;

/// One class's `stats items` lines, `v` giving each field's value.
fn item_class(out: &mut Vec<u8>, lru: bool, class: u32, v: &dyn Fn(&str) -> u64) {
    let mut st = |name: &str| stat(out, &format!("items:{class}:{name}"), v(name));
    st("number");
    if lru {
        for name in [
            "number_hot",
            "number_warm",
            "number_cold",
            "age_hot",
            "age_warm",
        ] {
            st(name);
        }
    }
    // Items carry no access time (see crawler.rs on `la`).
    for name in [
        "age",
        "mem_requested",
        "evicted",
        "evicted_nonzero",
        "evicted_time",
        "outofmemory",
        "tailrepairs",
    ] {
        st(name);
    }
    for name in ["reclaimed", "expired_unfetched", "evicted_unfetched"] {
        st(name);
    }
    if lru {
        st("evicted_active");
    }
    for name in [
        "crawler_reclaimed",
        "crawler_items_checked",
        "lrutail_reflocked",
    ] {
        st(name);
    }
    if lru {
        for name in [
            "moves_to_cold",
            "moves_to_warm",
            "moves_within_lru",
            "direct_reclaims",
        ] {
            st(name);
        }
        for name in [
            "hits_to_hot",
            "hits_to_warm",
            "hits_to_cold",
            "hits_to_temp",
        ] {
            st(name);
        }
    }
}

/// `stats extstore`: memcached 1.6.18's four lines per page of the flash file, every page
/// (written or not), in page order: `N:version` (0: never written), `N:bytes` (live records),
/// `N:bucket` (3 for a page of the low-TTL stream, memcached's number for that bucket; else 0)
/// and `N:free_bucket` (always 0: no page is set aside for a bucket).
/// Without `ext_path`, an empty group, as a memcached built with extstore but none configured.
pub fn extstore_pages(sh: &Shared, out: &mut Vec<u8>) {
    for (n, p) in sh
        .store
        .flash_pages()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        stat(out, &format!("{n}:version"), p.version);
        stat(out, &format!("{n}:bytes"), p.bytes);
        stat(out, &format!("{n}:bucket"), p.bucket);
        stat(out, &format!("{n}:free_bucket"), 0);
    }
    line(out, b"END");
}

/// `stats slabs`: mnemo's equivalent is its segments. Class 1 describes the segment pool and
/// is listed once the store holds item memory (memcached lists a class once it has a page):
/// chunk_size = segment size, total_pages = segments in use, free_chunks = segments the
/// memory limit still has room for; `used_chunks` counts items, as memcached's does (one
/// chunk per item), and the per-class hit counters are the server's (one class).
/// `total_malloced` is all the memory the store has charged to -m, index included (`stats`
/// `hash_bytes` is the index alone).
pub fn slabs(sh: &Shared, out: &mut Vec<u8>) {
    let s = sh.store.stats();
    let t = sh.totals();
    let active = s.segments_used + s.large_items > 0;
    if active {
        stat(out, "1:chunk_size", s.segment_size);
        stat(out, "1:chunks_per_page", 1);
        stat(out, "1:total_pages", s.segments_used);
        stat(out, "1:total_chunks", s.segments_used);
        stat(out, "1:used_chunks", s.curr_items);
        stat(out, "1:free_chunks", s.segments_free);
        stat(out, "1:free_chunks_end", 0);
        stat(out, "1:get_hits", t.get_hits);
        stat(out, "1:cmd_set", t.cmd_set);
        stat(out, "1:delete_hits", t.delete_hits);
        stat(out, "1:incr_hits", t.incr_hits);
        stat(out, "1:decr_hits", t.decr_hits);
        stat(out, "1:cas_hits", t.cas_hits);
        stat(out, "1:cas_badval", t.cas_badval);
        stat(out, "1:touch_hits", t.touch_hits);
    }
    stat(out, "active_slabs", u8::from(active));
    stat(out, "total_malloced", s.mem_used);
    line(out, b"END");
}

/// memcached's item size on a 64-bit build: its item header (48 bytes, 56 with CAS), the key
/// and its NUL, the value and its "\r\n", and the client flags when they are not 0.
fn memcached_item_size(key_len: usize, value_len: usize, flags: u32, cas: bool) -> u64 {
    let header = if cas { 56 } else { 48 };
    (header + key_len + 1 + value_len + 2 + if flags != 0 { 4 } else { 0 }) as u64
}

/// The bucket `stats sizes` counts an item of this size in: its size rounded up to 32 bytes.
fn sizes_bucket(size: u64) -> u64 {
    size.div_ceil(32) * 32
}

/// `stats sizes`: with tracking on (`-o track_sizes`), how many live
/// items fall in each 32-byte bucket of memcached's item size (so the buckets read as
/// memcached's would for the same items). memcached counts the items stored while tracking
/// is on; mnemo walks the live items when asked, so items stored before count too.
pub fn sizes(sh: &Shared, out: &mut Vec<u8>) {
    if !sh.sizes_enabled.load(Relaxed) {
        stat(out, "sizes_status", "disabled");
        line(out, b"END");
        return;
    }
    let now = sh.clock.now();
    let cas = sh.config.use_cas;
    let mut buckets = std::collections::BTreeMap::<u64, u64>::new();
    let mut cursor = mnemo_store::DumpCursor::new();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    loop {
        // Flags are not in the dump walk: each key of a batch is read (without counting it as
        // a read) once the batch's shard lock is released.
        keys.clear();
        let more = sh
            .store
            .dump_step(&mut cursor, now, |it| keys.push(it.key.to_vec()));
        for key in &keys {
            let size = sh.store.peek(key, now, |it| {
                memcached_item_size(key.len(), it.value.len(), it.flags, cas)
            });
            if let Some(size) = size.hit() {
                *buckets.entry(sizes_bucket(size)).or_default() += 1;
            }
        }
        if !more {
            break;
        }
    }
    for (size, n) in buckets {
        stat(out, &size.to_string(), n);
    }
    line(out, b"END");
}
