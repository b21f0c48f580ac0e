//! The `Dataset` trait that every Rust dataset implements, and what the datasets share.

use std::borrow::Cow;
use std::time::Duration;

use bytes::Bytes;
#[cfg(any(feature = "http", feature = "object-store"))]
use bytes::BytesMut;
use futures::StreamExt;
use futures::future::BoxFuture;

use crate::error::Error;
use crate::pipeline::AbortOnDrop;
use crate::retry::RetryOptions;
use crate::stats::IoStats;
use crate::template::Template;

/// The default `max_bytes`: 64 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;

/// What every dataset's fetches obey, whatever the transport: the time an attempt may take, the
/// retries of transient failures, and the largest item. Each dataset starts from its defaults
/// ([`FetchOptions::HTTP`], [`FetchOptions::FILE`], [`FetchOptions::OBJECT_STORE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchOptions {
    /// The time one attempt may take, body included. `None`: no limit, except for an object
    /// store, which always has one (`None`: [`crate::DEFAULT_OBJECT_TIMEOUT`]). A file read over
    /// it is abandoned (it cannot be cancelled and finishes on the blocking pool).
    pub timeout: Option<Duration>,
    /// Retries of failed requests (all but a refused certificate or a redirect loop), timeouts
    /// and the statuses of `RETRY_STATUSES` (HTTP and object stores, honouring a Retry-After up
    /// to `max_backoff`), and of the I/O errors `TimedOut`, `Interrupted` and `WouldBlock`
    /// (files, and objects of a `file://` store).
    pub retry: RetryOptions,
    /// The largest item accepted.
    pub max_bytes: u64,
}

impl FetchOptions {
    /// An HTTP dataset's defaults: 30 s per attempt, 3 retries (0.1 s, at most 5 s), 64 MiB.
    pub const HTTP: FetchOptions = FetchOptions {
        timeout: Some(Duration::from_secs(30)),
        retry: RetryOptions::with_retries(3),
        max_bytes: DEFAULT_MAX_BYTES,
    };
    /// A file dataset's defaults: no time limit, no retries, 64 MiB.
    pub const FILE: FetchOptions = FetchOptions {
        timeout: None,
        retry: RetryOptions::with_retries(0),
        max_bytes: DEFAULT_MAX_BYTES,
    };
    /// An object-store dataset's defaults: 30 s per request, 3 retries (0.1 s, at most 5 s),
    /// 64 MiB.
    pub const OBJECT_STORE: FetchOptions = FetchOptions {
        timeout: None,
        retry: RetryOptions::with_retries(3),
        max_bytes: DEFAULT_MAX_BYTES,
    };
}

/// A dataset whose items are bytes fetched by futures.
///
/// The futures are `Send + 'static`, so they can be spawned; they must be polled inside a tokio
/// runtime with I/O and timers enabled (a [`crate::Runtime`]). A caller on a plain thread drives
/// many at once with [`fetch_many`], or for example
/// `runtime.block_on(futures::stream::iter(indices).map(|i| dataset.fetch(i)).buffered(k).collect::<Vec<_>>())`.
pub trait Dataset: Send + Sync + 'static {
    /// The number of items.
    fn len(&self) -> u64;

    /// Whether the dataset has no items.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fetches item `index`; [`Error::IndexOutOfRange`] when `index >= len()`.
    fn fetch(&self, index: u64) -> BoxFuture<'static, Result<Bytes, Error>>;

    /// The dataset's I/O counters, if it keeps some.
    fn io_stats(&self) -> Option<&IoStats> {
        None
    }

    /// What names item `index` in a local cache ([`crate::Cached`]): the same string for the
    /// same bytes, in every run and process. `None` (the default): the item is not cached.
    fn cache_key(&self, index: u64) -> Option<String> {
        let _ = index;
        None
    }
}

/// Fetches `indices` of `dataset` with up to `concurrency` (at least 1) in flight, each spawned
/// on the current tokio runtime (call it inside [`crate::Runtime::block_on`]); the results come
/// in the order of `indices`. Dropping the future aborts the fetches in flight.
pub async fn fetch_many(
    dataset: &dyn Dataset,
    indices: &[u64],
    concurrency: usize,
) -> Vec<Result<Bytes, Error>> {
    futures::stream::iter(indices)
        .map(|&index| AbortOnDrop(tokio::spawn(dataset.fetch(index))))
        .buffered(concurrency.max(1))
        .collect()
        .await
}

/// Where the items are: a list given whole, or a template rendered item by item.
#[derive(Debug)]
pub(crate) enum Locations {
    // The file dataset keeps its list as paths.
    #[cfg_attr(not(any(feature = "http", feature = "object-store")), allow(dead_code))]
    List(Vec<String>),
    Template(Template),
}

impl Locations {
    pub(crate) fn len(&self) -> usize {
        match self {
            Locations::List(list) => list.len(),
            Locations::Template(template) => template.len(),
        }
    }

    /// The location of item `index`.
    pub(crate) fn get(&self, index: u64) -> Result<Cow<'_, str>, Error> {
        match self {
            Locations::List(list) => usize::try_from(index)
                .ok()
                .and_then(|i| list.get(i))
                .map(|s| Cow::Borrowed(s.as_str()))
                .ok_or(Error::IndexOutOfRange {
                    index,
                    len: list.len() as u64,
                }),
            Locations::Template(template) => template.render(index).map(Cow::Owned),
        }
    }
}

/// The most a body's buffer reserves before its bytes arrive. A declared length is a claim:
/// past this, the buffer grows with what comes.
#[cfg(any(feature = "http", feature = "object-store", feature = "file"))]
pub(crate) const FIRST_RESERVE: u64 = 1 << 20;

/// A body being read under a `max_bytes` limit. A body that arrives in one chunk is kept as
/// it is (no copy); later chunks are gathered into one buffer.
#[cfg(any(feature = "http", feature = "object-store"))]
pub(crate) struct Capped {
    first: Option<Bytes>,
    gathered: Option<BytesMut>,
    len: u64,
    limit: u64,
    expected: Option<u64>,
}

#[cfg(any(feature = "http", feature = "object-store"))]
impl Capped {
    /// A body of `expected` bytes, if known (already checked against `limit`).
    pub(crate) fn new(limit: u64, expected: Option<u64>) -> Capped {
        Capped {
            first: None,
            gathered: None,
            len: 0,
            limit,
            expected,
        }
    }

    /// Appends `chunk`; `Err(())` once the total is over the limit.
    pub(crate) fn push(&mut self, chunk: Bytes) -> Result<(), ()> {
        let len = self.len.saturating_add(chunk.len() as u64);
        if len > self.limit {
            return Err(());
        }
        self.len = len;
        if chunk.is_empty() {
            return Ok(());
        }
        if let Some(gathered) = &mut self.gathered {
            gathered.extend_from_slice(&chunk);
        } else if let Some(first) = self.first.take() {
            // The declared length, but never more than has arrived plus a little.
            let capacity = self
                .expected
                .unwrap_or(len.saturating_mul(2))
                .min(self.limit)
                .min(FIRST_RESERVE)
                .max(len);
            let mut gathered = BytesMut::with_capacity(usize::try_from(capacity).unwrap_or(0));
            gathered.extend_from_slice(&first);
            gathered.extend_from_slice(&chunk);
            self.gathered = Some(gathered);
        } else {
            self.first = Some(chunk);
        }
        Ok(())
    }

    pub(crate) fn finish(self) -> Bytes {
        match (self.first, self.gathered) {
            (_, Some(gathered)) => gathered.freeze(),
            (Some(first), None) => first,
            (None, None) => Bytes::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::Target;

    #[test]
    fn fetch_defaults_per_dataset() {
        let secs = |s| Some(Duration::from_secs(s));
        let shape = |f: FetchOptions| (f.timeout, f.retry.retries, f.max_bytes);
        assert_eq!(shape(FetchOptions::HTTP), (secs(30), 3, 64 << 20));
        assert_eq!(shape(FetchOptions::FILE), (None, 0, 64 << 20));
        assert_eq!(shape(FetchOptions::OBJECT_STORE), (None, 3, 64 << 20));
        #[cfg(feature = "http")]
        assert_eq!(crate::HttpOptions::default().fetch, FetchOptions::HTTP);
        #[cfg(feature = "object-store")]
        assert_eq!(
            crate::ObjectStoreOptions::default().fetch,
            FetchOptions::OBJECT_STORE
        );
    }

    #[test]
    fn list_locations() {
        let list = Locations::List(vec!["a".into(), "b".into()]);
        assert_eq!(list.len(), 2);
        assert_eq!(list.get(1).unwrap(), "b");
        assert!(matches!(
            list.get(2),
            Err(Error::IndexOutOfRange { index: 2, len: 2 })
        ));
        let template =
            Locations::Template(Template::new("k{index}", vec![], Some(3), Target::Key).unwrap());
        assert_eq!(template.len(), 3);
        assert_eq!(template.get(2).unwrap(), "k2");
        assert!(matches!(
            template.get(3),
            Err(Error::IndexOutOfRange { index: 3, len: 3 })
        ));
    }

    struct Echo(usize);

    impl Dataset for Echo {
        fn len(&self) -> u64 {
            self.0 as u64
        }

        fn fetch(&self, index: u64) -> BoxFuture<'static, Result<Bytes, Error>> {
            let len = self.0 as u64;
            Box::pin(async move {
                if index >= len {
                    return Err(Error::IndexOutOfRange { index, len });
                }
                // Later items finish first: the results must still come in order.
                tokio::time::sleep(std::time::Duration::from_millis(10 - index % 10)).await;
                Ok(Bytes::from(index.to_string()))
            })
        }
    }

    #[test]
    fn fetch_many_keeps_the_order() {
        let runtime = crate::Runtime::new(Some(2)).unwrap();
        let dataset = Echo(30);
        let indices: Vec<u64> = (0..31).rev().collect();
        for concurrency in [0, 1, 7, 64] {
            let results = runtime
                .block_on(fetch_many(&dataset, &indices, concurrency))
                .unwrap();
            assert!(matches!(
                results[0],
                Err(Error::IndexOutOfRange { index: 30, len: 30 })
            ));
            let bodies: Vec<Bytes> = results.into_iter().skip(1).map(Result::unwrap).collect();
            let expected: Vec<Bytes> = (0..30u64)
                .rev()
                .map(|i| Bytes::from(i.to_string()))
                .collect();
            assert_eq!(bodies, expected, "concurrency {concurrency}");
        }
        assert!(
            runtime
                .block_on(fetch_many(&dataset, &[], 4))
                .unwrap()
                .is_empty()
        );
        assert!(!dataset.is_empty());
    }

    #[cfg(any(feature = "http", feature = "object-store"))]
    #[test]
    fn capped_reads() {
        let mut body = Capped::new(5, Some(5));
        assert_eq!(body.push(Bytes::from_static(b"abc")), Ok(()));
        assert_eq!(body.push(Bytes::from_static(b"de")), Ok(()));
        assert_eq!(body.push(Bytes::new()), Ok(()));
        assert_eq!(body.push(Bytes::from_static(b"f")), Err(()));
        assert_eq!(&body.finish()[..], b"abcde");
        let mut empty = Capped::new(0, None);
        assert_eq!(empty.push(Bytes::new()), Ok(()));
        assert_eq!(empty.push(Bytes::from_static(b"x")), Err(()));
        assert_eq!(empty.finish(), Bytes::new());
        // One chunk is kept as it is, without a copy.
        let chunk = Bytes::from(vec![9; 100]);
        let mut one = Capped::new(100, Some(100));
        one.push(chunk.clone()).unwrap();
        let body = one.finish();
        assert_eq!(body.as_ptr(), chunk.as_ptr());
        // Unknown size: chunks are gathered in order.
        let mut many = Capped::new(1000, None);
        for i in 0..10u8 {
            many.push(Bytes::from(vec![i; 7])).unwrap();
        }
        let body = many.finish();
        assert_eq!(body.len(), 70);
        assert!(
            body.chunks(7)
                .enumerate()
                .all(|(i, c)| c.iter().all(|&b| b as usize == i))
        );
    }

    /// A server may declare any length: the buffer reserves no more than has arrived and a
    /// little, and grows with the bytes.
    #[cfg(any(feature = "http", feature = "object-store"))]
    #[test]
    fn a_declared_length_is_not_reserved() {
        let declared = 16u64 << 40;
        let mut body = Capped::new(1 << 62, Some(declared));
        body.push(Bytes::from(vec![1; 1000])).unwrap();
        body.push(Bytes::from(vec![2; 1000])).unwrap();
        let reserved = body.gathered.as_ref().unwrap().capacity() as u64;
        assert!((2000..=FIRST_RESERVE).contains(&reserved), "{reserved}");
        // A small declared length is reserved whole, and the body grows past the reserve.
        let mut small = Capped::new(1 << 30, Some(3000));
        small.push(Bytes::from(vec![1; 1000])).unwrap();
        small.push(Bytes::from(vec![2; 1000])).unwrap();
        assert_eq!(small.gathered.as_ref().unwrap().capacity(), 3000);
        let mut big = Capped::new(1 << 30, Some(declared));
        for i in 0..3u8 {
            big.push(Bytes::from(vec![i; 1 << 20])).unwrap();
        }
        let body = big.finish();
        assert_eq!(body.len(), 3 << 20);
        assert_eq!((body[0], body[1 << 20], body[(3 << 20) - 1]), (0, 1, 2));
    }
}
