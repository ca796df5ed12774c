//! WebAssembly filters, run by wasmtime.
//!
//! A module is compiled once when it is loaded and checked against the ABI (no imports: the
//! host provides none; exports `memory`, `mnemo_abi_version`, `mnemo_filter`), then kept as a
//! pre-instantiated template. Each call gets a fresh instance from the template (the pooling
//! allocator makes that a few microseconds: slots are reused, memory is reset copy-on-write),
//! so whatever a call leaves behind (a leak, a corrupted heap, a half-run loop) dies with it.
//!
//! ```text
//!   guest linear memory during a call
//!   0 ─── module's data, stack, heap (its own allocator) ───┬── input (host-grown pages) ──┬── heap pages the guest
//!                                                           │ written once by the host    │   grows during the call
//!                                                           base                          base + len
//! ```
//!
//! Limits: the memory cap is a `ResourceLimiter` on the store (input pages count against it);
//! the deadline is epoch interruption, the epoch being ticked by one thread for all calls; the
//! stack cap is wasmtime's `max_wasm_stack`; the output cap is checked before the output is
//! copied out.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, InstancePre, Linker, Memory, Module, ModuleExport,
    PoolingAllocationConfig, ResourceLimiter, Store, Trap, TypedFunc,
};

use crate::error::sanitize;
use crate::input::{Bytes, Encoder, InputSink};
use crate::{FilterError, Limits, ABI_VERSION};

/// How often the epoch advances: the granularity of the deadline.
const TICK: Duration = Duration::from_millis(1);
/// The result record the guest returns a pointer to: status, flags, ptr, len (u32 each).
const RESULT_LEN: usize = 16;
const WASM_PAGE: usize = 64 * 1024;

/// One engine for every WebAssembly filter, and the thread that ticks its epoch.
pub(crate) struct WasmEngine {
    engine: Engine,
    limits: Limits,
    ticking: AtomicBool,
}

impl WasmEngine {
    pub fn new(limits: Limits) -> Result<WasmEngine, FilterError> {
        let mut cfg = Config::new();
        cfg.epoch_interruption(true).max_wasm_stack(limits.stack);
        // Instance slots for every call that may run at once, plus loads and reloads.
        let slots = limits.concurrency.saturating_mul(2).saturating_add(4);
        let mut pool = PoolingAllocationConfig::new();
        pool.total_core_instances(slots)
            .total_memories(slots)
            .total_tables(slots)
            .max_memories_per_module(1)
            .max_memory_size(limits.memory)
            // Give a slot's pages back when it is reused: a call that touched the whole cap
            // must not keep it resident.
            .linear_memory_keep_resident(0);
        cfg.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = match Engine::new(&cfg) {
            Ok(e) => e,
            Err(_) => {
                // The pool reserves address space up front; where that is refused (a low
                // `ulimit -v`), instances are allocated one by one instead.
                cfg.allocation_strategy(InstanceAllocationStrategy::OnDemand);
                Engine::new(&cfg).map_err(|e| FilterError::Engine(e.to_string()))?
            }
        };
        Ok(WasmEngine { engine, limits, ticking: AtomicBool::new(false) })
    }

    /// Start the epoch ticker (once, when the first module loads).
    fn start_ticker(&self) {
        if self.ticking.swap(true, Ordering::Relaxed) {
            return;
        }
        let engine = self.engine.clone();
        let spawned = std::thread::Builder::new().name("mnemo-filter-epoch".into()).spawn(move || loop {
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
}

/// The store's data: the memory cap, and whether it refused a request (so that the trap that
/// follows, Rust's allocation-failure abort for instance, is reported as out of memory).
struct Guard {
    cap: usize,
    refused: bool,
}

impl ResourceLimiter for Guard {
    fn memory_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        let ok = desired <= self.cap;
        self.refused |= !ok;
        Ok(ok)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
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
}

impl WasmFilter {
    pub fn load(engine: &Arc<WasmEngine>, path: &Path) -> Result<WasmFilter, FilterError> {
        let bad = |reason: String| FilterError::BadModule { path: path.to_owned(), reason };
        let bytes = std::fs::read(path).map_err(|source| FilterError::Read { path: path.to_owned(), source })?;
        let module = Module::new(&engine.engine, &bytes).map_err(|e| bad(format!("{e:#}")))?;
        if let Some(imp) = module.imports().next() {
            return Err(bad(format!(
                "it imports {}::{} (mnemod provides no imports: build for wasm32-unknown-unknown)",
                imp.module(),
                imp.name()
            )));
        }
        let export = |name: &str| module.get_export_index(name).ok_or_else(|| bad(format!("it does not export `{name}`")));
        let (memory, filter) = (export("memory")?, export("mnemo_filter")?);
        export("mnemo_abi_version")?;
        let pre = Linker::<Guard>::new(&engine.engine).instantiate_pre(&module).map_err(|e| bad(format!("{e:#}")))?;
        engine.start_ticker();
        let f = WasmFilter { engine: engine.clone(), pre, memory, filter };
        // Check the types and the version once, in a real instance under the call limits.
        let (mut store, instance) = f.instance().map_err(|e| bad(format!("cannot instantiate it: {e}")))?;
        instance.get_typed_func::<(i32, i32), i32>(&mut store, "mnemo_filter").map_err(|e| bad(format!("{e:#}")))?;
        let version = instance
            .get_typed_func::<(), i32>(&mut store, "mnemo_abi_version")
            .and_then(|v| v.call(&mut store, ()))
            .map_err(|e| bad(format!("mnemo_abi_version: {e:#}")))?;
        if version as u32 != ABI_VERSION {
            return Err(FilterError::AbiVersion { path: path.to_owned(), found: version as u32, expected: ABI_VERSION });
        }
        Ok(f)
    }

    fn instance(&self) -> Result<(Store<Guard>, wasmtime::Instance), FilterError> {
        let mut store = Store::new(&self.engine.engine, Guard { cap: self.engine.limits.memory, refused: false });
        store.limiter(|g| g);
        store.set_epoch_deadline(self.engine.deadline_ticks());
        match self.pre.instantiate(&mut store) {
            Ok(i) => Ok((store, i)),
            Err(_) if store.data().refused => Err(FilterError::OutOfMemory),
            // The pool has no free slot (or the host is out of memory): this call cannot run.
            Err(_) => Err(FilterError::Busy),
        }
    }

    /// One call: a fresh instance, the input written into new pages of its memory by `fill`,
    /// `mnemo_filter` run under the deadline, its output appended to `out`.
    pub fn call(
        &self,
        args: &[u8],
        nkeys: u32,
        fill: &mut dyn FnMut(&mut dyn InputSink),
        out: &mut Vec<u8>,
    ) -> Result<u32, FilterError> {
        let (mut store, instance) = self.instance()?;
        let Some(memory) = instance.get_module_export(&mut store, &self.memory).and_then(|e| e.into_memory()) else {
            return Err(FilterError::BadResult);
        };
        let base = memory.data_size(&store);
        let mut enc = Encoder::new(GuestBytes { store: &mut store, memory, pos: base }, args, nkeys);
        fill(&mut enc);
        if !enc.finish() {
            return Err(FilterError::OutOfMemory);
        }
        let len = enc.bytes.pos - base;
        let func: TypedFunc<(i32, i32), i32> = instance
            .get_module_export(&mut store, &self.filter)
            .and_then(|e| e.into_func())
            .and_then(|f| f.typed(&store).ok())
            .ok_or(FilterError::BadResult)?;
        // The deadline counts from here: copying the input is the server's work, not the filter's.
        store.set_epoch_deadline(self.engine.deadline_ticks());
        // Addresses are u32 in wasm32; the ABI passes them as i32 bit patterns.
        let result = func.call(&mut store, (base as u32 as i32, len as u32 as i32));
        let rec = match result {
            Ok(ptr) => ptr as u32 as usize,
            Err(e) => return Err(classify(&e, store.data().refused)),
        };
        let mem = memory.data(&store);
        let word = |at: usize| -> Option<u32> {
            mem.get(at..at.checked_add(4)?).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        };
        let field = |i: usize| rec.checked_add(i * 4).and_then(word).ok_or(FilterError::BadResult);
        debug_assert_eq!(RESULT_LEN, 16);
        let (status, flags, ptr, len) = (field(0)?, field(1)?, field(2)? as usize, field(3)? as usize);
        let bytes = ptr.checked_add(len).and_then(|end| mem.get(ptr..end)).ok_or(FilterError::BadResult)?;
        match status {
            0 if len > self.engine.limits.output_max => Err(FilterError::OutputTooLarge),
            0 => {
                out.extend_from_slice(bytes);
                Ok(flags)
            }
            1 => Err(FilterError::Failed(sanitize(bytes))),
            _ => Err(FilterError::BadResult),
        }
    }
}

fn classify(e: &wasmtime::Error, refused: bool) -> FilterError {
    match e.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => FilterError::Timeout,
        _ if refused => FilterError::OutOfMemory,
        _ => FilterError::Trapped,
    }
}

/// Writes the input at the end of the guest's memory, growing it (against the cap) as needed.
struct GuestBytes<'s> {
    store: &'s mut Store<Guard>,
    memory: Memory,
    pos: usize,
}

impl Bytes for GuestBytes<'_> {
    fn put(&mut self, bytes: &[u8]) -> bool {
        let Some(end) = self.pos.checked_add(bytes.len()) else { return false };
        let size = self.memory.data_size(&*self.store);
        if end > size {
            // Grow by at least 1 MiB at a time: a large input costs a few grows, not one per
            // value; where that would pass the cap, by exactly what is needed.
            let need = (end - size).div_ceil(WASM_PAGE);
            let refused = self.store.data().refused;
            if self.memory.grow(&mut *self.store, need.max(16) as u64).is_err() {
                // Only a refusal of what is really needed counts as running out of memory.
                self.store.data_mut().refused = refused;
                if self.memory.grow(&mut *self.store, need as u64).is_err() {
                    return false;
                }
            }
        }
        self.memory.data_mut(&mut *self.store)[self.pos..end].copy_from_slice(bytes);
        self.pos = end;
        true
    }
}
