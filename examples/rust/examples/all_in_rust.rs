//! All in Rust: PNG files read by `FileDataset`, decoded and transformed by `dlrs-transforms`,
//! collated into float32 NCHW batches on two worker threads.
//!
//! The images have different sizes and modes (RGB, gray, RGBA): `ToRgb` and `PadTo` make them
//! one shape. The values are checked against the same arithmetic done by hand.

use std::sync::Arc;

use dlrs_core::{Config, Loader, Order};
use dlrs_examples::{TempDir, pixels, write_png};
use dlrs_io::{FetchOptions, FileDataset, ImageStages, Pipeline};
use dlrs_transforms::{
    Anchor, BatchLayout, Collator, Compose, Decode, Fill, Normalize, PadTo, Size, ToChw, ToFloat,
    ToRgb,
};

const MEAN: [f64; 3] = [0.485, 0.456, 0.406];
const STD: [f64; 3] = [0.229, 0.224, 0.225];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = TempDir::new("all-in-rust")?;
    let mut images = Vec::new(); // (height, width, RGB pixels) of each file
    for i in 0..40u64 {
        let (h, w, channels) = (
            40 + i as usize % 9,
            48 - i as usize % 7,
            [3, 1, 4][i as usize % 3],
        );
        let px = pixels(h, w, channels, i);
        write_png(&dir.path().join(format!("{i}.png")), h, w, channels, &px)?;
        let rgb: Vec<u8> = px
            .chunks(channels)
            .flat_map(|p| {
                if channels == 1 {
                    [p[0]; 3]
                } else {
                    [p[0], p[1], p[2]]
                }
            })
            .collect();
        images.push((h, w, rgb));
    }

    let template = format!("{}/{{index}}.png", dir.path().display());
    let dataset = FileDataset::from_template(&template, vec![], Some(40), FetchOptions::FILE)?;
    let transform = Compose::default()
        .then(Decode::default())
        .then(ToRgb)
        .then(PadTo::with_size(
            Size::square(48),
            Fill::Value(0.0),
            Anchor::TopLeft,
        )?)
        .then(ToFloat::default())
        .then(Normalize::new(&MEAN, &STD)?)
        .then(ToChw);
    let stages = ImageStages::new(transform, Collator::new(BatchLayout::Nchw, None, 4));
    let pipeline = Pipeline::new(Arc::new(dataset), stages);
    let loader = Loader::new(
        pipeline,
        Config {
            batch_size: 16,
            num_workers: 2,
            item_concurrency: 4,
            ..Config::default()
        },
    )?;

    let mut shapes = Vec::new();
    let mut seen = 0;
    for batch in loader.epoch(Order::Sequential { len: 40 }) {
        let batch = batch?;
        let values = batch.as_f32().ok_or("a float32 batch")?;
        for chw in values.chunks(3 * 48 * 48) {
            let (h, w, rgb) = &images[seen];
            for c in 0..3 {
                for y in 0..48 {
                    for x in 0..48 {
                        let v = if y < *h && x < *w {
                            f64::from(rgb[(y * w + x) * 3 + c]) / 255.0
                        } else {
                            0.0
                        };
                        let expected = (v - MEAN[c]) / STD[c];
                        let got = f64::from(chw[(c * 48 + y) * 48 + x]);
                        assert!(
                            (got - expected).abs() < 1e-5,
                            "image {seen} ({c}, {y}, {x}): {got} != {expected}"
                        );
                    }
                }
            }
            seen += 1;
        }
        shapes.push(batch.shape());
    }
    assert_eq!(seen, 40);
    assert_eq!(shapes, [[16, 3, 48, 48], [16, 3, 48, 48], [8, 3, 48, 48]]);
    println!(
        "all_in_rust: {seen} PNGs -> {} float32 NCHW batches {shapes:?}, values checked",
        shapes.len()
    );
    Ok(())
}
