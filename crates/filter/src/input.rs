//! The input layout (see the crate docs), written once, straight into where the filter reads
//! it: guest memory for WebAssembly, a per-thread buffer for native filters.

/// Marks a missing key in an entry's length field.
pub const MISSING: u32 = u32::MAX;

/// What the server feeds a call, key by key in request order.
pub trait InputSink {
    /// The key's value and client flags.
    fn value(&mut self, flags: u32, data: &[u8]);
    /// The key is not in the cache.
    fn missing(&mut self);
}

/// How a caller feeds one call: invoked once with the sink, it reports every key in order.
pub type Fill<'a> = &'a mut dyn FnMut(&mut dyn InputSink);

/// Where encoded bytes go. `put` may refuse (the memory cap), after which the encoder stops.
pub(crate) trait Bytes {
    fn put(&mut self, bytes: &[u8]) -> bool;
}

impl Bytes for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) -> bool {
        self.extend_from_slice(bytes);
        true
    }
}

/// Writes the layout for a known number of keys. Entries beyond `nkeys` are ignored and
/// missing ones are filled with "missing" marks by [`Encoder::finish`], so the guest always
/// sees a consistent buffer whatever the caller did.
pub(crate) struct Encoder<B: Bytes> {
    pub bytes: B,
    remaining: u32,
    pub failed: bool,
}

impl<B: Bytes> Encoder<B> {
    pub fn new(mut bytes: B, args: &[u8], nkeys: u32) -> Encoder<B> {
        let ok = bytes.put(&(args.len() as u32).to_le_bytes())
            && bytes.put(args)
            && bytes.put(&nkeys.to_le_bytes());
        Encoder {
            bytes,
            remaining: nkeys,
            failed: !ok,
        }
    }

    fn entry(&mut self, flags: u32, len: u32, data: &[u8]) {
        if self.failed || self.remaining == 0 {
            return;
        }
        self.remaining -= 1;
        let mut head = [0u8; 8];
        head[..4].copy_from_slice(&flags.to_le_bytes());
        head[4..].copy_from_slice(&len.to_le_bytes());
        self.failed = !(self.bytes.put(&head) && self.bytes.put(data));
    }

    /// Pad with "missing" marks up to the announced count; false if a write was refused.
    pub fn finish(&mut self) -> bool {
        while self.remaining > 0 && !self.failed {
            self.missing();
        }
        !self.failed
    }
}

impl<B: Bytes> InputSink for Encoder<B> {
    fn value(&mut self, flags: u32, data: &[u8]) {
        // Values are bounded by the item size limit (at most 1 GiB), far below u32::MAX.
        let len = u32::try_from(data.len())
            .unwrap_or(MISSING - 1)
            .min(MISSING - 1);
        self.entry(flags, len, &data[..len as usize]);
    }

    fn missing(&mut self) {
        self.entry(0, MISSING, &[]);
    }
}

/// Encode a whole input in memory (tests, tools).
pub fn encode(args: &[u8], entries: &[Option<(u32, &[u8])>]) -> Vec<u8> {
    let mut e = Encoder::new(Vec::new(), args, entries.len() as u32);
    for entry in entries {
        match entry {
            Some((flags, data)) => e.value(*flags, data),
            None => e.missing(),
        }
    }
    e.finish();
    e.bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_bytes() {
        let b = encode(b"10", &[Some((7, b"abc")), None]);
        let mut want = vec![2, 0, 0, 0, b'1', b'0', 2, 0, 0, 0];
        want.extend_from_slice(&[7, 0, 0, 0, 3, 0, 0, 0, b'a', b'b', b'c']);
        want.extend_from_slice(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(b, want);
    }

    #[test]
    fn short_and_long_feeds_stay_consistent() {
        let mut e = Encoder::new(Vec::new(), b"", 2);
        e.value(1, b"x");
        assert!(e.finish());
        assert_eq!(e.bytes, encode(b"", &[Some((1, b"x")), None]));
        let mut e = Encoder::new(Vec::new(), b"", 1);
        e.value(1, b"x");
        e.value(2, b"y");
        e.finish();
        assert_eq!(e.bytes, encode(b"", &[Some((1, b"x"))]));
    }
}
