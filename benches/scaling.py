"""Do two worker threads run Python in parallel? Speed-up of 2 workers over 0, per interpreter.

Two workloads, with the same dataset code under dataloader-rs and (where installed) torch:
- ``python``: pure-Python CPU work in ``__getitem__`` (a tokeniser over a per-thread table,
  ``threading.local``, as the spec advises for free-threaded CPython);
- ``arrays``: array samples: a ``.npy`` file read and NumPy arithmetic per item.

    python benches/scaling.py                 # both workloads, a table
    python benches/scaling.py python --json
    python benches/scaling.py arrays --allocator tuned   # only with the spec's GLIBC_TUNABLES

Run it with CPython 3.11 (GIL) and 3.13t or 3.14t (free-threaded: `DLRS_PYFT_VERSION=3.14t
scripts/python-ft.sh venv`) to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

from dataloader_rs import PyDataloader, PyDataset

try:
    import torch.utils.data as tud
except ImportError:  # pragma: no cover - torch is optional
    tud = None

WORDS = [f"w{i}" for i in range(2000)]

# The allocator settings the spec gives for array samples on glibc (NumPy allocates with malloc):
# memory freed by one batch is kept for the next instead of going back to the system.
TUNABLES = "glibc.malloc.trim_threshold=67108864:glibc.malloc.mmap_threshold=33554432"


class Tokens(PyDataset[int]):
    """Pure-Python work: build a sentence from a word list and look every word up in a table.
    Each thread builds its own word list (fresh string objects) and table, in a threading.local,
    as the spec advises for free-threaded CPython: objects that several threads read, such as a
    module-level list and its strings, contend on their reference counts there."""

    def __init__(self, n: int, words_per_item: int = 400) -> None:
        super().__init__()
        self.n = n
        self.words_per_item = words_per_item
        self.local = threading.local()

    def __len__(self) -> int:
        return self.n

    def _state(self) -> tuple[list[str], dict[str, int]]:
        state = getattr(self.local, "state", None)
        if state is None:
            words = [w.encode().decode() for w in WORDS]  # new objects, owned by this thread
            state = self.local.state = (words, {w: i for i, w in enumerate(words)})
        return state

    def __getitem__(self, index: int) -> int:
        words, table = self._state()
        n = len(words)
        text = " ".join([words[(index * 7 + k * 13) % n] for k in range(self.words_per_item)])
        return sum([table[w] for w in text.split()])

    def __getstate__(self) -> dict[str, Any]:  # torch's worker processes pickle the dataset
        return {"n": self.n, "words_per_item": self.words_per_item}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["n"], state["words_per_item"])


class Arrays(PyDataset[np.ndarray]):
    """Array samples: read a .npy file, convert and normalise it."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__()
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> np.ndarray:
        a = np.load(self.paths[index]).astype(np.float32)
        return (a - a.mean()) / (a.std() + 1e-6)


def epoch_seconds(loader: Any, repeat: int) -> float:
    def once() -> float:
        start = time.perf_counter()
        for _ in loader:
            pass
        return time.perf_counter() - start

    once()
    return statistics.median(once() for _ in range(repeat))


def measure(name: str, dataset: Any, batch_size: int, repeat: int) -> list[dict[str, Any]]:
    rows = []
    for loader_name, make in (
        ("dataloader-rs", lambda w: PyDataloader(dataset, batch_size=batch_size, num_workers=w, collate_fn=list)),
        (
            "torch",
            None
            if tud is None
            else lambda w: tud.DataLoader(
                dataset, batch_size=batch_size, num_workers=w, collate_fn=list, persistent_workers=w > 0
            ),
        ),
    ):
        if make is None:
            continue
        t0 = epoch_seconds(make(0), repeat)
        t2 = epoch_seconds(make(2), repeat)
        rows.append(
            {"workload": name, "loader": loader_name, "seconds_0": t0, "seconds_2": t2, "speedup_2_workers": t0 / t2}
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", default=["python", "arrays"])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--allocator",
        choices=["default", "tuned", "both"],
        default="both",
        help="glibc malloc as it comes, with the spec's GLIBC_TUNABLES (a child process), or both",
    )
    args = parser.parse_args()

    rows = []
    if args.allocator in ("default", "both"):
        rows += run_workloads(args, parser)
        for r in rows:
            r["allocator"] = "tuned" if os.environ.get("GLIBC_TUNABLES") == TUNABLES else "default"
    if args.allocator in ("tuned", "both") and os.environ.get("GLIBC_TUNABLES") != TUNABLES:
        # The tunables are read when the process starts: measure them in a child process.
        child = [sys.executable, os.path.abspath(__file__), *args.workloads]
        child += ["--items", str(args.items), "--repeat", str(args.repeat), "--allocator", "default", "--json"]
        out = subprocess.run(child, env={**os.environ, "GLIBC_TUNABLES": TUNABLES}, check=True, capture_output=True)
        rows += json.loads(out.stdout)["rows"]
    machine = {
        "python": sys.version.split()[0],
        "gil_enabled": getattr(sys, "_is_gil_enabled", lambda: True)(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "date": time.strftime("%Y-%m-%d"),
        "glibc_tunables": TUNABLES,
    }
    if args.json:
        print(json.dumps({"machine": machine, "rows": rows}, indent=2))
        return
    print(f"# {machine}")
    for r in rows:
        print(
            f"{r['workload']:<8} {r['loader']:<14} {r['allocator']:<8} 0 workers {r['seconds_0'] * 1000:8.1f} ms   "
            f"2 workers {r['seconds_2'] * 1000:8.1f} ms   speed-up {r['speedup_2_workers']:.2f}x"
        )


def run_workloads(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.workloads:
            if name == "python":
                rows += measure(name, Tokens(args.items), 16, args.repeat)
            elif name == "arrays":
                rng = np.random.default_rng(0)
                paths = []
                for i in range(args.items):
                    path = os.path.join(tmp, f"{i}.npy")
                    np.save(path, rng.integers(0, 255, size=(128, 128, 3), dtype=np.uint8))
                    paths.append(path)
                rows += measure(name, Arrays(paths), 16, args.repeat)
            else:
                parser.error(f"unknown workload {name}: python or arrays")
    return rows


if __name__ == "__main__":
    main()
