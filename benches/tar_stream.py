"""Tar shards of JPEGs read in order over a high-latency server, decoded and augmented (issue 28,
point 5): `TarStream` against webdataset's `WebLoader`.

    python benches/tar_stream.py                      # a table
    python benches/tar_stream.py --json --rounds 3

Data: 64 shards of `--per-shard` samples (default 40), each a 500x375 JPEG (quality 90, 4:2:0,
photo-like content from benches/augment.py; 64 distinct images, reused) and a "cls" label,
written by Python's tarfile under --dir (made once, then reused) and served by
`dlrs serve --latency-ms 10 --dir` (each answer waits 10 ms). Both read each shard with one GET,
in a shard order shuffled every epoch, through a 1,000-sample shuffle buffer, and run decode,
RandomResizedCrop(224), RandomHorizontalFlip, float32, Normalize, CHW, in batches of 64:

- TarStream: `TarStream(urls, shuffle_shards=True)` in `PyDataloader` with 2 worker threads,
  a reader per worker; the Rust transforms on the "jpg" member, an `ImageCollator` batch and
  the labels.
- webdataset-WebLoader-2: `wds.WebDataset(urls, shardshuffle=64).shuffle(1000)` decoding with
  Pillow, torchvision v2 transforms, in `wds.WebLoader` with 2 worker processes.

Each round runs one epoch of each in turn, after one warm-up epoch each; figures are medians.
Goal: TarStream at least 2.5x webdataset-WebLoader-2. Build the extension with
`maturin develop --release` first.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image as PILImage

from dataloader_rs import ImageCollator, PyDataloader, TarStream
from dataloader_rs import transforms as T

sys.path.insert(0, os.path.dirname(__file__))
from augment import MEAN, STD, photo
from http_loaders import DlrsServer, find_dlrs

SHARDS = 64
BATCH = 64
DELAY = 0.01
SIZE = (375, 500)


def make_shards(root: Path, per_shard: int) -> list[Path]:
    """The shards under ``root``, written once (a marker file names their sample count)."""
    done = root / f"COMPLETE-{per_shard}"
    paths = [root / f"shard-{s:06d}.tar" for s in range(SHARDS)]
    if done.exists():
        return paths
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    images = []
    for _ in range(64):
        out = io.BytesIO()
        PILImage.fromarray(photo(*SIZE, rng), "RGB").save(out, "JPEG", quality=90, subsampling="4:2:0")
        images.append(out.getvalue())
    key = 0
    for path in paths:
        with tarfile.open(path, "w") as tar:
            for _ in range(per_shard):
                for ext, data in (("jpg", images[key % len(images)]), ("cls", str(key % 1000).encode())):
                    info = tarfile.TarInfo(f"{key:08d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                key += 1
    done.write_text("ok\n")
    return paths


def chain() -> T.Compose:
    return T.Compose(
        [
            T.Decode(),
            T.ToRgb(),
            T.RandomResizedCrop(224),
            T.RandomHorizontalFlip(),
            T.ToFloat(),
            T.Normalize(MEAN, STD),
            T.ToChw(),
        ]
    )


def ours(urls: list[str]) -> Callable[[], Iterable[Any]]:
    stream = TarStream(urls, shuffle_shards=True, seed=0)
    images = chain()

    def transform(sample: dict[str, Any]) -> tuple[Any, int]:
        return images(sample["jpg"]), int(sample["cls"])

    loader = PyDataloader(
        stream,
        batch_size=BATCH,
        num_workers=2,
        stream_readers="per_worker",
        shuffle_buffer=1000,
        transform=transform,
        collate_fn=ImageCollator(buffers=6),
    )
    return lambda: loader


def webloader(urls: list[str]) -> Callable[[], Iterable[Any]]:
    import torch
    import webdataset as wds
    from torchvision.transforms import v2

    augment = v2.Compose(
        [
            v2.ToImage(),
            v2.RandomResizedCrop(224, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(MEAN, STD),
        ]
    )

    def make() -> Iterable[Any]:
        pipeline = (
            wds.WebDataset(urls, shardshuffle=len(urls), empty_check=False)
            .shuffle(1000)
            .decode("pil")
            .to_tuple("jpg", "cls")
            .map_tuple(augment, lambda c: int(c))
            .batched(BATCH, partial=True)
        )
        return wds.WebLoader(pipeline, batch_size=None, num_workers=2)

    return make


def count(batch: Any) -> int:
    """Images in a batch: an ImageBatch (and its labels), or webdataset's (images, labels)."""
    first = batch[0] if isinstance(batch, (tuple, list)) else batch
    return len(first)


def epoch(make: Callable[[], Iterable[Any]]) -> tuple[float, int]:
    started = time.perf_counter()
    n = sum(count(b) for b in make())
    return time.perf_counter() - started, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "dlrs-tar-stream-bench"))
    parser.add_argument("--dlrs", help="the dlrs executable that serves (see benches/http_loaders.py)")
    parser.add_argument("--per-shard", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", help="comma-separated contenders")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    dlrs = find_dlrs(args.dlrs)
    if dlrs is None:
        sys.exit("no dlrs with a serve subcommand: pass one with --dlrs or $DLRS_BIN")
    load_at_start = os.getloadavg()
    paths = make_shards(Path(args.dir), args.per_shard)
    samples = SHARDS * args.per_shard
    server = DlrsServer(dlrs, DELAY)
    server.argv += ["--dir", str(Path(args.dir))]
    results: dict[str, dict[str, Any]] = {}
    with server:
        urls = [f"{server.base_url}/{p.name}" for p in paths]
        chosen = {"TarStream": ours(urls)}
        try:
            chosen["webdataset-WebLoader-2"] = webloader(urls)
        except ImportError as e:
            print(f"webdataset-WebLoader-2 left out: {e}", file=sys.stderr)
        if args.only:
            chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
        for name, make in chosen.items():
            seconds, n = epoch(make)
            assert n == samples, (name, n)
            if not args.json:
                print(f"{name:24} warm-up {seconds:7.2f} s", flush=True)
        runs: dict[str, list[float]] = {name: [] for name in chosen}
        for _ in range(args.rounds):
            for name, make in chosen.items():
                seconds, n = epoch(make)
                assert n == samples, (name, n)
                runs[name].append(seconds)
        for name, measured in runs.items():
            seconds = statistics.median(measured)
            results[name] = {"seconds": seconds, "samples_per_s": samples / seconds, "runs": measured}
            if not args.json:
                times = ", ".join(f"{m:.2f}" for m in measured)
                print(f"{name:24} {seconds:7.2f} s/epoch  {samples / seconds:7.0f} samples/s  (runs {times})")
    ratios = {}
    if "TarStream" in results and "webdataset-WebLoader-2" in results:
        ratios["webloader_over_tar_stream"] = (
            results["webdataset-WebLoader-2"]["seconds"] / results["TarStream"]["seconds"]
        )
    meta = {
        "samples": samples,
        "shards": SHARDS,
        "batch_size": BATCH,
        "delay_s": DELAY,
        "rounds": args.rounds,
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
        print(f"python {meta['python']}, {meta['cpus']} CPUs, load average {load_at_start} at the start")
        print(f"server: {meta['server']}; {meta['served']}")


if __name__ == "__main__":
    main()
