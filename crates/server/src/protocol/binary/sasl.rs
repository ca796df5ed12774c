//! SASL over the binary protocol (-S): the PLAIN mechanism, checked against the password
//! file (-Y / MEMCACHED_SASL_PWDB, reloaded on SIGHUP).
//!
//! PLAIN's message is `authzid NUL authcid NUL password` (RFC 4616). As with memcached's
//! Cyrus SASL, an authzid other than empty or the authcid itself is refused, an empty
//! SASL_AUTH is answered "continue" and completed by SASL_STEP, and any authentication
//! attempt first drops the connection's previous authentication.

use mnemo_proto::binary::Status;

use super::{BinSession, Reply};
use crate::Shared;

/// What SASL_LIST_MECHS answers.
pub(super) const MECHANISMS: &[u8] = b"PLAIN";

pub(super) fn auth(
    session: &mut BinSession,
    step: bool,
    mech: &[u8],
    data: &[u8],
    sh: &Shared,
    r: &mut Reply<'_>,
) {
    session.authenticated = false;
    let pending = std::mem::take(&mut session.sasl_pending);
    if step && !pending {
        // SASL_STEP without a SASL_AUTH that asked for it.
        r.error(Status::AuthError);
        return;
    }
    if !step && mech != MECHANISMS {
        r.error(Status::AuthError);
        return;
    }
    if !step && data.is_empty() {
        session.sasl_pending = true;
        r.status(Status::AuthContinue, &[]);
        return;
    }
    let ok = check_plain(data, sh);
    sh.count_auth(ok);
    if ok {
        session.authenticated = true;
        r.ok(0, &[], &[], b"Authenticated");
    } else {
        r.error(Status::AuthError);
    }
}

fn check_plain(data: &[u8], sh: &Shared) -> bool {
    let mut parts = data.split(|&b| b == 0);
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    if !authzid.is_empty() && authzid != user {
        return false;
    }
    !user.is_empty() && sh.credentials.read().check(user, password)
}
