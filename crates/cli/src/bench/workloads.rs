//! The workloads of `dlrs bench`: their sources and what each sets up (files, tiles, a server).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use dlrs_core::{BatchCtx, Config, LoadError, Source};
use dlrs_io::{
    Column, Dataset, FetchOptions, FileDataset, HttpDataset, HttpOptions, ImageStages, ItemAt,
    Pipeline, Stages, StreamPipeline, TarItems, TarOptions, TarStream,
};
use dlrs_transforms::{
    Batch, BatchLayout, Collator, Compose, Decode, Normalize, ToChw, ToFloat, ToRgb,
};
use futures::future::BoxFuture;

use super::report::Measurement;
use super::{Measured, measure};
use crate::args::{BenchArgs, Workload};
use crate::progress::Progress;
use crate::server::{LoopbackServer, bytes_body};
use crate::synth;

/// Distinct files of the files workload (items reuse them in turn).
const DISTINCT_FILES: u64 = 256;
/// Distinct tiles of the images workload.
const DISTINCT_TILES: usize = 16;
/// The side of a tile.
const TILE: usize = 224;

/// The default number of items of `workload`.
pub fn default_items(workload: Workload) -> u64 {
    match workload {
        Workload::Overhead => 2_000_000,
        Workload::Files => 4096,
        Workload::Images | Workload::Http | Workload::Tar => 2048,
    }
}

/// Runs one workload with the arguments' settings; `progress` replaces the default bar.
pub fn run(
    workload: Workload,
    args: &BenchArgs,
    progress: Option<Progress>,
) -> Result<Measurement> {
    let items = args.items.unwrap_or_else(|| default_items(workload));
    let config = Config {
        batch_size: args.batch_size as usize,
        num_workers: args.workers as usize,
        item_concurrency: match (workload, args.concurrency) {
            // The tar workload's workers read and decode their batch themselves.
            (Workload::Overhead | Workload::Tar, _) => 1,
            (_, Some(k)) => k as usize,
            // A batch's tiles decode on the transform threads, one a worker.
            (Workload::Images, None) => (args.workers as usize).max(1),
            (Workload::Files | Workload::Http, None) => 32,
        },
        ..Config::default()
    };
    let progress = progress
        .unwrap_or_else(|| Progress::new(items * u64::from(args.epochs), workload.name(), "items"));
    let name = workload.name();
    let result = match workload {
        Workload::Overhead => measure(name, Indices, config, items, args.epochs, &progress),
        Workload::Files => {
            let dir = TempFiles::new(items.min(DISTINCT_FILES), args.item_bytes as usize)?;
            let files: Vec<i64> = (0..items).map(|i| (i % DISTINCT_FILES) as i64).collect();
            let dataset = FileDataset::from_template(
                &format!("{}/{{file}}.bin", dir.0.display()),
                vec![("file".to_owned(), Column::Ints(files))],
                None,
                FetchOptions::FILE,
            )?;
            let source = fetch(Arc::new(dataset), args);
            measure(name, source, config, items, args.epochs, &progress)
        }
        Workload::Images => {
            let source = tiles(config.num_workers)?;
            measure(name, source, config, items, args.epochs, &progress)
        }
        Workload::Http => {
            let latency = Duration::from_secs_f64(args.latency_ms / 1e3);
            let server =
                LoopbackServer::start(latency).context("cannot start the loopback server")?;
            let template = format!(
                "{}/bytes/{}?i={{index}}",
                server.base_url(),
                args.item_bytes
            );
            let dataset = HttpDataset::from_template(
                &template,
                vec![],
                Some(usize::try_from(items).context("--items")?),
                HttpOptions::default(),
            )?;
            let source = fetch(Arc::new(dataset), args);
            measure(name, source, config, items, args.epochs, &progress)
        }
        Workload::Tar => {
            let shards = TarShards::new(items, u64::from(args.shards))?;
            let latency = Duration::from_secs_f64(args.latency_ms / 1e3);
            let server = LoopbackServer::serve_dir(0, latency, Some(shards.dir.0.clone()))
                .context("cannot start the loopback server")?;
            let source = shards.source(&server, config.num_workers)?;
            measure(name, source, config, items, args.epochs, &progress)
        }
    };
    progress.finish();
    result
}

/// The overhead workload's source: a batch is its indices.
struct Indices;

impl Source for Indices {
    type Batch = Vec<u64>;
    type Error = String;
    fn load_batch(&self, indices: &[u64], _: &BatchCtx) -> Result<Vec<u64>, LoadError<String>> {
        Ok(indices.to_vec())
    }
}

impl Measured for Vec<u64> {
    fn items(&self) -> u64 {
        self.len() as u64
    }
    fn bytes(&self) -> u64 {
        0
    }
}

/// A batch of fetched items: their count and bytes.
pub struct Fetched {
    items: u64,
    bytes: u64,
}

impl Measured for Fetched {
    fn items(&self) -> u64 {
        self.items
    }
    fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// The stages of the files and HTTP workloads: items are counted, not transformed.
struct Count;

impl Stages for Count {
    type Item = u64;
    type Batch = Fetched;
    type Error = dlrs_io::Error;

    fn transform(&self, _: &ItemAt, bytes: Bytes) -> Result<u64, dlrs_io::Error> {
        Ok(bytes.len() as u64)
    }

    fn runs_on_pool(&self) -> bool {
        false
    }

    fn io_error(&self, _: Option<&ItemAt>, error: dlrs_io::Error) -> dlrs_io::Error {
        error
    }

    fn collate(&self, items: Vec<u64>, _: &[u64]) -> Result<Fetched, dlrs_io::Error> {
        Ok(Fetched {
            items: items.len() as u64,
            bytes: items.iter().sum(),
        })
    }
}

/// A dlrs-io dataset as a source: each batch fetches its items, `item_concurrency` at once
/// (and `--items-in-flight` across the batches), on a runtime shared by the workers.
fn fetch(dataset: Arc<dyn Dataset>, args: &BenchArgs) -> Pipeline<Count> {
    Pipeline::new(dataset, Count).items_in_flight(args.items_in_flight.map(|n| n as usize))
}

/// The tiles of the images workload, held in memory.
struct Tiles(Vec<Bytes>);

impl Dataset for Tiles {
    fn len(&self) -> u64 {
        u64::MAX
    }

    fn fetch(&self, index: u64) -> BoxFuture<'static, Result<Bytes, dlrs_io::Error>> {
        let tile = self.0[(index % self.0.len() as u64) as usize].clone();
        Box::pin(std::future::ready(Ok(tile)))
    }
}

/// The distinct PNG tiles of the images and tar workloads.
fn png_tiles() -> Result<Vec<Bytes>> {
    (0..DISTINCT_TILES)
        .map(|seed| {
            let px = synth::pixels(TILE, TILE, 3, seed as u64);
            synth::png(TILE, TILE, 3, &px).map(Bytes::from)
        })
        .collect()
}

/// The images workload's source: PNG tiles decoded, made RGB float CHW normalised, collated,
/// on `workers` transform threads.
fn tiles(workers: usize) -> Result<Pipeline<ImageStages>> {
    Ok(
        Pipeline::new(Arc::new(Tiles(png_tiles()?)), image_stages(workers)?)
            .transform_threads(workers.max(1)),
    )
}

/// Each tile decoded, made RGB float CHW normalised, and the batch collated NCHW.
fn image_stages(workers: usize) -> Result<ImageStages> {
    let steps = Compose::default()
        .then(Decode::default())
        .then(ToRgb)
        .then(ToFloat::default())
        .then(Normalize::new(
            &[0.485, 0.456, 0.406],
            &[0.229, 0.224, 0.225],
        )?)
        .then(ToChw);
    // Batches are dropped at once: a few buffers are enough to reuse every one.
    let collator = Collator::new(BatchLayout::Nchw, None, workers + 2);
    Ok(ImageStages::new(steps, collator))
}

/// The tar workload's shards in a temporary directory: `items` tiles as `<key>.png` members,
/// keys in order, spread evenly over the shards.
struct TarShards {
    dir: TempFiles,
    shards: u64,
}

impl TarShards {
    /// `items` tiles over `shards` shards (at most one per item).
    fn new(items: u64, shards: u64) -> Result<TarShards> {
        let tiles = png_tiles()?;
        let dir = TempFiles::new(0, 0)?;
        let shards = shards.clamp(1, items.max(1));
        for s in 0..shards {
            let members: Vec<(String, &[u8])> = (s * items / shards..(s + 1) * items / shards)
                .map(|i| {
                    (
                        format!("{i:08}.png"),
                        &*tiles[(i % tiles.len() as u64) as usize],
                    )
                })
                .collect();
            let path = dir.0.join(format!("{s:05}.tar"));
            std::fs::write(&path, synth::tar(&members)?)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(TarShards { dir, shards })
    }

    /// The shards read in order from `server`, each sample's PNG through the images' chain.
    fn source(
        &self,
        server: &LoopbackServer,
        workers: usize,
    ) -> Result<StreamPipeline<ImageStages>> {
        let locations = (0..self.shards)
            .map(|s| server.url(&format!("/{s:05}.tar")))
            .collect();
        let options = TarOptions {
            member: Some("png".to_owned()),
            ..TarOptions::default()
        };
        let stream = TarStream::new(locations, options)?;
        Ok(StreamPipeline::new(
            TarItems::new(stream, None)?,
            image_stages(workers)?,
        ))
    }
}

impl Measured for Batch {
    fn items(&self) -> u64 {
        self.len() as u64
    }
    fn bytes(&self) -> u64 {
        self.nbytes() as u64
    }
}

/// `n` files of `size` bytes in a fresh temporary directory, removed when dropped.
struct TempFiles(std::path::PathBuf);

impl TempFiles {
    fn new(n: u64, size: usize) -> Result<TempFiles> {
        // One directory per call: two runs in one process (tests in parallel) keep apart.
        static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("dlrs-bench-files-{}-{run}", std::process::id());
        let dir = std::env::temp_dir().join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let files = TempFiles(dir);
        let body = bytes_body(size);
        for i in 0..n {
            let path = files.0.join(format!("{i}.bin"));
            std::fs::write(&path, &body)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(files)
    }
}

impl Drop for TempFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(argv: &[&str]) -> BenchArgs {
        let cli = crate::Cli::try_parse_from(["dlrs", "bench"].iter().chain(argv)).unwrap();
        match cli.command {
            crate::Command::Bench(a) => a,
            other => panic!("{other:?}"),
        }
    }

    fn quiet() -> Option<Progress> {
        Some(Progress::with_drawing(0, "t", "items", false))
    }

    #[test]
    fn every_workload_runs_small() {
        let a = args(&[
            "--items",
            "100",
            "--batch-size",
            "16",
            "--workers",
            "2",
            "--concurrency",
            "4",
            "--item-bytes",
            "1000",
            "--latency-ms",
            "1",
            "--epochs",
            "2",
        ]);
        for (workload, bytes) in [
            (Workload::Overhead, 0),
            (Workload::Files, 100 * 1000),
            (Workload::Images, 100 * 3 * 224 * 224 * 4),
            (Workload::Http, 100 * 1000),
            (Workload::Tar, 100 * 3 * 224 * 224 * 4),
        ] {
            let m = run(workload, &a, quiet()).unwrap();
            assert_eq!(m.workload, workload.name());
            assert_eq!((m.items, m.batch_size, m.workers), (100, 16, 2));
            assert_eq!(m.bytes, bytes, "{workload:?}");
            assert!(m.seconds > 0.0 && m.first_batch_seconds > 0.0);
            assert!(m.first_batch_seconds <= m.seconds * 2.0 + 1.0);
            // The live stats count exactly: 2 epochs of 100 items in batches of 16 (7 batches).
            let stats = m.stats.as_ref().expect("the loader's stats are reported");
            assert_eq!(
                (stats.batches, stats.items, stats.failed_batches),
                (14, 200, 0)
            );
            assert!(stats.load_p50.is_some());
        }
    }

    #[test]
    fn items_in_flight_runs_the_fetching_workloads() {
        let a = args(&[
            "--items",
            "40",
            "--batch-size",
            "8",
            "--concurrency",
            "8",
            "--items-in-flight",
            "3",
            "--item-bytes",
            "100",
            "--latency-ms",
            "1",
        ]);
        assert_eq!(a.items_in_flight, Some(3));
        for workload in [Workload::Files, Workload::Http] {
            let m = run(workload, &a, quiet()).unwrap();
            assert_eq!((m.items, m.bytes), (40, 4000), "{workload:?}");
        }
        let zero = crate::Cli::try_parse_from(["dlrs", "bench", "--items-in-flight", "0"]);
        assert!(zero.unwrap_err().to_string().contains("--items-in-flight"));
    }

    #[test]
    fn tar_spreads_the_items_over_its_shards() {
        let a = args(&[
            "--items",
            "10",
            "--shards",
            "3",
            "--batch-size",
            "4",
            "--latency-ms",
            "0",
        ]);
        let shards = TarShards::new(10, 3).unwrap();
        let names: Vec<_> = (0..3)
            .map(|s| shards.dir.0.join(format!("{s:05}.tar")))
            .collect();
        assert!(names.iter().all(|n| n.is_file()));
        let m = run(Workload::Tar, &a, quiet()).unwrap();
        assert_eq!(
            (m.items, m.bytes, m.concurrency),
            (10, 10 * 3 * 224 * 224 * 4, 1)
        );
        // More shards than items: one item a shard.
        assert_eq!(TarShards::new(2, 16).unwrap().shards, 2);
    }

    #[test]
    fn without_workers_batches_load_on_the_caller() {
        let a = args(&["--items", "10", "--batch-size", "3", "--workers", "0"]);
        let m = run(Workload::Overhead, &a, quiet()).unwrap();
        assert_eq!((m.items, m.workers, m.concurrency), (10, 0, 1));
    }

    #[test]
    fn defaults() {
        assert_eq!(default_items(Workload::Overhead), 2_000_000);
        assert_eq!(default_items(Workload::Http), 2048);
        assert_eq!(default_items(Workload::Tar), 2048);
        assert_eq!(args(&[]).shards, 16);
        assert_eq!(Workload::ALL.len(), 5);
    }
}
