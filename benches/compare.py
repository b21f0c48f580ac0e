"""Side-by-side benchmarks: dataloader-rs against torch.utils.data.DataLoader, same dataset code.

Every figure is measured in the same run as its baseline and reported as a ratio. torch is a
benchmark-only dependency: without it, the torch columns are left out.

    python benches/compare.py                 # every workload, a table
    python benches/compare.py overhead --json # one workload, JSON
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from dataloader_rs import PyDataloader, PyDataset

try:
    import torch
    import torch.utils.data as tud
except ImportError:  # pragma: no cover - torch is optional here
    torch = None
    tud = None


def identity(samples: list[Any]) -> list[Any]:
    return samples


class Ints(PyDataset[int]):
    """The loader's own cost: a trivial __getitem__."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


def best_of(repeat: int, fn: Callable[[], float]) -> float:
    """The median of `repeat` runs (seconds), after one warm-up run."""
    fn()
    return statistics.median(fn() for _ in range(repeat))


def time_epoch(make_iter: Callable[[], Any]) -> float:
    start = time.perf_counter()
    n = 0
    for batch in make_iter():
        n += len(batch)
    return time.perf_counter() - start


def bare_loop(ds: Ints, batch_size: int) -> float:
    start = time.perf_counter()
    n = len(ds)
    for s in range(0, n, batch_size):
        batch = [ds[i] for i in range(s, min(s + batch_size, n))]
        del batch
    return time.perf_counter() - start


def interleaved(repeat: int, runs: dict[str, Callable[[], float]]) -> dict[str, float]:
    """The median of `repeat` runs of each contender (seconds), after one warm-up run each. The
    contenders take turns, one run each per round, so a change in the machine's speed during
    the measurement (other processes, frequency) affects them alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values():
        fn()
    for _ in range(repeat):
        for name, fn in runs.items():
            times[name].append(fn())
    return {name: statistics.median(t) for name, t in times.items()}


def overhead(args: argparse.Namespace) -> list[dict[str, Any]]:
    n, bs = args.items, 64
    ds = Ints(n)
    rows = []
    for workers in (0, 2):
        runs: dict[str, Callable[[], float]] = {}
        if workers == 0:
            runs["bare loop"] = lambda: bare_loop(ds, bs)
        loader = PyDataloader(ds, batch_size=bs, num_workers=workers, collate_fn=identity)
        runs["dataloader-rs"] = lambda loader=loader: time_epoch(lambda: loader)
        if tud is not None:
            tl = tud.DataLoader(
                ds, batch_size=bs, num_workers=workers, collate_fn=identity, persistent_workers=workers > 0
            )
            runs["torch"] = lambda tl=tl: time_epoch(lambda: tl)
        for name, t in interleaved(args.repeat, runs).items():
            rows.append(
                {"workload": "overhead", "loader": name, "workers": workers, "seconds": t, "items_per_s": n / t}
            )
        del loader
    return rows


FIRST_BATCH: dict[str, Any] = {"batch_size": 64, "num_workers": 2, "collate_fn": identity}


def first_batch_seconds(make_loader: Callable[[], Any]) -> float:
    """Seconds from making a loader to its first batch. The clock stops at the first batch:
    dropping the loader (and, for torch, stopping its worker processes) comes after it."""
    start = time.perf_counter()
    loader = make_loader()
    it = iter(loader)
    next(it)
    t = time.perf_counter() - start
    del it, loader
    return t


def first_batch(args: argparse.Namespace) -> list[dict[str, Any]]:
    """A fresh loader (and, for torch, fresh worker processes), up to its first batch."""
    ds = Ints(100_000)
    rows = []

    t = best_of(max(args.repeat, 100), lambda: first_batch_seconds(lambda: PyDataloader(ds, **FIRST_BATCH)))
    rows.append({"workload": "first_batch", "loader": "dataloader-rs", "workers": 2, "seconds": t})
    if tud is not None:
        tt = best_of(args.repeat, lambda: first_batch_seconds(lambda: tud.DataLoader(ds, **FIRST_BATCH)))
        rows.append({"workload": "first_batch", "loader": "torch", "workers": 2, "seconds": tt})
    return rows


WORKLOADS: dict[str, Callable[[argparse.Namespace], list[dict[str, Any]]]] = {
    "overhead": overhead,
    "first_batch": first_batch,
}


def ratios(rows: list[dict[str, Any]]) -> list[str]:
    """The figures the goals are stated in."""
    by = {(r["workload"], r["loader"], r["workers"]): r for r in rows}
    out = []

    def ratio(name: str, fast: tuple[str, str, int], slow: tuple[str, str, int], goal: str) -> None:
        if fast in by and slow in by:
            out.append(f"{name}: {by[slow]['seconds'] / by[fast]['seconds']:.2f}x ({goal})")

    ratio("0 workers vs bare loop", ("overhead", "dataloader-rs", 0), ("overhead", "bare loop", 0), "goal >= 0.9x")
    ratio("2 workers vs torch 2 workers", ("overhead", "dataloader-rs", 2), ("overhead", "torch", 2), "goal >= 8x")
    ratio("0 workers vs torch 0 workers", ("overhead", "dataloader-rs", 0), ("overhead", "torch", 0), "")
    fb = by.get(("first_batch", "dataloader-rs", 2))
    if fb:
        out.append(f"first batch, fresh loader, 2 workers: {fb['seconds'] * 1000:.3f} ms (goal <= 0.2 ms)")
    ratio("first batch vs torch", ("first_batch", "dataloader-rs", 2), ("first_batch", "torch", 2), "")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", default=list(WORKLOADS), help=f"any of {', '.join(WORKLOADS)}")
    parser.add_argument("--items", type=int, default=100_000, help="items per epoch of the overhead workload")
    parser.add_argument("--repeat", type=int, default=7, help="runs per figure (the median is kept)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    unknown = [w for w in args.workloads if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workloads {unknown}: choose from {', '.join(WORKLOADS)}")

    rows = [row for name in args.workloads for row in WORKLOADS[name](args)]
    machine = {
        "python": sys.version.split()[0],
        "gil_enabled": getattr(sys, "_is_gil_enabled", lambda: True)(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "torch": None if torch is None else torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "load_average": os.getloadavg()[0],
    }
    if args.json:
        print(json.dumps({"machine": machine, "rows": rows, "ratios": ratios(rows)}, indent=2))
        return
    print(f"# {machine}")
    print(f"{'workload':<12} {'loader':<14} {'workers':>7} {'ms':>10} {'items/s':>14}")
    for r in rows:
        ips = f"{r['items_per_s']:,.0f}" if "items_per_s" in r else ""
        print(f"{r['workload']:<12} {r['loader']:<14} {r['workers']:>7} {r['seconds'] * 1000:>10.3f} {ips:>14}")
    for line in ratios(rows):
        print(line)


if __name__ == "__main__":
    main()
