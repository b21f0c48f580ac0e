//! `TarStream`: tar shards read front to back, one after the other.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;

use super::parse::{Indexer, split_name};
use super::source::{Body, Place, Transports, parse_error};
use super::{Sample, TarOptions, resolve};
use crate::error::Error;
use crate::stats::IoStats;

/// Compressed bytes decompressed at once: deflate inflates at most ~1032:1, so one piece
/// gives at most ~16 MiB.
const GZIP_PIECE: usize = 16 << 10;

/// Past a gzip shard's end-of-archive block, its compressed bytes read at most (counted from
/// the piece after the one the archive ended in): the rest of the gzip stream (its checksum
/// and size) is looked for there.
const MAX_AFTER_END: u64 = 1 << 20;

/// Past a gzip shard's end-of-archive block, its decompressed bytes at most (tar pads an
/// archive to a whole record with zeros).
const MAX_INFLATED_AFTER_END: u64 = 16 << 20;

/// The first bytes of a gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Tar shards read front to back, one shard after the other
/// (WebDataset's way), for what cannot be read by range: `.tar.gz` shards and servers that
/// ignore `Range`. No index is made or kept; a shard is one read of a file, one GET without
/// `Range` or one GET of an object.
///
/// A gzip shard (found by its first bytes) is decompressed as its bytes arrive, a bounded
/// piece at a time, so a small shard that inflates to gigabytes never sits in memory; it is
/// read to the end of its gzip stream, whose checksums are checked there, after the shard's
/// samples (a mismatch is then the shard's error). Headers
/// go through the map-style dataset's push parser; every size a header
/// claims is checked against `max_bytes` before a byte of it is kept, and a member's buffer
/// grows with the bytes that arrived, never from the claim.
///
/// A read is a [`futures::Stream`] of [`Read`]s over a list of shards, each carrying where the
/// read stands after it ([`Position`]), so a reader can go on from there later without
/// reading the shards before again. An error of one sample (too large, a missing member) is
/// that sample's; an error of a shard (truncated, not tar, not gzip, a failed request) ends
/// that shard, and the read goes on with the next one. A sample is handed out once the next
/// sample's first header, or the archive's end, is read: one still gathering members when its
/// shard fails goes with the shard.
#[derive(Clone)]
pub struct TarStream {
    inner: Arc<Shared>,
}

struct Shared {
    /// Each shard's place and its location redacted.
    shards: Vec<(Place, String)>,
    transports: Transports,
    member: Option<String>,
    max_bytes: u64,
    stats: IoStats,
}

impl std::fmt::Debug for TarStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = &self.inner;
        write!(
            f,
            "TarStream {{ shards: {}, member: {:?}, .. }}",
            inner.shards.len(),
            inner.member
        )
    }
}

/// Where a read stands: the place in its list of the shard being read, and the samples of
/// that shard already handed out (errors included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Position {
    /// The place of the shard in the read's list.
    pub shard: usize,
    /// The samples of that shard handed out.
    pub sample: u64,
}

/// One item of a read.
#[derive(Debug)]
pub struct Read {
    /// The shard it is from (its index in the stream's locations).
    pub shard: usize,
    /// Where the read stands after it: a read started there goes on with the next item.
    pub after: Position,
    /// The sample, or what is wrong with it or with its shard.
    pub sample: Result<Sample, Error>,
}

impl TarStream {
    /// The shards at `locations` (paths, `file://`, `http(s)://`, `s3://`, `gs://` or `az://`
    /// URLs), to be read in order. Nothing is read yet: only the locations are checked.
    /// `index_dir` is not used (nothing is indexed).
    pub fn new(locations: Vec<String>, options: TarOptions) -> Result<TarStream, Error> {
        let (transports, shards) = resolve(&locations, &options)?;
        Ok(TarStream {
            inner: Arc::new(Shared {
                shards: shards
                    .into_iter()
                    .map(|(place, shown, _)| (place, shown))
                    .collect(),
                transports,
                member: options.member,
                max_bytes: options.fetch.max_bytes,
                stats: IoStats::default(),
            }),
        })
    }

    /// The number of shards.
    pub fn shards(&self) -> usize {
        self.inner.shards.len()
    }

    /// The location of shard `shard`, redacted.
    pub fn location(&self, shard: usize) -> Option<&str> {
        self.inner
            .shards
            .get(shard)
            .map(|(_, shown)| shown.as_str())
    }

    /// The counters of the stream's reads (over every read of it): bytes as stored, requests
    /// under way, retries.
    pub fn io_stats(&self) -> &IoStats {
        &self.inner.stats
    }

    /// The member a sample is reduced to, if one was chosen.
    pub fn member(&self) -> Option<&str> {
        self.inner.member.as_deref()
    }

    /// The shards reader `reader` of `readers` reads in epoch `epoch`: every shard in order,
    /// or shuffled from `(seed, epoch)` when a seed is given; then the `readers`-th ones from
    /// the `reader`-th on (shard `i` of the order goes to reader `i % readers`).
    pub fn shards_of(
        &self,
        seed: Option<u64>,
        epoch: u64,
        reader: usize,
        readers: usize,
    ) -> Vec<usize> {
        let n = self.inner.shards.len();
        let order: Vec<usize> = match seed {
            None => (0..n).collect(),
            Some(seed) => {
                let permutation = dlrs_core::Permutation::new(n as u64, seed, epoch);
                (0..n as u64).map(|i| permutation.get(i) as usize).collect()
            }
        };
        order
            .into_iter()
            .skip(reader)
            .step_by(readers.max(1))
            .collect()
    }

    /// Reads the shards `shards` (indices into the locations) in their order, from `start`
    /// (the shards before its place are not read; that many samples of its shard are read
    /// and dropped).
    pub fn read(&self, shards: Vec<usize>, start: Position) -> BoxStream<'static, Read> {
        let inner = self.inner.clone();
        futures::stream::iter(shards.into_iter().enumerate().skip(start.shard))
            .flat_map(move |(at, shard)| {
                let skip = if at == start.shard { start.sample } else { 0 };
                let reader = ShardRead::new(inner.clone(), at, shard, skip);
                futures::stream::unfold(reader, |mut reader| async move {
                    let read = reader.next().await?;
                    Some((read, reader))
                })
            })
            .boxed()
    }
}

/// The read of one shard.
struct ShardRead {
    inner: Arc<Shared>,
    /// The shard's place in the read's list, and its index in the locations.
    at: usize,
    shard: usize,
    /// Samples to drop before the first handed out.
    skip: u64,
    /// Samples found so far (errors included).
    found: u64,
    body: Option<Body>,
    size: Option<u64>,
    /// The first bytes, until there are enough to tell gzip from tar.
    head: Vec<u8>,
    gunzip: Option<Gunzip>,
    /// Past a gzip shard's end of archive: its compressed and decompressed bytes so far.
    after_end: (u64, u64),
    unpack: Option<Unpacker>,
    /// The error that ends the shard, handed out after the samples before it.
    failed: Option<Error>,
    ended: bool,
}

impl ShardRead {
    fn new(inner: Arc<Shared>, at: usize, shard: usize, skip: u64) -> ShardRead {
        ShardRead {
            inner,
            at,
            shard,
            skip,
            found: 0,
            body: None,
            size: None,
            head: Vec::new(),
            gunzip: None,
            after_end: (0, 0),
            unpack: None,
            failed: None,
            ended: false,
        }
    }

    fn shown(&self) -> &str {
        &self.inner.shards[self.shard].1
    }

    async fn next(&mut self) -> Option<Read> {
        loop {
            if let Some(sample) = self.unpack.as_mut().and_then(|u| u.ready.pop_front()) {
                self.found += 1;
                if self.found <= self.skip {
                    continue;
                }
                let after = Position {
                    shard: self.at,
                    sample: self.found,
                };
                return Some(self.read(after, sample));
            }
            if let Some(error) = self.failed.take() {
                self.ended = true;
                let after = Position {
                    shard: self.at + 1,
                    sample: 0,
                };
                return Some(self.read(after, Err(error)));
            }
            if self.ended {
                return None;
            }
            if let Err(error) = self.step().await {
                self.failed = Some(error);
                self.body = None;
            }
        }
    }

    fn read(&self, after: Position, sample: Result<Sample, Error>) -> Read {
        Read {
            shard: self.shard,
            after,
            sample,
        }
    }

    /// Opens the shard, or takes its next bytes, or ends it.
    async fn step(&mut self) -> Result<(), Error> {
        let Some(body) = self.body.as_mut() else {
            let inner = self.inner.clone();
            let (place, shown) = &inner.shards[self.shard];
            let (size, body) = inner.transports.whole(place, shown, &inner.stats).await?;
            self.size = size;
            self.body = Some(body);
            return Ok(());
        };
        match body.next().await {
            Some(chunk) => {
                let chunk = chunk?;
                self.inner.stats.fetched(chunk.len());
                self.push(&chunk)?;
                if self.gunzip.is_none() && self.unpack.as_ref().is_some_and(Unpacker::is_done) {
                    // What follows the end-of-archive block is not read; a gzip shard is
                    // read on to its checksum.
                    self.ended = true;
                    self.body = None;
                }
            }
            None => {
                self.finish()?;
                self.ended = true;
                self.body = None;
            }
        }
        Ok(())
    }

    /// The shard's next bytes, as they came.
    fn push(&mut self, mut chunk: &[u8]) -> Result<(), Error> {
        if self.unpack.is_none() {
            // Two bytes tell gzip from tar (a tar header starts with a name).
            let need = GZIP_MAGIC
                .len()
                .saturating_sub(self.head.len())
                .min(chunk.len());
            self.head.extend_from_slice(&chunk[..need]);
            chunk = &chunk[need..];
            if self.head.len() < GZIP_MAGIC.len() {
                return Ok(());
            }
            self.start()?;
            let head = std::mem::take(&mut self.head);
            self.decoded(&head)?;
        }
        self.decoded(chunk)
    }

    /// Chooses between gzip and tar from the first bytes.
    fn start(&mut self) -> Result<(), Error> {
        let gzip = self.head.starts_with(&GZIP_MAGIC);
        let shown = self.shown().to_owned();
        let path = shown.split(['?', '#']).next().unwrap_or_default();
        if !gzip && (path.ends_with(".gz") || path.ends_with(".tgz")) {
            return Err(Error::InvalidData {
                location: shown,
                message: "not gzip data (its name says .gz, its first bytes are not gzip's)".into(),
            });
        }
        let mut indexer = Indexer::new();
        if gzip {
            self.gunzip = Some(Gunzip::new());
        } else if let Some(size) = self.size {
            // A member claiming more than the shard holds is found at its header.
            indexer = indexer.with_size(size);
        }
        self.unpack = Some(Unpacker::new(
            indexer,
            self.inner.member.clone(),
            self.inner.max_bytes,
            shown,
        ));
        Ok(())
    }

    /// Bytes of the shard as stored: through gzip if it is that, then to the tar reader.
    fn decoded(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let Some(unpack) = self.unpack.as_mut() else {
            return Ok(());
        };
        let Some(gunzip) = self.gunzip.as_mut() else {
            return unpack.push(bytes).map(drop);
        };
        for piece in bytes.chunks(GZIP_PIECE) {
            let done = unpack.is_done();
            let inflated = gunzip.write(piece);
            let mut out = gunzip.take();
            if let Err(e) = inflated {
                // What came out before the bad bytes is the shard's still.
                if !done {
                    unpack.push(&out)?;
                }
                return Err(bad_gzip(&unpack.shown, &e));
            }
            let past_end = if done {
                out.len() as u64
            } else {
                unpack.push(&out)?
            };
            if unpack.is_done() {
                let (read, inflated) = &mut self.after_end;
                if done {
                    *read += piece.len() as u64;
                }
                *inflated += past_end;
                if *read > MAX_AFTER_END || *inflated > MAX_INFLATED_AFTER_END {
                    return Err(Error::InvalidData {
                        location: unpack.shown.clone(),
                        message: format!(
                            "the gzip stream goes on after the end of the archive (more than \
                             {MAX_AFTER_END} bytes or {MAX_INFLATED_AFTER_END} bytes \
                             decompressed)"
                        ),
                    });
                }
            }
            out.clear();
            gunzip.give_back(out);
        }
        Ok(())
    }

    /// The shard's bytes ended.
    fn finish(&mut self) -> Result<(), Error> {
        if self.unpack.is_none() {
            // Fewer bytes than a gzip magic: not tar either.
            self.start()?;
            let head = std::mem::take(&mut self.head);
            self.decoded(&head)?;
        }
        let Some(unpack) = self.unpack.as_mut() else {
            return Ok(());
        };
        if let Some(gunzip) = self.gunzip.as_mut() {
            // The checksum and size at the end of the gzip stream are checked here.
            let finished = gunzip.finish();
            let out = gunzip.take();
            if !unpack.is_done() {
                unpack.push(&out)?;
            }
            finished.map_err(|e| bad_gzip(&unpack.shown, &e))?;
        }
        unpack.finish()
    }
}

/// A gzip stream decompressed as its bytes arrive: members one after the other, each checked
/// by its checksum and size when it ends, and zero bytes after a member taken as padding (tar
/// tapes are padded so; gzip and Python's gzip module allow it).
struct Gunzip {
    member: flate2::write::GzDecoder<Vec<u8>>,
    /// No byte of the current member was written yet.
    fresh: bool,
    /// Zero bytes came after a member: nothing but zeros may follow.
    padding: bool,
}

impl Gunzip {
    fn new() -> Gunzip {
        Gunzip {
            member: flate2::write::GzDecoder::new(Vec::new()),
            fresh: true,
            padding: false,
        }
    }

    /// Decompresses `input`; the output waits in the buffer until [`Gunzip::take`].
    fn write(&mut self, mut input: &[u8]) -> std::io::Result<()> {
        while !input.is_empty() {
            if self.padding {
                if input.iter().any(|&b| b != 0) {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "bytes other than zeros after the gzip stream's padding",
                    ));
                }
                return Ok(());
            }
            let n = self.member.write(input)?;
            if n == 0 {
                // The member ended (its checksum and size read): check them, start the next.
                self.member.try_finish()?;
                let out = std::mem::take(self.member.get_mut());
                self.member = flate2::write::GzDecoder::new(out);
                self.fresh = true;
                if input[0] == 0 {
                    self.padding = true;
                }
                continue;
            }
            self.fresh = false;
            input = &input[n..];
        }
        // The decoder keeps some output back until flushed.
        self.member.flush()
    }

    /// The input ended: the member being read must be whole.
    fn finish(&mut self) -> std::io::Result<()> {
        if self.fresh || self.padding {
            return Ok(());
        }
        self.member.try_finish()
    }

    fn take(&mut self) -> Vec<u8> {
        std::mem::take(self.member.get_mut())
    }

    /// An emptied buffer, to be written into again.
    fn give_back(&mut self, out: Vec<u8>) {
        *self.member.get_mut() = out;
    }
}

fn bad_gzip(shown: &str, error: &std::io::Error) -> Error {
    Error::InvalidData {
        location: shown.to_owned(),
        message: format!("bad gzip data: {error}"),
    }
}

/// Tar bytes into samples: the push parser finds each member's header, and the data of the
/// members kept is gathered as it passes; consecutive members with one key are a sample.
struct Unpacker {
    indexer: Indexer,
    member: Option<String>,
    max_bytes: u64,
    shown: String,
    /// The member whose data is arriving.
    capture: Option<Capture>,
    /// The sample whose members are arriving.
    building: Option<Building>,
    ready: VecDeque<Result<Sample, Error>>,
    done: bool,
}

struct Capture {
    ext: String,
    remaining: u64,
    data: Vec<u8>,
}

struct Building {
    key: String,
    /// The members kept.
    members: Vec<(String, Bytes)>,
    /// Every member's extension.
    exts: Vec<String>,
    /// The bytes of the members kept.
    bytes: u64,
    error: Option<Error>,
}

impl Unpacker {
    fn new(indexer: Indexer, member: Option<String>, max_bytes: u64, shown: String) -> Unpacker {
        Unpacker {
            indexer,
            member,
            max_bytes,
            shown,
            capture: None,
            building: None,
            ready: VecDeque::new(),
            done: false,
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }

    /// Takes the archive's next bytes; returns how many of them came after its end (not read).
    fn push(&mut self, mut input: &[u8]) -> Result<u64, Error> {
        while !input.is_empty() && !self.done {
            if let Some(capture) = self.capture.as_mut() {
                let n = capture.remaining.min(input.len() as u64) as usize;
                capture.data.extend_from_slice(&input[..n]);
                capture.remaining -= n as u64;
                self.indexer.skip(n as u64);
                input = &input[n..];
                if capture.remaining == 0
                    && let Some(capture) = self.capture.take()
                    && let Some(building) = self.building.as_mut()
                {
                    building
                        .members
                        .push((capture.ext, Bytes::from(capture.data)));
                }
                continue;
            }
            let skip = self.indexer.skippable();
            if skip > 0 {
                let n = skip.min(input.len() as u64);
                self.indexer.skip(n);
                input = &input[n as usize..];
                continue;
            }
            // At least 1 (the parser is not done): a header block, or an extended header.
            let n = self.indexer.wanted().clamp(1, input.len() as u64) as usize;
            self.indexer
                .feed(&input[..n])
                .map_err(|e| parse_error(&self.shown, &e))?;
            input = &input[n..];
            for member in self.indexer.take_members() {
                self.started(&member.name, member.size);
            }
            if self.indexer.is_done() {
                self.done = true;
                self.flush();
            }
        }
        Ok(input.len() as u64)
    }

    /// A member's header was read: its data comes next.
    fn started(&mut self, name: &str, size: u64) {
        let Some((key, ext)) = split_name(name) else {
            return; // of no sample: its data is passed over
        };
        if self.building.as_ref().is_some_and(|b| b.key != key) {
            self.flush();
        }
        let building = self.building.get_or_insert_with(|| Building {
            key: key.to_owned(),
            members: Vec::new(),
            exts: Vec::new(),
            bytes: 0,
            error: None,
        });
        if building.exts.contains(&ext) {
            building.error.get_or_insert_with(|| Error::InvalidData {
                location: format!("{}: sample {key}", self.shown),
                message: format!("it has two members with extension {ext:?}"),
            });
        }
        building.exts.push(ext.clone());
        let wanted = self.member.as_ref().is_none_or(|m| *m == ext);
        if !wanted || building.error.is_some() {
            return;
        }
        let total = building.bytes.saturating_add(size);
        if size > self.max_bytes || total > self.max_bytes {
            let (location, size) = if size > self.max_bytes {
                (format!("{}: {key}.{ext}", self.shown), size)
            } else {
                (format!("{}: sample {key}", self.shown), total)
            };
            building.error = Some(Error::TooLarge {
                location,
                limit: self.max_bytes,
                size: Some(size),
            });
            return;
        }
        building.bytes = total;
        if size == 0 {
            building.members.push((ext, Bytes::new()));
            return;
        }
        // The buffer grows with the bytes that arrive, not with what the header claims.
        let first = usize::try_from(size).unwrap_or(usize::MAX).min(64 << 10);
        self.capture = Some(Capture {
            ext,
            remaining: size,
            data: Vec::with_capacity(first),
        });
    }

    /// The sample being gathered is whole.
    fn flush(&mut self) {
        let Some(building) = self.building.take() else {
            return;
        };
        let Building {
            key,
            members,
            exts,
            error,
            ..
        } = building;
        let outcome = match (error, &self.member) {
            (Some(error), _) => Err(error),
            (None, Some(ext)) if members.is_empty() => Err(Error::InvalidData {
                location: format!("{}: sample {key}", self.shown),
                message: format!(
                    "it has no member {ext:?} (its members: {})",
                    exts.join(", ")
                ),
            }),
            (None, _) => Ok(Sample { key, members }),
        };
        self.ready.push_back(outcome);
    }

    /// The bytes ended: an error unless the archive did.
    fn finish(&mut self) -> Result<(), Error> {
        if self.done {
            return Ok(());
        }
        let indexer = std::mem::replace(&mut self.indexer, Indexer::new());
        indexer.finish().map_err(|e| parse_error(&self.shown, &e))?;
        self.done = true;
        self.flush();
        Ok(())
    }
}

/// A read can be spawned.
#[allow(dead_code)]
fn read_is_send(stream: &TarStream) -> impl Send + use<> {
    stream.read(Vec::new(), Position::default())
}

#[cfg(test)]
mod tests;
