//! `run`: the closed-loop query load, one thread per connection, one query in flight on each.
//!
//! A query is a user's feed: 100 random distinct friends, the 10 newest records over their
//! values. `client` mode reads the values (`get` of 100 keys) and ranks them here; `fget` mode
//! has the server's filter rank them and reads only the result.
//!
//! ```text
//!   per connection:  [check x N] [warm-up] | barrier | [timed queries ... until stop]
//!   main:                                  | barrier | rusage, clock ... sleep ... stop, join
//! ```
//!
//! The first queries of every connection (`--check`) are computed both ways and compared: the
//! client-side top-k against a full sort, and against fget's output in fget mode; given the
//! loader's seed (`--data-seed`) every value read is also compared with what was loaded. They and
//! the warm-up are not timed, and the byte and CPU counters start at the barrier.

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mnemo_filter_sdk::records::{self, Record, RECORD_LEN};

use crate::conn::Conn;
use crate::gen::{self, FriendPicker, Rng};
use crate::query;
use crate::Error;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// `get` the friends' values and rank them in the client.
    Client,
    /// `fget` through the server's filter; read only its result.
    Fget,
}

pub struct RunArgs {
    pub server: SocketAddr,
    pub mode: Mode,
    pub filter: String,
    pub users: u64,
    pub friends: usize,
    pub k: usize,
    pub duration: f64,
    pub warmup: f64,
    pub conns: usize,
    pub seed: u64,
    pub data_seed: Option<u64>,
    pub records: usize,
    pub check: usize,
    /// The server's pid, to count its CPU time over the timed part (same host only).
    pub server_pid: Option<u32>,
}

/// Latencies in nanoseconds, up to a minute, 3 significant digits.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

/// What one connection measured in the timed part.
struct Tally {
    queries: u64,
    hist: Histogram<u64>,
    hits: u64,
    out_records: u64,
    sent: u64,
    received: u64,
    /// Folded from every result so the ranking cannot be optimised away.
    checksum: u64,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            queries: 0,
            hist: histogram(),
            hits: 0,
            out_records: 0,
            sent: 0,
            received: 0,
            checksum: 0,
        }
    }
}

struct Worker<'a> {
    a: &'a RunArgs,
    conn: Conn,
    rng: Rng,
    picker: FriendPicker,
    ids: Vec<u64>,
    req: Vec<u8>,
    k_ascii: Vec<u8>,
}

impl<'a> Worker<'a> {
    fn new(a: &'a RunArgs, index: usize) -> Result<Worker<'a>, Error> {
        let mut k_ascii = Vec::new();
        gen::push_decimal(&mut k_ascii, a.k as u64);
        Ok(Worker {
            a,
            conn: Conn::connect(a.server)?,
            rng: Rng::stream(a.seed, index as u64 + 1),
            picker: FriendPicker::new(a.users),
            ids: Vec::with_capacity(a.friends),
            req: Vec::with_capacity(a.friends * 12 + 64),
            k_ascii,
        })
    }

    fn pick(&mut self) {
        self.picker
            .pick(&mut self.rng, self.a.friends, &mut self.ids);
    }

    fn send_get(&mut self) -> Result<(), Error> {
        query::build_get(&mut self.req, &self.ids);
        Ok(self.conn.send(&self.req)?)
    }

    fn send_fget(&mut self) -> Result<(), Error> {
        query::build_fget(&mut self.req, &self.a.filter, &self.k_ascii, &self.ids);
        Ok(self.conn.send(&self.req)?)
    }

    fn rank_reply(&self) -> Vec<Record> {
        query::rank(self.conn.bytes(), self.conn.values(), self.a.k)
    }

    /// The filter's output in the reply buffer: exactly one VALUE, named after the filter.
    fn fget_output(&self) -> Result<Range<usize>, Error> {
        match self.conn.values() {
            [one] if self.conn.bytes()[one.key.clone()] == *self.a.filter.as_bytes() => {
                Ok(one.data.clone())
            }
            values => Err(format!(
                "fget answered {} values, want one named {}",
                values.len(),
                self.a.filter
            )
            .into()),
        }
    }

    /// One query computed both ways, compared; untimed.
    fn check_one(&mut self) -> Result<(), Error> {
        self.pick();
        self.send_get()?;
        self.conn.recv_reply()?;
        let bytes = self.conn.bytes();
        let values = self.conn.values();
        if values.len() != self.ids.len() {
            return Err(format!(
                "{} of {} friends missing: load the data first",
                self.ids.len() - values.len(),
                self.ids.len()
            )
            .into());
        }
        let mut key = Vec::new();
        let mut want = Vec::new();
        let mut all = Vec::new();
        for (span, &id) in values.iter().zip(&self.ids) {
            key.clear();
            gen::push_key(&mut key, id);
            if bytes[span.key.clone()] != key[..] {
                return Err(format!(
                    "reply out of order: {:?} where u:{id} was asked",
                    String::from_utf8_lossy(&bytes[span.key.clone()])
                )
                .into());
            }
            if let Some(seed) = self.a.data_seed {
                want.clear();
                gen::push_value(seed, id, self.a.records, &mut want);
                if bytes[span.data.clone()] != want[..] {
                    return Err(
                        format!("value of u:{id} is not what `load --seed {seed}` stored").into(),
                    );
                }
            }
            all.extend(records::iter(&bytes[span.data.clone()]));
        }
        let top = self.rank_reply();
        all.sort_by(records::newest_first);
        all.truncate(self.a.k);
        if top != all {
            return Err("client-side top-k differs from a full sort".into());
        }
        if self.a.mode == Mode::Fget {
            self.send_fget()?;
            self.conn.recv_reply()?;
            let out = self.fget_output()?;
            let flags = self.conn.values()[0].flags;
            if flags != 0 || self.conn.bytes()[out.clone()] != records::encode_all(&top)[..] {
                return Err(format!(
                    "fget {} (flags {flags}, {} bytes) differs from the client-side top-{} ({} bytes)",
                    self.a.filter,
                    out.len(),
                    self.a.k,
                    top.len() * RECORD_LEN
                )
                .into());
            }
        }
        Ok(())
    }

    /// One query as measured.
    fn timed_one(&mut self, t: &mut Tally) -> Result<(), Error> {
        self.pick();
        let start = Instant::now();
        match self.a.mode {
            Mode::Client => {
                self.send_get()?;
                self.conn.recv_reply()?;
                let top = self.rank_reply();
                t.hits += self.conn.values().len() as u64;
                t.out_records += top.len() as u64;
                t.checksum = top
                    .iter()
                    .fold(t.checksum, |c, r| c.rotate_left(5) ^ r.ts ^ r.article);
            }
            Mode::Fget => {
                self.send_fget()?;
                self.conn.recv_reply()?;
                let out = &self.conn.bytes()[self.fget_output()?];
                if !out.len().is_multiple_of(RECORD_LEN) || out.len() / RECORD_LEN > self.a.k {
                    return Err(format!(
                        "fget output of {} bytes is not at most {} records",
                        out.len(),
                        self.a.k
                    )
                    .into());
                }
                t.out_records += (out.len() / RECORD_LEN) as u64;
                t.checksum =
                    records::iter(out).fold(t.checksum, |c, r| c.rotate_left(5) ^ r.ts ^ r.article);
            }
        }
        t.hist.saturating_record(start.elapsed().as_nanos() as u64);
        t.queries += 1;
        Ok(())
    }
}

/// One connection's life: checks and warm-up, the barrier, then queries until `stop`.
fn connection(
    a: &RunArgs,
    index: usize,
    barrier: &Barrier,
    stop: &AtomicBool,
) -> Result<Tally, Error> {
    let ready = (|| {
        let mut w = Worker::new(a, index)?;
        for _ in 0..a.check {
            w.check_one()?;
        }
        let mut scratch = Tally::new();
        let warm_end = Instant::now() + Duration::from_secs_f64(a.warmup);
        while Instant::now() < warm_end {
            w.timed_one(&mut scratch)?;
        }
        w.conn.reset_counters();
        Ok::<_, Error>(w)
    })();
    if ready.is_err() {
        stop.store(true, Ordering::Relaxed);
    }
    // Every connection reaches the barrier, failed or not, so none waits forever.
    barrier.wait();
    let mut w = ready?;
    let mut t = Tally::new();
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = w.timed_one(&mut t) {
            stop.store(true, Ordering::Relaxed);
            return Err(e);
        }
    }
    t.sent = w.conn.sent;
    t.received = w.conn.received;
    Ok(t)
}

/// CPU time (user + system, all threads) of process `pid` so far, in microseconds, from
/// /proc/PID/stat: fields 14 and 15, counted after the `)` closing the command name, which
/// may itself hold spaces.
fn process_cpu_us(pid: u32) -> Result<f64, Error> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').ok_or("no ) in /proc/PID/stat")?.1;
    let mut fields = after.split_whitespace().skip(11);
    let mut tick = || {
        fields
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .ok_or("short /proc/PID/stat")
    };
    let ticks = tick()? + tick()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Ok(ticks as f64 * 1e6 / if hz > 0 { hz as f64 } else { 100.0 })
}

/// This process's user + system CPU time so far, in microseconds (all threads).
fn cpu_us() -> f64 {
    // SAFETY: getrusage only writes the struct we pass, which is plain data.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

pub fn run(a: &RunArgs) -> Result<(), Error> {
    if a.friends as u64 > a.users || a.friends == 0 {
        return Err(format!("--friends {} needs 1..=--users ({})", a.friends, a.users).into());
    }
    if a.conns == 0 || a.k == 0 {
        return Err("--conns and --k must be at least 1".into());
    }
    let barrier = Barrier::new(a.conns + 1);
    let stop = AtomicBool::new(false);
    let (tallies, secs, cpu, server_cpu) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..a.conns)
            .map(|i| {
                let (barrier, stop) = (&barrier, &stop);
                s.spawn(move || connection(a, i, barrier, stop))
            })
            .collect();
        barrier.wait();
        let server0 = a.server_pid.map(process_cpu_us).transpose();
        let (cpu0, t0) = (cpu_us(), Instant::now());
        let end = t0 + Duration::from_secs_f64(a.duration);
        // Sleep in slices so a connection that failed ends the run early.
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= end {
                break;
            }
            std::thread::sleep((end - now).min(Duration::from_millis(50)));
        }
        stop.store(true, Ordering::Relaxed);
        let tallies: Vec<_> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("connection thread panicked".into()))
            })
            .collect();
        let (secs, cpu) = (t0.elapsed().as_secs_f64(), cpu_us() - cpu0);
        let server = match (server0, a.server_pid.map(process_cpu_us).transpose()) {
            (Ok(Some(before)), Ok(Some(after))) => Ok(Some(after - before)),
            (Err(e), _) | (_, Err(e)) => Err(e),
            _ => Ok(None),
        };
        (tallies, secs, cpu, server)
    });
    let mut all = Tally::new();
    for t in tallies {
        let t = t?;
        all.queries += t.queries;
        all.hist
            .add(&t.hist)
            .map_err(|e| format!("histogram: {e:?}"))?;
        all.hits += t.hits;
        all.out_records += t.out_records;
        all.sent += t.sent;
        all.received += t.received;
        all.checksum ^= t.checksum;
    }
    if all.queries == 0 {
        return Err("no query completed".into());
    }
    println!("{}", report(a, &all, secs, cpu, server_cpu?));
    Ok(())
}

/// The result line: space-separated key=value pairs, easy to read from a shell or Python.
fn report(a: &RunArgs, t: &Tally, secs: f64, cpu_us: f64, server_cpu_us: Option<f64>) -> String {
    let q = t.queries as f64;
    let us = |quantile: f64| t.hist.value_at_quantile(quantile) as f64 / 1000.0;
    let mut line = format!(
        "mode={} filter={} users={} friends={} k={} conns={} secs={secs:.3} queries={} qps={:.1} \
         p50_us={:.1} p90_us={:.1} p99_us={:.1} p999_us={:.1} max_us={:.1} \
         sent_per_query={:.1} recv_per_query={:.1} client_cpu_us_per_query={:.2} out_records_per_query={:.2}",
        match a.mode {
            Mode::Client => "client",
            Mode::Fget => "fget",
        },
        if a.mode == Mode::Fget { a.filter.as_str() } else { "-" },
        a.users,
        a.friends,
        a.k,
        a.conns,
        t.queries,
        q / secs,
        us(0.5),
        us(0.9),
        us(0.99),
        us(0.999),
        t.hist.max() as f64 / 1000.0,
        t.sent as f64 / q,
        t.received as f64 / q,
        cpu_us / q,
        t.out_records as f64 / q,
    );
    if let Some(server) = server_cpu_us {
        line += &format!(" server_cpu_us_per_query={:.2}", server / q);
    }
    if a.mode == Mode::Client {
        line += &format!(" hits_per_query={:.2}", t.hits as f64 / q);
    }
    line += &format!(
        " checked={} checksum={:016x}",
        a.check * a.conns,
        t.checksum
    );
    line
}
