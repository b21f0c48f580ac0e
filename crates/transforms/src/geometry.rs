//! Crops, padding, flips and quarter turns, on either dtype and either layout.

use crate::error::from_names;
use crate::image::{Image, Item, Layout, Pixels, check_size};
use crate::{Error, Transform};

/// A value type of images, for the generic geometry kernels.
pub(crate) trait Elem: Copy + Default + Send + Sync + 'static {
    /// The fill value `v` in this type, or why it cannot be one.
    fn from_fill(v: f64) -> Result<Self, String>;
}

impl Elem for u8 {
    fn from_fill(v: f64) -> Result<u8, String> {
        if v.fract() == 0.0 && (0.0..=255.0).contains(&v) {
            Ok(v as u8)
        } else {
            Err(format!(
                "fill {v} is not an integer from 0 to 255 for a uint8 image"
            ))
        }
    }
}

impl Elem for f32 {
    fn from_fill(v: f64) -> Result<f32, String> {
        Ok(v as f32)
    }
}

/// The value of padded pixels: one for every channel, or one per channel.
#[derive(Debug, Clone, PartialEq)]
pub enum Fill {
    /// The same value for every channel.
    Value(f64),
    /// One value per channel (one value: every channel).
    PerChannel(Vec<f64>),
}

impl Default for Fill {
    fn default() -> Self {
        Fill::Value(0.0)
    }
}

impl From<f64> for Fill {
    fn from(v: f64) -> Fill {
        Fill::Value(v)
    }
}

impl From<Vec<f64>> for Fill {
    fn from(v: Vec<f64>) -> Fill {
        Fill::PerChannel(v)
    }
}

impl Fill {
    fn resolve<T: Elem>(&self, transform: &'static str, channels: usize) -> Result<Vec<T>, Error> {
        let values: Vec<f64> = match self {
            Fill::Value(v) => vec![*v; channels],
            Fill::PerChannel(v) if v.len() == 1 => vec![v[0]; channels],
            Fill::PerChannel(v) if v.len() == channels => v.clone(),
            Fill::PerChannel(v) => {
                return Err(Error::arg(
                    transform,
                    format!(
                        "fill has {} values for an image of {channels} channels",
                        v.len()
                    ),
                ));
            }
        };
        values
            .into_iter()
            .map(|v| T::from_fill(v).map_err(|r| Error::arg(transform, r)))
            .collect()
    }
}

/// How pixels outside the image are made: torchvision's `padding_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PaddingMode {
    /// The fill value.
    #[default]
    Constant,
    /// The nearest edge pixel.
    Edge,
    /// Mirrored without repeating the edge (numpy's "reflect").
    Reflect,
    /// Mirrored repeating the edge (numpy's "symmetric").
    Symmetric,
}

from_names!(PaddingMode, "Pad", {
    "constant" => Constant,
    "edge" => Edge,
    "reflect" => Reflect,
    "symmetric" => Symmetric,
}, other => format!("padding_mode {other:?} is not one of constant, edge, reflect, symmetric"));

/// The source index of output index `i` (which may be outside `0..n`) for a non-constant mode.
fn map_index(mode: PaddingMode, i: i64, n: usize) -> usize {
    let n = n as i64;
    let j = match mode {
        PaddingMode::Constant | PaddingMode::Edge => i.clamp(0, n - 1),
        PaddingMode::Reflect if n == 1 => 0,
        PaddingMode::Reflect => {
            let period = 2 * (n - 1);
            let m = i.rem_euclid(period);
            if m >= n { period - m } else { m }
        }
        PaddingMode::Symmetric => {
            let m = i.rem_euclid(2 * n);
            if m >= n { 2 * n - 1 - m } else { m }
        }
    };
    j as usize
}

/// Output `(y, x)` is input `(y + top, x + left)`; outside the input, `mode` decides.
#[derive(Debug, Clone)]
pub(crate) struct Window {
    pub(crate) top: i64,
    pub(crate) left: i64,
    pub(crate) height: usize,
    pub(crate) width: usize,
    pub(crate) mode: PaddingMode,
}

impl Window {
    /// `height × width` pixels from `(top, left)`; what is outside the image is the fill.
    pub(crate) fn constant(top: i64, left: i64, height: usize, width: usize) -> Window {
        Window {
            top,
            left,
            height,
            width,
            mode: PaddingMode::Constant,
        }
    }

    /// One plane of `h × w` pixels of `px` values each; `fill` has `px` values.
    fn run<T: Elem>(&self, src: &[T], h: usize, w: usize, px: usize, fill: &[T], out: &mut Vec<T>) {
        let (oh, ow) = (self.height, self.width);
        // Output columns [x0, x1) come from inside the input.
        let x0 = (-self.left).clamp(0, ow as i64) as usize;
        let x1 = (w as i64 - self.left).clamp(x0 as i64, ow as i64) as usize;
        let src_x0 = (x0 as i64 + self.left).max(0) as usize;
        let cols: Vec<usize> = if self.mode == PaddingMode::Constant {
            Vec::new()
        } else {
            (0..ow)
                .map(|x| map_index(self.mode, x as i64 + self.left, w))
                .collect()
        };
        for y in 0..oh {
            let sy = y as i64 + self.top;
            let row = if self.mode == PaddingMode::Constant {
                if sy < 0 || sy >= h as i64 {
                    for _ in 0..ow {
                        out.extend_from_slice(fill);
                    }
                    continue;
                }
                &src[sy as usize * w * px..][..w * px]
            } else {
                &src[map_index(self.mode, sy, h) * w * px..][..w * px]
            };
            if self.mode == PaddingMode::Constant {
                for _ in 0..x0 {
                    out.extend_from_slice(fill);
                }
            } else {
                for &sx in &cols[..x0] {
                    out.extend_from_slice(&row[sx * px..][..px]);
                }
            }
            // A window entirely right of the image has no inside columns (and src_x0 ≥ w).
            if x1 > x0 {
                out.extend_from_slice(&row[src_x0 * px..][..(x1 - x0) * px]);
            }
            if self.mode == PaddingMode::Constant {
                for _ in x1..ow {
                    out.extend_from_slice(fill);
                }
            } else {
                for &sx in &cols[x1..] {
                    out.extend_from_slice(&row[sx * px..][..px]);
                }
            }
        }
    }
}

/// The image's planes: one plane of `c`-value pixels (HWC) or `c` planes of 1-value pixels (CHW).
fn planes(im: &Image) -> (usize, usize) {
    match im.layout() {
        Layout::Hwc => (1, im.channels()),
        Layout::Chw => (im.channels(), 1),
    }
}

pub(crate) fn apply_window(
    transform: &'static str,
    im: Image,
    win: &Window,
    fill: &Fill,
) -> Result<Image, Error> {
    let (h, w, c, layout) = (im.height(), im.width(), im.channels(), im.layout());
    if win.height == h && win.width == w && win.top == 0 && win.left == 0 {
        return Ok(im);
    }
    check_size(win.height, win.width, c, im.dtype())?;
    let (n_planes, px) = planes(&im);
    fn run_all<T: Elem>(
        transform: &'static str,
        v: &[T],
        win: &Window,
        fill: &Fill,
        (h, w, c): (usize, usize, usize),
        (n_planes, px): (usize, usize),
    ) -> Result<Vec<T>, Error> {
        let fill: Vec<T> = fill.resolve(transform, c)?;
        let mut out = Vec::with_capacity(win.height * win.width * c);
        for (p, plane) in v.chunks_exact(h * w * px).enumerate().take(n_planes) {
            let f = if n_planes == 1 {
                &fill[..]
            } else {
                &fill[p..p + 1]
            };
            win.run(plane, h, w, px, f, &mut out);
        }
        Ok(out)
    }
    let pixels = match im.pixels() {
        Pixels::U8(v) => Pixels::U8(run_all(transform, v, win, fill, (h, w, c), (n_planes, px))?),
        Pixels::F32(v) => Pixels::F32(run_all(transform, v, win, fill, (h, w, c), (n_planes, px))?),
    };
    Ok(Image::from_parts(win.height, win.width, c, layout, pixels))
}

/// A width and a height, named so neither can take the other's place: the transforms' own
/// argument orders differ (`PadTo::new(width, height, ..)`, `Crop::new(top, left, height,
/// width)`, after the torchvision functions they follow).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Size {
    /// Pixels across.
    pub width: usize,
    /// Pixels down.
    pub height: usize,
}

impl Size {
    /// `side × side`.
    #[must_use]
    pub fn square(side: usize) -> Size {
        Size {
            width: side,
            height: side,
        }
    }
}

/// torchvision's `F.crop(top, left, height, width)`: the region may extend outside the image,
/// where it is 0.
#[derive(Debug, Clone)]
pub struct Crop {
    top: i64,
    left: i64,
    height: usize,
    width: usize,
}

impl Crop {
    /// torchvision's argument order: row `top`, column `left` of the top-left corner, then
    /// `height` and `width` ([`Crop::with_size`] names the sides).
    ///
    /// # Errors
    /// An offset beyond ±2^31 or a side of 0.
    pub fn new(top: i64, left: i64, height: usize, width: usize) -> Result<Crop, Error> {
        const FAR: u64 = 1 << 31;
        if top.unsigned_abs() > FAR || left.unsigned_abs() > FAR {
            return Err(Error::arg(
                "Crop",
                format!("top {top} or left {left} is beyond ±2^31"),
            ));
        }
        if height == 0 || width == 0 {
            return Err(Error::arg(
                "Crop",
                format!("height and width must be at least 1, got {height}x{width}"),
            ));
        }
        Ok(Crop {
            top,
            left,
            height,
            width,
        })
    }

    /// The region of `size` whose top-left corner is at row `top`, column `left`.
    ///
    /// # Errors
    /// An offset beyond ±2^31 or an empty size.
    pub fn with_size(top: i64, left: i64, size: Size) -> Result<Crop, Error> {
        Crop::new(top, left, size.height, size.width)
    }

    /// The size of the crop.
    #[must_use]
    pub fn size(&self) -> Size {
        Size {
            width: self.width,
            height: self.height,
        }
    }

    /// The crop of `im`; pixels of the region outside it are 0.
    ///
    /// # Errors
    /// The output would exceed the image limits.
    pub fn crop(&self, im: Image) -> Result<Image, Error> {
        let win = Window::constant(self.top, self.left, self.height, self.width);
        apply_window("Crop", im, &win, &Fill::default())
    }
}

impl Transform for Crop {
    fn apply(&self, _index: u64, item: Item) -> Result<Item, Error> {
        Ok(Item::Image(self.crop(item.into_image("Crop")?)?))
    }
}

/// Python's `round(x / 2)` of an integer `x` (half to even).
fn half_round_even(x: i64) -> i64 {
    let q = x.div_euclid(2);
    if x.rem_euclid(2) == 0 || q % 2 == 0 {
        q
    } else {
        q + 1
    }
}

/// torchvision's `CenterCrop(size)`: the offset rounded half to even like Python's `round`;
/// an image smaller than `size` is first padded with 0 (the extra pixel right and bottom).
#[derive(Debug, Clone)]
pub struct CenterCrop {
    height: usize,
    width: usize,
}

impl CenterCrop {
    /// `CenterCrop((height, width))`; `CenterCrop(size)` is `new(size, size)`.
    pub fn new(height: usize, width: usize) -> Result<CenterCrop, Error> {
        if height == 0 || width == 0 {
            return Err(Error::arg(
                "CenterCrop",
                format!("size must be at least 1, got {height}x{width}"),
            ));
        }
        Ok(CenterCrop { height, width })
    }

    /// A centre crop of `size`.
    ///
    /// # Errors
    /// An empty size.
    pub fn with_size(size: Size) -> Result<CenterCrop, Error> {
        CenterCrop::new(size.height, size.width)
    }

    /// The size of the crop.
    #[must_use]
    pub fn size(&self) -> Size {
        Size {
            width: self.width,
            height: self.height,
        }
    }

    fn offset(size: usize, crop: usize) -> i64 {
        if crop > size {
            -(((crop - size) / 2) as i64)
        } else {
            half_round_even((size - crop) as i64)
        }
    }

    /// The centre crop of `im`.
    ///
    /// # Errors
    /// The output would exceed the image limits.
    pub fn crop(&self, im: Image) -> Result<Image, Error> {
        let top = Self::offset(im.height(), self.height);
        let left = Self::offset(im.width(), self.width);
        let win = Window::constant(top, left, self.height, self.width);
        apply_window("CenterCrop", im, &win, &Fill::default())
    }
}

impl Transform for CenterCrop {
    fn apply(&self, _index: u64, item: Item) -> Result<Item, Error> {
        Ok(Item::Image(self.crop(item.into_image("CenterCrop")?)?))
    }
}

/// torchvision's padding argument: one int for all sides, a pair (left/right, top/bottom),
/// or four values (left, top, right, bottom).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// The same padding on every side.
    All(usize),
    /// (left and right, top and bottom).
    Pair(usize, usize),
    /// Each side on its own.
    Each {
        /// Columns added on the left.
        left: usize,
        /// Rows added on top.
        top: usize,
        /// Columns added on the right.
        right: usize,
        /// Rows added at the bottom.
        bottom: usize,
    },
}

impl Padding {
    /// (left, top, right, bottom).
    pub fn ltrb(self) -> [usize; 4] {
        match self {
            Padding::All(p) => [p; 4],
            Padding::Pair(lr, tb) => [lr, tb, lr, tb],
            Padding::Each {
                left,
                top,
                right,
                bottom,
            } => [left, top, right, bottom],
        }
    }
}

/// torchvision's `Pad(padding, fill=0, padding_mode="constant")`.
#[derive(Debug, Clone)]
pub struct Pad {
    ltrb: [usize; 4],
    fill: Fill,
    mode: PaddingMode,
}

impl Pad {
    /// Padding of `padding` pixels made by `mode` (`fill` for [`PaddingMode::Constant`]).
    ///
    /// # Errors
    /// A side's padding above [`crate::MAX_SIDE`].
    pub fn new(padding: Padding, fill: Fill, mode: PaddingMode) -> Result<Pad, Error> {
        let ltrb = padding.ltrb();
        if ltrb.iter().any(|&p| p > crate::MAX_SIDE) {
            return Err(Error::arg(
                "Pad",
                format!("padding {ltrb:?} exceeds {}", crate::MAX_SIDE),
            ));
        }
        Ok(Pad { ltrb, fill, mode })
    }

    /// `im` with the padding.
    ///
    /// # Errors
    /// A fill that does not fit the image's channels or dtype, or an output beyond the limits.
    pub fn pad(&self, im: Image) -> Result<Image, Error> {
        let [l, t, r, b] = self.ltrb;
        let win = Window {
            top: -(t as i64),
            left: -(l as i64),
            height: im.height() + t + b,
            width: im.width() + l + r,
            mode: self.mode,
        };
        apply_window("Pad", im, &win, &self.fill)
    }
}

impl Transform for Pad {
    fn apply(&self, _index: u64, item: Item) -> Result<Item, Error> {
        Ok(Item::Image(self.pad(item.into_image("Pad")?)?))
    }
}

/// Where `PadTo` puts the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Anchor {
    /// Padding at the right and bottom only.
    #[default]
    TopLeft,
    /// Even padding on all sides (the extra pixel right and bottom).
    Center,
}

from_names!(Anchor, "PadTo", {
    "top_left" => TopLeft,
    "center" => Center,
}, other => format!("anchor {other:?} is not \"top_left\" or \"center\""));

/// `PadTo(width, height, fill=0, anchor="top_left")`: pads up to at least `width × height`;
/// never crops.
#[derive(Debug, Clone)]
pub struct PadTo {
    width: usize,
    height: usize,
    fill: Fill,
    anchor: Anchor,
}

impl PadTo {
    /// Pads up to at least `width × height` (width first, unlike [`Crop::new`];
    /// [`PadTo::with_size`] names the sides).
    ///
    /// # Errors
    /// A side of 0 or above [`crate::MAX_SIDE`].
    pub fn new(width: usize, height: usize, fill: Fill, anchor: Anchor) -> Result<PadTo, Error> {
        if width == 0 || height == 0 || width > crate::MAX_SIDE || height > crate::MAX_SIDE {
            return Err(Error::arg(
                "PadTo",
                format!(
                    "width and height must be between 1 and {}, got {width}x{height}",
                    crate::MAX_SIDE
                ),
            ));
        }
        Ok(PadTo {
            width,
            height,
            fill,
            anchor,
        })
    }

    /// Pads up to at least `size`.
    ///
    /// # Errors
    /// A side of 0 or above [`crate::MAX_SIDE`].
    pub fn with_size(size: Size, fill: Fill, anchor: Anchor) -> Result<PadTo, Error> {
        PadTo::new(size.width, size.height, fill, anchor)
    }

    /// The least size of the output.
    #[must_use]
    pub fn size(&self) -> Size {
        Size {
            width: self.width,
            height: self.height,
        }
    }

    /// `im` padded up to the size; an image already as large is returned as it is.
    ///
    /// # Errors
    /// A fill that does not fit the image's channels or dtype, or an output beyond the limits.
    pub fn pad(&self, im: Image) -> Result<Image, Error> {
        let (dh, dw) = (
            self.height.saturating_sub(im.height()),
            self.width.saturating_sub(im.width()),
        );
        let (top, left) = match self.anchor {
            Anchor::TopLeft => (0, 0),
            Anchor::Center => ((dh / 2) as i64, (dw / 2) as i64),
        };
        let win = Window::constant(-top, -left, im.height() + dh, im.width() + dw);
        apply_window("PadTo", im, &win, &self.fill)
    }
}

impl Transform for PadTo {
    fn apply(&self, _index: u64, item: Item) -> Result<Item, Error> {
        Ok(Item::Image(self.pad(item.into_image("PadTo")?)?))
    }
}

/// Rearranges pixels: output pixel `(y, x)` of an `oh × ow` plane takes input pixel `f(y, x)`.
fn remap(im: Image, oh: usize, ow: usize, f: impl Fn(usize, usize) -> (usize, usize)) -> Image {
    let (h, w, c, layout) = (im.height(), im.width(), im.channels(), im.layout());
    let (n_planes, px) = planes(&im);
    fn run<T: Elem>(
        v: &[T],
        (h, w, px, n_planes): (usize, usize, usize, usize),
        (oh, ow): (usize, usize),
        f: &dyn Fn(usize, usize) -> (usize, usize),
    ) -> Vec<T> {
        let mut out = Vec::with_capacity(v.len());
        for plane in v.chunks_exact(h * w * px).take(n_planes) {
            for y in 0..oh {
                for x in 0..ow {
                    let (sy, sx) = f(y, x);
                    out.extend_from_slice(&plane[(sy * w + sx) * px..][..px]);
                }
            }
        }
        out
    }
    let dims = (h, w, px, n_planes);
    let pixels = match im.pixels() {
        Pixels::U8(v) => Pixels::U8(run(v, dims, (oh, ow), &f)),
        Pixels::F32(v) => Pixels::F32(run(v, dims, (oh, ow), &f)),
    };
    Image::from_parts(oh, ow, c, layout, pixels)
}

/// torchvision's `F.hflip`: mirror left to right.
#[derive(Debug, Clone, Copy, Default)]
pub struct HFlip;

/// torchvision's `F.vflip`: mirror top to bottom.
#[derive(Debug, Clone, Copy, Default)]
pub struct VFlip;

/// Applies `f` to each row (of `w` pixels of `px` values) of every plane, writing a new buffer.
fn map_rows(
    im: Image,
    f: impl Fn(&[u8], &mut [u8], usize) + Copy,
    g: impl Fn(&[f32], &mut [f32], usize) + Copy,
    rows_reversed: bool,
) -> Image {
    let (h, w, c, layout) = (im.height(), im.width(), im.channels(), im.layout());
    let (_, px) = planes(&im);
    fn run<T: Elem>(
        v: &[T],
        h: usize,
        row: usize,
        px: usize,
        rev: bool,
        f: impl Fn(&[T], &mut [T], usize),
    ) -> Vec<T> {
        let mut out = vec![T::default(); v.len()];
        for (src_plane, dst_plane) in v.chunks_exact(h * row).zip(out.chunks_exact_mut(h * row)) {
            for (y, dst) in dst_plane.chunks_exact_mut(row).enumerate() {
                let sy = if rev { h - 1 - y } else { y };
                f(&src_plane[sy * row..][..row], dst, px);
            }
        }
        out
    }
    let row = w * px;
    let pixels = match im.pixels() {
        Pixels::U8(v) => Pixels::U8(run(v, h, row, px, rows_reversed, f)),
        Pixels::F32(v) => Pixels::F32(run(v, h, row, px, rows_reversed, g)),
    };
    Image::from_parts(h, w, c, layout, pixels)
}

fn reverse_pixels<T: Copy>(src: &[T], dst: &mut [T], px: usize) {
    for (d, s) in dst.chunks_exact_mut(px).zip(src.chunks_exact(px).rev()) {
        d.copy_from_slice(s);
    }
}

fn copy_row<T: Copy>(src: &[T], dst: &mut [T], _px: usize) {
    dst.copy_from_slice(src);
}

impl HFlip {
    /// `im` mirrored left to right.
    pub fn flip(&self, im: Image) -> Image {
        map_rows(im, reverse_pixels::<u8>, reverse_pixels::<f32>, false)
    }
}

impl VFlip {
    /// `im` mirrored top to bottom.
    pub fn flip(&self, im: Image) -> Image {
        map_rows(im, copy_row::<u8>, copy_row::<f32>, true)
    }
}

impl Transform for HFlip {
    fn apply(&self, _index: u64, item: Item) -> Result<Item, Error> {
        Ok(Item::Image(self.flip(item.into_image("HFlip")?)))
    }
}

impl Transform for VFlip {
    fn apply(&self, _index: u64, item: Item) -> Result<Item, Error> {
        Ok(Item::Image(self.flip(item.into_image("VFlip")?)))
    }
}

/// `numpy.rot90(image, k)`: `k` quarter turns counter-clockwise (negative: clockwise).
#[derive(Debug, Clone, Copy)]
pub struct Rotate90 {
    k: i64,
}

impl Default for Rotate90 {
    fn default() -> Self {
        Rotate90 { k: 1 }
    }
}

impl Rotate90 {
    /// `k` quarter turns counter-clockwise (negative: clockwise).
    pub fn new(k: i64) -> Rotate90 {
        Rotate90 { k }
    }

    /// `im` turned.
    pub fn rotate(&self, im: Image) -> Image {
        let (h, w) = (im.height(), im.width());
        match self.k.rem_euclid(4) {
            0 => im,
            1 => remap(im, w, h, |y, x| (x, w - 1 - y)),
            2 => remap(im, h, w, |y, x| (h - 1 - y, w - 1 - x)),
            _ => remap(im, w, h, |y, x| (h - 1 - x, y)),
        }
    }
}

impl Transform for Rotate90 {
    fn apply(&self, _index: u64, item: Item) -> Result<Item, Error> {
        Ok(Item::Image(self.rotate(item.into_image("Rotate90")?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn u8img(h: usize, w: usize, c: usize, v: Vec<u8>) -> Image {
        Image::new(h, w, c, Layout::Hwc, Pixels::U8(v)).unwrap()
    }

    fn values(im: &Image) -> Vec<u8> {
        match im.pixels() {
            Pixels::U8(v) => v.clone(),
            Pixels::F32(v) => v.iter().map(|&x| x as u8).collect(),
        }
    }

    /// A 3x4 grey image with values 1..=12, row by row.
    fn grid() -> Image {
        u8img(3, 4, 1, (1..=12).collect())
    }

    #[test]
    fn a_named_size_means_the_same_crop_and_padding_as_the_positional_arguments() {
        // 1 row down, 3 columns across: a swapped width and height would differ.
        let size = Size {
            width: 3,
            height: 1,
        };
        let crop = Crop::with_size(1, 0, size).unwrap();
        assert_eq!(crop.size(), size);
        let im = crop.crop(grid()).unwrap();
        assert_eq!((im.height(), im.width()), (1, 3));
        assert_eq!(
            values(&im),
            values(&Crop::new(1, 0, 1, 3).unwrap().crop(grid()).unwrap())
        );
        let centre = CenterCrop::with_size(size).unwrap();
        assert_eq!(centre.size(), size);
        let im = centre.crop(grid()).unwrap();
        assert_eq!((im.height(), im.width()), (1, 3));
        let wide = Size {
            width: 6,
            height: 3,
        };
        let pad = PadTo::with_size(wide, Fill::default(), Anchor::TopLeft).unwrap();
        assert_eq!(pad.size(), wide);
        let im = pad.pad(grid()).unwrap();
        assert_eq!((im.height(), im.width()), (3, 6));
        assert!(Crop::with_size(0, 0, Size::square(0)).is_err());
        assert_eq!(
            crate::ResizeSize::from(size),
            crate::ResizeSize::Exact {
                height: 1,
                width: 3
            }
        );
    }

    #[test]
    fn crop_inside_and_outside() {
        let im = Crop::new(1, 1, 2, 2).unwrap().crop(grid()).unwrap();
        assert_eq!(values(&im), vec![6, 7, 10, 11]);
        let im = Crop::new(-1, 3, 2, 2).unwrap().crop(grid()).unwrap();
        assert_eq!(values(&im), vec![0, 0, 4, 0]);
        assert!(Crop::new(0, 0, 0, 1).is_err());
        assert!(Crop::new(i64::MIN, 0, 1, 1).is_err());
        // Far outside: all zeros.
        let im = Crop::new(-(1 << 31), 1 << 31, 1, 2)
            .unwrap()
            .crop(grid())
            .unwrap();
        assert_eq!(values(&im), vec![0, 0]);
        // A window starting right of the image, inside it vertically: zeros, not a panic.
        let im = Crop::new(1, 5, 2, 3).unwrap().crop(grid()).unwrap();
        assert_eq!(values(&im), vec![0; 6]);
        // Right of the image with edge padding repeats the last column.
        let pad = Pad::new(
            Padding::Each {
                left: 0,
                top: 0,
                right: 3,
                bottom: 0,
            },
            Fill::default(),
            PaddingMode::Edge,
        )
        .unwrap()
        .pad(grid())
        .unwrap();
        assert_eq!(values(&pad)[..7], [1, 2, 3, 4, 4, 4, 4]);
    }

    #[test]
    fn center_crop_rounds_half_to_even() {
        assert_eq!(half_round_even(1), 0); // round(0.5) == 0
        assert_eq!(half_round_even(3), 2); // round(1.5) == 2
        assert_eq!(half_round_even(5), 2); // round(2.5) == 2
        assert_eq!(half_round_even(4), 2);
        // width 4 -> 1: offset round(1.5) = 2; height 3 -> 2: offset round(0.5) = 0.
        let im = CenterCrop::new(2, 1).unwrap().crop(grid()).unwrap();
        assert_eq!(values(&im), vec![3, 7]);
        // Larger than the image: padded (1 left, 2 right; 0 top, 1 bottom), like torchvision.
        let im = CenterCrop::new(4, 7).unwrap().crop(grid()).unwrap();
        assert_eq!(
            values(&im),
            vec![
                0, 1, 2, 3, 4, 0, 0, 0, 5, 6, 7, 8, 0, 0, 0, 9, 10, 11, 12, 0, 0, 0, 0, 0, 0, 0, 0,
                0
            ]
        );
    }

    #[test]
    fn pad_modes_match_numpy() {
        // Row [1, 2, 3, 4] padded by 3 on the left, 2 on the right (numpy.pad results).
        let row = u8img(1, 4, 1, vec![1, 2, 3, 4]);
        let pad = |mode| {
            let p = Pad::new(
                Padding::Each {
                    left: 3,
                    top: 0,
                    right: 2,
                    bottom: 0,
                },
                Fill::Value(9.0),
                mode,
            )
            .unwrap();
            values(&p.pad(row.clone()).unwrap())
        };
        assert_eq!(pad(PaddingMode::Constant), vec![9, 9, 9, 1, 2, 3, 4, 9, 9]);
        assert_eq!(pad(PaddingMode::Edge), vec![1, 1, 1, 1, 2, 3, 4, 4, 4]);
        assert_eq!(pad(PaddingMode::Reflect), vec![4, 3, 2, 1, 2, 3, 4, 3, 2]);
        assert_eq!(pad(PaddingMode::Symmetric), vec![3, 2, 1, 1, 2, 3, 4, 4, 3]);
    }

    #[test]
    fn pad_larger_than_the_image_repeats_the_mirror() {
        // numpy.pad([1, 2, 3], 5, "reflect") = [2 1 2 3 2 1 2 3 2 1 2 3 2]
        let row = u8img(1, 3, 1, vec![1, 2, 3]);
        let p = Pad::new(Padding::Pair(5, 0), Fill::default(), PaddingMode::Reflect).unwrap();
        assert_eq!(
            values(&p.pad(row.clone()).unwrap()),
            vec![2, 1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2]
        );
        // numpy.pad([1, 2, 3], 5, "symmetric") = [2 3 3 2 1 1 2 3 3 2 1 1 2]
        let p = Pad::new(Padding::Pair(5, 0), Fill::default(), PaddingMode::Symmetric).unwrap();
        assert_eq!(
            values(&p.pad(row).unwrap()),
            vec![2, 3, 3, 2, 1, 1, 2, 3, 3, 2, 1, 1, 2]
        );
    }

    #[test]
    fn pad_per_channel_fill_and_chw() {
        let rgb = u8img(1, 1, 3, vec![1, 2, 3]);
        let p = Pad::new(
            Padding::Pair(1, 0),
            Fill::PerChannel(vec![7.0, 8.0, 9.0]),
            PaddingMode::Constant,
        )
        .unwrap();
        assert_eq!(
            values(&p.pad(rgb.clone()).unwrap()),
            vec![7, 8, 9, 1, 2, 3, 7, 8, 9]
        );
        let chw = p.pad(rgb.clone().into_layout(Layout::Chw)).unwrap();
        assert_eq!(chw.layout(), Layout::Chw);
        assert_eq!(values(&chw), vec![7, 1, 7, 8, 2, 8, 9, 3, 9]);
        let err = Pad::new(Padding::All(1), Fill::Value(0.5), PaddingMode::Constant)
            .unwrap()
            .pad(rgb.clone())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Pad: invalid argument: fill 0.5 is not an integer from 0 to 255 for a uint8 image"
        );
        let err = Pad::new(
            Padding::All(1),
            Fill::PerChannel(vec![1.0, 2.0]),
            PaddingMode::Constant,
        )
        .unwrap()
        .pad(rgb)
        .unwrap_err();
        assert!(err.to_string().contains("fill has 2 values"), "{err}");
        assert!("wrap".parse::<PaddingMode>().is_err());
    }

    #[test]
    fn pad_to_right_bottom_or_center_and_never_crops() {
        let im = PadTo::new(5, 4, Fill::default(), Anchor::TopLeft)
            .unwrap()
            .pad(grid())
            .unwrap();
        assert_eq!((im.height(), im.width()), (4, 5));
        assert_eq!(
            values(&im),
            vec![
                1, 2, 3, 4, 0, 5, 6, 7, 8, 0, 9, 10, 11, 12, 0, 0, 0, 0, 0, 0
            ]
        );
        let im = PadTo::new(7, 3, Fill::Value(1.0), Anchor::Center)
            .unwrap()
            .pad(grid())
            .unwrap();
        assert_eq!(&values(&im)[..7], &[1, 1, 2, 3, 4, 1, 1]);
        let im = PadTo::new(2, 2, Fill::default(), Anchor::TopLeft)
            .unwrap()
            .pad(grid())
            .unwrap();
        assert_eq!((im.height(), im.width()), (3, 4));
    }

    #[test]
    fn flips_and_rotations() {
        assert_eq!(
            values(&HFlip.flip(grid())),
            vec![4, 3, 2, 1, 8, 7, 6, 5, 12, 11, 10, 9]
        );
        assert_eq!(
            values(&VFlip.flip(grid())),
            vec![9, 10, 11, 12, 5, 6, 7, 8, 1, 2, 3, 4]
        );
        // numpy.rot90(arange(1, 13).reshape(3, 4)) = [[4 8 12] [3 7 11] [2 6 10] [1 5 9]]
        let r = Rotate90::new(1).rotate(grid());
        assert_eq!((r.height(), r.width()), (4, 3));
        assert_eq!(values(&r), vec![4, 8, 12, 3, 7, 11, 2, 6, 10, 1, 5, 9]);
        // k = -1 (= 3): [[9 5 1] [10 6 2] [11 7 3] [12 8 4]]
        assert_eq!(
            values(&Rotate90::new(-1).rotate(grid())),
            vec![9, 5, 1, 10, 6, 2, 11, 7, 3, 12, 8, 4]
        );
        assert_eq!(
            values(&Rotate90::new(2).rotate(grid())),
            values(&HFlip.flip(VFlip.flip(grid())))
        );
    }

    fn any_image() -> impl Strategy<Value = Image> {
        (
            1usize..7,
            1usize..7,
            1usize..5,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_flat_map(|(h, w, c, float, chw)| {
                proptest::collection::vec(any::<u8>(), h * w * c).prop_map(move |v| {
                    let px = if float {
                        Pixels::F32(v.iter().map(|&x| f32::from(x) * 0.5).collect())
                    } else {
                        Pixels::U8(v)
                    };
                    let layout = if chw { Layout::Chw } else { Layout::Hwc };
                    Image::new(h, w, c, layout, px).unwrap()
                })
            })
    }

    proptest! {
        #[test]
        fn flips_and_rotations_round_trip(im in any_image(), k in -5i64..6) {
            prop_assert_eq!(&HFlip.flip(HFlip.flip(im.clone())), &im);
            prop_assert_eq!(&VFlip.flip(VFlip.flip(im.clone())), &im);
            let there = Rotate90::new(k).rotate(im.clone());
            prop_assert_eq!(&Rotate90::new(-k).rotate(there.clone()), &im);
            if k.rem_euclid(2) == 1 {
                prop_assert_eq!((there.height(), there.width()), (im.width(), im.height()));
            }
            let four = (0..4).fold(im.clone(), |acc, _| Rotate90::new(1).rotate(acc));
            prop_assert_eq!(&four, &im);
        }

        #[test]
        fn pad_to_then_crop_returns_the_original(
            im in any_image(), dw in 0usize..5, dh in 0usize..5, center in any::<bool>()
        ) {
            let (w, h) = (im.width() + dw, im.height() + dh);
            let anchor = if center { Anchor::Center } else { Anchor::TopLeft };
            let padded = PadTo::new(w, h, Fill::Value(3.0), anchor).unwrap().pad(im.clone()).unwrap();
            prop_assert_eq!((padded.height(), padded.width()), (h, w));
            let (top, left) = if center { (dh / 2, dw / 2) } else { (0, 0) };
            let back = Crop::new(top as i64, left as i64, im.height(), im.width())
                .unwrap()
                .crop(padded)
                .unwrap();
            prop_assert_eq!(&back, &im);
        }
    }
}
