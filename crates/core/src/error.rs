//! The one error type of `dlrs-core`: invalid configuration given by the caller.

/// What the core refuses. Every variant is the caller's fault and names the offending value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// `batch_size` must be at least 1.
    #[error("batch_size must be at least 1, got {0}")]
    BatchSize(usize),
    /// `prefetch_depth` must be at least 1.
    #[error("prefetch_depth must be at least 1, got {0}")]
    PrefetchDepth(usize),
    /// `item_concurrency` must be at least 1.
    #[error("item_concurrency must be at least 1, got {0}")]
    ItemConcurrency(usize),
    /// The worker threads would not fit in an address space (`num_workers × item_concurrency`).
    #[error("num_workers × item_concurrency is too large: {num_workers} × {item_concurrency}")]
    TooManyThreads {
        /// The requested number of workers.
        num_workers: usize,
        /// The requested number of items in flight per batch.
        item_concurrency: usize,
    },
}
