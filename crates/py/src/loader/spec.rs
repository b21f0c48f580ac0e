//! `LoaderSpec`: what a native loader is built from, read from the keyword arguments of
//! `Loader(...)` and checked once, here, with torch's messages (`crate::args`); `_loader.py`
//! passes the user's values through unchecked.

use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt};

use dlrs_core::{Config, Shuffle};

use crate::args::{count_arg, flag_arg, loader_seed, saturating_usize};
use crate::run::Limit;
use crate::sources::stream::Readers;

/// The keyword arguments of `Loader(...)` as received (see its signature).
pub struct Args<'a, 'py> {
    pub kind: &'a str,
    pub dataset: Py<PyAny>,
    pub getitem: Option<Py<PyAny>>,
    pub getitems: Option<Py<PyAny>>,
    pub event_loop: Option<Py<PyAny>>,
    pub transform: Option<Py<PyAny>>,
    pub transform_takes_index: bool,
    pub collate_fn: Option<Py<PyAny>>,
    pub return_indices: &'a Bound<'py, PyAny>,
    pub batch_size: &'a Bound<'py, PyAny>,
    pub num_workers: &'a Bound<'py, PyAny>,
    pub prefetch_depth: Option<&'a Bound<'py, PyAny>>,
    pub prefetch_factor: Option<&'a Bound<'py, PyAny>>,
    /// None: the core loader's default.
    pub item_concurrency: Option<&'a Bound<'py, PyAny>>,
    pub drop_last: &'a Bound<'py, PyAny>,
    pub shuffle: Option<&'a Bound<'py, PyAny>>,
    pub seed: Option<&'a Bound<'py, PyAny>>,
    pub runtime_threads: Option<&'a Bound<'py, PyAny>>,
    pub items_in_flight: Option<&'a Bound<'py, PyAny>>,
    pub rank: Option<&'a Bound<'py, PyAny>>,
    pub world_size: Option<&'a Bound<'py, PyAny>>,
    pub max_failures: Option<&'a Bound<'py, PyAny>>,
    pub timeout: &'a Bound<'py, PyAny>,
    pub base_seed: Option<u64>,
    pub stream_readers: Option<&'a Bound<'py, PyAny>>,
    pub shuffle_buffer: Option<&'a Bound<'py, PyAny>>,
    pub make_iter: Option<Py<PyAny>>,
}

/// What loads the items: the kind of dataset and its callables.
pub enum Kind {
    /// A `PyDataset`: `getitem` and `getitems` run on the worker threads.
    Python {
        getitem: Py<PyAny>,
        getitems: Option<Py<PyAny>>,
    },
    /// A Rust dataset (`HttpDataset`, ...).
    Rust,
    /// A `PyAsyncDataset`: coroutines of `getitem` / `getitems` on `event_loop`.
    Async {
        event_loop: Py<PyAny>,
        getitem: Py<PyAny>,
        getitems: Option<Py<PyAny>>,
    },
    /// An iterable dataset, read by `readers`, through a shuffle buffer of `shuffle_buffer`
    /// items (0: none).
    Stream {
        readers: Readers,
        shuffle_buffer: usize,
        /// `make_iter()` gives a reader's iterator (None: `iter(dataset)`).
        make_iter: Option<Py<PyAny>>,
    },
}

/// The settings every loader takes, checked.
pub struct Common {
    pub batch_size: usize,
    pub num_workers: usize,
    pub prefetch_depth: usize,
    pub item_concurrency: usize,
    pub drop_last: bool,
    pub shuffle: bool,
    pub seed: Option<u64>,
}

impl Common {
    /// The core configuration of a Python dataset.
    pub fn config(&self) -> Config {
        Config {
            batch_size: self.batch_size,
            num_workers: self.num_workers,
            prefetch_depth: self.prefetch_depth,
            item_concurrency: self.item_concurrency,
            drop_last: self.drop_last,
        }
    }

    /// How many items are fetched at once, and the threads that follow from it, for a dataset
    /// fetched by futures (Rust and async): every such count is computed here.
    ///
    /// `item_concurrency` means the same for every dataset: the items of one batch fetched at
    /// once. The loader's total, `num_workers × item_concurrency` (at least one worker), is
    /// also the budget of items in flight across batches; unless `items_in_flight` sets that
    /// budget, a batch may use the whole of it, earliest batch first (Rust datasets), so that
    /// layouts of the same total fetch alike.
    pub fn futures(&self, items_in_flight: Option<usize>, transform: bool) -> Futures {
        let workers = self.num_workers.max(1);
        let total = workers.saturating_mul(self.item_concurrency);
        let per_batch = match items_in_flight {
            Some(_) => self.item_concurrency,
            None => total,
        };
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        Futures {
            // A batch of futures waits on a worker: at least one, so the caller's thread
            // never blocks on the runtime.
            config: Config {
                num_workers: workers,
                item_concurrency: per_batch,
                ..self.config()
            },
            items_in_flight: items_in_flight.unwrap_or(total),
            transform_threads: if transform { total.min(cpus) } else { 0 },
        }
    }

    pub fn shuffle(&self) -> Option<Shuffle> {
        self.shuffle.then(|| {
            self.seed
                .map_or_else(Shuffle::from_entropy, Shuffle::seeded)
        })
    }
}

/// The counts of a dataset fetched by futures ([`Common::futures`]).
pub struct Futures {
    /// The core loader's: its workers, and its `item_concurrency` the futures of one batch.
    pub config: Config,
    /// The most items fetched at once across the batches in flight.
    pub items_in_flight: usize,
    /// The threads of the transform pool (0: no transform).
    pub transform_threads: usize,
}

/// The ints as given (after `__index__`), which the loader's attributes show unclamped.
pub struct Given {
    pub batch_size: Py<PyInt>,
    pub num_workers: Py<PyInt>,
    pub prefetch_depth: Py<PyInt>,
    pub item_concurrency: Py<PyInt>,
    pub runtime_threads: Option<usize>,
    pub items_in_flight: Option<usize>,
    /// `timeout` in seconds, as a float.
    pub timeout: f64,
}

/// Everything a native loader is built from, checked.
pub struct LoaderSpec {
    pub kind: Kind,
    /// The user's dataset (what `get_worker_info().dataset` reports; loaded when `Rust`).
    pub dataset: Py<PyAny>,
    pub transform: Option<Py<PyAny>>,
    /// The transform is called as `f(index, sample)`, not `f(sample)`.
    pub transform_takes_index: bool,
    pub collate_fn: Option<Py<PyAny>>,
    pub return_indices: bool,
    pub settings: Common,
    pub given: Given,
    pub runtime_threads: Option<usize>,
    /// The most items fetched at once across the batches in flight (Rust datasets).
    pub items_in_flight: Option<usize>,
    /// `(rank, world_size)` given to the loader (the distributed run's is found per epoch).
    pub shard: Option<(u64, u64)>,
    pub max_failures: Option<Limit>,
    /// How long a `next()` waits for a batch from the workers (None: as long as it takes).
    pub timeout: Option<Duration>,
    /// The base of the per-item seeds: given, else the shuffle's seed.
    pub base_seed: u64,
}

/// `name` of a spec, which the kind of dataset requires.
fn required(value: Option<Py<PyAny>>, name: &str, kind: &str) -> PyResult<Py<PyAny>> {
    value.ok_or_else(|| PyTypeError::new_err(format!("a {kind} dataset needs {name}")))
}

impl LoaderSpec {
    /// Checks `args`, in the order torch's `DataLoader` names them.
    pub fn read(py: Python<'_>, args: Args<'_, '_>) -> PyResult<Self> {
        let max = Some(isize::MAX as i64);
        let num_workers = count_arg("num_workers", args.num_workers, 0, max)?;
        let prefetch_depth =
            prefetch_depth(py, &num_workers, args.prefetch_depth, args.prefetch_factor)?;
        let batch_size = count_arg("batch_size", args.batch_size, 1, None)?;
        let item_concurrency = match args.item_concurrency {
            Some(k) => count_arg("item_concurrency", k, 1, max)?,
            None => Config::default().item_concurrency.into_pyobject(py)?,
        };
        let shuffle = match args.shuffle {
            None => false,
            Some(s) => flag_arg("shuffle", s)?,
        };
        let drop_last = flag_arg("drop_last", args.drop_last)?;
        let return_indices = flag_arg("return_indices", args.return_indices)?;
        // A stream's shuffle is its buffer's.
        let shuffles = shuffle || (args.kind == "stream" && args.shuffle_buffer.is_some());
        let seed = match args.seed {
            None => None,
            Some(_) if !shuffles => {
                return Err(PyValueError::new_err(
                    "seed is only allowed with shuffle=True (or shuffle_buffer= for a stream)",
                ));
            }
            Some(seed) => Some(loader_seed(seed)?),
        };
        let runtime_threads = args.runtime_threads.map(runtime_threads).transpose()?;
        let items_in_flight = args
            .items_in_flight
            .map(|n| count_arg("items_in_flight", n, 1, None).map(|n| saturating_usize(&n)))
            .transpose()?;
        let shard = shard(args.rank, args.world_size)?;
        let max_failures = args.max_failures.map(max_failures).transpose()?;
        let timeout_secs = timeout(args.timeout)?;
        let timeout = match timeout_secs {
            0.0 => None,
            t => Some(Duration::try_from_secs_f64(t).map_err(|_| {
                PyValueError::new_err(format!(
                    "timeout must be a non-negative number of seconds, got {t}"
                ))
            })?),
        };
        if args.kind != "stream" {
            for (name, given) in [
                ("stream_readers", args.stream_readers),
                ("shuffle_buffer", args.shuffle_buffer),
            ] {
                if given.is_some() {
                    return Err(PyValueError::new_err(format!(
                        "{name} is for iterable datasets (streams); this dataset is map-style"
                    )));
                }
            }
        }
        let kind = match args.kind {
            "stream" => stream_kind(&args, shuffle, &item_concurrency, &num_workers)?,
            _ if args.make_iter.is_some() => {
                return Err(PyValueError::new_err(
                    "make_iter is for iterable datasets (streams); this dataset is map-style",
                ));
            }
            "python" => Kind::Python {
                getitem: required(args.getitem, "getitem", args.kind)?,
                getitems: args.getitems,
            },
            "rust" => Kind::Rust,
            "async" => Kind::Async {
                event_loop: required(args.event_loop, "event_loop", args.kind)?,
                getitem: required(args.getitem, "getitem", args.kind)?,
                getitems: args.getitems,
            },
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown kind of dataset {other:?}"
                )));
            }
        };
        let settings = Common {
            batch_size: saturating_usize(&batch_size),
            num_workers: saturating_usize(&num_workers),
            prefetch_depth: saturating_usize(&prefetch_depth),
            item_concurrency: saturating_usize(&item_concurrency),
            drop_last,
            shuffle,
            seed,
        };
        Ok(Self {
            kind,
            dataset: args.dataset,
            transform: args.transform,
            transform_takes_index: args.transform_takes_index,
            collate_fn: args.collate_fn,
            return_indices,
            base_seed: args.base_seed.or(seed).unwrap_or(0),
            settings,
            given: Given {
                batch_size: batch_size.unbind(),
                num_workers: num_workers.unbind(),
                prefetch_depth: prefetch_depth.unbind(),
                item_concurrency: item_concurrency.unbind(),
                runtime_threads,
                items_in_flight,
                timeout: timeout_secs,
            },
            runtime_threads,
            items_in_flight,
            shard,
            max_failures,
            timeout,
        })
    }
}

/// How an iterable dataset is read, checked: torch refuses `shuffle=True` for one (a stream
/// has no order to permute: `shuffle_buffer` shuffles it); its items come one after another,
/// never `item_concurrency` at once.
fn stream_kind(
    args: &Args<'_, '_>,
    shuffle: bool,
    item_concurrency: &Bound<'_, PyInt>,
    num_workers: &Bound<'_, PyInt>,
) -> PyResult<Kind> {
    if shuffle {
        return Err(PyValueError::new_err(
            "an iterable dataset (a stream) has no order to shuffle: shuffle=True is refused, \
             as torch's DataLoader refuses it; use shuffle_buffer=N to shuffle within N items",
        ));
    }
    if !item_concurrency.as_any().eq(1)? {
        return Err(PyValueError::new_err(format!(
            "item_concurrency fetches the items of a map-style dataset by index; an iterable \
             dataset is read item after item: it must be 1, got {item_concurrency}"
        )));
    }
    let workers = saturating_usize(num_workers);
    let readers = match args.stream_readers {
        None => Readers::One,
        Some(r) => match r.extract::<String>().ok().as_deref() {
            Some("one") => Readers::One,
            // With no workers the calling thread reads the one iterator, as in torch.
            Some("per_worker") if workers == 0 => Readers::One,
            Some("per_worker") => Readers::PerWorker(workers),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "stream_readers must be 'one' or 'per_worker', got {}",
                    crate::text::shown(r)
                )));
            }
        },
    };
    let shuffle_buffer = match args.shuffle_buffer {
        None => 0,
        Some(n) => saturating_usize(&count_arg("shuffle_buffer", n, 0, None)?),
    };
    Ok(Kind::Stream {
        readers,
        shuffle_buffer,
        make_iter: args
            .make_iter
            .as_ref()
            .map(|f| f.clone_ref(num_workers.py())),
    })
}

/// `prefetch_depth`, or torch's `prefetch_factor` (batches per worker, in progress or
/// waiting) turned into it; 2 without either.
fn prefetch_depth<'py>(
    py: Python<'py>,
    num_workers: &Bound<'py, PyInt>,
    depth: Option<&Bound<'py, PyAny>>,
    factor: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyInt>> {
    let Some(factor) = factor else {
        return match depth {
            None => Ok(2.into_pyobject(py)?),
            Some(depth) => count_arg("prefetch_depth", depth, 1, None),
        };
    };
    if depth.is_some() {
        return Err(PyTypeError::new_err(
            "give prefetch_depth or torch's prefetch_factor, not both",
        ));
    }
    if num_workers.as_any().eq(0)? {
        return Err(PyValueError::new_err(
            "prefetch_factor needs num_workers > 0 (it counts batches per worker)",
        ));
    }
    let factor = count_arg("prefetch_factor", factor, 1, None)?;
    let depth = factor.sub(1)?.mul(num_workers)?;
    if depth.lt(1)? {
        return Ok(1.into_pyobject(py)?);
    }
    Ok(depth.cast_into()?)
}

/// The threads of the async runtime: 1 to `dlrs_io::MAX_THREADS`.
fn runtime_threads(n: &Bound<'_, PyAny>) -> PyResult<usize> {
    let n = count_arg("runtime_threads", n, i64::MIN, None)?;
    n.extract::<usize>()
        .ok()
        .filter(|n| (1..=dlrs_io::MAX_THREADS).contains(n))
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "runtime_threads must be between 1 and {}, got {n}",
                dlrs_io::MAX_THREADS
            ))
        })
}

/// `rank=` and `world_size=`: this loader's share, when given.
fn shard(
    rank: Option<&Bound<'_, PyAny>>,
    world_size: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<(u64, u64)>> {
    let Some(world_size) = world_size else {
        return match rank {
            None => Ok(None),
            Some(_) => Err(PyValueError::new_err("rank needs world_size")),
        };
    };
    let world_size = count_arg("world_size", world_size, i64::MIN, None)?;
    let rank = match rank {
        None => 0.into_pyobject(world_size.py())?,
        Some(rank) => count_arg("rank", rank, i64::MIN, None)?,
    };
    shard_of(&rank, &world_size).map(Some)
}

/// `(rank, world_size)` checked: `world_size ≥ 1`, `0 ≤ rank < world_size` (also at run time,
/// for the distributed run's).
pub fn shard_of(rank: &Bound<'_, PyInt>, world_size: &Bound<'_, PyInt>) -> PyResult<(u64, u64)> {
    let world: u64 = match world_size.extract::<u64>() {
        Ok(w) if w >= 1 => w,
        _ => {
            return Err(PyValueError::new_err(format!(
                "world_size must be at least 1, got {world_size}"
            )));
        }
    };
    match rank.extract::<u64>() {
        Ok(r) if r < world => Ok((r, world)),
        _ => Err(PyValueError::new_err(format!(
            "rank must be in [0, world_size): got rank {rank} of {world_size}"
        ))),
    }
}

/// `max_failures=`: a count (an int ≥ 0) or a fraction of the epoch (a float in [0, 1]).
fn max_failures(value: &Bound<'_, PyAny>) -> PyResult<Limit> {
    if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(
            "max_failures must be an int (a count) or a float (a fraction of the epoch)",
        ));
    }
    if value.is_instance_of::<PyInt>() {
        let n = count_arg("max_failures", value, 0, None)?;
        return Ok(Limit::Count(n.extract().unwrap_or(u64::MAX)));
    }
    if value.is_instance_of::<PyFloat>() {
        let f: f64 = value.extract()?;
        if (0.0..=1.0).contains(&f) {
            return Ok(Limit::Fraction(f));
        }
        return Err(PyValueError::new_err(
            "max_failures is a count (an int >= 0) or a fraction of the epoch (a float in [0, 1])",
        ));
    }
    Err(PyTypeError::new_err(format!(
        "max_failures must be an int (a count) or a float (a fraction), got {}",
        crate::text::type_name(value)
    )))
}

/// `timeout=`: a number of seconds (an int or a float), at least 0.
fn timeout(value: &Bound<'_, PyAny>) -> PyResult<f64> {
    let not_number = || {
        PyTypeError::new_err(format!(
            "timeout must be a number of seconds, got {}",
            crate::text::shown(value)
        ))
    };
    if value.is_instance_of::<PyBool>()
        || !(value.is_instance_of::<PyInt>() || value.is_instance_of::<PyFloat>())
    {
        return Err(not_number());
    }
    if value.lt(0)? {
        return Err(PyValueError::new_err(format!(
            "timeout must be non-negative, got {value}"
        )));
    }
    value.extract::<f64>()
}
