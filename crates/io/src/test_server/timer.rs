//! The server's clock: a thread that wakes tasks at instants, never early.
//!
//! tokio's timer rounds every deadline up to the next millisecond, so a 10 ms latency would be
//! answered after 10–11 ms; a timed wait on a condition variable ends about 0.1 ms late here.

use std::cmp::Ordering as Order;
use std::collections::BinaryHeap;
use std::io;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use dlrs_core::sync::lock;

/// A wake-up due at an instant (the heap's order is reversed: the earliest first).
#[derive(Debug)]
struct Due {
    at: Instant,
    seq: u64,
    wake: oneshot::Sender<()>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Due) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Due) -> Option<Order> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Due) -> Order {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Debug, Default)]
struct Pending {
    heap: BinaryHeap<Due>,
    seq: u64,
    stopped: bool,
}

/// The wake-ups a [`Timer`]'s thread sends, earliest first.
#[derive(Debug, Default)]
pub(super) struct TimerQueue {
    pending: Mutex<Pending>,
    changed: Condvar,
}

impl TimerQueue {
    /// Waits until `at` (at once if it has passed, forever if the timer has stopped).
    pub(super) async fn sleep_until(&self, at: Instant) {
        if at <= Instant::now() {
            return;
        }
        let (wake, woken) = oneshot::channel();
        {
            let mut pending = lock(&self.pending);
            pending.seq += 1;
            let seq = pending.seq;
            let earliest = pending.heap.peek().is_none_or(|first| at < first.at);
            pending.heap.push(Due { at, seq, wake });
            if earliest {
                self.changed.notify_one();
            }
        }
        if woken.await.is_err() {
            // The timer stopped: the server is stopping too.
            std::future::pending::<()>().await;
        }
    }

    /// The timer thread: sends every wake-up when it is due, never before.
    ///
    /// A timed wait ends 100–200 µs late on a virtual machine (timer slack, the host's timers),
    /// so the thread asks to wake that much earlier, as learned from its last waits, and gives
    /// the processor away (yields) for what remains.
    fn run(&self) {
        let mut late = Duration::ZERO;
        let mut pending = lock(&self.pending);
        loop {
            if pending.stopped {
                return;
            }
            let now = Instant::now();
            while pending.heap.peek().is_some_and(|first| first.at <= now) {
                if let Some(due) = pending.heap.pop() {
                    let _ = due.wake.send(());
                }
            }
            let Some(at) = pending.heap.peek().map(|first| first.at) else {
                pending = self
                    .changed
                    .wait(pending)
                    .unwrap_or_else(|e| e.into_inner());
                continue;
            };
            if at - now > late {
                let target = at - late;
                pending = self
                    .changed
                    .wait_timeout(pending, target - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                let woke = Instant::now();
                // Woken by the timeout (not by a new earlier entry): learn how late it was.
                if woke >= target {
                    let over = (woke - target).min(MAX_LATE);
                    late = (late * 7 + over) / 8;
                }
            } else {
                drop(pending);
                std::thread::yield_now();
                pending = lock(&self.pending);
            }
        }
    }
}

/// The most lateness of a timed wait that [`TimerQueue::run`] learns from one wait.
const MAX_LATE: Duration = Duration::from_millis(1);

/// A thread that wakes tasks at instants, with the precision of a timed wait on a condition
/// variable; dropping it stops the thread.
#[derive(Debug)]
pub(super) struct Timer {
    pub(super) queue: Arc<TimerQueue>,
    thread: Option<JoinHandle<()>>,
}

impl Timer {
    pub(super) fn start() -> io::Result<Timer> {
        let queue = Arc::new(TimerQueue::default());
        let shared = Arc::clone(&queue);
        let thread = std::thread::Builder::new()
            .name("dlrs-loopback-timer".to_owned())
            .spawn(move || shared.run())?;
        Ok(Timer {
            queue,
            thread: Some(thread),
        })
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        lock(&self.queue.pending).stopped = true;
        self.queue.changed.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_wakes_in_order_never_early() {
        let timer = Timer::start().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let start = Instant::now();
        let woke = Arc::new(Mutex::new(Vec::new()));
        runtime.block_on(async {
            // Tasks, not one joined future: a woken task runs in the order it was woken, so the
            // order they record is the timer's, even when several are due by the time they run.
            let sleeps = [30u64, 10, 20, 0, 10].map(|ms| {
                let (queue, woke) = (Arc::clone(&timer.queue), Arc::clone(&woke));
                tokio::spawn(async move {
                    let due = start + Duration::from_millis(ms);
                    queue.sleep_until(due).await;
                    assert!(Instant::now() >= due, "woken early");
                    woke.lock().unwrap().push(ms);
                })
            });
            for sleep in sleeps {
                sleep.await.unwrap();
            }
        });
        let woke = woke.lock().unwrap().clone();
        assert_eq!(woke.len(), 5);
        assert!(woke.is_sorted(), "{woke:?}");
        drop(timer); // joins its thread
    }
}
