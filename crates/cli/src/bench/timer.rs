//! A timerfd in the event loop, for fixed-rate mode.
//!
//! epoll_wait sleeps in whole milliseconds, far coarser than the gap between requests at
//! 100k/s. Spinning (timeout 0) instead keeps a SCHED_FIFO thread busy until the kernel's RT
//! throttling parks it for ~50 ms a second, which shows as fake tail latency. A timerfd armed
//! for the next due time wakes the loop with nanosecond resolution and no spinning.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

pub struct Timer {
    fd: OwnedFd,
    /// The due time (loop ns) the timer is armed for.
    armed_for: Option<u64>,
}

impl Timer {
    pub fn new(registry: &Registry, token: Token) -> io::Result<Timer> {
        // SAFETY: plain syscall; the result is checked before use.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        registry.register(&mut SourceFd(&fd.as_raw_fd()), token, Interest::READABLE)?;
        Ok(Timer {
            fd,
            armed_for: None,
        })
    }

    /// Makes the loop wake at `due` (its `now` is `now`); a no-op if already armed for it.
    pub fn arm(&mut self, due: u64, now: u64) -> io::Result<()> {
        if self.armed_for == Some(due) {
            return Ok(());
        }
        // A zero it_value would disarm the timer: wake after at least 1 ns.
        let ns = due.saturating_sub(now).max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (ns / 1_000_000_000) as _,
                tv_nsec: (ns % 1_000_000_000) as _,
            },
        };
        // SAFETY: valid fd and a valid itimerspec; the old value is not asked for.
        let r =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        self.armed_for = Some(due);
        Ok(())
    }

    /// After the timer fired: consume the expiry so the next one raises a new edge.
    pub fn fired(&mut self) {
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into an 8-byte buffer; EAGAIN is fine.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        self.armed_for = None;
    }
}
