//! `Image` (validated pixels with a shape and a layout) and `Item`, what transforms take and give.

use crate::Error;
use crate::dtype::Dtype;

/// The largest side an image may have (Decode's default and `Image`'s hard limit).
pub const MAX_SIDE: usize = 16384;
/// The most bytes an image's pixels may take (Decode's default and `Image`'s hard limit): 256 MiB.
pub const MAX_BYTES: usize = 256 << 20;

/// The order of an image's axes in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Layout {
    /// (height, width, channels): what decoders produce and most transforms take.
    #[default]
    Hwc,
    /// (channels, height, width): ToTensor's layout, made by `ToChw`.
    Chw,
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Layout::Hwc => "HWC",
            Layout::Chw => "CHW",
        })
    }
}

/// An image's values, contiguous in the image's layout.
#[derive(Clone, PartialEq)]
pub enum Pixels {
    /// uint8 values.
    U8(Vec<u8>),
    /// float32 values.
    F32(Vec<f32>),
}

impl std::fmt::Debug for Pixels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pixels::U8(v) => write!(f, "U8(<{} values>)", v.len()),
            Pixels::F32(v) => write!(f, "F32(<{} values>)", v.len()),
        }
    }
}

impl Pixels {
    /// The type of the values.
    pub fn dtype(&self) -> Dtype {
        match self {
            Pixels::U8(_) => Dtype::U8,
            Pixels::F32(_) => Dtype::F32,
        }
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        match self {
            Pixels::U8(v) => v.len(),
            Pixels::F32(v) => v.len(),
        }
    }

    /// Whether there is no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values as bytes in native order (for the buffer protocol and copies into batches).
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Pixels::U8(v) => v,
            Pixels::F32(v) => {
                // SAFETY: an f32 slice is valid, initialised memory of `4 * len` bytes, u8 has no
                // alignment requirement and every byte pattern is a valid u8; the borrow ties the
                // returned slice's lifetime to `self`.
                unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), v.len() * 4) }
            }
        }
    }
}

/// A decoded image: `height × width × channels` values of one dtype in one layout.
///
/// Channels are 1 (L), 2 (LA), 3 (RGB) or 4 (RGBA). The sides are at most [`MAX_SIDE`] and the
/// pixels at most [`MAX_BYTES`] bytes. Fields are private so that the invariants always hold.
#[derive(Clone, PartialEq)]
pub struct Image {
    height: usize,
    width: usize,
    channels: usize,
    layout: Layout,
    pixels: Pixels,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Image({}x{}x{} {} {})",
            self.height,
            self.width,
            self.channels,
            self.layout,
            self.dtype()
        )
    }
}

impl Image {
    /// Validates and wraps pixels: 1 to 4 channels, `height * width * channels` values, sides of
    /// at least 1 and at most [`MAX_SIDE`], at most [`MAX_BYTES`] bytes.
    pub fn new(
        height: usize,
        width: usize,
        channels: usize,
        layout: Layout,
        pixels: Pixels,
    ) -> Result<Image, Error> {
        if !(1..=4).contains(&channels) {
            return Err(Error::InvalidImage {
                reason: format!("{channels} channels; an image has 1, 2, 3 or 4"),
            });
        }
        check_size(height, width, channels, pixels.dtype())?;
        let expected = height * width * channels;
        if pixels.len() != expected {
            return Err(Error::InvalidImage {
                reason: format!(
                    "{} values for {height}x{width}x{channels}, expected {expected}",
                    pixels.len()
                ),
            });
        }
        Ok(Image {
            height,
            width,
            channels,
            layout,
            pixels,
        })
    }

    /// The Rust side of the spec's `Image.from_array`: pixels whose shape is `(height, width)`
    /// (`channels == None`), `(height, width, channels)` in `Layout::Hwc` or
    /// `(channels, height, width)` in `Layout::Chw`, with 1, 3 or 4 channels, within
    /// [`MAX_SIDE`] × [`MAX_SIDE`] and [`MAX_BYTES`]. The image keeps the given layout: call
    /// [`Image::into_layout`] to get HWC.
    pub fn from_raw(
        height: usize,
        width: usize,
        channels: Option<usize>,
        layout: Layout,
        pixels: Pixels,
    ) -> Result<Image, Error> {
        let channels = channels.unwrap_or(1);
        if !matches!(channels, 1 | 3 | 4) {
            return Err(Error::InvalidImage {
                reason: format!("{channels} channels; an array image has 1, 3 or 4"),
            });
        }
        Image::new(height, width, channels, layout, pixels)
    }

    /// Builds an image whose dimensions the caller already validated (crate-internal).
    pub(crate) fn from_parts(
        height: usize,
        width: usize,
        channels: usize,
        layout: Layout,
        pixels: Pixels,
    ) -> Image {
        debug_assert_eq!(pixels.len(), height * width * channels);
        debug_assert!((1..=4).contains(&channels));
        Image {
            height,
            width,
            channels,
            layout,
            pixels,
        }
    }

    /// Rows.
    pub fn height(&self) -> usize {
        self.height
    }

    /// Columns.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Values per pixel, 1 to 4.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Whether the channels come first or last.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The type of the values.
    pub fn dtype(&self) -> Dtype {
        self.pixels.dtype()
    }

    /// The shape in the image's layout: `[h, w, c]` for HWC, `[c, h, w]` for CHW.
    pub fn shape(&self) -> [usize; 3] {
        match self.layout {
            Layout::Hwc => [self.height, self.width, self.channels],
            Layout::Chw => [self.channels, self.height, self.width],
        }
    }

    /// Strides in bytes of the C-contiguous array of [`Image::shape`].
    pub fn strides_bytes(&self) -> [usize; 3] {
        let [_, b, c] = self.shape();
        let e = self.dtype().size();
        [b * c * e, c * e, e]
    }

    /// Pillow's mode name of a uint8 HWC image's channels ("L", "LA", "RGB", "RGBA").
    pub fn mode(&self) -> &'static str {
        match self.channels {
            1 => "L",
            2 => "LA",
            3 => "RGB",
            _ => "RGBA",
        }
    }

    /// The values.
    pub fn pixels(&self) -> &Pixels {
        &self.pixels
    }

    /// The values, without a copy.
    pub fn into_pixels(self) -> Pixels {
        self.pixels
    }

    /// The values as bytes in native order; see [`Pixels::as_bytes`].
    pub fn as_bytes(&self) -> &[u8] {
        self.pixels.as_bytes()
    }

    /// The image in the given layout (a copy with the axes moved when it differs).
    pub fn into_layout(self, layout: Layout) -> Image {
        if self.layout == layout {
            return self;
        }
        let (h, w, c) = (self.height, self.width, self.channels);
        let pixels = match (&self.pixels, layout) {
            (Pixels::U8(v), Layout::Chw) => Pixels::U8(hwc_to_chw(v, h * w, c)),
            (Pixels::U8(v), Layout::Hwc) => Pixels::U8(chw_to_hwc(v, h * w, c)),
            (Pixels::F32(v), Layout::Chw) => Pixels::F32(hwc_to_chw(v, h * w, c)),
            (Pixels::F32(v), Layout::Hwc) => Pixels::F32(chw_to_hwc(v, h * w, c)),
        };
        Image::from_parts(h, w, c, layout, pixels)
    }

    /// A short description for error messages, such as "a uint8 HWC image of 4x5x3".
    pub(crate) fn describe(&self) -> String {
        format!(
            "a {} {} image of {}x{}x{}",
            self.dtype(),
            self.layout,
            self.height,
            self.width,
            self.channels
        )
    }
}

/// The height, width, channels and values of a uint8 HWC image, or a `WrongInput` error naming
/// `transform`.
pub(crate) fn u8_hwc(
    transform: &'static str,
    item: Item,
) -> Result<(usize, usize, usize, Vec<u8>), Error> {
    let im = item.into_image(transform)?;
    if im.dtype() != Dtype::U8 || im.layout() != Layout::Hwc {
        return Err(Error::WrongInput {
            transform,
            expected: "a uint8 HWC image (apply it before ToFloat and ToChw)",
            got: im.describe(),
        });
    }
    let (h, w, c) = (im.height(), im.width(), im.channels());
    let Pixels::U8(v) = im.into_pixels() else {
        unreachable!("checked to be uint8")
    };
    Ok((h, w, c, v))
}

/// Checks the sides and byte size of an image against the hard limits.
pub(crate) fn check_size(
    height: usize,
    width: usize,
    channels: usize,
    dtype: Dtype,
) -> Result<(), Error> {
    if height == 0 || width == 0 {
        return Err(Error::InvalidImage {
            reason: format!("empty image of {height}x{width}"),
        });
    }
    if height > MAX_SIDE || width > MAX_SIDE {
        return Err(Error::TooLarge {
            width: width as u64,
            height: height as u64,
            max_width: MAX_SIDE as u64,
            max_height: MAX_SIDE as u64,
        });
    }
    check_alloc(
        width as u64,
        height as u64,
        channels as u64,
        dtype.size() as u64,
        MAX_BYTES as u64,
    )
}

/// Refuses `width × height × channels` values of `value_size` bytes above `limit` bytes: the
/// one size rule of the decoders (from the header, before decoding, `limit` being `max_alloc`)
/// and of every transform that makes an image ([`MAX_BYTES`], before allocating it).
pub(crate) fn check_alloc(
    width: u64,
    height: u64,
    channels: u64,
    value_size: u64,
    limit: u64,
) -> Result<(), Error> {
    let bytes = width
        .saturating_mul(height)
        .saturating_mul(channels)
        .saturating_mul(value_size);
    if bytes > limit {
        return Err(Error::AllocationTooLarge {
            width,
            height,
            bytes,
            max_alloc: limit,
        });
    }
    Ok(())
}

pub(crate) fn hwc_to_chw<T: Copy>(src: &[T], plane: usize, c: usize) -> Vec<T> {
    if c == 1 {
        return src.to_vec();
    }
    let mut out = Vec::with_capacity(src.len());
    for ch in 0..c {
        out.extend(src.iter().skip(ch).step_by(c).take(plane).copied());
    }
    out
}

pub(crate) fn chw_to_hwc<T: Copy + Default>(src: &[T], plane: usize, c: usize) -> Vec<T> {
    if c == 1 {
        return src.to_vec();
    }
    let mut out = vec![T::default(); src.len()];
    for (ch, p) in src.chunks_exact(plane).enumerate() {
        for (o, &v) in out[ch..].iter_mut().step_by(c).zip(p) {
            *o = v;
        }
    }
    out
}

/// What flows through a pipeline of transforms: encoded bytes before `Decode`, an image after.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// Encoded file content (PNG, JPEG, WebP, TIFF or BMP).
    Bytes(bytes::Bytes),
    /// A decoded image.
    Image(Image),
}

impl Item {
    /// The image, for a transform that takes only decoded images: `transform` is its name,
    /// which the error carries.
    ///
    /// # Errors
    /// [`Error::WrongInput`] naming `transform` when the item is still encoded bytes.
    pub fn into_image(self, transform: &'static str) -> Result<Image, Error> {
        match self {
            Item::Image(im) => Ok(im),
            Item::Bytes(b) => Err(Error::WrongInput {
                transform,
                expected: "a decoded image (put Decode first)",
                got: format!("{} bytes of encoded data", b.len()),
            }),
        }
    }
}

impl From<Image> for Item {
    fn from(im: Image) -> Item {
        Item::Image(im)
    }
}

impl From<bytes::Bytes> for Item {
    fn from(b: bytes::Bytes) -> Item {
        Item::Bytes(b)
    }
}

impl From<Vec<u8>> for Item {
    fn from(b: Vec<u8>) -> Item {
        Item::Bytes(b.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_validates_length_channels_and_limits() {
        let im = Image::new(2, 3, 3, Layout::Hwc, Pixels::U8(vec![7; 18])).unwrap();
        assert_eq!(
            (im.height(), im.width(), im.channels(), im.dtype()),
            (2, 3, 3, Dtype::U8)
        );
        assert_eq!(im.shape(), [2, 3, 3]);
        assert_eq!(im.mode(), "RGB");
        let err = Image::new(2, 3, 3, Layout::Hwc, Pixels::U8(vec![7; 17])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid image: 17 values for 2x3x3, expected 18"
        );
        let err = Image::new(1, 1, 5, Layout::Hwc, Pixels::U8(vec![0; 5])).unwrap_err();
        assert!(err.to_string().contains("5 channels"), "{err}");
        let err = Image::new(0, 4, 1, Layout::Hwc, Pixels::U8(vec![])).unwrap_err();
        assert!(matches!(err, Error::InvalidImage { .. }));
        let err = Image::new(16385, 1, 1, Layout::Hwc, Pixels::U8(vec![0; 16385])).unwrap_err();
        assert!(
            matches!(err, Error::TooLarge { height: 16385, .. }),
            "{err}"
        );
        // 8192 x 8192 x 4 float32 = 1 GiB: refused from the shape before looking at the data.
        let err = Image::new(8192, 8192, 4, Layout::Hwc, Pixels::F32(vec![])).unwrap_err();
        assert!(
            matches!(err, Error::AllocationTooLarge { bytes, .. } if bytes == 1 << 30),
            "{err}"
        );
    }

    #[test]
    fn from_raw_takes_one_three_or_four_channels() {
        let im = Image::from_raw(2, 2, None, Layout::Hwc, Pixels::F32(vec![0.5; 4])).unwrap();
        assert_eq!((im.channels(), im.dtype()), (1, Dtype::F32));
        let err = Image::from_raw(2, 2, Some(2), Layout::Hwc, Pixels::U8(vec![0; 8])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid image: 2 channels; an array image has 1, 3 or 4"
        );
        let im = Image::from_raw(
            1,
            2,
            Some(3),
            Layout::Chw,
            Pixels::U8(vec![1, 2, 3, 4, 5, 6]),
        )
        .unwrap();
        assert_eq!(im.shape(), [3, 1, 2]);
        assert_eq!(im.strides_bytes(), [2, 2, 1]);
        let hwc = im.into_layout(Layout::Hwc);
        assert_eq!(hwc.pixels(), &Pixels::U8(vec![1, 3, 5, 2, 4, 6]));
        assert_eq!(
            hwc.into_layout(Layout::Chw).pixels(),
            &Pixels::U8(vec![1, 2, 3, 4, 5, 6])
        );
    }

    #[test]
    fn as_bytes_is_native_endian() {
        let im = Image::new(1, 1, 1, Layout::Hwc, Pixels::F32(vec![1.0])).unwrap();
        assert_eq!(im.as_bytes(), &1.0f32.to_ne_bytes());
        let im = Image::new(2, 3, 4, Layout::Hwc, Pixels::F32(vec![0.0; 24])).unwrap();
        assert_eq!(im.strides_bytes(), [48, 16, 4]);
    }

    #[test]
    fn bytes_item_is_not_an_image() {
        let err = Item::from(vec![1u8, 2, 3]).into_image("ToRgb").unwrap_err();
        assert_eq!(
            err.to_string(),
            "ToRgb expects a decoded image (put Decode first), got 3 bytes of encoded data"
        );
    }
}
