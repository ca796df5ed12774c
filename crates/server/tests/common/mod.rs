//! The real `mnemod` binary on a free port, for black-box tests: started, waited for by
//! connecting (never by sleeping), killed when dropped.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Child,
    pub port: u16,
}

impl Server {
    pub fn start(extra: &[&str]) -> Server {
        Server::start_with(extra, |_| {})
    }

    /// As `start`, with the command adjusted first (environment, stderr, pre_exec).
    pub fn start_with(extra: &[&str], adjust: impl Fn(&mut Command)) -> Server {
        // The free port can be taken before mnemod binds it (another connection's ephemeral
        // port, or our own probe self-connecting): mnemod then exits, and we try a new port.
        for _ in 0..5 {
            let port = free_port();
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_mnemod"));
            cmd.args(["-p", &port.to_string(), "-l", "127.0.0.1", "-U", "0"])
                .args(extra)
                .stdout(Stdio::null());
            adjust(&mut cmd);
            let mut child = cmd.spawn().expect("start mnemod");
            // Generous: a liveness check, not a timing. A debug mnemod compiles each WebAssembly
            // filter with an unoptimized cranelift before it listens (about 0.9 s per example
            // filter here, 5 s for filter.rs's six), and the other tests of the binary compete
            // for the same cores; CI's machine once went past 10 s.
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                // Listening, and by our child: another test binary running at the same time
                // can pick the same free port and its mnemod can win the bind; ours then exits.
                if listening(port) && holds_listener(child.id(), port) {
                    return Server { child, port };
                }
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                assert!(Instant::now() < deadline, "mnemod did not start listening");
                std::thread::yield_now();
            }
        }
        panic!("mnemod exited before listening, five times");
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    /// Resident anonymous memory of the server process (heap, mappings, stacks), in KiB: what
    /// the server allocates. Not VmRSS: that also counts the pages of the binary paged in as
    /// new code runs (a debug mnemod is ~200 MB, and an error path first taken mid-test can
    /// fault in megabytes of it), which says nothing about allocation.
    #[allow(dead_code)] // not every test binary measures memory
    pub fn rss_kb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

impl Server {
    /// The server's memory lines from /proc (resident kinds and huge pages), for failure messages.
    #[allow(dead_code)] // not every test binary measures memory
    pub fn memory_report(&self) -> String {
        let pid = self.child.id();
        let wanted = [
            "VmRSS:",
            "VmHWM:",
            "RssAnon:",
            "RssFile:",
            "AnonHugePages:",
            "Threads:",
        ];
        let mut out = Vec::new();
        for file in ["status", "smaps_rollup"] {
            let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap_or_default();
            for line in text
                .lines()
                .filter(|l| wanted.iter().any(|w| l.starts_with(w)))
            {
                out.push(line.split_whitespace().collect::<Vec<_>>().join(" "));
            }
        }
        out.join(", ")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port below the kernel's ephemeral range (32768+), free right now and never handed out twice
/// by this test binary: no outgoing connection, probe self-connect or parallel test's server can
/// take it before mnemod binds it.
fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (20000 + (std::process::id() % 397 * 29 + n) % 12000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
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

/// Whether process `pid` holds the IPv4 loopback listener on `port`: the listening socket's
/// inode from /proc/net/tcp, looked for among the process's descriptors.
fn holds_listener(pid: u32, port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    let local = format!("0100007F:{port:04X}");
    // Fields: sl, local_address, rem_address, st (0A = LISTEN), ..., inode (the 10th).
    let Some(inode) = table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 9 && f[1] == local && f[3] == "0A").then(|| f[9].to_string())
    }) else {
        return false;
    };
    let want = format!("socket:[{inode}]");
    std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
        fds.flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == want.as_str()))
    })
}
