//! Synthetic test images: smooth gradients with a little deterministic noise (so that PNG
//! compresses them about as well as real tiles), encoded as PNG.

use anyhow::{Context, Result};

/// `height × width × channels` uint8 pixels (HWC), the same for the same `seed`.
pub fn pixels(height: usize, width: usize, channels: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(height * width * channels);
    for y in 0..height {
        for x in 0..width {
            for c in 0..channels {
                // xorshift64: a few bits of noise over a gradient that differs per channel.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let noise = (state % 9) as usize;
                let base = match c % 4 {
                    0 => x * 255 / width.max(1),
                    1 => y * 255 / height.max(1),
                    2 => (x + y) * 255 / (width + height).max(1),
                    _ => 255 - (x * y) % 256,
                };
                out.push(((base + noise + seed as usize * 37) % 256) as u8);
            }
        }
    }
    out
}

/// The PNG encoding of HWC `pixels` with 1 (L), 2 (LA), 3 (RGB) or 4 (RGBA) channels.
pub fn png(height: usize, width: usize, channels: usize, pixels: &[u8]) -> Result<Vec<u8>> {
    let colour = match channels {
        1 => png::ColorType::Grayscale,
        2 => png::ColorType::GrayscaleAlpha,
        3 => png::ColorType::Rgb,
        4 => png::ColorType::Rgba,
        n => anyhow::bail!("cannot encode {n} channels as PNG"),
    };
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(
            &mut out,
            u32::try_from(width).context("width")?,
            u32::try_from(height).context("height")?,
        );
        encoder.set_color(colour);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().context("PNG header")?;
        writer.write_image_data(pixels).context("PNG data")?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlrs_transforms::{Decode, Pixels};

    #[test]
    fn pngs_decode_to_their_pixels() {
        for channels in 1..=4 {
            let px = pixels(13, 17, channels, channels as u64);
            assert_eq!(px.len(), 13 * 17 * channels);
            let encoded = png(13, 17, channels, &px).unwrap();
            let im = Decode::default().decode(&encoded).unwrap();
            assert_eq!(im.shape(), [13, 17, channels]);
            assert_eq!(im.pixels(), &Pixels::U8(px));
        }
        assert!(png(1, 1, 5, &[0; 5]).is_err());
    }

    #[test]
    fn seeds_differ_and_repeat() {
        assert_eq!(pixels(4, 4, 3, 1), pixels(4, 4, 3, 1));
        assert_ne!(pixels(4, 4, 3, 1), pixels(4, 4, 3, 2));
    }
}
