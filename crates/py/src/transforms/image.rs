//! `dataloader_rs.Image`: an immutable image owned by Rust, seen from Python through the buffer
//! protocol (read-only, zero-copy) and DLPack, and made from arrays by `Image.from_array`.

use std::sync::Arc;

use pyo3::exceptions::{PyImportError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyTuple, PyType};

use dlrs_transforms::{Dtype, Error, Image, Layout, MAX_BYTES, MAX_SIDE, Pixels};

use super::dlpack::{self, Owner, View};
use crate::errors::image_error;
use crate::text::{type_name, wrong_type};

/// An image: `height × width × channels` uint8 or float32 values, HWC or CHW.
#[pyclass(frozen, module = "dataloader_rs", name = "Image")]
pub struct PyImage {
    inner: Arc<Image>,
}

impl PyImage {
    pub fn new(image: Image) -> Self {
        Self {
            inner: Arc::new(image),
        }
    }

    /// The shared image (cheap to clone; the pixels are not copied).
    pub fn shared(&self) -> Arc<Image> {
        Arc::clone(&self.inner)
    }

    fn data_ptr(&self) -> *mut u8 {
        // Only ever read through: exports of an Image are read-only (the buffer view says so,
        // and so does the versioned DLPack flag).
        self.inner.as_bytes().as_ptr().cast_mut()
    }
}

/// The layout names of the Python API.
pub fn layout_name(layout: Layout) -> &'static str {
    match layout {
        Layout::Hwc => "hwc",
        Layout::Chw => "chw",
    }
}

dlpack::export_methods!(
    PyImage,
    buffer = "A read-only, C-contiguous view of the values.",
    dlpack = "A DLPack capsule of the values (read-only; a view, or a copy with `copy=True`).",
    {
        /// `Image.from_array(obj, layout="hwc")`: a copy of a numpy array, a CPU tensor or anything
        /// `np.asarray` takes (without numpy: an object with the buffer protocol, "hwc" only).
        #[classmethod]
        #[pyo3(signature = (obj, layout = "hwc"))]
        fn from_array(
            _cls: &Bound<'_, PyType>,
            obj: &Bound<'_, PyAny>,
            layout: &str,
        ) -> PyResult<PyImage> {
            from_array(obj, layout).map(PyImage::new)
        }

        /// `(height, width, channels)` for HWC, `(channels, height, width)` for CHW.
        #[getter]
        fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
            PyTuple::new(py, self.inner.shape())
        }

        /// "uint8" or "float32".
        #[getter]
        fn dtype(&self) -> &'static str {
            self.inner.dtype().name()
        }

        /// "hwc" or "chw".
        #[getter]
        fn layout(&self) -> &'static str {
            layout_name(self.inner.layout())
        }

        #[getter]
        fn height(&self) -> usize {
            self.inner.height()
        }

        #[getter]
        fn width(&self) -> usize {
            self.inner.width()
        }

        #[getter]
        fn channels(&self) -> usize {
            self.inner.channels()
        }

        /// The size of the values in bytes.
        #[getter]
        fn nbytes(&self) -> usize {
            self.inner.as_bytes().len()
        }

        fn __repr__(&self) -> String {
            let s = self.inner.shape();
            format!(
                "Image(shape=({}, {}, {}), dtype={}, layout={})",
                s[0],
                s[1],
                s[2],
                self.inner.dtype(),
                layout_name(self.inner.layout())
            )
        }
    }
);

// SAFETY: `data_ptr` addresses the image's `nbytes` bytes, alive as long as the `Arc<Image>`
// the view owns and `self` holds, since a frozen Image never changes or drops its pixels; the
// view is read-only.
unsafe impl dlpack::Export for PyImage {
    fn view(&self) -> View {
        View {
            data: self.data_ptr(),
            dtype: self.inner.dtype(),
            shape: self.inner.shape().to_vec(),
            readonly: true,
            owner: Owner::Image(self.shared()),
        }
    }
}

/// The checks of `Image.from_array` on a shape, before any copy: `(height, width, channels)`
/// with `channels == None` for a 2-D array.
fn check_array_shape(
    shape: &[usize],
    layout: Layout,
    dtype: Dtype,
) -> PyResult<(usize, usize, Option<usize>)> {
    let (h, w, c) = match (shape, layout) {
        (&[h, w], _) => (h, w, None),
        (&[h, w, c], Layout::Hwc) => (h, w, Some(c)),
        (&[c, h, w], Layout::Chw) => (h, w, Some(c)),
        _ => {
            return Err(PyValueError::new_err(format!(
                "Image.from_array takes an array of shape (height, width) or {}, got shape {}",
                match layout {
                    Layout::Hwc => "(height, width, channels)",
                    Layout::Chw => "(channels, height, width)",
                },
                shape_repr(shape)
            )));
        }
    };
    if let Some(c) = c
        && !matches!(c, 1 | 3 | 4)
    {
        let hint = match layout {
            Layout::Hwc if matches!(shape[0], 1 | 3 | 4) => {
                " (channels first? pass layout=\"chw\")"
            }
            Layout::Chw if matches!(shape[2], 1 | 3 | 4) => " (channels last? pass layout=\"hwc\")",
            _ => "",
        };
        return Err(PyValueError::new_err(format!(
            "Image.from_array takes 1, 3 or 4 channels, got {c} in shape {} with layout \"{}\"{hint}",
            shape_repr(shape),
            layout_name(layout)
        )));
    }
    if h == 0 || w == 0 {
        return Err(PyValueError::new_err(format!(
            "Image.from_array got an empty image of {h}x{w} (shape {})",
            shape_repr(shape)
        )));
    }
    if h > MAX_SIDE || w > MAX_SIDE {
        return Err(image_error(&Error::TooLarge {
            width: w as u64,
            height: h as u64,
            max_width: MAX_SIDE as u64,
            max_height: MAX_SIDE as u64,
        }));
    }
    let bytes = (h as u64) * (w as u64) * (c.unwrap_or(1) as u64) * (dtype.size() as u64);
    if bytes > MAX_BYTES as u64 {
        return Err(image_error(&Error::AllocationTooLarge {
            width: w as u64,
            height: h as u64,
            bytes,
            max_alloc: MAX_BYTES as u64,
        }));
    }
    Ok((h, w, c))
}

/// A shape as Python prints a tuple: "(3, 4)", "(5,)".
fn shape_repr(shape: &[usize]) -> String {
    let parts: Vec<String> = shape.iter().map(ToString::to_string).collect();
    if parts.len() == 1 {
        format!("({},)", parts[0])
    } else {
        format!("({})", parts.join(", "))
    }
}

fn parse_layout(layout: &str) -> PyResult<Layout> {
    match layout {
        "hwc" | "HWC" => Ok(Layout::Hwc),
        "chw" | "CHW" => Ok(Layout::Chw),
        other => Err(PyValueError::new_err(format!(
            "layout must be \"hwc\" or \"chw\", got {other:?}"
        ))),
    }
}

fn wrong_dtype(got: &str) -> PyErr {
    PyTypeError::new_err(format!(
        "Image.from_array takes uint8 or float32 values, got {got}; values are never converted: \
         convert them first (for example .astype(np.float32))"
    ))
}

/// `Image.from_array`: see the spec's rules (dtype, shape, layout, limits, devices).
pub fn from_array(obj: &Bound<'_, PyAny>, layout: &str) -> PyResult<Image> {
    let py = obj.py();
    let layout = parse_layout(layout)?;
    if let Ok(im) = obj.cast::<PyImage>() {
        // An Image already: a copy in HWC.
        return Ok(im.get().inner.as_ref().clone().into_layout(Layout::Hwc));
    }
    check_device(obj)?;
    let np = match py.import("numpy") {
        Ok(np) => np,
        Err(e) if e.is_instance_of::<PyImportError>(py) => {
            if layout != Layout::Hwc {
                return Err(PyValueError::new_err(
                    "Image.from_array without numpy reads buffers as \"hwc\" only",
                ));
            }
            return from_buffer(obj, layout);
        }
        Err(e) => return Err(e),
    };
    let arr = np.call_method1("asarray", (obj,))?;
    let dtype_str: String = arr.getattr("dtype")?.getattr("str")?.extract()?;
    let native_f32 = if cfg!(target_endian = "little") {
        "<f4"
    } else {
        ">f4"
    };
    let dtype = match dtype_str.as_str() {
        "|u1" => Dtype::U8,
        s if s == native_f32 => Dtype::F32,
        _ => {
            let name: String = arr.getattr("dtype")?.str()?.extract()?;
            return Err(wrong_dtype(&name));
        }
    };
    let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
    check_array_shape(&shape, layout, dtype)?;
    let hwc = if layout == Layout::Chw && shape.len() == 3 {
        arr.call_method1("transpose", (1, 2, 0))?
    } else {
        arr
    };
    let contiguous = np.call_method1("ascontiguousarray", (hwc,))?;
    from_buffer(&contiguous, Layout::Hwc)
}

/// TypeError for data that is not in CPU memory (a GPU tensor), found by `__dlpack_device__`.
fn check_device(obj: &Bound<'_, PyAny>) -> PyResult<()> {
    let Ok(device) = obj.getattr("__dlpack_device__") else {
        return Ok(());
    };
    let Ok(dev) = device.call0() else {
        return Ok(());
    };
    let Ok((ty, id)) = dev.extract::<(i64, i64)>() else {
        return Ok(());
    };
    // kDLCPU, kDLCUDAHost (pinned) and kDLCUDAManaged memory are readable by the CPU.
    if matches!(ty, 1 | 3 | 13) {
        return Ok(());
    }
    Err(PyTypeError::new_err(format!(
        "Image.from_array takes data in CPU memory, got a {} on DLPack device ({ty}, {id}): \
         move it with .cpu() first",
        type_name(obj)
    )))
}

/// The value type of a buffer format ("B", "=B", "<f", ...), when it is uint8 or float32.
fn buffer_dtype(format: &str) -> Option<Dtype> {
    let native = |c: char| {
        matches!(c, '@' | '=')
            || (cfg!(target_endian = "little") && c == '<')
            || (cfg!(target_endian = "big") && (c == '>' || c == '!'))
    };
    let (prefix, code) = match format.len() {
        1 => (None, format.chars().next()?),
        2 => {
            let mut it = format.chars();
            (it.next(), it.next()?)
        }
        _ => return None,
    };
    match code {
        'B' => Some(Dtype::U8),
        'f' if prefix.is_none_or(native) => Some(Dtype::F32),
        _ => None,
    }
}

/// Reads an object with the buffer protocol into an image (one copy; strided data is read
/// element by element).
fn from_buffer(obj: &Bound<'_, PyAny>, layout: Layout) -> PyResult<Image> {
    let buf = pyo3::buffer::PyUntypedBuffer::get(obj).map_err(|_| {
        wrong_type(
            "Image.from_array takes a numpy array, a CPU tensor, or (without numpy) an object with \
             the buffer protocol",
            obj,
        )
    })?;
    let format = buf.format().to_string_lossy().into_owned();
    let Some(dtype) = buffer_dtype(&format) else {
        return Err(wrong_dtype(&format!("buffer format {format:?}")));
    };
    let shape = buf.shape().to_vec();
    let (h, w, c) = check_array_shape(&shape, layout, dtype)?;
    let n: usize = shape.iter().product();
    let item = dtype.size();
    let mut bytes = vec![0u8; n * item];
    if buf.is_c_contiguous() {
        // SAFETY: a C-contiguous buffer of this shape and item size holds `n * item` bytes at
        // `buf_ptr()`, alive while `buf` (the export) is held; `bytes` is a distinct allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(buf.buf_ptr().cast::<u8>(), bytes.as_mut_ptr(), n * item);
        }
    } else {
        let strides = buf.strides().to_vec();
        if buf.suboffsets().is_some_and(|s| s.iter().any(|&o| o >= 0)) {
            return Err(PyTypeError::new_err(
                "Image.from_array cannot read buffers with suboffsets",
            ));
        }
        let base = buf.buf_ptr().cast::<u8>();
        let (d1, d2) = (shape[1], shape.get(2).copied().unwrap_or(1));
        let s2 = strides.get(2).copied().unwrap_or(0);
        let mut out = bytes.chunks_exact_mut(item);
        for i in 0..shape[0] {
            for j in 0..d1 {
                for k in 0..d2 {
                    let off = i as isize * strides[0] + j as isize * strides[1] + k as isize * s2;
                    let dst = out.next().expect("n items");
                    // SAFETY: `(i, j, k)` is within the shape, so `off` is the offset of an item of
                    // the buffer, as the exporter's strides describe it; `item` bytes are read.
                    unsafe {
                        std::ptr::copy_nonoverlapping(base.offset(off), dst.as_mut_ptr(), item);
                    }
                }
            }
        }
    }
    let pixels = match dtype {
        Dtype::U8 => Pixels::U8(bytes),
        Dtype::F32 => Pixels::F32(
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        ),
    };
    let image = Image::from_raw(h, w, c, layout, pixels).map_err(|e| image_error(&e))?;
    Ok(image.into_layout(Layout::Hwc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_formats() {
        assert_eq!(buffer_dtype("B"), Some(Dtype::U8));
        assert_eq!(buffer_dtype("=B"), Some(Dtype::U8));
        assert_eq!(buffer_dtype("f"), Some(Dtype::F32));
        assert_eq!(buffer_dtype("<f"), Some(Dtype::F32));
        assert_eq!(buffer_dtype(">f"), None);
        assert_eq!(buffer_dtype("d"), None);
        assert_eq!(buffer_dtype("b"), None);
        assert_eq!(buffer_dtype("T{B:x:}"), None);
    }
}
