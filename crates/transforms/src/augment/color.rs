//! `ColorJitter` and `RandomGrayscale`.

use super::{check_p, unkeyed};
use crate::image::{Image, Item, Layout, Pixels, u8_hwc};
use crate::tv::color as k;
use crate::{Error, Key, Params, RandomParams, Rng, Transform, Value};

/// The image of a colour transform: uint8 HWC with 1 or 3 channels, as torchvision's kernels
/// take.
fn gray_or_rgb(owner: &'static str, item: Item) -> Result<(usize, usize, usize, Vec<u8>), Error> {
    let (h, w, c, v) = u8_hwc(owner, item)?;
    if c != 1 && c != 3 {
        return Err(Error::WrongInput {
            transform: owner,
            expected: "an image of 1 or 3 channels (apply ToRgb first)",
            got: format!("{c} channels"),
        });
    }
    Ok((h, w, c, v))
}

fn image(h: usize, w: usize, c: usize, v: Vec<u8>) -> Item {
    Item::Image(Image::from_parts(h, w, c, Layout::Hwc, Pixels::U8(v)))
}

/// The factors drawn by one `ColorJitter` call, and the order they are applied in
/// (0 brightness, 1 contrast, 2 saturation, 3 hue).
#[derive(Debug, Clone, PartialEq)]
pub struct Jitter {
    /// A permutation of `0..4`.
    pub order: [usize; 4],
    /// The brightness factor, when brightness is jittered.
    pub brightness: Option<f64>,
    /// The contrast factor.
    pub contrast: Option<f64>,
    /// The saturation factor.
    pub saturation: Option<f64>,
    /// The hue shift.
    pub hue: Option<f64>,
}

/// torchvision's `ColorJitter(brightness=0, contrast=0, saturation=0, hue=0)`: each factor
/// uniform in its range, applied in a random order (`torch.randperm(4)`), with
/// `F.adjust_brightness`, `F.adjust_contrast`, `F.adjust_saturation` and `F.adjust_hue`.
///
/// A range is `None` when off (torchvision's `None`, or a range that is the identity only).
#[derive(Debug, Clone)]
pub struct ColorJitter {
    brightness: Option<(f64, f64)>,
    contrast: Option<(f64, f64)>,
    saturation: Option<(f64, f64)>,
    hue: Option<(f64, f64)>,
}

impl ColorJitter {
    /// Factors drawn uniformly from the given `(min, max)` ranges, as torchvision's
    /// `_check_input` leaves them.
    ///
    /// # Errors
    /// A range not increasing or out of bounds (`[0, ∞)`; hue within `[-0.5, 0.5]`).
    pub fn new(
        brightness: Option<(f64, f64)>,
        contrast: Option<(f64, f64)>,
        saturation: Option<(f64, f64)>,
        hue: Option<(f64, f64)>,
    ) -> Result<ColorJitter, Error> {
        let check = |name: &str, r: Option<(f64, f64)>, center: f64, lo: f64, hi: f64| {
            let Some((a, b)) = r else {
                return Ok(None);
            };
            if !(lo <= a && a <= b && b <= hi) {
                return Err(Error::arg(
                    "ColorJitter",
                    format!(
                        "{name} values should be between ({lo}, {hi}) and increasing, but got [{a}, {b}]"
                    ),
                ));
            }
            Ok(if a == center && b == center {
                None
            } else {
                Some((a, b))
            })
        };
        Ok(ColorJitter {
            brightness: check("brightness", brightness, 1.0, 0.0, f64::INFINITY)?,
            contrast: check("contrast", contrast, 1.0, 0.0, f64::INFINITY)?,
            saturation: check("saturation", saturation, 1.0, 0.0, f64::INFINITY)?,
            hue: check("hue", hue, 0.0, -0.5, 0.5)?,
        })
    }

    /// The order and factors drawn (torchvision's `make_params`).
    pub fn draw(&self, rng: &mut Rng) -> Jitter {
        let p = rng.permutation(4);
        let mut factor = |r: Option<(f64, f64)>| r.map(|(a, b)| rng.uniform_in(a, b));
        Jitter {
            order: [p[0], p[1], p[2], p[3]],
            brightness: factor(self.brightness),
            contrast: factor(self.contrast),
            saturation: factor(self.saturation),
            hue: factor(self.hue),
        }
    }
}

impl Transform for ColorJitter {
    fn apply(&self, index: u64, item: Item) -> Result<Item, Error> {
        self.apply_keyed(unkeyed(index), item)
    }

    fn apply_keyed(&self, key: Key, item: Item) -> Result<Item, Error> {
        let (h, w, c, mut v) = gray_or_rgb("ColorJitter", item)?;
        let j = self.draw(&mut key.rng());
        for step in j.order {
            match step {
                0 => j.brightness.map(|f| k::brightness(&mut v, f)),
                1 => j.contrast.map(|f| k::contrast(&mut v, c, f)),
                2 => j.saturation.map(|f| k::saturation(&mut v, c, f)),
                _ => j.hue.map(|f| k::hue(&mut v, c, f)),
            };
        }
        Ok(image(h, w, c, v))
    }
}

impl RandomParams for ColorJitter {
    fn params(&self, key: Key, _height: usize, _width: usize) -> Result<Params, Error> {
        let j = self.draw(&mut key.rng());
        let f = |x: Option<f64>| x.map_or(Value::None, Value::Float);
        Ok(Params(vec![
            (
                "order",
                Value::Ints(j.order.iter().map(|&i| i as i64).collect()),
            ),
            ("brightness", f(j.brightness)),
            ("contrast", f(j.contrast)),
            ("saturation", f(j.saturation)),
            ("hue", f(j.hue)),
        ]))
    }
}

/// torchvision's `RandomGrayscale(p=0.1)`: with probability `p`, `F.rgb_to_grayscale` keeping
/// the number of channels (1 or 3).
#[derive(Debug, Clone, Copy)]
pub struct RandomGrayscale {
    p: f64,
}

impl RandomGrayscale {
    /// Grey with probability `p`.
    ///
    /// # Errors
    /// `p` outside `[0, 1]`.
    pub fn new(p: f64) -> Result<RandomGrayscale, Error> {
        Ok(RandomGrayscale {
            p: check_p("RandomGrayscale", p)?,
        })
    }

    /// Whether the item of `key` turns grey.
    #[must_use]
    pub fn draw(&self, key: Key) -> bool {
        key.rng().chance(self.p)
    }
}

impl Transform for RandomGrayscale {
    fn apply(&self, index: u64, item: Item) -> Result<Item, Error> {
        self.apply_keyed(unkeyed(index), item)
    }

    fn apply_keyed(&self, key: Key, item: Item) -> Result<Item, Error> {
        let (h, w, c, mut v) = gray_or_rgb("RandomGrayscale", item)?;
        if self.draw(key) {
            k::grayscale(&mut v, c);
        }
        Ok(image(h, w, c, v))
    }
}

impl RandomParams for RandomGrayscale {
    fn params(&self, key: Key, _height: usize, _width: usize) -> Result<Params, Error> {
        Ok(Params(vec![("gray", Value::Bool(self.draw(key)))]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_ranges_are_off_and_bad_ones_refused() {
        let t =
            ColorJitter::new(Some((1.0, 1.0)), None, Some((0.5, 1.5)), Some((0.0, 0.0))).unwrap();
        let j = t.draw(&mut Key::new(0, 0, 0).rng());
        assert_eq!((j.brightness, j.contrast, j.hue), (None, None, None));
        assert!((0.5..1.5).contains(&j.saturation.unwrap()));
        let mut order = j.order;
        order.sort_unstable();
        assert_eq!(order, [0, 1, 2, 3]);
        let e = ColorJitter::new(None, None, None, Some((-0.6, 0.1))).unwrap_err();
        assert!(
            e.to_string()
                .contains("hue values should be between (-0.5, 0.5)"),
            "{e}"
        );
        assert!(ColorJitter::new(Some((1.5, 0.5)), None, None, None).is_err());
    }

    #[test]
    fn grayscale_keeps_the_channels_and_refuses_rgba() {
        let t = RandomGrayscale::new(1.0).unwrap();
        let im = Image::new(1, 1, 3, Layout::Hwc, Pixels::U8(vec![255, 0, 0])).unwrap();
        let Item::Image(out) = t.apply(0, Item::Image(im)).unwrap() else {
            panic!()
        };
        // 255 * 0.2989, truncated.
        assert_eq!(out.pixels(), &Pixels::U8(vec![76, 76, 76]));
        let rgba = Image::new(1, 1, 4, Layout::Hwc, Pixels::U8(vec![0; 4])).unwrap();
        let e = t.apply(0, Item::Image(rgba)).unwrap_err();
        assert!(e.to_string().contains("1 or 3 channels"), "{e}");
    }
}
