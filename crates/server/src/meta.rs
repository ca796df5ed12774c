//! Execute the meta commands (mg ms md ma me) against the store.
//!
//! Replies echo the requested return flags in request order. `q` hides the reply that says
//! nothing new: EN for mg, HD for ms/md/ma (and ma's value), never an error or a NF/NS/EX.

use mnemo_proto::meta::{Meta, MetaKind};
use mnemo_proto::reply::line;
use mnemo_proto::ErrorReply;
use mnemo_store::{DeltaError, Item, Lookup, Mode, StoreError, StoreOutcome, Time};

use crate::exec::{Direct, Next, DIRECT_MIN};
use crate::stats::{bump, Counters};
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

/// `direct`: the connection's way to send a large value from the item (exec::Direct).
pub fn execute(m: &Meta<'_>, sh: &Shared, c: &Counters, out: &mut Vec<u8>, direct: Option<&mut dyn Direct>) -> Next {
    match m.kind {
        MetaKind::Get => get(m, sh, c, out, direct),
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
        let recache = m.flags.recache.is_some_and(|r| it.exp != 0 && ttl_left(it.exp, now) < i64::from(r));
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
fn write_hit_line(m: &Meta<'_>, it: &Item<'_>, now: Time, suffix: &[u8], out: &mut Vec<u8>) -> bool {
    let f = &m.flags;
    let with_value = f.has(b'v');
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

fn get(m: &Meta<'_>, sh: &Shared, c: &Counters, out: &mut Vec<u8>, mut direct: Option<&mut dyn Direct>) {
    let key = m.key.as_bytes();
    let now = sh.clock.now();
    let f = &m.flags;
    bump(&c.cmd_get, 1);
    let mut hit = |it: Item<'_>, out: &mut Vec<u8>| {
        let suffix = win_flags(m, &it, now, sh);
        if !write_hit_line(m, &it, now, suffix, out) {
            return;
        }
        match direct.as_deref_mut() {
            // As text get: a large value leaves in one writev of [pending output, value,
            // "\r\n"] while the shard still holds it, instead of being copied into `out`.
            Some(d) if it.value.len() >= DIRECT_MIN => {
                d.send_value(out, it.value, it.pages, b"\r\n");
            }
            _ => {
                out.extend_from_slice(it.value);
                out.extend_from_slice(b"\r\n");
            }
        }
    };
    // u: the read does not count as one (the item stays unfetched: a later h says h0).
    let no_bump = f.has(b'u');
    let mut found = match (f.ttl, no_bump) {
        (Some(t), false) => {
            bump(&c.cmd_touch, 1);
            sh.store.get_and_touch(key, sh.clock.item_expiry(t), now, |it| hit(it, out))
        }
        (Some(t), true) => {
            bump(&c.cmd_touch, 1);
            sh.store.touch(key, sh.clock.item_expiry(t), now);
            sh.store.peek(key, now, |it| hit(it, out))
        }
        (None, false) => sh.store.get(key, now, |it| hit(it, out)),
        (None, true) => sh.store.peek(key, now, |it| hit(it, out)),
    };
    if let (false, Some(ttl)) = (found.is_hit(), f.vivify) {
        // Vivify: create an empty placeholder and hand this client the win token; everyone
        // else sees the placeholder with Z until the winner stores the real value.
        let exp = sh.clock.item_expiry(ttl);
        if let Ok(StoreOutcome::Stored { cas }) = sh.store.store(Mode::Add, key, 0, exp, b"", now) {
            sh.marks.set(key, cas, crate::marks::Mark { stale: false, win_sent: true });
            write_hit(m, &Item { flags: 0, value: b"", cas, exp, fetched: false, pages: None }, now, b" W", out);
            bump(&c.get_misses, 1);
            return;
        }
        found = sh.store.get(key, now, |it| hit(it, out));
    }
    match found {
        Lookup::Hit(()) => bump(&c.get_hits, 1),
        miss => {
            bump(&c.get_misses, 1);
            match miss {
                Lookup::Expired => bump(&c.get_expired, 1),
                Lookup::Flushed => bump(&c.get_flushed, 1),
                _ => {}
            }
            if !f.quiet {
                status(m, b"EN", m.raw_key, out);
            }
        }
    }
}

fn set(m: &Meta<'_>, sh: &Shared, c: &Counters, out: &mut Vec<u8>) {
    let f = &m.flags;
    let key = m.key.as_bytes();
    let now = sh.clock.now();
    let mode = match (f.mode.unwrap_or(b'S'), f.compare_cas) {
        (b'S', Some(cas)) => Mode::Cas(cas),
        (b'S', None) => Mode::Set,
        (b'E', _) => Mode::Add,
        (b'A', _) => Mode::Append,
        (b'P', _) => Mode::Prepend,
        _ => Mode::Replace,
    };
    let exp = sh.clock.item_expiry(f.ttl.unwrap_or(0));
    let flags = f.client_flags.unwrap_or(0);
    let mut result = sh.store.store(mode, key, flags, exp, m.data, now);
    if let (Ok(StoreOutcome::Exists), Mode::Cas(want), true) = (&result, mode, f.invalidate) {
        // ms I: a write carrying an older CAS still lands, but as a stale item that keeps the
        // TTL and the "win token sent" state of the item it replaces (memcached), so readers
        // go on seeing X and Z and nobody is handed a second W.
        let old = sh.store.peek(key, now, |it| (it.cas, it.exp)).hit();
        if let Some((have, old_exp)) = old.filter(|&(have, _)| want < have) {
            let win_sent = sh.marks.get(key, have).win_sent;
            result = sh.store.store(Mode::Set, key, flags, old_exp, m.data, now);
            if let Ok(StoreOutcome::Stored { cas }) = result {
                sh.marks.set(key, cas, crate::marks::Mark { stale: true, win_sent });
            }
        }
    }
    // As text set: counted once the item is allocated (an append's failed join still is).
    if result.is_ok() || matches!(mode, Mode::Append | Mode::Prepend) {
        bump(&c.cmd_set, 1);
    }
    let (word, cas): (&[u8], u64) = match result {
        Ok(StoreOutcome::Stored { cas }) => {
            if matches!(mode, Mode::Cas(_)) {
                bump(&c.cas_hits, 1);
            }
            if f.quiet {
                return;
            }
            (b"HD", cas)
        }
        Ok(StoreOutcome::NotStored) => (b"NS", 0),
        Ok(StoreOutcome::Exists) => {
            bump(&c.cas_badval, 1);
            (b"EX", 0)
        }
        Ok(StoreOutcome::NotFound) => {
            bump(&c.cas_misses, 1);
            (b"NF", 0)
        }
        // The store has already dropped the old value of a failed set (memcached's rule).
        Err(e) => {
            let (counter, err) = match e {
                StoreError::TooLarge => (&c.store_too_large, ErrorReply::TooLarge),
                StoreError::OutOfMemory => (&c.store_no_memory, ErrorReply::OutOfMemory),
            };
            bump(counter, 1);
            err.write(out);
            return;
        }
    };
    out.extend_from_slice(word);
    for &l in f.letters() {
        match l {
            // memcached 1.6.18 answers c on every ms reply: "c0" when nothing was stored.
            b'c' => {
                out.extend_from_slice(b" c");
                push_num(out, cas);
            }
            b'k' | b'O' => echo_request(m, l, m.raw_key, true, out),
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// The CAS of a live item, for the compare (C) of md and ma.
fn current_cas(sh: &Shared, key: &[u8], now: Time) -> Option<u64> {
    sh.store.get(key, now, |it| it.cas).hit()
}

fn delete(m: &Meta<'_>, sh: &Shared, c: &Counters, out: &mut Vec<u8>) {
    let f = &m.flags;
    let key = m.key.as_bytes();
    let now = sh.clock.now();
    if let Some(want) = f.compare_cas {
        match current_cas(sh, key, now) {
            Some(have) if have != want => {
                status(m, b"EX", m.raw_key, out);
                return;
            }
            _ => {}
        }
    }
    let hit = if f.invalidate {
        // Mark stale instead of deleting: readers get X (and one of them W) until rewritten.
        invalidate(sh, key, f.ttl.map(|t| sh.clock.item_expiry(t)), now)
    } else {
        sh.store.delete(key, now)
    };
    if hit {
        bump(&c.delete_hits, 1);
        if !f.quiet {
            status(m, b"HD", m.raw_key, out);
        }
    } else {
        bump(&c.delete_misses, 1);
        status(m, b"NF", m.raw_key, out);
    }
}

/// `md I`: the item stays, stale, under a new CAS (memcached bumps it, so a writer holding
/// the old CAS now has a lower one: its `ms I` lands as a stale value, a plain `ms C` fails)
/// and with the win token offered again. The store makes a new CAS only by writing a new
/// copy, so the item is rewritten, guarded by its CAS against a write in between (and read
/// without counting as a read: its fetched state carries over).
fn invalidate(sh: &Shared, key: &[u8], new_exp: Option<Time>, now: Time) -> bool {
    for _ in 0..INVALIDATE_ATTEMPTS {
        let read = |it: Item<'_>| (it.flags, it.value.to_vec(), it.exp, it.cas, it.fetched);
        let Some((flags, value, exp, cas, fetched)) = sh.store.peek(key, now, read).hit() else {
            return false;
        };
        let exp = new_exp.unwrap_or(exp);
        match sh.store.store(Mode::Cas(cas), key, flags, exp, &value, now) {
            Ok(StoreOutcome::Stored { cas }) => {
                sh.marks.set(key, cas, crate::marks::Mark { stale: true, win_sent: false });
                if fetched {
                    // memcached keeps the item, so it stays fetched (a later h says h1); the
                    // copy is marked by reading it.
                    sh.store.get(key, now, |_| ());
                }
                return true;
            }
            // Rewritten or deleted in between: look again.
            Ok(_) => continue,
            // No room for the copy: mark the item as it is.
            Err(_) => {
                if let Some(e) = new_exp {
                    sh.store.touch(key, e, now);
                }
                sh.marks.set(key, cas, crate::marks::Mark { stale: true, win_sent: false });
                return true;
            }
        }
    }
    false
}

/// How often `md I` retries when the item changes under it.
const INVALIDATE_ATTEMPTS: usize = 4;

fn arith(m: &Meta<'_>, sh: &Shared, c: &Counters, out: &mut Vec<u8>) {
    let f = &m.flags;
    let key = m.key.as_bytes();
    let now = sh.clock.now();
    let incr = matches!(f.mode.unwrap_or(b'I'), b'I' | b'+');
    let (hits, misses) = if incr { (&c.incr_hits, &c.incr_misses) } else { (&c.decr_hits, &c.decr_misses) };
    if let Some(want) = f.compare_cas {
        if let Some(have) = current_cas(sh, key, now) {
            if have != want {
                status(m, b"EX", m.raw_key, out);
                return;
            }
        }
    }
    let mut result = sh.store.delta(key, incr, f.delta.unwrap_or(1), now, mnemo_proto::num::parse_u64);
    if let (Err(DeltaError::NotFound), Some(ttl)) = (&result, f.vivify) {
        // Autovivify: create the counter with its initial value (no delta applied).
        let initial = f.initial.unwrap_or(0);
        let text = itoa::Buffer::new().format(initial).as_bytes().to_vec();
        let exp = sh.clock.item_expiry(ttl);
        match sh.store.store(Mode::Add, key, 0, exp, &text, now) {
            Ok(StoreOutcome::Stored { cas }) => result = Ok((initial, cas)),
            // Someone created it first: apply the delta to theirs.
            _ => result = sh.store.delta(key, incr, f.delta.unwrap_or(1), now, mnemo_proto::num::parse_u64),
        }
    }
    match result {
        Ok((value, cas)) => {
            bump(hits, 1);
            let mut exp = None;
            if let Some(t) = f.ttl {
                let e = sh.clock.item_expiry(t);
                sh.store.touch(key, e, now);
            }
            if f.quiet {
                return;
            }
            if f.has(b't') {
                exp = sh.store.get(key, now, |it| it.exp).hit();
            }
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
        Err(DeltaError::NotFound) => {
            bump(misses, 1);
            status(m, b"NF", m.raw_key, out);
        }
        Err(DeltaError::NonNumeric) => ErrorReply::NonNumeric.write(out),
    }
}

/// `me <key>`: mnemo's item details (memcached's fields where mnemo has them).
pub fn debug(key: &[u8], sh: &Shared, out: &mut Vec<u8>) -> Next {
    let now = sh.clock.now();
    let found = sh.store.get(key, now, |it| {
        out.extend_from_slice(b"ME ");
        out.extend_from_slice(key);
        out.extend_from_slice(b" exp=");
        push_num(out, ttl_left(it.exp, now));
        out.extend_from_slice(b" cas=");
        push_num(out, it.cas);
        out.extend_from_slice(if it.fetched { b" fetch=yes" } else { b" fetch=no" });
        out.extend_from_slice(b" flags=");
        push_num(out, it.flags);
        out.extend_from_slice(b" size=");
        push_num(out, it.value.len());
        out.extend_from_slice(b"\r\n");
    });
    if !found.is_hit() {
        line(out, b"EN");
    }
    Next::Continue
}
