//! `dlrs bench`: throughput workloads through the core's [`Loader`], measured in Rust.
//!
//! - [`workloads`]: the sources (overhead, files, images, http, tar) and what each needs set up.
//! - [`report`]: the table and the JSON.
//!
//! Each workload runs `--epochs` sequential epochs of `--items` items; the report keeps the
//! fastest epoch and the first batch of the first epoch (which includes starting the workers).

pub mod report;
pub mod workloads;

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use dlrs_core::{Config, Loader, Order, Recv, Source};

use crate::args::{BenchArgs, Workload};
use crate::progress::Progress;
use report::Measurement;

/// How often the progress bar is updated while an epoch runs.
const PROGRESS_EVERY: Duration = Duration::from_millis(50);

/// Runs `dlrs bench`; the exit status.
pub fn run(args: &BenchArgs) -> Result<u8> {
    let list: Vec<Workload> = if args.workloads.is_empty() {
        Workload::ALL.to_vec()
    } else {
        args.workloads.clone()
    };
    let mut results = Vec::new();
    for workload in list {
        results.push(workloads::run(workload, args, None)?);
    }
    if args.json {
        println!("{}", report::json(&results));
    } else {
        print!("{}", report::table(&results));
    }
    Ok(0)
}

/// What one batch was: its items and bytes.
pub trait Measured {
    /// The number of items.
    fn items(&self) -> u64;
    /// The bytes of data it holds.
    fn bytes(&self) -> u64;
}

/// Runs `epochs` epochs of `len` items through a loader of `source`, counting on `progress`.
pub fn measure<S>(
    name: &'static str,
    source: S,
    config: Config,
    len: u64,
    epochs: u32,
    progress: &Progress,
) -> Result<Measurement>
where
    S: Source,
    S::Batch: Measured,
    S::Error: std::fmt::Display,
{
    let loader = Loader::new(source, config)?;
    let mut best = Duration::MAX;
    let mut first_batch = None;
    let mut bytes = 0;
    for _ in 0..epochs {
        let start = Instant::now();
        let epoch = loader.epoch(Order::Sequential { len });
        let (mut items, mut epoch_bytes) = (0, 0);
        // The bar is told every 50 ms, not every batch, so it costs the loop nothing.
        let (mut shown, mut shown_at) = (0, start);
        loop {
            match epoch.recv(None) {
                Recv::Batch(Ok(batch)) => {
                    first_batch.get_or_insert_with(|| start.elapsed());
                    items += batch.items();
                    epoch_bytes += batch.bytes();
                    if shown_at.elapsed() >= PROGRESS_EVERY {
                        progress.inc(items - shown);
                        (shown, shown_at) = (items, Instant::now());
                    }
                }
                Recv::Batch(Err(dlrs_core::LoadError::Source(e))) => bail!("{name}: {e}"),
                Recv::Batch(Err(dlrs_core::LoadError::Panicked(m))) => {
                    bail!("{name}: a batch panicked: {m}")
                }
                Recv::Batch(Err(dlrs_core::LoadError::Cancelled)) => bail!("{name}: cancelled"),
                Recv::Pending => {}
                Recv::Finished => break,
            }
        }
        progress.inc(items - shown);
        if items != len {
            bail!("{name}: an epoch gave {items} items instead of {len}");
        }
        best = best.min(start.elapsed());
        bytes = epoch_bytes;
    }
    Ok(Measurement {
        workload: name,
        items: len,
        batch_size: config.batch_size,
        workers: config.num_workers,
        concurrency: config.item_concurrency,
        seconds: best.as_secs_f64(),
        bytes,
        first_batch_seconds: first_batch.unwrap_or_default().as_secs_f64(),
        stats: Some(loader.stats()),
    })
}
