//! `fget <filter> <arglen> <key>*\r\n<args>\r\n`: run an installed filter over the keys'
//! values and reply with its output as one value named after the filter.
//!
//! ```text
//!   worker thread (the event loop)
//!   ├─ look the filter up (read lock for a map probe; an Arc is kept, no lock after)
//!   ├─ unknown filter, too many keys: the error reply, at once
//!   ├─ the call, briefly (Filter::call_brief): fill, run, reply, as below, at once; given up
//!   │  past 1 ms of CPU or 1 MiB of guest memory growth, then not tried for 10 ms (doubling
//!   │  while calls keep failing to be brief, up to 1 s)
//!   └─ else a job (command::Pending::Filter) holding the filter, the arguments and the keys;
//!      the connection keeps the reply's place and reads no further request meanwhile
//!   job pool thread (jobs.rs)
//!   ├─ fill: per key, store.get under that key's shard lock, copying the value straight
//!   │        into the filter's input (guest memory for WebAssembly); the lock is released
//!   │        before the next key
//!   ├─ run the filter with no lock held (deadline, memory and output caps: mnemo-filter)
//!   └─ VALUE <filter> <flags> <len>\r\n<output>\r\nEND\r\n   or   SERVER_ERROR filter <reason>
//!      back to the connection's worker, which puts it in the reply's place
//! ```
//!
//! Why both: a call on the pool costs two thread hand-offs (the job to a pool thread, the
//! reply back through the mailbox and a wake-up), more than a short filter's own run, and
//! under concurrency the queue ate calls' deadlines (issue 49: seed 001's feed at 0.58x the
//! client-side path). A call that is not short goes to the pool, so a neighbour on the same
//! worker waits for brief attempts (1-2 ms each), about one per filter per second once a
//! filter keeps failing them (eight in its first 1.3 s), never for a deadline.
//!
//! The values are read by the job, not when the request is parsed: the connection runs no
//! later request before the job is done, so the call sees the store as a sequential server
//! would (`fget k` then `set k` pipelined: the filter reads the old value), and no copy of
//! the values waits in a queue.
//!
//! Keys count as gets for the store (a read keeps an item from eviction like any get) and in
//! `stats detail`, but not in `cmd_get`/`get_hits`: those count what clients fetched, and an
//! fget's values never leave the server. `stats filters` counts calls per filter.

use std::sync::Arc;

use mnemo_proto::reply::{line, value_header};
use mnemo_proto::text::Keys;
use mnemo_proto::ErrorReply;

use mnemo_store::{Prefetch, PREFETCH_VALUE};

use crate::admin::detail::Event;
use crate::admin::stats::Counters;
use crate::command::{Answer, Deferred, Lane, Pending};
use crate::offload::mailbox::Answered;
use crate::Shared;

/// Keys between the lookups' prefetch stages (see `Call::run`). Measured at 1M users (seed
/// 001, wasm fget, one worker): 6, 8, 10 and 14 were within the machine's noise of each other.
const AHEAD: usize = 10;

/// Past its deadline, how long a WebAssembly call has before the watchdog answers for it: the
/// epoch that interrupts it ticks once a millisecond, so an interruptible call times out by
/// itself within about a tick; this leaves that reply time to come first.
const DEADLINE_SLACK: std::time::Duration = std::time::Duration::from_millis(2);

/// One filter call, ready to run off the event loop: what it needs of the request, owned.
pub struct Call {
    filter: Arc<mnemo_filter::Filter>,
    name: Box<[u8]>,
    args: Box<[u8]>,
    /// The keys as the request named them, separated by single spaces.
    keys: Box<[u8]>,
    nkeys: u32,
}

/// The request's checks, then the call as a job: `Now` once an error reply is written.
// Out of line: kept out of the text protocol's execute_from (the get and set hot path).
#[inline(never)]
pub fn execute(
    filter: &[u8],
    args: &[u8],
    keys: Keys<'_>,
    sh: &Shared,
    out: &mut Vec<u8>,
) -> Answer<(), Pending> {
    let Some(f) = sh.filters.get(filter) else {
        ErrorReply::UnknownFilter.write(out);
        return Answer::Now(());
    };
    let mut n = 0;
    let mut joined = Vec::new();
    for k in keys.iter() {
        n += 1;
        if n > sh.config.filter_max_keys {
            ErrorReply::TooManyKeys.write(out);
            return Answer::Now(());
        }
        if !joined.is_empty() {
            joined.push(b' ');
        }
        joined.extend_from_slice(k);
    }
    let call = Call {
        filter: f,
        name: filter.into(),
        args: args.into(),
        keys: joined.into(),
        nkeys: n as u32,
    };
    let mark = out.len();
    let result = call
        .filter
        .call_brief(&call.args, call.nkeys, &mut call.fill(sh), out);
    match result {
        Some(r) => {
            call.reply(sh, r, out, mark);
            Answer::Now(())
        }
        None => Answer::Later(Box::new(call)),
    }
}

impl Deferred for Call {
    fn lane(&self) -> Lane {
        Lane::Jobs
    }

    /// The call, on a job pool thread: its encoded reply. A WebAssembly call's reply leaves by
    /// its deadline, counted from its submission, whatever the queue or the guest does
    /// (offload/jobs.rs); if the watchdog answered first (`claim` says so), the call counts
    /// as that timeout.
    fn run(
        self: Box<Self>,
        sh: &Shared,
        _c: &Counters,
        claim: &dyn Fn() -> bool,
    ) -> (Vec<u8>, Answered) {
        let mut out = Vec::new();
        let result = self.filter.call_answered(
            &self.args,
            self.nkeys,
            &mut self.fill(sh),
            &mut out,
            &|| !claim(),
        );
        self.reply(sh, result, &mut out, 0);
        (out, Answered::All)
    }

    /// How long after its submission a WebAssembly call's reply is due, and that reply
    /// (`SERVER_ERROR filter timeout`): the job pool's watchdog answers with it if the call is
    /// still queued or running then (jobs.rs). Native calls are not interrupted: None.
    ///
    /// Counted from the submission, not from the request: a brief attempt given up before it
    /// (at most two epoch ticks, 1-2 ms) comes on top. So dues grow along the pool's queue,
    /// which its watchdog relies on.
    fn deadline(&self, sh: &Shared) -> Option<(std::time::Duration, Vec<u8>)> {
        if self.filter.spec().kind != mnemo_filter::FilterKind::Wasm {
            return None;
        }
        let mut late = Vec::new();
        line(
            &mut late,
            format!("SERVER_ERROR filter {}", mnemo_filter::FilterError::Timeout).as_bytes(),
        );
        Some((sh.config.filter_limits.deadline + DEADLINE_SLACK, late))
    }

    /// The watchdog answered the call before it ran: `stats filters` counts the timeout.
    fn answered_late(&self) {
        self.filter.count_timeout();
    }
}

impl Call {
    /// What feeds the filter its input: the keys' values, read from the store in order.
    fn fill<'a>(&'a self, sh: &'a Shared) -> impl FnMut(&mut dyn mnemo_filter::InputSink) + 'a {
        let keys = Keys::new(&self.keys);
        let now = sh.clock.now();
        move |sink: &mut dyn mnemo_filter::InputSink| {
            // Walk ahead of the lookups in stages (mnemo_store::Prefetch), AHEAD keys apart, so
            // a large cache's misses (index bucket, overflow bucket, item, per key) overlap
            // instead of coming one after another.
            let stages = [Prefetch::Bucket, Prefetch::Home, Prefetch::Chain];
            let mut ahead = [keys.iter(), keys.iter(), keys.iter()];
            for (i, it) in ahead.iter_mut().enumerate() {
                it.by_ref()
                    .take((stages.len() - i) * AHEAD)
                    .for_each(|k| sh.store.prefetch(k, stages[i], PREFETCH_VALUE));
            }
            for key in keys.iter() {
                for (it, &stage) in ahead.iter_mut().zip(&stages) {
                    if let Some(k) = it.next() {
                        sh.store.prefetch(k, stage, PREFETCH_VALUE);
                    }
                }
                let found = sh.store.get(key, now, |it| sink.value(it.flags, it.value));
                sh.detail.record(
                    key,
                    sh.config.prefix_delimiter,
                    Event::Get {
                        hit: found.is_hit(),
                    },
                );
                if !found.is_hit() {
                    sink.missing();
                }
            }
        }
    }

    /// The reply to the call, in `out` from `mark` on, where a success left the filter's
    /// output: its header goes in front once the length is known (a small move: outputs are
    /// bounded by --filter-output-max).
    fn reply(
        &self,
        sh: &Shared,
        result: Result<u32, mnemo_filter::FilterError>,
        out: &mut Vec<u8>,
        mark: usize,
    ) {
        match result {
            Ok(flags) => {
                let mut header = Vec::with_capacity(32 + self.name.len());
                value_header(&mut header, &self.name, flags, out.len() - mark, None);
                out.splice(mark..mark, header);
                out.extend_from_slice(b"\r\nEND\r\n");
            }
            Err(e) => {
                if sh.verbosity.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                    eprintln!(
                        "mnemod: filter {}: {e}",
                        String::from_utf8_lossy(&self.name)
                    );
                }
                line(out, format!("SERVER_ERROR filter {e}").as_bytes());
            }
        }
    }
}

/// `stats filters`: totals, then each installed filter's kind, path and counters.
pub fn stats(sh: &Shared, out: &mut Vec<u8>) {
    use mnemo_proto::reply::stat;
    let t = sh.filters.totals();
    stat(out, "filter_calls", t.calls);
    stat(out, "filter_errors", t.errors);
    stat(out, "filter_timeouts", t.timeouts);
    stat(out, "filter_out_of_memory", t.out_of_memory);
    stat(out, "filter_brief", t.brief);
    stat(out, "filter_usec", t.usec);
    for (spec, s) in sh.filters.stats() {
        let n = &spec.name;
        stat(out, &format!("{n}:kind"), spec.kind.as_str());
        stat(out, &format!("{n}:path"), spec.path.display());
        stat(out, &format!("{n}:calls"), s.calls);
        stat(out, &format!("{n}:errors"), s.errors);
        stat(out, &format!("{n}:timeouts"), s.timeouts);
        stat(out, &format!("{n}:out_of_memory"), s.out_of_memory);
        stat(out, &format!("{n}:brief"), s.brief);
        stat(out, &format!("{n}:usec"), s.usec);
    }
    line(out, b"END");
}
