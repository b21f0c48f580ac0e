//! How Python objects are named in error messages.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyType;

/// The TypeError of an argument of the wrong kind: what `must` be, then `obj`'s type.
pub fn wrong_type(must: &str, obj: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!("{must}, got {}", type_name(obj)))
}

/// The name of `obj`'s type, or `?` when it has none.
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    name_of(&obj.get_type())
}

/// The repr of `obj`, or `?` when it has none.
pub fn shown(obj: &Bound<'_, PyAny>) -> String {
    obj.repr()
        .map_or_else(|_| "?".to_owned(), |r| r.to_string())
}

/// The name of `ty`, or `?` when it has none.
pub fn name_of(ty: &Bound<'_, PyType>) -> String {
    ty.name().map_or_else(|_| "?".to_owned(), |n| n.to_string())
}
