//! `StreamPipeline`: the stream's order for any number of workers, short and failed batches,
//! epochs read again, abandoned epochs, and tar shards read through `TarItems`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dlrs_core::{Config, Loader, Order};

use super::*;

/// Items `"{epoch}.{i}"` for `i < len`, each after a pause that varies (a read out of turn
/// shows as items out of order); item `fail` is an error, and epoch `stuck` never gives one.
#[derive(Default)]
struct Counting {
    len: u64,
    fail: Option<u64>,
    stuck: Option<u64>,
}

impl ItemStream for Counting {
    fn items(&self, epoch: u64) -> BoxStream<'static, Result<Bytes, Error>> {
        if Some(epoch) == self.stuck {
            return futures::stream::pending().boxed();
        }
        let fail = self.fail;
        futures::stream::iter(0..self.len)
            .then(move |i| async move {
                tokio::time::sleep(Duration::from_micros(i * 37 % 400)).await;
                if Some(i) == fail {
                    return Err(Error::InvalidData {
                        location: format!("item {i}"),
                        message: "broken".to_owned(),
                    });
                }
                Ok(Bytes::from(format!("{epoch}.{i}")))
            })
            .boxed()
    }
}

/// Items as text, each batch as its `(index, text)` pairs; a failed item is left out while
/// fewer than `skips` were.
#[derive(Default)]
struct Tags {
    skips: usize,
    skipped: AtomicUsize,
}

impl Stages for Tags {
    type Item = String;
    type Batch = Vec<(u64, String)>;
    type Error = String;

    fn transform(&self, at: &ItemAt, bytes: Bytes) -> Result<String, String> {
        // Transforms that take different times: the workers finish out of order.
        std::thread::sleep(Duration::from_micros(at.index * 53 % 700));
        String::from_utf8(bytes.to_vec()).map_err(|e| e.to_string())
    }

    fn io_error(&self, at: Option<&ItemAt>, error: Error) -> String {
        match at {
            Some(at) => format!("item {}: {error}", at.index),
            None => error.to_string(),
        }
    }

    fn skip(&self, _: &ItemAt, error: String) -> Result<(), String> {
        if self.skipped.fetch_add(1, Ordering::SeqCst) < self.skips {
            Ok(())
        } else {
            Err(error)
        }
    }

    fn collate(&self, items: Vec<String>, indices: &[u64]) -> Result<Self::Batch, String> {
        Ok(indices.iter().copied().zip(items).collect())
    }
}

fn loader_of<S: Source>(source: S, batch_size: usize, num_workers: usize) -> Loader<S> {
    let config = Config {
        batch_size,
        num_workers,
        ..Config::default()
    };
    Loader::new(source, config).unwrap()
}

fn pipeline<I: ItemStream>(items: I, stages: Tags) -> StreamPipeline<Tags> {
    StreamPipeline::new(items, stages).runtime(Arc::new(Runtime::new(Some(1)).unwrap()))
}

type Outcome = Result<Vec<(u64, String)>, String>;

/// Epoch `number` of `len` items: each batch, or its error's message.
fn epoch<S: Source<Batch = Vec<(u64, String)>, Error = String>>(
    loader: &Loader<S>,
    len: u64,
    number: u64,
) -> Vec<Outcome> {
    loader
        .epoch_numbered(Order::Sequential { len }, 0, number)
        .map(|batch| {
            batch.map_err(|e| match e {
                LoadError::Source(e) => e,
                other => format!("{other:?}"),
            })
        })
        .collect()
}

/// The texts of `batches`, all of them ok, in order.
fn texts(batches: &[Outcome]) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| b.as_ref().unwrap().iter().map(|(_, t)| t.clone()))
        .collect()
}

#[test]
fn batches_keep_the_streams_order_whatever_the_workers() {
    for workers in [0, 1, 3] {
        let counting = Counting {
            len: 30,
            ..Counting::default()
        };
        let loader = loader_of(pipeline(counting, Tags::default()), 4, workers);
        // A few epochs: a read out of turn shows in most of them, not in every one.
        for number in 0..3 {
            let batches = epoch(&loader, 30, number);
            let sizes: Vec<usize> = batches.iter().map(|b| b.as_ref().unwrap().len()).collect();
            assert_eq!(sizes, [4, 4, 4, 4, 4, 4, 4, 2], "{workers} workers");
            let want: Vec<String> = (0..30).map(|i| format!("{number}.{i}")).collect();
            assert_eq!(texts(&batches), want, "{workers} workers");
            let indices: Vec<u64> = batches
                .iter()
                .flat_map(|b| b.as_ref().unwrap().iter().map(|(i, _)| *i))
                .collect();
            assert_eq!(indices, (0..30).collect::<Vec<_>>());
        }
    }
}

#[test]
fn a_resumed_epoch_goes_on_with_the_batches_an_uninterrupted_one_gives() {
    for workers in [0, 1, 3] {
        let counting = Counting {
            len: 30,
            fail: Some(2),
            ..Counting::default()
        };
        let loader = loader_of(pipeline(counting, Tags::default()), 4, workers);
        let whole = epoch(&loader, 30, 5);
        for start in [1, 3, 7] {
            let resumed: Vec<Outcome> = loader
                .epoch_numbered(Order::Sequential { len: 30 }, start, 5)
                .map(|b| b.map_err(|e| format!("{e:?}")))
                .collect();
            // The failed item was in batch 0: passed over with it.
            assert_eq!(
                resumed,
                whole[start as usize..],
                "{workers} workers, from {start}"
            );
        }
        let after = epoch(&loader, 30, 6);
        let want: Vec<String> = (4..30).map(|i| format!("6.{i}")).collect();
        assert_eq!(texts(&after[1..]), want, "a whole epoch after resumed ones");
    }
}

#[test]
fn a_stream_that_ends_early_gives_a_short_batch_then_errors() {
    let counting = Counting {
        len: 10,
        ..Counting::default()
    };
    let loader = loader_of(pipeline(counting, Tags::default()), 4, 2);
    let batches = epoch(&loader, 16, 0);
    assert_eq!(batches.len(), 4);
    assert_eq!(texts(&batches[..3]).len(), 10);
    assert_eq!(batches[2].as_ref().unwrap().len(), 2);
    assert_eq!(
        batches[3],
        Err("the stream: it ended after 10 items, before batch 3".to_owned())
    );
    // The next epoch reads again.
    let again = epoch(&loader, 10, 1);
    let want: Vec<String> = (0..10).map(|i| format!("1.{i}")).collect();
    assert_eq!(texts(&again), want);
}

#[test]
fn a_failed_item_fails_its_batch_or_is_skipped_as_the_stages_decide() {
    let counting = || Counting {
        len: 8,
        fail: Some(5),
        ..Counting::default()
    };
    let loader_failing = loader_of(pipeline(counting(), Tags::default()), 4, 2);
    let batches = epoch(&loader_failing, 8, 0);
    assert_eq!(batches.len(), 2);
    assert_eq!(batches[0].as_ref().unwrap().len(), 4);
    assert_eq!(batches[1], Err("item 5: item 5: broken".to_owned()));

    let skipping = Tags {
        skips: 1,
        ..Tags::default()
    };
    let loader_skipping = loader_of(pipeline(counting(), skipping), 4, 2);
    let batches = epoch(&loader_skipping, 8, 0);
    let second: Vec<u64> = batches[1]
        .as_ref()
        .unwrap()
        .iter()
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(second, [4, 6, 7], "the failed item's place is left out");
}

#[test]
fn an_abandoned_epoch_does_not_hold_up_the_next() {
    let counting = Counting {
        len: 12,
        stuck: Some(0),
        ..Counting::default()
    };
    let loader = Arc::new(loader_of(pipeline(counting, Tags::default()), 4, 2));
    let (tx, rx) = std::sync::mpsc::channel();
    let inner = Arc::clone(&loader);
    std::thread::spawn(move || {
        let stuck = inner.epoch_numbered(Order::Sequential { len: 12 }, 0, 0);
        // One worker reads the stream that never gives an item; the other waits for its turn.
        std::thread::sleep(Duration::from_millis(20));
        drop(stuck);
        let _ = tx.send(epoch(&inner, 12, 1));
    });
    // A bound on a hang, not a timing: the next epoch fails the test instead of hanging it.
    let batches = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the next epoch finished");
    let want: Vec<String> = (0..12).map(|i| format!("1.{i}")).collect();
    assert_eq!(texts(&batches), want);
}

#[cfg(feature = "file")]
mod tar_shards {
    use super::*;
    use crate::test_util::TempDir;
    use crate::{TarOptions, TarStream};

    /// A tar of one `txt` member per key, whose text is the key.
    fn shard(keys: &[String]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for key in keys {
            let mut header = tar::Header::new_ustar();
            header.set_size(key.len() as u64);
            header.set_mode(0o644);
            builder
                .append_data(&mut header, format!("{key}.txt"), key.as_bytes())
                .unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn keys(shard: usize, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("s{shard}-{i}")).collect()
    }

    /// `n` shards of 3 samples each, in `dir`.
    fn shards(dir: &TempDir, n: usize) -> Vec<String> {
        (0..n)
            .map(|s| {
                let path = dir.join(format!("{s}.tar"));
                std::fs::write(&path, shard(&keys(s, 3))).unwrap();
                path.display().to_string()
            })
            .collect()
    }

    fn stream(locations: Vec<String>) -> TarStream {
        let options = TarOptions {
            member: Some("txt".to_owned()),
            ..TarOptions::default()
        };
        TarStream::new(locations, options).unwrap()
    }

    #[test]
    fn a_stream_needs_a_member() {
        let bare = TarStream::new(vec!["/x/0.tar".to_owned()], TarOptions::default()).unwrap();
        assert!(matches!(
            TarItems::new(bare, None),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn every_epoch_reads_the_shards_again_in_order_or_shuffled() {
        let dir = TempDir::new();
        let stream = stream(shards(&dir, 5));
        let in_order: Vec<String> = (0..5).flat_map(|s| keys(s, 3)).collect();
        let items = TarItems::new(stream.clone(), None).unwrap();
        let ordered = loader_of(pipeline(items, Tags::default()), 4, 3);
        for number in [0, 1] {
            assert_eq!(texts(&epoch(&ordered, 15, number)), in_order);
        }

        let items = TarItems::new(stream.clone(), Some(9)).unwrap();
        let shuffled = loader_of(pipeline(items, Tags::default()), 4, 3);
        for number in [0, 1] {
            let read = texts(&epoch(&shuffled, 15, number));
            let want: Vec<String> = stream
                .shards_of(Some(9), number, 0, 1)
                .into_iter()
                .flat_map(|s| keys(s, 3))
                .collect();
            assert_eq!(read, want, "epoch {number}: the seed's order of shards");
            let mut sorted = read.clone();
            sorted.sort();
            assert_eq!(sorted, in_order, "a permutation of the samples");
        }
    }

    #[test]
    fn a_truncated_shards_error_reaches_its_batch_or_is_skipped() {
        let dir = TempDir::new();
        let mut locations = shards(&dir, 2);
        // Shard 0 cut inside its last sample's data: the sample before, still gathering
        // members when its shard fails, goes with the shard's error; then shard 1 is read.
        let whole = shard(&keys(0, 3));
        std::fs::write(&locations[0], &whole[..2 * 1024 + 512 + 2]).unwrap();
        locations.truncate(2);
        let reads = || TarItems::new(stream(locations.clone()), None).unwrap();

        let loader_failing = loader_of(pipeline(reads(), Tags::default()), 3, 2);
        let batches = epoch(&loader_failing, 5, 0);
        let first = batches[0].as_ref().unwrap_err();
        assert!(first.starts_with("item 1: "), "{first}");
        assert!(
            first.contains("0.tar") && first.contains("truncated"),
            "{first}"
        );
        assert_eq!(texts(&batches[1..]), ["s1-1", "s1-2"]);

        let skipping = Tags {
            skips: 1,
            ..Tags::default()
        };
        let loader_skipping = loader_of(pipeline(reads(), skipping), 3, 2);
        let batches = epoch(&loader_skipping, 5, 0);
        assert_eq!(
            batches[0].as_ref().unwrap(),
            &[(0, "s0-0".to_owned()), (2, "s1-0".to_owned())]
        );
        assert_eq!(texts(&batches[1..]), ["s1-1", "s1-2"]);
    }
}
