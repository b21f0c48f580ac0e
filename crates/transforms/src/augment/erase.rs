//! `RandomErasing`: a random rectangle set to a value.

use super::{Rectangles, check_p, unkeyed};
use crate::image::{Image, Item, Layout, Pixels};
use crate::{Error, Key, Params, RandomParams, Rng, Transform, Value};

/// What `RandomErasing` writes.
#[derive(Debug, Clone, PartialEq)]
pub enum EraseValue {
    /// One value for every channel, or one per channel.
    Values(Vec<f64>),
    /// A standard normal draw per erased value (torchvision's `value="random"`).
    Random,
}

/// The region drawn for one item: `None` when nothing is erased.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// First row.
    pub top: usize,
    /// First column.
    pub left: usize,
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
}

/// torchvision's `RandomErasing(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0)`: with
/// probability `p`, up to ten tries for a rectangle of area fraction uniform in `scale` and
/// ratio log-uniform in `ratio` strictly inside the image, placed uniformly, set to `value`.
///
/// Any dtype and layout: it usually follows `Normalize`. A value goes into a uint8 image as
/// torch converts a float to uint8 (truncated, then modulo 256).
#[derive(Debug, Clone)]
pub struct RandomErasing {
    p: f64,
    rectangles: Rectangles,
    value: EraseValue,
}

impl RandomErasing {
    /// The transform.
    ///
    /// # Errors
    /// `p` outside `[0, 1]`, `scale` outside `[0, 1]` or `ratio` outside `(0, ∞)`, either not
    /// `(min, max)`, or no value.
    pub fn new(
        p: f64,
        scale: (f64, f64),
        ratio: (f64, f64),
        value: EraseValue,
    ) -> Result<RandomErasing, Error> {
        const NAME: &str = "RandomErasing";
        let p = check_p(NAME, p)?;
        let rectangles = Rectangles::new(NAME, scale, ratio, 1.0)?;
        if let EraseValue::Values(v) = &value
            && (v.is_empty() || v.iter().any(|x| !x.is_finite()))
        {
            return Err(Error::arg(
                NAME,
                format!("value must be finite numbers, got {v:?}"),
            ));
        }
        Ok(RandomErasing {
            p,
            rectangles,
            value,
        })
    }

    /// The region erased in an image of `height × width` (torchvision's coin, then its
    /// `make_params`).
    pub fn draw(&self, rng: &mut Rng, height: usize, width: usize) -> Option<Region> {
        if !rng.chance(self.p) {
            return None;
        }
        let area = (height * width) as f64;
        for _ in 0..10 {
            let (h, w) = self.rectangles.draw(rng, area);
            if !(h < height as f64 && w < width as f64) {
                continue;
            }
            let (h, w) = (h as usize, w as usize);
            let (top, left) = Rectangles::place(rng, (h, w), (height, width));
            return Some(Region {
                top: top as usize,
                left: left as usize,
                height: h,
                width: w,
            });
        }
        None
    }
}

/// torch's float-to-uint8 conversion: truncated toward zero, then the low byte.
fn torch_u8(v: f64) -> u8 {
    (v.trunc() as i64).rem_euclid(256) as u8
}

fn erase<T: Copy>(
    v: &mut [T],
    (h, w, c): (usize, usize, usize),
    layout: Layout,
    r: Region,
    mut value: impl FnMut(usize) -> T,
) {
    match layout {
        Layout::Hwc => {
            for y in r.top..r.top + r.height {
                for x in r.left..r.left + r.width {
                    for ch in 0..c {
                        v[(y * w + x) * c + ch] = value(ch);
                    }
                }
            }
        }
        Layout::Chw => {
            for ch in 0..c {
                for y in r.top..r.top + r.height {
                    for x in r.left..r.left + r.width {
                        v[(ch * h + y) * w + x] = value(ch);
                    }
                }
            }
        }
    }
}

impl Transform for RandomErasing {
    fn apply(&self, index: u64, item: Item) -> Result<Item, Error> {
        self.apply_keyed(unkeyed(index), item)
    }

    fn apply_keyed(&self, key: Key, item: Item) -> Result<Item, Error> {
        let im = item.into_image("RandomErasing")?;
        let (h, w, c, layout) = (im.height(), im.width(), im.channels(), im.layout());
        if let EraseValue::Values(v) = &self.value
            && v.len() != 1
            && v.len() != c
        {
            return Err(Error::arg(
                "RandomErasing",
                format!(
                    "value has {} values; it should have a single value or {c} (the image's channels)",
                    v.len()
                ),
            ));
        }
        let mut rng = key.rng();
        let Some(region) = self.draw(&mut rng, h, w) else {
            return Ok(Item::Image(im));
        };
        let fixed = |ch: usize| match &self.value {
            EraseValue::Values(v) => v[if v.len() == 1 { 0 } else { ch }],
            EraseValue::Random => unreachable!("random values are drawn"),
        };
        let random = matches!(self.value, EraseValue::Random);
        let pixels = match im.into_pixels() {
            Pixels::U8(mut v) => {
                if random {
                    erase(&mut v, (h, w, c), layout, region, |_| {
                        torch_u8(f64::from(rng.normal() as f32))
                    });
                } else {
                    erase(&mut v, (h, w, c), layout, region, |ch| torch_u8(fixed(ch)));
                }
                Pixels::U8(v)
            }
            Pixels::F32(mut v) => {
                if random {
                    erase(&mut v, (h, w, c), layout, region, |_| rng.normal() as f32);
                } else {
                    erase(&mut v, (h, w, c), layout, region, |ch| fixed(ch) as f32);
                }
                Pixels::F32(v)
            }
        };
        Ok(Item::Image(Image::from_parts(h, w, c, layout, pixels)))
    }
}

impl RandomParams for RandomErasing {
    fn params(&self, key: Key, height: usize, width: usize) -> Result<Params, Error> {
        let r = self.draw(&mut key.rng(), height, width);
        let (erased, r) = match r {
            Some(r) => (true, r),
            None => (
                false,
                Region {
                    top: 0,
                    left: 0,
                    height,
                    width,
                },
            ),
        };
        Ok(Params(vec![
            ("erase", Value::Bool(erased)),
            ("top", Value::Int(r.top as i64)),
            ("left", Value::Int(r.left as i64)),
            ("height", Value::Int(r.height as i64)),
            ("width", Value::Int(r.width as i64)),
        ]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erases_the_drawn_region_in_either_layout() {
        let t =
            RandomErasing::new(1.0, (0.1, 0.3), (0.5, 2.0), EraseValue::Values(vec![7.0])).unwrap();
        for layout in [Layout::Hwc, Layout::Chw] {
            for i in 0..50 {
                let key = Key::new(6, 0, i);
                let im = Image::new(12, 10, 3, layout, Pixels::F32(vec![1.0; 360])).unwrap();
                let r = t.draw(&mut key.rng(), 12, 10).expect("p = 1 erases");
                let Item::Image(out) = t.apply_keyed(key, Item::Image(im)).unwrap() else {
                    panic!()
                };
                let Pixels::F32(v) = out.pixels() else {
                    panic!()
                };
                let sevens = v.iter().filter(|&&x| x == 7.0).count();
                assert_eq!(sevens, r.height * r.width * 3);
                assert!(r.height < 12 && r.width < 10);
            }
        }
    }

    #[test]
    fn uint8_values_convert_as_torch() {
        assert_eq!(torch_u8(-1.5), 255);
        assert_eq!(torch_u8(127.9), 127);
        assert_eq!(torch_u8(300.0), 44);
        assert_eq!(torch_u8(-3.2), 253);
    }

    #[test]
    fn the_coin_comes_first_and_a_value_must_fit() {
        let never = RandomErasing::new(0.0, (0.02, 0.33), (0.3, 3.3), EraseValue::Random).unwrap();
        assert_eq!(never.draw(&mut Key::new(1, 0, 0).rng(), 50, 50), None);
        let t = RandomErasing::new(
            1.0,
            (0.02, 0.33),
            (0.3, 3.3),
            EraseValue::Values(vec![1.0, 2.0]),
        )
        .unwrap();
        let im = Image::new(4, 4, 3, Layout::Hwc, Pixels::U8(vec![0; 48])).unwrap();
        let e = t.apply(0, Item::Image(im)).unwrap_err();
        assert!(e.to_string().contains("2 values"), "{e}");
        assert!(RandomErasing::new(0.5, (0.0, 1.5), (0.3, 3.3), EraseValue::Random).is_err());
    }
}
