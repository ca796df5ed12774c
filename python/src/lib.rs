//! mnemo-python: the native half of the Python package `mnemo` (imported as `mnemo._mnemo`).
//!
//! It owns only the crossing between Python and [`mnemo_client`]: turning Python keys, values
//! and server lists into the Rust client's types and back, running the client's futures (on a
//! per-client current-thread runtime for the sync client, on one shared runtime for asyncio), and
//! mapping errors to the exception classes of `mnemo.exceptions`. Routing (ketama, hash tags,
//! ejection), flags, compression, pipelining and fget live in `mnemo-client`, once. A forked
//! child (multiprocessing, pre-forking servers) makes its own connections and runtimes and leaves
//! the parent's alone.
//!
//! ```text
//!   mnemo.Client.get_many(keys)                  (Python thread, GIL held)
//!     ├─ keys -> Vec<Vec<u8>>, values -> OwnedValue   values.rs
//!     ├─ sync:  py.detach(|| rt.block_on(fut))      GIL released during all I/O
//!     │  aio:   runtime().spawn(fut) -> asyncio future, resolved via call_soon_threadsafe
//!     └─ result -> Python objects (GIL held again)    values.rs; errors -> errors.rs
//! ```

mod client;
mod errors;
mod settings;
mod values;

use mnemo_client::{Config, ServerSpec};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

/// Bumped in the child of every fork (pthread_atfork): a client or runtime made in an earlier
/// generation belongs to the parent and is left alone; the child makes its own.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn fork_generation() -> u64 {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: registers a handler that only touches an atomic (async-signal-safe).
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
    FORK_GENERATION.load(Ordering::Relaxed)
}

/// The runtime behind every `mnemo.aio.Client` of this process: one worker thread does the I/O
/// of all of them; results are handed to the asyncio loop that asked, which runs the Python
/// callbacks. A fork's child gets a new one (the parent's worker thread does not exist there).
fn async_runtime() -> &'static tokio::runtime::Runtime {
    static RT: Mutex<Option<(u64, &'static tokio::runtime::Runtime)>> = Mutex::new(None);
    let generation = fork_generation();
    let mut rt = RT.lock().unwrap_or_else(|e| e.into_inner());
    match *rt {
        Some((g, r)) if g == generation => r,
        _ => {
            // Leaked: one per process generation, and the parent's must not be dropped here.
            let r: &'static _ = Box::leak(Box::new(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("mnemo-aio")
                    .enable_all()
                    .build()
                    .expect("cannot start the mnemo.aio runtime"),
            ));
            *rt = Some((generation, r));
            r
        }
    }
}

/// A Rust client and what drives it, made for one process.
pub(crate) struct State {
    /// [`crate::fork_generation`] it was made in.
    pub generation: u64,
    pub client: mnemo_client::Client,
    /// The sync face's runtime (current-thread: the calling thread does the I/O, no hand-off to
    /// another thread); `None` for the asyncio face, which uses the shared runtime.
    pub rt: Option<tokio::runtime::Runtime>,
}

impl std::ops::Deref for State {
    type Target = mnemo_client::Client;
    fn deref(&self) -> &mnemo_client::Client {
        &self.client
    }
}

pub(crate) fn new_state(
    servers: &[ServerSpec],
    cfg: &Config,
    asyncio: bool,
) -> mnemo_client::Result<State> {
    // The sync face owns its thread: its sockets wait in the kernel (one system call less per
    // request); the asyncio face shares one runtime thread, which must never block.
    let cfg = Config {
        blocking_io: !asyncio,
        ..cfg.clone()
    };
    let client = mnemo_client::Client::new(servers.to_vec(), cfg)?;
    let rt = if asyncio {
        None
    } else {
        Some(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| mnemo_client::Error::Config(format!("cannot start a runtime: {e}")))?,
        )
    };
    Ok(State {
        generation: crate::fork_generation(),
        client,
        rt,
    })
}

/// Turns an operation's Rust output into a Python object (run with the GIL held).
pub(crate) type Convert<T> = Box<dyn FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send>;

/// Results being handed to Python by the runtime's thread right now (each inside or about to
/// enter `Python::attach`).
static RESOLVING: AtomicUsize = AtomicUsize::new(0);
/// Set at interpreter exit (atexit, [`_drain_aio`]): the runtime's thread no longer enters Python.
static EXITING: AtomicBool = AtomicBool::new(false);

/// Run at interpreter exit, before finalization: from here on the runtime's thread leaves Python
/// alone, and the results it is handing over right now are let finish first (the GIL released
/// meanwhile). Without this, a result handed over while `asyncio.run` returns could still be
/// inside Python (its `call_soon_threadsafe` call gives the GIL up midway) when finalization
/// starts; CPython then ends that thread in the middle of its Python frames, and the process
/// aborts or crashes on exit (seen 6 times in 20 runs of a three-call script).
#[pyfunction]
fn _drain_aio(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    // A hand-over is a few Python calls; the deadline only guards against the unforeseen.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    py.detach(|| {
        while RESOLVING.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
    });
}

/// Run `fut` on the asyncio side: returns an asyncio future of the running loop that is resolved
/// (from the runtime's thread, through `loop.call_soon_threadsafe`) with `convert(output)` or the
/// mapped error.
pub(crate) fn spawn_asyncio<T, F>(
    py: Python<'_>,
    fut: F,
    convert: Convert<T>,
) -> PyResult<Py<PyAny>>
where
    F: Future<Output = mnemo_client::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    static GET_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let get_loop = GET_LOOP.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("asyncio")?.getattr("get_running_loop")?.unbind())
    })?;
    let event_loop = get_loop.bind(py).call0()?;
    let pyfut = event_loop.call_method0("create_future")?;
    let (event_loop, target) = (event_loop.unbind(), pyfut.clone().unbind());
    async_runtime().spawn(async move {
        let out = fut.await;
        // Counted before the check, and the exit hook sets the flag before it reads the count
        // (both SeqCst): either this sees the flag, or the hook waits for this.
        RESOLVING.fetch_add(1, Ordering::SeqCst);
        if EXITING.load(Ordering::SeqCst) {
            RESOLVING.fetch_sub(1, Ordering::SeqCst);
            // Nobody is left to wait for it; the Python objects are dropped without the GIL
            // (pyo3 defers those).
            return;
        }
        Python::attach(|py| {
            let (ok, value) = match out
                .map_err(|e| errors::to_py(py, e))
                .and_then(|t| convert(py, t))
            {
                Ok(v) => (true, v),
                Err(e) => (false, e.into_value(py).into_any()),
            };
            static RESOLVE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
            let resolve = match RESOLVE.get_or_try_init(py, || {
                Ok::<_, PyErr>(wrap_pyfunction!(_resolve, py)?.into_any().unbind())
            }) {
                Ok(f) => f,
                Err(e) => return e.write_unraisable(py, None),
            };
            // A loop closed meanwhile has nobody waiting for the answer: dropped.
            let _ =
                event_loop.call_method1(py, "call_soon_threadsafe", (resolve, target, ok, value));
        });
        RESOLVING.fetch_sub(1, Ordering::SeqCst);
    });
    Ok(pyfut.unbind())
}

/// Complete an asyncio future unless it was cancelled meanwhile (runs on the loop's thread).
#[pyfunction]
fn _resolve(fut: &Bound<'_, PyAny>, ok: bool, value: &Bound<'_, PyAny>) -> PyResult<()> {
    if fut.call_method0("done")?.is_truthy()? {
        return Ok(());
    }
    if ok {
        fut.call_method1("set_result", (value,))?;
    } else {
        fut.call_method1("set_exception", (value,))?;
    }
    Ok(())
}

#[pymodule]
fn _mnemo(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::Client>()?;
    m.add_function(wrap_pyfunction!(_resolve, m)?)?;
    let drain = wrap_pyfunction!(_drain_aio, m)?;
    m.py()
        .import("atexit")?
        .call_method1("register", (drain.clone(),))?;
    m.add_function(drain)?;
    m.add(
        "DEFAULT_COMPRESS_THRESHOLD",
        mnemo_client::Compression::DEFAULT_THRESHOLD,
    )?;
    m.add(
        "DEFAULT_MIN_COMPRESS_SAVING",
        mnemo_client::Compression::DEFAULT_MIN_SAVING,
    )?;
    // For benchmarks: a debug build's numbers say nothing about the client.
    m.add("DEBUG_BUILD", cfg!(debug_assertions))?;
    Ok(())
}
