//! `mnemo bench`: a load generator for any memcached text-protocol server.
//!
//! Built to cost the client less than the server: one mio loop per thread, request bytes built
//! into a reused buffer per connection and sent in one write per batch, replies counted by
//! scanning for line ends with memchr (value bodies skipped by length, nothing allocated per
//! request), keys drawn from a seeded xoshiro256** generator so runs repeat exactly.
//!
//! ```text
//!   mnemo bench --server 127.0.0.1:11211 --connections 50 --ratio 1:10 --value-size 32 \
//!               --keys 100000 --prefill --duration 5
//! ```

mod encode;
mod engine;
mod report;
mod rng;
mod scan;
mod timer;

#[cfg(test)]
mod tests;

use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::Barrier;
use std::time::Duration;

use clap::Args;

use engine::{Job, Plan, Stats};
use rng::{Rng, Zipf};

/// Drive a memcached-protocol server and report ops/s, hit ratio and latency percentiles.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Server address, host:port.
    #[arg(short, long, default_value = "127.0.0.1:11211")]
    pub server: String,
    /// TCP connections in total (spread over the threads).
    #[arg(short, long, default_value_t = 50)]
    pub connections: usize,
    /// Requests sent per batch on each connection, in one write.
    #[arg(short, long, default_value_t = 1)]
    pub pipeline: usize,
    /// Keep `pipeline` requests in flight, sending one as each reply arrives, instead of
    /// waiting for the whole batch to be answered.
    #[arg(long)]
    pub refill: bool,
    /// Size of the key space (keys are ids 0..N).
    #[arg(short, long, default_value_t = 100_000)]
    pub keys: u64,
    /// Bytes per key: the prefix followed by the zero-padded id.
    #[arg(long, default_value_t = 16)]
    pub key_size: usize,
    /// Key prefix.
    #[arg(long, default_value = "key:")]
    pub key_prefix: String,
    /// Value bytes: fixed (`32`) or uniform in a range (`16-1024`); k/m suffixes allowed.
    #[arg(long, default_value = "32", value_parser = parse_size_range)]
    pub value_size: (usize, usize),
    /// Sets to gets, `S:G`, e.g. `1:10`; `1:0` only sets, `0:1` only gets.
    #[arg(short, long, default_value = "1:10", value_parser = parse_ratio)]
    pub ratio: (u32, u32),
    /// Keys per get (`get k1 ... kN`); 1 is a plain get.
    #[arg(short, long, default_value_t = 1)]
    pub multiget: usize,
    /// Look-aside: after a get that misses, the connection's next request is a set of that key
    /// (a cache user filling the cache from its backend). These sets are requests of the run:
    /// they count in ops/s, sets, latencies and --requests, on top of --ratio's random sets.
    /// Needs --multiget 1.
    #[arg(long)]
    pub look_aside: bool,
    /// Key popularity: uniform, or zipf with this exponent (e.g. 0.99).
    #[arg(long)]
    pub zipf: Option<f64>,
    /// Seconds to measure (after the warm-up). Default 10 unless --requests is given.
    #[arg(short, long)]
    pub duration: Option<f64>,
    /// Requests to send in total; the run ends when all are answered (or at --duration).
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,
    /// Seconds of load before measuring starts (with --duration only).
    #[arg(long, default_value_t = 0.0)]
    pub warmup: f64,
    /// Fixed-rate (open-loop) mode: requests per second in total. Latency counts from each
    /// request's scheduled send time, so server stalls are not hidden (coordinated omission).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Poll the sockets without sleeping (epoll_wait with a zero timeout), closed-loop only.
    /// A sleeping generator pays a wake-up for nearly every reply, and so does the server
    /// for every request; on a VM each wake-up is an inter-processor interrupt and a halt
    /// exit. Spinning removes that cost from both sides, so the server under test, not the
    /// wake-ups, sets the pace.
    #[arg(long)]
    pub busy_poll: bool,
    /// Client threads, each with its own event loop.
    #[arg(short, long, default_value_t = 1)]
    pub threads: usize,
    /// Set every key once (pipelined) before the run, so gets hit.
    #[arg(long)]
    pub prefill: bool,
    /// PRNG seed; the same seed gives the same request stream.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Fail if the server sends nothing for this many seconds while requests are in flight.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Print the result as one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The validated run configuration every thread reads.
#[derive(Debug)]
pub struct Config {
    pub server: SocketAddr,
    pub connections: usize,
    pub threads: usize,
    pub pipeline: usize,
    pub refill: bool,
    pub keys: u64,
    pub key_format: encode::KeyFormat,
    pub value_min: usize,
    pub value_max: usize,
    pub set_weight: u32,
    pub get_weight: u32,
    pub multiget: usize,
    pub look_aside: bool,
    pub zipf: Option<Zipf>,
    pub duration: Option<Duration>,
    pub requests: Option<u64>,
    pub warmup: Duration,
    pub rate: Option<f64>,
    pub busy_poll: bool,
    pub seed: u64,
    pub timeout: Duration,
    pub prefill: bool,
}

impl Config {
    pub fn from_args(a: &BenchArgs) -> Result<Config, String> {
        let server = a
            .server
            .to_socket_addrs()
            .map_err(|e| format!("--server {}: {e}", a.server))?
            .next()
            .ok_or_else(|| format!("--server {}: no address", a.server))?;
        let positive = |name: &str, v: usize| {
            if v == 0 {
                Err(format!("--{name} must be at least 1"))
            } else {
                Ok(v)
            }
        };
        let connections = positive("connections", a.connections)?;
        let threads = positive("threads", a.threads)?;
        if threads > connections {
            return Err("--threads must not exceed --connections".into());
        }
        let secs = |name: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(format!("--{name} must be a number of seconds >= 0"))
            }
        };
        let duration = match (a.duration, a.requests) {
            (None, None) => Some(Duration::from_secs(10)),
            (d, _) => d.map(|d| secs("duration", d)).transpose()?,
        };
        if a.warmup > 0.0 && duration.is_none() {
            return Err("--warmup needs --duration".into());
        }
        if a.keys == 0 {
            return Err("--keys must be at least 1".into());
        }
        if a.look_aside && a.multiget != 1 {
            // A multi-get's reply does not say which keys missed without parsing its keys.
            return Err("--look-aside needs --multiget 1".into());
        }
        if a.ratio == (0, 0) {
            return Err("--ratio must not be 0:0".into());
        }
        if let Some(r) = a.rate {
            if !(r.is_finite() && r > 0.0) {
                return Err("--rate must be > 0".into());
            }
            if a.busy_poll {
                // A spinning SCHED_FIFO loop is parked by RT throttling for ~50 ms a second,
                // which would show as latency the server never caused (see timer.rs).
                return Err("--busy-poll is for closed-loop runs; --rate uses a timer".into());
            }
        }
        let zipf = match a.zipf {
            Some(s) if !(s.is_finite() && s > 0.0) => {
                return Err("--zipf exponent must be > 0".into())
            }
            Some(s) => Some(Zipf::new(a.keys, s)),
            None => None,
        };
        Ok(Config {
            server,
            connections,
            threads,
            pipeline: positive("pipeline", a.pipeline)?,
            refill: a.refill,
            keys: a.keys,
            key_format: encode::KeyFormat::new(&a.key_prefix, a.key_size, a.keys)?,
            value_min: a.value_size.0,
            value_max: a.value_size.1,
            set_weight: a.ratio.0,
            get_weight: a.ratio.1,
            multiget: positive("multiget", a.multiget)?,
            look_aside: a.look_aside,
            zipf,
            duration,
            requests: a.requests,
            warmup: secs("warmup", a.warmup)?,
            rate: a.rate,
            busy_poll: a.busy_poll,
            seed: a.seed,
            timeout: secs("timeout", a.timeout)?,
            prefill: a.prefill,
        })
    }

    /// A key id in `0..keys`. Zipf ranks are scattered over the key space by multiplying with a
    /// prime larger than any key space (a bijection mod `keys`), so hot keys are not neighbours.
    #[inline]
    pub fn pick_key(&self, rng: &mut Rng) -> u64 {
        match &self.zipf {
            None => rng.below(self.keys),
            Some(z) => {
                const P: u128 = (1 << 61) - 1;
                ((z.sample(rng) as u128 * P) % self.keys as u128) as u64
            }
        }
    }
}

pub fn run(args: BenchArgs) -> ExitCode {
    let cfg = match Config::from_args(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mnemo bench: {e}");
            return ExitCode::from(2);
        }
    };
    if cfg.prefill {
        let t = std::time::Instant::now();
        let depth = (256 * 1024 / (cfg.value_max + 64)).clamp(1, 64);
        let stride = cfg.connections as u64;
        match run_phase(
            &cfg,
            |_| Plan::Prefill { next: 0, stride },
            depth,
            true,
            |_| None,
            None,
        ) {
            Ok(s) => {
                eprintln!(
                    "prefill: {} keys set in {:.2} s{}",
                    s.ops,
                    t.elapsed().as_secs_f64(),
                    if s.errors + s.not_stored > 0 {
                        format!(" ({} not stored)", s.errors + s.not_stored)
                    } else {
                        String::new()
                    }
                );
            }
            Err(e) => {
                eprintln!("mnemo bench: prefill: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let budget = |t: usize| {
        cfg.requests
            .map(|n| n / cfg.threads as u64 + u64::from((t as u64) < n % cfg.threads as u64))
    };
    let rate = cfg.rate;
    let stats = match run_phase(
        &cfg,
        |_| Plan::Mixed,
        cfg.pipeline,
        cfg.refill,
        budget,
        rate,
    ) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mnemo bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.json {
        println!("{}", report::json(&cfg, &stats));
    } else {
        print!("{}", report::table(&cfg, &stats));
    }
    if stats.errors > 0 {
        eprintln!("mnemo bench: {} error replies", stats.errors);
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Runs one phase on `cfg.threads` threads and merges their stats.
fn run_phase(
    cfg: &Config,
    plan: impl Fn(usize) -> Plan,
    pipeline: usize,
    refill: bool,
    budget: impl Fn(usize) -> Option<u64>,
    rate: Option<f64>,
) -> std::io::Result<Stats> {
    let barrier = Barrier::new(cfg.threads);
    let results: Vec<std::io::Result<Stats>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let lo = t * cfg.connections / cfg.threads;
                let hi = (t + 1) * cfg.connections / cfg.threads;
                let job = Job {
                    conns: lo..hi,
                    plan: plan(t),
                    pipeline,
                    refill,
                    budget: budget(t),
                    rate: rate.map(|r| r * (hi - lo) as f64 / cfg.connections as f64),
                };
                let barrier = &barrier;
                s.spawn(move || engine::run(cfg, job, barrier))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .collect()
    });
    let mut total = Stats::new();
    for r in results {
        total.merge(&r?);
    }
    Ok(total)
}

/// `32`, `4k`, `16-1024`, `1k-100k`.
fn parse_size_range(s: &str) -> Result<(usize, usize), String> {
    let one = |t: &str| -> Result<usize, String> {
        let t = t.trim();
        let (num, mult) = match t.char_indices().last() {
            Some((i, 'k' | 'K')) => (&t[..i], 1024),
            Some((i, 'm' | 'M')) => (&t[..i], 1024 * 1024),
            _ => (t, 1),
        };
        num.parse::<usize>()
            .map(|n| n * mult)
            .map_err(|_| format!("bad size {t:?}"))
    };
    let (lo, hi) = match s.split_once('-') {
        Some((a, b)) => (one(a)?, one(b)?),
        None => {
            let v = one(s)?;
            (v, v)
        }
    };
    if lo > hi {
        return Err(format!("size range {s:?} is empty"));
    }
    if hi > 1 << 30 {
        return Err("value size is at most 1 GiB".into());
    }
    Ok((lo, hi))
}

/// `S:G` as (sets, gets).
fn parse_ratio(s: &str) -> Result<(u32, u32), String> {
    let (a, b) = s
        .split_once(':')
        .ok_or_else(|| format!("ratio {s:?} is not S:G"))?;
    let p = |t: &str| {
        t.trim()
            .parse::<u32>()
            .map_err(|_| format!("bad ratio {s:?}"))
    };
    Ok((p(a)?, p(b)?))
}

#[cfg(test)]
mod arg_tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size_range("32"), Ok((32, 32)));
        assert_eq!(parse_size_range("16-1024"), Ok((16, 1024)));
        assert_eq!(parse_size_range("100k"), Ok((102_400, 102_400)));
        assert_eq!(parse_size_range("1k-1m"), Ok((1024, 1 << 20)));
        assert!(parse_size_range("10-5").is_err());
        assert!(parse_size_range("x").is_err());
    }

    #[test]
    fn ratios() {
        assert_eq!(parse_ratio("1:10"), Ok((1, 10)));
        assert_eq!(parse_ratio("0:1"), Ok((0, 1)));
        assert!(parse_ratio("1/10").is_err());
    }

    #[test]
    fn zipf_keys_stay_in_space() {
        use clap::Parser;
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            b: BenchArgs,
        }
        let t = T::try_parse_from(["t", "--keys", "1000", "--zipf", "0.99"]).unwrap();
        let cfg = Config::from_args(&t.b).unwrap();
        let mut r = Rng::new(9);
        for _ in 0..10_000 {
            assert!(cfg.pick_key(&mut r) < 1000);
        }
    }
}
