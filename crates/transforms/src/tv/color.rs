//! torchvision's colour kernels on uint8 tensors (`F.rgb_to_grayscale`, `F.adjust_brightness`,
//! `F.adjust_contrast`, `F.adjust_saturation`, `F.adjust_hue`), reproduced operation by
//! operation in float32: every step torch runs as one float32 operation is one here, and
//! `t.add_(x, alpha=a)` is a fused multiply-add, as torch's CPU kernels compute it (AVX2 and
//! its scalar tail alike). float32 to uint8 truncates, as `Tensor.to(torch.uint8)`.
//!
//! Images are uint8 HWC with 1 or 3 channels; a 1-channel image is left as it is by
//! saturation and hue (torchvision: "Match PIL behaviour").

use super::{fma, with_fma};

/// `r * 0.2989 + g * 0.587 + b * 0.114` as torchvision's `_rgb_to_grayscale_image` computes it.
#[inline(always)]
fn gray(r: u8, g: u8, b: u8) -> f32 {
    let acc = f32::from(r) * 0.2989f32;
    let acc = fma(f32::from(g), 0.587, acc);
    fma(f32::from(b), 0.114, acc)
}

/// float32 to uint8 after `clamp_(0, 255)`: truncation.
#[inline]
fn to_u8(x: f32) -> u8 {
    x.clamp(0.0, 255.0) as u8
}

/// `_blend(x, other, ratio)`: `x * ratio + other * (1 - ratio)`, clamped, truncated.
#[inline(always)]
fn blend(x: u8, other: f32, ratio: f32, one_minus: f32) -> u8 {
    to_u8(fma(other, one_minus, f32::from(x) * ratio))
}

fn ratios(factor: f64) -> (f32, f32) {
    (factor as f32, (1.0 - factor) as f32)
}

/// `F.rgb_to_grayscale(image, num_output_channels=c)`: 3 channels become the grey value three
/// times; 1 channel is kept.
pub fn grayscale(v: &mut [u8], c: usize) {
    if c == 3 {
        with_fma(|| {
            for px in v.chunks_exact_mut(3) {
                let l = gray(px[0], px[1], px[2]) as u8;
                px.fill(l);
            }
        });
    }
}

/// Each value replaced by `f(value)`, computed once for each of the 256 values.
fn map_values(v: &mut [u8], f: impl Fn(u8) -> u8) {
    let table: [u8; 256] = std::array::from_fn(|i| f(i as u8));
    for x in v {
        *x = table[usize::from(*x)];
    }
}

/// `F.adjust_brightness`.
pub fn brightness(v: &mut [u8], factor: f64) {
    let f = factor as f32;
    map_values(v, |x| to_u8(f32::from(x) * f));
}

/// `F.adjust_saturation`: blended with the floored grey of each pixel.
pub fn saturation(v: &mut [u8], c: usize, factor: f64) {
    if c != 3 {
        return;
    }
    let (r, m) = ratios(factor);
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // SAFETY: the CPU was just found to have what `simd::saturation` enables.
        let done = unsafe { simd::saturation(v, r, m) };
        return with_fma(|| saturation_portable(&mut v[done..], r, m));
    }
    with_fma(|| saturation_portable(v, r, m));
}

fn saturation_portable(v: &mut [u8], r: f32, m: f32) {
    for px in v.chunks_exact_mut(3) {
        let l = gray(px[0], px[1], px[2]).floor();
        for x in px {
            *x = blend(*x, l, r, m);
        }
    }
}

/// The sum of the truncated grey values of RGB pixels.
fn gray_sum(v: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // SAFETY: the CPU was just found to have what `simd::gray_sum` enables.
        let (sum, done) = unsafe { simd::gray_sum(v) };
        return sum + with_fma(|| gray_sum_portable(&v[done..]));
    }
    with_fma(|| gray_sum_portable(v))
}

fn gray_sum_portable(v: &[u8]) -> u64 {
    v.chunks_exact(3)
        .map(|p| gray(p[0], p[1], p[2]) as u64)
        .sum()
}

/// `F.adjust_contrast`: blended with the mean of the floored grey image (float32 sum over the
/// pixels, divided by their number).
pub fn contrast(v: &mut [u8], c: usize, factor: f64) {
    let n = v.len() / c;
    let sum: u64 = if c == 3 {
        gray_sum(v)
    } else {
        v.iter().map(|&x| u64::from(x)).sum()
    };
    with_fma(|| {
        // The sum of integer-valued floats is exact in float32 up to 2^24, whatever torch's order.
        let mean = sum as f32 / n as f32;
        let (r, m) = ratios(factor);
        map_values(v, |x| blend(x, mean, r, m));
    });
}

/// torchvision's `_rgb_to_hsv` of one pixel (values in [0, 1]).
#[inline]
fn rgb_to_hsv(r: f32, g: f32, b: f32) -> (f32, f32, f32) {
    let maxc = r.max(g).max(b);
    let minc = r.min(g).min(b);
    let eqc = maxc == minc;
    let range = maxc - minc;
    let s = range / if eqc { 1.0 } else { maxc };
    let divisor = if eqc { 1.0 } else { range };
    let rc = (maxc - r) / divisor;
    let gc = (maxc - g) / divisor;
    let bc = (maxc - b) / divisor;
    let neq_r = maxc != r;
    let eq_g = maxc == g;
    let mask = |m: bool| if m { 1.0f32 } else { 0.0 };
    let hg = ((rc + 2.0) - bc) * mask(eq_g && neq_r);
    let hr = (bc - gc) * mask(!neq_r);
    let hb = ((gc + 4.0) - rc) * mask(neq_r && !eq_g);
    let h = (hr + hg) + hb;
    let h = (h * (1.0f64 / 6.0) as f32 + 1.0) % 1.0;
    (h, s, maxc)
}

/// torchvision's `_hsv_to_rgb` of one pixel.
#[inline]
fn hsv_to_rgb(h: f32, s: f32, v: f32) -> [f32; 3] {
    let h6 = h * 6.0;
    let fi = h6.floor();
    let f = h6 - fi;
    let sxf = s * f;
    let one_minus_s = 1.0 - s;
    let q = ((1.0 - sxf) * v).clamp(0.0, 1.0);
    let t = ((sxf + one_minus_s) * v).clamp(0.0, 1.0);
    let p = (one_minus_s * v).clamp(0.0, 1.0);
    match (fi as i32).rem_euclid(6) {
        0 => [v, t, p],
        1 => [q, v, p],
        2 => [p, v, t],
        3 => [p, q, v],
        4 => [t, p, v],
        _ => [v, p, q],
    }
}

/// `F.adjust_hue`: to float (`x * float32(1/255)`), HSV, the hue shifted modulo 1, RGB, back to
/// uint8 as `to_dtype(scale=True)` (`x * 255.999`, truncated).
pub fn hue(v: &mut [u8], c: usize, factor: f64) {
    if c != 3 {
        return;
    }
    let scale = (1.0f64 / 255.0) as f32;
    let back = (255.0f64 + 1.0 - 1e-3) as f32;
    let shift = factor as f32;
    for px in v.chunks_exact_mut(3) {
        let (h, s, val) = rgb_to_hsv(
            f32::from(px[0]) * scale,
            f32::from(px[1]) * scale,
            f32::from(px[2]) * scale,
        );
        // torch's remainder: fmod, then the divisor added to a negative result.
        let mut h = (h + shift) % 1.0;
        if h < 0.0 {
            h += 1.0;
        }
        for (x, y) in px.iter_mut().zip(hsv_to_rgb(h, s, val)) {
            *x = (y * back) as u8;
        }
    }
}

/// Saturation and the grey sum eight pixels at a time in AVX2 and FMA: the same float32
/// operations as the portable loops (a product, two fused multiply-adds, a floor, a product
/// and a fused multiply-add, a clamp and a truncation), so the same values.
#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    pub(super) fn available() -> bool {
        crate::simd::avx2_fma()
    }

    /// A byte shuffle from `f(i)` for output byte `i` (`-1`: zero).
    #[inline(always)]
    fn mask(f: impl Fn(i32) -> i32) -> __m128i {
        let m: [i8; 16] = std::array::from_fn(|i| f(i as i32) as i8);
        // SAFETY: 16 bytes, an unaligned load.
        unsafe { _mm_loadu_si128(m.as_ptr().cast()) }
    }

    /// The three channels of the 8 RGB pixels at `p` (24 bytes), as float32.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load(p: *const u8, masks: &[[__m128i; 2]; 3]) -> [__m256; 3] {
        // SAFETY: the caller has 24 bytes at `p`: 0..16 and 8..24.
        let (lo, hi) = unsafe { (_mm_loadu_si128(p.cast()), _mm_loadu_si128(p.add(8).cast())) };
        masks.map(|[a, b]| {
            let bytes = _mm_or_si128(_mm_shuffle_epi8(lo, a), _mm_shuffle_epi8(hi, b));
            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes))
        })
    }

    /// Channel `ch`'s bytes of pixels 0..8 from the 24 at 0 (`lo`) and the 16 at 8 (`hi`).
    fn channel_masks() -> [[__m128i; 2]; 3] {
        std::array::from_fn(|ch| {
            let ch = ch as i32;
            let at = |i: i32| 3 * i + ch;
            [
                mask(|i| if i < 8 && at(i) < 16 { at(i) } else { -1 }),
                mask(|i| if i < 8 && at(i) >= 16 { at(i) - 8 } else { -1 }),
            ]
        })
    }

    #[target_feature(enable = "avx2,fma")]
    fn gray(c: &[__m256; 3]) -> __m256 {
        let acc = _mm256_mul_ps(c[0], _mm256_set1_ps(0.2989));
        let acc = _mm256_fmadd_ps(c[1], _mm256_set1_ps(0.587), acc);
        _mm256_fmadd_ps(c[2], _mm256_set1_ps(0.114), acc)
    }

    /// Saturation of the leading whole groups of 8 pixels of `v`; returns the bytes done.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn saturation(v: &mut [u8], r: f32, m: f32) -> usize {
        let masks = channel_masks();
        // Bytes 0..16 of the output from r | g (`rg`: r in 0..8, g in 8..16) and from b,
        // then bytes 16..24.
        let pick = |base: i32, from_b: bool| {
            mask(move |i| {
                let k = base + i;
                match (k % 3, from_b) {
                    (0, false) => k / 3,
                    (1, false) => 8 + k / 3,
                    (2, true) => k / 3,
                    _ => -1,
                }
            })
        };
        let (m0, n0, m1, n1) = (
            pick(0, false),
            pick(0, true),
            pick(16, false),
            pick(16, true),
        );
        let (rv, mv) = (_mm256_set1_ps(r), _mm256_set1_ps(m));
        let (zero, top) = (_mm256_setzero_ps(), _mm256_set1_ps(255.0));
        let bytes = |x: __m256i| {
            let w = _mm_packus_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256::<1>(x));
            _mm_packus_epi16(w, w)
        };
        let n = v.len() / 24 * 24;
        for chunk in v[..n].chunks_exact_mut(24) {
            // SAFETY: a chunk is 24 bytes.
            let c = unsafe { load(chunk.as_ptr(), &masks) };
            let l = _mm256_floor_ps(gray(&c));
            let out = c.map(|x| {
                let y = _mm256_fmadd_ps(l, mv, _mm256_mul_ps(x, rv));
                bytes(_mm256_cvttps_epi32(_mm256_min_ps(
                    _mm256_max_ps(y, zero),
                    top,
                )))
            });
            let rg = _mm_unpacklo_epi64(out[0], out[1]);
            let first = _mm_or_si128(_mm_shuffle_epi8(rg, m0), _mm_shuffle_epi8(out[2], n0));
            let rest = _mm_or_si128(_mm_shuffle_epi8(rg, m1), _mm_shuffle_epi8(out[2], n1));
            // SAFETY: 16 and then 8 bytes into the 24 of the chunk.
            unsafe {
                _mm_storeu_si128(chunk.as_mut_ptr().cast(), first);
                _mm_storel_epi64(chunk.as_mut_ptr().add(16).cast(), rest);
            }
        }
        n
    }

    /// The truncated grey sum of the leading whole groups of 8 pixels of `v`, and the bytes
    /// they span.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gray_sum(v: &[u8]) -> (u64, usize) {
        let masks = channel_masks();
        let n = v.len() / 24 * 24;
        let mut total = 0u64;
        // Each 32-bit lane adds at most 255 a group: flushed well before it could overflow.
        for run in v[..n].chunks(24 << 20) {
            let mut acc = _mm256_setzero_si256();
            for chunk in run.chunks_exact(24) {
                // SAFETY: a chunk is 24 bytes.
                let c = unsafe { load(chunk.as_ptr(), &masks) };
                acc = _mm256_add_epi32(acc, _mm256_cvttps_epi32(gray(&c)));
            }
            let mut lanes = [0u32; 8];
            // SAFETY: 32 bytes into an array of 32.
            unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), acc) };
            total += lanes.iter().map(|&x| u64::from(x)).sum::<u64>();
        }
        (total, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The SIMD saturation and grey sum give the portable loops' values.
        #[test]
        fn simd_is_the_portable_arithmetic(v in proptest::collection::vec(0u8..=255, 0..300), f in 0.0f64..3.0) {
            let v: Vec<u8> = v[..v.len() / 3 * 3].to_vec();
            let (r, m) = ratios(f);
            let mut want = v.clone();
            with_fma(|| saturation_portable(&mut want, r, m));
            let mut got = v.clone();
            saturation(&mut got, 3, f);
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert_eq!(gray_sum(&v), with_fma(|| gray_sum_portable(&v)));
        }
    }

    #[test]
    fn factor_one_and_zero_hue_change_nothing_grey_is_kept() {
        let orig: Vec<u8> = (0..=255).flat_map(|x| [x, 255 - x, x / 2]).collect();
        let mut v = orig.clone();
        brightness(&mut v, 1.0);
        assert_eq!(v, orig);
        let mut v = orig.clone();
        saturation(&mut v, 3, 1.0);
        assert_eq!(v, orig);
        let mut v = orig.clone();
        contrast(&mut v, 3, 1.0);
        assert_eq!(v, orig);
        // Saturation 0 is the floored grey, as grayscale (truncated) is.
        let mut a = orig.clone();
        saturation(&mut a, 3, 0.0);
        let mut b = orig.clone();
        grayscale(&mut b, 3);
        assert_eq!(a, b);
        // Greys have no hue.
        let greys: Vec<u8> = (0..=255).flat_map(|x| [x, x, x]).collect();
        let mut v = greys.clone();
        hue(&mut v, 3, 0.3);
        assert_eq!(v, greys);
    }

    #[test]
    fn hue_turns_the_primaries() {
        let mut v = vec![255, 0, 0, 0, 255, 0, 0, 0, 255];
        hue(&mut v, 3, 1.0 / 3.0);
        assert_eq!(v, [0, 255, 0, 0, 0, 255, 255, 0, 0]);
        let mut v = vec![255, 0, 0];
        hue(&mut v, 3, -1.0 / 3.0);
        assert_eq!(v, [0, 0, 255]);
    }

    #[test]
    fn brightness_and_contrast_clamp() {
        let mut v = vec![0, 100, 200, 255];
        brightness(&mut v, 2.0);
        assert_eq!(v, [0, 200, 255, 255]);
        let mut v = vec![0, 255];
        contrast(&mut v, 1, 0.0);
        // The mean 127.5, truncated.
        assert_eq!(v, [127, 127]);
    }
}
