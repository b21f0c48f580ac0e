//! The arguments of the Rust datasets' constructors, read from Python: location lists, template
//! columns, headers, object-store options, retry settings, durations and sizes.

use std::path::PathBuf;
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyString};

use dlrs_io::{Column, FetchOptions, RetryOptions};

use crate::errors::io_error;
use crate::text::{shown, type_name, wrong_type};

/// A non-negative int argument (bools and other types are a TypeError, negative values a
/// ValueError).
pub fn non_negative(name: &str, value: &Bound<'_, PyAny>) -> PyResult<u64> {
    if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, got {value}"
        )));
    }
    let Ok(int) = value.extract::<i128>() else {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, got {} ({})",
            shown(value),
            type_name(value)
        )));
    };
    u64::try_from(int).map_err(|_| {
        PyValueError::new_err(format!(
            "{name} must be a non-negative int below 2**64, got {int}"
        ))
    })
}

/// `max_bytes`, 64 MiB when not given.
pub fn max_bytes(value: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
    value.map_or(Ok(dlrs_io::DEFAULT_MAX_BYTES), |v| {
        non_negative("max_bytes", v)
    })
}

/// A number of seconds (finite, ≥ 0), or None.
pub fn duration(name: &str, value: Option<f64>) -> PyResult<Option<Duration>> {
    value
        .map(|v| dlrs_io::seconds(name, v).map_err(|e| io_error(&e)))
        .transpose()
}

/// The keyword arguments of a dataset constructor (`**options` in its signature; its
/// `text_signature` and `_native.pyi` spell them out): the names it takes, each read once.
pub struct Keywords<'py> {
    given: Vec<(String, Bound<'py, PyAny>)>,
}

impl<'py> Keywords<'py> {
    /// The keywords of a call of `what`, which takes those in `known`.
    pub fn new(
        what: &str,
        kwargs: Option<&Bound<'py, PyDict>>,
        known: &[&str],
    ) -> PyResult<Keywords<'py>> {
        let mut given = Vec::new();
        for (key, value) in kwargs.into_iter().flatten() {
            let key: String = key.extract()?;
            if !known.contains(&key.as_str()) {
                // The names it takes, which tests hold against the signature and the stub.
                return Err(PyTypeError::new_err(format!(
                    "{what}() got an unexpected keyword argument '{key}'; it takes {}",
                    known.join(", ")
                )));
            }
            given.push((key, value));
        }
        Ok(Keywords { given })
    }

    /// The value given for `name`; None is the same as not given.
    pub fn get(&self, name: &str) -> Option<&Bound<'py, PyAny>> {
        self.given
            .iter()
            .find(|(k, v)| k == name && !v.is_none())
            .map(|(_, v)| v)
    }

    /// A number of seconds or None (no limit) for `name`; `default` when not given.
    pub fn seconds(&self, name: &str, default: Option<Duration>) -> PyResult<Option<Duration>> {
        let Some((_, value)) = self.given.iter().find(|(k, _)| k == name) else {
            return Ok(default);
        };
        if value.is_none() {
            return Ok(None);
        }
        let seconds = self.number(name, value)?;
        duration(name, Some(seconds))
    }

    /// A bool for `name`, false when not given.
    pub fn flag(&self, name: &str) -> PyResult<bool> {
        self.get(name)
            .map_or(Ok(false), |v| super::flag_arg(name, v))
    }

    /// A number for `name`, `default` when not given.
    pub fn float(&self, name: &str, default: f64) -> PyResult<f64> {
        self.get(name).map_or(Ok(default), |v| self.number(name, v))
    }

    fn number(&self, name: &str, value: &Bound<'py, PyAny>) -> PyResult<f64> {
        value
            .extract::<f64>()
            .map_err(|_| wrong_type(&format!("{name} must be a number of seconds"), value))
    }

    /// The fetch options every Rust dataset takes: `timeout`, `retries`, `backoff`,
    /// `max_backoff` and `max_bytes`, checked in that order; `defaults` for those not given.
    pub fn fetch(&self, defaults: FetchOptions) -> PyResult<FetchOptions> {
        let timeout = self.seconds("timeout", defaults.timeout)?;
        fetch(
            timeout,
            self.get("retries"),
            defaults,
            self.float("backoff", 0.1)?,
            self.float("max_backoff", 5.0)?,
            self.get("max_bytes"),
        )
    }
}

/// The names [`Keywords::fetch`] reads.
pub const FETCH_KEYWORDS: [&str; 5] = ["timeout", "retries", "backoff", "max_backoff", "max_bytes"];

/// The fetch options of every Rust dataset: `timeout` (already read), then `retries` (the
/// dataset's default when not given), `backoff`, `max_backoff` and `max_bytes`, checked in
/// that order.
pub fn fetch(
    timeout: Option<Duration>,
    retries: Option<&Bound<'_, PyAny>>,
    defaults: FetchOptions,
    backoff: f64,
    max_backoff: f64,
    max_bytes: Option<&Bound<'_, PyAny>>,
) -> PyResult<FetchOptions> {
    Ok(FetchOptions {
        timeout,
        retry: retry(retries, defaults.retry.retries, backoff, max_backoff)?,
        max_bytes: self::max_bytes(max_bytes)?,
    })
}

/// `retries` (`default` when not given), `backoff`, `max_backoff`.
pub fn retry(
    retries: Option<&Bound<'_, PyAny>>,
    default: u32,
    backoff: f64,
    max_backoff: f64,
) -> PyResult<RetryOptions> {
    let retries = match retries {
        Some(r) => u32::try_from(non_negative("retries", r)?)
            .map_err(|_| PyValueError::new_err("retries must be below 2**32"))?,
        None => default,
    };
    let backoff = dlrs_io::seconds("backoff", backoff).map_err(|e| io_error(&e))?;
    let max_backoff = dlrs_io::seconds("max_backoff", max_backoff).map_err(|e| io_error(&e))?;
    Ok(RetryOptions {
        retries,
        backoff,
        max_backoff,
    })
}

/// Refuses a str or bytes where a sequence of them is expected (iterating it would give
/// characters).
fn not_a_single_string(name: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
    if value.is_instance_of::<PyString>() || value.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be a sequence of str, not a single {}",
            type_name(value)
        )));
    }
    Ok(())
}

/// A sequence of str (URLs, object keys).
pub fn strs(name: &str, value: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    not_a_single_string(name, value)?;
    let iter = value
        .try_iter()
        .map_err(|_| wrong_type(&format!("{name} must be a sequence of str"), value))?;
    let mut out = Vec::with_capacity(value.len().unwrap_or(0));
    for (i, item) in iter.enumerate() {
        let item = item?;
        let s = item.cast::<PyString>().map_err(|_| {
            PyTypeError::new_err(format!(
                "{name} must be a sequence of str: item {i} is {}",
                type_name(&item)
            ))
        })?;
        out.push(s.to_str()?.to_owned());
    }
    Ok(out)
}

/// A sequence of paths (str or os.PathLike).
pub fn paths(value: &Bound<'_, PyAny>) -> PyResult<Vec<PathBuf>> {
    not_a_single_string("paths", value)?;
    let iter = value
        .try_iter()
        .map_err(|_| wrong_type("paths must be a sequence of str or os.PathLike", value))?;
    let mut out = Vec::with_capacity(value.len().unwrap_or(0));
    for (i, item) in iter.enumerate() {
        let item = item?;
        out.push(path("paths", i, &item)?);
    }
    Ok(out)
}

/// One path: a str or an os.PathLike (whose `__fspath__` gives str or bytes).
pub fn path(name: &str, i: usize, item: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    item.extract::<PathBuf>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{name} must hold str or os.PathLike: item {i} is {}",
            type_name(item)
        ))
    })
}

/// The `(key, value)` pairs of the mapping `value`, read as they are iterated; `must` is the
/// rule of the TypeError (with the type of `value`) when it has no `items()`.
fn pairs<'py>(
    value: &Bound<'py, PyAny>,
    must: &str,
) -> PyResult<impl Iterator<Item = PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)>>> {
    let items = value
        .call_method0("items")
        .map_err(|_| wrong_type(must, value))?;
    Ok(items.try_iter()?.map(|pair| pair?.extract()))
}

/// `{name: value}` pairs of str from a mapping (headers, object-store options), or none.
pub fn str_pairs(name: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(String, String)>> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for pair in pairs(value, &format!("{name} must be a mapping of str to str"))? {
        let (key, val) = pair?;
        let (Ok(key), Ok(val)) = (key.cast::<PyString>(), val.cast::<PyString>()) else {
            return Err(PyTypeError::new_err(format!(
                "{name} must be a mapping of str to str: {} maps to {}",
                shown(&key),
                type_name(&val)
            )));
        };
        out.push((key.to_str()?.to_owned(), val.to_str()?.to_owned()));
    }
    Ok(out)
}

/// The columns of a template: a mapping of column names to sequences (or numpy arrays) of ints
/// or of strs.
pub fn columns(value: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(String, Column)>> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let must = "columns must be a mapping of column names to sequences of ints or strs";
    for pair in pairs(value, must)? {
        let (key, values) = pair?;
        let name = key
            .cast::<PyString>()
            .map_err(|_| {
                PyTypeError::new_err(format!(
                    "column names must be str, got {} ({})",
                    shown(&key),
                    type_name(&key)
                ))
            })?
            .to_str()?
            .to_owned();
        let column = column(&name, &values)?;
        out.push((name, column));
    }
    Ok(out)
}

fn not_ints_or_strs(name: &str, what: &str) -> PyErr {
    PyTypeError::new_err(format!(
        "column '{name}' must hold ints or strs, but {what}"
    ))
}

/// One column: a numpy array of an integer or str dtype, or a sequence of ints or of strs.
fn column(name: &str, values: &Bound<'_, PyAny>) -> PyResult<Column> {
    if values.is_instance_of::<PyString>() || values.is_instance_of::<PyBytes>() {
        return Err(not_ints_or_strs(
            name,
            &format!("it is a single {}", type_name(values)),
        ));
    }
    // A numpy array: its dtype decides, and tolist() gives Python ints or strs.
    if let Ok(kind) = values
        .getattr("dtype")
        .and_then(|d| d.getattr("kind"))
        .and_then(|k| k.extract::<String>())
    {
        if let Ok(ndim) = values.getattr("ndim").and_then(|n| n.extract::<usize>())
            && ndim != 1
        {
            return Err(not_ints_or_strs(
                name,
                &format!("it is an array of {ndim} dimensions, not 1"),
            ));
        }
        let list = values.call_method0("tolist")?;
        return match kind.as_str() {
            "i" | "u" => ints(name, &list),
            "U" | "O" => sequence(name, &list),
            _ => Err(not_ints_or_strs(
                name,
                &format!(
                    "it is an array of dtype {}",
                    values.getattr("dtype")?.str()?
                ),
            )),
        };
    }
    sequence(name, values)
}

/// The ints of a numpy array's `tolist()`: int64 or smaller as `i64`, uint64 as `u64`.
fn ints(name: &str, list: &Bound<'_, PyAny>) -> PyResult<Column> {
    if let Ok(v) = list.extract::<Vec<i64>>() {
        return Ok(Column::Ints(v));
    }
    match list.extract::<Vec<u64>>() {
        Ok(v) => Ok(Column::UInts(v)),
        Err(_) => Err(PyValueError::new_err(format!(
            "column '{name}' holds an int that does not fit in 64 bits"
        ))),
    }
}

/// The ints of a sequence: `i64` until a value above `i64::MAX` comes, then `u64` (when no
/// value is negative: the two do not fit one 64-bit type).
enum Ints {
    Signed(Vec<i64>),
    Unsigned(Vec<u64>),
}

impl Ints {
    fn is_empty(&self) -> bool {
        match self {
            Ints::Signed(v) => v.is_empty(),
            Ints::Unsigned(v) => v.is_empty(),
        }
    }

    /// Adds `v`; false when it is negative and the column is unsigned.
    fn push_signed(&mut self, v: i64) -> bool {
        match self {
            Ints::Signed(values) => values.push(v),
            Ints::Unsigned(values) => match u64::try_from(v) {
                Ok(v) => values.push(v),
                Err(_) => return false,
            },
        }
        true
    }

    /// Adds `v` (above `i64::MAX`); false when the column holds a negative value.
    fn push_unsigned(&mut self, v: u64) -> bool {
        if let Ints::Signed(values) = self {
            let Ok(unsigned) = values.iter().map(|&v| u64::try_from(v)).collect() else {
                return false;
            };
            *self = Ints::Unsigned(unsigned);
        }
        if let Ints::Unsigned(values) = self {
            values.push(v);
        }
        true
    }
}

/// A sequence whose first value decides: all ints (not bools) or all strs.
fn sequence(name: &str, values: &Bound<'_, PyAny>) -> PyResult<Column> {
    let iter = values
        .try_iter()
        .map_err(|_| not_ints_or_strs(name, &format!("it is a {}", type_name(values))))?;
    let mut int_values = Ints::Signed(Vec::new());
    let mut str_values = Vec::new();
    for (i, item) in iter.enumerate() {
        let item = item?;
        if let Ok(s) = item.cast::<PyString>() {
            if !int_values.is_empty() {
                return Err(not_ints_or_strs(
                    name,
                    &format!("item {i} is a str after ints"),
                ));
            }
            str_values.push(s.to_str()?.to_owned());
            continue;
        }
        if item.is_instance_of::<PyBool>() || !str_values.is_empty() {
            return Err(not_ints_or_strs(
                name,
                &format!("item {i} is {}", type_name(&item)),
            ));
        }
        let fits = match item.extract::<i64>() {
            Ok(v) => int_values.push_signed(v),
            Err(e) if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(item.py()) => item
                .extract::<u64>()
                .is_ok_and(|v| int_values.push_unsigned(v)),
            Err(_) => {
                return Err(not_ints_or_strs(
                    name,
                    &format!("item {i} is {}", type_name(&item)),
                ));
            }
        };
        if !fits {
            return Err(PyValueError::new_err(format!(
                "column '{name}', item {i}: {item} does not fit in 64 bits (ints from -2**63 \
                 to 2**64 - 1, not negative ones with ones of 2**63 or more)"
            )));
        }
    }
    if str_values.is_empty() {
        Ok(match int_values {
            Ints::Signed(v) => Column::Ints(v),
            Ints::Unsigned(v) => Column::UInts(v),
        })
    } else {
        Ok(Column::Strs(str_values))
    }
}

/// An optional length: a non-negative int or None.
pub fn length(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<usize>> {
    value
        .filter(|v| !v.is_none())
        .map(|v| {
            // len() must fit a Py_ssize_t.
            let out_of_range = |got: String| {
                PyValueError::new_err(format!(
                    "length must be between 0 and {} (2**63 - 1), got {got}",
                    isize::MAX
                ))
            };
            let int = (!v.is_instance_of::<PyBool>())
                .then(|| v.extract::<i128>().ok())
                .flatten();
            match int {
                Some(n) => usize::try_from(n)
                    .ok()
                    .filter(|&n| isize::try_from(n).is_ok())
                    .ok_or_else(|| out_of_range(n.to_string())),
                None if v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>() => {
                    Err(out_of_range(v.str()?.to_string()))
                }
                // Not an int: the TypeError of any size argument.
                None => non_negative("length", v)
                    .and_then(|n| usize::try_from(n).map_err(|_| out_of_range(n.to_string()))),
            }
        })
        .transpose()
}
