//! DLPack export (`__dlpack__` / `__dlpack_device__`) and the buffer protocol, shared by `Image`
//! and `ImageBatch`: views of memory owned by Rust and kept alive by the views themselves.
//!
//! A capsule holds a `DLManagedTensorVersioned` (name `dltensor_versioned`) when the consumer
//! passes `max_version >= (1, 0)`, a legacy `DLManagedTensor` (`dltensor`) otherwise. Its
//! `manager_ctx` owns an [`Owner`] (an `Arc` of the image or batch), so the memory lives as long
//! as the consumer's tensor; the deleter only drops Rust values and may run on any thread
//! without the interpreter.

use std::ffi::{CStr, c_int, c_void};
use std::ptr::{self, NonNull};
use std::sync::Arc;

use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use dlrs_transforms::{Batch, Dtype};

/// `kDLCPU`.
pub const DEVICE_CPU: i32 = 1;
const FLAG_READ_ONLY: u64 = 1;
const FLAG_IS_COPIED: u64 = 1 << 1;
const NAME_VERSIONED: &CStr = c"dltensor_versioned";
const NAME_LEGACY: &CStr = c"dltensor";

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

/// A batch and the address of its buffer, taken once from an exclusive borrow, through which
/// Python views write.
pub struct BatchData {
    pub(crate) batch: Batch,
    pub(crate) ptr: NonNull<u8>,
}

// SAFETY: `Batch` is Send + Sync; `ptr` points into the batch's own heap buffer, which does not
// move or get freed while the batch lives, and Rust never reads or writes the buffer through the
// batch after `ptr` was taken. Writes from several threads through views are the consumers' to
// order, as with any numpy array shared between threads.
unsafe impl Send for BatchData {}
// SAFETY: as above.
unsafe impl Sync for BatchData {}

impl BatchData {
    pub fn new(mut batch: Batch) -> Self {
        let ptr = NonNull::new(batch.as_mut_ptr()).expect("a Vec's pointer is never null");
        Self { batch, ptr }
    }
}

/// What keeps exported memory alive: dropped by the DLPack deleter, on any thread.
pub enum Owner {
    Image(Arc<dlrs_transforms::Image>),
    Batch(Arc<BatchData>),
    /// A copy made for `copy=True`.
    Copy(Vec<u64>),
}

/// A view to export: where the data is, its type and C-contiguous shape, and what owns it.
pub struct View {
    pub data: *mut u8,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub readonly: bool,
    pub owner: Owner,
}

impl View {
    fn strides(&self) -> Vec<usize> {
        let mut strides = vec![1; self.shape.len()];
        for i in (0..self.shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * self.shape[i + 1];
        }
        strides
    }

    fn nbytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size()
    }
}

/// A class whose memory Python reads through the buffer protocol and DLPack (the methods are
/// `export_methods!`'s).
///
/// # Safety
/// `view().data` must address the `product(shape) * dtype.size()` bytes of `view().shape`, alive
/// as long as `self` and as long as `view().owner`, and writable unless `view().readonly`.
pub unsafe trait Export {
    /// The memory to export, with what keeps it alive.
    fn view(&self) -> View;
}

/// The `#[pymethods]` of an [`Export`] class: its own methods (`{ ... }`), then
/// `__getbuffer__` (documented by `buffer`), `__releasebuffer__`, `__dlpack__` (documented by
/// `dlpack`) and `__dlpack_device__`.
macro_rules! export_methods {
    ($class:ident, buffer = $buffer:literal, dlpack = $dlpack:literal, { $($methods:tt)* }) => {
        // PyO3's trampolines call the unsafe slots outside an `unsafe` block; expanded from
        // this crate's macro, the lint counts them as this crate's code.
        #[allow(unsafe_op_in_unsafe_fn)]
        const _: () = {
            #[pyo3::pymethods]
            impl $class {
                $($methods)*

                #[doc = $buffer]
                unsafe fn __getbuffer__(
                    slf: pyo3::Bound<'_, Self>,
                    view: *mut pyo3::ffi::Py_buffer,
                    flags: std::ffi::c_int,
                ) -> pyo3::PyResult<()> {
                    let v = $crate::transforms::dlpack::Export::view(slf.get());
                    // SAFETY: `view` is the buffer CPython handed to this slot; by the contract of
                    // `Export`, `v.data` addresses the bytes of `v.shape`, alive as long as `slf`
                    // (made `view.obj`), and writable unless `v.readonly`.
                    unsafe {
                        $crate::transforms::dlpack::fill_buffer(
                            view,
                            flags,
                            slf.into_any(),
                            v.data,
                            v.dtype,
                            &v.shape,
                            v.readonly,
                        )
                    }
                }

                unsafe fn __releasebuffer__(&self, view: *mut pyo3::ffi::Py_buffer) {
                    // SAFETY: CPython passes the view this object filled in `__getbuffer__`, once.
                    unsafe { $crate::transforms::dlpack::release_buffer(view) }
                }

                #[doc = $dlpack]
                #[pyo3(signature = (stream = None, max_version = None, dl_device = None, copy = None))]
                fn __dlpack__(
                    &self,
                    py: pyo3::Python<'_>,
                    stream: Option<&pyo3::Bound<'_, pyo3::PyAny>>,
                    max_version: Option<&pyo3::Bound<'_, pyo3::PyAny>>,
                    dl_device: Option<&pyo3::Bound<'_, pyo3::PyAny>>,
                    copy: Option<bool>,
                ) -> pyo3::PyResult<pyo3::Py<pyo3::PyAny>> {
                    let req = $crate::transforms::dlpack::Request::parse(stream, max_version, dl_device, copy)?;
                    $crate::transforms::dlpack::capsule(py, $crate::transforms::dlpack::Export::view(self), &req)
                }

                fn __dlpack_device__<'py>(
                    &self,
                    py: pyo3::Python<'py>,
                ) -> pyo3::PyResult<pyo3::Bound<'py, pyo3::types::PyTuple>> {
                    $crate::transforms::dlpack::device(py)
                }
            }
        };
    };
}
pub(crate) use export_methods;

/// The capsule's allocation: the managed tensor first (its address is the capsule's pointer and
/// `manager_ctx`), then the shape and strides it points to, then the owner.
#[repr(C)]
struct Ctx<M> {
    managed: M,
    shape: Vec<i64>,
    strides: Vec<i64>,
    _owner: Owner,
}

/// The two managed-tensor structs (DLPack 1.0's versioned one and the legacy one): the fields
/// [`leak`] points into the `Ctx` that holds them.
trait Managed {
    fn fields(&mut self) -> (&mut *mut c_void, &mut DLTensor);
}

impl Managed for DLManagedTensorVersioned {
    fn fields(&mut self) -> (&mut *mut c_void, &mut DLTensor) {
        (&mut self.manager_ctx, &mut self.dl_tensor)
    }
}

impl Managed for DLManagedTensor {
    fn fields(&mut self) -> (&mut *mut c_void, &mut DLTensor) {
        (&mut self.manager_ctx, &mut self.dl_tensor)
    }
}

/// Boxes `managed` with its shape, strides and owner and leaks the box, with the tensor's
/// `manager_ctx`, `shape` and `strides` pointing into it; its deleter frees it.
fn leak<M: Managed>(managed: M, shape: Vec<i64>, strides: Vec<i64>, owner: Owner) -> *mut Ctx<M> {
    let ctx = Box::into_raw(Box::new(Ctx {
        managed,
        shape,
        strides,
        _owner: owner,
    }));
    // SAFETY: `ctx` was just leaked from a box and is not shared yet; the vectors' heap buffers
    // do not move while the box lives, so the pointers stay valid until the deleter frees it.
    unsafe {
        let c = &mut *ctx;
        let (manager_ctx, tensor) = c.managed.fields();
        *manager_ctx = ctx.cast();
        tensor.shape = c.shape.as_mut_ptr();
        tensor.strides = c.strides.as_mut_ptr();
    }
    ctx
}

unsafe extern "C" fn delete_versioned(m: *mut DLManagedTensorVersioned) {
    // SAFETY: `m` is the `managed` field, at offset 0 of a `#[repr(C)] Ctx` leaked by
    // `capsule` with `Box::into_raw`; DLPack calls the deleter exactly once (the consumer, or the
    // capsule destructor when the capsule was never consumed), so the box is freed once. The
    // owner's drop touches no Python object.
    drop(unsafe { Box::from_raw(m.cast::<Ctx<DLManagedTensorVersioned>>()) });
}

unsafe extern "C" fn delete_legacy(m: *mut DLManagedTensor) {
    // SAFETY: as in `delete_versioned`, for the legacy struct.
    drop(unsafe { Box::from_raw(m.cast::<Ctx<DLManagedTensor>>()) });
}

unsafe extern "C" fn capsule_destructor_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: called by CPython with a live capsule. A consumer renames a capsule it took to
    // `used_dltensor_versioned` and then owns the tensor; only a capsule still carrying our name
    // was never consumed, and then its pointer is the `DLManagedTensorVersioned` we made, whose
    // deleter frees it.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, NAME_VERSIONED.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(capsule, NAME_VERSIONED.as_ptr())
                .cast::<DLManagedTensorVersioned>();
            if let Some(deleter) = (*m).deleter {
                deleter(m);
            }
        }
    }
}

unsafe extern "C" fn capsule_destructor_legacy(capsule: *mut ffi::PyObject) {
    // SAFETY: as in `capsule_destructor_versioned`, for the legacy name and struct.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, NAME_LEGACY.as_ptr()) == 1 {
            let m =
                ffi::PyCapsule_GetPointer(capsule, NAME_LEGACY.as_ptr()).cast::<DLManagedTensor>();
            if let Some(deleter) = (*m).deleter {
                deleter(m);
            }
        }
    }
}

fn dl_dtype(dtype: Dtype) -> DLDataType {
    match dtype {
        Dtype::U8 => DLDataType {
            code: 1, // kDLUInt
            bits: 8,
            lanes: 1,
        },
        Dtype::F32 => DLDataType {
            code: 2, // kDLFloat
            bits: 32,
            lanes: 1,
        },
    }
}

/// The consumer's requests of `__dlpack__(stream, max_version, dl_device, copy)`, checked.
pub struct Request {
    versioned: bool,
    copy: bool,
}

impl Request {
    pub fn parse(
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<&Bound<'_, PyAny>>,
        dl_device: Option<&Bound<'_, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Request> {
        if let Some(s) = stream
            && !s.is_none()
        {
            return Err(PyBufferError::new_err(format!(
                "stream must be None for a CPU tensor, got {s}"
            )));
        }
        let versioned = match max_version {
            Some(v) if !v.is_none() => {
                let (major, _minor): (i64, i64) = v.extract().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "max_version must be a (major, minor) tuple of ints or None, got {v}"
                    ))
                })?;
                major >= 1
            }
            _ => false,
        };
        if let Some(d) = dl_device
            && !d.is_none()
        {
            let (ty, id): (i64, i64) = d.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "dl_device must be a (device_type, device_id) tuple or None, got {d}"
                ))
            })?;
            if (ty, id) != (i64::from(DEVICE_CPU), 0) {
                return Err(PyBufferError::new_err(format!(
                    "the data is on the CPU (device (1, 0)); it cannot be exported to device ({ty}, {id})"
                )));
            }
        }
        Ok(Request {
            versioned,
            copy: copy == Some(true),
        })
    }
}

/// A DLPack capsule of `view`, as `__dlpack__` returns it.
pub fn capsule(py: Python<'_>, mut view: View, req: &Request) -> PyResult<Py<PyAny>> {
    let mut flags = 0;
    if req.copy {
        let n = view.nbytes();
        let mut words = vec![0u64; n.div_ceil(8)];
        // SAFETY: `view.data` addresses `n` initialised bytes kept alive by `view.owner` (held
        // here); `words` is a fresh allocation of at least `n` bytes, so the ranges are disjoint.
        unsafe { ptr::copy_nonoverlapping(view.data, words.as_mut_ptr().cast::<u8>(), n) };
        view.data = words.as_mut_ptr().cast();
        view.owner = Owner::Copy(words);
        view.readonly = false;
        flags |= FLAG_IS_COPIED;
    }
    if view.readonly {
        flags |= FLAG_READ_ONLY;
    }
    let strides: Vec<i64> = view.strides().iter().map(|&s| s as i64).collect();
    let shape: Vec<i64> = view.shape.iter().map(|&s| s as i64).collect();
    let tensor = DLTensor {
        data: view.data.cast(),
        device: DLDevice {
            device_type: DEVICE_CPU,
            device_id: 0,
        },
        ndim: shape.len() as i32,
        dtype: dl_dtype(view.dtype),
        shape: ptr::null_mut(),
        strides: ptr::null_mut(),
        byte_offset: 0,
    };
    let (ptr, name, destructor): (*mut c_void, &CStr, Option<ffi::PyCapsule_Destructor>) =
        if req.versioned {
            let managed = DLManagedTensorVersioned {
                version: DLPackVersion { major: 1, minor: 0 },
                manager_ctx: ptr::null_mut(),
                deleter: Some(delete_versioned),
                flags,
                dl_tensor: tensor,
            };
            let ctx = leak(managed, shape, strides, view.owner);
            (
                ctx.cast(),
                NAME_VERSIONED,
                Some(capsule_destructor_versioned),
            )
        } else {
            let managed = DLManagedTensor {
                dl_tensor: tensor,
                manager_ctx: ptr::null_mut(),
                deleter: Some(delete_legacy),
            };
            let ctx = leak(managed, shape, strides, view.owner);
            (ctx.cast(), NAME_LEGACY, Some(capsule_destructor_legacy))
        };
    // SAFETY: `ptr` is the managed tensor (offset 0 of its `Ctx`), `name` a static C string (the
    // capsule keeps the pointer), and the destructor frees the tensor only if it was not consumed.
    let cap = unsafe { ffi::PyCapsule_New(ptr, name.as_ptr(), destructor) };
    if cap.is_null() {
        // The capsule was not made, so nobody else owns the tensor: free it here.
        // SAFETY: `ptr` came from `Box::into_raw` above and was not handed out.
        unsafe {
            if req.versioned {
                delete_versioned(ptr.cast());
            } else {
                delete_legacy(ptr.cast());
            }
        }
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `cap` is a new, non-null reference, which the returned object takes over.
    Ok(unsafe { Bound::from_owned_ptr(py, cap) }.unbind())
}

/// `__dlpack_device__`: `(kDLCPU, 0)`.
pub fn device(py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
    PyTuple::new(py, [DEVICE_CPU, 0])
}

/// The shape and strides (in bytes) of one buffer-protocol export, freed by [`release_buffer`].
struct BufferDims {
    shape: Vec<ffi::Py_ssize_t>,
    strides: Vec<ffi::Py_ssize_t>,
}

/// Fills `view` for `__getbuffer__`: `owner` becomes `view.obj` (a new reference, released by
/// `PyBuffer_Release`), so the exporter lives as long as the view.
///
/// # Safety
/// `view` must be the non-null `Py_buffer` CPython passed to `__getbuffer__`; `data` must address
/// `product(shape) * dtype.size()` bytes that live as long as `owner`, writable unless `readonly`.
pub unsafe fn fill_buffer(
    view: *mut ffi::Py_buffer,
    flags: c_int,
    owner: Bound<'_, PyAny>,
    data: *mut u8,
    dtype: Dtype,
    shape: &[usize],
    readonly: bool,
) -> PyResult<()> {
    if view.is_null() {
        return Err(PyBufferError::new_err("__getbuffer__ got a null view"));
    }
    if readonly && (flags & ffi::PyBUF_WRITABLE) == ffi::PyBUF_WRITABLE {
        return Err(PyBufferError::new_err(
            "an Image is read-only: copy it (np.array(image)) to change its values",
        ));
    }
    if (flags & ffi::PyBUF_F_CONTIGUOUS) == ffi::PyBUF_F_CONTIGUOUS
        && shape.iter().filter(|&&d| d > 1).count() > 1
    {
        return Err(PyBufferError::new_err(
            "the data is C-contiguous, not Fortran-contiguous",
        ));
    }
    let item = dtype.size();
    let mut strides = vec![item as ffi::Py_ssize_t; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1] as ffi::Py_ssize_t;
    }
    let len = shape.iter().product::<usize>() * item;
    let dims = Box::into_raw(Box::new(BufferDims {
        shape: shape.iter().map(|&d| d as ffi::Py_ssize_t).collect(),
        strides,
    }));
    let format: &CStr = match dtype {
        Dtype::U8 => c"B",
        Dtype::F32 => c"f",
    };
    // SAFETY: the caller guarantees `view` is CPython's writable `Py_buffer`; `dims` is a fresh
    // box whose vectors do not move until `release_buffer` frees it through `view.internal`;
    // `format` is a static string that consumers only read.
    unsafe {
        let v = &mut *view;
        v.buf = data.cast();
        v.obj = owner.into_ptr();
        v.len = len as ffi::Py_ssize_t;
        v.readonly = c_int::from(readonly);
        v.itemsize = item as ffi::Py_ssize_t;
        v.format = if (flags & ffi::PyBUF_FORMAT) == ffi::PyBUF_FORMAT {
            format.as_ptr().cast_mut()
        } else {
            ptr::null_mut()
        };
        v.ndim = shape.len() as c_int;
        v.shape = if (flags & ffi::PyBUF_ND) == ffi::PyBUF_ND {
            (*dims).shape.as_mut_ptr()
        } else {
            ptr::null_mut()
        };
        v.strides = if (flags & ffi::PyBUF_STRIDES) == ffi::PyBUF_STRIDES {
            (*dims).strides.as_mut_ptr()
        } else {
            ptr::null_mut()
        };
        v.suboffsets = ptr::null_mut();
        v.internal = dims.cast();
    }
    Ok(())
}

/// Frees what [`fill_buffer`] allocated for one export.
///
/// # Safety
/// `view` must be a `Py_buffer` filled by [`fill_buffer`] and not released before.
pub unsafe fn release_buffer(view: *mut ffi::Py_buffer) {
    // SAFETY: `internal` is the `BufferDims` box leaked by `fill_buffer` for this view, and
    // CPython calls `__releasebuffer__` once per successful `__getbuffer__`.
    unsafe {
        let dims = (*view).internal.cast::<BufferDims>();
        if !dims.is_null() {
            (*view).internal = ptr::null_mut();
            drop(Box::from_raw(dims));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_are_c_contiguous_in_elements() {
        let v = View {
            data: ptr::null_mut(),
            dtype: Dtype::F32,
            shape: vec![2, 3, 4, 5],
            readonly: true,
            owner: Owner::Copy(Vec::new()),
        };
        assert_eq!(v.strides(), vec![60, 20, 5, 1]);
        assert_eq!(v.nbytes(), 2 * 3 * 4 * 5 * 4);
    }

    #[test]
    fn the_deleter_frees_the_owner_without_python() {
        let image = Arc::new(
            dlrs_transforms::Image::new(
                1,
                1,
                1,
                dlrs_transforms::Layout::Hwc,
                dlrs_transforms::Pixels::U8(vec![7]),
            )
            .unwrap(),
        );
        let ctx = Box::into_raw(Box::new(Ctx {
            managed: DLManagedTensorVersioned {
                version: DLPackVersion { major: 1, minor: 0 },
                manager_ctx: ptr::null_mut(),
                deleter: Some(delete_versioned),
                flags: 0,
                dl_tensor: DLTensor {
                    data: ptr::null_mut(),
                    device: DLDevice {
                        device_type: DEVICE_CPU,
                        device_id: 0,
                    },
                    ndim: 0,
                    dtype: dl_dtype(Dtype::U8),
                    shape: ptr::null_mut(),
                    strides: ptr::null_mut(),
                    byte_offset: 0,
                },
            },
            shape: vec![],
            strides: vec![],
            _owner: Owner::Image(Arc::clone(&image)),
        }));
        assert_eq!(Arc::strong_count(&image), 2);
        // The consumer may call the deleter from another thread.
        let addr = ctx as usize;
        std::thread::spawn(move || {
            let m = addr as *mut DLManagedTensorVersioned;
            // SAFETY: `m` is the box leaked above, deleted once here.
            unsafe { ((*m).deleter.unwrap())(m) }
        })
        .join()
        .unwrap();
        assert_eq!(Arc::strong_count(&image), 1);
    }
}
