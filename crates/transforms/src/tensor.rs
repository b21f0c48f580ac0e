//! ToFloat, Normalize, ToChw, ToHwc, and the fused one-pass kernel that Compose uses for them.

use crate::dtype::Dtype;
use crate::image::{Image, Item, Layout, Pixels, check_size};
use crate::transform::Pointwise;
use crate::{Error, Transform};

/// `ToFloat(scale=True)`: uint8 to float32, `v as f32 / 255.0` (ToTensor's values) when `scale`.
#[derive(Debug, Clone, Copy)]
pub struct ToFloat {
    scale: bool,
}

impl Default for ToFloat {
    fn default() -> Self {
        ToFloat { scale: true }
    }
}

impl ToFloat {
    /// uint8 to float32, divided by 255 when `scale`.
    pub fn new(scale: bool) -> ToFloat {
        ToFloat { scale }
    }
}

/// `Normalize(mean, std)`: `(x - mean) / std` per channel in float32, as torchvision computes it
/// (mean and std cast to float32, then a subtraction and a division).
#[derive(Debug, Clone)]
pub struct Normalize {
    mean: Vec<f32>,
    std: Vec<f32>,
}

impl Normalize {
    /// `mean` and `std` have one value per channel (or one for all), the same number each;
    /// no `std` may be 0 once cast to float32.
    pub fn new(mean: &[f64], std: &[f64]) -> Result<Normalize, Error> {
        if mean.is_empty() || mean.len() != std.len() {
            return Err(Error::arg(
                "Normalize",
                format!(
                    "mean and std need the same, non-zero number of values, got {} and {}",
                    mean.len(),
                    std.len()
                ),
            ));
        }
        let mean: Vec<f32> = mean.iter().map(|&m| m as f32).collect();
        let std: Vec<f32> = std.iter().map(|&s| s as f32).collect();
        if std.contains(&0.0) {
            return Err(Error::arg(
                "Normalize",
                format!("std {std:?} has a zero (after conversion to float32), a division by zero"),
            ));
        }
        Ok(Normalize { mean, std })
    }
}

/// Channels first: HWC to CHW (ToTensor's layout); a CHW image is left as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToChw;

/// Channels last: CHW to HWC; an HWC image is left as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToHwc;

/// One pass that does ToFloat, then Normalize, then the layout change, each optional; the
/// values are bit for bit those of the steps run one after the other.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FloatPlan {
    pub to_float: Option<bool>,
    pub normalize: Option<(Vec<f32>, Vec<f32>)>,
    pub layout: Option<Layout>,
}

impl FloatPlan {
    /// Adds a step if the plan can still take it (order: ToFloat, Normalize, ToChw).
    pub(crate) fn push(&mut self, step: &Pointwise) -> bool {
        match step {
            Pointwise::ToFloat { scale } if *self == FloatPlan::default() => {
                self.to_float = Some(*scale)
            }
            Pointwise::Normalize { mean, std }
                if self.normalize.is_none() && self.layout.is_none() =>
            {
                self.normalize = Some((mean.clone(), std.clone()))
            }
            Pointwise::ToChw if self.layout.is_none() => self.layout = Some(Layout::Chw),
            _ => return false,
        }
        true
    }

    pub(crate) fn run(&self, item: Item) -> Result<Image, Error> {
        let name = if self.to_float.is_some() {
            "ToFloat"
        } else if self.normalize.is_some() {
            "Normalize"
        } else {
            "ToChw"
        };
        let im = item.into_image(name)?;
        if self.to_float.is_some() && im.dtype() != Dtype::U8 {
            return Err(Error::WrongInput {
                transform: "ToFloat",
                expected: "a uint8 image",
                got: im.describe(),
            });
        }
        if self.to_float.is_none() && self.normalize.is_some() && im.dtype() != Dtype::F32 {
            return Err(Error::WrongInput {
                transform: "Normalize",
                expected: "a float32 image (apply ToFloat first)",
                got: im.describe(),
            });
        }
        let (h, w, c, from) = (im.height(), im.width(), im.channels(), im.layout());
        let to = self.layout.unwrap_or(from);
        let norm = match &self.normalize {
            None => None,
            Some((mean, std)) => Some(per_channel(mean, std, c)?),
        };
        if self.to_float.is_none() && norm.is_none() {
            return Ok(im.into_layout(to));
        }
        // uint8 to float32 is four times the bytes: checked before the output is allocated.
        check_size(h, w, c, Dtype::F32)?;
        let hw = h * w;
        let out = match im.into_pixels() {
            Pixels::U8(v) => {
                let scale = self.to_float.unwrap_or(true);
                // 256 possible inputs per channel: a table per channel gives the exact values of
                // the step-by-step computation for the price of a lookup.
                let tables: Vec<[f32; 256]> = (0..c)
                    .map(|ch| {
                        let mut t = [0f32; 256];
                        for (x, slot) in t.iter_mut().enumerate() {
                            let f = if scale { x as f32 / 255.0 } else { x as f32 };
                            *slot = match &norm {
                                Some((m, s)) => (f - m[ch]) / s[ch],
                                None => f,
                            };
                        }
                        t
                    })
                    .collect();
                let mut out = vec![0f32; v.len()];
                remap_channels(&v, &mut out, from, to, hw, c, |ch, x| {
                    tables[ch][usize::from(x)]
                });
                out
            }
            Pixels::F32(mut v) => {
                let (m, s) = norm.expect("a float plan without ToFloat normalises");
                if from == to {
                    normalize_in_place(&mut v, from, hw, c, &m, &s);
                    v
                } else {
                    let mut out = vec![0f32; v.len()];
                    remap_channels(&v, &mut out, from, to, hw, c, |ch, x| (x - m[ch]) / s[ch]);
                    out
                }
            }
        };
        Ok(Image::from_parts(h, w, c, to, Pixels::F32(out)))
    }
}

/// Mean and std with one value per channel (a single value is broadcast).
fn per_channel(mean: &[f32], std: &[f32], c: usize) -> Result<(Vec<f32>, Vec<f32>), Error> {
    match mean.len() {
        1 => Ok((vec![mean[0]; c], vec![std[0]; c])),
        n if n == c => Ok((mean.to_vec(), std.to_vec())),
        n => Err(Error::arg(
            "Normalize",
            format!("mean and std have {n} values for an image of {c} channels"),
        )),
    }
}

fn normalize_in_place(v: &mut [f32], layout: Layout, hw: usize, c: usize, m: &[f32], s: &[f32]) {
    match layout {
        Layout::Hwc => {
            for px in v.chunks_exact_mut(c) {
                for (ch, x) in px.iter_mut().enumerate() {
                    *x = (*x - m[ch]) / s[ch];
                }
            }
        }
        Layout::Chw => {
            for (ch, plane) in v.chunks_exact_mut(hw).enumerate() {
                let (m, s) = (m[ch], s[ch]);
                for x in plane {
                    *x = (*x - m) / s;
                }
            }
        }
    }
}

/// `dst[channel, pixel] = f(channel, src[channel, pixel])`, reading `src` in layout `from` and
/// writing `dst` in layout `to`.
fn remap_channels<S: Copy>(
    src: &[S],
    dst: &mut [f32],
    from: Layout,
    to: Layout,
    hw: usize,
    c: usize,
    f: impl Fn(usize, S) -> f32,
) {
    match (from, to) {
        (Layout::Hwc, Layout::Hwc) => {
            for (d, s) in dst.chunks_exact_mut(c).zip(src.chunks_exact(c)) {
                for ch in 0..c {
                    d[ch] = f(ch, s[ch]);
                }
            }
        }
        (Layout::Chw, Layout::Chw) => {
            for (ch, (d, s)) in dst
                .chunks_exact_mut(hw)
                .zip(src.chunks_exact(hw))
                .enumerate()
            {
                for (d, &s) in d.iter_mut().zip(s) {
                    *d = f(ch, s);
                }
            }
        }
        (Layout::Hwc, Layout::Chw) if c == 3 => {
            let (r, gb) = dst.split_at_mut(hw);
            let (g, b) = gb.split_at_mut(hw);
            for (((s, r), g), b) in src.chunks_exact(3).zip(r).zip(g).zip(b) {
                *r = f(0, s[0]);
                *g = f(1, s[1]);
                *b = f(2, s[2]);
            }
        }
        (Layout::Hwc, Layout::Chw) => {
            for (ch, d) in dst.chunks_exact_mut(hw).enumerate() {
                for (d, &s) in d.iter_mut().zip(src[ch..].iter().step_by(c)) {
                    *d = f(ch, s);
                }
            }
        }
        (Layout::Chw, Layout::Hwc) => {
            for (ch, s) in src.chunks_exact(hw).enumerate() {
                for (d, &s) in dst[ch..].iter_mut().step_by(c).zip(s) {
                    *d = f(ch, s);
                }
            }
        }
    }
}

impl Transform for ToFloat {
    fn apply(&self, _index: u64, item: Item) -> Result<Item, Error> {
        let plan = FloatPlan {
            to_float: Some(self.scale),
            ..FloatPlan::default()
        };
        plan.run(item).map(Item::Image)
    }

    fn pointwise(&self) -> Option<Pointwise> {
        Some(Pointwise::ToFloat { scale: self.scale })
    }
}

impl Transform for Normalize {
    fn apply(&self, _index: u64, item: Item) -> Result<Item, Error> {
        let plan = FloatPlan {
            normalize: Some((self.mean.clone(), self.std.clone())),
            ..FloatPlan::default()
        };
        plan.run(item).map(Item::Image)
    }

    fn pointwise(&self) -> Option<Pointwise> {
        Some(Pointwise::Normalize {
            mean: self.mean.clone(),
            std: self.std.clone(),
        })
    }
}

impl Transform for ToChw {
    fn apply(&self, _index: u64, item: Item) -> Result<Item, Error> {
        Ok(Item::Image(
            item.into_image("ToChw")?.into_layout(Layout::Chw),
        ))
    }

    fn pointwise(&self) -> Option<Pointwise> {
        Some(Pointwise::ToChw)
    }
}

impl Transform for ToHwc {
    fn apply(&self, _index: u64, item: Item) -> Result<Item, Error> {
        Ok(Item::Image(
            item.into_image("ToHwc")?.into_layout(Layout::Hwc),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(item: Item) -> (Layout, Vec<f32>) {
        let Item::Image(im) = item else {
            panic!("not an image")
        };
        let layout = im.layout();
        let Pixels::F32(v) = im.into_pixels() else {
            panic!("not float32")
        };
        (layout, v)
    }

    fn rgb(v: Vec<u8>) -> Item {
        let n = v.len() / 3;
        Item::Image(Image::new(1, n, 3, Layout::Hwc, Pixels::U8(v)).unwrap())
    }

    /// Every transform that makes a larger image refuses an output above `MAX_BYTES` before
    /// allocating it. The 64 MiB input is zeroed memory never touched (the OS maps it lazily).
    #[test]
    fn transforms_that_grow_an_image_check_the_limit() {
        use crate::{
            Anchor, Compose, Fill, Interpolation, Pad, PadTo, Padding, PaddingMode, Resize,
            ResizeSize, ToRgba,
        };
        use std::sync::Arc;
        // 8192 x 8193 grey: 64 MiB, as float32 (or RGBA) just above 256 MiB.
        let (h, w) = (8192, 8193);
        let grey =
            || Item::Image(Image::new(h, w, 1, Layout::Hwc, Pixels::U8(vec![0; h * w])).unwrap());
        let fused = Compose::new(vec![
            Arc::new(ToFloat::default()),
            Arc::new(Normalize::new(&[0.5], &[0.5]).unwrap()),
            Arc::new(ToChw),
        ]);
        let steps: [(&str, &dyn Transform); 3] = [
            ("ToFloat", &ToFloat::default()),
            ("ToFloat + Normalize + ToChw", &fused),
            ("ToRgba", &ToRgba),
        ];
        for (name, t) in steps {
            let err = t.apply(0, grey()).unwrap_err();
            assert!(
                matches!(err, Error::AllocationTooLarge { bytes, max_alloc, .. }
                    if bytes == (h * w * 4) as u64 && max_alloc == crate::MAX_BYTES as u64),
                "{name}: {err}"
            );
        }
        // A pixel grown to 16384 x 16384 RGB (768 MiB).
        let pixel =
            || Item::Image(Image::new(1, 1, 3, Layout::Hwc, Pixels::U8(vec![0; 3])).unwrap());
        let side = crate::MAX_SIDE;
        let big = ResizeSize::Exact {
            height: side,
            width: side,
        };
        let growing: [(&str, Box<dyn Transform>); 3] = [
            (
                "PadTo",
                Box::new(PadTo::new(side, side, Fill::default(), Anchor::TopLeft).unwrap()),
            ),
            (
                "Resize",
                Box::new(Resize::new(big, Interpolation::Bilinear, None, true).unwrap()),
            ),
            (
                "Pad",
                Box::new(
                    Pad::new(
                        Padding::Pair(side / 2 - 1, side / 2 - 1),
                        Fill::default(),
                        PaddingMode::Edge,
                    )
                    .unwrap(),
                ),
            ),
        ];
        for (name, t) in growing {
            let err = t.apply(0, pixel()).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::AllocationTooLarge { .. } | Error::TooLarge { .. }
                ),
                "{name}: {err}"
            );
        }
    }

    #[test]
    fn to_float_is_to_tensor() {
        let (_, v) = f32s(ToFloat::default().apply(0, rgb(vec![0, 1, 255])).unwrap());
        assert_eq!(v, vec![0.0, 1.0f32 / 255.0, 1.0]);
        // 1/255 in float32 is 0.003921569; ToDtype's multiplication by float32(1/255) differs
        // on some values: 3 * float32(1/255) = 0.011764707 but 3 / 255 = 0.011764706.
        assert_eq!(3.0f32 / 255.0, 0.011_764_706);
        assert_ne!(3.0f32 * (1.0f32 / 255.0), 3.0f32 / 255.0);
        // ToDtype(scale=True) multiplies by float32(1/255): 126 of the 256 values differ.
        let all: Vec<u8> = (0..=255).collect();
        let (_, v) = f32s(
            ToFloat::default()
                .apply(0, rgb([&all[..], &all, &all].concat()))
                .unwrap(),
        );
        let times_reciprocal = |x: u8| f32::from(x) * (1.0f32 / 255.0);
        let differ = (0..=255u8)
            .filter(|&x| v[usize::from(x)] != times_reciprocal(x))
            .count();
        assert_eq!(differ, 126);
        let (_, v) = f32s(ToFloat::new(false).apply(0, rgb(vec![0, 7, 255])).unwrap());
        assert_eq!(v, vec![0.0, 7.0, 255.0]);
    }

    #[test]
    fn normalize_subtracts_then_divides_in_float32() {
        let n = Normalize::new(&[0.485, 0.456, 0.406], &[0.229, 0.224, 0.225]).unwrap();
        let (_, x) = f32s(
            ToFloat::default()
                .apply(0, rgb(vec![10, 128, 250]))
                .unwrap(),
        );
        let (_, v) = f32s(
            n.apply(
                0,
                ToFloat::default()
                    .apply(0, rgb(vec![10, 128, 250]))
                    .unwrap(),
            )
            .unwrap(),
        );
        let expected: Vec<f32> = x
            .iter()
            .zip(
                [0.485f32, 0.456, 0.406]
                    .iter()
                    .zip([0.229f32, 0.224, 0.225]),
            )
            .map(|(&x, (&m, s))| (x - m) / s)
            .collect();
        assert_eq!(v, expected);
        // By hand: (10/255 - 0.485) / 0.229 = -1.946656; (250/255 - 0.406) / 0.225 = 2.552854
        assert!((v[0] - (-1.946_656)).abs() < 1e-5, "{}", v[0]);
        assert!((v[2] - 2.552_854).abs() < 1e-5, "{}", v[2]);
    }

    #[test]
    fn normalize_arguments_and_inputs() {
        assert!(Normalize::new(&[0.5], &[0.5, 0.5]).is_err());
        let err = Normalize::new(&[0.5], &[1e-50]).unwrap_err();
        assert!(err.to_string().contains("division by zero"), "{err}");
        let n = Normalize::new(&[0.5, 0.5], &[0.5, 0.5]).unwrap();
        let err = n.apply(0, rgb(vec![1, 2, 3])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Normalize expects a float32 image (apply ToFloat first), got a uint8 HWC image of 1x1x3"
        );
        let f = ToFloat::default().apply(0, rgb(vec![1, 2, 3])).unwrap();
        let err = n.apply(0, f.clone()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Normalize: invalid argument: mean and std have 2 values for an image of 3 channels"
        );
        let err = ToFloat::default().apply(0, f).unwrap_err();
        assert!(matches!(
            err,
            Error::WrongInput {
                transform: "ToFloat",
                ..
            }
        ));
        // One value broadcasts to every channel.
        let one = Normalize::new(&[0.0], &[2.0]).unwrap();
        let (_, v) = f32s(
            one.apply(0, ToFloat::new(false).apply(0, rgb(vec![2, 4, 6])).unwrap())
                .unwrap(),
        );
        assert_eq!(v, vec![1.0, 2.0, 3.0]);
    }

    #[test]
    fn layouts() {
        let item = rgb(vec![1, 2, 3, 4, 5, 6]);
        let chw = ToChw.apply(0, item.clone()).unwrap();
        let Item::Image(im) = &chw else { panic!() };
        assert_eq!(im.shape(), [3, 1, 2]);
        assert_eq!(im.pixels(), &Pixels::U8(vec![1, 4, 2, 5, 3, 6]));
        assert_eq!(ToHwc.apply(0, chw).unwrap(), item);
    }

    #[test]
    fn fused_plan_equals_steps() {
        let n = Normalize::new(&[0.485, 0.456, 0.406], &[0.229, 0.224, 0.225]).unwrap();
        let data: Vec<u8> = (0..=255u8).chain(0..=255).chain(0..=255).collect();
        let item = Item::Image(Image::new(16, 16, 3, Layout::Hwc, Pixels::U8(data)).unwrap());
        let steps = ToChw
            .apply(
                0,
                n.apply(0, ToFloat::default().apply(0, item.clone()).unwrap())
                    .unwrap(),
            )
            .unwrap();
        let mut plan = FloatPlan::default();
        assert!(plan.push(&ToFloat::default().pointwise().unwrap()));
        assert!(plan.push(&n.pointwise().unwrap()));
        assert!(plan.push(&Pointwise::ToChw));
        assert!(!plan.push(&Pointwise::ToChw));
        let fused = Item::Image(plan.run(item.clone()).unwrap());
        let (l1, a) = f32s(steps);
        let (l2, b) = f32s(fused);
        assert_eq!(l1, l2);
        assert_eq!(
            a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        // Normalize + ToChw on float, and CHW -> HWC.
        let f = ToFloat::default().apply(0, item).unwrap();
        let plan = FloatPlan {
            normalize: Some((vec![0.5], vec![0.25])),
            layout: Some(Layout::Chw),
            ..FloatPlan::default()
        };
        let fused = plan.run(f.clone()).unwrap();
        let steps = ToChw
            .apply(
                0,
                Normalize::new(&[0.5], &[0.25])
                    .unwrap()
                    .apply(0, f)
                    .unwrap(),
            )
            .unwrap();
        assert_eq!(Item::Image(fused), steps);
    }
}
