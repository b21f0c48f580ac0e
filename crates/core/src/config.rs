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
    /// Checks every field.
    ///
    /// # Errors
    /// The first field out of range.
    pub fn validate(&self) -> Result<(), Error> {
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
        let threads = self.num_workers.checked_mul(self.item_concurrency);
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
        if self.num_workers == 0 {
            self.item_concurrency.saturating_sub(1)
        } else {
            self.num_workers * self.item_concurrency
        }
    }

    /// The number of batches of an epoch of `len` items.
    #[must_use]
    pub fn num_batches(&self, len: u64) -> u64 {
        EpochPlan::count(len, self.batch_size, self.drop_last)
    }
}
