//! The commands, on top of [`Client::exchange`]: single-key commands go to the key's server;
//! multi-key ones are grouped by server, pipelined (one write per server) and fanned out to all
//! servers at once.

use crate::client::{check, Client};
use crate::codec::{Entry, Reply, Request, RetrieveCmd, StoreCmd};
use crate::error::{Error, Result};
use crate::fanout::join_all;
use crate::serde::{Value, ValueRef};
use std::collections::HashMap;

/// Per-call options of the storage commands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetOptions {
    /// memcached's exptime: 0 never, up to 30 days relative seconds, else a unix time.
    pub exptime: u32,
    /// Ask the server for no reply (the outcome is then [`StoreOutcome::NoReply`]).
    pub noreply: bool,
    /// Compression for this call: `None` follows the client's setting, `Some(false)` stores
    /// plain, `Some(true)` compresses even when the client's switch is off (threshold, minimum
    /// saving and format detection still apply).
    pub compress: Option<bool>,
}

impl SetOptions {
    pub fn exptime(exptime: u32) -> Self {
        SetOptions {
            exptime,
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOutcome {
    Stored,
    /// add: key exists; replace/append/prepend: key missing.
    NotStored,
    /// cas: changed since it was read.
    Exists,
    /// cas: key missing.
    NotFound,
    /// Sent with noreply.
    NoReply,
}

/// A value as the server holds it: bytes still compressed, flags, cas (from gets/gats).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// A slice of the connection's read buffer (see [`crate::codec::Entry::data`]).
    pub data: bytes::Bytes,
    pub flags: u32,
    pub cas: Option<u64>,
}

impl From<Entry> for Item {
    fn from(e: Entry) -> Self {
        Item {
            data: e.data,
            flags: e.flags,
            cas: e.cas,
        }
    }
}

impl Client {
    // ---- retrieval --------------------------------------------------------------------------

    async fn retrieve_one(&self, cmd: RetrieveCmd, key: &[u8]) -> Result<Option<Item>> {
        let n = self.route_index(key)?;
        let keys = [key];
        let mut replies = self
            .exchange(n, &[Request::Retrieve { cmd, keys: &keys }])
            .await?;
        match self.ok(n, replies.remove(0))? {
            Reply::Values(v) => Ok(v.into_iter().find(|e| e.key == key).map(Item::from)),
            r => Err(self.unexpected(n, r)),
        }
    }

    /// Decode a stored item (decompress by its flags, then the serde).
    pub fn decode(&self, item: Item) -> Result<Value> {
        self.inner.values.decode(item.data.into(), item.flags)
    }

    /// Undo an item's compression by its flags: its bytes (the same slice when it was not
    /// compressed) and its flags without the compression bit, for callers that turn bytes into
    /// values themselves (the Python package, which checks UTF-8 once, while making the str).
    pub fn decompress(&self, item: Item) -> Result<(bytes::Bytes, u32)> {
        self.inner.values.decompress_shared(item.data, item.flags)
    }

    /// The stored bytes and flags, not decompressed or decoded.
    pub async fn get_raw(&self, key: impl AsRef<[u8]>) -> Result<Option<Item>> {
        self.retrieve_one(RetrieveCmd::Get, key.as_ref()).await
    }

    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        self.get_raw(key).await?.map(|i| self.decode(i)).transpose()
    }

    /// The value and its cas token.
    pub async fn gets(&self, key: impl AsRef<[u8]>) -> Result<Option<(Value, u64)>> {
        self.with_cas(self.retrieve_one(RetrieveCmd::Gets, key.as_ref()).await?)
    }

    /// Get and touch: read the value and set a new exptime.
    pub async fn gat(&self, key: impl AsRef<[u8]>, exptime: u32) -> Result<Option<Value>> {
        let item = self
            .retrieve_one(RetrieveCmd::Gat(exptime.into()), key.as_ref())
            .await?;
        item.map(|i| self.decode(i)).transpose()
    }

    pub async fn gats(&self, key: impl AsRef<[u8]>, exptime: u32) -> Result<Option<(Value, u64)>> {
        self.with_cas(
            self.retrieve_one(RetrieveCmd::Gats(exptime.into()), key.as_ref())
                .await?,
        )
    }

    fn with_cas(&self, item: Option<Item>) -> Result<Option<(Value, u64)>> {
        match item {
            None => Ok(None),
            Some(i) => {
                let cas = i.cas.unwrap_or(0);
                Ok(Some((self.decode(i)?, cas)))
            }
        }
    }

    /// Many keys: one pipelined request per server, all servers at once, merged. A server that
    /// fails contributes misses (its keys are absent) unless every server failed.
    pub async fn get_multi_raw<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
    ) -> Result<HashMap<Vec<u8>, Item>> {
        self.retrieve_multi(RetrieveCmd::Get, keys).await
    }

    pub async fn get_multi<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<HashMap<Vec<u8>, Value>> {
        self.get_multi_raw(keys)
            .await?
            .into_iter()
            .map(|(k, i)| Ok((k, self.decode(i)?)))
            .collect()
    }

    /// get_multi with cas tokens.
    pub async fn gets_multi<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
    ) -> Result<HashMap<Vec<u8>, (Value, u64)>> {
        let items = self.retrieve_multi(RetrieveCmd::Gets, keys).await?;
        items
            .into_iter()
            .map(|(k, i)| {
                let cas = i.cas.unwrap_or(0);
                Ok((k, (self.decode(i)?, cas)))
            })
            .collect()
    }

    async fn retrieve_multi<K: AsRef<[u8]>>(
        &self,
        cmd: RetrieveCmd,
        keys: &[K],
    ) -> Result<HashMap<Vec<u8>, Item>> {
        let found = self.retrieve_ordered(cmd, keys).await?;
        Ok(keys
            .iter()
            .zip(found)
            .filter_map(|(k, i)| Some((k.as_ref().to_vec(), i?)))
            .collect())
    }

    /// get_multi_raw as a list: one entry per key asked, in the order asked (`None`: a miss,
    /// or its server failed), without hashing or copying a key.
    pub async fn get_multi_ordered_raw<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
    ) -> Result<Vec<Option<Item>>> {
        self.retrieve_ordered(RetrieveCmd::Get, keys).await
    }

    /// gets_multi as a list, in the order asked.
    pub async fn gets_multi_ordered_raw<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
    ) -> Result<Vec<Option<Item>>> {
        self.retrieve_ordered(RetrieveCmd::Gets, keys).await
    }

    async fn retrieve_ordered<K: AsRef<[u8]>>(
        &self,
        cmd: RetrieveCmd,
        keys: &[K],
    ) -> Result<Vec<Option<Item>>> {
        let groups = self.group_indices(keys)?;
        let results = join_all(groups.iter().map(|(n, idx)| async move {
            let ks: Vec<&[u8]> = idx.iter().map(|&i| keys[i].as_ref()).collect();
            let replies = self
                .exchange(*n, &[Request::Retrieve { cmd, keys: &ks }])
                .await?;
            let mut out = Vec::new();
            for r in replies {
                match self.ok(*n, r)? {
                    Reply::Values(v) => out.extend(v),
                    r => return Err(self.unexpected(*n, r)),
                }
            }
            Ok::<_, Error>(out)
        }))
        .await;
        let mut found: Vec<Option<Item>> = (0..keys.len()).map(|_| None).collect();
        let mut first_err = None;
        let mut any_ok = groups.is_empty();
        for ((_, idx), r) in groups.iter().zip(results) {
            match r {
                Ok(entries) => {
                    any_ok = true;
                    place(&mut found, keys, idx, entries);
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match (any_ok, first_err) {
            (false, Some(e)) => Err(e),
            _ => Ok(found),
        }
    }

    // ---- storage ----------------------------------------------------------------------------

    /// Any storage command with options; the value goes through the serde and compression
    /// (append/prepend: raw bytes, never compressed, or the stored value would be corrupt).
    pub async fn store<'v>(
        &self,
        cmd: StoreCmd,
        key: impl AsRef<[u8]>,
        value: impl Into<ValueRef<'v>>,
        cas: u64,
        opts: &SetOptions,
    ) -> Result<StoreOutcome> {
        let key = key.as_ref();
        let n = self.route_index(key)?;
        let value = value.into();
        let (data, flags) = match (cmd, value) {
            (StoreCmd::Append | StoreCmd::Prepend, ValueRef::Bytes(b)) => {
                (std::borrow::Cow::Borrowed(b), 0)
            }
            (StoreCmd::Append | StoreCmd::Prepend, ValueRef::Text(s)) => {
                (std::borrow::Cow::Borrowed(s.as_bytes()), 0)
            }
            (StoreCmd::Append | StoreCmd::Prepend, v) => self.inner.values.encode_type(v)?,
            _ => self.inner.values.encode(value, opts.compress)?,
        };
        let req = Request::Store {
            cmd,
            key,
            flags,
            exptime: opts.exptime.into(),
            value: &data,
            cas,
            noreply: opts.noreply,
        };
        let mut replies = self.exchange(n, &[req]).await?;
        if opts.noreply {
            return Ok(StoreOutcome::NoReply);
        }
        self.store_outcome(n, replies.remove(0))
    }

    fn store_outcome(&self, n: usize, reply: Reply) -> Result<StoreOutcome> {
        match self.ok(n, reply)? {
            Reply::Stored => Ok(StoreOutcome::Stored),
            Reply::NotStored => Ok(StoreOutcome::NotStored),
            Reply::Exists => Ok(StoreOutcome::Exists),
            Reply::NotFound => Ok(StoreOutcome::NotFound),
            r => Err(self.unexpected(n, r)),
        }
    }

    /// Store unconditionally.
    pub async fn set<'v>(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<ValueRef<'v>>,
        exptime: u32,
    ) -> Result<()> {
        self.set_with(key, value, &SetOptions::exptime(exptime))
            .await
    }

    pub async fn set_with<'v>(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<ValueRef<'v>>,
        opts: &SetOptions,
    ) -> Result<()> {
        let key = key.as_ref();
        match self.store(StoreCmd::Set, key, value, 0, opts).await? {
            StoreOutcome::Stored | StoreOutcome::NoReply => Ok(()),
            other => Err(Error::Server {
                server: self.route(key)?.addr(),
                line: format!("{other:?}"),
            }),
        }
    }

    /// A conditional storage command: whether the server stored it.
    async fn stored<'v>(
        &self,
        cmd: StoreCmd,
        key: impl AsRef<[u8]>,
        value: impl Into<ValueRef<'v>>,
        opts: &SetOptions,
    ) -> Result<bool> {
        Ok(self.store(cmd, key, value, 0, opts).await? == StoreOutcome::Stored)
    }

    /// Store only if the key is absent; false if it exists.
    pub async fn add<'v>(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<ValueRef<'v>>,
        exptime: u32,
    ) -> Result<bool> {
        self.stored(StoreCmd::Add, key, value, &SetOptions::exptime(exptime))
            .await
    }

    /// Store only if the key exists; false if it is absent.
    pub async fn replace<'v>(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<ValueRef<'v>>,
        exptime: u32,
    ) -> Result<bool> {
        self.stored(StoreCmd::Replace, key, value, &SetOptions::exptime(exptime))
            .await
    }

    /// Append raw bytes to an existing value; false if the key is absent.
    pub async fn append(&self, key: impl AsRef<[u8]>, data: &[u8]) -> Result<bool> {
        self.stored(StoreCmd::Append, key, data, &SetOptions::default())
            .await
    }

    /// Prepend raw bytes to an existing value; false if the key is absent.
    pub async fn prepend(&self, key: impl AsRef<[u8]>, data: &[u8]) -> Result<bool> {
        self.stored(StoreCmd::Prepend, key, data, &SetOptions::default())
            .await
    }

    /// Store if the value's cas token is still `cas` (from gets/gats).
    pub async fn cas<'v>(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<ValueRef<'v>>,
        cas: u64,
        exptime: u32,
    ) -> Result<StoreOutcome> {
        self.store(
            StoreCmd::Cas,
            key,
            value,
            cas,
            &SetOptions::exptime(exptime),
        )
        .await
    }

    /// Many sets: one pipelined write per server, all servers at once. Outcomes in input order.
    pub async fn set_multi<'v, K: AsRef<[u8]>, V: Into<ValueRef<'v>> + Copy>(
        &self,
        items: &[(K, V)],
        opts: &SetOptions,
    ) -> Result<Vec<StoreOutcome>> {
        let mut encoded = Vec::with_capacity(items.len());
        for (i, (k, v)) in items.iter().enumerate() {
            let key = k.as_ref();
            check(key)?;
            let (data, flags) = self.inner.values.encode((*v).into(), opts.compress)?;
            encoded.push((i, key, data, flags));
        }
        let groups = self.group(encoded.iter(), |e| e.1)?;
        let results = join_all(groups.iter().map(|(n, group)| async move {
            let reqs: Vec<Request<'_>> = group
                .iter()
                .map(|(_, key, data, flags)| Request::Store {
                    cmd: StoreCmd::Set,
                    key,
                    flags: *flags,
                    exptime: opts.exptime.into(),
                    value: data,
                    cas: 0,
                    noreply: opts.noreply,
                })
                .collect();
            let replies = self.exchange(*n, &reqs).await?;
            if opts.noreply {
                return Ok(vec![StoreOutcome::NoReply; group.len()]);
            }
            replies
                .into_iter()
                .map(|r| self.store_outcome(*n, r))
                .collect::<Result<Vec<_>>>()
        }))
        .await;
        let mut out = vec![StoreOutcome::NotStored; items.len()];
        for ((_, group), r) in groups.iter().zip(results) {
            for ((i, ..), o) in group.iter().zip(r?) {
                out[*i] = o;
            }
        }
        Ok(out)
    }

    // ---- the rest ---------------------------------------------------------------------------

    /// Delete; false if the key was absent.
    pub async fn delete(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        self.delete_with(key, false).await
    }

    /// Delete, with noreply if asked (then always `true`).
    pub async fn delete_with(&self, key: impl AsRef<[u8]>, noreply: bool) -> Result<bool> {
        let key = key.as_ref();
        let n = self.route_index(key)?;
        let mut r = self
            .exchange(n, &[Request::Delete { key, noreply }])
            .await?;
        if noreply {
            return Ok(true);
        }
        match self.ok(n, r.remove(0))? {
            Reply::Deleted => Ok(true),
            Reply::NotFound => Ok(false),
            r => Err(self.unexpected(n, r)),
        }
    }

    /// Delete many keys, pipelined per server; true where the key existed, in input order.
    pub async fn delete_multi<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let groups = self.group(keys.iter().map(|k| k.as_ref()).enumerate(), |(_, k)| k)?;
        let results = join_all(groups.iter().map(|(n, group)| async move {
            let reqs: Vec<_> = group
                .iter()
                .map(|(_, key)| Request::Delete {
                    key,
                    noreply: false,
                })
                .collect();
            let replies = self.exchange(*n, &reqs).await?;
            replies
                .into_iter()
                .map(|r| match self.ok(*n, r)? {
                    Reply::Deleted => Ok(true),
                    Reply::NotFound => Ok(false),
                    r => Err(self.unexpected(*n, r)),
                })
                .collect::<Result<Vec<_>>>()
        }))
        .await;
        let mut out = vec![false; keys.len()];
        for ((_, group), r) in groups.iter().zip(results) {
            for ((i, _), d) in group.iter().zip(r?) {
                out[*i] = d;
            }
        }
        Ok(out)
    }

    async fn arith(&self, key: &[u8], delta: u64, incr: bool) -> Result<Option<u64>> {
        let n = self.route_index(key)?;
        let req = if incr {
            Request::Incr {
                key,
                delta,
                noreply: false,
            }
        } else {
            Request::Decr {
                key,
                delta,
                noreply: false,
            }
        };
        let mut r = self.exchange(n, &[req]).await?;
        match self.ok(n, r.remove(0))? {
            Reply::Number(v) => Ok(Some(v)),
            Reply::NotFound => Ok(None),
            r => Err(self.unexpected(n, r)),
        }
    }

    /// Add to a decimal value (wrapping at 2^64); `None` if the key is absent.
    pub async fn incr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<Option<u64>> {
        self.arith(key.as_ref(), delta, true).await
    }

    /// Subtract, stopping at 0; `None` if the key is absent.
    pub async fn decr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<Option<u64>> {
        self.arith(key.as_ref(), delta, false).await
    }

    /// Set a new exptime; false if the key is absent.
    pub async fn touch(&self, key: impl AsRef<[u8]>, exptime: u32) -> Result<bool> {
        let key = key.as_ref();
        let n = self.route_index(key)?;
        let mut r = self
            .exchange(
                n,
                &[Request::Touch {
                    key,
                    exptime: exptime.into(),
                    noreply: false,
                }],
            )
            .await?;
        match self.ok(n, r.remove(0))? {
            Reply::Touched => Ok(true),
            Reply::NotFound => Ok(false),
            r => Err(self.unexpected(n, r)),
        }
    }
}

/// Put one server's values where their keys were asked. memcached answers a multi-key get with
/// its hits in the order requested, so one forward walk over the server's keys (`idx`, indices
/// into `keys`) matches them; a server (or proxy) that answers out of order is matched through
/// a map built on its first surprise. A value for a key nobody asked is dropped.
fn place<K: AsRef<[u8]>>(
    found: &mut [Option<Item>],
    keys: &[K],
    idx: &[usize],
    entries: Vec<Entry>,
) {
    let mut j = 0;
    let mut by_key: Option<HashMap<&[u8], usize>> = None;
    for e in entries {
        while j < idx.len() && keys[idx[j]].as_ref() != e.key.as_slice() {
            j += 1;
        }
        if j < idx.len() && by_key.is_none() {
            found[idx[j]] = Some(Item::from(e));
            j += 1;
            continue;
        }
        let map =
            by_key.get_or_insert_with(|| idx.iter().map(|&i| (keys[i].as_ref(), i)).collect());
        if let Some(&i) = map.get(e.key.as_slice()) {
            found[i] = Some(Item::from(e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, data: &str) -> Entry {
        Entry {
            key: key.into(),
            flags: 0,
            cas: None,
            data: bytes::Bytes::copy_from_slice(data.as_bytes()),
        }
    }

    fn data(found: &[Option<Item>]) -> Vec<Option<&str>> {
        found
            .iter()
            .map(|i| i.as_ref().map(|i| std::str::from_utf8(&i.data).unwrap()))
            .collect()
    }

    #[test]
    fn values_in_request_order_land_on_their_keys() {
        let keys = ["a", "b", "c", "d", "e"];
        let mut found = vec![None; 5];
        // This server was asked b, c and e; c missed.
        place(
            &mut found,
            &keys,
            &[1, 2, 4],
            vec![entry("b", "1"), entry("e", "2")],
        );
        assert_eq!(data(&found), [None, Some("1"), None, None, Some("2")]);
    }

    #[test]
    fn out_of_order_and_unasked_values() {
        let keys = ["a", "b", "c"];
        let mut found = vec![None; 3];
        let got = vec![
            entry("c", "3"),
            entry("x", "?"),
            entry("a", "1"),
            entry("b", "2"),
        ];
        place(&mut found, &keys, &[0, 1, 2], got);
        assert_eq!(data(&found), [Some("1"), Some("2"), Some("3")]);
    }

    #[test]
    fn a_key_asked_twice_is_answered_twice() {
        let keys = ["a", "a", "b"];
        let mut found = vec![None; 3];
        place(
            &mut found,
            &keys,
            &[0, 1, 2],
            vec![entry("a", "1"), entry("a", "1"), entry("b", "2")],
        );
        assert_eq!(data(&found), [Some("1"), Some("1"), Some("2")]);
    }
}
