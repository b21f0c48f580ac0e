"""Network-bound loading, side by side in one run: 2,048 items of 64 KiB from a loopback HTTP
server that answers each request after 10 ms, batches of 64, a fresh loader per epoch.

    python benches/http_loaders.py            # a table
    python benches/http_loaders.py --json     # JSON
    python benches/http_loaders.py --epochs 5 --only HttpDataset,torch-8

Contenders: HttpDataset (64 requests in flight: num_workers=2, item_concurrency=32), a
PyAsyncDataset on aiohttp (same settings; left out without aiohttp), a PyDataset on urllib with
item_concurrency (64 threads), and torch's DataLoader with 8 and 16 worker processes running the
same urllib dataset (left out without torch). The server runs in a child process
(tests/servers/http.py's HttpServerProcess), so it does not compete for this process's GIL.

The latency bound is 2,048 / 64 * 10 ms = 0.32 s: with 64 requests in flight, an epoch cannot
take less. Figures are medians over the epochs, after one warm-up epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from dataloader_rs import HttpDataset, PyAsyncDataset, PyDataloader, PyDataset

from servers.http import HttpServerProcess

try:
    import aiohttp
except ImportError:  # pragma: no cover - optional
    aiohttp = None
try:
    import torch.utils.data as tud
except ImportError:  # pragma: no cover - optional
    tud = None

ITEMS = 2048
SIZE = 64 * 1024
BATCH = 64
DELAY = 0.01
BOUND = ITEMS / 64 * DELAY  # 0.32 s


def identity(samples: list[Any]) -> list[Any]:
    return samples


class Urllib(PyDataset[bytes]):
    """One urllib request per item (a new connection each time, as most sync code does)."""

    def __init__(self, urls: list[str]) -> None:
        super().__init__()
        self.urls = urls

    def __len__(self) -> int:
        return len(self.urls)

    def __getitem__(self, index: int) -> bytes:
        with urllib.request.urlopen(self.urls[index], timeout=30) as response:
            return response.read()


if tud is not None:

    class TorchUrllib(tud.Dataset):  # type: ignore[misc,name-defined]
        """The same urllib dataset for torch's DataLoader."""

        def __init__(self, urls: list[str]) -> None:
            self.urls = urls

        def __len__(self) -> int:
            return len(self.urls)

        def __getitem__(self, index: int) -> bytes:
            with urllib.request.urlopen(self.urls[index], timeout=30) as response:
                return response.read()


class Aiohttp(PyAsyncDataset[bytes]):
    """One aiohttp session per loader, made on the loader's event loop, closed by aclose()."""

    def __init__(self, urls: list[str]) -> None:
        super().__init__()
        self.urls = urls
        self.session: Any = None

    def __len__(self) -> int:
        return len(self.urls)

    async def __getitem__(self, index: int) -> bytes:
        if self.session is None:
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        async with self.session.get(self.urls[index]) as response:
            return await response.read()

    async def aclose(self) -> None:
        if self.session is not None:
            await self.session.close()


def epoch(make_loader: Callable[[], Iterable[list[bytes]]]) -> tuple[float, float]:
    """(seconds for the epoch, seconds to the first batch), loader construction included."""
    start = time.perf_counter()
    first = None
    n = 0
    for batch in make_loader():
        if first is None:
            first = time.perf_counter() - start
        if len(batch[0]) != SIZE:
            raise AssertionError(f"an item of {len(batch[0])} bytes")
        n += len(batch)
    total = time.perf_counter() - start
    if n != ITEMS:
        raise AssertionError(f"{n} items")
    return total, first or total


def contenders(urls: list[str]) -> dict[str, Callable[[], Iterable[list[bytes]]]]:
    # The dataset is made once, as a user would; its client keeps connections open across
    # loaders. The loader (its runtime, its threads) is made fresh for every epoch.
    http = HttpDataset(urls)
    out: dict[str, Callable[[], Iterable[list[bytes]]]] = {
        "HttpDataset": lambda: PyDataloader(http, batch_size=BATCH, num_workers=2, item_concurrency=32),
    }
    if aiohttp is not None:
        out["PyAsyncDataset+aiohttp"] = lambda: PyDataloader(
            Aiohttp(urls), batch_size=BATCH, num_workers=2, item_concurrency=32
        )
    out["PyDataset+urllib"] = lambda: PyDataloader(
        Urllib(urls), batch_size=BATCH, num_workers=2, item_concurrency=32, collate_fn=identity
    )
    if tud is not None:
        for workers in (8, 16):
            out[f"torch-{workers}"] = lambda w=workers: tud.DataLoader(
                TorchUrllib(urls), batch_size=BATCH, num_workers=w, collate_fn=identity
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3, help="measured epochs per contender (after a warm-up)")
    parser.add_argument("--only", default="", help="comma-separated contender names")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    results: dict[str, dict[str, float]] = {}
    with HttpServerProcess(delay=DELAY) as server:
        urls = [server.item_url(i, size=SIZE) for i in range(ITEMS)]
        chosen = contenders(urls)
        if args.only:
            chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
        for name, make in chosen.items():
            epoch(make)  # warm-up: imports, the first connections, torch's fork machinery
            runs = [epoch(make) for _ in range(args.epochs)]
            seconds = statistics.median(r[0] for r in runs)
            first = statistics.median(r[1] for r in runs)
            results[name] = {"seconds": seconds, "first_batch": first, "ratio_to_bound": seconds / BOUND}
            if not args.json:
                line = f"{name:24} {seconds:7.3f} s/epoch  first batch {first * 1000:7.1f} ms"
                print(f"{line}  {seconds / BOUND:5.2f}x bound", flush=True)
    meta = {
        "items": ITEMS,
        "item_bytes": SIZE,
        "batch_size": BATCH,
        "delay_s": DELAY,
        "bound_s": BOUND,
        "epochs": args.epochs,
        "python": platform.python_version(),
        "cpus": len(os.sched_getaffinity(0)),
        "loadavg": os.getloadavg(),
    }
    if args.json:
        print(json.dumps({"meta": meta, "results": results}, indent=2))
    else:
        print(f"bound {BOUND:.2f} s; python {meta['python']}, {meta['cpus']} CPUs, load average {meta['loadavg']}")


if __name__ == "__main__":
    main()
