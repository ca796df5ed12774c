//! `mnemo._mnemo.Client`: the pymemcache-style API over [`mnemo_client::Client`]. One class
//! serves both faces: `mnemo.Client` (each call blocks, the GIL released during the I/O) and
//! `mnemo.aio.Client` (each call returns an asyncio future). Each method converts its arguments
//! with the GIL held, builds one owned future, and [`Client::run`] drives it either way.

use crate::settings::value_settings;
use crate::values::{
    boolean, cas_token, counter, filter_part_class, from_raw, from_value, keys_of, none,
    stat_value, to_key, to_raw, to_servers, to_value, OwnedValue,
};
use crate::{errors, new_state, spawn_asyncio, Convert, State};
use bytes::Bytes;
use mnemo_client::{
    filter, Config, FlagProfile, ServerSpec, SetOptions, StoreCmd, StoreOutcome, Value,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// memcached reads an exptime above 30 days as a unix time, and one in the past as "expired
/// already": where pymemcache sends a negative exptime (Django's timeout=0), we send this.
const EXPIRED: u32 = 60 * 60 * 24 * 30 + 1;
/// `timeout=None`: no limit, in practice.
const FOREVER: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The native client behind `mnemo.Client` and `mnemo.aio.Client` (use those).
#[pyclass(module = "mnemo._mnemo", subclass, frozen)]
pub struct Client {
    servers: Vec<ServerSpec>,
    cfg: Config,
    asyncio: bool,
    /// Swapped for a fresh one by `close()`, and in a child process after a fork.
    state: RwLock<Arc<State>>,
    pickle_protocol: i32,
    default_noreply: bool,
    /// Put before every key (pymemcache's key_prefix); results use the caller's keys.
    key_prefix: Vec<u8>,
    /// pymemcache's ignore_exc: reads treat a failure as a miss.
    ignore_exc: bool,
}

/// With `ignore`, a failed read is a miss (a bad key still raises: that is the caller's bug).
fn miss_on_error<T: Default>(ignore: bool, r: mnemo_client::Result<T>) -> mnemo_client::Result<T> {
    match r {
        Err(e) if ignore && !matches!(e, mnemo_client::Error::BadKey(_)) => Ok(T::default()),
        r => r,
    }
}

/// Largest `reply_spin` accepted, in seconds.
const MAX_REPLY_SPIN: f64 = 0.001;

fn seconds(py: Python<'_>, name: &str, s: Option<f64>) -> PyResult<Duration> {
    match s {
        None => Ok(FOREVER),
        Some(s) if s.is_finite() && s > 0.0 => Ok(Duration::from_secs_f64(s)),
        Some(s) => Err(errors::illegal(
            py,
            format!("{name} must be a positive number of seconds or None, not {s}"),
        )),
    }
}

fn exptime(expire: i64) -> u32 {
    if expire < 0 {
        EXPIRED
    } else {
        expire.min(u32::MAX as i64) as u32
    }
}

impl Client {
    /// This process's client. After a fork the child makes its own: the parent's connections
    /// and runtime are shared with the parent (even dropping them would deregister the
    /// parent's sockets from the epoll instance both hold), so the child leaves them alone.
    fn client(&self) -> PyResult<Arc<State>> {
        let st = self.state.read().unwrap().clone();
        if st.generation == crate::fork_generation() {
            return Ok(st);
        }
        let fresh = Arc::new(
            new_state(&self.servers, &self.cfg, self.asyncio)
                .map_err(|e| Python::attach(|py| errors::to_py(py, e)))?,
        );
        std::mem::forget(std::mem::replace(
            &mut *self.state.write().unwrap(),
            fresh.clone(),
        ));
        Ok(fresh)
    }

    /// Drive the future `make` builds from this process's client: blocking with the GIL
    /// released (sync face) or as an asyncio future. The future and the runtime that drives it
    /// come from the same state, so a concurrent `close()` cannot split them.
    fn run<T, F>(
        &self,
        py: Python<'_>,
        make: impl FnOnce(Arc<State>) -> F,
        convert: Convert<T>,
    ) -> PyResult<Py<PyAny>>
    where
        F: Future<Output = mnemo_client::Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let st = self.client()?;
        let fut = make(st.clone());
        match &st.rt {
            Some(rt) => match py.detach(|| rt.block_on(fut)) {
                Ok(t) => convert(py, t),
                Err(e) => Err(errors::to_py(py, e)),
            },
            None => spawn_asyncio(py, fut, convert),
        }
    }

    /// The profiles values are read with, the writing one first.
    fn readers(&self) -> Vec<FlagProfile> {
        std::iter::once(self.cfg.profile)
            .chain(self.cfg.also_read.iter().copied())
            .collect()
    }

    fn opts(&self, expire: i64, noreply: Option<bool>, compress: Option<bool>) -> SetOptions {
        SetOptions {
            exptime: exptime(expire),
            noreply: noreply.unwrap_or(self.default_noreply),
            compress,
        }
    }

    /// set/add/replace/cas: the stored value goes through flags and compression.
    #[allow(clippy::too_many_arguments)]
    fn store(
        &self,
        py: Python<'_>,
        cmd: StoreCmd,
        key: &Bound<'_, PyAny>,
        value: OwnedValue,
        cas: u64,
        opts: SetOptions,
    ) -> PyResult<Py<PyAny>> {
        let k = to_key(&self.key_prefix, key)?;
        self.run(
            py,
            move |c| async move { c.store(cmd, k, value.as_ref(), cas, &opts).await },
            Box::new(move |py, o| match o {
                StoreOutcome::Stored | StoreOutcome::NoReply => boolean(py, true),
                StoreOutcome::NotStored | StoreOutcome::Exists => boolean(py, false),
                // cas on a missing key: pymemcache's None.
                StoreOutcome::NotFound => Ok(none(py)),
            }),
        )
    }

    /// One answer per server: the value itself with one server (pymemcache's Client), else a
    /// dict "host:port" -> value (the first error raised).
    fn per_server<
        T: Send + 'static,
        F: Future<Output = mnemo_client::PerServer<T>> + Send + 'static,
    >(
        &self,
        py: Python<'_>,
        make: impl FnOnce(Arc<State>) -> F,
        each: fn(Python<'_>, T) -> PyResult<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let single = self.servers.len() == 1;
        self.run(
            py,
            move |c| {
                let fut = make(c);
                async move {
                    let mut out = Vec::new();
                    for (spec, r) in fut.await {
                        out.push((spec.addr(), r?));
                    }
                    Ok(out)
                }
            },
            Box::new(move |py, out: Vec<(String, T)>| {
                if single {
                    let (_, t) = out.into_iter().next().expect("one server");
                    return each(py, t);
                }
                let d = PyDict::new(py);
                for (addr, t) in out {
                    d.set_item(addr, each(py, t)?)?;
                }
                Ok(d.into_any().unbind())
            }),
        )
    }
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (servers, *, connect_timeout=Some(1.0), timeout=Some(5.0),
        profile="mnemo".to_owned(), also_read=Vec::new(),
        compression=Some("default".to_owned()), compress_level=None,
        compress_threshold=None, min_compress_saving=None, hash_tags=false,
        failure_limit=Some(Config::DEFAULT_FAILURE_LIMIT), retry_interval=2.0,
        pool_size=Config::DEFAULT_POOL_SIZE, max_connections=Config::DEFAULT_MAX_CONNECTIONS,
        pickle_protocol=None, default_noreply=false, key_prefix=None, ignore_exc=false,
        reply_spin=Config::DEFAULT_REPLY_SPIN.as_secs_f64(), asyncio=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        servers: &Bound<'_, PyAny>,
        connect_timeout: Option<f64>,
        timeout: Option<f64>,
        profile: String,
        also_read: Vec<String>,
        compression: Option<String>,
        compress_level: Option<i32>,
        compress_threshold: Option<usize>,
        min_compress_saving: Option<f64>,
        hash_tags: bool,
        failure_limit: Option<u32>,
        retry_interval: f64,
        pool_size: usize,
        max_connections: usize,
        pickle_protocol: Option<i32>,
        default_noreply: bool,
        key_prefix: Option<&Bound<'_, PyAny>>,
        ignore_exc: bool,
        reply_spin: f64,
        asyncio: bool,
    ) -> PyResult<Self> {
        let key_prefix = match key_prefix {
            None => Vec::new(),
            Some(p) if p.is_instance_of::<pyo3::types::PyString>() => {
                p.extract::<String>()?.into_bytes()
            }
            Some(p) => p.extract::<Vec<u8>>()?,
        };
        let servers = to_servers(servers)?;
        let values = value_settings(
            py,
            &profile,
            &also_read,
            compression.as_deref(),
            compress_level,
            compress_threshold,
            min_compress_saving,
        )?;
        // A spin is for replies that come within microseconds; past MAX_REPLY_SPIN it would
        // only burn the CPU a sleeping read leaves free.
        if !(reply_spin.is_finite() && (0.0..=MAX_REPLY_SPIN).contains(&reply_spin)) {
            return Err(errors::illegal(
                py,
                format!("reply_spin is seconds in [0, {MAX_REPLY_SPIN}], not {reply_spin}"),
            ));
        }
        let cfg = Config {
            connect_timeout: seconds(py, "connect_timeout", connect_timeout)?,
            io_timeout: seconds(py, "timeout", timeout)?,
            pool_size,
            max_connections,
            failure_limit,
            retry_interval: seconds(py, "retry_interval", Some(retry_interval))?,
            hash_tags,
            profile: values.profile,
            also_read: values.also_read,
            compression: values.compression,
            max_inflated: Config::DEFAULT_MAX_INFLATED,
            // Set per face by new_state.
            blocking_io: false,
            reply_spin: Duration::from_secs_f64(reply_spin),
        };
        let state = new_state(&servers, &cfg, asyncio).map_err(|e| errors::to_py(py, e))?;
        let protocol = match pickle_protocol {
            Some(p) => p,
            None => py
                .import("pickle")?
                .getattr("HIGHEST_PROTOCOL")?
                .extract()?,
        };
        Ok(Client {
            servers,
            cfg,
            asyncio,
            state: RwLock::new(Arc::new(state)),
            pickle_protocol: protocol,
            default_noreply,
            key_prefix,
            ignore_exc,
        })
    }

    /// The servers as "host:port:weight", in the order given.
    #[getter]
    fn servers(&self) -> Vec<String> {
        self.servers
            .iter()
            .map(|s| format!("{}:{}", s.addr(), s.weight))
            .collect()
    }

    /// The server ("host:port") that owns `key` now (ketama, hash tags, ejection).
    fn route(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<String> {
        let c = self.client()?;
        c.route(to_key(&self.key_prefix, key)?)
            .map(|s| s.addr())
            .map_err(|e| errors::to_py(py, e))
    }

    /// The servers ("host:port") ejected now, skipped until their retry interval has passed.
    fn ejected(&self) -> PyResult<Vec<String>> {
        let c = self.client()?;
        Ok((0..self.servers.len())
            .filter(|&i| c.is_ejected(i))
            .map(|i| self.servers[i].addr())
            .collect())
    }

    /// Drop every pooled connection (the next call connects again).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let fresh =
            new_state(&self.servers, &self.cfg, self.asyncio).map_err(|e| errors::to_py(py, e))?;
        // The old state goes when the last call still using it returns.
        *self.state.write().unwrap() = Arc::new(fresh);
        Ok(())
    }

    /// The value of `key` (bytes, str, int or the unpickled object, as stored), or `default`.
    #[pyo3(signature = (key, default=None))]
    fn get(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let k = to_key(&self.key_prefix, key)?;
        let ignore = self.ignore_exc;
        let readers = self.readers();
        self.run(
            py,
            move |c| async move {
                let item = miss_on_error(ignore, c.get_raw(k).await)?;
                item.map(|item| c.decompress(item)).transpose()
            },
            Box::new(move |py, v: Option<(Bytes, u32)>| match v {
                Some((data, flags)) => from_raw(py, &readers, &data, flags),
                None => Ok(default.unwrap_or_else(|| none(py))),
            }),
        )
    }

    /// (value, cas token) of `key`, or (default, cas_default).
    #[pyo3(signature = (key, default=None, cas_default=None))]
    fn gets(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
        cas_default: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let k = to_key(&self.key_prefix, key)?;
        let ignore = self.ignore_exc;
        self.run(
            py,
            move |c| async move { miss_on_error(ignore, c.gets(k).await) },
            Box::new(move |py, v: Option<(Value, u64)>| {
                let t = match v {
                    Some((v, cas)) => PyTuple::new(
                        py,
                        [
                            from_value(py, v)?,
                            cas.into_pyobject(py)?.into_any().unbind(),
                        ],
                    )?,
                    None => PyTuple::new(
                        py,
                        [
                            default.unwrap_or_else(|| none(py)),
                            cas_default.unwrap_or_else(|| none(py)),
                        ],
                    )?,
                };
                Ok(t.into_any().unbind())
            }),
        )
    }

    /// The found keys and their values, in one pipelined request per server, all at once.
    fn get_many(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let (raw, orig) = keys_of(&self.key_prefix, keys)?;
        let ignore = self.ignore_exc;
        let readers = self.readers();
        self.run(
            py,
            // Decompressed here, without the GIL, in the order asked (a large compressed batch
            // on two threads: Client::decompress_many); made into objects (with the GIL)
            // straight from the read buffer's bytes.
            move |c| async move {
                let found = miss_on_error(ignore, c.get_multi_ordered_raw(&raw.slices()).await)?;
                c.decompress_many(found)
            },
            Box::new(move |py, values: Vec<Option<(Bytes, u32)>>| {
                let d = PyDict::new(py);
                for (v, o) in values.into_iter().zip(orig) {
                    if let Some((data, flags)) = v {
                        d.set_item(o, from_raw(py, &readers, &data, flags)?)?;
                    }
                }
                Ok(d.into_any().unbind())
            }),
        )
    }

    /// get_many with cas tokens: key -> (value, cas).
    fn gets_many(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let (raw, orig) = keys_of(&self.key_prefix, keys)?;
        let ignore = self.ignore_exc;
        self.run(
            py,
            move |c| async move {
                let found = miss_on_error(ignore, c.gets_multi_ordered_raw(&raw.slices()).await)?;
                found
                    .into_iter()
                    .map(|item| {
                        item.map(|item| {
                            let cas = item.cas.unwrap_or(0);
                            c.decode(item).map(|v| (v, cas))
                        })
                        .transpose()
                    })
                    .collect::<mnemo_client::Result<Vec<Option<(Value, u64)>>>>()
            },
            Box::new(move |py, values: Vec<Option<(Value, u64)>>| {
                let d = PyDict::new(py);
                for (v, o) in values.into_iter().zip(orig) {
                    if let Some((v, cas)) = v {
                        let t = PyTuple::new(
                            py,
                            [
                                from_value(py, v)?,
                                cas.into_pyobject(py)?.into_any().unbind(),
                            ],
                        )?;
                        d.set_item(o, t)?;
                    }
                }
                Ok(d.into_any().unbind())
            }),
        )
    }

    /// Store unconditionally: True (False only if the server did not store it). `expire` in
    /// seconds (0: never; over 30 days: a unix time; negative: expired at once); `compress=False`
    /// stores this value plain, `True` compresses even if the client's compression is off.
    #[pyo3(signature = (key, value, expire=0, noreply=None, compress=None))]
    fn set(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        expire: i64,
        noreply: Option<bool>,
        compress: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let v = to_value(value, self.pickle_protocol, self.cfg.profile)?;
        self.store(
            py,
            StoreCmd::Set,
            key,
            v,
            0,
            self.opts(expire, noreply, compress),
        )
    }

    /// Store only if `key` is absent: whether it was stored.
    #[pyo3(signature = (key, value, expire=0, noreply=None, compress=None))]
    fn add(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        expire: i64,
        noreply: Option<bool>,
        compress: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let v = to_value(value, self.pickle_protocol, self.cfg.profile)?;
        self.store(
            py,
            StoreCmd::Add,
            key,
            v,
            0,
            self.opts(expire, noreply, compress),
        )
    }

    /// Store only if `key` exists: whether it was stored.
    #[pyo3(signature = (key, value, expire=0, noreply=None, compress=None))]
    fn replace(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        expire: i64,
        noreply: Option<bool>,
        compress: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let v = to_value(value, self.pickle_protocol, self.cfg.profile)?;
        self.store(
            py,
            StoreCmd::Replace,
            key,
            v,
            0,
            self.opts(expire, noreply, compress),
        )
    }

    /// Append raw bytes (str as UTF-8) to an existing value; never compressed.
    #[pyo3(signature = (key, value, expire=0, noreply=None))]
    fn append(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        expire: i64,
        noreply: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let v = OwnedValue::Bytes(to_raw(value)?);
        self.store(
            py,
            StoreCmd::Append,
            key,
            v,
            0,
            self.opts(expire, noreply, Some(false)),
        )
    }

    /// Prepend raw bytes (str as UTF-8) to an existing value; never compressed.
    #[pyo3(signature = (key, value, expire=0, noreply=None))]
    fn prepend(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        expire: i64,
        noreply: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let v = OwnedValue::Bytes(to_raw(value)?);
        self.store(
            py,
            StoreCmd::Prepend,
            key,
            v,
            0,
            self.opts(expire, noreply, Some(false)),
        )
    }

    /// True if stored, False if the value changed since `gets`, None if the key is gone.
    #[pyo3(signature = (key, value, cas, expire=0, noreply=false, compress=None))]
    #[allow(clippy::too_many_arguments)]
    fn cas(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        cas: &Bound<'_, PyAny>,
        expire: i64,
        noreply: bool,
        compress: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let token = cas_token(cas)?;
        let v = to_value(value, self.pickle_protocol, self.cfg.profile)?;
        self.store(
            py,
            StoreCmd::Cas,
            key,
            v,
            token,
            self.opts(expire, Some(noreply), compress),
        )
    }

    /// Store many values, one pipelined write per server, all servers at once. Returns the keys
    /// that were not stored (pymemcache's set_many).
    #[pyo3(signature = (values, expire=0, noreply=None, compress=None))]
    fn set_many(
        &self,
        py: Python<'_>,
        values: &Bound<'_, PyAny>,
        expire: i64,
        noreply: Option<bool>,
        compress: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let items = match values.cast::<PyDict>() {
            Ok(d) => d.items().into_any(),
            Err(_) => values.clone(),
        };
        let (mut raw, mut orig) = (Vec::new(), Vec::new());
        for pair in items.try_iter()? {
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair?.extract()?;
            raw.push((
                to_key(&self.key_prefix, &k)?,
                to_value(&v, self.pickle_protocol, self.cfg.profile)?,
            ));
            orig.push(k.unbind());
        }
        let opts = self.opts(expire, noreply, compress);
        self.run(
            py,
            move |c| async move {
                let refs: Vec<(&[u8], mnemo_client::ValueRef<'_>)> =
                    raw.iter().map(|(k, v)| (&k[..], v.as_ref())).collect();
                c.set_multi(&refs, &opts).await
            },
            Box::new(move |py, outcomes: Vec<StoreOutcome>| {
                let failed = PyList::empty(py);
                for (o, k) in outcomes.into_iter().zip(orig) {
                    if !matches!(o, StoreOutcome::Stored | StoreOutcome::NoReply) {
                        failed.append(k)?;
                    }
                }
                Ok(failed.into_any().unbind())
            }),
        )
    }

    /// True if the key existed (always True with noreply).
    #[pyo3(signature = (key, noreply=None))]
    fn delete(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        noreply: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let k = to_key(&self.key_prefix, key)?;
        let noreply = noreply.unwrap_or(self.default_noreply);
        self.run(
            py,
            move |c| async move { c.delete_with(k, noreply).await },
            Box::new(boolean),
        )
    }

    /// Delete many keys, pipelined per server; True (pymemcache's delete_many).
    #[pyo3(signature = (keys, noreply=None))]
    fn delete_many(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        noreply: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let _ = noreply; // replies are read either way: one pipelined batch per server
        let (raw, _) = keys_of(&self.key_prefix, keys)?;
        self.run(
            py,
            move |c| async move { c.delete_multi(&raw.slices()).await },
            Box::new(|py, _| boolean(py, true)),
        )
    }

    /// The new value, or None if the key is absent (or noreply).
    #[pyo3(signature = (key, value, noreply=false))]
    fn incr(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: u64,
        noreply: bool,
    ) -> PyResult<Py<PyAny>> {
        let k = to_key(&self.key_prefix, key)?;
        self.run(
            py,
            move |c| async move { c.incr(k, value).await },
            Box::new(move |py, v| counter(py, v, noreply)),
        )
    }

    /// The new value (stops at 0), or None if the key is absent (or noreply).
    #[pyo3(signature = (key, value, noreply=false))]
    fn decr(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: u64,
        noreply: bool,
    ) -> PyResult<Py<PyAny>> {
        let k = to_key(&self.key_prefix, key)?;
        self.run(
            py,
            move |c| async move { c.decr(k, value).await },
            Box::new(move |py, v| counter(py, v, noreply)),
        )
    }

    /// A new exptime; True if the key exists.
    #[pyo3(signature = (key, expire=0, noreply=None))]
    fn touch(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        expire: i64,
        noreply: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let _ = noreply; // the reply is read: it tells whether the key exists
        let k = to_key(&self.key_prefix, key)?;
        let e = exptime(expire);
        self.run(
            py,
            move |c| async move { c.touch(k, e).await },
            Box::new(boolean),
        )
    }

    /// flush_all on every server; True.
    #[pyo3(signature = (delay=0, noreply=None))]
    fn flush_all(&self, py: Python<'_>, delay: u32, noreply: Option<bool>) -> PyResult<Py<PyAny>> {
        let _ = noreply;
        let delay = (delay > 0).then_some(delay);
        self.per_server(
            py,
            move |c| async move { c.flush_all(delay).await },
            |py, ()| boolean(py, true),
        )
    }

    /// `stats [args]`: {b"name": value} (values as int, float or bytes); with several servers,
    /// {"host:port": that dict}.
    #[pyo3(signature = (*args))]
    fn stats(&self, py: Python<'_>, args: Vec<String>) -> PyResult<Py<PyAny>> {
        let arg = (!args.is_empty()).then(|| args.join(" "));
        self.per_server(
            py,
            move |c| async move { c.stats(arg.as_deref()).await },
            |py, pairs| {
                let d = PyDict::new(py);
                for (k, v) in pairs {
                    d.set_item(PyBytes::new(py, k.as_bytes()), stat_value(py, &v)?)?;
                }
                Ok(d.into_any().unbind())
            },
        )
    }

    /// The server's version as bytes; with several servers, {"host:port": version}.
    fn version(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.per_server(
            py,
            move |c| async move { c.version().await },
            |py, v| Ok(PyBytes::new(py, v.as_bytes()).into_any().unbind()),
        )
    }

    /// Run mnemod's server-side filter `filter` with `args` over `keys`: one `fget` per server
    /// holding any of the keys, all at once, merged: by default the parts' bytes back to back;
    /// `top_k=k` keeps the k newest records (the `topk` filter); `merge` is called with the list
    /// of `mnemo.FilterPart` and its result returned.
    #[pyo3(signature = (filter, keys, args=b"".to_vec(), *, top_k=None, merge=None))]
    fn fget(
        &self,
        py: Python<'_>,
        filter: String,
        keys: &Bound<'_, PyAny>,
        args: Vec<u8>,
        top_k: Option<usize>,
        merge: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let (raw, _) = keys_of(&self.key_prefix, keys)?;
        self.run(
            py,
            move |c| async move { c.fget(&filter, &args, &raw.slices()).await },
            Box::new(move |py, parts: Vec<mnemo_client::FilterPart>| {
                if let Some(m) = merge {
                    let cls = filter_part_class(py)?;
                    let list = PyList::empty(py);
                    for p in parts {
                        list.append(cls.call1((
                            p.server.addr(),
                            p.flags,
                            PyBytes::new(py, &p.data),
                            p.keys,
                        ))?)?;
                    }
                    return m.call1(py, (list,));
                }
                let merged = match top_k {
                    Some(k) => filter::top_k(k)(parts),
                    None => filter::concat(parts),
                };
                Ok(PyBytes::new(py, &merged).into_any().unbind())
            }),
        )
    }
}
