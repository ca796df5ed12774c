//! The async client: configuration, routing, the per-server exchange (pool, timeouts, retry of a
//! stale pooled connection, ejection) and the concurrent fan-out over servers.

use crate::codec::{check_key, retrieve_lines, Encoder, Reply, Request};
use crate::compress::Compression;
use crate::conn::{Conn, ConnError};
use crate::error::{Error, Result};
use crate::ketama::{hashed_part, md5x4, Ketama, ServerSpec};
use crate::node::Node;
use crate::profile::FlagProfile;
use crate::serde::{FlagSerde, Serde};
use crate::values::ValueCodec;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Everything configurable, with named defaults.
#[derive(Debug, Clone)]
pub struct Config {
    /// Longest wait for a TCP connection.
    pub connect_timeout: Duration,
    /// Longest wait for one exchange (a request or pipelined batch written and all its replies
    /// read).
    pub io_timeout: Duration,
    /// Idle connections kept per server.
    pub pool_size: usize,
    /// Connections in use at once per server; further requests wait for one.
    pub max_connections: usize,
    /// Consecutive failures (I/O error, timeout, garbled reply) that eject a server; `None`
    /// never ejects.
    pub failure_limit: Option<u32>,
    /// How long an ejected server is skipped before the next request tries it again.
    pub retry_interval: Duration,
    /// Hash only the `{...}` part of keys that have one (see [`crate::ketama::hashed_part`]).
    pub hash_tags: bool,
    /// The flag convention values are written with, and read with first.
    pub profile: FlagProfile,
    /// Further profiles values are read with, where `profile` does not know a value's flags
    /// (only profiles whose flags do not collide: [`FlagProfile::combines_with`]).
    pub also_read: Vec<FlagProfile>,
    pub compression: Compression,
    /// Largest value a decompression may produce (a guard against compression bombs).
    pub max_inflated: usize,
    /// Drive sockets with blocking system calls instead of the tokio reactor: for callers that
    /// own their thread and drive the client with `block_on` ([`crate::blocking::Client`],
    /// Python's sync client). One system call less per request; `io_timeout` then bounds each
    /// read and write (the socket's timeouts), not the whole exchange. Must stay off for a client
    /// used from async tasks: it would block the runtime's thread.
    pub blocking_io: bool,
    /// With `blocking_io`: how long a read polls the socket for its reply before sleeping in
    /// the kernel (`Duration::ZERO`: never). A reply that arrives within it saves the wakeup of a
    /// sleeping thread, which on a VM whose other CPU is idle costs tens of microseconds; a
    /// connection whose replies keep coming later (a distant server) stops spinning (conn/blocking.rs).
    pub reply_spin: Duration,
}

impl Config {
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
    pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(5);
    pub const DEFAULT_POOL_SIZE: usize = 4;
    pub const DEFAULT_MAX_CONNECTIONS: usize = 16;
    pub const DEFAULT_FAILURE_LIMIT: u32 = 2;
    pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_secs(2);
    pub const DEFAULT_MAX_INFLATED: usize = 256 << 20;
    pub const DEFAULT_REPLY_SPIN: Duration = Duration::from_micros(50);

    /// Values the Python clients (python-memcached, pymemcache, pylibmc) read and write:
    /// their flags, zlib compression.
    pub fn python() -> Self {
        Self::for_profile(FlagProfile::Python)
    }

    /// Values a family's clients read and write: its flags, and its compression defaults
    /// ([`FlagProfile::default_compression`]).
    pub fn for_profile(profile: FlagProfile) -> Self {
        Config {
            profile,
            compression: profile.default_compression(),
            ..Config::default()
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            io_timeout: Self::DEFAULT_IO_TIMEOUT,
            pool_size: Self::DEFAULT_POOL_SIZE,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            failure_limit: Some(Self::DEFAULT_FAILURE_LIMIT),
            retry_interval: Self::DEFAULT_RETRY_INTERVAL,
            hash_tags: false,
            profile: FlagProfile::Mnemo,
            also_read: Vec::new(),
            compression: Compression::default(),
            max_inflated: Self::DEFAULT_MAX_INFLATED,
            blocking_io: false,
            reply_spin: Self::DEFAULT_REPLY_SPIN,
        }
    }
}

pub(crate) struct Inner {
    pub nodes: Vec<Node>,
    pub ring: Ketama,
    pub cfg: Config,
    pub values: ValueCodec,
}

/// A client for one or many servers. Cheap to clone (shared pools); connections are made on
/// first use.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl Client {
    /// A client with the built-in serde ([`FlagSerde`]).
    pub fn new(servers: Vec<ServerSpec>, cfg: Config) -> Result<Client> {
        Client::with_serde(servers, cfg, Box::new(FlagSerde))
    }

    /// `host:port[:weight],...`
    pub fn from_list(list: &str, cfg: Config) -> Result<Client> {
        let servers = ServerSpec::parse_list(list).map_err(|e| Error::Config(e.to_string()))?;
        Client::new(servers, cfg)
    }

    pub fn with_serde(
        servers: Vec<ServerSpec>,
        cfg: Config,
        serde: Box<dyn Serde>,
    ) -> Result<Client> {
        if servers.is_empty() {
            return Err(Error::Config("no servers".into()));
        }
        let values = ValueCodec {
            serde,
            compression: cfg.compression,
            readers: std::iter::once(cfg.profile)
                .chain(cfg.also_read.iter().copied())
                .collect(),
            max_inflated: cfg.max_inflated,
        };
        values.check()?;
        let ring = Ketama::new(&servers);
        let nodes = servers.into_iter().map(|s| Node::new(s, &cfg)).collect();
        Ok(Client {
            inner: Arc::new(Inner {
                nodes,
                ring,
                cfg,
                values,
            }),
        })
    }

    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }

    /// The servers, in the order given (indices used by [`Client::route_index`] and friends).
    pub fn servers(&self) -> Vec<ServerSpec> {
        self.inner.nodes.iter().map(|n| n.spec.clone()).collect()
    }

    /// The continuum (points per server, routing without ejection).
    pub fn ring(&self) -> &Ketama {
        &self.inner.ring
    }

    /// Whether a server is currently ejected.
    pub fn is_ejected(&self, server: usize) -> bool {
        self.inner.nodes[server].is_ejected()
    }

    /// Index of the server that owns `key` now: its ketama point's server, or the next live one
    /// if that server is ejected.
    pub fn route_index(&self, key: impl AsRef<[u8]>) -> Result<usize> {
        let key = key.as_ref();
        check(key)?;
        let now = Instant::now();
        let nodes = &self.inner.nodes;
        self.inner
            .ring
            .route_live(key, self.inner.cfg.hash_tags, |i| nodes[i].is_live(now))
            .ok_or(Error::NoServers)
    }

    /// The server that owns `key` now (what `mnemo route` prints).
    pub fn route(&self, key: impl AsRef<[u8]>) -> Result<&ServerSpec> {
        Ok(&self.inner.nodes[self.route_index(key)?].spec)
    }

    /// Send requests to one server in one write and read their replies. A pooled connection
    /// the server has closed meanwhile is retried once on a new connection (not for incr/decr,
    /// which must not be applied twice).
    pub(crate) async fn exchange(&self, node: usize, reqs: &[Request<'_>]) -> Result<Vec<Reply>> {
        self.exchange_timeout(node, reqs, self.inner.cfg.io_timeout)
            .await
    }

    pub(crate) async fn exchange_timeout(
        &self,
        node: usize,
        reqs: &[Request<'_>],
        timeout: Duration,
    ) -> Result<Vec<Reply>> {
        let cfg = &self.inner.cfg;
        let n = &self.inner.nodes[node];
        let mut enc = Encoder::new();
        let mut expects = Vec::with_capacity(reqs.len());
        for r in reqs {
            enc.push(r);
            match (r, r.expect()) {
                (Request::Retrieve { keys, .. }, Some(e)) => {
                    expects.extend(std::iter::repeat_n(e, retrieve_lines(keys)))
                }
                (_, Some(e)) => expects.push(e),
                (_, None) => {}
            }
        }
        let retry_safe = !reqs
            .iter()
            .any(|r| matches!(r, Request::Incr { .. } | Request::Decr { .. }));
        let io_err = |e: io::Error| Error::Io {
            server: n.addr.clone(),
            source: e,
        };
        let _permit = n.permit().await;
        let mut fresh_only = false;
        loop {
            let pooled = if fresh_only { None } else { n.take_idle() };
            let reused = pooled.is_some();
            let mut conn = match pooled {
                Some(c) => c,
                None => match Conn::connect(
                    &n.addr,
                    cfg.connect_timeout,
                    cfg.blocking_io.then_some((timeout, cfg.reply_spin)),
                )
                .await
                {
                    Ok(c) => c,
                    Err(e) => {
                        n.record_failure(cfg);
                        return Err(io_err(e));
                    }
                },
            };
            let outcome = if conn.is_blocking() {
                Ok(conn.exchange(&enc, &expects, timeout).await)
            } else {
                tokio::time::timeout(timeout, conn.exchange(&enc, &expects, timeout)).await
            };
            match outcome {
                Ok(Ok(replies)) => {
                    n.record_success();
                    if !conn.has_leftover() {
                        n.put_idle(conn, cfg);
                    }
                    return Ok(replies);
                }
                Ok(Err(ConnError::Io(e)))
                    if reused && retry_safe && !fresh_only && is_stale(&e) =>
                {
                    fresh_only = true;
                    continue;
                }
                Ok(Err(ConnError::Io(e))) => {
                    n.record_failure(cfg);
                    return Err(io_err(e));
                }
                Ok(Err(ConnError::Codec(e))) => {
                    n.record_failure(cfg);
                    return Err(Error::Protocol {
                        server: n.addr.clone(),
                        source: e,
                    });
                }
                Err(_) | Ok(Err(ConnError::Timeout)) => {
                    n.record_failure(cfg);
                    return Err(Error::Timeout {
                        server: n.addr.clone(),
                        after: timeout,
                    });
                }
            }
        }
    }

    /// The server's error line as an error; any other reply as it is.
    pub(crate) fn ok(&self, node: usize, reply: Reply) -> Result<Reply> {
        match reply {
            Reply::Error(line) => Err(Error::Server {
                server: self.inner.nodes[node].addr.clone(),
                line,
            }),
            r => Ok(r),
        }
    }

    /// Unexpected-but-well-formed reply (e.g. NOT_STORED to a set).
    pub(crate) fn unexpected(&self, node: usize, reply: Reply) -> Error {
        Error::Server {
            server: self.inner.nodes[node].addr.clone(),
            line: format!("{reply:?}"),
        }
    }

    /// Which servers take keys now, read once per multi-key call (each check is a clock read
    /// and a lock).
    fn live_now(&self) -> Vec<bool> {
        let now = Instant::now();
        self.inner.nodes.iter().map(|n| n.is_live(now)).collect()
    }

    /// Group the positions of `keys` by the server that owns each key; keys are checked first.
    /// The keys are hashed four at a time ([`crate::ketama::md5x4`]).
    pub(crate) fn group_indices<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
    ) -> Result<Vec<(usize, Vec<usize>)>> {
        let ring = &self.inner.ring;
        let live = self.live_now();
        let mut hashes = Vec::new();
        if ring.hashes_keys() {
            let tags = self.inner.cfg.hash_tags;
            md5x4::key_hashes(
                keys.iter().map(|k| hashed_part(k.as_ref(), tags)),
                &mut hashes,
            );
        }
        let mut groups: Vec<Vec<usize>> = (0..self.inner.nodes.len()).map(|_| Vec::new()).collect();
        for (i, k) in keys.iter().enumerate() {
            check(k.as_ref())?;
            let hash = hashes.get(i).copied().unwrap_or(0);
            let n = ring
                .route_hash_live(hash, |s| live[s])
                .ok_or(Error::NoServers)?;
            groups[n].push(i);
        }
        Ok(groups
            .into_iter()
            .enumerate()
            .filter(|(_, g)| !g.is_empty())
            .collect())
    }

    /// Group items by the server that owns each key; keys are checked first.
    pub(crate) fn group<T>(
        &self,
        items: impl IntoIterator<Item = T>,
        key: impl Fn(&T) -> &[u8],
    ) -> Result<Vec<(usize, Vec<T>)>> {
        let mut items: Vec<Option<T>> = items.into_iter().map(Some).collect();
        let keys: Vec<&[u8]> = items.iter().flatten().map(&key).collect();
        let by_index = self.group_indices(&keys)?;
        drop(keys);
        Ok(by_index
            .into_iter()
            .map(|(n, idx)| {
                let group = idx.into_iter().filter_map(|i| items[i].take()).collect();
                (n, group)
            })
            .collect())
    }
}

pub(crate) fn check(key: &[u8]) -> Result<()> {
    if check_key(key) {
        Ok(())
    } else {
        Err(Error::BadKey(String::from_utf8_lossy(key).into_owned()))
    }
}

fn is_stale(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted
    )
}
