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
    ($($name:ident),* $(,)?) => {
        /// One worker's counters (cache-line padded so workers never share a line).
        #[derive(Default)]
        #[repr(align(128))]
        pub struct Counters { $(pub $name: AtomicU64,)* }

        /// The sum over workers.
        #[derive(Default, Clone, Copy, Debug)]
        pub struct Totals { $(pub $name: u64,)* }

        impl Counters {
            pub fn add_to(&self, t: &mut Totals) { $( t.$name += self.$name.load(Relaxed); )* }
            pub fn reset(&self) { $( self.$name.store(0, Relaxed); )* }
        }
    };
}

counters!(
    cmd_get, cmd_set, cmd_flush, cmd_touch, get_hits, get_misses, get_expired, get_flushed,
    delete_misses, delete_hits, incr_misses, incr_hits, decr_misses, decr_hits, cas_misses,
    cas_hits, cas_badval, touch_hits, touch_misses, store_too_large, store_no_memory, bytes_read,
    bytes_written, conn_yields,
);

/// Add to a counter this thread alone writes.
#[inline]
pub fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
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
        self.total_conns.store(0, Relaxed);
        self.rejected_conns.store(0, Relaxed);
        self.auth_cmds.store(0, Relaxed);
        self.auth_errors.store(0, Relaxed);
        self.store.reset_stats();
        self.detail.reset();
        self.filters.reset_stats();
    }
}

fn rusage() -> (String, String) {
    // SAFETY: getrusage only writes the struct we hand it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| format!("{}.{:06}", t.tv_sec, t.tv_usec);
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

/// `stats` with no argument.
pub fn general(sh: &Shared, out: &mut Vec<u8>) {
    let now = sh.clock.now();
    let t = sh.totals();
    let s = sh.store.stats();
    let (user, system) = rusage();
    stat(out, "pid", std::process::id());
    stat(out, "uptime", now.saturating_sub(60));
    stat(out, "time", u64::from(now) + sh.clock.process_started());
    stat(out, "version", crate::config::PROTOCOL_VERSION);
    stat(out, "pointer_size", usize::BITS);
    stat(out, "rusage_user", user);
    stat(out, "rusage_system", system);
    stat(out, "max_connections", sh.config.max_conns);
    stat(out, "curr_connections", sh.curr_conns.load(Relaxed));
    stat(out, "total_connections", sh.total_conns.load(Relaxed));
    stat(out, "rejected_connections", sh.rejected_conns.load(Relaxed));
    stat(out, "cmd_get", t.cmd_get);
    stat(out, "cmd_set", t.cmd_set);
    stat(out, "cmd_flush", t.cmd_flush);
    stat(out, "cmd_touch", t.cmd_touch);
    stat(out, "get_hits", t.get_hits);
    stat(out, "get_misses", t.get_misses);
    stat(out, "get_expired", t.get_expired);
    stat(out, "get_flushed", t.get_flushed);
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
    stat(out, "auth_cmds", sh.auth_cmds.load(Relaxed));
    stat(out, "auth_errors", sh.auth_errors.load(Relaxed));
    stat(out, "bytes_read", t.bytes_read);
    stat(out, "bytes_written", t.bytes_written);
    stat(out, "limit_maxbytes", s.limit_maxbytes);
    stat(out, "threads", sh.config.threads);
    stat(out, "conn_yields", t.conn_yields);
    // memcached's "slab pages moved" to reuse memory; here, segments compacted (their live
    // items moved so the segment is reused instead of fresh memory taken; README).
    stat(out, "slabs_moved", s.compactions);
    stat(out, "bytes", s.bytes);
    stat(out, "curr_items", s.curr_items);
    stat(out, "total_items", s.total_items);
    stat(out, "expired_unfetched", s.expired_unfetched);
    stat(out, "evicted_unfetched", s.evicted_unfetched);
    stat(out, "evictions", s.evictions);
    stat(out, "reclaimed", s.reclaimed);
    line(out, b"END");
}

/// `stats settings`: the flags in effect, under memcached's names.
pub fn settings(sh: &Shared, out: &mut Vec<u8>) {
    let c = &sh.config;
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    stat(out, "maxbytes", sh.store.stats().limit_maxbytes);
    stat(out, "maxconns", c.max_conns);
    stat(out, "tcpport", c.port);
    stat(out, "udpport", 0);
    stat(out, "inter", c.listen.join(","));
    stat(out, "verbosity", sh.verbosity.load(Relaxed));
    stat(out, "evictions", if c.evict { "on" } else { "off" });
    stat(out, "domain_socket", c.unix_socket.as_deref().unwrap_or("NULL"));
    stat(out, "umask", format!("{:o}", c.unix_mask));
    stat(out, "growth_factor", format!("{:.2}", c.growth_factor));
    stat(out, "chunk_size", c.chunk_size);
    stat(out, "num_threads", c.threads);
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
    stat(out, "flush_enabled", yes_no(c.flush_enabled));
    stat(out, "shutdown_command", yes_no(c.enable_shutdown));
    stat(out, "maxconns_fast", "yes");
    // `slabs reassign` is accepted (it never finds a page to move) and `slabs automove` sets
    // these, so they read as memcached's do.
    stat(out, "slab_reassign", "yes");
    stat(out, "slab_automove", sh.slab_automove.level());
    stat(out, "slab_automove_ratio", c_fixed2(sh.slab_automove.ratio()));
    stat(out, "segment_size", sh.store.stats().segment_size);
    // mnemo's own release: `version` and `stats` must read exactly as memcached's.
    stat(out, "mnemo_version", crate::config::VERSION);
    if !c.extended.is_empty() {
        stat(out, "extended_options_ignored", c.extended.join(","));
    }
    let fl = &c.filter_limits;
    stat(out, "filter_timeout_ms", fl.deadline.as_millis());
    stat(out, "filter_memory", fl.memory);
    stat(out, "filter_stack", fl.stack);
    stat(out, "filter_output_max", fl.output_max);
    stat(out, "filter_max_keys", c.filter_max_keys);
    stat(out, "filter_arg_max", mnemo_proto::text::FGET_ARG_MAX);
    for f in sh.filters.specs() {
        stat(out, &format!("filter:{}", f.name), format!("{}:{}", f.kind.as_str(), f.path.display()));
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
/// tools that walk `items:<class>:*` (memcached-tool, dump scripts) find it.
pub fn items(sh: &Shared, out: &mut Vec<u8>) {
    let s = sh.store.stats();
    if s.curr_items > 0 {
        stat(out, "items:1:number", s.curr_items);
        stat(out, "items:1:evicted", s.evictions);
        stat(out, "items:1:evicted_unfetched", s.evicted_unfetched);
        stat(out, "items:1:expired_unfetched", s.expired_unfetched);
        stat(out, "items:1:reclaimed", s.reclaimed);
        stat(out, "items:1:outofmemory", sh.totals().store_no_memory);
    }
    line(out, b"END");
}

/// `stats slabs`: mnemo's equivalent is its segments. Class 1 describes the segment pool
/// (chunk_size = segment size, total_pages = segments allocated); the totals say what the
/// store holds, index included.
pub fn slabs(sh: &Shared, out: &mut Vec<u8>) {
    let s = sh.store.stats();
    stat(out, "1:chunk_size", s.segment_size);
    stat(out, "1:chunks_per_page", 1);
    stat(out, "1:total_pages", s.segments_total);
    stat(out, "1:total_chunks", s.segments_total);
    stat(out, "1:used_chunks", s.segments_total - s.segments_free);
    stat(out, "1:free_chunks", s.segments_free);
    stat(out, "1:mem_requested", s.bytes);
    stat(out, "active_slabs", 1);
    stat(out, "total_malloced", s.segments_total * s.segment_size + s.index_bytes);
    stat(out, "index_bytes", s.index_bytes);
    stat(out, "index_slots", s.index_slots);
    line(out, b"END");
}
