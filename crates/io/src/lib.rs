//! HTTP, file and object-store datasets for dataloader-rs, fetched on a tokio runtime.
//!
//! - [`Runtime`]: the tokio runtime that runs the fetches (lazily built, rebuilt after `fork`).
//! - [`Dataset`]: items as bytes, fetched by `Send + 'static` futures.
//! - [`HttpDataset`], [`FileDataset`], [`ObjectStoreDataset`]: the datasets, each with a
//!   `from_template` constructor ([`template`]), behind the cargo features `http`,
//!   `object-store` and `file` (all on by default; `file` alone builds no HTTP or TLS stack).
//! - [`TarDataset`]: the samples of tar shards (WebDataset layout) on any of those, one range
//!   read per sample ([`tar`]).
//! - [`StreamPipeline`]: items read in order from a stream ([`TarItems`]: tar shards front to
//!   back), batched in the stream's order by the loader's workers taking turns.
//! - [`Cache`] and [`Cached`]: a local disk cache with a byte budget for the datasets that
//!   fetch over the network, shared by the processes of a machine.
//! - [`Error`]: the one error type, classified by [`Error::kind`] ([`ErrorKind`]).
//!
//! A caller on a plain thread fetches many items at once through [`Runtime::block_on`]:
//!
//! ```
//! # #[cfg(feature = "file")] {
//! use dlrs_io::{Dataset, FetchOptions, FileDataset, Runtime, fetch_many};
//!
//! let dir = std::env::temp_dir().join(format!("dlrs-io-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! for i in 0..3 {
//!     std::fs::write(dir.join(format!("{i}.txt")), format!("item {i}"))?;
//! }
//! let template = format!("{}/{{index}}.txt", dir.display());
//! let dataset = FileDataset::from_template(&template, vec![], Some(3), FetchOptions::FILE)?;
//! let runtime = Runtime::new(Some(1))?;
//! let items = runtime.block_on(fetch_many(&dataset, &[2, 0], 8))?;
//! assert_eq!(items[0].as_ref().unwrap(), &b"item 2"[..]);
//! assert_eq!(items[1].as_ref().unwrap(), &b"item 0"[..]);
//! assert!(runtime.block_on(dataset.fetch(3))?.is_err()); // IndexOutOfRange
//! # std::fs::remove_dir_all(&dir)?;
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

mod budget;
mod cache;
mod dataset;
mod error;
#[cfg(feature = "file")]
mod file;
#[cfg(feature = "http")]
mod http;
mod no_follow;
#[cfg(feature = "object-store")]
mod object;
pub mod pipeline;
mod redact;
mod retry;
mod runtime;
mod stats;
pub mod stream_source;
#[cfg(any(feature = "file", feature = "http", feature = "object-store"))]
pub mod tar;
pub mod template;
#[cfg(test)]
mod test_util;
#[cfg(any(feature = "http", feature = "object-store"))]
mod tls;

#[cfg(any(test, feature = "test-server"))]
pub mod test_server;

pub use budget::{Acquire, ItemBudget, Slot};
pub use cache::{Cache, CacheKey, CacheSnapshot, Cached};
pub use dataset::{DEFAULT_MAX_BYTES, Dataset, FetchOptions, fetch_many};
pub use error::{Error, ErrorKind, RequestKind};
#[cfg(feature = "file")]
pub use file::FileDataset;
#[cfg(feature = "http")]
pub use http::{HttpDataset, HttpOptions};
#[cfg(feature = "object-store")]
pub use object::{DEFAULT_OBJECT_TIMEOUT, ObjectStoreDataset, ObjectStoreOptions};
#[cfg(feature = "transforms")]
pub use pipeline::ImageStages;
pub use pipeline::{BatchStream, ItemAt, Pipeline, Stages, TransformPool};
pub use redact::{redact_text, redact_url};
#[cfg(any(feature = "http", feature = "object-store"))]
pub use retry::RETRY_STATUSES;
pub use retry::{RetryOptions, seconds};
pub use runtime::{MAX_THREADS, Runtime};
pub use stats::{IoSnapshot, IoStats};
#[cfg(any(feature = "file", feature = "http", feature = "object-store"))]
pub use stream_source::TarItems;
pub use stream_source::{ItemStream, StreamPipeline};
#[cfg(any(feature = "file", feature = "http", feature = "object-store"))]
pub use tar::{Sample, TarDataset, TarOptions, TarStream};
pub use template::{Column, Target, Template};
