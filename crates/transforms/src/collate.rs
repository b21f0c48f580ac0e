//! `Collator`: images stacked into one contiguous `Batch` buffer, with a pool of reusable buffers.

use std::sync::{Arc, Mutex};

use crate::Error;
use crate::dtype::Dtype;
use crate::error::from_names;
use crate::image::{Image, Layout, Pixels};

/// The axis order of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BatchLayout {
    /// (n, channels, height, width).
    #[default]
    Nchw,
    /// (n, height, width, channels).
    Nhwc,
}

impl std::fmt::Display for BatchLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BatchLayout::Nchw => "NCHW",
            BatchLayout::Nhwc => "NHWC",
        })
    }
}

from_names!(BatchLayout, "ImageCollator", {
    "NCHW" => Nchw,
    "NHWC" => Nhwc,
}, other => format!("layout {other:?} is not \"NCHW\" or \"NHWC\""));

/// Buffers of dropped batches, kept for the next ones (at most `max`).
#[derive(Debug)]
struct Pool {
    max: usize,
    free: Mutex<Vec<Vec<u64>>>,
}

impl Pool {
    /// A buffer of at least `words` words: a kept one if one is large enough, else a new one.
    /// Never waits for a batch to be dropped.
    fn take(&self, words: usize) -> Vec<u64> {
        if self.max > 0 {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = free.iter().position(|b| b.len() >= words) {
                return free.swap_remove(i);
            }
        }
        // Zeroed allocation: fresh pages from the OS, touched once when the batch is written.
        vec![0u64; words]
    }

    fn give(&self, buf: Vec<u64>) {
        if self.max == 0 {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if free.len() < self.max {
            free.push(buf);
        }
    }
}

/// `ImageCollator(layout="NCHW", dtype=None, buffers=0)`.
#[derive(Debug, Clone)]
pub struct Collator {
    layout: BatchLayout,
    dtype: Option<Dtype>,
    pool: Arc<Pool>,
}

impl Default for Collator {
    fn default() -> Self {
        Collator::new(BatchLayout::Nchw, None, 0)
    }
}

impl Collator {
    /// `dtype`, when given, is the type every image must have; `buffers` is how many buffers of
    /// dropped batches are kept for reuse (0: none). Clones share the pool.
    pub fn new(layout: BatchLayout, dtype: Option<Dtype>, buffers: usize) -> Collator {
        Collator {
            layout,
            dtype,
            pool: Arc::new(Pool {
                max: buffers,
                free: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The layout of the batches.
    pub fn layout(&self) -> BatchLayout {
        self.layout
    }

    /// The dtype every image must have, when one was given.
    pub fn dtype(&self) -> Option<Dtype> {
        self.dtype
    }

    /// How many buffers the pool keeps at most.
    pub fn buffers(&self) -> usize {
        self.pool.max
    }

    /// How many buffers of dropped batches are waiting for reuse now.
    pub fn pooled(&self) -> usize {
        self.pool
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Stacks the images into one batch.
    pub fn collate(&self, images: Vec<Image>) -> Result<Batch, Error> {
        let refs: Vec<&Image> = images.iter().collect();
        self.collate_refs(&refs)
    }

    /// Stacks borrowed images into one batch (for callers that keep the images).
    pub fn collate_refs(&self, images: &[&Image]) -> Result<Batch, Error> {
        let first = images.first().ok_or(Error::EmptyBatch)?;
        let dtype = self.dtype.unwrap_or(first.dtype());
        let dims = [first.height(), first.width(), first.channels()];
        for (index, im) in images.iter().enumerate() {
            if im.dtype() != dtype {
                return Err(Error::DtypeMismatch {
                    index,
                    expected: dtype,
                    got: im.dtype(),
                });
            }
            let got = [im.height(), im.width(), im.channels()];
            if got != dims {
                return Err(Error::ShapeMismatch {
                    index,
                    expected: dims,
                    got,
                });
            }
        }
        let [h, w, c] = dims;
        let per_image = h * w * c;
        let n = images.len();
        let nbytes = n * per_image * dtype.size();
        let mut buf = self.pool.take(nbytes.div_ceil(8));
        let target = match self.layout {
            BatchLayout::Nchw => Layout::Chw,
            BatchLayout::Nhwc => Layout::Hwc,
        };
        match dtype {
            Dtype::U8 => {
                let dst = &mut words_as_bytes_mut(&mut buf)[..nbytes];
                for (im, d) in images.iter().zip(dst.chunks_exact_mut(per_image)) {
                    let Pixels::U8(src) = im.pixels() else {
                        unreachable!("dtype checked")
                    };
                    copy_image(src, d, im.layout(), target, h * w, c);
                }
            }
            Dtype::F32 => {
                let dst = &mut words_as_f32_mut(&mut buf)[..n * per_image];
                for (im, d) in images.iter().zip(dst.chunks_exact_mut(per_image)) {
                    let Pixels::F32(src) = im.pixels() else {
                        unreachable!("dtype checked")
                    };
                    copy_image(src, d, im.layout(), target, h * w, c);
                }
            }
        }
        let shape = match self.layout {
            BatchLayout::Nchw => [n, c, h, w],
            BatchLayout::Nhwc => [n, h, w, c],
        };
        Ok(Batch {
            shape,
            layout: self.layout,
            dtype,
            nbytes,
            buf,
            pool: Arc::clone(&self.pool),
        })
    }
}

fn words_as_bytes_mut(buf: &mut [u64]) -> &mut [u8] {
    // SAFETY: the u64 slice is initialised memory of `8 * len` bytes; u8 has alignment 1 and
    // every bit pattern is valid in both types; the exclusive borrow is carried over.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), buf.len() * 8) }
}

fn words_as_f32_mut(buf: &mut [u64]) -> &mut [f32] {
    // SAFETY: u64 memory is 8-aligned (f32 needs 4) and `8 * len` bytes long, that is
    // `2 * len` f32 values; every bit pattern is a valid f32; the exclusive borrow is carried over.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<f32>(), buf.len() * 2) }
}

/// Copies one image into its slot, moving the axes when its layout is not the batch's.
fn copy_image<T: Copy>(src: &[T], dst: &mut [T], from: Layout, to: Layout, hw: usize, c: usize) {
    match (from, to) {
        _ if from == to || c == 1 => dst.copy_from_slice(src),
        (Layout::Hwc, _) => {
            for (ch, plane) in dst.chunks_exact_mut(hw).enumerate() {
                for (d, &s) in plane.iter_mut().zip(src[ch..].iter().step_by(c)) {
                    *d = s;
                }
            }
        }
        (Layout::Chw, _) => {
            for (ch, plane) in src.chunks_exact(hw).enumerate() {
                for (d, &s) in dst[ch..].iter_mut().step_by(c).zip(plane) {
                    *d = s;
                }
            }
        }
    }
}

/// One batch in one contiguous buffer; its buffer goes back to the collator's pool on drop.
///
/// The buffer is 8-byte aligned. Its address stays the same for the batch's whole life (moving
/// the `Batch` does not move the buffer), so a pointer taken once may be handed to a DLPack or
/// buffer-protocol view that keeps the batch alive.
#[derive(Debug)]
pub struct Batch {
    shape: [usize; 4],
    layout: BatchLayout,
    dtype: Dtype,
    nbytes: usize,
    buf: Vec<u64>,
    pool: Arc<Pool>,
}

impl Batch {
    /// `[n, c, h, w]` (NCHW) or `[n, h, w, c]` (NHWC).
    pub fn shape(&self) -> [usize; 4] {
        self.shape
    }

    /// Whether the images are channels first or last.
    pub fn layout(&self) -> BatchLayout {
        self.layout
    }

    /// The type of the values.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The number of images.
    pub fn len(&self) -> usize {
        self.shape[0]
    }

    /// Whether the batch has no image.
    pub fn is_empty(&self) -> bool {
        self.shape[0] == 0
    }

    /// Strides in bytes of a C-contiguous array of `shape`.
    pub fn strides_bytes(&self) -> [usize; 4] {
        let s = self.shape;
        let e = self.dtype.size();
        [s[1] * s[2] * s[3] * e, s[2] * s[3] * e, s[3] * e, e]
    }

    /// The size of the data in bytes (`n * c * h * w * dtype size`).
    pub fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// The data, `nbytes` bytes in native order.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: the buffer holds at least `nbytes` initialised bytes (checked by `take`'s
        // size); u8 has alignment 1; the shared borrow of `self` covers the slice.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast::<u8>(), self.nbytes) }
    }

    /// The data, writable (to fill a batch in place).
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        let n = self.nbytes;
        &mut words_as_bytes_mut(&mut self.buf)[..n]
    }

    /// The values, when the batch is float32.
    pub fn as_f32(&self) -> Option<&[f32]> {
        (self.dtype == Dtype::F32).then(|| {
            // SAFETY: as in `as_bytes`; the buffer is 8-aligned and holds `nbytes / 4` f32
            // values written by `collate`.
            unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast::<f32>(), self.nbytes / 4) }
        })
    }

    /// The values, when the batch is uint8.
    pub fn as_u8(&self) -> Option<&[u8]> {
        (self.dtype == Dtype::U8).then(|| self.as_bytes())
    }

    /// The address of the first byte; valid while the batch lives.
    pub fn as_ptr(&self) -> *const u8 {
        self.buf.as_ptr().cast()
    }

    /// The address of the first byte, for writable views; valid while the batch lives.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.buf.as_mut_ptr().cast()
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rgb(h: usize, w: usize, start: u8) -> Image {
        let v = (0..h * w * 3)
            .map(|i| start.wrapping_add(i as u8))
            .collect();
        Image::new(h, w, 3, Layout::Hwc, Pixels::U8(v)).unwrap()
    }

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn nchw_and_nhwc() {
        assert_send_sync::<Batch>();
        assert_send_sync::<Collator>();
        let images = vec![rgb(1, 2, 0), rgb(1, 2, 10)];
        let b = Collator::new(BatchLayout::Nhwc, None, 0)
            .collate(images.clone())
            .unwrap();
        assert_eq!(b.shape(), [2, 1, 2, 3]);
        assert_eq!(
            b.as_u8().unwrap(),
            &[0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15]
        );
        assert_eq!(b.strides_bytes(), [6, 6, 3, 1]);
        let b = Collator::default().collate(images).unwrap();
        assert_eq!(b.shape(), [2, 3, 1, 2]);
        assert_eq!(
            b.as_u8().unwrap(),
            &[0, 3, 1, 4, 2, 5, 10, 13, 11, 14, 12, 15]
        );
        assert_eq!(b.nbytes(), 12);
        assert!(b.as_f32().is_none());
    }

    #[test]
    fn float_chw_images_into_nchw_and_nhwc() {
        let im = Image::new(
            1,
            2,
            3,
            Layout::Chw,
            Pixels::F32(vec![1., 2., 3., 4., 5., 6.]),
        )
        .unwrap();
        let b = Collator::new(BatchLayout::Nchw, Some(Dtype::F32), 0)
            .collate(vec![im.clone()])
            .unwrap();
        assert_eq!(b.dtype(), Dtype::F32);
        assert_eq!(b.as_f32().unwrap(), &[1., 2., 3., 4., 5., 6.]);
        let b = Collator::new(BatchLayout::Nhwc, None, 0)
            .collate(vec![im])
            .unwrap();
        assert_eq!(b.as_f32().unwrap(), &[1., 3., 5., 2., 4., 6.]);
        assert_eq!(b.as_bytes().len(), 24);
    }

    #[test]
    fn mismatches_fail_with_reasons() {
        let c = Collator::default();
        assert!(matches!(c.collate(vec![]), Err(Error::EmptyBatch)));
        let err = c.collate(vec![rgb(2, 2, 0), rgb(2, 3, 0)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "image 1 of the batch is 2x3x3 (height x width x channels), the first one is 2x2x3"
        );
        let f = Image::new(2, 2, 3, Layout::Hwc, Pixels::F32(vec![0.0; 12])).unwrap();
        let err = c.collate(vec![rgb(2, 2, 0), f.clone()]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "image 1 of the batch is float32, expected uint8"
        );
        let err = Collator::new(BatchLayout::Nchw, Some(Dtype::F32), 0)
            .collate(vec![rgb(2, 2, 0)])
            .unwrap_err();
        assert!(matches!(err, Error::DtypeMismatch { index: 0, .. }));
        assert!("nchw".parse::<BatchLayout>().is_err());
        assert_eq!("NHWC".parse::<BatchLayout>().unwrap(), BatchLayout::Nhwc);
        assert_eq!(BatchLayout::Nchw.to_string(), "NCHW");
    }

    #[test]
    fn buffers_of_dropped_batches_are_reused() {
        let c = Collator::new(BatchLayout::Nchw, None, 2);
        let a = c.collate(vec![rgb(4, 4, 0)]).unwrap();
        let ptr = a.as_ptr();
        let b = c.collate(vec![rgb(4, 4, 1)]).unwrap();
        assert_ne!(b.as_ptr(), ptr);
        drop(a);
        assert_eq!(c.pooled(), 1);
        let again = c.collate(vec![rgb(4, 4, 2)]).unwrap();
        assert_eq!(again.as_ptr(), ptr, "the dropped batch's buffer is reused");
        assert_eq!(again.as_u8().unwrap()[0], 2);
        assert_eq!(c.pooled(), 0);
        // A smaller batch fits in a kept buffer; more drops than `buffers` are freed.
        let x = c.collate(vec![rgb(4, 4, 0)]).unwrap();
        drop((again, b, x));
        assert_eq!(c.pooled(), 2);
        let small = c.collate(vec![rgb(1, 1, 9)]).unwrap();
        assert_eq!(small.as_bytes(), &[9, 10, 11]);
        assert_eq!(c.pooled(), 1);
        // Without buffers nothing is kept.
        let none = Collator::default();
        drop(none.collate(vec![rgb(1, 1, 0)]).unwrap());
        assert_eq!(none.pooled(), 0);
    }

    #[test]
    fn pool_is_shared_across_threads() {
        let c = Collator::new(BatchLayout::Nhwc, None, 4);
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let c = c.clone();
                s.spawn(move || {
                    for _ in 0..50 {
                        let b = c.collate(vec![rgb(3, 3, t)]).unwrap();
                        assert_eq!(b.as_bytes()[0], t);
                    }
                });
            }
        });
        assert!(c.pooled() <= 4);
        assert!(c.pooled() >= 1);
    }

    #[test]
    fn writable_bytes() {
        let mut b = Collator::default().collate(vec![rgb(1, 1, 0)]).unwrap();
        b.as_bytes_mut()[0] = 99;
        // SAFETY: the pointer addresses the batch's 3 bytes, alive and not otherwise borrowed.
        unsafe { *b.as_mut_ptr().add(1) = 98 };
        assert_eq!(b.as_bytes(), &[99, 98, 2]);
    }
}
