//! TIFF (first image) through the `tiff` crate: 1-bit and 8-bit L, LA, RGB, RGBA, CMYK; 16-bit
//! as Pillow loads it. Palette and JPEG-compressed TIFFs are not supported.

use std::io::Cursor;

use ::tiff::ColorType;
use ::tiff::TiffError;
use ::tiff::decoder::{Decoder, DecodingResult, Limits};

use super::{DecodeLimits, Raw, cmyk_to_rgb};
use crate::{Error, Format};

fn map_err(e: TiffError) -> Error {
    match e {
        TiffError::IoError(io) => Error::read(Format::Tiff, io),
        TiffError::UnsupportedError(u) => Error::unsupported(Format::Tiff, u),
        TiffError::LimitsExceeded => {
            Error::corrupt(Format::Tiff, "the decoder's memory limit was exceeded")
        }
        other => Error::corrupt(Format::Tiff, other),
    }
}

pub(crate) fn decode(data: &[u8], limits: &DecodeLimits) -> Result<Raw, Error> {
    let mut tiff_limits = Limits::default();
    // 16-bit samples decode to a buffer twice the output's size.
    tiff_limits.decoding_buffer_size = limits.working_bytes();
    tiff_limits.intermediate_buffer_size = limits.working_bytes();
    let mut decoder = Decoder::new(Cursor::new(data))
        .map_err(map_err)?
        .with_limits(tiff_limits);
    let (width, height) = decoder.dimensions().map_err(map_err)?;
    let color = decoder.colortype().map_err(map_err)?;
    let (samples, bits) = match color {
        ColorType::Gray(1) => return decode_bilevel(&mut decoder, limits),
        ColorType::Gray(b) => (1, b),
        // Grey with an extra sample: Pillow's LA.
        ColorType::Multiband {
            bit_depth,
            num_samples: 2,
        } => (2, bit_depth),
        ColorType::GrayA(b) => (2, b),
        ColorType::RGB(b) => (3, b),
        ColorType::RGBA(b) => (4, b),
        ColorType::CMYK(b) => (4, b),
        other => {
            return Err(Error::unsupported(
                Format::Tiff,
                format!("colour type {other:?}"),
            ));
        }
    };
    if bits != 8 && bits != 16 {
        return Err(Error::unsupported(
            Format::Tiff,
            format!("{bits}-bit samples"),
        ));
    }
    let (w, h) = (u64::from(width), u64::from(height));
    // The decoded image: CMYK becomes RGB, 16-bit samples 8-bit.
    let out_channels = if matches!(color, ColorType::CMYK(_)) {
        3
    } else {
        samples
    };
    limits.check(w, h, out_channels)?;
    // Associated (premultiplied) alpha: Pillow loads it as "RGBa" and divides it out.
    let associated = samples == 4
        && matches!(color, ColorType::RGBA(_))
        && decoder
            .find_tag_unsigned::<u16>(::tiff::tags::Tag::ExtraSamples)
            .ok()
            .flatten()
            == Some(1);
    let result = decoder.read_image().map_err(map_err)?;
    let values = match result {
        DecodingResult::U8(v) => v,
        // Pillow loads 16-bit grey as I;16 (converted by clipping to 255) and keeps the high byte
        // of 16-bit colour samples.
        DecodingResult::U16(v) if samples == 1 => v.iter().map(|&s| s.min(255) as u8).collect(),
        DecodingResult::U16(v) => v.iter().map(|&s| (s >> 8) as u8).collect(),
        _ => {
            return Err(Error::unsupported(
                Format::Tiff,
                "sample format other than unsigned integers",
            ));
        }
    };
    let expected = (w * h * samples) as usize;
    if values.len() != expected {
        return Err(Error::corrupt(
            Format::Tiff,
            format!("decoded {} samples, expected {expected}", values.len()),
        ));
    }
    let (channels, data) = match color {
        ColorType::CMYK(_) => (3, cmyk_to_rgb(&values)),
        _ if associated => (4, unpremultiply(values)),
        _ => (samples as usize, values),
    };
    Ok(Raw {
        width: width as usize,
        height: height as usize,
        channels,
        data,
    })
}

/// Pillow's `RGBa` unpacking: alpha 0 gives 0 everywhere, else `min(255, v * 255 / alpha)`.
fn unpremultiply(mut v: Vec<u8>) -> Vec<u8> {
    for px in v.chunks_exact_mut(4) {
        let a = u32::from(px[3]);
        if a == 0 {
            px.fill(0);
        } else if a != 255 {
            for x in &mut px[..3] {
                *x = (u32::from(*x) * 255 / a).min(255) as u8;
            }
        }
    }
    v
}

/// 1-bit grey (Pillow's mode "1"), rows packed 8 pixels a byte, to L with 0 and 255.
fn decode_bilevel(
    decoder: &mut Decoder<Cursor<&[u8]>>,
    limits: &DecodeLimits,
) -> Result<Raw, Error> {
    let (width, height) = decoder.dimensions().map_err(map_err)?;
    let (w, h) = (width as usize, height as usize);
    limits.check(w as u64, h as u64, 1)?;
    let DecodingResult::U8(packed) = decoder.read_image().map_err(map_err)? else {
        return Err(Error::corrupt(
            Format::Tiff,
            "1-bit image decoded to wide samples",
        ));
    };
    let stride = w.div_ceil(8);
    if packed.len() < stride * h {
        return Err(Error::corrupt(
            Format::Tiff,
            format!("decoded {} bytes, expected {}", packed.len(), stride * h),
        ));
    }
    let mut data = Vec::with_capacity(w * h);
    for row in packed.chunks_exact(stride).take(h) {
        data.extend((0..w).map(|x| {
            if row[x / 8] & (0x80 >> (x % 8)) != 0 {
                255
            } else {
                0
            }
        }));
    }
    Ok(Raw {
        width: w,
        height: h,
        channels: 1,
        data,
    })
}

#[cfg(test)]
mod tests {
    use ::tiff::encoder::{TiffEncoder, colortype};

    use crate::{Decode, Pixels};

    fn decode(data: &[u8]) -> (usize, Vec<u8>) {
        let im = Decode::default().decode(data).unwrap();
        let c = im.channels();
        let Pixels::U8(v) = im.into_pixels() else {
            unreachable!()
        };
        (c, v)
    }

    /// Expected values from Pillow 13.0.0 reading the same files.
    #[test]
    fn sixteen_bits_as_pillow_loads_them() {
        let mut rgb = std::io::Cursor::new(Vec::new());
        TiffEncoder::new(&mut rgb)
            .unwrap()
            .write_image::<colortype::RGB16>(
                2,
                1,
                &[0x1234, 0x80ff, 0x00ff, 0xffff, 0x0100, 0x7f80],
            )
            .unwrap();
        assert_eq!(decode(rgb.get_ref()), (3, vec![18, 128, 0, 255, 1, 127]));
        let mut rgba = std::io::Cursor::new(Vec::new());
        TiffEncoder::new(&mut rgba)
            .unwrap()
            .write_image::<colortype::RGBA16>(1, 1, &[0x1234, 0x80ff, 0x00ff, 0x7fff])
            .unwrap();
        assert_eq!(decode(rgba.get_ref()), (4, vec![18, 128, 0, 127]));
        let mut grey = std::io::Cursor::new(Vec::new());
        TiffEncoder::new(&mut grey)
            .unwrap()
            .write_image::<colortype::Gray16>(3, 1, &[5, 255, 256])
            .unwrap();
        assert_eq!(decode(grey.get_ref()), (1, vec![5, 255, 255]));
    }
}
