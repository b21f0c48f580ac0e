//! JPEG through zune-jpeg; CMYK (Adobe, inverted as Pillow assumes) converted with Pillow's formula.

use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;
use zune_jpeg::errors::DecodeErrors;

use super::{DecodeLimits, Raw, cmyk_to_rgb};
use crate::{Error, Format};

fn map_err(e: DecodeErrors) -> Error {
    match e {
        DecodeErrors::ExhaustedData => {
            Error::truncated(Format::Jpeg, "the data ends before the image does")
        }
        DecodeErrors::IoErrors(io) => Error::truncated(Format::Jpeg, format!("{io:?}")),
        DecodeErrors::Unsupported(s) => Error::unsupported(Format::Jpeg, format!("{s:?}")),
        other => Error::corrupt(Format::Jpeg, other),
    }
}

pub(crate) fn decode(data: &[u8], limits: &DecodeLimits) -> Result<Raw, Error> {
    // JPEG sides are 16-bit: the decoder's own size limit is lifted and ours checked below.
    let options = DecoderOptions::default()
        .set_strict_mode(true)
        .set_max_width(1 << 16)
        .set_max_height(1 << 16);
    let mut decoder = JpegDecoder::new_with_options(ZCursor::new(data), options);
    decoder.decode_headers().map_err(map_err)?;
    let (width, height) = decoder
        .dimensions()
        .ok_or_else(|| Error::corrupt(Format::Jpeg, "no frame header"))?;
    let input = decoder
        .input_colorspace()
        .ok_or_else(|| Error::corrupt(Format::Jpeg, "no frame header"))?;
    let (out_space, channels) = match input {
        ColorSpace::Luma => (ColorSpace::Luma, 1),
        // Pillow reads 4 components raw, as inverted Adobe CMYK, then converts to RGB itself.
        ColorSpace::CMYK => (ColorSpace::CMYK, 4),
        ColorSpace::YCbCr | ColorSpace::RGB | ColorSpace::YCCK => (ColorSpace::RGB, 3),
        other => {
            return Err(Error::unsupported(
                Format::Jpeg,
                format!("colour space {other:?}"),
            ));
        }
    };
    // The decoded samples (4 a pixel for CMYK, before the conversion to RGB).
    let bytes = width as u64 * height as u64 * channels as u64;
    limits.check(width as u64, height as u64, bytes)?;
    decoder.set_options(options.jpeg_set_out_colorspace(out_space));
    let pixels = decoder.decode().map_err(map_err)?;
    let expected = width * height * channels;
    if pixels.len() != expected {
        return Err(Error::corrupt(
            Format::Jpeg,
            format!("decoded {} bytes, expected {expected}", pixels.len()),
        ));
    }
    let (channels, data) = if out_space == ColorSpace::CMYK {
        let inverted: Vec<u8> = pixels.iter().map(|v| 255 - v).collect();
        (3, cmyk_to_rgb(&inverted))
    } else {
        (channels, pixels)
    };
    Ok(Raw {
        width,
        height,
        channels,
        data,
    })
}
