//! WebP (lossy and lossless, first frame) through image-webp.

use std::io::Cursor;

use image_webp::{DecodingError, WebPDecoder};

use super::{DecodeLimits, Raw};
use crate::{Error, Format};

fn map_err(e: DecodingError) -> Error {
    match e {
        DecodingError::IoError(io) => Error::read(Format::WebP, io),
        DecodingError::UnsupportedFeature(f) => Error::unsupported(Format::WebP, f),
        other => Error::corrupt(Format::WebP, other),
    }
}

pub(crate) fn decode(data: &[u8], limits: &DecodeLimits) -> Result<Raw, Error> {
    // The RIFF header gives the file's size: libwebp (so Pillow) refuses a shorter file.
    if let Some(size) = data.get(4..8) {
        let riff = u64::from(u32::from_le_bytes([size[0], size[1], size[2], size[3]])) + 8;
        if (data.len() as u64) < riff {
            return Err(Error::truncated(
                Format::WebP,
                format!("{} of the {riff} bytes its header announces", data.len()),
            ));
        }
    }
    let mut decoder = WebPDecoder::new(Cursor::new(data)).map_err(map_err)?;
    let (width, height) = decoder.dimensions();
    let channels = if decoder.has_alpha() { 4 } else { 3 };
    limits.check(u64::from(width), u64::from(height), channels as u64)?;
    decoder.set_memory_limit(limits.working_bytes());
    let size = decoder
        .output_buffer_size()
        .ok_or_else(|| Error::corrupt(Format::WebP, "image too large for this platform"))?;
    let mut buf = vec![0u8; size];
    decoder.read_image(&mut buf).map_err(map_err)?;
    Ok(Raw {
        width: width as usize,
        height: height as usize,
        channels,
        data: buf,
    })
}
