//! ToRgb, ToRgba, ToGray: Pillow's `convert("RGB" / "RGBA" / "L")` on uint8 HWC images.

use crate::dtype::Dtype;
use crate::image::{Image, Item, Layout, Pixels, check_size, u8_hwc};
use crate::{Error, Transform};

/// Pillow's luma: `(R * 19595 + G * 38470 + B * 7471 + 0x8000) >> 16`.
#[inline]
pub(crate) fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((u32::from(r) * 19595 + u32::from(g) * 38470 + u32::from(b) * 7471 + 0x8000) >> 16) as u8
}

fn convert(src: &[u8], from: usize, to: usize) -> Vec<u8> {
    let n = src.len() / from;
    let mut out = Vec::with_capacity(n * to);
    match (from, to) {
        (1, 3) => src.iter().for_each(|&l| out.extend_from_slice(&[l, l, l])),
        (1, 4) => src
            .iter()
            .for_each(|&l| out.extend_from_slice(&[l, l, l, 255])),
        (2, 1) => out.extend(src.chunks_exact(2).map(|p| p[0])),
        (2, 3) => src
            .chunks_exact(2)
            .for_each(|p| out.extend_from_slice(&[p[0], p[0], p[0]])),
        (2, 4) => src
            .chunks_exact(2)
            .for_each(|p| out.extend_from_slice(&[p[0], p[0], p[0], p[1]])),
        (3, 1) => out.extend(src.chunks_exact(3).map(|p| luma(p[0], p[1], p[2]))),
        (3, 4) => src
            .chunks_exact(3)
            .for_each(|p| out.extend_from_slice(&[p[0], p[1], p[2], 255])),
        (4, 1) => out.extend(src.chunks_exact(4).map(|p| luma(p[0], p[1], p[2]))),
        (4, 3) => src
            .chunks_exact(4)
            .for_each(|p| out.extend_from_slice(&p[..3])),
        _ => unreachable!("conversion {from} -> {to} channels"),
    }
    out
}

fn apply_convert(transform: &'static str, item: Item, to: usize) -> Result<Item, Error> {
    let (h, w, from, v) = u8_hwc(transform, item)?;
    // More channels, more bytes: checked before the output is allocated.
    check_size(h, w, to, Dtype::U8)?;
    let v = if from == to { v } else { convert(&v, from, to) };
    Ok(Item::Image(Image::from_parts(
        h,
        w,
        to,
        Layout::Hwc,
        Pixels::U8(v),
    )))
}

/// Pillow's `convert("RGB")`: grey replicated, alpha dropped.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToRgb;

/// Pillow's `convert("RGBA")`: alpha 255 where the image has none.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToRgba;

/// Pillow's `convert("L")`: luma with Pillow's integer weights, alpha dropped.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToGray;

impl Transform for ToRgb {
    fn apply(&self, _index: u64, item: Item) -> Result<Item, Error> {
        apply_convert("ToRgb", item, 3)
    }

    fn keeps_size(&self) -> bool {
        true
    }
}

impl Transform for ToRgba {
    fn apply(&self, _index: u64, item: Item) -> Result<Item, Error> {
        apply_convert("ToRgba", item, 4)
    }

    fn keeps_size(&self) -> bool {
        true
    }
}

impl Transform for ToGray {
    fn apply(&self, _index: u64, item: Item) -> Result<Item, Error> {
        apply_convert("ToGray", item, 1)
    }

    fn keeps_size(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(c: usize, v: Vec<u8>) -> Item {
        let n = v.len() / c;
        Item::Image(Image::new(1, n, c, Layout::Hwc, Pixels::U8(v)).unwrap())
    }

    fn run(t: &dyn Transform, item: Item) -> (usize, Vec<u8>) {
        let Item::Image(im) = t.apply(0, item).unwrap() else {
            panic!("not an image")
        };
        let c = im.channels();
        let Pixels::U8(v) = im.into_pixels() else {
            panic!("not uint8")
        };
        (c, v)
    }

    #[test]
    fn luma_uses_pillow_weights() {
        // (255*19595 + 0x8000) >> 16 = 76; (255*38470 + 0x8000) >> 16 = 150; blue 29.
        assert_eq!(luma(255, 0, 0), 76);
        assert_eq!(luma(0, 255, 0), 150);
        assert_eq!(luma(0, 0, 255), 29);
        assert_eq!(luma(255, 255, 255), 255);
        // 10*19595 + 20*38470 + 30*7471 + 32768 = 1222248 -> 18.
        assert_eq!(luma(10, 20, 30), 18);
    }

    #[test]
    fn conversions() {
        assert_eq!(run(&ToRgb, img(1, vec![7, 9])), (3, vec![7, 7, 7, 9, 9, 9]));
        assert_eq!(run(&ToRgb, img(2, vec![7, 1])), (3, vec![7, 7, 7]));
        assert_eq!(run(&ToRgb, img(4, vec![1, 2, 3, 4])), (3, vec![1, 2, 3]));
        assert_eq!(run(&ToRgb, img(3, vec![1, 2, 3])), (3, vec![1, 2, 3]));
        assert_eq!(run(&ToRgba, img(1, vec![7])), (4, vec![7, 7, 7, 255]));
        assert_eq!(run(&ToRgba, img(2, vec![7, 3])), (4, vec![7, 7, 7, 3]));
        assert_eq!(run(&ToRgba, img(3, vec![1, 2, 3])), (4, vec![1, 2, 3, 255]));
        assert_eq!(run(&ToGray, img(3, vec![10, 20, 30])), (1, vec![18]));
        assert_eq!(run(&ToGray, img(4, vec![10, 20, 30, 0])), (1, vec![18]));
        assert_eq!(run(&ToGray, img(2, vec![10, 20])), (1, vec![10]));
    }

    #[test]
    fn refuses_float_and_bytes() {
        let f = Item::Image(Image::new(1, 1, 3, Layout::Hwc, Pixels::F32(vec![0.0; 3])).unwrap());
        let err = ToGray.apply(0, f).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ToGray expects a uint8 HWC image (apply it before ToFloat and ToChw), got a float32 HWC image of 1x1x3"
        );
        let err = ToRgb.apply(0, Item::from(vec![1u8])).unwrap_err();
        assert!(matches!(
            err,
            Error::WrongInput {
                transform: "ToRgb",
                ..
            }
        ));
    }
}
