//! `mnemod`: parse memcached's flags and serve.

use mnemo_server::{Cli, Config};

fn main() {
    match Config::from_args(std::env::args_os()) {
        Cli::Print(text) => print!("{text}"),
        Cli::Fail(msg) => {
            eprintln!("{msg}");
            std::process::exit(2);
        }
        Cli::Run(config) => {
            if let Err(e) = mnemo_server::run(*config) {
                eprintln!("mnemod: {e}");
                std::process::exit(1);
            }
        }
    }
}
