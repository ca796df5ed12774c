//! Command-line flags (memcached's, with the same short and long names and meanings) and the
//! one `Config` struct the rest of the server reads. Every default is a named constant.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

pub mod ext;

use clap::builder::TypedValueParser;
use clap::Parser;
use mnemo_filter::{FilterKind, FilterSpec};

pub const DEFAULT_PORT: u16 = 11211;
/// memcached listens on every interface by default; mnemo is safe by default.
pub const DEFAULT_LISTEN: &str = "127.0.0.1";
pub const DEFAULT_MEMORY_MB: u64 = 64;
pub const DEFAULT_MAX_CONNS: usize = 1024;
pub const DEFAULT_THREADS: usize = 4;
pub const MIN_ITEM_SIZE_MAX: usize = 1024;
pub const MAX_ITEM_SIZE_MAX: usize = 1024 * 1024 * 1024;
pub const DEFAULT_REQS_PER_EVENT: usize = 20;
pub const DEFAULT_BACKLOG: i32 = 1024;
/// Keys one `fget` may name.
pub const DEFAULT_FILTER_MAX_KEYS: usize = 10_000;
/// Threads of the job pool (jobs.rs), where filter calls run: as many calls at once as the
/// default workers ran when each ran its own.
pub const DEFAULT_JOB_THREADS: usize = 4;
/// The workers' event loop when `--io-loop` is not given (docs/operations.md "Event loops"): io_uring,
/// epoll where the kernel refuses it. A close choice (docs/benchmarks.md has the figures):
/// io_uring is level with the null servers on small one-at-a-time requests (workload a), epoll
/// a few percent behind them; epoll is ahead on 100 KB values (d).
pub const DEFAULT_IO_LOOP: IoLoop = IoLoop::Uring;
/// Large values leave by reference or are copied, whichever serves them faster, as each worker
/// measures every second (splice.rs, "When"), unless `--zero-copy on` or `off` says always or
/// never.
pub const DEFAULT_ZERO_COPY: ZeroCopy = ZeroCopy::Auto;

/// `--zero-copy`: when values in pages of their own (32 KiB and more) go to a TCP socket by
/// reference (vmsplice + splice) instead of being copied into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZeroCopy {
    /// By reference or copied, whichever the worker measures to serve large values faster.
    Auto,
    /// Always by reference.
    On,
    /// Never: copied, as memcached does.
    Off,
}
/// What `version`, `stats` and the binary VERSION opcode report: the memcached release whose
/// behaviour mnemo reproduces, exactly as memcached prints it. Clients parse this as a version
/// number (Perl's `version->parse` dies on "1.6.45-mnemo-0.1.0"), so nothing may be appended.
/// Where memcached's releases disagree, mnemo follows this one (docs/compatibility.md).
macro_rules! protocol_version {
    () => {
        "1.6.45"
    };
}
pub const PROTOCOL_VERSION: &str = protocol_version!();
/// mnemo's own version: `mnemod -V`, the start-up line and `stats settings` `mnemo_version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// `mnemod -V`: memcached's "memcached 1.6.45" shape, with mnemo's version and the release it
/// speaks for.
const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (memcached ",
    protocol_version!(),
    ")"
);

#[derive(Parser, Debug)]
#[command(
    name = "mnemod",
    version = VERSION_LINE,
    about = "mnemo: a memcached-compatible memory cache server",
    disable_help_flag = true,
    disable_version_flag = true,
    // As memcached's getopt: a flag given twice takes its last value.
    args_override_self = true
)]
struct Args {
    /// TCP port to listen on (0: no TCP; -1: any free port; default 11211, or -U's port
    /// when only -U is given, as memcached)
    #[arg(short = 'p', long = "port", allow_negative_numbers = true, value_parser = clap::value_parser!(i32).range(-1..=65535))]
    port: Option<i32>,
    /// UNIX socket to listen on (disables network support)
    #[arg(short = 's', long = "unix-socket")]
    unix_socket: Option<String>,
    /// access mask for the UNIX socket, in octal
    #[arg(short = 'a', long = "unix-mask", default_value = "0700", value_parser = parse_octal)]
    unix_mask: u32,
    /// enable the ascii "shutdown" command
    #[arg(short = 'A', long = "enable-shutdown")]
    enable_shutdown: bool,
    /// interfaces to listen on, comma separated, -l again adds more, as memcached (default
    /// 127.0.0.1: local clients only)
    #[arg(short = 'l', long = "listen", default_value = DEFAULT_LISTEN, action = clap::ArgAction::Append)]
    listen: Vec<String>,
    /// UDP port (memcached's UDP protocol; 0, the default: off; -1: any free port)
    #[arg(short = 'U', long = "udp-port", default_value_t = 0, allow_negative_numbers = true, value_parser = clap::value_parser!(i32).range(-1..=65535))]
    udp_port: i32,
    /// run as a daemon (fork, detach from the terminal; the parent exits 0)
    #[arg(short = 'd', long = "daemon")]
    daemonize: bool,
    /// item memory in megabytes
    #[arg(short = 'm', long = "memory-limit", default_value_t = DEFAULT_MEMORY_MB, value_parser = clap::value_parser!(u64).range(1..=1024 * 1024))]
    memory_mb: u64,
    /// return an error on memory exhausted instead of evicting items
    #[arg(short = 'M', long = "disable-evictions")]
    disable_evictions: bool,
    /// max simultaneous connections
    #[arg(short = 'c', long = "conn-limit", default_value_t = DEFAULT_MAX_CONNS, value_parser = clap::value_parser!(u32).range(1..).map(|v| v as usize))]
    conn_limit: usize,
    /// verbose (print errors/warnings); -vv: very verbose (also print client commands)
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    verbose: u8,
    /// print this help and exit
    #[arg(short = 'h', long = "help", action = clap::ArgAction::Help)]
    help: Option<bool>,
    /// print version and exit
    #[arg(short = 'V', long = "version", action = clap::ArgAction::Version)]
    version: Option<bool>,
    /// number of worker threads
    #[arg(short = 't', long = "threads", default_value_t = DEFAULT_THREADS, value_parser = clap::value_parser!(u16).range(1..=1024).map(|v| v as usize))]
    threads: usize,
    /// max requests handled per event before serving other connections
    #[arg(short = 'R', long = "max-reqs-per-event", default_value_t = DEFAULT_REQS_PER_EVENT, value_parser = clap::value_parser!(u32).range(1..).map(|v| v as usize))]
    reqs_per_event: usize,
    /// disable use of CAS
    #[arg(short = 'C', long = "disable-cas")]
    disable_cas: bool,
    /// set the backlog queue limit
    #[arg(short = 'b', long = "listen-backlog", default_value_t = DEFAULT_BACKLOG, value_parser = clap::value_parser!(i32).range(1..))]
    backlog: i32,
    /// max item size (k and m suffixes allowed; 1024 bytes to 1 GiB)
    #[arg(short = 'I', long = "max-item-size", default_value = "1m", value_parser = parse_size)]
    item_size_max: usize,
    /// disable flush_all
    #[arg(short = 'F', long = "disable-flush-all")]
    disable_flush_all: bool,
    /// disable stats cachedump, stats detail, and lru_crawler metadump/mgdump
    #[arg(short = 'X', long = "disable-dumping")]
    disable_dumping: bool,
    /// disable watch commands (live logging)
    #[arg(short = 'W', long = "disable-watch")]
    disable_watch: bool,
    /// require SASL PLAIN authentication on the binary protocol (users: -Y, the
    /// MEMCACHED_SASL_PWDB file, or Cyrus SASL's sasldb named by SASL_CONF_PATH/memcached.conf)
    #[arg(short = 'S', long = "enable-sasl")]
    enable_sasl: bool,
    /// enable TLS on TCP connections (needs -o ssl_chain_cert=FILE,ssl_key=FILE; docs/operations.md "TLS")
    #[arg(short = 'Z', long = "enable-ssl")]
    enable_ssl: bool,
    /// password file for authentication ("user:password" per line); turns on text-protocol
    /// auth (a "set" carrying "user password") — reloaded on SIGHUP
    #[arg(short = 'Y', long = "auth-file")]
    auth_file: Option<std::path::PathBuf>,
    /// run as this user (after binding, when started as root)
    #[arg(short = 'u', long = "user")]
    user: Option<String>,
    /// write the process id to this file
    #[arg(short = 'P', long = "pidfile")]
    pidfile: Option<std::path::PathBuf>,
    /// warm restart: write the cache here on shutdown, SIGUSR1 or SIGTERM, read it back at start
    #[arg(short = 'e', long = "memory-file")]
    memory_file: Option<std::path::PathBuf>,
    /// raise the core file size limit to the maximum
    #[arg(short = 'r', long = "enable-coredumps")]
    coredumps: bool,
    /// delimiter between key prefix and id for `stats detail`
    #[arg(short = 'D', default_value = ":", value_parser = parse_delimiter)]
    prefix_delimiter: u8,
    /// protocol to serve: auto, ascii or binary
    #[arg(short = 'B', long = "protocol", default_value = "auto", value_parser = ["auto", "ascii", "binary"])]
    protocol: String,
    /// slab growth factor (accepted for compatibility; mnemo has no slab classes)
    #[arg(short = 'f', long = "slab-growth-factor", default_value_t = 1.25)]
    growth_factor: f64,
    /// minimum slab chunk size (accepted for compatibility; mnemo has no slab classes)
    #[arg(short = 'n', long = "slab-min-size", default_value_t = 48)]
    chunk_size: u32,
    /// memcached's extended options (comma separated): idle_timeout, maxconns_fast,
    /// lru_crawler, track_sizes, the slab_* settings, ssl_* (with -Z) and ext_path=FILE:SIZE
    /// with the ext_* settings (the flash tier, docs/flash.md) take effect; the others are
    /// accepted and ignored (docs/operations.md)
    #[arg(short = 'o', long = "extended", action = clap::ArgAction::Append)]
    extended: Vec<String>,
    /// install a WebAssembly filter for fget (repeatable): NAME=PATH (.wasm or .wat); reloaded on SIGHUP
    #[arg(long = "filter", value_parser = parse_filter, action = clap::ArgAction::Append)]
    filter: Vec<(String, std::path::PathBuf)>,
    /// install a NATIVE filter (shared library, unsandboxed: only code you trust): NAME=PATH
    #[arg(long = "native-filter", value_parser = parse_filter, action = clap::ArgAction::Append)]
    native_filter: Vec<(String, std::path::PathBuf)>,
    /// CPU deadline of one WebAssembly filter call, in milliseconds
    #[arg(long = "filter-timeout-ms", default_value_t = mnemo_filter::DEFAULT_DEADLINE.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    filter_timeout_ms: u64,
    /// memory of one WebAssembly filter instance, input included (k/m suffix)
    #[arg(long = "filter-memory", default_value = "64m", value_parser = parse_size)]
    filter_memory: usize,
    /// WebAssembly stack of a filter call (k/m suffix, at most 1m)
    #[arg(long = "filter-stack", default_value = "512k", value_parser = parse_size)]
    filter_stack: usize,
    /// largest output of one filter call (k/m suffix)
    #[arg(long = "filter-output-max", default_value = "1m", value_parser = parse_size)]
    filter_output_max: usize,
    /// most keys one fget may name
    #[arg(long = "filter-max-keys", default_value_t = DEFAULT_FILTER_MAX_KEYS, value_parser = clap::value_parser!(u32).range(1..=1_000_000).map(|v| v as usize))]
    filter_max_keys: usize,
    /// threads that run filter calls off the event loops (the job pool)
    #[arg(long = "job-threads", default_value_t = DEFAULT_JOB_THREADS, value_parser = clap::value_parser!(u32).range(1..=256).map(|v| v as usize))]
    job_threads: usize,
    /// serve Prometheus metrics at http://ADDR/metrics (a bare port means 127.0.0.1:PORT; off by default)
    #[arg(long = "metrics", value_name = "ADDR", value_parser = parse_metrics_addr)]
    metrics: Option<String>,
    /// the workers' event loop: uring (the default: io_uring where the kernel allows it,
    /// else epoll) or epoll; the MNEMO_IO_LOOP environment variable sets it too
    #[arg(long = "io-loop", value_parser = ["uring", "epoll"])]
    io_loop: Option<String>,
    /// which items eviction keeps: s3fifo (the default: new items on probation, a ghost of
    /// keys evicted unread) or fifo (the policy before it: one FIFO with reinsertion)
    #[arg(long = "eviction", value_name = "s3fifo|fifo", default_value = "s3fifo", value_parser = ["s3fifo", "fifo"])]
    eviction: String,
    /// send values of 32 KiB and more to TCP clients by reference (vmsplice + splice) instead
    /// of copying them: auto (the default: whichever the worker measures faster), on
    /// (always) or off
    #[arg(long = "zero-copy", value_name = "auto|on|off", value_parser = ["auto", "on", "off"])]
    zero_copy: Option<String>,
}

/// Everything the server reads from its flags.
#[derive(Debug, Clone)]
pub struct Config {
    /// -p: the TCP port (Some(0): one the kernel picks), or None: no TCP listener (-p 0).
    pub port: Option<u16>,
    pub listen: Vec<String>,
    pub unix_socket: Option<String>,
    pub unix_mask: u32,
    pub enable_shutdown: bool,
    pub memory_limit: usize,
    pub evict: bool,
    /// --eviction: the store's eviction policy.
    pub eviction: mnemo_store::Eviction,
    pub max_conns: usize,
    pub verbose: u8,
    pub threads: usize,
    pub reqs_per_event: usize,
    pub use_cas: bool,
    pub backlog: i32,
    pub item_size_max: usize,
    pub flush_enabled: bool,
    /// -X off: the key dumps (`stats cachedump`, `stats detail`, `lru_crawler metadump|mgdump`).
    pub dump_enabled: bool,
    /// -W off: `watch`.
    pub watch_enabled: bool,
    pub sasl: bool,
    /// -Z: TCP connections speak TLS, with the `-o ssl_*` settings (`ext.ssl`).
    pub ssl_enabled: bool,
    /// With -Z, the loaded certificates (tls.rs); `refresh_certs` swaps inside it.
    pub tls: Option<std::sync::Arc<crate::tls::Tls>>,
    /// Credentials file: -Y, or for SASL the MEMCACHED_SASL_PWDB environment variable.
    pub auth_file: Option<std::path::PathBuf>,
    /// -S without a credentials file: the Cyrus sasldb memcached would use (auth::sasldb).
    pub sasldb: Option<std::path::PathBuf>,
    /// -Y given: the text protocol requires authentication.
    pub text_auth: bool,
    pub user: Option<String>,
    pub pidfile: Option<std::path::PathBuf>,
    /// -U: serve UDP on this port (0: one the kernel picks), or not at all (udp.rs).
    pub udp_port: Option<u16>,
    /// -d: run as a daemon (main.rs).
    pub daemonize: bool,
    /// -e: the warm-restart snapshot (restart.rs).
    pub memory_file: Option<std::path::PathBuf>,
    pub coredumps: bool,
    pub prefix_delimiter: u8,
    /// -B: which protocols connections may speak.
    pub protocol: Protocols,
    pub growth_factor: f64,
    pub chunk_size: u32,
    /// -o: memcached's extended options.
    pub ext: ext::ExtOptions,
    /// Filters for fget, in the order given (WebAssembly first, then native).
    pub filters: Vec<mnemo_filter::FilterSpec>,
    /// Limits of every filter call.
    pub filter_limits: mnemo_filter::Limits,
    pub filter_max_keys: usize,
    /// --job-threads: the job pool's threads (jobs.rs), where filter calls run.
    pub job_threads: usize,
    /// --metrics: where `/metrics` is served ("host:port"), or None (metrics.rs).
    pub metrics: Option<String>,
    /// --io-loop: which event loop the workers run (worker/epoll.rs, worker/uring.rs).
    pub io_loop: IoLoop,
    /// Whether --io-loop (or MNEMO_IO_LOOP) named it: a fallback from io_uring to epoll is
    /// reported on stderr only then, or with -v, so that the default stays as quiet as
    /// memcached where io_uring is refused (a container's seccomp profile, an old kernel).
    pub io_loop_named: bool,
    /// --zero-copy: when large values leave by reference (splice.rs).
    pub zero_copy: ZeroCopy,
}

/// The workers' event loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoLoop {
    /// mio over epoll (worker/epoll.rs).
    Epoll,
    /// io_uring (worker/uring.rs), falling back to epoll where the kernel refuses it.
    Uring,
}

/// memcached's `slabs automove` knobs. mnemo has no slab pages to move, so nothing reads them
/// but `stats settings`, which reports what a client set, as memcached does (kept in `Shared`:
/// clients change them while the server runs).
#[derive(Debug)]
pub struct SlabAutomove {
    level: AtomicU32,
    /// f64 bits.
    ratio: AtomicU64,
    /// Seconds (`-o slab_automove_window`, `slabs automove window`).
    window: AtomicU32,
}

/// memcached 1.6.18's defaults.
pub const DEFAULT_SLAB_AUTOMOVE: u32 = 1;
pub const DEFAULT_SLAB_AUTOMOVE_RATIO: f64 = 0.8;

impl Default for SlabAutomove {
    fn default() -> Self {
        SlabAutomove::new(
            DEFAULT_SLAB_AUTOMOVE,
            DEFAULT_SLAB_AUTOMOVE_RATIO,
            ext::DEFAULT_SLAB_AUTOMOVE_WINDOW,
        )
    }
}

impl SlabAutomove {
    /// As `-o slab_automove=N,slab_automove_ratio=R,slab_automove_window=W` start it.
    pub fn new(level: u32, ratio: f64, window: u32) -> SlabAutomove {
        SlabAutomove {
            level: AtomicU32::new(level),
            ratio: AtomicU64::new(ratio.to_bits()),
            window: AtomicU32::new(window),
        }
    }
    pub fn window(&self) -> u32 {
        self.window.load(Relaxed)
    }
    pub fn set_window(&self, seconds: u32) {
        self.window.store(seconds, Relaxed);
    }
    pub fn level(&self) -> u32 {
        self.level.load(Relaxed)
    }
    pub fn set_level(&self, level: u32) {
        self.level.store(level, Relaxed);
    }
    pub fn ratio(&self) -> f64 {
        f64::from_bits(self.ratio.load(Relaxed))
    }
    pub fn set_ratio(&self, ratio: f64) {
        self.ratio.store(ratio.to_bits(), Relaxed);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocols {
    Auto,
    Ascii,
    Binary,
}

/// The environment variable that names the event loop when `--io-loop` does not.
pub const IO_LOOP_ENV: &str = "MNEMO_IO_LOOP";

impl Default for Config {
    /// What an empty command line gives, without the environment: the defaults come from the
    /// flag definitions alone, so the unit tests' configuration and the binary's are the same
    /// by construction.
    fn default() -> Self {
        let args = Args::try_parse_from(["mnemod"]).expect("an empty command line parses");
        Config::from_parsed(args, None)
            .unwrap_or_else(|e| panic!("the default flags are refused: {e}"))
    }
}

/// What to do after reading the command line.
pub enum Cli {
    /// Boxed: a Config is a few hundred bytes, the other variants a String.
    Run(Box<Config>),
    /// Help or version text: print it, exit 0.
    Print(String),
    /// A one-line error: print it, exit 2.
    Fail(String),
}

impl Config {
    /// Whether the workers should try io_uring: asked for, and no TLS (-Z connections are
    /// served by the epoll loop only, so with -Z every worker runs it).
    pub fn uring_wanted(&self) -> bool {
        self.io_loop == IoLoop::Uring && self.tls.is_none()
    }

    pub fn from_args<I, T>(args: I) -> Cli
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let a = match Args::try_parse_from(args) {
            Ok(a) => a,
            Err(e) => {
                use clap::error::ErrorKind::*;
                return match e.kind() {
                    DisplayHelp | DisplayVersion => Cli::Print(e.to_string()),
                    _ => Cli::Fail(first_line(&e.to_string())),
                };
            }
        };
        let env_loop = std::env::var(IO_LOOP_ENV).ok().filter(|v| !v.is_empty());
        match Config::from_parsed(a, env_loop) {
            Ok(c) => Cli::Run(Box::new(c)),
            Err(msg) => Cli::Fail(msg),
        }
    }

    /// The flags as parsed (and the event loop the environment names, when `--io-loop` does
    /// not), checked and turned into a Config; or the one-line error.
    fn from_parsed(a: Args, env_loop: Option<String>) -> Result<Config, String> {
        let memory_limit = (a.memory_mb as usize) << 20;
        if a.item_size_max > memory_limit / 2 {
            return Err(format!(
                "mnemod: -I {}: cannot set the item size limit higher than 1/2 of -m ({} MB)",
                a.item_size_max, a.memory_mb
            ));
        }
        let mut ext = match ext::ExtOptions::parse(&a.extended) {
            Ok(ext) => ext,
            Err(e) => return Err(format!("mnemod: -o: {e}")),
        };
        ext.check_chunk_max(a.item_size_max)
            .map_err(|e| format!("mnemod: -o: {e}"))?;
        // The flash tier: memcached's start-up checks, and the file made before serving.
        if let Some(fc) = ext.flash.store_config() {
            if a.item_size_max > fc.wbuf_size {
                return Err(format!(
                    "mnemod: -I (item_size_max: {}) cannot be larger than ext_wbuf_size: {}",
                    a.item_size_max, fc.wbuf_size
                ));
            }
            ext.flash
                .check_sizes()
                .map_err(|e| format!("mnemod: -o: {e}"))?;
            // memcached's checks, in its order (the store works with any page multiple of the
            // buffer, and tests use smaller ones).
            let x = &ext.flash;
            if x.page_size_mb % x.wbuf_size_mb.max(1) == 0
                && (x.page_size_mb % 2 != 0 || x.wbuf_size_mb % 2 != 0)
            {
                return Err(
                    "mnemod: -o: Failed to initialize external storage: page_size and wbuf_size must be divisible by 1024*1024*2"
                        .into(),
                );
            }
            if let Err(e) = fc.check() {
                return Err(format!(
                    "mnemod: -o: Failed to initialize external storage: {e}"
                ));
            }
        }
        let listen: Vec<String> = a
            .listen
            .iter()
            .flat_map(|l| l.split(','))
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        let prefixes: Vec<_> = listen
            .iter()
            .filter_map(|l| crate::tls::ListenTls::split(l).0)
            .collect();
        if let (Some(p), false) = (prefixes.first(), a.enable_ssl) {
            return Err(format!("mnemod: {}", p.needs_ssl()));
        }
        let kinds = (
            prefixes.contains(&crate::tls::ListenTls::NoPeer),
            prefixes.contains(&crate::tls::ListenTls::Peer),
        );
        // As memcached: certificates load at start-up and a bad one stops it.
        let tls = match a.enable_ssl {
            true => match crate::tls::Tls::load(&ext.ssl, kinds) {
                Ok(t) => Some(t),
                Err(e) => return Err(format!("mnemod: -Z: {e}")),
            },
            false => None,
        };
        let text_auth = a.auth_file.is_some();
        let auth_file = a.auth_file.or_else(|| {
            if a.enable_sasl {
                std::env::var_os("MEMCACHED_SASL_PWDB").map(Into::into)
            } else {
                None
            }
        });
        // -S without a password file: the sasldb memcached -S would read here.
        let sasldb = match (a.enable_sasl, &auth_file) {
            (true, None) => match crate::auth::sasldb::configured_db() {
                Ok(Some(db)) => Some(db),
                Ok(None) => {
                    return Err(
                        "mnemod: -S needs users: -Y FILE, MEMCACHED_SASL_PWDB=FILE, or Cyrus SASL's memcached.conf \
                         (in SASL_CONF_PATH or /etc/sasl2) naming a sasldb"
                            .into(),
                    )
                }
                Err(e) => {
                    return Err(format!(
                        "mnemod: -S: {e}; put the users in a user:password file and pass it with -Y FILE or MEMCACHED_SASL_PWDB=FILE"
                    ))
                }
            },
            _ => None,
        };
        if a.growth_factor <= 1.0 {
            return Err("mnemod: -f: factor must be greater than 1".into());
        }
        if a.filter_stack > MAX_FILTER_STACK {
            return Err(format!(
                "mnemod: --filter-stack: at most {} KiB",
                MAX_FILTER_STACK >> 10
            ));
        }
        let mut filters = Vec::new();
        for (list, kind) in [
            (a.filter, FilterKind::Wasm),
            (a.native_filter, FilterKind::Native),
        ] {
            for (name, path) in list {
                if filters.iter().any(|f: &FilterSpec| f.name == name) {
                    return Err(format!("mnemod: filter {name} is installed twice"));
                }
                filters.push(FilterSpec { name, path, kind });
            }
        }
        let filter_limits = mnemo_filter::Limits {
            deadline: std::time::Duration::from_millis(a.filter_timeout_ms),
            memory: a.filter_memory,
            stack: a.filter_stack,
            output_max: a.filter_output_max,
            // Calls run on the job pool: at most one per job thread at a time.
            concurrency: a.job_threads as u32,
        };
        let io_loop = match a.io_loop.as_deref().or(env_loop.as_deref()) {
            None => None,
            Some("uring") => Some(IoLoop::Uring),
            Some("epoll") => Some(IoLoop::Epoll),
            Some(other) => {
                return Err(format!(
                    "mnemod: {IO_LOOP_ENV}={other}: expected uring or epoll"
                ))
            }
        };
        Ok(Config {
            filters,
            filter_limits,
            filter_max_keys: a.filter_max_keys,
            job_threads: a.job_threads,
            metrics: a.metrics,
            io_loop: io_loop.unwrap_or(DEFAULT_IO_LOOP),
            io_loop_named: io_loop.is_some(),
            zero_copy: match a.zero_copy.as_deref() {
                Some("on") => ZeroCopy::On,
                Some("off") => ZeroCopy::Off,
                Some("auto") => ZeroCopy::Auto,
                _ => DEFAULT_ZERO_COPY,
            },
            user: a.user,
            pidfile: a.pidfile,
            udp_port: match a.udp_port {
                0 => None,
                -1 => Some(0),
                p => Some(p as u16),
            },
            daemonize: a.daemonize,
            memory_file: a.memory_file,
            coredumps: a.coredumps,
            prefix_delimiter: a.prefix_delimiter,
            protocol: match a.protocol.as_str() {
                "ascii" => Protocols::Ascii,
                "binary" => Protocols::Binary,
                _ => Protocols::Auto,
            },
            growth_factor: a.growth_factor,
            chunk_size: a.chunk_size,
            ext,
            sasl: a.enable_sasl,
            ssl_enabled: a.enable_ssl,
            tls,
            auth_file,
            sasldb,
            text_auth,
            // memcached: -U alone moves TCP to the UDP port too.
            port: match a.port.unwrap_or(if a.udp_port == 0 {
                i32::from(DEFAULT_PORT)
            } else {
                a.udp_port
            }) {
                0 => None,
                -1 => Some(0),
                p => Some(p as u16),
            },
            listen,
            unix_socket: a.unix_socket,
            unix_mask: a.unix_mask,
            enable_shutdown: a.enable_shutdown,
            memory_limit,
            evict: !a.disable_evictions,
            eviction: a.eviction.parse().expect("clap checked the name"),
            max_conns: a.conn_limit,
            verbose: a.verbose,
            threads: a.threads,
            reqs_per_event: a.reqs_per_event,
            use_cas: !a.disable_cas,
            backlog: a.backlog,
            item_size_max: a.item_size_max,
            flush_enabled: !a.disable_flush_all,
            dump_enabled: !a.disable_dumping,
            watch_enabled: !a.disable_watch,
        })
    }
}

fn first_line(s: &str) -> String {
    let line = s
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("invalid arguments");
    format!("mnemod: {}", line.trim_start_matches("error: "))
}

/// The worker threads' stacks leave this much room for a WebAssembly call.
pub const MAX_FILTER_STACK: usize = 1 << 20;

/// `NAME=PATH`; the name follows the key rules (what fget requests carry).
fn parse_filter(s: &str) -> Result<(String, std::path::PathBuf), String> {
    let (name, path) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}': expected NAME=PATH"))?;
    if name.is_empty()
        || name.len() > mnemo_proto::text::KEY_MAX
        || name.bytes().any(|b| b <= b' ' || b == 0x7f)
    {
        return Err(format!(
            "'{name}': a filter name is 1-250 bytes without spaces or control characters"
        ));
    }
    if path.is_empty() {
        return Err(format!("'{s}': no path"));
    }
    Ok((name.to_string(), path.into()))
}

/// `--metrics`: PORT (on 127.0.0.1, like -l's default: safe unless asked), HOST:PORT or
/// [V6]:PORT. Names are resolved when binding; here only the shape and the port are checked.
fn parse_metrics_addr(s: &str) -> Result<String, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(format!("{DEFAULT_LISTEN}:{port}"));
    }
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("'{s}': expected PORT or HOST:PORT"))?;
    let bare_v6 = host.contains(':') && !(host.starts_with('[') && host.ends_with(']'));
    if host.is_empty() || bare_v6 || port.parse::<u16>().is_err() {
        return Err(format!("'{s}': expected PORT, HOST:PORT or [IPV6]:PORT"));
    }
    Ok(s.to_string())
}

fn parse_delimiter(s: &str) -> Result<u8, String> {
    match s.as_bytes() {
        [b] => Ok(*b),
        _ => Err(format!("'{s}': the delimiter must be one character")),
    }
}

fn parse_octal(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8).map_err(|_| format!("'{s}' is not an octal mask"))
}

/// memcached's -I: a byte count with an optional k/m/g suffix, 1 KiB ..= 1 GiB.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let (digits, unit) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], c.to_ascii_lowercase()),
        _ => (s, 'b'),
    };
    let n: usize = digits.parse().map_err(|_| format!("'{s}' is not a size"))?;
    let bytes = match unit {
        'b' => Some(n),
        'k' => n.checked_mul(1 << 10),
        'm' => n.checked_mul(1 << 20),
        'g' => n.checked_mul(1 << 30),
        _ => return Err(format!("'{s}': unknown size suffix (use k or m)")),
    }
    .ok_or_else(|| format!("'{s}' is too large"))?;
    if bytes < MIN_ITEM_SIZE_MAX {
        return Err(format!(
            "item max size cannot be less than {MIN_ITEM_SIZE_MAX} bytes"
        ));
    }
    if bytes > MAX_ITEM_SIZE_MAX {
        return Err("cannot set item size limit higher than 1 GiB".into());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Cli {
        Config::from_args(std::iter::once("mnemod").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_are_memcached_s_except_listen() {
        let Cli::Run(c) = run(&[]) else { panic!() };
        assert_eq!(c.port, Some(11211));
        assert_eq!(c.listen, vec!["127.0.0.1"]);
        assert_eq!(c.memory_limit, 64 << 20);
        assert_eq!(c.item_size_max, 1 << 20);
        assert_eq!(c.threads, 4);
    }

    #[test]
    fn default_is_an_empty_command_line() {
        let c = Config::default();
        assert_eq!(
            (c.port, c.unix_mask, c.memory_limit, c.max_conns),
            (
                Some(DEFAULT_PORT),
                0o700,
                (DEFAULT_MEMORY_MB as usize) << 20,
                DEFAULT_MAX_CONNS
            )
        );
        assert_eq!(
            (c.threads, c.reqs_per_event, c.backlog, c.item_size_max),
            (
                DEFAULT_THREADS,
                DEFAULT_REQS_PER_EVENT,
                DEFAULT_BACKLOG,
                1 << 20
            )
        );
        assert_eq!(
            (c.io_loop, c.io_loop_named, c.zero_copy, c.filter_max_keys),
            (
                DEFAULT_IO_LOOP,
                false,
                DEFAULT_ZERO_COPY,
                DEFAULT_FILTER_MAX_KEYS
            )
        );
        assert_eq!(
            c.filter_limits,
            mnemo_filter::Limits {
                concurrency: DEFAULT_THREADS as u32,
                ..Default::default()
            }
        );
        assert!(
            c.use_cas
                && c.evict
                && c.flush_enabled
                && c.dump_enabled
                && c.watch_enabled
                && !c.enable_shutdown
                && !c.sasl
                && c.tls.is_none()
        );
        assert_eq!(
            (c.prefix_delimiter, c.protocol, c.verbose),
            (b':', Protocols::Auto, 0)
        );
        // The binary's start-up path gives the same, whatever the environment names.
        let env_loop = Some("epoll".to_string());
        let from_env =
            Config::from_parsed(Args::try_parse_from(["mnemod"]).unwrap(), env_loop).unwrap();
        assert_eq!(
            format!(
                "{:?}",
                Config {
                    io_loop: IoLoop::Epoll,
                    io_loop_named: true,
                    ..Config::default()
                }
            ),
            format!("{from_env:?}")
        );
    }

    #[test]
    fn the_environment_names_the_loop_unless_the_flag_does() {
        let parsed = |args: &[&str]| {
            Args::try_parse_from(std::iter::once("mnemod").chain(args.iter().copied())).unwrap()
        };
        let c = Config::from_parsed(parsed(&["--io-loop=uring"]), Some("epoll".into())).unwrap();
        assert_eq!((c.io_loop, c.io_loop_named), (IoLoop::Uring, true));
        assert!(Config::from_parsed(parsed(&[]), Some("kqueue".into()))
            .unwrap_err()
            .contains("MNEMO_IO_LOOP=kqueue"));
    }

    #[test]
    fn long_and_short_forms() {
        let Cli::Run(c) = run(&[
            "-p",
            "1",
            "--memory-limit=128",
            "-I",
            "2m",
            "-vv",
            "-C",
            "-M",
            "-F",
            "-A",
            "-t",
            "2",
        ]) else {
            panic!()
        };
        assert_eq!(
            (c.port, c.memory_limit, c.item_size_max, c.verbose),
            (Some(1), 128 << 20, 2 << 20, 2)
        );
        assert!(!c.use_cas && !c.evict && !c.flush_enabled && c.enable_shutdown);
    }

    #[test]
    fn udp_port_as_memcached() {
        let udp = |args: &[&str]| match run(args) {
            Cli::Run(c) => c.udp_port,
            _ => panic!("{args:?} refused"),
        };
        assert_eq!(udp(&[]), None);
        assert_eq!(udp(&["-U", "0"]), None);
        assert_eq!(udp(&["-U", "-1"]), Some(0));
        assert_eq!(udp(&["-U", "0", "-U", "11299"]), Some(11299));
    }

    #[test]
    fn flags_given_twice_as_memcached() {
        let Cli::Run(c) = run(&[
            "-m",
            "10",
            "-m",
            "20",
            "-l",
            "127.0.0.1",
            "-l",
            "127.0.0.2,::1",
        ]) else {
            panic!()
        };
        assert_eq!(c.memory_limit, 20 << 20);
        assert_eq!(c.listen, ["127.0.0.1", "127.0.0.2", "::1"]);
        let Cli::Run(c) = run(&[]) else { panic!() };
        assert_eq!(c.listen, [DEFAULT_LISTEN]);
    }

    #[test]
    fn tcp_port_as_memcached() {
        let ports = |args: &[&str]| match run(args) {
            Cli::Run(c) => (c.port, c.udp_port),
            _ => panic!("{args:?} refused"),
        };
        assert_eq!(ports(&[]), (Some(11211), None));
        assert_eq!(ports(&["-p", "0"]), (None, None));
        assert_eq!(ports(&["-p", "-1"]), (Some(0), None));
        assert_eq!(ports(&["-U", "11222"]), (Some(11222), Some(11222)));
        assert_eq!(ports(&["-U", "-1"]), (Some(0), Some(0)));
        assert_eq!(ports(&["-U", "0"]), (Some(11211), None));
        assert_eq!(ports(&["-p", "-1", "-U", "11252"]), (Some(0), Some(11252)));
        assert!(matches!(run(&["-p", "-2"]), Cli::Fail(_)));
    }

    #[test]
    fn errors_are_one_line() {
        for bad in [
            &["--nope"][..],
            &["-p", "abc"],
            &["-U", "-2"],
            &["-U", "65536"],
            &["-I", "10"],
            &["-I", "5x"],
            &["-m", "4", "-I", "3m"],
        ] {
            match run(bad) {
                Cli::Fail(msg) => assert!(!msg.contains('\n'), "{msg}"),
                _ => panic!("{bad:?} accepted"),
            }
        }
        for bad in [
            &["--filter", "x"][..],
            &["--filter", "a b=/p"],
            &["--filter", "a=/p", "--native-filter", "a=/q"],
            &["--filter-stack", "2m"],
        ] {
            assert!(matches!(run(bad), Cli::Fail(_)), "{bad:?} accepted");
        }
        assert!(matches!(run(&["-h"]), Cli::Print(_)));
        assert!(matches!(run(&["-V"]), Cli::Print(_)));
    }

    #[test]
    fn eviction_policy_flag() {
        let Cli::Run(c) = run(&[]) else { panic!() };
        assert_eq!(c.eviction, mnemo_store::Eviction::S3Fifo);
        let Cli::Run(c) = run(&["--eviction=fifo"]) else {
            panic!()
        };
        assert_eq!(c.eviction, mnemo_store::Eviction::Fifo);
        let Cli::Run(c) = run(&["--eviction", "s3fifo"]) else {
            panic!()
        };
        assert_eq!(c.eviction, mnemo_store::Eviction::S3Fifo);
        assert!(matches!(run(&["--eviction=lru"]), Cli::Fail(_)));
    }

    #[test]
    fn version_line_names_both_versions() {
        // concat! needs literals, so VERSION_LINE spells the memcached release out again.
        assert!(
            VERSION_LINE.starts_with(VERSION) && VERSION_LINE.contains(PROTOCOL_VERSION),
            "{VERSION_LINE}"
        );
        let Cli::Print(text) = run(&["-V"]) else {
            panic!()
        };
        assert_eq!(text.trim(), format!("mnemod {VERSION_LINE}"));
    }
}

#[cfg(test)]
mod listen_tls_tests {
    use super::*;
    use crate::tls::ListenTls;

    #[test]
    fn listener_prefixes_need_tls_as_in_memcached() {
        assert_eq!(
            ListenTls::split("btls:127.0.0.1:1"),
            (Some(ListenTls::NoPeer), "127.0.0.1:1")
        );
        assert_eq!(
            ListenTls::split("mtls:[::1]:2"),
            (Some(ListenTls::Peer), "[::1]:2")
        );
        assert_eq!(ListenTls::split("notls:h"), (Some(ListenTls::Plain), "h"));
        assert_eq!(ListenTls::split("127.0.0.1"), (None, "127.0.0.1"));
        let fail = |args: &[&str]| match Config::from_args(
            std::iter::once("mnemod").chain(args.iter().copied()),
        ) {
            Cli::Fail(m) => m,
            _ => panic!("{args:?} accepted"),
        };
        assert_eq!(
            fail(&["-l", "btls:127.0.0.1"]),
            "mnemod: 'btls' option is valid only when SSL is enabled"
        );
        assert_eq!(
            fail(&["-l", "127.0.0.1,mtls:127.0.0.1:2"]),
            "mnemod: 'otls' option is valid only when SSL is enabled"
        );
        assert_eq!(
            fail(&["-l", "notls:127.0.0.1"]),
            "mnemod: 'notls' option is valid only when SSL is enabled"
        );
    }
}
