//! The binary protocol (chosen per connection when its first byte is 0x80), with SASL PLAIN.
//!
//! ```text
//!   step(input):  skipping a refused value?  -> consume up to `skip` bytes
//!                 proto::binary::frame       -> Incomplete / BadMagic (close) / Inconsistent (0x81, close)
//!                 -S and not authenticated   -> 0x20 "Auth failure.", close   (VERSION and SASL_* pass)
//!                 proto::binary::request     -> Incomplete / Invalid (0x04, close) / Unknown (0x81, skip value)
//!                 execute                    -> reply appended to `out` (or not: quiet opcodes)
//! ```
//!
//! Each step handles at most one request. Replies are only appended to the connection's
//! output; the connection writes every reply of a batch at once, so a pipeline of quiet
//! requests closed by a NOOP costs one write, as in memcached (where NOOP forces the flush).
//! Every answer, error body and close was checked against memcached 1.6.18; the few places
//! where mnemod deliberately differs say so where they are handled.

mod sasl;
mod stat;
mod storage;

use std::sync::atomic::Ordering::Relaxed;

use mnemo_proto::binary::{self as bin, opcode, Frame, LargeOp, Parsed, Request, Status, StoreOp};
use mnemo_proto::text::Limits;
use mnemo_store::Time;

use crate::admin::stats::Counters;
use crate::command::Answer;
use crate::Shared;

/// Per-connection state of the binary protocol.
#[derive(Default)]
pub struct BinSession {
    /// -S: SASL_AUTH succeeded on this connection.
    pub authenticated: bool,
    /// SASL_AUTH answered "continue"; the credentials come with SASL_STEP.
    sasl_pending: bool,
    /// Input bytes still to discard (the value of a refused request).
    skip: u64,
    /// The job of a request answered later (a GET whose value is on flash), until the
    /// connection takes it ([`BinNext::Later`]).
    pub job: Option<crate::command::Pending>,
}

/// What the connection does after one step.
#[derive(Debug, PartialEq, Eq)]
pub enum BinNext {
    /// This many input bytes were handled (replies, if any, appended to `out`).
    Consumed(usize),
    /// Buffer at least this many bytes in total, then call again.
    Incomplete(usize),
    /// Drop the connection (after writing what is in `out`).
    Close,
    /// This many input bytes were handled, and the reply comes from the job left in the
    /// session (`BinSession::job`): the connection keeps its place and parses nothing more.
    Later(usize),
}

/// What follows a request's reply.
enum After {
    Continue,
    /// Discard this many more input bytes.
    Skip(u32),
    Close,
    /// The reply comes from this job (command/mod.rs, "Pending answers").
    Later(crate::command::Pending),
}

/// The request being answered: responses echo its opcode and opaque.
pub(crate) struct Reply<'o> {
    opcode: u8,
    opaque: u32,
    out: &'o mut Vec<u8>,
    /// The connection's way to send a large value from the item (command::read::Direct), for GET.
    direct: Option<&'o mut dyn crate::command::read::Direct>,
}

impl Reply<'_> {
    fn ok(&mut self, cas: u64, extras: &[u8], key: &[u8], value: &[u8]) {
        bin::response(
            self.out,
            self.opcode,
            Status::Ok,
            self.opaque,
            cas,
            extras,
            key,
            value,
        );
    }

    fn status(&mut self, status: Status, value: &[u8]) {
        bin::response(
            self.out,
            self.opcode,
            status,
            self.opaque,
            0,
            &[],
            &[],
            value,
        );
    }

    fn error(&mut self, status: Status) {
        bin::error(self.out, self.opcode, self.opaque, status);
    }
}

/// A binary exptime: unsigned, so unlike the text protocol's there is no negative "already
/// expired" value; past 30 days it is an absolute Unix time.
fn expiry(sh: &Shared, exptime: u32) -> Time {
    sh.clock.realtime(i64::from(exptime))
}

/// Handle at most one request from the front of `input` (unit tests: without a Direct).
#[cfg(test)]
pub fn step(
    input: &[u8],
    session: &mut BinSession,
    sh: &Shared,
    c: &Counters,
    out: &mut Vec<u8>,
) -> BinNext {
    step_direct(input, session, sh, c, out, None)
}

/// `step`, sending large GET values from the item through `direct`.
pub fn step_direct<'o>(
    input: &[u8],
    session: &mut BinSession,
    sh: &Shared,
    c: &Counters,
    out: &'o mut Vec<u8>,
    direct: Option<&'o mut dyn crate::command::read::Direct>,
) -> BinNext {
    if session.skip > 0 {
        let n = session.skip.min(input.len() as u64);
        session.skip -= n;
        return BinNext::Consumed(n as usize);
    }
    let h = match bin::frame(input) {
        Frame::Incomplete(n) => return BinNext::Incomplete(n),
        Frame::BadMagic => return BinNext::Close,
        Frame::Inconsistent(h) => {
            bin::error(out, h.opcode, h.opaque, Status::UnknownCommand);
            return BinNext::Close;
        }
        Frame::Ready(h) => h,
    };
    let mut reply = Reply {
        opcode: h.opcode,
        opaque: h.opaque,
        out,
        direct,
    };
    if sh.config.sasl
        && !session.authenticated
        && !matches!(
            h.opcode,
            opcode::VERSION | opcode::SASL_LIST_MECHS | opcode::SASL_AUTH | opcode::SASL_STEP
        )
    {
        reply.error(Status::AuthError);
        return BinNext::Close;
    }
    let limits = Limits {
        item_size_max: sh.config.item_size_max,
        use_cas: sh.config.use_cas,
    };
    match bin::request(&h, input, &limits) {
        Parsed::Incomplete(n) => BinNext::Incomplete(n),
        Parsed::Invalid => {
            reply.error(Status::InvalidArguments);
            BinNext::Close
        }
        Parsed::Unknown { consumed, skip } => {
            reply.error(Status::UnknownCommand);
            session.skip = u64::from(skip);
            BinNext::Consumed(consumed)
        }
        Parsed::Request(req, used) => match execute(req, session, sh, c, &mut reply) {
            After::Continue => BinNext::Consumed(used),
            After::Skip(n) => {
                session.skip = u64::from(n);
                BinNext::Consumed(used)
            }
            After::Close => BinNext::Close,
            After::Later(job) => {
                session.job = Some(job);
                BinNext::Later(used)
            }
        },
    }
}

fn execute(
    req: Request<'_>,
    session: &mut BinSession,
    sh: &Shared,
    c: &Counters,
    r: &mut Reply<'_>,
) -> After {
    match req {
        Request::Get {
            key,
            with_key,
            quiet,
            touch,
        } => storage::get(key, with_key, quiet, touch, sh, c, r),
        Request::Touch { key, exptime } => storage::touch(key, exptime, sh, c, r),
        Request::Store {
            op,
            key,
            flags,
            exptime,
            value,
            cas,
            quiet,
        } => storage::store(op, key, flags, exptime, value, cas, quiet, sh, c, r),
        Request::Concat {
            append,
            key,
            value,
            cas,
            quiet,
        } => storage::concat(append, key, value, cas, quiet, sh, c, r),
        Request::Delete { key, cas, quiet } => storage::delete(key, cas, quiet, sh, c, r),
        Request::Delta {
            incr,
            key,
            delta,
            initial,
            exptime,
            cas,
            quiet,
        } => storage::delta(
            storage::DeltaArgs {
                incr,
                key,
                delta,
                initial,
                exptime,
                cas,
                quiet,
            },
            sh,
            c,
            r,
        ),
        Request::TooLarge {
            op,
            key,
            skip,
            close,
        } => {
            match op {
                LargeOp::Sasl if !sh.config.sasl => r.error(Status::UnknownCommand),
                // memcached cannot copy SASL data that large into an item: "out of memory".
                LargeOp::Sasl => r.error(Status::OutOfMemory),
                LargeOp::Store(op) => {
                    let mode = if op == StoreOp::Set {
                        mnemo_store::Mode::Set
                    } else {
                        mnemo_store::Mode::Add
                    };
                    match crate::command::write::refused_too_large(
                        key,
                        mode,
                        crate::command::Proto::Binary,
                        sh,
                        c,
                    ) {
                        Answer::Now(_) => r.error(Status::TooLarge),
                        Answer::Later(p) => match p {},
                    }
                }
                LargeOp::Concat => r.error(Status::TooLarge),
            }
            // A length memcached cannot represent (over 2 GiB): reply, then close rather
            // than read gigabytes.
            if close {
                After::Close
            } else {
                After::Skip(skip)
            }
        }
        Request::Quit { quiet } => {
            if !quiet {
                r.ok(0, &[], &[], &[]);
            }
            After::Close
        }
        Request::Flush { exptime, quiet } => {
            match crate::command::flush::flush_all(i64::from(exptime), sh, c) {
                Answer::Now(true) => {
                    if !quiet {
                        r.ok(0, &[], &[], &[]);
                    }
                }
                // memcached's answer to a disabled flush, quiet or not.
                Answer::Now(false) => r.error(Status::AuthError),
                Answer::Later(p) => match p {},
            }
            After::Continue
        }
        Request::Noop => {
            r.ok(0, &[], &[], &[]);
            After::Continue
        }
        Request::Version => {
            r.ok(0, &[], &[], crate::config::PROTOCOL_VERSION.as_bytes());
            After::Continue
        }
        // memcached 1.6.18 does not implement this opcode (it answers "unknown command" and
        // then mis-skips the extras, breaking the stream); mnemod serves it like `verbosity`.
        Request::Verbosity { level } => {
            sh.verbosity
                .store(level.min(u32::from(crate::MAX_VERBOSITY)) as u8, Relaxed);
            r.ok(0, &[], &[], &[]);
            After::Continue
        }
        Request::Stat { key } => {
            stat::stat(key, sh, r);
            After::Continue
        }
        Request::SaslListMechs => {
            if sh.config.sasl {
                r.ok(0, &[], &[], sasl::MECHANISMS);
            } else {
                r.error(Status::UnknownCommand);
            }
            After::Continue
        }
        Request::SaslMechTooLong { skip } => {
            r.error(if sh.config.sasl {
                Status::InvalidArguments
            } else {
                Status::UnknownCommand
            });
            After::Skip(skip)
        }
        Request::Sasl { step, mech, data } => {
            if sh.config.sasl {
                sasl::auth(session, step, mech, data, sh, r);
            } else {
                r.error(Status::UnknownCommand);
            }
            After::Continue
        }
    }
}

#[cfg(test)]
mod tests;
