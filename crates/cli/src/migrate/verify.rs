//! After the copy: is each key sent to a destination there now? A destination acknowledges
//! a set and may then evict it to make room for the next ones (a cache smaller than what is
//! copied into it), so the acknowledgements say what it took, not what it kept; this says
//! what it kept.
//!
//! ```text
//!   thread B, per key sent:  [len u8][key as it is][expiry: Unix time i64 LE, 0 = never]
//!                            appended to its destination's list (Job::sent)
//!   after every lane ends, per destination (in parallel):
//!     mg <key> [b] u \r\n x batch  ->  HD | EN        (`u`: its LRU place and fetched mark
//!                                                     stay as they were)
//!     binary get x 32              ->  status 0 | 1   (keys only the binary protocol names)
//!   a key not there whose expiry has passed (a second of slack for the clocks): expired
//!   since, not a failure; any other: not kept
//! ```
//!
//! Memory: the key and 9 bytes per key sent, kept until the check (100 MB for 5 million
//! keys of 11 bytes). Time: one pipelined meta get per key, per destination in parallel.

use super::readbuf::{connect, ReadBuf};
use super::wire::{self, KeyForm, RELATIVE_TTL_LIMIT};
use super::MigrateError;
use std::io::Write;
use std::net::TcpStream;

/// Binary gets written before their answers are read (rawkeys.rs says why so few).
const BIN_CHUNK: usize = 32;

/// Append the record of `key`, sent with the destination TTL `ttl` (as [`wire::dest_ttl`]
/// gives it) at Unix time `now`, to `out`.
pub fn note(out: &mut Vec<u8>, key: &[u8], ttl: i64, now: i64) {
    let exp = match ttl {
        0 => 0,
        t if t <= RELATIVE_TTL_LIMIT => now + t,
        t => t,
    };
    out.push(key.len() as u8);
    out.extend_from_slice(key);
    out.extend_from_slice(&exp.to_le_bytes());
}

/// The records in `buf`: each key and its expiry.
fn records(buf: &[u8]) -> impl Iterator<Item = (&[u8], i64)> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let n = *buf.get(at)? as usize;
        let key = &buf[at + 1..at + 1 + n];
        let exp = i64::from_le_bytes(buf[at + 1 + n..at + 9 + n].try_into().unwrap());
        at += 9 + n;
        Some((key, exp))
    })
}

/// What the check found at one destination.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub sent: u64,
    pub present: u64,
    /// Not there, and past their expiry.
    pub expired: u64,
    /// Not there, and not expired: evicted, deleted, or never stored (refused).
    pub missing: u64,
}

impl Verdict {
    pub fn add(&mut self, o: Verdict) {
        self.sent += o.sent;
        self.present += o.present;
        self.expired += o.expired;
        self.missing += o.missing;
    }
}

/// Look for every key recorded in `sent` at `addr`, `batch` keys per pipelined write.
pub fn check(addr: &str, sent: &[u8], batch: usize) -> Result<Verdict, MigrateError> {
    let io = |e| MigrateError::Io(addr.to_owned(), e);
    let conn = connect(addr)?;
    let mut inb = ReadBuf::new();
    let mut bin: Option<(TcpStream, ReadBuf)> = None;
    let mut v = Verdict::default();
    let mut req = Vec::new();
    let mut chunk: Vec<(&[u8], i64)> = Vec::with_capacity(batch);
    let mut raw: Vec<(&[u8], i64)> = Vec::new();
    let mut recs = records(sent).peekable();
    while recs.peek().is_some() {
        chunk.clear();
        raw.clear();
        req.clear();
        for (key, exp) in recs.by_ref().take(batch.max(1)) {
            if wire::key_form(key) == KeyForm::BinaryOnly {
                raw.push((key, exp));
            } else {
                wire::push_exists(&mut req, key);
                chunk.push((key, exp));
            }
        }
        let now = super::unix_now();
        let mut tally = |there: bool, exp: i64| {
            v.sent += 1;
            if there {
                v.present += 1;
            } else if exp != 0 && exp <= now + 1 {
                v.expired += 1;
            } else {
                v.missing += 1;
            }
        };
        if !chunk.is_empty() {
            (&conn).write_all(&req).map_err(io)?;
            for &(_, exp) in &chunk {
                let (there, used) = loop {
                    let parsed = wire::parse_exists(inb.data())
                        .map_err(|l| MigrateError::Protocol(addr.to_owned(), l))?;
                    match parsed {
                        Some(p) => break p,
                        None => inb.fill(&conn, addr)?,
                    }
                };
                inb.consume(used);
                tally(there, exp);
            }
        }
        if raw.is_empty() {
            continue;
        }
        // Only a destination that takes the binary protocol was sent these keys (lane.rs).
        if bin.is_none() {
            bin = Some((connect(addr)?, ReadBuf::new()));
        }
        let (bconn, binb) = bin.as_mut().unwrap();
        for part in raw.chunks(BIN_CHUNK) {
            req.clear();
            for &(key, _) in part {
                wire::push_bin_get(&mut req, key);
            }
            (&*bconn).write_all(&req).map_err(io)?;
            for &(_, exp) in part {
                let (reply, used) = loop {
                    let parsed = wire::parse_bin_get(binb.data())
                        .map_err(|l| MigrateError::Protocol(addr.to_owned(), l))?;
                    match parsed {
                        Some(p) => break p,
                        None => binb.fill(bconn, addr)?,
                    }
                };
                binb.consume(used);
                tally(matches!(reply, wire::BinGet::Hit { .. }), exp);
            }
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let mut buf = Vec::new();
        note(&mut buf, b"k1", 0, 1000);
        note(&mut buf, &[0; 250], 100, 1000);
        note(&mut buf, b"far", RELATIVE_TTL_LIMIT + 5000, 1000);
        let got: Vec<(Vec<u8>, i64)> = records(&buf).map(|(k, e)| (k.to_vec(), e)).collect();
        assert_eq!(
            got,
            [
                (b"k1".to_vec(), 0),
                (vec![0; 250], 1100),
                (b"far".to_vec(), RELATIVE_TTL_LIMIT + 5000)
            ]
        );
    }
}
