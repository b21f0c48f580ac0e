//! Integration tests of dlrs-transforms: decoding against Pillow's output for fixture files,
//! robustness of every decoder, and whole pipelines.

mod bmp_file;
mod decode;
mod pipeline;
mod robustness;
mod tile_chain;

use dlrs_transforms::{Decode, Image, Pixels};

/// A fixture of `tests/data`.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Decodes a fixture.
pub fn decode(name: &str) -> Image {
    Decode::default()
        .decode(&fixture(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The uint8 values of an image.
pub fn u8s(im: &Image) -> &[u8] {
    match im.pixels() {
        Pixels::U8(v) => v,
        Pixels::F32(_) => panic!("not uint8"),
    }
}

/// The largest difference between two equally long byte strings.
pub fn max_diff(a: &[u8], b: &[u8]) -> u8 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| x.abs_diff(*y))
        .max()
        .unwrap_or(0)
}
