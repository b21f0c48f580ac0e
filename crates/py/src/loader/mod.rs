//! The native half of `PyDataloader`: a core [`dlrs_core::Loader`] over a dataset (Python,
//! async or Rust: [`AnySource`]), built from one checked `LoaderSpec` (`spec.rs`: every
//! argument is checked there, once), and the iterator of one epoch (`iterator.rs`).

mod iterator;
mod spec;

pub use iterator::BatchIterator;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use pyo3::PyTraverseError;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyType};

use dlrs_core::sync::lock;
use dlrs_core::{Epoch, Indices, Order, Shuffle};
use dlrs_io::Runtime;

use crate::datasets::rust_dataset;
use crate::errors::{core_error, io_error};
use crate::gc::Refs;
use crate::pipeline::Pipeline;
use crate::run::{RunState, Skipper};
use crate::sources::aio::CloseOnDrop;
use crate::sources::python::Calls;
use crate::sources::rust::PyStages;
use crate::sources::stage::Stage;
use crate::sources::stream::{StreamConfig, StreamEpoch};
use crate::sources::{AnySource, AsyncSource, PySource, StreamSource};

use spec::{Args, Common, Futures, Given, Kind, LoaderSpec, shard_of};

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
    /// The sizes as given, for `PyDataloader`'s attributes.
    given: Given,
    /// `rank=` and `world_size=`, when given.
    explicit_shard: Option<(u64, u64)>,
    /// How long a `next()` waits for a batch from the workers before it raises.
    timeout: Option<Duration>,
    /// A stream's dataset was given its state after this many batches: the next epoch reads
    /// on from it.
    restored_at: std::sync::Mutex<Option<u64>>,
}

/// What `get_worker_info()` reports of a loader besides the worker: its dataset and workers.
#[pyclass(frozen, module = "dataloader_rs._native", name = "LoaderInfo")]
pub struct LoaderInfo {
    #[pyo3(get)]
    dataset: Py<PyAny>,
    #[pyo3(get)]
    num_workers: usize,
}

#[pymethods]
impl LoaderInfo {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.dataset)
    }
}

/// What `over_python` and `over_futures` build.
struct Built {
    inner: dlrs_core::Loader<AnySource>,
    transform_threads: usize,
    skipper: Arc<Skipper>,
    refs: Py<Refs>,
}

#[pymethods]
impl Loader {
    /// Builds a loader from `_loader.py`'s keyword arguments (see `spec.rs`), checked here.
    #[new]
    #[pyo3(signature = (
        *, kind, dataset, batch_size, num_workers, prefetch_depth, prefetch_factor,
        drop_last, shuffle, seed, base_seed, return_indices, timeout,
        getitem=None, getitems=None, event_loop=None, transform=None,
        transform_takes_index=false, collate_fn=None, runtime_threads=None,
        item_concurrency=None, items_in_flight=None, rank=None, world_size=None, max_failures=None,
        stream_readers=None, shuffle_buffer=None, make_iter=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new<'py>(
        py: Python<'py>,
        kind: &str,
        dataset: Py<PyAny>,
        batch_size: &Bound<'py, PyAny>,
        num_workers: &Bound<'py, PyAny>,
        prefetch_depth: Option<&Bound<'py, PyAny>>,
        prefetch_factor: Option<&Bound<'py, PyAny>>,
        drop_last: &Bound<'py, PyAny>,
        shuffle: Option<&Bound<'py, PyAny>>,
        seed: Option<&Bound<'py, PyAny>>,
        base_seed: Option<u64>,
        return_indices: &Bound<'py, PyAny>,
        timeout: &Bound<'py, PyAny>,
        getitem: Option<Py<PyAny>>,
        getitems: Option<Py<PyAny>>,
        event_loop: Option<Py<PyAny>>,
        transform: Option<Py<PyAny>>,
        transform_takes_index: bool,
        collate_fn: Option<Py<PyAny>>,
        runtime_threads: Option<&Bound<'py, PyAny>>,
        item_concurrency: Option<&Bound<'py, PyAny>>,
        items_in_flight: Option<&Bound<'py, PyAny>>,
        rank: Option<&Bound<'py, PyAny>>,
        world_size: Option<&Bound<'py, PyAny>>,
        max_failures: Option<&Bound<'py, PyAny>>,
        stream_readers: Option<&Bound<'py, PyAny>>,
        shuffle_buffer: Option<&Bound<'py, PyAny>>,
        make_iter: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let args = Args {
            kind,
            dataset,
            getitem,
            getitems,
            event_loop,
            transform,
            transform_takes_index,
            collate_fn,
            return_indices,
            batch_size,
            num_workers,
            prefetch_depth,
            prefetch_factor,
            item_concurrency,
            drop_last,
            shuffle,
            seed,
            runtime_threads,
            items_in_flight,
            rank,
            world_size,
            max_failures,
            timeout,
            base_seed,
            stream_readers,
            shuffle_buffer,
            make_iter,
        };
        Self::build(py, LoaderSpec::read(py, args)?)
    }

    /// `batch_size` as given (the native loader takes at most `sys.maxsize`).
    #[getter]
    fn batch_size(&self, py: Python<'_>) -> Py<PyInt> {
        self.given.batch_size.clone_ref(py)
    }

    #[getter]
    fn num_workers(&self, py: Python<'_>) -> Py<PyInt> {
        self.given.num_workers.clone_ref(py)
    }

    /// `prefetch_depth` as given, or made from `prefetch_factor`.
    #[getter]
    fn prefetch_depth(&self, py: Python<'_>) -> Py<PyInt> {
        self.given.prefetch_depth.clone_ref(py)
    }

    #[getter]
    fn item_concurrency(&self, py: Python<'_>) -> Py<PyInt> {
        self.given.item_concurrency.clone_ref(py)
    }

    #[getter]
    fn runtime_threads(&self) -> Option<usize> {
        self.given.runtime_threads
    }

    #[getter]
    fn items_in_flight(&self) -> Option<usize> {
        self.given.items_in_flight
    }

    /// `timeout` in seconds (0: as long as it takes).
    #[getter]
    fn timeout(&self) -> f64 {
        self.given.timeout
    }

    #[getter]
    fn shuffle(&self) -> bool {
        self.shuffle.is_some()
    }

    /// `(rank, world_size)` given to the loader, or None.
    #[getter]
    fn explicit_shard(&self) -> Option<(u64, u64)> {
        self.explicit_shard
    }

    /// The base of the per-item seeds.
    #[getter]
    fn base_seed(&self) -> u64 {
        self.inner.source().pipeline().info.base_seed()
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

    /// Run time: shards every later epoch, rank `rank`'s share of `world_size` (`_loader.py`
    /// decides the shard again at each `iter()`, from the distributed environment).
    fn set_shard(&self, rank: &Bound<'_, PyInt>, world_size: &Bound<'_, PyInt>) -> PyResult<()> {
        let (rank, world_size) = shard_of(rank, world_size)?;
        self.run.set_shard(rank, world_size);
        Ok(())
    }

    /// Run time: replaces the base of the per-item seeds (`load_state_dict`: a resumed run
    /// draws what the run that took the state drew).
    fn set_base_seed(&self, base_seed: u64) {
        self.inner.source().pipeline().info.set_base_seed(base_seed);
    }

    /// Run time: every later epoch is whole, not a rank's share.
    fn clear_shard(&self) {
        self.run.clear_shard();
    }

    /// Run time: the number of the next epoch (as `DistributedSampler.set_epoch`).
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

    /// A stream's dataset state after the latest batch handed out, when its one reader takes
    /// them: `(epoch, batches handed out, state)`.
    fn stream_state(&self, py: Python<'_>) -> Option<(u64, u64, Py<PyAny>)> {
        match &**self.inner.source() {
            AnySource::Stream(s) => s.delivered_state(py),
            _ => None,
        }
    }

    /// The next epoch of a stream reads on from the state its dataset was given, its state
    /// after `position` batches, instead of dropping the items of those batches.
    fn restore_stream(&self, position: u64) {
        *lock(&self.restored_at) = Some(position);
    }

    /// Reports its reference to the loader's Python objects (see `crate::gc`).
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.refs)
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
        // Rust datasets and tar streams only: Python and async datasets do their own I/O.
        let io = match &**self.inner.source() {
            AnySource::Rust(s) => s.dataset().io_stats().map(dlrs_io::IoStats::snapshot),
            AnySource::Stream(s) => s
                .dataset
                .bind(py)
                .cast::<crate::datasets::TarStream>()
                .ok()
                .map(|t| t.get().io_stats().snapshot()),
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
    /// the loader's when given: the seed all ranks of a distributed run share).
    #[pyo3(signature = (len, *, seed=None))]
    fn epoch_over(&self, py: Python<'_>, len: u64, seed: Option<u64>) -> BatchIterator {
        let e = self.inner.advance_epoch();
        self.start(py, self.order(len, e, seed), e, self.timeout)
    }

    /// Starts the next epoch of an iterable dataset: its readers begin at once. The epoch
    /// ends when they ran dry (its `len()` is unknown).
    fn epoch_stream(&self, py: Python<'_>) -> PyResult<BatchIterator> {
        let AnySource::Stream(source) = &**self.inner.source() else {
            return Err(PyTypeError::new_err(
                "epoch_stream is for iterable datasets",
            ));
        };
        let number = self.inner.advance_epoch();
        let start = self.run.take_start();
        source.start_epoch(StreamEpoch {
            number,
            start,
            shard: self.run.current_shard().unwrap_or((0, 1)),
            seed: source.pipeline.info.base_seed(),
            restored_at: lock(&self.restored_at).take(),
        });
        let config = self.inner.config();
        // Batch numbers without end: the readers tell where the stream ends.
        let plan = dlrs_core::EpochPlan::new(
            Order::Sequential { len: STREAM_ITEMS },
            config.batch_size,
            false,
        );
        Ok(self.start_plan_at(py, plan, start, number, self.timeout))
    }

    /// Starts the next epoch in the order of `sampler` (an iterable of indices) or with the
    /// batches of `batch_sampler` (an iterable of iterables of indices; the epoch's batches
    /// are then `len` of it), whichever is given, read whole now.
    #[pyo3(signature = (*, sampler=None, batch_sampler=None))]
    fn epoch_from(
        &self,
        py: Python<'_>,
        sampler: Option<&Bound<'_, PyAny>>,
        batch_sampler: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<BatchIterator> {
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
        Ok(self.start_plan(py, plan, e, self.timeout))
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
        let start = self.run.take_start();
        self.start_plan_at(py, plan, start, number, timeout)
    }

    /// Starts an epoch of `plan` at batch `start`.
    fn start_plan_at(
        &self,
        py: Python<'_>,
        plan: dlrs_core::EpochPlan,
        start: u64,
        number: u64,
        timeout: Option<Duration>,
    ) -> BatchIterator {
        let epoch = self.skipper.start_epoch(
            plan.order().len(),
            || self.inner.epoch_of_plan(plan, start, number),
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

    /// The loader `spec` describes, with its worker info, shard and skipping in place.
    fn build(py: Python<'_>, spec: LoaderSpec) -> PyResult<Self> {
        let common = spec.settings;
        let pipeline = Pipeline::from_py(
            py,
            spec.transform,
            spec.transform_takes_index,
            spec.collate_fn,
            spec.return_indices,
        );
        let built = match spec.kind {
            Kind::Python { getitem, getitems } => {
                Self::over_python(py, &common, getitem, getitems, pipeline)?
            }
            Kind::Stream {
                readers,
                shuffle_buffer,
                make_iter,
            } => {
                let skipper = Arc::clone(&pipeline.skipper);
                let dataset = spec.dataset.bind(py);
                let has = |name: &str| dataset.getattr(name).is_ok_and(|f| f.is_callable());
                let stateful = has("state_dict") && has("load_state_dict");
                let source = AnySource::Stream(StreamSource::new(
                    spec.dataset.clone_ref(py),
                    make_iter,
                    pipeline,
                    StreamConfig {
                        readers,
                        batch_size: common.batch_size,
                        drop_last: common.drop_last,
                        shuffle_buffer,
                        stateful,
                    },
                ));
                let inner =
                    dlrs_core::Loader::new(source, common.config()).map_err(|e| core_error(&e))?;
                let refs = Refs::new(py, Arc::clone(inner.source()), None)?;
                Built {
                    inner,
                    transform_threads: 0,
                    skipper,
                    refs,
                }
            }
            Kind::Rust => {
                let object = spec.dataset.bind(py);
                let dataset = rust_dataset(object)?;
                let mut pipeline = pipeline;
                pipeline.tar_samples = crate::datasets::yields_tar_samples(object);
                if pipeline.tar_samples
                    && matches!(
                        pipeline.transform,
                        Some(crate::pipeline::ItemTransform::Native(_))
                    )
                {
                    return Err(crate::pipeline::tar_needs_a_member());
                }
                let counts = common.futures(spec.items_in_flight, pipeline.transform.is_some());
                let items_in_flight = Some(counts.items_in_flight);
                Self::over_futures(
                    py,
                    counts,
                    spec.runtime_threads,
                    pipeline,
                    None,
                    |runtime, pipeline, threads| {
                        let stats = Arc::clone(&pipeline.stats);
                        AnySource::Rust(
                            dlrs_io::Pipeline::new(dataset, PyStages(pipeline))
                                .runtime(runtime)
                                .items_in_flight(items_in_flight)
                                .transform_threads(threads)
                                .stats(stats),
                        )
                    },
                )?
            }
            Kind::Async {
                event_loop,
                getitem,
                getitems,
            } => {
                let guard = Arc::new(CloseOnDrop(event_loop.clone_ref(py)));
                let counts = common.futures(None, pipeline.transform.is_some());
                let items_in_flight = counts.items_in_flight;
                // One `__getitems__` call per batch only when the items go one at a time.
                let getitems = getitems.filter(|_| common.item_concurrency == 1);
                Self::over_futures(
                    py,
                    counts,
                    spec.runtime_threads,
                    pipeline,
                    Some(guard),
                    |runtime, pipeline, threads| {
                        AnySource::Async(AsyncSource {
                            event_loop,
                            getitem,
                            getitems,
                            items_in_flight,
                            runtime,
                            stage: Stage::new(pipeline, threads),
                        })
                    },
                )?
            }
        };
        let info = LoaderInfo {
            dataset: spec.dataset,
            num_workers: common.num_workers,
        };
        built
            .inner
            .source()
            .pipeline()
            .info
            .set(Py::new(py, info)?.into_any(), spec.base_seed)?;
        let run = Arc::<RunState>::default();
        if let Some((rank, world_size)) = spec.shard {
            run.set_shard(rank, world_size);
        }
        if let Some(limit) = spec.max_failures {
            built.skipper.set_limit(limit);
        }
        Ok(Self {
            inner: built.inner,
            shuffle: common.shuffle(),
            transform_threads: built.transform_threads,
            run,
            skipper: built.skipper,
            refs: built.refs,
            given: spec.given,
            explicit_shard: spec.shard,
            timeout: spec.timeout,
            restored_at: std::sync::Mutex::new(None),
        })
    }

    /// A loader over a Python dataset: `getitem` and `getitems` run on the worker threads.
    fn over_python(
        py: Python<'_>,
        common: &Common,
        getitem: Py<PyAny>,
        getitems: Option<Py<PyAny>>,
        pipeline: Pipeline,
    ) -> PyResult<Built> {
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
        let source = AnySource::Python(PySource {
            calls: Arc::new(calls),
            gil: crate::attach::gil_enabled(py)?,
        });
        let inner = dlrs_core::Loader::new(source, common.config()).map_err(|e| core_error(&e))?;
        let refs = Refs::new(py, Arc::clone(inner.source()), None)?;
        Ok(Built {
            inner,
            transform_threads: 0,
            skipper,
            refs,
        })
    }

    /// The set-up shared by the Rust and async datasets: their tokio runtime, the transform
    /// pool, and a core loader over the source `make` builds from them, sized by `counts`.
    fn over_futures(
        py: Python<'_>,
        counts: Futures,
        runtime_threads: Option<usize>,
        pipeline: Pipeline,
        event_loop: Option<Arc<CloseOnDrop>>,
        make: impl FnOnce(Arc<Runtime>, Arc<Pipeline>, usize) -> AnySource,
    ) -> PyResult<Built> {
        let runtime = Runtime::new(runtime_threads).map_err(|e| io_error(&e))?;
        let transform_threads = counts.transform_threads;
        // Rust and async sources skip through their pipeline.
        let skipper = Arc::clone(&pipeline.skipper);
        let source = make(Arc::new(runtime), Arc::new(pipeline), transform_threads);
        // The transform runs on the loader's pool: its threads are kept there too
        // (`Source::extra_threads`).
        let inner = dlrs_core::Loader::new(source, counts.config).map_err(|e| core_error(&e))?;
        let refs = Refs::new(py, Arc::clone(inner.source()), event_loop)?;
        Ok(Built {
            inner,
            transform_threads,
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

/// The items an epoch of a stream may have at most: its batch numbers never run out.
const STREAM_ITEMS: u64 = 1 << 62;

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
