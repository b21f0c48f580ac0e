"""`dlrs prefetch` against the floors it cannot beat, side by side in one run.

    python benches/prefetch.py                       # a table, on the disk of the temporary dir
    python benches/prefetch.py --dir /dev/shm --json # on tmpfs, JSON

Work: 2,048 items of 64 KiB from `dlrs serve --latency-ms 10` (each answer waits 10 ms), 64
requests in flight, written into an empty directory. Two floors:

- latency: 2,048 / 64 * 10 ms = 0.32 s; no client with 64 in flight can take less.
- files: a minimal loop that writes the same 2,048 files of 64 KiB the way prefetch does (to
  NAME.part with create-new, then a rename to NAME), one after another, with no network. On a
  slow disk this is the floor, not the network.

Each round runs `dlrs prefetch` as a whole process (start-up included) and the file loop, in
turn, each into a fresh directory (emptied outside the timing); figures are medians over the
rounds, after one warm-up round, with the ratio of each round's pair.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from http_loaders import DlrsServer, find_dlrs

ITEMS = 2048
SIZE = 64 * 1024
IN_FLIGHT = 64
DELAY = 0.01


def fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def prefetch_run(dlrs: str, base_url: str, out: Path) -> float:
    argv = [
        dlrs,
        "prefetch",
        f"{base_url}/bytes/{SIZE}?i={{i}}",
        "-c",
        f"i=0..{ITEMS}",
        "--concurrency",
        str(IN_FLIGHT),
        "--out",
        str(out),
    ]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"dlrs prefetch failed ({done.returncode}): {done.stderr.strip()}")
    written = len(os.listdir(out))
    if written != ITEMS:
        raise RuntimeError(f"dlrs prefetch wrote {written} files, not {ITEMS}")
    return seconds


def files_run(out: Path) -> float:
    body = os.urandom(SIZE)
    width = len(str(ITEMS - 1))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    start = time.perf_counter()
    for i in range(ITEMS):
        path = out / f"{i:0{width}d}"
        part = out / f"{i:0{width}d}.part"
        fd = os.open(part, flags, 0o644)
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.rename(part, path)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the items are written")
    parser.add_argument("--dlrs", help="the dlrs executable (see benches/http_loaders.py)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    dlrs = find_dlrs(args.dlrs)
    if dlrs is None:
        sys.exit("no dlrs with a serve subcommand: pass one with --dlrs or $DLRS_BIN")
    load_at_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="dlrs-prefetch-bench-", dir=args.dir))
    rounds: list[tuple[float, float]] = []
    try:
        with DlrsServer(dlrs, DELAY) as server:
            for r in range(args.rounds + 1):
                ours = prefetch_run(dlrs, server.base_url, fresh(work / "prefetch"))
                floor = files_run(fresh(work / "files"))
                if r > 0:
                    rounds.append((ours, floor))
                if not args.json:
                    label = "warm-up" if r == 0 else f"round {r}"
                    line = f"{label:8} prefetch {ours:6.3f} s  files {floor:6.3f} s  ratio {ours / floor:5.2f}"
                    print(line, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ours_s = statistics.median(r[0] for r in rounds)
    floor_s = statistics.median(r[1] for r in rounds)
    latency = ITEMS / IN_FLIGHT * DELAY
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_at_start": load_at_start},
        "dir": args.dir,
        "items": ITEMS,
        "item_bytes": SIZE,
        "in_flight": IN_FLIGHT,
        "prefetch_seconds": ours_s,
        "files_floor_seconds": floor_s,
        "latency_bound_seconds": latency,
        "ratio_to_files_floor": ours_s / floor_s,
        "ratio_to_latency_bound": ours_s / latency,
        "round_ratios": [o / f for o, f in rounds],
        "rounds": [{"prefetch": o, "files": f} for o, f in rounds],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    ratios = ", ".join(f"{x:.2f}" for x in result["round_ratios"])
    print(
        f"median: prefetch {ours_s:.3f} s, files floor {floor_s:.3f} s ({ours_s / floor_s:.2f}x; rounds {ratios}), "
        f"latency bound {latency:.2f} s ({ours_s / latency:.2f}x)"
    )


if __name__ == "__main__":
    main()
