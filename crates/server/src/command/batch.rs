//! The flash batch: a get whose value is on flash (answered `Later` by [`super::read::get`]),
//! the keys and requests gathered after it, and how a flash I/O thread (flashio.rs) answers
//! them all, in request order, with one read of every flashed record among them
//! ([`read::fill_holes`]). Written once for the three protocols: each fills in [`BatchGet`]
//! (its get, owned, how its replies are written, and which pipelined requests it takes along:
//! [`BatchGet::next`]); the batch is a [`Deferred`] the flash I/O pool runs.
//!
//! ```text
//!   text:   get f1 r2 f3 | get f4 | gets r5 | set ...    first f1, Key(r2) Key(f3), Get(f4) Get(r5)
//!   binary: GETQ f1 | GETK r2 | NOOP | SET ...            first f1, Get(r2), Reply(NOOP's)
//!   meta:   mg f1 v | mg r2 v | mn | ms ...               first f1, Get(r2), Reply(MN)
//!           (gathering stops at the first request that is not a plain get or no-op, at an
//!            incomplete one, at -R's budget or GATHER_KEYS gathered keys)
//!   run:    locate each key in order: a RAM hit or a miss is written at once, a flashed one
//!           leaves a hole (its place in the reply); then every hole's record is read together
//!           and its reply written in its place
//! ```
//!
//! The pause: before it locates each key after the first, the batch adds up its reply so far
//! and the lengths of the flashed records it located; at [`GET_PAUSE_BYTES`] it stops, before
//! that key's lookup (so no key is counted or marked fetched twice), and says how far it got:
//! at a `Key`, the request runs on from that key ([`Answered::Keys`]); at a gathered request,
//! the requests from there on are the connection's to parse again ([`Answered::Requests`]).

use super::read::{self, Flashed, Hit, Read};
use super::{Answer, Deferred, Lane};
use crate::admin::stats::Counters;
use crate::offload::mailbox::Answered;
use crate::Shared;

/// A multi-get pauses when this much output is pending, so `get k k k ...` over large values
/// never makes one request's reply grow without bound: what a client that never reads can pin
/// is this plus one value. The connection's read backpressure (conn.rs, `WBUF_HIGH`) uses the
/// same 256 KiB. It was 4 MiB: 20 never-reading clients then pinned 98 MB where memcached,
/// which holds references to items instead of copies, grew 37 MB (tests/test_pinned_memory.py).
/// A flash batch stops at the same size (the module docs' pause).
pub const GET_PAUSE_BYTES: usize = 256 * 1024;

/// The most keys gathered into one batch after its deferred get: one io_uring submission's
/// worth of reads (the store's batch.rs rings hold 64). A text multi-get's own keys are not
/// bounded by it (the pause bounds them).
pub(crate) const GATHER_KEYS: usize = 64;

/// One get of a batch, owned (the connection may close while the batch runs), as the
/// protocol that sent it answers it.
pub(crate) trait BatchGet: Send {
    /// How it reads: a plain get, or an mg without T, u or N (both [`Read::deferrable`]).
    const READ: Read;

    fn key(&self) -> &[u8];

    /// Runs `f` with the writer of this get's hit.
    fn with_hit<R>(&self, sh: &Shared, f: impl FnOnce(&mut dyn Hit) -> R) -> R;

    /// Writes a miss's reply, if the get has one.
    fn missed(&self, out: &mut Vec<u8>);

    /// The request at the front of `input`, if the batch can take it along (a get of this
    /// protocol it would defer too, or a no-op): what the batch answers for it and its
    /// length. None for any other request (it must run after the batch, on the worker) or
    /// one not complete yet.
    fn next(
        input: &[u8],
        limits: &mnemo_proto::text::Limits,
        sh: &Shared,
    ) -> Option<(Then<Self>, usize)>
    where
        Self: Sized;
}

/// What a batch answers after its deferred get, in request order.
#[derive(Debug)]
pub(crate) enum Then<G> {
    /// A later key of the deferred request itself (a text multi-get's).
    Key(G),
    /// A get pipelined after the deferred request.
    Get(G),
    /// A request pipelined after it whose reply is fixed (mn, a binary NOOP).
    Reply(Box<[u8]>),
}

/// A deferred get and what was gathered after it (the module docs).
#[derive(Debug)]
pub(crate) struct FlashBatch<G> {
    first: G,
    at: Flashed,
    /// The first get's index among its request's keys (a text multi-get deferred at a later
    /// key): where [`Answered::Keys`] counts from.
    from: usize,
    then: Vec<Then<G>>,
    /// Gets among `then` ([`Then::Get`]): what [`GATHER_KEYS`] bounds.
    gathered: usize,
}

impl<G: BatchGet> FlashBatch<G> {
    /// A batch of the get `first`, located on flash at `at`, key `from` of its request.
    pub fn new(first: G, at: Flashed, from: usize) -> Self {
        FlashBatch {
            first,
            at,
            from,
            then: Vec::new(),
            gathered: 0,
        }
    }

    /// Adds what comes next, in request order.
    pub fn push(&mut self, t: Then<G>) {
        self.gathered += matches!(t, Then::Get(_)) as usize;
        self.then.push(t);
    }

    /// On a flash I/O thread: the replies, as the worker would have written them, in request
    /// order, and how much of the requests they answer (the module docs' pause).
    pub fn run(self, sh: &Shared, c: &Counters) -> (Vec<u8>, Answered) {
        let mut out = Vec::new();
        let mut located = self.at.fref.record_len();
        let mut answered = Answered::All;
        let mut holes = vec![read::Hole {
            at: 0,
            key: self.first.key(),
            req: &self.first,
            flashed: self.at,
        }];
        // Keys of the deferred request and requests gathered, before the current item.
        let (mut keys, mut requests) = (1, 1);
        for t in &self.then {
            let g = match t {
                Then::Reply(r) => {
                    out.extend_from_slice(r);
                    requests += 1;
                    continue;
                }
                Then::Key(_) | Then::Get(_) if out.len() + located >= GET_PAUSE_BYTES => {
                    answered = match t {
                        Then::Key(_) => Answered::Keys(self.from + keys),
                        _ => Answered::Requests(requests),
                    };
                    break;
                }
                Then::Key(g) => {
                    keys += 1;
                    g
                }
                Then::Get(g) => {
                    requests += 1;
                    g
                }
            };
            let found = g.with_hit(sh, |hit| {
                read::locate(g.key(), G::READ, hit, sh, c, &mut out)
            });
            match found {
                Answer::Now(found) if found.is_hit() => {}
                Answer::Now(_) => g.missed(&mut out),
                Answer::Later(flashed) => {
                    located += flashed.fref.record_len();
                    holes.push(read::Hole {
                        at: out.len(),
                        key: g.key(),
                        req: g,
                        flashed,
                    });
                }
            }
        }
        let reply = read::fill_holes(out, holes, sh, |key, g, at, v, reply| {
            let found = g.with_hit(sh, |hit| {
                read::finish_read(key, G::READ, at, v, hit, sh, c, reply)
            });
            if !found.is_hit() {
                g.missed(reply);
            }
        });
        (reply, answered)
    }
}

impl<G: BatchGet + std::fmt::Debug + 'static> Deferred for FlashBatch<G> {
    fn lane(&self) -> Lane {
        Lane::FlashIo
    }

    fn run(
        self: Box<Self>,
        sh: &Shared,
        c: &Counters,
        _claim: &dyn Fn() -> bool,
    ) -> (Vec<u8>, Answered) {
        (*self).run(sh, c)
    }

    /// The requests pipelined after the deferred get, taken into its batch so that their
    /// flashed reads go together (conn.rs), as far as [`BatchGet::next`] takes them: gathering
    /// stops at the first it refuses, when `budget` (-R) is spent, or at [`GATHER_KEYS`] keys.
    /// Each request taken has its length pushed on `taken` (the connection rewinds over those
    /// the batch leaves unanswered).
    fn gather(
        &mut self,
        input: &[u8],
        limits: &mnemo_proto::text::Limits,
        sh: &Shared,
        budget: &mut usize,
        taken: &mut Vec<usize>,
    ) {
        let mut used = 0;
        // The deferred get is one of the batch's GATHER_KEYS.
        while *budget > 0 && self.gathered + 1 < GATHER_KEYS {
            let Some((t, n)) = G::next(&input[used..], limits, sh) else {
                break;
            };
            self.push(t);
            used += n;
            taken.push(n);
            *budget -= 1;
        }
    }
}
