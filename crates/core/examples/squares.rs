//! The core from Rust, without Python: a source of squares, loaded in shuffled batches by two
//! worker threads. Run with `cargo run -p dlrs-core --example squares`.

use dlrs_core::{BatchCtx, Config, LoadError, Loader, Shuffle, Source};

/// Item `i` is `i²`; a batch is the vector of its items.
struct Squares;

impl Source for Squares {
    type Batch = Vec<u64>;
    type Error = String;

    fn load_batch(&self, indices: &[u64], _: &BatchCtx) -> Result<Vec<u64>, LoadError<String>> {
        Ok(indices.iter().map(|i| i * i).collect())
    }
}

fn main() {
    let config = Config {
        batch_size: 4,
        num_workers: 2,
        prefetch_depth: 2,
        ..Config::default()
    };
    let loader = Loader::new(Squares, config).expect("a valid configuration");
    let shuffle = Shuffle::seeded(0);
    for epoch in 0..2 {
        // A new order each time: the loader counts its epochs.
        for batch in loader.shuffled_epoch(&shuffle, 10) {
            println!("epoch {epoch}: {:?}", batch.expect("squares never fail"));
        }
    }
    println!("{:?}", loader.stats());
}
