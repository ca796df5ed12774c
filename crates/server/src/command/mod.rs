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
//! [`Pending`] job that completes off the event loop (jobs.rs runs it on the job pool and
//! hands the finished reply back to the connection's worker). The connection keeps the
//! reply's place in its output: replies leave in request order, and it parses none of its
//! later requests until the job is done (so a later `set` cannot change what the job
//! reads), while the worker serves its other connections.
//!
//! `Answer`'s second parameter says whether a command can answer later at all. It is
//! [`Never`] (an empty type) for every command that completes under its shard lock, so
//! their encoders' `Later` arms are `match pending {}`, proven unreachable by the compiler;
//! a command that can defer returns `Answer<T, Pending>` and its encoder must handle the
//! job. A flash read (issue 37) is the second kind: [`read::get`] answers `Later` when the
//! value is on flash, the protocol wraps what its reply needs in [`Pending::FlashRead`], and
//! the read runs on the flash I/O pool (flashio.rs) with the same wake-up and ordering.

pub(crate) mod arith;
pub(crate) mod batch;
pub(crate) mod concat;
pub(crate) mod delete;
pub(crate) mod flush;
pub(crate) mod read;
pub(crate) mod write;

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

/// Work that completes off the event loop (jobs.rs). Each variant knows how to run itself and
/// to encode its reply in the protocol that asked for it.
pub(crate) enum Pending {
    /// An `fget`'s filter call: reading its keys, the call, the reply (fget.rs).
    Filter(crate::fget::Call),
    /// A get whose value is on flash: read off the event loop, on the flash I/O pool
    /// (flashio.rs; jobs.rs routes it there, never behind a filter call).
    FlashRead(crate::offload::flashio::Read),
    /// `watch`: the connection is a watcher from now on and this job never completes; the
    /// pool attaches the connection to its watcher instead of running it (watch.rs).
    Watch(crate::watch::Handle),
}

impl Pending {
    /// On the worker, before the job is submitted: the requests pipelined after the one that
    /// made it join it, where the job can answer them (a flash read's batch: flashio.rs
    /// `Read::gather`); `taken` gets each one's length. Other jobs take none.
    pub fn gather(
        &mut self,
        input: &[u8],
        limits: &mnemo_proto::text::Limits,
        sh: &crate::Shared,
        budget: &mut usize,
        taken: &mut Vec<usize>,
    ) {
        if let Pending::FlashRead(read) = self {
            read.gather(input, limits, sh, budget, taken);
        }
    }

    /// Run the job (on a pool thread) and return its encoded reply; `watch` bounds when the
    /// reply leaves (jobs.rs).
    pub fn run(self, sh: &crate::Shared, watch: &crate::offload::jobs::Watch<'_>) -> Vec<u8> {
        match self {
            Pending::Filter(call) => call.run(sh, watch),
            Pending::FlashRead(_) => {
                unreachable!("jobs.rs routes flash reads to the flash I/O pool")
            }
            Pending::Watch(_) => unreachable!("jobs.rs attaches a watcher, it runs nothing"),
        }
    }
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pending::Filter(_) => f.write_str("Pending::Filter"),
            Pending::FlashRead(r) => write!(f, "Pending::FlashRead({r:?})"),
            Pending::Watch(_) => f.write_str("Pending::Watch"),
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
