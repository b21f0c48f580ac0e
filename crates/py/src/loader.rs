//! The native half of `PyDataloader`: a core [`dlrs_core::Loader`] over a dataset (Python,
//! async or Rust: [`AnySource`]), and the iterator of one epoch. Argument checking lives in
//! `python/dataloader_rs/_loader.py`, which builds these.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pyo3::PyTraverseError;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyType};

use dlrs_core::{Config, Epoch, Indices, ItemStats, Order, Recv, Shuffle};
use dlrs_io::Runtime;

use crate::datasets::rust_dataset;
use crate::errors::{core_error, io_error, load_error, no_stop_iteration};
use crate::gc::Refs;
use crate::pipeline::Pipeline;
use crate::run::{Limit, RunState, Skipper};
use crate::seam::{Slice, wait_interruptibly};
use crate::sources::aio::CloseOnDrop;
use crate::sources::python::Calls;
use crate::sources::rust::PyStages;
use crate::sources::stage::Stage;
use crate::sources::{AnySource, AsyncSource, PySource};

/// The settings every loader takes (`spec["settings"]`).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct Common {
    batch_size: usize,
    num_workers: usize,
    prefetch_depth: usize,
    item_concurrency: usize,
    drop_last: bool,
    shuffle: bool,
    seed: Option<u64>,
}

impl Common {
    /// The core configuration of an async or Rust dataset: at least one batch in flight, on a
    /// worker; the items of a batch are futures, not pool threads.
    fn async_config(&self) -> Config {
        Config {
            batch_size: self.batch_size,
            num_workers: self.num_workers.max(1),
            prefetch_depth: self.prefetch_depth,
            item_concurrency: 1,
            drop_last: self.drop_last,
        }
    }

    /// The threads of the transform pool of an async or Rust dataset:
    /// `num_workers × item_concurrency`, at most the CPUs available.
    fn transform_threads(&self) -> usize {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        self.num_workers
            .max(1)
            .saturating_mul(self.item_concurrency)
            .min(cpus)
    }

    fn shuffle(&self) -> Option<Shuffle> {
        self.shuffle.then(|| {
            self.seed
                .map_or_else(Shuffle::from_entropy, Shuffle::seeded)
        })
    }
}

/// A loader over a dataset (made by `PyDataloader`).
#[pyclass(frozen, module = "dataloader_rs._native", name = "Loader")]
pub struct Loader {
    inner: dlrs_core::Loader<AnySource>,
    shuffle: Option<Shuffle>,
    /// The transform threads of an async or Rust dataset (0 otherwise).
    transform_threads: usize,
    /// Sharding, resume and progress.
    run: Arc<RunState>,
    /// Skipping failed items (Python datasets).
    skipper: Arc<Skipper>,
    /// The Python objects of the source and the event loop of a `PyAsyncDataset`, shared with
    /// the iterators (see `crate::gc`).
    refs: Py<Refs>,
}

/// What `_loader.py` hands the native loader, as a dict: the kind of dataset and what loads
/// it, the transform and collation, and the settings. Python checked the types; the values
/// are checked here (and by the core's `Config`).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct Spec {
    /// `"python"` (a `PyDataset`: `getitem`, `getitems`), `"rust"` (`dataset`, a Rust
    /// dataset) or `"async"` (a `PyAsyncDataset`: `getitem`, `getitems` on `event_loop`).
    kind: String,
    dataset: Option<Py<PyAny>>,
    event_loop: Option<Py<PyAny>>,
    getitem: Option<Py<PyAny>>,
    getitems: Option<Py<PyAny>>,
    transform: Option<Py<PyAny>>,
    /// The transform is called as `f(index, sample)`, not `f(sample)`.
    transform_takes_index: bool,
    collate_fn: Option<Py<PyAny>>,
    return_indices: bool,
    runtime_threads: Option<i64>,
    /// The most items fetched at once across the batches in flight (Rust datasets).
    items_in_flight: Option<i64>,
    settings: Common,
}

/// `name` of a spec, which the kind of dataset requires.
fn required(value: Option<Py<PyAny>>, name: &str, kind: &str) -> PyResult<Py<PyAny>> {
    value.ok_or_else(|| PyTypeError::new_err(format!("a {kind} dataset needs {name}")))
}

#[pymethods]
impl Loader {
    #[new]
    fn new(py: Python<'_>, spec: Spec) -> PyResult<Self> {
        let common = spec.settings;
        let pipeline = Pipeline::from_py(
            py,
            spec.transform,
            spec.transform_takes_index,
            spec.collate_fn,
            spec.return_indices,
        );
        let runtime_threads = match spec.runtime_threads {
            None => None,
            Some(n) => Some(usize::try_from(n).map_err(|_| {
                PyValueError::new_err(format!(
                    "runtime_threads must be between 1 and {}, got {n}",
                    dlrs_io::MAX_THREADS
                ))
            })?),
        };
        let items_in_flight = match spec.items_in_flight {
            None => None,
            Some(n) => Some(usize::try_from(n).ok().filter(|&n| n >= 1).ok_or_else(|| {
                PyValueError::new_err(format!("items_in_flight must be at least 1, got {n}"))
            })?),
        };
        let kind = spec.kind.as_str();
        match kind {
            "python" => Self::over_python(
                py,
                &common,
                required(spec.getitem, "getitem", kind)?,
                spec.getitems,
                pipeline,
            ),
            "rust" => {
                let object = required(spec.dataset, "dataset", kind)?;
                let dataset = rust_dataset(object.bind(py))?;
                let mut pipeline = pipeline;
                pipeline.tar_samples = crate::datasets::yields_tar_samples(object.bind(py));
                if pipeline.tar_samples
                    && matches!(
                        pipeline.transform,
                        Some(crate::pipeline::ItemTransform::Native(_))
                    )
                {
                    return Err(crate::pipeline::tar_needs_a_member());
                }
                let item_concurrency = common.item_concurrency;
                Self::over_futures(
                    py,
                    &common,
                    runtime_threads,
                    pipeline,
                    None,
                    |runtime, pipeline, threads| {
                        let stats = Arc::clone(&pipeline.stats);
                        AnySource::Rust(
                            dlrs_io::Pipeline::new(dataset, PyStages(pipeline))
                                .runtime(runtime)
                                .item_concurrency(item_concurrency)
                                .items_in_flight(items_in_flight)
                                .transform_threads(threads)
                                .stats(stats),
                        )
                    },
                )
            }
            "async" => {
                let event_loop = required(spec.event_loop, "event_loop", kind)?;
                let getitem = required(spec.getitem, "getitem", kind)?;
                let guard = Arc::new(CloseOnDrop(event_loop.clone_ref(py)));
                let item_concurrency = common.item_concurrency.max(1);
                // One `__getitems__` call per batch only when the items go one at a time.
                let getitems = spec.getitems.filter(|_| item_concurrency == 1);
                Self::over_futures(
                    py,
                    &common,
                    runtime_threads,
                    pipeline,
                    Some(guard),
                    |runtime, pipeline, threads| {
                        AnySource::Async(AsyncSource {
                            event_loop,
                            getitem,
                            getitems,
                            item_concurrency,
                            runtime,
                            stage: Stage::new(pipeline, threads),
                        })
                    },
                )
            }
            other => Err(PyValueError::new_err(format!(
                "unknown kind of dataset {other:?}"
            ))),
        }
    }

    /// The threads of the transform pool of an async or Rust dataset (0 for a Python dataset,
    /// whose transform runs on the workers, and without a transform).
    #[getter]
    fn transform_threads(&self) -> usize {
        self.transform_threads
    }

    /// The number of batches of an epoch of `len` items (this rank's share when sharded).
    fn num_batches(&self, len: u64) -> u64 {
        let config = self.inner.config();
        let share = self
            .run
            .shard(Order::Sequential { len }, config.drop_last)
            .len();
        config.num_batches(share)
    }

    /// The items of an epoch of `len` for this rank.
    fn share_len(&self, len: u64) -> u64 {
        self.run
            .shard(Order::Sequential { len }, self.inner.config().drop_last)
            .len()
    }

    /// The indices epoch `epoch` over `len` items loads (this rank's share), in order or
    /// shuffled with the loader's seed or `seed`.
    #[pyo3(signature = (epoch, len, *, seed=None))]
    fn order_of(&self, epoch: u64, len: u64, seed: Option<u64>) -> Vec<u64> {
        let order = self
            .run
            .shard(self.order(len, epoch, seed), self.inner.config().drop_last);
        (0..order.len()).map(|p| order.get(p)).collect()
    }

    /// Shards every later epoch: this loader loads rank `rank`'s share of `world_size`.
    fn set_shard(&self, rank: i64, world_size: i64) -> PyResult<()> {
        if world_size < 1 {
            return Err(PyValueError::new_err(format!(
                "world_size must be at least 1, got {world_size}"
            )));
        }
        if !(0..world_size).contains(&rank) {
            return Err(PyValueError::new_err(format!(
                "rank must be in [0, world_size): got rank {rank} of {world_size}"
            )));
        }
        self.run
            .set_shard(rank.unsigned_abs(), world_size.unsigned_abs());
        Ok(())
    }

    /// What `get_worker_info()` reports on this loader's threads (`info`: dataset,
    /// num_workers) and the base of its per-item seeds; set once.
    fn set_worker_info(&self, info: Py<PyAny>, base_seed: u64) -> PyResult<()> {
        self.inner.source().pipeline().info.set(info, base_seed)
    }

    /// Replaces the base of the per-item seeds (`load_state_dict`: a resumed run draws what the
    /// run that took the state drew).
    fn set_base_seed(&self, base_seed: u64) {
        self.inner.source().pipeline().info.set_base_seed(base_seed);
    }

    /// Every later epoch is whole, not a rank's share.
    fn clear_shard(&self) {
        self.run.clear_shard();
    }

    /// The number of the next epoch (as `DistributedSampler.set_epoch`).
    fn set_epoch(&self, epoch: u64) {
        self.inner.set_next_epoch(epoch);
    }

    /// The next epoch is `epoch`, starting at batch `position`.
    fn resume(&self, epoch: u64, position: u64) {
        self.inner.set_next_epoch(epoch);
        self.run.resume_at(position);
    }

    /// Where the latest epoch stands: (epoch, position, num_batches, started).
    fn progress(&self) -> (u64, u64, u64, bool) {
        let p = self.run.progress();
        (p.epoch, p.position, p.num_batches, p.started)
    }

    /// Where the next `iter()` continues, for `state_dict`: `(epoch, position)`, the batches of
    /// the latest epoch already handed out (prefetched ones do not count), or the start of the
    /// next epoch once it was handed out whole or when none started.
    fn resume_point(&self) -> (u64, u64) {
        let p = self.run.progress();
        if !p.started {
            (self.inner.next_epoch_number(), 0)
        } else if p.position >= p.num_batches {
            (p.epoch + 1, 0)
        } else {
            (p.epoch, p.position)
        }
    }

    /// Reports its reference to the loader's Python objects (see `crate::gc`).
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.refs)
    }

    /// Skip failed items: at most `count` per epoch, or `fraction` of it.
    #[pyo3(signature = (count=None, fraction=None))]
    fn set_max_failures(&self, count: Option<u64>, fraction: Option<f64>) -> PyResult<()> {
        match (count, fraction) {
            (Some(n), None) => self.skipper.set_limit(Limit::Count(n)),
            (None, Some(f)) if (0.0..=1.0).contains(&f) => {
                self.skipper.set_limit(Limit::Fraction(f));
            }
            _ => {
                return Err(PyValueError::new_err(
                    "max_failures is a count (an int >= 0) or a fraction of the epoch (a float in [0, 1])",
                ));
            }
        }
        Ok(())
    }

    /// The items skipped in the current epoch.
    fn failures<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.skipper.failures(py)
    }

    /// The loader's counters over all its epochs.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("batches", s.batches)?;
        d.set_item("items", s.items)?;
        d.set_item("failed_batches", s.failed_batches)?;
        d.set_item("batches_loaded", s.loaded)?;
        d.set_item("wait_seconds", s.wait.as_secs_f64())?;
        d.set_item("load_p50_seconds", s.load_p50.map(|d| d.as_secs_f64()))?;
        d.set_item("load_p99_seconds", s.load_p99.map(|d| d.as_secs_f64()))?;
        d.set_item("skipped_items", self.skipper.failures(py)?.len())?;
        let items = self.inner.source().item_stats();
        let secs = |q: Option<std::time::Duration>| q.map(|d| d.as_secs_f64());
        d.set_item("items_delivered", items.items_delivered())?;
        d.set_item("items_in_flight", items.in_flight())?;
        d.set_item("fetch_p50_seconds", secs(items.fetch.quantile(0.5)))?;
        d.set_item("fetch_p99_seconds", secs(items.fetch.quantile(0.99)))?;
        d.set_item("transform_p50_seconds", secs(items.transform.quantile(0.5)))?;
        d.set_item(
            "transform_p99_seconds",
            secs(items.transform.quantile(0.99)),
        )?;
        // Rust datasets only: Python and async datasets do their own I/O.
        let io = match &**self.inner.source() {
            AnySource::Rust(s) => s.dataset().io_stats().map(dlrs_io::IoStats::snapshot),
            _ => None,
        };
        d.set_item("requests_in_flight", io.map(|s| s.requests_in_flight))?;
        d.set_item("bytes_fetched", io.map(|s| s.bytes))?;
        d.set_item("retries", io.map(|s| s.retries))?;
        d.set_item("cache_hits", io.map(|s| s.cache_hits))?;
        Ok(d)
    }

    /// The seed of the shuffle (drawn from the OS when none was given), or None.
    #[getter]
    fn seed(&self) -> Option<u64> {
        self.shuffle.map(|s| s.seed())
    }

    /// The number of the next epoch.
    #[getter]
    fn epoch(&self) -> u64 {
        self.inner.next_epoch_number()
    }

    /// Starts the next epoch over `len` items, in order or shuffled (with `seed` instead of
    /// the loader's when given: the seed all ranks of a distributed run share). With
    /// `timeout` (seconds), a `next()` that waits longer for a batch raises RuntimeError.
    #[pyo3(signature = (len, *, seed=None, timeout=None))]
    fn epoch_over(
        &self,
        py: Python<'_>,
        len: u64,
        seed: Option<u64>,
        timeout: Option<f64>,
    ) -> PyResult<BatchIterator> {
        let timeout = timeout_arg(timeout)?;
        let e = self.inner.advance_epoch();
        Ok(self.start(py, self.order(len, e, seed), e, timeout))
    }

    /// Starts the next epoch in the order of `sampler` (an iterable of indices) or with the
    /// batches of `batch_sampler` (an iterable of iterables of indices; the epoch's batches
    /// are then `len` of it), whichever is given, read whole now.
    #[pyo3(signature = (*, sampler=None, batch_sampler=None, timeout=None))]
    fn epoch_from(
        &self,
        py: Python<'_>,
        sampler: Option<&Bound<'_, PyAny>>,
        batch_sampler: Option<&Bound<'_, PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<BatchIterator> {
        let timeout = timeout_arg(timeout)?;
        let plan = match (sampler, batch_sampler) {
            (Some(sampler), None) => self.plan(Order::Explicit(Arc::new(read_sampler(sampler)?))),
            (None, Some(batches)) => {
                let (indices, bounds) = read_batches(batches)?;
                dlrs_core::EpochPlan::with_bounds(
                    Order::Explicit(Arc::new(indices)),
                    Arc::from(bounds),
                )
            }
            _ => {
                return Err(PyValueError::new_err(
                    "epoch_from takes one of sampler= and batch_sampler=",
                ));
            }
        };
        let e = self.inner.advance_epoch();
        Ok(self.start_plan(py, plan, e, timeout))
    }
}

impl Loader {
    /// Epoch `epoch`'s order over `len` items: in order, or shuffled with the loader's seed
    /// (or with `seed` when given: the seed all ranks of a distributed run share).
    fn order(&self, len: u64, epoch: u64, seed: Option<u64>) -> Order {
        match (self.shuffle, seed) {
            (Some(_), Some(seed)) => Shuffle::seeded(seed).order(len, epoch),
            (Some(s), None) => s.order(len, epoch),
            (None, _) => Order::Sequential { len },
        }
    }

    /// Starts an epoch of `plan` (not sharded here: see `start`).
    fn start_plan(
        &self,
        py: Python<'_>,
        plan: dlrs_core::EpochPlan,
        number: u64,
        timeout: Option<Duration>,
    ) -> BatchIterator {
        let epoch = self.skipper.start_epoch(
            plan.order().len(),
            || {
                self.inner
                    .epoch_of_plan(plan, self.run.take_start(), number)
            },
            Epoch::id,
        );
        self.iterator(py, epoch, number, timeout)
    }

    fn iterator(
        &self,
        py: Python<'_>,
        epoch: Epoch<AnySource>,
        number: u64,
        timeout: Option<Duration>,
    ) -> BatchIterator {
        let config = *self.inner.config();
        self.run
            .record(number, epoch.position(), epoch.num_batches());
        BatchIterator {
            item_stats: Arc::clone(self.inner.source().item_stats()),
            run: Arc::clone(&self.run),
            number,
            epoch,
            busy: AtomicBool::new(false),
            workers: config.num_workers > 0,
            timeout,
            inline_releases: config.num_workers == 0 && config.item_concurrency > 1,
            refs: self.refs.clone_ref(py),
        }
    }

    /// A loader over a Python dataset: `getitem` and `getitems` run on the worker threads.
    fn over_python(
        py: Python<'_>,
        common: &Common,
        getitem: Py<PyAny>,
        getitems: Option<Py<PyAny>>,
        pipeline: Pipeline,
    ) -> PyResult<Self> {
        let coroutine_type = py
            .import("types")?
            .getattr("CoroutineType")?
            .cast_into::<PyType>()?
            .unbind();
        let skipper = Arc::<Skipper>::default();
        let calls = Calls {
            getitem,
            getitems,
            pipeline,
            coroutine_type,
            skipper: Arc::clone(&skipper),
        };
        let config = Config {
            batch_size: common.batch_size,
            num_workers: common.num_workers,
            prefetch_depth: common.prefetch_depth,
            item_concurrency: common.item_concurrency,
            drop_last: common.drop_last,
        };
        let source = AnySource::Python(PySource {
            calls: Arc::new(calls),
            item_concurrency: common.item_concurrency,
            gil: crate::attach::gil_enabled(py)?,
        });
        let inner = dlrs_core::Loader::new(source, config).map_err(|e| core_error(&e))?;
        let refs = Refs::new(py, Arc::clone(inner.source()), None)?;
        Ok(Self {
            inner,
            shuffle: common.shuffle(),
            transform_threads: 0,
            run: Arc::default(),
            skipper,
            refs,
        })
    }

    /// The set-up shared by the Rust and async datasets: their tokio runtime, the transform
    /// pool, and a core loader over the source `make` builds from them.
    fn over_futures(
        py: Python<'_>,
        common: &Common,
        runtime_threads: Option<usize>,
        pipeline: Pipeline,
        event_loop: Option<Arc<CloseOnDrop>>,
        make: impl FnOnce(Arc<Runtime>, Arc<Pipeline>, usize) -> AnySource,
    ) -> PyResult<Self> {
        let runtime = Runtime::new(runtime_threads).map_err(|e| io_error(&e))?;
        let transform_threads = if pipeline.transform.is_some() {
            common.transform_threads().max(1)
        } else {
            0
        };
        // Rust and async sources skip through their pipeline.
        let skipper = Arc::clone(&pipeline.skipper);
        let source = make(Arc::new(runtime), Arc::new(pipeline), transform_threads);
        // The transform runs on the loader's pool: its threads are kept there too
        // (`Source::extra_threads`).
        let inner =
            dlrs_core::Loader::new(source, common.async_config()).map_err(|e| core_error(&e))?;
        let refs = Refs::new(py, Arc::clone(inner.source()), event_loop)?;
        Ok(Self {
            inner,
            shuffle: common.shuffle(),
            transform_threads,
            run: Arc::default(),
            skipper,
            refs,
        })
    }

    /// Starts an epoch of this rank's share of `order`, cut into batches of `batch_size`.
    fn start(
        &self,
        py: Python<'_>,
        order: Order,
        number: u64,
        timeout: Option<Duration>,
    ) -> BatchIterator {
        self.start_plan(py, self.plan(order), number, timeout)
    }

    /// The plan of an epoch in `order`: this rank's share of it, in batches.
    fn plan(&self, order: Order) -> dlrs_core::EpochPlan {
        let config = self.inner.config();
        let order = self.run.shard(order, config.drop_last);
        dlrs_core::EpochPlan::new(order, config.batch_size, config.drop_last)
    }
}

/// `timeout=` in seconds: None or 0 waits as long as it takes.
fn timeout_arg(timeout: Option<f64>) -> PyResult<Option<Duration>> {
    match timeout {
        None => Ok(None),
        Some(0.0) => Ok(None),
        Some(t) => Duration::try_from_secs_f64(t).map(Some).map_err(|_| {
            PyValueError::new_err(format!(
                "timeout must be a non-negative number of seconds, got {t}"
            ))
        }),
    }
}

/// How many sampler values are read between two checks for signals.
const SIGNAL_EVERY: usize = 1 << 14;

/// Reads a sampler whole: every value a non-negative int (numpy integers included).
fn read_sampler(sampler: &Bound<'_, PyAny>) -> PyResult<Indices> {
    let iter = sampler.try_iter().map_err(|e| {
        // A sampler's own `__iter__` failed: its exception is the caller's to see.
        let has_iter = sampler
            .get_type()
            .getattr("__iter__")
            .is_ok_and(|f| !f.is_none());
        if has_iter {
            return e;
        }
        crate::text::wrong_type("sampler must be an iterable of ints", sampler)
    })?;
    let mut out = Indices::with_capacity(sampler.len().unwrap_or(0));
    for (n, item) in iter.enumerate() {
        let item = item?;
        out.push(index_of(&item)?);
        // An endless sampler must stay stoppable with Ctrl-C.
        if n % SIGNAL_EVERY == SIGNAL_EVERY - 1 {
            sampler.py().check_signals()?;
        }
    }
    out.shrink_to_fit();
    Ok(out)
}

/// Reads a batch sampler whole: its indices, and where each batch starts (then the end).
fn read_batches(batch_sampler: &Bound<'_, PyAny>) -> PyResult<(Indices, Vec<u64>)> {
    let iter = batch_sampler.try_iter().map_err(|_| {
        crate::text::wrong_type(
            "batch_sampler must be an iterable of lists of ints",
            batch_sampler,
        )
    })?;
    let mut out = Indices::default();
    let mut bounds = vec![0u64];
    let mut len = 0u64;
    for batch in iter {
        let batch = batch?;
        let items = batch.try_iter().map_err(|_| {
            PyTypeError::new_err(format!(
                "the batch sampler yielded {} of type {}: each batch must be an iterable of indices",
                crate::text::shown(&batch),
                crate::text::type_name(&batch)
            ))
        })?;
        for item in items {
            out.push(index_of(&item?)?);
            len += 1;
        }
        bounds.push(len);
    }
    out.shrink_to_fit();
    Ok((out, bounds))
}

fn index_of(item: &Bound<'_, PyAny>) -> PyResult<u64> {
    let bad_type = || {
        let ty = crate::text::type_name(item);
        let shown = crate::text::shown(item);
        PyTypeError::new_err(format!(
            "the sampler yielded {shown} of type {ty}: indices must be non-negative ints"
        ))
    };
    if item.is_instance_of::<PyBool>() {
        return Err(bad_type());
    }
    match item.extract::<i64>() {
        Ok(v) => u64::try_from(v).map_err(|_| {
            PyValueError::new_err(format!(
                "the sampler yielded {v}: indices must be non-negative ints"
            ))
        }),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(item.py()) => {
            item.extract::<u64>().map_err(|_| {
                PyValueError::new_err(format!(
                    "the sampler yielded {item}: indices must fit in 64 bits and be non-negative"
                ))
            })
        }
        Err(_) => Err(bad_type()),
    }
}

/// The batches of one epoch, in order.
#[pyclass(
    frozen,
    weakref,
    module = "dataloader_rs._native",
    name = "BatchIterator"
)]
pub struct BatchIterator {
    epoch: Epoch<AnySource>,
    /// Counts the items handed out.
    item_stats: Arc<ItemStats>,
    /// The epoch's number.
    number: u64,
    /// Where checkpoints read the progress.
    run: Arc<RunState>,
    busy: AtomicBool,
    workers: bool,
    /// How long `next()` waits for a batch before it raises (workers only).
    timeout: Option<Duration>,
    /// Without workers but with concurrent items, this thread waits for helpers that need the
    /// interpreter, so it releases it while the batch loads.
    inline_releases: bool,
    /// The loader's Python objects (see `crate::gc`); also keeps the event loop of a
    /// `PyAsyncDataset` open while the iterator lives. Dropped after the epoch.
    refs: Py<Refs>,
}

/// Marks an iterator as being advanced; a second thread gets RuntimeError.
struct Busy<'a>(&'a AtomicBool);

impl<'a> Busy<'a> {
    fn enter(flag: &'a AtomicBool) -> PyResult<Self> {
        if flag
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(PyRuntimeError::new_err(
                "this iterator is being advanced by another thread: a loader iterator is used by one thread at a time",
            ));
        }
        Ok(Self(flag))
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[pymethods]
impl BatchIterator {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.check_process()?;
        let _busy = Busy::enter(&self.busy)?;
        let recv = if self.workers {
            let deadline = self.timeout.map(|t| (t, Instant::now() + t));
            wait_interruptibly(py, |slice| {
                let slice = match (slice, deadline) {
                    (Some(s), Some((_, d))) => {
                        Some(s.min(d.saturating_duration_since(Instant::now())))
                    }
                    (s, _) => s,
                };
                match self.epoch.recv(slice) {
                    Recv::Pending => match deadline {
                        Some((t, d)) if Instant::now() >= d => Slice::Ready(Err(t)),
                        _ => Slice::Pending,
                    },
                    other => Slice::Ready(Ok(other)),
                }
            })?
            .map_err(|t| {
                PyRuntimeError::new_err(format!(
                    "no batch arrived within timeout={} seconds",
                    t.as_secs_f64()
                ))
            })?
        } else if self.inline_releases {
            // The batch loads inside the core on this thread, which cannot return mid-batch to
            // slice here: `PySource` waits for its item helpers in `SIGNAL_SLICE`s instead and
            // checks signals between them.
            crate::seam::wait_on_loader(py, || self.epoch.recv(None))?
        } else {
            self.epoch.recv(None)
        };
        if matches!(recv, Recv::Batch(_)) {
            self.run
                .record(self.number, self.epoch.position(), self.epoch.num_batches());
        }
        match recv {
            Recv::Batch(Ok(loaded)) => {
                self.item_stats.delivered(loaded.items);
                Ok(Some(loaded.batch))
            }
            // Any StopIteration left would end the epoch quietly.
            Recv::Batch(Err(e)) => Err(no_stop_iteration(py, load_error(e), "user code")),
            Recv::Finished => Ok(None),
            Recv::Pending => unreachable!("waits until ready"),
        }
    }

    /// The number of the epoch.
    #[getter]
    fn epoch(&self) -> u64 {
        self.number
    }

    /// Reports its reference to the loader's Python objects (see `crate::gc`). Batches
    /// waiting in the ring are not reported.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.refs)
    }

    /// The batches handed out so far (counting those a resumed epoch skipped).
    #[getter]
    fn position(&self) -> PyResult<u64> {
        self.check_process()?;
        Ok(self.epoch.position())
    }

    /// The number of batches left in the epoch.
    fn __len__(&self) -> PyResult<usize> {
        self.check_process()?;
        Ok(usize::try_from(self.epoch.remaining()).unwrap_or(usize::MAX))
    }
}

impl BatchIterator {
    /// An iterator inherited through `fork` would wait forever for the parent's workers.
    fn check_process(&self) -> PyResult<()> {
        if self.epoch.is_inherited() {
            return Err(PyRuntimeError::new_err(
                "this iterator was started before the process forked: its workers are in the \
                 parent process; start a new epoch with iter(loader) in the child",
            ));
        }
        Ok(())
    }
}
