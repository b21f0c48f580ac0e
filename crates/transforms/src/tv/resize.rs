//! torch's resize of uint8 tensors (`F.resize` on a `torch.uint8` image, as torch runs it on x86
//! with AVX2 and on ARM): separable fixed-point convolution with int16 weights.
//!
//! It differs from Pillow's resampler (`crate::Resize`) in four ways, each visible in the
//! values: the weights' precision is chosen per axis so that the largest weight fits 15 bits
//! (Pillow: 22 bits); the horizontal pass always runs first; channels are independent (no
//! alpha premultiplication); and without antialiasing, the window is torch's (two or four
//! taps around `scale × (x + 0.5) − 0.5`, the taps outside the image folded onto the edge, and
//! bicubic with `a = −0.75`). Nearest neighbour is torch's `floorf(x × scale)` in float32.

use crate::Rect;
use crate::resample::{Filter, Interpolation, Window, pick, window};

/// The weights of one axis: per output index the first input index and its taps, each row
/// `ksize` int16 weights with `precision` fractional bits.
struct Axis {
    ksize: usize,
    bounds: Vec<(usize, usize)>,
    weights: Vec<i32>,
    precision: u32,
}

fn axis(input: usize, output: usize, interp: Interpolation, antialias: bool) -> Axis {
    axis_span(input, (0.0, input as f64), output, interp, antialias)
}

/// [`axis`] for the `span` `[from, to)` of the input (fractional), the samples around it read
/// as the filter reaches them.
fn axis_span(
    input: usize,
    (from, to): (f64, f64),
    output: usize,
    interp: Interpolation,
    antialias: bool,
) -> Axis {
    let filter = Filter::torch(interp, antialias);
    let window = if antialias {
        window(input, (from, to), output, filter, true)
    } else {
        fixed_taps(input, (from, to), output, filter)
    };
    let (ksize, bounds, rows, wt_max) = (window.ksize, window.bounds, window.weights, window.max);
    let mut precision = 0u32;
    while precision < 22 {
        let next = (0.5 + wt_max * f64::from(1u32 << (precision + 1))) as i32;
        if next >= 1 << 15 {
            break;
        }
        precision += 1;
    }
    let one = f64::from(1u32 << precision);
    let weights = rows
        .iter()
        .map(|&v| {
            let scaled = if v < 0.0 {
                -0.5 + v * one
            } else {
                0.5 + v * one
            };
            i32::from(scaled as i32 as i16)
        })
        .collect();
    Axis {
        ksize,
        bounds,
        weights,
        precision,
    }
}

/// torch's weights without antialiasing: two taps per unit of support around
/// `scale × (x + 0.5) − 0.5`, those outside the image folded onto the edge.
fn fixed_taps(input: usize, (from, to): (f64, f64), output: usize, filter: Filter) -> Window {
    let taps = 2 * filter.support as usize;
    let scale = (to - from) / output as f64;
    let ksize = taps;
    let mut rows = vec![0f64; output * ksize];
    let mut bounds = Vec::with_capacity(output);
    let mut wt_max = 0f64;
    for (i, row) in rows.chunks_exact_mut(ksize).enumerate() {
        let cubic = taps > 2;
        let mut real = from + scale * (i as f64 + 0.5) - 0.5;
        if !cubic && real < 0.0 {
            real = 0.0;
        }
        // torch floors in float32 (`floorf` of the double).
        let index = ((real as f32).floor() as i64).min(input as i64 - 1);
        let lambda = (real - index as f64).clamp(0.0, 1.0);
        let sup = (taps / 2) as i64;
        let unbound_min = index - sup + 1;
        let unbound_max = index + sup + 1;
        let imin = unbound_min.max(0);
        let isize = (unbound_max.min(input as i64) - imin).clamp(0, ksize as i64) as usize;
        // Taps outside the image add their weight to the edge tap.
        let mut wi = 0usize;
        for j in 0..ksize {
            let w = (filter.kernel)((j as i64 + 1 - sup) as f64 - lambda);
            let at = unbound_min + j as i64;
            if at <= 0 {
                wi = 0;
            } else if at >= input as i64 - 1 {
                wi = isize.saturating_sub(1);
            }
            let wi_c = wi.min(ksize - 1);
            row[wi_c] += w;
            wt_max = wt_max.max(row[wi_c]);
            wi += 1;
        }
        bounds.push((imin as usize, isize));
    }
    Window {
        ksize,
        bounds,
        weights: rows,
        max: wt_max,
    }
}

#[inline]
fn clip8(acc: i32, precision: u32) -> u8 {
    (acc >> precision).clamp(0, 255) as u8
}

/// [`horizontal`] for an image of `c` channels.
fn across(src: &[u8], h: usize, w: usize, c: usize, ax: &Axis) -> Vec<u8> {
    match c {
        1 => horizontal::<1>(src, h, w, ax),
        2 => horizontal::<2>(src, h, w, ax),
        3 => horizontal::<3>(src, h, w, ax),
        _ => horizontal::<4>(src, h, w, ax),
    }
}

/// Each row of an `h × w` image of `C` channels resized across by `ax`.
fn horizontal<const C: usize>(src: &[u8], h: usize, w: usize, ax: &Axis) -> Vec<u8> {
    #[cfg(target_arch = "x86_64")]
    if (C == 3 || C == 4) && crate::simd::avx2() {
        // SAFETY: the CPU was just found to have AVX2, all `simd::horizontal` enables.
        return unsafe { simd::horizontal::<C>(src, h, w, ax) };
    }
    horizontal_portable::<C>(src, h, w, ax)
}

fn horizontal_portable<const C: usize>(src: &[u8], h: usize, w: usize, ax: &Axis) -> Vec<u8> {
    let ow = ax.bounds.len();
    let mut out = Vec::with_capacity(h * ow * C);
    for y in 0..h {
        let row = &src[y * w * C..][..w * C];
        for (x, &(xmin, n)) in ax.bounds.iter().enumerate() {
            out.extend(pixel_across::<C>(row, ax, x, xmin, n));
        }
    }
    out
}

/// Output `x` of a row, whose taps start at input `xmin` and number `n`.
#[inline(always)]
fn pixel_across<const C: usize>(row: &[u8], ax: &Axis, x: usize, xmin: usize, n: usize) -> [u8; C] {
    let k = &ax.weights[x * ax.ksize..][..n];
    let mut acc = [1i32 << (ax.precision.max(1) - 1); C];
    for (px, &kw) in row[xmin * C..][..n * C].chunks_exact(C).zip(k) {
        for ch in 0..C {
            acc[ch] += i32::from(px[ch]) * kw;
        }
    }
    acc.map(|a| clip8(a, ax.precision))
}

/// The vertical pass, compiled for AVX2 when the CPU has it (the loops vectorize twice as
/// wide); the same values either way.
fn vertical(src: &[u8], w: usize, c: usize, ax: &Axis) -> Vec<u8> {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        fn avx2(src: &[u8], w: usize, c: usize, ax: &Axis) -> Vec<u8> {
            vertical_pass(src, w, c, ax)
        }
        if crate::simd::avx2() {
            // SAFETY: `avx2` only enables instructions the CPU was just found to have.
            return unsafe { avx2(src, w, c, ax) };
        }
    }
    vertical_pass(src, w, c, ax)
}

/// The horizontal pass of 3 and 4 channels with SSSE3's byte shuffle and SSE2's
/// multiply-add of 16-bit pairs: two taps of every channel in one instruction. The weights
/// fit 16 bits and each sum 32, so the integers are those of the portable loop.
#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    use super::{Axis, pixel_across};

    #[target_feature(enable = "avx2")]
    pub(super) fn horizontal<const C: usize>(src: &[u8], h: usize, w: usize, ax: &Axis) -> Vec<u8> {
        let ow = ax.bounds.len();
        let half = ax.ksize.div_ceil(2);
        // Each output's weights in pairs, as one 32-bit lane of two 16-bit ones.
        let mut pairs = vec![0i32; ow * half];
        for (x, &(_, n)) in ax.bounds.iter().enumerate() {
            let k = &ax.weights[x * ax.ksize..][..n];
            for (j, pair) in k.chunks(2).enumerate() {
                let hi = pair.get(1).copied().unwrap_or(0);
                pairs[x * half + j] = (pair[0] & 0xffff) | (hi << 16);
            }
        }
        // Two pixels' bytes to 16-bit lanes, channel by channel: (p0 c0, p1 c0, p0 c1, ...).
        let shuffle = if C == 3 {
            _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1)
        } else {
            _mm_setr_epi8(0, -1, 4, -1, 1, -1, 5, -1, 2, -1, 6, -1, 3, -1, 7, -1)
        };
        let init = _mm_set1_epi32(1 << (ax.precision.max(1) - 1));
        let shift = _mm_cvtsi32_si128(ax.precision as i32);
        // Each pixel is stored as 4 bytes, the next one overwriting the fourth.
        let mut out = vec![0u8; h * ow * C + 4];
        let mut o = 0;
        for y in 0..h {
            let row = &src[y * w * C..][..w * C];
            // What may be read from the row's start: the rest of `src`.
            let readable = src.len() - y * w * C;
            for (x, &(xmin, n)) in ax.bounds.iter().enumerate() {
                let last = xmin * C + (n.saturating_sub(1) & !1) * C;
                let px: [u8; 4] = if n > 0 && last + 8 <= readable {
                    let mut acc = init;
                    for (j, &pair) in pairs[x * half..][..n.div_ceil(2)].iter().enumerate() {
                        // SAFETY: the 8 bytes at `xmin + 2 j` pixels lie within `src`: the
                        // last of them (`last`) was checked above.
                        let v =
                            unsafe { _mm_loadl_epi64(row.as_ptr().add((xmin + 2 * j) * C).cast()) };
                        let v = _mm_shuffle_epi8(v, shuffle);
                        acc = _mm_add_epi32(acc, _mm_madd_epi16(v, _mm_set1_epi32(pair)));
                    }
                    // The shift, then saturating packs clamp to 0..=255 as `clip8`.
                    let v = _mm_sra_epi32(acc, shift);
                    let v = _mm_packus_epi16(_mm_packs_epi32(v, v), v);
                    (_mm_cvtsi128_si32(v) as u32).to_le_bytes()
                } else {
                    let p = pixel_across::<C>(row, ax, x, xmin, n);
                    std::array::from_fn(|i| if i < C { p[i] } else { 0 })
                };
                out[o..o + 4].copy_from_slice(&px);
                o += C;
            }
        }
        out.truncate(h * ow * C);
        out
    }
}

fn vertical_pass(src: &[u8], w: usize, c: usize, ax: &Axis) -> Vec<u8> {
    let stride = w * c;
    let mut out = vec![0u8; ax.bounds.len() * stride];
    let mut acc = vec![0i32; stride];
    let init = 1i32 << (ax.precision.max(1) - 1);
    for (y, &(ymin, n)) in ax.bounds.iter().enumerate() {
        acc.fill(init);
        for (i, &kw) in ax.weights[y * ax.ksize..][..n].iter().enumerate() {
            let row = &src[(ymin + i) * stride..][..stride];
            for (a, &p) in acc.iter_mut().zip(row) {
                *a += i32::from(p) * kw;
            }
        }
        for (o, &a) in out[y * stride..][..stride].iter_mut().zip(&acc) {
            *o = clip8(a, ax.precision);
        }
    }
    out
}

/// torch's nearest source indices for `output` outputs of `input` inputs.
fn nearest_table(input: usize, output: usize, exact: bool) -> Vec<usize> {
    if input == output {
        return (0..output).collect();
    }
    if !exact && output == 2 * input {
        return (0..output).map(|x| x >> 1).collect();
    }
    let scale = input as f32 / output as f32;
    (0..output)
        .map(|x| {
            let pos = if exact {
                // `(x + 0.5)` is a double in torch, times the float scale, then `floorf`.
                ((x as f64 + 0.5) * f64::from(scale)) as f32
            } else {
                x as f32 * scale
            };
            (pos.floor() as usize).min(input - 1)
        })
        .collect()
}

/// A uint8 HWC image of `c` channels resized to `oh × ow` as `torchvision.transforms.v2.
/// functional.resize` does on the uint8 tensor (`antialias` only for the filtering modes).
pub fn resize_u8(
    src: &[u8],
    (h, w, c): (usize, usize, usize),
    (oh, ow): (usize, usize),
    interp: Interpolation,
    antialias: bool,
) -> Vec<u8> {
    if (oh, ow) == (h, w) {
        return src.to_vec();
    }
    if !interp.filters() {
        let exact = interp == Interpolation::NearestExact;
        let xs = nearest_table(w, ow, exact);
        let ys = nearest_table(h, oh, exact);
        return pick(src, w, c, &xs, &ys);
    }
    let mut cur: std::borrow::Cow<'_, [u8]> = src.into();
    if ow != w {
        let ax = axis(w, ow, interp, antialias);
        cur = across(&cur, h, w, c, &ax).into();
    }
    if oh != h {
        let ax = axis(h, oh, interp, antialias);
        cur = vertical(&cur, ow, c, &ax).into();
    }
    cur.into_owned()
}

/// The region `(top, left, height, width)` of a uint8 HWC image (fractional, inside it)
/// resized to `oh × ow` with [`resize_u8`]'s arithmetic, the filter reading the pixels around
/// the region as it reaches them. For a region of the whole image, [`resize_u8`] itself when
/// both sides change. The filtering modes only; nearest rounds the region to whole pixels.
pub fn resize_region_u8(
    src: &[u8],
    (h, w, c): (usize, usize, usize),
    region: (f64, f64, f64, f64),
    (oh, ow): (usize, usize),
    interp: Interpolation,
    antialias: bool,
) -> Vec<u8> {
    let whole = Rect::whole((h, w));
    resize_window_u8(src, (h, w, c), whole, region, (oh, ow), interp, antialias)
}

/// The pixels of an `h × w` image that [`resize_region_u8`] reads for `region` and `oh × ow`.
pub fn region_reads(
    (h, w): (usize, usize),
    region: (f64, f64, f64, f64),
    (oh, ow): (usize, usize),
    interp: Interpolation,
    antialias: bool,
) -> Rect {
    if !interp.filters() {
        return nearest_box((h, w), region);
    }
    let (top, left, height, width) = region;
    let (y0, y1) = reach(&axis_span(h, (top, top + height), oh, interp, antialias));
    let (x0, x1) = reach(&axis_span(w, (left, left + width), ow, interp, antialias));
    Rect {
        top: y0,
        left: x0,
        height: y1 - y0,
        width: x1 - x0,
    }
}

/// [`resize_region_u8`] on an `h × w` image of which `src` holds only `window` (at least the
/// pixels [`region_reads`] names): the same values.
///
/// # Panics
/// When `window` lacks a pixel the resize reads.
pub fn resize_window_u8(
    src: &[u8],
    (h, w, c): (usize, usize, usize),
    window: Rect,
    region: (f64, f64, f64, f64),
    (oh, ow): (usize, usize),
    interp: Interpolation,
    antialias: bool,
) -> Vec<u8> {
    let stride = window.width * c;
    if !interp.filters() {
        let b = nearest_box((h, w), region);
        let mut crop = Vec::with_capacity(b.height * b.width * c);
        for y in b.top..b.top + b.height {
            let at = (y - window.top) * stride + (b.left - window.left) * c;
            crop.extend_from_slice(&src[at..][..b.width * c]);
        }
        return resize_u8(&crop, (b.height, b.width, c), (oh, ow), interp, antialias);
    }
    let (top, left, height, width) = region;
    // The rows the vertical pass reads, then both passes over those rows only.
    let mut ay = axis_span(h, (top, top + height), oh, interp, antialias);
    let (lo, hi) = reach(&ay);
    for b in &mut ay.bounds {
        b.0 -= lo;
    }
    let rows = &src[(lo - window.top) * stride..(hi - window.top) * stride];
    let mut ax = axis_span(w, (left, left + width), ow, interp, antialias);
    for b in &mut ax.bounds {
        b.0 -= window.left;
    }
    let rows = across(rows, hi - lo, window.width, c, &ax);
    vertical(&rows, ow, c, &ay)
}

/// The first and past-the-last input an axis reads (at least one).
fn reach(ax: &Axis) -> (usize, usize) {
    let lo = ax.bounds.iter().map(|&(m, _)| m).min().unwrap_or(0);
    let hi = ax.bounds.iter().map(|&(m, n)| m + n).max().unwrap_or(lo);
    (lo, hi.max(lo + 1))
}

/// The whole pixels nearest interpolation takes of `region`: rounded, at least one, inside.
fn nearest_box((h, w): (usize, usize), (top, left, height, width): (f64, f64, f64, f64)) -> Rect {
    let (t, l) = (top.round() as usize, left.round() as usize);
    let (ch, cw) = (
        (height.round() as usize).clamp(1, h - t.min(h - 1)),
        (width.round() as usize).clamp(1, w - l.min(w - 1)),
    );
    Rect {
        top: t.min(h - ch),
        left: l.min(w - cw),
        height: ch,
        width: cw,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The SIMD horizontal pass gives the portable one's values.
        #[test]
        fn simd_across_is_the_portable_pass(
            h in 1usize..4, w in 1usize..80, ow in 1usize..60, four: bool, seed: u64,
            aa: bool, kind in 0usize..3, from in 0.0f64..0.5,
        ) {
            let interp = [Interpolation::Bilinear, Interpolation::Bicubic, Interpolation::Lanczos3][kind];
            let ax = axis_span(w, (from, w as f64 - from), ow, interp, aa);
            let mut x = seed | 1;
            let c = if four { 4 } else { 3 };
            let src: Vec<u8> = (0..h * w * c).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x as u8 }).collect();
            let (got, want) = if four {
                (horizontal::<4>(&src, h, w, &ax), horizontal_portable::<4>(&src, h, w, &ax))
            } else {
                (horizontal::<3>(&src, h, w, &ax), horizontal_portable::<3>(&src, h, w, &ax))
            };
            proptest::prop_assert_eq!(got, want);
        }

        /// The whole image as the region is the plain resize (when both sides change).
        #[test]
        fn whole_region_is_the_resize(
            h in 2usize..30, w in 2usize..30, oh in 1usize..40, ow in 1usize..40,
            c in 1usize..=4, seed: u64, aa: bool, kind in 0usize..3,
        ) {
            proptest::prop_assume!(oh != h && ow != w);
            let interp = [Interpolation::Bilinear, Interpolation::Bicubic, Interpolation::Lanczos3][kind];
            proptest::prop_assume!(aa || interp != Interpolation::Lanczos3);
            let mut x = seed | 1;
            let src: Vec<u8> = (0..h * w * c).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x as u8 }).collect();
            let region = (0.0, 0.0, h as f64, w as f64);
            proptest::prop_assert_eq!(
                resize_region_u8(&src, (h, w, c), region, (oh, ow), interp, aa),
                resize_u8(&src, (h, w, c), (oh, ow), interp, aa)
            );
        }
    }

    #[test]
    fn constants_stay_constant() {
        for interp in [
            Interpolation::Nearest,
            Interpolation::NearestExact,
            Interpolation::Bilinear,
            Interpolation::Bicubic,
            Interpolation::Lanczos3,
        ] {
            for aa in [true, false] {
                for (h, w, oh, ow) in [(7, 9, 3, 20), (1, 1, 5, 4), (40, 3, 11, 3), (5, 6, 5, 6)] {
                    let src = vec![77u8; h * w * 3];
                    let out = resize_u8(&src, (h, w, 3), (oh, ow), interp, aa);
                    assert_eq!(
                        out,
                        vec![77u8; oh * ow * 3],
                        "{interp:?} {aa} {h}x{w}->{oh}x{ow}"
                    );
                }
            }
        }
    }

    #[test]
    fn weights_use_fifteen_bits_and_sum_to_one() {
        for (input, output, aa) in [(500, 224, true), (224, 500, true), (37, 11, false)] {
            let ax = axis(input, output, Interpolation::Bilinear, aa);
            // The largest weight fits 15 bits, and one more bit would not fit.
            let max = *ax.weights.iter().max().unwrap();
            assert!(
                max < 1 << 15 && 2 * max >= 1 << 15,
                "{max} at {}",
                ax.precision
            );
            for (x, &(_, n)) in ax.bounds.iter().enumerate() {
                let sum: i32 = ax.weights[x * ax.ksize..][..n].iter().sum();
                let one = 1i32 << ax.precision;
                assert!((sum - one).abs() <= n as i32, "{sum} vs {one}");
            }
        }
    }

    #[test]
    fn nearest_is_torchs_float_rule() {
        // 3 -> 7: scale 3/7 in float32, x * scale floored.
        assert_eq!(nearest_table(3, 7, false), [0, 0, 0, 1, 1, 2, 2]);
        assert_eq!(nearest_table(3, 6, false), [0, 0, 1, 1, 2, 2]);
        assert_eq!(nearest_table(3, 7, true), [0, 0, 1, 1, 1, 2, 2]);
        assert_eq!(nearest_table(10, 4, false), [0, 2, 5, 7]);
    }
}
