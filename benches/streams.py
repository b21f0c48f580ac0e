"""Streams, side by side in one run (rounds alternate between the contenders).

``ints``: a generator of trivial items, read by dataloader-rs and by torch's DataLoader over an
``IterableDataset``. The dataset shards itself by ``get_worker_info()`` (torch's rule for
worker processes), so every contender reads each item once: torch with 0 and 2 workers, ours
with one reader (default) and with one reader per worker.

``parquet``: a ``datasets.IterableDataset`` streaming local Parquet shards of text, each row
tokenised (a word-level ``tokenizers`` tokenizer built here), 2 workers: torch's DataLoader
against ours with the same tokenizer run in Rust (``dataloader_rs.text.Tokenize``), and with the
Python tokenising torch's workers run, by one reader and by one reader per worker (the dataset
splits its shards by worker). With ``--tokenise batch``, the Python contenders tokenise each
batch in their ``collate_fn`` with ``encode_batch`` (as a data collator does).

    python benches/streams.py [ints|parquet] [--items N] [--batch-size 64] [--rounds 7]
        [--tokenise row|batch] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from dataloader_rs import PyDataloader
from dataloader_rs.text import Tokenize

try:
    import torch
    import torch.utils.data as tud
except ImportError:  # pragma: no cover - torch is optional here
    torch = None
    tud = None

Base: Any = tud.IterableDataset if tud is not None else object


class Ints(Base):  # type: ignore[misc,valid-type]
    """0..n-1, each worker of a torch loader (or reader of ours) its share."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        info = tud.get_worker_info() if tud is not None else None
        if info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))


def identity(batch: list[Any]) -> list[Any]:
    return batch


def epoch(loader: Any, expected: int) -> float:
    start = time.perf_counter()
    n = 0
    for batch in loader:
        n += len(batch)
    took = time.perf_counter() - start
    assert n == expected, (n, expected)
    return took


def bare(n: int, batch_size: int) -> float:
    start = time.perf_counter()
    it = iter(range(n))
    while True:
        batch = list(itertools.islice(it, batch_size))
        if not batch:
            break
    return time.perf_counter() - start


def parquet_runs(n: int, bs: int, tmp: str, per_batch: bool) -> tuple[dict[str, Callable[[], float]], Any]:
    """The ``parquet`` workload: `n` rows of 24 words in 8 shards, tokenised per row (or per
    batch with ``per_batch``): its contenders, and the tokenizer."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = [f"w{i}" for i in range(5000)]
    shards = 8
    paths = []
    for s in range(shards):
        rows = range(s, n, shards)
        text = [" ".join(words[(r * 7 + j * 13) % len(words)] for j in range(24)) for r in rows]
        path = f"{tmp}/shard{s}.parquet"
        pq.write_table(pa.table({"text": text}), path)
        paths.append(path)
    vocab = {w: i for i, w in enumerate(words)}
    vocab["[UNK]"] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()

    def tokenise(row: dict[str, Any]) -> list[int]:
        return tokenizer.encode(row["text"]).ids

    ds = datasets.load_dataset("parquet", data_files=paths, split="train", streaming=True)
    assert ds.num_shards == shards
    tokenised = ds.map(tokenise_row(tokenizer)).select_columns(["ids"])

    def tokenise_batch(rows: list[dict[str, Any]]) -> list[list[int]]:
        return [e.ids for e in tokenizer.encode_batch([r["text"] for r in rows])]

    step: dict[str, Any] = {"collate_fn": tokenise_batch} if per_batch else {"transform": tokenise}
    runs: dict[str, Callable[[], float]] = {}
    # The same tokenizer run in Rust: each row gets its ids under "ids", as torch's map gives.
    native = PyDataloader(ds, batch_size=bs, num_workers=2, transform=Tokenize(tokenizer, field="text", into="ids"))
    runs["dataloader-rs, 2 workers, Tokenize"] = lambda: epoch(native, n)
    one = PyDataloader(ds, batch_size=bs, num_workers=2, **step)
    runs["dataloader-rs, 2 workers, one reader"] = lambda: epoch(one, n)
    # A reader per worker splits the shards through torch's get_worker_info(), which `datasets`
    # asks: without torch each reader would read every shard.
    if tud is not None:
        ours = PyDataloader(ds, batch_size=bs, num_workers=2, stream_readers="per_worker", **step)
        runs["dataloader-rs, 2 workers, per_worker"] = lambda: epoch(ours, n)
    if tud is not None:
        if per_batch:
            theirs = tud.DataLoader(ds, batch_size=bs, num_workers=2, collate_fn=tokenise_batch)
        else:
            theirs = tud.DataLoader(tokenised, batch_size=bs, num_workers=2, collate_fn=identity)
        runs["torch, 2 workers"] = lambda: epoch(theirs, n)
    return runs, tokenizer


def tokenise_row(tokenizer: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The same tokenising as ours, as a ``datasets`` map (run in torch's worker processes)."""

    def row(r: dict[str, Any]) -> dict[str, Any]:
        return {"ids": tokenizer.encode(r["text"]).ids}

    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", choices=["ints", "parquet"], default="ints")
    parser.add_argument("--items", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tokenise", choices=["row", "batch"], default="row")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.workload == "parquet":
        import tempfile

        n = args.items or 100_000
        with tempfile.TemporaryDirectory() as tmp:
            runs, _ = parquet_runs(n, args.batch_size, tmp, args.tokenise == "batch")
            report(args, n, runs, "torch, 2 workers")
        return
    n, bs = args.items or 1_000_000, args.batch_size
    ds = Ints(n)
    runs: dict[str, Callable[[], float]] = {"bare loop": lambda: bare(n, bs)}
    for workers in (0, 2):
        ours = PyDataloader(ds, batch_size=bs, num_workers=workers)
        runs[f"dataloader-rs, {workers} workers"] = lambda ours=ours: epoch(ours, n)
    per_worker = PyDataloader(ds, batch_size=bs, num_workers=2, stream_readers="per_worker")
    runs["dataloader-rs, 2 workers, per_worker"] = lambda: epoch(per_worker, n)
    if tud is not None:
        for workers in (0, 2):
            theirs = tud.DataLoader(ds, batch_size=bs, num_workers=workers, collate_fn=identity)
            runs[f"torch, {workers} workers"] = lambda theirs=theirs: epoch(theirs, n)
    report(args, n, runs, None)


def report(args: argparse.Namespace, n: int, runs: dict[str, Callable[[], float]], baseline: str | None) -> None:
    """Runs the contenders in turn for ``args.rounds`` rounds after a warm-up; prints medians."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values():
        fn()
    for _ in range(args.rounds):
        for name, fn in runs.items():
            times[name].append(fn())
    medians = {name: statistics.median(t) for name, t in times.items()}
    result: dict[str, Any] = {
        "workload": args.workload,
        "items": n,
        "batch_size": args.batch_size,
        "rounds": args.rounds,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "seconds": medians,
        "items_per_second": {name: n / t for name, t in medians.items()},
    }
    if baseline is not None and baseline in medians:
        result["vs_torch"] = {name: medians[baseline] / t for name, t in medians.items() if name != baseline}
    elif tud is not None and "torch, 2 workers" in medians:
        result["vs_torch"] = {
            f"{w} workers": medians[f"torch, {w} workers"] / medians[f"dataloader-rs, {w} workers"] for w in (0, 2)
        }
        result["vs_torch"]["2 workers, per_worker"] = (
            medians["torch, 2 workers"] / medians["dataloader-rs, 2 workers, per_worker"]
        )
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name, t in medians.items():
        print(f"{name:40s} {t * 1e3:9.1f} ms  {n / t / 1e6:6.3f} M items/s")
    for name, ratio in result.get("vs_torch", {}).items():
        print(f"vs torch, {name}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
