"""Network-bound loading, side by side in one run: 2,048 items of 64 KiB from a loopback HTTP
server that answers each request after 10 ms, batches of 64, a fresh loader per epoch.

    python benches/http_loaders.py            # a table
    python benches/http_loaders.py --json     # JSON
    python benches/http_loaders.py --epochs 5 --only HttpDataset,torch-8
    python benches/http_loaders.py --dlrs target/release/dlrs
    python benches/http_loaders.py --latency-ms 0 --only urllib-sequential,HttpDataset  # CPU costs

Contenders: HttpDataset (64 requests in flight: num_workers=2, item_concurrency=32; and
HttpDataset-1x64, num_workers=1, item_concurrency=64, whose first batch needs one round of
requests instead of two, but whose batches do not overlap; HttpDataset-4x16, four batches
at once of 16 requests each; and HttpDataset-2x64/64, two batches of up to 64 requests sharing
items_in_flight=64, the earlier batch first), a PyAsyncDataset on aiohttp (same
settings; left out without aiohttp) and aiohttp alone (no loader: its floor on one thread),
a PyDataset on urllib with item_concurrency (64 threads),
and torch's DataLoader with 8 and 16 worker processes running the same urllib dataset (left out
without torch).

The server is `dlrs serve` (Rust, one thread, latency timed to about 0.1 ms, never early) in a
child process: --dlrs, else $DLRS_BIN, else the `dlrs` console script beside this interpreter or
on PATH (a dlrs older than `serve`, such as 0.2.0's, cannot: pass a newer one with --dlrs).

The latency bound is 2,048 / 64 * 10 ms = 0.32 s: with 64 requests in flight, an epoch cannot
take less. Nor can it take less than its CPU work (client and server, measured per epoch)
spread over every CPU: the "floor" column. Figures are medians over the epochs, after one
warm-up epoch.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import select
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any, Self

from dataloader_rs import HttpDataset, PyAsyncDataset, PyDataloader, PyDataset

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


class DlrsServer:
    """`dlrs serve --latency-ms <ms>` in a child process; stops when its stdin is closed."""

    def __init__(self, dlrs: str, delay: float) -> None:
        self.argv = [dlrs, "serve", "--latency-ms", str(delay * 1000)]
        self.base_url = ""
        self.summary = ""
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> Self:
        proc = subprocess.Popen(
            self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline().strip() if ready else ""
        if not line.startswith("http://"):
            proc.kill()
            _, err = proc.communicate()
            raise RuntimeError(f"{' '.join(self.argv)} did not start: {(line or err).strip()!r}")
        self.base_url = line
        self._proc = proc
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            _, err = proc.communicate(input="", timeout=15)  # closes stdin: the server stops
            self.summary = err.strip()

    def item_url(self, i: int) -> str:
        return f"{self.base_url}/bytes/{SIZE}?i={i}"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def find_dlrs(given: str | None) -> str | None:
    """The `dlrs` to serve with: given, $DLRS_BIN, beside this interpreter, or on PATH; None if
    there is none or it has no `serve` subcommand (an older build)."""
    if given:
        path = shutil.which(given)
        if path is None or not serves(path):
            sys.exit(f"{given} is not a dlrs with a serve subcommand")
        return path
    candidates = [os.environ.get("DLRS_BIN"), os.path.join(os.path.dirname(sys.executable), "dlrs"), "dlrs"]
    for candidate in candidates:
        path = candidate and shutil.which(candidate)
        if path and serves(path):
            return path
    return None


def serves(dlrs: str) -> bool:
    probe = subprocess.run([dlrs, "serve", "--help"], capture_output=True, timeout=60, check=False)
    return probe.returncode == 0


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


def aiohttp_alone(urls: list[str]) -> list[list[bytes]]:
    async def run() -> list[bytes]:
        slots = asyncio.Semaphore(64)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def get(url: str) -> bytes:
                async with slots, session.get(url) as response:
                    return await response.read()

            return await asyncio.gather(*(get(u) for u in urls))

    items = asyncio.run(run())
    return [items[i : i + BATCH] for i in range(0, len(items), BATCH)]


def cpu_seconds(pid: int | None) -> tuple[float, float]:
    """(CPU seconds of this process and its ended children such as torch's workers, CPU seconds
    of the server process `pid`; 0 when it is not known)."""
    own = sum(
        r.ru_utime + r.ru_stime
        for r in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    )
    served = 0.0
    if pid is not None:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        served = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own, served


def epoch(make_loader: Callable[[], Iterable[list[bytes]]], server_pid: int | None = None) -> tuple[float, ...]:
    """(seconds for the epoch, seconds to the first batch, client CPU seconds, server CPU
    seconds), loader construction included."""
    cpu_before = cpu_seconds(server_pid)
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
    cpu_after = cpu_seconds(server_pid)
    if n != ITEMS:
        raise AssertionError(f"{n} items")
    return total, first or total, cpu_after[0] - cpu_before[0], cpu_after[1] - cpu_before[1]


def contenders(urls: list[str], sequential: bool) -> dict[str, Callable[[], Iterable[list[bytes]]]]:
    # The dataset is made once, as a user would; its client keeps connections open across
    # loaders. The loader (its runtime, its threads) is made fresh for every epoch.
    http = HttpDataset(urls)
    out: dict[str, Callable[[], Iterable[list[bytes]]]] = {
        "HttpDataset": lambda: PyDataloader(http, batch_size=BATCH, num_workers=2, item_concurrency=32),
        "HttpDataset-1x64": lambda: PyDataloader(http, batch_size=BATCH, num_workers=1, item_concurrency=64),
        # The same 64 in flight over more batches at once: their waves of answers fall at
        # different times, so one batch's CPU work overlaps another's wait.
        "HttpDataset-4x16": lambda: PyDataloader(http, batch_size=BATCH, num_workers=4, item_concurrency=16),
        # Two batches share 64 slots, the earlier first: the first batch takes one round, and
        # the next starts on the slots the current one leaves as its answers arrive.
        "HttpDataset-2x64/64": lambda: PyDataloader(
            http, batch_size=BATCH, num_workers=2, item_concurrency=64, items_in_flight=64
        ),
    }
    if aiohttp is not None:
        out["PyAsyncDataset+aiohttp"] = lambda: PyDataloader(
            Aiohttp(urls), batch_size=BATCH, num_workers=2, item_concurrency=32
        )
    if aiohttp is not None:
        # No loader: aiohttp on an event loop of the calling thread, 64 requests in flight, the
        # batches made when all are in (its first batch is its epoch). The floor of the async
        # dataset above: the same requests on one thread with nothing else.
        out["aiohttp-alone"] = lambda: aiohttp_alone(urls)
    out["PyDataset+urllib"] = lambda: PyDataloader(
        Urllib(urls), batch_size=BATCH, num_workers=2, item_concurrency=32, collate_fn=identity
    )
    if sequential:
        # One request at a time, on the calling thread: with --latency-ms 0, what the requests
        # themselves cost in CPU (the floor of any loader running this dataset), without threads.
        out["urllib-sequential"] = lambda: PyDataloader(Urllib(urls), batch_size=BATCH, collate_fn=identity)
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
    parser.add_argument("--dlrs", help="the dlrs executable that serves (default: see above)")
    parser.add_argument(
        "--latency-ms", type=float, default=DELAY * 1000, help="the server's latency (0: measure CPU costs)"
    )
    args = parser.parse_args()

    load_at_start = os.getloadavg()
    dlrs = find_dlrs(args.dlrs)
    if dlrs is None:
        sys.exit("no dlrs with a serve subcommand: pass one with --dlrs or $DLRS_BIN")
    delay = args.latency_ms / 1000
    bound = ITEMS / 64 * delay
    server = DlrsServer(dlrs, delay)
    results: dict[str, dict[str, float]] = {}
    with server:
        urls = [server.item_url(i) for i in range(ITEMS)]
        chosen = contenders(urls, sequential=delay == 0 or "urllib-sequential" in args.only.split(","))
        if args.only:
            chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
        proc = server._proc
        server_pid = proc.pid if proc is not None and sys.platform.startswith("linux") else None
        cpus = len(os.sched_getaffinity(0))
        for name, make in chosen.items():
            epoch(make)  # warm-up: imports, the first connections, torch's fork machinery
            runs = [epoch(make, server_pid) for _ in range(args.epochs)]
            seconds = statistics.median(r[0] for r in runs)
            first = statistics.median(r[1] for r in runs)
            client_cpu = statistics.median(r[2] for r in runs)
            server_cpu = statistics.median(r[3] for r in runs)
            results[name] = {
                "seconds": seconds,
                "first_batch": first,
                "ratio_to_bound": seconds / bound if bound else None,
                "client_cpu_s": client_cpu,
                "server_cpu_s": server_cpu,
                # The epoch cannot take less wall time than its CPU work spread over every CPU.
                "cpu_floor_s": (client_cpu + server_cpu) / cpus,
            }
            if not args.json:
                line = f"{name:24} {seconds:7.3f} s/epoch  first batch {first * 1000:7.1f} ms"
                floor = results[name]["cpu_floor_s"]
                cpu = f"CPU: client {client_cpu:.2f} s, server {server_cpu:.2f} s, floor {floor:.2f} s"
                ratio = f"{seconds / bound:5.2f}x bound" if bound else "no latency"
                print(f"{line}  {ratio}  {cpu}", flush=True)
    meta = {
        "items": ITEMS,
        "item_bytes": SIZE,
        "batch_size": BATCH,
        "delay_s": delay,
        "bound_s": bound,
        "epochs": args.epochs,
        "python": platform.python_version(),
        "cpus": len(os.sched_getaffinity(0)),
        "loadavg_start": load_at_start,
        "loadavg": os.getloadavg(),
        "server": " ".join(server.argv),
        "served": server.summary,
        # The spec's benchmarks ran with its allocator settings for every loader; see BENCH.md.
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES"),
    }
    if args.json:
        print(json.dumps({"meta": meta, "results": results}, indent=2))
    else:
        loads = f"load average {meta['loadavg_start']} at the start, {meta['loadavg']} at the end"
        print(f"bound {bound:.2f} s; python {meta['python']}, {meta['cpus']} CPUs, {loads}")
        print(f"server: {meta['server']}; {meta['served']}")


if __name__ == "__main__":
    main()
