//! The blocking facade: the async [`crate::Client`] driven by a runtime of its own, for programs
//! without one (the `mnemo` CLI, scripts, tests). Each call blocks the calling thread until the
//! reply is in; the fan-out over servers still runs concurrently inside the call.
//!
//! Do not call it from inside a tokio runtime (tokio refuses to block there): use the async
//! client directly.

use crate::admin::{KeyInfo, PerServer};
use crate::codec::StoreCmd;
use crate::error::Result;
use crate::filter::FilterPart;
use crate::ketama::ServerSpec;
use crate::ops::{Item, SetOptions, StoreOutcome};
use crate::serde::{Value, ValueRef};
use crate::Config;
use std::collections::HashMap;
use std::future::Future;

pub struct Client {
    rt: tokio::runtime::Runtime,
    inner: crate::Client,
}

/// Forward `name(args) -> T` to the async client's method of the same name.
macro_rules! forward {
    ($( $(#[$doc:meta])* fn $name:ident $(<$lt:lifetime>)? ( $($arg:ident : $ty:ty),* ) -> $ret:ty; )*) => {
        $(
            $(#[$doc])*
            pub fn $name $(<$lt>)? (&self, $($arg: $ty),*) -> $ret {
                self.rt.block_on(self.inner.$name($($arg),*))
            }
        )*
    };
}

impl Client {
    /// A client whose sockets block in the kernel ([`Config::blocking_io`] is set).
    pub fn new(servers: Vec<ServerSpec>, cfg: Config) -> Result<Client> {
        Client::wrap(crate::Client::new(
            servers,
            Config {
                blocking_io: true,
                ..cfg
            },
        )?)
    }

    /// `host:port[:weight],...`
    pub fn from_list(list: &str, cfg: Config) -> Result<Client> {
        Client::wrap(crate::Client::from_list(
            list,
            Config {
                blocking_io: true,
                ..cfg
            },
        )?)
    }

    /// Drive an existing async client (it shares its pools with the one given).
    pub fn wrap(inner: crate::Client) -> Result<Client> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| crate::Error::Config(format!("cannot start a runtime: {e}")))?;
        Ok(Client { rt, inner })
    }

    /// The async client underneath (for what has no blocking method, with [`Client::block_on`]).
    pub fn async_client(&self) -> &crate::Client {
        &self.inner
    }

    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    pub fn route(&self, key: impl AsRef<[u8]>) -> Result<&ServerSpec> {
        self.inner.route(key)
    }

    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        self.rt.block_on(self.inner.get(key))
    }

    pub fn get_raw(&self, key: impl AsRef<[u8]>) -> Result<Option<Item>> {
        self.rt.block_on(self.inner.get_raw(key))
    }

    pub fn gets(&self, key: impl AsRef<[u8]>) -> Result<Option<(Value, u64)>> {
        self.rt.block_on(self.inner.gets(key))
    }

    pub fn get_multi<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<HashMap<Vec<u8>, Value>> {
        self.rt.block_on(self.inner.get_multi(keys))
    }

    pub fn set<'v>(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<ValueRef<'v>>,
        exptime: u32,
    ) -> Result<()> {
        self.rt.block_on(self.inner.set(key, value, exptime))
    }

    pub fn set_with<'v>(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<ValueRef<'v>>,
        opts: &SetOptions,
    ) -> Result<()> {
        self.rt.block_on(self.inner.set_with(key, value, opts))
    }

    pub fn store<'v>(
        &self,
        cmd: StoreCmd,
        key: impl AsRef<[u8]>,
        value: impl Into<ValueRef<'v>>,
        cas: u64,
        opts: &SetOptions,
    ) -> Result<StoreOutcome> {
        self.rt
            .block_on(self.inner.store(cmd, key, value, cas, opts))
    }

    pub fn set_multi<'v, K: AsRef<[u8]>, V: Into<ValueRef<'v>> + Copy>(
        &self,
        items: &[(K, V)],
        opts: &SetOptions,
    ) -> Result<Vec<StoreOutcome>> {
        self.rt.block_on(self.inner.set_multi(items, opts))
    }

    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        self.rt.block_on(self.inner.delete(key))
    }

    pub fn touch(&self, key: impl AsRef<[u8]>, exptime: u32) -> Result<bool> {
        self.rt.block_on(self.inner.touch(key, exptime))
    }

    pub fn incr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<Option<u64>> {
        self.rt.block_on(self.inner.incr(key, delta))
    }

    pub fn decr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<Option<u64>> {
        self.rt.block_on(self.inner.decr(key, delta))
    }

    /// See [`crate::Client::fget`]: one failing server fails the call.
    pub fn fget<K: AsRef<[u8]>>(
        &self,
        filter: &str,
        args: &[u8],
        keys: &[K],
    ) -> Result<Vec<FilterPart>> {
        self.rt.block_on(self.inner.fget(filter, args, keys))
    }

    /// See [`crate::Client::fget_merge`]; merges are in [`crate::filter`].
    pub fn fget_merge<K: AsRef<[u8]>, T>(
        &self,
        filter: &str,
        args: &[u8],
        keys: &[K],
        merge: impl FnOnce(Vec<FilterPart>) -> T,
    ) -> Result<T> {
        self.rt
            .block_on(self.inner.fget_merge(filter, args, keys, merge))
    }

    forward! {
        /// `stats [arg]` on every server.
        fn stats<'a>(arg: Option<&'a str>) -> PerServer<Vec<(String, String)>>;
        /// `flush_all [delay]` on every server.
        fn flush_all(delay: Option<u32>) -> PerServer<()>;
        fn version() -> PerServer<String>;
        /// Key dump of every server.
        fn keys() -> PerServer<Vec<KeyInfo>>;
    }
}
