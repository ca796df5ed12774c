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
//! ```

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod fget;
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
    #[command(flatten)]
    Op(ops::Op),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(args) => bench::run(args),
        Command::Op(op) => ops::run(&cli.target, op),
    }
}
