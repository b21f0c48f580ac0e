//! The core's own cost: a batch handed over from a worker, and the shuffled order per index.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dlrs_core::{Config, LoadError, Loader, Order, Recv, Shuffle, Source, from_fn};

/// Batches of the indices themselves: all the cost is the loader's.
fn ints() -> impl Source<Batch = Vec<u64>> {
    from_fn(|indices, _| Ok::<_, LoadError<()>>(indices.to_vec()))
}

fn epoch_of(loader: &Loader<impl Source<Batch = Vec<u64>>>, order: Order) -> usize {
    let epoch = loader.epoch(order);
    let mut n = 0;
    while let Recv::Batch(b) = epoch.recv(None) {
        n += b.map_or(0, |b| b.len());
    }
    n
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("handover");
    let batches = 2_000u64;
    g.throughput(Throughput::Elements(batches));
    for workers in [0usize, 2] {
        let loader = Loader::new(
            ints(),
            Config {
                batch_size: 64,
                num_workers: workers,
                ..Config::default()
            },
        )
        .unwrap();
        g.bench_function(format!("batches_{workers}_workers"), |b| {
            b.iter(|| epoch_of(&loader, Order::Sequential { len: batches * 64 }));
        });
    }
    g.finish();

    let mut g = c.benchmark_group("shuffle");
    g.throughput(Throughput::Elements(1));
    let p = Shuffle::seeded(1).order(10_000_000, 0);
    let mut i = 0u64;
    g.bench_function("index_of_10M", |b| {
        b.iter(|| {
            i = (i + 1) % 10_000_000;
            p.get(i)
        });
    });
    g.bench_function("start_epoch_10M", |b| {
        b.iter(|| Shuffle::seeded(1).order(10_000_000, 3))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
