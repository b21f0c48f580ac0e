"""The ImageNet training pipeline side by side (issue 14): JPEG files (quality 90, 4:2:0,
photo-like content) decoded, RandomResizedCrop(224), RandomHorizontalFlip, ColorJitter(0.4, 0.4,
0.4), float32, normalised, CHW, in batches, on 2 workers.

- dataloader-rs: FileDataset + a Compose of Rust transforms + ImageCollator;
- torch.utils.data.DataLoader (2 worker processes): Pillow decodes, torchvision v2 transforms the
  uint8 tensor (ToImage, RandomResizedCrop, RandomHorizontalFlip, ColorJitter, ToDtype(scale=True),
  Normalize), default collation.

Both at about 500x375 and about 2000x1500; also one core: the same per-image chain on the
calling thread, ours against Pillow + torchvision v2.

    python benches/augment.py [--small 256] [--large 48] [--epochs 3] [--workers 2] [--json]
    python benches/augment.py --draft      # ours with Decode(draft="auto"): reduced JPEG decoding
    python benches/augment.py --no-jitter  # both without ColorJitter: crop, flip, normalise
    python benches/augment.py --steps      # each step of ours on one core, 500x375 images

Needs torch, torchvision, numpy and Pillow. Build the extension with `maturin develop --release`
first: a debug build measures nothing useful.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image as PILImage

from dataloader_rs import FileDataset, ImageCollator, PyDataloader
from dataloader_rs import transforms as T

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
SIZES = {"small": (375, 500), "large": (1500, 2000)}


def fractal(h: int, w: int, rng: np.random.Generator, roughness: float = 0.55) -> np.ndarray:
    """A field with detail at every scale (about a 1/f spectrum): a coarse random field doubled
    in size again and again (bicubic), with finer noise added at each step."""
    field = rng.normal(0, 1, (3, 4)).astype(np.float32)
    amplitude = 1.0
    while field.shape[0] < h or field.shape[1] < w:
        size = (field.shape[1] * 2, field.shape[0] * 2)
        field = np.asarray(PILImage.fromarray(field).resize(size, PILImage.Resampling.BICUBIC))
        amplitude *= roughness
        field = field + rng.normal(0, amplitude, field.shape).astype(np.float32)
    return field[:h, :w]


def photo(h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """Photo-like content: a luminance with detail at every scale, smoother and weaker colour,
    a few hard-edged objects, sensor noise."""
    luma = 45 * fractal(h, w, rng, 0.7)
    chroma = [14 * fractal(h, w, rng, 0.45) for _ in range(2)]
    out = np.stack([luma + 1.4 * chroma[0], luma - 0.35 * chroma[0] - 0.7 * chroma[1], luma + 1.8 * chroma[1]], -1)
    y, x = np.ogrid[0:h, 0:w]
    for _ in range(5):
        cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(0.05, 0.3) * min(h, w)
        inside = (y - cy) ** 2 + (x - cx) ** 2 < r * r
        out[inside] += rng.uniform(-50, 50, 3).astype(np.float32)
    out += rng.normal(0, 2.5, out.shape).astype(np.float32)
    return np.clip(out + 120, 0, 255).astype(np.uint8)


def make_jpegs(directory: Path, n: int, size: tuple[int, int], seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        path = directory / f"{size[1]}x{size[0]}-{i:04d}.jpg"
        PILImage.fromarray(photo(*size, rng), "RGB").save(path, "JPEG", quality=90, subsampling="4:2:0")
        paths.append(str(path))
    return paths


DRAFT = False
JITTER = True  # --no-jitter: the chain without ColorJitter (crop, flip, normalise)


def ours() -> T.Compose:
    return T.Compose(
        [
            T.Decode(draft="auto") if DRAFT else T.Decode(),
            T.ToRgb(),
            T.RandomResizedCrop(224),
            T.RandomHorizontalFlip(),
            *([T.ColorJitter(0.4, 0.4, 0.4)] if JITTER else []),
            T.ToFloat(),
            T.Normalize(MEAN, STD),
            T.ToChw(),
        ]
    )


def theirs():
    import torch
    from torchvision.transforms import v2

    return v2.Compose(
        [
            v2.ToImage(),
            v2.RandomResizedCrop(224, antialias=True),
            v2.RandomHorizontalFlip(),
            *([v2.ColorJitter(0.4, 0.4, 0.4)] if JITTER else []),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(MEAN, STD),
        ]
    )


def torch_dataset(paths: list[str]):
    import torch

    class PillowTorchvision(torch.utils.data.Dataset):
        def __init__(self) -> None:
            self.transform = theirs()

        def __len__(self) -> int:
            return len(paths)

        def __getitem__(self, index: int):
            with PILImage.open(paths[index]) as im:
                rgb = im.convert("RGB")
            return self.transform(rgb)

    return PillowTorchvision()


def time_epochs(make_iter, epochs: int, n: int) -> tuple[float, float]:
    """Images per second: the best and the median epoch."""
    rates = []
    for _ in range(epochs):
        start = time.perf_counter()
        count = 0
        for batch in make_iter():
            count += len(batch)
        rates.append(count / (time.perf_counter() - start))
        assert count == n, count
    return max(rates), statistics.median(rates)


def one_core(paths: list[str], repeat: int) -> tuple[float, float]:
    """Images per second on the calling thread: ours, Pillow + torchvision v2's."""
    import torch

    torch.set_num_threads(1)
    blobs = [Path(p).read_bytes() for p in paths]
    chain, tv = ours(), theirs()

    def rust() -> None:
        for i, b in enumerate(blobs):
            chain(b, seed=i)

    def pillow() -> None:
        for b in blobs:
            with PILImage.open(io.BytesIO(b)) as im:
                tv(im.convert("RGB"))

    out = []
    for fn in (rust, pillow):
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        out.append(len(blobs) / best)
    return out[0], out[1]


def steps(paths: list[str], repeat: int) -> dict[str, float]:
    """Images per second of each step of our chain on the calling thread (Python call
    included), each on the output of the steps before it."""
    blobs = [Path(p).read_bytes() for p in paths]
    chain = [
        ("Decode + ToRgb", T.Compose([T.Decode(), T.ToRgb()])),
        ("RandomResizedCrop(224)", T.RandomResizedCrop(224)),
        ("RandomHorizontalFlip", T.RandomHorizontalFlip()),
        ("ColorJitter(0.4, 0.4, 0.4)", T.ColorJitter(0.4, 0.4, 0.4)),
        ("ColorJitter(brightness=0.4)", T.ColorJitter(brightness=0.4)),
        ("ColorJitter(contrast=0.4)", T.ColorJitter(contrast=0.4)),
        ("ColorJitter(saturation=0.4)", T.ColorJitter(saturation=0.4)),
        ("ToFloat + Normalize + ToChw", T.Compose([T.ToFloat(), T.Normalize(MEAN, STD), T.ToChw()])),
    ]
    out = {}
    inputs: list[object] = list(blobs)
    for name, t in chain:
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            outputs = [t(x, seed=i) for i, x in enumerate(inputs)]
            best = min(best, time.perf_counter() - start)
        out[name] = len(inputs) / best
        if not name.startswith("ColorJitter(") or name == "ColorJitter(0.4, 0.4, 0.4)":
            inputs = outputs
    return out


def run(paths: list[str], args: argparse.Namespace, batch: int) -> dict[str, object]:
    import torch

    n, w = len(paths), args.workers
    rust = PyDataloader(
        FileDataset(paths),
        batch_size=batch,
        shuffle=True,
        seed=0,
        num_workers=w,
        item_concurrency=4,
        transform=ours(),
        collate_fn=ImageCollator(buffers=2 * w + 2),
    )
    tl = torch.utils.data.DataLoader(torch_dataset(paths), batch_size=batch, shuffle=True, num_workers=w)
    # Turns: one epoch each per round, so both see the same load.
    ours_rates, torch_rates = [], []
    for _ in range(args.epochs):
        ours_rates.append(time_epochs(lambda: iter(rust), 1, n)[0])
        torch_rates.append(time_epochs(lambda: iter(tl), 1, n)[0])
    core = one_core(paths[: args.core_images], args.repeat)
    return {
        "images": n,
        "batch_size": batch,
        "bytes_per_image": sum(os.path.getsize(p) for p in paths) / n,
        "dataloader_rs": {"best": max(ours_rates), "median": statistics.median(ours_rates)},
        "torch": {"best": max(torch_rates), "median": statistics.median(torch_rates)},
        "one_core": {"dataloader_rs": core[0], "pillow_torchvision": core[1]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=256, help="images of about 500x375")
    parser.add_argument("--large", type=int, default=48, help="images of about 2000x1500")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="passes of the one-core measurement")
    parser.add_argument("--core-images", type=int, default=32, help="images of the one-core measurement")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--steps", action="store_true", help="time each step of ours on one core, 500x375")
    parser.add_argument("--draft", action="store_true", help='ours with Decode(draft="auto")')
    parser.add_argument("--no-jitter", action="store_true", help="both chains without ColorJitter")
    args = parser.parse_args()
    global DRAFT, JITTER
    DRAFT = args.draft
    JITTER = not args.no_jitter
    if args.steps:
        with tempfile.TemporaryDirectory(prefix="dlrs-augment-") as tmp:
            paths = make_jpegs(Path(tmp), args.core_images, SIZES["small"], seed=5)
            for name, rate in steps(paths, args.repeat).items():
                print(f"{name:30s} {rate:9.1f} images/s  {1e3 / rate:6.3f} ms")
        print(f"load average {os.getloadavg()}")
        return

    import PIL
    import torch
    import torchvision

    load_before = os.getloadavg()
    results = {}
    with tempfile.TemporaryDirectory(prefix="dlrs-augment-") as tmp:
        for name, count, batch in (("small", args.small, 32), ("large", args.large, 16)):
            paths = make_jpegs(Path(tmp), count, SIZES[name], seed=len(name))
            results[name] = run(paths, args, batch)
    meta = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "pillow": PIL.__version__,
        "draft": DRAFT,
        "color_jitter": JITTER,
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    if args.json:
        print(json.dumps({"meta": meta, "results": results}, indent=2))
        return
    print(f"{meta}")
    for name, r in results.items():
        h, w = SIZES[name]
        ours_best, torch_best = r["dataloader_rs"]["best"], r["torch"]["best"]
        core = r["one_core"]
        print(f"\n{w}x{h}: {r['images']} JPEGs of {r['bytes_per_image'] / 1024:.0f} KiB, batches of {r['batch_size']}")
        print(f"  2 workers  dataloader-rs {ours_best:8.1f} img/s (median {r['dataloader_rs']['median']:.1f})")
        print(f"             torch         {torch_best:8.1f} img/s (median {r['torch']['median']:.1f})")
        print(f"             ratio         {ours_best / torch_best:8.2f}x")
        print(f"  one core   dataloader-rs {core['dataloader_rs']:8.1f} img/s")
        print(f"             Pillow + tv2  {core['pillow_torchvision']:8.1f} img/s")
        print(f"             ratio         {core['dataloader_rs'] / core['pillow_torchvision']:8.2f}x")


if __name__ == "__main__":
    main()
