//! WebAssembly filters, run by wasmtime.
//!
//! A module is compiled once when it is loaded and checked against the ABI (no imports: the
//! host provides none; exports `memory`, `mnemo_abi_version`, `mnemo_filter`), then kept as a
//! pre-instantiated template. Instances are made from the template and kept in a small idle
//! pool per filter: a call takes one (or makes one), and gives it back only if the call
//! succeeded. Any failure (trap, timeout, refused memory, bad result) drops the instance, so
//! the next call starts from a clean one; an instance whose memory grew past
//! [`RECYCLE_BYTES`] (or the memory cap's half) or that served [`RECYCLE_CALLS`] calls is
//! dropped too, so a slow leak in a filter never turns into failing requests.
//!
//! Why reuse: a fresh instance per call cost about 48 µs here, almost all of it page faults on
//! the input pages and the kernel zapping them again when the instance was dropped
//! (measured: `cargo run --release -p mnemo-filter --example call_cost`); a reused instance
//! keeps its pages mapped. The price is that a filter's memory persists between successful
//! calls of the same filter (it may keep caches; it sees only what the server gives it).
//!
//! ```text
//!   guest linear memory
//!   0 ─── module's data, stack, heap (its own allocator) ───┬── input region (host-grown ──┬── heap pages the guest
//!                                                           │ pages, reused by each call)  │   grew after it
//!                                                           start                          end
//! ```
//!
//! Limits: the memory cap is a `ResourceLimiter` on the store (input pages count against it);
//! the deadline is epoch interruption, the epoch being ticked by one thread for all calls; the
//! stack cap is wasmtime's `max_wasm_stack`; the output cap is checked before the output is
//! copied out.
//!
//! What the deadline cannot interrupt, and how it is bounded:
//! - After the call: the output copy is bounded by the output cap; an instance that is not
//!   kept (a failed call, or one grown large: up to the memory cap of touched pages) is
//!   dropped by the reaper thread, not by the caller. Unmapping 64 MiB of touched memory
//!   took 7.7 ms here, longer than the default 5 ms deadline; the caller now returns at once.
//! - Growth past the deadline is refused (the guest then fails as out of memory or times out).
//! - One bulk instruction (`memory.fill`/`memory.copy` over freshly grown pages) runs to its
//!   end: filling 64 MiB took 46 ms under a 5 ms deadline. The server bounds the reply, not
//!   the instruction: its job pool answers a call still running past the deadline with a
//!   timeout (mnemo-server's jobs.rs) and drops the late result.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use wasmtime::{
    Config, Engine, InstancePre, Linker, Memory, Module, ModuleExport, ResourceLimiter, Store,
    Trap, TypedFunc,
};

use crate::error::sanitize;
use crate::input::{Bytes, Encoder, Fill};
use crate::{thread_cpu, FilterError, Limits, ABI_VERSION, BRIEF, BRIEF_GROWTH};

/// How often the epoch advances: the granularity of the deadline.
const TICK: Duration = Duration::from_millis(1);
/// The result record the guest returns a pointer to: status, flags, ptr, len (u32 each).
const RESULT_LEN: usize = 16;
const WASM_PAGE: usize = 64 * 1024;
/// An instance whose memory grew past this (or past half the cap) is not reused.
pub const RECYCLE_BYTES: usize = 16 << 20;
/// Calls one instance serves before it is replaced.
pub const RECYCLE_CALLS: u32 = 100_000;

/// One engine for every WebAssembly filter, the thread that ticks its epoch, and the thread
/// that drops instances no call keeps.
pub(crate) struct WasmEngine {
    engine: Engine,
    limits: Limits,
    ticking: AtomicBool,
    reaper: std::sync::OnceLock<std::sync::mpsc::SyncSender<Live>>,
}

/// Dead instances queued for the reaper at most; past this a caller drops its own (a filter
/// failing faster than they unmap waits for itself, not for the others).
const REAP_QUEUE: usize = 4;

impl WasmEngine {
    pub fn new(limits: Limits) -> Result<WasmEngine, FilterError> {
        let mut cfg = Config::new();
        // Instances are reused (see the module docs), so they are allocated on demand: a pool
        // of pre-reserved slots would only speed up the rare fresh instance.
        cfg.epoch_interruption(true).max_wasm_stack(limits.stack);
        let engine = Engine::new(&cfg).map_err(|e| FilterError::Engine(e.to_string()))?;
        Ok(WasmEngine {
            engine,
            limits,
            ticking: AtomicBool::new(false),
            reaper: std::sync::OnceLock::new(),
        })
    }

    /// Drop an instance on the reaper thread (started on first use): unmapping a large
    /// memory is not the caller's time.
    fn reap(&self, live: Live) {
        let tx = self.reaper.get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Live>(REAP_QUEUE);
            // If the thread cannot start, the receiver is dropped and every send fails: the
            // callers drop their own instances, as before there was a reaper.
            let _ = std::thread::Builder::new()
                .name("mnemo-filter-reaper".into())
                .spawn(move || rx.into_iter().for_each(drop));
            tx
        });
        if let Err(e) = tx.try_send(live) {
            drop(e);
        }
    }

    /// Start the epoch ticker (once, when the first module loads).
    fn start_ticker(&self) {
        if self.ticking.swap(true, Ordering::Relaxed) {
            return;
        }
        let engine = self.engine.clone();
        let spawned = std::thread::Builder::new()
            .name("mnemo-filter-epoch".into())
            .spawn(move || loop {
                std::thread::sleep(TICK);
                engine.increment_epoch();
            });
        if spawned.is_err() {
            // Without a ticker no deadline would ever fire: refuse to run modules at all.
            self.ticking.store(false, Ordering::Relaxed);
        }
    }

    fn deadline_ticks(&self) -> u64 {
        (self.limits.deadline.as_micros().div_ceil(TICK.as_micros()) as u64).max(1)
    }

    /// A brief call's first epoch deadline: the tick after the next one (so at least
    /// [`BRIEF`] of wall time); from there [`on_epoch`] looks at the CPU time it used.
    fn brief_ticks(&self) -> u64 {
        (BRIEF.as_micros().div_ceil(TICK.as_micros()) as u64 + 1).min(self.deadline_ticks())
    }
}

/// The store's data: the memory cap, and whether it refused a request (so that the trap that
/// follows, Rust's allocation-failure abort for instance, is reported as out of memory).
struct Guard {
    cap: usize,
    refused: bool,
    /// While the guest runs: when its deadline passes. Growth after it is refused (what the
    /// guest would do with new pages is time it no longer has).
    deadline: Option<std::time::Instant>,
    /// While a brief call's guest runs: what it is held to.
    brief: Option<Brief>,
    /// The brief call gave up (a trap, not a refusal the guest sees).
    gave_up: bool,
}

/// A brief call's bounds: it gives up past [`BRIEF`] of its thread's CPU time (wall time
/// would count a preemption of the thread as the guest's: on a busy core, calls of 100 µs
/// were given up), past the full deadline of wall time, or growing memory past `cap`.
#[derive(Clone, Copy)]
struct Brief {
    /// The memory size when its input was written, plus [`BRIEF_GROWTH`].
    cap: usize,
    /// The thread's CPU time when the guest started.
    cpu_from: Duration,
    wall_until: std::time::Instant,
}

/// The epoch deadline passed: a full call stops (a timeout); a brief one goes on a tick
/// more while it has used less than [`BRIEF`] of CPU time and is within the full deadline,
/// else gives up.
fn on_epoch(g: &mut Guard) -> wasmtime::UpdateDeadline {
    let Some(b) = g.brief else {
        return wasmtime::UpdateDeadline::Interrupt;
    };
    if thread_cpu().saturating_sub(b.cpu_from) < BRIEF && std::time::Instant::now() < b.wall_until {
        return wasmtime::UpdateDeadline::Continue(1);
    }
    g.gave_up = true;
    wasmtime::UpdateDeadline::Interrupt
}

impl ResourceLimiter for Guard {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let late = self
            .deadline
            .is_some_and(|d| std::time::Instant::now() >= d);
        let ok = desired <= self.cap && !late;
        if self.brief.is_some_and(|b| !ok || desired > b.cap) {
            // Whatever a brief call would be refused or is not given, the full call decides.
            self.gave_up = true;
            return Err(wasmtime::Error::msg("a brief call gave up"));
        }
        self.refused |= !ok;
        Ok(ok)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // A table element is a pointer: bound tables by the same cap.
        let ok = desired.saturating_mul(8) <= self.cap;
        self.refused |= !ok;
        Ok(ok)
    }
}

pub(crate) struct WasmFilter {
    engine: Arc<WasmEngine>,
    pre: InstancePre<Guard>,
    memory: ModuleExport,
    filter: ModuleExport,
    /// Instances whose last call succeeded, ready for the next one (at most one per worker).
    idle: Mutex<Vec<Live>>,
}

/// An instance between calls.
struct Live {
    store: Store<Guard>,
    memory: Memory,
    func: TypedFunc<(i32, i32), i32>,
    /// The input region: pages the host grew, reused while the input fits.
    start: usize,
    end: usize,
    calls: u32,
}

impl WasmFilter {
    pub fn load(engine: &Arc<WasmEngine>, path: &Path) -> Result<WasmFilter, FilterError> {
        let bad = |reason: String| FilterError::BadModule {
            path: path.to_owned(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(|source| FilterError::Read {
            path: path.to_owned(),
            source,
        })?;
        let module = Module::new(&engine.engine, &bytes).map_err(|e| bad(format!("{e:#}")))?;
        if let Some(imp) = module.imports().next() {
            return Err(bad(format!(
                "it imports {}::{} (mnemod provides no imports: build for wasm32-unknown-unknown)",
                imp.module(),
                imp.name()
            )));
        }
        let export = |name: &str| {
            module
                .get_export_index(name)
                .ok_or_else(|| bad(format!("it does not export `{name}`")))
        };
        let (memory, filter) = (export("memory")?, export("mnemo_filter")?);
        export("mnemo_abi_version")?;
        let pre = Linker::<Guard>::new(&engine.engine)
            .instantiate_pre(&module)
            .map_err(|e| bad(format!("{e:#}")))?;
        engine.start_ticker();
        let f = WasmFilter {
            engine: engine.clone(),
            pre,
            memory,
            filter,
            idle: Mutex::new(Vec::new()),
        };
        // Check the types and the version once, in a real instance under the call limits.
        let (mut store, instance) = f
            .instance()
            .map_err(|e| bad(format!("cannot instantiate it: {e}")))?;
        instance
            .get_typed_func::<(i32, i32), i32>(&mut store, "mnemo_filter")
            .map_err(|e| bad(format!("{e:#}")))?;
        instance
            .get_memory(&mut store, "memory")
            .ok_or_else(|| bad("`memory` is not a memory".into()))?;
        let version = instance
            .get_typed_func::<(), i32>(&mut store, "mnemo_abi_version")
            .and_then(|v| v.call(&mut store, ()))
            .map_err(|e| bad(format!("mnemo_abi_version: {e:#}")))?;
        if version as u32 != ABI_VERSION {
            return Err(FilterError::AbiVersion {
                path: path.to_owned(),
                found: version as u32,
                expected: ABI_VERSION,
            });
        }
        Ok(f)
    }

    fn instance(&self) -> Result<(Store<Guard>, wasmtime::Instance), FilterError> {
        let mut store = Store::new(
            &self.engine.engine,
            Guard {
                cap: self.engine.limits.memory,
                refused: false,
                deadline: None,
                brief: None,
                gave_up: false,
            },
        );
        store.limiter(|g| g);
        store.epoch_deadline_callback(|mut cx| Ok(on_epoch(cx.data_mut())));
        store.set_epoch_deadline(self.engine.deadline_ticks());
        match self.pre.instantiate(&mut store) {
            Ok(i) => Ok((store, i)),
            Err(_) if store.data().refused => Err(FilterError::OutOfMemory),
            // The host could not map the instance's memory: this call cannot run.
            Err(_) => Err(FilterError::OutOfMemory),
        }
    }

    fn live(&self) -> Result<Live, FilterError> {
        if let Some(l) = self.idle.lock().pop() {
            return Ok(l);
        }
        let (mut store, instance) = self.instance()?;
        let memory = instance
            .get_module_export(&mut store, &self.memory)
            .and_then(|e| e.into_memory());
        let func = instance
            .get_module_export(&mut store, &self.filter)
            .and_then(|e| e.into_func());
        // Checked at load; a module cannot change its exports.
        let (Some(memory), Some(func)) = (memory, func) else {
            return Err(FilterError::BadResult);
        };
        let func = func.typed(&store).map_err(|_| FilterError::BadResult)?;
        let size = memory.data_size(&store);
        Ok(Live {
            store,
            memory,
            func,
            start: size,
            end: size,
            calls: 0,
        })
    }

    /// One call: an instance (reused or new), the input written into its input region by
    /// `fill`, `mnemo_filter` run under the deadline, its output appended to `out`. A `brief`
    /// call's guest runs under [`WasmEngine::brief_ticks`] and [`BRIEF_GROWTH`] instead, and
    /// gives up (`NotBrief`) where it would pass them.
    pub fn call(
        &self,
        args: &[u8],
        nkeys: u32,
        fill: Fill<'_>,
        out: &mut Vec<u8>,
        brief: bool,
    ) -> Result<u32, FilterError> {
        let mut live = self.live()?;
        let result = self.run(&mut live, args, nkeys, fill, out, brief);
        let limits = &self.engine.limits;
        if result.is_ok() {
            // Keep the instance for the next call, unless it grew large or old.
            live.calls += 1;
            let big = live.memory.data_size(&live.store)
                > RECYCLE_BYTES.min(limits.memory / 2).max(4 << 20);
            if !big && live.calls < RECYCLE_CALLS {
                let mut idle = self.idle.lock();
                if idle.len() < limits.concurrency.max(1) as usize {
                    idle.push(live);
                    return result;
                }
            }
        }
        self.engine.reap(live);
        result
    }

    /// The call proper, in `live`; on success its input region is where this input went.
    fn run(
        &self,
        live: &mut Live,
        args: &[u8],
        nkeys: u32,
        fill: Fill<'_>,
        out: &mut Vec<u8>,
        brief: bool,
    ) -> Result<u32, FilterError> {
        let guard = live.store.data_mut();
        guard.refused = false;
        guard.gave_up = false;
        guard.brief = None;
        let result = self.run_guest(live, args, nkeys, fill, out, brief);
        let guard = live.store.data_mut();
        guard.brief = None;
        match result {
            Err(_) if guard.gave_up => Err(FilterError::NotBrief),
            Err(FilterError::Timeout) if brief => Err(FilterError::NotBrief),
            r => r,
        }
    }

    fn run_guest(
        &self,
        live: &mut Live,
        args: &[u8],
        nkeys: u32,
        fill: Fill<'_>,
        out: &mut Vec<u8>,
        brief: bool,
    ) -> Result<u32, FilterError> {
        let (result, start, end) = {
            let bytes = GuestBytes {
                store: &mut live.store,
                memory: live.memory,
                start: live.start,
                pos: live.start,
                end: live.end,
            };
            let mut enc = Encoder::new(bytes, args, nkeys);
            fill(&mut enc);
            if !enc.finish() {
                return Err(FilterError::OutOfMemory);
            }
            let b = enc.bytes;
            let (start, len, end) = (b.start, b.pos - b.start, b.end);
            // The deadline counts from here: copying the input is the server's work.
            let now = std::time::Instant::now();
            let until = now + self.engine.limits.deadline;
            let ticks = if brief {
                // From here the guest may grow by BRIEF_GROWTH: the input is the server's
                // copy (as a multi-get's reply is), not the guest's doing.
                live.store.data_mut().brief = Some(Brief {
                    cap: live.memory.data_size(&live.store) + BRIEF_GROWTH,
                    cpu_from: thread_cpu(),
                    wall_until: until,
                });
                self.engine.brief_ticks()
            } else {
                self.engine.deadline_ticks()
            };
            live.store.set_epoch_deadline(ticks);
            live.store.data_mut().deadline = Some(until);
            // Addresses are u32 in wasm32; the ABI passes them as i32 bit patterns.
            let r = live
                .func
                .call(&mut live.store, (start as u32 as i32, len as u32 as i32));
            live.store.data_mut().deadline = None;
            (r, start, end)
        };
        let rec = match result {
            Ok(ptr) => ptr as u32 as usize,
            Err(e) => return Err(classify(&e, live.store.data().refused)),
        };
        let limits = &self.engine.limits;
        let outcome = {
            let mem = live.memory.data(&live.store);
            let record = rec
                .checked_add(RESULT_LEN)
                .and_then(|end| mem.get(rec..end))
                .ok_or(FilterError::BadResult)?;
            let field = |i: usize| {
                u32::from_le_bytes(record[i * 4..i * 4 + 4].try_into().expect("4 bytes"))
            };
            let (status, flags, ptr, len) =
                (field(0), field(1), field(2) as usize, field(3) as usize);
            let bytes = ptr
                .checked_add(len)
                .and_then(|end| mem.get(ptr..end))
                .ok_or(FilterError::BadResult)?;
            match status {
                0 if len > limits.output_max => Err(FilterError::OutputTooLarge),
                0 => {
                    out.extend_from_slice(bytes);
                    Ok(flags)
                }
                1 => Err(FilterError::Failed(sanitize(bytes))),
                _ => Err(FilterError::BadResult),
            }
        };
        if outcome.is_ok() {
            (live.start, live.end) = (start, end);
        }
        outcome
    }
}

fn classify(e: &wasmtime::Error, refused: bool) -> FilterError {
    match e.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => FilterError::Timeout,
        _ if refused => FilterError::OutOfMemory,
        _ => FilterError::Trapped,
    }
}

/// Writes the input into the instance's input region, growing memory (against the cap) when
/// it does not fit: the region grows in place while it is the top of memory, and moves to the
/// top when the guest's own heap grew past it.
struct GuestBytes<'s> {
    store: &'s mut Store<Guard>,
    memory: Memory,
    start: usize,
    pos: usize,
    end: usize,
}

impl GuestBytes<'_> {
    /// Grow memory so that `extra` more bytes fit at its top; false if refused.
    fn grow(&mut self, top: usize, extra: usize) -> bool {
        let size = self.memory.data_size(&*self.store);
        let need = (top + extra).saturating_sub(size).div_ceil(WASM_PAGE);
        if need == 0 {
            return true;
        }
        // At least 1 MiB at a time: a large input costs a few grows, not one per value;
        // where that would pass the cap, exactly what is needed. Only a refusal of what is
        // really needed counts as running out of memory.
        let refused = self.store.data().refused;
        if self
            .memory
            .grow(&mut *self.store, need.max(16) as u64)
            .is_ok()
        {
            return true;
        }
        self.store.data_mut().refused = refused;
        self.memory.grow(&mut *self.store, need as u64).is_ok()
    }
}

impl Bytes for GuestBytes<'_> {
    fn put(&mut self, bytes: &[u8]) -> bool {
        let Some(end) = self.pos.checked_add(bytes.len()) else {
            return false;
        };
        if end > self.end {
            let size = self.memory.data_size(&*self.store);
            if self.end == size {
                // The region is the top of memory: extend it.
                if !self.grow(self.pos, bytes.len()) {
                    return false;
                }
            } else {
                // The guest's heap lies above the region: start a new one at the top, with
                // what was written so far.
                let written = self.pos - self.start;
                if !self.grow(size, written + bytes.len()) {
                    return false;
                }
                let (from, to) = (self.start, size);
                self.memory
                    .data_mut(&mut *self.store)
                    .copy_within(from..from + written, to);
                self.start = to;
                self.pos = to + written;
            }
            self.end = self.memory.data_size(&*self.store);
        }
        let end = self.pos + bytes.len();
        self.memory.data_mut(&mut *self.store)[self.pos..end].copy_from_slice(bytes);
        self.pos = end;
        true
    }
}
