//! What the examples share: a directory of generated PNG files.

use std::path::{Path, PathBuf};

/// A temporary directory, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh directory named after `name` and the process.
    pub fn new(name: &str) -> std::io::Result<TempDir> {
        let dir = std::env::temp_dir().join(format!("dlrs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Pixels of a `height × width` image with `channels` (1: gray, 3: RGB, 4: RGBA), the same for
/// the same `seed`.
pub fn pixels(height: usize, width: usize, channels: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..height * width * channels)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 56) as u8
        })
        .collect()
}

/// Writes `pixels` as a PNG file at `path`.
pub fn write_png(
    path: &Path,
    height: usize,
    width: usize,
    channels: usize,
    pixels: &[u8],
) -> Result<(), Box<dyn std::error::Error>> {
    let color = match channels {
        1 => png::ColorType::Grayscale,
        3 => png::ColorType::Rgb,
        4 => png::ColorType::Rgba,
        n => return Err(format!("{n} channels").into()),
    };
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut encoder = png::Encoder::new(file, width as u32, height as u32);
    encoder.set_color(color);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.write_header()?.write_image_data(pixels)?;
    Ok(())
}
