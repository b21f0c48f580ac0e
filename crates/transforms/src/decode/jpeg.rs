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

/// Whether an end-of-image marker follows the first scan. zune-jpeg decodes a file cut inside
/// its last scan without complaint; Pillow (libjpeg) refuses it as truncated, and so do we.
fn has_end_marker(data: &[u8]) -> bool {
    // Walk the length-prefixed segments up to the first start-of-scan marker.
    let mut at = 2;
    while at + 4 <= data.len() {
        if data[at] != 0xff {
            // Stray bytes between segments (libjpeg skips them): search from here.
            break;
        }
        let marker = data[at + 1];
        if marker == 0xff {
            at += 1; // fill byte
            continue;
        }
        if marker == 0xda {
            break;
        }
        let len = usize::from(u16::from_be_bytes([data[at + 2], data[at + 3]]));
        at += 2 + len;
    }
    // Entropy-coded data escapes 0xff as 0xff 0x00, so 0xff 0xd9 there is the end marker.
    data.get(at.min(data.len())..)
        .is_some_and(|scan| scan.windows(2).any(|w| w == [0xff, 0xd9]))
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
    // The decoded image: CMYK becomes RGB (its 4-sample buffer is 4/3 of that).
    let out_channels = if out_space == ColorSpace::CMYK {
        3
    } else {
        channels
    };
    limits.check(width as u64, height as u64, out_channels as u64)?;
    if !has_end_marker(data) {
        return Err(Error::truncated(
            Format::Jpeg,
            "no end-of-image marker after the scan data",
        ));
    }
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

#[cfg(test)]
mod tests {
    use super::has_end_marker;

    #[test]
    fn end_marker_after_the_first_scan() {
        // SOI, APP0 of 4 bytes whose payload holds ff d9 (not an end marker), SOS, data, EOI.
        let head = [
            0xff, 0xd8, 0xff, 0xe0, 0x00, 0x04, 0xff, 0xd9, 0xff, 0xda, 0x00, 0x02,
        ];
        let mut file = head.to_vec();
        file.extend([0x12, 0xff, 0x00, 0x34]);
        assert!(!has_end_marker(&file));
        file.extend([0xff, 0xd9, 0x00]);
        assert!(has_end_marker(&file));
        // Stray bytes before a segment: the search starts there.
        assert!(has_end_marker(&[0xff, 0xd8, 0x00, 0x01, 0xff, 0xd9]));
        assert!(!has_end_marker(&[0xff, 0xd8, 0xff, 0xe0, 0x40, 0x00]));
    }
}
