//! Checks of the arguments Python passes to the native classes: each takes the owner's name and
//! the argument's, and raises `TypeError` or `ValueError` in one message style
//! (`"{owner}: {name} must be ..., got {value}"`). The loader's own arguments (`count_arg`,
//! `flag_arg`, `loader_seed`) are torch's and speak as torch does: without an owner. The
//! dataset constructors' keywords, locations and fetch options are read by [`datasets`].

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyString};

use dlrs_transforms as rt;

use crate::text::{shown, type_name};

pub mod datasets;

/// An int argument (bools refused, `__index__` objects taken) within `[min, max]`.
pub fn int_arg(
    owner: &str,
    name: &str,
    obj: &Bound<'_, PyAny>,
    min: i64,
    max: Option<i64>,
) -> PyResult<i64> {
    let not_int = || {
        PyTypeError::new_err(format!(
            "{owner}: {name} must be an int, got {} ({})",
            shown(obj),
            type_name(obj)
        ))
    };
    if obj.is_instance_of::<PyBool>() || obj.is_instance_of::<PyFloat>() {
        return Err(not_int());
    }
    let v: i128 = obj.extract().map_err(|_| not_int())?;
    let hi = max.unwrap_or(i64::MAX);
    if v < i128::from(min) || v > i128::from(hi) {
        // Without a maximum, only a value below the minimum is told "at least".
        return Err(PyValueError::new_err(match max {
            None if v < i128::from(min) && min > i64::MIN => {
                format!("{owner}: {name} must be at least {min}, got {v}")
            }
            _ => format!("{owner}: {name} must be between {min} and {hi}, got {v}"),
        }));
    }
    Ok(v as i64)
}

pub(crate) fn size_arg(owner: &str, name: &str, obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    Ok(int_arg(owner, name, obj, 1, Some(rt::MAX_SIDE as i64))? as usize)
}

pub(crate) fn float_arg(owner: &str, name: &str, obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{owner}: {name} must be a number, got {}",
            shown(obj)
        )));
    }
    obj.extract::<f64>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{owner}: {name} must be a number, got {} ({})",
            shown(obj),
            type_name(obj)
        ))
    })
}

pub(crate) fn bool_arg(owner: &str, name: &str, obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    obj.cast::<PyBool>().map(|b| b.is_true()).map_err(|_| {
        PyTypeError::new_err(format!(
            "{owner}: {name} must be True or False, got {} ({})",
            shown(obj),
            type_name(obj)
        ))
    })
}

pub(crate) fn str_arg(owner: &str, name: &str, obj: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_str()?.to_owned());
    }
    // Enums such as torchvision's InterpolationMode carry the name as a str `.value`.
    if let Ok(v) = obj.getattr("value")
        && let Ok(s) = v.extract::<String>()
    {
        return Ok(s);
    }
    Err(PyTypeError::new_err(format!(
        "{owner}: {name} must be a str, got {} ({})",
        shown(obj),
        type_name(obj)
    )))
}

/// The elements of a list or tuple argument (str and bytes are not sequences here).
pub(crate) fn seq_arg<'py>(obj: &Bound<'py, PyAny>) -> Option<Vec<Bound<'py, PyAny>>> {
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return None;
    }
    if obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyFloat>() {
        return None;
    }
    let items: PyResult<Vec<_>> = obj.try_iter().ok()?.collect();
    items.ok()
}

/// An int, or a sequence of one or two ints (height, width): torchvision's `size`.
pub(crate) fn hw_arg(owner: &str, name: &str, obj: &Bound<'_, PyAny>) -> PyResult<SizeArg> {
    match seq_arg(obj) {
        None => Ok(SizeArg::One(size_arg(owner, name, obj)?)),
        Some(v) if v.len() == 1 => Ok(SizeArg::One(size_arg(owner, name, &v[0])?)),
        Some(v) if v.len() == 2 => Ok(SizeArg::Two(
            size_arg(owner, name, &v[0])?,
            size_arg(owner, name, &v[1])?,
        )),
        Some(v) => Err(PyValueError::new_err(format!(
            "{owner}: {name} must be an int or a sequence of 1 or 2 ints (height, width), got {} values",
            v.len()
        ))),
    }
}

/// torchvision's `padding`: an int (every side), or 1, 2 (left/right, top/bottom) or 4 (left,
/// top, right, bottom) ints.
pub(crate) fn padding_arg(owner: &str, padding: &Bound<'_, PyAny>) -> PyResult<rt::Padding> {
    let one = |v: &Bound<'_, PyAny>| -> PyResult<usize> {
        Ok(int_arg(owner, "padding", v, 0, Some(rt::MAX_SIDE as i64))? as usize)
    };
    Ok(match seq_arg(padding) {
        None => rt::Padding::All(one(padding)?),
        Some(v) => match v.len() {
            1 => rt::Padding::All(one(&v[0])?),
            2 => rt::Padding::Pair(one(&v[0])?, one(&v[1])?),
            4 => rt::Padding::Each {
                left: one(&v[0])?,
                top: one(&v[1])?,
                right: one(&v[2])?,
                bottom: one(&v[3])?,
            },
            n => {
                return Err(PyValueError::new_err(format!(
                    "{owner}: padding must be an int or a sequence of 1, 2 or 4 ints, got {n} values"
                )));
            }
        },
    })
}

pub(crate) enum SizeArg {
    One(usize),
    Two(usize, usize),
}

pub(crate) fn fill_arg(owner: &str, obj: &Bound<'_, PyAny>) -> PyResult<rt::Fill> {
    match seq_arg(obj) {
        None => Ok(rt::Fill::Value(float_arg(owner, "fill", obj)?)),
        Some(v) if (1..=4).contains(&v.len()) => Ok(rt::Fill::PerChannel(
            v.iter()
                .map(|x| float_arg(owner, "fill", x))
                .collect::<PyResult<_>>()?,
        )),
        Some(v) => Err(PyValueError::new_err(format!(
            "{owner}: fill must be a number or a sequence of 1 to 4 numbers, got {} values",
            v.len()
        ))),
    }
}

pub(crate) fn floats_arg(owner: &str, name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<f64>> {
    match seq_arg(obj) {
        None => Ok(vec![float_arg(owner, name, obj)?]),
        Some(v) => v.iter().map(|x| float_arg(owner, name, x)).collect(),
    }
}

/// A seed: any int (bools refused), taken modulo 2^64 as the loader takes its seeds.
pub fn seed_arg(owner: &str, obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    seed_of(&format!("{owner}: seed"), obj)
}

/// The loader's `seed=`, as [`seed_arg`].
pub fn loader_seed(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    seed_of("seed", obj)
}

fn seed_of(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, got {} ({})",
            shown(obj),
            type_name(obj)
        )));
    }
    obj.rem(1u128 << 64)?.extract()
}

/// A loader's int argument, of any size (bools refused, `__index__` objects such as numpy
/// integers taken), within `[min, max]`: the int itself, for the loader's attributes.
pub fn count_arg<'py>(
    name: &str,
    obj: &Bound<'py, PyAny>,
    min: i64,
    max: Option<i64>,
) -> PyResult<Bound<'py, PyInt>> {
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, got {}",
            shown(obj)
        )));
    }
    let value = match obj.cast::<PyInt>() {
        Ok(v) => v.clone(),
        Err(_) => obj
            .py()
            .import("operator")?
            .getattr("index")?
            .call1((obj,))
            .and_then(|v| Ok(v.cast_into::<PyInt>()?))
            .map_err(|_| {
                PyTypeError::new_err(format!(
                    "{name} must be an int, got {} ({})",
                    shown(obj),
                    type_name(obj)
                ))
            })?,
    };
    if value.lt(min)? {
        return Err(PyValueError::new_err(format!(
            "{name} must be at least {min}, got {value}"
        )));
    }
    if let Some(max) = max
        && value.gt(max)?
    {
        return Err(PyValueError::new_err(format!(
            "{name} must be at most {max}, got {value}"
        )));
    }
    Ok(value)
}

/// A non-negative int as a `usize`, a larger one as `isize::MAX` (a batch never holds more than
/// the epoch, nor the ring more than its batches: any larger value acts the same).
pub fn saturating_usize(value: &Bound<'_, PyInt>) -> usize {
    value
        .extract::<usize>()
        .map_or(isize::MAX.unsigned_abs(), |v| {
            v.min(isize::MAX.unsigned_abs())
        })
}

/// A loader's bool argument (torch's: `shuffle`, `drop_last`).
pub fn flag_arg(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    obj.cast::<PyBool>().map(|b| b.is_true()).map_err(|_| {
        PyTypeError::new_err(format!(
            "{name} must be a bool, got {} ({})",
            shown(obj),
            type_name(obj)
        ))
    })
}
