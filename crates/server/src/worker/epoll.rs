//! The epoll loop (`--io-loop=epoll`, and the fallback): mio over edge-triggered epoll. The
//! kernel reports a socket readable or writable; the connection's turn then reads and writes
//! the socket itself (`Io for Stream`, conn/stream.rs). TLS connections (-Z) run only here.

use std::time::Duration;

use mio::{Events, Interest, Poll, Token, Waker};

use super::serve::{Slots, Transport};
use crate::conn::Stream;

/// The token of the accept thread's waker (a slot index never reaches it).
const WAKER: Token = Token(usize::MAX);

pub struct Epoll {
    poll: Poll,
    events: Events,
}

impl Epoll {
    /// The loop, and the waker the accept thread uses to announce new sockets.
    pub fn new() -> std::io::Result<(Epoll, Waker)> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        Ok((
            Epoll {
                poll,
                events: Events::with_capacity(1024),
            },
            waker,
        ))
    }
}

impl Transport for Epoll {
    type Io = Stream;

    fn attach(&mut self, mut sock: Stream, i: usize, _gen: u32) -> std::io::Result<Stream> {
        self.poll.registry().register(
            sock.source(),
            Token(i),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        Ok(sock)
    }

    // Inlined into the loop's round, as the poll was before the loops shared one (a call's
    // saved registers per iteration).
    #[inline]
    fn poll(&mut self, wait: Option<Duration>, slots: &mut Slots<Stream>) -> bool {
        if let Err(e) = self.poll.poll(&mut self.events, wait) {
            if e.kind() == std::io::ErrorKind::Interrupted {
                return false;
            }
            eprintln!("mnemod: worker poll failed: {e}");
            std::process::exit(1);
        }
        let mut woken = false;
        for ev in self.events.iter() {
            if ev.token() == WAKER {
                woken = true;
                continue;
            }
            let i = ev.token().0;
            if ev.is_read_closed() {
                if let Some(conn) = slots.conn_mut(i) {
                    conn.peer_closed();
                }
            }
            slots.mark(i, ev.is_readable());
        }
        woken
    }

    /// Nothing waits in the loop: a closed connection is unwatched and done at once.
    #[inline]
    fn settle(&mut self, _i: usize, _gen: u32, sock: &mut Stream, closed: bool) -> bool {
        if closed {
            let _ = self.poll.registry().deregister(sock.source());
        }
        closed
    }
}
