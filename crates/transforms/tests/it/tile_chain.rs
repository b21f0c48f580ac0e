//! The spec's tile chain: Decode, ToRgb, PadTo, ToFloat, Normalize with ImageNet's mean and
//! std, ToChw. Shared by the pipeline tests, the benchmark and the throughput example.

use std::sync::Arc;

use dlrs_transforms::{Anchor, Compose, Decode, Fill, Normalize, PadTo, ToChw, ToFloat, ToRgb};

/// ImageNet's channel means.
pub const MEAN: [f64; 3] = [0.485, 0.456, 0.406];
/// ImageNet's channel standard deviations.
pub const STD: [f64; 3] = [0.229, 0.224, 0.225];

/// The chain, padding right and bottom to at least `width × height` with 0.
pub fn tile_chain(width: usize, height: usize) -> Compose {
    Compose::new(vec![
        Arc::new(Decode::default()),
        Arc::new(ToRgb),
        Arc::new(PadTo::new(width, height, Fill::default(), Anchor::TopLeft).unwrap()),
        Arc::new(ToFloat::default()),
        Arc::new(Normalize::new(&MEAN, &STD).unwrap()),
        Arc::new(ToChw),
    ])
}
