//! Near-valid input from a byte string: real command lines (`set k 0 0 5\r\nhello\r\n`,
//! `get a b c`, `mg key v f t`, binary headers with magic 0x80) with their fields drawn from
//! lists of interesting values (limits, signs, overflow, size boundaries), then a few byte
//! mutations. Random bytes alone almost never get past the first token; this reaches the data
//! blocks, flag parsing, size checks and binary opcode shapes. Every byte string is valid.

use mnemo_proto::binary::{opcode, Header, MAGIC_REQUEST};
use mnemo_proto::text::Limits;

/// Choices read from the input; zeros once it runs out (so generation always ends).
pub struct Src<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Src<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Src { data, pos: 0 }
    }
    pub fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
    pub fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    pub fn below(&mut self, n: usize) -> usize {
        if n <= 256 {
            usize::from(self.byte()) % n.max(1)
        } else {
            (usize::from(self.byte()) << 8 | usize::from(self.byte())) % n
        }
    }
    /// True with probability about 1/n; false once the input is used up (where every choice
    /// reads 0), so a stream's tail is not a pile-up of rare events.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == n - 1
    }
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
}

const NUMS: &[&str] = &[
    "0",
    "1",
    "5",
    "10",
    "-1",
    "+3",
    "-0",
    "00",
    "x",
    "1x",
    "4294967295",
    "4294967296",
    "2147483647",
    "2147483648",
    "2147483645",
    "-2147483649",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "\t7",
    "7\r",
    "",
];
const KEYS: &[&str] = &[
    "k", "a", "foo", "key:1", "Zm9v", "Zm9vYg==", "!!", "a\tb", "a\rb", "a\0b", "noreply",
];

fn key(s: &mut Src<'_>) -> Vec<u8> {
    match s.below(10) {
        0 => vec![b'k'; s.pick(&[249, 250, 251, 300])],
        1 => (0..1 + s.below(12))
            .map(|_| s.byte())
            .filter(|&b| b != b' ' && b != b'\n')
            .collect(),
        _ => s.pick(KEYS).as_bytes().to_vec(),
    }
}

fn num(s: &mut Src<'_>) -> Vec<u8> {
    if s.one_in(4) {
        s.below(40).to_string().into_bytes()
    } else {
        s.pick(NUMS).as_bytes().to_vec()
    }
}

fn terminator(s: &mut Src<'_>) -> &'static [u8] {
    if s.below(8) > 0 {
        b"\r\n"
    } else {
        s.pick(&[
            &b"\n"[..],
            b"\r",
            b"",
            b"\r\r\n",
            b" \r\n",
            b"xx",
            b"\n\r\n",
        ])
    }
}

/// Bytes of a value of `n` bytes, sometimes holding line terminators.
fn value(s: &mut Src<'_>, n: usize) -> Vec<u8> {
    let fill = s.pick(b"v\r\n ");
    let mut v = vec![b'v'; n];
    if n > 0 && s.one_in(3) {
        let i = s.below(n);
        v[i] = fill;
    }
    v
}

/// A value length: small, or at the item size limit's edge for this key.
fn value_len(s: &mut Src<'_>, limits: &Limits, key_len: usize) -> usize {
    let edge = limits
        .item_size_max
        .saturating_sub(48 + key_len + 1 + 2 + if limits.use_cas { 8 } else { 0 });
    // Only small limits get their edge: a 1 MiB value per command would make each case slow.
    match s.below(6) {
        0 if edge <= 2048 => (edge + s.below(6)).saturating_sub(3),
        1 if edge <= 2048 => edge.saturating_sub(4 + s.below(3)),
        _ => s.below(12),
    }
}

fn storage(s: &mut Src<'_>, limits: &Limits, out: &mut Vec<u8>) {
    let cmd = s.pick(&["set", "add", "replace", "append", "prepend", "cas", "ms"]);
    let k = key(s);
    let n = value_len(s, limits, k.len());
    let declared = match s.below(8) {
        0 => n.saturating_sub(1).to_string().into_bytes(),
        1 => (n + 1).to_string().into_bytes(),
        2 => num(s),
        _ => n.to_string().into_bytes(),
    };
    let mut toks: Vec<Vec<u8>> = vec![cmd.into(), k];
    if cmd == "ms" {
        toks.push(declared);
        for _ in 0..s.below(4) {
            toks.push(meta_flag(s));
        }
    } else {
        toks.push(if s.one_in(3) { num(s) } else { b"0".to_vec() });
        toks.push(if s.one_in(3) { num(s) } else { b"0".to_vec() });
        toks.push(declared);
        if cmd == "cas" || s.one_in(8) {
            toks.push(num(s));
        }
        if s.one_in(4) {
            toks.push(b"noreply".to_vec());
        }
    }
    line(s, &toks, out);
    out.extend_from_slice(&value(s, n));
    out.extend_from_slice(terminator(s));
}

fn meta_flag(s: &mut Src<'_>) -> Vec<u8> {
    const FLAGS: &[&str] = &[
        "v", "f", "t", "c", "k", "s", "h", "l", "q", "u", "b", "I", "P", "L", "z", "!", "Oabc",
        "O", "T30", "T-1", "Tx", "N30", "R10", "C123", "Cx", "D5", "Dx", "J7", "Jx", "F99", "F-1",
        "MS", "ME", "MA", "MP", "MR", "MI", "M+", "MD", "M-", "Mx", "Mab", "M", "kk", "T",
        "\u{80}",
    ];
    match s.below(12) {
        0 => {
            let mut o = b"O".to_vec();
            o.extend(std::iter::repeat_n(b'o', s.pick(&[31, 32, 33])));
            o
        }
        1 => {
            let mut t = vec![s.pick(b"TNRCDJFM")];
            t.extend(num(s));
            t
        }
        _ => s.pick(FLAGS).as_bytes().to_vec(),
    }
}

/// Join tokens with spaces (sometimes runs of them, sometimes leading), then a terminator.
fn line(s: &mut Src<'_>, toks: &[Vec<u8>], out: &mut Vec<u8>) {
    if s.one_in(16) {
        out.extend(std::iter::repeat_n(b' ', s.below(3) + 1));
    }
    for (i, t) in toks.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(if s.one_in(16) { b"  " } else { b" " });
        }
        out.extend_from_slice(t);
    }
    out.extend_from_slice(terminator(s));
}

fn other(s: &mut Src<'_>, out: &mut Vec<u8>) {
    let mut toks: Vec<Vec<u8>> = Vec::new();
    match s.below(14) {
        0 | 1 => {
            toks.push(s.pick(&["get", "gets", "gat", "gats"]).into());
            if toks[0].starts_with(b"gat") {
                toks.push(num(s));
            }
            let n = if s.one_in(6) {
                20 + s.below(20)
            } else {
                s.below(5)
            };
            for _ in 0..n {
                toks.push(key(s));
            }
        }
        2 | 3 => {
            toks.push(s.pick(&["mg", "md", "ma", "me", "mn", "mx", "m"]).into());
            if !s.one_in(10) {
                toks.push(key(s));
            }
            for _ in 0..s.below(6) {
                toks.push(meta_flag(s));
            }
        }
        4 => {
            toks.push(b"delete".to_vec());
            toks.push(key(s));
            for _ in 0..s.below(3) {
                toks.push(s.pick(&["0", "1", "noreply", "x"]).into());
            }
        }
        5 => {
            toks.push(s.pick(&["incr", "decr", "touch"]).into());
            toks.push(key(s));
            toks.push(num(s));
            if s.one_in(3) {
                toks.push(b"noreply".to_vec());
            }
        }
        6 => {
            toks.push(s.pick(&["flush_all", "verbosity", "cache_memlimit"]).into());
            for _ in 0..s.below(3) {
                toks.push(if s.one_in(2) {
                    b"noreply".to_vec()
                } else {
                    num(s)
                });
            }
        }
        7 => {
            for w in s.pick(&[
                &["version"][..],
                &["quit"],
                &["shutdown"],
                &["shutdown", "graceful"],
                &["shutdown", "x", "y"],
                &["stats"],
                &["stats", "items"],
                &["lru_crawler", "metadump", "all"],
                &["GET", "/", "HTTP/1.1"],
                &["x"],
                &["zz"],
            ]) {
                toks.push(w.as_bytes().to_vec());
            }
        }
        8 => {
            // A long line: past LINE_MAX, sometimes a multi-get (memcached lets those grow).
            let n = s.pick(&[2040, 2047, 2048, 2049, 2100]);
            out.extend_from_slice(if s.one_in(2) { b"get " } else { b"set " });
            out.extend(std::iter::repeat_n(b'a', n));
            out.extend_from_slice(terminator(s));
            return;
        }
        9 | 10 => {
            let r = s.byte();
            out.extend(std::iter::repeat_with(|| s.byte()).take(usize::from(r % 16)));
            return;
        }
        _ => {
            toks.push(s.pick(&["get", "gets"]).into());
            for _ in 0..1 + s.below(3) {
                toks.push(key(s));
            }
        }
    }
    line(s, &toks, out);
}

/// A byte mutation of `out`: flip, insert a separator, delete, or duplicate a stretch.
fn mutate(s: &mut Src<'_>, out: &mut Vec<u8>) {
    if out.is_empty() {
        return;
    }
    let i = s.below(out.len());
    match s.below(4) {
        0 => out[i] = s.byte(),
        1 => out.insert(i, s.pick(b"\r\n \0")),
        2 => {
            out.remove(i);
        }
        _ => {
            let j = (i + 1 + s.below(16)).min(out.len());
            let dup = out[i..j].to_vec();
            out.splice(i..i, dup);
        }
    }
}

pub fn text_stream(data: &[u8], limits: &Limits) -> Vec<u8> {
    let mut s = Src::new(data);
    let mut out = Vec::new();
    while !s.done() && out.len() < 64 * 1024 {
        if s.below(3) == 0 {
            storage(&mut s, limits, &mut out);
        } else {
            other(&mut s, &mut out);
        }
        if s.one_in(6) {
            mutate(&mut s, &mut out);
        }
    }
    out
}

/// One binary request: an opcode's proper shape, often bent (lengths off by one, a body
/// length that contradicts the key, an oversized value, the wrong magic).
fn binary_request(s: &mut Src<'_>, limits: &Limits, out: &mut Vec<u8>) {
    use opcode::*;
    const OPS: &[u8] = &[
        GET,
        SET,
        ADD,
        REPLACE,
        DELETE,
        INCREMENT,
        DECREMENT,
        QUIT,
        FLUSH,
        GETQ,
        NOOP,
        VERSION,
        GETK,
        GETKQ,
        APPEND,
        PREPEND,
        STAT,
        SETQ,
        ADDQ,
        REPLACEQ,
        DELETEQ,
        INCREMENTQ,
        DECREMENTQ,
        QUITQ,
        FLUSHQ,
        APPENDQ,
        PREPENDQ,
        VERBOSITY,
        TOUCH,
        GAT,
        GATQ,
        SASL_LIST_MECHS,
        SASL_AUTH,
        SASL_STEP,
        GATK,
        GATKQ,
        0x25,
        0x40,
        0xff,
    ];
    let op = s.pick(OPS);
    // (extras, has key, has value) memcached expects.
    let (mut ext, has_key, has_value) = match op {
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ => (8, true, true),
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => (20, true, false),
        TOUCH | GAT | GATQ | GATK | GATKQ | VERBOSITY => (4, op != VERBOSITY, false),
        FLUSH | FLUSHQ => (if s.one_in(2) { 4 } else { 0 }, false, false),
        APPEND | APPENDQ | PREPEND | PREPENDQ | SASL_AUTH | SASL_STEP => (0, true, true),
        GET | GETQ | GETK | GETKQ | DELETE | DELETEQ | STAT => {
            (0, op != STAT || s.one_in(2), false)
        }
        _ => (0, false, false),
    };
    if s.one_in(8) {
        ext = s.pick(&[0, 1, 3, 4, 5, 8, 20, 255]);
    }
    let key_len = if has_key || s.one_in(8) {
        match s.below(8) {
            0 => s.pick(&[32, 33, 250, 251]),
            _ => 1 + s.below(8),
        }
    } else {
        0
    };
    let mut vlen = if has_value || s.one_in(8) {
        value_len(s, limits, key_len)
    } else {
        0
    };
    if op == SASL_AUTH && limits.item_size_max <= 2048 && s.one_in(3) {
        vlen = limits.item_size_max / 2 + s.below(3) - 1;
    }
    let honest = ext + key_len + vlen;
    let body_len = match s.below(12) {
        0 => honest.saturating_sub(1) as u32,
        1 => honest as u32 + 1,
        2 => s.pick(&[
            0x7fff_ffff,
            0x8000_0000,
            0xffff_ffff,
            0x8000_0000 + (ext + key_len) as u32,
        ]),
        3 => (ext + key_len) as u32 - s.below(2).min(ext + key_len) as u32,
        _ => honest as u32,
    };
    let h = Header {
        magic: if s.one_in(24) {
            s.pick(&[0x81, 0x00, b'g'])
        } else {
            MAGIC_REQUEST
        },
        opcode: op,
        key_len: key_len as u16,
        extras_len: ext as u8,
        data_type: if s.one_in(16) { s.byte() } else { 0 },
        vbucket_or_status: 0,
        body_len,
        opaque: u32::from(s.byte()),
        cas: if s.one_in(4) { u64::from(s.byte()) } else { 0 },
    };
    h.encode(out);
    out.extend(std::iter::repeat_with(|| s.byte()).take(ext));
    out.extend(std::iter::repeat_n(b'k', key_len));
    // The value as declared, unless that is huge: then whatever follows is the next request.
    let declared = (body_len as usize).saturating_sub(ext + key_len);
    out.extend(std::iter::repeat_n(
        b'v',
        if declared <= 1 << 21 {
            declared
        } else {
            s.below(8)
        },
    ));
}

pub fn binary_stream(data: &[u8], limits: &Limits) -> Vec<u8> {
    let mut s = Src::new(data);
    let mut out = Vec::new();
    while !s.done() && out.len() < 256 * 1024 {
        binary_request(&mut s, limits, &mut out);
        if s.one_in(8) {
            mutate(&mut s, &mut out);
        }
    }
    out
}
