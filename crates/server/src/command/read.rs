//! The read commands: get, gets, gat, gats, touch, meta mg, and binary GET/GETK/GAT/TOUCH.
//!
//! ```text
//!   get(key, Read, hit writer)
//!     count the command (cmd_get or cmd_touch)
//!     store: get | get_and_touch | touch + peek | peek      (the shard lock is held from here ...
//!       hit -> writer.head(item): the protocol's header, and the bytes after the value
//!              value: >= DIRECT_MIN and a Direct -> one nonblocking writev/vmsplice
//!                     otherwise                  -> copied into the output  (... to here)
//!       on flash, for a connection (a Direct) and get/gets/mg without T, u, N:
//!              in a write buffer or the page cache (RWF_NOWAIT) -> served now, as a hit
//!              else -> Answer::Later(Flashed): nothing written, nothing but cmd_get counted; the
//!                 protocol makes a Pending::FlashRead and the flash I/O pool (flashio.rs)
//!                 runs `fill_holes` + `finish_read` (read, verify, write the hit, count)
//!       on flash otherwise (UDP, gat/touch, mg T/u/N, the I/O pool's own reads):
//!              read synchronously by the store (no lock held)
//!     mg N on a miss: add a placeholder, the writer's `vivified` answers it
//!     count the outcome (hits, misses, expired, flushed) and `stats detail`
//!   -> Answer::Now(Sent)
//! ```

use mnemo_store::{
    FlashRef, FlashReject, FlashValue, Item, Located, Lookup, Mode, Pages, StoreOutcome, Time,
};

use super::Answer;
use crate::admin::detail::Event;
use crate::admin::stats::{bump, Counters};
use crate::Shared;

/// Values at least this long go from the segment straight to the socket (see [`Direct`]).
pub const DIRECT_MIN: usize = 32 * 1024;

/// A way to hand a large value to the socket without first copying it into the output buffer.
///
/// Without it a 100 KB get costs two copies (segment -> output buffer -> kernel); memcached
/// costs one, because its reply holds a reference to the item. Here the value is written with
/// one writev of [unsent output, value, tail] while the store still has it (the shard lock
/// is held for that nonblocking call: the same bytes would otherwise be copied under it), and
/// only what the socket did not take is copied. Small values never take this path, so a
/// pipelined batch of ordinary gets is still one write. The bytes that follow the value (its
/// `\r\n`, and `END\r\n` after the last key) go in the same writev: sent later on their own they
/// cost a second syscall and a second TCP segment per get (measured: 1.9 writes per 100 KB get).
/// With `--zero-copy` (`auto`, the default, when the worker measures it faster) a TCP connection skips
/// even the kernel's copy: the value's pages are lent to the socket (splice.rs), still as one
/// reply into the socket.
pub trait Direct {
    /// Appends `value` and `tail` to the logical output `out` (whose first bytes may already
    /// be written), writing as much as the socket takes now. Returns true if everything in
    /// `out` before the value was written (so `out` was emptied).
    ///
    /// `pages` (the item's, when it has pages of its own) may be lent to the kernel instead of
    /// copying `value` (splice.rs); `tail` is static so that its pages can be too.
    fn send_value(
        &mut self,
        out: &mut Vec<u8>,
        value: &[u8],
        pages: Option<Pages<'_>>,
        tail: &'static [u8],
    ) -> bool;
}

/// How a read looks the item up and what it counts.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Read {
    /// get, gets, binary GET/GETK: cmd_get, get_hits/get_misses, `stats detail` get.
    Get,
    /// gat, gats, binary GAT/GATK/TOUCH: the item's expiry becomes this; cmd_touch,
    /// touch_hits/touch_misses, `stats detail` get.
    Touch(Time),
    /// mg: cmd_get (and cmd_touch with T), get_hits/get_misses, no `stats detail` (memcached
    /// 1.6.18 records none for meta).
    Meta {
        /// T: the new expiry.
        touch: Option<Time>,
        /// u: the read does not count as one (the item stays unfetched: a later h says h0).
        peek: bool,
        /// N: on a miss, create an empty placeholder with this expiry and hand it out as won;
        /// with E (memcached 1.6.27) the placeholder takes that CAS.
        vivify: Option<(Time, Option<u64>)>,
    },
}

impl Read {
    /// Whether [`get`] may answer this read `Later` when its value is on flash: a get, or an
    /// mg without T, u or N (those read synchronously, their lookup and change in one step).
    pub(crate) fn deferrable(self) -> bool {
        matches!(
            self,
            Read::Get
                | Read::Meta {
                    touch: None,
                    peek: false,
                    vivify: None
                }
        )
    }
}

/// The protocol's side of a hit: what it writes around the value.
pub(crate) trait Hit {
    /// Writes what precedes a hit's value into `out`; returns the bytes that follow the value,
    /// or None when the reply carries no value (mg without v).
    fn head(&mut self, it: &Item<'_>, out: &mut Vec<u8>) -> Option<&'static [u8]>;

    /// mg N: the placeholder this client created and won (a read with `vivify` only).
    fn vivified(&mut self, _it: &Item<'_>, _out: &mut Vec<u8>) {}
}

/// What a read did.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sent {
    /// mg N's placeholder counts as the miss it was but is answered as a hit: Hit.
    pub found: Lookup<()>,
    /// A direct send emptied the output: every earlier reply is on the wire.
    pub flushed: bool,
}

/// One key's read: the store call, the hit written by `hit` (its value copied or sent
/// directly), every counter and `stats detail`.
///
/// Forced inline into each protocol's get loop, with its hit writer (below): as a call of its
/// own it cost about 50 instructions a key (its nine arguments and its result, callgrind). At
/// 9efb43a forcing it was measured worse, but then the writer itself had gone out of line.
#[inline(always)]
// The braces around each store call's closure hold its #[inline(always)] (see `write`).
#[allow(unused_braces)]
pub(crate) fn get<H: Hit>(
    key: &[u8],
    read: Read,
    hit: &mut H,
    sh: &Shared,
    c: &Counters,
    out: &mut Vec<u8>,
    // Two lifetimes: a caller lends its connection's Direct once per key.
    mut direct: Option<&mut (dyn Direct + '_)>,
) -> Answer<Sent, Flashed> {
    let now = sh.clock.now();
    let mut flushed = false;
    // Only a connection lends a Direct, and only a connection can take an answer later (the
    // I/O pool itself, UDP and the unit tests read a flashed value here, synchronously).
    // Without a flash tier the store's plain get is used: its two-halves form cost 25-40
    // instructions a get (callgrind, bench/instructions.sh).
    let defer = direct.is_some() && sh.store.has_flash();
    // Forced inline (an attribute a closure takes in this position only): the store calls it
    // from six sites below, and a few instructions more in its body made the build call it
    // out of line, about 30 instructions a get hit (callgrind, bench/instructions.sh). Each
    // store call's own closure around it is forced too: the store calls that one twice, for
    // an item in RAM and for one read from flash, and two calls are enough for the build to
    // keep it out of line (60 instructions a get hit).
    let mut write = {
        #[inline(always)]
        |it: Item<'_>, out: &mut Vec<u8>| {
            let Some(tail) = hit.head(&it, out) else {
                return;
            };
            match direct.as_deref_mut() {
                Some(d) if it.value.len() >= DIRECT_MIN => {
                    flushed = d.send_value(out, it.value, it.pages, tail);
                }
                _ => {
                    out.extend_from_slice(it.value);
                    // `\r\n` (every key of a text multi-get but the last, every mg value) as a
                    // fixed-size copy: a slice of run-time length is a memcpy call per key.
                    match <&[u8; 2]>::try_from(tail) {
                        Ok(crlf) => out.extend_from_slice(crlf),
                        Err(_) => out.extend_from_slice(tail),
                    }
                }
            }
        }
    };
    let found = match read {
        Read::Get => {
            bump(&c.cmd_get, 1);
            if defer {
                match sh.store.get_located(key, now, {
                    #[inline(always)]
                    |it| write(it, out)
                }) {
                    Located::Done(l) => l,
                    Located::Flash { fref, fetched, f } => {
                        match cached(key, fref, fetched, now, sh, f) {
                            Some(l) => l,
                            None => return Answer::Later(Flashed { fref, fetched }),
                        }
                    }
                }
            } else {
                sh.store.get(key, now, {
                    #[inline(always)]
                    |it| write(it, out)
                })
            }
        }
        Read::Touch(exp) => {
            bump(&c.cmd_touch, 1);
            sh.store.get_and_touch(key, exp, now, {
                #[inline(always)]
                |it| write(it, out)
            })
        }
        Read::Meta {
            touch,
            peek,
            vivify,
        } => {
            bump(&c.cmd_get, 1);
            if touch.is_some() {
                bump(&c.cmd_touch, 1);
            }
            let found = match (touch, peek) {
                (Some(exp), false) => sh.store.get_and_touch(key, exp, now, {
                    #[inline(always)]
                    |it| write(it, out)
                }),
                (Some(exp), true) => {
                    sh.store.touch(key, exp, now);
                    sh.store.peek(key, now, {
                        #[inline(always)]
                        |it| write(it, out)
                    })
                }
                (None, false) if defer && vivify.is_none() => {
                    match sh.store.get_located(key, now, {
                        #[inline(always)]
                        |it| write(it, out)
                    }) {
                        Located::Done(l) => l,
                        Located::Flash { fref, fetched, f } => {
                            match cached(key, fref, fetched, now, sh, f) {
                                Some(l) => l,
                                None => return Answer::Later(Flashed { fref, fetched }),
                            }
                        }
                    }
                }
                (None, false) => sh.store.get(key, now, {
                    #[inline(always)]
                    |it| write(it, out)
                }),
                (None, true) => sh.store.peek(key, now, {
                    #[inline(always)]
                    |it| write(it, out)
                }),
            };
            match (found.is_hit(), vivify) {
                (false, Some((exp, cas_in))) => {
                    // Vivify: an empty placeholder, and this client holds the win token;
                    // everyone else sees the placeholder with Z until the winner stores the
                    // real value. It counts as the miss it was.
                    if let Ok(StoreOutcome::Stored { cas }) =
                        sh.store.store_cas(Mode::Add, key, 0, exp, b"", now, cas_in)
                    {
                        sh.marks.set(
                            key,
                            cas,
                            crate::marks::Mark {
                                stale: false,
                                win_sent: true,
                            },
                        );
                        hit.vivified(
                            &Item {
                                flags: 0,
                                value: b"",
                                cas,
                                exp,
                                fetched: false,
                                pages: None,
                            },
                            out,
                        );
                        bump(&c.get_misses, 1);
                        return Answer::Now(Sent {
                            found: Lookup::Hit(()),
                            flushed: false,
                        });
                    }
                    // Someone created it first: read theirs.
                    sh.store.get(key, now, {
                        #[inline(always)]
                        |it| write(it, out)
                    })
                }
                _ => found,
            }
        }
    };
    count(key, read, found, sh, c);
    Answer::Now(Sent { found, flushed })
}

/// A touch whose reply carries the item's head but no value (binary TOUCH): `head` writes it.
/// It always answers now (a touch reads no value, so never one on flash); counted as [`get`]
/// counts a `Read::Touch`.
pub(crate) fn touch_head(
    key: &[u8],
    exp: Time,
    head: impl FnOnce(&Item<'_>, &mut Vec<u8>),
    sh: &Shared,
    c: &Counters,
    out: &mut Vec<u8>,
) -> Lookup<()> {
    bump(&c.cmd_touch, 1);
    let found = sh
        .store
        .get_and_touch(key, exp, sh.clock.now(), |it| head(&it, out));
    count(key, Read::Touch(exp), found, sh, c);
    found
}

/// A flashed value that needs no disk I/O (in a write buffer or the page cache) is served on
/// the event loop at once: handing it to the I/O pool would cost two thread wake-ups for a
/// copy. None: the read would wait for the disk; it goes to the I/O pool.
#[cold]
#[inline(never)]
fn cached<F: FnOnce(Item<'_>)>(
    key: &[u8],
    fref: FlashRef,
    fetched: bool,
    now: Time,
    sh: &Shared,
    f: F,
) -> Option<Lookup<()>> {
    let v = sh.store.read_flash_cached(&fref, key)?;
    Some(sh.store.finish_get(key, fref, fetched, v, now, f))
}

/// A read's outcome in the counters (hits, misses, expired, flushed) and `stats detail`.
#[inline(always)]
fn count(key: &[u8], read: Read, found: Lookup<()>, sh: &Shared, c: &Counters) {
    let (hits, misses) = match read {
        Read::Touch(_) => (&c.touch_hits, &c.touch_misses),
        Read::Get | Read::Meta { .. } => (&c.get_hits, &c.get_misses),
    };
    match found {
        Lookup::Hit(()) => bump(hits, 1),
        Lookup::Miss => bump(misses, 1),
        Lookup::Expired => {
            bump(misses, 1);
            bump(&c.get_expired, 1);
        }
        Lookup::Flushed => {
            bump(misses, 1);
            bump(&c.get_flushed, 1);
        }
    }
    if !matches!(read, Read::Meta { .. }) {
        sh.detail.record(
            key,
            sh.config.prefix_delimiter,
            Event::Get {
                hit: found.is_hit(),
            },
        );
    }
    // `watch fetchers`: one relaxed load and a branch while nobody watches (watch.rs).
    if sh.watch.wants(crate::watch::FETCHERS) {
        crate::watch::fetched_lookup(sh, key, found);
    }
}

/// A read whose item [`get`] found on flash and left for later: where the record is, and
/// whether the item had been fetched before (the lookup marked it fetched).
#[derive(Debug)]
pub(crate) struct Flashed {
    pub fref: FlashRef,
    pub fetched: bool,
}

/// A get's lookup, on a flash I/O thread for the requests gathered after a deferred one (a
/// text multi-get's later keys, a binary or meta pipeline's later gets): a RAM hit is written
/// by `hit` and counted at once (`Now`); a flashed item's location is handed back (`Later`),
/// for [`finish_read`] once its record is read (`cmd_get` is counted here either way). `read`
/// is `Get` or a deferrable `Meta` (no T, u or N): what [`get`] would have answered `Later`.
pub(crate) fn locate<H: Hit + ?Sized>(
    key: &[u8],
    read: Read,
    hit: &mut H,
    sh: &Shared,
    c: &Counters,
    out: &mut Vec<u8>,
) -> Answer<Lookup<()>, Flashed> {
    debug_assert!(read.deferrable());
    bump(&c.cmd_get, 1);
    let write = |it: Item<'_>| {
        if let Some(tail) = hit.head(&it, out) {
            out.extend_from_slice(it.value);
            out.extend_from_slice(tail);
        }
    };
    match sh.store.get_located(key, sh.clock.now(), write) {
        Located::Done(found) => {
            count(key, read, found, sh, c);
            Answer::Now(found)
        }
        Located::Flash { fref, fetched, .. } => Answer::Later(Flashed { fref, fetched }),
    }
}

/// The rest of a read [`get`] answered `Later` (an I/O pool thread, flashio.rs), its record
/// read ([`fill_holes`] reads a job's records together): the record verified, the hit written
/// by `hit`, the outcome counted (its `cmd_get` was counted by the lookup). A record gone,
/// recycled or damaged is a miss (the store counts `miss_from_extstore` or
/// `badcrc_from_extstore` and drops the entry).
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish_read<H: Hit + ?Sized>(
    key: &[u8],
    read: Read,
    at: Flashed,
    v: Result<FlashValue, FlashReject>,
    hit: &mut H,
    sh: &Shared,
    c: &Counters,
    out: &mut Vec<u8>,
) -> Lookup<()> {
    let found = sh
        .store
        .finish_get(key, at.fref, at.fetched, v, sh.clock.now(), |it| {
            if let Some(tail) = hit.head(&it, out) {
                out.extend_from_slice(it.value);
                out.extend_from_slice(tail);
            }
        });
    count(key, read, found, sh, c);
    found
}

/// A flashed record's place in a batch's reply (a text multi-get, a binary or meta pipeline):
/// the offset in the reply so far where its reply goes, its key, what the protocol needs to
/// write that reply, and where the record is.
pub(crate) struct Hole<'k, T> {
    pub at: usize,
    pub key: &'k [u8],
    pub req: T,
    pub flashed: Flashed,
}

/// On a flash I/O thread: every hole's record read together (`Store::read_flash_many`: one
/// io_uring submission, not a pread each), then the reply: `out`'s bytes with each hole's
/// reply, written by `fill` (which finishes the read: [`finish_read`]), in its place.
pub(crate) fn fill_holes<T>(
    out: Vec<u8>,
    holes: Vec<Hole<'_, T>>,
    sh: &Shared,
    mut fill: impl FnMut(&[u8], T, Flashed, Result<FlashValue, FlashReject>, &mut Vec<u8>),
) -> Vec<u8> {
    let reads = sh.store.read_flash_many(
        &holes
            .iter()
            .map(|h| (&h.flashed.fref, h.key))
            .collect::<Vec<_>>(),
    );
    let mut reply = Vec::with_capacity(
        out.len()
            + reads
                .iter()
                .map(|r| r.as_ref().map_or(0, |v| v.value().len() + 64))
                .sum::<usize>()
            + 5,
    );
    let mut done = 0;
    for (h, v) in holes.into_iter().zip(reads) {
        reply.extend_from_slice(&out[done..h.at]);
        done = h.at;
        fill(h.key, h.req, h.flashed, v, &mut reply);
    }
    reply.extend_from_slice(&out[done..]);
    reply
}

/// What `me` shows of an item, as read (meta.rs encodes it).
pub(crate) struct Details {
    pub exp: Time,
    pub cas: u64,
    /// Whether it had been fetched before this read.
    pub fetched: bool,
    pub flags: u32,
    pub size: usize,
    /// The time of the read (the TTL left counts from it).
    pub now: Time,
}

/// `me`: an item's details, read as a get reads it. Counted in `cmd_meta` only: memcached
/// 1.6.18's cmd_meta counts `me` and no other meta command, and `me` counts as no get.
pub(crate) fn details(key: &[u8], sh: &Shared, c: &Counters) -> Answer<Option<Details>> {
    bump(&c.cmd_meta, 1);
    let now = sh.clock.now();
    let found = sh.store.get(key, now, |it| Details {
        exp: it.exp,
        cas: it.cas,
        fetched: it.fetched,
        flags: it.flags,
        size: it.value.len(),
        now,
    });
    Answer::Now(found.hit())
}

/// The text `touch` command: a new expiry, no value, no `stats detail` (memcached's).
pub(crate) fn touch(key: &[u8], exp: Time, sh: &Shared, c: &Counters) -> Answer<bool> {
    bump(&c.cmd_touch, 1);
    if sh.watch.wants(crate::watch::FETCHERS) {
        crate::watch::looked_up(sh, key);
    }
    let hit = sh.store.touch(key, exp, sh.clock.now());
    bump(if hit { &c.touch_hits } else { &c.touch_misses }, 1);
    Answer::Now(hit)
}
