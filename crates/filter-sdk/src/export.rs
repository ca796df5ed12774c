//! The calling conventions behind [`crate::export_filter!`]: how a call reaches a filter
//! function and how its result goes back, for WebAssembly guests and for native libraries.
//!
//! The macro only emits the `#[no_mangle]` symbols; everything they do lives here as ordinary
//! functions, so it is written (and reviewed) once.
//!
//! ```text
//!   wasm32:  mnemo_filter(in_ptr, in_len) -> wasm_call -> run(parse, filter)
//!              -> output bytes kept until the next call, result record {status, flags, ptr, len} in a static
//!   native:  mnemo_filter(input, len, out) -> native_call -> catch_unwind(run(parse, filter))
//!              -> bytes copied into out->data (at most out->cap), return 0 / 1 / 2
//! ```

use crate::abi::{Input, Output};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Return code and status: the result is in the output.
pub const STATUS_OK: i32 = 0;
/// Return code and status: the output holds an error message (UTF-8).
pub const STATUS_ERROR: i32 = 1;
/// Return code (native only): the result would not fit in `cap` bytes.
pub const STATUS_TOO_LARGE: i32 = 2;

/// Parse the input and run the filter on it: the result, or the message to report. Both
/// calling conventions go through here.
pub fn run<F>(input: &[u8], filter: F) -> Result<Output, String>
where
    F: FnOnce(&Input<'_>, &mut Output) -> Result<(), String>,
{
    let input = Input::parse(input).map_err(|e| e.to_string())?;
    let mut out = Output::new();
    filter(&input, &mut out)?;
    Ok(out)
}

/// The native ABI's output descriptor, `mnemo_output` in `mnemo_filter.h`: the caller owns
/// `data` (`cap` bytes); the filter sets `len` and `flags`.
#[repr(C)]
#[derive(Debug)]
pub struct MnemoOutput {
    pub data: *mut u8,
    pub cap: usize,
    pub len: usize,
    pub flags: u32,
}

/// Copy `bytes` into the caller's buffer if they fit.
///
/// # Safety
/// `out.data` is valid for writes of `out.cap` bytes (or `out.cap` is 0).
unsafe fn copy_out(out: &mut MnemoOutput, bytes: &[u8]) -> bool {
    if bytes.len() > out.cap || (out.data.is_null() && !bytes.is_empty()) {
        return false;
    }
    if !bytes.is_empty() {
        // SAFETY: the caller's buffer holds `cap >= bytes.len()` bytes, and it cannot overlap
        // `bytes`, which the filter allocated itself.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.data, bytes.len()) };
    }
    out.len = bytes.len();
    true
}

/// The longest prefix of `msg` that fits in `cap` bytes and ends on a character boundary.
fn truncate_message(msg: &str, cap: usize) -> &str {
    if msg.len() <= cap {
        return msg;
    }
    let mut end = cap;
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    &msg[..end]
}

/// Report an error message, cut to what the caller's buffer holds.
///
/// # Safety
/// As [`copy_out`].
unsafe fn report_error(out: &mut MnemoOutput, msg: &str) -> i32 {
    let cap = if out.data.is_null() { 0 } else { out.cap };
    // SAFETY: forwarded; the message was cut to fit.
    unsafe { copy_out(out, truncate_message(msg, cap).as_bytes()) };
    STATUS_ERROR
}

/// The native `mnemo_filter`: run `filter` on the input and fill `*out`.
///
/// Returns 0 (result in `out->data[..len]`, flags in `out->flags`), 1 (an error message in
/// `out->data[..len]`, cut to `cap`; a panic is reported as "panicked" and never unwinds into
/// the caller) or 2 (the result needs more than `cap` bytes: `out->len` is set to the size it
/// needs, and nothing is written).
///
/// A panic is caught only when the library is built with `panic = "unwind"` (the default);
/// the panic hook still prints its message on the process's stderr.
///
/// # Safety
/// `input` is valid for reads of `input_len` bytes (or `input_len` is 0); `out` is null or
/// points to a valid `MnemoOutput` whose `data` is valid for writes of `cap` bytes. The caller
/// does not touch these buffers during the call.
pub unsafe fn native_call<F>(
    input: *const u8,
    input_len: usize,
    out: *mut MnemoOutput,
    filter: F,
) -> i32
where
    F: FnOnce(&Input<'_>, &mut Output) -> Result<(), String>,
{
    // SAFETY: the caller passes null or a valid, exclusive MnemoOutput.
    let Some(out) = (unsafe { out.as_mut() }) else {
        return STATUS_ERROR;
    };
    out.len = 0;
    out.flags = 0;
    let input: &[u8] = if input_len == 0 {
        &[]
    } else if input.is_null() {
        // SAFETY: `out` is valid per the caller.
        return unsafe { report_error(out, "bad input: null pointer") };
    } else {
        // SAFETY: the caller guarantees `input_len` readable bytes at `input`, unchanged during
        // the call.
        unsafe { std::slice::from_raw_parts(input, input_len) }
    };
    let result = match catch_unwind(AssertUnwindSafe(|| run(input, filter))) {
        Ok(result) => result,
        Err(payload) => {
            // Dropping the payload could itself panic; keep that on this side too.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
            Err("panicked".to_string())
        }
    };
    match result {
        Ok(output) => {
            // SAFETY: `out.data` is valid for `cap` bytes per the caller.
            if unsafe { copy_out(out, output.as_bytes()) } {
                out.flags = output.flags();
                STATUS_OK
            } else {
                out.len = output.len();
                STATUS_TOO_LARGE
            }
        }
        // SAFETY: as above.
        Err(msg) => unsafe { report_error(out, &msg) },
    }
}

/// The wasm32 side: the guest's view of linear memory.
#[cfg(target_arch = "wasm32")]
mod wasm {
    use super::{run, Input, Output, STATUS_ERROR, STATUS_OK};
    use std::cell::UnsafeCell;

    /// The 16-byte result record `{status, flags, ptr, len}`; u32 alignment makes it 4-aligned.
    struct ResultRecord(UnsafeCell<[u32; 4]>);

    // SAFETY: a wasm32-unknown-unknown guest has one thread; the host reads the record after
    // the call returns, before any other call into the instance.
    unsafe impl Sync for ResultRecord {}

    static RESULT: ResultRecord = ResultRecord(UnsafeCell::new([0; 4]));

    /// Store the result record and return its address, what `mnemo_filter` returns. Public so
    /// a guest exporting its own `mnemo_filter` (e.g. a test of the host) can use it.
    pub fn result_record(status: u32, flags: u32, ptr: u32, len: u32) -> i32 {
        let record = RESULT.0.get();
        // SAFETY: single-threaded guest (see the Sync impl): nothing else holds a reference to
        // the record. Wasm is little-endian, so the u32s are laid out as the ABI says.
        unsafe { *record = [status, flags, ptr, len] };
        record as usize as i32
    }

    /// The input the host wrote, as a slice.
    ///
    /// # Safety
    /// `in_len` bytes at `in_ptr` are the input, untouched by the guest's allocator (the host
    /// writes it into pages it grew itself) and unchanged during the call.
    pub unsafe fn input<'a>(in_ptr: i32, in_len: i32) -> Option<&'a [u8]> {
        let (ptr, len) = (in_ptr as u32 as usize, in_len as u32 as usize);
        if len == 0 {
            return Some(&[]);
        }
        if ptr == 0 {
            // Address 0 is addressable in wasm, but a Rust slice may not start at null; the
            // host never writes there (it appends pages to the end of memory).
            return None;
        }
        // SAFETY: per the caller, `len` bytes at `ptr` are the host's input.
        Some(unsafe { std::slice::from_raw_parts(ptr as *const u8, len) })
    }

    /// The bytes of the last result, kept until the next call replaces them: the host copies
    /// them out after the call returns, and may call the same instance again.
    struct LastResult(UnsafeCell<Vec<u8>>);

    // SAFETY: as ResultRecord's.
    unsafe impl Sync for LastResult {}

    static LAST: LastResult = LastResult(UnsafeCell::new(Vec::new()));

    /// Hand bytes to the host: keep them (dropping the previous call's) and return the result
    /// record's address.
    pub fn finish(status: i32, flags: u32, bytes: Vec<u8>) -> i32 {
        // SAFETY: single-threaded guest; no reference to the previous bytes outlives the call
        // that made them (the host has copied them before it calls again).
        let kept = unsafe { &mut *LAST.0.get() };
        *kept = bytes;
        result_record(
            status as u32,
            flags,
            kept.as_ptr() as usize as u32,
            kept.len() as u32,
        )
    }

    /// The wasm32 `mnemo_filter`.
    ///
    /// # Safety
    /// As [`input`].
    pub unsafe fn wasm_call<F>(in_ptr: i32, in_len: i32, filter: F) -> i32
    where
        F: FnOnce(&Input<'_>, &mut Output) -> Result<(), String>,
    {
        // SAFETY: forwarded from the caller.
        let Some(input) = (unsafe { input(in_ptr, in_len) }) else {
            return finish(STATUS_ERROR, 0, b"bad input: null pointer".to_vec());
        };
        match run(input, filter) {
            Ok(out) => {
                let flags = out.flags();
                finish(STATUS_OK, flags, out.into_bytes())
            }
            Err(msg) => finish(STATUS_ERROR, 0, msg.into_bytes()),
        }
    }
}

#[cfg(target_arch = "wasm32")]
pub use wasm::{
    finish as wasm_finish, input as wasm_input, result_record as wasm_result_record, wasm_call,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::encode_input;
    use std::ptr;

    fn echo(input: &Input<'_>, out: &mut Output) -> Result<(), String> {
        match input.args() {
            b"panic" => panic!("told to"),
            b"fail" => Err("failed: \u{e9}\u{e9}".to_string()),
            args => {
                out.write(args);
                for v in input.values().flatten() {
                    out.write(v.data);
                }
                out.set_flags(42);
                Ok(())
            }
        }
    }

    fn call(input: &[u8], cap: usize) -> (i32, Vec<u8>, usize, u32) {
        let mut buf = vec![0xAAu8; cap];
        let mut out = MnemoOutput {
            data: buf.as_mut_ptr(),
            cap,
            len: 99,
            flags: 99,
        };
        // SAFETY: both buffers are valid for their stated lengths.
        let rc = unsafe { native_call(input.as_ptr(), input.len(), &mut out, echo) };
        let written = buf[..out.len.min(cap)].to_vec();
        (rc, written, out.len, out.flags)
    }

    #[test]
    fn ok_too_large_error_and_panic() {
        let input = encode_input(b"ab", &[Some((1, b"cd")), None, Some((2, b"e"))]);
        assert_eq!(call(&input, 5), (0, b"abcde".to_vec(), 5, 42));
        assert_eq!(call(&input, 100), (0, b"abcde".to_vec(), 5, 42));
        // Too small: code 2, the size it needs in len, nothing written.
        let (rc, _, len, flags) = call(&input, 4);
        assert_eq!((rc, len, flags), (2, 5, 0));

        let fail = encode_input(b"fail", &[]);
        assert_eq!(
            call(&fail, 100),
            (1, "failed: \u{e9}\u{e9}".as_bytes().to_vec(), 12, 0)
        );
        // Cut to cap, on a character boundary (the second é would straddle byte 10..12).
        assert_eq!(
            call(&fail, 11),
            (1, "failed: \u{e9}".as_bytes().to_vec(), 10, 0)
        );
        assert_eq!(call(&fail, 0), (1, vec![], 0, 0));

        let boom = encode_input(b"panic", &[]);
        assert_eq!(call(&boom, 100), (1, b"panicked".to_vec(), 8, 0));
        assert_eq!(call(&boom, 3), (1, b"pan".to_vec(), 3, 0));
    }

    #[test]
    fn bad_input_and_null_pointers() {
        let (rc, msg, ..) = call(&[1, 0, 0], 100);
        assert_eq!(rc, 1);
        assert_eq!(msg, b"bad input: truncated argument length at byte 0");
        assert_eq!(call(&[], 100).0, 1);

        let mut out = MnemoOutput {
            data: ptr::null_mut(),
            cap: 0,
            len: 7,
            flags: 7,
        };
        // SAFETY: a null input with length 0 is allowed; `out` has no buffer and cap 0.
        assert_eq!(unsafe { native_call(ptr::null(), 0, &mut out, echo) }, 1);
        assert_eq!(out.len, 0);
        // SAFETY: null `out` is allowed and only yields an error code.
        assert_eq!(
            unsafe { native_call(ptr::null(), 0, ptr::null_mut(), echo) },
            1
        );
        // A null data pointer with a non-zero cap is treated as no room at all.
        let input = encode_input(b"x", &[]);
        let mut out = MnemoOutput {
            data: ptr::null_mut(),
            cap: 64,
            len: 0,
            flags: 0,
        };
        // SAFETY: `out.data` is null, so nothing is written through it.
        assert_eq!(
            unsafe { native_call(input.as_ptr(), input.len(), &mut out, echo) },
            2
        );
        assert_eq!(out.len, 1);
    }

    #[test]
    fn layout_matches_the_c_header() {
        use std::mem::{offset_of, size_of};
        let word = size_of::<usize>();
        assert_eq!(offset_of!(MnemoOutput, cap), word);
        assert_eq!(offset_of!(MnemoOutput, len), 2 * word);
        assert_eq!(offset_of!(MnemoOutput, flags), 3 * word);
    }
}
