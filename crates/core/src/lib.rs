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
//! - [`loader`]: the [`Loader`], its validated [`Config`] and the epoch counter.
//! - [`per_process`]: a value built once per process and built again in a forked child.
//! - [`pid`]: the process id, read once per process (a forked child reads its own).
//! - [`stats`]: live counters (batches, items, consumer wait, load latency quantiles).
//! - [`sync`]: poison-tolerant locks, and the message of a caught panic.

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

pub use epoch::{Epoch, LoadError, Recv};
pub use error::Error;
pub use loader::{Config, Loader};
pub use plan::EpochPlan;
pub use pool::{Lot, Pool};
pub use sampler::{Indices, Order, Permutation, Shard, Shuffle};
pub use source::{BatchCtx, Source};
pub use stats::{Fetching, Histogram, ItemStats, StatsSnapshot};
