//! `RandomResizedCrop` and `RandomCrop`.

use super::{Rectangles, unkeyed};
use crate::dtype::Dtype;
use crate::geometry::{Window, apply_window};
use crate::image::{Image, Item, Layout, Pixels, check_size, u8_hwc};
use crate::tv::{Interpolation, region_reads, resize_u8, resize_window_u8};
use crate::{
    Error, Fill, Key, PaddingMode, Params, RandomParams, Rect, Reduced, Rng, Shrink, Size,
    Transform, Value,
};

/// A drawn crop: rows `top..top + height`, columns `left..left + width`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CropBox {
    /// First row.
    pub top: i64,
    /// First column.
    pub left: i64,
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
}

impl CropBox {
    fn params(self) -> Vec<(&'static str, Value)> {
        vec![
            ("top", Value::Int(self.top)),
            ("left", Value::Int(self.left)),
            ("height", Value::Int(self.height as i64)),
            ("width", Value::Int(self.width as i64)),
        ]
    }
}

/// torchvision's `RandomResizedCrop(size, scale=(0.08, 1.0), ratio=(3/4, 4/3),
/// interpolation="bilinear", antialias=True)`: a crop of random area and aspect ratio, resized
/// to `size` as `F.resized_crop` resizes a uint8 tensor.
///
/// Up to ten tries draw an area fraction uniform in `scale` and a ratio log-uniform in
/// `ratio`; the first crop that fits is placed uniformly; after ten misses, the centred crop of
/// the whole image clamped to `ratio`, never less than one row and one column (where torchvision
/// would crop nothing and fail).
#[derive(Debug, Clone)]
pub struct RandomResizedCrop {
    size: Size,
    rectangles: Rectangles,
    interpolation: Interpolation,
    antialias: bool,
}

impl RandomResizedCrop {
    /// The transform to an output of `size`.
    ///
    /// # Errors
    /// An empty size, a `scale` outside `[0, ∞)` or a `ratio` outside `(0, ∞)`, either not
    /// `(min, max)`; lanczos without `antialias`.
    pub fn new(
        size: Size,
        scale: (f64, f64),
        ratio: (f64, f64),
        interpolation: Interpolation,
        antialias: bool,
    ) -> Result<RandomResizedCrop, Error> {
        const NAME: &str = "RandomResizedCrop";
        if size.width == 0 || size.height == 0 {
            return Err(Error::arg(NAME, "size must be at least 1"));
        }
        check_size(size.height, size.width, 1, Dtype::U8)?;
        let rectangles = Rectangles::new(NAME, scale, ratio, f64::INFINITY)?;
        if interpolation == Interpolation::Lanczos3 && !antialias {
            return Err(Error::arg(NAME, "lanczos requires antialias=True"));
        }
        Ok(RandomResizedCrop {
            size,
            rectangles,
            interpolation,
            antialias: antialias && interpolation.filters(),
        })
    }

    /// The crop drawn for an image of `height × width` (torchvision's `make_params`).
    pub fn draw(&self, rng: &mut Rng, height: usize, width: usize) -> CropBox {
        let area = (height * width) as f64;
        for _ in 0..10 {
            let (w, h) = self.rectangles.draw(rng, area);
            if w > 0.0 && w <= width as f64 && h > 0.0 && h <= height as f64 {
                let (h, w) = (h as usize, w as usize);
                let (top, left) = Rectangles::place(rng, (h, w), (height, width));
                return CropBox {
                    top,
                    left,
                    height: h,
                    width: w,
                };
            }
        }
        let in_ratio = width as f64 / height as f64;
        let ratio = self.rectangles.ratio;
        let (h, w) = if in_ratio < ratio.0 {
            let h = (width as f64 / ratio.0).round_ties_even() as usize;
            (h.clamp(1, height), width)
        } else if in_ratio > ratio.1 {
            let w = (height as f64 * ratio.1).round_ties_even() as usize;
            (height, w.clamp(1, width))
        } else {
            (height, width)
        };
        CropBox {
            top: ((height - h) / 2) as i64,
            left: ((width - w) / 2) as i64,
            height: h,
            width: w,
        }
    }

    /// The output size.
    #[must_use]
    pub fn size(&self) -> Size {
        self.size
    }
}

impl Transform for RandomResizedCrop {
    fn apply(&self, index: u64, item: Item) -> Result<Item, Error> {
        self.apply_keyed(unkeyed(index), item)
    }

    fn apply_keyed(&self, key: Key, item: Item) -> Result<Item, Error> {
        let (h, w, c, v) = u8_hwc("RandomResizedCrop", item)?;
        let b = self.draw(&mut key.rng(), h, w);
        let region = (b.top as usize, b.left as usize, b.height, b.width);
        Ok(Item::Image(self.crop_resize(&v, (h, w, c), region)))
    }

    fn shrink(&self, key: Key, height: usize, width: usize) -> Option<Shrink> {
        let b = self.draw(&mut key.rng(), height, width);
        Some(Shrink {
            top: b.top as usize,
            left: b.left as usize,
            height: b.height,
            width: b.width,
            out_height: self.size.height,
            out_width: self.size.width,
        })
    }

    fn apply_reduced(&self, key: Key, item: Item, from: Reduced) -> Result<Item, Error> {
        let w = from.window;
        let fits =
            matches!(&item, Item::Image(im) if (im.height(), im.width()) == (w.height, w.width));
        let (Some(s), true) = (self.shrink(key, from.full.0, from.full.1), fits) else {
            return self.apply_keyed(key, item);
        };
        let (_, _, c, v) = u8_hwc("RandomResizedCrop", item)?;
        if from.scale == 1 {
            // The crop, from the part of the image decoded.
            let region = (s.top - w.top, s.left - w.left, s.height, s.width);
            return Ok(Item::Image(self.crop_resize(
                &v,
                (w.height, w.width, c),
                region,
            )));
        }
        // The crop drawn for the full image, in the reduced one, to the fraction of a pixel.
        let (rh, rw) = from.size();
        let out = resize_window_u8(
            &v,
            (rh, rw, c),
            w,
            s.scaled(from),
            (self.size.height, self.size.width),
            self.interpolation,
            self.antialias,
        );
        Ok(Item::Image(self.sized(c, out)))
    }

    fn window(&self, key: Key, from: Reduced) -> Option<Rect> {
        let s = self.shrink(key, from.full.0, from.full.1)?;
        if from.scale == 1 {
            return Some(Rect {
                top: s.top,
                left: s.left,
                height: s.height,
                width: s.width,
            });
        }
        Some(region_reads(
            from.size(),
            s.scaled(from),
            (self.size.height, self.size.width),
            self.interpolation,
            self.antialias,
        ))
    }
}

impl RandomResizedCrop {
    /// The `(top, left, height, width)` region of a uint8 HWC image resized to `size`.
    fn crop_resize(
        &self,
        v: &[u8],
        (h, w, c): (usize, usize, usize),
        (top, left, height, width): (usize, usize, usize, usize),
    ) -> Image {
        // A crop of all of it (a JPEG decoded in the crop's window) needs no copy.
        let crop: std::borrow::Cow<'_, [u8]> = if (top, left, height, width) == (0, 0, h, w) {
            v.into()
        } else {
            let mut crop = Vec::with_capacity(height * width * c);
            for y in top..top + height {
                crop.extend_from_slice(&v[(y * w + left) * c..][..width * c]);
            }
            crop.into()
        };
        let out = resize_u8(
            &crop,
            (height, width, c),
            (self.size.height, self.size.width),
            self.interpolation,
            self.antialias,
        );
        self.sized(c, out)
    }

    /// An output-sized uint8 HWC image of `c` channels.
    fn sized(&self, c: usize, out: Vec<u8>) -> Image {
        let Size { height, width } = self.size;
        Image::from_parts(height, width, c, Layout::Hwc, Pixels::U8(out))
    }
}

impl RandomParams for RandomResizedCrop {
    fn params(&self, key: Key, height: usize, width: usize) -> Result<Params, Error> {
        Ok(Params(self.draw(&mut key.rng(), height, width).params()))
    }
}

/// torchvision's `RandomCrop(size, padding=None, pad_if_needed=False, fill=0,
/// padding_mode="constant")`: `padding` added first, then (with `pad_if_needed`) the missing
/// rows and columns on both sides, then a crop of `size` placed uniformly. Any dtype and layout.
#[derive(Debug, Clone)]
pub struct RandomCrop {
    size: Size,
    /// Left, top, right, bottom.
    padding: [usize; 4],
    pad_if_needed: bool,
    fill: Fill,
    mode: PaddingMode,
}

impl RandomCrop {
    /// The transform to crops of `size`; `padding` is left, top, right, bottom.
    ///
    /// # Errors
    /// An empty size, or padding beyond the image limits.
    pub fn new(
        size: Size,
        padding: [usize; 4],
        pad_if_needed: bool,
        fill: Fill,
        mode: PaddingMode,
    ) -> Result<RandomCrop, Error> {
        if size.width == 0 || size.height == 0 {
            return Err(Error::arg("RandomCrop", "size must be at least 1"));
        }
        if padding.iter().any(|&p| p > crate::MAX_SIDE) {
            return Err(Error::arg(
                "RandomCrop",
                format!("padding {padding:?} exceeds {}", crate::MAX_SIDE),
            ));
        }
        Ok(RandomCrop {
            size,
            padding,
            pad_if_needed,
            fill,
            mode,
        })
    }

    /// The padding (left, top, right, bottom) and the crop, in padded coordinates, drawn for an
    /// image of `height × width` (torchvision's `make_params`).
    ///
    /// # Errors
    /// A crop larger than the padded image.
    pub fn draw(
        &self,
        rng: &mut Rng,
        height: usize,
        width: usize,
    ) -> Result<([usize; 4], CropBox), Error> {
        let [mut l, mut t, mut r, mut b] = self.padding;
        let mut ph = height + t + b;
        let mut pw = width + l + r;
        let (ch, cw) = (self.size.height, self.size.width);
        if self.pad_if_needed {
            // torchvision pads both sides by the whole difference.
            if ph < ch {
                let diff = ch - ph;
                t += diff;
                b += diff;
                ph += 2 * diff;
            }
            if pw < cw {
                let diff = cw - pw;
                l += diff;
                r += diff;
                pw += 2 * diff;
            }
        }
        if ph < ch || pw < cw {
            let padded = if self.padding == [0; 4] {
                ""
            } else {
                "padded "
            };
            return Err(Error::arg(
                "RandomCrop",
                format!(
                    "Required crop size ({ch}, {cw}) is larger than {padded}input image size ({ph}, {pw})"
                ),
            ));
        }
        let top = if ph > ch {
            rng.int_in(0, (ph - ch) as i64)
        } else {
            0
        };
        let left = if pw > cw {
            rng.int_in(0, (pw - cw) as i64)
        } else {
            0
        };
        Ok((
            [l, t, r, b],
            CropBox {
                top,
                left,
                height: ch,
                width: cw,
            },
        ))
    }
}

impl Transform for RandomCrop {
    fn apply(&self, index: u64, item: Item) -> Result<Item, Error> {
        self.apply_keyed(unkeyed(index), item)
    }

    fn apply_keyed(&self, key: Key, item: Item) -> Result<Item, Error> {
        let im = item.into_image("RandomCrop")?;
        let ([l, t, _, _], b) = self.draw(&mut key.rng(), im.height(), im.width())?;
        // Padding then cropping is one window over the image.
        let win = Window {
            top: b.top - t as i64,
            left: b.left - l as i64,
            height: b.height,
            width: b.width,
            mode: self.mode,
        };
        apply_window("RandomCrop", im, &win, &self.fill).map(Item::Image)
    }
}

impl RandomParams for RandomCrop {
    fn params(&self, key: Key, height: usize, width: usize) -> Result<Params, Error> {
        let (padding, b) = self.draw(&mut key.rng(), height, width)?;
        let mut p = b.params();
        p.push((
            "padding",
            Value::Ints(padding.iter().map(|&x| x as i64).collect()),
        ));
        Ok(Params(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rrc(scale: (f64, f64), ratio: (f64, f64)) -> RandomResizedCrop {
        RandomResizedCrop::new(Size::square(8), scale, ratio, Interpolation::Bilinear, true)
            .unwrap()
    }

    #[test]
    fn crops_fit_and_vary() {
        let t = rrc((0.08, 1.0), (0.75, 4.0 / 3.0));
        let mut seen = std::collections::HashSet::new();
        for i in 0..500 {
            let b = t.draw(&mut Key::new(3, 0, i).rng(), 60, 90);
            assert!(b.top >= 0 && b.left >= 0);
            assert!(b.top as usize + b.height <= 60 && b.left as usize + b.width <= 90);
            seen.insert((b.top, b.left, b.height, b.width));
        }
        assert!(seen.len() > 400, "{}", seen.len());
    }

    #[test]
    fn falls_back_to_the_centre_after_ten_misses() {
        // A scale above 1 never fits: the fallback clamps the ratio, centred.
        let t = rrc((2.0, 3.0), (1.0, 1.0));
        let b = t.draw(&mut Key::new(0, 0, 0).rng(), 10, 30);
        assert_eq!(
            b,
            CropBox {
                top: 0,
                left: 10,
                height: 10,
                width: 10
            }
        );
        let b = t.draw(&mut Key::new(0, 0, 0).rng(), 31, 10);
        assert_eq!((b.top, b.left, b.height, b.width), (10, 0, 10, 10));
        let whole = rrc((2.0, 3.0), (0.5, 4.0)).draw(&mut Key::new(0, 0, 0).rng(), 10, 30);
        assert_eq!((whole.height, whole.width), (10, 30));
    }

    #[test]
    fn the_fallback_never_crops_nothing() {
        // A ratio far from the image's rounds the fallback's short side to 0: one row or
        // column is kept instead of an empty crop.
        let wide = rrc((0.08, 1.0), (50.0, 60.0)).draw(&mut Key::new(0, 0, 0).rng(), 10, 10);
        assert_eq!(
            (wide.top, wide.left, wide.height, wide.width),
            (4, 0, 1, 10)
        );
        let tall =
            rrc((0.08, 1.0), (1.0 / 60.0, 1.0 / 50.0)).draw(&mut Key::new(0, 0, 0).rng(), 10, 10);
        assert_eq!(
            (tall.top, tall.left, tall.height, tall.width),
            (0, 4, 10, 1)
        );
    }

    #[test]
    fn bad_arguments_are_refused() {
        for (scale, ratio, message) in [
            ((0.5, 0.1), (1.0, 1.0), "scale should be of kind (min, max)"),
            ((0.1, 0.5), (0.0, 1.0), "ratio should be between"),
        ] {
            let e = RandomResizedCrop::new(
                Size::square(8),
                scale,
                ratio,
                Interpolation::Bilinear,
                true,
            )
            .unwrap_err();
            assert!(e.to_string().contains(message), "{e}");
        }
    }

    #[test]
    fn random_crop_pads_like_torchvision() {
        let t = RandomCrop::new(
            Size {
                width: 5,
                height: 4,
            },
            [0; 4],
            true,
            Fill::default(),
            PaddingMode::Constant,
        )
        .unwrap();
        // 2 rows short: 2 more on top and 2 at the bottom, so 6 rows to place 4 in.
        let (padding, b) = t.draw(&mut Key::new(1, 0, 0).rng(), 2, 9).unwrap();
        assert_eq!(padding, [0, 2, 0, 2]);
        assert!((0..=2).contains(&b.top) && (0..=4).contains(&b.left));
        let strict = RandomCrop::new(
            Size::square(5),
            [1, 1, 1, 1],
            false,
            Fill::default(),
            PaddingMode::Constant,
        )
        .unwrap();
        let e = strict.draw(&mut Key::new(1, 0, 0).rng(), 2, 9).unwrap_err();
        assert!(
            e.to_string().contains(
                "Required crop size (5, 5) is larger than padded input image size (4, 11)"
            ),
            "{e}"
        );
    }

    #[test]
    fn random_crop_is_pad_then_crop() {
        let v: Vec<u8> = (0..4 * 6 * 2).map(|x| x as u8).collect();
        let im = Image::new(4, 6, 2, Layout::Hwc, Pixels::U8(v)).unwrap();
        for mode in [
            PaddingMode::Constant,
            PaddingMode::Edge,
            PaddingMode::Reflect,
            PaddingMode::Symmetric,
        ] {
            let t = RandomCrop::new(Size::square(5), [2, 1, 3, 2], false, Fill::Value(9.0), mode)
                .unwrap();
            for i in 0..20 {
                let key = Key::new(4, 1, i);
                let ([l, top, r, b], bx) = t.draw(&mut key.rng(), 4, 6).unwrap();
                let padded = crate::Pad::new(
                    crate::Padding::Each {
                        left: l,
                        top,
                        right: r,
                        bottom: b,
                    },
                    Fill::Value(9.0),
                    mode,
                )
                .unwrap()
                .pad(im.clone())
                .unwrap();
                let expected = crate::Crop::new(bx.top, bx.left, 5, 5)
                    .unwrap()
                    .crop(padded)
                    .unwrap();
                let got = t.apply_keyed(key, Item::Image(im.clone())).unwrap();
                assert_eq!(got, Item::Image(expected), "{mode:?} {i}");
            }
        }
    }
}
