//! A scripted server for commands the real servers do not speak yet (`fget`): it listens on
//! 127.0.0.1 port 0 (ready once bound, nothing to wait for), frames `fget` requests, records
//! each one as it arrived, and answers each with whatever the test's script says.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One request as the server received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Which accepted connection it came on (0, 1, ... in accept order).
    pub conn: usize,
    pub bytes: Vec<u8>,
    /// Whether the whole request was in the first read of it. One small write on loopback
    /// arrives whole; a request written in pieces (line, then arguments) usually does not.
    pub whole_in_first_read: bool,
}

/// The script: a request's bytes -> the reply to send.
pub type Script = dyn Fn(&[u8]) -> Vec<u8> + Send + Sync;

pub struct Fake {
    pub port: u16,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Fake {
    /// Serve every connection (each on its own thread) until the test binary exits.
    pub fn start(script: impl Fn(&[u8]) -> Vec<u8> + Send + Sync + 'static) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let log = received.clone();
        std::thread::spawn(move || {
            for (conn, s) in listener.incoming().enumerate() {
                let Ok(s) = s else { return };
                let (log, script) = (log.clone(), script.clone());
                std::thread::spawn(move || serve(conn, s, &log, &*script));
            }
        });
        Fake { port, received }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Every request so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn serve(conn: usize, mut s: TcpStream, log: &Mutex<Vec<Received>>, script: &Script) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        // A new request starts here: count the reads it takes.
        let mut reads = 0;
        let len = loop {
            if let Some(len) = fget_len(&buf) {
                break len;
            }
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    reads += 1;
                    buf.extend_from_slice(&chunk[..n]);
                }
            }
        };
        let bytes: Vec<u8> = buf.drain(..len).collect();
        let reply = script(&bytes);
        log.lock().unwrap().push(Received {
            conn,
            bytes,
            whole_in_first_read: reads == 1,
        });
        if s.write_all(&reply).is_err() {
            return;
        }
    }
}

/// Length of the `fget` request at the start of `buf` (line and argument block), once whole.
pub fn fget_len(buf: &[u8]) -> Option<usize> {
    let nl = buf.iter().position(|&b| b == b'\n')?;
    let line = std::str::from_utf8(&buf[..nl]).expect("a text command line");
    let arglen: usize = line
        .split(' ')
        .nth(2)
        .and_then(|a| a.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("not an fget line: {line:?}"));
    let len = nl + 1 + arglen + 2;
    (buf.len() >= len).then_some(len)
}

/// A request's filter name, argument block and keys.
pub fn parse_fget(req: &[u8]) -> (String, Vec<u8>, Vec<String>) {
    let nl = req.iter().position(|&b| b == b'\n').unwrap();
    let line = std::str::from_utf8(&req[..nl]).unwrap().trim_end();
    let mut words = line.split(' ');
    assert_eq!(words.next(), Some("fget"));
    let filter = words.next().unwrap().to_owned();
    let arglen: usize = words.next().unwrap().parse().unwrap();
    let keys = words.map(str::to_owned).collect();
    let args = req[nl + 1..nl + 1 + arglen].to_vec();
    assert_eq!(&req[nl + 1 + arglen..], b"\r\n");
    (filter, args, keys)
}

/// `VALUE <filter> <flags> <len>\r\n<data>\r\nEND\r\n`
pub fn value_reply(filter: &str, flags: u32, data: &[u8]) -> Vec<u8> {
    let mut r = format!("VALUE {filter} {flags} {}\r\n", data.len()).into_bytes();
    r.extend_from_slice(data);
    r.extend_from_slice(b"\r\nEND\r\n");
    r
}
