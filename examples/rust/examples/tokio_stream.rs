//! Batches as an async `Stream` inside a tokio program: two shuffled epochs of images, each
//! epoch a different order of the same items, loaded without worker threads (the stream's own
//! thread loads them, so nothing blocks the runtime).

use std::collections::BTreeSet;
use std::sync::Arc;

use dlrs_core::{Config, Loader, Shuffle};
use dlrs_examples::{TempDir, pixels, write_png};
use dlrs_io::{BatchStream, FetchOptions, FileDataset, ImageStages, Pipeline};
use dlrs_transforms::{BatchLayout, CenterCrop, Collator, Compose, Decode};
use futures::StreamExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = TempDir::new("tokio-stream")?;
    for i in 0..20u64 {
        // Pixel (0, 0) of image i after the crop is i: each batch tells which items it holds.
        let mut px = pixels(36, 36, 1, i);
        px[2 * 36 + 2] = i as u8;
        write_png(&dir.path().join(format!("{i}.png")), 36, 36, 1, &px)?;
    }
    let template = format!("{}/{{index}}.png", dir.path().display());
    let dataset = FileDataset::from_template(&template, vec![], Some(20), FetchOptions::FILE)?;
    let transform = Compose::default()
        .then(Decode::default())
        .then(CenterCrop::new(32, 32)?);
    let stages = ImageStages::new(transform, Collator::new(BatchLayout::Nhwc, None, 2));
    let pipeline = Pipeline::new(Arc::new(dataset), stages);
    let len = pipeline.len();
    let loader = Loader::new(
        pipeline,
        Config {
            batch_size: 8,
            num_workers: 0,
            ..Config::default()
        },
    )?;

    let shuffle = Shuffle::seeded(7);
    let mut orders = Vec::new();
    for _ in 0..2 {
        let mut stream = BatchStream::new(loader.shuffled_epoch(&shuffle, len))?;
        let mut order = Vec::new();
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            order.extend(
                batch
                    .as_bytes()
                    .chunks(32 * 32)
                    .map(|image| u64::from(image[0])),
            );
        }
        assert_eq!(
            order.iter().copied().collect::<BTreeSet<_>>(),
            (0..20).collect()
        );
        orders.push(order);
    }
    assert_ne!(orders[0], orders[1], "each epoch is shuffled anew");
    println!("tokio_stream: 2 epochs of 20 images as a Stream, orders {orders:?}");
    Ok(())
}
