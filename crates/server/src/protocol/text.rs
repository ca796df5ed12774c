//! The text protocol's commands: a parsed text request is executed (the item commands through
//! the command layer, crate::command) and its reply appended to the connection's output.

pub mod largeset;

use std::sync::atomic::Ordering::Relaxed;

use mnemo_proto::reply::{line, number_line, value_header};
use mnemo_proto::text::{Keys, Request, ShutdownMode, StoreKind};
use mnemo_proto::ErrorReply;
use mnemo_store::Mode;

use crate::admin::stats::{self, Counters};
use crate::command::arith::{self, Counted};
use crate::command::batch::{self, BatchGet, FlashBatch, Then};
use crate::command::{delete, flush, read, write, write::Stored, Answer, Proto};
use crate::Shared;

use crate::command::Next;

/// Append a reply line unless the client asked for none.
#[inline(always)]
fn reply(out: &mut Vec<u8>, noreply: bool, text: &[u8]) {
    if !noreply {
        line(out, text);
    }
}

fn error(out: &mut Vec<u8>, noreply: bool, e: ErrorReply) {
    if !noreply {
        e.write(out);
    }
}

use crate::command::read::Direct;

/// Keys whose values sit in this connection's unsent output. memcached's replies hold a
/// reference to such items, and an incr/decr that shrinks a referenced number stores a new
/// item of the new length instead of rewriting it in place with space padding; tracking
/// the same fact reproduces its bytes exactly.
#[derive(Default)]
pub struct PendingReads(Vec<u64>);

impl PendingReads {
    fn key_hash(key: &[u8]) -> u64 {
        // FNV-1a: a collision only changes whether a shrunken number is padded.
        key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    fn add(&mut self, key: &[u8]) {
        self.0.push(Self::key_hash(key));
    }

    fn holds(&self, key: &[u8]) -> bool {
        !self.0.is_empty() && self.0.contains(&Self::key_hash(key))
    }

    /// The output was written: no reply references an item any more.
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

pub(crate) fn mode_of(kind: StoreKind, cas: u64) -> Mode {
    match kind {
        StoreKind::Set => Mode::Set,
        StoreKind::Add => Mode::Add,
        StoreKind::Replace => Mode::Replace,
        StoreKind::Append => Mode::Append,
        StoreKind::Prepend => Mode::Prepend,
        StoreKind::Cas => Mode::Cas(cas),
    }
}

/// A storage command's reply for the command layer's answer; shared by the buffered path and
/// values received in place (protocol/text/largeset.rs).
pub(crate) fn store_reply(answer: Answer<Stored>, noreply: bool, out: &mut Vec<u8>) {
    // One reply call per arm: each line is then a constant (a memcpy call per set where the
    // line was chosen first: 14 instructions, callgrind).
    match answer {
        Answer::Now(Stored::Stored { .. }) => reply(out, noreply, b"STORED"),
        Answer::Now(Stored::NotStored) => reply(out, noreply, b"NOT_STORED"),
        Answer::Now(Stored::Exists) => reply(out, noreply, b"EXISTS"),
        Answer::Now(Stored::NotFound) => reply(out, noreply, b"NOT_FOUND"),
        Answer::Now(Stored::TooLarge) => error(out, noreply, ErrorReply::TooLarge),
        Answer::Now(Stored::NoMemory) => error(out, noreply, ErrorReply::OutOfMemory),
        Answer::Later(p) => match p {},
    }
}

/// Execute one text request, its reply appended to `out`; `skip`: the first keys of a
/// multi-get already answered (Next::Resume).
pub fn execute_from(
    // By reference: a Request is 400+ bytes (a meta command's decoded key is inline), and
    // passing it by value cost a memcpy of all of it per request.
    req: &Request<'_>,
    skip: usize,
    sh: &Shared,
    c: &Counters,
    out: &mut Vec<u8>,
    reads: &mut PendingReads,
    direct: Option<&mut dyn Direct>,
) -> Next {
    match *req {
        Request::Get { keys, cas, touch } => get(keys, skip, cas, touch, sh, c, out, reads, direct),
        Request::Store {
            kind,
            key,
            flags,
            exptime,
            data,
            cas,
            noreply,
        } => {
            let exp = sh.clock.item_expiry(exptime);
            let s = write::Store {
                mode: mode_of(kind, cas),
                key,
                flags,
                exp,
                data,
                stale_if_older: false,
                drop_on_failure: false,
            };
            store_reply(write::store(&s, Proto::Text, sh, c), noreply, out);
            Next::Continue
        }
        Request::TooLarge {
            kind,
            key,
            swallow,
            noreply,
        } => {
            // Answered once the data is swallowed (Next::Swallow).
            match write::refused_too_large(key, mode_of(kind, 0), Proto::Text, sh, c) {
                Answer::Now(_) => {
                    Next::Swallow(swallow, (!noreply).then_some(ErrorReply::TooLarge))
                }
                Answer::Later(p) => match p {},
            }
        }
        Request::Delete { key, noreply } => {
            let d = delete::Delete {
                key,
                cas: None,
                invalidate: None,
            };
            match delete::delete(&d, Proto::Text, sh, c) {
                Answer::Now(delete::Deleted::Deleted) => reply(out, noreply, b"DELETED"),
                Answer::Now(_) => reply(out, noreply, b"NOT_FOUND"),
                Answer::Later(p) => match p {},
            }
            Next::Continue
        }
        Request::Delta {
            key,
            incr,
            delta,
            noreply,
        } => {
            // A number shrunk while a reply still holds the item is not padded (PendingReads).
            let d = arith::Delta {
                key,
                incr,
                by: delta,
                pad: !reads.holds(key),
                cas: None,
                create: None,
                touch: None,
                read_exp: false,
            };
            match arith::delta(&d, Proto::Text, sh, c) {
                Answer::Now(Counted::Value { n, .. } | Counted::Created { n, .. }) => {
                    if !noreply {
                        number_line(out, n);
                    }
                }
                Answer::Now(Counted::NonNumeric) => error(out, noreply, ErrorReply::NonNumeric),
                // Without a CAS or a create, a delta answers a number, NonNumeric or NotFound.
                Answer::Now(_) => reply(out, noreply, b"NOT_FOUND"),
                Answer::Later(p) => match p {},
            }
            Next::Continue
        }
        Request::Touch {
            key,
            exptime,
            noreply,
        } => {
            match read::touch(key, sh.clock.item_expiry(exptime), sh, c) {
                Answer::Now(true) => reply(out, noreply, b"TOUCHED"),
                Answer::Now(false) => reply(out, noreply, b"NOT_FOUND"),
                Answer::Later(p) => match p {},
            }
            Next::Continue
        }
        Request::FlushAll { delay, noreply } => {
            match flush::flush_all(i64::from(delay), sh, c) {
                Answer::Now(true) => reply(out, noreply, b"OK"),
                Answer::Now(false) => error(out, noreply, ErrorReply::FlushDisabled),
                Answer::Later(p) => match p {},
            }
            Next::Continue
        }
        Request::Version => {
            out.extend_from_slice(b"VERSION ");
            line(out, crate::config::PROTOCOL_VERSION.as_bytes());
            Next::Continue
        }
        Request::RefreshCerts { noreply } => {
            // memcached sends its error lines even with noreply (they bypass out_string).
            match &sh.config.tls {
                None => out.extend_from_slice(b"Error TLS not enabled\r\n"),
                Some(tls) => match tls.refresh(sh.clock.now()) {
                    Ok(()) => reply(out, noreply, b"OK"),
                    Err(e) => line(out, e.to_string().as_bytes()),
                },
            }
            Next::Continue
        }
        Request::Meta(ref m) => crate::protocol::meta::execute(m, sh, c, out, direct),
        Request::MetaDebug { key } => crate::protocol::meta::debug(key, sh, c, out),
        Request::CacheMemlimit { megabytes, noreply } => {
            let text: &[u8] = if megabytes < 8 {
                b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m"
            } else if megabytes > 1_000_000_000 {
                b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes"
            } else {
                sh.store.set_mem_limit((megabytes as usize) << 20);
                b"OK"
            };
            reply(out, noreply, text);
            Next::Continue
        }
        Request::MetaNoop => {
            line(out, b"MN");
            Next::Flush
        }
        Request::Verbosity { level, noreply } => {
            sh.verbosity
                .store(level.min(u32::from(crate::MAX_VERBOSITY)) as u8, Relaxed);
            reply(out, noreply, b"OK");
            Next::Continue
        }
        Request::Quit => Next::Close,
        Request::Shutdown { mode } => {
            if !sh.config.enable_shutdown {
                error(out, false, ErrorReply::ShutdownDisabled);
                return Next::Continue;
            }
            match mode {
                ShutdownMode::Invalid => {
                    error(out, false, ErrorReply::ShutdownMode);
                    Next::Continue
                }
                ShutdownMode::Immediate | ShutdownMode::Graceful => Next::Shutdown,
            }
        }
        Request::Stats { args } => {
            stats_command(args, sh, out);
            Next::Continue
        }
        Request::LruCrawler { args } => match crate::admin::crawler::command(args, sh, out) {
            Some(dump) => Next::Metadump(dump),
            None => Next::Continue,
        },
        Request::Extstore { args, noreply } => {
            crate::admin::extstore::command(args, noreply, sh, out);
            Next::Continue
        }
        Request::SlabsReassign { src, dst } => {
            crate::admin::crawler::slabs_reassign(src, dst, sh, out);
            Next::Continue
        }
        Request::SlabsAutomove { setting, noreply } => {
            crate::admin::crawler::slabs_automove(setting, noreply, sh, out);
            Next::Continue
        }
        Request::Fget { filter, args, keys } => {
            match crate::fget::execute(filter, args, keys, sh, out) {
                Answer::Now(()) => Next::Continue,
                Answer::Later(job) => Next::Later(job),
            }
        }
        Request::FgetArgsTooLong { swallow } => {
            Next::Swallow(swallow, Some(ErrorReply::FilterArgsTooLong))
        }
        Request::BadStoreLine {
            swallow,
            reply,
            noreply,
        } => Next::Swallow(swallow, (!noreply).then_some(reply)),
        Request::Watch { args } => match crate::watch::subscribe(args, sh, out) {
            Some(h) => Next::Watch(h),
            None => Next::Continue,
        },
    }
}

/// -Y: before authentication only a storage command carrying "user password" is accepted
/// (memcached's convention); everything else is refused.
pub fn unauthenticated(
    req: &Request<'_>,
    sh: &Shared,
    authed: &mut bool,
    out: &mut Vec<u8>,
) -> Next {
    match *req {
        Request::Store { data, .. } => {
            let mut parts = data.splitn(2, |&b| b == b' ');
            let (user, pass) = (parts.next().unwrap_or(&[]), parts.next().unwrap_or(&[]));
            let ok = sh.credentials.read().check(user, pass);
            sh.count_auth(ok);
            if ok {
                *authed = true;
                line(out, b"STORED");
            } else {
                line(out, b"CLIENT_ERROR authentication failure");
            }
            Next::Continue
        }
        // Data blocks refused before they were read are swallowed all the same: the connection
        // must stay in sync whether or not it has authenticated.
        Request::TooLarge { swallow, .. }
        | Request::FgetArgsTooLong { swallow }
        | Request::BadStoreLine { swallow, .. } => {
            Next::Swallow(swallow, Some(ErrorReply::Unauthenticated))
        }
        // memcached refuses even `quit` before authentication.
        _ => {
            ErrorReply::Unauthenticated.write(out);
            Next::Continue
        }
    }
}

/// A text get's hit: `VALUE key flags len [cas]`, and after the value its `\r\n` (and, for the
/// last key, `END\r\n`, so that a directly sent value carries it in the same write).
struct TextHit<'k> {
    key: &'k [u8],
    cas: bool,
    last: bool,
}

impl read::Hit for TextHit<'_> {
    #[inline]
    fn head(&mut self, it: &mnemo_store::Item<'_>, out: &mut Vec<u8>) -> Option<&'static [u8]> {
        value_header(
            out,
            self.key,
            it.flags,
            it.value.len(),
            self.cas.then_some(it.cas),
        );
        Some(if self.last { b"\r\nEND\r\n" } else { b"\r\n" })
    }
}

#[allow(clippy::too_many_arguments)]
fn get(
    keys: Keys<'_>,
    skip: usize,
    cas: bool,
    touch: Option<i32>,
    sh: &Shared,
    c: &Counters,
    out: &mut Vec<u8>,
    reads: &mut PendingReads,
    mut direct: Option<&mut dyn Direct>,
) -> Next {
    let how = match touch {
        None => read::Read::Get,
        Some(e) => read::Read::Touch(sh.clock.item_expiry(e)),
    };
    // Output this request has buffered counts from here (0 once a direct write emptied it).
    let mut start = out.len();
    // Whether the last key's hit already carried END.
    let mut ended = false;
    let mut todo = keys.iter().enumerate().skip(skip).peekable();
    while let Some((i, key)) = todo.next() {
        if out.len().saturating_sub(start) >= batch::GET_PAUSE_BYTES {
            return Next::Resume(i);
        }
        let last = todo.peek().is_none();
        let mut hit = TextHit { key, cas, last };
        let sent = match read::get(key, how, &mut hit, sh, c, out, direct.as_deref_mut()) {
            Answer::Now(sent) => sent,
            Answer::Later(first) => return defer_get(keys, i, cas, first),
        };
        if sent.flushed {
            // Every earlier reply is on the wire: no unsent reply references an item.
            reads.clear();
            start = 0;
        }
        if sent.found.is_hit() {
            reads.add(key);
            ended = last;
        }
    }
    if !ended {
        out.extend_from_slice(b"END\r\n");
    }
    Next::Continue
}

/// Key `i` of a get is on flash: the reply from it on (its END included) comes from the flash
/// I/O pool (flashio.rs), which gets the keys from `i` on.
#[cold]
#[inline(never)]
fn defer_get(keys: Keys<'_>, i: usize, cas: bool, first: read::Flashed) -> Next {
    let n = keys.iter().count();
    let mut rest = keys.iter().enumerate().skip(i).map(|(k, key)| TextGet {
        key: key.into(),
        cas,
        last: k + 1 == n,
    });
    let Some(get) = rest.next() else {
        unreachable!("key {i} of the request was deferred")
    };
    let mut b = FlashBatch::new(get, first, i);
    rest.for_each(|g| b.push(Then::Key(g)));
    Next::Later(Box::new(b))
}

/// A key of a text get in a flash batch (command/batch.rs), owned; `last`: its reply ends the
/// request's (a hit carries END, a miss is END).
#[derive(Debug)]
pub(crate) struct TextGet {
    key: Box<[u8]>,
    cas: bool,
    last: bool,
}

impl BatchGet for TextGet {
    const READ: read::Read = read::Read::Get;

    fn key(&self) -> &[u8] {
        &self.key
    }

    fn with_hit<R>(&self, _sh: &Shared, f: impl FnOnce(&mut dyn read::Hit) -> R) -> R {
        f(&mut TextHit {
            key: &self.key,
            cas: self.cas,
            last: self.last,
        })
    }

    fn missed(&self, out: &mut Vec<u8>) {
        if self.last {
            out.extend_from_slice(b"END\r\n");
        }
    }

    /// Complete single-key `get` and `gets` requests, so that a pipeline of them is one flash
    /// job, as with mg and binary GETQ. Anything else stops the gathering (a multi-key get
    /// too: the batch can pause at its own keys only).
    fn next(
        input: &[u8],
        limits: &mnemo_proto::text::Limits,
        _sh: &Shared,
    ) -> Option<(Then<Self>, usize)> {
        let mnemo_proto::text::Parsed::Request(
            Request::Get {
                keys,
                cas,
                touch: None,
            },
            n,
        ) = mnemo_proto::text::parse(input, limits)
        else {
            return None;
        };
        let mut it = keys.iter();
        let key = it.next()?;
        if it.next().is_some() {
            return None;
        }
        let get = TextGet {
            key: key.into(),
            cas,
            last: true,
        };
        Some((Then::Get(get), n))
    }
}

/// `stats [sub]`. memcached 1.6.40 takes the word sent for the first of its subcommands it
/// begins (`stats r` is `stats reset`, `stats s` `stats settings`, in the order below), but
/// `items`, `slabs` and `sizes` only whole; mnemo's own `filters` and `snapshot` are whole
/// words, looked at first. `sizes_enable|sizes_disable` went in memcached 1.6.25 (`-o
/// track_sizes` remains): they are unknown subcommands now, as there.
fn stats_command(args: Keys<'_>, sh: &Shared, out: &mut Vec<u8>) {
    let mut words = args.iter();
    let Some(sub) = words.next() else {
        return stats::general(sh, out);
    };
    let begins = |name: &[u8]| name.starts_with(sub);
    match sub {
        b"filters" => crate::fget::stats(sh, out),
        b"snapshot" => crate::restart::stats(
            sh.config.memory_file.as_deref(),
            sh.restored.get().unwrap_or(&Default::default()),
            out,
        ),
        _ if begins(b"reset") => {
            sh.reset_stats();
            line(out, b"RESET");
        }
        _ if begins(b"detail") && !sh.config.dump_enabled => {
            line(out, crate::admin::detail::DUMPS_OFF)
        }
        _ if begins(b"detail") => match words.next() {
            Some(w) if b"on".starts_with(w) => {
                sh.detail.set_enabled(true);
                line(out, b"OK");
            }
            Some(w) if b"off".starts_with(w) => {
                sh.detail.set_enabled(false);
                line(out, b"OK");
            }
            Some(w) if b"dump".starts_with(w) => sh.detail.dump(out),
            _ => line(out, b"CLIENT_ERROR usage: stats detail on|off|dump"),
        },
        _ if begins(b"settings") => stats::settings(sh, out),
        _ if begins(b"cachedump") => crate::admin::crawler::cachedump(words, sh, out),
        _ if begins(b"conns") => crate::admin::conns::stats(sh, out),
        _ if begins(b"extstore") => stats::extstore_pages(sh, out),
        b"items" => stats::items(sh, out),
        b"slabs" => stats::slabs(sh, out),
        b"sizes" => stats::sizes(sh, out),
        _ => ErrorReply::Error.write(out),
    }
}
