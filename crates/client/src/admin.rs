//! Commands addressed to every server rather than to a key's owner: stats, flush_all, version,
//! verbosity, and the key dump behind `mnemo keys`. Each runs on all servers at once; the result
//! is one entry per server, in the order the servers were given, so one server down does not hide
//! the others' answers.

use crate::client::Client;
use crate::codec::{Reply, Request};
use crate::error::{Error, Result};
use crate::fanout::join_all;
use crate::ketama::ServerSpec;
use std::time::Duration;

/// One server's answer to a command sent to all of them.
pub type PerServer<T> = Vec<(ServerSpec, Result<T>)>;

/// One item from a key dump (`lru_crawler metadump all`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    /// The key, URL-decoded as the dump encodes it.
    pub key: Vec<u8>,
    /// Unix time the item expires, `None` for never.
    pub exp: Option<i64>,
    /// The item's size as the server reports it.
    pub size: Option<u64>,
}

impl Client {
    /// `req` on every server at once, each reply through `each`, with this exchange timeout.
    async fn on_every_server<T>(
        &self,
        req: Request<'_>,
        timeout: Duration,
        each: impl Fn(usize, Reply) -> Result<T>,
    ) -> PerServer<T> {
        let n = self.inner.nodes.len();
        let results = join_all((0..n).map(|i| {
            let each = &each;
            async move {
                let mut replies = self.exchange_timeout(i, &[req], timeout).await?;
                let reply = self.ok(i, replies.remove(0))?;
                each(i, reply)
            }
        }))
        .await;
        self.inner
            .nodes
            .iter()
            .map(|node| node.spec.clone())
            .zip(results)
            .collect()
    }

    /// `stats` or `stats <arg>` (settings, items, slabs, ...) on every server: name, value pairs
    /// in the server's order.
    pub async fn stats(&self, arg: Option<&str>) -> PerServer<Vec<(String, String)>> {
        self.on_every_server(
            Request::Stats { arg },
            self.inner.cfg.io_timeout,
            |i, r| match r {
                Reply::Stats(s) => Ok(s),
                r => Err(self.unexpected(i, r)),
            },
        )
        .await
    }

    /// `flush_all [delay]` on every server.
    pub async fn flush_all(&self, delay: Option<u32>) -> PerServer<()> {
        self.on_every_server(
            Request::FlushAll {
                delay,
                noreply: false,
            },
            self.inner.cfg.io_timeout,
            |i, r| match r {
                Reply::Ok => Ok(()),
                r => Err(self.unexpected(i, r)),
            },
        )
        .await
    }

    /// Every server's version string.
    pub async fn version(&self) -> PerServer<String> {
        self.on_every_server(
            Request::Version,
            self.inner.cfg.io_timeout,
            |i, r| match r {
                Reply::Version(v) => Ok(v),
                r => Err(self.unexpected(i, r)),
            },
        )
        .await
    }

    /// The keys each server holds, from `lru_crawler metadump all` (memcached 1.4.31 and later,
    /// mnemod). A server without it answers with an error line, returned as that server's error.
    pub async fn keys(&self) -> PerServer<Vec<KeyInfo>> {
        // A dump of a large cache takes a while: allow more than one ordinary exchange.
        let timeout = self.inner.cfg.io_timeout.max(Duration::from_secs(60));
        self.on_every_server(Request::MetadumpAll, timeout, |i, r| match r {
            Reply::Lines(lines) => lines.iter().map(|l| parse_dump_line(l)).collect(),
            r => Err(self.unexpected(i, r)),
        })
        .await
    }
}

/// `key=<url-encoded> exp=<unix or -1> la=... cas=... fetch=... cls=... size=...`
fn parse_dump_line(line: &str) -> Result<KeyInfo> {
    let bad = || Error::Server {
        server: String::new(),
        line: format!("unreadable metadump line {line:?}"),
    };
    let mut info = KeyInfo {
        key: Vec::new(),
        exp: None,
        size: None,
    };
    let mut have_key = false;
    for field in line.split(' ') {
        let Some((name, value)) = field.split_once('=') else {
            continue;
        };
        match name {
            "key" => {
                info.key = url_decode(value).ok_or_else(bad)?;
                have_key = true;
            }
            "exp" => info.exp = value.parse::<i64>().ok().filter(|&e| e >= 0),
            "size" => info.size = value.parse().ok(),
            _ => {}
        }
    }
    if have_key {
        Ok(info)
    } else {
        Err(bad())
    }
}

/// `%XX` escapes as memcached writes them in a metadump.
fn url_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_memcached_metadump_lines() {
        let k = parse_dump_line("key=a%20b%2Fc exp=-1 la=1700000000 cas=7 fetch=no cls=1 size=63")
            .unwrap();
        assert_eq!(
            k,
            KeyInfo {
                key: b"a b/c".to_vec(),
                exp: None,
                size: Some(63)
            }
        );
        let k = parse_dump_line("key=x exp=1800000000 la=1 cas=1 fetch=yes cls=2 size=70").unwrap();
        assert_eq!(k.exp, Some(1_800_000_000));
        // memcached 1.6.40's line (and mnemod's): flags=, and a space after the last field.
        let k = parse_dump_line("key=y exp=-1 la=1 cas=2 fetch=no cls=1 size=65 flags=5 ").unwrap();
        assert_eq!((k.key, k.exp, k.size), (b"y".to_vec(), None, Some(65)));
        assert!(parse_dump_line("exp=-1 size=3").is_err());
        assert!(parse_dump_line("key=%zz exp=-1").is_err());
    }
}
