//! A worker's share of its core: after running [`RUN_BUDGET`] without once leaving the CPU,
//! it offers the core to whatever else is waiting for it (`sched_yield`) before it goes on.
//!
//! Only where the workers outnumber the cores the process may run on ([`needed`]).
//!
//! Why: workers that share a core (more `-t` than cores, or a server pinned to one core as in
//! `bench/flash.sh`'s throughput phase, `-t 4` on core 0) and are all busy never sleep, so no
//! wake-up gives the scheduler a reason to switch: each ran until the timer tick took the core
//! (4 ms at this kernel's `HZ=250`), and a connection of the fourth worker in line waited three
//! such runs. That was the get p99 of 12.2 ms in that bench (memcached 6.5 ms), where the
//! p50 was 0.2 ms: in the longest 1% of the workers' waits for the core, other workers' runs
//! of 4.0 ms (p99) were what ran (`perf record -e sched:sched_switch`; docs/flash.md "Tail").
//! memcached's workers leave the core more often on their own (their runs: p99 1.1 ms).
//!
//! ```text
//!   round:  poll (submit, wait) ──> check ──> adopt, deliver, turns ──> round ...
//!                                     │
//!       ran < RUN_BUDGET since the last check ─────────────> nothing (one clock read)
//!       else: context switches of this thread (getrusage) changed since the last check?
//!             yes: it slept or was switched out meanwhile ────> start counting again
//!             no:  it held the core all along ───> sched_yield (returns at once when
//!                                                  nothing else waits), start again
//! ```
//!
//! The check runs right after the wait, so the replies of the round before are already
//! submitted (io_uring) or written (epoll) when the core is offered. A worker that sleeps
//! between rounds never yields (its switch count moves), so a lone worker, or one on a core
//! shared with a batch job, is not held back after a wake-up; a yield when nothing else is
//! runnable costs one system call.

use std::time::{Duration, Instant};

/// Whether `workers` event loops can outnumber the cores this process may run on (its CPU
/// affinity and cgroup quota, as `available_parallelism` reads them): only then can a busy
/// worker hold a core another one waits for. Elsewhere (`-t 1`, or no more workers than
/// cores) the check is not made at all, so it costs nothing: its clock read is about 90
/// instructions per loop round (bench/instructions.sh, `-t 1`: get hit 1,953 -> 2,042 with
/// the check made every round).
pub fn needed(workers: usize) -> bool {
    workers > std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// How long a worker runs without leaving the core before it offers the core. Measured in
/// `bench/flash.sh`'s throughput phase setting (idle machine, two 10 s runs each, one of them
/// under scheduler tracing): 250 µs: get p99 3.1 and 3.3 ms; 500 µs: 3.6 and 4.0 ms; without:
/// 12.2 and 12.3 ms (memcached: 5.6 and 6.5 ms). A yield is a switch of a few µs: at 250 µs,
/// about 1% of the core at most. Ops/s does not gain from a longer budget (same setting, idle
/// machine, medians of 3 runs, mnemod only; run-to-run spread about 10%): 1000 µs 70,248,
/// 500 µs 76,098, 250 µs 79,125 and 75,247, 100 µs 68,980, 50 µs 75,149; get p99 5.9, 3.7,
/// 2.9, 2.2 and 1.7 ms. Fewer switches bought no throughput; only the tail moved.
pub const RUN_BUDGET: Duration = Duration::from_micros(250);

/// One worker's account (see the module doc).
pub struct CoreShare {
    budget: Duration,
    since: Instant,
    switches: u64,
}

impl CoreShare {
    pub fn new(budget: Duration) -> CoreShare {
        CoreShare {
            budget,
            since: Instant::now(),
            switches: switches(),
        }
    }

    /// After the loop's wait: offer the core if this thread has held it for the budget.
    /// True if it did.
    #[inline]
    pub fn check(&mut self) -> bool {
        self.check_with(Instant::now(), switches, std::thread::yield_now)
    }

    fn check_with(
        &mut self,
        now: Instant,
        switches: impl Fn() -> u64,
        yield_now: impl FnOnce(),
    ) -> bool {
        if now.saturating_duration_since(self.since) < self.budget {
            return false;
        }
        let seen = switches();
        let held = seen == self.switches;
        if held {
            yield_now();
            self.switches = switches();
            self.since = Instant::now();
        } else {
            self.switches = seen;
            self.since = now;
        }
        held
    }
}

/// Context switches of the calling thread so far, voluntary (it waited) and involuntary (it
/// was switched out).
fn switches() -> u64 {
    // SAFETY: getrusage writes the struct it is given; zeroes are a valid rusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD is the calling thread's.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return 0;
    }
    (ru.ru_nvcsw as u64).wrapping_add(ru.ru_nivcsw as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn only_more_workers_than_cores_need_the_check() {
        let cores = std::thread::available_parallelism().unwrap().get();
        assert!(!needed(1));
        assert!(!needed(cores));
        assert!(needed(cores + 1));
    }

    #[test]
    fn within_the_budget_nothing_is_asked_or_yielded() {
        let mut s = CoreShare::new(Duration::from_secs(3600));
        let asked = Cell::new(0);
        let count = || {
            asked.set(asked.get() + 1);
            0
        };
        assert!(!s.check_with(Instant::now(), count, || panic!("yielded")));
        assert_eq!(asked.get(), 0, "no system call inside the budget");
    }

    #[test]
    fn a_thread_that_held_the_core_for_the_budget_yields_once_then_counts_again() {
        // A budget no stall of this thread reaches between the yield and the check after it.
        let mut s = CoreShare::new(Duration::from_secs(3600));
        s.switches = 7;
        let later = s.since + Duration::from_secs(7200);
        let yields = Cell::new(0);
        assert!(s.check_with(later, || 7, || yields.set(yields.get() + 1)));
        assert_eq!(yields.get(), 1);
        // Counting starts again from the yield: right after it, nothing more.
        assert!(!s.check_with(Instant::now(), || 7, || panic!("yielded twice")));
    }

    #[test]
    fn a_thread_that_slept_or_was_switched_out_meanwhile_does_not_yield() {
        let mut s = CoreShare::new(Duration::from_millis(1));
        s.switches = 7;
        let later = s.since + Duration::from_millis(2);
        assert!(!s.check_with(later, || 8, || panic!("yielded after a switch")));
        assert_eq!(s.switches, 8);
        assert_eq!(s.since, later, "counting starts at the check");
    }

    #[test]
    fn the_switch_count_moves_when_the_thread_sleeps() {
        let before = switches();
        std::thread::sleep(Duration::from_millis(2));
        assert!(switches() > before, "a sleep is a voluntary switch");
    }
}
