//! Whole epochs: order, bounds, errors, cancellation, reuse of the pool.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlrs_core::{
    BatchCtx, Config, LoadError, Loader, Order, Permutation, Recv, Shuffle, Source, from_fn,
};

use crate::alloc::allocated_by;
use proptest::prelude::*;

/// A source whose batch is the list of its indices, after a per-index delay; it fails on the
/// indices in `fail` and records how many batches load at once.
#[derive(Default)]
struct Probe {
    delays_us: HashMap<u64, u64>,
    fail: Vec<u64>,
    loading: AtomicUsize,
    peak_loading: AtomicUsize,
    per_item: bool,
}

impl Source for Probe {
    type Batch = Vec<u64>;
    type Error = String;

    fn load_batch(&self, indices: &[u64], ctx: &BatchCtx) -> Result<Vec<u64>, LoadError<String>> {
        let now = self.loading.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak_loading.fetch_max(now, Ordering::SeqCst);
        let r = if self.per_item {
            let delays = self.delays_us.clone();
            let fail = self.fail.clone();
            ctx.map_items(indices, move |i| {
                std::thread::sleep(Duration::from_micros(delays.get(&i).copied().unwrap_or(0)));
                if fail.contains(&i) {
                    Err(format!("item {i} failed"))
                } else {
                    Ok(i)
                }
            })
        } else {
            let mut out = Vec::new();
            for &i in indices {
                std::thread::sleep(Duration::from_micros(
                    self.delays_us.get(&i).copied().unwrap_or(0),
                ));
                if self.fail.contains(&i) {
                    self.loading.fetch_sub(1, Ordering::SeqCst);
                    return Err(LoadError::Source(format!("item {i} failed")));
                }
                out.push(i);
            }
            Ok(out)
        };
        self.loading.fetch_sub(1, Ordering::SeqCst);
        r
    }
}

fn config(
    batch_size: usize,
    num_workers: usize,
    prefetch_depth: usize,
    item_concurrency: usize,
) -> Config {
    Config {
        batch_size,
        num_workers,
        prefetch_depth,
        item_concurrency,
        drop_last: false,
    }
}

fn drain<S: Source>(epoch: &dlrs_core::Epoch<S>) -> Vec<Result<S::Batch, LoadError<S::Error>>> {
    let mut out = Vec::new();
    loop {
        match epoch.recv(None) {
            Recv::Batch(b) => out.push(b),
            Recv::Finished => return out,
            Recv::Pending => unreachable!("no timeout given"),
        }
    }
}

#[test]
fn sequential_epochs_in_order_with_and_without_workers() {
    for workers in [0, 1, 3] {
        let loader = Loader::new(Probe::default(), config(4, workers, 2, 1)).unwrap();
        for _ in 0..3 {
            let epoch = loader.epoch(Order::Sequential { len: 10 });
            assert_eq!(epoch.num_batches(), 3);
            let got: Vec<Vec<u64>> = drain(&epoch).into_iter().map(Result::unwrap).collect();
            assert_eq!(got, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]);
            assert_eq!(epoch.remaining(), 0);
        }
    }
}

#[test]
fn an_error_takes_its_batch_place_and_the_next_batch_follows() {
    for (workers, per_item) in [(0, false), (2, false), (2, true), (0, true)] {
        let probe = Probe {
            fail: vec![5],
            per_item,
            ..Probe::default()
        };
        let loader = Loader::new(probe, config(2, workers, 1, 2)).unwrap();
        let got = drain(&loader.epoch(Order::Sequential { len: 8 }));
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], Ok(vec![0, 1]));
        assert_eq!(got[1], Ok(vec![2, 3]));
        assert_eq!(got[2], Err(LoadError::Source("item 5 failed".into())));
        assert_eq!(got[3], Ok(vec![6, 7]));
    }
}

struct Panicky;
impl Source for Panicky {
    type Batch = ();
    type Error = ();
    fn load_batch(&self, indices: &[u64], _: &BatchCtx) -> Result<(), LoadError<()>> {
        assert!(indices[0] != 2, "index two is cursed");
        Ok(())
    }
}

#[test]
fn a_panic_becomes_an_error_in_place() {
    let loader = Loader::new(Panicky, config(1, 2, 1, 1)).unwrap();
    let got = drain(&loader.epoch(Order::Sequential { len: 4 }));
    assert_eq!(
        got[2],
        Err(LoadError::Panicked("index two is cursed".into()))
    );
    assert_eq!(got.iter().filter(|r| r.is_ok()).count(), 3);
}

#[test]
fn shuffled_epochs_cover_every_index_once() {
    let loader = Loader::new(Probe::default(), config(7, 2, 2, 1)).unwrap();
    let shuffle = Shuffle::seeded(9);
    let mut orders = Vec::new();
    for e in 0..3 {
        let got: Vec<u64> = drain(&loader.epoch(shuffle.order(100, e)))
            .into_iter()
            .flat_map(Result::unwrap)
            .collect();
        let mut sorted = got.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        orders.push(got);
    }
    assert_ne!(orders[0], orders[1]);
}

#[test]
fn recv_with_a_timeout_answers_pending_then_the_batch() {
    let probe = Probe {
        delays_us: HashMap::from([(0, 300_000)]),
        ..Probe::default()
    };
    let loader = Loader::new(probe, config(1, 1, 1, 1)).unwrap();
    let epoch = loader.epoch(Order::Sequential { len: 2 });
    let mut pendings = 0;
    let first = loop {
        match epoch.recv(Some(Duration::from_millis(10))) {
            Recv::Pending => pendings += 1,
            Recv::Batch(b) => break b,
            Recv::Finished => panic!("finished early"),
        }
    };
    assert!(pendings >= 1);
    assert_eq!(first, Ok(vec![0]));
}

/// Counts the batches loaded; while armed, batch 0 blocks until released (even if cancelled).
struct Gate {
    armed: Arc<AtomicBool>,
    release: Arc<AtomicBool>,
    started: Arc<AtomicUsize>,
}
impl Source for Gate {
    type Batch = u64;
    type Error = ();
    fn load_batch(&self, indices: &[u64], _: &BatchCtx) -> Result<u64, LoadError<()>> {
        self.started.fetch_add(1, Ordering::SeqCst);
        if indices[0] == 0 && self.armed.load(Ordering::SeqCst) {
            while !self.release.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(indices[0])
    }
}

#[test]
fn dropping_an_epoch_abandons_it_and_the_next_one_does_not_wait_for_it() {
    let armed = Arc::new(AtomicBool::new(true));
    let release = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicUsize::new(0));
    let gate = Gate {
        armed: Arc::clone(&armed),
        release: Arc::clone(&release),
        started: Arc::clone(&started),
    };
    let loader = Loader::new(gate, config(1, 2, 1, 1)).unwrap();
    let epoch = loader.epoch(Order::Sequential { len: 1000 });
    // Batch 0 blocks; the other worker fills the ring (capacity 3) and waits for room.
    while started.load(Ordering::SeqCst) < 3 {
        std::thread::yield_now();
    }
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        started.load(Ordering::SeqCst),
        3,
        "never more than the ring's capacity"
    );
    drop(epoch);
    // A worker is still stuck in the abandoned batch 0: the next epoch runs to the end anyway.
    armed.store(false, Ordering::SeqCst);
    let epoch = loader.epoch(Order::Sequential { len: 3 });
    assert_eq!(
        drain(&epoch)
            .into_iter()
            .map(Result::unwrap)
            .collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(
        started.load(Ordering::SeqCst),
        6,
        "the abandoned epoch claimed nothing more"
    );
    release.store(true, Ordering::SeqCst);
}

/// Records the threads that load batches.
#[derive(Default)]
struct Threads(Mutex<HashSet<std::thread::ThreadId>>);
impl Source for Threads {
    type Batch = usize;
    type Error = ();
    fn load_batch(&self, indices: &[u64], _: &BatchCtx) -> Result<usize, LoadError<()>> {
        self.0.lock().unwrap().insert(std::thread::current().id());
        Ok(indices.len())
    }
}

#[test]
fn many_epochs_reuse_the_pool() {
    let cfg = config(3, 2, 2, 2);
    let loader = Loader::new(Threads::default(), cfg).unwrap();
    for _ in 0..50 {
        let epoch = loader.epoch(Order::Sequential { len: 9 });
        assert_eq!(drain(&epoch).len(), 3);
    }
    // Thread ids are never reused: 100 runner jobs ran on the pool's threads, not on a thread each.
    let threads = loader.source().0.lock().unwrap().len();
    assert!(
        (1..=cfg.pool_size()).contains(&threads),
        "{threads} threads loaded batches"
    );
}

#[test]
fn invalid_configs_are_refused() {
    assert!(Loader::new(Probe::default(), config(0, 0, 2, 1)).is_err());
    assert!(Loader::new(Probe::default(), config(1, 0, 0, 1)).is_err());
    assert!(Loader::new(Probe::default(), config(1, 0, 2, 0)).is_err());
    assert_eq!(
        Loader::new(Probe::default(), config(0, 0, 2, 1))
            .unwrap_err()
            .to_string(),
        "batch_size must be at least 1, got 0"
    );
}

#[test]
fn explicit_orders_are_followed() {
    let loader = Loader::new(Probe::default(), config(2, 2, 1, 1)).unwrap();
    let order = Order::Explicit(Arc::new([5u64, 3, 3, 9, 1].into_iter().collect()));
    let got: Vec<Vec<u64>> = drain(&loader.epoch(order))
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(got, vec![vec![5, 3], vec![3, 9], vec![1]]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// Random per-item delays: batches still come out in order, every index exactly once, and
    /// never more than num_workers + prefetch_depth batches in progress or waiting.
    #[test]
    fn order_and_bounds_hold_under_random_delays(
        len in 0u64..120,
        batch_size in 1usize..9,
        workers in 0usize..4,
        depth in 1usize..4,
        k in 1usize..4,
        drop_last: bool,
        per_item: bool,
        delays in proptest::collection::vec(0u64..400, 120),
        seed: u64,
    ) {
        let probe = Probe {
            delays_us: delays.iter().enumerate().map(|(i, d)| (i as u64, *d)).collect(),
            per_item,
            ..Probe::default()
        };
        let cfg = Config { batch_size, num_workers: workers, prefetch_depth: depth, item_concurrency: k, drop_last };
        let loader = Loader::new(probe, cfg).unwrap();
        let order = Shuffle::seeded(seed).order(len, 0);
        let expected: Vec<u64> = (0..len).map(|p| order.get(p)).collect();
        let epoch = loader.epoch(order);
        let batches: Vec<Vec<u64>> = drain(&epoch).into_iter().map(Result::unwrap).collect();
        let flat: Vec<u64> = batches.iter().flatten().copied().collect();
        let kept = if drop_last { (len as usize / batch_size) * batch_size } else { len as usize };
        prop_assert_eq!(&flat[..], &expected[..kept]);
        prop_assert!(batches.iter().all(|b| b.len() == batch_size) || !drop_last);
        prop_assert!(epoch.peak_in_flight() <= (workers + depth) as u64);
        prop_assert!(loader.source().peak_loading.load(Ordering::SeqCst) <= workers.max(1));
    }

    /// A resumed epoch gives exactly the batches an uninterrupted one had not yet handed out,
    /// whatever the worker counts of either run, also when the first run had prefetched more.
    #[test]
    fn a_resumed_epoch_gives_the_batches_not_yet_received(
        len in 0u64..150,
        batch_size in 1usize..7,
        cut_frac in 0.0f64..1.0,
        workers_a in 0usize..4,
        workers_b in 0usize..4,
        k in 1usize..3,
        seed: u64,
    ) {
        let loader_a = Loader::new(Probe::default(), config(batch_size, workers_a, 2, 1)).unwrap();
        let loader_b = Loader::new(Probe::default(), config(batch_size, workers_b, 1, k)).unwrap();
        let order = Shuffle::seeded(seed).order(len, 5);
        let full: Vec<Vec<u64>> = drain(&loader_a.epoch(order.clone())).into_iter().map(Result::unwrap).collect();
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
        let cut = ((full.len() as f64) * cut_frac) as usize;
        // The first run receives `cut` batches and stops (workers may have loaded more).
        let first = loader_a.epoch(order.clone());
        for _ in 0..cut {
            prop_assert!(matches!(first.recv(None), Recv::Batch(Ok(_))));
        }
        prop_assert_eq!(first.position(), cut as u64);
        drop(first);
        let resumed = loader_b.epoch_from(Shuffle::seeded(seed).order(len, 5), cut as u64);
        prop_assert_eq!(resumed.remaining(), (full.len() - cut) as u64);
        let rest: Vec<Vec<u64>> = drain(&resumed).into_iter().map(Result::unwrap).collect();
        prop_assert_eq!(&rest[..], &full[cut..]);
    }
}

#[test]
fn a_shuffled_epoch_of_ten_million_allocates_what_one_of_ten_does() {
    // No per-index storage: the order, the plan and the first batch cost as many bytes
    // whatever the length (counted on this thread: no workers, so the batch loads here).
    let indices = from_fn(|indices, _| Ok::<_, LoadError<()>>(indices.to_vec()));
    let loader = Loader::new(indices, config(8, 0, 2, 1)).unwrap();
    let start = |len: u64| {
        allocated_by(|| {
            let epoch = loader.epoch(Shuffle::seeded(1).order(len, 0));
            match epoch.recv(None) {
                Recv::Batch(Ok(batch)) => batch,
                _ => panic!("no first batch"),
            }
        })
    };
    start(10); // first-use allocations (statistics, locals) out of the way
    let (small, small_bytes) = start(10);
    let (large, large_bytes) = start(10_000_000);
    assert_eq!(small.len(), 8);
    assert_eq!(large.len(), 8);
    assert!(large.iter().all(|&i| i < 10_000_000));
    assert_eq!(large_bytes, small_bytes);
    let (_, order_bytes) = allocated_by(|| Permutation::new(10_000_000, 1, 0));
    assert_eq!(order_bytes, 0);
}

#[test]
fn stats_count_exactly_on_a_known_workload() {
    for workers in [0, 2] {
        let probe = Probe {
            fail: vec![5],
            ..Probe::default()
        };
        let loader = Loader::new(probe, config(4, workers, 2, 1)).unwrap();
        for _ in 0..3 {
            drain(&loader.epoch(Order::Sequential { len: 10 }));
        }
        let s = loader.stats();
        // 3 epochs of batches [0..4) [4..8) [8..10); the second fails (index 5).
        assert_eq!(s.batches, 9);
        assert_eq!(s.failed_batches, 3);
        assert_eq!(s.items, 3 * 6);
        assert_eq!(s.loaded, 9);
        assert!(s.load_p50.is_some() && s.load_p99 >= s.load_p50);
    }
}

/// The ring holds at most the epoch's batches, so any depth works and no slot is made for a
/// batch that does not exist.
#[test]
fn any_prefetch_depth_works() {
    for depth in [1 << 40, usize::MAX] {
        for workers in [0, 1, 3] {
            let loader = Loader::new(Probe::default(), config(2, workers, depth, 1)).unwrap();
            let epoch = loader.epoch(Order::Sequential { len: 9 });
            let got: Vec<Vec<u64>> = drain(&epoch).into_iter().map(Result::unwrap).collect();
            assert_eq!(
                got,
                [vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7], vec![8]]
            );
            assert!(epoch.peak_in_flight() <= 5);
            let resumed = loader.epoch_from(Order::Sequential { len: 9 }, 3);
            let got: Vec<Vec<u64>> = drain(&resumed).into_iter().map(Result::unwrap).collect();
            assert_eq!(got, [vec![6, 7], vec![8]]);
        }
    }
    let threads = Loader::new(Probe::default(), config(1, 1 << 20, 1, 1 << 20)).unwrap_err();
    assert_eq!(
        threads.to_string(),
        "num_workers × item_concurrency is too large: 1048576 × 1048576"
    );
}
