//! What a batch learns of where it loads: its worker and its epoch's number.

use std::collections::BTreeSet;

use dlrs_core::{BatchCtx, Config, LoadError, Loader, Order, Recv, Source};

/// A batch is `(worker, epoch number)` as its context tells them.
struct WhereAmI;

impl Source for WhereAmI {
    type Batch = (Option<usize>, u64);
    type Error = String;

    fn load_batch(
        &self,
        _indices: &[u64],
        ctx: &BatchCtx,
    ) -> Result<(Option<usize>, u64), LoadError<String>> {
        // Slow enough that every worker gets batches.
        std::thread::sleep(std::time::Duration::from_millis(2));
        Ok((ctx.worker(), ctx.epoch_number()))
    }
}

fn drain(loader: &Loader<WhereAmI>, number: u64, len: u64) -> Vec<(Option<usize>, u64)> {
    let epoch = loader.epoch_numbered(Order::Sequential { len }, 0, number);
    let mut out = Vec::new();
    loop {
        match epoch.recv(None) {
            Recv::Batch(b) => out.push(b.expect("loads")),
            Recv::Finished => return out,
            Recv::Pending => unreachable!("no timeout"),
        }
    }
}

fn config(num_workers: usize) -> Config {
    Config {
        batch_size: 1,
        num_workers,
        prefetch_depth: 2,
        item_concurrency: 1,
        drop_last: false,
    }
}

#[test]
fn workers_are_numbered_from_zero_and_carry_the_epoch_number() {
    let loader = Loader::new(WhereAmI, config(3)).expect("valid");
    let got = drain(&loader, 7, 60);
    assert_eq!(got.len(), 60);
    assert!(got.iter().all(|&(_, e)| e == 7), "{got:?}");
    let workers: BTreeSet<Option<usize>> = got.iter().map(|&(w, _)| w).collect();
    assert!(
        workers.iter().all(|w| matches!(w, Some(0..=2))),
        "{workers:?}"
    );
    assert!(
        workers.len() >= 2,
        "more than one worker loaded: {workers:?}"
    );
}

#[test]
fn without_workers_a_batch_has_no_worker() {
    let loader = Loader::new(WhereAmI, config(0)).expect("valid");
    assert_eq!(drain(&loader, 3, 4), vec![(None, 3); 4]);
}

#[test]
fn fewer_batches_than_workers_start_the_first_workers_only() {
    let loader = Loader::new(WhereAmI, config(4)).expect("valid");
    let got = drain(&loader, 0, 1);
    assert_eq!(got, vec![(Some(0), 0)]);
}
