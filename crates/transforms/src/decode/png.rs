//! PNG through the `png` crate, with Pillow's handling of palettes, tRNS and 16-bit samples.

use std::io::Cursor;

use super::{DecodeLimits, Raw};
use crate::{Error, Format};

fn map_err(e: ::png::DecodingError) -> Error {
    match e {
        ::png::DecodingError::IoError(io) => Error::read(Format::Png, io),
        ::png::DecodingError::Format(f) => Error::corrupt(Format::Png, f),
        ::png::DecodingError::LimitsExceeded => {
            Error::corrupt(Format::Png, "the decoder's memory limit was exceeded")
        }
        other => Error::corrupt(Format::Png, other),
    }
}

pub(crate) fn decode(data: &[u8], limits: &DecodeLimits) -> Result<Raw, Error> {
    let mut decoder = ::png::Decoder::new_with_limits(
        Cursor::new(data),
        ::png::Limits {
            bytes: limits.working_bytes(),
        },
    );
    // Palettes to RGB(A), low bit depths to 8 bits, tRNS to alpha; 16 bits are reduced below,
    // because Pillow clips grey samples but keeps the high byte of the others.
    decoder.set_transformations(::png::Transformations::EXPAND);
    decoder.set_ignore_text_chunk(true);
    decoder.set_ignore_iccp_chunk(true);
    // The header (IHDR) is read first: the sides and the fewest channels the image can have
    // (tRNS, read next, may add alpha) are checked before the other chunks are read.
    let header = decoder.read_header_info().map_err(map_err)?;
    let (width, height) = (header.width as u64, header.height as u64);
    let source_color = header.color_type;
    let fewest: u64 = match source_color {
        ::png::ColorType::Grayscale => 1,
        ::png::ColorType::GrayscaleAlpha => 2,
        ::png::ColorType::Rgb | ::png::ColorType::Indexed => 3,
        ::png::ColorType::Rgba => 4,
    };
    limits.check(width, height, fewest)?;
    // The chunks up to the image data: now the output's channels are known, before any pixel
    // is decoded (a 16-bit buffer is twice the output, see `DecodeLimits::max_alloc`).
    let mut reader = decoder.read_info().map_err(map_err)?;
    check_palette(reader.info())?;
    let (color, depth) = reader.output_color_type();
    let channels = color.samples();
    limits.check(width, height, channels as u64)?;
    let (width, height) = (width as usize, height as usize);
    let too_large = || Error::corrupt(Format::Png, "image too large for this platform");
    let buf = if reader.info().interlaced {
        let mut buf = vec![0u8; reader.output_buffer_size().ok_or_else(too_large)?];
        let info = reader.next_frame(&mut buf).map_err(map_err)?;
        buf.truncate(info.buffer_size());
        buf
    } else {
        // Row by row: like Pillow, an image whose rows are all there decodes even when the
        // file ends early (no IEND, a cut checksum).
        let line = reader
            .output_line_size(width as u32)
            .ok_or_else(too_large)?;
        let mut buf = vec![0u8; line * height];
        for (y, row) in buf.chunks_exact_mut(line).enumerate() {
            match reader.read_row(row).map_err(map_err)? {
                Some(_) => {}
                None => {
                    return Err(Error::truncated(
                        Format::Png,
                        format!("the image data ends after {y} of {height} rows"),
                    ));
                }
            }
        }
        buf
    };
    let data = if depth == ::png::BitDepth::Sixteen {
        reduce_16(&buf, channels, source_color == ::png::ColorType::Grayscale)
    } else {
        buf
    };
    Ok(Raw {
        width,
        height,
        channels,
        data,
    })
}

/// Refuses the palettes the `png` crate's expansion cannot take (it would panic): a PLTE
/// chunk whose length is not a multiple of 3 or above 256 entries, more tRNS entries than
/// palette entries.
fn check_palette(info: &::png::Info<'_>) -> Result<(), Error> {
    if info.color_type != ::png::ColorType::Indexed {
        return Ok(());
    }
    let Some(plte) = info.palette.as_deref() else {
        return Err(Error::corrupt(
            Format::Png,
            "palette image without a PLTE chunk",
        ));
    };
    if plte.is_empty() || plte.len() % 3 != 0 || plte.len() > 256 * 3 {
        return Err(Error::corrupt(
            Format::Png,
            format!("PLTE chunk of {} bytes", plte.len()),
        ));
    }
    if let Some(trns) = info.trns.as_deref()
        && trns.len() > plte.len() / 3
    {
        return Err(Error::corrupt(
            Format::Png,
            format!(
                "tRNS chunk of {} entries for a palette of {}",
                trns.len(),
                plte.len() / 3
            ),
        ));
    }
    Ok(())
}

/// Big-endian 16-bit samples to 8 bits as Pillow loads them: a grey image (`I;16`) converts by
/// clipping to 255; colour and alpha samples keep their high byte.
fn reduce_16(buf: &[u8], channels: usize, clip_grey: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(buf.len() / 2);
    for (i, s) in buf.chunks_exact(2).enumerate() {
        if clip_grey && i % channels == 0 {
            let v = u16::from_be_bytes([s[0], s[1]]);
            out.push(v.min(255) as u8);
        } else {
            out.push(s[0]);
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{Decode, Pixels};

    /// Encodes a PNG with the `png` crate's encoder (test fixture).
    pub(crate) fn encode(
        width: u32,
        height: u32,
        color: ::png::ColorType,
        depth: ::png::BitDepth,
        data: &[u8],
        palette: Option<(&[u8], Option<&[u8]>)>,
        trns: Option<&[u8]>,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        {
            let mut enc = ::png::Encoder::new(&mut out, width, height);
            enc.set_color(color);
            enc.set_depth(depth);
            if let Some((plte, alpha)) = palette {
                enc.set_palette(plte.to_vec());
                if let Some(a) = alpha {
                    enc.set_trns(a.to_vec());
                }
            }
            if let Some(t) = trns {
                enc.set_trns(t.to_vec());
            }
            let mut w = enc.write_header().unwrap();
            w.write_image_data(data).unwrap();
        }
        out
    }

    fn decode_u8(data: &[u8]) -> (usize, Vec<u8>) {
        let im = Decode::default().decode(data).unwrap();
        let c = im.channels();
        match im.into_pixels() {
            Pixels::U8(v) => (c, v),
            Pixels::F32(_) => unreachable!(),
        }
    }

    use ::png::{BitDepth, ColorType};

    #[test]
    fn rgb_and_rgba_round_trip() {
        let rgb: Vec<u8> = (0..2 * 3 * 3).map(|i| (i * 13) as u8).collect();
        let png = encode(3, 2, ColorType::Rgb, BitDepth::Eight, &rgb, None, None);
        let im = Decode::default().decode(&png).unwrap();
        assert_eq!((im.height(), im.width(), im.channels()), (2, 3, 3));
        assert_eq!(im.pixels(), &Pixels::U8(rgb));
        let rgba: Vec<u8> = (0..16).map(|i| (i * 7) as u8).collect();
        let png = encode(2, 2, ColorType::Rgba, BitDepth::Eight, &rgba, None, None);
        assert_eq!(decode_u8(&png), (4, rgba));
    }

    #[test]
    fn palette_expands_like_pillow() {
        // Pillow: P with tRNS b"\x07" -> RGBA [[1,2,3,7],[4,5,6,255]].
        let png = encode(
            2,
            1,
            ColorType::Indexed,
            BitDepth::Four,
            &[0x01],
            Some((&[1, 2, 3, 4, 5, 6], Some(&[7]))),
            None,
        );
        assert_eq!(decode_u8(&png), (4, vec![1, 2, 3, 7, 4, 5, 6, 255]));
        let png = encode(
            2,
            1,
            ColorType::Indexed,
            BitDepth::Eight,
            &[1, 0],
            Some((&[1, 2, 3, 4, 5, 6], None)),
            None,
        );
        assert_eq!(decode_u8(&png), (3, vec![4, 5, 6, 1, 2, 3]));
    }

    #[test]
    fn low_bit_grey_scales_to_8_bits() {
        // Pillow: 2-bit grey 0,1,2,3 -> L 0,85,170,255; 1-bit 1,0,1,0 -> 255,0,255,0.
        let png = encode(
            4,
            1,
            ColorType::Grayscale,
            BitDepth::Two,
            &[0b0001_1011],
            None,
            None,
        );
        assert_eq!(decode_u8(&png), (1, vec![0, 85, 170, 255]));
        let png = encode(
            4,
            1,
            ColorType::Grayscale,
            BitDepth::One,
            &[0b1010_0000],
            None,
            None,
        );
        assert_eq!(decode_u8(&png), (1, vec![255, 0, 255, 0]));
    }

    #[test]
    fn sixteen_bits_as_pillow_loads_them() {
        // Grey I;16 clips: 0x0012 -> 18, 0x0100 -> 255; RGB16 keeps the high byte; LA16 too.
        for (width, color, samples, expected) in [
            (
                2,
                ColorType::Grayscale,
                &[0, 0x12, 1, 0][..],
                (1, vec![18, 255]),
            ),
            (
                1,
                ColorType::Rgb,
                &[0x12, 0x34, 0x80, 0xff, 0x00, 0xff],
                (3, vec![0x12, 0x80, 0]),
            ),
            (
                1,
                ColorType::GrayscaleAlpha,
                &[0x12, 0x34, 0x80, 0xff],
                (2, vec![0x12, 0x80]),
            ),
        ] {
            let png = encode(width, 1, color, BitDepth::Sixteen, samples, None, None);
            assert_eq!(decode_u8(&png), expected, "{color:?}");
        }
    }

    #[test]
    fn trns_colour_key_becomes_alpha() {
        // Pillow: L with transparency 5 -> RGBA alpha 0 where the grey is 5.
        let png = encode(
            2,
            1,
            ColorType::Grayscale,
            BitDepth::Eight,
            &[5, 6],
            None,
            Some(&[0, 5]),
        );
        assert_eq!(decode_u8(&png), (2, vec![5, 0, 6, 255]));
        let png = encode(
            2,
            1,
            ColorType::Grayscale,
            BitDepth::Sixteen,
            &[0, 0x12, 1, 0],
            None,
            Some(&[0, 0x12]),
        );
        assert_eq!(decode_u8(&png), (2, vec![18, 0, 255, 255]));
    }

    #[test]
    fn truncated_corrupt_and_over_limit() {
        let rgb = vec![100u8; 32 * 32 * 3];
        let png = encode(32, 32, ColorType::Rgb, BitDepth::Eight, &rgb, None, None);
        let err = Decode::default().decode(&png[..png.len() / 2]).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Truncated {
                    format: Format::Png,
                    ..
                }
            ),
            "{err}"
        );
        let mut bad = png.clone();
        bad[20] ^= 0xff; // inside IHDR: the CRC no longer matches
        let err = Decode::default().decode(&bad).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Corrupt {
                    format: Format::Png,
                    ..
                }
            ),
            "{err}"
        );
        let err = Decode::new(31, 100, 1 << 20)
            .unwrap()
            .decode(&png)
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::TooLarge {
                    width: 32,
                    max_width: 31,
                    ..
                }
            ),
            "{err}"
        );
        let err = Decode::new(100, 100, 1000)
            .unwrap()
            .decode(&png)
            .unwrap_err();
        assert!(matches!(err, Error::AllocationTooLarge { .. }), "{err}");
    }

    /// A PNG of the given chunks (after the signature).
    fn chunks(list: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        for (kind, data) in list {
            let mut body = kind.to_vec();
            body.extend(*data);
            png.extend((data.len() as u32).to_be_bytes());
            png.extend(&body);
            png.extend(crc32(&body).to_be_bytes());
        }
        png
    }

    #[test]
    fn malformed_palettes_are_errors_not_panics() {
        // 2 x 1, 8-bit palette; one zlib-compressed row of filter 0 and indices 0, 1.
        let ihdr = [0, 0, 0, 2, 0, 0, 0, 1, 8, 3, 0, 0, 0];
        let idat = [
            0x78, 0x9c, 0x63, 0x60, 0x60, 0x04, 0x00, 0x00, 0x04, 0x00, 0x02,
        ];
        let ok = chunks(&[
            (b"IHDR", &ihdr),
            (b"PLTE", &[1, 2, 3, 4, 5, 6]),
            (b"IDAT", &idat),
            (b"IEND", &[]),
        ]);
        assert_eq!(decode_u8(&ok), (3, vec![1, 2, 3, 4, 5, 6]));
        // Found by the decode_png fuzz target: a PLTE of 49 bytes made the png crate panic.
        let bad = chunks(&[
            (b"IHDR", &ihdr),
            (b"PLTE", &[7; 49]),
            (b"IDAT", &idat),
            (b"IEND", &[]),
        ]);
        let err = Decode::default().decode(&bad).unwrap_err();
        assert_eq!(err.to_string(), "corrupt PNG image: PLTE chunk of 49 bytes");
        let bad = chunks(&[
            (b"IHDR", &ihdr),
            (b"PLTE", &[1, 2, 3, 4, 5, 6]),
            (b"tRNS", &[0, 0, 0]),
            (b"IDAT", &idat),
            (b"IEND", &[]),
        ]);
        let err = Decode::default().decode(&bad).unwrap_err();
        assert_eq!(
            err.to_string(),
            "corrupt PNG image: tRNS chunk of 3 entries for a palette of 2"
        );
    }

    #[test]
    fn complete_rows_decode_without_the_file_end_like_pillow() {
        // Pillow 13 loads a PNG whose IEND (12 bytes) or whose IDAT checksums (8 more) are cut.
        let rgb: Vec<u8> = (0..20 * 20 * 3).map(|i| (i * 7 % 251) as u8).collect();
        let png = encode(20, 20, ColorType::Rgb, BitDepth::Eight, &rgb, None, None);
        for cut in [12, 20] {
            assert_eq!(
                decode_u8(&png[..png.len() - cut]),
                (3, rgb.clone()),
                "{cut}"
            );
        }
        let err = Decode::default()
            .decode(&png[..png.len() - 40])
            .unwrap_err();
        assert!(matches!(err, Error::Truncated { .. }), "{err}");
    }

    #[test]
    fn bomb_is_refused_from_the_header() {
        // A 16384 x 16384 RGBA header followed by nothing: refused before any allocation.
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut ihdr = b"IHDR".to_vec();
        ihdr.extend(16384u32.to_be_bytes());
        ihdr.extend(16384u32.to_be_bytes());
        ihdr.extend([8, 6, 0, 0, 0]);
        png.extend(13u32.to_be_bytes());
        png.extend(&ihdr);
        png.extend(crc32(&ihdr).to_be_bytes());
        let err = Decode::default().decode(&png).unwrap_err();
        assert_eq!(
            err.to_string(),
            "image of 16384x16384 pixels needs 1073741824 bytes, above the limit of 268435456 bytes"
        );
    }

    fn crc32(data: &[u8]) -> u32 {
        let mut crc = 0xffff_ffffu32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
}
