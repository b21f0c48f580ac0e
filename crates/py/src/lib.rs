//! The Python bindings of dataloader-rs: the `dataloader_rs._native` extension module.
//!
//! - [`loader`]: the native loader over a Python dataset and the iterator of an epoch.
//! - [`sources`]: the core sources of a loader: Python, Rust (a [`dlrs_io::Pipeline`]) and async
//!   datasets, and the transforms of async items on the loader's pool.
//! - [`pipeline`]: what happens to each item after its fetch: transform, collation.
//! - [`run`]: sharding, resume progress and skipped samples, kept across epochs.
//! - [`seam`]: waiting on Rust with the interpreter released and signals checked.
//! - [`attach`]: the loader's threads attach to the interpreter keeping one thread state each.
//! - [`datasets`]: `HttpDataset`, `FileDataset`, `ObjectStoreDataset`, `TarDataset` and their
//!   arguments.
//! - [`worker`]: `get_worker_info()` and per-item seeds on the loader's threads.
//! - [`errors`]: every Rust error as a Python exception, in one place.
//! - [`gc`]: what the loader's pyclasses report to the garbage collector.
//! - [`text`]: how Python objects are named in error messages.
//! - [`transforms`]: the Rust image transforms (fixed and random), `Image`, `ImageCollator` /
//!   `ImageBatch`, and their zero-copy views (buffer protocol, DLPack).
//!
//! PyO3 is pinned to 0.28.3 (see the root Cargo.toml); this crate avoids the APIs of its two
//! advisories (RUSTSEC-2026-0176, RUSTSEC-2026-0177), and a tidy test in xtask checks it.

use pyo3::prelude::*;

pub mod args;
pub mod attach;
pub mod cli;
pub mod datasets;
pub mod errors;
pub mod gc;
pub mod loader;
pub mod pipeline;
pub mod run;
pub mod seam;
pub mod sources;
pub mod text;
pub mod transforms;
pub mod worker;

/// The threads of dropped loaders that wait (up to 2 s) for the next loader to take them.
#[pyfunction]
fn parked_workers() -> usize {
    dlrs_core::loader::WORKERS.parked()
}

#[pymodule(gil_used = false)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<loader::Loader>()?;
    m.add_class::<loader::BatchIterator>()?;
    transforms::register(m)?;
    m.add_class::<datasets::HttpDataset>()?;
    m.add_class::<datasets::FileDataset>()?;
    m.add_class::<datasets::ObjectStoreDataset>()?;
    m.add_class::<datasets::TarDataset>()?;
    m.add_class::<datasets::TarStream>()?;
    m.add_class::<datasets::TarStreamIter>()?;
    m.add(
        "ShardChangedError",
        m.py().get_type::<errors::ShardChangedError>(),
    )?;
    m.add_function(wrap_pyfunction!(cli::cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(parked_workers, m)?)?;
    m.add_function(wrap_pyfunction!(worker::worker_state, m)?)?;
    let exiting = wrap_pyfunction!(attach::interpreter_exiting, m)?;
    m.py()
        .import("atexit")?
        .call_method1("register", (exiting,))?;
    if !attach::forget_threads_in_forked_children() {
        return Err(pyo3::exceptions::PyMemoryError::new_err(
            "cannot register dataloader-rs's fork handler",
        ));
    }
    Ok(())
}
