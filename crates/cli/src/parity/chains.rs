//! The transform chains of `dlrs parity`, as op strings both sides read, and their Rust side.
//!
//! Ops (sizes are fractions `NUM/DEN` of the current image, at least 1):
//! `to_rgb`, `to_gray`, `resize:FILTER:NUM:DEN`, `center_crop:NUM:DEN`,
//! `pad:MODE:LEFT:TOP:RIGHT:BOTTOM`, `hflip`, `vflip`, `rot90:K`, `to_float`,
//! `normalize:imagenet`, `to_chw`. The Python script implements the same list.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use dlrs_transforms::{
    CenterCrop, Compose, Fill, HFlip, Image, Interpolation, Item, Normalize, Pad, Padding,
    PaddingMode, Pixels, Resize, ResizeSize, Rotate90, ToChw, ToFloat, ToGray, ToRgb, Transform,
    VFlip,
};

use super::npy::Array;

/// ImageNet's mean and standard deviation.
const MEAN: [f64; 3] = [0.485, 0.456, 0.406];
const STD: [f64; 3] = [0.229, 0.224, 0.225];

/// A chain: a name, its ops, and whether Rust must match Pillow/NumPy bit for bit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub name: &'static str,
    pub ops: &'static [&'static str],
    pub exact: bool,
}

/// The chains run on every image (decoding is compared separately).
pub const CHAINS: &[Chain] = &[
    Chain {
        name: "to_rgb",
        ops: &["to_rgb"],
        exact: true,
    },
    Chain {
        name: "to_gray",
        ops: &["to_gray"],
        exact: true,
    },
    Chain {
        name: "resize_nearest_up",
        ops: &["resize:nearest:3:2"],
        exact: true,
    },
    Chain {
        name: "resize_bilinear_down",
        ops: &["resize:bilinear:1:3"],
        exact: true,
    },
    Chain {
        name: "resize_bilinear_up",
        ops: &["resize:bilinear:7:4"],
        exact: true,
    },
    Chain {
        name: "resize_bicubic_down",
        ops: &["resize:bicubic:2:5"],
        exact: true,
    },
    Chain {
        name: "resize_lanczos_down",
        ops: &["resize:lanczos:3:7"],
        exact: true,
    },
    Chain {
        name: "center_crop",
        ops: &["center_crop:2:3"],
        exact: true,
    },
    Chain {
        name: "center_crop_padded",
        ops: &["center_crop:5:4"],
        exact: true,
    },
    Chain {
        name: "pad_reflect",
        ops: &["pad:reflect:3:2:1:4"],
        exact: true,
    },
    Chain {
        name: "pad_symmetric",
        ops: &["pad:symmetric:2:3:4:1"],
        exact: true,
    },
    Chain {
        name: "flips_rot90",
        ops: &["hflip", "vflip", "rot90:1"],
        exact: true,
    },
    Chain {
        name: "to_float",
        ops: &["to_float"],
        exact: true,
    },
    Chain {
        name: "to_tensor_normalize",
        ops: &["to_rgb", "to_float", "normalize:imagenet", "to_chw"],
        exact: true,
    },
    Chain {
        name: "resize_crop_normalize",
        ops: &[
            "to_rgb",
            "resize:bilinear:4:5",
            "center_crop:3:4",
            "to_float",
            "normalize:imagenet",
            "to_chw",
        ],
        exact: true,
    },
];

/// `n × num / den`, at least 1.
pub fn scaled(n: usize, num: usize, den: usize) -> usize {
    (n * num / den.max(1)).max(1)
}

fn int(s: Option<&str>, op: &str) -> Result<usize> {
    s.with_context(|| format!("op {op:?}: a value is missing"))?
        .parse()
        .with_context(|| format!("op {op:?}: a value is not an int"))
}

/// The transform of `op` for an image of `height × width`, and the size it makes.
pub fn transform(
    op: &str,
    height: usize,
    width: usize,
) -> Result<(Arc<dyn Transform>, usize, usize)> {
    let mut parts = op.split(':');
    let name = parts.next().unwrap_or_default();
    let t: (Arc<dyn Transform>, usize, usize) = match name {
        "to_rgb" => (Arc::new(ToRgb), height, width),
        "to_gray" => (Arc::new(ToGray), height, width),
        "hflip" => (Arc::new(HFlip), height, width),
        "vflip" => (Arc::new(VFlip), height, width),
        "to_float" => (Arc::new(ToFloat::new(true)), height, width),
        "to_chw" => (Arc::new(ToChw), height, width),
        "normalize" => (Arc::new(Normalize::new(&MEAN, &STD)?), height, width),
        "rot90" => {
            let k = int(parts.next(), op)?;
            let (h, w) = if k % 2 == 1 {
                (width, height)
            } else {
                (height, width)
            };
            (Arc::new(Rotate90::new(k as i64)), h, w)
        }
        "resize" => {
            let filter: Interpolation = parts.next().unwrap_or_default().parse()?;
            let (num, den) = (int(parts.next(), op)?, int(parts.next(), op)?);
            let (h, w) = (scaled(height, num, den), scaled(width, num, den));
            let size = ResizeSize::Exact {
                height: h,
                width: w,
            };
            (Arc::new(Resize::new(size, filter, None, true)?), h, w)
        }
        "center_crop" => {
            let (num, den) = (int(parts.next(), op)?, int(parts.next(), op)?);
            let (h, w) = (scaled(height, num, den), scaled(width, num, den));
            (Arc::new(CenterCrop::new(h, w)?), h, w)
        }
        "pad" => {
            let mode: PaddingMode = parts.next().unwrap_or_default().parse()?;
            let [left, top, right, bottom] = [0; 4].map(|_| int(parts.next(), op).unwrap_or(0));
            let padding = Padding::Each {
                left,
                top,
                right,
                bottom,
            };
            let pad = Pad::new(padding, Fill::default(), mode)?;
            (Arc::new(pad), height + top + bottom, width + left + right)
        }
        other => bail!("unknown op {other:?}"),
    };
    Ok(t)
}

/// Runs `ops` on `image` (through one `Compose`, so fused steps are what is checked).
pub fn run(ops: &[&str], image: Image) -> Result<Image> {
    let (mut h, mut w) = (image.height(), image.width());
    let mut steps = Vec::with_capacity(ops.len());
    for op in ops {
        let (t, nh, nw) = transform(op, h, w)?;
        steps.push(t);
        (h, w) = (nh, nw);
    }
    match Compose::new(steps).apply(0, Item::Image(image))? {
        Item::Image(im) => Ok(im),
        Item::Bytes(_) => bail!("the chain gave bytes"),
    }
}

/// An image as an array of its shape (HWC or CHW as it is laid out).
pub fn to_array(image: &Image) -> Array {
    let shape = image.shape().to_vec();
    match image.pixels() {
        Pixels::U8(v) => Array::U8 {
            shape,
            data: v.clone(),
        },
        Pixels::F32(v) => Array::F32 {
            shape,
            data: v.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlrs_transforms::Layout;

    fn image(h: usize, w: usize, c: usize) -> Image {
        Image::new(
            h,
            w,
            c,
            Layout::Hwc,
            Pixels::U8(crate::synth::pixels(h, w, c, 1)),
        )
        .unwrap()
    }

    #[test]
    fn every_chain_runs_and_its_size_is_predicted() {
        for chain in CHAINS {
            for c in 1..=4 {
                let im = image(31, 45, c);
                let out = run(chain.ops, im);
                let needs_rgb_first = chain.ops.contains(&"normalize:imagenet");
                let out = match out {
                    Ok(out) => out,
                    Err(e) => panic!("{} on {c} channels: {e}", chain.name),
                };
                let (mut h, mut w) = (31, 45);
                for op in chain.ops {
                    let (_, nh, nw) = transform(op, h, w).unwrap();
                    (h, w) = (nh, nw);
                }
                assert!(!needs_rgb_first || out.channels() == 3);
                let [a, b, _] = out.shape();
                let chw = chain.ops.contains(&"to_chw");
                let (oh, ow) = if chw {
                    (out.shape()[1], out.shape()[2])
                } else {
                    (a, b)
                };
                assert_eq!((oh, ow), (h, w), "{}", chain.name);
            }
        }
    }

    #[test]
    fn sizes_and_bad_ops() {
        assert_eq!(scaled(10, 1, 3), 3);
        assert_eq!(scaled(1, 1, 3), 1);
        assert_eq!(transform("rot90:1", 3, 5).unwrap().1, 5);
        assert_eq!(transform("pad:edge:1:2:3:4", 10, 20).unwrap().1, 16);
        assert_eq!(
            transform("nope", 1, 1).unwrap_err().to_string(),
            "unknown op \"nope\""
        );
        assert!(transform("resize:cubic:1:2", 4, 4).is_err());
        assert!(transform("center_crop:x:2", 4, 4).is_err());
    }

    #[test]
    fn arrays_keep_shape_and_type() {
        let im = image(2, 3, 1);
        let a = to_array(&im);
        assert_eq!(
            (a.shape(), a.dtype(), a.len()),
            (&[2usize, 3, 1][..], "uint8", 6)
        );
        let f = run(&["to_float", "to_chw"], image(2, 3, 3)).unwrap();
        assert_eq!(to_array(&f).shape(), &[3, 2, 3]);
        assert_eq!(to_array(&f).dtype(), "float32");
    }
}
