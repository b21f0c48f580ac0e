//! A loader-wide limit on the items fetched at once, shared by the batches in flight and
//! granted to the earliest batch first: the next batch takes up the slots the current one
//! leaves as its items arrive, so a few batches in flight keep the limit's worth of requests
//! running without the first batch waiting on the later ones.
//!
//! The line is taken when a batch starts its items: a later batch whose worker starts first
//! takes slots until the earlier batch is in line, and those it holds are not taken back.

use std::collections::BTreeMap;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

/// The slots; see the module's doc.
#[derive(Debug)]
pub struct ItemBudget {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    free: usize,
    /// The items in line, earliest batch (then position) first, with the waker of each that
    /// was polled.
    waiting: BTreeMap<Key, Option<Waker>>,
    /// Makes keys unique across epochs (two epochs both have a batch 0).
    next: u64,
}

/// (batch number, position in the batch, arrival).
type Key = (u64, usize, u64);

impl ItemBudget {
    /// A budget of `slots` items at once (at least one).
    #[must_use]
    pub fn new(slots: usize) -> Arc<ItemBudget> {
        Arc::new(ItemBudget {
            state: Mutex::new(State {
                free: slots.max(1),
                waiting: BTreeMap::new(),
                next: 0,
            }),
        })
    }

    /// A place in line, now, for the item at `position` of batch `batch`: the future gets a
    /// slot once no more items ahead of it wait than slots are free. Dropping it leaves the
    /// line.
    pub fn acquire(self: &Arc<Self>, batch: u64, position: usize) -> Acquire {
        self.acquire_many(batch, position..position + 1)
            .pop()
            .expect("one position")
    }

    /// [`Self::acquire`] for each of `positions` of batch `batch`, all in line at once: none of
    /// them is behind an item of a later batch that came meanwhile.
    pub fn acquire_many(self: &Arc<Self>, batch: u64, positions: Range<usize>) -> Vec<Acquire> {
        let mut state = self.lock();
        positions
            .map(|position| {
                let key = (batch, position, state.next);
                state.next += 1;
                state.waiting.insert(key, None);
                Acquire {
                    budget: Arc::clone(self),
                    key: Some(key),
                }
            })
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    /// Wakes the items that a free slot is now for (the first `free` in line).
    fn wake_ahead(&self) {
        for waker in self.waiting.values().take(self.free).flatten() {
            waker.wake_by_ref();
        }
    }
}

/// The future of [`ItemBudget::acquire`].
#[derive(Debug)]
pub struct Acquire {
    budget: Arc<ItemBudget>,
    /// Its place in line, until it has a slot.
    key: Option<Key>,
}

impl Future for Acquire {
    type Output = Slot;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Slot> {
        let budget = Arc::clone(&self.budget);
        let Some(key) = self.key else {
            panic!("an Acquire polled after it completed");
        };
        let mut state = budget.lock();
        let ahead = state.waiting.range(..key).count();
        if ahead < state.free {
            state.free -= 1;
            state.waiting.remove(&key);
            self.key = None;
            drop(state);
            return Poll::Ready(Slot { budget });
        }
        state.waiting.insert(key, Some(cx.waker().clone()));
        Poll::Pending
    }
}

impl Drop for Acquire {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let mut state = self.budget.lock();
            state.waiting.remove(&key);
            // A slot it was woken for goes to the next in line.
            state.wake_ahead();
        }
    }
}

/// A slot of an [`ItemBudget`], given back when dropped.
#[derive(Debug)]
pub struct Slot {
    budget: Arc<ItemBudget>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.budget.lock();
        state.free += 1;
        state.wake_ahead();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn slots_go_to_the_earliest_batch_first() {
        let budget = ItemBudget::new(2);
        let mut slots: Vec<Slot> = (0..2).map(|p| taken(&budget, 0, p)).collect();
        // Batch 1 asks first, then batch 0's last item: batch 0 goes first all the same.
        let mut b10 = Box::pin(budget.acquire(1, 0));
        let mut b11 = Box::pin(budget.acquire(1, 1));
        let mut a02 = Box::pin(budget.acquire(0, 2));
        for a in [&mut b10, &mut b11, &mut a02] {
            assert!(poll_once(a).is_pending());
        }
        drop(slots.pop());
        assert!(
            poll_once(&mut b10).is_pending(),
            "batch 1 went before batch 0"
        );
        let Poll::Ready(a02_slot) = poll_once(&mut a02) else {
            panic!("batch 0's item did not get the free slot");
        };
        drop(slots.pop());
        assert!(
            poll_once(&mut b11).is_pending(),
            "item 1 went before item 0"
        );
        assert!(poll_once(&mut b10).is_ready());
        drop(a02_slot);
        assert!(poll_once(&mut b11).is_ready());
    }

    fn poll_once(acquire: &mut Pin<Box<Acquire>>) -> Poll<Slot> {
        let waker = futures::task::noop_waker();
        acquire.as_mut().poll(&mut Context::from_waker(&waker))
    }

    /// A slot of `budget` for item `position` of `batch`, which must be free now.
    fn taken(budget: &Arc<ItemBudget>, batch: u64, position: usize) -> Slot {
        match poll_once(&mut Box::pin(budget.acquire(batch, position))) {
            Poll::Ready(slot) => slot,
            Poll::Pending => panic!("a free slot waits"),
        }
    }

    /// A budget of one slot, taken by item 0 of batch 0, and item 1 of batch 0 waiting for it.
    fn one_slot_held() -> (Arc<ItemBudget>, Slot, Pin<Box<Acquire>>) {
        let budget = ItemBudget::new(1);
        let held = taken(&budget, 0, 0);
        let mut waiting = Box::pin(budget.acquire(0, 1));
        assert!(poll_once(&mut waiting).is_pending());
        (budget, held, waiting)
    }

    #[test]
    fn a_slot_freed_for_a_waiter_is_not_taken_by_a_later_batch() {
        let (budget, held, mut waiting) = one_slot_held();
        drop(held); // free again, `waiting` woken but not run yet
        let mut later = Box::pin(budget.acquire(1, 0));
        assert!(
            poll_once(&mut later).is_pending(),
            "batch 1 took batch 0's slot"
        );
        let Poll::Ready(slot) = poll_once(&mut waiting) else {
            panic!("the woken waiter did not get its slot");
        };
        assert!(poll_once(&mut later).is_pending());
        drop(slot);
        assert!(poll_once(&mut later).is_ready());
    }

    /// A waker that records that it was woken.
    struct Flag(AtomicBool);

    impl futures::task::ArcWake for Flag {
        fn wake_by_ref(flag: &Arc<Self>) {
            flag.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_waiter_that_gives_up_passes_its_turn_on() {
        let (budget, held, early) = one_slot_held();
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = futures::task::waker(Arc::clone(&flag));
        let mut later = Box::pin(budget.acquire(1, 0));
        assert!(
            later
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        drop(held); // wakes `early`, first in line
        assert!(!flag.0.load(Ordering::SeqCst));
        drop(early); // gives up: the slot it was woken for is `later`'s
        assert!(
            flag.0.load(Ordering::SeqCst),
            "the next in line was not woken"
        );
        assert!(poll_once(&mut later).is_ready());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

        /// However the items of a few batches arrive and take their time, never more than the
        /// budget run at once, and every item runs.
        #[test]
        fn never_more_than_the_budget_at_once(
            slots in 1usize..6,
            items in proptest::collection::vec((0u64..4, 0u64..3), 1..40),
        ) {
            let (peak, done) = runtime().block_on(async {
                let budget = ItemBudget::new(slots);
                let running = Arc::new(AtomicUsize::new(0));
                let peak = Arc::new(AtomicUsize::new(0));
                let mut tasks = Vec::new();
                for (position, (batch, millis)) in items.iter().copied().enumerate() {
                    let (budget, running, peak) =
                        (Arc::clone(&budget), Arc::clone(&running), Arc::clone(&peak));
                    tasks.push(tokio::spawn(async move {
                        let _slot = budget.acquire(batch, position).await;
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(millis)).await;
                        running.fetch_sub(1, Ordering::SeqCst);
                    }));
                }
                let mut done = 0;
                for t in tasks {
                    t.await.unwrap();
                    done += 1;
                }
                (peak.load(Ordering::SeqCst), done)
            });
            proptest::prop_assert!(peak <= slots, "{peak} > {slots}");
            proptest::prop_assert_eq!(done, items.len());
        }
    }
}
