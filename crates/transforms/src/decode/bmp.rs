//! BMP (Windows and OS/2 headers; 1/4/8-bit palettes, RLE4/RLE8, 16/24/32 bits, bit fields),
//! decoded the way Pillow loads it: grey palettes give L, other palettes RGB, 32 bits RGB unless
//! bit fields name an alpha channel.

use super::{DecodeLimits, Raw};
use crate::{Error, Format};

const RGB: u32 = 0;
const RLE8: u32 = 1;
const RLE4: u32 = 2;
const BITFIELDS: u32 = 3;
const ALPHABITFIELDS: u32 = 6;

fn truncated() -> Error {
    Error::ended(Format::Bmp)
}

fn u16_at(d: &[u8], at: usize) -> Result<u16, Error> {
    d.get(at..at + 2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .ok_or_else(truncated)
}

fn u32_at(d: &[u8], at: usize) -> Result<u32, Error> {
    d.get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(truncated)
}

/// What the headers say.
struct Header {
    width: usize,
    height: usize,
    top_down: bool,
    bits: u16,
    compression: u32,
    colors: usize,
    palette_at: usize,
    palette_entry: usize,
    masks: [u32; 4],
    pixels_at: usize,
}

fn read_header(d: &[u8]) -> Result<Header, Error> {
    let pixels_at = u32_at(d, 10)? as usize;
    let size = u32_at(d, 14)? as usize;
    let (width, height, bits, compression, colors_used, palette_entry): (
        i64,
        i64,
        u16,
        u32,
        u32,
        usize,
    ) = match size {
        12 => (
            i64::from(u16_at(d, 18)?),
            i64::from(u16_at(d, 20)?),
            u16_at(d, 24)?,
            RGB,
            0,
            3,
        ),
        40 | 52 | 56 | 64 | 108 | 124 => (
            i64::from(u32_at(d, 18)? as i32),
            i64::from(u32_at(d, 22)? as i32),
            u16_at(d, 28)?,
            u32_at(d, 30)?,
            u32_at(d, 46)?,
            4,
        ),
        other => {
            return Err(Error::unsupported(
                Format::Bmp,
                format!("header of {other} bytes"),
            ));
        }
    };
    let mut masks = [0u32; 4];
    let mut palette_at = 14 + size;
    if compression == BITFIELDS || compression == ALPHABITFIELDS {
        let n = if compression == ALPHABITFIELDS { 4 } else { 3 };
        let at = 14 + 40;
        for (i, m) in masks.iter_mut().enumerate().take(n) {
            *m = u32_at(d, at + 4 * i)?;
        }
        if size >= 56 {
            masks[3] = u32_at(d, at + 12)?;
        }
        if size == 40 {
            palette_at += 4 * n;
        }
    }
    if width <= 0 || height == 0 {
        return Err(Error::corrupt(
            Format::Bmp,
            format!("invalid size {width}x{height}"),
        ));
    }
    let colors = if bits <= 8 {
        let max = 1usize << bits;
        match colors_used as usize {
            0 => max,
            n => n.min(max),
        }
    } else {
        0
    };
    Ok(Header {
        width: width as usize,
        height: height.unsigned_abs() as usize,
        top_down: height < 0,
        bits,
        compression,
        colors,
        palette_at,
        palette_entry,
        masks,
        pixels_at,
    })
}

pub(crate) fn decode(d: &[u8], limits: &DecodeLimits) -> Result<Raw, Error> {
    let h = read_header(d)?;
    match (h.bits, h.compression) {
        (1 | 4 | 8, RGB) | (8, RLE8) | (4, RLE4) | (16 | 24 | 32, RGB) => {}
        (16 | 32, BITFIELDS | ALPHABITFIELDS) => {}
        (bits, compression) => {
            return Err(Error::unsupported(
                Format::Bmp,
                format!("{bits} bits per pixel with compression {compression}"),
            ));
        }
    }
    // The fewest channels first (a grey palette gives L, direct colour RGB), the exact ones
    // once the palette or the masks tell, before the pixels are allocated.
    let fewest = if h.bits <= 8 { 1 } else { 3 };
    limits.check(h.width as u64, h.height as u64, fewest)?;
    if h.bits <= 8 {
        decode_palette(d, &h, limits)
    } else {
        decode_direct(d, &h, limits)
    }
}

/// Row `y` of the image (top first) is stored at row `stored_row(y)`.
fn stored_row(h: &Header, y: usize) -> usize {
    if h.top_down { y } else { h.height - 1 - y }
}

fn decode_palette(d: &[u8], h: &Header, limits: &DecodeLimits) -> Result<Raw, Error> {
    let palette: Vec<[u8; 3]> = (0..h.colors)
        .map(|i| {
            let at = h.palette_at + i * h.palette_entry;
            d.get(at..at + 3)
                .map(|b| [b[2], b[1], b[0]])
                .ok_or_else(truncated)
        })
        .collect::<Result<_, _>>()?;
    // Pillow ditches a palette whose entries are all grey ramps: the image is L.
    let grey = if h.colors == 2 {
        palette[0] == [0; 3] && palette[1] == [255; 3]
    } else {
        palette.iter().enumerate().all(|(i, p)| *p == [i as u8; 3])
    };
    let indices = match h.compression {
        RLE8 | RLE4 => decode_rle(d, h)?,
        _ => unpack_indices(d, h)?,
    };
    let channels = if grey { 1 } else { 3 };
    limits.check(h.width as u64, h.height as u64, channels as u64)?;
    let mut data = Vec::with_capacity(indices.len() * channels);
    for &i in &indices {
        let p = palette.get(usize::from(i)).copied().unwrap_or([0; 3]);
        if grey {
            data.push(p[0]);
        } else {
            data.extend_from_slice(&p);
        }
    }
    Ok(Raw {
        width: h.width,
        height: h.height,
        channels,
        data,
    })
}

fn stride(h: &Header) -> usize {
    (h.width * usize::from(h.bits)).div_ceil(32) * 4
}

fn rows<'a>(d: &'a [u8], h: &Header) -> Result<&'a [u8], Error> {
    let len = stride(h) * h.height;
    d.get(h.pixels_at..)
        .and_then(|p| p.get(..len))
        .ok_or_else(truncated)
}

/// Uncompressed 1, 4 or 8-bit indices, top row first.
fn unpack_indices(d: &[u8], h: &Header) -> Result<Vec<u8>, Error> {
    let src = rows(d, h)?;
    let stride = stride(h);
    let bits = usize::from(h.bits);
    let per_byte = 8 / bits;
    let mask = ((1u16 << bits) - 1) as u8;
    let mut out = Vec::with_capacity(h.width * h.height);
    for y in 0..h.height {
        let row = &src[stored_row(h, y) * stride..][..stride];
        for x in 0..h.width {
            let byte = row[x / per_byte];
            let shift = 8 - bits * (x % per_byte + 1);
            out.push((byte >> shift) & mask);
        }
    }
    Ok(out)
}

/// RLE8 / RLE4 runs to indices, top row first. Pixels the runs skip (end of line, delta) are
/// index 0.
fn decode_rle(d: &[u8], h: &Header) -> Result<Vec<u8>, Error> {
    let rle4 = h.compression == RLE4;
    let (w, total) = (h.width, h.width * h.height);
    let mut stored = Vec::with_capacity(total);
    let mut pos = h.pixels_at;
    let mut x = 0usize;
    let byte = |at: usize| d.get(at).copied();
    while stored.len() < total {
        let (Some(count), Some(value)) = (byte(pos), byte(pos + 1)) else {
            break;
        };
        pos += 2;
        if count > 0 {
            let n = usize::from(count).min(w.saturating_sub(x));
            for i in 0..n {
                stored.push(if !rle4 {
                    value
                } else if i % 2 == 0 {
                    value >> 4
                } else {
                    value & 0x0f
                });
            }
            x += n;
            continue;
        }
        match value {
            0 => {
                // End of line.
                while stored.len() % w != 0 {
                    stored.push(0);
                }
                x = 0;
            }
            1 => break,
            2 => {
                let (Some(right), Some(up)) = (byte(pos), byte(pos + 1)) else {
                    break;
                };
                pos += 2;
                let skip = usize::from(right) + usize::from(up) * w;
                stored.resize(stored.len() + skip, 0);
                x = stored.len() % w;
            }
            n => {
                let n = usize::from(n);
                let nbytes = if rle4 { n.div_ceil(2) } else { n };
                let Some(run) = d.get(pos..pos + nbytes) else {
                    break;
                };
                for i in 0..n {
                    stored.push(if !rle4 {
                        run[i]
                    } else if i % 2 == 0 {
                        run[i / 2] >> 4
                    } else {
                        run[i / 2] & 0x0f
                    });
                }
                pos += nbytes;
                x += n;
                if pos % 2 != 0 {
                    pos += 1;
                }
            }
        }
    }
    // Pillow refuses RLE data that stops (end of bitmap, or end of data) before the last pixel.
    if stored.len() < total {
        return Err(Error::corrupt(
            Format::Bmp,
            format!("RLE data ends after {} of {total} pixels", stored.len()),
        ));
    }
    stored.truncate(total);
    let mut out = Vec::with_capacity(total);
    for y in 0..h.height {
        out.extend_from_slice(&stored[stored_row(h, y) * w..][..w]);
    }
    Ok(out)
}

/// One channel of a bit field: its shift and its largest value.
#[derive(Clone, Copy)]
struct Field {
    mask: u32,
    shift: u32,
    max: u32,
}

impl Field {
    fn new(mask: u32) -> Result<Field, Error> {
        if mask == 0 {
            return Ok(Field {
                mask,
                shift: 0,
                max: 0,
            });
        }
        let shift = mask.trailing_zeros();
        let max = mask >> shift;
        // Wider than 8 bits first: a full mask's `max + 1` would not fit.
        if max.count_ones() > 8 || max & (max + 1) != 0 {
            return Err(Error::unsupported(
                Format::Bmp,
                format!("bit field mask {mask:#x}"),
            ));
        }
        Ok(Field { mask, shift, max })
    }

    #[inline]
    fn get(self, px: u32) -> u8 {
        let v = (px & self.mask) >> self.shift;
        if self.max == 255 {
            v as u8
        } else {
            // An empty (alpha) mask has no values: 0.
            (v * 255).checked_div(self.max).map_or(0, |x| x as u8)
        }
    }
}

fn decode_direct(d: &[u8], h: &Header, limits: &DecodeLimits) -> Result<Raw, Error> {
    let masks = match (h.bits, h.compression) {
        (16, RGB) => [0x7c00, 0x03e0, 0x001f, 0],
        (24 | 32, RGB) => [0xff_0000, 0xff00, 0xff, 0],
        _ => h.masks,
    };
    let [r, g, b, a] = [
        Field::new(masks[0])?,
        Field::new(masks[1])?,
        Field::new(masks[2])?,
        Field::new(masks[3])?,
    ];
    if [r, g, b].iter().any(|f| f.mask == 0) {
        return Err(Error::unsupported(
            Format::Bmp,
            format!(
                "bit field masks {:#x?} without a colour channel",
                &masks[..3]
            ),
        ));
    }
    let channels = if a.mask != 0 { 4 } else { 3 };
    limits.check(h.width as u64, h.height as u64, channels as u64)?;
    let src = rows(d, h)?;
    let stride = stride(h);
    let bpp = usize::from(h.bits / 8);
    let mut data = Vec::with_capacity(h.width * h.height * channels);
    for y in 0..h.height {
        let row = &src[stored_row(h, y) * stride..][..h.width * bpp];
        for p in row.chunks_exact(bpp) {
            let px = match bpp {
                2 => u32::from(u16::from_le_bytes([p[0], p[1]])),
                3 => u32::from_le_bytes([p[0], p[1], p[2], 0]),
                _ => u32::from_le_bytes([p[0], p[1], p[2], p[3]]),
            };
            data.extend_from_slice(&[r.get(px), g.get(px), b.get(px)]);
            if channels == 4 {
                data.push(a.get(px));
            }
        }
    }
    Ok(Raw {
        width: h.width,
        height: h.height,
        channels,
        data,
    })
}

// The integration tests build their BMPs with the same function.
#[cfg(test)]
#[path = "../../tests/it/bmp_file.rs"]
mod bmp_file;

#[cfg(test)]
mod tests {
    use super::bmp_file::bmp;
    use super::*;
    use crate::{Decode, Pixels};

    fn decode(data: &[u8]) -> (usize, usize, usize, Vec<u8>) {
        let im = Decode::default().decode(data).unwrap();
        let (h, w, c) = (im.height(), im.width(), im.channels());
        let Pixels::U8(v) = im.into_pixels() else {
            unreachable!()
        };
        (h, w, c, v)
    }

    #[test]
    fn a_full_bit_field_mask_is_refused_not_overflowed() {
        // Found by the decode_bmp fuzz target: `max + 1` overflowed for 0xffff_ffff.
        assert!(Field::new(u32::MAX).is_err());
        assert!(Field::new(0xff00).is_ok());
    }

    #[test]
    fn bgr24_bottom_up_with_row_padding() {
        // 2x2: stored bottom row first, each row 6 bytes + 2 padding.
        let px = [1, 2, 3, 4, 5, 6, 0, 0, 7, 8, 9, 10, 11, 12, 0, 0];
        let file = bmp(2, 2, 24, RGB, &[], &[], &px);
        assert_eq!(
            decode(&file),
            (2, 2, 3, vec![9, 8, 7, 12, 11, 10, 3, 2, 1, 6, 5, 4])
        );
        let file = bmp(2, -2, 24, RGB, &[], &[], &px);
        assert_eq!(
            decode(&file),
            (2, 2, 3, vec![3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10])
        );
    }

    #[test]
    fn thirty_two_bits_ignore_x_unless_bitfields_name_alpha() {
        let px = [1, 2, 3, 4];
        assert_eq!(
            decode(&bmp(1, 1, 32, RGB, &[], &[], &px)),
            (1, 1, 3, vec![3, 2, 1])
        );
        let masks = [0xff_0000, 0xff00, 0xff, 0xff00_0000];
        assert_eq!(
            decode(&bmp(1, 1, 32, ALPHABITFIELDS, &[], &masks, &px)),
            (1, 1, 4, vec![3, 2, 1, 4])
        );
    }

    #[test]
    fn sixteen_bits_scale_fields_like_pillow() {
        // 555: r = 31 -> 255, g = 16 -> 16*255/31 = 131, b = 1 -> 8.
        let px: u16 = (31 << 10) | (16 << 5) | 1;
        let mut row = px.to_le_bytes().to_vec();
        row.extend([0, 0]);
        assert_eq!(
            decode(&bmp(1, 1, 16, RGB, &[], &[], &row)),
            (1, 1, 3, vec![255, 131, 8])
        );
        // An empty colour mask is refused, as Pillow does (found by the decode_bmp fuzz
        // target: it divided by zero).
        let masks = [0xf800, 0, 0x001f];
        let err = Decode::default()
            .decode(&bmp(1, 1, 16, BITFIELDS, &[], &masks, &[0xff, 0xff, 0, 0]))
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Unsupported {
                    format: Format::Bmp,
                    ..
                }
            ),
            "{err}"
        );
        // 565 bit fields: g = 63 -> 255.
        let px: u16 = (1 << 11) | (63 << 5);
        let mut row = px.to_le_bytes().to_vec();
        row.extend([0, 0]);
        let masks = [0xf800, 0x07e0, 0x001f];
        assert_eq!(
            decode(&bmp(1, 1, 16, BITFIELDS, &[], &masks, &row)),
            (1, 1, 3, vec![8, 255, 0])
        );
    }

    #[test]
    fn palettes_grey_and_colour() {
        // 1-bit black/white palette -> L 0/255; 4-bit colour palette -> RGB.
        let file = bmp(
            3,
            1,
            1,
            RGB,
            &[[0, 0, 0, 0], [255, 255, 255, 0]],
            &[],
            &[0b1010_0000, 0, 0, 0],
        );
        assert_eq!(decode(&file), (1, 3, 1, vec![255, 0, 255]));
        let file = bmp(
            2,
            1,
            4,
            RGB,
            &[[1, 2, 3, 0], [4, 5, 6, 0]],
            &[],
            &[0x10, 0, 0, 0],
        );
        assert_eq!(decode(&file), (1, 2, 3, vec![6, 5, 4, 3, 2, 1]));
        let grey: Vec<[u8; 4]> = (0..=255u8).map(|i| [i, i, i, 0]).collect();
        let file = bmp(2, 1, 8, RGB, &grey, &[], &[7, 200, 0, 0]);
        assert_eq!(decode(&file), (1, 2, 1, vec![7, 200]));
    }

    #[test]
    fn rle_runs_absolute_delta_and_end_of_line() {
        // Values checked with Pillow 13.
        let grey: Vec<[u8; 4]> = (0..=255u8).map(|i| [i, i, i, 0]).collect();
        // Bottom row: 2 x 9, absolute [5, 6, 7] (+ pad), EOL; top row: 3 x 4, EOL (zeros); EOF.
        let rle = [2, 9, 0, 3, 5, 6, 7, 0, 0, 0, 3, 4, 0, 0, 0, 1];
        let file = bmp(5, 2, 8, RLE8, &grey, &[], &rle);
        assert_eq!(decode(&file), (2, 5, 1, vec![4, 4, 4, 0, 0, 9, 9, 5, 6, 7]));
        // Delta (right 1, up 1) skips 5 pixels; then 3 x 7 fills the last 3.
        let file = bmp(4, 2, 8, RLE8, &grey, &[], &[0, 2, 1, 1, 3, 7, 0, 1]);
        assert_eq!(decode(&file), (2, 4, 1, vec![0, 7, 7, 7, 0, 0, 0, 0]));
        // RLE4, absolute mode with an odd count reads ceil(5 / 2) bytes.
        let pal16: Vec<[u8; 4]> = (0..16u8).map(|i| [i * 10 + 1, i * 10, i * 10, 0]).collect();
        let file = bmp(
            5,
            1,
            4,
            RLE4,
            &pal16,
            &[],
            &[0, 5, 0x12, 0x34, 0x50, 0, 0, 1],
        );
        assert_eq!(
            decode(&file),
            (
                1,
                5,
                3,
                vec![10, 10, 11, 20, 20, 21, 30, 30, 31, 40, 40, 41, 50, 50, 51]
            )
        );
        // Pillow: "not enough image data" when the runs stop early.
        let file = bmp(4, 2, 8, RLE8, &grey, &[], &[0, 2, 1, 1, 2, 7, 0, 1]);
        let err = Decode::default().decode(&file).unwrap_err();
        assert_eq!(
            err.to_string(),
            "corrupt BMP image: RLE data ends after 7 of 8 pixels"
        );
    }

    #[test]
    fn truncated_and_unsupported() {
        let px = [1, 2, 3, 4, 5, 6, 0, 0, 7, 8, 9, 10, 11, 12, 0, 0];
        let file = bmp(2, 2, 24, RGB, &[], &[], &px);
        let err = Decode::default()
            .decode(&file[..file.len() - 1])
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Truncated {
                    format: Format::Bmp,
                    ..
                }
            ),
            "{err}"
        );
        let err = Decode::default().decode(&file[..20]).unwrap_err();
        assert!(matches!(err, Error::Truncated { .. }), "{err}");
        let file = bmp(2, 2, 24, 4, &[], &[], &px);
        let err = Decode::default().decode(&file).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported BMP image: 24 bits per pixel with compression 4"
        );
        let file = bmp(20000, 1, 24, RGB, &[], &[], &px);
        let err = Decode::default().decode(&file).unwrap_err();
        assert!(matches!(err, Error::TooLarge { width: 20000, .. }), "{err}");
    }
}
