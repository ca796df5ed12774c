//! The operator subcommands: get, set, delete, touch, incr, decr, stats, keys, flush, route,
//! and fget (its own module, src/fget.rs).
//! Each talks to the servers of `--servers` through mnemo-client (so keys go where every
//! ketama-weighted client puts them) and prints for a person, one line per fact; errors go to
//! stderr with a non-zero exit.

use crate::fget::{self, FgetArgs};
use clap::{Args, Subcommand};
use mnemo_client::{blocking, Config, FlagProfile, PerServer, ServerSpec, SetOptions, Value};
use std::io::{Read, Write};
use std::process::ExitCode;

/// Where and how: the server list and the client's settings, shared by every subcommand.
#[derive(Args, Debug, Clone)]
pub struct Target {
    /// Servers, `host:port[:weight],...` (libmemcached's weighted ketama distributes keys).
    #[arg(long, global = true, default_value = "127.0.0.1:11211")]
    pub servers: String,
    /// Hash only the `{...}` part of keys that have one.
    #[arg(long, global = true)]
    pub hash_tags: bool,
    /// Flag meanings and compression: `mnemo` (zstd), `python` (zlib, what python-memcached,
    /// pymemcache and pylibmc read), `php` (php-memcached), `php-memcache`, `perl`
    /// (Cache::Memcached and ::Fast) or `java` (spymemcached, xmemcached).
    #[arg(long, global = true, default_value = "mnemo",
          value_parser = ["mnemo", "python", "php", "php-memcached", "php-memcache", "perl", "java"])]
    pub profile: String,
}

#[derive(Subcommand, Debug)]
pub enum Op {
    /// Print the values of keys (text as is, bytes raw; a missing key is reported on stderr).
    Get {
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Store a value (`-` reads it from stdin).
    Set {
        key: String,
        value: String,
        /// Expiry: seconds (up to 30 days) or a Unix time.
        #[arg(short, long, default_value_t = 0)]
        exptime: u32,
        /// Store as bytes rather than text.
        #[arg(long)]
        bytes: bool,
        /// Never compress this value.
        #[arg(long)]
        no_compress: bool,
    },
    /// Delete keys.
    Delete {
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Set a new expiry on a key.
    Touch { key: String, exptime: u32 },
    /// Add to a counter.
    Incr {
        key: String,
        #[arg(default_value_t = 1)]
        delta: u64,
    },
    /// Subtract from a counter (stops at 0).
    Decr {
        key: String,
        #[arg(default_value_t = 1)]
        delta: u64,
    },
    /// Statistics of every server (`stats`, or `stats ARG`: settings, items, slabs, ...).
    Stats { arg: Option<String> },
    /// List the keys every server holds (servers with `lru_crawler metadump`).
    Keys {
        /// Print each key's server, expiry and size too.
        #[arg(short, long)]
        long: bool,
    },
    /// Invalidate every item on every server.
    Flush {
        /// Seconds before the flush takes effect.
        #[arg(long)]
        delay: Option<u32>,
    },
    /// Which server owns each key: `key<TAB>host:port` (keys from the arguments, or stdin with `-`).
    Route {
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Run a server-side filter over keys (mnemod) and print the servers' merged results.
    ///
    /// Each server runs the filter over the keys it holds (`--hash-tags` keeps `{user:7}:a` and
    /// `{user:7}:b` together); `--merge` combines the parts. Output: the merged bytes raw, or
    /// with `--records` one `user<TAB>article<TAB>ts` line per 24-byte record. Example:
    /// `mnemo fget topk --arg 10 --merge topk:10 --records feed:1 feed:2`
    Fget(FgetArgs),
}

pub fn run(target: &Target, op: Op) -> ExitCode {
    match run_op(target, op) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mnemo: {e}");
            ExitCode::from(1)
        }
    }
}

fn client(t: &Target) -> Result<blocking::Client, mnemo_client::Error> {
    let mut cfg = Config::for_profile(FlagProfile::from_name(&t.profile)?);
    cfg.hash_tags = t.hash_tags;
    // An operator's command should fail fast on a dead server, not eject it for the next one.
    cfg.failure_limit = None;
    blocking::Client::from_list(&t.servers, cfg)
}

fn run_op(t: &Target, op: Op) -> Result<ExitCode, mnemo_client::Error> {
    let c = client(t)?;
    let mut out = std::io::stdout().lock();
    let mut failed = false;
    match op {
        Op::Get { keys } => {
            for k in &keys {
                match c.get(k)? {
                    Some(v) => {
                        let _ = out.write_all(&render(v));
                        let _ = out.write_all(b"\n");
                    }
                    None => {
                        eprintln!("{k}: not found");
                        failed = true;
                    }
                }
            }
        }
        Op::Set {
            key,
            value,
            exptime,
            bytes,
            no_compress,
        } => {
            let data = if value == "-" {
                let mut b = Vec::new();
                std::io::stdin()
                    .read_to_end(&mut b)
                    .map_err(|e| mnemo_client::Error::Config(format!("stdin: {e}")))?;
                b
            } else {
                value.into_bytes()
            };
            let opts = SetOptions {
                exptime,
                compress: no_compress.then_some(false),
                ..Default::default()
            };
            match (bytes, std::str::from_utf8(&data)) {
                (false, Ok(s)) => c.set_with(&key, s, &opts)?,
                _ => c.set_with(&key, &data, &opts)?,
            }
            let _ = writeln!(out, "STORED {key} on {}", c.route(&key)?);
        }
        Op::Delete { keys } => {
            for k in &keys {
                if c.delete(k)? {
                    let _ = writeln!(out, "DELETED {k}");
                } else {
                    eprintln!("{k}: not found");
                    failed = true;
                }
            }
        }
        Op::Touch { key, exptime } => {
            if c.touch(&key, exptime)? {
                let _ = writeln!(out, "TOUCHED {key}");
            } else {
                eprintln!("{key}: not found");
                failed = true;
            }
        }
        Op::Incr { key, delta } => failed = !counter(&mut out, &key, c.incr(&key, delta)?),
        Op::Decr { key, delta } => failed = !counter(&mut out, &key, c.decr(&key, delta)?),
        Op::Stats { arg } => {
            let all = c.stats(arg.as_deref());
            let width = all
                .iter()
                .flat_map(|(_, r)| r.iter().flatten())
                .map(|(k, _)| k.len())
                .max()
                .unwrap_or(0);
            failed = per_server(&all, |spec, stats| {
                let _ = writeln!(out, "# {spec}");
                for (k, v) in stats {
                    let _ = writeln!(out, "{k:<width$}  {v}");
                }
            });
        }
        Op::Keys { long } => {
            let all = c.keys();
            failed = per_server(&all, |spec, keys| {
                for k in keys {
                    let name = String::from_utf8_lossy(&k.key);
                    if long {
                        let exp = k.exp.map_or("never".to_string(), |e| e.to_string());
                        let size = k.size.map_or("-".to_string(), |s| s.to_string());
                        let _ = writeln!(out, "{name}\t{}\texp={exp}\tsize={size}", spec.addr());
                    } else {
                        let _ = writeln!(out, "{name}");
                    }
                }
            });
        }
        Op::Flush { delay } => {
            let all = c.flush_all(delay);
            failed = per_server(&all, |spec, ()| {
                let _ = writeln!(out, "flushed {spec}");
            });
        }
        Op::Route { keys } => {
            for k in &keys_or_stdin(keys)? {
                let _ = writeln!(out, "{k}\t{}", c.route(k)?.addr());
            }
        }
        Op::Fget(args) => {
            let keys = keys_or_stdin(args.keys.clone())?;
            fget::run(&c, &args, &keys, &mut out)?;
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The keys given, or with a lone `-` the non-empty lines of stdin.
fn keys_or_stdin(keys: Vec<String>) -> Result<Vec<String>, mnemo_client::Error> {
    if keys.len() != 1 || keys[0] != "-" {
        return Ok(keys);
    }
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .map_err(|e| mnemo_client::Error::Config(format!("stdin: {e}")))?;
    Ok(s.lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

/// A value for a terminal: text and integers as text, bytes as they are.
fn render(v: Value) -> Vec<u8> {
    v.into_bytes()
}

fn counter(out: &mut impl Write, key: &str, v: Option<u64>) -> bool {
    match v {
        Some(n) => {
            let _ = writeln!(out, "{n}");
            true
        }
        None => {
            eprintln!("{key}: not found");
            false
        }
    }
}

/// Print each server's result with `each`; errors go to stderr. Returns whether any failed.
fn per_server<T>(all: &PerServer<T>, mut each: impl FnMut(&ServerSpec, &T)) -> bool {
    let mut failed = false;
    for (spec, r) in all {
        match r {
            Ok(v) => each(spec, v),
            Err(e) => {
                eprintln!("{spec}: {e}");
                failed = true;
            }
        }
    }
    failed
}
