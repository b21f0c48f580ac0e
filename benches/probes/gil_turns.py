"""Workers and the consumer taking turns on the GIL: the epoch time of datasets that hold the
GIL for a moment (trivial items), hold it for long (pure Python), or let it go (sleeps, NumPy),
with a consumer that does nothing or sleeps (a training step that lets the GIL go).

Compares whatever `dataloader_rs` is importable: run it twice, once with an older build first on
``PYTHONPATH``, to see a change side by side.

    python benches/probes/gil_turns.py [--epochs 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

from dataloader_rs import PyDataloader, PyDataset


class Items(PyDataset[Any]):
    def __init__(self, n: int, kind: str) -> None:
        super().__init__()
        self.n, self.kind = n, kind

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        if self.kind == "sleep":  # lets the GIL go, as I/O does
            time.sleep(0.0002)
            return i
        if self.kind == "numpy":  # lets it go in part
            a = np.random.default_rng(i).random(20_000)
            a.sort()
            return a[:4]
        if self.kind == "python":  # holds it for about 5 us
            return sum(range(300))
        return i


def identity(x: list[Any]) -> list[Any]:
    return x


WORKLOADS = [
    ("trivial", 0.0, 100_000),
    ("python", 0.0, 64_000),
    ("python", 0.002, 64_000),
    ("sleep", 0.0, 6_400),
    ("numpy", 0.0, 6_400),
    ("numpy", 0.005, 6_400),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    for kind, step, n in WORKLOADS:
        loader = PyDataloader(Items(n, kind), batch_size=64, collate_fn=identity, num_workers=2)
        times = []
        for _ in range(args.epochs + 1):
            start = time.perf_counter()
            for _batch in loader:
                if step:
                    time.sleep(step)
            times.append(time.perf_counter() - start)
        median = statistics.median(times[1:]) * 1000
        print(f"{kind:8} items={n:>7,} step={step * 1000:.0f} ms: median epoch {median:8.1f} ms", flush=True)


if __name__ == "__main__":
    main()
