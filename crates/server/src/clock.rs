//! The server's clock, kept the way memcached keeps it: a relative time in seconds that a
//! timer thread advances, so reading "now" on the request path is one atomic load.
//!
//! `process_started` is set 62 seconds in the past at start-up (memcached does the same), so
//! relative time never reaches 0 or 1, which the store reserves for "never" and "already past".

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use mnemo_store::Time;

/// Expiry values above this many seconds are absolute Unix times (memcached's 30-day rule).
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;
/// memcached backdates its start by ITEM_UPDATE_INTERVAL (60) + 2 seconds.
const START_BACKDATE: u64 = 62;

pub struct Clock {
    process_started: u64,
    current: AtomicU32,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Clock {
    pub fn new() -> Clock {
        let process_started = unix_now().saturating_sub(START_BACKDATE);
        Clock {
            process_started,
            current: AtomicU32::new(START_BACKDATE as u32),
        }
    }

    /// Re-read the system clock; called by the maintenance thread.
    pub fn tick(&self) -> Time {
        let now = unix_now().saturating_sub(self.process_started) as Time;
        // Relative time never goes backwards, even if the wall clock does.
        self.current.fetch_max(now, Ordering::Relaxed).max(now)
    }

    pub fn now(&self) -> Time {
        self.current.load(Ordering::Relaxed)
    }

    pub fn process_started(&self) -> u64 {
        self.process_started
    }

    /// memcached's `realtime()`: a protocol exptime to the store's relative expiry.
    /// 0 stays "never"; up to 30 days is relative to now; beyond that it is a Unix time, and
    /// one already past becomes 1, which every reader treats as expired.
    pub fn realtime(&self, exptime: i64) -> Time {
        realtime(exptime, self.process_started, self.now())
    }

    /// The exptime of set/touch/gat: memcached maps negative values to an absolute time in the
    /// past (`EXPTIME_TO_POSITIVE_TIME`), so the item is expired at once.
    pub fn item_expiry(&self, exptime: i32) -> Time {
        let e = if exptime < 0 {
            REALTIME_MAXDELTA + 1
        } else {
            i64::from(exptime)
        };
        self.realtime(e)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

pub fn realtime(exptime: i64, process_started: u64, now: Time) -> Time {
    if exptime == 0 {
        return 0;
    }
    if exptime > REALTIME_MAXDELTA {
        let started = process_started as i64;
        if exptime <= started {
            return 1;
        }
        return (exptime - started).min(i64::from(Time::MAX)) as Time;
    }
    (exptime + i64::from(now)).min(i64::from(Time::MAX)) as Time
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thirty_day_rule() {
        let started = 1_700_000_000;
        assert_eq!(realtime(0, started, 100), 0);
        assert_eq!(realtime(10, started, 100), 110);
        assert_eq!(
            realtime(REALTIME_MAXDELTA, started, 100),
            REALTIME_MAXDELTA as u32 + 100
        );
        // An absolute time before the start is already past.
        assert_eq!(realtime(REALTIME_MAXDELTA + 1, started, 100), 1);
        assert_eq!(realtime(started as i64 + 500, started, 100), 500);
    }

    #[test]
    fn negative_expiry_is_past() {
        let c = Clock::new();
        assert_eq!(c.item_expiry(-1), 1);
        assert!(c.item_expiry(-1) <= c.now());
    }
}
