//! flush_all (text) and FLUSH (binary): -F refuses both; otherwise cmd_flush, and every item
//! stored at or before the moment named is invalid once it arrives.

use super::Answer;
use crate::admin::stats::{bump, Counters};
use crate::Shared;

/// Flushes after `delay` (memcached's exptime rules: seconds, or an absolute time past 30
/// days); 0 or a negative delay means now. Answers false when -F disables flushing.
pub(crate) fn flush_all(delay: i64, sh: &Shared, c: &Counters) -> Answer<bool> {
    if !sh.config.flush_enabled {
        return Answer::Now(false);
    }
    bump(&c.cmd_flush, 1);
    let now = sh.clock.now();
    // memcached: items stored at or before realtime(delay) - 1 are invalid once that moment
    // arrives.
    let at = if delay > 0 {
        sh.clock.realtime(delay).saturating_sub(1).max(now)
    } else {
        now
    };
    sh.store.flush_all(at);
    Answer::Now(true)
}
