//! What `torchvision.transforms.v2.functional` computes on uint8 tensors, where it differs
//! from Pillow: the kernels of the random transforms (`crate::augment`).

pub mod affine;
pub mod color;
pub mod enhance;
mod resize;

pub use crate::resample::Interpolation;
pub use resize::{region_reads, resize_region_u8, resize_u8, resize_window_u8};

/// `a × b + c` rounded once to float32: the fused multiply-add of torch's CPU kernels. One
/// instruction inside [`with_fma`] on a CPU with FMA; elsewhere libm's exact `fmaf`.
#[inline(always)]
#[must_use]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

/// Runs `f` compiled for AVX2 and FMA when the CPU has them, so that [`fma`] in its loops is
/// one instruction and the loops vectorize (the build itself targets any x86-64); else `f` as
/// built. The values are the same either way.
#[inline(always)]
pub fn with_fma<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn fast<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        if crate::simd::avx2_fma() {
            // SAFETY: `fast` only enables instructions the CPU was just found to have.
            return unsafe { fast(f) };
        }
    }
    f()
}
