//! HTTP, file and object-store datasets for dataloader-rs, fetched on a tokio runtime.
//!
//! - [`Runtime`]: the tokio runtime that runs the fetches (lazily built, rebuilt after `fork`).
//! - [`Dataset`]: items as bytes, fetched by `Send + 'static` futures.
//! - [`HttpDataset`], [`FileDataset`], [`ObjectStoreDataset`]: the datasets, each with a
//!   `from_template` constructor ([`template`]).
//! - [`Error`]: the one error type, with [`Error::python_kind`] for the bindings.

mod dataset;
mod error;
mod file;
mod http;
mod object;
mod per_process;
mod redact;
mod retry;
mod runtime;
pub mod template;
mod tls;

#[cfg(test)]
mod test_server;

pub use dataset::{DEFAULT_MAX_BYTES, Dataset, fetch_many};
pub use error::{Error, PyKind};
pub use file::{FileDataset, FileOptions};
pub use http::{HttpDataset, HttpOptions, RETRY_STATUSES};
pub use object::{DEFAULT_OBJECT_TIMEOUT, ObjectStoreDataset, ObjectStoreOptions};
pub use redact::{redact_text, redact_url};
pub use retry::{RetryOptions, seconds};
pub use runtime::{MAX_THREADS, Runtime};
pub use template::{Column, Target, Template};
