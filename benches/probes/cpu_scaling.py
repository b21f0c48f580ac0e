"""How much two processes get from this machine's two CPUs: the same CPU-bound work run in
one process, then in two at once, and the ratio of the total rates. A ratio well below 2
means the CPUs share a physical core (or the host throttles them), which bounds what any
loader gains from a second worker.

    python benches/probes/cpu_scaling.py [--seconds 4]

Three kinds of work: a pure-Python loop; our training chain on 500x375 JPEGs (decode,
RandomResizedCrop, flip, ColorJitter, float, normalise: SIMD-heavy); Pillow decoding the
same JPEGs and torchvision v2 doing the chain.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))


def work(kind: str, seconds: float, paths: list[str], out) -> None:
    import io

    import augment as A

    blobs = [Path(p).read_bytes() for p in paths]
    if kind == "python":

        def step(i: int) -> None:
            s = 0
            for k in range(2000):
                s += k * k
    elif kind == "dataloader_rs":
        chain = A.ours()

        def step(i: int) -> None:
            chain(blobs[i % len(blobs)], seed=i)
    else:
        import torch
        from PIL import Image

        torch.set_num_threads(1)
        tv = A.theirs()

        def step(i: int) -> None:
            with Image.open(io.BytesIO(blobs[i % len(blobs)])) as im:
                tv(im.convert("RGB"))

    for i in range(8):
        step(i)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step(n)
        n += 1
    out.put(n / (time.perf_counter() - start))


def total_rate(kind: str, procs: int, seconds: float, paths: list[str]) -> float:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=work, args=(kind, seconds, paths, q)) for _ in range(procs)]
    for p in ps:
        p.start()
    rates = [q.get() for _ in ps]
    for p in ps:
        p.join()
    return sum(rates)


def main() -> None:
    import augment as A

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = A.make_jpegs(Path(tmp), 16, A.SIZES["small"], seed=5)
        for kind in ("python", "dataloader_rs", "pillow_torchvision"):
            one = total_rate(kind, 1, args.seconds, paths)
            two = total_rate(kind, 2, args.seconds, paths)
            print(f"{kind:20s} 1 process {one:10.1f}/s   2 processes {two:10.1f}/s   ratio {two / one:5.2f}")


if __name__ == "__main__":
    main()
