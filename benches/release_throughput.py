"""Trivial items through whichever ``dataloader_rs`` this interpreter imports: ours, or a released
wheel (0.2.0) installed in another venv. One run prints one JSON line of items per second (0 and
2 workers, batches of 64) and the first batch of a fresh loader; ``benches/compare_release.py``
alternates the two interpreters and reports the ratios.

Only what both versions take is used: ``PyDataloader(dataset, batch_size, num_workers)`` over a
``PyDataset`` subclass with a trivial ``__getitem__``, default collation (a list).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from dataloader_rs import PyDataloader, PyDataset


class Trivial(PyDataset):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


def items_per_second(n: int, workers: int, epochs: int) -> float:
    loader = PyDataloader(Trivial(n), batch_size=64, num_workers=workers)
    for _ in loader:  # warm-up: threads started, code paths hot
        pass
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        count = 0
        for batch in loader:
            count += len(batch)
        times.append(time.perf_counter() - start)
        assert count == n, count
    return n / statistics.median(times)


def first_batch(repeat: int) -> float:
    dataset = Trivial(64 * 8)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        loader = PyDataloader(dataset, batch_size=64, num_workers=2)
        it = iter(loader)
        next(it)
        times.append(time.perf_counter() - start)
        del it, loader
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    out = {
        "workers_0": items_per_second(args.items, 0, args.epochs),
        "workers_2": items_per_second(args.items, 2, args.epochs),
        "first_batch_s": first_batch(50),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
