//! The loader: a source, its validated [`Config`], one worker pool and the epoch counter.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::config::Config;
use crate::epoch::Epoch;
use crate::error::Error;
use crate::plan::EpochPlan;
use crate::pool::{Lot, Pool};
use crate::sampler::{Order, Shuffle};
use crate::source::Source;
use crate::stats::{Stats, StatsSnapshot};
use crate::sync::{Mutex, lock};

/// Loads batches of a [`Source`] in epochs. The pool is made once and reused by every epoch.
pub struct Loader<S: Source> {
    source: Arc<S>,
    config: Config,
    pool: Mutex<Pool>,
    epochs: AtomicU64,
    stats: Arc<Stats>,
}

impl<S: Source> std::fmt::Debug for Loader<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("config", &self.config)
            .field("epochs", &self.epochs.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Where the threads of dropped loaders wait for the next loader (see [`Lot`]): a loader made
/// right after another one was dropped (a fresh loader per epoch) starts on its threads.
pub static WORKERS: Lot = Lot::new("dataloader-rs", WORKER_KEEP);

/// How long a thread of a dropped loader waits for another loader before it ends.
pub const WORKER_KEEP: Duration = Duration::from_secs(2);

impl<S: Source> Loader<S> {
    /// A loader of `source`. Its pool keeps [`Config::pool_size_for`] threads, and the
    /// [`Source::extra_threads`] of the source's own jobs.
    ///
    /// # Errors
    /// An invalid configuration.
    pub fn new(source: S, config: Config) -> Result<Self, Error> {
        let on_pool = source.items_on_pool();
        config.validate_for(on_pool)?;
        let extra = source.extra_threads();
        Ok(Self {
            source: Arc::new(source),
            config,
            pool: Mutex::new(Pool::in_lot(
                config.pool_size_for(on_pool).saturating_add(extra),
                &WORKERS,
            )),
            epochs: AtomicU64::new(0),
            stats: Arc::default(),
        })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The source.
    #[must_use]
    pub fn source(&self) -> &Arc<S> {
        &self.source
    }

    /// The loader's counters over all its epochs.
    #[must_use]
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// The number of the next epoch to start (0 for a new loader).
    #[must_use]
    pub fn next_epoch_number(&self) -> u64 {
        self.epochs.load(Ordering::Relaxed)
    }

    /// Claims the next epoch number (for a shuffle that changes every epoch).
    pub fn advance_epoch(&self) -> u64 {
        self.epochs.fetch_add(1, Ordering::Relaxed)
    }

    /// Sets the number of the next epoch (to resume a run).
    pub fn set_next_epoch(&self, epoch: u64) {
        self.epochs.store(epoch, Ordering::Relaxed);
    }

    /// Starts the next shuffled epoch over `len` items: claims the next epoch number
    /// ([`Self::advance_epoch`]), so each call gives a new order, and numbers the epoch with it
    /// ([`crate::BatchCtx::epoch_number`]). Two loaders with the same seed give the same epochs.
    pub fn shuffled_epoch(&self, shuffle: &Shuffle, len: u64) -> Epoch<S> {
        let number = self.advance_epoch();
        self.epoch_numbered(shuffle.order(len, number), 0, number)
    }

    /// Starts an epoch over `order`. Workers start loading at once; in a forked child, the
    /// pool is rebuilt first.
    pub fn epoch(&self, order: Order) -> Epoch<S> {
        self.epoch_from(order, 0)
    }

    /// Starts an epoch over `order` at batch `start`: the batches before it are not loaded
    /// (mid-epoch resume). The order and batch size decide the batches, so a resumed epoch
    /// gives the same batches whatever the number of workers.
    pub fn epoch_from(&self, order: Order, start: u64) -> Epoch<S> {
        self.epoch_numbered(order, start, 0)
    }

    /// [`Self::epoch_from`], with `number` for the batches to read from
    /// [`crate::BatchCtx::epoch_number`] (per-epoch seeds of a source).
    pub fn epoch_numbered(&self, order: Order, start: u64, number: u64) -> Epoch<S> {
        let c = &self.config;
        self.epoch_of_plan(
            EpochPlan::new(order, c.batch_size, c.drop_last),
            start,
            number,
        )
    }

    /// An epoch of `plan` (batches of any size: see [`EpochPlan::with_bounds`]), from batch
    /// `start`, numbered `number`.
    pub fn epoch_of_plan(&self, plan: EpochPlan, start: u64, number: u64) -> Epoch<S> {
        let pool = lock(&self.pool).for_this_process().clone();
        let c = &self.config;
        Epoch::start(
            Arc::clone(&self.source),
            plan,
            pool,
            c,
            start,
            number,
            Arc::clone(&self.stats),
        )
    }
}

impl<S: Source> Drop for Loader<S> {
    fn drop(&mut self) {
        lock(&self.pool).shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::LoadError;
    use crate::source::BatchCtx;

    /// A batch is its indices and the epoch number it was loaded for.
    struct Tagged;

    impl Source for Tagged {
        type Batch = (u64, Vec<u64>);
        type Error = String;

        fn load_batch(
            &self,
            indices: &[u64],
            ctx: &BatchCtx,
        ) -> Result<Self::Batch, LoadError<String>> {
            Ok((ctx.epoch_number(), indices.to_vec()))
        }
    }

    #[test]
    fn shuffled_epoch_advances_the_counter_and_matches_the_order_by_hand() {
        let config = Config {
            batch_size: 4,
            ..Config::default()
        };
        let loader = Loader::new(Tagged, config).unwrap();
        let shuffle = Shuffle::seeded(7);
        loader.set_next_epoch(5);
        let mut orders = Vec::new();
        for number in 5..8 {
            let got: Vec<_> = loader
                .shuffled_epoch(&shuffle, 10)
                .map(Result::unwrap)
                .collect();
            assert!(got.iter().all(|(n, _)| *n == number));
            let order: Vec<u64> = got.into_iter().flat_map(|(_, b)| b).collect();
            let by_hand = shuffle.order(10, number);
            assert_eq!(order, (0..10).map(|p| by_hand.get(p)).collect::<Vec<_>>());
            orders.push(order);
        }
        assert_eq!(loader.next_epoch_number(), 8);
        assert_ne!(orders[0], orders[1], "a new order each epoch");
    }
}
