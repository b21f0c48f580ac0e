//! `Resize`: Pillow's resampler (libImaging's fixed-point, two-pass convolution) bit for bit,
//! and Pillow's nearest-neighbour rule; sizes computed like torchvision.

use crate::decode::muldiv255;
use crate::image::{Image, Item, Layout, Pixels, check_size, u8_hwc};
use crate::resample::{Filter, Interpolation, pick, pil_refusal, window};
use crate::{Error, Key, Reduced, Shrink, Transform};

/// The requested size: the smaller edge (torchvision's int size) or both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeSize {
    /// The smaller edge becomes this long; the other keeps the aspect ratio (truncated).
    Shorter(usize),
    /// Both sides.
    Exact {
        /// Rows of the output.
        height: usize,
        /// Columns of the output.
        width: usize,
    },
}

impl From<crate::Size> for ResizeSize {
    fn from(size: crate::Size) -> ResizeSize {
        ResizeSize::Exact {
            height: size.height,
            width: size.width,
        }
    }
}

/// torchvision's `Resize(size, interpolation="bilinear", max_size=None, antialias=True)` with
/// Pillow's arithmetic.
///
/// `antialias=true` is Pillow (and torchvision on PIL images) bit for bit. With
/// `antialias=false` the filter's support is not widened when downscaling: bilinear then reads
/// the two nearest pixels like torch's non-antialiased interpolation (in Pillow's fixed-point
/// arithmetic, not checked against torch); bicubic keeps Pillow's `a = -0.5`.
#[derive(Debug, Clone)]
pub struct Resize {
    size: ResizeSize,
    interpolation: Interpolation,
    max_size: Option<usize>,
    antialias: bool,
}

impl Resize {
    /// `size` with `interpolation`; `max_size` caps the longer edge of a [`ResizeSize::Shorter`]
    /// resize; `antialias` widens the filter when downscaling.
    ///
    /// # Errors
    /// `NearestExact`, a size of 0, or `max_size` with an exact size or not above the shorter
    /// edge.
    pub fn new(
        size: ResizeSize,
        interpolation: Interpolation,
        max_size: Option<usize>,
        antialias: bool,
    ) -> Result<Resize, Error> {
        let bad = |r: String| Err(Error::arg("Resize", r));
        if interpolation == Interpolation::NearestExact {
            // As `str::parse` refuses its name: Pillow has no such mode.
            return bad(pil_refusal(interpolation.name()));
        }
        match size {
            ResizeSize::Shorter(0) => return bad("size must be at least 1".into()),
            ResizeSize::Exact { height, width } if height == 0 || width == 0 => {
                return bad(format!("size must be at least 1, got {height}x{width}"));
            }
            ResizeSize::Exact { .. } if max_size.is_some() => {
                return bad(
                    "max_size is only allowed when size is the length of the smaller edge (an int)"
                        .into(),
                );
            }
            ResizeSize::Shorter(s) => {
                if let Some(m) = max_size
                    && m <= s
                {
                    return bad(format!(
                        "max_size = {m} must be strictly greater than the requested size for the smaller edge = {s}"
                    ));
                }
            }
            ResizeSize::Exact { .. } => {}
        }
        Ok(Resize {
            size,
            interpolation,
            max_size,
            antialias,
        })
    }

    /// The output `(height, width)` for an input of `height × width`, as torchvision computes it.
    pub fn output_size(&self, height: usize, width: usize) -> (usize, usize) {
        match self.size {
            ResizeSize::Exact { height, width } => (height, width),
            ResizeSize::Shorter(size) => {
                let (short, long) = if width <= height {
                    (width, height)
                } else {
                    (height, width)
                };
                let mut new_short = size;
                let mut new_long = (size as f64 * long as f64 / short as f64) as usize;
                if let Some(max) = self.max_size
                    && new_long > max
                {
                    new_short = (max as f64 * new_short as f64 / new_long as f64) as usize;
                    new_long = max;
                }
                let (new_short, new_long) = (new_short.max(1), new_long.max(1));
                if width <= height {
                    (new_long, new_short)
                } else {
                    (new_short, new_long)
                }
            }
        }
    }

    /// Resizes a uint8 HWC image.
    pub fn resize(&self, im: Image) -> Result<Image, Error> {
        let (h, w, c, v) = u8_hwc("Resize", Item::Image(im))?;
        let (oh, ow) = self.output_size(h, w);
        check_size(oh, ow, c, crate::Dtype::U8)?;
        let out = if (oh, ow) == (h, w) {
            v
        } else if self.interpolation == Interpolation::Nearest {
            nearest(&v, h, w, c, oh, ow)
        } else {
            let filter = Filter::pillow(self.interpolation);
            let alpha = c == 2 || c == 4;
            if alpha {
                let pre = premultiply(v, c);
                unpremultiply(resample(&pre, h, w, c, oh, ow, filter, self.antialias), c)
            } else {
                resample(&v, h, w, c, oh, ow, filter, self.antialias)
            }
        };
        Ok(Image::from_parts(oh, ow, c, Layout::Hwc, Pixels::U8(out)))
    }
}

impl Transform for Resize {
    fn apply(&self, _index: u64, item: Item) -> Result<Item, Error> {
        self.resize(item.into_image("Resize")?).map(Item::Image)
    }

    fn shrink(&self, _key: Key, height: usize, width: usize) -> Option<Shrink> {
        let (out_height, out_width) = self.output_size(height, width);
        Some(Shrink {
            top: 0,
            left: 0,
            height,
            width,
            out_height,
            out_width,
        })
    }

    fn apply_reduced(&self, _key: Key, item: Item, from: Reduced) -> Result<Item, Error> {
        // The size the full image would have been given.
        let (height, width) = self.output_size(from.full.0, from.full.1);
        let exact = Resize {
            size: ResizeSize::Exact { height, width },
            max_size: None,
            ..self.clone()
        };
        exact.resize(item.into_image("Resize")?).map(Item::Image)
    }
}

/// Pillow's `RGBA -> RGBa` (and `LA -> La`): colour times alpha, rounded (`MULDIV255`).
fn premultiply(mut v: Vec<u8>, c: usize) -> Vec<u8> {
    for px in v.chunks_exact_mut(c) {
        let a = u32::from(px[c - 1]);
        for x in &mut px[..c - 1] {
            *x = muldiv255(u32::from(*x), a) as u8;
        }
    }
    v
}

/// Pillow's `RGBa -> RGBA`: colour times 255 divided by alpha (truncated, clipped); alpha 0 and
/// 255 left as they are.
fn unpremultiply(mut v: Vec<u8>, c: usize) -> Vec<u8> {
    for px in v.chunks_exact_mut(c) {
        let a = u32::from(px[c - 1]);
        if a != 0 && a != 255 {
            for x in &mut px[..c - 1] {
                *x = (255 * u32::from(*x) / a).min(255) as u8;
            }
        }
    }
    v
}

const PRECISION_BITS: u32 = 32 - 8 - 2;

/// The fixed-point weights of one axis: for each output index, the first input index, the
/// number of inputs, and `ksize` weights with 22 fractional bits.
struct Coeffs {
    ksize: usize,
    bounds: Vec<(usize, usize)>,
    weights: Vec<i32>,
}

fn coefficients(in_size: usize, out_size: usize, filter: Filter, antialias: bool) -> Coeffs {
    let window = window(in_size, (0.0, in_size as f64), out_size, filter, antialias);
    let weights = window
        .weights
        .iter()
        .map(|&w| {
            let scaled = w * f64::from(1u32 << PRECISION_BITS);
            if w < 0.0 {
                (scaled - 0.5) as i32
            } else {
                (scaled + 0.5) as i32
            }
        })
        .collect();
    Coeffs {
        ksize: window.ksize,
        bounds: window.bounds,
        weights,
    }
}

#[inline]
fn clip8(acc: i32) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Horizontal pass over rows `rows` of `src` (`w` wide) into `out` (`cx.bounds.len()` wide).
fn horizontal(
    src: &[u8],
    w: usize,
    c: usize,
    rows: std::ops::Range<usize>,
    cx: &Coeffs,
) -> Vec<u8> {
    match c {
        1 => horizontal_c::<1>(src, w, rows, cx),
        2 => horizontal_c::<2>(src, w, rows, cx),
        3 => horizontal_c::<3>(src, w, rows, cx),
        _ => horizontal_c::<4>(src, w, rows, cx),
    }
}

fn horizontal_c<const C: usize>(
    src: &[u8],
    w: usize,
    rows: std::ops::Range<usize>,
    cx: &Coeffs,
) -> Vec<u8> {
    let ow = cx.bounds.len();
    let mut out = Vec::with_capacity(rows.len() * ow * C);
    for y in rows {
        let row = &src[y * w * C..][..w * C];
        for (xx, &(xmin, n)) in cx.bounds.iter().enumerate() {
            let k = &cx.weights[xx * cx.ksize..][..n];
            let window = &row[xmin * C..][..n * C];
            let mut acc = [1i32 << (PRECISION_BITS - 1); C];
            for (px, &kw) in window.chunks_exact(C).zip(k) {
                for ch in 0..C {
                    acc[ch] += i32::from(px[ch]) * kw;
                }
            }
            out.extend(acc.iter().map(|&a| clip8(a)));
        }
    }
    out
}

/// Vertical pass: output row `yy` of `cy` from rows `row0 + ymin ..` of `src` (`w` wide),
/// limited to columns `cols`.
fn vertical(
    src: &[u8],
    w: usize,
    c: usize,
    row0: usize,
    cols: std::ops::Range<usize>,
    cy: &Coeffs,
) -> Vec<u8> {
    let ow = cols.len();
    let mut out = vec![0u8; cy.bounds.len() * ow * c];
    let mut acc = vec![0i32; ow * c];
    for (yy, &(ymin, n)) in cy.bounds.iter().enumerate() {
        acc.fill(1 << (PRECISION_BITS - 1));
        let k = &cy.weights[yy * cy.ksize..][..n];
        for (i, &kw) in k.iter().enumerate() {
            let row = &src[((ymin - row0) + i) * w * c..][cols.start * c..cols.end * c];
            for (a, &p) in acc.iter_mut().zip(row) {
                *a += i32::from(p) * kw;
            }
        }
        for (o, &a) in out[yy * ow * c..][..ow * c].iter_mut().zip(&acc) {
            *o = clip8(a);
        }
    }
    out
}

/// Pillow's two-pass resampling of a uint8 HWC image of `c` independent channels.
#[allow(clippy::too_many_arguments)]
fn resample(
    src: &[u8],
    h: usize,
    w: usize,
    c: usize,
    oh: usize,
    ow: usize,
    filter: Filter,
    antialias: bool,
) -> Vec<u8> {
    let cx = coefficients(w, ow, filter, antialias);
    let cy = coefficients(h, oh, filter, antialias);
    let need_h = ow != w;
    let need_v = oh != h;
    let used = |co: &Coeffs| {
        let first = co.bounds[0].0;
        let last = co.bounds.iter().map(|&(m, n)| m + n).max().unwrap_or(first);
        first..last
    };
    if need_h && need_v && vertical_first(h, w, oh, ow) {
        // Vertical pass on the columns the horizontal pass reads, then the horizontal pass.
        let xs = used(&cx);
        let tmp = vertical(src, w, c, 0, xs.clone(), &cy);
        let shifted = Coeffs {
            ksize: cx.ksize,
            bounds: cx.bounds.iter().map(|&(m, n)| (m - xs.start, n)).collect(),
            weights: cx.weights,
        };
        horizontal(&tmp, xs.len(), c, 0..oh, &shifted)
    } else if need_h && need_v {
        let ys = used(&cy);
        let tmp = horizontal(src, w, c, ys.clone(), &cx);
        vertical(&tmp, ow, c, ys.start, 0..ow, &cy)
    } else if need_h {
        horizontal(src, w, c, 0..h, &cx)
    } else {
        vertical(src, w, c, 0, 0..w, &cy)
    }
}

/// Pillow 13's choice of pass order: vertical first when the height shrinks, by more pixels than
/// twice what the width loses (Pillow 12 always starts with the horizontal pass). Checked
/// against Pillow 13.0.0 on 1,600 size combinations, boundaries included.
fn vertical_first(h: usize, w: usize, oh: usize, ow: usize) -> bool {
    oh < h && (h - oh) as i64 > 2 * (w as i64 - ow as i64)
}

/// Pillow's nearest neighbour (an affine scale): output `x` reads input
/// `floor(x0 + (x + 0.5) * in / out)`, the position accumulated in f64 as Pillow does.
fn nearest(src: &[u8], h: usize, w: usize, c: usize, oh: usize, ow: usize) -> Vec<u8> {
    fn table(in_size: usize, out_size: usize) -> Vec<usize> {
        let a = in_size as f64 / out_size as f64;
        let mut pos = a * 0.5;
        let mut t = Vec::with_capacity(out_size);
        for _ in 0..out_size {
            t.push((pos.max(0.0) as usize).min(in_size - 1));
            pos += a;
        }
        t
    }
    let xs = table(w, ow);
    let ys = table(h, oh);
    pick(src, w, c, &xs, &ys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(h: usize, w: usize, c: usize, v: Vec<u8>) -> Item {
        Item::Image(Image::new(h, w, c, Layout::Hwc, Pixels::U8(v)).unwrap())
    }

    fn run(r: &Resize, item: Item) -> (usize, usize, Vec<u8>) {
        let Item::Image(im) = r.apply(0, item).unwrap() else {
            panic!()
        };
        let (h, w) = (im.height(), im.width());
        let Pixels::U8(v) = im.into_pixels() else {
            panic!()
        };
        (h, w, v)
    }

    fn exact(h: usize, w: usize, i: Interpolation) -> Resize {
        Resize::new(
            ResizeSize::Exact {
                height: h,
                width: w,
            },
            i,
            None,
            true,
        )
        .unwrap()
    }

    #[test]
    fn sizes_like_torchvision() {
        let r = Resize::new(
            ResizeSize::Shorter(224),
            Interpolation::Bilinear,
            None,
            true,
        )
        .unwrap();
        assert_eq!(r.output_size(480, 640), (224, 298)); // int(224 * 640 / 480) = 298
        assert_eq!(r.output_size(640, 480), (298, 224));
        assert_eq!(r.output_size(100, 100), (224, 224));
        let r = Resize::new(
            ResizeSize::Shorter(224),
            Interpolation::Bilinear,
            Some(256),
            true,
        )
        .unwrap();
        // 224 x 448 -> long 448 > 256: short = int(256 * 224 / 448) = 128.
        assert_eq!(r.output_size(100, 200), (128, 256));
        assert!(
            Resize::new(
                ResizeSize::Shorter(224),
                Interpolation::Bilinear,
                Some(224),
                true
            )
            .is_err()
        );
        let err = Resize::new(
            ResizeSize::Exact {
                height: 2,
                width: 2,
            },
            Interpolation::Bilinear,
            Some(10),
            true,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("max_size is only allowed"),
            "{err}"
        );
        assert!("area".parse::<Interpolation>().is_err());
        // torchvision's nearest-exact is refused as its name is.
        let parsed = "nearest-exact".parse::<Interpolation>().unwrap_err();
        let size = ResizeSize::Shorter(2);
        let made = Resize::new(size, Interpolation::NearestExact, None, true).unwrap_err();
        assert_eq!(parsed.to_string(), made.to_string());
        assert_eq!(
            "lanczos3".parse::<Interpolation>().unwrap(),
            Interpolation::Lanczos3
        );
    }

    #[test]
    fn bilinear_weights_by_hand() {
        // 4 -> 2 bilinear: scale 2, so the support widens to 2 and the kernel is
        // 1 - |(x + 0.5 - centre) / 2|. Output 0 is centred at 1.0: its window is
        // trunc(1 - 2 + 0.5) = 0 .. trunc(1 + 2 + 0.5) = 3, inputs 0, 1, 2 at distances
        // -0.25, 0.25, 0.75 -> weights 0.75, 0.75, 0.25, normalised by their sum 1.75.
        let cx = coefficients(4, 2, Filter::pillow(Interpolation::Bilinear), true);
        assert_eq!(cx.ksize, 5);
        assert_eq!(cx.bounds, vec![(0, 3), (1, 3)]);
        let q = |w: f64| (w * f64::from(1 << 22) + 0.5) as i32;
        assert_eq!(
            &cx.weights[..3],
            &[q(0.75 / 1.75), q(0.75 / 1.75), q(0.25 / 1.75)]
        );
        // Row [0, 70, 140, 210]: (0 * .75 + 70 * .75 + 140 * .25) / 1.75 = 50;
        // output 1 (centre 3.0, inputs 1..4): (70 * .25 + 140 * .75 + 210 * .75) / 1.75 = 160.
        let (_, _, v) = run(
            &exact(1, 2, Interpolation::Bilinear),
            img(1, 4, 1, vec![0, 70, 140, 210]),
        );
        assert_eq!(v, vec![50, 160]);
    }

    #[test]
    fn constant_image_stays_constant() {
        for i in [
            Interpolation::Nearest,
            Interpolation::Bilinear,
            Interpolation::Bicubic,
            Interpolation::Lanczos3,
        ] {
            for (oh, ow) in [(3, 5), (17, 2), (40, 40), (1, 1)] {
                let (h, w, v) = run(&exact(oh, ow, i), img(9, 11, 3, vec![77; 9 * 11 * 3]));
                assert_eq!((h, w), (oh, ow));
                assert!(v.iter().all(|&x| x == 77), "{i:?} {oh}x{ow}");
            }
        }
    }

    #[test]
    fn nearest_picks_pillow_pixels() {
        // 5 -> 2: positions 1.25, 3.75 -> inputs 1, 3. 2 -> 5: 0.2, 0.6, 1.0, 1.4, 1.8 -> 0 0 1 1 1.
        let (_, _, v) = run(
            &exact(1, 2, Interpolation::Nearest),
            img(1, 5, 1, vec![0, 1, 2, 3, 4]),
        );
        assert_eq!(v, vec![1, 3]);
        let (_, _, v) = run(
            &exact(1, 5, Interpolation::Nearest),
            img(1, 2, 1, vec![10, 20]),
        );
        assert_eq!(v, vec![10, 10, 20, 20, 20]);
    }

    #[test]
    fn alpha_is_premultiplied() {
        // Transparent red next to opaque blue: premultiplied, red does not bleed into the colour.
        let (_, _, v) = run(
            &exact(1, 1, Interpolation::Bilinear),
            img(1, 2, 4, vec![255, 0, 0, 0, 0, 0, 255, 255]),
        );
        // alpha = (0 + 255) / 2 -> 128 (127.5 + rounding); blue premultiplied 255 -> 128;
        // unpremultiplied 255 * 128 / 128 = 255.
        assert_eq!(v, vec![0, 0, 255, 128]);
    }

    /// 9 x 8 grey input `(x * 37 + y * 91 + (x * y) % 7 * 20) % 256`.
    fn pattern(c: usize) -> Vec<u8> {
        let mut v = Vec::new();
        for y in 0..9u32 {
            for x in 0..8u32 {
                let l = ((x * 37 + y * 91 + (x * y) % 7 * 20) % 256) as u8;
                match c {
                    1 => v.push(l),
                    _ => v.extend([l, 255 - l, l / 2, ((x * y * 30) % 256) as u8]),
                }
            }
        }
        v
    }

    /// Expected values from Pillow 13.0.0's `Image.resize` (the 3 x 7 cases take the vertical
    /// pass first in Pillow 13: the height loses 6 pixels, the width 1).
    #[test]
    fn equals_pillow_13() {
        let cases = include_str!("../../tests/data/pillow13_resize.txt");
        let mut checked = 0;
        for line in cases.lines().filter(|l| !l.starts_with('#')) {
            let mut words = line.split_whitespace();
            let i: Interpolation = words.next().unwrap().parse().unwrap();
            let (oh, ow) = words.next().unwrap().split_once('x').unwrap();
            let (oh, ow) = (oh.parse().unwrap(), ow.parse().unwrap());
            let expected: Vec<u8> = words.map(|x| x.parse().unwrap()).collect();
            let (h, w, v) = run(&exact(oh, ow, i), img(9, 8, 1, pattern(1)));
            assert_eq!((h, w), (oh, ow));
            assert_eq!(v, expected, "{i:?} {oh}x{ow}");
            checked += 1;
        }
        // Four filters at four sizes.
        assert_eq!(checked, 16);
        let (_, _, v) = run(
            &exact(2, 3, Interpolation::Bicubic),
            img(9, 8, 4, pattern(4)),
        );
        assert_eq!(
            v,
            vec![
                150, 105, 75, 51, 111, 143, 56, 112, 148, 106, 74, 110, 137, 117, 69, 113, 150,
                104, 76, 144, 120, 134, 58, 144
            ]
        );
    }

    proptest::proptest! {
        #[test]
        fn any_size_any_filter_keeps_constants(
            h in 1usize..24, w in 1usize..24, oh in 1usize..40, ow in 1usize..40,
            c in 1usize..5, value in 0u8..=255, filter in 0usize..4, antialias: bool,
        ) {
            let i = [
                Interpolation::Nearest,
                Interpolation::Bilinear,
                Interpolation::Bicubic,
                Interpolation::Lanczos3,
            ][filter];
            let r = Resize::new(ResizeSize::Exact { height: oh, width: ow }, i, None, antialias)
                .unwrap();
            // Constant colour, opaque alpha: premultiplication round-trips exactly.
            let px: Vec<u8> = (0..c).map(|ch| if (c == 2 || c == 4) && ch == c - 1 { 255 } else { value }).collect();
            let (rh, rw, v) = run(&r, img(h, w, c, px.repeat(h * w)));
            proptest::prop_assert_eq!((rh, rw), (oh, ow));
            proptest::prop_assert_eq!(v, px.repeat(oh * ow));
        }
    }

    #[test]
    fn refuses_float() {
        let item = Item::Image(Image::new(1, 1, 1, Layout::Hwc, Pixels::F32(vec![0.0])).unwrap());
        let err = exact(2, 2, Interpolation::Bilinear)
            .apply(0, item)
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::WrongInput {
                    transform: "Resize",
                    ..
                }
            ),
            "{err}"
        );
    }
}
