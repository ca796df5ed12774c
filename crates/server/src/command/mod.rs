//! The command layer: what a command does, whichever protocol carried it.
//!
//! ```text
//!   text   exec.rs            ─┐ parse into        ┌─ the store call (get, get-and-touch, peek, store)
//!   meta   meta.rs            ─┼─ a command call ──┤  every counter, `stats detail`, CAS and TTL rules,
//!   binary binary/storage.rs  ─┘                   │  the large-value decision (direct send, read.rs)
//!                                                  └─> Answer::Now(outcome)   encoded by the protocol
//!                                                      Answer::Later(Pending) finished later (below)
//! ```
//!
//! ```text
//!   read.rs     get gets gat gats touch, mg, binary GET/GETK/GAT/GATK/TOUCH; Direct
//!   write.rs    set add replace append prepend cas (text, in-place text, ms, binary SET/ADD/REPLACE)
//!   concat.rs   binary APPEND/PREPEND (with a CAS, memcached's exact size rule)
//!   delete.rs   delete, md (C, I), binary DELETE (with a CAS)
//!   arith.rs    incr decr, ma (C, N), binary INCREMENT/DECREMENT (with a CAS, create)
//!   flush.rs    flush_all, binary FLUSH
//! ```
//!
//! A protocol module parses a request, calls one function here, and encodes the answer in its
//! own reply format; it does not bump these commands' counters. A change to what `get` counts,
//! or a new counter, is one edit here. Store calls left outside, each protocol-only: meta's
//! `ma` T/t (touch after the delta, read the TTL back) and `me`, binary's delete after a
//! failed SET that carried a CAS, and the admin commands (cache_memlimit, crawler, metadump).
//!
//! Where memcached 1.6.18 itself counts a command differently by protocol (meta records no
//! `stats detail`; binary counts neither `store_no_memory` nor `store_too_large`), the caller
//! names its protocol ([`Proto`]) and the rule is written here, once, beside the others.
//!
//! # Pending answers
//! Every command answers through [`Answer`]. Today each answer is `Now`: the store is memory
//! and a read completes under its shard lock. A tier whose reads complete later (a flash read,
//! issue 37) answers `Later(Pending)`: the protocol keeps the reply's place in the
//! connection's output (replies leave in request order) and encodes the item when the read
//! completes, while the worker serves other connections. [`Pending`] has no value yet, so the
//! compiler proves no encoder is reached with one; giving it a variant makes every encoder
//! that must handle it a compile error until it does.

pub(crate) mod arith;
pub(crate) mod concat;
pub(crate) mod delete;
pub(crate) mod flush;
pub(crate) mod read;
pub(crate) mod write;

/// A command's answer: now, or once a read that cannot complete at once has (see the module
/// docs).
pub(crate) enum Answer<T> {
    Now(T),
    // Never built while Pending is empty: the flash tier (issue 37) builds it. Kept so that
    // every encoder already matches it (with `match pending {}`).
    #[allow(dead_code)]
    Later(Pending),
}

/// A read in flight (issue 37's flash tier). No store produces one yet: the type is empty,
/// so `Answer::Later` arms are `match pending {}`, checked by the compiler.
pub(crate) enum Pending {}

/// Which protocol carried a command, for the counting rules memcached applies per protocol.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Proto {
    Text,
    Meta,
    Binary,
}
