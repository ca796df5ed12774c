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
    fn spawn(name: &'static str, mut cmd: Command, port: u16) -> Server {
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        let s = Server { child, port, name };
        // A liveness check, not a timing (see mnemo-server's tests/common: a debug mnemod
        // compiles its filters before it listens).
        let deadline = Instant::now() + Duration::from_secs(60);
        while !listening(port) {
            assert!(
                Instant::now() < deadline,
                "{name} did not start listening on {port}"
            );
            std::thread::yield_now();
        }
        s
    }

    pub fn memcached(extra: &[&str]) -> Server {
        let port = free_port();
        let mut c = Command::new("memcached");
        c.args([
            "-u",
            "root",
            "-p",
            &port.to_string(),
            "-l",
            "127.0.0.1",
            "-U",
            "0",
        ])
        .args(extra);
        Server::spawn("memcached", c, port)
    }

    pub fn mnemod(extra: &[&str]) -> Server {
        let port = free_port();
        let mut c = Command::new(mnemod_bin());
        c.args(["-p", &port.to_string(), "-l", "127.0.0.1", "-U", "0"])
            .args(extra);
        Server::spawn("mnemod", c, port)
    }

    /// Both servers, for tests that run everything against each.
    pub fn both(extra: &[&str]) -> Vec<Server> {
        vec![Server::mnemod(extra), Server::memcached(extra)]
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
