//! BMP files for the tests, built by hand. The unit tests of `src/decode/bmp.rs` include this
//! file too (`#[path]`): the integration tests cannot see the crate's test-only code.

/// A BMP with a 40-byte header around `pixels`: `compression` as the header names it (0 for
/// none), the `masks` of bit fields and the `palette` after the header.
pub fn bmp(
    width: i32,
    height: i32,
    bits: u16,
    compression: u32,
    palette: &[[u8; 4]],
    masks: &[u32],
    pixels: &[u8],
) -> Vec<u8> {
    let mut info = Vec::new();
    info.extend(40u32.to_le_bytes());
    info.extend(width.to_le_bytes());
    info.extend(height.to_le_bytes());
    info.extend(1u16.to_le_bytes());
    info.extend(bits.to_le_bytes());
    info.extend(compression.to_le_bytes());
    info.extend((pixels.len() as u32).to_le_bytes());
    info.extend([0u8; 8]);
    info.extend((palette.len() as u32).to_le_bytes());
    info.extend(0u32.to_le_bytes());
    for m in masks {
        info.extend(m.to_le_bytes());
    }
    for p in palette {
        info.extend(p);
    }
    let offset = 14 + info.len() as u32;
    let mut out = b"BM".to_vec();
    out.extend((offset + pixels.len() as u32).to_le_bytes());
    out.extend([0u8; 4]);
    out.extend(offset.to_le_bytes());
    out.extend(info);
    out.extend(pixels);
    out
}
