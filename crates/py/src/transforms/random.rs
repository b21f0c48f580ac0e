//! The random transforms of `dataloader_rs.transforms`: subclasses of `RandomTransform` (itself
//! a `Transform`), with torchvision's arguments, defaults and argument errors, and
//! `params(height=, width=, seed=)`, the parameters a call with that seed draws.

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use dlrs_transforms as rt;
use dlrs_transforms::{RandomParams, Value};

use super::fixed::{
    PyTransform, call_key, fill_repr, floats_repr, py_bool, rt_err, transform_list,
};
use crate::args::{
    SizeArg, bool_arg, fill_arg, float_arg, hw_arg, int_arg, padding_arg, seq_arg, size_arg,
    str_arg,
};
use crate::text::{shown, type_name};

/// The base class of the random transforms: `t(obj, seed=s)` draws from `s`, and
/// `t.params(height=h, width=w, seed=s)` says what it draws for an image of `h × w`.
#[pyclass(
    frozen,
    subclass,
    extends = PyTransform,
    module = "dataloader_rs.transforms",
    name = "RandomTransform"
)]
pub struct PyRandom {
    params: Arc<dyn RandomParams>,
}

fn value_into_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Bool(b) => pyo3::types::PyBool::new(py, *b).to_owned().into_any(),
        Value::Int(i) => i.into_pyobject(py)?.into_any(),
        Value::Float(f) => f.into_pyobject(py)?.into_any(),
        Value::Ints(v) => PyList::new(py, v)?.into_any(),
        Value::Str(s) => PyString::new(py, s).into_any(),
        Value::None => py.None().into_bound(py),
    })
}

#[pymethods]
impl PyRandom {
    /// The parameters a call with `seed` draws for an image of `height × width`, as a dict
    /// named as torchvision names them (a fresh seed when none is given).
    #[pyo3(signature = (*, height, width, seed = None))]
    fn params<'py>(
        slf: &Bound<'py, Self>,
        height: &Bound<'py, PyAny>,
        width: &Bound<'py, PyAny>,
        seed: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let py = slf.py();
        let base = slf.as_super().get();
        let owner = base.repr().split('(').next().unwrap_or("RandomTransform");
        let h = size_arg(owner, "height", height)?;
        let w = size_arg(owner, "width", width)?;
        let key = call_key(owner, seed)?;
        let params = slf.get().params.params(key, h, w).map_err(rt_err)?;
        let dict = PyDict::new(py);
        for (name, value) in &params.0 {
            dict.set_item(name, value_into_py(py, value)?)?;
        }
        Ok(dict)
    }
}

/// The initializer of a random class over `t`.
fn random_init<T: RandomParams + 'static>(t: T, repr: String) -> PyClassInitializer<PyRandom> {
    let t = Arc::new(t);
    PyClassInitializer::from(PyTransform::shared(t.clone(), repr))
        .add_subclass(PyRandom { params: t })
}

// ----- arguments -----

/// A `(min, max)`-like pair of numbers: torchvision's `scale` and `ratio`.
fn pair_arg(owner: &str, name: &str, obj: &Bound<'_, PyAny>) -> PyResult<(f64, f64)> {
    match seq_arg(obj) {
        Some(v) if v.len() == 2 => Ok((
            float_arg(owner, name, &v[0])?,
            float_arg(owner, name, &v[1])?,
        )),
        _ => Err(PyTypeError::new_err(format!(
            "{owner}: {name} should be a sequence of two numbers, got {} ({})",
            shown(obj),
            type_name(obj)
        ))),
    }
}

fn p_arg(owner: &str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
    let p = obj.map_or(Ok(0.5), |p| float_arg(owner, "p", p))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(PyValueError::new_err(format!(
            "{owner}: p should be a floating point value in the interval [0.0, 1.0], got {p}"
        )))
    }
}

fn square_or_hw(owner: &str, size: &Bound<'_, PyAny>) -> PyResult<(rt::Size, String)> {
    Ok(match hw_arg(owner, "size", size)? {
        SizeArg::One(s) => (rt::Size::square(s), format!("({s}, {s})")),
        SizeArg::Two(h, w) => (
            rt::Size {
                width: w,
                height: h,
            },
            format!("({h}, {w})"),
        ),
    })
}

fn interpolation_arg(
    owner: &'static str,
    obj: Option<&Bound<'_, PyAny>>,
) -> PyResult<rt::tv::Interpolation> {
    let name = obj.map_or(Ok("bilinear".to_owned()), |i| {
        str_arg(owner, "interpolation", i)
    })?;
    rt::tv::Interpolation::parse(owner, &name).map_err(rt_err)
}

// ----- the classes -----

type Init<T> = PyResult<PyClassInitializer<T>>;

/// `RandomResizedCrop(size, scale=(0.08, 1.0), ratio=(3/4, 4/3), interpolation="bilinear",
/// antialias=True)`.
#[pyclass(frozen, extends = PyRandom, module = "dataloader_rs.transforms")]
pub struct RandomResizedCrop;

#[pymethods]
impl RandomResizedCrop {
    #[new]
    #[pyo3(
        signature = (size, scale = None, ratio = None, interpolation = None, antialias = None),
        text_signature = "(size, scale=(0.08, 1.0), ratio=(0.75, 1.3333333333333333), interpolation=\"bilinear\", antialias=True)"
    )]
    fn new(
        size: &Bound<'_, PyAny>,
        scale: Option<&Bound<'_, PyAny>>,
        ratio: Option<&Bound<'_, PyAny>>,
        interpolation: Option<&Bound<'_, PyAny>>,
        antialias: Option<&Bound<'_, PyAny>>,
    ) -> Init<Self> {
        const NAME: &str = "RandomResizedCrop";
        let (size, size_repr) = square_or_hw(NAME, size)?;
        let scale = scale.map_or(Ok((0.08, 1.0)), |s| pair_arg(NAME, "scale", s))?;
        let ratio = ratio.map_or(Ok((3.0 / 4.0, 4.0 / 3.0)), |r| pair_arg(NAME, "ratio", r))?;
        let interp = interpolation_arg(NAME, interpolation)?;
        let antialias = antialias.map_or(Ok(true), |a| bool_arg(NAME, "antialias", a))?;
        let t =
            rt::RandomResizedCrop::new(size, scale, ratio, interp, antialias).map_err(rt_err)?;
        let repr = format!(
            "RandomResizedCrop(size={size_repr}, scale=({:?}, {:?}), ratio=({:?}, {:?}), interpolation={:?}, antialias={})",
            scale.0,
            scale.1,
            ratio.0,
            ratio.1,
            interp.name(),
            py_bool(antialias)
        );
        Ok(random_init(t, repr).add_subclass(RandomResizedCrop))
    }
}

/// `RandomCrop(size, padding=None, pad_if_needed=False, fill=0, padding_mode="constant")`.
#[pyclass(frozen, extends = PyRandom, module = "dataloader_rs.transforms")]
pub struct RandomCrop;

#[pymethods]
impl RandomCrop {
    #[new]
    #[pyo3(
        signature = (size, padding = None, pad_if_needed = None, fill = None, padding_mode = None),
        text_signature = "(size, padding=None, pad_if_needed=False, fill=0, padding_mode=\"constant\")"
    )]
    fn new(
        size: &Bound<'_, PyAny>,
        padding: Option<&Bound<'_, PyAny>>,
        pad_if_needed: Option<&Bound<'_, PyAny>>,
        fill: Option<&Bound<'_, PyAny>>,
        padding_mode: Option<&Bound<'_, PyAny>>,
    ) -> Init<Self> {
        const NAME: &str = "RandomCrop";
        let (size, size_repr) = square_or_hw(NAME, size)?;
        let padding = match padding.filter(|p| !p.is_none()) {
            None => None,
            Some(p) => Some(padding_arg(NAME, p)?.ltrb()),
        };
        let pad_if_needed =
            pad_if_needed.map_or(Ok(false), |b| bool_arg(NAME, "pad_if_needed", b))?;
        let fill = fill.map_or(Ok(rt::Fill::default()), |f| fill_arg(NAME, f))?;
        let mode_name = padding_mode.map_or(Ok("constant".to_owned()), |m| {
            str_arg(NAME, "padding_mode", m)
        })?;
        let mode: rt::PaddingMode = mode_name.parse().map_err(|_| {
            PyValueError::new_err(format!(
                "{NAME}: padding_mode should be either constant, edge, reflect or symmetric, got {mode_name:?}"
            ))
        })?;
        let padding_repr = padding.map_or_else(
            || "None".to_owned(),
            |[l, t, r, b]| format!("({l}, {t}, {r}, {b})"),
        );
        let t = rt::RandomCrop::new(
            size,
            padding.unwrap_or([0; 4]),
            pad_if_needed,
            fill.clone(),
            mode,
        )
        .map_err(rt_err)?;
        let repr = format!(
            "RandomCrop(size={size_repr}, padding={padding_repr}, pad_if_needed={}, fill={}, padding_mode={mode_name:?})",
            py_bool(pad_if_needed),
            fill_repr(&fill)
        );
        Ok(random_init(t, repr).add_subclass(RandomCrop))
    }
}

/// A random flip class: `$name(p=0.5)` flips with probability `p` (the Rust transform of the
/// same name).
macro_rules! random_flip {
    ($name:ident, $doc:literal) => {
        #[doc = $doc]
        #[pyclass(frozen, extends = PyRandom, module = "dataloader_rs.transforms")]
        pub struct $name;

        #[pymethods]
        impl $name {
            #[new]
            #[pyo3(signature = (p = None), text_signature = "(p=0.5)")]
            fn new(p: Option<&Bound<'_, PyAny>>) -> Init<Self> {
                let p = p_arg(stringify!($name), p)?;
                let t = rt::$name::new(p).map_err(rt_err)?;
                let repr = format!(concat!(stringify!($name), "(p={:?})"), p);
                Ok(random_init(t, repr).add_subclass($name))
            }
        }
    };
}

random_flip!(RandomHorizontalFlip, "`RandomHorizontalFlip(p=0.5)`.");
random_flip!(RandomVerticalFlip, "`RandomVerticalFlip(p=0.5)`.");

/// `RandomErasing(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0)`.
#[pyclass(frozen, extends = PyRandom, module = "dataloader_rs.transforms")]
pub struct RandomErasing;

#[pymethods]
impl RandomErasing {
    #[new]
    #[pyo3(
        signature = (p = None, scale = None, ratio = None, value = None),
        text_signature = "(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0)"
    )]
    fn new(
        p: Option<&Bound<'_, PyAny>>,
        scale: Option<&Bound<'_, PyAny>>,
        ratio: Option<&Bound<'_, PyAny>>,
        value: Option<&Bound<'_, PyAny>>,
    ) -> Init<Self> {
        const NAME: &str = "RandomErasing";
        let p = p_arg(NAME, p)?;
        let scale = scale.map_or(Ok((0.02, 0.33)), |s| pair_arg(NAME, "scale", s))?;
        let ratio = ratio.map_or(Ok((0.3, 3.3)), |r| pair_arg(NAME, "ratio", r))?;
        let (value, value_repr) = match value {
            None => (rt::EraseValue::Values(vec![0.0]), "0.0".to_owned()),
            Some(v) if v.is_instance_of::<PyString>() => {
                let s: String = v.extract()?;
                if s != "random" {
                    return Err(PyValueError::new_err(format!(
                        "{NAME}: if value is a str, it should be 'random', got {s:?}"
                    )));
                }
                (rt::EraseValue::Random, "'random'".to_owned())
            }
            Some(v) => match seq_arg(v) {
                Some(items) => {
                    let vals = items
                        .iter()
                        .map(|x| float_arg(NAME, "value", x))
                        .collect::<PyResult<Vec<f64>>>()?;
                    let repr = floats_repr(&vals);
                    (rt::EraseValue::Values(vals), repr)
                }
                None => {
                    let x = float_arg(NAME, "value", v)?;
                    (rt::EraseValue::Values(vec![x]), format!("{x:?}"))
                }
            },
        };
        let t = rt::RandomErasing::new(p, scale, ratio, value).map_err(rt_err)?;
        let repr = format!(
            "RandomErasing(p={p:?}, scale=({:?}, {:?}), ratio=({:?}, {:?}), value={value_repr})",
            scale.0, scale.1, ratio.0, ratio.1
        );
        Ok(random_init(t, repr).add_subclass(RandomErasing))
    }
}

/// `RandomApply(transforms, p=0.5)`: the transforms in order, all or none.
#[pyclass(frozen, extends = PyRandom, module = "dataloader_rs.transforms")]
pub struct RandomApply {
    items: Vec<Py<PyTransform>>,
}

#[pymethods]
impl RandomApply {
    #[new]
    #[pyo3(signature = (transforms, p = None), text_signature = "(transforms, p=0.5)")]
    fn new(transforms: &Bound<'_, PyAny>, p: Option<&Bound<'_, PyAny>>) -> Init<Self> {
        const NAME: &str = "RandomApply";
        let (items, rust, reprs) = transform_list(NAME, transforms, "")?;
        if items.is_empty() {
            return Err(PyValueError::new_err(format!(
                "{NAME}: pass at least one transform"
            )));
        }
        let p = p_arg(NAME, p)?;
        let t = rt::RandomApply::new(rust, p).map_err(rt_err)?;
        let repr = format!("RandomApply([{}], p={p:?})", reprs.join(", "));
        Ok(random_init(t, repr).add_subclass(RandomApply { items }))
    }

    /// The transforms, as given.
    #[getter]
    fn transforms<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.items.iter().map(|t| t.clone_ref(py)))
    }
}

/// One of `ColorJitter`'s arguments as torchvision's `_check_input` reads it: a number `v` is
/// `[center - v, center + v]` (the low end at least 0 when `clip`), a pair is taken as is.
fn jitter_arg(
    name: &str,
    obj: Option<&Bound<'_, PyAny>>,
    center: f64,
    clip: bool,
) -> PyResult<Option<(f64, f64)>> {
    let Some(obj) = obj else {
        return Ok(None);
    };
    match seq_arg(obj) {
        Some(v) if v.len() == 2 => Ok(Some((
            float_arg("ColorJitter", name, &v[0])?,
            float_arg("ColorJitter", name, &v[1])?,
        ))),
        None if !obj.is_instance_of::<pyo3::types::PyBool>()
            && (obj.is_instance_of::<pyo3::types::PyInt>()
                || obj.is_instance_of::<pyo3::types::PyFloat>()) =>
        {
            let v: f64 = obj.extract()?;
            if v < 0.0 {
                return Err(PyValueError::new_err(format!(
                    "ColorJitter: if {name} is a single number, it must be non negative, got {v}"
                )));
            }
            let lo = center - v;
            Ok(Some((if clip { lo.max(0.0) } else { lo }, center + v)))
        }
        _ => Err(PyTypeError::new_err(format!(
            "ColorJitter: {name}={} should be a single number or a sequence with length 2",
            shown(obj)
        ))),
    }
}

fn range_repr(r: Option<(f64, f64)>) -> String {
    r.map_or_else(|| "None".to_owned(), |(a, b)| format!("({a:?}, {b:?})"))
}

/// `ColorJitter(brightness=0, contrast=0, saturation=0, hue=0)`.
#[pyclass(frozen, extends = PyRandom, module = "dataloader_rs.transforms")]
pub struct ColorJitter;

#[pymethods]
impl ColorJitter {
    #[new]
    #[pyo3(
        signature = (brightness = None, contrast = None, saturation = None, hue = None),
        text_signature = "(brightness=0, contrast=0, saturation=0, hue=0)"
    )]
    fn new(
        brightness: Option<&Bound<'_, PyAny>>,
        contrast: Option<&Bound<'_, PyAny>>,
        saturation: Option<&Bound<'_, PyAny>>,
        hue: Option<&Bound<'_, PyAny>>,
    ) -> Init<Self> {
        let b = jitter_arg("brightness", brightness, 1.0, true)?;
        let c = jitter_arg("contrast", contrast, 1.0, true)?;
        let s = jitter_arg("saturation", saturation, 1.0, true)?;
        let h = jitter_arg("hue", hue, 0.0, false)?;
        let t = rt::ColorJitter::new(b, c, s, h).map_err(rt_err)?;
        // The ranges as kept (an identity range is off: None).
        let kept =
            |r: Option<(f64, f64)>, center: f64| r.filter(|&(a, b)| !(a == center && b == center));
        let repr = format!(
            "ColorJitter(brightness={}, contrast={}, saturation={}, hue={})",
            range_repr(kept(b, 1.0)),
            range_repr(kept(c, 1.0)),
            range_repr(kept(s, 1.0)),
            range_repr(kept(h, 0.0))
        );
        Ok(random_init(t, repr).add_subclass(ColorJitter))
    }
}

/// `RandomGrayscale(p=0.1)`.
#[pyclass(frozen, extends = PyRandom, module = "dataloader_rs.transforms")]
pub struct RandomGrayscale;

#[pymethods]
impl RandomGrayscale {
    #[new]
    #[pyo3(signature = (p = None), text_signature = "(p=0.1)")]
    fn new(p: Option<&Bound<'_, PyAny>>) -> Init<Self> {
        let p = match p {
            None => 0.1,
            Some(p) => p_arg("RandomGrayscale", Some(p))?,
        };
        let t = rt::RandomGrayscale::new(p).map_err(rt_err)?;
        Ok(random_init(t, format!("RandomGrayscale(p={p:?})")).add_subclass(RandomGrayscale))
    }
}

/// `TrivialAugmentWide(num_magnitude_bins=31, interpolation="nearest", fill=None)`.
#[pyclass(frozen, extends = PyRandom, module = "dataloader_rs.transforms")]
pub struct TrivialAugmentWide;

#[pymethods]
impl TrivialAugmentWide {
    #[new]
    #[pyo3(
        signature = (num_magnitude_bins = None, interpolation = None, fill = None),
        text_signature = "(num_magnitude_bins=31, interpolation=\"nearest\", fill=None)"
    )]
    fn new(
        num_magnitude_bins: Option<&Bound<'_, PyAny>>,
        interpolation: Option<&Bound<'_, PyAny>>,
        fill: Option<&Bound<'_, PyAny>>,
    ) -> Init<Self> {
        const NAME: &str = "TrivialAugmentWide";
        let bins = num_magnitude_bins.map_or(Ok(31), |b| {
            int_arg(NAME, "num_magnitude_bins", b, 2, Some(1 << 20))
        })? as usize;
        let interp_name = interpolation.map_or(Ok("nearest".to_owned()), |i| {
            str_arg(NAME, "interpolation", i)
        })?;
        let sampling = match interp_name.as_str() {
            "nearest" => rt::tv::affine::Sampling::Nearest,
            "bilinear" => rt::tv::affine::Sampling::Bilinear,
            other => {
                return Err(PyValueError::new_err(format!(
                    "{NAME}: interpolation {other:?} is not one of nearest, bilinear (the modes of F.affine on tensors)"
                )));
            }
        };
        let (fill, fill_repr) = match fill {
            None => (None, "None".to_owned()),
            Some(f) => {
                let parsed = fill_arg(NAME, f)?;
                let repr = fill_repr(&parsed);
                let values = match parsed {
                    rt::Fill::Value(v) => vec![v as f32],
                    rt::Fill::PerChannel(v) => v.iter().map(|&x| x as f32).collect(),
                };
                (Some(values), repr)
            }
        };
        let t = rt::TrivialAugmentWide::new(bins, sampling, fill).map_err(rt_err)?;
        let repr = format!(
            "TrivialAugmentWide(num_magnitude_bins={bins}, interpolation={interp_name:?}, fill={fill_repr})"
        );
        Ok(random_init(t, repr).add_subclass(TrivialAugmentWide))
    }
}
