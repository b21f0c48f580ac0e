//! JPEG as Pillow (libjpeg-turbo) decodes it: zune-jpeg's entropy decoding and inverse DCT,
//! then libjpeg's upsampling ([`upsample`]) and YCbCr conversion ([`ycc`]); CMYK (Adobe,
//! inverted as Pillow assumes) converted with Pillow's formula.

mod upsample;
mod ycc;

use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;
use zune_jpeg::errors::DecodeErrors;

use self::upsample::{Plane, Upsampler};
use super::{DecodeLimits, Raw, cmyk_row_to_rgb};
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
    let (components, channels) = match input {
        ColorSpace::Luma => (1, 1),
        ColorSpace::YCbCr | ColorSpace::RGB => (3, 3),
        // Pillow converts CMYK (and libjpeg's CMYK from YCCK) to RGB itself.
        ColorSpace::CMYK | ColorSpace::YCCK => (4, 3),
        other => {
            return Err(Error::unsupported(
                Format::Jpeg,
                format!("colour space {other:?}"),
            ));
        }
    };
    limits.check(width as u64, height as u64, channels as u64)?;
    if !has_end_marker(data) {
        return Err(Error::truncated(
            Format::Jpeg,
            "no end-of-image marker after the scan data",
        ));
    }
    // The components as the inverse DCT leaves them; upsampling and colour conversion are
    // ours, in libjpeg's arithmetic (zune-jpeg's differ at the edges of subsampled images).
    let mut raw = decoder.raw_output();
    let layout = raw
        .layout()
        .ok_or_else(|| Error::corrupt(Format::Jpeg, "no frame header"))?;
    if raw.num_components() != Some(components) {
        return Err(Error::corrupt(
            Format::Jpeg,
            format!("{:?} components for {input:?}", raw.num_components()),
        ));
    }
    let layout = &layout[..components];
    let mut buffers: Vec<Vec<u8>> = layout.iter().map(|p| vec![0; p.byte_size]).collect();
    let mut slices: Vec<&mut [u8]> = buffers.iter_mut().map(Vec::as_mut_slice).collect();
    raw.decode_into_planes(&mut slices).map_err(map_err)?;
    let max_h = layout.iter().map(|p| p.horizontal_sampling_factor).max();
    let max_v = layout.iter().map(|p| p.vertical_sampling_factor).max();
    let (max_h, max_v) = (max_h.unwrap_or(1), max_v.unwrap_or(1));
    let mut ups = Vec::with_capacity(components);
    for (info, buf) in layout.iter().zip(&buffers) {
        let (h, v) = (
            info.horizontal_sampling_factor,
            info.vertical_sampling_factor,
        );
        if h == 0 || v == 0 || max_h % h != 0 || max_v % v != 0 {
            return Err(Error::unsupported(
                Format::Jpeg,
                format!("sampling factors {h}x{v} under {max_h}x{max_v}"),
            ));
        }
        let plane = Plane {
            data: buf,
            stride: info.stride,
            width: info.width,
            height: info.height,
        };
        ups.push(Upsampler::new(plane, max_h / h, max_v / v, width)?);
    }
    let mut out = vec![0u8; width * height * channels];
    convert_fast(input, &mut ups, &mut out, width * channels);
    Ok(Raw {
        width,
        height,
        channels,
        data: out,
    })
}

/// The image's rows (`row_bytes` each) from its components: copied, colour converted, or
/// CMYK converted to RGB.
#[inline(always)]
fn convert(input: ColorSpace, ups: &mut [Upsampler<'_>], out: &mut [u8], row_bytes: usize) {
    let rows = out.chunks_exact_mut(row_bytes);
    match (input, &mut ups[..]) {
        (ColorSpace::Luma, [l]) => {
            for (y, o) in rows.enumerate() {
                o.copy_from_slice(l.row(y));
            }
        }
        (ColorSpace::YCbCr, [l, cb, cr]) => {
            let mut planes = vec![0u8; row_bytes];
            for (y, o) in rows.enumerate() {
                ycc::row_to_rgb(l.row(y), cb.row(y), cr.row(y), &mut planes, o);
            }
        }
        (ColorSpace::RGB, [r, g, b]) => {
            for (y, o) in rows.enumerate() {
                ycc::interleave(r.row(y), g.row(y), b.row(y), o);
            }
        }
        (ColorSpace::CMYK, [c, m, ye, k]) => {
            let mut cmyk = vec![0u8; row_bytes / 3 * 4];
            for (y, o) in rows.enumerate() {
                let (c, m, ye, k) = (c.row(y), m.row(y), ye.row(y), k.row(y));
                for (i, px) in cmyk.chunks_exact_mut(4).enumerate() {
                    // Pillow reads 4 components as inverted (Adobe) CMYK.
                    px.copy_from_slice(&[255 - c[i], 255 - m[i], 255 - ye[i], 255 - k[i]]);
                }
                cmyk_row_to_rgb(&cmyk, o);
            }
        }
        (ColorSpace::YCCK, [l, cb, cr, k]) => {
            let mut cmyk = vec![0u8; row_bytes / 3 * 4];
            for (y, o) in rows.enumerate() {
                let (l, cb, cr, k) = (l.row(y), cb.row(y), cr.row(y), k.row(y));
                for (i, px) in cmyk.chunks_exact_mut(4).enumerate() {
                    // libjpeg makes CMYK of 255 - R, G, B; Pillow inverts it back.
                    let [r, g, b] = ycc::pixel(l[i], cb[i], cr[i]);
                    px.copy_from_slice(&[r, g, b, 255 - k[i]]);
                }
                cmyk_row_to_rgb(&cmyk, o);
            }
        }
        _ => unreachable!("components counted from the colour space above"),
    }
}

/// [`convert`] compiled for AVX2 when the CPU has it (the build targets any x86-64), so that
/// its per-sample loops vectorize twice as wide. The values are the same either way.
fn convert_fast(input: ColorSpace, ups: &mut [Upsampler<'_>], out: &mut [u8], row_bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        fn avx2(input: ColorSpace, ups: &mut [Upsampler<'_>], out: &mut [u8], row_bytes: usize) {
            convert(input, ups, out, row_bytes);
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: `avx2` only enables instructions the CPU was just found to have.
            return unsafe { avx2(input, ups, out, row_bytes) };
        }
    }
    convert(input, ups, out, row_bytes);
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
