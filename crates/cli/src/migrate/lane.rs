//! The copying machinery for one source: a dump reader that batches keys, and lanes (one
//! source connection and one connection per destination each) that fetch and store them.
//!
//! ```text
//!   dump thread            lane 1..N (each: threads A, B and one C per destination)
//!   metadump ──batches──►  A: writes the batch's gets line and mg requests to its source
//!   (keys routed to          │ batch
//!    a destination)          ▼
//!                          B: reads the replies, writes quiet ms (mode E) and an mn to the
//!                            │ batch's destination (keys stored again at the source since
//!                            │ listed: fetched once more by mg, on B's own connection; keys
//!                            │ only the binary protocol names: by binary gets, on another:
//!                            │ rawkeys.rs), and notes each key it sent (verify.rs)
//!                            │ count of sets written
//!                            ▼
//!                          C: reads the destination's answers up to the MN, tallies them
//! ```
//!
//! Each connection is written by one thread and read by another, so requests stream while
//! replies come back (pipelined), and neither side can wait on the other: A waits only on the
//! source, B on the source's replies and the destination, C on the destination's replies.
//! Channels inside a lane are bounded, so memory stays at a few batches per lane. The one from
//! the dump thread to the lanes is not: the dump is read as fast as the source sends it, and
//! the keys wait in memory when the copy is slower, as their requests: a key and 33 bytes in a
//! gets line (space, KeyRef, expiry, CAS), or 25 in a meta get, up to twice that in a grown
//! buffer. A dump left unread stalls the source: memcached's hash walk keeps the lock of the
//! bucket it is in while it waits to send, and a worker thread that needs that lock (for one of the
//! lanes' gets, or any client's request) waits with all its connections. That is a
//! deadlock if the dump waited on the lanes (it did, with bounded batches: 106,496 of
//! 1,000,000 items copied, then nothing for 60 s).

pub(super) use super::rawkeys::RawKey;
use super::readbuf::{connect, ReadBuf};
use super::wire::{self, DumpLine, GetReply, KeyForm, KeyRef, SetReply, ValueReply};
use super::{Counters, MigrateError};
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// B writes its buffered sets once they pass this many bytes (large values stay bounded).
const FLUSH_BYTES: usize = 1 << 20;
/// A batch's `gets` line is cut into lines of at most this many bytes (or one key).
const GETS_LINE_MAX: usize = 64 << 10;
/// Batches in flight between two threads of a lane.
const IN_FLIGHT: usize = 4;
/// How often, and how long apart, a dump the crawler is busy for is asked again.
const BUSY_RETRIES: u32 = 100;
const BUSY_WAIT: Duration = Duration::from_millis(100);

/// Keys for one destination, as the requests that fetch them: `gets` lines for the keys
/// listed with their CAS and moment of expiry, then a meta get for each other key.
pub struct Batch {
    pub dest: usize,
    /// The `gets` lines (once [`Batch::seal`]ed: the last with its line end), then the meta
    /// gets.
    pub req: Vec<u8>,
    /// The keys of the `gets` lines, in their order.
    pub gets: Vec<Listed>,
    /// Where each `gets` line's keys end in `gets` (the last line's once sealed).
    pub lines: Vec<usize>,
    /// The keys of the meta gets, in their order.
    pub keys: Vec<KeyRef>,
    /// Keys only the binary protocol names ([`KeyForm::BinaryOnly`]), their bytes in `raw`.
    pub bin: Vec<RawKey>,
    pub raw: Vec<u8>,
    /// The meta gets, until [`Batch::seal`] puts them after the `gets` line.
    mg: Vec<u8>,
    /// Where the open `gets` line starts in `req`.
    line_start: usize,
}

/// A key of a `gets` line and what its listing said.
#[derive(Clone, Copy)]
pub struct Listed {
    pub key: KeyRef,
    /// Unix time of expiry, -1 for never.
    pub exp: i64,
    pub cas: u64,
}

impl Batch {
    fn new(dest: usize, size: usize) -> Batch {
        Batch {
            dest,
            req: Vec::with_capacity(size * 16),
            gets: Vec::with_capacity(size),
            lines: Vec::new(),
            keys: Vec::new(),
            bin: Vec::new(),
            raw: Vec::new(),
            mg: Vec::new(),
            line_start: 0,
        }
    }

    fn len(&self) -> usize {
        self.gets.len() + self.keys.len() + self.bin.len()
    }

    /// Add a key: to the `gets` line when the listing gave its CAS and expiry, `multiget`
    /// allows it and the text protocol can name it; to the binary gets when only the binary
    /// protocol can; else as a meta get (which says the TTL left itself).
    fn push(&mut self, key: &[u8], listed: Option<(i64, u64)>, multiget: bool) {
        match (wire::key_form(key), listed.filter(|_| multiget)) {
            (KeyForm::BinaryOnly, _) => {
                let start = self.raw.len() as u32;
                self.raw.extend_from_slice(key);
                let key = KeyRef {
                    start,
                    len: key.len() as u32,
                    form: KeyForm::BinaryOnly,
                };
                self.bin.push(RawKey { key, listed });
            }
            (KeyForm::Plain, Some((exp, cas))) => {
                // A line is cut before it passes GETS_LINE_MAX bytes: mnemod takes get lines
                // of up to 2 MB, and a long one costs memcached a buffer of its size.
                let open = self.lines.last().copied().unwrap_or(0);
                let line = self.req.len() - self.line_start;
                // The line with this key and its end must fit.
                if self.gets.len() > open && line + 1 + key.len() + 2 > GETS_LINE_MAX {
                    self.req.extend_from_slice(b"\r\n");
                    self.lines.push(self.gets.len());
                }
                if self.gets.len() == self.lines.last().copied().unwrap_or(0) {
                    self.line_start = self.req.len();
                    self.req.extend_from_slice(wire::GETS);
                }
                let key = wire::push_gets_key(&mut self.req, key);
                self.gets.push(Listed { key, exp, cas });
            }
            _ => self.keys.push(wire::push_get(&mut self.mg, key)),
        }
    }

    /// End the `gets` line and put the meta gets after it: the requests as they are sent.
    fn seal(mut self) -> Batch {
        if self.gets.len() > self.lines.last().copied().unwrap_or(0) {
            self.req.extend_from_slice(b"\r\n");
            self.lines.push(self.gets.len());
        }
        let shift = self.req.len() as u32;
        for k in &mut self.keys {
            k.start += shift;
        }
        self.req.append(&mut self.mg);
        self
    }
}

/// What the dump reader does with a key: copy it to a destination, or leave it.
pub enum Route {
    Copy(usize),
    /// Its owner does not change (fleet mode).
    Stays,
    /// The source is not its owner under the old server list (fleet mode).
    Stray,
}

/// How a source's crawler walks its items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Walk {
    /// `metadump hash` (memcached 1.6.9 on; mnemod walks its index either way): over the hash
    /// table, each bucket under its lock, with the table's growth paused. An item live during
    /// the whole walk is listed exactly once: one listing is enough.
    Hash,
    /// `metadump all`: over the LRUs, for a source that refuses `hash`. Not a snapshot: an
    /// item the LRU maintainer moves meanwhile can be passed over (379 of 1,000,000 in one run
    /// here), so this walk is done twice ([`Listing`]).
    Lru,
}

impl Walk {
    fn command(self) -> &'static [u8] {
        match self {
            Walk::Hash => b"lru_crawler metadump hash\r\n",
            Walk::Lru => b"lru_crawler metadump all\r\n",
        }
    }
}

/// Which listing of a source a run is. After an LRU walk ([`Walk::Lru`]) the first listing
/// remembers a 64-bit hash of every key it lists; a second, started as soon as the first
/// ends, copies only the keys the first did not list.
enum Listing<'a> {
    /// The one listing (a hash walk, or `--one-listing`): nothing to remember.
    Only,
    First(&'a mut KeySet),
    Second(&'a KeySet),
}

fn key_id(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// The set of listed keys holds their xxh3 hashes: hashing them again would be wasted work.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u64s are hashed here; any other input still gets a usable hash.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

pub type KeySet = HashSet<u64, BuildHasherDefault<IdHasher>>;

/// One source and where its keys go.
pub struct Job<'a> {
    pub source: String,
    pub dests: Vec<String>,
    /// How each destination is written to.
    pub stores: Vec<wire::Store>,
    pub route: &'a (dyn Fn(&[u8]) -> Route + Sync),
    pub lanes: usize,
    pub batch: usize,
    /// List the source a second time for the keys the first listing passed over.
    pub second_listing: bool,
    /// How many keys the source holds (its curr_items), to size the set of listed keys.
    pub expect: usize,
    /// Fetch the keys a listing gave a CAS and an expiry with multi-key `gets` (marks them
    /// fetched at the source) rather than `mg ... u` (leaves them as they were).
    pub multiget: bool,
    /// Per destination, the keys sent to it (verify.rs's records), for the check after the
    /// copy.
    pub sent: &'a [Mutex<Vec<u8>>],
}

/// Copy every key of `job.source` that its route sends somewhere. Errors of any thread are
/// returned (the first of them); the counters hold what was done.
pub fn run(job: &Job, c: &Counters) -> Result<(), MigrateError> {
    // Connections first, so a wrong address fails before any work.
    let mut lanes = Vec::with_capacity(job.lanes);
    for _ in 0..job.lanes.max(1) {
        let src = connect(&job.source)?;
        let dests = job
            .dests
            .iter()
            .map(|d| connect(d))
            .collect::<Result<Vec<_>, _>>()?;
        lanes.push((src, dests));
    }
    let dump = connect(&job.source)?;
    let (tx, rx) = channel::<Batch>();
    let rx = Arc::new(Mutex::new(rx));
    let errors: Mutex<Vec<MigrateError>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for (src, dests) in lanes {
            let rx = rx.clone();
            let errors = &errors;
            s.spawn(move || {
                if let Err(e) = lane(job, src, dests, &rx, c) {
                    errors.lock().unwrap().push(e);
                }
            });
        }
        drop(rx);
        let listed = match read_dump(job, &dump, &tx, c, Walk::Hash, Listing::Only) {
            // A source without the hash walk (memcached before 1.6.9) says so before
            // any item: walk its LRUs instead. BUSY was retried already, and stays an error.
            Err(MigrateError::DumpRefused(_, l)) if !l.starts_with("BUSY") => {
                if job.second_listing {
                    let mut seen = KeySet::with_capacity_and_hasher(job.expect, Default::default());
                    read_dump(job, &dump, &tx, c, Walk::Lru, Listing::First(&mut seen)).and_then(
                        |()| read_dump(job, &dump, &tx, c, Walk::Lru, Listing::Second(&seen)),
                    )
                } else {
                    read_dump(job, &dump, &tx, c, Walk::Lru, Listing::Only)
                }
            }
            r => r,
        };
        // The lanes finish the batches queued and stop.
        drop(tx);
        if let Err(e) = listed {
            errors.lock().unwrap().push(e);
        }
    });
    match errors.into_inner().unwrap().into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Stream the source's metadump into batches per destination.
fn read_dump(
    job: &Job,
    conn: &TcpStream,
    tx: &Sender<Batch>,
    c: &Counters,
    walk: Walk,
    mut listing: Listing,
) -> Result<(), MigrateError> {
    let addr = &job.source;
    let io = |e| MigrateError::Io(addr.clone(), e);
    // Nothing follows a dump's END, so nothing is left in this buffer for the next listing.
    let mut inb = ReadBuf::new();
    let mut w = conn;
    let mut batches: Vec<Batch> = (0..job.dests.len())
        .map(|d| Batch::new(d, job.batch))
        .collect();
    let mut key = Vec::new();
    let mut busy = 0;
    w.write_all(walk.command()).map_err(io)?;
    let mut listed = 0u64;
    loop {
        let eol = loop {
            match memchr::memchr(b'\n', inb.data()) {
                Some(eol) => break eol,
                None => inb.fill(conn, addr)?,
            }
        };
        let parsed = wire::parse_dump_line(&inb.data()[..eol], &mut key);
        inb.consume(eol + 1);
        match parsed.map_err(|l| MigrateError::Protocol(addr.clone(), l))? {
            DumpLine::End => break,
            DumpLine::Started => {}
            DumpLine::Refused(l) if l.starts_with("BUSY") && busy < BUSY_RETRIES => {
                // Another crawl (the server's own, or another tool's) is running: ask again.
                busy += 1;
                std::thread::sleep(BUSY_WAIT);
                w.write_all(walk.command()).map_err(io)?;
            }
            DumpLine::Refused(l) => return Err(MigrateError::DumpRefused(addr.clone(), l)),
            DumpLine::Item { exp, cas } => {
                match &mut listing {
                    Listing::Only | Listing::First(_) => {
                        if let Listing::First(seen) = &mut listing {
                            seen.insert(key_id(&key));
                        }
                        listed += 1;
                        if listed.is_multiple_of(1024) {
                            c.listed.fetch_add(1024, Relaxed);
                        }
                    }
                    Listing::Second(seen) if seen.contains(&key_id(&key)) => continue,
                    Listing::Second(_) => {
                        c.relisted.fetch_add(1, Relaxed);
                    }
                }
                match (job.route)(&key) {
                    Route::Copy(d) => {
                        let b = &mut batches[d];
                        b.push(&key, exp.zip(cas), job.multiget);
                        if b.len() >= job.batch {
                            let full = std::mem::replace(b, Batch::new(d, job.batch));
                            if tx.send(full.seal()).is_err() {
                                // Every lane has stopped: its error is the one to report.
                                return Ok(());
                            }
                        }
                    }
                    Route::Stays => {
                        c.stays.fetch_add(1, Relaxed);
                    }
                    Route::Stray => {
                        c.stray.fetch_add(1, Relaxed);
                    }
                }
            }
        }
    }
    c.listed.fetch_add(listed % 1024, Relaxed);
    for b in batches {
        if b.len() > 0 && tx.send(b.seal()).is_err() {
            break;
        }
    }
    Ok(())
}

/// One lane: threads A, B and the Cs, until the batches run out or a connection fails.
fn lane(
    job: &Job,
    src: TcpStream,
    dests: Vec<TcpStream>,
    rx: &Mutex<Receiver<Batch>>,
    c: &Counters,
) -> Result<(), MigrateError> {
    let (src_addr, dest_addrs, stores) = (&job.source[..], &job.dests[..], &job.stores[..]);
    let src_io = |e| MigrateError::Io(src_addr.to_owned(), e);
    let src_r = src.try_clone().map_err(src_io)?;
    let mut dest_w = Vec::new();
    let mut dest_r = Vec::new();
    for (d, conn) in dests.into_iter().enumerate() {
        dest_r.push(
            conn.try_clone()
                .map_err(|e| MigrateError::Io(dest_addrs[d].clone(), e))?,
        );
        dest_w.push(conn);
    }
    let (to_b, from_a) = sync_channel::<Batch>(IN_FLIGHT);
    let mut to_cs = Vec::new();
    let mut from_bs = Vec::new();
    for _ in 0..dest_w.len() {
        let (t, f) = sync_channel::<usize>(IN_FLIGHT * 4);
        to_cs.push(t);
        from_bs.push(f);
    }
    std::thread::scope(|s| {
        let a = s.spawn(move || -> Result<(), MigrateError> {
            let mut src = src;
            loop {
                let next = rx.lock().unwrap().recv();
                let Ok(batch) = next else { return Ok(()) };
                src.write_all(&batch.req).map_err(src_io)?;
                if to_b.send(batch).is_err() {
                    return Ok(());
                }
            }
        });
        let cs: Vec<_> = dest_r
            .into_iter()
            .zip(from_bs)
            .enumerate()
            .map(|(d, (conn, from_b))| {
                s.spawn(move || tally(&dest_addrs[d], stores[d], conn, from_b, c))
            })
            .collect();
        let b = fetch_and_store(job, src_r, dest_w, from_a, to_cs, c);
        // B is done (or failed): closing the source connection wakes an A stuck in a write.
        let a = a.join().unwrap();
        let cs: Vec<_> = cs.into_iter().map(|h| h.join().unwrap()).collect();
        b.and(a).and(cs.into_iter().collect())
    })
}

/// Thread B: gets and mg replies in, ms requests out.
fn fetch_and_store(
    job: &Job,
    src: TcpStream,
    mut dests: Vec<TcpStream>,
    from_a: Receiver<Batch>,
    to_cs: Vec<SyncSender<usize>>,
    c: &Counters,
) -> Result<(), MigrateError> {
    let (src_addr, dest_addrs, stores) = (&job.source[..], &job.dests[..], &job.stores[..]);
    let result = (|| {
        let mut inb = ReadBuf::new();
        // Keys only the binary protocol names are fetched here (rawkeys.rs).
        let mut raw = super::rawkeys::Fetcher::new(src_addr);
        let mut sent = Vec::new();
        let mut out = Vec::with_capacity(FLUSH_BYTES + (1 << 16));
        // A connection for the keys stored again since listed, opened when one is.
        let mut again: Option<(TcpStream, ReadBuf)> = None;
        let mut refetch = Vec::new();
        let mut scratch = Vec::new();
        for batch in from_a.iter() {
            let d = batch.dest;
            // Long TTLs become Unix times as of the fetch.
            let now = super::unix_now();
            let (mut sets, mut gone, mut bytes, mut unfetched) = (0usize, 0u64, 0u64, 0u64);
            let mut flush = |out: &mut Vec<u8>, sets: &mut usize| -> Result<(), MigrateError> {
                out.extend_from_slice(stores[d].sync());
                dests[d]
                    .write_all(out)
                    .map_err(|e| MigrateError::Io(dest_addrs[d].clone(), e))?;
                out.clear();
                // A C that stopped has failed: its error is reported when it is joined.
                let _ = to_cs[d].send(std::mem::take(sets));
                Ok(())
            };
            // `k` names the key in `keys` (the batch's requests, or its raw keys).
            let mut store = |out: &mut Vec<u8>,
                             sets: &mut usize,
                             k: KeyRef,
                             keys: &[u8],
                             flags: u32,
                             ttl: i64,
                             v: &[u8]|
             -> Result<(), MigrateError> {
                let ttl = wire::dest_ttl(ttl, now);
                let key = wire::raw_key(k, keys, &mut scratch);
                match stores[d] {
                    wire::Store::Meta if k.form == KeyForm::BinaryOnly => {
                        c.not_sent(format!(
                            "{}: a key of {} bytes, too long for the meta protocol in base64, \
                             and the destination does not take the binary protocol",
                            dest_addrs[d],
                            key.len()
                        ));
                        return Ok(());
                    }
                    wire::Store::Meta => wire::push_set(out, k, keys, flags, ttl, v),
                    wire::Store::Binary => wire::push_addq(out, key, flags, ttl, v),
                }
                super::verify::note(&mut sent, key, ttl, now);
                *sets += 1;
                bytes += v.len() as u64;
                if out.len() >= FLUSH_BYTES {
                    flush(out, sets)?;
                }
                Ok(())
            };
            // The gets lines: each line's answers come in its keys' order and end with END; a key
            // not answered is gone. One with the listed CAS was not stored since: the listing's
            // expiry holds.
            let mut next = 0;
            for &end in &batch.lines {
                loop {
                    let (reply, used) = loop {
                        let parsed = wire::parse_value_reply(inb.data())
                            .map_err(|l| MigrateError::Protocol(src_addr.to_owned(), l))?;
                        match parsed {
                            Some(r) => break r,
                            None => inb.fill(&src, src_addr)?,
                        }
                    };
                    let ValueReply::Value {
                        key,
                        flags,
                        cas,
                        data,
                    } = reply
                    else {
                        inb.consume(used);
                        break;
                    };
                    let name = &inb.data()[key];
                    let skipped = batch.gets[next..end]
                        .iter()
                        .position(|l| l.key.token(&batch.req) == name)
                        .ok_or_else(|| {
                            MigrateError::Protocol(
                                src_addr.to_owned(),
                                format!(
                                    "gets answered {:?}, not asked for",
                                    String::from_utf8_lossy(name)
                                ),
                            )
                        })?;
                    gone += skipped as u64;
                    let l = batch.gets[next + skipped];
                    next += skipped + 1;
                    if l.cas == cas {
                        let ttl = wire::listed_ttl(l.exp, now);
                        store(
                            &mut out,
                            &mut sets,
                            l.key,
                            &batch.req,
                            flags,
                            ttl,
                            &inb.data()[data],
                        )?;
                    } else {
                        refetch.push(l.key);
                    }
                    inb.consume(used);
                }
                gone += (end - next) as u64;
                next = end;
            }
            for &k in &batch.keys {
                let (reply, used) = read_get_reply(&mut inb, &src, src_addr)?;
                match reply {
                    GetReply::Miss => gone += 1,
                    GetReply::Hit { flags, ttl, data } => store(
                        &mut out,
                        &mut sets,
                        k,
                        &batch.req,
                        flags,
                        ttl,
                        &inb.data()[data],
                    )?,
                }
                inb.consume(used);
            }
            if !refetch.is_empty() {
                c.refetched.fetch_add(refetch.len() as u64, Relaxed);
                if again.is_none() {
                    again = Some((connect(src_addr)?, ReadBuf::new()));
                }
                let (conn, rb) = again.as_mut().unwrap();
                let mut req = Vec::new();
                for k in &refetch {
                    wire::push_get(&mut req, k.token(&batch.req));
                }
                let mut w: &TcpStream = conn;
                w.write_all(&req).map_err(src_io_err(src_addr))?;
                for &k in &refetch {
                    let (reply, used) = read_get_reply(rb, conn, src_addr)?;
                    match reply {
                        GetReply::Miss => gone += 1,
                        GetReply::Hit { flags, ttl, data } => store(
                            &mut out,
                            &mut sets,
                            k,
                            &batch.req,
                            flags,
                            ttl,
                            &rb.data()[data],
                        )?,
                    }
                    rb.consume(used);
                }
                refetch.clear();
            }
            if !batch.bin.is_empty() {
                let r = raw.fetch(&batch.bin, &batch.raw, now, c, |k, flags, ttl, v| {
                    store(&mut out, &mut sets, k, &batch.raw, flags, ttl, v)
                })?;
                gone += r.gone;
                unfetched += r.unfetched;
            }
            if sets > 0 {
                flush(&mut out, &mut sets)?;
            }
            if !sent.is_empty() {
                job.sent[d].lock().unwrap().append(&mut sent);
            }
            c.gone.fetch_add(gone, Relaxed);
            c.fetched
                .fetch_add(batch.len() as u64 - gone - unfetched, Relaxed);
            c.bytes.fetch_add(bytes, Relaxed);
        }
        Ok(())
    })();
    // Either way A must not stay blocked writing to a source nobody reads any more.
    if result.is_err() {
        let _ = src.shutdown(std::net::Shutdown::Both);
    }
    result
}

fn src_io_err(addr: &str) -> impl Fn(std::io::Error) -> MigrateError + '_ {
    move |e| MigrateError::Io(addr.to_owned(), e)
}

/// The next meta get answer on `conn`, read into `inb` as far as needed.
fn read_get_reply(
    inb: &mut ReadBuf,
    conn: &TcpStream,
    addr: &str,
) -> Result<(GetReply, usize), MigrateError> {
    loop {
        let parsed = wire::parse_get_reply(inb.data())
            .map_err(|l| MigrateError::Protocol(addr.to_owned(), l))?;
        match parsed {
            Some(r) => return Ok(r),
            None => inb.fill(conn, addr)?,
        }
    }
}

/// Thread C: count the destination's answers to the sets B wrote.
fn tally(
    addr: &str,
    store: wire::Store,
    conn: TcpStream,
    from_b: Receiver<usize>,
    c: &Counters,
) -> Result<(), MigrateError> {
    let r = tally_replies(addr, store, &conn, from_b, c);
    if r.is_err() {
        // B must not stay blocked writing sets nobody reads the answers to.
        let _ = conn.shutdown(std::net::Shutdown::Both);
    }
    r
}

fn tally_replies(
    addr: &str,
    store: wire::Store,
    conn: &TcpStream,
    from_b: Receiver<usize>,
    c: &Counters,
) -> Result<(), MigrateError> {
    let mut inb = ReadBuf::new();
    for n in from_b.iter() {
        // Quiet sets answer only when not stored; the MN ends the run's answers.
        let (mut answered, mut exists, mut failed) = (0usize, 0u64, 0u64);
        loop {
            let (reply, used) = loop {
                let parsed = match store {
                    wire::Store::Meta => Ok(wire::parse_set_reply(inb.data())),
                    wire::Store::Binary => wire::parse_bin_reply(inb.data()),
                };
                match parsed.map_err(|l| MigrateError::Protocol(addr.to_owned(), l))? {
                    Some(r) => break r,
                    None => inb.fill(conn, addr)?,
                }
            };
            inb.consume(used);
            if reply == SetReply::Synced {
                break;
            }
            answered += 1;
            if answered > n {
                return Err(MigrateError::Protocol(
                    addr.to_owned(),
                    format!("more answers than the {n} sets sent"),
                ));
            }
            match reply {
                SetReply::Synced | SetReply::Stored => {}
                SetReply::Exists => exists += 1,
                SetReply::Failed(line) => {
                    failed += 1;
                    c.refuse(format!("{addr}: {line}"));
                    if line == "ERROR" || line.starts_with("CLIENT_ERROR") {
                        // The destination did not read the set as one: the stream is lost.
                        return Err(MigrateError::Protocol(addr.to_owned(), line));
                    }
                }
            }
        }
        c.stored.fetch_add(n as u64 - exists - failed, Relaxed);
        c.exists.fetch_add(exists, Relaxed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_key_costs_what_the_docs_say() {
        // The module docs and docs/operators-switching.md count 32 bytes of Listed and 12 of
        // KeyRef per key waiting for a lane.
        assert_eq!(std::mem::size_of::<Listed>(), 32);
        assert_eq!(std::mem::size_of::<KeyRef>(), 12);
        let mut b = Batch::new(0, 4);
        b.push(b"k1", Some((-1, 7)), true);
        b.push(b"a b", Some((-1, 8)), true);
        b.push(b"k2", None, true);
        b.push(b"k3", Some((100, 9)), true);
        b.push(&[0; 200], Some((-1, 10)), true);
        b.push(b"k4", Some((-1, 11)), false);
        let b = b.seal();
        assert_eq!(
            b.req,
            b"gets k1 k3\r\nmg YSBi b v f t u\r\nmg k2 v f t u\r\nmg k4 v f t u\r\n"
        );
        // The 200-byte binary key goes by binary get, its listing kept.
        assert_eq!((b.bin.len(), b.raw.len()), (1, 200));
        assert_eq!(b.bin[0].listed, Some((-1, 10)));
        let gets: Vec<&[u8]> = b.gets.iter().map(|l| l.key.token(&b.req)).collect();
        assert_eq!(gets, [&b"k1"[..], b"k3"]);
        let mgs: Vec<&[u8]> = b.keys.iter().map(|k| k.token(&b.req)).collect();
        assert_eq!(mgs, [&b"YSBi"[..], b"k2", b"k4"]);
        assert_eq!((b.gets[1].exp, b.gets[1].cas, b.len()), (100, 9, 6));
        assert_eq!(b.lines, [2]);
        // Long keys: lines are cut before GETS_LINE_MAX, each ends with its own END.
        let mut b = Batch::new(0, 1024);
        let key = |i: usize| format!("{i:0>250}").into_bytes();
        for i in 0..600 {
            b.push(&key(i), Some((-1, 1)), true);
        }
        let b = b.seal();
        // "gets", then " " and the key each, then "\r\n".
        let per_line = (GETS_LINE_MAX - 6) / 251;
        assert_eq!(b.lines, [per_line, 2 * per_line, 600]);
        let lines: Vec<&[u8]> = b.req.split_inclusive(|&c| c == b'\n').collect();
        assert_eq!(lines.len(), 3);
        for (l, ks) in lines
            .iter()
            .zip([0..per_line, per_line..2 * per_line, 2 * per_line..600])
        {
            assert!(l.len() <= GETS_LINE_MAX, "{}", l.len());
            let want: Vec<u8> = [b"gets".to_vec()]
                .into_iter()
                .chain(ks.map(|i| [b" ".to_vec(), key(i)].concat()))
                .chain([b"\r\n".to_vec()])
                .flatten()
                .collect();
            assert_eq!(*l, &want[..]);
        }
    }
}
