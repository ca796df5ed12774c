//! memcached's UDP protocol (`-U PORT`, off by default as in memcached 1.6): one socket per
//! `-l` interface, served by `-t` threads each (memcached's num_threads_per_udp), every
//! datagram run through the same text and binary execution TCP uses (protocol/text.rs, protocol/binary.rs).
//! The datagram's first byte picks its protocol (0x80: binary), as memcached does.
//!
//! ```text
//!   datagram in:   | request id | sequence | total | reserved | request(s) ...      |
//!                    2 bytes      2 (any)    2 (=1)  2 (any)    the rest, whole
//!   replies out:   one "message" per reply (per key for the get family, as memcached's
//!                  response objects), each cut into datagrams of at most UDP_MAX_DATAGRAM
//!                  bytes: | request id | seq 0.. | datagrams in this message | 0 | payload |
//! ```
//!
//! What memcached does with bad datagrams, reproduced: 8 bytes or fewer, or a "total" other
//! than 1 (a request in several datagrams), are dropped without a reply; a request cut short
//! by the end of its datagram is dropped (memcached carries it over to whatever datagram comes
//! next, from any client — not reproduced: a datagram here never affects another's parse).
//! Requests that follow a get-family request or `mn` in the same datagram are all served;
//! memcached serves them or drops them depending on timing (the same datagram sent twice to
//! an idle memcached got both answers, then one).
//!
//! Amplification: memcached sends however much a datagram's requests produce. Here a
//! datagram's replies stop growing once they reach `REPLY_MAX` (the item size limit, at least
//! 1 MiB): a get-family request then answers the keys served so far and END, and the rest of
//! the datagram is not run. So a reply is at most `REPLY_MAX` plus one item; a single get
//! of the largest item still gets its whole value, as in memcached.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use mnemo_proto::text::{self, Keys, Parsed, Request};
use mnemo_proto::ErrorReply;

use crate::admin::stats::{bump, Counters};
use crate::command::Next;
use crate::protocol::binary::{self, BinNext, BinSession};
use crate::protocol::{self, text::PendingReads};
use crate::{Config, Shared};

/// The frame header before every request and every reply datagram.
pub const HEADER: usize = 8;
/// memcached's UDP_MAX_PAYLOAD_SIZE: a reply datagram, header included.
pub const UDP_MAX_DATAGRAM: usize = 1400;
/// memcached's UDP_READ_BUFFER_SIZE: the largest request datagram read.
const READ_BUFFER: usize = 65536;
/// The least `REPLY_MAX` is (module docs, "Amplification").
const REPLY_MAX_MIN: usize = 1 << 20;
/// A thread's reply buffer is given back down to this after a datagram whose replies grew it
/// (up to REPLY_MAX and one item): what -U holds outside -m is then this per UDP thread.
const BUF_KEEP: usize = 64 * 1024;
/// How long a UDP thread waits after a failed receive before the next.
const RECV_ERROR_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);
/// A get's reply that carries its END.
const END: &[u8] = b"END\r\n";

/// The UDP port to serve, if any: `-U` off (0) or with `-s`, none.
pub fn port(config: &Config) -> Option<u16> {
    config.udp_port.filter(|_| config.unix_socket.is_none())
}

/// How many UDP threads `bind` + `spawn` start: `-t` per interface (each has a counters
/// block of its own, after the workers').
pub fn threads(config: &Config) -> usize {
    port(config).map_or(0, |_| config.listen.len() * config.threads)
}

/// One socket per `-l` interface on the `-U` port (port 0: one the kernel picks).
pub fn bind(config: &Config) -> Result<Vec<UdpSocket>, crate::listener::BindError> {
    let Some(port) = port(config) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for host in &config.listen {
        let addr = crate::listener::socket_addr(crate::tls::ListenTls::split(host).1, port);
        let s = UdpSocket::bind(addr.as_str())
            .map_err(|source| crate::listener::BindError::Udp { addr, source })?;
        out.push(s);
    }
    Ok(out)
}

/// Serve every socket with `-t` threads, counting into `sh.counters[first..]`.
pub fn spawn(sockets: Vec<UdpSocket>, sh: &Arc<Shared>, first: usize) -> std::io::Result<()> {
    let mut next = first;
    for s in sockets {
        for _ in 0..sh.config.threads {
            let (sock, sh, counters) = (s.try_clone()?, sh.clone(), sh.counters[next].clone());
            // Listed in `stats conns` as memcached lists each thread's UDP connection.
            let info = Arc::new(crate::admin::conns::ConnInfo::default());
            info.last_cmd.store(sh.clock.now(), Relaxed);
            let addr = sock.local_addr().map(crate::admin::conns::udp_addr)?;
            sh.conn_table
                .add_udp(std::os::fd::AsRawFd::as_raw_fd(&sock), addr, info.clone());
            std::thread::Builder::new()
                .name(format!("mnemo-udp-{}", next - first))
                .stack_size(crate::WORKER_STACK)
                .spawn(move || serve(&sock, &sh, &counters, &info))?;
            next += 1;
        }
        // memcached counts each thread's UDP connection as a connection from the start.
        sh.conn_counts.curr.fetch_add(sh.config.threads, Relaxed);
        sh.conn_counts
            .total
            .fetch_add(sh.config.threads as u64, Relaxed);
        sh.conn_counts
            .structs
            .fetch_add(sh.config.threads as u64, Relaxed);
    }
    Ok(())
}

/// One thread's loop: a datagram in, its replies out; errors are the client's loss only.
fn serve(sock: &UdpSocket, sh: &Shared, c: &Counters, info: &crate::admin::conns::ConnInfo) {
    let mut input = vec![0u8; READ_BUFFER];
    let mut run = Run::default();
    let mut dgram = Vec::with_capacity(UDP_MAX_DATAGRAM);
    loop {
        let (n, peer): (usize, SocketAddr) = match sock.recv_from(&mut input) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // Out of memory or the like: whatever it is, do not spin on it.
            Err(_) => {
                std::thread::sleep(RECV_ERROR_PAUSE);
                continue;
            }
        };
        bump(&c.bytes_read, n as u64);
        info.last_cmd.store(sh.clock.now(), Relaxed);
        let Some(id) = run.datagram(&input[..n], sh, c) else {
            continue;
        };
        let mut sent = 0u64;
        run.transmit(id, &mut dgram, |d| {
            if sock.send_to(d, peer).is_ok() {
                sent += d.len() as u64;
            }
        });
        bump(&c.bytes_written, sent);
        if run.shutdown {
            sh.shutdown_by_client();
        }
    }
}

/// One reply as memcached's response object: its bytes end at `end` in `Run::out`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Msg {
    end: usize,
    /// No reply was asked for (noreply, quiet): never sent, even when first.
    skip: bool,
    /// memcached writes out what is queued after this reply (the get family and `mn`).
    flush: bool,
}

/// A datagram's replies, buffers reused from one datagram to the next.
#[derive(Default)]
struct Run {
    out: Vec<u8>,
    msgs: Vec<Msg>,
    reads: PendingReads,
    shutdown: bool,
}

impl Run {
    /// Run one datagram's requests; its request id, or None for a datagram memcached drops.
    fn datagram(&mut self, d: &[u8], sh: &Shared, c: &Counters) -> Option<u16> {
        self.out.clear();
        self.out.shrink_to(BUF_KEEP);
        self.msgs.clear();
        self.reads.clear();
        if d.len() <= HEADER || d[4..6] != [0, 1] {
            return None;
        }
        let id = u16::from_be_bytes([d[0], d[1]]);
        let max = sh.config.item_size_max.max(REPLY_MAX_MIN);
        let limits = text::Limits {
            item_size_max: sh.config.item_size_max,
            use_cas: sh.config.use_cas,
        };
        let mut input = &d[HEADER..];
        // As memcached: the datagram's first byte picks the protocol of all its requests.
        let binary = input[0] == 0x80;
        while !input.is_empty() && self.out.len() < max {
            let n = if binary {
                self.binary(input, sh, c)
            } else {
                self.text(input, &limits, max, sh, c)
            };
            match n {
                Some(n) => input = &input[n..],
                None => break,
            }
        }
        Some(id)
    }

    fn push(&mut self, skip: bool, flush: bool) {
        self.msgs.push(Msg {
            end: self.out.len(),
            skip,
            flush,
        });
    }

    /// One binary request; the bytes it took, or None: stop here.
    fn binary(&mut self, input: &[u8], sh: &Shared, c: &Counters) -> Option<usize> {
        if sh.config.protocol == crate::config::Protocols::Ascii {
            return None;
        }
        let start = self.out.len();
        // A session per request: SASL state never outlives a datagram.
        match binary::step_direct(
            input,
            &mut BinSession::default(),
            sh,
            c,
            &mut self.out,
            None,
        ) {
            BinNext::Consumed(n) => {
                self.push(self.out.len() == start, false);
                Some(n)
            }
            // Later: not without a Direct (a flashed value is read here, synchronously).
            BinNext::Incomplete(_) | BinNext::Close | BinNext::Later(_) => {
                self.out.truncate(start);
                None
            }
        }
    }

    /// One text request; the bytes it took, or None: stop here.
    fn text(
        &mut self,
        input: &[u8],
        limits: &text::Limits,
        max: usize,
        sh: &Shared,
        c: &Counters,
    ) -> Option<usize> {
        use crate::config::Protocols;
        if sh.config.protocol == Protocols::Binary || sh.config.sasl {
            return None;
        }
        let start = self.out.len();
        match text::parse(input, limits) {
            Parsed::Request(ref req, n) => {
                if let Request::Get { keys, cas, touch } = *req {
                    if !(sh.config.text_auth) {
                        self.get(keys, cas, touch, max, sh, c);
                        return Some(n);
                    }
                }
                if let Request::Fget { .. } = req {
                    // A filter call that is not brief runs on the job pool and answers later,
                    // where a datagram's replies are sent once it has run: fget is refused,
                    // whether this call would have been brief or not.
                    ErrorReply::FgetOverUdp.write(&mut self.out);
                    self.push(false, false);
                    return Some(n);
                }
                let mut authed = false;
                let next = if sh.config.text_auth {
                    protocol::text::unauthenticated(req, sh, &mut authed, &mut self.out)
                } else {
                    protocol::text::execute_from(
                        req,
                        0,
                        sh,
                        c,
                        &mut self.out,
                        &mut self.reads,
                        None,
                    )
                };
                let quiet = self.out.len() == start;
                match next {
                    Next::Continue | Next::Resume(_) => self.push(quiet, false),
                    Next::Flush => self.push(quiet, true),
                    Next::Swallow(s, reply) => {
                        // The refused value must be in this datagram for memcached to answer.
                        if s > input.len() - n {
                            return None;
                        }
                        if let Some(r) = reply {
                            r.write(&mut self.out);
                        }
                        self.push(self.out.len() == start, false);
                        return Some(n + s);
                    }
                    // `quit`: memcached sends its empty reply and reads no further.
                    Next::Close => {
                        self.push(false, true);
                        return None;
                    }
                    Next::Shutdown => {
                        self.push(quiet, true);
                        self.shutdown = true;
                        return None;
                    }
                    // A metadump streams over many writes: not over UDP.
                    Next::Metadump(_) => {
                        self.out.truncate(start);
                        return None;
                    }
                    // Work deferred to a pool answers a TCP connection later; a datagram's
                    // replies are sent when it has run, so it is refused here (the job is
                    // dropped unrun). fget is refused above, before its brief attempt.
                    Next::Later(_) | Next::Watch(_) => {
                        self.out.truncate(start);
                        ErrorReply::FgetOverUdp.write(&mut self.out);
                        self.push(false, false);
                    }
                }
                Some(n)
            }
            Parsed::Error {
                reply,
                consumed,
                noreply,
            } => {
                if !noreply {
                    reply.write(&mut self.out);
                }
                self.push(self.out.len() == start, false);
                Some(consumed)
            }
            Parsed::Incomplete(_) | Parsed::Close => None,
        }
    }

    /// A get-family request, one message per key as memcached's response objects, END on
    /// the last; each key runs through the one text execution as a get of that key alone.
    fn get(
        &mut self,
        keys: Keys<'_>,
        cas: bool,
        touch: Option<i32>,
        max: usize,
        sh: &Shared,
        c: &Counters,
    ) {
        let mut todo = keys.iter().peekable();
        while let Some(key) = todo.next() {
            let one = Request::Get {
                keys: Keys::new(key),
                cas,
                touch,
            };
            let next =
                protocol::text::execute_from(&one, 0, sh, c, &mut self.out, &mut self.reads, None);
            debug_assert!(matches!(next, Next::Continue));
            let last = todo.peek().is_none() || self.out.len() >= max;
            if !last {
                debug_assert!(self.out.ends_with(END));
                self.out.truncate(self.out.len() - END.len());
            }
            self.push(false, last);
            if last {
                return;
            }
        }
    }

    /// Send the replies, as memcached's transmit does: a message goes out in datagrams of
    /// its own numbering; an empty one is sent (a bare header, total 0) only when nothing was
    /// sent before it since the last write-out, and a skipped one never.
    fn transmit(&self, id: u16, dgram: &mut Vec<u8>, mut send: impl FnMut(&[u8])) {
        let mut start = 0;
        let mut sent_any = false;
        for m in &self.msgs {
            let body = &self.out[start..m.end];
            start = m.end;
            if body.is_empty() {
                if !m.skip && !sent_any {
                    frame(dgram, id, 0, 0, &[]);
                    send(dgram);
                    sent_any = true;
                }
            } else {
                let per = UDP_MAX_DATAGRAM - HEADER;
                // The total is a 16-bit field; REPLY_MAX keeps a message far below that.
                let total = body.len().div_ceil(per).min(usize::from(u16::MAX)) as u16;
                for (seq, chunk) in body.chunks(per).enumerate() {
                    frame(dgram, id, seq as u16, total, chunk);
                    send(dgram);
                }
                sent_any = true;
            }
            if m.flush {
                sent_any = false;
            }
        }
    }
}

fn frame(dgram: &mut Vec<u8>, id: u16, seq: u16, total: u16, payload: &[u8]) {
    dgram.clear();
    dgram.extend_from_slice(&id.to_be_bytes());
    dgram.extend_from_slice(&seq.to_be_bytes());
    dgram.extend_from_slice(&total.to_be_bytes());
    dgram.extend_from_slice(&[0, 0]);
    dgram.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Shared {
        Shared::new(Config::default())
    }

    fn dgram(id: u16, total: u16, body: &[u8]) -> Vec<u8> {
        let mut d = Vec::new();
        frame(&mut d, id, 0, total, body);
        d
    }

    /// The datagrams sent for one request datagram: (seq, total, payload).
    fn exchange(run: &mut Run, sh: &Shared, d: &[u8]) -> Option<Vec<(u16, u16, Vec<u8>)>> {
        let c = Counters::default();
        let id = run.datagram(d, sh, &c)?;
        let mut got = Vec::new();
        let mut buf = Vec::new();
        run.transmit(id, &mut buf, |d| {
            assert!(d.len() <= UDP_MAX_DATAGRAM);
            assert_eq!(u16::from_be_bytes([d[0], d[1]]), id);
            assert_eq!(&d[6..8], &[0, 0]);
            got.push((
                u16::from_be_bytes([d[2], d[3]]),
                u16::from_be_bytes([d[4], d[5]]),
                d[8..].to_vec(),
            ));
        });
        Some(got)
    }

    #[test]
    fn bad_datagrams_are_dropped() {
        let (sh, mut run) = (shared(), Run::default());
        for d in [&b""[..], b"\0\x01\0\0\0\x01\0", b"\0\x01\0\0\0\x01\0\0"] {
            assert!(exchange(&mut run, &sh, d).is_none(), "{d:?}");
        }
        assert!(exchange(&mut run, &sh, &dgram(1, 2, b"version\r\n")).is_none());
        assert!(exchange(&mut run, &sh, &dgram(1, 0, b"version\r\n")).is_none());
        // Cut short: no reply, and the next datagram starts afresh.
        assert_eq!(
            exchange(&mut run, &sh, &dgram(1, 1, b"set a 0 0 10\r\nabc")).unwrap(),
            vec![]
        );
        assert_eq!(
            exchange(&mut run, &sh, &dgram(1, 1, b"get a")).unwrap(),
            vec![]
        );
    }

    #[test]
    fn a_large_reply_is_cut_into_numbered_datagrams() {
        let (sh, mut run) = (shared(), Run::default());
        let mut set = b"set big 0 0 5000\r\n".to_vec();
        set.extend(std::iter::repeat_n(b'x', 5000));
        set.extend_from_slice(b"\r\n");
        assert_eq!(
            exchange(&mut run, &sh, &dgram(9, 1, &set)).unwrap(),
            vec![(0, 1, b"STORED\r\n".to_vec())]
        );
        let got = exchange(&mut run, &sh, &dgram(9, 1, b"get big\r\n")).unwrap();
        assert_eq!(
            got.iter()
                .map(|g| (g.0, g.1, g.2.len()))
                .collect::<Vec<_>>(),
            [(0, 4, 1392), (1, 4, 1392), (2, 4, 1392), (3, 4, 849)]
        );
        let whole: Vec<u8> = got.into_iter().flat_map(|g| g.2).collect();
        assert!(whole.starts_with(b"VALUE big 0 5000\r\nxxx") && whole.ends_with(b"x\r\nEND\r\n"));
    }

    #[test]
    fn messages_follow_memcacheds_response_objects() {
        let (sh, mut run) = (shared(), Run::default());
        exchange(&mut run, &sh, &dgram(1, 1, b"set s 0 0 1\r\na\r\n")).unwrap();
        let ex = |run: &mut Run, body: &[u8]| exchange(run, &sh, &dgram(3, 1, body)).unwrap();
        let v = |s: &str| (0u16, 1u16, s.as_bytes().to_vec());
        let empty = (0u16, 0u16, Vec::new());
        assert_eq!(
            ex(&mut run, b"get s nokey s\r\n"),
            [v("VALUE s 0 1\r\na\r\n"), v("VALUE s 0 1\r\na\r\nEND\r\n")]
        );
        assert_eq!(
            ex(&mut run, b"get s nokey\r\n"),
            [v("VALUE s 0 1\r\na\r\n"), v("END\r\n")]
        );
        assert_eq!(
            ex(&mut run, b"get nokey s\r\n"),
            [empty.clone(), v("VALUE s 0 1\r\na\r\nEND\r\n")]
        );
        assert_eq!(ex(&mut run, b"get nokey\r\n"), [v("END\r\n")]);
        assert_eq!(
            ex(&mut run, b"version\r\nget nokey nokey\r\n"),
            [v("VERSION 1.6.45\r\n"), v("END\r\n")]
        );
        assert_eq!(
            ex(&mut run, b"set x 0 0 1 noreply\r\na\r\nget nokey k2\r\n"),
            [empty.clone(), v("END\r\n")]
        );
        assert_eq!(
            ex(&mut run, b"get s\r\nquit\r\nversion\r\n"),
            [v("VALUE s 0 1\r\na\r\nEND\r\n"), empty]
        );
        assert_eq!(
            ex(&mut run, b"mn\r\nbogus\r\n"),
            [v("MN\r\n"), v("ERROR\r\n")]
        );
        // The first request's protocol is the datagram's: here the rest is a "line" "\x80\n".
        let noop = [
            0x80, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(
            ex(&mut run, &[&b"version\r\n"[..], &noop].concat()),
            // 1.6.40's parser: a line under 4 bytes with its newline is a format error.
            [
                v("VERSION 1.6.45\r\n"),
                v("CLIENT_ERROR bad command line format\r\n")
            ]
        );
        let got = ex(&mut run, &[&noop[..], b"version\r\n"].concat());
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].2[..2], [0x81, 0x0a]);
    }

    #[test]
    fn replies_stop_growing_at_reply_max() {
        let (sh, mut run) = (shared(), Run::default());
        let value = vec![b'v'; 500_000];
        let mut set = b"set k 0 0 500000\r\n".to_vec();
        set.extend_from_slice(&value);
        set.extend_from_slice(b"\r\n");
        let c = Counters::default();
        run.datagram(&dgram(1, 1, &set), &sh, &c).unwrap();
        let mut many = b"get".to_vec();
        for _ in 0..10 {
            many.extend_from_slice(b" k");
        }
        many.extend_from_slice(b"\r\nversion\r\n");
        run.datagram(&dgram(1, 1, &many), &sh, &c).unwrap();
        // Three values reach 1 MiB: the third carries END, the rest of the datagram is not run.
        assert_eq!(run.msgs.len(), 3);
        assert!(run.out.ends_with(b"\r\nEND\r\n"));
        assert!(run.out.len() < REPLY_MAX_MIN + 600_000);
    }
}
