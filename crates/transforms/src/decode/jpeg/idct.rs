//! libjpeg's integer inverse DCTs, to the bit: the "islow" 8 × 8 one (its default, which
//! Pillow keeps) and the reduced-size 4 × 4, 2 × 2 and 1 × 1 ones it uses to decode at 1/2,
//! 1/4 and 1/8 scale. Each pass works on the eight columns (then rows) at once, so that the
//! compiler vectorizes it; the results equal libjpeg's one-column-at-a-time C and its SIMD.

/// Eight lanes: one value per column (first pass) or per row (second pass).
type L = [i32; 8];

const CONST_BITS: u32 = 13;
const PASS1_BITS: u32 = 2;

/// `x` times 2^13, rounded: the constants of libjpeg's integer IDCTs.
const fn fix(x: f64) -> i32 {
    (x * (1 << CONST_BITS) as f64 + 0.5) as i32
}

const F_0_211: i32 = fix(0.211164243);
const F_0_298: i32 = fix(0.298631336);
const F_0_390: i32 = fix(0.390180644);
const F_0_509: i32 = fix(0.509795579);
const F_0_541: i32 = fix(0.541196100);
const F_0_601: i32 = fix(0.601344887);
const F_0_720: i32 = fix(0.720959822);
const F_0_765: i32 = fix(0.765366865);
const F_0_850: i32 = fix(0.850430095);
const F_0_899: i32 = fix(0.899976223);
const F_1_061: i32 = fix(1.061594337);
const F_1_175: i32 = fix(1.175875602);
const F_1_272: i32 = fix(1.272758580);
const F_1_451: i32 = fix(1.451774981);
const F_1_501: i32 = fix(1.501321110);
const F_1_847: i32 = fix(1.847759065);
const F_1_961: i32 = fix(1.961570560);
const F_2_053: i32 = fix(2.053119869);
const F_2_172: i32 = fix(2.172734803);
const F_2_562: i32 = fix(2.562915447);
const F_3_072: i32 = fix(3.072711026);
const F_3_624: i32 = fix(3.624509785);

// Lane-wise arithmetic, wrapping as C's does on corrupt input (valid data never overflows).
#[inline(always)]
fn map(f: impl Fn(usize) -> i32) -> L {
    std::array::from_fn(f)
}
#[inline(always)]
fn add(a: L, b: L) -> L {
    map(|i| a[i].wrapping_add(b[i]))
}
#[inline(always)]
fn sub(a: L, b: L) -> L {
    map(|i| a[i].wrapping_sub(b[i]))
}
#[inline(always)]
fn mul(a: L, c: i32) -> L {
    map(|i| a[i].wrapping_mul(c))
}
#[inline(always)]
fn shl(a: L, n: u32) -> L {
    map(|i| a[i].wrapping_shl(n))
}
/// libjpeg's `DESCALE`: divide by 2^n rounding half up.
#[inline(always)]
fn descale(a: L, n: u32) -> L {
    map(|i| a[i].wrapping_add(1 << (n - 1)) >> n)
}

/// The 8-point islow transform along the lanes of `x` (inputs by frequency), descaled by `n`.
#[inline(always)]
fn islow(x: &[L; 8], n: u32) -> [L; 8] {
    // Even part: the rotation of coefficients 2 and 6, then 0 and 4.
    let z1 = mul(add(x[2], x[6]), F_0_541);
    let tmp2 = add(z1, mul(x[6], -F_1_847));
    let tmp3 = add(z1, mul(x[2], F_0_765));
    let tmp0 = shl(add(x[0], x[4]), CONST_BITS);
    let tmp1 = shl(sub(x[0], x[4]), CONST_BITS);
    let (e0, e3) = (add(tmp0, tmp3), sub(tmp0, tmp3));
    let (e1, e2) = (add(tmp1, tmp2), sub(tmp1, tmp2));
    // Odd part: coefficients 7, 5, 3, 1.
    let (t0, t1, t2, t3) = (x[7], x[5], x[3], x[1]);
    let z5 = mul(add(add(t0, t2), add(t1, t3)), F_1_175);
    let z1 = mul(add(t0, t3), -F_0_899);
    let z2 = mul(add(t1, t2), -F_2_562);
    let z3 = add(mul(add(t0, t2), -F_1_961), z5);
    let z4 = add(mul(add(t1, t3), -F_0_390), z5);
    let o0 = add(mul(t0, F_0_298), add(z1, z3));
    let o1 = add(mul(t1, F_2_053), add(z2, z4));
    let o2 = add(mul(t2, F_3_072), add(z2, z3));
    let o3 = add(mul(t3, F_1_501), add(z1, z4));
    butterfly([e0, e1, e2, e3], [o3, o2, o1, o0], n)
}

/// The outputs `e[i] + o[i]` then, mirrored, `e[i] - o[i]`, descaled by `n`.
#[inline(always)]
fn butterfly<const H: usize, const N: usize>(e: [L; H], o: [L; H], n: u32) -> [L; N] {
    std::array::from_fn(|i| {
        if i < H {
            descale(add(e[i], o[i]), n)
        } else {
            descale(sub(e[N - 1 - i], o[N - 1 - i]), n)
        }
    })
}

/// The reduced 4-point transform (libjpeg's `jpeg_idct_4x4`): coefficient 4 unused.
#[inline(always)]
fn reduced4(x: &[L; 8], n: u32) -> [L; 4] {
    let tmp0 = shl(x[0], CONST_BITS + 1);
    let tmp2 = add(mul(x[2], F_1_847), mul(x[6], -F_0_765));
    let (e0, e1) = (add(tmp0, tmp2), sub(tmp0, tmp2));
    let (z1, z2, z3, z4) = (x[7], x[5], x[3], x[1]);
    let o0 = add(
        add(mul(z1, -F_0_211), mul(z2, F_1_451)),
        add(mul(z3, -F_2_172), mul(z4, F_1_061)),
    );
    let o1 = add(
        add(mul(z1, -F_0_509), mul(z2, -F_0_601)),
        add(mul(z3, F_0_899), mul(z4, F_2_562)),
    );
    butterfly([e0, e1], [o1, o0], n)
}

/// The reduced 2-point transform (libjpeg's `jpeg_idct_2x2`): the odd coefficients and DC.
#[inline(always)]
fn reduced2(x: &[L; 8], n: u32) -> [L; 2] {
    let even = shl(x[0], CONST_BITS + 2);
    let odd = add(
        add(mul(x[7], -F_0_720), mul(x[5], F_0_850)),
        add(mul(x[3], -F_1_272), mul(x[1], F_3_624)),
    );
    butterfly([even], [odd], n)
}

/// The dequantised coefficients, by frequency row: `x[u][v] = coef[8u + v] * q[8u + v]`.
#[inline(always)]
fn dequantize(coef: &[i16; 64], q: &[u16; 64]) -> [L; 8] {
    // i16 times u16 fits in i32.
    std::array::from_fn(|u| map(|v| i32::from(coef[8 * u + v]) * i32::from(q[8 * u + v])))
}

/// Lane `i` of row `j` becomes lane `j` of row `i` (with rows past `a`'s zero).
#[inline(always)]
fn transpose<const N: usize>(a: &[L; N]) -> [L; 8] {
    std::array::from_fn(|i| map(|j| if j < N { a[j][i] } else { 0 }))
}

#[inline(always)]
fn sample(v: i32) -> u8 {
    (v + 128).clamp(0, 255) as u8
}

/// Writes an `s × s` block (`s` of 8, 4, 2 or 1) of samples from one block of coefficients.
pub(super) type BlockFn = fn(usize, &[i16; 64], &[u16; 64], &mut [u8], usize);

/// [`block`], with the transforms in AVX2 when the CPU has it (the build targets any
/// x86-64). The values are the same either way.
pub(super) fn block_fn() -> BlockFn {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::avx2() {
        return |s, coef, q, out, stride| {
            block_with(s, coef, q, out, stride, |s, coef, q, out, stride| {
                // SAFETY: the CPU was just found to have AVX2, all these enable.
                unsafe {
                    match s {
                        8 => avx2::idct8(coef, q, out, stride),
                        4 => avx2::idct4(coef, q, out, stride),
                        _ => avx2::idct2(coef, q, out, stride),
                    }
                }
            })
        };
    }
    block
}

#[inline(always)]
fn dc_only_block(coef: &[i16; 64]) -> bool {
    coef[1..].iter().all(|&c| c == 0)
}

#[inline(always)]
pub(super) fn block(s: usize, coef: &[i16; 64], q: &[u16; 64], out: &mut [u8], stride: usize) {
    block_with(s, coef, q, out, stride, |s, coef, q, out, stride| match s {
        8 => idct8(coef, q, out, stride),
        4 => idct4(coef, q, out, stride),
        _ => idct2(coef, q, out, stride),
    });
}

/// [`block`] with `idct(s, ...)` as the 8 × 8, 4 × 4 and 2 × 2 transforms.
#[inline(always)]
fn block_with(
    s: usize,
    coef: &[i16; 64],
    q: &[u16; 64],
    out: &mut [u8],
    stride: usize,
    idct: impl Fn(usize, &[i16; 64], &[u16; 64], &mut [u8], usize),
) {
    if s > 1 && dc_only_block(coef) {
        // Only DC: every transform gives a flat block of the value the 1 × 1 one gives.
        let v = dc_only(coef, q, s);
        for row in out.chunks_mut(stride).take(s) {
            row[..s].fill(v);
        }
        return;
    }
    match s {
        8 | 4 | 2 => idct(s, coef, q, out, stride),
        _ => out[0] = dc_only(coef, q, 1),
    }
}

/// The sample of a block whose only coefficient is DC, as each size's transform rounds it.
#[inline(always)]
fn dc_only(coef: &[i16; 64], q: &[u16; 64], s: usize) -> u8 {
    let dc = i32::from(coef[0]) * i32::from(q[0]);
    match s {
        // Through both passes: dc << 2 after the first, then descaled by 5 (8x8: 18 - 13).
        8 | 4 | 2 => sample(dc.wrapping_shl(PASS1_BITS).wrapping_add(16) >> 5),
        _ => sample((dc + 4) >> 3),
    }
}

#[inline(always)]
fn idct8(coef: &[i16; 64], q: &[u16; 64], out: &mut [u8], stride: usize) {
    two_pass(coef, q, out, stride, 0, islow);
}

#[inline(always)]
fn idct4(coef: &[i16; 64], q: &[u16; 64], out: &mut [u8], stride: usize) {
    two_pass(coef, q, out, stride, 1, reduced4);
}

#[inline(always)]
fn idct2(coef: &[i16; 64], q: &[u16; 64], out: &mut [u8], stride: usize) {
    two_pass(coef, q, out, stride, 2, reduced2);
}

/// An `N × N` block by `kernel` down the columns, then along the rows; each pass descaled by
/// `extra` bits more than the 8 × 8 transform (the reduced kernels' gain).
#[inline(always)]
fn two_pass<const N: usize>(
    coef: &[i16; 64],
    q: &[u16; 64],
    out: &mut [u8],
    stride: usize,
    extra: u32,
    kernel: impl Fn(&[L; 8], u32) -> [L; N],
) {
    // Columns first: ws[y][column]; then the rows: px[x][y].
    let ws = kernel(&dequantize(coef, q), CONST_BITS - PASS1_BITS + extra);
    let px = kernel(&transpose(&ws), CONST_BITS + PASS1_BITS + 3 + extra);
    for (y, row) in out.chunks_mut(stride).take(N).enumerate() {
        for (x, o) in row[..N].iter_mut().enumerate() {
            *o = sample(px[x][y]);
        }
    }
}

/// The 8 × 8 islow transform in AVX2 intrinsics: eight 32-bit lanes, as the portable
/// version's arrays, which the compiler does not turn into as few instructions.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::*;

    macro_rules! add {
        ($a:expr, $b:expr) => {
            _mm256_add_epi32($a, $b)
        };
    }
    macro_rules! sub {
        ($a:expr, $b:expr) => {
            _mm256_sub_epi32($a, $b)
        };
    }
    macro_rules! mul {
        ($a:expr, $c:expr) => {
            _mm256_mullo_epi32($a, _mm256_set1_epi32($c))
        };
    }

    /// [`islow`](super::islow) along the lanes, descaled by `N`.
    #[target_feature(enable = "avx2")]
    fn islow<const N: i32>(x: [__m256i; 8]) -> [__m256i; 8] {
        let z1 = mul!(add!(x[2], x[6]), F_0_541);
        let tmp2 = add!(z1, mul!(x[6], -F_1_847));
        let tmp3 = add!(z1, mul!(x[2], F_0_765));
        let tmp0 = _mm256_slli_epi32::<13>(add!(x[0], x[4]));
        let tmp1 = _mm256_slli_epi32::<13>(sub!(x[0], x[4]));
        let (e0, e3) = (add!(tmp0, tmp3), sub!(tmp0, tmp3));
        let (e1, e2) = (add!(tmp1, tmp2), sub!(tmp1, tmp2));
        let (t0, t1, t2, t3) = (x[7], x[5], x[3], x[1]);
        let z5 = mul!(add!(add!(t0, t2), add!(t1, t3)), F_1_175);
        let z1 = mul!(add!(t0, t3), -F_0_899);
        let z2 = mul!(add!(t1, t2), -F_2_562);
        let z3 = add!(mul!(add!(t0, t2), -F_1_961), z5);
        let z4 = add!(mul!(add!(t1, t3), -F_0_390), z5);
        let o0 = add!(mul!(t0, F_0_298), add!(z1, z3));
        let o1 = add!(mul!(t1, F_2_053), add!(z2, z4));
        let o2 = add!(mul!(t2, F_3_072), add!(z2, z3));
        let o3 = add!(mul!(t3, F_1_501), add!(z1, z4));
        butterfly::<N, 4, 8>([e0, e1, e2, e3], [o3, o2, o1, o0])
    }

    /// [`butterfly`](super::butterfly): `e[i] + o[i]`, then mirrored `e[i] - o[i]`,
    /// descaled by `N`.
    #[target_feature(enable = "avx2")]
    fn butterfly<const N: i32, const H: usize, const M: usize>(
        e: [__m256i; H],
        o: [__m256i; H],
    ) -> [__m256i; M] {
        let half = _mm256_set1_epi32(1 << (N - 1));
        let d = |v| _mm256_srai_epi32::<N>(_mm256_add_epi32(v, half));
        std::array::from_fn(|i| {
            if i < H {
                d(add!(e[i], o[i]))
            } else {
                d(sub!(e[M - 1 - i], o[M - 1 - i]))
            }
        })
    }

    /// Lane `i` of row `j` becomes lane `j` of row `i`.
    #[target_feature(enable = "avx2")]
    fn transpose(r: [__m256i; 8]) -> [__m256i; 8] {
        let lo = |a, b| _mm256_unpacklo_epi32(a, b);
        let hi = |a, b| _mm256_unpackhi_epi32(a, b);
        let (t0, t1, t2, t3) = (
            lo(r[0], r[1]),
            hi(r[0], r[1]),
            lo(r[2], r[3]),
            hi(r[2], r[3]),
        );
        let (t4, t5, t6, t7) = (
            lo(r[4], r[5]),
            hi(r[4], r[5]),
            lo(r[6], r[7]),
            hi(r[6], r[7]),
        );
        let lo64 = |a, b| _mm256_unpacklo_epi64(a, b);
        let hi64 = |a, b| _mm256_unpackhi_epi64(a, b);
        let u = [
            lo64(t0, t2),
            hi64(t0, t2),
            lo64(t1, t3),
            hi64(t1, t3),
            lo64(t4, t6),
            hi64(t4, t6),
            lo64(t5, t7),
            hi64(t5, t7),
        ];
        std::array::from_fn(|i| {
            if i < 4 {
                _mm256_permute2x128_si256::<0x20>(u[i], u[i + 4])
            } else {
                _mm256_permute2x128_si256::<0x31>(u[i - 4], u[i])
            }
        })
    }

    /// [`reduced4`](super::reduced4) along the lanes, descaled by `N`.
    #[target_feature(enable = "avx2")]
    fn reduced4<const N: i32>(x: [__m256i; 8]) -> [__m256i; 4] {
        let tmp0 = _mm256_slli_epi32::<{ CONST_BITS as i32 + 1 }>(x[0]);
        let tmp2 = add!(mul!(x[2], F_1_847), mul!(x[6], -F_0_765));
        let (e0, e1) = (add!(tmp0, tmp2), sub!(tmp0, tmp2));
        let (z1, z2, z3, z4) = (x[7], x[5], x[3], x[1]);
        let o0 = add!(
            add!(mul!(z1, -F_0_211), mul!(z2, F_1_451)),
            add!(mul!(z3, -F_2_172), mul!(z4, F_1_061))
        );
        let o1 = add!(
            add!(mul!(z1, -F_0_509), mul!(z2, -F_0_601)),
            add!(mul!(z3, F_0_899), mul!(z4, F_2_562))
        );
        butterfly::<N, 2, 4>([e0, e1], [o1, o0])
    }

    /// [`reduced2`](super::reduced2) along the lanes, descaled by `N`.
    #[target_feature(enable = "avx2")]
    fn reduced2<const N: i32>(x: [__m256i; 8]) -> [__m256i; 2] {
        let even = _mm256_slli_epi32::<{ CONST_BITS as i32 + 2 }>(x[0]);
        let odd = add!(
            add!(mul!(x[7], -F_0_720), mul!(x[5], F_0_850)),
            add!(mul!(x[3], -F_1_272), mul!(x[1], F_3_624))
        );
        butterfly::<N, 1, 2>([even], [odd])
    }

    /// The dequantised coefficients, a frequency row a vector.
    #[target_feature(enable = "avx2")]
    fn dequantize(coef: &[i16; 64], q: &[u16; 64]) -> [__m256i; 8] {
        std::array::from_fn(|u| {
            // SAFETY: row `u` is the 8 values (16 bytes) at `8 u` of 64; unaligned loads.
            let (c, q) = unsafe {
                (
                    _mm_loadu_si128(coef.as_ptr().add(8 * u).cast()),
                    _mm_loadu_si128(q.as_ptr().add(8 * u).cast()),
                )
            };
            _mm256_mullo_epi32(_mm256_cvtepi16_epi32(c), _mm256_cvtepu16_epi32(q))
        })
    }

    /// `rows[y]` lane `x` (plus 128, clamped) as sample `(y, x)`, `N` of each.
    #[target_feature(enable = "avx2")]
    fn store<const N: usize>(rows: &[__m256i], out: &mut [u8], stride: usize) {
        let mid = _mm256_set1_epi32(128);
        for (row, &v) in out.chunks_mut(stride).zip(&rows[..N]) {
            // Saturating packs clamp to 0..=255 as the portable version's `clamp`.
            let v = _mm256_add_epi32(v, mid);
            let v = _mm256_packus_epi16(_mm256_packs_epi32(v, v), _mm256_setzero_si256());
            let (lo, hi) = (
                _mm256_cvtsi256_si32(v) as u32,
                _mm256_extract_epi32::<4>(v) as u32,
            );
            row[..N].copy_from_slice(&(u64::from(hi) << 32 | u64::from(lo)).to_le_bytes()[..N]);
        }
    }

    /// Rows `a` (fewer than 8) padded with zero vectors to 8.
    #[target_feature(enable = "avx2")]
    fn pad<const N: usize>(a: [__m256i; N]) -> [__m256i; 8] {
        std::array::from_fn(|i| if i < N { a[i] } else { _mm256_setzero_si256() })
    }

    /// [`idct8`](super::idct8).
    #[target_feature(enable = "avx2")]
    pub(super) fn idct8(coef: &[i16; 64], q: &[u16; 64], out: &mut [u8], stride: usize) {
        let ws = islow::<{ (CONST_BITS - PASS1_BITS) as i32 }>(dequantize(coef, q));
        let px = islow::<{ (CONST_BITS + PASS1_BITS + 3) as i32 }>(transpose(ws));
        store::<8>(&transpose(px), out, stride);
    }

    /// [`idct4`](super::idct4): the columns' 4 outputs, transposed (lanes past 4 zero), the
    /// rows' 4, transposed back.
    #[target_feature(enable = "avx2")]
    pub(super) fn idct4(coef: &[i16; 64], q: &[u16; 64], out: &mut [u8], stride: usize) {
        let ws = reduced4::<{ (CONST_BITS - PASS1_BITS + 1) as i32 }>(dequantize(coef, q));
        let px = reduced4::<{ (CONST_BITS + PASS1_BITS + 4) as i32 }>(transpose(pad(ws)));
        store::<4>(&transpose(pad(px)), out, stride);
    }

    /// [`idct2`](super::idct2), as [`idct4`].
    #[target_feature(enable = "avx2")]
    pub(super) fn idct2(coef: &[i16; 64], q: &[u16; 64], out: &mut [u8], stride: usize) {
        let ws = reduced2::<{ (CONST_BITS - PASS1_BITS + 2) as i32 }>(dequantize(coef, q));
        let px = reduced2::<{ (CONST_BITS + PASS1_BITS + 5) as i32 }>(transpose(pad(ws)));
        store::<2>(&transpose(pad(px)), out, stride);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inverse DCT in floating point (T.81 A.3.3), for `s × s` outputs averaged over
    /// the 8 / s samples they stand for.
    fn reference(coef: &[i16; 64], s: usize) -> Vec<f64> {
        let c = |k: usize| if k == 0 { 1.0 / 2f64.sqrt() } else { 1.0 };
        let full: Vec<f64> = (0..64)
            .map(|p| {
                let (y, x) = (p / 8, p % 8);
                let mut sum = 0.0;
                for u in 0..8 {
                    for v in 0..8 {
                        let a = ((2 * x + 1) as f64 * v as f64 * std::f64::consts::PI / 16.0).cos();
                        let b = ((2 * y + 1) as f64 * u as f64 * std::f64::consts::PI / 16.0).cos();
                        sum += c(u) * c(v) * f64::from(coef[8 * u + v]) * a * b;
                    }
                }
                sum / 4.0
            })
            .collect();
        let f = 8 / s;
        (0..s * s)
            .map(|p| {
                let (y, x) = (p / s, p % s);
                let mut sum = 0.0;
                for dy in 0..f {
                    for dx in 0..f {
                        sum += full[(y * f + dy) * 8 + x * f + dx];
                    }
                }
                (sum / (f * f) as f64 + 128.0).clamp(0.0, 255.0)
            })
            .collect()
    }

    proptest::proptest! {
        /// Every transform is within a level of the exact one (libjpeg's are accurate to
        /// about that on sane coefficients), with the quantisation table folded in.
        #[test]
        fn close_to_the_exact_transform(
            coefs in proptest::collection::vec(-60i16..60, 64),
            q in 1u16..4,
        ) {
            let mut coef = [0i16; 64];
            coef.copy_from_slice(&coefs);
            let quant = [q; 64];
            let scaled: [i16; 64] = std::array::from_fn(|i| coef[i] * q as i16);
            for s in [8, 4, 2, 1] {
                let mut out = [0u8; 64];
                block(s, &coef, &quant, &mut out, 8);
                let want = reference(&scaled, s);
                for p in 0..s * s {
                    let got = f64::from(out[(p / s) * 8 + p % s]);
                    proptest::prop_assert!((got - want[p]).abs() <= 1.5, "s={} at {}: {} vs {}", s, p, got, want[p]);
                }
            }
        }
    }

    proptest::proptest! {
        /// The AVX2 transforms equal the portable ones, on the coefficients of 8-bit samples
        /// (dequantised within ±2^14).
        #[test]
        fn avx2_equals_portable(
            coefs in proptest::collection::vec(-2048i16..2048, 64),
            qs in proptest::collection::vec(1u16..=8, 64),
            sparse in 0usize..64,
        ) {
            let mut coef = [0i16; 64];
            coef.copy_from_slice(&coefs);
            coef[sparse..].fill(0);
            coef[0] = coefs[0];
            let mut q = [0u16; 64];
            q.copy_from_slice(&qs);
            for s in [8, 4, 2] {
                let (mut a, mut b) = ([0u8; 80], [0u8; 80]);
                block(s, &coef, &q, &mut a, 10);
                block_fn()(s, &coef, &q, &mut b, 10);
                proptest::prop_assert_eq!(a, b, "{}", s);
            }
        }
    }

    #[test]
    fn dc_only_blocks_are_flat() {
        // DC 80 with table value 4: 320 / 8 = 40 above mid-grey, in every sample and size.
        let mut coef = [0i16; 64];
        coef[0] = 80;
        let q = [4u16; 64];
        for s in [8, 4, 2, 1] {
            let mut out = [0u8; 64];
            block(s, &coef, &q, &mut out, 8);
            for y in 0..s {
                assert_eq!(out[y * 8..y * 8 + s], vec![168; s][..], "s={s}");
            }
        }
    }
}
