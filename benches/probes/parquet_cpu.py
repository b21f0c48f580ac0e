"""The CPU the Parquet stream benchmark's work costs, against torch's epoch time: bounds on
what any loader that runs the same Python code can reach on this machine.

The work of one row is the dataset's own iteration (pyarrow to a dict) and its tokenising; a
loader adds to it, never removes from it. With `c` CPUs, no loader finishes an epoch faster than
`cpu / c`, where `cpu` is the work's CPU time on one thread (all threads of the process counted,
so tokenizers' own threads in `encode_batch` are included): `torch's epoch ÷ (cpu / c)` bounds
any design. Threads of one process are bounded again by the GIL: the same work split between
two threads of this process (each half of the shards, read and tokenised) takes what it takes,
and `torch's epoch ÷ that` bounds a loader of threads on this build of CPython.

    python benches/probes/parquet_cpu.py [--items 50000] [--tokenise row|batch]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))

import streams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--tokenise", choices=["row", "batch"], default="row")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import datasets

    per_batch = args.tokenise == "batch"
    cpus = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        runs, tokenizer = streams.parquet_runs(args.items, args.batch_size, tmp, per_batch)
        paths = sorted(str(p) for p in Path(tmp).glob("*.parquet"))
        ds = datasets.load_dataset("parquet", data_files=paths, split="train", streaming=True)

        def tokenise(rows: list[dict[str, Any]]) -> None:
            if per_batch:
                for i in range(0, len(rows), args.batch_size):
                    tokenizer.encode_batch([r["text"] for r in rows[i : i + args.batch_size]])
            else:
                for r in rows:
                    tokenizer.encode(r["text"])

        cpu_iter, cpu_all, torch_wall = [], [], []
        for _ in range(args.rounds):
            start = time.process_time()
            rows = list(ds)
            cpu_iter.append(time.process_time() - start)
            start = time.process_time()
            tokenise(rows)
            cpu_all.append(cpu_iter[-1] + time.process_time() - start)
            torch_wall.append(runs["torch, 2 workers"]())
        halves = [paths[0::2], paths[1::2]]
        split = [datasets.load_dataset("parquet", data_files=h, split="train", streaming=True) for h in halves]

        threaded = []
        for _ in range(args.rounds):
            pair = [threading.Thread(target=lambda p=part: tokenise(list(p))) for part in split]
            start = time.perf_counter()
            for t in pair:
                t.start()
            for t in pair:
                t.join()
            threaded.append(time.perf_counter() - start)
    cpu, wall, two = min(cpu_all), min(torch_wall), min(threaded)
    print(f"rows: {args.items}, tokenised per {args.tokenise}, CPUs: {cpus}")
    print(f"CPU of the work: iteration {min(cpu_iter) * 1e3:.0f} ms, with tokenising {cpu * 1e3:.0f} ms")
    print(f"torch, 2 workers: {wall * 1e3:.0f} ms an epoch (best of {args.rounds})")
    print(f"the most any loader can be faster than torch here: {wall / (cpu / cpus):.2f}x")
    print(f"the work on two threads of this process: {two * 1e3:.0f} ms")
    print(f"the most a loader of threads can be faster than torch on this build: {wall / two:.2f}x")


if __name__ == "__main__":
    main()
