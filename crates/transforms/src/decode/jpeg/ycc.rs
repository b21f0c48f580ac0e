//! YCbCr to RGB in libjpeg's fixed-point arithmetic (16 fractional bits, each product rounded
//! to the nearest integer before the add, as its lookup tables hold them).

/// 1.402, 1.772, 0.71414 and 0.34414 times 2^16, rounded.
const CR_R: i32 = 91_881;
const CB_B: i32 = 116_130;
const CR_G: i32 = 46_802;
const CB_G: i32 = 22_554;
const HALF: i32 = 1 << 15;

/// One pixel: `[R, G, B]` from `Y`, `Cb`, `Cr`.
#[inline(always)]
pub(super) fn pixel(y: u8, cb: u8, cr: u8) -> [u8; 3] {
    let (y, cb, cr) = (i32::from(y), i32::from(cb) - 128, i32::from(cr) - 128);
    // `>>` on i32 rounds towards minus infinity, as libjpeg's RIGHT_SHIFT.
    let r = y + ((CR_R * cr + HALF) >> 16);
    let g = y + ((HALF - CB_G * cb - CR_G * cr) >> 16);
    let b = y + ((CB_B * cb + HALF) >> 16);
    [
        r.clamp(0, 255) as u8,
        g.clamp(0, 255) as u8,
        b.clamp(0, 255) as u8,
    ]
}

/// A row of interleaved RGB (`3 * y.len()` bytes) from its three components; `planes` is
/// scratch space of `3 * y.len()` bytes.
#[inline(always)]
pub(super) fn row_to_rgb(y: &[u8], cb: &[u8], cr: &[u8], planes: &mut [u8], out: &mut [u8]) {
    let n = y.len();
    let (r, gb) = planes[..3 * n].split_at_mut(n);
    let (g, b) = gb.split_at_mut(n);
    // Planar first (this loop vectorizes), then interleaved.
    for (((((r, g), b), &y), &cb), &cr) in r
        .iter_mut()
        .zip(g.iter_mut())
        .zip(b.iter_mut())
        .zip(y)
        .zip(cb)
        .zip(cr)
    {
        [*r, *g, *b] = pixel(y, cb, cr);
    }
    interleave(r, g, b, out);
}

/// `out[3i..3i + 3] = [a[i], b[i], c[i]]`.
#[inline(always)]
pub(super) fn interleave(a: &[u8], b: &[u8], c: &[u8], out: &mut [u8]) {
    for (((o, &a), &b), &c) in out.chunks_exact_mut(3).zip(a).zip(b).zip(c) {
        o[0] = a;
        o[1] = b;
        o[2] = c;
    }
}

#[cfg(test)]
mod tests {
    use super::pixel;

    #[test]
    fn by_hand() {
        // Neutral chroma keeps the grey level.
        assert_eq!(pixel(77, 128, 128), [77, 77, 77]);
        // Cr = 255: R = 100 + round(1.402 * 127) = 100 + 178; G = 100 + floor(0.5 - 0.71414 * 127).
        assert_eq!(pixel(100, 128, 255), [255, 9, 100]);
        // Cb = 0: B = 200 + round(-1.772 * 128) = 200 - 227 -> 0; G = 200 + floor(0.5 + 44.05).
        assert_eq!(pixel(200, 0, 128), [200, 244, 0]);
    }
}
