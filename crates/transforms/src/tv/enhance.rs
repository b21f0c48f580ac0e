//! The other colour kernels of `TrivialAugmentWide`, on uint8 HWC images of `c` channels as
//! torchvision computes them on uint8 tensors: `F.adjust_sharpness`, `F.posterize`,
//! `F.solarize`, `F.autocontrast`, `F.equalize`.

/// `F.adjust_sharpness`: each inner pixel blended with the 3×3 blur `[1 1 1; 1 5 1; 1 1 1] / 13`
/// rounded; the border rows and columns kept. The blur's exact value `k / 13` is never within
/// float32 rounding of a half, so its rounding is computed in integers; the blend is torch's
/// fused multiply-add.
pub fn sharpness(v: &mut [u8], (h, w, c): (usize, usize, usize), factor: f64) {
    if h <= 2 || w <= 2 {
        return;
    }
    super::with_fma(|| sharpen(v, (h, w, c), (1.0 - factor) as f32));
}

#[inline(always)]
fn sharpen(v: &mut [u8], (h, w, c): (usize, usize, usize), alpha: f32) {
    let src = v.to_vec();
    let at = |y: usize, x: usize, ch: usize| u32::from(src[(y * w + x) * c + ch]);
    for y in 1..h - 1 {
        for x in 1..w - 1 {
            for ch in 0..c {
                let mut ring = 0;
                for (dy, dx) in [
                    (0, 0),
                    (0, 1),
                    (0, 2),
                    (1, 0),
                    (1, 2),
                    (2, 0),
                    (2, 1),
                    (2, 2),
                ] {
                    ring += at(y + dy - 1, x + dx - 1, ch);
                }
                let centre = at(y, x, ch);
                // round((ring + 5 centre) / 13): never a tie (13 is odd).
                let blur = ((2 * (ring + 5 * centre) + 13) / 26) as f32;
                let view = centre as f32;
                let out = super::fma(blur - view, alpha, view);
                v[(y * w + x) * c + ch] = out.clamp(0.0, 255.0) as u8;
            }
        }
    }
}

/// `F.posterize(bits)`: the `bits` high bits kept.
pub fn posterize(v: &mut [u8], bits: u32) {
    if bits >= 8 {
        return;
    }
    let mask = !(0xffu8 >> bits);
    for x in v {
        *x &= mask;
    }
}

/// `F.solarize(threshold)`: values at or above the threshold inverted (the comparison in
/// float32, as torch promotes a uint8 tensor against a float).
pub fn solarize(v: &mut [u8], threshold: f64) {
    let t = threshold as f32;
    for x in v {
        if f32::from(*x) >= t {
            *x = 255 - *x;
        }
    }
}

/// `F.autocontrast`: each channel stretched to 0–255 (`(x − min) / ((max − min) × (1/255))` in
/// float32, truncated); a constant channel kept.
pub fn autocontrast(v: &mut [u8], c: usize) {
    for ch in 0..c {
        let values = v.iter().skip(ch).step_by(c);
        let (lo, hi) = values.fold((255u8, 0u8), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        let (min, inv_scale) = if lo == hi {
            (0.0f32, 1.0f32)
        } else {
            (f32::from(lo), f32::from(hi - lo) * (1.0f64 / 255.0) as f32)
        };
        for x in v.iter_mut().skip(ch).step_by(c) {
            *x = ((f32::from(*x) - min) / inv_scale).clamp(0.0, 255.0) as u8;
        }
    }
}

/// `F.equalize`: Pillow's histogram equalization per channel (in integers); a channel whose
/// values but the most frequent are fewer than 255 kept.
pub fn equalize(v: &mut [u8], c: usize) {
    let n = (v.len() / c) as u64;
    for ch in 0..c {
        let mut hist = [0u64; 256];
        for &x in v.iter().skip(ch).step_by(c) {
            hist[usize::from(x)] += 1;
        }
        // The last non-empty bin: where the cumulative histogram first reaches its total.
        let last = hist.iter().rposition(|&k| k > 0).unwrap_or(0);
        let step = (n - hist[last]) / 255;
        if step == 0 {
            continue;
        }
        let mut lut = [0u8; 256];
        let mut cum = 0u64;
        for k in 1..256 {
            cum += hist[k - 1];
            lut[k] = ((cum + step / 2) / step).min(255) as u8;
        }
        for x in v.iter_mut().skip(ch).step_by(c) {
            *x = lut[usize::from(*x)];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posterize_and_solarize() {
        let mut v = vec![0, 127, 128, 255];
        posterize(&mut v, 1);
        assert_eq!(v, [0, 0, 128, 128]);
        let mut v = vec![0, 127, 128, 255];
        solarize(&mut v, 128.0);
        assert_eq!(v, [0, 127, 127, 0]);
    }

    #[test]
    fn autocontrast_stretches_and_keeps_constants() {
        let mut v = vec![10, 7, 20, 7, 30, 7];
        autocontrast(&mut v, 2);
        // 20 / (20 × float32(1/255)) is just below 255: truncated, as torch does.
        assert_eq!(v, [0, 7, 127, 7, 254, 7]);
    }

    #[test]
    fn sharpness_one_is_identity_and_keeps_borders() {
        let orig: Vec<u8> = (0..5 * 6).map(|x| (x * 37 % 251) as u8).collect();
        let mut v = orig.clone();
        sharpness(&mut v, (5, 6, 1), 1.0);
        assert_eq!(v, orig);
        sharpness(&mut v, (5, 6, 1), 0.0);
        assert_eq!(&v[..6], &orig[..6]);
        assert_ne!(v, orig);
    }

    #[test]
    fn equalize_flattens_a_ramp() {
        let mut v: Vec<u8> = (0..=255).collect();
        equalize(&mut v, 1);
        // A uniform histogram maps to itself.
        assert_eq!(v, (0..=255).collect::<Vec<u8>>());
        let mut few = vec![3, 3, 4];
        equalize(&mut few, 1);
        assert_eq!(few, [3, 3, 4]);
    }
}
