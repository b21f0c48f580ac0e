//! `TrivialAugmentWide`: one operation of fourteen, at one of its magnitudes.

use super::unkeyed;
use crate::geometry::Rotate90;
use crate::image::{Image, Item, Layout, Pixels, u8_hwc};
use crate::tv::affine::{Sampling, affine_u8, inverse_matrix};
use crate::tv::{color as k, enhance as e};
use crate::{Error, Key, Params, RandomParams, Transform, Value};

/// The operations of `TrivialAugmentWide`, in torchvision's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// The image as it is.
    Identity,
    /// `F.affine` with a horizontal shear of `atan(m)`, about the top-left corner.
    ShearX,
    /// `F.affine` with a vertical shear of `atan(m)`, about the top-left corner.
    ShearY,
    /// `F.affine` translating `int(m)` pixels right.
    TranslateX,
    /// `F.affine` translating `int(m)` pixels down.
    TranslateY,
    /// `F.rotate` by `m` degrees.
    Rotate,
    /// `F.adjust_brightness(1 + m)`.
    Brightness,
    /// `F.adjust_saturation(1 + m)`.
    Color,
    /// `F.adjust_contrast(1 + m)`.
    Contrast,
    /// `F.adjust_sharpness(1 + m)`.
    Sharpness,
    /// `F.posterize(int(m))`.
    Posterize,
    /// `F.solarize(255 m)`.
    Solarize,
    /// `F.autocontrast`.
    AutoContrast,
    /// `F.equalize`.
    Equalize,
}

const OPS: [Op; 14] = [
    Op::Identity,
    Op::ShearX,
    Op::ShearY,
    Op::TranslateX,
    Op::TranslateY,
    Op::Rotate,
    Op::Brightness,
    Op::Color,
    Op::Contrast,
    Op::Sharpness,
    Op::Posterize,
    Op::Solarize,
    Op::AutoContrast,
    Op::Equalize,
];

impl Op {
    /// torchvision's name of the operation.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Op::Identity => "Identity",
            Op::ShearX => "ShearX",
            Op::ShearY => "ShearY",
            Op::TranslateX => "TranslateX",
            Op::TranslateY => "TranslateY",
            Op::Rotate => "Rotate",
            Op::Brightness => "Brightness",
            Op::Color => "Color",
            Op::Contrast => "Contrast",
            Op::Sharpness => "Sharpness",
            Op::Posterize => "Posterize",
            Op::Solarize => "Solarize",
            Op::AutoContrast => "AutoContrast",
            Op::Equalize => "Equalize",
        }
    }

    /// The range of `torch.linspace` the magnitudes come from, and whether the sign is drawn;
    /// `None` for the operations without a magnitude (and Posterize, which has its own bins).
    fn linspace(self) -> Option<(f32, f32, bool)> {
        match self {
            Op::ShearX | Op::ShearY | Op::Brightness | Op::Color | Op::Contrast | Op::Sharpness => {
                Some((0.0, 0.99, true))
            }
            Op::TranslateX | Op::TranslateY => Some((0.0, 32.0, true)),
            Op::Rotate => Some((0.0, 135.0, true)),
            Op::Solarize => Some((1.0, 0.0, false)),
            _ => None,
        }
    }
}

/// Bin `i` of `torch.linspace(start, end, steps)` in float32: from the start for the first
/// half, from the end for the second, with the fused multiply-adds of torch's CPU kernel.
fn linspace(start: f32, end: f32, steps: usize, i: usize) -> f32 {
    if steps == 1 {
        return start;
    }
    let step = (end - start) / (steps - 1) as f32;
    if i < steps / 2 {
        crate::tv::fma(step, i as f32, start)
    } else {
        crate::tv::fma(-step, (steps - i - 1) as f32, end)
    }
}

/// torchvision's `TrivialAugmentWide(num_magnitude_bins=31, interpolation="nearest",
/// fill=None)`: an operation drawn uniformly from fourteen, a magnitude bin drawn uniformly, its
/// sign drawn for the signed ones, then torchvision's kernel on a uint8 image of 1 or 3
/// channels.
#[derive(Debug, Clone)]
pub struct TrivialAugmentWide {
    bins: usize,
    sampling: Sampling,
    fill: Option<Vec<f32>>,
}

impl TrivialAugmentWide {
    /// The transform with `bins` magnitude bins.
    ///
    /// # Errors
    /// Fewer than 2 bins (torchvision divides by `bins − 1`).
    pub fn new(
        bins: usize,
        sampling: Sampling,
        fill: Option<Vec<f32>>,
    ) -> Result<TrivialAugmentWide, Error> {
        if bins < 2 {
            return Err(Error::arg(
                "TrivialAugmentWide",
                format!("num_magnitude_bins must be at least 2, got {bins}"),
            ));
        }
        Ok(TrivialAugmentWide {
            bins,
            sampling,
            fill,
        })
    }

    /// The operation and its magnitude for `key`.
    #[must_use]
    pub fn draw(&self, key: Key) -> (Op, f64) {
        let mut rng = key.rng();
        let op = OPS[rng.below(OPS.len() as u64) as usize];
        let magnitude = match (op, op.linspace()) {
            (_, Some((start, end, signed))) => {
                let bin = rng.below(self.bins as u64) as usize;
                let m = f64::from(linspace(start, end, self.bins, bin));
                // torchvision: `torch.rand(()) <= 0.5` negates.
                if signed && rng.uniform() <= 0.5 {
                    -m
                } else {
                    m
                }
            }
            (Op::Posterize, None) => {
                let bin = rng.below(self.bins as u64) as usize;
                let x = bin as f32 / ((self.bins - 1) as f64 / 6.0) as f32;
                f64::from((8.0 - x).round_ties_even())
            }
            _ => 0.0,
        };
        (op, magnitude)
    }

    /// Applies `op` at `magnitude` to a uint8 HWC image of 1 or 3 channels.
    fn run(&self, op: Op, m: f64, (h, w, c): (usize, usize, usize), mut v: Vec<u8>) -> Vec<u8> {
        let dims = (h, w, c);
        let affine =
            |v: &[u8], matrix| affine_u8(v, dims, matrix, self.sampling, self.fill.as_deref());
        match op {
            Op::Identity => v,
            Op::ShearX | Op::ShearY => {
                let shear = m.atan().to_degrees();
                let shear = if op == Op::ShearX {
                    [shear, 0.0]
                } else {
                    [0.0, shear]
                };
                // About the top-left corner: the centre argument is [0, 0] in pixels.
                let center = [-(w as f64) * 0.5, -(h as f64) * 0.5];
                affine(&v, inverse_matrix(center, 0.0, [0.0, 0.0], 1.0, shear))
            }
            Op::TranslateX | Op::TranslateY => {
                let t = m.trunc();
                let translate = if op == Op::TranslateX {
                    [t, 0.0]
                } else {
                    [0.0, t]
                };
                affine(
                    &v,
                    inverse_matrix([0.0, 0.0], 0.0, translate, 1.0, [0.0, 0.0]),
                )
            }
            Op::Rotate => {
                let angle = m.rem_euclid(360.0);
                // F.rotate's exact quarter turns.
                let quarter = match angle {
                    0.0 => Some(0),
                    180.0 => Some(2),
                    a if a == 90.0 && h == w => Some(1),
                    a if a == 270.0 && h == w => Some(3),
                    _ => None,
                };
                match quarter {
                    Some(k) => {
                        let im = Image::from_parts(h, w, c, Layout::Hwc, Pixels::U8(v));
                        match Rotate90::new(k).rotate(im).into_pixels() {
                            Pixels::U8(v) => v,
                            Pixels::F32(_) => unreachable!("uint8 stays uint8"),
                        }
                    }
                    None => affine(
                        &v,
                        inverse_matrix([0.0, 0.0], -angle, [0.0, 0.0], 1.0, [0.0, 0.0]),
                    ),
                }
            }
            Op::Brightness => {
                k::brightness(&mut v, 1.0 + m);
                v
            }
            Op::Color => {
                k::saturation(&mut v, c, 1.0 + m);
                v
            }
            Op::Contrast => {
                k::contrast(&mut v, c, 1.0 + m);
                v
            }
            Op::Sharpness => {
                e::sharpness(&mut v, dims, 1.0 + m);
                v
            }
            Op::Posterize => {
                e::posterize(&mut v, m as u32);
                v
            }
            Op::Solarize => {
                e::solarize(&mut v, 255.0 * m);
                v
            }
            Op::AutoContrast => {
                e::autocontrast(&mut v, c);
                v
            }
            Op::Equalize => {
                e::equalize(&mut v, c);
                v
            }
        }
    }

    /// `op` at `magnitude` on `item` (what a draw of them does).
    ///
    /// # Errors
    /// An item that is not a uint8 HWC image of 1 or 3 channels, or a fill of another length.
    pub fn apply_op(&self, op: Op, magnitude: f64, item: Item) -> Result<Item, Error> {
        let (h, w, c, v) = u8_hwc("TrivialAugmentWide", item)?;
        if c != 1 && c != 3 {
            return Err(Error::WrongInput {
                transform: "TrivialAugmentWide",
                expected: "an image of 1 or 3 channels (apply ToRgb first)",
                got: format!("{c} channels"),
            });
        }
        if let Some(f) = &self.fill
            && f.len() != 1
            && f.len() != c
        {
            return Err(Error::arg(
                "TrivialAugmentWide",
                format!("fill has {} values for an image of {c} channels", f.len()),
            ));
        }
        let v = self.run(op, magnitude, (h, w, c), v);
        Ok(Item::Image(Image::from_parts(
            h,
            w,
            c,
            Layout::Hwc,
            Pixels::U8(v),
        )))
    }
}

impl Transform for TrivialAugmentWide {
    fn apply(&self, index: u64, item: Item) -> Result<Item, Error> {
        self.apply_keyed(unkeyed(index), item)
    }

    fn apply_keyed(&self, key: Key, item: Item) -> Result<Item, Error> {
        let (op, m) = self.draw(key);
        self.apply_op(op, m, item)
    }
}

impl RandomParams for TrivialAugmentWide {
    fn params(&self, key: Key, _height: usize, _width: usize) -> Result<Params, Error> {
        let (op, m) = self.draw(key);
        Ok(Params(vec![
            ("op", Value::Str(op.name())),
            ("magnitude", Value::Float(m)),
        ]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linspace_ends_exactly() {
        assert_eq!(linspace(0.0, 135.0, 31, 0), 0.0);
        assert_eq!(linspace(0.0, 135.0, 31, 30), 135.0);
        assert_eq!(linspace(0.0, 135.0, 31, 20), 90.0);
        assert_eq!(linspace(1.0, 0.0, 31, 30), 0.0);
    }

    #[test]
    fn every_op_is_drawn_with_its_magnitudes() {
        let t = TrivialAugmentWide::new(31, Sampling::Nearest, None).unwrap();
        let mut seen = std::collections::HashMap::new();
        for i in 0..14_000 {
            let (op, m) = t.draw(Key::new(1, 0, i));
            seen.entry(op.name()).or_insert_with(Vec::new).push(m);
        }
        assert_eq!(seen.len(), 14);
        for (name, ms) in &seen {
            assert!(ms.len() > 850, "{name} {}", ms.len());
            match *name {
                "Identity" | "AutoContrast" | "Equalize" => assert!(ms.iter().all(|&m| m == 0.0)),
                "Posterize" => assert!(ms.iter().all(|&m| (2.0..=8.0).contains(&m))),
                "Solarize" => assert!(ms.iter().all(|&m| (0.0..=1.0).contains(&m))),
                "Rotate" => {
                    assert!(ms.iter().any(|&m| m < 0.0) && ms.iter().all(|&m| m.abs() <= 135.0));
                }
                _ => assert!(ms.iter().any(|&m| m < 0.0)),
            }
        }
    }

    #[test]
    fn refuses_rgba_and_bad_fills() {
        let t = TrivialAugmentWide::new(31, Sampling::Nearest, Some(vec![1.0, 2.0])).unwrap();
        let im = Image::new(3, 3, 3, Layout::Hwc, Pixels::U8(vec![0; 27])).unwrap();
        let e = t.apply_op(Op::Identity, 0.0, Item::Image(im)).unwrap_err();
        assert!(e.to_string().contains("fill has 2 values"), "{e}");
        assert!(TrivialAugmentWide::new(1, Sampling::Nearest, None).is_err());
    }
}
