//! Synthetic test images: smooth gradients with a little deterministic noise (so that PNG
//! compresses them about as well as real tiles), encoded as PNG; and tar archives of them.

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

/// The tar (ustar) archive of `members`, `(name, data)` each, with its end-of-archive blocks.
/// Names must fit a ustar header's 100 bytes.
pub fn tar(members: &[(String, &[u8])]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for (name, data) in members {
        if name.len() > 99 {
            anyhow::bail!("the tar member name {name:?} is too long");
        }
        let mut header = [0u8; 512];
        header[..name.len()].copy_from_slice(name.as_bytes());
        let fields: [(usize, usize, u64); 5] = [
            (100, 8, 0o644),              // mode
            (108, 8, 0),                  // uid
            (116, 8, 0),                  // gid
            (124, 12, data.len() as u64), // size
            (136, 12, 0),                 // mtime
        ];
        for (at, len, value) in fields {
            let text = format!("{value:0width$o}", width = len - 1);
            if text.len() != len - 1 {
                anyhow::bail!("the tar member {name:?} is too large");
            }
            header[at..at + len - 1].copy_from_slice(text.as_bytes());
        }
        header[156] = b'0'; // a regular file
        header[257..263].copy_from_slice(b"ustar\0");
        header[263..265].copy_from_slice(b"00");
        // The checksum is summed with its own field as spaces.
        header[148..156].fill(b' ');
        let sum: u32 = header.iter().map(|&b| u32::from(b)).sum();
        header[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(data);
        out.resize(out.len().next_multiple_of(512), 0);
    }
    out.resize(out.len() + 1024, 0);
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
    fn tars_hold_their_members() {
        let members = [
            ("000001.png".to_owned(), &b"abc"[..]),
            ("x.txt".to_owned(), &[7; 600][..]),
        ];
        let archive = tar(&members).unwrap();
        // Two headers, 1 + 2 data blocks, two end blocks.
        assert_eq!(archive.len(), 512 * 7);
        assert_eq!(&archive[512..515], b"abc");
        assert_eq!(&archive[..10], b"000001.png");
        let sum: u32 = archive[..512]
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u32::from(b)
                }
            })
            .sum();
        assert_eq!(&archive[148..155], format!("{sum:06o}\0").as_bytes());
        assert!(tar(&[("n".repeat(100), &b""[..])]).is_err());
    }

    #[test]
    fn seeds_differ_and_repeat() {
        assert_eq!(pixels(4, 4, 3, 1), pixels(4, 4, 3, 1));
        assert_ne!(pixels(4, 4, 3, 1), pixels(4, 4, 3, 2));
    }
}
