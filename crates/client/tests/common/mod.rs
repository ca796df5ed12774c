//! Real servers for the client's tests: memcached (Debian's package) and mnemod on free ports,
//! waited for by connecting (never by sleeping), killed when dropped; and the Python that runs
//! the interop scripts. [`fake`]: a scripted server for what the real ones do not speak yet.
#![allow(dead_code)] // each test binary uses part of this

pub mod fake;

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub struct Server {
    child: Child,
    pub port: u16,
    pub name: &'static str,
    /// Its stderr, shown if it exits by itself (a crash is then not a bare "refused").
    err: PathBuf,
    killed: bool,
}

/// A port below the kernel's ephemeral range (32768+), free right now and never handed out twice
/// by this test binary: no outgoing connection, probe self-connect or parallel test's server can
/// take it before the server binds it. (A different offset from the server crate's harness.)
fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (20000 + (std::process::id() % 397 * 29 + 6000 + n) % 12000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Where a server's stderr is kept while it starts.
fn tempfile_path(name: &str, port: u16) -> PathBuf {
    std::env::temp_dir().join(format!(
        "mnemo-client-test-{name}-{}-{port}.err",
        std::process::id()
    ))
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// mnemod: $MNEMOD_BIN, else the workspace's target/debug/mnemod (scripts/test.sh builds the
/// whole workspace before `cargo test`).
pub fn mnemod_bin() -> PathBuf {
    if let Ok(p) = std::env::var("MNEMOD_BIN") {
        return PathBuf::from(p);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace().join("target"));
    let p = target.join("debug/mnemod");
    assert!(
        p.exists(),
        "mnemod not built at {}: run `cargo build -p mnemo-server` first (or set MNEMOD_BIN)",
        p.display()
    );
    p
}

impl Server {
    /// Starts the server `args(port)` describes on a free port and waits until it listens.
    /// Checked after that: the listener is the child's own (a child that exited, say because
    /// the port was taken between the check and its bind, is started again on another port;
    /// one that keeps failing is reported with its stderr, not left for a later "refused").
    fn spawn(name: &'static str, program: PathBuf, args: impl Fn(u16) -> Vec<String>) -> Server {
        let mut last_err = String::new();
        for _ in 0..5 {
            let port = free_port();
            let err = tempfile_path(name, port);
            let child = Command::new(&program)
                .args(args(port))
                .stdout(Stdio::null())
                .stderr(Stdio::from(
                    std::fs::File::create(&err).expect("a file for the server's stderr"),
                ))
                .spawn()
                .unwrap_or_else(|e| panic!("start {name}: {e}"));
            let mut s = Server {
                child,
                port,
                name,
                err: err.clone(),
                killed: false,
            };
            // A liveness check, not a timing (see mnemo-server's tests/common: a debug mnemod
            // compiles its filters before it listens).
            let deadline = Instant::now() + Duration::from_secs(60);
            while !listening(port) && s.child.try_wait().ok().flatten().is_none() {
                assert!(
                    Instant::now() < deadline,
                    "{name} did not start listening on {port}"
                );
                std::thread::yield_now();
            }
            if s.child.try_wait().ok().flatten().is_none() {
                return s;
            }
            last_err = std::fs::read_to_string(&err).unwrap_or_default();
        }
        panic!("{name} exited at start, five times; its stderr: {last_err}");
    }

    pub fn memcached(extra: &[&str]) -> Server {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Server::spawn("memcached", PathBuf::from("memcached"), move |port| {
            let base = [
                "-u",
                "root",
                "-p",
                &port.to_string(),
                "-l",
                "127.0.0.1",
                "-U",
                "0",
            ]
            .map(String::from);
            base.into_iter().chain(extra.iter().cloned()).collect()
        })
    }

    pub fn mnemod(extra: &[&str]) -> Server {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Server::spawn("mnemod", mnemod_bin(), move |port| {
            let base = ["-p", &port.to_string(), "-l", "127.0.0.1", "-U", "0"].map(String::from);
            base.into_iter().chain(extra.iter().cloned()).collect()
        })
    }

    /// Both servers, for tests that run everything against each.
    pub fn both(extra: &[&str]) -> Vec<Server> {
        vec![Server::mnemod(extra), Server::memcached(extra)]
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn kill(&mut self) {
        if self.killed {
            return;
        }
        self.killed = true;
        if let Ok(Some(status)) = self.child.try_wait() {
            eprintln!(
                "{} on port {} had exited by itself ({status}); its stderr:\n{}",
                self.name,
                self.port,
                std::fs::read_to_string(&self.err).unwrap_or_default()
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.err);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The venv Python with the interop requirements (crates/client/tests/interop/requirements.txt),
/// from $MNEMO_PYTHON. Unset: a failure under CI (CI=true), a loud skip elsewhere.
pub fn python() -> Option<PathBuf> {
    match std::env::var("MNEMO_PYTHON") {
        Ok(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => {
            let ci = std::env::var("CI")
                .map(|v| v == "true" || v == "1")
                .unwrap_or(false);
            assert!(
                !ci,
                "MNEMO_PYTHON is unset under CI: the pylibmc/pymemcache interop tests cannot run"
            );
            eprintln!(
                "\n********************************************************************\n\
                 SKIPPED: MNEMO_PYTHON is unset, so the Python interop test did not run.\n\
                 Make a venv with crates/client/tests/interop/requirements.txt and set\n\
                 MNEMO_PYTHON=/path/to/venv/bin/python (scripts/test.sh does).\n\
                 ********************************************************************\n"
            );
            None
        }
    }
}

/// Run an interop script with arguments; its stdout, or a panic with its stderr.
pub fn run_python(py: &PathBuf, script: &str, args: &[&str]) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop")
        .join(script);
    let out = Command::new(py)
        .arg(&path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", py.display()));
    assert!(
        out.status.success(),
        "{script} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Whether something listens on the port. A connect to a port nobody listens on can still
/// succeed on loopback when the kernel picks that same port as the source (a TCP self-connect,
/// likeliest while the server is still starting): such a connection does not count.
fn listening(port: u16) -> bool {
    match TcpStream::connect(("127.0.0.1", port)) {
        Ok(s) => s.local_addr().ok() != s.peer_addr().ok(),
        Err(_) => false,
    }
}
