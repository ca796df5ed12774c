//! The command layer: what a command does, whichever protocol carried it.
//!
//! ```text
//!   text   protocol/text.rs            ─┐ parse into        ┌─ the store call (get, get-and-touch, peek, store)
//!   meta   protocol/meta.rs            ─┼─ a command call ──┤  every counter, `stats detail`, CAS and TTL rules,
//!   binary protocol/binary/storage.rs  ─┘                   │  the large-value decision (direct send, read.rs)
//!                                                           └─> Answer::Now(outcome)   encoded by the protocol
//!                                                               Answer::Later(Pending) finished later (below)
//! ```
//!
//! ```text
//!   read.rs     get gets gat gats touch, mg, me, binary GET/GETK/GAT/GATK/TOUCH; Direct
//!   write.rs    set add replace append prepend cas (text, in-place text, ms, binary SET/ADD/REPLACE)
//!   concat.rs   binary APPEND/PREPEND (with a CAS, memcached's exact size rule)
//!   delete.rs   delete, md (C, I), binary DELETE (with a CAS)
//!   arith.rs    incr decr, ma (C, N), binary INCREMENT/DECREMENT (with a CAS, create)
//!   flush.rs    flush_all, binary FLUSH
//!   batch.rs    a get deferred to flash and the gets gathered after it, answered together
//! ```
//!
//! A protocol module parses a request, calls one function here, and encodes the answer in its
//! own reply format; it does not bump these commands' counters. A change to what `get` counts,
//! or a new counter, is one edit here. Store calls left outside, each protocol-only: the admin
//! commands (cache_memlimit, crawler, metadump).
//!
//! Where memcached 1.6.18 itself counts a command differently by protocol (meta records no
//! `stats detail`; binary counts neither `store_no_memory` nor `store_too_large`), the caller
//! names its protocol ([`Proto`]) and the rule is written here, once, beside the others.
//!
//! # Pending answers
//! Every command answers through [`Answer`]: `Now` with its outcome, or `Later` with a
//! [`Pending`] job that completes off the event loop (a pool of offload/ runs it and hands
//! the finished reply back to the connection's worker). The connection keeps the
//! reply's place in its output: replies leave in request order, and it parses none of its
//! later requests until the job is done (so a later `set` cannot change what the job
//! reads), while the worker serves its other connections.
//!
//! `Answer`'s second parameter says whether a command can answer later at all. It is
//! [`Never`] (an empty type) for every command that completes under its shard lock, so
//! their encoders' `Later` arms are `match pending {}`, proven unreachable by the compiler;
//! a command that can defer returns `Answer<T, Pending>` and its encoder must handle the
//! job. A flash read (issue 37) is the second kind: [`read::get`] answers `Later` when the
//! value is on flash, the protocol wraps what its reply needs in a flash batch (batch.rs),
//! and the read runs on the flash I/O pool (offload/flashio.rs) with the same wake-up and
//! ordering. A job is a [`Deferred`]: it says which pool runs it ([`Lane`]), how it runs,
//! its deadline if any, and which pipelined requests it can take along; the pools and the
//! connection know it by that trait only.

pub(crate) mod arith;
pub(crate) mod batch;
pub(crate) mod concat;
pub(crate) mod delete;
pub(crate) mod flush;
pub(crate) mod read;
pub(crate) mod write;

use crate::offload::mailbox::Answered;

/// A command's answer: now, or once a job run off the event loop has finished (see the module
/// docs). `P` is [`Never`] for commands that always answer now.
pub(crate) enum Answer<T, P = Never> {
    Now(T),
    // Never built where P is Never; kept so that every encoder already matches it.
    #[allow(dead_code)]
    Later(P),
}

/// No value: the `P` of commands that cannot answer later.
pub(crate) enum Never {}

/// Work that completes off the event loop: what a protocol or a command fills in (a filter
/// call, fget.rs; a flash batch, batch.rs), run by the pool it names, its reply handed back
/// to the connection's worker (offload/). It names none of its callers' types: the pools and
/// the connection see only this.
pub(crate) trait Deferred: Send {
    /// The pool that runs it.
    fn lane(&self) -> Lane;

    /// On a thread of that pool: the encoded reply, and how much of the requests the job took
    /// it answers. `c` is the thread's counters block (a job pool thread's is its own, not
    /// summed: a filter call counts nothing there); `claim`, asked once when a job with a
    /// deadline is done, says whether its own reply is still wanted (offload/jobs.rs).
    fn run(
        self: Box<Self>,
        sh: &crate::Shared,
        c: &crate::admin::stats::Counters,
        claim: &dyn Fn() -> bool,
    ) -> (Vec<u8>, Answered);

    /// How long after its submission the reply is due, and the reply sent if it is not done
    /// by then (a WebAssembly filter call: `SERVER_ERROR filter timeout`). None: no deadline.
    fn deadline(&self, _sh: &crate::Shared) -> Option<(std::time::Duration, Vec<u8>)> {
        None
    }

    /// The deadline's reply was sent before the job ran: count it.
    fn answered_late(&self) {}

    /// On the worker, before the job is submitted: the requests pipelined after the one that
    /// made it join it, where the job can answer them (a flash batch, batch.rs); `taken` gets
    /// each one's length. By default a job takes none.
    fn gather(
        &mut self,
        _input: &[u8],
        _limits: &mnemo_proto::text::Limits,
        _sh: &crate::Shared,
        _budget: &mut usize,
        _taken: &mut Vec<usize>,
    ) {
    }
}

/// The pools a [`Deferred`] can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    /// The job pool (--job-threads): filter calls.
    Jobs,
    /// The flash I/O pool (-o ext_threads): never behind a filter call.
    FlashIo,
}

/// A job: work that completes off the event loop (see the module docs).
pub(crate) type Pending = Box<dyn Deferred>;

/// What the connection does after a request (every protocol answers with it).
pub enum Next {
    Continue,
    /// Discard this many bytes of input (the data of a refused storage command), then send
    /// the reply, if any: memcached answers only once the data is gone.
    Swallow(usize, Option<mnemo_proto::ErrorReply>),
    /// Close once the pending output is written.
    Close,
    /// Stop the server (`shutdown` with -A).
    Shutdown,
    /// Write pending output now (`mn`, which memcached documents as forcing a writeback).
    Flush,
    /// A multi-get produced a full output buffer after this many keys: write, then run the
    /// same request again from that key on (the request stays unconsumed meanwhile).
    Resume(usize),
    /// `lru_crawler metadump`: the connection streams the dump, one store batch at a time
    /// while its unsent output is small, before it reads the next request.
    Metadump(Box<crate::admin::crawler::Metadump>),
    /// The reply comes from a job run off the event loop (the module docs, "Pending
    /// answers"): the connection keeps its place in the output and parses nothing more until
    /// it is done.
    Later(Pending),
    /// `watch`: the connection is a watcher from now on (watch.rs); its worker attaches it.
    Watch(crate::watch::Handle),
}

impl std::fmt::Debug for Next {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Next::Continue => f.write_str("Continue"),
            Next::Swallow(n, r) => write!(f, "Swallow({n}, {r:?})"),
            Next::Close => f.write_str("Close"),
            Next::Shutdown => f.write_str("Shutdown"),
            Next::Flush => f.write_str("Flush"),
            Next::Resume(k) => write!(f, "Resume({k})"),
            Next::Metadump(_) => f.write_str("Metadump"),
            Next::Later(j) => write!(f, "Later({:?})", j.lane()),
            Next::Watch(_) => f.write_str("Watch"),
        }
    }
}

/// Which protocol carried a command, for the counting rules memcached applies per protocol.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Proto {
    Text,
    Meta,
    Binary,
}
