//! The meta commands (mg ms md ma me): each is parsed into the command layer (crate::command)
//! and its answer encoded as a meta reply.
//!
//! Replies echo the requested return flags in request order. `q` hides the reply that says
//! nothing new: EN for mg, HD for ms/md/ma (and ma's value), never an error or a NF/NS/EX.

use mnemo_proto::meta::{Meta, MetaKind};
use mnemo_proto::reply::line;
use mnemo_proto::text;
use mnemo_proto::ErrorReply;
use mnemo_store::{Item, Mode, Time};

use crate::admin::stats::Counters;
use crate::command::arith::{self, Counted};
use crate::command::batch::{BatchGet, FlashBatch, Then};
use crate::command::concat;
use crate::command::delete::{self, Deleted};
use crate::command::read::{self, Direct};
use crate::command::write::{self, Stored};
use crate::command::Next;
use crate::command::{Answer, Proto};
use crate::Shared;

fn push_num(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Seconds left before `exp`, or -1 for an item that never expires.
fn ttl_left(exp: Time, now: Time) -> i64 {
    if exp == 0 {
        -1
    } else {
        i64::from(exp) - i64::from(now)
    }
}

/// The flags every meta reply may echo about the request itself (k, O); `with_b` adds the
/// " b" marker after a base64 key, as ms does.
fn echo_request(m: &Meta<'_>, letter: u8, key_echo: &[u8], with_b: bool, out: &mut Vec<u8>) {
    match letter {
        b'k' => {
            out.extend_from_slice(b" k");
            out.extend_from_slice(key_echo);
            if with_b && m.flags.base64 {
                out.extend_from_slice(b" b");
            }
        }
        b'O' => {
            out.extend_from_slice(b" O");
            out.extend_from_slice(m.flags.opaque.unwrap_or(&[]));
        }
        _ => {}
    }
}

/// "EN", "NF", "NS", "EX": a status word plus the k/O echoes.
fn status(m: &Meta<'_>, word: &[u8], key_echo: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(word);
    for &l in m.flags.letters() {
        echo_request(m, l, key_echo, true, out);
    }
    out.extend_from_slice(b"\r\n");
}

/// `direct`: the connection's way to send a large value from the item (command::read::Direct).
pub fn execute(
    m: &Meta<'_>,
    sh: &Shared,
    c: &Counters,
    out: &mut Vec<u8>,
    direct: Option<&mut dyn Direct>,
) -> Next {
    match m.kind {
        MetaKind::Get => return get(m, sh, c, out, direct),
        MetaKind::Set => set(m, sh, c, out),
        MetaKind::Delete => delete(m, sh, c, out),
        MetaKind::Arith => arith(m, sh, c, out),
    }
    Next::Continue
}

/// The win/stale flags of a hit, in memcached's order: Z (a win token went to someone
/// else earlier), X (stale), W (this client wins and should recache).
fn win_flags(m: &Meta<'_>, it: &Item<'_>, now: Time, sh: &Shared) -> &'static [u8] {
    let key = m.key.as_bytes();
    let mut mark = sh.marks.get(key, it.cas);
    let sent_before = mark.win_sent;
    let mut win = false;
    if !mark.win_sent {
        let recache = m
            .flags
            .recache
            .is_some_and(|r| it.exp != 0 && ttl_left(it.exp, now) < i64::from(r));
        if mark.stale || recache {
            win = true;
            mark.win_sent = true;
            sh.marks.set(key, it.cas, mark);
        }
    }
    match (sent_before, mark.stale, win) {
        (true, true, _) => b" Z X",
        (true, false, _) => b" Z",
        (false, true, true) => b" X W",
        (false, true, false) => b" X",
        (false, false, true) => b" W",
        (false, false, false) => b"",
    }
}

fn write_hit(m: &Meta<'_>, it: &Item<'_>, now: Time, suffix: &[u8], out: &mut Vec<u8>) {
    if write_hit_line(m, it, now, suffix, out) {
        out.extend_from_slice(it.value);
        out.extend_from_slice(b"\r\n");
    }
}

/// A hit's reply line; true if the value (and its "\r\n") follows it.
fn write_hit_line(
    m: &Meta<'_>,
    it: &Item<'_>,
    now: Time,
    suffix: &[u8],
    out: &mut Vec<u8>,
) -> bool {
    let f = &m.flags;
    // C (memcached 1.6.40): the client holds this version already, so no value is sent.
    let with_value = f.has(b'v') && f.compare_cas != Some(it.cas);
    if with_value {
        out.extend_from_slice(b"VA ");
        push_num(out, it.value.len());
    } else {
        out.extend_from_slice(b"HD");
    }
    for &l in f.letters() {
        match l {
            b'c' => {
                out.extend_from_slice(b" c");
                push_num(out, it.cas);
            }
            b'f' => {
                out.extend_from_slice(b" f");
                push_num(out, it.flags);
            }
            b's' => {
                out.extend_from_slice(b" s");
                push_num(out, it.value.len());
            }
            b'h' => out.extend_from_slice(if it.fetched { b" h1" } else { b" h0" }),
            b't' => {
                out.extend_from_slice(b" t");
                push_num(out, ttl_left(it.exp, now));
            }
            // The key as the request sent it: base64 with the b marker when it came that way.
            b'k' | b'O' => echo_request(m, l, m.raw_key, true, out),
            _ => {}
        }
    }
    out.extend_from_slice(suffix);
    out.extend_from_slice(b"\r\n");
    with_value
}

/// An mg hit: its reply line (with the win/stale flags), and the value's `\r\n` when v asked
/// for the value.
struct MetaHit<'m, 'r> {
    m: &'m Meta<'r>,
    sh: &'m Shared,
    now: Time,
}

impl read::Hit for MetaHit<'_, '_> {
    fn head(&mut self, it: &Item<'_>, out: &mut Vec<u8>) -> Option<&'static [u8]> {
        let suffix = win_flags(self.m, it, self.now, self.sh);
        write_hit_line(self.m, it, self.now, suffix, out).then_some(b"\r\n")
    }

    fn vivified(&mut self, it: &Item<'_>, out: &mut Vec<u8>) {
        write_hit(self.m, it, self.now, b" W", out);
    }
}

fn get(
    m: &Meta<'_>,
    sh: &Shared,
    c: &Counters,
    out: &mut Vec<u8>,
    direct: Option<&mut dyn Direct>,
) -> Next {
    let f = &m.flags;
    let how = read_of(m, sh);
    let mut hit = MetaHit {
        m,
        sh,
        now: sh.clock.now(),
    };
    match read::get(m.key.as_bytes(), how, &mut hit, sh, c, out, direct) {
        Answer::Now(sent) => {
            if !sent.found.is_hit() && !f.quiet {
                status(m, b"EN", m.raw_key, out);
            }
            Next::Continue
        }
        Answer::Later(first) => {
            let b = FlashBatch::new(Box::new(OwnedGet::new(m)), first, 0);
            Next::Later(Box::new(b))
        }
    }
}

/// How an mg reads (meta flags T, u and N).
fn read_of(m: &Meta<'_>, sh: &Shared) -> read::Read {
    let f = &m.flags;
    read::Read::Meta {
        touch: f.ttl.map(|t| sh.clock.item_expiry(t)),
        peek: f.has(b'u'),
        vivify: f.vivify.map(|t| (sh.clock.item_expiry(t), f.cas_in)),
    }
}

/// An mg as a flash batch answers it (command/batch.rs): the request's parts its reply
/// needs, owned. Boxed in the batch: an mg's flags are 400 bytes.
#[derive(Debug)]
pub(crate) struct OwnedGet {
    raw_key: Box<[u8]>,
    key: mnemo_proto::meta::KeyBuf,
    opaque: Option<Box<[u8]>>,
    flags: mnemo_proto::meta::MetaFlags<'static>,
}

impl OwnedGet {
    fn new(m: &Meta<'_>) -> OwnedGet {
        OwnedGet {
            raw_key: m.raw_key.into(),
            key: m.key,
            opaque: m.flags.opaque.map(Into::into),
            flags: m.flags.with_opaque(None),
        }
    }

    fn meta(&self) -> Meta<'_> {
        Meta {
            kind: MetaKind::Get,
            raw_key: &self.raw_key,
            key: self.key,
            flags: self.flags.with_opaque(self.opaque.as_deref()),
            data: b"",
        }
    }
}

impl BatchGet for Box<OwnedGet> {
    /// What `get` defers is an mg without T, u or N.
    const READ: read::Read = read::Read::Meta {
        touch: None,
        peek: false,
        vivify: None,
    };

    fn key(&self) -> &[u8] {
        self.key.as_bytes()
    }

    fn with_hit<R>(&self, sh: &Shared, f: impl FnOnce(&mut dyn read::Hit) -> R) -> R {
        let m = self.meta();
        f(&mut MetaHit {
            m: &m,
            sh,
            now: sh.clock.now(),
        })
    }

    /// EN, unless q.
    fn missed(&self, out: &mut Vec<u8>) {
        let m = self.meta();
        if !m.flags.quiet {
            status(&m, b"EN", m.raw_key, out);
        }
    }

    /// Complete mg requests that `get` would defer too (no T, u or N), and mn. Anything else
    /// stops the gathering (an ms must run after the batch, on the worker).
    fn next(input: &[u8], limits: &text::Limits, sh: &Shared) -> Option<(Then<Self>, usize)> {
        let text::Parsed::Request(req, n) = text::parse(input, limits) else {
            return None;
        };
        let then = match req {
            // What `get` would defer too, were its value on flash.
            text::Request::Meta(ref m)
                if m.kind == MetaKind::Get && read_of(m, sh).deferrable() =>
            {
                Then::Get(Box::new(OwnedGet::new(m)))
            }
            text::Request::MetaNoop => Then::Reply(b"MN\r\n"[..].into()),
            _ => return None,
        };
        Some((then, n))
    }
}

fn set(m: &Meta<'_>, sh: &Shared, c: &Counters, out: &mut Vec<u8>) {
    let f = &m.flags;
    // memcached's mode rules: a C turns set and replace into cas; add ignores it; append and
    // prepend compare it themselves.
    let mode = match (f.mode.unwrap_or(b'S'), f.compare_cas) {
        (b'S' | b'R', Some(cas)) => Mode::Cas(cas),
        (b'S', None) => Mode::Set,
        (b'E', _) => Mode::Add,
        (b'A', _) => Mode::Append,
        (b'P', _) => Mode::Prepend,
        _ => Mode::Replace,
    };
    let joins = matches!(mode, Mode::Append | Mode::Prepend);
    // s (memcached 1.6.20): the stored item's size; the data's unless a join says otherwise.
    let mut size = m.data.len();
    let stored = if joins
        && (f.compare_cas.is_some() || f.cas_in.is_some() || f.vivify.is_some() || f.has(b's'))
    {
        let j = concat::Join {
            append: mode == Mode::Append,
            key: m.key.as_bytes(),
            data: m.data,
            cas: f.compare_cas,
            cas_in: f.cas_in,
            // N (memcached 1.6.20): a missing item is created from the data, with N's TTL.
            vivify: f
                .vivify
                .map(|t| (f.client_flags.unwrap_or(0), sh.clock.item_expiry(t))),
        };
        match concat::meta_join(&j, sh, c) {
            Answer::Now((stored, n)) => {
                size = n;
                stored
            }
            Answer::Later(p) => match p {},
        }
    } else {
        let s = write::Store {
            mode,
            key: m.key.as_bytes(),
            flags: f.client_flags.unwrap_or(0),
            exp: sh.clock.item_expiry(f.ttl.unwrap_or(0)),
            data: m.data,
            stale_if_older: f.invalidate,
            drop_on_failure: false,
        };
        match write::store_with(&s, f.cas_in, Proto::Meta, sh, c) {
            Answer::Now(stored) => stored,
            Answer::Later(p) => match p {},
        }
    };
    let (word, cas): (&[u8], u64) = match stored {
        Stored::Stored { cas } => {
            if f.quiet {
                return;
            }
            (b"HD", cas)
        }
        Stored::NotStored => (b"NS", 0),
        Stored::Exists => (b"EX", 0),
        Stored::NotFound => (b"NF", 0),
        Stored::TooLarge => return ErrorReply::TooLarge.write(out),
        Stored::NoMemory => return ErrorReply::OutOfMemory.write(out),
    };
    out.extend_from_slice(word);
    for &l in f.letters() {
        match l {
            // memcached 1.6.18 answers c on every ms reply: "c0" when nothing was stored.
            b'c' => {
                out.extend_from_slice(b" c");
                push_num(out, cas);
            }
            // On every reply, as c: memcached 1.6.20.
            b's' => {
                out.extend_from_slice(b" s");
                push_num(out, size);
            }
            b'k' | b'O' => echo_request(m, l, m.raw_key, true, out),
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
}

fn delete(m: &Meta<'_>, sh: &Shared, c: &Counters, out: &mut Vec<u8>) {
    let f = &m.flags;
    let d = delete::Delete {
        key: m.key.as_bytes(),
        cas: f.compare_cas,
        invalidate: f.invalidate.then(|| f.ttl.map(|t| sh.clock.item_expiry(t))),
    };
    let extra = delete::MetaDelete {
        // x: T and F apply to the emptied item, I or not.
        remove_value: f.remove_value.then(|| {
            (
                f.client_flags.unwrap_or(0),
                sh.clock.item_expiry(f.ttl.unwrap_or(0)),
            )
        }),
        cas_in: f.cas_in,
    };
    match delete::meta_delete(&d, extra, Proto::Meta, sh, c) {
        Answer::Now(Some(Deleted::Exists)) => status(m, b"EX", m.raw_key, out),
        Answer::Now(Some(Deleted::Deleted)) => {
            if !f.quiet {
                status(m, b"HD", m.raw_key, out);
            }
        }
        Answer::Now(Some(Deleted::NotFound)) => status(m, b"NF", m.raw_key, out),
        Answer::Now(None) => ErrorReply::OutOfMemoryPlain.write(out),
        Answer::Later(p) => match p {},
    }
}

fn arith(m: &Meta<'_>, sh: &Shared, c: &Counters, out: &mut Vec<u8>) {
    let f = &m.flags;
    let key = m.key.as_bytes();
    let d = arith::Delta {
        key,
        incr: matches!(f.mode.unwrap_or(b'I'), b'I' | b'+'),
        by: f.delta.unwrap_or(1),
        pad: true,
        cas: f.compare_cas,
        create: f
            .vivify
            .map(|ttl| (f.initial.unwrap_or(0), sh.clock.item_expiry(ttl))),
        touch: f.ttl.map(|t| sh.clock.item_expiry(t)),
        read_exp: f.has(b't') && !f.quiet,
    };
    let (value, cas, exp) = match arith::delta_with(&d, f.cas_in, Proto::Meta, sh, c) {
        Answer::Now(Counted::Value { n, cas, exp } | Counted::Created { n, cas, exp }) => {
            (n, cas, exp)
        }
        Answer::Now(Counted::Exists) => return status(m, b"EX", m.raw_key, out),
        Answer::Now(Counted::NonNumeric) => return ErrorReply::NonNumeric.write(out),
        // Meta neither guards by CAS nor gives up on a create: the rest is a missing item.
        Answer::Now(_) => return status(m, b"NF", m.raw_key, out),
        Answer::Later(p) => match p {},
    };
    if f.quiet {
        return;
    }
    let now = sh.clock.now();
    let digits = itoa::Buffer::new().format(value).as_bytes().to_vec();
    if f.has(b'v') {
        out.extend_from_slice(b"VA ");
        push_num(out, digits.len());
    } else {
        out.extend_from_slice(b"HD");
    }
    for &l in f.letters() {
        match l {
            b'c' => {
                out.extend_from_slice(b" c");
                push_num(out, cas);
            }
            b't' => {
                out.extend_from_slice(b" t");
                push_num(out, ttl_left(exp.unwrap_or(0), now));
            }
            b'k' | b'O' => echo_request(m, l, m.raw_key, true, out),
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
    if f.has(b'v') {
        out.extend_from_slice(&digits);
        out.extend_from_slice(b"\r\n");
    }
}

/// `me <key>`: mnemo's item details (memcached's fields where mnemo has them).
// Out of line: a rare command, kept out of the text protocol's execute_from (the get and set
// hot path, bench/instructions.sh).
#[cold]
#[inline(never)]
pub fn debug(key: &[u8], sh: &Shared, c: &Counters, out: &mut Vec<u8>) -> Next {
    let d = match read::details(key, sh, c) {
        Answer::Now(Some(d)) => d,
        Answer::Now(None) => {
            line(out, b"EN");
            return Next::Continue;
        }
        Answer::Later(p) => match p {},
    };
    out.extend_from_slice(b"ME ");
    out.extend_from_slice(key);
    out.extend_from_slice(b" exp=");
    push_num(out, ttl_left(d.exp, d.now));
    out.extend_from_slice(b" cas=");
    push_num(out, d.cas);
    out.extend_from_slice(if d.fetched {
        b" fetch=yes"
    } else {
        b" fetch=no"
    });
    out.extend_from_slice(b" flags=");
    push_num(out, d.flags);
    out.extend_from_slice(b" size=");
    push_num(out, d.size);
    out.extend_from_slice(b"\r\n");
    Next::Continue
}
