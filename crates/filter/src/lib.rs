//! mnemo-filter: the filter host. It loads the filters an operator installed (WebAssembly
//! modules run by wasmtime, or trusted native shared libraries), and runs one call of one
//! filter under its limits. It knows no protocol and no sockets: the server hands it the
//! request's arguments and, key by key, the values it read from the store; it hands back the
//! output bytes and flags, or why the call failed.
//!
//! ```text
//!   server (execute fget)                  FilterHost                      guest
//!   ─────────────────────                  ──────────                      ─────
//!   host.get(name) ───────────────────────> Arc<Filter> (compiled at load, swapped on reload)
//!   filter.call(args, n, fill, out)
//!     fill(sink): per key, under its       wasm:   an idle instance (or a new one from the
//!     shard lock only while copying ─────>          pre-instantiated template), input
//!       sink.value(flags, bytes)                    written straight into host-grown pages
//!       sink.missing()                              of its memory (one copy per value) ──> mnemo_filter(ptr, len)
//!                                          native: input into a per-thread buffer ──> mnemo_filter(in, len, out)
//!     out <── output bytes (checked against the output cap), flags
//! ```
//!
//! Every WebAssembly call runs under a CPU deadline (epoch interruption, ticked by one thread),
//! a memory cap (linear memory, input included), a stack cap and an output cap. A call that
//! traps or overruns fails alone; its instance is dropped and the next call gets a new one, so
//! nothing a failed call did outlives its request. Native filters are the seed's model: fast, and
//! as trusted as the server itself (see `native`).
//!
//! Two ways to call: `call` runs to the deadline, on a thread that may wait (the server's job
//! pool); `call_brief` is for a thread that must not (an event loop): it gives up a call that
//! would run past [`BRIEF`] or grow memory past [`BRIEF_GROWTH`], and the caller then makes
//! the full call elsewhere. A filter's output depends on its input only, so the second run
//! answers what the first would have.
//!
//! The input both kinds receive (little-endian, no padding):
//!
//! ```text
//!   +-------------+-----------+-----------+--------------------------------------------------+
//!   | u32 arg_len | arg bytes | u32 nkeys | nkeys x { u32 flags | u32 len | len value bytes } |
//!   +-------------+-----------+-----------+--------------------------------------------------+
//!                                           len = 0xFFFF_FFFF: the key is missing (no bytes)
//! ```

mod error;
pub mod input;
mod native;
mod registry;
mod wasm;

pub use error::FilterError;
pub use input::{Fill, InputSink};
pub use registry::{Filter, FilterHost, FilterKind, FilterSpec, FilterStats, StatsSnapshot};

use std::time::Duration;

/// The ABI version both kinds of filter must report (`mnemo_abi_version`).
pub const ABI_VERSION: u32 = 1;

pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(5);
pub const DEFAULT_MEMORY: usize = 64 << 20;
pub const DEFAULT_STACK: usize = 512 << 10;
pub const DEFAULT_OUTPUT_MAX: usize = 1 << 20;
/// Longest message a filter's own error may put in a reply line.
pub const MESSAGE_MAX: usize = 200;

/// How much CPU time a brief call ([`Filter::call_brief`], on a thread that must not wait) may
/// use: a WebAssembly call is looked at from the second epoch tick after it starts (1-2 ms)
/// and given up once its thread has used this much CPU since (a preemption does not count);
/// a native call, which cannot be interrupted, is measured.
pub const BRIEF: Duration = Duration::from_millis(1);
/// What a brief WebAssembly call's guest may grow its memory by (the input the server writes
/// does not count) before it gives up: one bulk instruction over fresh pages runs to its end
/// whatever the epoch (filling 64 MiB took 46 ms here), so a brief call never gets many fresh
/// pages to fill.
pub const BRIEF_GROWTH: usize = 1 << 20;
/// After a call of a filter was not brief (given up, or a native call past [`BRIEF`]), how
/// long its calls go straight to the caller's slow path: this at first, doubled with each
/// such call in a row, up to [`SLOW_HOLD`]; a brief call starts it over. A call that was
/// once unlucky (its thread preempted past two ticks) costs a few calls' hand-offs, not a
/// second of them.
pub const SLOW_HOLD_MIN: Duration = Duration::from_millis(10);
/// The longest hold: a filter that always runs long costs a thread that must not wait one
/// brief attempt per this, once its holds have grown (8 attempts in about 1.3 s, from the
/// first).
pub const SLOW_HOLD: Duration = Duration::from_secs(1);

/// What every call is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// CPU deadline of one WebAssembly call.
    pub deadline: Duration,
    /// Linear memory of one WebAssembly instance, input included.
    pub memory: usize,
    /// WebAssembly stack.
    pub stack: usize,
    /// Output bytes of one call (both kinds).
    pub output_max: usize,
    /// Calls that may run at once (the server's worker threads): how many idle instances a
    /// filter keeps.
    pub concurrency: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: DEFAULT_DEADLINE,
            memory: DEFAULT_MEMORY,
            stack: DEFAULT_STACK,
            output_max: DEFAULT_OUTPUT_MAX,
            concurrency: 4,
        }
    }
}

/// The thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
pub(crate) fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live timespec the call writes; the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
