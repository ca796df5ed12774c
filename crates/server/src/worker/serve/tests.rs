//! The connection layer's tests, on a scripted transport.

use super::*;
use crate::Config;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

/// A loop whose events the test scripts: each poll marks the slots it is given, and a
/// closed connection is held (as io_uring holds one until its I/O ends) while `hold`.
#[derive(Default)]
struct Script {
    polls: VecDeque<(bool, Vec<usize>)>,
    hold: bool,
    /// (slot, generation, closed) of every settle.
    settled: Vec<(usize, u32, bool)>,
}

impl Transport for Script {
    type Io = Stream;

    fn attach(&mut self, sock: Stream, _i: usize, _gen: u32) -> std::io::Result<Stream> {
        Ok(sock)
    }

    fn poll(&mut self, _wait: Option<Duration>, slots: &mut Slots<Stream>) -> bool {
        let (woken, marks) = self.polls.pop_front().unwrap_or_default();
        for i in marks {
            slots.mark(i, true);
        }
        woken
    }

    fn settle(&mut self, i: usize, gen: u32, _io: &mut Stream, closed: bool) -> bool {
        self.settled.push((i, gen, closed));
        closed && !self.hold
    }
}

fn worker(config: Config) -> (Worker<Script>, std::sync::mpsc::Sender<Stream>) {
    let sh = Arc::new(Shared::new(Config {
        memory_limit: 8 << 20,
        threads: 1,
        ..config
    }));
    with_shared(sh).0
}

/// A worker over `sh`, and the poll its mailbox's waker reports to (the job tests wait on
/// it as the event loop would).
fn with_shared(sh: Arc<Shared>) -> ((Worker<Script>, std::sync::mpsc::Sender<Stream>), mio::Poll) {
    let (tx, rx) = std::sync::mpsc::channel();
    let counters = sh.counters[0].clone();
    let poll = mio::Poll::new().unwrap();
    let waker = mio::Waker::new(poll.registry(), mio::Token(7)).unwrap();
    let mailbox = Arc::new(Mailbox::new(move || waker.wake()));
    (
        (
            Worker::new(Script::default(), sh, counters, rx, mailbox),
            tx,
        ),
        poll,
    )
}

/// A worker whose server has one WebAssembly filter, `echo`: its output is its arguments. It
/// grows its memory by 2 MiB first, more than a brief call may (mnemo_filter::BRIEF_GROWTH),
/// so every call is a job on the pool.
fn echo_worker() -> ((Worker<Script>, std::sync::mpsc::Sender<Stream>), mio::Poll) {
    let path = std::env::temp_dir().join(format!(
        "mnemod-serve-echo-{}-{:?}.wat",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(
        &path,
        r#"(module (memory (export "memory") 1)
  (func (export "mnemo_abi_version") (result i32) (i32.const 1))
  (func (export "mnemo_filter") (param $p i32) (param $n i32) (result i32)
(drop (memory.grow (i32.const 32)))
(i32.store (i32.const 16) (i32.const 0))
(i32.store (i32.const 20) (i32.const 0))
(i32.store (i32.const 24) (i32.add (local.get $p) (i32.const 4)))
(i32.store (i32.const 28) (i32.load (local.get $p)))
(i32.const 16)))"#,
    )
    .unwrap();
    // A deadline no loaded machine reaches: these tests are about where replies go.
    let mut config = Config {
        memory_limit: 8 << 20,
        threads: 1,
        job_threads: 1,
        ..Config::default()
    };
    config.filter_limits.deadline = Duration::from_secs(5);
    let spec = mnemo_filter::FilterSpec {
        name: "echo".into(),
        path: path.clone(),
        kind: mnemo_filter::FilterKind::Wasm,
    };
    let filters = mnemo_filter::FilterHost::new(config.filter_limits, vec![spec]).unwrap();
    let _ = std::fs::remove_file(&path);
    with_shared(Arc::new(Shared::build(
        config,
        crate::auth::Credentials::default(),
        filters,
    )))
}

/// Wait (as the event loop does) until the job pool wakes the worker.
fn wait_for_wake(poll: &mut mio::Poll) {
    let mut events = mio::Events::with_capacity(4);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while events.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the job pool never woke the worker"
        );
        poll.poll(&mut events, Some(Duration::from_secs(1)))
            .unwrap();
    }
}

/// Everything the client can read now, without waiting.
fn read_now(c: &mut UnixStream) -> Vec<u8> {
    c.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    let mut buf = [0; 256];
    while let Ok(n) = c.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    c.set_nonblocking(false).unwrap();
    got
}

/// A client, its server end sent to the worker as the accept thread would.
fn connect(w: &Worker<Script>, tx: &std::sync::mpsc::Sender<Stream>) -> UnixStream {
    let (client, server) = UnixStream::pair().unwrap();
    server.set_nonblocking(true).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    w.sh.conn_counts.curr.fetch_add(1, Relaxed);
    tx.send(Stream::Unix(mio::net::UnixStream::from_std(server)))
        .unwrap();
    client
}

fn read_some(c: &mut UnixStream) -> Vec<u8> {
    let mut buf = [0; 256];
    let n = c.read(&mut buf).unwrap();
    buf[..n].to_vec()
}

fn round(w: &mut Worker<Script>, woken: bool, marks: &[usize]) {
    w.io.polls.push_back((woken, marks.to_vec()));
    let mut tick = w.sh.clock.now();
    w.round(0, &mut tick);
}

#[test]
fn an_adopted_connection_takes_a_turn_at_once_and_again_when_marked() {
    let (mut w, tx) = worker(Config::default());
    let mut c = connect(&w, &tx);
    c.write_all(b"version\r\n").unwrap();
    round(&mut w, true, &[]);
    assert_eq!(read_some(&mut c), b"VERSION 1.6.45\r\n");
    c.write_all(b"version\r\n").unwrap();
    round(&mut w, false, &[0]);
    assert_eq!(read_some(&mut c), b"VERSION 1.6.45\r\n");
    assert_eq!(w.sh.conn_counts.curr.load(Relaxed), 1);
}

#[test]
fn a_slot_is_reused_only_once_its_transport_lets_go_and_with_a_new_generation() {
    let (mut w, tx) = worker(Config::default());
    w.io.hold = true;
    let mut c = connect(&w, &tx);
    round(&mut w, true, &[]);
    c.write_all(b"quit\r\n").unwrap();
    round(&mut w, false, &[0]);
    assert_eq!(w.sh.conn_counts.curr.load(Relaxed), 0, "closed at once");
    assert!(
        w.slots.conn_mut(0).is_some(),
        "held while its transport is busy with it"
    );
    let _d = connect(&w, &tx);
    round(&mut w, true, &[]);
    assert_eq!(w.slots.slots.len(), 2, "the held slot is not reused");
    w.io.hold = false;
    round(&mut w, false, &[0]);
    assert!(w.slots.conn_mut(0).is_none(), "freed once let go");
    assert_eq!(read_some(&mut c), b"", "and its descriptor closed");
    let _e = connect(&w, &tx);
    round(&mut w, true, &[]);
    assert_eq!(w.slots.slots.len(), 2, "the freed slot is reused");
    assert_eq!(w.slots.slots[0].gen, 3, "under a new generation");
    assert!(w.io.settled.contains(&(0, 1, true)) && w.io.settled.contains(&(0, 3, false)));
}

#[test]
fn a_connection_over_its_request_budget_yields_and_is_driven_next_round() {
    let (mut w, tx) = worker(Config {
        reqs_per_event: 1,
        ..Config::default()
    });
    let mut c = connect(&w, &tx);
    c.write_all(b"version\r\nversion\r\nversion\r\n").unwrap();
    round(&mut w, true, &[]);
    assert_eq!(w.ready, [0], "one request served, the rest waits");
    round(&mut w, false, &[]);
    round(&mut w, false, &[]);
    let mut got = Vec::new();
    while got.len() < 3 * b"VERSION 1.6.45\r\n".len() {
        got.extend(read_some(&mut c));
    }
    assert!(w.ready.is_empty());
    assert_eq!(w.counters.conn_yields.load(Relaxed), 2);
}

#[test]
fn a_job_holds_its_place_and_later_replies_queue_behind_it() {
    let ((mut w, tx), mut poll) = echo_worker();
    let mut c = connect(&w, &tx);
    // Adopted first: a round the accept thread woke also delivers finished jobs.
    round(&mut w, true, &[]);
    c.write_all(
        b"set k 0 0 1\r\nv\r\nfget echo 2 k\r\nhi\r\nget k\r\nfget echo 1 k\r\nx\r\nversion\r\n",
    )
    .unwrap();
    round(&mut w, false, &[0]);
    // The reply before the job left; nothing after it was even parsed.
    assert_eq!(read_now(&mut c), b"STORED\r\n");
    assert!(
        !w.slots.conn_mut(0).unwrap().is_idle(),
        "a job in flight is no idleness"
    );
    // Turns while the job runs (an event for the connection) answer nothing more.
    round(&mut w, false, &[0]);
    assert_eq!(read_now(&mut c), b"");
    wait_for_wake(&mut poll);
    round(&mut w, true, &[]);
    assert_eq!(
        read_now(&mut c),
        b"VALUE echo 0 2\r\nhi\r\nEND\r\nVALUE k 0 1\r\nv\r\nEND\r\n"
    );
    wait_for_wake(&mut poll);
    round(&mut w, true, &[]);
    assert_eq!(
        read_now(&mut c),
        b"VALUE echo 0 1\r\nx\r\nEND\r\nVERSION 1.6.45\r\n"
    );
    assert!(w.slots.conn_mut(0).unwrap().is_idle());
}

#[test]
fn a_reply_for_a_closed_connection_never_reaches_the_next_one_in_its_slot() {
    let ((mut w, tx), mut poll) = echo_worker();
    let mut c = connect(&w, &tx);
    round(&mut w, true, &[]);
    c.write_all(b"fget echo 3 k\r\nold\r\n").unwrap();
    round(&mut w, false, &[0]);
    w.close(0);
    assert_eq!(read_some(&mut c), b"", "closed with its job in flight");
    wait_for_wake(&mut poll);
    let mut d = connect(&w, &tx);
    round(&mut w, true, &[]);
    assert_eq!(
        (w.slots.slots.len(), w.slots.slots[0].gen),
        (1, 2),
        "the slot is reused"
    );
    d.write_all(b"version\r\n").unwrap();
    round(&mut w, false, &[0]);
    assert_eq!(
        read_some(&mut d),
        b"VERSION 1.6.45\r\n",
        "and the old reply was dropped"
    );
}

#[test]
fn idle_kicks_close_only_connections_without_a_recent_command() {
    let (mut w, tx) = worker(Config::default());
    let mut idle = connect(&w, &tx);
    let mut partial = connect(&w, &tx);
    let mut busy = connect(&w, &tx);
    partial.write_all(b"get som").unwrap();
    round(&mut w, true, &[]);
    let later = w.sh.clock.now() + 10;
    busy.write_all(b"version\r\n").unwrap();
    w.slots.conn_mut(2).unwrap().set_last_active(later);
    w.kick_idle(later, 5);
    assert_eq!(read_some(&mut idle), b"");
    assert_eq!(
        read_some(&mut partial),
        b"",
        "a half-sent command is no activity"
    );
    assert_eq!(w.counters.idle_kicks.load(Relaxed), 2);
    round(&mut w, false, &[2]);
    assert_eq!(read_some(&mut busy), b"VERSION 1.6.45\r\n");
}

#[test]
fn buffers_are_taken_when_input_arrives_and_given_back_by_the_sweep_once_idle() {
    let (mut w, tx) = worker(Config::default());
    let bytes = |w: &Worker<Script>| w.counters.read_buf_bytes.load(Relaxed);
    let mut idle = connect(&w, &tx);
    let mut busy = connect(&w, &tx);
    let mut partial = connect(&w, &tx);
    round(&mut w, true, &[]);
    assert_eq!(
        bytes(&w),
        0,
        "a connection that sent nothing holds no buffer"
    );
    idle.write_all(b"version\r\n").unwrap();
    busy.write_all(b"version\r\n").unwrap();
    partial.write_all(b"get som").unwrap();
    round(&mut w, false, &[0, 1, 2]);
    assert_eq!(read_some(&mut idle), b"VERSION 1.6.45\r\n");
    assert_eq!(read_some(&mut busy), b"VERSION 1.6.45\r\n");
    assert_eq!(bytes(&w), 3 * 16 * 1024);
    // Seconds later: `busy` completed a command just now, `partial` is half-way through one.
    let later = w.sh.clock.now() + BUF_IDLE_SECS;
    w.slots.conn_mut(1).unwrap().set_last_active(later);
    w.sweep(later);
    assert_eq!(
        bytes(&w),
        2 * 16 * 1024,
        "only the idle connection's buffers went back"
    );
    assert_eq!(
        w.holding, 2,
        "the busy and the partial ones are swept again later"
    );
    assert!(w.sweep_due.load(Relaxed));
    // The swept connection takes buffers again with its next request; the partial one
    // kept its bytes.
    idle.write_all(b"version\r\n").unwrap();
    partial.write_all(b"e\r\n").unwrap();
    round(&mut w, false, &[0, 2]);
    assert_eq!(read_some(&mut idle), b"VERSION 1.6.45\r\n");
    assert_eq!(read_some(&mut partial), b"END\r\n");
    assert_eq!(bytes(&w), 3 * 16 * 1024);
}

#[test]
fn after_many_closes_the_sweep_drops_the_free_slots_past_the_last_in_use() {
    let (mut w, tx) = worker(Config::default());
    let mut kept = connect(&w, &tx);
    let wave: Vec<_> = (0..TRIM_AFTER).map(|_| connect(&w, &tx)).collect();
    round(&mut w, true, &[]);
    assert_eq!(
        (w.slots.slots.len(), w.sh.conn_counts.structs.load(Relaxed)),
        (TRIM_AFTER + 1, TRIM_AFTER as u64 + 1)
    );
    for i in 1..=TRIM_AFTER {
        w.close(i);
    }
    drop(wave);
    w.sweep(w.sh.clock.now());
    assert_eq!(
        (w.slots.slots.len(), w.slots.free.len()),
        (1, 0),
        "only the slot in use is left"
    );
    assert_eq!(w.sh.conn_counts.structs.load(Relaxed), 1);
    // A new connection gets a slot made anew, under a generation never used before (a
    // job's reply for a closed connection names its slot by index and generation).
    let mut next = connect(&w, &tx);
    round(&mut w, true, &[]);
    assert_eq!(
        (w.slots.slots.len(), w.slots.slots[1].gen),
        (2, TRIM_AFTER as u32 + 2)
    );
    next.write_all(b"version\r\n").unwrap();
    kept.write_all(b"version\r\n").unwrap();
    round(&mut w, false, &[0, 1]);
    assert_eq!(read_some(&mut next), b"VERSION 1.6.45\r\n");
    assert_eq!(read_some(&mut kept), b"VERSION 1.6.45\r\n");
}
