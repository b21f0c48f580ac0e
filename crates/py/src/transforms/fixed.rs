//! The fixed transforms of `dataloader_rs.transforms` as frozen Python classes, each a subclass
//! of `Transform`, callable as `t(obj) -> Image` with the interpreter released while it runs,
//! and the conversions of items between Python and Rust that every transform shares.

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyMemoryView, PyString};

use dlrs_transforms as rt;
use dlrs_transforms::{Item, Key, Transform};

use super::image::{PyImage, from_array};
use crate::args::{
    SizeArg, bool_arg, fill_arg, floats_arg, hw_arg, int_arg, padding_arg, seed_arg, seq_arg,
    size_arg, str_arg,
};
use crate::errors::image_error;
use crate::text::{shown, type_name, wrong_type};

// ----- calls -----

/// The key of a direct call: `Key::new(seed, 0, 0)`, with a fresh seed when none is given (a
/// new one per call, different in every process, not reproducible).
pub(crate) fn call_key(owner: &str, seed: Option<&Bound<'_, PyAny>>) -> PyResult<Key> {
    let seed = match seed.filter(|s| !s.is_none()) {
        Some(s) => seed_arg(owner, s)?,
        None => fresh_seed(),
    };
    Ok(Key::new(seed, 0, 0))
}

/// A seed no other call of this process (or of a forked child) draws.
fn fresh_seed() -> u64 {
    use std::hash::BuildHasher;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let n = CALLS.fetch_add(1, Ordering::Relaxed);
    STATE
        .get_or_init(Default::default)
        .hash_one((n, std::process::id()))
}

pub(crate) fn rt_err(e: rt::Error) -> PyErr {
    image_error(&e)
}

/// Python's repr of a float list, for `__repr__`s.
pub(crate) fn floats_repr(v: &[f64]) -> String {
    let parts: Vec<String> = v.iter().map(|x| format!("{x:?}")).collect();
    format!("[{}]", parts.join(", "))
}

/// Python's repr of a bool.
pub(crate) fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

pub(crate) fn fill_repr(fill: &rt::Fill) -> String {
    match fill {
        rt::Fill::Value(v) => format!("{v:?}"),
        rt::Fill::PerChannel(v) => floats_repr(v),
    }
}

// ----- items in and out -----

/// What a native transform takes from Python: encoded bytes (`bytes`, `bytearray`, a 1-D
/// `memoryview`), an `Image` (its pixels copied: an Image never changes), or an array made an
/// Image by `Image.from_array`. The interpreter is held during the copy.
pub fn item_from_py(obj: &Bound<'_, PyAny>) -> PyResult<Item> {
    if let Ok(im) = obj.cast::<PyImage>() {
        return Ok(Item::Image(im.get().shared().as_ref().clone()));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Item::Bytes(bytes::Bytes::copy_from_slice(b.as_bytes())));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Item::Bytes(bytes::Bytes::from(b.to_vec())));
    }
    if let Ok(m) = obj.cast::<PyMemoryView>() {
        let ndim: usize = m.getattr("ndim")?.extract()?;
        if ndim <= 1 {
            let b: Vec<u8> = m.call_method0("tobytes")?.extract()?;
            return Ok(Item::Bytes(b.into()));
        }
    }
    if obj.is_instance_of::<PyString>()
        || obj.is_instance_of::<pyo3::types::PyTuple>()
        || obj.is_none()
    {
        return Err(wrong_type(
            "a dataloader_rs transform takes encoded bytes, an Image or an array",
            obj,
        ));
    }
    Ok(Item::Image(from_array(obj, "hwc")?))
}

/// A native item as a Python object: an `Image`, or `bytes` when no transform decoded it.
pub fn item_into_py(py: Python<'_>, item: Item) -> PyResult<Bound<'_, PyAny>> {
    match item {
        Item::Image(im) => Ok(Bound::new(py, PyImage::new(im))?.into_any()),
        Item::Bytes(b) => Ok(PyBytes::new(py, &b).into_any()),
    }
}

/// The objects of a list of transforms, their Rust transforms and their reprs.
pub(crate) type Steps = (
    Vec<Py<PyTransform>>,
    Vec<Arc<dyn rt::Transform>>,
    Vec<String>,
);

/// The steps of a list of `dataloader_rs.transforms` objects; `hint` ends the message about an
/// item that is not one.
pub(crate) fn transform_list(
    owner: &str,
    transforms: &Bound<'_, PyAny>,
    hint: &str,
) -> PyResult<Steps> {
    let not_list = || {
        wrong_type(
            &format!("{owner} takes a list of dataloader_rs.transforms objects"),
            transforms,
        )
    };
    if transforms.is_instance_of::<PyString>() || transforms.cast::<PyTransform>().is_ok() {
        return Err(not_list());
    }
    let (mut items, mut rust, mut reprs) = (Vec::new(), Vec::new(), Vec::new());
    for (i, t) in transforms.try_iter().map_err(|_| not_list())?.enumerate() {
        let t = t?;
        let Ok(pt) = t.cast::<PyTransform>() else {
            return Err(PyTypeError::new_err(format!(
                "{owner}: transform {i} is {} ({}), not a dataloader_rs.transforms object{hint}",
                shown(&t),
                type_name(&t)
            )));
        };
        rust.push(pt.get().transform());
        reprs.push(pt.get().repr().to_owned());
        items.push(pt.clone().unbind());
    }
    Ok((items, rust, reprs))
}

// ----- the classes -----
//
// An optional argument is taken as `Option<&PyAny>` and read by the `*_arg` helpers above, whose
// messages name the class and the argument; `None` in `signature` means "not given". The
// `text_signature` beside it shows the default an omitted argument stands for, as
// `_native.pyi` does (stubtest compares the two; tests/test_image_api.py checks that passing
// those defaults changes nothing).

/// The base class of the Rust transforms: `t(obj)` applies it, the interpreter released.
#[pyclass(
    frozen,
    subclass,
    module = "dataloader_rs.transforms",
    name = "Transform"
)]
pub struct PyTransform {
    inner: Arc<dyn Transform>,
    repr: String,
}

impl PyTransform {
    fn of(t: impl Transform + 'static, repr: String) -> Self {
        Self::shared(Arc::new(t), repr)
    }

    /// The base of a class whose Rust transform is also held elsewhere (its parameters).
    pub(crate) fn shared(inner: Arc<dyn Transform>, repr: String) -> Self {
        Self { inner, repr }
    }

    /// `repr(t)`.
    pub(crate) fn repr(&self) -> &str {
        &self.repr
    }

    /// The Rust transform, to run without the interpreter.
    pub fn transform(&self) -> Arc<dyn Transform> {
        Arc::clone(&self.inner)
    }
}

#[pymethods]
impl PyTransform {
    /// Applies the transform to encoded bytes, an Image or an array; returns an Image. A random
    /// transform draws from `seed` (what a loader of base seed `seed` draws for item 0 of epoch
    /// 0), or from a fresh seed when none is given.
    #[pyo3(signature = (obj, /, seed = None))]
    fn __call__<'py>(
        &self,
        obj: &Bound<'py, PyAny>,
        seed: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = obj.py();
        let name = self.repr.split('(').next().unwrap_or("Transform");
        let key = call_key(name, seed)?;
        let item = item_from_py(obj)?;
        let t = Arc::clone(&self.inner);
        let out =
            crate::seam::run_detached(py, move || t.apply_keyed(key, item)).map_err(rt_err)?;
        item_into_py(py, out)
    }

    fn __repr__(&self) -> String {
        self.repr.clone()
    }
}

type Init<T> = PyResult<(T, PyTransform)>;

/// `Decode(max_width=16384, max_height=16384, max_alloc=256 MiB, draft=None)`.
#[pyclass(frozen, extends = PyTransform, module = "dataloader_rs.transforms")]
pub struct Decode;

#[pymethods]
impl Decode {
    #[new]
    #[pyo3(
        signature = (max_width = None, max_height = None, max_alloc = None, draft = None),
        text_signature = "(max_width=16384, max_height=16384, max_alloc=268435456, draft=None)"
    )]
    fn new(
        max_width: Option<&Bound<'_, PyAny>>,
        max_height: Option<&Bound<'_, PyAny>>,
        max_alloc: Option<&Bound<'_, PyAny>>,
        draft: Option<&Bound<'_, PyAny>>,
    ) -> Init<Self> {
        let side = |name, v: Option<&Bound<'_, PyAny>>| -> PyResult<usize> {
            v.map_or(Ok(rt::MAX_SIDE), |v| {
                Ok(int_arg("Decode", name, v, 1, Some(rt::MAX_SIDE as i64))? as usize)
            })
        };
        let (w, h) = (
            side("max_width", max_width)?,
            side("max_height", max_height)?,
        );
        let alloc = max_alloc.map_or(Ok(rt::MAX_BYTES), |v| {
            Ok::<_, PyErr>(
                int_arg("Decode", "max_alloc", v, 1, Some(rt::MAX_BYTES as i64))? as usize,
            )
        })?;
        let mut t = rt::Decode::new(w, h, alloc).map_err(rt_err)?;
        let mut repr = format!("Decode(max_width={w}, max_height={h}, max_alloc={alloc}");
        if let Some(d) = draft.filter(|d| !d.is_none()) {
            if let Ok(name) = d.cast::<PyString>() {
                if name.to_str()? != "auto" {
                    return Err(PyValueError::new_err(format!(
                        "Decode: draft must be None, 'auto', an int or (width, height), got {}",
                        shown(d)
                    )));
                }
                let t = t.with_auto_draft();
                repr.push_str(", draft='auto')");
                return Ok((Decode, PyTransform::of(t, repr)));
            }
            // Pillow's `draft` order: (width, height).
            let (dw, dh) = match seq_arg(d) {
                None => {
                    let n = size_arg("Decode", "draft", d)?;
                    (n, n)
                }
                Some(v) if v.len() == 2 => (
                    size_arg("Decode", "draft", &v[0])?,
                    size_arg("Decode", "draft", &v[1])?,
                ),
                Some(v) => {
                    return Err(PyValueError::new_err(format!(
                        "Decode: draft must be an int or a sequence of 2 ints (width, height), got {} values",
                        v.len()
                    )));
                }
            };
            t = t.with_draft(dw, dh).map_err(rt_err)?;
            repr.push_str(&format!(", draft=({dw}, {dh})"));
        }
        repr.push(')');
        Ok((Decode, PyTransform::of(t, repr)))
    }
}

macro_rules! unit_transform {
    ($name:ident, $rust:expr, $doc:literal) => {
        #[doc = $doc]
        #[pyclass(frozen, extends = PyTransform, module = "dataloader_rs.transforms")]
        pub struct $name;

        #[pymethods]
        impl $name {
            #[new]
            fn new() -> Init<Self> {
                Ok((
                    $name,
                    PyTransform::of($rust, concat!(stringify!($name), "()").into()),
                ))
            }
        }
    };
}

unit_transform!(ToRgb, rt::ToRgb, "`ToRgb()`: Pillow's `convert(\"RGB\")`.");
unit_transform!(
    ToRgba,
    rt::ToRgba,
    "`ToRgba()`: Pillow's `convert(\"RGBA\")`."
);
unit_transform!(ToGray, rt::ToGray, "`ToGray()`: Pillow's `convert(\"L\")`.");
unit_transform!(HFlip, rt::HFlip, "`HFlip()`: mirror left to right.");
unit_transform!(VFlip, rt::VFlip, "`VFlip()`: mirror top to bottom.");
unit_transform!(ToChw, rt::ToChw, "`ToChw()`: channels first.");
unit_transform!(ToHwc, rt::ToHwc, "`ToHwc()`: channels last.");

/// `Crop(top, left, height, width)`.
#[pyclass(frozen, extends = PyTransform, module = "dataloader_rs.transforms")]
pub struct Crop;

#[pymethods]
impl Crop {
    #[new]
    fn new(
        top: &Bound<'_, PyAny>,
        left: &Bound<'_, PyAny>,
        height: &Bound<'_, PyAny>,
        width: &Bound<'_, PyAny>,
    ) -> Init<Self> {
        let lim = rt::MAX_SIDE as i64;
        let top = int_arg("Crop", "top", top, -lim, Some(lim))?;
        let left = int_arg("Crop", "left", left, -lim, Some(lim))?;
        let height = size_arg("Crop", "height", height)?;
        let width = size_arg("Crop", "width", width)?;
        let t = rt::Crop::new(top, left, height, width).map_err(rt_err)?;
        let repr = format!("Crop(top={top}, left={left}, height={height}, width={width})");
        Ok((Crop, PyTransform::of(t, repr)))
    }
}

/// `CenterCrop(size)`: an int or (height, width).
#[pyclass(frozen, extends = PyTransform, module = "dataloader_rs.transforms")]
pub struct CenterCrop;

#[pymethods]
impl CenterCrop {
    #[new]
    fn new(size: &Bound<'_, PyAny>) -> Init<Self> {
        let (h, w, repr) = match hw_arg("CenterCrop", "size", size)? {
            SizeArg::One(s) => (s, s, format!("CenterCrop(size={s})")),
            SizeArg::Two(h, w) => (h, w, format!("CenterCrop(size=({h}, {w}))")),
        };
        let t = rt::CenterCrop::new(h, w).map_err(rt_err)?;
        Ok((CenterCrop, PyTransform::of(t, repr)))
    }
}

/// `Pad(padding, fill=0, padding_mode="constant")`.
#[pyclass(frozen, extends = PyTransform, module = "dataloader_rs.transforms")]
pub struct Pad;

#[pymethods]
impl Pad {
    #[new]
    #[pyo3(
        signature = (padding, fill = None, padding_mode = None),
        text_signature = "(padding, fill=0, padding_mode=\"constant\")"
    )]
    fn new(
        padding: &Bound<'_, PyAny>,
        fill: Option<&Bound<'_, PyAny>>,
        padding_mode: Option<&Bound<'_, PyAny>>,
    ) -> Init<Self> {
        let pad = padding_arg("Pad", padding)?;
        let fill = fill.map_or(Ok(rt::Fill::default()), |f| fill_arg("Pad", f))?;
        let mode_name = padding_mode.map_or(Ok("constant".to_owned()), |m| {
            str_arg("Pad", "padding_mode", m)
        })?;
        let mode: rt::PaddingMode = mode_name.parse().map_err(rt_err)?;
        let [l, t, r, b] = pad.ltrb();
        let repr = format!(
            "Pad(padding=({l}, {t}, {r}, {b}), fill={}, padding_mode={mode_name:?})",
            fill_repr(&fill)
        );
        let tr = rt::Pad::new(pad, fill, mode).map_err(rt_err)?;
        Ok((Pad, PyTransform::of(tr, repr)))
    }
}

/// `PadTo(width, height, fill=0, anchor="top_left")`.
#[pyclass(frozen, extends = PyTransform, module = "dataloader_rs.transforms")]
pub struct PadTo;

#[pymethods]
impl PadTo {
    #[new]
    #[pyo3(
        signature = (width, height, fill = None, anchor = None),
        text_signature = "(width, height, fill=0, anchor=\"top_left\")"
    )]
    fn new(
        width: &Bound<'_, PyAny>,
        height: &Bound<'_, PyAny>,
        fill: Option<&Bound<'_, PyAny>>,
        anchor: Option<&Bound<'_, PyAny>>,
    ) -> Init<Self> {
        let width = size_arg("PadTo", "width", width)?;
        let height = size_arg("PadTo", "height", height)?;
        let fill = fill.map_or(Ok(rt::Fill::default()), |f| fill_arg("PadTo", f))?;
        let anchor_name =
            anchor.map_or(Ok("top_left".to_owned()), |a| str_arg("PadTo", "anchor", a))?;
        let anchor: rt::Anchor = anchor_name.parse().map_err(rt_err)?;
        let repr = format!(
            "PadTo(width={width}, height={height}, fill={}, anchor={anchor_name:?})",
            fill_repr(&fill)
        );
        let t = rt::PadTo::new(width, height, fill, anchor).map_err(rt_err)?;
        Ok((PadTo, PyTransform::of(t, repr)))
    }
}

/// `Resize(size, interpolation="bilinear", max_size=None, antialias=True)`.
#[pyclass(frozen, extends = PyTransform, module = "dataloader_rs.transforms")]
pub struct Resize;

#[pymethods]
impl Resize {
    #[new]
    #[pyo3(
        signature = (size, interpolation = None, max_size = None, antialias = None),
        text_signature = "(size, interpolation=\"bilinear\", max_size=None, antialias=True)"
    )]
    fn new(
        size: &Bound<'_, PyAny>,
        interpolation: Option<&Bound<'_, PyAny>>,
        max_size: Option<&Bound<'_, PyAny>>,
        antialias: Option<&Bound<'_, PyAny>>,
    ) -> Init<Self> {
        let (rsize, size_repr) = match hw_arg("Resize", "size", size)? {
            SizeArg::One(s) => (rt::ResizeSize::Shorter(s), s.to_string()),
            SizeArg::Two(h, w) => (
                rt::ResizeSize::Exact {
                    height: h,
                    width: w,
                },
                format!("({h}, {w})"),
            ),
        };
        let interp_name = interpolation.map_or(Ok("bilinear".to_owned()), |i| {
            str_arg("Resize", "interpolation", i)
        })?;
        let interp: rt::Interpolation = interp_name.parse().map_err(rt_err)?;
        let max_size = match max_size.filter(|m| !m.is_none()) {
            None => None,
            Some(m) => Some(size_arg("Resize", "max_size", m)?),
        };
        let antialias = antialias.map_or(Ok(true), |a| bool_arg("Resize", "antialias", a))?;
        let t = rt::Resize::new(rsize, interp, max_size, antialias).map_err(rt_err)?;
        let repr = format!(
            "Resize(size={size_repr}, interpolation={interp_name:?}, max_size={}, antialias={})",
            max_size.map_or_else(|| "None".to_owned(), |m| m.to_string()),
            py_bool(antialias)
        );
        Ok((Resize, PyTransform::of(t, repr)))
    }
}

/// `Rotate90(k=1)`: `numpy.rot90`, `k` quarter turns counter-clockwise.
#[pyclass(frozen, extends = PyTransform, module = "dataloader_rs.transforms")]
pub struct Rotate90;

#[pymethods]
impl Rotate90 {
    #[new]
    #[pyo3(signature = (k = None), text_signature = "(k=1)")]
    fn new(k: Option<&Bound<'_, PyAny>>) -> Init<Self> {
        let k = k.map_or(Ok(1), |k| int_arg("Rotate90", "k", k, i64::MIN, None))?;
        Ok((
            Rotate90,
            PyTransform::of(rt::Rotate90::new(k), format!("Rotate90(k={k})")),
        ))
    }
}

/// `ToFloat(scale=True)`: uint8 to float32, `/ 255` when `scale`.
#[pyclass(frozen, extends = PyTransform, module = "dataloader_rs.transforms")]
pub struct ToFloat;

#[pymethods]
impl ToFloat {
    #[new]
    #[pyo3(signature = (scale = None), text_signature = "(scale=True)")]
    fn new(scale: Option<&Bound<'_, PyAny>>) -> Init<Self> {
        let scale = scale.map_or(Ok(true), |s| bool_arg("ToFloat", "scale", s))?;
        let repr = format!("ToFloat(scale={})", py_bool(scale));
        Ok((ToFloat, PyTransform::of(rt::ToFloat::new(scale), repr)))
    }
}

/// `Normalize(mean, std)`: `(x - mean) / std` per channel, on float32 images.
#[pyclass(frozen, extends = PyTransform, module = "dataloader_rs.transforms")]
pub struct Normalize;

#[pymethods]
impl Normalize {
    #[new]
    fn new(mean: &Bound<'_, PyAny>, std: &Bound<'_, PyAny>) -> Init<Self> {
        let mean = floats_arg("Normalize", "mean", mean)?;
        let std = floats_arg("Normalize", "std", std)?;
        let t = rt::Normalize::new(&mean, &std).map_err(rt_err)?;
        let repr = format!(
            "Normalize(mean={}, std={})",
            floats_repr(&mean),
            floats_repr(&std)
        );
        Ok((Normalize, PyTransform::of(t, repr)))
    }
}

/// `Compose(transforms)`: Rust transforms applied in order (per-value steps fused).
#[pyclass(frozen, extends = PyTransform, module = "dataloader_rs.transforms")]
pub struct Compose {
    items: Vec<Py<PyTransform>>,
}

#[pymethods]
impl Compose {
    #[new]
    fn new(transforms: &Bound<'_, PyAny>) -> Init<Self> {
        let (items, rust, reprs) = transform_list(
            "Compose",
            transforms,
            "; Python callables go in a Python function or torchvision's Compose",
        )?;
        let repr = format!("Compose([{}])", reprs.join(", "));
        Ok((
            Compose { items },
            PyTransform::of(rt::Compose::new(rust), repr),
        ))
    }

    /// The transforms, as given.
    #[getter]
    fn transforms<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.items.iter().map(|t| t.clone_ref(py)))
    }
}
