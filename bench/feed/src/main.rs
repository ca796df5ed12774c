//! mnemo-feedbench: seed 001's feed workload, the load generator of `bench/filter.sh`.
//!
//! It owns the data set (a million users, each a value of 30 records under `u:<id>`), its
//! loader, and the query load: a user's feed is the 10 newest records of 100 random friends,
//! ranked either in the client over a 100-key `get` (what any memcached allows) or in the server
//! by an `fget` filter that returns only the 10 records. Every run proves its answers first
//! (see `run`) and prints one line of `key=value` results.
//!
//! ```text
//!   mnemo-feedbench load --server 127.0.0.1:11211 --users 1000000 --seed 1
//!   mnemo-feedbench run  --server 127.0.0.1:11211 --mode client --users 1000000 --data-seed 1
//!   mnemo-feedbench run  --server 127.0.0.1:11211 --mode fget --filter topk --users 1000000
//! ```
//!
//! Plain blocking sockets, one thread per connection: with one query in flight per connection
//! there is nothing for an event loop to multiplex, and a blocking read is the cheapest wait.

mod conn;
mod gen;
mod load;
mod query;
mod reply;
mod run;

use std::net::{SocketAddr, ToSocketAddrs};

use clap::{Parser, Subcommand};

pub type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Parser)]
#[command(
    name = "mnemo-feedbench",
    version,
    about = "Seed 001's feed workload: client-side top-k over get vs fget filters"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Store every user's records (`u:<id>`), then check the server kept them.
    Load {
        /// host:port
        #[arg(long)]
        server: String,
        #[arg(long)]
        users: u64,
        /// Records per user (24 bytes each).
        #[arg(long, default_value_t = 30)]
        records: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Closed-loop feed queries; prints one line of key=value results.
    Run {
        /// host:port
        #[arg(long)]
        server: String,
        #[arg(long, value_enum)]
        mode: run::Mode,
        /// The filter `fget` names (fget mode).
        #[arg(long, default_value = "topk")]
        filter: String,
        /// Users loaded (friends are drawn from 0..users).
        #[arg(long)]
        users: u64,
        #[arg(long, default_value_t = 100)]
        friends: usize,
        /// Records in a feed.
        #[arg(long, default_value_t = 10)]
        k: usize,
        /// Seconds measured.
        #[arg(long, default_value_t = 5.0)]
        duration: f64,
        /// Seconds of untimed queries before measuring (after the checks).
        #[arg(long, default_value_t = 0.5)]
        warmup: f64,
        /// Connections, each its own thread with one query in flight.
        #[arg(long, default_value_t = 1)]
        conns: usize,
        /// Seed of the friend choices.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The seed given to `load`: the checks then also compare every value read with it.
        #[arg(long)]
        data_seed: Option<u64>,
        /// Records per user as loaded (for --data-seed).
        #[arg(long, default_value_t = 30)]
        records: usize,
        /// Queries per connection computed both ways and compared before measuring.
        #[arg(long, default_value_t = 20)]
        check: usize,
        /// The server's pid: report its CPU time per query (read from /proc over the timed part).
        #[arg(long)]
        server_pid: Option<u32>,
    },
}

fn resolve(server: &str) -> Result<SocketAddr, Error> {
    server
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| format!("{server}: no address").into())
}

fn main() {
    let result = match Cli::parse().cmd {
        Cmd::Load {
            server,
            users,
            records,
            seed,
        } => resolve(&server).and_then(|server| {
            load::load(&load::LoadArgs {
                server,
                users,
                records,
                seed,
            })
        }),
        Cmd::Run {
            server,
            mode,
            filter,
            users,
            friends,
            k,
            duration,
            warmup,
            conns,
            seed,
            data_seed,
            records,
            check,
            server_pid,
        } => resolve(&server).and_then(|server| {
            run::run(&run::RunArgs {
                server,
                mode,
                filter,
                users,
                friends,
                k,
                duration,
                warmup,
                conns,
                seed,
                data_seed,
                records,
                check,
                server_pid,
            })
        }),
    };
    if let Err(e) = result {
        eprintln!("mnemo-feedbench: {e}");
        std::process::exit(1);
    }
}
