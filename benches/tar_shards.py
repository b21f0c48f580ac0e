"""Samples in tar shards over a high-latency server, side by side in one run (issue 16).

    python benches/tar_shards.py                 # a table
    python benches/tar_shards.py --json          # JSON
    python benches/tar_shards.py --rounds 3 --only TarDataset-http,webdataset-torch-2

Data: 20,000 samples of a ~100 KB "jpg" (random bytes: nothing is decoded) and a "cls" label,
in 64 shards written by Python's tarfile under --dir (made once, then reused), served by
`dlrs serve --latency-ms 10 --dir` (each answer waits 10 ms; byte ranges and ETags). Batches of
64, a full shuffle every epoch for our loaders; the collation is the identity for every loader.

Contenders:
- TarDataset-http: `TarDataset` over the shards' URLs, one range request per sample, 128 in
  flight (num_workers=2, item_concurrency=64), indexes kept from an earlier run (the cold
  indexing of the 64 shards is timed on its own: "index"). At 10 ms per request, 64 in flight
  bound an epoch at 3.1 s, 128 at 1.6 s, below what the CPU allows on a small machine.
- webdataset-torch-2: the `webdataset` package (shards streamed by curl, a 1,000-sample shuffle
  buffer) in torch's DataLoader with 2 worker processes.
- HttpDataset-per-sample: `HttpDataset` over one URL per sample (100 KB bodies made by the
  server), as many in flight.
- TarDataset-cached: TarDataset-http with `cache_dir=` (no budget): filled by its warm-up epoch,
  so every measured epoch is "epoch 2", read from the local cache.
- TarDataset-cache-fill: TarDataset-http with `cache_dir=` a new, empty directory every epoch:
  the epoch that fills the cache, to compare with TarDataset-http (no cache).
- TarDataset-files: the same shards as local files (the page cache holds them, as it holds the
  cache's entries): the baseline of epoch 2.

Each round runs one epoch of each contender in turn, after one warm-up epoch each; figures
are medians over the rounds. Goals: TarDataset-http at least 2x faster than
webdataset-torch-2; TarDataset-cached within 1.3x of TarDataset-files.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from dataloader_rs import HttpDataset, PyDataloader, TarDataset

sys.path.insert(0, os.path.dirname(__file__))
from http_loaders import DlrsServer, cpu_seconds, find_dlrs

try:
    import webdataset as wds
except ImportError:  # pragma: no cover - optional
    wds = None
try:
    import torch.utils.data as tud
except ImportError:  # pragma: no cover - optional
    tud = None

SAMPLES = 20_000
SHARDS = 64
JPG = 100 * 1024
BATCH = 64
DELAY = 0.01


def identity(samples: list[Any]) -> list[Any]:
    return samples


def make_shards(root: Path) -> list[Path]:
    """The shards under ``root``, written once (a marker file says they are complete)."""
    done = root / "COMPLETE"
    paths = [root / f"shard-{s:06d}.tar" for s in range(SHARDS)]
    if done.exists():
        return paths
    root.mkdir(parents=True, exist_ok=True)
    per_shard = SAMPLES // SHARDS
    extra = SAMPLES - per_shard * SHARDS
    key = 0
    for s, path in enumerate(paths):
        with tarfile.open(path, "w") as tar:
            for _ in range(per_shard + (1 if s < extra else 0)):
                size = JPG - 2048 + (key * 37) % 4096
                for ext, data in (("jpg", os.urandom(size)), ("cls", str(key % 1000).encode())):
                    info = tarfile.TarInfo(f"{key:08d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                key += 1
    done.write_text("ok\n")
    return paths


def epoch(make: Callable[[], Iterable[list[Any]]], server_pid: int | None) -> tuple[float, int, float, float]:
    """(seconds, items, client CPU seconds (torch's workers included), server CPU seconds)."""
    before = cpu_seconds(server_pid)
    start = time.perf_counter()
    items = 0
    for batch in make():
        items += len(batch)
    seconds = time.perf_counter() - start
    after = cpu_seconds(server_pid)
    return seconds, items, after[0] - before[0], after[1] - before[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="measured epochs per contender (after a warm-up)")
    parser.add_argument("--only", default="", help="comma-separated contender names")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--dlrs", help="the dlrs executable that serves (see benches/http_loaders.py)")
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "dlrs-tar-bench"), help="the shards")
    parser.add_argument("--keep-cache", action="store_true", help="keep the cache and indexes after the run")
    parser.add_argument("--cache-root", help="where the caches are made (default: a temporary directory)")
    parser.add_argument(
        "--item-concurrency", type=int, default=64, help="items in flight per worker (2 workers) for our loaders"
    )
    args = parser.parse_args()

    load_at_start = os.getloadavg()
    dlrs = find_dlrs(args.dlrs)
    if dlrs is None:
        sys.exit("no dlrs with a serve subcommand: pass one with --dlrs or $DLRS_BIN")
    root = Path(args.dir)
    paths = make_shards(root / "shards")
    work = Path(tempfile.mkdtemp(prefix="dlrs-tar-bench-", dir=args.cache_root))
    server = DlrsServer(dlrs, DELAY)
    server.argv += ["--dir", str(root / "shards")]
    results: dict[str, dict[str, float]] = {}
    try:
        with server:
            urls = [f"{server.base_url}/{p.name}" for p in paths]
            started = time.perf_counter()
            cold = TarDataset(urls, index_dir=work / "index")
            index_seconds = time.perf_counter() - started
            started = time.perf_counter()
            TarDataset(urls, index_dir=work / "index")
            reopen_seconds = time.perf_counter() - started
            assert len(cold) == SAMPLES, len(cold)
            if not args.json:
                print(f"index of {SHARDS} shards: {index_seconds:.2f} s cold, {reopen_seconds:.3f} s kept", flush=True)

            def ours(dataset: Any) -> Callable[[], Iterable[list[Any]]]:
                return lambda: PyDataloader(
                    dataset,
                    batch_size=BATCH,
                    shuffle=True,
                    num_workers=2,
                    item_concurrency=args.item_concurrency,
                    collate_fn=identity,
                )

            chosen: dict[str, Callable[[], Iterable[list[Any]]]] = {
                "TarDataset-http": ours(TarDataset(urls, index_dir=work / "index")),
            }
            if wds is not None and tud is not None:

                def webdataset_torch() -> Iterable[list[Any]]:
                    pipeline = wds.WebDataset(urls, shardshuffle=len(urls), empty_check=False).shuffle(1000)
                    return tud.DataLoader(pipeline, batch_size=BATCH, num_workers=2, collate_fn=identity)

                chosen["webdataset-torch-2"] = webdataset_torch
            per_sample = [f"{server.base_url}/bytes/{JPG}?i={i}" for i in range(SAMPLES)]
            chosen["HttpDataset-per-sample"] = ours(HttpDataset(per_sample))
            cached = TarDataset(urls, index_dir=work / "index", cache_dir=work / "cache")
            chosen["TarDataset-cached"] = ours(cached)
            # Every epoch of this one fills a new, empty cache (datasets opened beforehand).
            fills = [
                TarDataset(urls, index_dir=work / "index", cache_dir=work / f"fill-{n}") for n in range(args.rounds + 1)
            ]
            chosen["TarDataset-cache-fill"] = lambda: ours(fills.pop())()
            chosen["TarDataset-files"] = ours(TarDataset(paths, index_dir=work / "index"))
            if args.only:
                chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
            proc = server._proc
            server_pid = proc.pid if proc is not None and sys.platform.startswith("linux") else None
            warmup: dict[str, float] = {}
            for name, make in chosen.items():
                seconds, items, _, _ = epoch(make, server_pid)  # for the cache: epoch 1, which fills it
                assert items == SAMPLES, (name, items)
                warmup[name] = seconds
                if not args.json:
                    print(f"{name:24} warm-up {seconds:7.2f} s", flush=True)
            runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in chosen}
            for _ in range(args.rounds):
                for name, make in chosen.items():
                    seconds, items, client, served = epoch(make, server_pid)
                    assert items == SAMPLES, (name, items)
                    runs[name].append((seconds, client, served))
            for name, measured in runs.items():
                seconds = statistics.median(m[0] for m in measured)
                client = statistics.median(m[1] for m in measured)
                served = statistics.median(m[2] for m in measured)
                results[name] = {
                    "seconds": seconds,
                    "samples_per_s": SAMPLES / seconds,
                    "client_cpu_s": client,
                    "server_cpu_s": served,
                    "warmup_seconds": warmup[name],
                    "runs": [m[0] for m in measured],
                }
                if not args.json:
                    times = ", ".join(f"{m[0]:.2f}" for m in measured)
                    print(
                        f"{name:24} {seconds:7.2f} s/epoch  {SAMPLES / seconds:7.0f} samples/s  "
                        f"CPU: client {client:5.2f} s, server {served:5.2f} s  (runs {times})"
                    )
            if "TarDataset-cached" in chosen:
                results["TarDataset-cached"]["cache"] = cached.cache_stats()
    finally:
        if not args.keep_cache:
            shutil.rmtree(work, ignore_errors=True)
    ratios = {}
    r = results
    if "TarDataset-http" in r and "webdataset-torch-2" in r:
        ratios["webdataset_over_tar_http"] = r["webdataset-torch-2"]["seconds"] / r["TarDataset-http"]["seconds"]
    if "TarDataset-http" in r and "HttpDataset-per-sample" in r:
        ratios["per_sample_over_tar_http"] = r["HttpDataset-per-sample"]["seconds"] / r["TarDataset-http"]["seconds"]
    if "TarDataset-cached" in r and "TarDataset-files" in r:
        ratios["cached_over_files"] = r["TarDataset-cached"]["seconds"] / r["TarDataset-files"]["seconds"]
    if "TarDataset-cache-fill" in r and "TarDataset-http" in r:
        ratios["cache_fill_over_tar_http"] = r["TarDataset-cache-fill"]["seconds"] / r["TarDataset-http"]["seconds"]
    meta = {
        "samples": SAMPLES,
        "shards": SHARDS,
        "jpg_bytes": JPG,
        "batch_size": BATCH,
        "delay_s": DELAY,
        "index_cold_s": index_seconds,
        "index_kept_s": reopen_seconds,
        "rounds": args.rounds,
        "in_flight": 2 * args.item_concurrency,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": len(os.sched_getaffinity(0)),
        "loadavg_start": load_at_start,
        "loadavg": os.getloadavg(),
        "server": " ".join(server.argv),
        "served": server.summary,
    }
    if args.json:
        print(json.dumps({"meta": meta, "results": results, "ratios": ratios}, indent=2))
    else:
        for name, value in ratios.items():
            print(f"{name}: {value:.2f}x")
        loads = f"load average {meta['loadavg_start']} at the start, {meta['loadavg']} at the end"
        print(f"python {meta['python']}, {meta['cpus']} CPUs, {loads}")
        print(f"server: {meta['server']}; {meta['served']}")


if __name__ == "__main__":
    main()
