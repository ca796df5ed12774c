//! `mnemo migrate`: move a running cache's items into another server, warm.
//!
//! Two modes:
//! * `--from HOST:PORT --to HOST:PORT`: every live item of the source (memcached 1.6 or mnemod)
//!   is copied to the destination (mnemod or memcached);
//! * `--from-servers LIST --to-servers LIST` (lists as `--servers` takes them, `--hash-tags`
//!   applies): for a fleet whose server list changes, each old server's keys whose ketama owner
//!   changes are copied to their new owner, and no other key is.
//!
//! Each source lists its keys with `lru_crawler metadump hash` (a walk of its hash table that
//! lists every item once), or on a source without it `metadump all` twice (the second listing
//! copies what the first passed over: lane.rs, `Walk`, `Listing`); the keys are fetched with
//! multi-key gets (value, flags, and a CAS that says whether the listing's expiry still holds:
//! wire.rs) or, where that cannot work and in fleet mode, with a meta get that leaves the
//! source's LRU as it was (value, flags and the TTL left, as of the fetch); each is stored with a quiet meta set in add mode, keeping the TTL's moment of expiry. What a cache does with items that change meanwhile:
//! * expired, evicted or deleted at the source before the fetch: not copied ("gone");
//! * already on the destination (a client wrote it there since): kept, not overwritten ("kept");
//! * changed at the source after the fetch: the copy has the fetched value. Switch the clients
//!   over before (or right after) the copy so nothing writes to the source any more.
//!
//! After the copy every key sent is looked for at its destination (verify.rs): the summary
//! says how many the destination kept, and the exit status is 1 when any listed item was
//! refused, could not be fetched, or was not kept (evicted there: a destination too small
//! for what was copied), with a line that says how many and why. Items that expired
//! meanwhile, at either end, are not a failure.
//!
//! ```text
//!   mod.rs      arguments, the plan (which keys go where), progress line, summary
//!   lane.rs     the threads and connections of one source's copy
//!   rawkeys.rs  keys only the binary protocol names: fetched by binary gets
//!   readbuf.rs  the read buffer every connection's replies are parsed from
//!   verify.rs   after the copy: which keys sent are at their destination
//!   wire.rs     metadump lines, mg/ms and binary requests and replies (no I/O)
//! ```

mod lane;
mod rawkeys;
mod readbuf;
mod verify;
mod wire;

use clap::Args;
use mnemo_client::ketama::Ketama;
use mnemo_client::ServerSpec;
use std::io::{BufRead, BufReader, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Connections per source, each with its own connection to every destination. 8 rather
/// than 4 for one source: mnemod's io_uring workers spend less kernel time per item stored
/// with more connections to serve at once (0.39-0.43 us against 0.46-0.65 us per item in
/// five alternated 1,000,000-item copies; the CPU per item, all three processes, a median
/// of 2.93 us against 3.17).
pub const DEFAULT_CONNECTIONS: u16 = 8;
/// The same in fleet mode, where every source has its lanes and every lane a connection and
/// a thread per destination: a fleet of 10 has 10 x 4 x 10 of each already.
pub const DEFAULT_FLEET_CONNECTIONS: u16 = 4;
/// Keys fetched per pipelined batch.
pub const DEFAULT_BATCH: u32 = 512;
/// How often the progress line is redrawn.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("mode").required(true).args(["from", "from_servers"]))]
pub struct MigrateArgs {
    /// The server to copy from (`host:port`).
    #[arg(long, requires = "to")]
    pub from: Option<String>,
    /// The server to copy to (`host:port`).
    #[arg(long, requires = "from", conflicts_with_all = ["from_servers", "to_servers"])]
    pub to: Option<String>,
    /// Fleet mode: the server list before the change (`host:port[:weight],...`).
    #[arg(long, requires = "to_servers")]
    pub from_servers: Option<String>,
    /// Fleet mode: the server list after the change.
    #[arg(long, requires = "from_servers")]
    pub to_servers: Option<String>,
    /// Parallel connections per source server (the sources are copied at the same time)
    /// [default: 8, or 4 per source in fleet mode].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub connections: Option<u16>,
    /// Keys per pipelined batch.
    #[arg(long, default_value_t = DEFAULT_BATCH, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub batch: u32,
    /// For a source without the hash walk (memcached before 1.6.9), whose keys are listed by
    /// walking its LRUs: list once, with no second listing to catch the keys the first passed
    /// over (the crawler can miss an item its LRU maintainer moves meanwhile). Saves the second
    /// dump and about 16 bytes of memory per key. A hash walk is always one listing.
    #[arg(long)]
    pub one_listing: bool,
    /// No progress line, even on a terminal.
    #[arg(long)]
    pub quiet: bool,
}

/// What can stop a migration.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("{0}: cannot connect: {1}")]
    Connect(String, std::io::Error),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0}: connection closed by the server")]
    Closed(String),
    #[error("{0}: {1}")]
    Protocol(String, String),
    #[error("{0}: lru_crawler metadump refused: {1}")]
    DumpRefused(String, String),
    #[error("{0}")]
    Args(String),
}

/// What the lanes did, shared by all their threads.
#[derive(Default)]
pub struct Counters {
    /// Keys the first listings listed.
    pub listed: AtomicU64,
    /// Keys only the second listings listed.
    pub relisted: AtomicU64,
    /// Fetched from the source (live when fetched).
    pub fetched: AtomicU64,
    /// Stored on the destination.
    pub stored: AtomicU64,
    /// The destination had the key already: left as it was.
    pub exists: AtomicU64,
    /// Listed but no longer at the source when fetched.
    pub gone: AtomicU64,
    /// Stored again at the source between their listing and their fetch (another CAS):
    /// fetched once more with a meta get, for the TTL they have now.
    pub refetched: AtomicU64,
    /// Refused by the destination (too large, out of memory, ...), or not sent because no
    /// protocol both ends take can carry the key (part of `failed`: `unsent`).
    pub failed: AtomicU64,
    pub unsent: AtomicU64,
    pub first_failure: Mutex<Option<String>>,
    /// Value bytes fetched.
    pub bytes: AtomicU64,
    /// Fleet mode: keys whose owner does not change.
    pub stays: AtomicU64,
    /// Fleet mode: keys found on a server that the old list does not make their owner.
    pub stray: AtomicU64,
}

impl Counters {
    /// An item the destination refused: `why` is its answer.
    pub fn refuse(&self, why: String) {
        self.failed.fetch_add(1, Relaxed);
        let mut first = self.first_failure.lock().unwrap();
        if first.is_none() {
            *first = Some(why);
        }
    }

    /// An item listed and not copied, for the reason `why`.
    pub fn not_sent(&self, why: String) {
        self.unsent.fetch_add(1, Relaxed);
        self.refuse(why);
    }
}

pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

pub fn run(hash_tags: bool, args: MigrateArgs) -> ExitCode {
    match migrate(hash_tags, &args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("mnemo migrate: {e}");
            ExitCode::from(1)
        }
    }
}

/// One source's copy: where it reads and where its keys may go.
struct Plan {
    source: String,
    dests: Vec<String>,
    route: Box<RouteFn>,
}

/// Where a source's key goes.
type RouteFn = dyn Fn(&[u8]) -> lane::Route + Sync;

fn plans(hash_tags: bool, args: &MigrateArgs) -> Result<Vec<Plan>, MigrateError> {
    if let (Some(from), Some(to)) = (&args.from, &args.to) {
        return Ok(vec![Plan {
            source: from.clone(),
            dests: vec![to.clone()],
            route: Box::new(|_| lane::Route::Copy(0)),
        }]);
    }
    let list = |l: &Option<String>| {
        let specs = ServerSpec::parse_list(l.as_deref().unwrap_or(""))
            .map_err(|e| MigrateError::Args(e.to_string()))?;
        if specs.is_empty() {
            return Err(MigrateError::Args("an empty server list".into()));
        }
        Ok(specs)
    };
    let (old, new) = (list(&args.from_servers)?, list(&args.to_servers)?);
    let new_addrs: Vec<String> = new.iter().map(ServerSpec::addr).collect();
    let (old_ring, new_ring) = (Ketama::new(&old), Ketama::new(&new));
    Ok(old
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let me = spec.addr();
            let same = new_addrs.iter().position(|a| *a == me);
            let (old_ring, new_ring) = (old_ring.clone(), new_ring.clone());
            Plan {
                source: me,
                dests: new_addrs.clone(),
                route: Box::new(move |key: &[u8]| {
                    if old_ring.route(key, hash_tags) != Some(i) {
                        return lane::Route::Stray;
                    }
                    match new_ring.route(key, hash_tags) {
                        Some(n) if Some(n) != same => lane::Route::Copy(n),
                        _ => lane::Route::Stays,
                    }
                }),
            }
        })
        .collect())
}

/// Run every plan; `Ok(false)` when items failed to store or were not kept.
fn migrate(hash_tags: bool, args: &MigrateArgs) -> Result<bool, MigrateError> {
    let plans = plans(hash_tags, args)?;
    let c = Counters::default();
    // Every plan has the same destinations, in the same order (plans()).
    let dests = plans[0].dests.clone();
    let sent: Vec<Mutex<Vec<u8>>> = dests.iter().map(|_| Mutex::default()).collect();
    let sent = &sent;
    // How many items each source holds now (0 when one will not say): for the ETA, and to
    // size the sets of listed keys.
    let items: Vec<u64> = plans
        .iter()
        .map(|p| curr_items(&p.source).unwrap_or(0))
        .collect();
    let total: u64 = items.iter().sum();
    let start = Instant::now();
    let done = AtomicBool::new(false);
    let fleet = args.from_servers.is_some();
    let tty = !args.quiet && unsafe { libc::isatty(2) } == 1;
    let result = std::thread::scope(|s| {
        if tty {
            s.spawn(|| {
                while !done.load(Relaxed) {
                    std::thread::park_timeout(PROGRESS_EVERY);
                    eprint!("\r\x1b[K{}", progress_line(&c, total, start.elapsed()));
                }
                eprint!("\r\x1b[K");
            });
        }
        // The sources at once (fleet mode): each has its own crawler and its own lanes.
        let c = &c;
        let runs: Vec<_> = plans
            .iter()
            .zip(&items)
            .map(|(p, &expect)| {
                s.spawn(move || {
                    let job = lane::Job {
                        source: p.source.clone(),
                        dests: p.dests.clone(),
                        stores: p.dests.iter().map(|d| store_for(d)).collect(),
                        route: &*p.route,
                        lanes: usize::from(args.connections.unwrap_or(if fleet {
                            DEFAULT_FLEET_CONNECTIONS
                        } else {
                            DEFAULT_CONNECTIONS
                        })),
                        batch: args.batch as usize,
                        second_listing: !args.one_listing,
                        expect: expect as usize,
                        // A fleet's old servers stay in service: their moved keys must not
                        // look read (a multi-get would mark them, and keep them longer).
                        multiget: !fleet,
                        sent,
                    };
                    lane::run(&job, c)
                })
            })
            .collect();
        let r = runs
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold(Ok(()), Result::and);
        // Every destination checked at once, once every copy into it is done.
        let checked = r.and_then(|()| {
            let checks: Vec<_> = dests
                .iter()
                .zip(sent)
                .map(|(d, keys)| {
                    s.spawn(move || verify::check(d, &keys.lock().unwrap(), args.batch as usize))
                })
                .collect();
            let mut v = verify::Verdict::default();
            for h in checks {
                v.add(h.join().unwrap()?);
            }
            Ok(v)
        });
        done.store(true, Relaxed);
        checked
    });
    let elapsed = start.elapsed();
    let from = args
        .from
        .as_deref()
        .or(args.from_servers.as_deref())
        .unwrap_or("");
    let to = args
        .to
        .as_deref()
        .or(args.to_servers.as_deref())
        .unwrap_or("");
    let verdict = result.as_ref().ok().copied();
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(summary(&c, verdict, from, to, fleet, elapsed).as_bytes());
    let v = result?;
    if let Some(f) = c.first_failure.lock().unwrap().as_ref() {
        eprintln!("mnemo migrate: first refused item: {f}");
    }
    let bad = verdict_line(&c, &v);
    if let Some(l) = &bad {
        eprintln!("mnemo migrate: {l}");
    }
    Ok(bad.is_none())
}

/// What was left behind, if anything: items listed and not copied, or copied and not kept.
fn verdict_line(c: &Counters, v: &verify::Verdict) -> Option<String> {
    let failed = c.failed.load(Relaxed);
    let unsent = c.unsent.load(Relaxed);
    if failed == 0 && v.missing == 0 {
        return None;
    }
    let refused = (failed - unsent).min(v.missing);
    let mut l = format!(
        "the destination kept {} of {} items sent; {} not kept",
        v.present, v.sent, v.missing
    );
    l += &format!(
        " ({refused} refused, {} evicted or deleted at the destination)",
        v.missing - refused
    );
    if unsent > 0 {
        l += &format!("; {unsent} listed and not sent (see the first refused item)");
    }
    Some(l)
}

/// Whether a server takes the binary protocol on a text port: its `stats settings` say
/// `binding_protocol auto-negotiate` (memcached's and mnemod's default).
pub fn speaks_binary(addr: &str) -> bool {
    (|| {
        let mut conn = readbuf::connect(addr).ok()?;
        conn.write_all(b"stats settings\r\n").ok()?;
        let mut r = BufReader::new(conn);
        let mut line = String::new();
        let mut auto = false;
        while r.read_line(&mut line).ok()? > 0 && line.starts_with("STAT ") {
            auto |= line.trim_end() == "STAT binding_protocol auto-negotiate";
            line.clear();
        }
        Some(auto)
    })()
    .unwrap_or(false)
}

/// How to write to a destination: binary quiet adds where its `stats settings` say it takes
/// either protocol on a connection (memcached's and mnemod's default), else quiet meta sets
/// (`-B ascii`; or `binary`, which wants SASL first).
fn store_for(addr: &str) -> wire::Store {
    if speaks_binary(addr) {
        wire::Store::Binary
    } else {
        wire::Store::Meta
    }
}

/// `stats` curr_items of a server.
fn curr_items(addr: &str) -> Option<u64> {
    let mut conn = readbuf::connect(addr).ok()?;
    conn.write_all(b"stats\r\n").ok()?;
    let mut r = BufReader::new(conn);
    let mut line = String::new();
    let mut n = None;
    while r.read_line(&mut line).ok()? > 0 && line != "END\r\n" {
        if let Some(v) = line.trim_end().strip_prefix("STAT curr_items ") {
            n = v.parse().ok();
        }
        line.clear();
    }
    n
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

fn per_sec(n: u64, t: Duration) -> u64 {
    (n as f64 / t.as_secs_f64().max(1e-9)) as u64
}

fn progress_line(c: &Counters, total: u64, t: Duration) -> String {
    let fetched = c.fetched.load(Relaxed);
    let mut s = format!(
        "copied {fetched} items, {}, {} items/s",
        mb(c.bytes.load(Relaxed)),
        per_sec(fetched, t)
    );
    // Every key listed ends up fetched, gone, staying or stray: the share of the sources'
    // items dealt with so far, at the rate so far, gives the time left.
    let done = fetched + c.gone.load(Relaxed) + c.stays.load(Relaxed) + c.stray.load(Relaxed);
    if total > done && done > 0 {
        let left = (total - done) as f64 / per_sec(done, t).max(1) as f64;
        s += &format!(", {done} of ~{total}, ETA {left:.0} s");
    }
    s
}

fn summary(
    c: &Counters,
    v: Option<verify::Verdict>,
    from: &str,
    to: &str,
    fleet: bool,
    t: Duration,
) -> String {
    let fetched = c.fetched.load(Relaxed);
    let mut s = format!("migrated {from} -> {to}\n");
    s += &format!("  listed   {} keys\n", c.listed.load(Relaxed));
    s += &format!(
        "  relisted {} (passed over by the first listing, found by the second)\n",
        c.relisted.load(Relaxed)
    );
    s += &format!(
        "  fetched  {fetched} items, {}\n",
        mb(c.bytes.load(Relaxed))
    );
    s += &format!(
        "  refetched {} (stored again at the source since listed)\n",
        c.refetched.load(Relaxed)
    );
    s += &format!("  stored   {}\n", c.stored.load(Relaxed));
    s += &format!(
        "  kept     {} (the destination had the key: not overwritten)\n",
        c.exists.load(Relaxed)
    );
    s += &format!(
        "  gone     {} (expired or deleted before the copy)\n",
        c.gone.load(Relaxed)
    );
    s += &format!(
        "  failed   {} (refused by the destination, or not sent: {} of them)\n",
        c.failed.load(Relaxed),
        c.unsent.load(Relaxed)
    );
    if let Some(v) = v {
        s += &format!(
            "  present  {} (kept {} of {} sent: checked at the destination after the copy)\n",
            v.present, v.present, v.sent
        );
        s += &format!(
            "  missing  {} (sent, not at the destination after the copy: refused, evicted or deleted there)\n",
            v.missing
        );
        s += &format!(
            "  expired  {} (sent, expired since: not a failure)\n",
            v.expired
        );
    }
    if fleet {
        s += &format!("  stayed   {} (owner unchanged)\n", c.stays.load(Relaxed));
        s += &format!(
            "  stray    {} (not on their old owner: left)\n",
            c.stray.load(Relaxed)
        );
    }
    s += &format!(
        "  time     {:.3} s, {} items/s\n",
        t.as_secs_f64(),
        per_sec(fetched, t)
    );
    s
}
