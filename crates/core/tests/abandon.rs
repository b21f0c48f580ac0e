//! `abandon_live_epochs` (a process that exits): a test binary of its own, since it abandons
//! every epoch of the process, those of other tests included.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dlrs_core::source::abandon_live_epochs;
use dlrs_core::{BatchCtx, Config, LoadError, Loader, Order, Recv, Source};

/// Batch `b` is its indices; counts the batches loaded.
#[derive(Default)]
struct Counted {
    loads: AtomicU64,
}

impl Source for Counted {
    type Batch = Vec<u64>;
    type Error = String;

    fn load_batch(&self, indices: &[u64], _: &BatchCtx) -> Result<Vec<u64>, LoadError<String>> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(1));
        Ok(indices.to_vec())
    }
}

fn next<S: Source>(epoch: &dlrs_core::Epoch<S>) -> Recv<S::Batch, S::Error> {
    loop {
        match epoch.recv(Some(Duration::from_secs(10))) {
            Recv::Pending => {}
            other => return other,
        }
    }
}

#[test]
fn live_epochs_stop_and_fail_their_unloaded_batches_later_epochs_run() {
    // Batches of one item, two batches prefetched: the defaults.
    let config = Config {
        num_workers: 2,
        ..Config::default()
    };
    let loader = Loader::new(Counted::default(), config).unwrap();
    let live = loader.epoch(Order::Sequential { len: 100_000 });
    assert!(matches!(next(&live), Recv::Batch(Ok(b)) if b == [0]));
    abandon_live_epochs();
    // Every batch is handed out at once, failed, instead of being waited for; the workers
    // stopped claiming (at most the ring's batches were loaded).
    let mut failed = 0;
    loop {
        match next(&live) {
            Recv::Batch(Ok(_)) => {}
            Recv::Batch(Err(LoadError::Cancelled)) => failed += 1,
            Recv::Finished => break,
            other => panic!("{other:?}"),
        }
    }
    assert!(failed > 99_000, "{failed}");
    assert!(
        loader.source().loads.load(Ordering::SeqCst) < 100,
        "the workers went on"
    );
    // An epoch started afterwards is not abandoned.
    let later = loader.epoch(Order::Sequential { len: 10 });
    let mut got = Vec::new();
    while let Recv::Batch(b) = next(&later) {
        got.extend(b.unwrap());
    }
    assert_eq!(got, (0..10).collect::<Vec<_>>());
}
