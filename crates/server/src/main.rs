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
            if config.daemonize {
                if let Err(e) = daemonize(&config) {
                    eprintln!("mnemod: -d: {e}");
                    std::process::exit(1);
                }
            }
            if let Err(e) = mnemo_server::start::run(*config) {
                eprintln!("mnemod: {e}");
                std::process::exit(1);
            }
        }
    }
}

/// `-d`, as memcached's daemonize: fork (the parent exits 0 at once), a session of its own,
/// the working directory `/` unless `-r` asks for core files, and stdin/stdout/stderr on
/// /dev/null unless `-v`. Called before any thread exists, so the fork copies a whole process;
/// `-P` is written later by the child, with its own pid.
fn daemonize(config: &Config) -> std::io::Result<()> {
    let last = || Err(std::io::Error::last_os_error());
    // SAFETY: single-threaded here (nothing has spawned a thread yet); the child only goes on
    // to run the server, the parent only exits.
    match unsafe { libc::fork() } {
        -1 => return last(),
        0 => {}
        _ => unsafe { libc::_exit(0) },
    }
    // SAFETY: plain libc calls on a C string this function owns.
    unsafe {
        if libc::setsid() == -1 {
            return last();
        }
        if !config.coredumps && libc::chdir(c"/".as_ptr()) != 0 {
            return last();
        }
        if config.verbose == 0 {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            if null < 0 {
                return last();
            }
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
    }
    Ok(())
}
