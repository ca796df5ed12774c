//! Fan-out without spawning: [`join_all`] polls several futures in the calling task (so they
//! may borrow), and [`fan_out_barrier`] lets each of them write its request before any waits
//! for a reply. A leaf: the client (client.rs, ops.rs, filter.rs) fans out with it and the
//! connection (conn.rs) passes the barrier between writing and reading.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

thread_local! {
    /// join_all calls being polled on this thread (nested ones count).
    static FAN_OUT: Cell<usize> = const { Cell::new(0) };
    /// A future inside join_all passed [`fan_out_barrier`] and wants polling again at once.
    static REPOLL: Cell<bool> = const { Cell::new(false) };
}

/// Inside a [`join_all`] of several futures: pending once, so every sibling gets to this point
/// (its request written) before any goes on (waits in a blocking read); join_all polls again at
/// once, without the runtime. Elsewhere: ready at once.
pub(crate) async fn fan_out_barrier() {
    if FAN_OUT.get() == 0 {
        return;
    }
    let mut first = true;
    std::future::poll_fn(|_| {
        if std::mem::take(&mut first) {
            REPOLL.set(true);
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await
}

/// Run futures concurrently in the calling task, outputs in input order (fan-out without
/// spawning, so the futures may borrow).
pub(crate) async fn join_all<F: Future>(futs: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut futs: Vec<Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut outs: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    let many = futs.len() > 1;
    std::future::poll_fn(|cx| loop {
        let mut pending = false;
        if many {
            FAN_OUT.set(FAN_OUT.get() + 1);
        }
        for (f, o) in futs.iter_mut().zip(outs.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if many {
            FAN_OUT.set(FAN_OUT.get() - 1);
        }
        // A future stopped at the barrier has registered no waker: poll again now.
        if !REPOLL.replace(false) {
            return if pending {
                Poll::Pending
            } else {
                Poll::Ready(())
            };
        }
    })
    .await;
    outs.into_iter()
        .map(|o| o.expect("every future completed"))
        .collect()
}
