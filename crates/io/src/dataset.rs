//! The `Dataset` trait that every Rust dataset implements, and what the datasets share.

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use futures::future::BoxFuture;

use crate::error::Error;
use crate::template::Template;

/// The default `max_bytes`: 64 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;

/// A dataset whose items are bytes fetched by futures.
///
/// The futures are `Send + 'static`, so they can be spawned on a runtime; a caller on a plain
/// thread drives many at once, for example
/// `runtime.block_on(futures::stream::iter(indices).map(|i| dataset.fetch(i)).buffered(k).collect::<Vec<_>>())`.
pub trait Dataset: Send + Sync + 'static {
    /// The number of items.
    fn len(&self) -> usize;

    /// Whether the dataset has no items.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fetches item `index`; [`Error::IndexOutOfRange`] when `index >= len()`.
    fn fetch(&self, index: u64) -> BoxFuture<'static, Result<Bytes, Error>>;
}

/// Fetches `indices` of `dataset` with up to `concurrency` (at least 1) in flight, each spawned
/// on the current tokio runtime (call it inside [`crate::Runtime::block_on`]); the results come
/// in the order of `indices`.
pub async fn fetch_many(
    dataset: &dyn Dataset,
    indices: &[u64],
    concurrency: usize,
) -> Vec<Result<Bytes, Error>> {
    futures::stream::iter(indices)
        .map(|&index| tokio::spawn(dataset.fetch(index)))
        .buffered(concurrency.max(1))
        .map(|joined| {
            joined.unwrap_or_else(|e| Err(Error::Runtime(format!("a fetch did not finish: {e}"))))
        })
        .collect()
        .await
}

/// Where the items are: a list given whole, or a template rendered item by item.
#[derive(Debug)]
pub(crate) enum Locations {
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
                    len: list.len(),
                }),
            Locations::Template(template) => template.render(index).map(Cow::Owned),
        }
    }
}

/// A body being read under a `max_bytes` limit.
pub(crate) struct Capped {
    buf: BytesMut,
    limit: u64,
}

impl Capped {
    /// A buffer for an item of `expected` bytes, if known (already checked against `limit`).
    pub(crate) fn new(limit: u64, expected: Option<u64>) -> Capped {
        let capacity = expected.unwrap_or(64 << 10).min(limit);
        Capped {
            buf: BytesMut::with_capacity(usize::try_from(capacity).unwrap_or(0)),
            limit,
        }
    }

    /// Appends `chunk`; `Err(())` once the total is over the limit.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<(), ()> {
        if (self.buf.len() as u64).saturating_add(chunk.len() as u64) > self.limit {
            return Err(());
        }
        self.buf.extend_from_slice(chunk);
        Ok(())
    }

    pub(crate) fn finish(self) -> Bytes {
        self.buf.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::Target;

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
        fn len(&self) -> usize {
            self.0
        }

        fn fetch(&self, index: u64) -> BoxFuture<'static, Result<Bytes, Error>> {
            let len = self.0;
            Box::pin(async move {
                if index as usize >= len {
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

    #[test]
    fn capped_reads() {
        let mut body = Capped::new(5, Some(5));
        assert_eq!(body.push(b"abc"), Ok(()));
        assert_eq!(body.push(b"de"), Ok(()));
        assert_eq!(body.push(b""), Ok(()));
        assert_eq!(body.push(b"f"), Err(()));
        assert_eq!(&body.finish()[..], b"abcde");
        let mut empty = Capped::new(0, None);
        assert_eq!(empty.push(b""), Ok(()));
        assert_eq!(empty.push(b"x"), Err(()));
    }
}
