"""How the depth of the prefetch sets the 2-worker figure of trivial items under the GIL.

Each batch of trivial items takes a few microseconds to make; what costs is handing the
interpreter and the batch between threads. A worker loads batches back to back while the ring
has room, so a deeper ring means more batches per hand-over.

    python benches/probes/prefetch_depth.py [--items 100000] [--epochs 30] [--workers 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compare import Ints  # benches/, put on the path above

from dataloader_rs import PyDataloader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    ds = Ints(args.items)
    for depth in (1, 2, 4, 8, 16, 32):
        loader = PyDataloader(ds, batch_size=64, num_workers=args.workers, collate_fn=list, prefetch_depth=depth)
        times = []
        for _ in range(args.epochs):
            start = time.perf_counter()
            for _batch in loader:
                pass
            times.append(time.perf_counter() - start)
        times.sort()
        print(
            f"prefetch_depth {depth:2}: epoch min {times[0] * 1e3:.1f} ms, "
            f"median {times[len(times) // 2] * 1e3:.1f} ms, max {times[-1] * 1e3:.1f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
