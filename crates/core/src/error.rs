//! The errors of `dlrs-core`: an invalid configuration given by the caller ([`Error`]), and why
//! one batch did not load ([`LoadError`], generic over the source's own error).

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

/// Why a batch did not load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError<E> {
    /// The source failed.
    Source(E),
    /// The source panicked; the message of the panic.
    Panicked(String),
    /// The epoch was abandoned while the batch was loading (never handed to a consumer).
    Cancelled,
}

impl<E> From<E> for LoadError<E> {
    fn from(e: E) -> Self {
        Self::Source(e)
    }
}

impl<E: std::fmt::Display> std::fmt::Display for LoadError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Source(e) => write!(f, "loading a batch failed: {e}"),
            Self::Panicked(message) => write!(f, "loading a batch panicked: {message}"),
            Self::Cancelled => f.write_str("the epoch was abandoned while the batch was loading"),
        }
    }
}

/// The source's error is the [`source`](std::error::Error::source) of [`LoadError::Source`], so
/// `?` into `Box<dyn Error>` or `anyhow` keeps it reachable for downcasting.
impl<E: std::error::Error + 'static> std::error::Error for LoadError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Source(e) => Some(e),
            Self::Panicked(_) | Self::Cancelled => None,
        }
    }
}

/// The message of a worker's panic.
pub(crate) fn worker_panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    crate::sync::panic_message(payload, "a worker panicked")
}
