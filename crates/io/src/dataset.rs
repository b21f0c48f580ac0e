//! The `Dataset` trait that every Rust dataset implements, and what the datasets share.

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
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
