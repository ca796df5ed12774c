//! mnemo-filter-sdk: what a filter author uses to write `fget` filters for mnemod.
//!
//! This crate owns the guest side of the fget ABI: reading the input the host hands a filter
//! ([`Input`]), building its result ([`Output`]), and exporting a filter function under the
//! symbols the host looks for ([`export_filter!`]), both as a WebAssembly module
//! (wasm32-unknown-unknown, sandboxed by the host) and as a native shared library (trusted,
//! unsandboxed; C authors use `include/mnemo_filter.h`). It also holds seed 001's record
//! format ([`records`]); the example filters are crates/filter-examples. It depends on nothing, so a
//! filter builds for wasm32 in seconds.
//!
//! One call's input is one buffer, little-endian, no padding:
//!
//! ```text
//! +-------------+-----------+-----------+--------------------------------------------------+
//! | u32 arg_len | arg bytes | u32 nkeys | nkeys x { u32 flags | u32 len | len value bytes } |
//! +-------------+-----------+-----------+--------------------------------------------------+
//!   len == 0xFFFF_FFFF marks a missing key (flags 0, no bytes follow); entries in request order.
//! ```
//!
//! A WebAssembly filter's `mnemo_filter(in_ptr, in_len) -> i32` returns the address of a
//! 16-byte result record (little-endian, 4-aligned):
//!
//! ```text
//!   0          4          8          12         16
//!   +----------+----------+----------+----------+
//!   | status   | flags    | ptr      | len      |   status 0: memory[ptr..ptr+len] is the result
//!   +----------+----------+----------+----------+   status 1: memory[ptr..ptr+len] is a message
//! ```
//!
//! A native filter gets `(input, input_len, *mnemo_output)` instead and copies its result into
//! the caller's buffer (see [`MnemoOutput`] and the header).
//!
//! A filter is a plain function; the macro does the rest:
//!
//! ```
//! use mnemo_filter_sdk::{export_filter, Input, Output};
//!
//! /// Concatenate the present values.
//! fn concat(input: &Input, out: &mut Output) -> Result<(), String> {
//!     for value in input.values().flatten() {
//!         out.write(value.data);
//!     }
//!     Ok(())
//! }
//!
//! export_filter!(concat);
//! ```
//!
//! Build a WebAssembly filter as a `cdylib` with
//! `cargo build --release --target wasm32-unknown-unknown`; the same source built for the host
//! is a native filter.
//!
//! The examples (crates/filter-examples: `topk`, `select`, and the `hostile_*` filters the
//! host's tests feed it) build
//! to `target/wasm32-unknown-unknown/release/examples/<name>.wasm` with
//! `cargo build -p mnemo-filter-examples --examples --release --target wasm32-unknown-unknown`, and
//! `node crates/filter-sdk/scripts/check-wasm.mjs` then checks each module's imports (none)
//! and exports and calls it the way the host does. `c/topk.c` is the top-k filter in C against
//! `include/mnemo_filter.h`; the tests compile it and compare it with [`records::top_k`].

pub mod abi;
pub mod args;
pub mod export;
pub mod records;

pub use abi::{encode_input, AbiError, Input, Output, Value, Values, ABI_VERSION, MISSING};
pub use export::MnemoOutput;

/// Export `fn(&Input, &mut Output) -> Result<(), String>` as the filter of this library.
///
/// On `wasm32` it emits `mnemo_abi_version() -> i32` and
/// `mnemo_filter(in_ptr: i32, in_len: i32) -> i32`; on other targets the native C ABI of
/// `mnemo_filter.h`. Use it once per crate (the symbols are unmangled). An `Err(message)` is
/// reported as status 1 with the message; so is an input that does not parse. The generated
/// functions only forward to [`export`].
#[macro_export]
macro_rules! export_filter {
    ($filter:path) => {
        #[cfg(target_arch = "wasm32")]
        #[unsafe(no_mangle)]
        pub extern "C" fn mnemo_abi_version() -> i32 {
            $crate::ABI_VERSION as i32
        }

        /// # Safety
        /// Called by the host with the input it wrote into this instance's memory.
        #[cfg(target_arch = "wasm32")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn mnemo_filter(in_ptr: i32, in_len: i32) -> i32 {
            // SAFETY: the host wrote `in_len` bytes at `in_ptr`, in pages our allocator never
            // owned, and does not change them during the call.
            unsafe { $crate::export::wasm_call(in_ptr, in_len, $filter) }
        }

        #[cfg(not(target_arch = "wasm32"))]
        #[unsafe(no_mangle)]
        pub extern "C" fn mnemo_abi_version() -> u32 {
            $crate::ABI_VERSION
        }

        /// # Safety
        /// The contract of `mnemo_filter` in `mnemo_filter.h`.
        #[cfg(not(target_arch = "wasm32"))]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn mnemo_filter(
            input: *const u8,
            input_len: usize,
            out: *mut $crate::MnemoOutput,
        ) -> i32 {
            // SAFETY: the caller upholds the header's contract, which is native_call's.
            unsafe { $crate::export::native_call(input, input_len, out, $filter) }
        }
    };
}
