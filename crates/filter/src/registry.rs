//! The installed filters: what the operator configured, loaded, looked up by name, reloaded on
//! demand (SIGHUP), and counted.
//!
//! A lookup takes a read lock for the time of a map probe and clones an `Arc`; a call runs
//! with no lock held, so a reload never waits for a running filter, and a running filter
//! finishes on the version it started with.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::RwLock;

use crate::input::Fill;
use crate::native::NativeFilter;
use crate::wasm::{WasmEngine, WasmFilter};
use crate::{FilterError, Limits};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterKind {
    /// A WebAssembly module (binary or text format), sandboxed.
    Wasm,
    /// A trusted native shared library.
    Native,
}

impl FilterKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FilterKind::Wasm => "wasm",
            FilterKind::Native => "native",
        }
    }
}

/// One filter the operator installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterSpec {
    pub name: String,
    pub path: PathBuf,
    pub kind: FilterKind,
}

/// Counters of one filter name (they survive reloads).
#[derive(Debug, Default)]
pub struct FilterStats {
    pub calls: AtomicU64,
    pub errors: AtomicU64,
    pub timeouts: AtomicU64,
    pub out_of_memory: AtomicU64,
    /// Calls answered by a brief attempt ([`Filter::call_brief`]): on the server's worker.
    pub brief: AtomicU64,
    /// Wall time spent in calls (input copy, run, output copy), microseconds.
    pub usec: AtomicU64,
}

/// A copy of counters, for `stats`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub calls: u64,
    pub errors: u64,
    pub timeouts: u64,
    pub out_of_memory: u64,
    pub brief: u64,
    pub usec: u64,
}

impl FilterStats {
    fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            calls: self.calls.load(Relaxed),
            errors: self.errors.load(Relaxed),
            timeouts: self.timeouts.load(Relaxed),
            out_of_memory: self.out_of_memory.load(Relaxed),
            brief: self.brief.load(Relaxed),
            usec: self.usec.load(Relaxed),
        }
    }

    fn reset(&self) {
        for c in [
            &self.calls,
            &self.errors,
            &self.timeouts,
            &self.out_of_memory,
            &self.brief,
            &self.usec,
        ] {
            c.store(0, Relaxed);
        }
    }
}

enum Imp {
    Wasm(WasmFilter),
    Native(NativeFilter),
}

/// A loaded filter, ready to call from any thread.
pub struct Filter {
    spec: FilterSpec,
    imp: Imp,
    stats: Arc<FilterStats>,
    /// Until when (nanoseconds on [`clock`]) calls are not tried briefly: a call of this
    /// filter was not brief (see [`crate::SLOW_HOLD_MIN`]).
    slow_until: AtomicU64,
    /// Calls in a row that were not brief: the hold doubles with each.
    strikes: AtomicU32,
}

/// How long a filter skips brief attempts after `strikes` earlier calls in a row that were
/// not brief, and this one: [`crate::SLOW_HOLD_MIN`], doubled per strike, at most
/// [`crate::SLOW_HOLD`].
fn hold(strikes: u32) -> std::time::Duration {
    (crate::SLOW_HOLD_MIN * (1 << strikes.min(16))).min(crate::SLOW_HOLD)
}

/// Nanoseconds since the first call of this process asked: the time base of `slow_until`.
fn clock() -> u64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

impl Filter {
    pub fn spec(&self) -> &FilterSpec {
        &self.spec
    }

    /// Run the filter once. `fill` feeds it exactly `nkeys` entries (values or missing marks)
    /// through the sink; the output is appended to `out` and its flags returned. On error
    /// nothing is appended.
    pub fn call(
        &self,
        args: &[u8],
        nkeys: u32,
        fill: Fill<'_>,
        out: &mut Vec<u8>,
    ) -> Result<u32, FilterError> {
        self.call_answered(args, nkeys, fill, out, &|| false)
    }

    /// [`Filter::call`] for a caller that may have answered its client with a timeout before
    /// the call ends (the server's watchdog, past the deadline): `answered`, asked once when
    /// the call is over, says so, and the call then counts as that timeout whatever its own
    /// result, so that the counters agree with what the client got.
    pub fn call_answered(
        &self,
        args: &[u8],
        nkeys: u32,
        fill: Fill<'_>,
        out: &mut Vec<u8>,
        answered: &dyn Fn() -> bool,
    ) -> Result<u32, FilterError> {
        let (result, took) = self.invoke(args, nkeys, fill, out, false);
        let outcome = if answered() {
            Err(&FilterError::Timeout)
        } else {
            result.as_ref().map(|_| ())
        };
        self.count(took, outcome);
        result
    }

    /// One run of either kind (`brief`: a WebAssembly call under the brief bounds), its wall
    /// time; on error nothing is left appended to `out`.
    fn invoke(
        &self,
        args: &[u8],
        nkeys: u32,
        fill: Fill<'_>,
        out: &mut Vec<u8>,
        brief: bool,
    ) -> (Result<u32, FilterError>, std::time::Duration) {
        let start = Instant::now();
        let mark = out.len();
        let result = match &self.imp {
            Imp::Wasm(w) => w.call(args, nkeys, fill, out, brief),
            Imp::Native(n) => n.call(args, nkeys, fill, out),
        };
        if result.is_err() {
            out.truncate(mark);
        }
        (result, start.elapsed())
    }

    /// [`Filter::call`] on a thread that must not wait (an event loop): Some(the call's
    /// result), or None if the call was not brief and must run where it may take its time
    /// (with [`Filter::call_answered`]; filters are pure, so running one again is safe).
    ///
    /// A WebAssembly call gives up past [`crate::BRIEF`] of its thread's CPU time (looked at
    /// on each epoch tick from the second), past the full deadline of wall time, or past
    /// [`crate::BRIEF_GROWTH`] of guest memory growth; a native call cannot be interrupted,
    /// and one that used more than `BRIEF` of CPU still answers. Either way the filter's calls then skip
    /// the brief attempt for a hold ([`crate::SLOW_HOLD_MIN`], doubling while calls keep
    /// failing to be brief, up to [`crate::SLOW_HOLD`]). A call given up is not counted as a call;
    /// its time is (`usec`: the server's CPU spent in filters).
    pub fn call_brief(
        &self,
        args: &[u8],
        nkeys: u32,
        fill: Fill<'_>,
        out: &mut Vec<u8>,
    ) -> Option<Result<u32, FilterError>> {
        if clock() < self.slow_until.load(Relaxed) {
            return None;
        }
        let cpu = crate::thread_cpu();
        let (result, took) = self.invoke(args, nkeys, fill, out, true);
        let gave_up = matches!(result, Err(FilterError::NotBrief));
        // CPU time, not wall: a preemption of the thread is not the filter's doing.
        if gave_up || crate::thread_cpu().saturating_sub(cpu) > crate::BRIEF {
            let hold = hold(self.strikes.fetch_add(1, Relaxed));
            self.slow_until
                .store(clock() + hold.as_nanos() as u64, Relaxed);
        } else if self.strikes.load(Relaxed) != 0 {
            self.strikes.store(0, Relaxed);
        }
        if gave_up {
            self.stats.usec.fetch_add(took.as_micros() as u64, Relaxed);
            return None;
        }
        self.stats.brief.fetch_add(1, Relaxed);
        self.count(took, result.as_ref().map(|_| ()));
        Some(result)
    }

    /// A call its caller answered with a timeout without running it (it waited past its
    /// deadline for a thread): counted as that timeout.
    pub fn count_timeout(&self) {
        self.count(std::time::Duration::ZERO, Err(&FilterError::Timeout));
    }

    fn count(&self, took: std::time::Duration, outcome: Result<(), &FilterError>) {
        let s = &self.stats;
        s.calls.fetch_add(1, Relaxed);
        s.usec.fetch_add(took.as_micros() as u64, Relaxed);
        if let Err(e) = outcome {
            s.errors.fetch_add(1, Relaxed);
            match e {
                FilterError::Timeout => s.timeouts.fetch_add(1, Relaxed),
                FilterError::OutOfMemory => s.out_of_memory.fetch_add(1, Relaxed),
                _ => 0,
            };
        }
    }
}

/// Every installed filter, by name.
pub struct FilterHost {
    limits: Limits,
    specs: Vec<FilterSpec>,
    engine: Option<Arc<WasmEngine>>,
    table: RwLock<HashMap<Box<[u8]>, Arc<Filter>>>,
    stats: HashMap<String, Arc<FilterStats>>,
}

impl FilterHost {
    /// Load every filter; at start-up any failure is fatal (the operator asked for it).
    pub fn new(limits: Limits, specs: Vec<FilterSpec>) -> Result<FilterHost, FilterError> {
        let engine = if specs.iter().any(|s| s.kind == FilterKind::Wasm) {
            Some(Arc::new(WasmEngine::new(limits)?))
        } else {
            None
        };
        let stats = specs
            .iter()
            .map(|s| (s.name.clone(), Arc::new(FilterStats::default())))
            .collect();
        let host = FilterHost {
            limits,
            specs,
            engine,
            table: RwLock::new(HashMap::new()),
            stats,
        };
        for spec in &host.specs {
            let f = host.load(spec)?;
            host.table
                .write()
                .insert(spec.name.as_bytes().into(), Arc::new(f));
        }
        Ok(host)
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn specs(&self) -> &[FilterSpec] {
        &self.specs
    }

    fn load(&self, spec: &FilterSpec) -> Result<Filter, FilterError> {
        let imp = match spec.kind {
            FilterKind::Wasm => {
                let engine = self
                    .engine
                    .as_ref()
                    .ok_or_else(|| FilterError::Engine("no engine".into()))?;
                Imp::Wasm(WasmFilter::load(engine, &spec.path)?)
            }
            FilterKind::Native => Imp::Native(NativeFilter::load(
                &spec.path,
                self.limits.output_max,
                self.limits.memory,
            )?),
        };
        let stats = self.stats.get(&spec.name).cloned().unwrap_or_default();
        Ok(Filter {
            spec: spec.clone(),
            imp,
            stats,
            slow_until: AtomicU64::new(0),
            strikes: AtomicU32::new(0),
        })
    }

    /// Load every filter again from its path. One that fails keeps its previous version;
    /// the failures are returned for the log.
    pub fn reload(&self) -> Vec<(String, FilterError)> {
        let mut failed = Vec::new();
        for spec in &self.specs {
            match self.load(spec) {
                Ok(f) => {
                    self.table
                        .write()
                        .insert(spec.name.as_bytes().into(), Arc::new(f));
                }
                Err(e) => failed.push((spec.name.clone(), e)),
            }
        }
        failed
    }

    pub fn get(&self, name: &[u8]) -> Option<Arc<Filter>> {
        self.table.read().get(name).cloned()
    }

    /// Counters per filter name, in the order the filters were configured.
    pub fn stats(&self) -> Vec<(&FilterSpec, StatsSnapshot)> {
        self.specs
            .iter()
            .map(|s| {
                (
                    s,
                    self.stats
                        .get(&s.name)
                        .map(|st| st.snapshot())
                        .unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Counters summed over every filter.
    pub fn totals(&self) -> StatsSnapshot {
        self.stats()
            .into_iter()
            .fold(StatsSnapshot::default(), |a, (_, s)| StatsSnapshot {
                calls: a.calls + s.calls,
                errors: a.errors + s.errors,
                timeouts: a.timeouts + s.timeouts,
                out_of_memory: a.out_of_memory + s.out_of_memory,
                brief: a.brief + s.brief,
                usec: a.usec + s.usec,
            })
    }

    pub fn reset_stats(&self) {
        self.stats.values().for_each(|s| s.reset());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    /// The figures the docs quote (filters.md, fget.rs): a filter that is never brief is tried
    /// at 0, 10, 30, 70, 150, 310, 630 and 1,270 ms (eight attempts in its first 1.3 s), then
    /// once a second.
    #[test]
    fn holds_double_from_10_ms_to_1_s() {
        assert_eq!(crate::BRIEF, Duration::from_millis(1));
        assert_eq!(crate::BRIEF_GROWTH, 1 << 20);
        let mut at = Duration::ZERO;
        let mut attempts = Vec::new();
        for strikes in 0..10 {
            attempts.push(at.as_millis());
            at += super::hold(strikes);
        }
        assert_eq!(attempts, [0, 10, 30, 70, 150, 310, 630, 1270, 2270, 3270]);
        assert_eq!(super::hold(u32::MAX), Duration::from_secs(1));
    }
}
