//! `TarStream`: tar shards read in order as an iterable dataset (WebDataset's way), for what
//! cannot be read by range (`.tar.gz` shards, servers without `Range`).
//!
//! `iter(stream)` reads this reader's shards of the epoch (shuffled from the seed and the epoch
//! when asked; split by `get_worker_info()` when a loader reads one stream per worker) on a
//! task of the runtime, a few samples ahead; `__next__` waits for the next one through
//! [`crate::seam`]. The dataset remembers where its latest iterator stands, so
//! `state_dict()` after a batch and `load_state_dict()` before the next `iter()` go on from
//! there without reading the shards before again.

use std::sync::{Arc, Mutex, OnceLock};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use dlrs_core::sync::lock;
use dlrs_io::tar::{Position, Read};
use dlrs_io::{Runtime, redact_url};
use tokio::sync::mpsc::{Receiver, error::TryRecvError};

use super::{TAR_KEYWORDS, args, keywords, listed, locations, shown_member, tar_options};
use crate::errors::io_error;
use crate::seam::{Slice, wait_interruptibly};
use crate::text::wrong_type;

/// Samples an iterator reads ahead of its `__next__`.
const READ_AHEAD: usize = 32;

/// The runtime of the streams' reads: a thread per CPU, as gzip and tar run on it.
fn stream_runtime() -> PyResult<&'static Runtime> {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime);
    }
    let runtime = Runtime::new(None).map_err(|e| io_error(&e))?;
    Ok(RUNTIME.get_or_init(|| runtime))
}

/// Where the reads of a `TarStream` stand.
#[derive(Debug, Default)]
struct State {
    epoch: u64,
    /// `(rank, world_size)` from `set_rank`, with `split_by_rank`.
    rank: Option<(usize, usize)>,
    /// A state given by `load_state_dict`, for the next `iter()`.
    resume: Option<Mark>,
    /// Where the latest iterator stands.
    live: Option<Mark>,
}

/// A reader's place in an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    epoch: u64,
    reader: usize,
    readers: usize,
    position: Position,
}

/// Samples of tar shards read in order, shard after shard: an iterable dataset.
#[pyclass(frozen, module = "dataloader_rs._native", name = "TarStream")]
pub struct TarStream {
    inner: dlrs_io::TarStream,
    /// The seed of the shard order (None: the order given).
    seed: Option<u64>,
    /// Each rank reads its share of the shards (`split_by_rank=True`), told by `set_rank`.
    split_by_rank: bool,
    state: Arc<Mutex<State>>,
    shown: String,
}

impl TarStream {
    /// The counters of the stream's reads, for the loader's `stats()`.
    pub fn io_stats(&self) -> &dlrs_io::IoStats {
        self.inner.io_stats()
    }

    fn keywords() -> Vec<&'static str> {
        let own = ["shuffle_shards", "split_by_rank", "seed"];
        keywords(&own, &[&TAR_KEYWORDS, &args::FETCH_KEYWORDS])
    }
}

/// `(id, num_workers)` of the worker reading, by our `get_worker_info()` or torch's (in a
/// torch worker process); `(0, 1)` outside workers.
fn worker_split(py: Python<'_>) -> PyResult<(usize, usize)> {
    let mut info = py
        .import("dataloader_rs._workers")?
        .getattr("get_worker_info")?
        .call0()?;
    if info.is_none()
        && let Ok(torch) = py
            .import("sys")?
            .getattr("modules")?
            .get_item("torch.utils.data")
    {
        info = torch.getattr("get_worker_info")?.call0()?;
    }
    if info.is_none() {
        return Ok((0, 1));
    }
    let id: usize = info.getattr("id")?.extract()?;
    let n: usize = info.getattr("num_workers")?.extract()?;
    if n == 0 || id >= n {
        return Err(PyValueError::new_err(format!(
            "get_worker_info() says worker {id} of {n}"
        )));
    }
    Ok((id, n))
}

/// An int of a state dict, at least 0.
fn state_int(state: &Bound<'_, PyDict>, key: &str) -> PyResult<u64> {
    let value = state.get_item(key)?.ok_or_else(|| {
        PyValueError::new_err(format!(
            "a TarStream state has the keys epoch, reader, readers, shard and sample; \
             {key:?} is missing"
        ))
    })?;
    if value.is_instance_of::<pyo3::types::PyBool>() {
        return Err(wrong_type(
            &format!("state[{key:?}] must be an int"),
            &value,
        ));
    }
    value.extract::<u64>().map_err(|_| {
        wrong_type(
            &format!("state[{key:?}] must be a non-negative int"),
            &value,
        )
    })
}

#[pymethods]
impl TarStream {
    #[new]
    #[pyo3(
        signature = (locations, **options),
        text_signature = "(locations, *, shuffle_shards=False, seed=0, split_by_rank=False, \
                          member=None, \
                          headers=None, options=None, timeout=30.0, connect_timeout=10.0, \
                          retries=3, backoff=0.1, max_backoff=5.0, max_bytes=67108864)"
    )]
    fn new(locations: &Bound<'_, PyAny>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let py = locations.py();
        let kw = args::Keywords::new("TarStream", options, &Self::keywords())?;
        let locations = self::locations(locations)?;
        let shuffle = kw.flag("shuffle_shards")?;
        let split_by_rank = kw.flag("split_by_rank")?;
        let seed = kw
            .get("seed")
            .map_or(Ok(0), |v| crate::args::seed_arg("TarStream", v))?;
        let options = tar_options(&kw)?;
        let mut shown = listed("TarStream", "shards", &locations, |l| redact_url(l));
        if shuffle {
            shown.push_str(&format!(", shuffle_shards=True, seed={seed}"));
        }
        if split_by_rank {
            shown.push_str(", split_by_rank=True");
        }
        shown.push_str(&shown_member(&options));
        shown.push(')');
        let inner = super::detached(py, || dlrs_io::TarStream::new(locations, options))?;
        Ok(Self {
            inner,
            seed: shuffle.then_some(seed),
            split_by_rank,
            state: Arc::default(),
            shown,
        })
    }

    /// A reader of this epoch's shards: all of them, or this worker's share (shard `i` of the
    /// epoch's order goes to worker `i % num_workers`); from where `load_state_dict` says.
    fn __iter__(&self, py: Python<'_>) -> PyResult<TarStreamIter> {
        let (worker, workers) = worker_split(py)?;
        let (rank, world) = lock(&self.state).rank.unwrap_or((0, 1));
        let shards = self.inner.shards();
        if shards % world != 0 {
            return Err(PyValueError::new_err(format!(
                "split_by_rank gives each rank the same number of shards: {shards} shards do \
                 not split over world_size {world}"
            )));
        }
        // Rank k reads shards k, k + world, ... of the epoch's order; its worker j the j-th,
        // (j + workers)-th, ... of those. A reader is named by both.
        let (reader, readers) = (rank * workers + worker, world * workers);
        let (epoch, start) = {
            let mut state = lock(&self.state);
            let epoch = state.epoch;
            let resume = state
                .resume
                .take()
                .filter(|m| (m.epoch, m.reader, m.readers) == (epoch, reader, readers));
            (epoch, resume.map(|m| m.position).unwrap_or_default())
        };
        let shards = self
            .inner
            .shards_of(self.seed, epoch, rank, world)
            .into_iter()
            .skip(worker)
            .step_by(workers)
            .collect();
        let mut reads = self.inner.read(shards, start);
        let runtime = stream_runtime()?;
        let (tx, rx) = tokio::sync::mpsc::channel(READ_AHEAD);
        let task = runtime
            .spawn(async move {
                use futures::StreamExt;
                while let Some(read) = reads.next().await {
                    if tx.send(read).await.is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| io_error(&e))?;
        let mark = Mark {
            epoch,
            reader,
            readers,
            position: start,
        };
        lock(&self.state).live = Some(mark);
        Ok(TarStreamIter {
            rx: Mutex::new(rx),
            task: task.abort_handle(),
            mark: Mutex::new(mark),
            state: self.state.clone(),
            member: self.inner.member().is_some(),
        })
    }

    /// With `split_by_rank=True`, makes each `iter()` read rank `rank`'s share of the shards of
    /// `world_size` ranks, and returns True (the loader then keeps every sample of this
    /// stream); else changes nothing and returns False (the loader keeps every
    /// `world_size`-th sample).
    fn set_rank(&self, rank: usize, world_size: usize) -> PyResult<bool> {
        if world_size == 0 || rank >= world_size {
            return Err(PyValueError::new_err(format!(
                "rank must be in range(world_size): rank {rank}, world_size {world_size}"
            )));
        }
        if !self.split_by_rank {
            return Ok(false);
        }
        lock(&self.state).rank = Some((rank, world_size));
        Ok(true)
    }

    /// Makes the next `iter()` read epoch `epoch`'s order of the shards (the loader calls it
    /// at the start of each epoch, as for a `datasets.IterableDataset`).
    fn set_epoch(&self, epoch: u64) {
        lock(&self.state).epoch = epoch;
    }

    /// The epoch the next `iter()` reads.
    #[getter]
    fn epoch(&self) -> u64 {
        lock(&self.state).epoch
    }

    /// Where the latest iterator stands: its epoch, its worker (`reader` of `readers`), the
    /// place of its shard in its order and the samples of that shard it handed out.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let state = lock(&self.state);
        let mark = state.resume.or(state.live).unwrap_or(Mark {
            epoch: state.epoch,
            reader: 0,
            readers: 1,
            position: Position::default(),
        });
        let d = PyDict::new(py);
        d.set_item("epoch", mark.epoch)?;
        d.set_item("reader", mark.reader)?;
        d.set_item("readers", mark.readers)?;
        d.set_item("shard", mark.position.shard)?;
        d.set_item("sample", mark.position.sample)?;
        Ok(d)
    }

    /// Makes the next `iter()` of the same epoch and worker go on where `state` (a
    /// `state_dict()`) was taken; it also sets the epoch.
    fn load_state_dict(&self, state: &Bound<'_, PyAny>) -> PyResult<()> {
        let state = state
            .cast::<PyDict>()
            .map_err(|_| wrong_type("state must be a dict from TarStream.state_dict()", state))?;
        for key in state.keys() {
            let key: String = key.extract().unwrap_or_default();
            if !["epoch", "reader", "readers", "shard", "sample"].contains(&key.as_str()) {
                return Err(PyValueError::new_err(format!(
                    "a TarStream state has the keys epoch, reader, readers, shard and \
                     sample, not {key:?}"
                )));
            }
        }
        let as_usize = |key: &str| -> PyResult<usize> {
            usize::try_from(state_int(state, key)?)
                .map_err(|_| PyValueError::new_err(format!("state[{key:?}] is too large")))
        };
        let mark = Mark {
            epoch: state_int(state, "epoch")?,
            reader: as_usize("reader")?,
            readers: as_usize("readers")?,
            position: Position {
                shard: as_usize("shard")?,
                sample: state_int(state, "sample")?,
            },
        };
        if mark.readers == 0 || mark.reader >= mark.readers {
            return Err(PyValueError::new_err(format!(
                "state: reader {} of {} readers",
                mark.reader, mark.readers
            )));
        }
        let mut now = lock(&self.state);
        now.epoch = mark.epoch;
        now.resume = Some(mark);
        Ok(())
    }

    /// The number of shards.
    #[getter]
    fn num_shards(&self) -> usize {
        self.inner.shards()
    }

    /// The member a sample is (`member=`), or None: the whole sample.
    #[getter]
    fn member(&self) -> Option<&str> {
        self.inner.member()
    }

    fn __repr__(&self) -> String {
        self.shown.clone()
    }
}

/// One reader of a [`TarStream`]: its shards, read on the runtime a few samples ahead.
#[pyclass(frozen, module = "dataloader_rs._native", name = "TarStreamIterator")]
pub struct TarStreamIter {
    rx: Mutex<Receiver<Read>>,
    task: tokio::task::AbortHandle,
    /// Where this reader stands.
    mark: Mutex<Mark>,
    state: Arc<Mutex<State>>,
    member: bool,
}

impl Drop for TarStreamIter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[pymethods]
impl TarStreamIter {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// The next sample: `{"__key__": key, extension: bytes, ...}`, or the member's bytes with
    /// `member=`; its error (with its shard's location) if it or its shard is broken.
    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let runtime = stream_runtime()?;
        // Held while the interpreter is released: a second thread must not wait for it with
        // the interpreter held (the first could not come back), so it is refused, as a
        // generator refuses to run twice at once.
        let mut rx = match self.rx.try_lock() {
            Ok(rx) => rx,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                return Err(PyValueError::new_err(
                    "this TarStream iterator is already running next() on another thread",
                ));
            }
        };
        let rx = &mut *rx;
        let read = wait_interruptibly(py, |slice| {
            match rx.try_recv() {
                Ok(read) => return Slice::Ready(Ok(Some(read))),
                Err(TryRecvError::Disconnected) => return Slice::Ready(Ok(None)),
                Err(TryRecvError::Empty) => {}
            }
            let Some(slice) = slice.filter(|s| !s.is_zero()) else {
                return Slice::Pending;
            };
            match runtime.block_on(async { tokio::time::timeout(slice, rx.recv()).await }) {
                Err(e) => Slice::Ready(Err(e)),
                Ok(Ok(read)) => Slice::Ready(Ok(read)),
                Ok(Err(_)) => Slice::Pending,
            }
        })?
        .map_err(|e| io_error(&e))?;
        let Some(read) = read else {
            return Ok(None);
        };
        let mark = {
            let mut mark = lock(&self.mark);
            mark.position = read.after;
            *mark
        };
        {
            let mut state = lock(&self.state);
            if state.live.is_some_and(|l| {
                (l.epoch, l.reader, l.readers) == (mark.epoch, mark.reader, mark.readers)
            }) {
                state.live = Some(mark);
            }
        }
        let sample = read.sample.map_err(|e| io_error(&e))?;
        if self.member {
            let bytes = sample
                .members()
                .next()
                .map(|(_, b)| b.clone())
                .unwrap_or_default();
            return Ok(Some(PyBytes::new(py, &bytes).into_any()));
        }
        let dict = PyDict::new(py);
        dict.set_item("__key__", sample.key())?;
        for (ext, data) in sample.members() {
            dict.set_item(ext, PyBytes::new(py, data))?;
        }
        Ok(Some(dict.into_any()))
    }
}
