//! torchvision's `F.affine` and `F.rotate` on uint8 tensors: the inverse matrix in float64 (as
//! `_get_inverse_affine_matrix`), made float32, turned into a sampling grid as `_affine_grid`
//! does, then `grid_sample(mode, padding_mode="zeros", align_corners=False)` on the float32
//! image, rounded back to uint8.
//!
//! The grid is `[x, y, 1] @ theta'` with `theta'` the float32 matrix divided by half the sizes;
//! torch's `bmm` computes each entry with a plain multiply-add below 400 multiplications
//! (`contraction × rows × cols`) and with fused multiply-adds above (its BLAS), which this
//! follows. Nearest neighbour rounds `(g + 1) × size/2 − 0.5` half to even; bilinear sums the
//! four corners with fused multiply-adds, in torch's order.

use super::{fma, with_fma};

/// How `F.affine` samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sampling {
    /// `"nearest"` (TrivialAugment's default).
    #[default]
    Nearest,
    /// `"bilinear"`.
    Bilinear,
}

/// `_get_inverse_affine_matrix(center, angle, translate, scale, shear)`, in float64 as
/// torchvision computes it (angles in degrees; `center` relative to the image centre).
#[must_use]
pub fn inverse_matrix(
    center: [f64; 2],
    angle: f64,
    translate: [f64; 2],
    scale: f64,
    shear: [f64; 2],
) -> [f64; 6] {
    let rot = angle.to_radians();
    let sx = shear[0].to_radians();
    let sy = shear[1].to_radians();
    let [cx, cy] = center;
    let [tx, ty] = translate;
    let cos_sy = sy.cos();
    let tan_sx = sx.tan();
    let rot_minus_sy = rot - sy;
    let cx_plus_tx = cx + tx;
    let cy_plus_ty = cy + ty;
    let a = rot_minus_sy.cos() / cos_sy;
    let b = -(a * tan_sx + rot.sin());
    let c = rot_minus_sy.sin() / cos_sy;
    let d = rot.cos() - c * tan_sx;
    let mut m = [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0];
    m[2] += cx - m[0] * cx_plus_tx - m[1] * cy_plus_ty;
    m[5] += cy - m[3] * cx_plus_tx - m[4] * cy_plus_ty;
    m
}

/// One grid coordinate: `x × r0 + y × r1 + r2` as torch's `bmm` computes it.
#[inline(always)]
fn grid_coord(x: f32, y: f32, r: [f32; 3], fused: bool) -> f32 {
    if fused {
        fma(y, r[1], x * r[0]) + r[2]
    } else {
        (x * r[0] + y * r[1]) + r[2]
    }
}

/// The source position of a grid coordinate (`align_corners=False`): `(g + 1) × size/2 − 0.5`,
/// the multiply and the subtraction fused as torch's compiled kernel does.
#[inline(always)]
fn unnormalize(g: f32, size: usize) -> f32 {
    fma(g + 1.0, size as f32 / 2.0, -0.5)
}

/// `F.affine` of a uint8 HWC image by the inverse `matrix`, output the input's size; pixels
/// from outside the image are `fill` (per channel; zeros when none).
pub fn affine_u8(
    src: &[u8],
    (h, w, c): (usize, usize, usize),
    matrix: [f64; 6],
    sampling: Sampling,
    fill: Option<&[f32]>,
) -> Vec<u8> {
    let theta: Vec<f32> = matrix.iter().map(|&v| v as f32).collect();
    let (hw, hh) = ((0.5 * w as f64) as f32, (0.5 * h as f64) as f32);
    let rx = [theta[0] / hw, theta[1] / hw, theta[2] / hw];
    let ry = [theta[3] / hh, theta[4] / hh, theta[5] / hh];
    let fused = 3 * (h * w) * 2 >= 400;
    let fill: Vec<f32> = match fill {
        None => vec![0.0; c],
        Some(f) if f.len() == 1 => vec![f[0]; c],
        Some(f) => f.to_vec(),
    };
    let has_fill = fill.iter().any(|&f| f != 0.0);
    with_fma(|| sample(src, (h, w, c), (rx, ry, fused), sampling, &fill, has_fill))
}

/// The sampling loop of [`affine_u8`].
#[inline(always)]
fn sample(
    src: &[u8],
    (h, w, c): (usize, usize, usize),
    (rx, ry, fused): ([f32; 3], [f32; 3], bool),
    sampling: Sampling,
    fill: &[f32],
    has_fill: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(h * w * c);
    let mut px = vec![0f32; c];
    for oy in 0..h {
        let y = (1.0 - h as f32) * 0.5 + oy as f32;
        for ox in 0..w {
            let x = (1.0 - w as f32) * 0.5 + ox as f32;
            let sx = unnormalize(grid_coord(x, y, rx, fused), w);
            let sy = unnormalize(grid_coord(x, y, ry, fused), h);
            match sampling {
                Sampling::Nearest => {
                    let (ix, iy) = (sx.round_ties_even(), sy.round_ties_even());
                    let inside = ix > -1.0 && ix < w as f32 && iy > -1.0 && iy < h as f32;
                    if inside {
                        let at = (iy as usize * w + ix as usize) * c;
                        out.extend_from_slice(&src[at..at + c]);
                    } else {
                        out.extend(fill.iter().map(|&f| torch_u8(f.round_ties_even())));
                    }
                }
                Sampling::Bilinear => {
                    bilinear(src, (h, w, c), sx, sy, &mut px, has_fill.then_some(fill));
                    out.extend(px.iter().map(|&v| torch_u8(v.round_ties_even())));
                }
            }
        }
    }
    out
}

/// torch's float to uint8: truncated, then the low byte.
#[inline]
fn torch_u8(v: f32) -> u8 {
    (v as i64).rem_euclid(256) as u8
}

/// torch's bilinear `grid_sample` at `(x, y)` (zeros outside), then torchvision's fill blend
/// with the sampled mask when a fill is given.
#[inline(always)]
fn bilinear(
    src: &[u8],
    (h, w, c): (usize, usize, usize),
    x: f32,
    y: f32,
    out: &mut [f32],
    fill: Option<&[f32]>,
) {
    let (xw, yn) = (x.floor(), y.floor());
    let (wd, nd) = (x - xw, y - yn);
    let (e, s) = (1.0 - wd, 1.0 - nd);
    let weights = [s * e, s * wd, nd * e, nd * wd];
    let (ix, iy) = (xw as i64, yn as i64);
    let corners = [(ix, iy), (ix + 1, iy), (ix, iy + 1), (ix + 1, iy + 1)];
    let inside = |(cx, cy): (i64, i64)| cx >= 0 && cx < w as i64 && cy >= 0 && cy < h as i64;
    let mut mask = 0f32;
    for (ch, o) in out.iter_mut().enumerate() {
        let mut acc = 0f32;
        for (k, &(cx, cy)) in corners.iter().enumerate() {
            let v = if inside((cx, cy)) {
                f32::from(src[(cy as usize * w + cx as usize) * c + ch])
            } else {
                0.0
            };
            acc = if k == 0 {
                v * weights[0]
            } else {
                fma(v, weights[k], acc)
            };
        }
        *o = acc;
    }
    if let Some(fill) = fill {
        for (k, &p) in corners.iter().enumerate() {
            let v = if inside(p) { 1.0f32 } else { 0.0 };
            mask = if k == 0 {
                v * weights[0]
            } else {
                fma(v, weights[k], mask)
            };
        }
        for (o, &f) in out.iter_mut().zip(fill) {
            *o = (*o - f) * mask + f;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_keeps_the_image() {
        let src: Vec<u8> = (0..7 * 9 * 3).map(|x| x as u8).collect();
        let m = inverse_matrix([0.0, 0.0], 0.0, [0.0, 0.0], 1.0, [0.0, 0.0]);
        assert_eq!(m, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
        for sampling in [Sampling::Nearest, Sampling::Bilinear] {
            assert_eq!(affine_u8(&src, (7, 9, 3), m, sampling, None), src);
        }
    }

    #[test]
    fn a_translation_shifts_and_fills() {
        let src: Vec<u8> = (1..=12).collect();
        let m = inverse_matrix([0.0, 0.0], 0.0, [1.0, 0.0], 1.0, [0.0, 0.0]);
        let out = affine_u8(&src, (3, 4, 1), m, Sampling::Nearest, Some(&[9.0]));
        assert_eq!(out, [9, 1, 2, 3, 9, 5, 6, 7, 9, 9, 10, 11]);
    }
}
