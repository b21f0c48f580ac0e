//! What a new user writes: an image pipeline over files in about twenty lines of the public API.

use std::sync::Arc;

use dlrs_core::{Config, Loader, Shuffle};
use dlrs_io::{FetchOptions, FileDataset, ImageStages, Pipeline};
use dlrs_transforms::{
    BatchLayout, Collator, Compose, Decode, Interpolation, Normalize, Resize, ResizeSize, ToChw,
    ToFloat,
};

fn load(template: &str, len: usize) -> Result<Vec<[usize; 4]>, Box<dyn std::error::Error>> {
    let dataset = FileDataset::from_template(template, vec![], Some(len), FetchOptions::FILE)?;
    let transform = Compose::default()
        .then(Decode::default())
        .then(Resize::new(
            ResizeSize::Exact {
                height: 16,
                width: 16,
            },
            Interpolation::Bilinear,
            None,
            true,
        )?)
        .then(ToFloat::default())
        .then(Normalize::new(&[0.5], &[0.25])?)
        .then(ToChw);
    let stages = ImageStages::new(transform, Collator::new(BatchLayout::Nchw, None, 4));
    let pipeline = Pipeline::new(Arc::new(dataset), stages);
    let len = pipeline.len();
    let loader = Loader::new(
        pipeline,
        Config {
            batch_size: 4,
            num_workers: 2,
            ..Config::default()
        },
    )?;
    let mut shapes = Vec::new();
    for batch in loader.shuffled_epoch(&Shuffle::seeded(0), len) {
        shapes.push(batch?.shape());
    }
    Ok(shapes)
}

#[test]
fn an_image_pipeline_over_files() {
    let dir = dlrs_examples::TempDir::new("new-user").unwrap();
    for i in 0..10 {
        let px = dlrs_examples::pixels(32, 24 + i, 1, i as u64);
        dlrs_examples::write_png(&dir.path().join(format!("{i}.png")), 32, 24 + i, 1, &px).unwrap();
    }
    let shapes = load(&format!("{}/{{index}}.png", dir.path().display()), 10).unwrap();
    assert_eq!(shapes, [[4, 1, 16, 16], [4, 1, 16, 16], [2, 1, 16, 16]]);

    // A missing file fails its batch with an error that names the item.
    std::fs::remove_file(dir.path().join("3.png")).unwrap();
    let error = load(&format!("{}/{{index}}.png", dir.path().display()), 10).unwrap_err();
    assert!(error.to_string().contains(": item 3: "), "{error}");
    assert!(error.to_string().contains("3.png"), "{error}");
}
