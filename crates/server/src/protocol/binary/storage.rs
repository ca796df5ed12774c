//! The binary commands that touch items: the get family, touch, storage, append/prepend,
//! delete and incr/decr. Each is parsed into the command layer (crate::command), which does
//! the store calls, the CAS rules and the counting; here its answer becomes memcached's
//! binary statuses and bodies.

use mnemo_proto::binary::{self as bin, Status, StoreOp, DELTA_NO_CREATE};
use mnemo_store::{Item, Mode};

use super::{expiry, After, Reply};
use crate::admin::stats::Counters;
use crate::command::arith::{self, Counted};
use crate::command::batch::{BatchGet, FlashBatch, Then};
use crate::command::concat;
use crate::command::delete::{self, Deleted};
use crate::command::read::{self, Read};
use crate::command::write::{self, Stored};
use crate::command::{Answer, Proto};
use crate::Shared;

/// A GET family hit: header, flags, the key for GETK/GATK, then the value (nothing after it).
struct BinHit<'k> {
    key: &'k [u8],
    op: u8,
    opaque: u32,
}

impl read::Hit for BinHit<'_> {
    fn head(&mut self, it: &Item<'_>, out: &mut Vec<u8>) -> Option<&'static [u8]> {
        let k = self.key;
        mnemo_proto::binary::response_header(
            out,
            self.op,
            Status::Ok,
            self.opaque,
            it.cas,
            4,
            k.len() as u16,
            it.value.len(),
        );
        out.extend_from_slice(&it.flags.to_be_bytes());
        out.extend_from_slice(k);
        Some(b"")
    }
}

/// A TOUCH hit: the item's flags and CAS, no value.
pub(super) fn get(
    key: &[u8],
    with_key: bool,
    quiet: bool,
    touch: Option<u32>,
    sh: &Shared,
    c: &Counters,
    r: &mut Reply<'_>,
) -> After {
    let how = match touch {
        None => Read::Get,
        Some(e) => Read::Touch(expiry(sh, e)),
    };
    let mut hit = BinHit {
        key: if with_key { key } else { &[] },
        op: r.opcode,
        opaque: r.opaque,
    };
    let sent = match read::get(key, how, &mut hit, sh, c, r.out, r.direct.as_deref_mut()) {
        Answer::Now(sent) => sent,
        Answer::Later(first) => {
            let get = BinGet {
                key: key.into(),
                with_key,
                quiet,
                opcode: r.opcode,
                opaque: r.opaque,
            };
            let b = FlashBatch::new(get, first, 0);
            return After::Later(Box::new(b));
        }
    };
    if !sent.found.is_hit() && !quiet {
        get_missed(key, with_key, r);
    }
    After::Continue
}

fn get_missed(key: &[u8], with_key: bool, r: &mut Reply<'_>) {
    if with_key {
        // GETK / GATK: the miss carries the key instead of a message.
        bin_response(r, Status::KeyNotFound, key);
    } else {
        r.error(Status::KeyNotFound);
    }
}

/// A GET family request (no touch) as a flash batch answers it (command/batch.rs): its
/// parts, owned.
#[derive(Debug)]
pub(crate) struct BinGet {
    key: Box<[u8]>,
    with_key: bool,
    quiet: bool,
    opcode: u8,
    opaque: u32,
}

impl BinGet {
    fn hit(&self) -> BinHit<'_> {
        BinHit {
            key: if self.with_key { &self.key } else { &[] },
            op: self.opcode,
            opaque: self.opaque,
        }
    }
}

impl BatchGet for BinGet {
    const READ: Read = Read::Get;

    fn key(&self) -> &[u8] {
        &self.key
    }

    fn with_hit<R>(&self, _sh: &Shared, f: impl FnOnce(&mut dyn read::Hit) -> R) -> R {
        f(&mut self.hit())
    }

    /// Complete GET/GETQ/GETK/GETKQ frames, and NOOPs (their replies in order). Anything else
    /// stops the gathering (a SET must run after the batch, on the worker). No SASL check is
    /// needed: the deferred GET passed it, and only SASL requests (which stop the gathering)
    /// change it.
    fn next(
        input: &[u8],
        limits: &mnemo_proto::text::Limits,
        _sh: &Shared,
    ) -> Option<(Then<Self>, usize)> {
        let bin::Frame::Ready(h) = bin::frame(input) else {
            return None;
        };
        let bin::Parsed::Request(req, n) = bin::request(&h, input, limits) else {
            return None;
        };
        let then = match req {
            bin::Request::Get {
                key,
                with_key,
                quiet,
                touch: None,
            } => Then::Get(BinGet {
                key: key.into(),
                with_key,
                quiet,
                opcode: h.opcode,
                opaque: h.opaque,
            }),
            bin::Request::Noop => {
                let mut r = Vec::new();
                bin::response(&mut r, h.opcode, Status::Ok, h.opaque, 0, &[], &[], &[]);
                Then::Reply(r.into())
            }
            _ => return None,
        };
        Some((then, n))
    }

    /// A miss's reply, if the request wants one.
    fn missed(&self, out: &mut Vec<u8>) {
        if !self.quiet {
            get_missed(
                &self.key,
                self.with_key,
                &mut Reply {
                    opcode: self.opcode,
                    opaque: self.opaque,
                    out,
                    direct: None,
                },
            );
        }
    }
}

fn bin_response(r: &mut Reply<'_>, status: Status, key: &[u8]) {
    mnemo_proto::binary::response(r.out, r.opcode, status, r.opaque, 0, &[], key, &[]);
}

/// TOUCH: a hit answers with the item's flags and CAS but no value.
pub(super) fn touch(
    key: &[u8],
    exptime: u32,
    sh: &Shared,
    c: &Counters,
    r: &mut Reply<'_>,
) -> After {
    let (op, opaque) = (r.opcode, r.opaque);
    let head = |it: &Item<'_>, out: &mut Vec<u8>| {
        mnemo_proto::binary::response(
            out,
            op,
            Status::Ok,
            opaque,
            it.cas,
            &it.flags.to_be_bytes(),
            &[],
            &[],
        );
    };
    if !read::touch_head(key, expiry(sh, exptime), head, sh, c, r.out).is_hit() {
        r.error(Status::KeyNotFound);
    }
    After::Continue
}

#[allow(clippy::too_many_arguments)]
pub(super) fn store(
    op: StoreOp,
    key: &[u8],
    flags: u32,
    exptime: u32,
    value: &[u8],
    cas: u64,
    quiet: bool,
    sh: &Shared,
    c: &Counters,
    r: &mut Reply<'_>,
) -> After {
    // memcached turns any SET/ADD/REPLACE that carries a CAS into a compare-and-swap; with
    // -C items hold no CAS and the field is ignored.
    let guarded = cas != 0 && sh.config.use_cas;
    let mode = match (guarded, op) {
        (true, _) => Mode::Cas(cas),
        (false, StoreOp::Set) => Mode::Set,
        (false, StoreOp::Add) => Mode::Add,
        (false, StoreOp::Replace) => Mode::Replace,
    };
    // memcached drops the old value of a failed SET carrying a CAS too (the store drops a
    // plain set's itself).
    let drop_on_failure = guarded && op == StoreOp::Set;
    let s = write::Store {
        mode,
        key,
        flags,
        exp: expiry(sh, exptime),
        data: value,
        stale_if_older: false,
        drop_on_failure,
    };
    let answer = match write::store(&s, Proto::Binary, sh, c) {
        Answer::Now(a) => a,
        Answer::Later(p) => match p {},
    };
    match answer {
        Stored::Stored { cas } => {
            if !quiet {
                r.ok(cas, &[], &[], &[]);
            }
        }
        Stored::NotStored => r.error(match op {
            StoreOp::Add => Status::KeyExists,
            StoreOp::Replace => Status::KeyNotFound,
            StoreOp::Set => Status::NotStored,
        }),
        Stored::Exists => r.error(Status::KeyExists),
        Stored::NotFound => r.error(Status::KeyNotFound),
        Stored::TooLarge => r.error(Status::TooLarge),
        // memcached's binary text for a store that found no memory.
        Stored::NoMemory => r.status(Status::OutOfMemory, b"Out of memory allocating item"),
    }
    After::Continue
}

#[allow(clippy::too_many_arguments)]
pub(super) fn concat(
    append: bool,
    key: &[u8],
    value: &[u8],
    cas: u64,
    quiet: bool,
    sh: &Shared,
    c: &Counters,
    r: &mut Reply<'_>,
) -> After {
    // With -C the CAS field is ignored, as for SET.
    let j = concat::Concat {
        append,
        key,
        data: value,
        cas: (cas != 0 && sh.config.use_cas).then_some(cas),
    };
    match concat::concat(&j, Proto::Binary, sh, c) {
        Answer::Now(Stored::Stored { cas }) => {
            if !quiet {
                r.ok(cas, &[], &[], &[]);
            }
        }
        Answer::Now(Stored::Exists) => r.error(Status::KeyExists),
        Answer::Now(_) => r.error(Status::NotStored),
        Answer::Later(p) => match p {},
    }
    After::Continue
}

/// DELETE, with the compare of a CAS when one is given (command/delete.rs).
pub(super) fn delete(
    key: &[u8],
    cas: u64,
    quiet: bool,
    sh: &Shared,
    c: &Counters,
    r: &mut Reply<'_>,
) -> After {
    let d = delete::Delete {
        key,
        cas: (cas != 0).then_some(cas),
        invalidate: None,
    };
    match delete::delete(&d, Proto::Binary, sh, c) {
        Answer::Now(Deleted::Exists) => r.error(Status::KeyExists),
        Answer::Now(Deleted::Deleted) => {
            if !quiet {
                r.ok(0, &[], &[], &[]);
            }
        }
        Answer::Now(Deleted::NotFound) => r.error(Status::KeyNotFound),
        Answer::Later(p) => match p {},
    }
    After::Continue
}

pub(super) struct DeltaArgs<'a> {
    pub incr: bool,
    pub key: &'a [u8],
    pub delta: u64,
    pub initial: u64,
    pub exptime: u32,
    pub cas: u64,
    pub quiet: bool,
}

/// INCREMENT / DECREMENT (command/arith.rs): a missing item is created with `initial` (flags
/// 0) unless the expiration is 0xffffffff; a CAS guards the write.
pub(super) fn delta(a: DeltaArgs<'_>, sh: &Shared, c: &Counters, r: &mut Reply<'_>) -> After {
    let d = arith::Delta {
        key: a.key,
        incr: a.incr,
        by: a.delta,
        pad: true,
        cas: (a.cas != 0).then_some(a.cas),
        create: (a.exptime != DELTA_NO_CREATE).then(|| (a.initial, expiry(sh, a.exptime))),
        touch: None,
        read_exp: false,
    };
    let answer = match arith::delta(&d, Proto::Binary, sh, c) {
        Answer::Now(answer) => answer,
        Answer::Later(p) => match p {},
    };
    match answer {
        Counted::Value { n, cas, .. } | Counted::Created { n, cas, .. } => {
            if !a.quiet {
                r.ok(cas, &[], &[], &n.to_be_bytes());
            }
        }
        Counted::NotFound => r.error(Status::KeyNotFound),
        Counted::NonNumeric => r.error(Status::NonNumeric),
        Counted::Exists => r.error(Status::KeyExists),
        Counted::NoMemory => r.error(Status::OutOfMemory),
        Counted::NotStored => r.error(Status::NotStored),
    }
    After::Continue
}
