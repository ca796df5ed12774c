//! memcached's extended options (`-o name[=value],...`), read with memcached's names, checks
//! and error lines (1.6.45's where a later release changed them: slab_automove_window,
//! slab_chunk_max, ext_path). Options whose behaviour exists in mnemo take effect; the ones that
//! tune a mechanism mnemo does not have (slab classes, the segmented LRU and its maintainer,
//! extstore's compaction and I/O threads, the logger, TLS, seccomp) are accepted, so memcached command lines keep working,
//! reported once on stderr at start-up and listed by `stats settings`
//! (`extended_options_ignored`). A name memcached does not know stops the start, as there.
//!
//! ```text
//!   takes effect      idle_timeout  maxconns_fast / no_maxconns_fast  lru_crawler / no_lru_crawler
//!                     lru_maintainer / no_lru_maintainer (which stats lines exist)  track_sizes
//!                     slab_reassign / no_slab_reassign  slab_automove[=N] / no_slab_automove
//!                     slab_automove_ratio  modern  no_modern (the settings above, as memcached)
//!                     ssl_chain_cert  ssl_key  ssl_ca_cert  ssl_verify_mode  ssl_min_version
//!                     ssl_ciphers  ssl_session_cache  ssl_keyformat (TLS with -Z: tls.rs)
//!                     ext_path  ext_page_size  ext_wbuf_size  ext_item_size  ext_low_ttl
//!                     ext_recache_rate  ext_compact_under  ext_max_frag  ext_item_age
//!                     ext_drop_under  ext_drop_unread (the flash tier: mnemo-store's flash
//!                     module)  ext_threads (its read threads: the server's flashio.rs)
//!   checked, shown    ext_io_depth  ext_max_sleep
//!   by stats settings slab_automove_freeratio  slab_automove_window  slab_chunk_max (KiB)
//!   but ignored       no_chunked_items (docs/flash.md)
//!   checked, kept     ext_path's :BUCKET (one pool of pages: Bucket)
//!   reported only     ssl_wbuf_size  ssl_kernel_tls (rustls sizes its own records; no kTLS)
//!   checked, ignored  hashpower  lru_crawler_sleep  lru_crawler_tocrawl  hot_lru_pct  warm_lru_pct
//!                     hash_algorithm  and every other name memcached 1.6.18 accepts
//! ```

/// memcached 1.6.18's `-o` defaults for the options that take effect.
pub const DEFAULT_IDLE_TIMEOUT: u32 = 0;
/// memcached 1.6.34's default (it was 30).
pub const DEFAULT_SLAB_AUTOMOVE_WINDOW: u32 = 10;
/// memcached's slab page: chunks are cut from 1 MiB pages, and slab_chunk_max must divide it.
pub const SLAB_PAGE_SIZE: u32 = 1 << 20;
/// Microseconds memcached's crawler sleeps between items.
pub const DEFAULT_LRU_CRAWLER_SLEEP: u32 = 100;

/// What `-o` asked for. `Default` is memcached's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtOptions {
    /// Seconds a connection may sit idle before it is closed; 0: never.
    pub idle_timeout: u32,
    /// A connection beyond -c is told `ERROR Too many open connections` and closed (on), or
    /// left waiting in the listen backlog until a connection closes (off).
    pub maxconns_fast: bool,
    /// The LRU crawler starts enabled (`lru_crawler enable|disable` change it later).
    pub lru_crawler: bool,
    /// memcached's segmented-LRU maintainer: mnemo has none, but which stats lines exist
    /// follows it, so tools see the field set memcached would show with the same flags.
    pub lru_maintainer: bool,
    /// `stats sizes` starts enabled (`stats sizes_enable|sizes_disable` change it later).
    pub track_sizes: bool,
    /// `slabs reassign` is allowed (and its stats lines exist).
    pub slab_reassign: bool,
    /// Initial `slabs automove` level and ratio.
    pub slab_automove: u32,
    pub slab_automove_ratio: f64,
    /// Knobs with nothing to act on, kept only so `stats settings` reports what was asked
    /// (memcached's hashpower_init, lru_crawler_sleep, lru_crawler_tocrawl).
    pub hashpower_init: u32,
    /// memcached's slab mover's window (seconds; 1.6.34 made the default 10).
    pub slab_automove_window: u32,
    /// memcached's largest slab chunk in bytes (`-o slab_chunk_max` is in KiB since 1.6.24),
    /// and whether it was given (then `-I` is checked against it: `check_chunk_max`).
    pub slab_chunk_max: u32,
    pub slab_chunk_max_given: bool,
    pub lru_crawler_sleep: u32,
    pub lru_crawler_tocrawl: u32,
    /// The `ssl_*` options (used when -Z turns TLS on; printed by `stats settings` either way).
    pub ssl: SslOptions,
    /// The `ext_*` options (the flash tier when `ext_path` is given).
    pub flash: FlashOptions,
    /// Accepted options that change nothing in mnemo, as given.
    pub ignored: Vec<String>,
}

/// memcached's `ssl_*` settings as given, in memcached's units, so `stats settings` prints
/// them exactly as memcached does; tls.rs turns them into a rustls configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct SslOptions {
    pub chain_cert: Option<String>,
    pub key: Option<String>,
    pub ca_cert: Option<String>,
    /// 0 none, 1 request, 2 require, 3 once (memcached's -o values, not OpenSSL's flags).
    pub verify_mode: u8,
    /// 0 TLS 1.0, 1 TLS 1.1, 2 TLS 1.2, 3 TLS 1.3 (rustls has nothing below 1.2).
    pub min_version: u8,
    /// An OpenSSL cipher list for TLS 1.2 (TLS 1.3 suites are not affected, as in OpenSSL).
    pub ciphers: Option<String>,
    pub session_cache: bool,
    /// 1 PEM, 2 DER (OpenSSL's SSL_FILETYPE_*).
    pub keyformat: i32,
    /// Bytes (given in KB).
    pub wbuf_size: u32,
    pub kernel_tls: bool,
}

impl Default for SslOptions {
    fn default() -> Self {
        SslOptions {
            chain_cert: None,
            key: None,
            ca_cert: None,
            verify_mode: 0,
            min_version: 2,
            ciphers: None,
            session_cache: false,
            keyformat: 1,
            wbuf_size: 16 * 1024,
            kernel_tls: false,
        }
    }
}

impl SslOptions {
    /// `stats settings`' ssl_verify_mode: the OpenSSL flags memcached stores (PEER = 1,
    /// FAIL_IF_NO_PEER_CERT = 2, CLIENT_ONCE = 4).
    pub fn openssl_verify_flags(&self) -> u8 {
        [0, 1, 3, 7][usize::from(self.verify_mode.min(3))]
    }

    /// `stats settings`' ssl_min_version.
    pub fn min_version_name(&self) -> &'static str {
        ["tlsv1.0", "tlsv1.1", "tlsv1.2", "tlsv1.3"][usize::from(self.min_version.min(3))]
    }

    /// One `ssl_*` option; None: not an ssl option. Errors are memcached's lines.
    fn apply(&mut self, name: &str, value: Option<&str>) -> Option<Result<(), String>> {
        let text = |what: &str| {
            value
                .map(str::to_string)
                .ok_or_else(|| format!("Missing {what} argument"))
        };
        let int = |what: &str| -> Result<i64, String> {
            let v = value.ok_or_else(|| format!("Missing {what} argument"))?;
            v.trim()
                .parse::<i64>()
                .map_err(|_| format!("could not parse argument to {what}"))
        };
        let invalid = |what: &str| format!("Invalid {what}. Use help to see valid options.");
        let set = |field: &mut u8, v: i64| match v {
            0..=3 => {
                *field = v as u8;
                Ok(())
            }
            _ => Err(invalid(name)),
        };
        let r = match name {
            "ssl_chain_cert" => text(name).map(|v| self.chain_cert = Some(v)),
            "ssl_key" => text(name).map(|v| self.key = Some(v)),
            "ssl_ca_cert" => text(name).map(|v| self.ca_cert = Some(v)),
            "ssl_ciphers" => text(name).map(|v| self.ciphers = Some(v)),
            "ssl_verify_mode" => int(name).and_then(|v| set(&mut self.verify_mode, v)),
            "ssl_min_version" => int(name).and_then(|v| set(&mut self.min_version, v)),
            // Any number is taken; tls.rs refuses the ones that are not PEM or DER at start.
            "ssl_keyformat" => int(name).map(|v| self.keyformat = v as i32),
            "ssl_wbuf_size" => int(name)
                .and_then(|v| {
                    u32::try_from(v).map_err(|_| format!("could not parse argument to {name}"))
                })
                .map(|kb| self.wbuf_size = kb.wrapping_mul(1024)),
            "ssl_session_cache" => {
                self.session_cache = true;
                Ok(())
            }
            "ssl_kernel_tls" => {
                self.kernel_tls = true;
                Ok(())
            }
            _ => return None,
        };
        Some(r)
    }
}

/// memcached's `ext_*` options as given, in memcached's units.
#[derive(Debug, Clone, PartialEq)]
pub struct FlashOptions {
    /// `ext_path=FILE:SIZE`: the (first) file and its size in bytes.
    pub path: Option<(String, u64)>,
    /// Further `ext_path` files, in the order given (memcached's "JBOD": one page space over
    /// all of them).
    pub more: Vec<(String, u64)>,
    /// Each file's bucket (`ext_path=FILE:SIZE:BUCKET`), in the order of `paths()`.
    pub buckets: Vec<Bucket>,
    /// Megabytes.
    pub page_size_mb: u32,
    pub wbuf_size_mb: u32,
    /// Threads that read flashed values off the event loops (flashio.rs; 0 counts as 1).
    pub threads: u32,
    pub io_depth: u32,
    /// Bytes.
    pub item_size: u32,
    /// Seconds.
    pub item_age: u32,
    pub low_ttl: u32,
    pub recache_rate: u32,
    /// Pages; None: a quarter of the file's pages (memcached's default).
    pub compact_under: Option<u32>,
    pub drop_under: Option<u32>,
    /// Microseconds.
    pub max_sleep: u32,
    pub max_frag: f64,
    pub drop_unread: bool,
    pub automove_freeratio: f64,
}

impl Default for FlashOptions {
    fn default() -> Self {
        FlashOptions {
            path: None,
            more: Vec::new(),
            buckets: Vec::new(),
            page_size_mb: (mnemo_store::DEFAULT_PAGE_SIZE >> 20) as u32,
            wbuf_size_mb: (mnemo_store::DEFAULT_WBUF_SIZE >> 20) as u32,
            threads: 1,
            io_depth: 1,
            item_size: mnemo_store::DEFAULT_ITEM_SIZE as u32,
            item_age: mnemo_store::DEFAULT_ITEM_AGE,
            low_ttl: mnemo_store::DEFAULT_LOW_TTL,
            recache_rate: mnemo_store::DEFAULT_RECACHE_RATE,
            compact_under: None,
            drop_under: None,
            max_sleep: 1_000_000,
            max_frag: 0.80,
            drop_unread: false,
            automove_freeratio: 0.01,
        }
    }
}

impl FlashOptions {
    /// Pages of the files (0 without `ext_path`).
    pub fn pages(&self) -> u64 {
        self.paths()
            .map(|(_, size)| size / (u64::from(self.page_size_mb) << 20).max(1))
            .sum()
    }

    /// Every `ext_path` file and its size, in the order given.
    pub fn paths(&self) -> impl Iterator<Item = &(String, u64)> {
        self.path.iter().chain(self.more.iter())
    }

    /// `ext_compact_under` / `ext_drop_under` as memcached reports them: a quarter of the
    /// pages unless given.
    pub fn compact_under(&self) -> u64 {
        self.compact_under.map_or(self.pages() / 4, u64::from)
    }
    pub fn drop_under(&self) -> u64 {
        self.drop_under.map_or(self.pages() / 4, u64::from)
    }

    /// `ext_max_frag` as the store takes it: per mille, a negative share as 0 (memcached's
    /// rule then compacts nothing); above 1 every page with live records qualifies.
    pub fn max_frag_permille(&self) -> u32 {
        (self.max_frag * 1000.0).round().clamp(0.0, 1_000_000.0) as u32
    }

    /// The store's flash settings, if a file was given.
    pub fn store_config(&self) -> Option<mnemo_store::FlashConfig> {
        let (path, size) = self.path.clone()?;
        let more = self.more.iter().map(|(p, s)| (p.into(), *s)).collect();
        Some(mnemo_store::FlashConfig {
            page_size: (self.page_size_mb as usize) << 20,
            wbuf_size: (self.wbuf_size_mb as usize) << 20,
            item_size: self.item_size as usize,
            low_ttl: self.low_ttl,
            recache_rate: self.recache_rate,
            compact_under: self.compact_under.map(|n| n as usize),
            max_frag_permille: self.max_frag_permille(),
            drop_unread: self.drop_unread,
            drop_under: self.drop_under.map(|n| n as usize),
            item_age: self.item_age,
            more,
            ..mnemo_store::FlashConfig::new(path, size)
        })
    }

    /// One `ext_*` option (or slab_automove_freeratio); None: not one of them. Errors are
    /// memcached's lines; `effect` says whether the option changes what mnemo does.
    fn apply(&mut self, name: &str, value: Option<&str>) -> Option<Result<bool, String>> {
        let bad = || format!("could not parse argument to {name}");
        let int = || {
            value
                .and_then(|v| v.trim().parse::<u32>().ok())
                .ok_or_else(bad)
        };
        let float = || {
            value
                .and_then(|v| v.trim().parse::<f64>().ok())
                .ok_or_else(bad)
        };
        let r = match name {
            "ext_path" => return Some(self.set_path(value).map(|()| true)),
            // memcached 1.6.40 dropped the rule that it come before ext_path: the files are
            // cut into pages once every option is read.
            "ext_page_size" => int().map(|v| self.page_size_mb = v).map(|()| true),
            "ext_wbuf_size" => int().map(|v| self.wbuf_size_mb = v).map(|()| true),
            "ext_item_size" => int().map(|v| self.item_size = v).map(|()| true),
            "ext_low_ttl" => int().map(|v| self.low_ttl = v).map(|()| true),
            "ext_recache_rate" => int().map(|v| self.recache_rate = v).map(|()| true),
            "ext_threads" => int().map(|v| self.threads = v).map(|()| true),
            "ext_io_depth" => int().map(|v| self.io_depth = v).map(|()| false),
            "ext_item_age" => int().map(|v| self.item_age = v).map(|()| true),
            "ext_compact_under" => int().map(|v| self.compact_under = Some(v)).map(|()| true),
            "ext_drop_under" => int().map(|v| self.drop_under = Some(v)).map(|()| true),
            "ext_max_sleep" => int().map(|v| self.max_sleep = v).map(|()| false),
            "ext_max_frag" => float().map(|v| self.max_frag = v).map(|()| true),
            "slab_automove_freeratio" => {
                float().map(|v| self.automove_freeratio = v).map(|()| false)
            }
            "ext_drop_unread" => {
                self.drop_unread = true;
                Ok(true)
            }
            _ => return None,
        };
        Some(r)
    }

    /// `ext_path=FILE:SIZE[:BUCKET]`, read as memcached 1.6.45 reads it: the value cut at
    /// every `:` (empty pieces skipped), SIZE's last letter its unit (m, g, t or p, any case:
    /// 1.6.21 made any other an error, so `:64k`, `:64` and `:1GB` stop the start) and its
    /// leading digits the count (C's atoi: `1.5g` is 1 GiB); a fourth piece is ignored. A size
    /// under one page is refused after all the options are read (`check_sizes`), as 1.6.40
    /// does once ext_page_size is known wherever it was given.
    fn set_path(&mut self, value: Option<&str>) -> Result<(), String> {
        const FAILED: &str = "failed to parse ext_path argument";
        let Some(v) = value else {
            return Err("missing argument to ext_path, ie: ext_path=/d/file:5G".into());
        };
        let mut pieces = v.split(':').filter(|p| !p.is_empty());
        let file = pieces.next().ok_or(FAILED)?;
        let size = pieces.next().ok_or_else(|| {
            format!(
                "must supply size to ext_path, ie: ext_path=/f/e:64m (M|G|T|P supported)\n{FAILED}"
            )
        })?;
        let bad_unit = || {
            format!(
                "must supply size to ext_path, ie: ext_path=/f/e:64m (m|g|t|p supported)\n{FAILED}"
            )
        };
        let unit = size.chars().last().ok_or_else(bad_unit)?;
        let shift = match unit.to_ascii_lowercase() {
            'm' => 20,
            'g' => 30,
            't' => 40,
            'p' => 50,
            _ => return Err(bad_unit()),
        };
        let count = size[..size.len() - unit.len_utf8()].trim_start();
        // atoi: leading digits, none is 0 (a zero size, refused with the other size checks);
        // a negative count or digits past u64 are refused rather than wrapped.
        let n: u64 = match count.strip_prefix('+').unwrap_or(count) {
            c if c.starts_with('-') => return Err(FAILED.into()),
            c => c[..c.find(|ch: char| !ch.is_ascii_digit()).unwrap_or(c.len())]
                .parse()
                .unwrap_or(0),
        };
        let bytes = n
            .checked_shl(shift)
            .filter(|b| b >> shift == n)
            .ok_or(FAILED)?;
        let bucket = match pieces.next() {
            None => Bucket::Default,
            Some(name) => Bucket::from_name(name)
                .ok_or_else(|| format!("Unknown extstore bucket: {name}\n{FAILED}"))?,
        };
        if self.path.is_some() {
            self.more.push((file.to_string(), bytes));
        } else {
            self.path = Some((file.to_string(), bytes));
        }
        self.buckets.push(bucket);
        Ok(())
    }

    /// memcached 1.6.45's check once every option is read (`storage_check_config`): each file
    /// must hold at least one page of ext_page_size.
    pub fn check_sizes(&self) -> Result<(), String> {
        let page = u64::from(self.page_size_mb) << 20;
        match self.paths().any(|(_, size)| page == 0 || size / page == 0) {
            true => Err("supplied ext_path has zero size, cannot use".into()),
            false => Ok(()),
        }
    }
}

/// memcached's page buckets, named by `ext_path=FILE:SIZE:BUCKET`: in memcached the pages of
/// that file serve only that kind of write. mnemo's pages are one pool over all the files
/// (the store's module doc), so a bucket name is checked and kept, start-up says on stderr
/// that it changes nothing, and every file's pages serve every write (docs/flash.md
/// "Buckets").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    Default,
    Compact,
    Chunked,
    LowTtl,
    /// 1.6.25: compaction's copies of items not read lately.
    ColdCompact,
    /// 1.6.25: what compaction moves out of the oldest pages when it can neither defragment
    /// nor drop.
    Old,
}

impl Bucket {
    /// memcached's names (storage.c `storage_conf_parse`).
    pub fn from_name(name: &str) -> Option<Bucket> {
        Some(match name {
            "default" => Bucket::Default,
            "compact" => Bucket::Compact,
            "chunked" => Bucket::Chunked,
            "lowttl" => Bucket::LowTtl,
            "coldcompact" => Bucket::ColdCompact,
            "old" => Bucket::Old,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Bucket::Default => "default",
            Bucket::Compact => "compact",
            Bucket::Chunked => "chunked",
            Bucket::LowTtl => "lowttl",
            Bucket::ColdCompact => "coldcompact",
            Bucket::Old => "old",
        }
    }
}

impl Default for ExtOptions {
    fn default() -> Self {
        ExtOptions {
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            maxconns_fast: true,
            lru_crawler: true,
            lru_maintainer: true,
            track_sizes: false,
            slab_reassign: true,
            slab_automove: super::DEFAULT_SLAB_AUTOMOVE,
            slab_automove_ratio: super::DEFAULT_SLAB_AUTOMOVE_RATIO,
            hashpower_init: 0,
            slab_automove_window: DEFAULT_SLAB_AUTOMOVE_WINDOW,
            slab_chunk_max: SLAB_PAGE_SIZE / 2,
            slab_chunk_max_given: false,
            lru_crawler_sleep: DEFAULT_LRU_CRAWLER_SLEEP,
            lru_crawler_tocrawl: 0,
            ssl: SslOptions::default(),
            flash: FlashOptions::default(),
            ignored: Vec::new(),
        }
    }
}

/// Names memcached 1.6.18 (Debian's build: extstore and TLS compiled in) accepts that have no
/// mechanism to act on in mnemo.
const IGNORED: &[&str] = &[
    "tail_repair_time",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "temporary_ttl",
    "watcher_logbuf_size",
    "worker_logbuf_size",
    "slab_sizes",
    "no_inline_ascii_resp",
    "inline_ascii_resp",
    "no_hashexpand",
    "drop_privileges",
    "no_drop_privileges",
    "resp_obj_mem_limit",
    "read_buf_mem_limit",
    "sock_cookie_id",
];

/// memcached's HASHPOWER_MAX.
const HASHPOWER_MAX: u32 = 32;

impl ExtOptions {
    /// memcached's checks of slab_chunk_max against `-I` (bytes), after every option: `-I`
    /// over 1 MiB puts an untouched chunk size back to half a page; a given one must divide
    /// `-I` and the slab page. Only a given slab_chunk_max is checked: mnemo takes any `-I`
    /// from 1 KiB (memcached refuses `-I` under 512 KiB or not a multiple of it by the same
    /// rule; docs/compatibility.md).
    pub fn check_chunk_max(&mut self, item_size_max: usize) -> Result<(), String> {
        if item_size_max > SLAB_PAGE_SIZE as usize && !self.slab_chunk_max_given {
            self.slab_chunk_max = SLAB_PAGE_SIZE / 2;
        }
        if !self.slab_chunk_max_given {
            return Ok(());
        }
        let chunk = self.slab_chunk_max as usize;
        if chunk > item_size_max {
            return Err(format!("slab_chunk_max (bytes: {chunk}) cannot be larger than -I (item_size_max {item_size_max})"));
        }
        if !item_size_max.is_multiple_of(chunk) {
            return Err(format!("-I (item_size_max: {item_size_max}) must be evenly divisible by slab_chunk_max (bytes: {chunk})"));
        }
        if !(SLAB_PAGE_SIZE as usize).is_multiple_of(chunk) {
            return Err(format!("slab_chunk_max (bytes: {chunk}) must divide evenly into {SLAB_PAGE_SIZE} (slab_page_size)"));
        }
        Ok(())
    }

    /// Apply every `-o` argument in order (each a comma-separated list, as memcached reads
    /// them). The error is memcached's line.
    pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<ExtOptions, String> {
        let mut o = ExtOptions::default();
        for arg in args {
            for opt in arg.as_ref().split(',').filter(|s| !s.is_empty()) {
                o.apply(opt)?;
            }
        }
        Ok(o)
    }

    fn apply(&mut self, opt: &str) -> Result<(), String> {
        let (name, value) = match opt.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (opt, None),
        };
        let num = |what: &str| -> Result<u32, String> {
            value
                .and_then(|v| v.parse::<u32>().ok())
                .ok_or_else(|| format!("Missing numeric argument for {what}"))
        };
        if let Some(r) = self.ssl.apply(name, value) {
            // Knobs of OpenSSL's that rustls has no counterpart for.
            if matches!(name, "ssl_wbuf_size" | "ssl_kernel_tls") {
                self.ignored.push(opt.to_string());
            }
            return r;
        }
        if let Some(r) = self.flash.apply(name, value) {
            // Accepted and shown by `stats settings`, but nothing acts on them yet.
            if r == Ok(false) {
                self.ignored.push(opt.to_string());
            }
            return r.map(|_| ());
        }
        match name {
            "idle_timeout" => {
                // memcached reads it with atoi: a non-number is 0, which means "off".
                value.ok_or("Missing numeric argument for idle_timeout")?;
                self.idle_timeout = value
                    .and_then(|v| v.trim().parse::<i64>().ok())
                    .unwrap_or(0)
                    .clamp(0, i64::from(u32::MAX)) as u32;
            }
            "maxconns_fast" => self.maxconns_fast = true,
            "no_maxconns_fast" => self.maxconns_fast = false,
            "lru_crawler" => self.lru_crawler = true,
            "no_lru_crawler" => self.lru_crawler = false,
            "lru_maintainer" => self.lru_maintainer = true,
            "no_lru_maintainer" => self.lru_maintainer = false,
            "track_sizes" => self.track_sizes = true,
            "slab_reassign" => self.slab_reassign = true,
            "no_slab_reassign" => self.slab_reassign = false,
            "slab_automove" => match value {
                None => self.slab_automove = 1,
                Some(v) => match v.parse::<u32>() {
                    Ok(n) => self.slab_automove = n,
                    Err(_) => return Err("slab_automove must be a number".into()),
                },
            },
            "no_slab_automove" => self.slab_automove = 0,
            "slab_automove_ratio" => match value.and_then(|v| v.parse::<f64>().ok()) {
                Some(r) => self.slab_automove_ratio = r,
                None => return Err("Invalid numeric argument for slab_automove_ratio".into()),
            },
            "modern" => {}
            // memcached 1.4's defaults: no page moves, no segmented LRU, no crawler, and new
            // connections past -c wait instead of being refused.
            "slab_automove_window" => {
                value.ok_or("Missing slab_automove_window argument")?;
                // atoi: a non-number is 0, refused by the range (1.6.45's bounds and words).
                let n = value
                    .and_then(|v| v.trim().parse::<i64>().ok())
                    .unwrap_or(0);
                if !(3..=1800).contains(&n) {
                    return Err("slab_automove_window must be > 2 and < 1800".into());
                }
                self.slab_automove_window = n as u32;
                self.ignored.push(opt.to_string());
            }
            "slab_chunk_max" => {
                let v = value.ok_or("Missing slab_chunk_max argument")?;
                let kb = v
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| "could not parse argument to slab_chunk_max")?;
                if kb <= 0 {
                    return Err("slab_chunk_max must be >= 0".into());
                }
                // 1.6.24: kilobytes, as the help always said; a byte count is caught here.
                if kb > 1024 {
                    return Err("slab_chunk_max must be specified in kilobytes.".into());
                }
                self.slab_chunk_max = kb as u32 * 1024;
                self.slab_chunk_max_given = true;
                self.ignored.push(opt.to_string());
            }
            "no_chunked_items" => {
                self.slab_chunk_max = SLAB_PAGE_SIZE;
                self.ignored.push(opt.to_string());
            }
            "no_modern" => {
                if !self.slab_chunk_max_given {
                    self.slab_chunk_max = SLAB_PAGE_SIZE;
                }
                self.slab_reassign = false;

                self.slab_automove = 0;
                self.maxconns_fast = false;
                self.lru_crawler = false;
                self.lru_maintainer = false;
            }
            "hashpower" => {
                let n = num("hashpower")?;
                if n < 12 {
                    return Err(format!("Initial hashtable multiplier of {n} is too low"));
                }
                if n > HASHPOWER_MAX {
                    return Err(format!("Initial hashtable multiplier of {n} is too high"));
                }
                // The index is sized from -m and grows a bucket at a time.
                self.hashpower_init = n;
                self.ignored.push(opt.to_string());
            }
            "lru_crawler_sleep" => {
                let n = num("lru_crawler_sleep")?;
                if n > 1_000_000 {
                    return Err("LRU crawler sleep must be between 0 and 1 second".into());
                }
                self.lru_crawler_sleep = n;
                self.ignored.push(opt.to_string());
            }
            "lru_crawler_tocrawl" => {
                self.lru_crawler_tocrawl = value
                    .and_then(|v| v.parse::<u32>().ok())
                    .ok_or("lru_crawler_tocrawl takes a numeric 32bit value")?;
                self.ignored.push(opt.to_string());
            }
            "hash_algorithm" => {
                if !matches!(value, Some("jenkins" | "murmur3" | "xxh3")) {
                    return Err("Unknown hash_algorithm option (jenkins, murmur3, xxh3)".into());
                }
                // mnemo's index always hashes with xxh3.
                self.ignored.push(opt.to_string());
            }
            _ if IGNORED.contains(&name) => self.ignored.push(opt.to_string()),
            _ => return Err(format!("Illegal suboption \"{opt}\"")),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_names_and_errors() {
        let o = ExtOptions::parse(&["idle_timeout=5,no_lru_crawler", "track_sizes,ext_path=/x:1g,ext_max_frag=0.5,ext_item_age=9,ext_threads=2,ext_io_depth=3"]).unwrap();
        assert_eq!(
            (o.idle_timeout, o.lru_crawler, o.track_sizes),
            (5, false, true)
        );
        assert_eq!(o.ignored, vec!["ext_io_depth=3"]);
        assert_eq!(o.flash.threads, 2);
        assert_eq!(o.flash.store_config().unwrap().item_age, 9);
        assert_eq!(o.flash.store_config().unwrap().max_frag_permille, 500);
        assert_eq!(o.flash.path, Some(("/x".to_string(), 1 << 30)));
        assert_eq!(
            ExtOptions::parse(&["idle_timeout=abc"])
                .unwrap()
                .idle_timeout,
            0
        );
        assert_eq!(
            ExtOptions::parse(&["bogus"]),
            Err("Illegal suboption \"bogus\"".into())
        );
        assert_eq!(
            ExtOptions::parse(&["idle_timeout"]),
            Err("Missing numeric argument for idle_timeout".into())
        );
        assert!(ExtOptions::parse(&["hashpower=10"])
            .unwrap_err()
            .contains("too low"));
        let fc = ExtOptions::parse(&[
            "ext_page_size=8,ext_wbuf_size=2,ext_item_size=100,ext_path=/f:64M",
        ])
        .unwrap();
        assert_eq!(
            (
                fc.flash.pages(),
                fc.flash.compact_under(),
                fc.flash.drop_under()
            ),
            (8, 2, 2)
        );
        let sc = fc.flash.store_config().unwrap();
        assert_eq!(
            (sc.page_size, sc.wbuf_size, sc.item_size, sc.size),
            (8 << 20, 2 << 20, 100, 64 << 20)
        );
        assert_eq!(
            (sc.drop_unread, sc.drop_under, sc.low_ttl),
            (false, None, 0)
        );
        let dropping =
            ExtOptions::parse(&["ext_drop_unread,ext_drop_under=3,ext_low_ttl=60,ext_path=/f:64M"])
                .unwrap();
        assert!(dropping.ignored.is_empty(), "{:?}", dropping.ignored);
        let sc = dropping.flash.store_config().unwrap();
        assert_eq!(
            (sc.drop_unread, sc.drop_under, sc.low_ttl),
            (true, Some(3), 60)
        );
        let err = |o: &str| ExtOptions::parse(&[o]).unwrap_err();
        assert!(err("ext_path=/x").starts_with("must supply size to ext_path"));
        assert_eq!(
            err("ext_item_size=abc"),
            "could not parse argument to ext_item_size"
        );
        assert_eq!(
            err("ext_max_frag=abc"),
            "could not parse argument to ext_max_frag"
        );
        // Repeated: one page space over the files, in the order given (memcached's JBOD).
        let two = ExtOptions::parse(&["ext_page_size=8,ext_path=/x:64m,ext_path=/y:96m"])
            .unwrap()
            .flash;
        assert_eq!((two.pages(), two.compact_under()), (20, 5));
        assert_eq!(
            two.store_config().unwrap().more,
            vec![("/y".into(), 96 << 20)]
        );
        let old = ExtOptions::parse(&["no_modern"]).unwrap();
        assert!(
            !old.maxconns_fast && !old.lru_crawler && !old.slab_reassign && old.slab_automove == 0
        );
    }

    #[test]
    fn ext_path_as_memcached_1_6_45() {
        let err = |o: &str| ExtOptions::parse(&[o]).unwrap_err();
        let unit = "must supply size to ext_path, ie: ext_path=/f/e:64m (m|g|t|p supported)\nfailed to parse ext_path argument";
        // 1.6.21: a size without one of memcached's units is an error, bytes and k included.
        for bad in [
            "ext_path=/x:1GB",
            "ext_path=/x:12q",
            "ext_path=/x:64",
            "ext_path=/x:64k",
        ] {
            assert_eq!(err(bad), unit, "{bad}");
        }
        assert_eq!(
            err("ext_path=/x:64m:hot"),
            "Unknown extstore bucket: hot\nfailed to parse ext_path argument"
        );
        assert_eq!(
            err("ext_path"),
            "missing argument to ext_path, ie: ext_path=/d/file:5G"
        );
        assert_eq!(err("ext_path=/x:-5m"), "failed to parse ext_path argument");
        // 1.6.40: ext_page_size may follow ext_path; the pages are counted after every option.
        let late = ExtOptions::parse(&["ext_path=/x:64m,ext_page_size=8"])
            .unwrap()
            .flash;
        assert_eq!(late.pages(), 8);
        // A file under one page is a zero size, refused once the page size is known.
        assert_eq!(
            ExtOptions::parse(&["ext_path=/x:0m"])
                .unwrap()
                .flash
                .check_sizes(),
            Err("supplied ext_path has zero size, cannot use".into())
        );
        assert!(ExtOptions::parse(&["ext_path=/x:32m"])
            .unwrap()
            .flash
            .check_sizes()
            .is_err());
        assert!(ExtOptions::parse(&["ext_page_size=8,ext_path=/x:32m"])
            .unwrap()
            .flash
            .check_sizes()
            .is_ok());
        // atoi's reading of the count, and the buckets in file order.
        let f = ExtOptions::parse(&[
            "ext_path=/a:1.5G:old,ext_path=/b::128m:coldcompact,ext_path=/c:64M",
        ])
        .unwrap()
        .flash;
        assert_eq!(
            f.paths().cloned().collect::<Vec<_>>(),
            [
                ("/a".into(), 1 << 30),
                ("/b".into(), 128 << 20),
                ("/c".into(), 64 << 20)
            ]
        );
        assert_eq!(
            f.buckets,
            [Bucket::Old, Bucket::ColdCompact, Bucket::Default]
        );
        for name in [
            "default",
            "compact",
            "chunked",
            "lowttl",
            "coldcompact",
            "old",
        ] {
            assert_eq!(Bucket::from_name(name).map(Bucket::name), Some(name));
        }
    }

    #[test]
    fn slab_options_as_memcached_1_6_45() {
        let d = ExtOptions::default();
        assert_eq!((d.slab_automove_window, d.slab_chunk_max), (10, 512 * 1024));
        let err = |o: &str| ExtOptions::parse(&[o]).unwrap_err();
        assert_eq!(
            ExtOptions::parse(&["slab_automove_window=1800"])
                .unwrap()
                .slab_automove_window,
            1800
        );
        for bad in [
            "slab_automove_window=2",
            "slab_automove_window=1801",
            "slab_automove_window=x",
        ] {
            assert_eq!(
                err(bad),
                "slab_automove_window must be > 2 and < 1800",
                "{bad}"
            );
        }
        assert_eq!(
            err("slab_automove_window"),
            "Missing slab_automove_window argument"
        );
        // Kilobytes since 1.6.24.
        let o = ExtOptions::parse(&["slab_chunk_max=256"]).unwrap();
        assert_eq!(
            (o.slab_chunk_max, o.ignored.as_slice()),
            (256 * 1024, &["slab_chunk_max=256".to_string()][..])
        );
        assert_eq!(
            err("slab_chunk_max=2048"),
            "slab_chunk_max must be specified in kilobytes."
        );
        assert_eq!(err("slab_chunk_max=0"), "slab_chunk_max must be >= 0");
        assert_eq!(
            err("slab_chunk_max=x"),
            "could not parse argument to slab_chunk_max"
        );
        assert_eq!(err("slab_chunk_max"), "Missing slab_chunk_max argument");
        // The checks against -I, memcached's words.
        let check = |o: &str, i: usize| ExtOptions::parse(&[o]).unwrap().check_chunk_max(i);
        assert_eq!(check("slab_chunk_max=48", 1 << 20), Err("-I (item_size_max: 1048576) must be evenly divisible by slab_chunk_max (bytes: 49152)".into()));
        assert_eq!(
            check("slab_chunk_max=1024", 512 << 10),
            Err(
                "slab_chunk_max (bytes: 1048576) cannot be larger than -I (item_size_max 524288)"
                    .into()
            )
        );
        assert_eq!(
            check("slab_chunk_max=768", 3 << 19),
            Err(
                "slab_chunk_max (bytes: 786432) must divide evenly into 1048576 (slab_page_size)"
                    .into()
            )
        );
        assert_eq!(check("slab_chunk_max=16", 1 << 20), Ok(()));
        // What no_modern and no_chunked_items make of it, and -I over 1 MiB after no_modern.
        assert_eq!(
            ExtOptions::parse(&["no_modern"]).unwrap().slab_chunk_max,
            1 << 20
        );
        assert_eq!(
            ExtOptions::parse(&["slab_chunk_max=64,no_modern"])
                .unwrap()
                .slab_chunk_max,
            64 << 10
        );
        assert_eq!(
            ExtOptions::parse(&["no_chunked_items"])
                .unwrap()
                .slab_chunk_max,
            1 << 20
        );
        let mut o = ExtOptions::parse(&["no_modern"]).unwrap();
        o.check_chunk_max(2 << 20).unwrap();
        assert_eq!(o.slab_chunk_max, 512 << 10);
    }
}
