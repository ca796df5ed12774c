//! The fget call's data, seen from the guest: the input buffer the host hands a filter
//! ([`Input`], validated once by [`Input::parse`]), the result a filter builds ([`Output`]),
//! and [`encode_input`], the same layout written from Rust for tests and native callers.
//!
//! Nothing here knows how the bytes arrived (wasm linear memory or a native pointer): that is
//! [`crate::export`]'s concern.

use std::fmt;

/// The ABI version both exports report (`mnemo_abi_version`).
pub const ABI_VERSION: u32 = 1;

/// The length field of an entry whose key is missing (no value bytes follow).
pub const MISSING: u32 = u32::MAX;

/// Bytes of an entry's header: `u32 flags | u32 len`.
const ENTRY_HEAD: usize = 8;

/// Why an input buffer was refused. The host writes the buffer, so any of these means a host
/// bug or a foreign caller; the message is what the filter reports back (status 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbiError {
    /// The buffer ends inside a fixed-size field (`what`), which starts at byte `at`.
    Truncated { what: &'static str, at: usize },
    /// The argument length runs past the end of the buffer.
    ArgsPastEnd { len: u32, available: usize },
    /// `nkeys` entries cannot fit in what is left, even if every one were empty.
    TooManyKeys { nkeys: u32, available: usize },
    /// Entry `index`'s value length runs past the end of the buffer.
    ValuePastEnd {
        index: u32,
        len: u32,
        available: usize,
    },
    /// Bytes are left after the last entry.
    TrailingBytes { count: usize },
}

impl fmt::Display for AbiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AbiError::Truncated { what, at } => {
                write!(f, "bad input: truncated {what} at byte {at}")
            }
            AbiError::ArgsPastEnd { len, available } => {
                write!(
                    f,
                    "bad input: argument length {len} but {available} bytes left"
                )
            }
            AbiError::TooManyKeys { nkeys, available } => {
                write!(f, "bad input: {nkeys} keys cannot fit in {available} bytes")
            }
            AbiError::ValuePastEnd {
                index,
                len,
                available,
            } => {
                write!(
                    f,
                    "bad input: entry {index} has length {len} but {available} bytes left"
                )
            }
            AbiError::TrailingBytes { count } => {
                write!(f, "bad input: {count} bytes after the last entry")
            }
        }
    }
}

impl std::error::Error for AbiError {}

/// One present key's value: its client flags and bytes, borrowed from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Value<'a> {
    pub flags: u32,
    pub data: &'a [u8],
}

/// A validated input buffer. Cheap to copy: it only borrows.
///
/// Parsing walks every entry once, so iterating [`Input::values`] afterwards needs no checks
/// that can fail.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    args: &'a [u8],
    nkeys: u32,
    /// The entries, exactly: from the first entry header to the end of the buffer.
    entries: &'a [u8],
}

fn read_u32(buf: &[u8], at: usize, what: &'static str) -> Result<u32, AbiError> {
    let end = at.checked_add(4).ok_or(AbiError::Truncated { what, at })?;
    match buf.get(at..end) {
        Some(b) => Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        None => Err(AbiError::Truncated { what, at }),
    }
}

/// Decode the entry at `pos` of `entries` (entry number `index`, for messages): the entry and
/// the position just past it. The one place that reads an entry, used by both validation and
/// iteration.
fn entry_at(
    entries: &[u8],
    pos: usize,
    index: u32,
) -> Result<(Option<Value<'_>>, usize), AbiError> {
    let flags = read_u32(entries, pos, "entry flags")?;
    let len = read_u32(entries, pos + 4, "entry length")?;
    let start = pos + ENTRY_HEAD;
    if len == MISSING {
        // The flags of a missing entry are meaningless (the host writes 0); not worth refusing.
        return Ok((None, start));
    }
    let available = entries.len() - start;
    if len as usize > available {
        return Err(AbiError::ValuePastEnd {
            index,
            len,
            available,
        });
    }
    let end = start + len as usize;
    Ok((
        Some(Value {
            flags,
            data: &entries[start..end],
        }),
        end,
    ))
}

impl<'a> Input<'a> {
    /// Validate the whole buffer: every length inside it, nothing left over. Never panics.
    pub fn parse(bytes: &'a [u8]) -> Result<Input<'a>, AbiError> {
        let arg_len = read_u32(bytes, 0, "argument length")?;
        let available = bytes.len() - 4;
        if arg_len as usize > available {
            return Err(AbiError::ArgsPastEnd {
                len: arg_len,
                available,
            });
        }
        let args_end = 4 + arg_len as usize;
        let args = &bytes[4..args_end];
        let nkeys = read_u32(bytes, args_end, "key count")?;
        let entries = &bytes[args_end + 4..];
        // Every entry has at least its header: refuse an absurd count before walking it.
        if nkeys as u64 * ENTRY_HEAD as u64 > entries.len() as u64 {
            return Err(AbiError::TooManyKeys {
                nkeys,
                available: entries.len(),
            });
        }
        let mut pos = 0;
        for index in 0..nkeys {
            pos = entry_at(entries, pos, index)?.1;
        }
        if pos != entries.len() {
            return Err(AbiError::TrailingBytes {
                count: entries.len() - pos,
            });
        }
        Ok(Input {
            args,
            nkeys,
            entries,
        })
    }

    /// The argument bytes of the request (possibly empty).
    pub fn args(&self) -> &'a [u8] {
        self.args
    }

    /// The number of keys in the request, missing ones included.
    pub fn len(&self) -> usize {
        self.nkeys as usize
    }

    pub fn is_empty(&self) -> bool {
        self.nkeys == 0
    }

    /// Each key's value in request order; `None` for a key the cache does not hold.
    pub fn values(&self) -> Values<'a> {
        Values {
            entries: self.entries,
            pos: 0,
            index: 0,
            nkeys: self.nkeys,
        }
    }
}

/// Iterator over an [`Input`]'s entries (see [`Input::values`]).
#[derive(Debug, Clone)]
pub struct Values<'a> {
    entries: &'a [u8],
    pos: usize,
    index: u32,
    nkeys: u32,
}

impl<'a> Iterator for Values<'a> {
    type Item = Option<Value<'a>>;

    fn next(&mut self) -> Option<Option<Value<'a>>> {
        if self.index == self.nkeys {
            return None;
        }
        // Validated by Input::parse, so this cannot fail; if it somehow did, end the iteration
        // rather than panic inside a filter.
        let (value, next) = entry_at(self.entries, self.pos, self.index).ok()?;
        self.pos = next;
        self.index += 1;
        Some(value)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.nkeys - self.index) as usize;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Values<'_> {}

/// What a filter returns: bytes and the flags of the reply's `VALUE` line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    data: Vec<u8>,
    flags: u32,
}

impl Output {
    pub fn new() -> Output {
        Output::default()
    }

    /// Start with room for `capacity` bytes, when the filter can tell its output size.
    pub fn with_capacity(capacity: usize) -> Output {
        Output {
            data: Vec::with_capacity(capacity),
            flags: 0,
        }
    }

    /// Append bytes to the result.
    pub fn write(&mut self, bytes: &[u8]) {
        self.data.extend_from_slice(bytes);
    }

    /// The flags of the reply (0 unless set).
    pub fn set_flags(&mut self, flags: u32) {
        self.flags = flags;
    }

    pub fn flags(&self) -> u32 {
        self.flags
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.data
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn reserve(&mut self, additional: usize) {
        self.data.reserve(additional);
    }

    /// Forget the bytes written so far (the flags stay).
    pub fn clear(&mut self) {
        self.data.clear();
    }

    /// The underlying buffer, for encoders that append to a `Vec<u8>` (e.g.
    /// [`crate::records::Record::encode`]).
    pub fn vec_mut(&mut self) -> &mut Vec<u8> {
        &mut self.data
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.data
    }
}

impl std::io::Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.data.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Write the input layout: `args`, then one entry per key in order (`None` = missing, as
/// `(flags, value)` otherwise). What the host does, for tests and for native callers.
///
/// # Panics
/// If `args`, the key count or a value does not fit the layout's u32 lengths (a value may be
/// at most `u32::MAX - 1` bytes: `u32::MAX` marks a missing key).
pub fn encode_input(args: &[u8], entries: &[Option<(u32, &[u8])>]) -> Vec<u8> {
    let u32_len = |n: usize, what: &str| -> u32 {
        match u32::try_from(n) {
            Ok(n) if n != MISSING => n,
            _ => panic!("encode_input: {what} of {n} bytes does not fit the layout"),
        }
    };
    let size = 8
        + args.len()
        + entries
            .iter()
            .map(|e| ENTRY_HEAD + e.map_or(0, |(_, v)| v.len()))
            .sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&u32_len(args.len(), "arguments").to_le_bytes());
    out.extend_from_slice(args);
    out.extend_from_slice(&u32_len(entries.len(), "key count").to_le_bytes());
    for entry in entries {
        match entry {
            Some((flags, value)) => {
                out.extend_from_slice(&flags.to_le_bytes());
                out.extend_from_slice(&u32_len(value.len(), "value").to_le_bytes());
                out.extend_from_slice(value);
            }
            None => {
                out.extend_from_slice(&0u32.to_le_bytes());
                out.extend_from_slice(&MISSING.to_le_bytes());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn owned(input: &Input<'_>) -> Vec<Option<(u32, Vec<u8>)>> {
        input
            .values()
            .map(|v| v.map(|v| (v.flags, v.data.to_vec())))
            .collect()
    }

    #[test]
    fn round_trip() {
        let bytes = encode_input(b"10", &[Some((7, b"abc")), None, Some((0, b"")), None]);
        let input = Input::parse(&bytes).unwrap();
        assert_eq!(input.args(), b"10");
        assert_eq!(input.len(), 4);
        assert_eq!(input.values().len(), 4);
        assert_eq!(
            owned(&input),
            vec![Some((7, b"abc".to_vec())), None, Some((0, vec![])), None]
        );
    }

    #[test]
    fn empty_request() {
        let bytes = encode_input(b"", &[]);
        assert_eq!(bytes, [0u8; 8]);
        let input = Input::parse(&bytes).unwrap();
        assert!(input.is_empty() && input.args().is_empty());
        assert_eq!(input.values().next(), None);
    }

    #[test]
    fn exact_layout() {
        let bytes = encode_input(b"k", &[Some((0x0102_0304, b"xy")), None]);
        #[rustfmt::skip]
        let want = [
            1, 0, 0, 0, b'k', 2, 0, 0, 0,
            4, 3, 2, 1, 2, 0, 0, 0, b'x', b'y',
            0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
        ];
        assert_eq!(bytes, want);
    }

    #[test]
    fn malformed_inputs_are_refused() {
        let good = encode_input(b"abc", &[Some((1, b"hello")), None]);
        // Every strict prefix is malformed.
        for n in 0..good.len() {
            assert!(
                Input::parse(&good[..n]).is_err(),
                "prefix of {n} bytes accepted"
            );
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(
            Input::parse(&trailing).unwrap_err(),
            AbiError::TrailingBytes { count: 1 }
        );

        assert_eq!(
            Input::parse(&[]).unwrap_err(),
            AbiError::Truncated {
                what: "argument length",
                at: 0
            }
        );
        // Argument length past the end, including the largest one (no overflow on wasm32).
        for len in [4u32, 0xFFFF_FFFF, 0xFFFF_FFFC] {
            let mut b = len.to_le_bytes().to_vec();
            b.extend_from_slice(&[0; 3]);
            assert!(
                matches!(Input::parse(&b), Err(AbiError::ArgsPastEnd { .. })),
                "{len}"
            );
        }
        // A huge key count is refused without walking it.
        let mut b = encode_input(b"", &[]);
        b[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            Input::parse(&b).unwrap_err(),
            AbiError::TooManyKeys {
                nkeys: u32::MAX,
                available: 0
            }
        );
        // A value length past the end, and the largest non-missing length.
        for len in [14u32, 0xFFFF_FFFE] {
            let mut b = good.clone();
            b[15..19].copy_from_slice(&len.to_le_bytes());
            assert!(
                matches!(
                    Input::parse(&b),
                    Err(AbiError::ValuePastEnd { index: 0, .. })
                ),
                "{len}"
            );
        }
        // Messages read well.
        assert_eq!(
            AbiError::ValuePastEnd {
                index: 2,
                len: 9,
                available: 3
            }
            .to_string(),
            "bad input: entry 2 has length 9 but 3 bytes left"
        );
    }

    #[test]
    fn output_collects_bytes_and_flags() {
        let mut out = Output::with_capacity(4);
        out.write(b"ab");
        std::io::Write::write_all(&mut out, b"cd").unwrap();
        out.vec_mut().push(b'e');
        out.set_flags(9);
        assert_eq!(
            (out.as_bytes(), out.flags(), out.len()),
            (&b"abcde"[..], 9, 5)
        );
        out.clear();
        assert!(out.is_empty());
        assert_eq!(out.flags(), 9);
    }

    fn borrow(entries: &[Option<(u32, Vec<u8>)>]) -> Vec<Option<(u32, &[u8])>> {
        entries
            .iter()
            .map(|e| e.as_ref().map(|(f, v)| (*f, v.as_slice())))
            .collect()
    }

    fn entries() -> impl Strategy<Value = Vec<Option<(u32, Vec<u8>)>>> {
        prop::collection::vec(
            prop::option::of((any::<u32>(), prop::collection::vec(any::<u8>(), 0..40))),
            0..12,
        )
    }

    proptest! {
        #[test]
        fn encode_then_parse_is_identity(args in prop::collection::vec(any::<u8>(), 0..30), entries in entries()) {
            let borrowed = borrow(&entries);
            let bytes = encode_input(&args, &borrowed);
            let input = Input::parse(&bytes).unwrap();
            prop_assert_eq!(input.args(), &args[..]);
            prop_assert_eq!(owned(&input), entries);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(input) = Input::parse(&bytes) {
                // Whatever was accepted re-encodes to a buffer of the same size (byte for byte but
                // for a missing entry's flags, which are not kept).
                let entries: Vec<_> = input.values().map(|v| v.map(|v| (v.flags, v.data))).collect();
                prop_assert_eq!(entries.len(), input.len());
                prop_assert_eq!(encode_input(input.args(), &entries).len(), bytes.len());
            }
        }

        #[test]
        fn corrupted_valid_inputs_never_panic(
            entries in entries(),
            at in any::<prop::sample::Index>(),
            word in prop_oneof![Just(0u32), Just(u32::MAX), Just(u32::MAX - 1), Just(0x8000_0000), any::<u32>()],
            cut in any::<prop::sample::Index>(),
        ) {
            let borrowed = borrow(&entries);
            let mut bytes = encode_input(b"5", &borrowed);
            let i = at.index(bytes.len());
            let end = (i + 4).min(bytes.len());
            bytes[i..end].copy_from_slice(&word.to_le_bytes()[..end - i]);
            let _ = Input::parse(&bytes).map(|input| input.values().count());
            let n = cut.index(bytes.len());
            let _ = Input::parse(&bytes[..n]).map(|input| input.values().count());
        }
    }
}
