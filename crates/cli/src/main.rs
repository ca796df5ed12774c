//! `mnemo`: the operator's tool for mnemo and any memcached-protocol server.
//!
//! One binary, one subcommand per job; each subcommand lives in its own module and owns its
//! arguments (a clap `Args` struct) and its `run`, so adding one is a variant here and a module.
//!
//! ```text
//!   mnemo bench --server 127.0.0.1:11211 ...          load generator (src/bench/)
//!   mnemo [--servers h:p[:w],...] get|set|delete|touch|incr|decr|stats|keys|flush|route ...
//!                                                     operator commands (src/ops.rs)
//!   mnemo [--servers ...] fget FILTER [--arg ..] [--merge concat|topk:K] [--records] KEY...
//!                                                     server-side filter, merged (src/fget.rs)
//!   mnemo migrate --from h:p --to h:p                 copy a running cache, warm (src/migrate/)
//!   mnemo [--hash-tags] migrate --from-servers LIST --to-servers LIST
//!                                                     move the keys a fleet change moves
//! ```

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod fget;
mod migrate;
mod ops;

#[derive(Parser, Debug)]
#[command(
    name = "mnemo",
    version,
    about = "mnemo: tools for memcached-protocol servers"
)]
struct Cli {
    #[command(flatten)]
    target: ops::Target,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Load generator: drive a memcached-protocol server and report throughput and latency.
    Bench(bench::BenchArgs),
    /// Copy a running cache (memcached or mnemod) into another server, warm.
    ///
    /// Every live item of --from goes to --to with its flags, value and remaining TTL; a key
    /// the destination holds already is left as it is. With --from-servers/--to-servers (and
    /// --hash-tags as the clients use it), only the keys whose ketama owner changes move.
    Migrate(migrate::MigrateArgs),
    #[command(flatten)]
    Op(ops::Op),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(args) => bench::run(args),
        Command::Migrate(args) => migrate::run(cli.target.hash_tags, args),
        Command::Op(op) => ops::run(&cli.target, op),
    }
}
