"""JPEG decoding on one core, ours against Pillow's: photo-like JPEGs (quality 90, 4:2:0, the
images of benches/augment.py) of about 500x375 and 2000x1500, decoded to RGB on the calling
thread; images per second, best of `--repeat` passes, the two decoders taking turns.

    python benches/decode.py [--images 32] [--repeat 5] [--json]

Build the extension with `maturin develop --release` first.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import PIL
import PIL.features
from PIL import Image as PILImage

sys.path.insert(0, str(Path(__file__).parent))
from augment import SIZES, photo

from dataloader_rs import transforms as T


def jpegs(n: int, size: tuple[int, int], seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        buf = io.BytesIO()
        PILImage.fromarray(photo(*size, rng), "RGB").save(buf, "JPEG", quality=90, subsampling="4:2:0")
        out.append(buf.getvalue())
    return out


def rates(blobs: list[bytes], repeat: int) -> dict[str, float]:
    decode = T.Decode()

    def ours() -> None:
        for b in blobs:
            decode(b)

    def pillow() -> None:
        for b in blobs:
            with PILImage.open(io.BytesIO(b)) as im:
                im.convert("RGB")

    best = {"dataloader_rs": float("inf"), "pillow": float("inf")}
    for _ in range(repeat):
        for name, fn in (("dataloader_rs", ours), ("pillow", pillow)):
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: len(blobs) / t for name, t in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()
    results = {}
    for name, size in SIZES.items():
        blobs = jpegs(args.images if name == "small" else max(args.images // 4, 1), size, seed=1)
        results[f"{size[1]}x{size[0]}"] = rates(blobs, args.repeat)
    meta = {
        "python": platform.python_version(),
        "pillow": PIL.__version__,
        "libjpeg": PIL.features.version("jpg"),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    if args.json:
        print(json.dumps({"meta": meta, "results": results}, indent=2))
        return
    print(meta)
    for size, r in results.items():
        ours, theirs = r["dataloader_rs"], r["pillow"]
        print(f"{size:>9}: dataloader-rs {ours:7.1f} img/s, Pillow {theirs:7.1f} img/s, ratio {ours / theirs:.2f}x")


if __name__ == "__main__":
    main()
