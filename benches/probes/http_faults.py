"""Page faults of HttpDataset epochs: how much fresh memory the client touches per epoch.

    python benches/probes/http_faults.py [WORKERSxCONCURRENCY=2x32] [--dlrs target/release/dlrs]

2,048 bodies of 64 KiB from `dlrs serve --latency-ms 10` (started here, stopped at the end),
batches of 64, one dataset and a fresh loader per epoch, 5 epochs after a warm-up. Prints the
median epoch against the 0.32 s latency bound, the median first batch and the median minor
page faults of the process per epoch (128 MiB of bodies would be 32,768 pages if every body
landed in fresh memory).
"""

from __future__ import annotations

import argparse
import re
import resource
import statistics
import subprocess
import time

from dataloader_rs import HttpDataset, PyDataloader

BOUND = 2048 / 64 * 0.01


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("shape", nargs="?", default="2x32")
    parser.add_argument("--dlrs", default="dlrs")
    args = parser.parse_args()
    workers, concurrency = (int(x) for x in args.shape.split("x"))
    server = subprocess.Popen(
        [args.dlrs, "serve", "--latency-ms", "10"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        port = re.search(r":(\d+)", server.stdout.readline()).group(1)
        dataset = HttpDataset([f"http://127.0.0.1:{port}/bytes/65536?i={i}" for i in range(2048)])
        epochs, firsts, faults = [], [], []
        for e in range(6):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start = time.perf_counter()
            first = None
            for _ in PyDataloader(dataset, batch_size=64, num_workers=workers, item_concurrency=concurrency):
                if first is None:
                    first = time.perf_counter() - start
            took = time.perf_counter() - start
            if e:
                epochs.append(took)
                firsts.append(first)
                faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        print(
            f"{args.shape}: {statistics.median(epochs) / BOUND:.2f}x bound, first batch "
            f"{statistics.median(firsts) * 1e3:.1f} ms, minor faults/epoch {statistics.median(faults):.0f}"
        )
    finally:
        server.stdin.close()
        server.wait()


if __name__ == "__main__":
    main()
