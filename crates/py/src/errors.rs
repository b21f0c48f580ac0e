//! Every Rust error of the workspace becomes a Python exception here, one arm per variant.
//!
//! Exceptions raised by user code (a dataset, a transform, a collate_fn, a sampler) travel
//! through Rust as the original `PyErr` and are never re-created, so they keep their type,
//! message and traceback.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use dlrs_core::LoadError;

/// A configuration the core refused: always the caller's fault.
pub fn core_error(e: &dlrs_core::Error) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// Why a batch did not load, as the exception the consumer gets.
pub fn load_error(e: LoadError<PyErr>) -> PyErr {
    match e {
        LoadError::Source(err) => err,
        LoadError::Panicked(msg) => {
            PyRuntimeError::new_err(format!("a dataloader-rs worker panicked: {msg}"))
        }
        LoadError::Cancelled => PyRuntimeError::new_err("the batch was abandoned with its epoch"),
    }
}
