//! Whole pipelines: the spec's tile chain, and errors for items a transform does not take.

use std::sync::Arc;

use dlrs_transforms::{
    BatchLayout, Collator, Compose, Decode, Dtype, Error, Item, Layout, Normalize, Pixels,
    Transform,
};

use crate::fixture;
use crate::tile_chain::{MEAN, STD, tile_chain};

/// The chain of these tests: 28 rows of 16.
fn tiles() -> Compose {
    tile_chain(16, 28)
}

#[test]
fn tile_chain_equals_pillow_then_to_tensor_and_normalize() {
    // Pillow's decode of the lossless WebP (13 x 11 RGB), padded right/bottom to 28 x 16 with 0,
    // then x / 255, (x - mean) / std in float32, CHW.
    let rgb = fixture("rgb_lossless.webp.bin");
    let out = tiles()
        .apply(7, Item::Bytes(fixture("rgb_lossless.webp").into()))
        .unwrap();
    let Item::Image(im) = out else { panic!() };
    assert_eq!(im.shape(), [3, 28, 16]);
    assert_eq!(im.layout(), Layout::Chw);
    let Pixels::F32(v) = im.pixels() else {
        panic!()
    };
    for c in 0..3 {
        for y in 0..28 {
            for x in 0..16 {
                let byte = if y < 13 && x < 11 {
                    rgb[(y * 11 + x) * 3 + c]
                } else {
                    0
                };
                let expected = (f32::from(byte) / 255.0 - MEAN[c] as f32) / STD[c] as f32;
                assert_eq!(v[(c * 28 + y) * 16 + x].to_bits(), expected.to_bits());
            }
        }
    }
    let batch = Collator::new(BatchLayout::Nchw, Some(Dtype::F32), 2)
        .collate(vec![im.clone(), im.clone()])
        .unwrap();
    assert_eq!(batch.shape(), [2, 3, 28, 16]);
    assert_eq!(&batch.as_f32().unwrap()[3 * 28 * 16..], &v[..]);
}

#[test]
fn errors_name_the_transform_and_the_reason() {
    let bad = Compose::new(vec![
        Arc::new(Decode::default()),
        Arc::new(Normalize::new(&MEAN, &STD).unwrap()),
    ]);
    let err = bad
        .apply(0, Item::Bytes(fixture("rgb.tiff").into()))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Normalize expects a float32 image (apply ToFloat first), got a uint8 HWC image of 13x11x3"
    );
    let err = tiles()
        .apply(0, Item::Bytes(b"not an image".to_vec().into()))
        .unwrap_err();
    assert!(matches!(err, Error::UnknownFormat { .. }), "{err}");
}
