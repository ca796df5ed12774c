//! Reply encoding for the text protocol: memcached's exact error lines and helpers that
//! append replies to a connection's output buffer (no allocation beyond the buffer's growth).

/// Every error line the text protocol can send, with memcached's exact wording.
/// The wording of each is written once, in [`ErrorReply::text`]; Display shows the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorReply {
    Error,
    BadFormat,
    /// A get-family key over 250 bytes: memcached 1.6.40 sends the BadFormat line followed by
    /// an empty line (its get error path appends a second "\r\n").
    BadKeyInGet,
    BadDataChunk,
    LineTooLong,
    TooLarge,
    OutOfMemory,
    /// md x finding no memory for the emptied item (memcached 1.6.27).
    OutOfMemoryPlain,
    BadDelta,
    BadExptime,
    NonNumeric,
    ShutdownDisabled,
    ShutdownMode,
    /// `slabs automove window N` outside 3..=1800 (memcached 1.6.40).
    AutomoveWindow,
    FlushDisabled,
    Unauthenticated,
    InvalidFlag,
    DuplicateFlag,
    InvalidOrDuplicateFlag,
    BadToken,
    KeyDecode,
    OpaqueTooLong,
    BadDeltaValue,
    BadInitialValue,
    SetMode,
    ArithMode,
    /// mg past memcached's 20 tokens.
    GetFlagsTooLong,
    /// ms, md and ma past memcached's 20 tokens (their wording differs from mg's).
    FlagsTooLong,
    // mnemo's own: fget (memcached has no such command).
    UnknownFilter,
    TooManyKeys,
    FilterArgsTooLong,
    /// fget over UDP: a filter call completes off the event loop, a datagram's replies now.
    FgetOverUdp,
}

impl ErrorReply {
    /// The reply line without its terminator.
    pub fn text(self) -> &'static str {
        match self {
            ErrorReply::Error => "ERROR",
            ErrorReply::BadFormat | ErrorReply::BadKeyInGet => {
                "CLIENT_ERROR bad command line format"
            }
            ErrorReply::BadDataChunk => "CLIENT_ERROR bad data chunk",
            ErrorReply::LineTooLong => "CLIENT_ERROR line too long",
            ErrorReply::TooLarge => "SERVER_ERROR object too large for cache",
            ErrorReply::OutOfMemory => "SERVER_ERROR out of memory storing object",
            ErrorReply::OutOfMemoryPlain => "SERVER_ERROR out of memory",
            ErrorReply::BadDelta => "CLIENT_ERROR invalid numeric delta argument",
            ErrorReply::BadExptime => "CLIENT_ERROR invalid exptime argument",
            ErrorReply::NonNumeric => {
                "CLIENT_ERROR cannot increment or decrement non-numeric value"
            }
            // memcached 1.6.40 (1.6.18 to 1.6.39: "ERROR: shutdown not enabled").
            ErrorReply::ShutdownDisabled => "SERVER_ERROR: shutdown not enabled",
            ErrorReply::ShutdownMode => "CLIENT_ERROR invalid shutdown mode",
            ErrorReply::AutomoveWindow => "CLIENT_ERROR automove window too low or too high",
            ErrorReply::FlushDisabled => "CLIENT_ERROR flush_all not allowed",
            ErrorReply::Unauthenticated => "CLIENT_ERROR unauthenticated",
            ErrorReply::InvalidFlag => "CLIENT_ERROR invalid flag",
            ErrorReply::DuplicateFlag => "CLIENT_ERROR duplicate flag",
            ErrorReply::InvalidOrDuplicateFlag => "CLIENT_ERROR invalid or duplicate flag",
            ErrorReply::BadToken => "CLIENT_ERROR bad token in command line format",
            ErrorReply::KeyDecode => "CLIENT_ERROR error decoding key",
            ErrorReply::OpaqueTooLong => "CLIENT_ERROR opaque token too long",
            ErrorReply::BadDeltaValue => "CLIENT_ERROR invalid numeric delta value",
            ErrorReply::BadInitialValue => "CLIENT_ERROR invalid numeric initial value",
            ErrorReply::SetMode => "CLIENT_ERROR invalid mode for ms M token",
            ErrorReply::ArithMode => "CLIENT_ERROR invalid mode for ma M token",
            ErrorReply::GetFlagsTooLong => "CLIENT_ERROR options flags are too long",
            ErrorReply::FlagsTooLong => "CLIENT_ERROR options flags too long",
            ErrorReply::UnknownFilter => "CLIENT_ERROR unknown filter",
            ErrorReply::TooManyKeys => "CLIENT_ERROR too many keys",
            ErrorReply::FilterArgsTooLong => "CLIENT_ERROR filter arguments too long",
            ErrorReply::FgetOverUdp => "SERVER_ERROR fget is not served over UDP",
        }
    }

    /// Append the line and its `\r\n`.
    pub fn write(self, out: &mut Vec<u8>) {
        line(out, self.text().as_bytes());
        if self == ErrorReply::BadKeyInGet {
            line(out, b"");
        }
    }
}

impl std::fmt::Display for ErrorReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text())
    }
}

impl std::error::Error for ErrorReply {}

/// Append `text\r\n`.
pub fn line(out: &mut Vec<u8>, text: &[u8]) {
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
}

/// Append an unsigned number followed by `\r\n` (the reply to incr/decr).
pub fn number_line(out: &mut Vec<u8>, n: u64) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Append the header of a `VALUE` reply; the caller appends the data and `\r\n`.
/// `VALUE <key> <flags> <bytes>[ <cas>]\r\n`
pub fn value_header(out: &mut Vec<u8>, key: &[u8], flags: u32, len: usize, cas: Option<u64>) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    out.extend_from_slice(b.format(flags).as_bytes());
    out.push(b' ');
    out.extend_from_slice(b.format(len).as_bytes());
    if let Some(c) = cas {
        out.push(b' ');
        out.extend_from_slice(b.format(c).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

/// Append one `STAT name value\r\n` line.
pub fn stat(out: &mut Vec<u8>, name: &str, value: impl std::fmt::Display) {
    use std::io::Write;
    // Writing into a Vec cannot fail.
    let _ = write!(out, "STAT {name} {value}\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_displays_as_its_reply_line() {
        assert_eq!(
            ErrorReply::OutOfMemory.to_string(),
            "SERVER_ERROR out of memory storing object"
        );
        let mut out = Vec::new();
        ErrorReply::ShutdownDisabled.write(&mut out);
        assert_eq!(
            out,
            format!("{}\r\n", ErrorReply::ShutdownDisabled).into_bytes()
        );
    }

    #[test]
    fn value_header_layout() {
        let mut out = Vec::new();
        value_header(&mut out, b"k", 5, 3, Some(9));
        assert_eq!(out, b"VALUE k 5 3 9\r\n");
        out.clear();
        value_header(&mut out, b"k", 0, 0, None);
        assert_eq!(out, b"VALUE k 0 0\r\n");
    }
}
