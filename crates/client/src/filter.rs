//! Server-side filtering (`fget`, mnemod only): the client's half. It owns splitting one
//! filter call over the servers that hold its keys and merging their partial results; running
//! the filter is the server's job.
//!
//! ```text
//!   Client::fget(filter, args, keys)
//!     ├─ keys -> servers, exactly as get_multi routes them      (ketama, hash tags, ejection)
//!     ├─ per server, concurrently, one write each:
//!     │    fget <filter> <arglen> <its keys, in request order>\r\n<args>\r\n
//!     │    <- VALUE <filter> <flags> <len>\r\n<data>\r\nEND\r\n  (the get decoder, its bounds)
//!     └─ Vec<FilterPart>, in server order
//!   Client::fget_merge(.., merge)  = merge(fget(..)):  concat | top_k(k) | your own
//! ```
//!
//! A filter sees only the keys of its own server, so its result is partial: a top-k filter
//! returns each server's k newest records and [`top_k`] keeps the k newest of those. Hash tags
//! (`{user:7}:feed`, `{user:7}:likes`) put related keys on one server, where a single filter
//! call sees them all.

use crate::client::Client;
use crate::codec::{check_key, CodecError, Reply, Request};
use crate::error::{Error, Result};
use crate::fanout::join_all;
use crate::ketama::ServerSpec;
use mnemo_filter_sdk::records;

/// One server's result of an `fget`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterPart {
    /// The server whose filter produced it.
    pub server: ServerSpec,
    /// The flags the filter set on its result.
    pub flags: u32,
    /// The filter's output, as the server sent it.
    pub data: Vec<u8>,
    /// How many of the requested keys went to this server (duplicates counted).
    pub keys: usize,
}

impl Client {
    /// Run the installed filter `filter` with arguments `args` over the values of `keys`: one
    /// `fget` per server holding any of the keys (its keys in request order), all servers at
    /// once, one write each. The parts come back in server order (the order the servers were
    /// given); no keys means no request and no parts.
    ///
    /// All or nothing: a failure on any server fails the whole call, since a merge over the
    /// other servers' parts would silently be wrong. The server's `CLIENT_ERROR ...`,
    /// `SERVER_ERROR ...` (e.g. `SERVER_ERROR filter timeout`) or `ERROR` comes back as
    /// [`Error::Server`] with its whole line; such a reply leaves the connection usable and
    /// does not count towards ejecting the server.
    pub async fn fget<K: AsRef<[u8]>>(
        &self,
        filter: &str,
        args: &[u8],
        keys: &[K],
    ) -> Result<Vec<FilterPart>> {
        let name = filter.as_bytes();
        if !check_key(name) {
            return Err(Error::BadFilter(filter.to_owned()));
        }
        let groups = self.group(keys.iter().map(|k| k.as_ref()), |k| k)?;
        let results = join_all(groups.iter().map(|(n, ks)| async move {
            let req = Request::Fget {
                filter: name,
                args,
                keys: ks,
            };
            let mut replies = self.exchange(*n, &[req]).await?;
            let (flags, data) = self.filter_result(*n, name, replies.remove(0))?;
            Ok(FilterPart {
                server: self.inner.nodes[*n].spec.clone(),
                flags,
                data,
                keys: ks.len(),
            })
        }))
        .await;
        results.into_iter().collect()
    }

    /// [`Client::fget`], then `merge` over the parts, e.g. [`concat`] or [`top_k`]. The merge
    /// runs only when every server answered.
    pub async fn fget_merge<K: AsRef<[u8]>, T>(
        &self,
        filter: &str,
        args: &[u8],
        keys: &[K],
        merge: impl FnOnce(Vec<FilterPart>) -> T,
    ) -> Result<T> {
        Ok(merge(self.fget(filter, args, keys).await?))
    }

    /// An fget reply's flags and data: exactly one `VALUE <filter>` block. Anything else that
    /// decoded (an empty `END`, another name, a second block) is well framed, so the
    /// connection stays in step, but it is not an answer to this request.
    fn filter_result(&self, n: usize, name: &[u8], reply: Reply) -> Result<(u32, Vec<u8>)> {
        let mut entries = match self.ok(n, reply)? {
            Reply::Values(v) => v,
            r => return Err(self.unexpected(n, r)),
        };
        let odd = match entries.as_slice() {
            [e] if e.key == name => None,
            [] => Some("END".to_owned()),
            [e] | [_, e, ..] => Some(format!("VALUE {} ...", String::from_utf8_lossy(&e.key))),
        };
        if let Some(line) = odd {
            return Err(Error::Protocol {
                server: self.inner.nodes[n].addr.clone(),
                source: CodecError::Unexpected(line),
            });
        }
        let e = entries.pop().expect("exactly one entry");
        Ok((e.flags, e.data.into()))
    }
}

/// Merge: every part's bytes back to back, in server order (for filters whose results simply
/// add up, such as `select`).
pub fn concat(parts: Vec<FilterPart>) -> Vec<u8> {
    let mut parts = parts.into_iter();
    let Some(first) = parts.next() else {
        return Vec::new();
    };
    let mut out = first.data;
    for p in parts {
        out.extend_from_slice(&p.data);
    }
    out
}

/// Merge for the `topk` filter (seed 001's records): the `k` newest records over all parts,
/// newest first, encoded as records ([`records::merge_top_k`]); when each part is its server's
/// k newest (what the `topk` filter returns), the same as one filter call over all the keys
/// would give.
pub fn top_k(k: usize) -> impl Fn(Vec<FilterPart>) -> Vec<u8> + Copy + Send + Sync {
    move |parts| records::merge_top_k(parts.iter().map(|p| &p.data[..]), k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemo_filter_sdk::records::Record;

    fn part(data: Vec<u8>) -> FilterPart {
        FilterPart {
            server: ServerSpec::new("127.0.0.1", 1),
            flags: 0,
            data,
            keys: 1,
        }
    }

    #[test]
    fn top_k_equals_a_full_sort_of_every_part() {
        // Few distinct values: many ties on ts and on whole records (duplicates).
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for k in [0, 1, 2, 7, 50, 64, 1000] {
            let parts: Vec<Vec<Record>> = (0..3)
                .map(|_| {
                    (0..next(90))
                        .map(|_| Record {
                            user: next(3),
                            article: next(3),
                            ts: next(10),
                        })
                        .collect()
                })
                .collect();
            let mut all: Vec<Record> = parts.iter().flatten().copied().collect();
            all.sort_by(records::newest_first);
            all.truncate(k);
            let encoded = parts.iter().map(|recs| {
                let mut bytes = records::encode_all(recs);
                bytes.extend(std::iter::repeat_n(7, next(24) as usize)); // ignored tail
                part(bytes)
            });
            assert_eq!(
                top_k(k)(encoded.collect()),
                records::encode_all(&all),
                "k={k}"
            );
        }
    }

    #[test]
    fn concat_keeps_server_order() {
        let parts = vec![part(b"ab".to_vec()), part(vec![]), part(b"c".to_vec())];
        assert_eq!(concat(parts), b"abc");
        assert_eq!(concat(vec![]), b"");
    }
}
