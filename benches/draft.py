"""Reduced-size JPEG decoding on 2-12 megapixel photos, on one core: `Decode(draft="auto")`
before a resize against the full decode, ours and Pillow's (`Image.draft`), and how far the
reduced pipeline's pixels are from the full one's.

    python benches/draft.py [--images 3] [--repeat 3] [--json]

Photo-like JPEGs (benches/augment.py's generator, quality 90, 4:2:0). Pipelines, per image on
the calling thread, best of `--repeat` passes, ours and Pillow's taking turns:
- "resize": decode, Resize(256) (the shorter side), CenterCrop(224);
- "random crop": decode, RandomResizedCrop(224) (the crop drawn per image; Pillow's side
  crops the same box with `resize(box=)`, from the full decode only).
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
from PIL import Image as PILImage

sys.path.insert(0, str(Path(__file__).parent))
from decode import jpegs

from dataloader_rs import transforms as T

SIZES = {"2 MP": (1224, 1632), "6 MP": (2000, 3000), "12 MP": (3000, 4000)}


def best_rate(fn, blobs: list[bytes], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for i, b in enumerate(blobs):
            fn(i, b)
        best = min(best, time.perf_counter() - start)
    return len(blobs) / best


def pillow_resize(draft: bool):
    def run(_i: int, b: bytes) -> np.ndarray:
        with PILImage.open(io.BytesIO(b)) as im:
            w, h = im.size
            s = 256 / min(w, h)
            ow, oh = max(round(w * s), 256), max(round(h * s), 256)
            if draft:
                im.draft("RGB", (ow, oh))
            im = im.convert("RGB").resize((ow, oh), PILImage.BILINEAR)
            left, top = (ow - 224) // 2, (oh - 224) // 2
            return np.asarray(im.crop((left, top, left + 224, top + 224)))

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()
    crop = T.RandomResizedCrop(224)
    pipelines = {
        "resize": {
            "full": T.Compose([T.Decode(), T.ToRgb(), T.Resize(256), T.CenterCrop(224)]),
            "auto": T.Compose([T.Decode(draft="auto"), T.ToRgb(), T.Resize(256), T.CenterCrop(224)]),
        },
        "random crop": {
            "full": T.Compose([T.Decode(), T.ToRgb(), crop]),
            "auto": T.Compose([T.Decode(draft="auto"), T.ToRgb(), crop]),
        },
    }
    decode_full, decode_draft = T.Decode(), T.Decode(draft=(224, 224))
    results = {}
    for name, size in SIZES.items():
        blobs = jpegs(args.images, size, seed=len(name))
        r: dict[str, float | dict[str, float]] = {}
        r["decode full"] = best_rate(lambda _i, b: decode_full(b), blobs, args.repeat)
        r["decode draft 224"] = best_rate(lambda _i, b: decode_draft(b), blobs, args.repeat)
        r["resize full"] = best_rate(lambda i, b: pipelines["resize"]["full"](b, seed=i), blobs, args.repeat)
        r["resize auto"] = best_rate(lambda i, b: pipelines["resize"]["auto"](b, seed=i), blobs, args.repeat)
        r["resize Pillow"] = best_rate(pillow_resize(False), blobs, args.repeat)
        r["resize Pillow draft"] = best_rate(pillow_resize(True), blobs, args.repeat)
        r["crop full"] = best_rate(lambda i, b: pipelines["random crop"]["full"](b, seed=i), blobs, args.repeat)
        r["crop auto"] = best_rate(lambda i, b: pipelines["random crop"]["auto"](b, seed=i), blobs, args.repeat)
        # How far the reduced pipelines are from the full ones (uint8 levels).
        for kind, p in pipelines.items():
            diffs = []
            for i, b in enumerate(blobs):
                for seed in range(8):
                    a = np.asarray(p["auto"](b, seed=seed * 101 + i)).astype(np.int16)
                    f = np.asarray(p["full"](b, seed=seed * 101 + i)).astype(np.int16)
                    diffs.append(np.abs(a - f))
            d = np.stack(diffs)
            r[f"{kind} error"] = {
                "max": int(d.max()),
                "mean": float(d.mean()),
                "p99": float(np.percentile(d, 99)),
            }
        results[name] = r
    meta = {
        "python": platform.python_version(),
        "pillow": PIL.__version__,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    if args.json:
        print(json.dumps({"meta": meta, "results": results}, indent=2))
        return
    print(meta)
    for name, r in results.items():
        print(f"{name}:")
        for k, v in r.items():
            print(f"  {k:>20}: {v:8.2f} img/s" if isinstance(v, float) else f"  {k:>20}: {v}")


if __name__ == "__main__":
    main()
