//! The requests the text and meta parsers produce, and what the parsers share: the limits,
//! the key iterator, the meta command's flags. Types only, no parsing: text.rs and meta.rs
//! both build these, and each re-exports its own (`text::Request`, `meta::Meta`), so neither
//! parser imports the other's types.

use crate::reply::ErrorReply;

/// Longest key memcached accepts.
pub const KEY_MAX: usize = 250;
/// A command line longer than this without a newline closes the connection, unless it is a
/// `get`/`gets` (multi-gets are unbounded in memcached) or a well-formed `fget`.
pub const LINE_MAX: usize = 2048;
/// mnemo's bound on a multi-get line (memcached has none); far above what clients send.
pub const GET_LINE_MAX: usize = 2 * 1024 * 1024;
/// Longest argument block of an `fget` (mnemo's own command); a longer one is swallowed and
/// refused with "CLIENT_ERROR filter arguments too long".
pub const FGET_ARG_MAX: usize = 64 * 1024;
/// memcached's `sizeof(item)` on 64-bit hosts, part of its item-size check.
const MEMCACHED_ITEM_HEADER: usize = 48;

/// What the parser needs to know about the server's settings.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `-I`: memcached's item size limit, in bytes.
    pub item_size_max: usize,
    /// `-C` turns this off; it changes memcached's size check by the 8 bytes of the CAS field.
    pub use_cas: bool,
}

impl Limits {
    /// memcached's `item_size_ok`: header + key + NUL + flags suffix + data + "\r\n" + cas must
    /// fit in `-I`. Reproduced so that the boundary is byte-for-byte the same.
    pub fn item_fits(&self, key_len: usize, flags: u32, data_len: usize) -> bool {
        let total = MEMCACHED_ITEM_HEADER
            + key_len
            + 1
            + if flags == 0 { 0 } else { 4 }
            + data_len
            + 2
            + if self.use_cas { 8 } else { 0 };
        total <= self.item_size_max
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownMode {
    Immediate,
    Graceful,
    /// Any other argument: "CLIENT_ERROR invalid shutdown mode" once shutdown is enabled.
    Invalid,
}

/// Space-separated keys of a get-family command, borrowed from the line.
#[derive(Debug, Clone, Copy)]
pub struct Keys<'a> {
    pub(crate) bytes: &'a [u8],
    /// The parse saw no space in `bytes`: they are one key, and iterating skips the scan
    /// (a plain one-key `get`, the common request, is then scanned once instead of twice).
    pub(crate) one: bool,
}

impl<'a> Keys<'a> {
    /// The words of `bytes`, split at spaces (runs of them give no empty key).
    pub fn new(bytes: &'a [u8]) -> Self {
        Keys { bytes, one: false }
    }

    pub fn iter(&self) -> KeyIter<'a> {
        KeyIter {
            rest: self.bytes,
            one: self.one,
            done: false,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }
}

/// Equal when the bytes are: `one` only says what a scan of them would find.
impl PartialEq for Keys<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for Keys<'_> {}

/// The keys of a [`Keys`], in order.
#[derive(Debug, Clone)]
pub struct KeyIter<'a> {
    rest: &'a [u8],
    one: bool,
    done: bool,
}

impl<'a> Iterator for KeyIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        while !self.done {
            let split = if self.one {
                None
            } else {
                memchr::memchr(b' ', self.rest)
            };
            let key = match split {
                Some(i) => {
                    let key = &self.rest[..i];
                    self.rest = &self.rest[i + 1..];
                    key
                }
                None => {
                    self.done = true;
                    self.rest
                }
            };
            if !key.is_empty() {
                return Some(key);
            }
        }
        None
    }
}

// Meta's flags make that variant the large one. A Request lives on the stack for one
// command; boxing it would cost every meta command an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// get / gets; gat / gats carry `touch` with the raw exptime.
    Get {
        keys: Keys<'a>,
        cas: bool,
        touch: Option<i32>,
    },
    Store {
        kind: StoreKind,
        key: &'a [u8],
        flags: u32,
        exptime: i32,
        data: &'a [u8],
        cas: u64,
        noreply: bool,
    },
    /// A storage command whose item exceeds `-I`: memcached replies
    /// "SERVER_ERROR object too large for cache", swallows `swallow` bytes of data (some may
    /// still be on the wire) and, for `set`, drops the key's old value.
    TooLarge {
        kind: StoreKind,
        key: &'a [u8],
        swallow: usize,
        noreply: bool,
    },
    /// A storage line (or `ms`) refused after its data length was read (memcached 1.6.40):
    /// reply `reply` and swallow `swallow` bytes of data (some may still be on the wire).
    BadStoreLine {
        swallow: usize,
        reply: ErrorReply,
        noreply: bool,
    },
    Delete {
        key: &'a [u8],
        noreply: bool,
    },
    Delta {
        key: &'a [u8],
        incr: bool,
        delta: u64,
        noreply: bool,
    },
    Touch {
        key: &'a [u8],
        exptime: i32,
        noreply: bool,
    },
    /// `delay` is the raw value (0 when absent).
    FlushAll {
        delay: i32,
        noreply: bool,
    },
    Version,
    /// `cache_memlimit <MB> [noreply]`.
    CacheMemlimit {
        megabytes: u64,
        noreply: bool,
    },
    /// `mn`: replies "MN".
    MetaNoop,
    /// mg / ms / md / ma.
    Meta(Meta<'a>),
    /// `me <key>`: item details.
    MetaDebug {
        key: &'a [u8],
    },
    Verbosity {
        level: u32,
        noreply: bool,
    },
    Quit,
    /// `refresh_certs [... noreply]`: reload the TLS certificates (memcached takes any
    /// number of words; a last `noreply` silences only the OK).
    RefreshCerts {
        noreply: bool,
    },
    Shutdown {
        mode: ShutdownMode,
    },
    /// `stats [args...]`: the words after `stats`.
    Stats {
        args: Keys<'a>,
    },
    /// `lru_crawler <sub> [arg]`: the words after `lru_crawler` (metadump, enable, ...).
    LruCrawler {
        args: Keys<'a>,
    },
    /// `extstore <name> <value> [noreply]`: the words after `extstore` (at least one).
    Extstore {
        args: Keys<'a>,
        noreply: bool,
    },
    /// `slabs reassign <src> <dst>`: the class ids as memcached's `safe_strtol` reads them.
    SlabsReassign {
        src: i32,
        dst: i32,
    },
    /// `slabs automove <0|1|2>` or `slabs automove ratio <r>`, already judged valid.
    SlabsAutomove {
        setting: Automove,
        noreply: bool,
    },
    /// mnemo's `fget <filter> <arglen> <key>*\r\n<args>\r\n`: run an installed filter over
    /// the keys' values (docs/filters.md).
    Fget {
        filter: &'a [u8],
        args: &'a [u8],
        keys: Keys<'a>,
    },
    /// An `fget` whose argument block exceeds [`FGET_ARG_MAX`]: swallow `swallow` bytes (some
    /// may still be on the wire), then reply "CLIENT_ERROR filter arguments too long".
    FgetArgsTooLong {
        swallow: usize,
    },
    /// `watch [stream ...]`: the words after `watch` (the server judges them).
    Watch {
        args: Keys<'a>,
    },
}

/// What a valid `slabs automove` sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Automove {
    /// 0, 1 or 2.
    Level(u32),
    /// The ratio's `f64::to_bits` (a float would cost `Request` its `Eq`).
    Ratio(u64),
    /// `freeratio <r>` (memcached 1.6.40): the same form as `Ratio`.
    FreeRatio(u64),
    /// `window <seconds>`, 3 to 1800 (memcached 1.6.40).
    Window(u32),
}

// As for Request: returned by value from the parser, never stored.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed<'a> {
    Request(Request<'a>, usize),
    Incomplete(usize),
    Error {
        reply: ErrorReply,
        consumed: usize,
        noreply: bool,
    },
    Close,
}

/// Longest opaque token memcached echoes.
pub const OPAQUE_MAX: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaKind {
    Get,
    Set,
    Delete,
    Arith,
}

/// A key as the command names it: decoded from base64 when the `b` flag is set.
#[derive(Clone, Copy)]
pub struct KeyBuf {
    pub(crate) buf: [u8; KEY_MAX],
    pub(crate) len: u8,
}

impl KeyBuf {
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }
}

impl std::fmt::Debug for KeyBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

impl PartialEq for KeyBuf {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}
impl Eq for KeyBuf {}

/// Everything the flags of one meta command say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetaFlags<'a> {
    /// Flag letters in request order (at most 22 fit on a memcached command line).
    pub(crate) order: [u8; 24],
    pub(crate) n: usize,
    /// `b`: the key token is base64.
    pub base64: bool,
    /// `q`: suppress the "nothing interesting" replies (EN, HD, NF per command).
    pub quiet: bool,
    /// `O`: echoed back.
    pub opaque: Option<&'a [u8]>,
    /// `C`: compare CAS.
    pub compare_cas: Option<u64>,
    /// `T`: new TTL.
    pub ttl: Option<i32>,
    /// `N`: vivify on miss with this TTL.
    pub vivify: Option<i32>,
    /// `R`: win a recache when the TTL left is below this.
    pub recache: Option<i32>,
    /// `F`: client flags.
    pub client_flags: Option<u32>,
    /// `D`: delta for ma.
    pub delta: Option<u64>,
    /// `J`: initial value for ma autovivify.
    pub initial: Option<u64>,
    /// `M`: mode letter.
    pub mode: Option<u8>,
    /// `I`: invalidate (mark stale) instead of the plain operation.
    pub invalidate: bool,
    /// `E` (memcached 1.6.27): the CAS the item modified by this command takes.
    pub cas_in: Option<u64>,
    /// `x` (md, memcached 1.6.27): drop the value, keep the item.
    pub remove_value: bool,
}

impl<'a> MetaFlags<'a> {
    /// The flag letters in request order.
    pub fn letters(&self) -> &[u8] {
        &self.order[..self.n]
    }

    pub fn has(&self, letter: u8) -> bool {
        self.letters().contains(&letter)
    }

    /// The same flags with `opaque` as the O value (a server that answers later keeps its
    /// own copy of the request's bytes).
    pub fn with_opaque<'b>(&self, opaque: Option<&'b [u8]>) -> MetaFlags<'b> {
        let MetaFlags {
            order,
            n,
            base64,
            quiet,
            opaque: _,
            compare_cas,
            ttl,
            vivify,
            recache,
            client_flags,
            delta,
            initial,
            mode,
            invalidate,
            cas_in,
            remove_value,
        } = *self;
        MetaFlags {
            order,
            n,
            base64,
            quiet,
            opaque,
            compare_cas,
            ttl,
            vivify,
            recache,
            client_flags,
            delta,
            initial,
            mode,
            invalidate,
            cas_in,
            remove_value,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta<'a> {
    pub kind: MetaKind,
    /// The key token as sent (base64 when `flags.base64`), echoed by `k`.
    pub raw_key: &'a [u8],
    /// The key the store sees.
    pub key: KeyBuf,
    pub flags: MetaFlags<'a>,
    /// The data block of `ms`.
    pub data: &'a [u8],
}
