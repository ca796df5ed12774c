//! Keys only the binary protocol names ([`wire::KeyForm::BinaryOnly`]: 187 to 250 bytes
//! that the text protocol cannot carry as they are, whose base64 form passes the 250 bytes a
//! meta key may have): fetched from the source with binary gets, on a connection of their
//! own that thread B opens when it first meets one.
//!
//! ```text
//!   binary get (key) x up to CHUNK  ->  status 0: extras = flags, header CAS, value
//!                                       status 1: not found (gone)
//! ```
//!
//! A binary get says no TTL. The listing's moment of expiry holds when the CAS is the one
//! it listed (as for the `gets` lines, wire.rs); a key stored again since cannot be given its
//! new TTL, so it is not copied and counted as refused, with that reason. A source that does
//! not take the binary protocol (`-B ascii`) cannot give such a key at all: the same.

use super::readbuf::{connect, ReadBuf};
use super::wire::{self, BinGet, KeyRef};
use super::{Counters, MigrateError};

/// A key only the binary protocol names and what its listing said (its Unix time of expiry,
/// -1 for never, and its CAS).
#[derive(Clone, Copy)]
pub struct RawKey {
    pub key: KeyRef,
    pub listed: Option<(i64, u64)>,
}
use std::io::Write;
use std::net::TcpStream;

/// Binary gets written before their answers are read: the answers carry values, and a
/// source blocked writing them stops reading, so what is written at once stays far below a
/// socket's buffer (32 gets of at most 274 bytes).
const CHUNK: usize = 32;

/// Thread B's connection for binary gets, opened when first needed.
pub struct Fetcher<'a> {
    addr: &'a str,
    /// None until a key needed it; then whether the source takes the binary protocol, and
    /// the connection if it does.
    conn: Option<Option<(TcpStream, ReadBuf)>>,
}

/// What [`Fetcher::fetch`] did with a batch's keys besides storing them.
#[derive(Default)]
pub struct Fetched {
    /// Not at the source any more.
    pub gone: u64,
    /// At the source but not copied (counted as refused, with the reason).
    pub unfetched: u64,
}

impl<'a> Fetcher<'a> {
    pub fn new(addr: &'a str) -> Fetcher<'a> {
        Fetcher { addr, conn: None }
    }

    /// Fetch the keys `bin` (their bytes in `raw`); `store` is called for each one to copy,
    /// with the key, its flags, the TTL left and the value.
    pub fn fetch(
        &mut self,
        bin: &[RawKey],
        raw: &[u8],
        now: i64,
        c: &Counters,
        mut store: impl FnMut(KeyRef, u32, i64, &[u8]) -> Result<(), MigrateError>,
    ) -> Result<Fetched, MigrateError> {
        let addr = self.addr;
        let mut r = Fetched::default();
        let conn = self.conn.get_or_insert_with(|| {
            if !super::speaks_binary(addr) {
                return None;
            }
            connect(addr).ok().map(|s| (s, ReadBuf::new()))
        });
        let Some((conn, inb)) = conn else {
            r.unfetched = bin.len() as u64;
            for k in bin {
                c.not_sent(format!(
                    "{addr}: a key of {} bytes, too long for the meta protocol in base64, \
                     and the source does not take the binary protocol",
                    k.key.len
                ));
            }
            return Ok(r);
        };
        let mut req = Vec::new();
        for chunk in bin.chunks(CHUNK) {
            req.clear();
            for k in chunk {
                wire::push_bin_get(&mut req, k.key.token(raw));
            }
            let mut w: &TcpStream = conn;
            w.write_all(&req)
                .map_err(|e| MigrateError::Io(addr.to_owned(), e))?;
            for k in chunk {
                let (reply, used) = loop {
                    let parsed = wire::parse_bin_get(inb.data())
                        .map_err(|l| MigrateError::Protocol(addr.to_owned(), l))?;
                    match parsed {
                        Some(p) => break p,
                        None => inb.fill(conn, addr)?,
                    }
                };
                match reply {
                    BinGet::Miss => r.gone += 1,
                    BinGet::Hit { flags, cas, data } => match k.listed {
                        Some((exp, listed)) if listed == cas => {
                            let ttl = wire::listed_ttl(exp, now);
                            store(k.key, flags, ttl, &inb.data()[data])?;
                        }
                        _ => {
                            r.unfetched += 1;
                            c.not_sent(format!(
                                "{addr}: a key of {} bytes, stored again at the source since \
                                 listed: the binary protocol cannot say its new TTL",
                                k.key.len
                            ));
                        }
                    },
                    BinGet::Failed(line) => {
                        r.unfetched += 1;
                        c.not_sent(format!("{addr}: {line}"));
                    }
                }
                inb.consume(used);
            }
        }
        Ok(r)
    }
}
