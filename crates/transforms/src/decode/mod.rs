//! `Decode`: encoded bytes to a uint8 HWC image, with limits checked from the header first.

mod bmp;
mod jpeg;
mod png;
mod tiff;
mod webp;

use crate::image::{Image, Item, Layout, MAX_BYTES, MAX_SIDE, Pixels, check_alloc};
use crate::transform::reduction;
use crate::{Error, Format, Rect, Reduced, Transform};

/// Decode's limits, checked from the image's header before any pixel is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// The widest image accepted.
    pub max_width: usize,
    /// The tallest image accepted.
    pub max_height: usize,
    /// The most bytes the decoded image may take (`width * height * channels`, uint8 with the
    /// channels `Decode` returns: CMYK counts 3, 16-bit samples 1 byte), the same rule for every
    /// format. A decoder's working buffers take at most twice that (16-bit samples, CMYK):
    /// `DecodeLimits::working_bytes` is handed to the decoders that have a memory limit.
    pub max_alloc: usize,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_width: MAX_SIDE,
            max_height: MAX_SIDE,
            max_alloc: MAX_BYTES,
        }
    }
}

impl DecodeLimits {
    /// Refuses an image from its header: sides above the limits, or a decoded image of
    /// `channels` (see `max_alloc`) above `max_alloc`.
    pub(crate) fn check(&self, width: u64, height: u64, channels: u64) -> Result<(), Error> {
        if width > self.max_width as u64 || height > self.max_height as u64 {
            return Err(Error::TooLarge {
                width,
                height,
                max_width: self.max_width as u64,
                max_height: self.max_height as u64,
            });
        }
        check_alloc(width, height, channels, 1, self.max_alloc as u64)
    }

    /// The memory limit handed to a decoder's own checks: twice `max_alloc`, its largest
    /// working buffer, so that the limit that refuses an image is always `max_alloc`.
    pub(crate) fn working_bytes(&self) -> usize {
        self.max_alloc.saturating_mul(2)
    }
}

/// Decodes PNG, JPEG, WebP, TIFF and BMP bytes into a uint8 HWC image with the image's own
/// channels (1, 2, 3 or 4) as Pillow loads it: palettes expanded (to RGBA when the palette has
/// transparency), a tRNS colour key made an alpha channel, 16-bit samples reduced as Pillow
/// does, CMYK converted to RGB with Pillow's arithmetic.
#[derive(Debug, Clone, Default)]
pub struct Decode {
    limits: DecodeLimits,
    /// JPEG only: decode reduced (see [`Draft`]).
    draft: Draft,
}

/// Whether and how [`Decode`] reduces JPEGs in the DCT domain.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Draft {
    /// Full size.
    #[default]
    Off,
    /// As Pillow's `Image.draft("RGB", (width, height))`: by 1/2, 1/4 or 1/8, the most that
    /// keeps both sides at least `width × height`.
    Size {
        /// The width to keep.
        width: usize,
        /// The height to keep.
        height: usize,
    },
    /// In a [`crate::Compose`], as much as the next step that resizes (a `Resize` or a
    /// `RandomResizedCrop`, past colour conversions) allows: the region it reads stays at least
    /// the size it makes of it. Alone, full size.
    Auto,
}

impl Decode {
    /// `Decode(max_width=16384, max_height=16384, max_alloc=256 MiB)`; each limit must be at
    /// least 1 and at most its default (the limits of [`Image`]).
    pub fn new(max_width: usize, max_height: usize, max_alloc: usize) -> Result<Decode, Error> {
        for (name, value, max) in [
            ("max_width", max_width, MAX_SIDE),
            ("max_height", max_height, MAX_SIDE),
            ("max_alloc", max_alloc, MAX_BYTES),
        ] {
            if value == 0 || value > max {
                return Err(Error::arg(
                    "Decode",
                    format!("{name}={value} must be between 1 and {max}"),
                ));
            }
        }
        Ok(Decode {
            limits: DecodeLimits {
                max_width,
                max_height,
                max_alloc,
            },
            draft: Draft::Off,
        })
    }

    /// JPEGs decoded reduced by 1/2, 1/4 or 1/8 in the DCT domain, the most that keeps both
    /// sides at least `width × height` (each side rounded up), with the values Pillow gives
    /// after `Image.draft("RGB", (width, height))`. A speed-for-detail trade for pipelines
    /// that shrink the image next; other formats decode at full size.
    pub fn with_draft(self, width: usize, height: usize) -> Result<Decode, Error> {
        if width == 0 || height == 0 {
            return Err(Error::arg(
                "Decode",
                format!("draft=({width}, {height}) must be positive"),
            ));
        }
        Ok(Decode {
            draft: Draft::Size { width, height },
            ..self
        })
    }

    /// JPEGs reduced as much as the next resizing step of a [`crate::Compose`] allows
    /// ([`Draft::Auto`]).
    #[must_use]
    pub fn with_auto_draft(self) -> Decode {
        Decode {
            draft: Draft::Auto,
            ..self
        }
    }

    /// How JPEGs are reduced.
    pub fn draft(&self) -> Draft {
        self.draft
    }

    /// Decodes `data`, a JPEG reduced by the factor (1, 2, 4 or 8) that `pick(height, width)`
    /// chooses for its size; other formats at full size. Returns the image, the full size
    /// `(height, width)` and the factor used.
    pub fn decode_reduced(
        &self,
        data: &[u8],
        pick: &dyn Fn(usize, usize) -> usize,
    ) -> Result<(Image, (usize, usize), usize), Error> {
        let (im, from) = self.decode_window(data, &|h, w| (pick(h, w), None))?;
        Ok((im, from.full, from.scale))
    }

    /// Decodes `data`, a JPEG reduced by the factor (1, 2, 4 or 8) that `plan(height, width)`
    /// chooses for its size, and only in the window of the reduced image it names, when it names
    /// one: every pixel as in the whole image. Other formats whole, at full size. Returns the
    /// image and what of the full one it is.
    ///
    /// The entropy-coded data below the window (and, between restart markers, above it) is not
    /// read: damage there goes unnoticed.
    pub fn decode_window(
        &self,
        data: &[u8],
        plan: &dyn Fn(usize, usize) -> (usize, Option<Rect>),
    ) -> Result<(Image, Reduced), Error> {
        if sniff_format(data) != Some(Format::Jpeg) {
            let im = self.decode(data)?;
            let from = Reduced::whole((im.height(), im.width()), 1);
            return Ok((im, from));
        }
        let chosen = std::cell::Cell::new(((0, 0), 1));
        let (raw, window) = jpeg::decode(data, &self.limits, &|w, h| {
            let (scale, window) = plan(h, w);
            let scale = if matches!(scale, 2 | 4 | 8) { scale } else { 1 };
            chosen.set(((h, w), scale));
            (scale, window)
        })?;
        let (full, scale) = chosen.get();
        let from = Reduced {
            full,
            scale,
            window,
        };
        Ok((raw.into_image()?, from))
    }

    /// The limits every image is checked against.
    pub fn limits(&self) -> DecodeLimits {
        self.limits
    }

    /// Decodes one encoded image, its format found from its signature.
    pub fn decode(&self, data: &[u8]) -> Result<Image, Error> {
        match sniff_format(data) {
            Some(format) => self.decode_as(format, data),
            None => Err(Error::UnknownFormat {
                magic: data.iter().take(8).copied().collect(),
            }),
        }
    }

    /// Decodes `data` with the decoder of `format`, whatever its signature says.
    pub fn decode_as(&self, format: Format, data: &[u8]) -> Result<Image, Error> {
        let raw = match format {
            Format::Png => png::decode(data, &self.limits)?,
            Format::Jpeg => {
                let scale = |w, h| match self.draft {
                    Draft::Size { width, height } => reduction(w, h, width, height),
                    Draft::Off | Draft::Auto => 1,
                };
                jpeg::decode(data, &self.limits, &|w, h| (scale(w, h), None))?.0
            }
            Format::WebP => webp::decode(data, &self.limits)?,
            Format::Tiff => tiff::decode(data, &self.limits)?,
            Format::Bmp => bmp::decode(data, &self.limits)?,
        };
        raw.into_image()
    }
}

impl Transform for Decode {
    fn apply(&self, _index: u64, item: Item) -> Result<Item, Error> {
        match item {
            Item::Bytes(b) => self.decode(&b).map(Item::Image),
            Item::Image(im) => Err(Error::WrongInput {
                transform: "Decode",
                expected: "encoded bytes",
                got: im.describe(),
            }),
        }
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

/// The format of encoded bytes, from their signature.
pub fn sniff_format(data: &[u8]) -> Option<Format> {
    if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(Format::Png)
    } else if data.starts_with(&[0xff, 0xd8, 0xff]) {
        Some(Format::Jpeg)
    } else if data.len() >= 12 && &data[..4] == b"RIFF" && &data[8..12] == b"WEBP" {
        Some(Format::WebP)
    } else if data.starts_with(b"II*\0")
        || data.starts_with(b"MM\0*")
        || data.starts_with(b"II+\0")
        || data.starts_with(b"MM\0+")
    {
        Some(Format::Tiff)
    } else if data.starts_with(b"BM") {
        Some(Format::Bmp)
    } else {
        None
    }
}

/// A decoder's output before it becomes an [`Image`].
pub(crate) struct Raw {
    pub width: usize,
    pub height: usize,
    pub channels: usize,
    pub data: Vec<u8>,
}

impl Raw {
    fn into_image(self) -> Result<Image, Error> {
        Image::new(
            self.height,
            self.width,
            self.channels,
            Layout::Hwc,
            Pixels::U8(self.data),
        )
    }
}

/// Pillow's CMYK to RGB (`cmyk2rgb`): `(255 - K) - C * (255 - K) / 255` with Pillow's rounded
/// division by 255, per channel.
pub(crate) fn cmyk_to_rgb(cmyk: &[u8]) -> Vec<u8> {
    let mut out = vec![0; cmyk.len() / 4 * 3];
    cmyk_row_to_rgb(cmyk, &mut out);
    out
}

/// [`cmyk_to_rgb`] into `out` (3 bytes for every 4 of `cmyk`).
pub(crate) fn cmyk_row_to_rgb(cmyk: &[u8], out: &mut [u8]) {
    for (px, o) in cmyk.chunks_exact(4).zip(out.chunks_exact_mut(3)) {
        let nk = 255 - u32::from(px[3]);
        for (o, &c) in o.iter_mut().zip(&px[..3]) {
            *o = (nk - muldiv255(u32::from(c), nk)) as u8;
        }
    }
}

/// Pillow's `MULDIV255(a, b)`: `a * b / 255` rounded, in integers.
#[inline]
pub(crate) fn muldiv255(a: u32, b: u32) -> u32 {
    let t = a * b + 128;
    ((t >> 8) + t) >> 8
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn sniffs_signatures() {
        assert_eq!(sniff_format(b"\x89PNG\r\n\x1a\nrest"), Some(Format::Png));
        assert_eq!(sniff_format(&[0xff, 0xd8, 0xff, 0xe0]), Some(Format::Jpeg));
        assert_eq!(sniff_format(b"RIFF\0\0\0\0WEBPVP8 "), Some(Format::WebP));
        assert_eq!(sniff_format(b"II*\0"), Some(Format::Tiff));
        assert_eq!(sniff_format(b"MM\0*"), Some(Format::Tiff));
        assert_eq!(sniff_format(b"BM\0\0"), Some(Format::Bmp));
        assert_eq!(sniff_format(b"GIF89a"), None);
        assert_eq!(sniff_format(b""), None);
    }

    #[test]
    fn unknown_format_and_wrong_input() {
        let err = Decode::default().decode(b"GIF89a...").unwrap_err();
        assert!(matches!(err, Error::UnknownFormat { .. }), "{err}");
        let im = Image::new(1, 1, 1, Layout::Hwc, Pixels::U8(vec![0])).unwrap();
        let err = Decode::default().apply(0, Item::Image(im)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Decode expects encoded bytes, got a uint8 HWC image of 1x1x1"
        );
    }

    #[test]
    fn limits_are_validated() {
        assert!(Decode::new(16384, 16384, 256 << 20).is_ok());
        let err = Decode::new(0, 10, 10).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Decode: invalid argument: max_width=0 must be between 1 and 16384"
        );
        assert!(Decode::new(10, 16385, 10).is_err());
        assert!(Decode::new(10, 10, (256 << 20) + 1).is_err());
    }

    #[test]
    fn cmyk_matches_pillow_formula() {
        // Values computed by hand: nk = 255 - K; out = nk - round(C * nk / 255).
        // C=0,K=0 -> 255; C=255,K=0 -> 0; C=100,K=55 -> nk=200, 100*200/255=78.43 -> 78 -> 122.
        assert_eq!(
            cmyk_to_rgb(&[0, 255, 100, 0, 100, 100, 100, 55]),
            vec![255, 0, 155, 122, 122, 122]
        );
        assert_eq!(muldiv255(255, 255), 255);
        assert_eq!(muldiv255(128, 255), 128);
        assert_eq!(muldiv255(1, 127), 0);
        assert_eq!(muldiv255(1, 128), 1);
    }
}
