//! A stream of items read in order as one core [`Source`]: [`StreamPipeline`].
//!
//! Batch `b` of an epoch is the next `indices.len()` items of the epoch's read, after the ones
//! batch `b - 1` took. The workers take turns at the read: a worker waits for its batch's
//! turn, takes its items, hands the turn on at once, then runs [`Stages::transform`] on each
//! item and [`Stages::collate`] on its own thread while the next worker reads. So the batches
//! keep the stream's order whatever the number of workers, and the CPU work is spread over
//! them. The transforms run on the worker's thread, whatever [`Stages::runs_on_pool`] says.
//!
//! The pipeline owns the read of one epoch at a time. The first batch of a new epoch (a new
//! [`BatchCtx::epoch_id`], so two epochs of one number are read twice) starts a new read,
//! [`ItemStream::items`] of the epoch's number, and the older read is dropped: a batch of the
//! older epoch that comes later fails. A read runs on the pipeline's [`Runtime`], blocked on from the
//! worker's thread, never inside the runtime. Every wait, for a turn or for items, checks the
//! epoch's cancellation each [`WAIT_SLICE`], so an abandoned epoch frees its workers.
//!
//! A read that failed (a sample, a shard that ended early) fills its place in the batch and
//! goes through [`Stages::io_error`] and [`Stages::skip`], as a failed item of a
//! [`crate::Pipeline`] does. The indices the stages see are the items' places in the epoch's
//! read. A batch the stream ends in is short; a batch after its end fails (the caller sizes
//! the epoch from the number of items it knows the stream holds).
//!
//! [`TarItems`] reads a [`TarStream`]'s shards as such a stream: each sample's one member.
//!
//! A resumed epoch (`Loader::epoch_from`) starts its read at the beginning too: its first
//! batch reads and drops the items the skipped batches held ([`BatchCtx::skipped_items`]),
//! then takes its own, so it goes on exactly where the interrupted epoch stopped, at the cost
//! of reading what came before again.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;

use dlrs_core::sync::lock;
use dlrs_core::{BatchCtx, LoadError, Source, WAIT_SLICE};

use crate::pipeline::{ItemAt, Stages};
use crate::{Error, Runtime};
#[cfg(any(feature = "file", feature = "http", feature = "object-store"))]
use crate::{TarStream, tar::Position};

/// What a [`StreamPipeline`] reads: one stream of items per epoch.
pub trait ItemStream: Send + Sync + 'static {
    /// The items of the epoch numbered `epoch`, in order: each one's bytes, or what went
    /// wrong with it. Nothing need be read before the stream is polled.
    fn items(&self, epoch: u64) -> BoxStream<'static, Result<Bytes, Error>>;
}

/// The samples of a [`TarStream`]'s shards, each reduced to its member
/// ([`crate::TarOptions::member`]): every shard in order, or shuffled per epoch from a seed
/// ([`TarStream::shards_of`]).
#[cfg(any(feature = "file", feature = "http", feature = "object-store"))]
#[derive(Debug, Clone)]
pub struct TarItems {
    stream: TarStream,
    seed: Option<u64>,
}

#[cfg(any(feature = "file", feature = "http", feature = "object-store"))]
impl TarItems {
    /// The samples of `stream`'s shards, shuffled by `(seed, epoch)` when a seed is given.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the stream has no member chosen: an item is one
    /// member's bytes.
    pub fn new(stream: TarStream, seed: Option<u64>) -> Result<TarItems, Error> {
        if stream.member().is_none() {
            return Err(Error::invalid(
                "a stream of items needs TarOptions::member: an item is one member's bytes",
            ));
        }
        Ok(TarItems { stream, seed })
    }

    /// The tar stream.
    pub fn stream(&self) -> &TarStream {
        &self.stream
    }
}

#[cfg(any(feature = "file", feature = "http", feature = "object-store"))]
impl ItemStream for TarItems {
    fn items(&self, epoch: u64) -> BoxStream<'static, Result<Bytes, Error>> {
        let shards = self.stream.shards_of(self.seed, epoch, 0, 1);
        self.stream
            .read(shards, Position::default())
            .map(|read| {
                let sample = read.sample?;
                let key = sample.key().to_owned();
                // The stream keeps only the chosen member, and fails a sample without it.
                match sample.into_members().into_iter().next() {
                    Some((_, bytes)) => Ok(bytes),
                    None => Err(Error::InvalidData {
                        location: format!("sample {key}"),
                        message: "it has no member".to_owned(),
                    }),
                }
            })
            .boxed()
    }
}

/// An [`ItemStream`] and [`Stages`] as one [`Source`]: see the [module](self) docs.
pub struct StreamPipeline<S: Stages> {
    items: Arc<dyn ItemStream>,
    stages: Arc<S>,
    runtime: Arc<Runtime>,
    /// The read of the latest epoch that loaded a batch.
    current: Mutex<Option<Arc<EpochRead>>>,
}

impl<S: Stages> std::fmt::Debug for StreamPipeline<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamPipeline").finish_non_exhaustive()
    }
}

/// An epoch's read: its items in order.
type Items = BoxStream<'static, Result<Bytes, Error>>;

/// The place of a batch's first item in the read, and the batch's items.
type Taken = (u64, Vec<Result<Bytes, Error>>);

/// One epoch's read and whose turn it is.
struct EpochRead {
    /// The core epoch it is for ([`BatchCtx::epoch_id`]).
    id: usize,
    turn: Mutex<Turn>,
    handed_on: Condvar,
}

struct Turn {
    /// The batch that reads next.
    batch: u64,
    /// The items taken so far (those passed over included).
    taken: u64,
    /// Items to pass over before the next batch's own: a resumed epoch's skipped batches'.
    skip: u64,
    /// The read; out of here while a batch reads it, and gone once it ended.
    stream: Option<Items>,
}

/// Hands the turn on when dropped: a batch that fails or panics while it reads does not
/// hold up the next ones.
struct HandOn<'a> {
    read: &'a EpochRead,
    taken: u64,
    stream: Option<Items>,
}

impl Drop for HandOn<'_> {
    fn drop(&mut self) {
        let mut turn = lock(&self.read.turn);
        turn.batch += 1;
        turn.taken += self.taken;
        turn.stream = self.stream.take();
        drop(turn);
        self.read.handed_on.notify_all();
    }
}

impl<S: Stages> StreamPipeline<S> {
    /// Batches of `items` through `stages`, read on a runtime of one thread per CPU (started
    /// at the first batch).
    pub fn new(items: impl ItemStream, stages: S) -> StreamPipeline<S> {
        StreamPipeline {
            items: Arc::new(items),
            stages: Arc::new(stages),
            runtime: Arc::new(Runtime::default()),
            current: Mutex::new(None),
        }
    }

    /// Reads on `runtime` (shared with other pipelines, or of a chosen size).
    #[must_use]
    pub fn runtime(mut self, runtime: Arc<Runtime>) -> Self {
        self.runtime = runtime;
        self
    }

    /// The stages.
    pub fn stages(&self) -> &Arc<S> {
        &self.stages
    }

    /// The runtime the reads run on.
    pub fn io_runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The read of `ctx`'s epoch: a new one for a newer epoch. A batch of an older epoch
    /// fails: one epoch at a time reads the stream.
    fn epoch_read(&self, ctx: &BatchCtx) -> Result<Arc<EpochRead>, LoadError<S::Error>> {
        let mut current = lock(&self.current);
        match current.as_ref() {
            Some(read) if read.id == ctx.epoch_id() => return Ok(Arc::clone(read)),
            Some(read) if read.id > ctx.epoch_id() => {
                if ctx.is_cancelled() {
                    return Err(LoadError::Cancelled);
                }
                let error = Error::Runtime("a newer epoch is reading the stream".to_owned());
                return Err(LoadError::Source(self.stages.io_error(None, error)));
            }
            _ => {}
        }
        let read = Arc::new(EpochRead {
            id: ctx.epoch_id(),
            turn: Mutex::new(Turn {
                batch: ctx.first_batch(),
                taken: 0,
                skip: ctx.skipped_items(),
                stream: Some(self.items.items(ctx.epoch_number())),
            }),
            handed_on: Condvar::new(),
        });
        *current = Some(Arc::clone(&read));
        Ok(read)
    }

    /// Waits for batch `ctx.batch_number()`'s turn, then takes the next `n` items of the read
    /// (fewer where it ends) and hands the turn on.
    fn take(
        &self,
        read: &EpochRead,
        n: usize,
        ctx: &BatchCtx,
    ) -> Result<Taken, LoadError<S::Error>> {
        let mut turn = self.wait_for_turn(read, ctx)?;
        let skip = std::mem::take(&mut turn.skip);
        let mut first = turn.taken;
        let stream = turn.stream.take();
        // Unlocked while reading: the waiting workers still see their epoch's cancellation.
        drop(turn);
        let mut hand_on = HandOn {
            read,
            taken: 0,
            stream: None,
        };
        let Some(mut stream) = stream else {
            return Ok((first, Vec::new())); // it ended before this batch
        };
        let reading = async {
            let mut passed = 0;
            while passed < skip {
                // Read again and dropped, errors too: they were the skipped batches'.
                if stream.next().await.is_none() {
                    return (passed, Vec::new(), true);
                }
                passed += 1;
            }
            let mut items = Vec::with_capacity(n);
            while items.len() < n {
                match stream.next().await {
                    Some(item) => items.push(item),
                    None => return (passed, items, true),
                }
            }
            (passed, items, false)
        };
        let outcome = self.runtime.block_on_checked(reading, WAIT_SLICE, || {
            if ctx.is_cancelled() { Err(()) } else { Ok(()) }
        });
        match outcome {
            Err(e) => {
                hand_on.stream = Some(stream);
                Err(LoadError::Source(self.stages.io_error(None, e)))
            }
            // The epoch is abandoned: its read is of no more use.
            Ok(Err(())) => Err(LoadError::Cancelled),
            Ok(Ok((passed, items, ended))) => {
                first += passed;
                hand_on.taken = passed + items.len() as u64;
                if !ended {
                    hand_on.stream = Some(stream);
                }
                Ok((first, items))
            }
        }
    }

    /// The turn of `ctx`'s batch, waited for a slice at a time.
    fn wait_for_turn<'a>(
        &self,
        read: &'a EpochRead,
        ctx: &BatchCtx,
    ) -> Result<MutexGuard<'a, Turn>, LoadError<S::Error>> {
        let turn = lock(&read.turn);
        ctx.wait_until(&read.handed_on, turn, |t| t.batch == ctx.batch_number())
            .ok_or(LoadError::Cancelled)
    }
}

impl<S: Stages> Source for StreamPipeline<S> {
    type Batch = S::Batch;
    type Error = S::Error;

    /// Takes the batch's items at its turn, then transforms and collates them on this thread.
    fn load_batch(&self, indices: &[u64], ctx: &BatchCtx) -> Result<S::Batch, LoadError<S::Error>> {
        let read = self.epoch_read(ctx)?;
        let (first, items) = self.take(&read, indices.len(), ctx)?;
        if items.is_empty() {
            if ctx.is_cancelled() {
                return Err(LoadError::Cancelled);
            }
            let error = Error::InvalidData {
                location: "the stream".to_owned(),
                message: format!(
                    "it ended after {first} items, before batch {}",
                    ctx.batch_number()
                ),
            };
            return Err(LoadError::Source(self.stages.io_error(None, error)));
        }
        let mut kept = Vec::with_capacity(items.len());
        let mut indices = Vec::with_capacity(items.len());
        for (position, item) in items.into_iter().enumerate() {
            if ctx.is_cancelled() {
                return Err(LoadError::Cancelled);
            }
            let at = ItemAt {
                index: first + position as u64,
                position,
                worker: ctx.worker(),
                epoch: ctx.epoch_number(),
                epoch_id: ctx.epoch_id(),
            };
            let item = match item {
                Ok(bytes) => self.stages.transform(&at, bytes),
                Err(e) => Err(self.stages.io_error(Some(&at), e)),
            };
            match item {
                Ok(item) => {
                    kept.push(item);
                    indices.push(at.index);
                }
                Err(e) => self.stages.skip(&at, e).map_err(LoadError::Source)?,
            }
        }
        self.stages
            .collate(kept, &indices)
            .map_err(LoadError::Source)
    }

    /// The items are read and transformed by the worker itself.
    fn items_on_pool(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests;
