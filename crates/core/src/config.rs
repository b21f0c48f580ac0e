//! How a loader cuts and schedules its epochs: the [`Config`] every loader is validated against.

use crate::error::Error;
use crate::plan::EpochPlan;

/// How a loader cuts and schedules its epochs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Items per batch (≥ 1).
    pub batch_size: usize,
    /// Batches loaded in parallel on worker threads; 0 loads each batch on the caller's thread.
    pub num_workers: usize,
    /// Batches that may wait beyond the `num_workers` in progress (≥ 1, any size: at most the
    /// epoch's batches are held).
    pub prefetch_depth: usize,
    /// Items of one batch fetched at once (≥ 1).
    pub item_concurrency: usize,
    /// Whether a short last batch is dropped.
    pub drop_last: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            batch_size: 1,
            num_workers: 0,
            prefetch_depth: 2,
            item_concurrency: 1,
            drop_last: false,
        }
    }
}

impl Config {
    /// Checks every field, for a source whose items are fetched on the pool's threads.
    ///
    /// # Errors
    /// The first field out of range.
    pub fn validate(&self) -> Result<(), Error> {
        self.validate_for(true)
    }

    /// Checks every field; `items_on_pool` as [`Source::items_on_pool`](crate::Source::items_on_pool)
    /// says, which decides the threads the pool would keep.
    ///
    /// # Errors
    /// The first field out of range.
    pub fn validate_for(&self, items_on_pool: bool) -> Result<(), Error> {
        if self.batch_size == 0 {
            return Err(Error::BatchSize(self.batch_size));
        }
        if self.prefetch_depth == 0 {
            return Err(Error::PrefetchDepth(self.prefetch_depth));
        }
        if self.item_concurrency == 0 {
            return Err(Error::ItemConcurrency(self.item_concurrency));
        }
        // Keep thread counts well inside what a process can have. Any prefetch_depth is fine:
        // the ring grows only with the batches that exist and have loaded.
        let per_worker = if items_on_pool {
            self.item_concurrency
        } else {
            1
        };
        let threads = self.num_workers.checked_mul(per_worker);
        if threads.is_none_or(|t| t > 1 << 16) {
            return Err(Error::TooManyThreads {
                num_workers: self.num_workers,
                item_concurrency: self.item_concurrency,
            });
        }
        Ok(())
    }

    /// The threads the pool keeps: `num_workers × item_concurrency`, or the item helpers alone.
    #[must_use]
    pub fn pool_size(&self) -> usize {
        self.pool_size_for(true)
    }

    /// The threads the pool keeps for a source whose items are fetched on it (`items_on_pool`):
    /// `num_workers × item_concurrency`, or the item helpers alone; otherwise the workers.
    #[must_use]
    pub fn pool_size_for(&self, items_on_pool: bool) -> usize {
        match (items_on_pool, self.num_workers) {
            (false, workers) => workers,
            (true, 0) => self.item_concurrency.saturating_sub(1),
            (true, workers) => workers * self.item_concurrency,
        }
    }

    /// The number of batches of an epoch of `len` items.
    #[must_use]
    pub fn num_batches(&self, len: u64) -> u64 {
        EpochPlan::count(len, self.batch_size, self.drop_last)
    }
}
