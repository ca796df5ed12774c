//! memcached's slab and LRU maintenance commands, answered for a store that has neither slab
//! classes nor an LRU crawler (expired segments are dropped whole by the maintenance thread):
//! `lru_crawler ...`, `stats cachedump` and `slabs reassign|automove`. Only the two dumps do
//! real work: they list live items, which is how operator tools enumerate a server's keys.
//!
//! ```text
//!   lru_crawler metadump all|hash|<class,...>
//!   OK\r\n                                                       (memcached 1.6.43)
//!   key=<url-encoded key> exp=<-1|unix time> la=<unix time> cas=<n> fetch=<yes|no> cls=1 size=<n> flags=<n> \n
//!   ...
//!   END\r\n
//!
//!   lru_crawler mgdump all|hash|<class,...>                   (memcached 1.6.19)
//!   OK\r\n                                                       (memcached 1.6.43)
//!   mg <key>\r\n  or  mg <base64 key> b\r\n
//!   ...
//!   EN\r\n
//!
//!   stats cachedump <class> <limit>            (limit 0: as many as fit in 2 MB, memcached's cap)
//!   ITEM <key> [<size> b; <0|unix time> s]\r\n
//!   ...
//!   END\r\n
//! ```
//!
//! The metadump item lines end in a bare "\n" and only END in "\r\n": memcached's bytes, which
//! its clients parse. An mgdump lists the same items (one walk, [`Metadump`], serves both) as
//! `mg` requests a client can send back to read each item (memcached's own dump/load tool does
//! that). The dumps are streamed: the connection asks for one store batch at a
//! time (`Metadump::step`) and only while its unsent output is small, so a dump of millions of
//! keys costs a bounded buffer and holds each shard lock for one batch only. A cachedump is
//! bounded (2 MB) like memcached's, so it is built in one go, one store batch per lock hold.
//!
//! Replies that differ from memcached by necessity:
//! * `cls` is always 1: mnemo has no slab classes (`stats items` reports one class, 1, too).
//!   `metadump <classes>` lists everything when the list names class 1, nothing otherwise;
//!   `cachedump 1` lists everything, any other class nothing.
//! * Items whose value is on flash (`-o ext_path`) are listed as memcached lists its extstore
//!   items; their keys are read from the records' heads, with no shard lock held (store's
//!   dump.rs says what that costs a step). Their `size` is the record's bytes on flash and
//!   their `la` the process's start (a record carries no time).
//! * `size` (metadump) is the bytes the item occupies in mnemo (header + key + value), not
//!   memcached's item struct size, which is ~50 bytes more. cachedump's `<size> b` is
//!   memcached's value length; mnemo's dump walk does not report it yet, so it shows the
//!   same occupied bytes (see [`cachedump`]).
//! * `la` (last access): mnemo keeps no per-item time. It reports the time the item's segment
//!   was opened: a lower bound of when the item's current copy was written (reads do not
//!   change it; writes, and the copies incr, touch or eviction make, start a new one).
//! * `hash` and `all` walk the same way (the store's index, shard by shard); cachedump's order
//!   is that walk's too (memcached's is its COLD LRU's, newest first, and it lists an item
//!   only once its LRU maintainer has moved it out of HOT).
//! * `slabs reassign` never finds a page to move: valid, distinct classes get `NOSPARE`.
//! * mgdump base64-encodes (with ` b`) the keys a text line cannot carry (a space, a control
//!   byte, DEL): mnemo keeps no per-item "stored as base64" bit, so a key a client stored with
//!   `b` that is printable is listed as it is (memcached lists every `b` key in base64 and
//!   a binary-protocol key with a space raw, which breaks its line).

use std::sync::atomic::Ordering::Relaxed;

use mnemo_proto::num::{parse_u64, tok_u32};
use mnemo_proto::reply::line;
use mnemo_proto::text::{Automove, Keys};
use mnemo_store::{DumpCursor, DumpItem};

use crate::Shared;

/// `lru_crawler`'s state as clients see it: the switch (`enable|disable`: while disabled,
/// metadump and crawl are refused, as memcached's), the requests started (memcached's
/// lru_crawler_starts), and `sleep|tocrawl` as last set (they pace nothing: mnemo runs no
/// crawler).
#[derive(Debug)]
pub struct Knobs {
    pub enabled: std::sync::atomic::AtomicBool,
    pub starts: std::sync::atomic::AtomicU64,
    pub sleep: std::sync::atomic::AtomicU32,
    pub tocrawl: std::sync::atomic::AtomicU32,
}

impl Knobs {
    /// As `-o lru_crawler`, `lru_crawler_sleep`, `lru_crawler_tocrawl` start them.
    pub fn new(enabled: bool, sleep: u32, tocrawl: u32) -> Knobs {
        Knobs {
            enabled: enabled.into(),
            starts: 0.into(),
            sleep: sleep.into(),
            tocrawl: tocrawl.into(),
        }
    }
}

/// memcached's slab class ids run 1..=63 (MAX_NUMBER_OF_SLAB_CLASSES - 1).
const MAX_CLASS: u64 = 63;

/// A metadump or mgdump asked for on one connection, then in progress there.
#[derive(Debug, PartialEq, Eq)]
pub struct Metadump {
    mg: bool,
    /// The class list, until the connection begins the dump (`begin`).
    asked: Option<Classes>,
    cursor: DumpCursor,
    /// false: a class list without class 1, which in mnemo holds nothing.
    list: bool,
}

/// memcached refuses a dump while replies of earlier pipelined commands are still unsent
/// (its dump writes to the socket directly and would overtake them).
const PIPELINED: &[u8] = b"ERROR cannot pipeline other commands before metadump";
const PIPELINED_MG: &[u8] = b"ERROR cannot pipeline other commands before mgdump";

impl Metadump {
    /// `mg`: an mgdump, else a metadump.
    fn asked(spec: &[u8], mg: bool) -> Metadump {
        Metadump {
            mg,
            asked: Some(classes(spec)),
            cursor: DumpCursor::new(),
            list: false,
        }
    }

    /// Starts the dump the connection was asked for, or answers why not. `stacked`: replies
    /// of earlier commands wait unsent, in memcached's sense (conn.rs keeps it): memcached
    /// checks that before it reads the class list. None when nothing is left to stream.
    pub fn begin(
        mut self: Box<Self>,
        stacked: bool,
        sh: &Shared,
        out: &mut Vec<u8>,
    ) -> Option<Box<Metadump>> {
        let reply = match self.asked.take() {
            _ if stacked && self.mg => PIPELINED_MG,
            _ if stacked => PIPELINED,
            Some(Classes::All | Classes::Hash) => return self.start(true, sh, out),
            Some(Classes::List(has_one)) => return self.start(has_one, sh, out),
            Some(Classes::Empty) => NOT_STARTED,
            Some(Classes::Bad) => BAD_CLASS,
            None => return Some(self),
        };
        line(out, reply);
        None
    }

    fn start(
        mut self: Box<Self>,
        list: bool,
        sh: &Shared,
        out: &mut Vec<u8>,
    ) -> Option<Box<Metadump>> {
        sh.crawler.starts.fetch_add(1, Relaxed);
        self.list = list;
        // memcached 1.6.43 sends OK before a dump's lines (1.6.18 to 1.6.42 sent none).
        line(out, b"OK");
        Some(self)
    }

    /// Appends the lines of one store batch (one shard lock hold). Returns true once the dump
    /// is complete, END included.
    pub fn step(&mut self, sh: &Shared, out: &mut Vec<u8>) -> bool {
        let mg = self.mg;
        let more = self.list && {
            let started = sh.clock.process_started();
            sh.store.dump_step(&mut self.cursor, sh.clock.now(), |it| {
                if mg {
                    mg_line(out, it.key)
                } else {
                    item_line(out, it, started)
                }
            })
        };
        if !more {
            line(out, if mg { b"EN" } else { b"END" });
        }
        !more
    }
}

/// One metadump line, in memcached 1.6's field order.
fn item_line(out: &mut Vec<u8>, it: &DumpItem<'_>, started: u64) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b"key=");
    url_encode(out, it.key);
    out.extend_from_slice(b" exp=");
    if it.exp == 0 {
        out.extend_from_slice(b"-1");
    } else {
        out.extend_from_slice(b.format(u64::from(it.exp) + started).as_bytes());
    }
    out.extend_from_slice(b" la=");
    out.extend_from_slice(b.format(u64::from(it.written) + started).as_bytes());
    out.extend_from_slice(b" cas=");
    out.extend_from_slice(b.format(it.cas).as_bytes());
    out.extend_from_slice(if it.fetched {
        b" fetch=yes"
    } else {
        b" fetch=no"
    });
    out.extend_from_slice(b" cls=1 size=");
    out.extend_from_slice(b.format(it.size).as_bytes());
    // flags= since memcached 1.6.24 (1.6.38 ends the line after it); 1.6.40 ends every field,
    // the last one too, with a space.
    out.extend_from_slice(b" flags=");
    out.extend_from_slice(b.format(it.flags).as_bytes());
    out.extend_from_slice(b" \n");
}

/// One mgdump line: `mg <key>`, or `mg <base64 key> b` for a key a text line cannot carry.
fn mg_line(out: &mut Vec<u8>, key: &[u8]) {
    use base64::Engine;
    out.extend_from_slice(b"mg ");
    if key.iter().any(|&b| b <= b' ' || b == 0x7f) {
        let at = out.len();
        out.resize(at + key.len().div_ceil(3) * 4, 0);
        let n = base64::engine::general_purpose::STANDARD
            .encode_slice(key, &mut out[at..])
            .expect("sized above");
        out.truncate(at + n);
        out.extend_from_slice(b" b\r\n");
    } else {
        out.extend_from_slice(key);
        out.extend_from_slice(b"\r\n");
    }
}

/// memcached's uriencode: RFC 3986 unreserved bytes (letters, digits, `-._~`) as they are,
/// every other byte as %XX with upper-case hex.
fn url_encode(out: &mut Vec<u8>, key: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &c in key {
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') {
            out.push(c);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(c >> 4)], HEX[usize::from(c & 15)]]);
        }
    }
}

/// The slab classes a crawl names, judged like memcached's `lru_crawler_crawl`.
#[derive(Debug, PartialEq, Eq)]
enum Classes {
    All,
    Hash,
    /// Whether the list names class 1.
    List(bool),
    /// Only commas: nothing to crawl.
    Empty,
    Bad,
}

fn classes(spec: &[u8]) -> Classes {
    match spec {
        b"all" => return Classes::All,
        b"hash" => return Classes::Hash,
        _ => {}
    }
    let mut any = false;
    let mut has_one = false;
    // strtok: empty pieces between commas are skipped. safe_strtoul truncates to 32 bits.
    for id in spec.split(|&b| b == b',').filter(|p| !p.is_empty()) {
        match parse_u64(id).map(|v| u64::from(v as u32)) {
            Some(v) if (1..=MAX_CLASS).contains(&v) => {
                any = true;
                has_one |= v == 1;
            }
            _ => return Classes::Bad,
        }
    }
    if any {
        Classes::List(has_one)
    } else {
        Classes::Empty
    }
}

const DISABLED: &[u8] = b"CLIENT_ERROR lru crawler disabled";
const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format";
const BAD_CLASS: &[u8] = b"BADCLASS invalid class id";
const NOT_STARTED: &[u8] = b"NOTSTARTED no items to crawl";
/// -X (memcached's --disable-dumping) refuses the key dumps with these lines.
const METADUMP_OFF: &[u8] = b"ERROR metadump not allowed";
const MGDUMP_OFF: &[u8] = b"ERROR key dump not allowed";
const CACHEDUMP_OFF: &[u8] = b"CLIENT_ERROR stats cachedump not allowed";

/// `lru_crawler <args>`, with memcached 1.6.45's replies: a subcommand is named by any prefix
/// of it (`lru_crawler m all` is a metadump), tried in memcached's order. Returns
/// the metadump asked for, if any (the protocol answers `Next::Metadump`); the connection calls `Metadump::begin` (which may refuse
/// it), then `Metadump::step` until it is done.
pub fn command(args: Keys<'_>, sh: &Shared, out: &mut Vec<u8>) -> Option<Box<Metadump>> {
    let mut w = args.iter();
    let (sub, arg, extra) = (w.next(), w.next(), w.next());
    let is = |name: &[u8]| sub.is_some_and(|s| name.starts_with(s));
    let enabled = sh.crawler.enabled.load(Relaxed);
    // The subcommand by its full name, for the match below (None: no form fits).
    let named: Option<&[u8]> = match (arg, extra) {
        (Some(_), None) => [&b"crawl"[..], b"metadump", b"mgdump", b"tocrawl", b"sleep"]
            .into_iter()
            .find(|n| is(n)),
        (None, None) => [&b"enable"[..], b"disable"].into_iter().find(|n| is(n)),
        _ => None,
    };
    let reply: &[u8] = match (named, arg) {
        (Some(which @ (b"metadump" | b"mgdump")), Some(spec)) => {
            if !enabled {
                DISABLED
            } else if !sh.config.dump_enabled {
                if which == b"mgdump" {
                    MGDUMP_OFF
                } else {
                    METADUMP_OFF
                }
            } else {
                // The connection begins it: only it knows what replies are still unsent.
                return Some(Box::new(Metadump::asked(spec, which == b"mgdump")));
            }
        }
        // A crawl reclaims expired items; mnemo's maintenance thread already does that once a
        // second, so there is nothing to start, only memcached's answers to give.
        (Some(b"crawl"), Some(spec)) => {
            if !enabled {
                DISABLED
            } else {
                match classes(spec) {
                    Classes::All | Classes::List(_) => {
                        sh.crawler.starts.fetch_add(1, Relaxed);
                        b"OK"
                    }
                    Classes::Hash => b"ERROR an unknown error happened",
                    Classes::Empty => NOT_STARTED,
                    Classes::Bad => BAD_CLASS,
                }
            }
        }
        // Crawler pacing knobs: checked like memcached's and kept for `stats settings`, with
        // nothing to pace.
        (Some(b"tocrawl"), Some(n)) => match parse_u64(n) {
            Some(v) => {
                // memcached stores it in a 32-bit field.
                sh.crawler.tocrawl.store(v as u32, Relaxed);
                b"OK"
            }
            None => BAD_FORMAT,
        },
        (Some(b"sleep"), Some(n)) => match parse_u64(n).map(|v| v as u32) {
            Some(v) if v > 1_000_000 => b"CLIENT_ERROR sleep must be one second or less",
            Some(v) => {
                sh.crawler.sleep.store(v, Relaxed);
                b"OK"
            }
            None => BAD_FORMAT,
        },
        (Some(b"enable"), None) => {
            // memcached refuses to start a crawler thread that is already running.
            if sh.crawler.enabled.swap(true, Relaxed) {
                b"ERROR failed to start lru crawler thread"
            } else {
                b"OK"
            }
        }
        (Some(b"disable"), None) => {
            sh.crawler.enabled.store(false, Relaxed);
            b"OK"
        }
        _ => b"ERROR",
    };
    line(out, reply);
    None
}

/// memcached's reply to `stats cachedump` is at most this long (its buffer), END included.
const CACHEDUMP_MAX: usize = 2 * 1024 * 1024;
/// memcached's MAX_NUMBER_OF_SLAB_CLASSES: cachedump accepts class ids below it.
const CLASS_IDS: u32 = 64;

/// `stats cachedump <class> <limit>` (the words after `cachedump`), as memcached 1.6.45 answers
/// (its strict 32-bit reader since 1.6.40: no sign, no wrap, so 4294967360 is refused):
/// at most `limit` items (0: no count limit), and never more lines than fit in its 2 MB
/// buffer together with END.
///
/// Keys holding a space, a control byte or DEL are left out: only the binary protocol or a
/// base64 (`b`) meta key can store them, memcached skips the latter ("binary keys") and a raw
/// one would break the reply's lines.
///
/// `<size> b` should be the value's length (memcached's `nbytes - 2`); the store's dump walk
/// reports only the bytes an item occupies, and reading each value to learn its length would
/// mark it fetched. Until the walk reports the value length, the occupied bytes are shown.
pub fn cachedump<'a>(mut args: impl Iterator<Item = &'a [u8]>, sh: &Shared, out: &mut Vec<u8>) {
    if !sh.config.dump_enabled {
        line(out, CACHEDUMP_OFF);
        return;
    }
    let (Some(class), Some(limit)) = (args.next(), args.next()) else {
        line(out, b"CLIENT_ERROR bad command line");
        return;
    };
    let (Some(class), Some(limit)) = (tok_u32(class), tok_u32(limit)) else {
        line(out, BAD_FORMAT);
        return;
    };
    if class >= CLASS_IDS {
        line(out, b"CLIENT_ERROR Illegal slab id");
        return;
    }
    let start = out.len();
    // Room for the lines: END\r\n and memcached's terminating NUL stay inside the buffer.
    let room = CACHEDUMP_MAX - b"END\r\n\0".len();
    let mut shown = 0u32;
    let mut full = class != 1;
    let mut cursor = DumpCursor::new();
    let started = sh.clock.process_started();
    while !full {
        let more = sh.store.dump_step(&mut cursor, sh.clock.now(), |it| {
            if full || it.key.iter().any(|&b| b <= b' ' || b == 0x7f) {
                return;
            }
            let at = out.len();
            cachedump_line(out, it, started);
            if out.len() - start > room {
                out.truncate(at);
                full = true;
                return;
            }
            shown += 1;
            full = limit != 0 && shown >= limit;
        });
        full |= !more;
    }
    line(out, b"END");
}

/// `ITEM <key> [<size> b; <exp> s]`: exp 0 for an item that never expires, else Unix time.
fn cachedump_line(out: &mut Vec<u8>, it: &DumpItem<'_>, started: u64) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b"ITEM ");
    out.extend_from_slice(it.key);
    out.extend_from_slice(b" [");
    out.extend_from_slice(b.format(it.value_len).as_bytes());
    out.extend_from_slice(b" b; ");
    let exp = if it.exp == 0 {
        0
    } else {
        u64::from(it.exp) + started
    };
    out.extend_from_slice(b.format(exp).as_bytes());
    out.extend_from_slice(b" s]\r\n");
}

/// `slabs automove`: memcached's settings change, and nothing else does (no pages to move).
pub fn slabs_automove(setting: Automove, noreply: bool, sh: &Shared, out: &mut Vec<u8>) {
    let knobs = &sh.slab_automove;
    match setting {
        Automove::Level(level) => knobs.set_level(level),
        Automove::Ratio(bits) => knobs.set_ratio(f64::from_bits(bits)),
        Automove::Window(w) => knobs.set_window(w),
        // The flash tier's setting (memcached's slab_automove_freeratio), shown with the rest.
        Automove::FreeRatio(bits) => sh.extstore.lock().automove_freeratio = f64::from_bits(bits),
    }
    if !noreply {
        line(out, b"OK");
    }
}

/// `slabs reassign <src> <dst>` with memcached 1.6.18's checks, in its order. A page can move
/// only from a class holding two or more; mnemo's classes hold none, so a valid request is
/// answered as memcached answers one for a class without a spare page, and `-1` ("any class")
/// as memcached does when it finds none to pick.
pub fn slabs_reassign(src: i32, dst: i32, sh: &Shared, out: &mut Vec<u8>) {
    let largest = memcached_largest_class(sh.config.growth_factor, sh.config.chunk_size);
    // Class 0 is memcached's global page pool, a valid source and destination.
    let valid = |id: i32| (0..=largest).contains(&id);
    let reply: &[u8] = if !sh.config.ext.slab_reassign {
        b"CLIENT_ERROR slab reassignment disabled"
    } else if src == dst {
        b"SAME src and dst class are identical"
    } else if src == -1 || !valid(src) || !valid(dst) {
        b"BADCLASS invalid src or dst class id"
    } else {
        b"NOSPARE source class has no spare pages"
    };
    line(out, reply);
}

/// The highest slab class id memcached 1.6.18 creates with `-f factor -n chunk_size` (its
/// `slabs_init`; `-o slab_sizes`/`slab_chunk_max`, which mnemo ignores, are left out), so
/// `slabs reassign` tells valid ids from bad ones as the same memcached command line would.
fn memcached_largest_class(factor: f64, chunk_size: u32) -> i32 {
    /// sizeof(item) on a 64-bit build.
    const ITEM_HEADER: u32 = 48;
    /// slab_chunk_max: half of memcached's 1 MB slab page, whatever -I says.
    const CHUNK_MAX: f64 = 512.0 * 1024.0;
    const CHUNK_ALIGN: u32 = 8;
    let mut size = ITEM_HEADER.wrapping_add(chunk_size);
    let mut id = 1;
    while id < CLASS_IDS as i32 - 1 && f64::from(size) < CHUNK_MAX / factor {
        size = size.next_multiple_of(CHUNK_ALIGN);
        size = (f64::from(size) * factor) as u32;
        id += 1;
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_encoding_is_memcacheds() {
        let mut out = Vec::new();
        url_encode(&mut out, "a%/\u{e9}~-._:b Z9".as_bytes());
        assert_eq!(out, b"a%25%2F%C3%A9~-._%3Ab%20Z9");
    }

    #[test]
    fn mgdump_lines() {
        let mut out = Vec::new();
        mg_line(&mut out, b"plain:key");
        mg_line(&mut out, b"a b");
        mg_line(&mut out, b"\x01\x7f");
        assert_eq!(out, b"mg plain:key\r\nmg YSBi b\r\nmg AX8= b\r\n");
    }

    #[test]
    fn line_layout() {
        let mut out = Vec::new();
        let it = DumpItem {
            key: b"k",
            exp: 0,
            cas: 7,
            flags: 5,
            size: 9,
            value_len: 4,
            fetched: false,
            written: 70,
        };
        item_line(&mut out, &it, 1000);
        item_line(
            &mut out,
            &DumpItem {
                exp: 100,
                fetched: true,
                ..it
            },
            1000,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "key=k exp=-1 la=1070 cas=7 fetch=no cls=1 size=9 flags=5 \n\
             key=k exp=1100 la=1070 cas=7 fetch=yes cls=1 size=9 flags=5 \n"
        );
    }

    #[test]
    fn reassign_bounds_follow_memcached_flags() {
        // Measured on memcached 1.6.18: the last id `slabs reassign 0 <id>` accepts.
        for (factor, chunk, largest) in [
            (1.25, 48, 39),
            (2.0, 100, 12),
            (3.0, 1000, 6),
            (1.25, 5, 41),
            (1.05, 48, 63),
        ] {
            assert_eq!(
                memcached_largest_class(factor, chunk),
                largest,
                "-f {factor} -n {chunk}"
            );
        }
    }

    #[test]
    fn cachedump_line_layout() {
        let mut out = Vec::new();
        let it = DumpItem {
            key: b"k",
            exp: 0,
            cas: 7,
            flags: 5,
            size: 9,
            value_len: 4,
            fetched: false,
            written: 70,
        };
        cachedump_line(&mut out, &it, 1000);
        cachedump_line(&mut out, &DumpItem { exp: 100, ..it }, 1000);
        assert_eq!(out, b"ITEM k [4 b; 0 s]\r\nITEM k [4 b; 1100 s]\r\n");
    }

    #[test]
    fn class_lists_like_memcached() {
        assert!(matches!(classes(b"all"), Classes::All));
        assert!(matches!(classes(b"hash"), Classes::Hash));
        assert!(matches!(classes(b"1,"), Classes::List(true)));
        assert!(matches!(classes(b"+1"), Classes::List(true)));
        assert!(matches!(classes(b"4294967297"), Classes::List(true)));
        assert!(matches!(classes(b"2,63"), Classes::List(false)));
        assert!(matches!(classes(b","), Classes::Empty));
        for bad in [&b"0"[..], b"64", b"-1", b"x", b"2,x", b"ALL"] {
            assert!(matches!(classes(bad), Classes::Bad), "{bad:?}");
        }
    }
}
