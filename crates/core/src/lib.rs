//! The scheduling core of dataloader-rs: samplers, batching, the worker pool and in-order delivery.
//!
//! This crate knows nothing of Python, tokio or images (a test in `tests/it` checks it from
//! `cargo metadata`). It is generic over what a batch is and what goes wrong while loading one:
//! a [`Source`] turns the dataset indices of one batch into a batch, and a [`Loader`] runs it on
//! a pool of worker threads, handing batches out in order with a bounded number in flight.
//!
//! - [`sampler`]: the order of one epoch ([`Order`]): sequential, a seeded permutation computed
//!   per position (no memory, no start-up cost), or an explicit list stored compactly.
//! - [`plan`]: an epoch cut into batches ([`EpochPlan`]), with `drop_last`.
//! - [`pool`]: the worker threads, created once per loader, 8 MiB stacks, rebuilt after `fork`;
//!   a dropped loader's threads wait in a [`Lot`] for the next loader.
//! - [`epoch`]: one pass over the data: claims, the ring of in-order slots, cancellation.
//! - [`source`]: the [`Source`] trait and the per-batch context that fans items out.
//! - [`config`]: the [`Config`] of a loader (batch size, workers, prefetch), validated once.
//! - [`loader`]: the [`Loader`]: its source, config, pool and epoch counter.
//! - [`error`]: [`Error`] (a configuration refused) and [`LoadError`] (a batch that did not load).
//! - [`per_process`]: a value built once per process and built again in a forked child.
//! - [`pid`]: the process id, read once per process (a forked child reads its own).
//! - [`stats`]: live counters (batches, items, consumer wait, load latency quantiles).
//! - [`sync`]: poison-tolerant locks, the message of a caught panic, and the primitives the
//!   threads share (a model checker's in unit tests under `--cfg dlrs_model`).
//!
//! Getting started: a source whose item `i` is `i²`, loaded by two workers in shuffled batches
//! of 4. An epoch is an iterator of `Result`s (each batch waited for), and a [`LoadError`] is a
//! [`std::error::Error`] when the source's error is one, so `?` takes it.
//!
//! ```
//! use dlrs_core::{BatchCtx, Config, LoadError, Loader, Shuffle, Source};
//!
//! struct Squares;
//!
//! impl Source for Squares {
//!     type Batch = Vec<u64>;
//!     type Error = std::io::Error;
//!
//!     fn load_batch(&self, indices: &[u64], _: &BatchCtx) -> Result<Vec<u64>, LoadError<Self::Error>> {
//!         Ok(indices.iter().map(|i| i * i).collect())
//!     }
//! }
//!
//! let config = Config { batch_size: 4, num_workers: 2, ..Config::default() };
//! let loader = Loader::new(Squares, config)?;
//! let shuffle = Shuffle::seeded(0);
//! let mut epochs = Vec::new();
//! for _ in 0..2 {
//!     // Each call is the next epoch, in a new order.
//!     let mut seen = Vec::new();
//!     for batch in loader.shuffled_epoch(&shuffle, 10) {
//!         let batch = batch?;
//!         assert!(batch.len() <= 4);
//!         seen.extend(batch);
//!     }
//!     epochs.push(seen.clone());
//!     seen.sort_unstable();
//!     assert_eq!(seen, (0..10).map(|i| i * i).collect::<Vec<_>>());
//! }
//! assert_ne!(epochs[0], epochs[1]);
//! assert_eq!(loader.next_epoch_number(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod config;
pub mod epoch;
pub mod error;
pub mod loader;
pub mod per_process;
pub mod pid;
pub mod plan;
pub mod pool;
pub mod sampler;
pub mod source;
pub mod stats;
pub mod sync;

pub use config::Config;
pub use epoch::{Epoch, Recv};
pub use error::{Error, LoadError};
pub use loader::Loader;
pub use plan::EpochPlan;
pub use pool::{Lot, Pool};
pub use sampler::{Indices, Order, Permutation, Shard, Shuffle};
pub use source::{BatchCtx, FromFn, Source, from_fn};
pub use stats::{Fetching, Histogram, ItemStats, StatsSnapshot};

/// How long a wait of the loader may go without looking up whether to stop: a worker waiting on
/// I/O checks that its epoch was not abandoned, a consumer in the bindings checks for Ctrl-C.
pub const WAIT_SLICE: std::time::Duration = std::time::Duration::from_millis(50);
