//! Native filters: shared libraries with the C ABI of `crates/filter-sdk/include/mnemo_filter.h`.
//!
//! This is seed 001's model, kept for code the operator trusts as much as the server itself:
//! a native filter runs in the server's address space with no sandbox, no deadline and no
//! memory cap (only its output is bounded, by the buffer it is handed). Libraries are opened
//! only when the server starts or reloads, from paths the operator configured; a request only
//! names a filter.
//!
//! To make a reload pick up a library rebuilt at the same path, each load opens a private copy
//! (the dynamic loader would otherwise hand back the already-open library for the same name).
//! The copy is unlinked at once; its mapping lives until the last call using it returns.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use libloading::Library;

use crate::error::sanitize;
use crate::input::{Bytes, Encoder, Fill};
use crate::{FilterError, ABI_VERSION};

/// `struct mnemo_output` of the C header.
#[repr(C)]
struct MnemoOutput {
    data: *mut u8,
    cap: usize,
    len: usize,
    flags: u32,
}

type VersionFn = unsafe extern "C" fn() -> u32;
type FilterFn = unsafe extern "C" fn(*const u8, usize, *mut MnemoOutput) -> i32;

pub(crate) struct NativeFilter {
    filter: FilterFn,
    output_max: usize,
    /// The input buffer's bound (`--filter-memory`): a native filter has no sandbox, but the
    /// server still never buffers more than this for one call.
    input_max: usize,
    // Last: keeps the code `filter` points into mapped for as long as this value lives.
    _lib: Library,
}

thread_local! {
    /// Input and output buffers, one pair per worker thread, reused by every call.
    static SCRATCH: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

static COPIES: AtomicU64 = AtomicU64::new(0);

impl NativeFilter {
    pub fn load(
        path: &Path,
        output_max: usize,
        input_max: usize,
    ) -> Result<NativeFilter, FilterError> {
        let bad = |reason: String| FilterError::BadLibrary {
            path: path.to_owned(),
            reason,
        };
        let copy = private_copy(path).map_err(|source| FilterError::Read {
            path: path.to_owned(),
            source,
        })?;
        // SAFETY: opening a library runs its initializers. Native filters are, by the
        // operator's configuration, code trusted as much as mnemod itself.
        let lib = unsafe { Library::new(&copy) };
        let _ = std::fs::remove_file(&copy);
        let lib = lib.map_err(|e| bad(e.to_string()))?;
        // SAFETY: the symbol types are the header's; a library exporting these names with
        // other types breaks the ABI it claims, which trust covers.
        let (version, filter) = unsafe {
            let v = lib
                .get::<VersionFn>(b"mnemo_abi_version\0")
                .map_err(|e| bad(e.to_string()))?;
            let f = lib
                .get::<FilterFn>(b"mnemo_filter\0")
                .map_err(|e| bad(e.to_string()))?;
            (*v, *f)
        };
        // SAFETY: as above.
        let found = unsafe { version() };
        if found != ABI_VERSION {
            return Err(FilterError::AbiVersion {
                path: path.to_owned(),
                found,
                expected: ABI_VERSION,
            });
        }
        Ok(NativeFilter {
            filter,
            output_max,
            input_max,
            _lib: lib,
        })
    }

    pub fn call(
        &self,
        args: &[u8],
        nkeys: u32,
        fill: Fill<'_>,
        out: &mut Vec<u8>,
    ) -> Result<u32, FilterError> {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            let (input, output) = &mut *s;
            input.clear();
            let mut enc = Encoder::new(
                Capped {
                    buf: std::mem::take(input),
                    max: self.input_max,
                },
                args,
                nkeys,
            );
            fill(&mut enc);
            let complete = enc.finish();
            *input = enc.bytes.buf;
            if !complete {
                shrink(input);
                return Err(FilterError::OutOfMemory);
            }
            if output.len() < self.output_max {
                output.resize(self.output_max, 0);
            }
            let mut o = MnemoOutput {
                data: output.as_mut_ptr(),
                cap: self.output_max,
                len: 0,
                flags: 0,
            };
            // SAFETY: `input` and `output` are live buffers of the lengths passed; the filter is
            // trusted to honour the header's contract (read input, write at most cap bytes).
            let rc = unsafe { (self.filter)(input.as_ptr(), input.len(), &mut o) };
            shrink(input);
            let written = output.get(..o.len).ok_or(FilterError::BadResult);
            match rc {
                0 => {
                    out.extend_from_slice(written?);
                    Ok(o.flags)
                }
                1 => Err(FilterError::Failed(sanitize(written?))),
                2 => Err(FilterError::OutputTooLarge),
                _ => Err(FilterError::BadResult),
            }
        })
    }
}

/// The per-thread input buffer, bounded.
struct Capped {
    buf: Vec<u8>,
    max: usize,
}

impl Bytes for Capped {
    fn put(&mut self, bytes: &[u8]) -> bool {
        if self.buf.len() + bytes.len() > self.max {
            return false;
        }
        self.buf.extend_from_slice(bytes);
        true
    }
}

/// A worker keeps its input buffer between calls, but not one a rare huge call left behind.
fn shrink(input: &mut Vec<u8>) {
    if input.capacity() > KEEP_INPUT {
        *input = Vec::new();
    }
}

/// Input buffer capacity a worker keeps between calls.
const KEEP_INPUT: usize = 4 << 20;

/// Copy the library to a new private file, so that this load is a new object to the loader.
fn private_copy(path: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("filter.so");
    let n = COPIES.fetch_add(1, Ordering::Relaxed);
    let copy = std::env::temp_dir().join(format!(".mnemod-{}-{n}-{name}", std::process::id()));
    let mut src = std::fs::File::open(path)?;
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(&copy)?;
    if let Err(e) = std::io::copy(&mut src, &mut dst) {
        let _ = std::fs::remove_file(&copy);
        return Err(e);
    }
    Ok(copy)
}
