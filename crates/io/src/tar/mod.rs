//! `TarDataset`: the samples of tar shards (the WebDataset layout), each read with one range
//! request (one positioned read for a file), or one per member when other entries lie far
//! between them.
//!
//! Each shard is indexed once from its tar headers: member names, offsets and sizes. The index
//! is kept in a directory ([`TarOptions::index_dir`]) with what the shard was (its size and
//! ETag, Last-Modified or modification time), so a later run only asks each shard what it is
//! now (a one-byte range request, a HEAD of an object, a `stat`).
//! Members are grouped into samples by the WebDataset rule ([`split_name`]): `000123.jpg` and
//! `000123.cls` are the sample `000123` with the extensions `jpg` and `cls`.
//!
//! Item `i` of the [`Dataset`] is sample `i`'s members as they are in the shard, each from its
//! first header to the end of its data, one after the other: a tar fragment, which
//! [`Sample::from_fragment`] reads back as `{extension: bytes}` without a copy. With
//! [`TarOptions::member`], item `i` is only that member's bytes (one smaller range), which an
//! image transform takes as it is. `max_bytes` bounds an item: the member, or all the bytes
//! read for a sample.
//!
//! Every read names the version it was indexed at (`If-Match` with a strong ETag, else
//! `If-Unmodified-Since`; the answer's size, ETag and Last-Modified are compared too; a file's
//! size, inode and modification time are checked before and after the read): a shard that
//! changed is [`Error::Changed`], and no byte of it is read with the old index. A sample's bytes
//! are parsed again and must be the members indexed (else [`Error::Changed`] too): a shard
//! rewritten under its old size and modification time is caught there.
//!
//! Every size and offset is checked before use: a header's claimed size against the shard's
//! size (a corrupt shard), a kept index against the shard (else it is made again).

mod index;
mod parse;
mod source;
mod stream;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};

use crate::dataset::{Dataset, FetchOptions};
use crate::error::Error;
use crate::redact::redact_url;
use crate::stats::IoStats;

use index::Version;
pub use parse::{Member, split_name};
use source::{Place, Transports, parse_error};
pub use stream::{Position, Read, TarStream};

/// Shards indexed at once when a dataset is opened.
const INDEX_CONCURRENCY: usize = 16;

/// The options of a [`TarDataset`].
#[derive(Clone, PartialEq, Eq)]
pub struct TarOptions {
    /// Timeout, retries, `max_bytes` (the largest member). Default [`FetchOptions::HTTP`].
    pub fetch: FetchOptions,
    /// Headers of the requests to http(s) shards (to their origin only, as [`crate::HttpDataset`]).
    pub headers: Vec<(String, String)>,
    /// The time connecting to an http(s) shard's server may take. Default 10 s.
    pub connect_timeout: Option<Duration>,
    /// object_store configuration keys of the stores of `s3://`, `gs://`, `az://` shards (as
    /// [`crate::ObjectStoreOptions::options`]).
    pub store_options: Vec<(String, String)>,
    /// The one member an item is (by extension, e.g. `jpg`); `None`: the whole sample.
    pub member: Option<String>,
    /// Where the shards' indexes are kept (`None`: not kept, every run indexes every shard).
    pub index_dir: Option<PathBuf>,
}

impl Default for TarOptions {
    fn default() -> Self {
        TarOptions {
            fetch: FetchOptions::HTTP,
            headers: Vec::new(),
            connect_timeout: Some(Duration::from_secs(10)),
            store_options: Vec::new(),
            member: None,
            index_dir: None,
        }
    }
}

impl std::fmt::Debug for TarOptions {
    /// Shows header names and option keys, never their values (they may be credentials).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = |pairs: &[(String, String)]| -> Vec<String> {
            pairs.iter().map(|(k, _)| k.clone()).collect()
        };
        f.debug_struct("TarOptions")
            .field("fetch", &self.fetch)
            .field("headers", &keys(&self.headers))
            .field("connect_timeout", &self.connect_timeout)
            .field("store_options", &keys(&self.store_options))
            .field("member", &self.member)
            .field("index_dir", &self.index_dir)
            .finish()
    }
}

/// The default place of the shards' indexes: `$XDG_CACHE_HOME/dataloader-rs/tar-index`, or
/// `~/.cache/dataloader-rs/tar-index`.
pub fn default_index_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("dataloader-rs").join("tar-index"))
}

/// One sample's members: `{extension: bytes}`, the bytes sharing the buffer they were read
/// into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    key: String,
    members: Vec<(String, Bytes)>,
}

impl Sample {
    /// Reads the members of a sample's tar fragment (an item of a [`TarDataset`] without
    /// [`TarOptions::member`]); members of other keys are left out. Bytes that are not such a
    /// fragment are an [`Error::InvalidData`].
    pub fn from_fragment(fragment: &Bytes) -> Result<Sample, Error> {
        const WHAT: &str = "a tar sample";
        let members = parse::index_fragment(fragment).map_err(|e| parse_error(WHAT, &e))?;
        let mut key: Option<String> = None;
        let mut out = Vec::with_capacity(members.len());
        for m in &members {
            let Some((k, ext)) = split_name(&m.name) else {
                continue;
            };
            match &key {
                Some(first) if first != k => continue,
                Some(_) => {}
                None => key = Some(k.to_owned()),
            }
            // The parser keeps every member inside the fragment; checked again, as a slice
            // out of range would panic.
            let range = usize::try_from(m.data)
                .ok()
                .zip(usize::try_from(m.end()).ok())
                .filter(|&(start, end)| start <= end && end <= fragment.len());
            let Some((start, end)) = range else {
                return Err(Error::InvalidData {
                    location: WHAT.to_owned(),
                    message: format!("member {:?} is past the fragment's end", m.name),
                });
            };
            out.push((ext, fragment.slice(start..end)));
        }
        Ok(Sample {
            key: key.unwrap_or_default(),
            members: out,
        })
    }

    /// The sample's key (`000123` for `000123.jpg`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The member of extension `ext`.
    pub fn get(&self, ext: &str) -> Option<&Bytes> {
        self.members.iter().find(|(e, _)| e == ext).map(|(_, b)| b)
    }

    /// The members, in the order of the shard.
    pub fn members(&self) -> impl Iterator<Item = (&str, &Bytes)> {
        self.members.iter().map(|(e, b)| (e.as_str(), b))
    }

    /// The members, owned.
    pub fn into_members(self) -> Vec<(String, Bytes)> {
        self.members
    }
}

/// Indexes a whole tar archive held in memory: its regular members, as [`TarDataset`]
/// indexes a shard. A malformed or truncated archive is an [`Error::InvalidData`].
pub fn index_archive(archive: &[u8]) -> Result<Vec<Member>, Error> {
    parse::index_bytes(archive).map_err(|e| parse_error("a tar archive", &e))
}

/// The samples of tar shards; see the [module docs](self).
#[derive(Clone)]
pub struct TarDataset {
    inner: Arc<Inner>,
}

struct Inner {
    shards: Vec<Shard>,
    samples: Vec<SampleRef>,
    members: Vec<MemberRef>,
    member: Option<String>,
    max_bytes: u64,
    transports: Transports,
    stats: IoStats,
}

struct Shard {
    /// What names the shard in its index and the cache (a canonical path, a redacted URL with
    /// a hash of the whole).
    key: String,
    /// The redacted location, for messages.
    shown: String,
    place: Place,
    version: Version,
}

struct SampleRef {
    shard: u32,
    first: u32,
    count: u32,
    key: Box<str>,
}

struct MemberRef {
    ext: Box<str>,
    /// The offset of its first header block.
    header: u64,
    data: u64,
    size: u64,
}

impl std::fmt::Debug for TarDataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TarDataset")
            .field("shards", &self.inner.shards.len())
            .field("len", &self.inner.samples.len())
            .finish_non_exhaustive()
    }
}

impl TarDataset {
    /// Opens the shards at `locations` (paths, `file://`, `http(s)://`, `s3://`, `gs://` or
    /// `az://` URLs): each is indexed, or its kept index is checked against what it is now.
    /// A shard that cannot be read or is not a whole tar archive fails the whole dataset,
    /// naming the shard.
    pub async fn open(locations: Vec<String>, options: TarOptions) -> Result<TarDataset, Error> {
        let (transports, shards) = resolve(&locations, &options)?;
        let stats = IoStats::default();
        let dir = options.index_dir.as_deref();
        // Indices, not references, so that the future is Send (closures over references are
        // not general enough for it).
        let (shards_ref, transports_ref, stats_ref) = (&shards, &transports, &stats);
        let indexed: Vec<(Version, Vec<Member>)> = futures::stream::iter(0..shards.len())
            .map(|i| {
                let (place, shown, key) = &shards_ref[i];
                index_shard(transports_ref, place, shown, key, dir, stats_ref)
            })
            .buffered(INDEX_CONCURRENCY)
            .try_collect()
            .await?;
        let mut samples = Vec::new();
        let mut members = Vec::new();
        let too_many = || Error::invalid("more than 2**32 members or shards");
        for (at, ((_, shown, _), (_, found))) in shards.iter().zip(&indexed).enumerate() {
            for group in parse::group(found).map_err(|e| parse_error(shown, &e))? {
                let first = u32::try_from(members.len()).map_err(|_| too_many())?;
                for (i, ext) in &group.members {
                    let m = &found[*i];
                    members.push(MemberRef {
                        ext: ext.as_str().into(),
                        header: m.header,
                        data: m.data,
                        size: m.size,
                    });
                }
                samples.push(SampleRef {
                    shard: u32::try_from(at).map_err(|_| too_many())?,
                    first,
                    count: group.members.len() as u32,
                    key: group.key.into(),
                });
            }
        }
        let shards = shards
            .into_iter()
            .zip(indexed)
            .map(|((place, shown, key), (version, _))| Shard {
                key,
                shown,
                place,
                version,
            })
            .collect();
        Ok(TarDataset {
            inner: Arc::new(Inner {
                shards,
                samples,
                members,
                member: options.member,
                max_bytes: options.fetch.max_bytes,
                transports,
                stats,
            }),
        })
    }

    /// The key of sample `index`.
    pub fn key(&self, index: u64) -> Option<&str> {
        self.inner.sample(index).ok().map(|s| &*s.key)
    }

    /// The extensions of sample `index`'s members, in the order of the shard.
    pub fn extensions(&self, index: u64) -> Option<Vec<&str>> {
        let sample = self.inner.sample(index).ok()?;
        Some(
            self.inner
                .members_of(sample)
                .iter()
                .map(|m| &*m.ext)
                .collect(),
        )
    }

    /// The number of shards.
    pub fn shards(&self) -> usize {
        self.inner.shards.len()
    }

    /// The shard sample `index` is in (its location, redacted).
    pub fn shard_of(&self, index: u64) -> Option<&str> {
        let sample = self.inner.sample(index).ok()?;
        Some(&self.inner.shards[sample.shard as usize].shown)
    }

    /// The member an item is, if one was chosen.
    pub fn member(&self) -> Option<&str> {
        self.inner.member.as_deref()
    }

    /// Fetches the whole sample `index` (whatever [`TarOptions::member`] says).
    pub fn sample(&self, index: u64) -> BoxFuture<'static, Result<Sample, Error>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let bytes = inner.read_sample(index).await?;
            Sample::from_fragment(&bytes)
        })
    }
}

/// What names a remote shard in its index and the cache: its redacted location and a hash of
/// the whole (query and credentials included, never written in clear), so that shards that
/// differ only by a query are not taken for one another.
#[cfg_attr(not(any(feature = "http", feature = "object-store")), allow(dead_code))]
fn remote_key(location: &str, shown: &str) -> String {
    let hash = |seed| crate::cache::stable_hash(location.as_bytes(), seed);
    format!("{shown}#{:016x}{:016x}", hash(4), hash(5))
}

/// The shards at `locations`: each one's place, its location redacted (for messages) and its
/// key (for its index and the cache); and the transports that read them (one HTTP client, one
/// store per bucket or container).
#[allow(clippy::type_complexity)]
fn resolve(
    locations: &[String],
    options: &TarOptions,
) -> Result<(Transports, Vec<(Place, String, String)>), Error> {
    #[cfg_attr(
        not(any(feature = "http", feature = "object-store")),
        allow(unused_mut)
    )]
    let mut transports = Transports {
        #[cfg(feature = "http")]
        http: None,
        #[cfg(feature = "object-store")]
        stores: Vec::new(),
        options: options.fetch,
    };
    #[cfg(feature = "object-store")]
    let mut roots: Vec<String> = Vec::new();
    let mut shards = Vec::with_capacity(locations.len());
    for location in locations {
        let (place, shown, key) = match place_of(location)? {
            #[cfg(feature = "file")]
            Kind::File(path) => {
                let key = std::fs::canonicalize(&path)
                    .unwrap_or_else(|_| path.clone())
                    .display()
                    .to_string();
                (Place::File(path.clone()), path.display().to_string(), key)
            }
            #[cfg(feature = "http")]
            Kind::Http => {
                crate::http::check_url(location)?;
                if transports.http.is_none() {
                    transports.http = Some(source::Http {
                        headers: crate::http::header_map(&options.headers)?,
                        connect_timeout: options.connect_timeout,
                        client: dlrs_core::per_process::PerProcess::new(),
                    });
                }
                let shown = redact_url(location);
                let key = remote_key(location, &shown);
                (Place::Http(location.clone()), shown, key)
            }
            #[cfg(feature = "object-store")]
            Kind::Object => {
                let root = crate::object::StoreRef::root(location);
                let (store, path) = crate::object::StoreRef::open(
                    location,
                    &options.store_options,
                    options.fetch.timeout,
                )?;
                let at = match roots.iter().position(|r| *r == root) {
                    Some(at) => at,
                    None => {
                        roots.push(root);
                        transports.stores.push(store);
                        transports.stores.len() - 1
                    }
                };
                let shown = redact_url(location);
                let key = remote_key(location, &shown);
                (Place::Object { store: at, path }, shown, key)
            }
        };
        shards.push((place, shown, key));
    }
    Ok((transports, shards))
}

/// What kind of place a location names.
enum Kind {
    #[cfg(feature = "file")]
    File(PathBuf),
    #[cfg(feature = "http")]
    Http,
    #[cfg(feature = "object-store")]
    Object,
}

fn place_of(location: &str) -> Result<Kind, Error> {
    #[cfg(not(all(feature = "file", feature = "http", feature = "object-store")))]
    let missing = |what: &str, feature: &str| {
        Error::invalid(format!(
            "{what} shards need dlrs-io's {feature} feature: {}",
            redact_url(location)
        ))
    };
    let scheme = location
        .split_once("://")
        .map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        None | Some("file") => {
            #[cfg(feature = "file")]
            {
                let path = match scheme {
                    None => PathBuf::from(location),
                    Some(_) => url::Url::parse(location)
                        .ok()
                        .and_then(|u| u.to_file_path().ok())
                        .ok_or_else(|| {
                            Error::invalid(format!("invalid file URL {}", redact_url(location)))
                        })?,
                };
                Ok(Kind::File(path))
            }
            #[cfg(not(feature = "file"))]
            Err(missing("file", "`file`"))
        }
        Some("http" | "https") => {
            #[cfg(feature = "http")]
            return Ok(Kind::Http);
            #[cfg(not(feature = "http"))]
            Err(missing("http(s)", "`http`"))
        }
        Some(_) => {
            #[cfg(feature = "object-store")]
            return Ok(Kind::Object);
            #[cfg(not(feature = "object-store"))]
            Err(missing("object-store", "`object-store`"))
        }
    }
}

/// The version and members of one shard: its kept index if the shard is still what it was,
/// else a new index (kept if there is a directory for it).
async fn index_shard(
    transports: &Transports,
    place: &Place,
    shown: &str,
    key: &str,
    dir: Option<&std::path::Path>,
    stats: &IoStats,
) -> Result<(Version, Vec<Member>), Error> {
    let saved = match dir {
        Some(dir) => {
            let (dir, key) = (dir.to_owned(), key.to_owned());
            tokio::task::spawn_blocking(move || index::load(&dir, &key))
                .await
                .ok()
                .flatten()
        }
        None => None,
    };
    let version = transports.version(place, shown, stats).await?;
    // A kept index is used only if it fits the shard as it is now; else it is made again.
    if let Some((indexed, members)) = saved
        && indexed == version
        && parse::check_layout(&members, version.size).is_ok()
    {
        return Ok((version, members));
    }
    let members = transports.index(place, shown, &version, stats).await?;
    parse::check_layout(&members, version.size).map_err(|message| Error::InvalidData {
        location: shown.to_owned(),
        message,
    })?;
    if let Some(dir) = dir {
        let (dir, key) = (dir.to_owned(), key.to_owned());
        let (kept, found) = (version.clone(), members.clone());
        let _ = tokio::task::spawn_blocking(move || index::save(&dir, &key, &kept, &found)).await;
    }
    Ok((version, members))
}

impl Inner {
    fn sample(&self, index: u64) -> Result<&SampleRef, Error> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.samples.get(i))
            .ok_or(Error::IndexOutOfRange {
                index,
                len: self.samples.len() as u64,
            })
    }

    fn members_of(&self, sample: &SampleRef) -> &[MemberRef] {
        let first = sample.first as usize;
        &self.members[first..first + sample.count as usize]
    }

    /// The shard and byte ranges of item `index`: the member `member`, or the whole sample.
    fn ranges(&self, index: u64, member: Option<&str>) -> Result<(&Shard, Ranges), Error> {
        let sample = self.sample(index)?;
        let shard = &self.shards[sample.shard as usize];
        let members = self.members_of(sample);
        let too_large = |m: &MemberRef| Error::TooLarge {
            location: format!("{}: {}.{}", shard.shown, sample.key, m.ext),
            limit: self.max_bytes,
            size: Some(m.size),
        };
        match member {
            Some(ext) => {
                let Some(m) = members.iter().find(|m| &*m.ext == ext) else {
                    let has: Vec<&str> = members.iter().map(|m| &*m.ext).collect();
                    return Err(Error::InvalidData {
                        location: format!("{}: sample {}", shard.shown, sample.key),
                        message: format!(
                            "it has no member {ext:?} (its members: {})",
                            has.join(", ")
                        ),
                    });
                };
                if m.size > self.max_bytes {
                    return Err(too_large(m));
                }
                Ok((shard, Ranges::one((m.data, m.data.saturating_add(m.size)))))
            }
            None => {
                if let Some(m) = members.iter().find(|m| m.size > self.max_bytes) {
                    return Err(too_large(m));
                }
                let ranges = Ranges::of_sample(members);
                if ranges.total > self.max_bytes {
                    return Err(Error::TooLarge {
                        location: format!("{}: sample {}", shard.shown, sample.key),
                        limit: self.max_bytes,
                        size: Some(ranges.total),
                    });
                }
                Ok((shard, ranges))
            }
        }
    }

    async fn read(&self, shard: &Shard, range: (u64, u64)) -> Result<Bytes, Error> {
        self.transports
            .read(
                &shard.place,
                &shard.shown,
                &shard.version,
                range,
                &self.stats,
            )
            .await
    }

    /// Reads item `index`: one member's bytes, or the sample's fragment.
    async fn fetch(&self, index: u64) -> Result<Bytes, Error> {
        match self.member.as_deref() {
            Some(ext) => {
                let (shard, ranges) = self.ranges(index, Some(ext))?;
                self.read(shard, ranges.pieces[0]).await
            }
            None => self.read_sample(index).await,
        }
    }

    /// The fragment of sample `index`: its members' headers and data, read as the ranges of
    /// [`Ranges::of_sample`] and checked against the index.
    async fn read_sample(&self, index: u64) -> Result<Bytes, Error> {
        let sample = self.sample(index)?;
        let (shard, ranges) = self.ranges(index, None)?;
        let reads = ranges.pieces.iter().map(|&range| self.read(shard, range));
        let mut read = futures::future::try_join_all(reads).await?;
        let fragment = if read.len() == 1 {
            read.pop().unwrap_or_default()
        } else {
            let mut whole = bytes::BytesMut::with_capacity(read.iter().map(Bytes::len).sum());
            for piece in &read {
                whole.extend_from_slice(piece);
            }
            whole.freeze()
        };
        self.check_fragment(shard, sample, &ranges, &fragment)?;
        Ok(fragment)
    }

    /// Checks that a sample's bytes hold the members indexed (by extension, place and size):
    /// a shard rewritten under the same size and modification time gives other bytes.
    fn check_fragment(
        &self,
        shard: &Shard,
        sample: &SampleRef,
        ranges: &Ranges,
        fragment: &Bytes,
    ) -> Result<(), Error> {
        let changed = |what: String| Error::Changed {
            location: shard.shown.clone(),
            message: format!("the bytes of sample {} {what}", sample.key),
        };
        let found = parse::index_fragment(fragment)
            .map_err(|e| changed(format!("are not a tar fragment: {e}")))?;
        let found = found.iter().filter_map(|m| {
            let (key, ext) = split_name(&m.name)?;
            (key == &*sample.key).then_some((ext, m.data, m.size))
        });
        let indexed = self
            .members_of(sample)
            .iter()
            .map(|m| (m.ext.to_string(), ranges.offset_of(m.data), m.size));
        if found.eq(indexed) {
            Ok(())
        } else {
            Err(changed("are not the members indexed".into()))
        }
    }
}

/// Largest gap between two members of a sample read as part of one range rather than as two.
const MAX_GAP: u64 = 64 << 10;

/// The byte ranges of the shard an item is read from, in order, and their total length.
#[derive(Debug, PartialEq, Eq)]
struct Ranges {
    pieces: Vec<(u64, u64)>,
    total: u64,
}

impl Ranges {
    fn one(range: (u64, u64)) -> Ranges {
        Ranges {
            pieces: vec![range],
            total: range.1.saturating_sub(range.0),
        }
    }

    /// The ranges of a sample's members (of a checked index): each from its first header to
    /// the end of its data (padded to a block, but for the last), so that put one after the
    /// other they are a tar fragment. Members apart by at most [`MAX_GAP`] share a range; what
    /// lies between others is not read.
    fn of_sample(members: &[MemberRef]) -> Ranges {
        let mut pieces: Vec<(u64, u64)> = Vec::new();
        for (i, m) in members.iter().enumerate() {
            let end = m.data.saturating_add(m.size);
            let end = if i + 1 == members.len() {
                end
            } else {
                end.checked_next_multiple_of(parse::BLOCK)
                    .unwrap_or(u64::MAX)
            };
            match pieces.last_mut() {
                Some(last) if m.header.saturating_sub(last.1) <= MAX_GAP => last.1 = end,
                _ => pieces.push((m.header, end)),
            }
        }
        let total = pieces.iter().map(|(s, e)| e.saturating_sub(*s)).sum();
        Ranges { pieces, total }
    }

    /// Where the shard's byte `at` (inside a piece) is in the pieces put one after the other.
    fn offset_of(&self, at: u64) -> u64 {
        let mut before = 0;
        for &(start, end) in &self.pieces {
            if (start..=end).contains(&at) {
                return before + (at - start);
            }
            before += end.saturating_sub(start);
        }
        u64::MAX
    }
}

impl Dataset for TarDataset {
    fn len(&self) -> u64 {
        self.inner.samples.len() as u64
    }

    fn fetch(&self, index: u64) -> BoxFuture<'static, Result<Bytes, Error>> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.fetch(index).await })
    }

    fn io_stats(&self) -> Option<&IoStats> {
        Some(&self.inner.stats)
    }

    fn cache_key(&self, index: u64) -> Option<String> {
        let (shard, ranges) = self
            .inner
            .ranges(index, self.inner.member.as_deref())
            .ok()?;
        let (start, end) = (ranges.pieces.first()?.0, ranges.pieces.last()?.1);
        let v = &shard.version;
        // The shard's key names its whole location through a hash (shards that differ by
        // their query differ), and holds no query in clear.
        Some(format!(
            "tar\0{}\0{}\0{}\0{}\0{start}\0{end}",
            shard.key,
            v.size,
            v.etag.as_deref().unwrap_or(""),
            v.modified.as_deref().unwrap_or("")
        ))
    }
}

/// The future of [`TarDataset::open`] can be spawned.
#[allow(dead_code)]
fn open_is_send(locations: Vec<String>, options: TarOptions) -> impl Send {
    TarDataset::open(locations, options)
}

#[cfg(test)]
mod tests;
