//! Where a shard's bytes come from (a file, an HTTP server, an object store), and the three
//! things done to it: find what it is now ([`Version`]), index it (one pass over its headers),
//! and read a byte range under the version it was indexed at.

#[cfg(feature = "file")]
use std::path::PathBuf;
#[cfg(feature = "object-store")]
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::index::Version;
use super::parse::{Indexer, Member, ParseError};
use crate::FetchOptions;
use crate::error::Error;
use crate::retry::{self, Failure};
use crate::stats::IoStats;

/// A shard's place.
#[derive(Debug, Clone)]
pub(crate) enum Place {
    /// A path.
    #[cfg(feature = "file")]
    File(PathBuf),
    /// An http(s) URL.
    #[cfg(feature = "http")]
    Http(String),
    /// An object of the `store`-th store.
    #[cfg(feature = "object-store")]
    Object {
        store: usize,
        path: object_store::path::Path,
    },
}

/// What the shards of one dataset are read with.
pub(crate) struct Transports {
    #[cfg(feature = "http")]
    pub http: Option<Http>,
    #[cfg(feature = "object-store")]
    pub stores: Vec<crate::object::StoreRef>,
    pub options: FetchOptions,
}

/// The HTTP client of a dataset's http(s) shards (built again in a forked child).
#[cfg(feature = "http")]
pub(crate) struct Http {
    pub headers: reqwest::header::HeaderMap,
    pub connect_timeout: Option<Duration>,
    pub client: dlrs_core::per_process::PerProcess<reqwest::Client>,
}

#[cfg(feature = "http")]
impl Http {
    fn client(&self) -> Result<&reqwest::Client, Error> {
        self.client
            .get_or_try_init(|| crate::http::build_client(self.connect_timeout))
    }
}

/// The error of a malformed or truncated archive at `location`.
pub(crate) fn parse_error(location: &str, error: &ParseError) -> Error {
    Error::InvalidData {
        location: location.to_owned(),
        message: error.to_string(),
    }
}

fn changed(location: &str, message: String) -> Failure {
    Failure::Fatal(Error::Changed {
        location: location.to_owned(),
        message,
    })
}

impl Transports {
    /// What the shard at `place` is now.
    // A file's metadata and headers are not counted as requests.
    #[cfg_attr(
        not(any(feature = "http", feature = "object-store")),
        allow(unused_variables)
    )]
    pub(crate) async fn version(
        &self,
        place: &Place,
        shown: &str,
        stats: &IoStats,
    ) -> Result<Version, Error> {
        match place {
            #[cfg(feature = "file")]
            Place::File(path) => {
                let path = path.clone();
                let shown = shown.to_owned();
                blocking(move || {
                    let meta = std::fs::metadata(&path).map_err(|e| Error::io(&shown, e))?;
                    Ok(file_version(&meta))
                })
                .await
            }
            #[cfg(feature = "http")]
            Place::Http(url) => self.http_version(url, shown, stats).await,
            #[cfg(feature = "object-store")]
            Place::Object { store, path } => self.object_version(*store, path, shown, stats).await,
        }
    }

    /// The members of the shard at `place`, which is `version`: one pass over the archive's
    /// headers (a file's data is sought over; a remote shard's is streamed and dropped).
    #[cfg_attr(
        not(any(feature = "http", feature = "object-store")),
        allow(unused_variables)
    )]
    pub(crate) async fn index(
        &self,
        place: &Place,
        shown: &str,
        version: &Version,
        stats: &IoStats,
    ) -> Result<Vec<Member>, Error> {
        match place {
            #[cfg(feature = "file")]
            Place::File(path) => {
                let (path, shown, version) = (path.clone(), shown.to_owned(), version.clone());
                blocking(move || index_file(&path, &shown, &version)).await
            }
            #[cfg(feature = "http")]
            Place::Http(url) => self.http_index(url, shown, version, stats).await,
            #[cfg(feature = "object-store")]
            Place::Object { store, path } => {
                self.object_index(*store, path, shown, version, stats).await
            }
        }
    }

    /// The bytes `start..end` of the shard at `place`, as it was at `version` (an error, and
    /// nothing read, if it is not that any more); with the dataset's retries and timeout.
    pub(crate) async fn read(
        &self,
        place: &Place,
        shown: &str,
        version: &Version,
        range: (u64, u64),
        stats: &IoStats,
    ) -> Result<Bytes, Error> {
        if range.0 == range.1 {
            return Ok(Bytes::new());
        }
        self.attempts(self.options.timeout, shown, stats, |n| async move {
            let body = self.read_once(place, shown, version, range, n).await?;
            stats.fetched(body.len());
            Ok(body)
        })
        .await
    }

    async fn read_once(
        &self,
        place: &Place,
        shown: &str,
        version: &Version,
        range: (u64, u64),
        attempt: u32,
    ) -> Result<Bytes, Failure> {
        let _ = attempt;
        match place {
            #[cfg(feature = "file")]
            Place::File(path) => {
                let (path, shown, version) = (path.clone(), shown.to_owned(), version.clone());
                let read =
                    tokio::task::spawn_blocking(move || read_file(&path, &shown, &version, range));
                match read.await {
                    Ok(result) => result,
                    Err(join) => Err(Failure::Fatal(Error::Runtime(format!(
                        "the file read did not finish: {join}"
                    )))),
                }
            }
            #[cfg(feature = "http")]
            Place::Http(url) => self.http_read(url, shown, version, range, attempt).await,
            #[cfg(feature = "object-store")]
            Place::Object { store, path } => {
                let store = self.stores[*store].store().map_err(Failure::Fatal)?;
                crate::object::observed(object_read(store, path, shown, version, range, attempt))
                    .await
            }
        }
    }

    /// Runs `attempt` under the dataset's retry policy, counting each attempt, and the request it
    /// makes while it runs, in `stats`.
    async fn attempts<T, F, Fut>(
        &self,
        timeout: Option<Duration>,
        shown: &str,
        stats: &IoStats,
        mut attempt: F,
    ) -> Result<T, Error>
    where
        F: FnMut(u32) -> Fut,
        Fut: std::future::Future<Output = Result<T, Failure>>,
    {
        retry::run(
            self.options.retry,
            timeout,
            || shown.to_owned(),
            |n| {
                stats.attempt(n);
                let run = attempt(n);
                async move {
                    let _request = stats.request();
                    run.await
                }
            },
        )
        .await
    }
}

/// Runs blocking file work on tokio's blocking pool.
#[cfg(feature = "file")]
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Runtime(format!("a file operation did not finish: {e}")))?
}

// ---------------------------------------------------------------------------------- files

/// A file's version: its size, device and inode, and modification time.
#[cfg(feature = "file")]
pub(crate) fn file_version(meta: &std::fs::Metadata) -> Version {
    #[cfg(unix)]
    let etag = {
        use std::os::unix::fs::MetadataExt;
        Some(format!("{:x}:{:x}", meta.dev(), meta.ino()))
    };
    #[cfg(not(unix))]
    let etag = None;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos().to_string());
    Version {
        size: meta.len(),
        etag,
        modified,
    }
}

#[cfg(feature = "file")]
fn index_file(
    path: &std::path::Path,
    shown: &str,
    version: &Version,
) -> Result<Vec<Member>, Error> {
    let io = |e| Error::io(shown, e);
    let file = std::fs::File::open(path).map_err(io)?;
    let check = |file: &std::fs::File| -> Result<(), Error> {
        let now = file_version(&file.metadata().map_err(io)?);
        match now.differs(version) {
            None => Ok(()),
            Some(message) => Err(Error::Changed {
                location: shown.to_owned(),
                message,
            }),
        }
    };
    check(&file)?;
    let mut indexer = Indexer::new().with_size(version.size);
    let mut buf = vec![0u8; 64 << 10];
    while !indexer.is_done() {
        let skip = indexer.skippable();
        if skip > 0 {
            indexer.skip(skip);
            continue;
        }
        let at = indexer.position();
        if at >= version.size {
            break;
        }
        let want = indexer.wanted().min(version.size - at);
        let mut done = 0u64;
        while done < want {
            let n = (want - done).min(buf.len() as u64) as usize;
            let got = read_at(&file, &mut buf[..n], at + done).map_err(io)?;
            if got == 0 {
                break;
            }
            indexer
                .feed(&buf[..got])
                .map_err(|e| parse_error(shown, &e))?;
            done += got as u64;
        }
        if done < want {
            break;
        }
    }
    check(&file)?;
    let members = indexer.finish().map_err(|e| parse_error(shown, &e))?;
    Ok(members)
}

/// Reads at most `buf.len()` bytes at `offset`; 0 at the end of the file.
#[cfg(feature = "file")]
fn read_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileExt;
        loop {
            match file.read_at(buf, offset) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::FileExt;
        file.seek_read(buf, offset)
    }
}

/// The bytes `start..end` of the file at `path`, in one positioned read, if the file is still
/// what it was when indexed (checked before and after the read).
#[cfg(feature = "file")]
fn read_file(
    path: &std::path::Path,
    shown: &str,
    version: &Version,
    (start, end): (u64, u64),
) -> Result<Bytes, Failure> {
    let io = |e: std::io::Error| {
        let transient = retry::is_transient_io(e.kind());
        Failure::new(Error::io(shown, e), transient)
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let check = |file: &std::fs::File| -> Result<(), Failure> {
        let now = file_version(&file.metadata().map_err(io)?);
        match now.differs(version) {
            None => Ok(()),
            Some(message) => Err(changed(shown, message)),
        }
    };
    check(&file)?;
    // The range is inside the file (a checked index, its size unchanged) and within
    // max_bytes; a failed allocation is still an error, not an abort.
    let len = usize::try_from(end.saturating_sub(start)).unwrap_or(usize::MAX);
    let mut body = Vec::new();
    body.try_reserve_exact(len).map_err(|_| {
        Failure::Fatal(Error::io(
            shown,
            std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!("cannot allocate {len} bytes for a read"),
            ),
        ))
    })?;
    body.resize(len, 0);
    let mut done = 0;
    while done < body.len() {
        let n = read_at(&file, &mut body[done..], start + done as u64).map_err(io)?;
        if n == 0 {
            return Err(Failure::Fatal(Error::InvalidData {
                location: shown.to_owned(),
                message: format!(
                    "the shard is truncated: it ends at byte {}",
                    start + done as u64
                ),
            }));
        }
        done += n;
    }
    check(&file)?;
    Ok(Bytes::from(body))
}

// ---------------------------------------------------------------------------------- HTTP

#[cfg(feature = "http")]
use reqwest::header::{self, HeaderMap, HeaderValue};

/// The preconditions that make a server refuse (412) to answer from another version: the
/// ETag if it is a strong one, else Last-Modified.
#[cfg(feature = "http")]
fn preconditions(version: &Version) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let strong = version.etag.as_deref().filter(|e| !e.starts_with("W/"));
    if let Some(value) = strong.and_then(|e| HeaderValue::from_str(e).ok()) {
        headers.insert(header::IF_MATCH, value);
    } else if let Some(value) = version
        .modified
        .as_deref()
        .and_then(|m| HeaderValue::from_str(m).ok())
    {
        headers.insert(header::IF_UNMODIFIED_SINCE, value);
    }
    headers
}

#[cfg(feature = "http")]
fn header_text(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// `(first, last, total)` of a `Content-Range: bytes first-last/total` (total `None` for `*`).
#[cfg(feature = "http")]
fn content_range(headers: &HeaderMap) -> Option<(u64, u64, Option<u64>)> {
    let value = headers.get(header::CONTENT_RANGE)?.to_str().ok()?;
    let spec = value.trim().strip_prefix("bytes ")?;
    let (range, total) = spec.split_once('/')?;
    let (first, last) = range.split_once('-')?;
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    Some((first.trim().parse().ok()?, last.trim().parse().ok()?, total))
}

/// The failure of an answer that is not 206: 412 and 416 mean another version; 200 a server
/// that ignores ranges; other statuses as every dataset treats them.
#[cfg(feature = "http")]
fn not_partial(response: &reqwest::Response, shown: &str, attempt: u32) -> Failure {
    let status = response.status().as_u16();
    match status {
        412 => changed(
            shown,
            "the server refused the request under the shard's indexed ETag or Last-Modified".into(),
        ),
        416 => changed(shown, "the range is past the shard's end".into()),
        200 => Failure::Fatal(Error::InvalidData {
            location: shown.to_owned(),
            message: "the server does not serve byte ranges (it answered a Range request \
                      with the whole shard)"
                .into(),
        }),
        _ => {
            let error = Error::Http {
                status,
                url: shown.to_owned(),
                attempts: attempt,
            };
            let wait = retry::retry_after(response.headers(), std::time::SystemTime::now());
            Failure::status(error, status, wait)
        }
    }
}

#[cfg(feature = "http")]
fn range_header(start: u64, end: u64) -> HeaderValue {
    HeaderValue::from_str(&format!("bytes={start}-{}", end - 1)).expect("an ASCII range")
}

#[cfg(feature = "http")]
impl Transports {
    fn http(&self) -> Result<&Http, Error> {
        self.http
            .as_ref()
            .ok_or_else(|| Error::Runtime("no HTTP client for an http(s) shard".into()))
    }

    /// The version from a request of the first byte: its Content-Range gives the size (and
    /// shows the server serves ranges), its ETag and Last-Modified the rest.
    async fn http_version(
        &self,
        url: &str,
        shown: &str,
        stats: &IoStats,
    ) -> Result<Version, Error> {
        let http = self.http()?;
        let client = http.client()?;
        self.attempts(self.options.timeout, shown, stats, |n| async move {
            let mut extra = HeaderMap::new();
            extra.insert(header::RANGE, range_header(0, 1));
            let response = crate::http::get(client, &http.headers, &extra, url).await?;
            if response.status().as_u16() != 206 {
                if response.status().as_u16() == 416 {
                    return Err(Failure::Fatal(Error::InvalidData {
                        location: shown.to_owned(),
                        message: "the shard is empty".into(),
                    }));
                }
                return Err(not_partial(&response, shown, n));
            }
            let headers = response.headers();
            let size = content_range(headers).and_then(|(_, _, total)| total);
            let Some(size) = size else {
                return Err(Failure::Fatal(Error::InvalidData {
                    location: shown.to_owned(),
                    message: "the server does not say the shard's size (no \
                                      Content-Range total)"
                        .into(),
                }));
            };
            Ok(Version {
                size,
                etag: header_text(headers, header::ETAG),
                modified: header_text(headers, header::LAST_MODIFIED),
            })
        })
        .await
    }

    /// Streams the shard under its version's preconditions until the end-of-archive block.
    /// The timeout bounds the wait for the answer and for each piece of the body.
    async fn http_index(
        &self,
        url: &str,
        shown: &str,
        version: &Version,
        stats: &IoStats,
    ) -> Result<Vec<Member>, Error> {
        let http = self.http()?;
        let client = http.client()?;
        let options = self.options;
        let within = |wait: Option<Duration>| wait.map_or(Duration::MAX, |w| w);
        self.attempts(None, shown, stats, |n| async move {
            let extra = preconditions(version);
            let get = crate::http::get(client, &http.headers, &extra, url);
            let response = tokio::time::timeout(within(options.timeout), get)
                .await
                .map_err(|_| Failure::TimedOut)??;
            if !response.status().is_success() {
                return Err(not_partial(&response, shown, n));
            }
            if let Some(length) = response.content_length()
                && length != version.size
            {
                return Err(changed(
                    shown,
                    format!("{length} bytes, indexed at {} bytes", version.size),
                ));
            }
            let chunks = futures::stream::unfold(response, |mut response| async move {
                let chunk = tokio::time::timeout(within(options.timeout), response.chunk())
                    .await
                    .map_err(|_| Failure::TimedOut)
                    .and_then(|c| c.map_err(|e| crate::http::failure(e, url)));
                chunk.transpose().map(|c| (c, response))
            });
            index_chunks(chunks, shown, version, stats).await
        })
        .await
    }

    async fn http_read(
        &self,
        url: &str,
        shown: &str,
        version: &Version,
        (start, end): (u64, u64),
        attempt: u32,
    ) -> Result<Bytes, Failure> {
        let http = self.http().map_err(Failure::Fatal)?;
        let client = http.client().map_err(Failure::Fatal)?;
        let mut extra = preconditions(version);
        extra.insert(header::RANGE, range_header(start, end));
        let mut response = crate::http::get(client, &http.headers, &extra, url).await?;
        if response.status().as_u16() != 206 {
            return Err(not_partial(&response, shown, attempt));
        }
        let headers = response.headers();
        match content_range(headers) {
            Some((first, last, total)) if first == start && last + 1 == end => {
                if let Some(total) = total.filter(|&t| t != version.size) {
                    return Err(changed(
                        shown,
                        format!("{total} bytes, indexed at {} bytes", version.size),
                    ));
                }
            }
            _ => {
                return Err(Failure::Fatal(Error::InvalidData {
                    location: shown.to_owned(),
                    message: format!(
                        "the server answered another range than bytes {start}-{}",
                        end - 1
                    ),
                }));
            }
        }
        // A server that ignores the preconditions still says what it served.
        for (name, indexed) in [
            (header::ETAG, &version.etag),
            (header::LAST_MODIFIED, &version.modified),
        ] {
            if let (Some(now), Some(indexed)) = (header_text(headers, name.clone()), indexed)
                && now != *indexed
            {
                return Err(changed(
                    shown,
                    format!("{name} {now}, indexed with {indexed}"),
                ));
            }
        }
        let len = end - start;
        let mut body = crate::dataset::Capped::new(len, Some(len));
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| crate::http::failure(e, url))?
        {
            body.push(chunk)
                .map_err(|()| more_than_asked(shown, "server", len))?;
        }
        whole_range(body.finish(), shown, len)
    }
}

/// Indexes a shard from its chunks as they arrive, reading no further than its last header.
#[cfg(any(feature = "http", feature = "object-store"))]
async fn index_chunks(
    chunks: impl futures::Stream<Item = Result<Bytes, Failure>>,
    shown: &str,
    version: &Version,
    stats: &IoStats,
) -> Result<Vec<Member>, Failure> {
    use futures::StreamExt;
    let mut chunks = std::pin::pin!(chunks);
    let mut indexer = Indexer::new().with_size(version.size);
    let mut seen = 0u64;
    while !indexer.is_done() {
        let Some(chunk) = chunks.next().await else {
            break;
        };
        let chunk = chunk?;
        seen += chunk.len() as u64;
        indexer
            .feed(&chunk)
            .map_err(|e| Failure::Fatal(parse_error(shown, &e)))?;
    }
    stats.fetched(usize::try_from(seen).unwrap_or(usize::MAX));
    indexer
        .finish()
        .map_err(|e| Failure::Fatal(parse_error(shown, &e)))
}

/// A range read's answer that goes past the range: the `sender` does not honour ranges.
#[cfg(any(feature = "http", feature = "object-store"))]
fn more_than_asked(shown: &str, sender: &str, len: u64) -> Failure {
    Failure::Fatal(Error::InvalidData {
        location: shown.to_owned(),
        message: format!("the {sender} sent more than the {len} bytes asked for"),
    })
}

/// `body` if it is the whole range of `len` bytes; a shorter one is a truncated answer.
#[cfg(any(feature = "http", feature = "object-store"))]
fn whole_range(body: Bytes, shown: &str, len: u64) -> Result<Bytes, Failure> {
    if body.len() as u64 != len {
        return Err(Failure::transient(Error::Request {
            location: shown.to_owned(),
            kind: crate::RequestKind::Truncated,
            message: format!("{} of {len} bytes arrived", body.len()),
        }));
    }
    Ok(body)
}

// ---------------------------------------------------------------------------- object stores

#[cfg(feature = "object-store")]
use object_store::{GetOptions, GetRange, ObjectStore};

#[cfg(feature = "object-store")]
fn object_version(meta: &object_store::ObjectMeta) -> Version {
    Version {
        size: meta.size,
        etag: meta.e_tag.clone(),
        modified: Some(meta.last_modified.to_rfc3339()),
    }
}

#[cfg(feature = "object-store")]
fn object_options(version: &Version, range: Option<(u64, u64)>) -> GetOptions {
    GetOptions {
        if_match: version.etag.clone(),
        range: range.map(|(start, end)| GetRange::Bounded(start..end)),
        ..GetOptions::default()
    }
}

/// An object store's refusal of a precondition is another version.
#[cfg(feature = "object-store")]
fn store_error(error: object_store::Error, shown: &str, attempt: u32) -> Failure {
    match error {
        object_store::Error::Precondition { .. } => changed(
            shown,
            "the store refused the request under the shard's indexed ETag".into(),
        ),
        other => crate::object::classify(other, shown, attempt),
    }
}

#[cfg(feature = "object-store")]
async fn object_read(
    store: &Arc<dyn ObjectStore>,
    path: &object_store::path::Path,
    shown: &str,
    version: &Version,
    (start, end): (u64, u64),
    attempt: u32,
) -> Result<Bytes, Failure> {
    use futures::StreamExt;
    let result = store
        .get_opts(path, object_options(version, Some((start, end))))
        .await
        .map_err(|e| store_error(e, shown, attempt))?;
    let now = object_version(&result.meta);
    if let Some(message) = now.differs(version) {
        return Err(changed(shown, message));
    }
    let len = end - start;
    let mut body = crate::dataset::Capped::new(len, Some(len));
    let mut stream = result.into_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| store_error(e, shown, attempt))?;
        body.push(chunk)
            .map_err(|()| more_than_asked(shown, "store", len))?;
    }
    whole_range(body.finish(), shown, len)
}

#[cfg(feature = "object-store")]
impl Transports {
    async fn object_version(
        &self,
        store: usize,
        path: &object_store::path::Path,
        shown: &str,
        stats: &IoStats,
    ) -> Result<Version, Error> {
        let store = self.stores[store].store()?;
        self.attempts(None, shown, stats, |n| {
            crate::object::observed(async move {
                let head = GetOptions {
                    head: true,
                    ..GetOptions::default()
                };
                let result = store
                    .get_opts(path, head)
                    .await
                    .map_err(|e| store_error(e, shown, n))?;
                Ok(object_version(&result.meta))
            })
        })
        .await
    }

    async fn object_index(
        &self,
        store: usize,
        path: &object_store::path::Path,
        shown: &str,
        version: &Version,
        stats: &IoStats,
    ) -> Result<Vec<Member>, Error> {
        use futures::StreamExt;
        let store = self.stores[store].store()?;
        self.attempts(None, shown, stats, |n| {
            crate::object::observed(async move {
                let result = store
                    .get_opts(path, object_options(version, None))
                    .await
                    .map_err(|e| store_error(e, shown, n))?;
                if let Some(message) = object_version(&result.meta).differs(version) {
                    return Err(changed(shown, message));
                }
                let chunks = result
                    .into_stream()
                    .map(|c| c.map_err(|e| store_error(e, shown, n)));
                index_chunks(chunks, shown, version, stats).await
            })
        })
        .await
    }
}

// ------------------------------------------------------------------------- whole shards

/// A shard's bytes from its first to its last, as they arrive (a [`super::TarStream`]'s read).
pub(crate) type Body = futures::stream::BoxStream<'static, Result<Bytes, Error>>;

/// The bytes of one read of a file shard.
#[cfg(feature = "file")]
const FILE_CHUNK: usize = 256 << 10;

/// The error of a failure in the middle of a body: there is no other attempt, the bytes before
/// it were handed on.
#[cfg(any(feature = "http", feature = "object-store"))]
fn failed(failure: Failure, shown: &str) -> Error {
    match failure {
        Failure::Transient { error, .. } | Failure::Fatal(error) => error,
        Failure::TimedOut => Error::Timeout {
            location: shown.to_owned(),
            attempts: 1,
        },
    }
}

impl Transports {
    /// The whole shard at `place`, front to back, and its size when known (a file's, an
    /// answer's Content-Length): reads of a file in order, one GET without `Range`, one GET of
    /// an object. The request is retried as every request is; once bytes have arrived, a
    /// failure is an error (without ranges, nothing can go on from the middle).
    #[cfg_attr(
        not(any(feature = "http", feature = "object-store")),
        allow(unused_variables)
    )]
    pub(crate) async fn whole(
        &self,
        place: &Place,
        shown: &str,
        stats: &IoStats,
    ) -> Result<(Option<u64>, Body), Error> {
        use futures::StreamExt;
        match place {
            #[cfg(feature = "file")]
            Place::File(path) => {
                let (path, owned) = (path.clone(), shown.to_owned());
                let (file, size) = blocking(move || open_regular(&path, &owned)).await?;
                let opened = file.metadata().ok().and_then(|m| m.modified().ok());
                let file = std::sync::Arc::new(file);
                let shown = shown.to_owned();
                let body = futures::stream::try_unfold(0u64, move |at| {
                    let (file, shown) = (file.clone(), shown.clone());
                    async move {
                        let chunk = blocking(move || {
                            let mut buf = vec![0u8; FILE_CHUNK];
                            let n =
                                read_at(&file, &mut buf, at).map_err(|e| Error::io(&shown, e))?;
                            buf.truncate(n);
                            unchanged_since_opened(&file, &shown, (size, opened), at, n)?;
                            Ok(buf)
                        })
                        .await?;
                        if chunk.is_empty() {
                            return Ok(None);
                        }
                        let next = at + chunk.len() as u64;
                        Ok(Some((Bytes::from(chunk), next)))
                    }
                });
                Ok((Some(size), body.boxed()))
            }
            #[cfg(feature = "http")]
            Place::Http(url) => self.http_whole(url, shown, stats).await,
            #[cfg(feature = "object-store")]
            Place::Object { store, path } => {
                let store = self.stores[*store].store()?;
                let result = self
                    .attempts(self.options.timeout, shown, stats, |n| {
                        crate::object::observed(async move {
                            store
                                .get_opts(path, GetOptions::default())
                                .await
                                .map_err(|e| store_error(e, shown, n))
                        })
                    })
                    .await?;
                let size = result.meta.size;
                let shown = shown.to_owned();
                let body = result
                    .into_stream()
                    .map(move |c| c.map_err(|e| failed(store_error(e, &shown, 1), &shown)));
                Ok((Some(size), body.boxed()))
            }
        }
    }
}

/// Opens a file shard to read it whole: links are followed (as for a map-style shard), but
/// only a regular file is read (the open does not wait for a FIFO's writer).
/// After each read of a file read front to back (`n` bytes at `at`): its size and modification
/// time are still those it was opened with, and at its end all of it was read. Otherwise the
/// bytes handed on may mix two versions of the file.
#[cfg(feature = "file")]
fn unchanged_since_opened(
    file: &std::fs::File,
    shown: &str,
    (size, modified): (u64, Option<std::time::SystemTime>),
    at: u64,
    n: usize,
) -> Result<(), Error> {
    let now = file.metadata().map_err(|e| Error::io(shown, e))?;
    let ended_early = n == 0 && at != size;
    let what = if now.len() != size || ended_early {
        format!("{size} bytes when opened, {} now", now.len())
    } else if now.modified().ok() != modified {
        "modified since it was opened".to_owned()
    } else {
        return Ok(());
    };
    Err(Error::InvalidData {
        location: shown.to_owned(),
        message: format!("the file changed while it was read ({what})"),
    })
}

#[cfg(feature = "file")]
fn open_regular(path: &std::path::Path, shown: &str) -> Result<(std::fs::File, u64), Error> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(|e| Error::io(shown, e))?;
    let meta = file.metadata().map_err(|e| Error::io(shown, e))?;
    if !meta.is_file() {
        return Err(Error::InvalidData {
            location: shown.to_owned(),
            message: "not a regular file (a directory, a FIFO or a device)".into(),
        });
    }
    Ok((file, meta.len()))
}

#[cfg(feature = "http")]
impl Transports {
    /// One GET without `Range`; the timeout bounds the wait for the answer and for each piece
    /// of the body.
    async fn http_whole(
        &self,
        url: &str,
        shown: &str,
        stats: &IoStats,
    ) -> Result<(Option<u64>, Body), Error> {
        use futures::StreamExt;
        let http = self.http()?;
        let client = http.client()?;
        let timeout = self.options.timeout;
        let response = self
            .attempts(timeout, shown, stats, |n| async move {
                let response =
                    crate::http::get(client, &http.headers, &HeaderMap::new(), url).await?;
                let status = response.status().as_u16();
                if !response.status().is_success() {
                    let error = Error::Http {
                        status,
                        url: shown.to_owned(),
                        attempts: n,
                    };
                    let wait = retry::retry_after(response.headers(), std::time::SystemTime::now());
                    return Err(Failure::status(error, status, wait));
                }
                Ok(response)
            })
            .await?;
        let size = response.content_length();
        let (url, shown) = (url.to_owned(), shown.to_owned());
        let within = timeout.unwrap_or(Duration::MAX);
        let body = futures::stream::unfold(Some(response), move |response| {
            let (url, shown) = (url.clone(), shown.clone());
            async move {
                let mut response = response?;
                let chunk = tokio::time::timeout(within, response.chunk())
                    .await
                    .map_err(|_| Failure::TimedOut)
                    .and_then(|c| c.map_err(|e| crate::http::failure(e, &url)))
                    .map_err(|f| failed(f, &shown));
                match chunk {
                    Ok(Some(chunk)) => Some((Ok(chunk), Some(response))),
                    Ok(None) => None,
                    // Nothing after an error.
                    Err(e) => Some((Err(e), None)),
                }
            }
        });
        Ok((size, body.boxed()))
    }
}
