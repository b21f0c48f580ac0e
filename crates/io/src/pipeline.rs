//! A dataset, a per-item step and a collation as one core [`Source`].
//!
//! A [`Pipeline`] loads a batch by fetching its items as futures on its [`Runtime`], up to the
//! loader's `item_concurrency` ([`Config`](dlrs_core::Config)) at once. Each item goes to [`Stages::transform`] on the loader's pool as
//! soon as it arrives, while the others are still in flight, at most `transform_threads` at
//! once; then the batch is [`Stages::collate`]d. When the epoch is dropped, the fetches of the
//! batches in flight are aborted and transforms not started yet are skipped.
//!
//! The [`Stages`] say what an item and a batch are: [`ImageStages`] (feature `transforms`) runs
//! a `dlrs_transforms` chain and collates images into one tensor; the Python bindings plug in
//! Python transforms and collate functions the same way.
//!
//! An epoch is an [`Iterator`] of batches ([`dlrs_core::Epoch`]); [`BatchStream`] is the same
//! epoch as an async [`Stream`] for code that runs inside a tokio runtime.
//!
//! An image pipeline over files, shuffled, on two workers (the README's example):
//!
//! ```no_run
//! # #[cfg(all(feature = "file", feature = "transforms"))] {
//! use std::sync::{Arc, Mutex};
//!
//! use dlrs_core::{Config, Loader, Shuffle};
//! use dlrs_io::{FetchOptions, FileDataset, ImageStages, Pipeline};
//! use dlrs_transforms::{BatchLayout, CenterCrop, Collator, Compose, Decode, Normalize, ToChw, ToFloat};
//!
//! let dataset = FileDataset::from_template("images/{index}.png", vec![], Some(1000), FetchOptions::FILE)?;
//! let transform = Compose::default()
//!     .then(Decode::default())
//!     .then(CenterCrop::new(224, 224)?)
//!     .then(ToFloat::default())
//!     .then(Normalize::new(&[0.485, 0.456, 0.406], &[0.229, 0.224, 0.225])?)
//!     .then(ToChw);
//! let stages = ImageStages::new(transform, Collator::new(BatchLayout::Nchw, None, 4));
//! let pipeline = Pipeline::new(Arc::new(dataset), stages);
//! let len = pipeline.len();
//! let config = Config { batch_size: 64, num_workers: 2, item_concurrency: 16, ..Config::default() };
//! let loader = Loader::new(pipeline, config)?;
//! for epoch in 0..2 {
//!     for batch in loader.shuffled_epoch(&Shuffle::seeded(0), len) {
//!         let batch = batch?; // an error names the item: "item 17: images/17.png: ..."
//!         println!("epoch {epoch}: {:?}", batch.shape());
//!     }
//! }
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::channel::oneshot;
use futures::stream::{FuturesUnordered, Stream, StreamExt};
use tokio::task::JoinHandle;

use dlrs_core::per_process::PerProcess;
use dlrs_core::sync::{lock, panic_message};
use dlrs_core::{BatchCtx, Epoch, ItemStats, LoadError, Pool, Source, WAIT_SLICE};

use crate::budget::ItemBudget;
use crate::{Dataset, Error, Runtime};

/// Where an item is: its dataset index, its position in the batch, and the batch's epoch and
/// worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemAt {
    /// The dataset index, as the sampler drew it.
    pub index: u64,
    /// The position in the batch.
    pub position: usize,
    /// The worker loading the batch (`None`: the consumer's thread).
    pub worker: Option<usize>,
    /// The epoch's number ([`BatchCtx::epoch_number`]).
    pub epoch: u64,
    /// The epoch's identity, unique in the process ([`BatchCtx::epoch_id`]).
    pub epoch_id: usize,
}

/// What a [`Pipeline`] does with the bytes it fetched: each item, then the batch.
pub trait Stages: Send + Sync + 'static {
    /// One item after [`Stages::transform`].
    type Item: Send + 'static;
    /// One batch.
    type Batch: Send + 'static;
    /// What goes wrong; the consumer receives it in place of the batch.
    type Error: Send + 'static;

    /// Turns the bytes of item `at` into the item. Runs on the loader's pool when
    /// [`Stages::runs_on_pool`], else where the item arrived (a runtime thread).
    ///
    /// # Errors
    /// An item the step cannot take.
    fn transform(&self, at: &ItemAt, bytes: Bytes) -> Result<Self::Item, Self::Error>;

    /// Whether [`Stages::transform`] does work worth a pool thread (the default). A step that
    /// only wraps the bytes returns false and runs in place.
    fn runs_on_pool(&self) -> bool {
        true
    }

    /// The error for `error`, of item `at`'s fetch or transform, or of the pipeline itself
    /// (`at` is `None`: the runtime could not run the batch).
    fn io_error(&self, at: Option<&ItemAt>, error: Error) -> Self::Error;

    /// Whether failed item `at` is left out of its batch (`Ok`) or fails it (`Err`, the
    /// default).
    ///
    /// # Errors
    /// The error the batch fails with.
    fn skip(&self, at: &ItemAt, error: Self::Error) -> Result<(), Self::Error> {
        let _ = at;
        Err(error)
    }

    /// Makes the batch of `items`, whose dataset indices are `indices` (skipped items left
    /// out of both).
    ///
    /// # Errors
    /// Items that do not make a batch.
    fn collate(&self, items: Vec<Self::Item>, indices: &[u64]) -> Result<Self::Batch, Self::Error>;
}

/// A spawned task that is aborted when dropped: an abandoned batch stops its requests.
pub(crate) struct AbortOnDrop<T>(pub(crate) JoinHandle<T>);

impl<T> Future for AbortOnDrop<Result<T, Error>> {
    type Output = Result<T, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(|joined| {
            joined.unwrap_or_else(|e| Err(Error::Runtime(format!("a fetch did not finish: {e}"))))
        })
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs the items' transforms on the loader's pool, at most `threads` at once. A thread that
/// finishes a transform takes the next one waiting, so that a steady stream of items keeps
/// `threads` CPUs busy without a hand-over between threads for each item. The queue is per
/// process: a forked child does not inherit the jobs of its parent's threads.
pub struct TransformPool {
    threads: usize,
    queue: PerProcess<Arc<Mutex<Queue>>>,
}

/// The transforms waiting for a thread, and how many threads are taking them.
#[derive(Default)]
struct Queue {
    jobs: VecDeque<Box<dyn FnOnce() + Send>>,
    running: usize,
}

impl std::fmt::Debug for TransformPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransformPool")
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl TransformPool {
    /// Transforms on up to `threads` (at least 1) pool threads at once.
    #[must_use]
    pub fn new(threads: usize) -> TransformPool {
        TransformPool {
            threads: threads.max(1),
            queue: PerProcess::new(),
        }
    }

    /// The most transforms that run at once.
    #[must_use]
    pub fn threads(&self) -> usize {
        self.threads
    }

    fn queue(&self) -> Arc<Mutex<Queue>> {
        let built = self
            .queue
            .get_or_try_init(|| Ok::<_, std::convert::Infallible>(Arc::default()));
        match built {
            Ok(queue) => Arc::clone(queue),
            Err(never) => match never {},
        }
    }

    /// Runs `job`, the transform of item `index`, on `pool` once a thread is free. Dropping the
    /// future before the job started skips it. A panic in `job` becomes [`Error::Runtime`].
    pub fn run<T: Send + 'static>(
        &self,
        pool: &Pool,
        index: u64,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> impl Future<Output = Result<T, Error>> + Send + 'static {
        let (queue, pool, threads) = (self.queue(), pool.clone(), self.threads);
        async move {
            let (tx, rx) = oneshot::channel();
            let job = move || {
                if tx.is_canceled() {
                    return; // the batch was abandoned
                }
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).map_err(
                    |payload| {
                        let message = panic_message(&*payload, "a panic");
                        Error::Runtime(format!("the transform of item {index} panicked: {message}"))
                    },
                );
                let _ = tx.send(result);
            };
            let start = {
                let mut q = lock(&queue);
                q.jobs.push_back(Box::new(job));
                let start = q.running < threads;
                q.running += usize::from(start);
                start
            };
            if start {
                pool.execute(move || {
                    loop {
                        let next = {
                            let mut q = lock(&queue);
                            let next = q.jobs.pop_front();
                            q.running -= usize::from(next.is_none());
                            next
                        };
                        match next {
                            Some(job) => job(),
                            None => break,
                        }
                    }
                });
            }
            rx.await.unwrap_or_else(|_| {
                Err(Error::Runtime(
                    "a transform did not finish: the loader's pool stopped".to_owned(),
                ))
            })
        }
    }
}

/// A dataset, [`Stages`] and their settings as one [`Source`]: see the [module](self) docs.
pub struct Pipeline<S: Stages> {
    dataset: Arc<dyn Dataset>,
    stages: Arc<S>,
    runtime: Arc<Runtime>,
    budget: Option<Arc<ItemBudget>>,
    transforms: TransformPool,
    stats: Arc<ItemStats>,
}

impl<S: Stages> std::fmt::Debug for Pipeline<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("len", &self.dataset.len())
            .field("items_in_flight", &self.budget.is_some())
            .field("transform_threads", &self.transforms.threads)
            .finish_non_exhaustive()
    }
}

impl<S: Stages> Pipeline<S> {
    /// A pipeline over `dataset` with the loader's `item_concurrency` items of a batch in
    /// flight, transforms on as many threads as there are CPUs, and a runtime of one thread per CPU
    /// (started at the first batch).
    pub fn new(dataset: Arc<dyn Dataset>, stages: S) -> Pipeline<S> {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        Pipeline {
            dataset,
            stages: Arc::new(stages),
            runtime: Arc::new(Runtime::default()),
            budget: None,
            transforms: TransformPool::new(cpus),
            stats: Arc::default(),
        }
    }

    /// Fetches at most `n` (at least 1) items at once across the batches in flight, the
    /// earliest batch first ([`ItemBudget`]); `None` (the default): only the loader's
    /// `item_concurrency` per batch bounds them.
    #[must_use]
    pub fn items_in_flight(mut self, n: Option<usize>) -> Self {
        self.budget = n.map(ItemBudget::new);
        self
    }

    /// Runs up to `threads` (at least 1) transforms at once, on the loader's pool.
    #[must_use]
    pub fn transform_threads(mut self, threads: usize) -> Self {
        self.transforms = TransformPool::new(threads);
        self
    }

    /// Fetches on `runtime` (shared with other pipelines, or of a chosen size).
    #[must_use]
    pub fn runtime(mut self, runtime: Arc<Runtime>) -> Self {
        self.runtime = runtime;
        self
    }

    /// Counts fetches in `stats` (shared with whoever reports them).
    #[must_use]
    pub fn stats(mut self, stats: Arc<ItemStats>) -> Self {
        self.stats = stats;
        self
    }

    /// The stages (shared with the transforms running).
    pub fn stages(&self) -> &Arc<S> {
        &self.stages
    }

    /// The dataset.
    pub fn dataset(&self) -> &Arc<dyn Dataset> {
        &self.dataset
    }

    /// The number of items.
    pub fn len(&self) -> u64 {
        self.dataset.len()
    }

    /// Whether the dataset has no items.
    pub fn is_empty(&self) -> bool {
        self.dataset.is_empty()
    }

    /// The fetch counters.
    pub fn item_stats(&self) -> &Arc<ItemStats> {
        &self.stats
    }

    /// The most transforms that run at once.
    pub fn transform_thread_count(&self) -> usize {
        self.transforms.threads
    }

    /// The runtime the fetches run on.
    pub fn io_runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// Fetches and transforms the items of `indices`, up to `ctx.item_concurrency()` at once (inside
    /// a tokio runtime with I/O and timers); the first failure abandons the rest unless
    /// [`Stages::skip`] leaves the item out (`None` slots).
    async fn fetch(
        &self,
        indices: &[u64],
        ctx: &BatchCtx,
    ) -> Result<Vec<Option<S::Item>>, S::Error> {
        let handle = self
            .runtime
            .handle()
            .map_err(|e| self.stages.io_error(None, e))?;
        let n = indices.len();
        let mut slots: Vec<Option<S::Item>> = std::iter::repeat_with(|| None).take(n).collect();
        let mut running = FuturesUnordered::new();
        let on_pool = self.stages.runs_on_pool();
        let k = ctx.item_concurrency().max(1);
        let mut next = 0;
        loop {
            // The items about to start take their places in the budget's line together.
            let end = (next + k.saturating_sub(running.len())).min(n);
            let mut places = self
                .budget
                .as_ref()
                .map(|b| b.acquire_many(ctx.batch_number(), next..end).into_iter());
            while running.len() < k && next < n {
                let at = ItemAt {
                    index: indices[next],
                    position: next,
                    worker: ctx.worker(),
                    epoch: ctx.epoch_number(),
                    epoch_id: ctx.epoch_id(),
                };
                next += 1;
                let (dataset, index) = (Arc::clone(&self.dataset), at.index);
                let stats = Arc::clone(&self.stats);
                let slot = places.as_mut().and_then(Iterator::next);
                let fetch = AbortOnDrop(handle.spawn(async move {
                    // Held until the body is read: the budget counts requests under way.
                    let _slot = match slot {
                        Some(slot) => Some(slot.await),
                        None => None,
                    };
                    // Counted and timed from here: an item that waits for a slot is not in
                    // flight yet.
                    let (fetching, started) = (stats.fetching(), stats.fetch_clock());
                    let fetched = dataset.fetch(index).await;
                    stats.fetch_took(started);
                    drop(fetching);
                    fetched
                }));
                let stages = &self.stages;
                let transforms = &self.transforms;
                running.push(async move {
                    let fetched = fetch.await;
                    let result = match fetched {
                        Err(e) => Err(stages.io_error(Some(&at), e)),
                        Ok(bytes) if on_pool => {
                            let stages = Arc::clone(stages);
                            let job = move || stages.transform(&at, bytes);
                            match transforms.run(ctx.pool(), at.index, job).await {
                                Ok(result) => result,
                                Err(e) => Err(self.stages.io_error(Some(&at), e)),
                            }
                        }
                        Ok(bytes) => stages.transform(&at, bytes),
                    };
                    (at, result)
                });
            }
            match running.next().await {
                None => break,
                Some((at, Ok(item))) => slots[at.position] = Some(item),
                Some((at, Err(e))) => self.stages.skip(&at, e)?,
            }
        }
        Ok(slots)
    }

    /// Loads the batch of `indices` as a future (inside a tokio runtime with I/O and timers).
    ///
    /// # Errors
    /// The stages' error for the first item that failed and was not skipped, or the collation's.
    pub async fn load(&self, indices: &[u64], ctx: &BatchCtx) -> Result<S::Batch, S::Error> {
        let slots = self.fetch(indices, ctx).await?;
        let (items, kept): (Vec<S::Item>, Vec<u64>) = slots
            .into_iter()
            .zip(indices)
            .filter_map(|(item, &index)| item.map(|item| (item, index)))
            .unzip();
        self.stages.collate(items, &kept)
    }
}

impl<S: Stages> Source for Pipeline<S> {
    type Batch = S::Batch;
    type Error = S::Error;

    /// Runs [`Pipeline::load`] on the pipeline's runtime, giving up when the epoch is abandoned
    /// (checked every [`WAIT_SLICE`]; dropping the future aborts the fetches).
    fn load_batch(&self, indices: &[u64], ctx: &BatchCtx) -> Result<S::Batch, LoadError<S::Error>> {
        let outcome = self
            .runtime
            .block_on_checked(self.load(indices, ctx), WAIT_SLICE, || {
                if ctx.is_cancelled() { Err(()) } else { Ok(()) }
            });
        match outcome {
            Err(e) => Err(LoadError::Source(self.stages.io_error(None, e))),
            Ok(Err(())) => Err(LoadError::Cancelled),
            Ok(Ok(result)) => result.map_err(LoadError::Source),
        }
    }

    /// The items are futures on the pipeline's runtime: the pool keeps only the workers.
    fn items_on_pool(&self) -> bool {
        false
    }

    /// The transform threads, kept on the loader's pool (none when the stages run in place).
    fn extra_threads(&self) -> usize {
        if self.stages.runs_on_pool() {
            self.transforms.threads
        } else {
            0
        }
    }
}

/// An epoch as an async [`Stream`] of batches, for code inside a tokio runtime: the epoch runs
/// on a thread of its own (so a loader without workers loads there, not on the runtime), and a
/// batch waits in the stream until it is polled. Dropping the stream abandons the epoch.
pub struct BatchStream<S: Source> {
    batches: tokio::sync::mpsc::Receiver<Result<S::Batch, LoadError<S::Error>>>,
}

impl<S: Source> std::fmt::Debug for BatchStream<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchStream").finish_non_exhaustive()
    }
}

impl<S: Source> BatchStream<S> {
    /// The batches of `epoch`, in order.
    ///
    /// # Errors
    /// [`Error::Runtime`] when the epoch's thread cannot be started.
    pub fn new(epoch: Epoch<S>) -> Result<BatchStream<S>, Error> {
        let (tx, batches) = tokio::sync::mpsc::channel(1);
        std::thread::Builder::new()
            .name("dlrs-stream".to_owned())
            .spawn(move || {
                for batch in epoch {
                    // The stream was dropped: dropping the epoch abandons it.
                    if tx.blocking_send(batch).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| Error::Runtime(format!("cannot start the epoch's thread: {e}")))?;
        Ok(BatchStream { batches })
    }
}

impl<S: Source> Stream for BatchStream<S> {
    type Item = Result<S::Batch, LoadError<S::Error>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.batches.poll_recv(cx)
    }
}

#[cfg(feature = "transforms")]
pub use images::ImageStages;

#[cfg(feature = "transforms")]
mod images {
    use std::sync::Arc;

    use bytes::Bytes;
    use dlrs_transforms::{Batch, Collator, Image, Item, Transform};

    use super::{ItemAt, Stages};
    use crate::Error;

    /// The stages of an image pipeline: each item's bytes through a transform chain that ends
    /// with an image (it starts with [`dlrs_transforms::Decode`]), then the images of a batch
    /// into one [`Batch`].
    #[derive(Debug)]
    pub struct ImageStages {
        transform: Arc<dyn Transform>,
        collator: Collator,
    }

    impl ImageStages {
        /// Items through `transform`, batches by `collator`.
        pub fn new(transform: impl Transform + 'static, collator: Collator) -> ImageStages {
            ImageStages {
                transform: Arc::new(transform),
                collator,
            }
        }
    }

    impl Stages for ImageStages {
        type Item = Image;
        type Batch = Batch;
        type Error = Error;

        fn transform(&self, at: &ItemAt, bytes: Bytes) -> Result<Image, Error> {
            self.transform
                .apply(at.index, Item::Bytes(bytes))
                .and_then(|item| item.into_image("the pipeline"))
                .map_err(|error| Error::Transform {
                    index: at.index,
                    error,
                })
        }

        fn io_error(&self, at: Option<&ItemAt>, error: Error) -> Error {
            match at {
                Some(at) if !matches!(error, Error::Transform { .. }) => Error::Item {
                    index: at.index,
                    error: Box::new(error),
                },
                _ => error,
            }
        }

        fn collate(&self, items: Vec<Image>, _: &[u64]) -> Result<Batch, Error> {
            self.collator.collate(items).map_err(Error::Collate)
        }
    }
}

#[cfg(all(test, feature = "file", feature = "transforms"))]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use dlrs_core::{Config, Loader, Order};
    use dlrs_transforms::{BatchLayout, Collator, Compose, Decode};
    use futures::future::BoxFuture;

    use super::*;
    use crate::test_util::TempDir;
    use crate::{FetchOptions, FileDataset};

    /// A 24-bit BMP of `width`×`height` whose pixel (y, x) is `(seed, y, x)` as RGB.
    fn bmp(width: usize, height: usize, seed: u8) -> Vec<u8> {
        let row = (width * 3).div_ceil(4) * 4;
        let size = 54 + row * height;
        let mut out = Vec::with_capacity(size);
        out.extend_from_slice(b"BM");
        out.extend_from_slice(&(size as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&54u32.to_le_bytes());
        out.extend_from_slice(&40u32.to_le_bytes());
        out.extend_from_slice(&(width as i32).to_le_bytes());
        out.extend_from_slice(&(height as i32).to_le_bytes());
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&24u16.to_le_bytes());
        out.extend_from_slice(&[0; 24]);
        for y in (0..height).rev() {
            let start = out.len();
            for x in 0..width {
                out.extend_from_slice(&[x as u8, y as u8, seed]); // BGR
            }
            out.resize(start + row, 0);
        }
        out
    }

    /// At most `threads` transforms run at once, each result goes back to its own future, and
    /// the threads that start take the waiting transforms one after another.
    #[test]
    fn transforms_queue_for_their_threads() {
        let pool = Pool::new(0, "transform-test");
        let transforms = TransformPool::new(2);
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let threads = Arc::new(Mutex::new(std::collections::HashSet::new()));
        let jobs: Vec<_> = (0..24u64)
            .map(|i| {
                let (running, most, threads) = (running.clone(), most.clone(), threads.clone());
                transforms.run(&pool, i, move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    lock(&threads).insert(std::thread::current().id());
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    running.fetch_sub(1, Ordering::SeqCst);
                    i * 10
                })
            })
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let results = rt.block_on(futures::future::join_all(jobs));
        let results: Vec<u64> = results.into_iter().map(Result::unwrap).collect();
        assert_eq!(results, (0..24).map(|i| i * 10).collect::<Vec<_>>());
        assert_eq!(most.load(Ordering::SeqCst), 2);
        assert_eq!(lock(&threads).len(), 2);
    }

    /// A loader of `source` with `batch_size` items a batch on `num_workers` workers.
    fn loader_of<S: Source>(source: S, batch_size: usize, num_workers: usize) -> Loader<S> {
        let config = Config {
            batch_size,
            num_workers,
            item_concurrency: 3,
            ..Config::default()
        };
        Loader::new(source, config).unwrap()
    }

    /// `n` BMP files of 5×3 pixels (`broken`: not an image) and a pipeline over them.
    fn images(dir: &TempDir, n: u64, broken: Option<u64>) -> Pipeline<ImageStages> {
        for i in 0..n {
            let body = if Some(i) == broken {
                b"not an image".to_vec()
            } else {
                bmp(5, 3, i as u8)
            };
            std::fs::write(dir.join(format!("{i}.bmp")), body).unwrap();
        }
        let template = format!("{}/{{index}}.bmp", dir.display());
        let dataset =
            FileDataset::from_template(&template, vec![], Some(n as usize), FetchOptions::FILE)
                .unwrap();
        let stages = ImageStages::new(
            Compose::default().then(Decode::default()),
            Collator::new(BatchLayout::Nhwc, None, 2),
        );
        Pipeline::new(Arc::new(dataset), stages).transform_threads(2)
    }

    #[test]
    fn batches_hold_the_decoded_images_in_sampler_order() {
        let dir = TempDir::new();
        let pipeline = images(&dir, 10, None);
        assert_eq!(pipeline.extra_threads(), 2);
        let loader = loader_of(pipeline, 4, 2);
        let order: Vec<u64> = vec![9, 3, 0, 7, 1, 2, 8, 4, 6, 5];
        let batches: Vec<dlrs_transforms::Batch> = loader
            .epoch(Order::Explicit(Arc::new(order.iter().copied().collect())))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            batches
                .iter()
                .map(dlrs_transforms::Batch::len)
                .collect::<Vec<_>>(),
            [4, 4, 2]
        );
        let mut k = 0;
        for batch in &batches {
            assert_eq!(&batch.shape()[1..], &[3, 5, 3]);
            for image in batch.as_bytes().chunks(3 * 5 * 3) {
                // Pixel (y, x) is (seed, y, x): the seed is the item's index.
                assert_eq!(image[0], order[k] as u8, "item at position {k}");
                assert_eq!(&image[3 * 5 * 2 + 3 * 4..][..3], &[order[k] as u8, 2, 4]);
                k += 1;
            }
        }
        assert_eq!(k, 10);
        assert_eq!(loader.source().item_stats().in_flight(), 0);
    }

    #[test]
    fn errors_name_the_item() {
        let dir = TempDir::new();
        let pipeline = images(&dir, 4, Some(2));
        std::fs::remove_file(dir.join("1.bmp")).unwrap();
        let loader = loader_of(pipeline, 1, 1);
        let results: Vec<_> = loader.epoch(Order::Sequential { len: 4 }).collect();
        assert!(results[0].is_ok() && results[3].is_ok());
        match &results[1] {
            Err(LoadError::Source(e @ Error::Item { index: 1, .. })) => {
                assert!(e.is_not_found(), "{e}");
                assert!(e.to_string().starts_with("item 1: "), "{e}");
                assert!(e.to_string().contains("1.bmp"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        match &results[2] {
            Err(LoadError::Source(e @ Error::Transform { index: 2, .. })) => {
                assert_eq!(e.kind(), crate::ErrorKind::Transform);
            }
            other => panic!("{other:?}"),
        }
    }

    /// A dataset whose fetches never finish, counting those started and those dropped.
    struct Stuck {
        started: Arc<AtomicUsize>,
        dropped: Arc<AtomicUsize>,
    }

    impl Stuck {
        /// A `Stuck` and its counters of the fetches started and dropped.
        fn counted() -> (Stuck, Arc<AtomicUsize>, Arc<AtomicUsize>) {
            let (started, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
            let dataset = Stuck {
                started: Arc::clone(&started),
                dropped: Arc::clone(&dropped),
            };
            (dataset, started, dropped)
        }
    }

    /// Waits until `counter` is `n`, for 10 s at the most: a fetch left running fails the test
    /// instead of hanging it.
    fn wait_until(counter: &AtomicUsize, n: usize) {
        for _ in 0..10_000 {
            if counter.load(Ordering::SeqCst) == n {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Dataset for Stuck {
        fn len(&self) -> u64 {
            100
        }

        fn fetch(&self, _: u64) -> BoxFuture<'static, Result<Bytes, Error>> {
            self.started.fetch_add(1, Ordering::SeqCst);
            let guard = Counted(Arc::clone(&self.dropped));
            Box::pin(async move {
                let _guard = guard;
                futures::future::pending::<()>().await;
                Ok(Bytes::new())
            })
        }
    }

    struct Lengths;

    impl Stages for Lengths {
        type Item = usize;
        type Batch = Vec<usize>;
        type Error = Error;

        fn transform(&self, _: &ItemAt, bytes: Bytes) -> Result<usize, Error> {
            Ok(bytes.len())
        }

        fn io_error(&self, _: Option<&ItemAt>, error: Error) -> Error {
            error
        }

        fn collate(&self, items: Vec<usize>, _: &[u64]) -> Result<Vec<usize>, Error> {
            Ok(items)
        }
    }

    /// A dataset whose fetches wait for each other a little, counting how many run at once.
    struct Overlapping {
        running: AtomicUsize,
        peak: AtomicUsize,
        /// The peak a fetch waits for, `patience` ms at most.
        until: usize,
        patience: u32,
    }

    impl Default for Overlapping {
        fn default() -> Self {
            Overlapping {
                patience: 100,
                ..Overlapping::until(3)
            }
        }
    }

    impl Overlapping {
        fn until(until: usize) -> Self {
            Overlapping {
                running: AtomicUsize::new(0),
                peak: AtomicUsize::new(0),
                until,
                patience: 10_000,
            }
        }
    }

    impl Dataset for Arc<Overlapping> {
        fn len(&self) -> u64 {
            48
        }

        fn fetch(&self, _: u64) -> BoxFuture<'static, Result<Bytes, Error>> {
            let this = Arc::clone(self);
            Box::pin(async move {
                let now = this.running.fetch_add(1, Ordering::SeqCst) + 1;
                this.peak.fetch_max(now, Ordering::SeqCst);
                // Until `until` have run at once (or for `patience` ms): the peak does not hang
                // on timing.
                for _ in 0..this.patience {
                    if this.peak.load(Ordering::SeqCst) >= this.until {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                this.running.fetch_sub(1, Ordering::SeqCst);
                Ok(Bytes::from_static(b"abc"))
            })
        }
    }

    #[test]
    fn items_in_flight_bounds_the_fetches_of_every_batch_in_flight() {
        let dataset = Arc::new(Overlapping::default());
        let pipeline = Pipeline::new(Arc::new(Arc::clone(&dataset)), Lengths)
            .items_in_flight(Some(3))
            .runtime(Arc::new(Runtime::new(Some(2)).unwrap()));
        let config = Config {
            batch_size: 8,
            num_workers: 2,
            item_concurrency: 8,
            ..Config::default()
        };
        let loader = Loader::new(pipeline, config).unwrap();
        let batches: Vec<Vec<usize>> = loader
            .epoch(Order::Sequential { len: 48 })
            .map(Result::unwrap)
            .collect();
        assert_eq!(batches, vec![vec![3; 8]; 6]);
        // Two batches of 8 at once could run 16; the budget's 3 slots are all used.
        assert_eq!(dataset.peak.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn the_loaders_item_concurrency_bounds_a_batch_and_keeps_no_item_threads() {
        for k in [1, 4] {
            let dataset = Arc::new(Overlapping::until(k));
            let pipeline = Pipeline::new(Arc::new(Arc::clone(&dataset)), Lengths)
                .runtime(Arc::new(Runtime::new(Some(2)).unwrap()));
            assert!(!pipeline.items_on_pool());
            // Batches of 2k items, k at once: the first fetches wait to see k running.
            let config = Config {
                batch_size: 2 * k,
                num_workers: 1,
                item_concurrency: k,
                ..Config::default()
            };
            // The items are futures: the pool keeps the worker alone, whatever `k` is.
            assert_eq!(config.pool_size_for(pipeline.items_on_pool()), 1);
            let loader = Loader::new(pipeline, config).unwrap();
            let batches: Vec<Vec<usize>> = loader
                .epoch(Order::Sequential { len: 8 * k as u64 })
                .map(Result::unwrap)
                .collect();
            assert_eq!(batches, vec![vec![3; 2 * k]; 4]);
            assert_eq!(dataset.peak.load(Ordering::SeqCst), k);
        }
    }

    #[test]
    fn a_dropped_epoch_aborts_the_fetches_in_flight() {
        let (dataset, started, dropped) = Stuck::counted();
        let pipeline = Pipeline::new(Arc::new(dataset), Lengths)
            .runtime(Arc::new(Runtime::new(Some(1)).unwrap()));
        let config = Config {
            batch_size: 10,
            num_workers: 2,
            prefetch_depth: 1,
            item_concurrency: 5,
            ..Config::default()
        };
        let loader = Loader::new(pipeline, config).unwrap();
        let epoch = loader.epoch(Order::Sequential { len: 100 });
        // Two batches load, five fetches each.
        while started.load(Ordering::SeqCst) < 10 {
            std::thread::yield_now();
        }
        assert_eq!(dropped.load(Ordering::SeqCst), 0);
        drop(epoch);
        wait_until(&dropped, 10);
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            10,
            "every fetch in flight was aborted"
        );
        assert_eq!(
            started.load(Ordering::SeqCst),
            10,
            "no fetch starts after the drop"
        );
    }

    #[test]
    fn a_dropped_fetch_many_aborts_its_fetches() {
        let (dataset, started, dropped) = Stuck::counted();
        let runtime = Runtime::new(Some(1)).unwrap();
        let indices: Vec<u64> = (0..8).collect();
        let fetched = runtime.block_on(async {
            let many = crate::fetch_many(&dataset, &indices, 4);
            tokio::time::timeout(std::time::Duration::from_millis(20), many).await
        });
        assert!(fetched.unwrap().is_err(), "the fetches never finish");
        wait_until(&dropped, 4);
        assert_eq!(
            (
                started.load(Ordering::SeqCst),
                dropped.load(Ordering::SeqCst)
            ),
            (4, 4)
        );
    }

    struct SkipOdd;

    impl Stages for SkipOdd {
        type Item = u64;
        type Batch = (Vec<u64>, Vec<u64>);
        type Error = String;

        fn transform(&self, at: &ItemAt, _: Bytes) -> Result<u64, String> {
            if at.index % 2 == 1 {
                Err(format!("odd {}", at.index))
            } else {
                Ok(at.index * 10)
            }
        }

        fn io_error(&self, _: Option<&ItemAt>, error: Error) -> String {
            error.to_string()
        }

        fn skip(&self, at: &ItemAt, error: String) -> Result<(), String> {
            if at.index == 7 { Err(error) } else { Ok(()) }
        }

        fn collate(
            &self,
            items: Vec<u64>,
            indices: &[u64],
        ) -> Result<(Vec<u64>, Vec<u64>), String> {
            Ok((items, indices.to_vec()))
        }
    }

    #[test]
    fn skipped_items_are_left_out_of_items_and_indices() {
        let dir = TempDir::new();
        let pipeline = images(&dir, 10, None);
        let pipeline = Pipeline::new(Arc::clone(pipeline.dataset()), SkipOdd);
        let loader = loader_of(pipeline, 5, 1);
        let results: Vec<_> = loader.epoch(Order::Sequential { len: 10 }).collect();
        assert_eq!(
            results[0].as_ref().unwrap(),
            &(vec![0, 20, 40], vec![0, 2, 4])
        );
        assert!(matches!(&results[1], Err(LoadError::Source(m)) if m == "odd 7"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_stream_of_batches_inside_a_runtime_even_without_workers() {
        let dir = TempDir::new();
        for workers in [0, 2] {
            let pipeline = images(&dir, 6, None);
            let loader = loader_of(pipeline, 4, workers);
            let stream = BatchStream::new(loader.epoch(Order::Sequential { len: 6 })).unwrap();
            let lens: Vec<usize> = stream.map(|b| b.unwrap().len()).collect().await;
            assert_eq!(lens, [4, 2], "{workers} workers");
        }
    }
}
