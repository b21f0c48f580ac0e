"""Images side by side: 224x224 PNG tiles read from files, decoded, converted to float,
normalised, CHW, in batches of 64 on 2 workers.

- dataloader-rs: FileDataset + Compose of Rust transforms + ImageCollator (no interpreter
  per item), and a PyDataset reading the file bytes with the same Compose and ImageCollator;
- torch.utils.data.DataLoader: Pillow and NumPy in __getitem__, torch's default collation.

Also the decode throughput of one core: Decode() against Pillow's Image.open + convert("RGB").

    python benches/images.py [--tiles 1024] [--epochs 5] [--workers 2] [--json]


Needs torch, numpy and Pillow (pip install -e .[bench] pillow). Build the extension with
`maturin develop --release` first: a debug build measures nothing useful.
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

from dataloader_rs import FileDataset, ImageCollator, PyDataloader, PyDataset
from dataloader_rs import transforms as T

MEAN = np.asarray([0.485, 0.456, 0.406], np.float32)
STD = np.asarray([0.229, 0.224, 0.225], np.float32)
SIDE = 224


def make_tiles(directory: Path, n: int) -> list[str]:
    """Tiles like those of a slide scan: smooth colour fields with some texture."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:SIDE, 0:SIDE].astype(np.float32)
    paths = []
    for i in range(n):
        f = rng.uniform(0.01, 0.06, 3)
        phase = rng.uniform(0, 6.3, 3)
        planes = [160 + 60 * np.sin(x * f[c] + y * f[(c + 1) % 3] + phase[c]) for c in range(3)]
        noise = rng.normal(0, 6, (SIDE, SIDE, 3))
        tile = np.clip(np.stack(planes, -1) + noise, 0, 255).astype(np.uint8)
        path = directory / f"{i:05d}.png"
        PILImage.fromarray(tile, "RGB").save(path, "PNG")
        paths.append(str(path))
    return paths


def rust_compose() -> T.Compose:
    return T.Compose([T.Decode(), T.ToRgb(), T.ToFloat(), T.Normalize(MEAN.tolist(), STD.tolist()), T.ToChw()])


class FileBytes(PyDataset):
    def __init__(self, paths: list[str]) -> None:
        super().__init__()
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> bytes:
        with open(self.paths[index], "rb") as f:
            return f.read()


def torch_dataset(paths: list[str]):
    import torch

    class PillowNumpy(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(paths)

        def __getitem__(self, index: int):
            with PILImage.open(paths[index]) as im:
                rgb = np.asarray(im.convert("RGB"))
            x = (rgb.astype(np.float32) / np.float32(255) - MEAN) / STD
            return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)))

    return PillowNumpy()


def time_epochs(make_iter, epochs: int, n: int) -> tuple[float, float, float]:
    """Items per second of each epoch: (best, median), and the first batch's latency in s."""
    rates = []
    first = 0.0
    for e in range(epochs):
        start = time.perf_counter()
        count = 0
        for i, batch in enumerate(make_iter()):
            if i == 0 and e == 0:
                first = time.perf_counter() - start
            count += len(batch)
        rates.append(count / (time.perf_counter() - start))
        assert count == n, count
    return max(rates), statistics.median(rates), first


def decode_rates(paths: list[str], repeat: int) -> tuple[float, float]:
    """Tiles per second on one thread: ours, Pillow's."""
    blobs = [Path(p).read_bytes() for p in paths]
    decode = T.Decode()

    def ours() -> None:
        for b in blobs:
            decode(b)

    def pillow() -> None:
        for b in blobs:
            with PILImage.open(io.BytesIO(b)) as im:
                im.convert("RGB")

    out = []
    for fn in (ours, pillow):
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        out.append(len(blobs) / best)
    return out[0], out[1]


def chain_rates(paths: list[str], repeat: int) -> tuple[float, float]:
    """Tiles per second on one thread for the whole chain (decode to normalised CHW float)."""
    blobs = [Path(p).read_bytes() for p in paths]
    chain = rust_compose()

    def ours() -> None:
        for b in blobs:
            chain(b)

    def numpy() -> None:
        for b in blobs:
            with PILImage.open(io.BytesIO(b)) as im:
                rgb = np.asarray(im.convert("RGB"))
            x = (rgb.astype(np.float32) / np.float32(255) - MEAN) / STD
            np.ascontiguousarray(x.transpose(2, 0, 1))

    out = []
    for fn in (ours, numpy):
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        out.append(len(blobs) / best)
    return out[0], out[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiles", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args()

    import torch

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="dlrs-images-") as tmp:
        paths = make_tiles(Path(tmp), args.tiles)
        size = sum(os.path.getsize(p) for p in paths) / len(paths)
        n, bs, w = args.tiles, args.batch_size, args.workers
        rows = []

        files = PyDataloader(
            FileDataset(paths),
            batch_size=bs,
            num_workers=w,
            item_concurrency=4,
            transform=rust_compose(),
            collate_fn=ImageCollator(buffers=2 * w + 2),
        )
        rows.append(
            ("dataloader-rs: FileDataset + Compose + ImageCollator", time_epochs(lambda: iter(files), args.epochs, n))
        )
        pyds = PyDataloader(
            FileBytes(paths),
            batch_size=bs,
            num_workers=w,
            transform=rust_compose(),
            collate_fn=ImageCollator(buffers=2 * w + 2),
        )
        rows.append(
            (
                "dataloader-rs: PyDataset (file bytes) + Compose + ImageCollator",
                time_epochs(lambda: iter(pyds), args.epochs, n),
            )
        )
        tl = torch.utils.data.DataLoader(torch_dataset(paths), batch_size=bs, num_workers=w, persistent_workers=False)
        rows.append(("torch DataLoader: Pillow + NumPy in __getitem__", time_epochs(lambda: iter(tl), args.epochs, n)))

        dec_ours, dec_pil = decode_rates(paths[:256], 3)
        chain_ours, chain_np = chain_rates(paths[:256], 3)
    load_after = os.getloadavg()

    torch_best = rows[-1][1][0]
    if args.json:
        machine = {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "pillow": PILImage.__version__,
            "numpy": np.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "load_average_before": load_before[0],
            "load_average_after": load_after[0],
        }
        workload = {
            "tiles": n,
            "side": SIDE,
            "kib_per_tile": size / 1024,
            "batch_size": bs,
            "workers": w,
            "epochs": args.epochs,
        }
        loaders = [
            {
                "loader": name,
                "best_items_per_s": best,
                "median_items_per_s": median,
                "first_batch_s": first,
                "vs_torch": best / torch_best,
            }
            for name, (best, median, first) in rows
        ]
        one_core = [
            {"step": "decode to uint8 RGB", "ours_items_per_s": dec_ours, "baseline_items_per_s": dec_pil},
            {
                "step": "decode to normalised float32 CHW",
                "ours_items_per_s": chain_ours,
                "baseline_items_per_s": chain_np,
            },
        ]
        out = {"machine": machine, "workload": workload, "rows": loaders, "one_core": one_core}
        print(json.dumps(out, indent=2))
        return
    print(f"# {args.tiles} PNG tiles {SIDE}x{SIDE} RGB, {size / 1024:.1f} KiB each; batches of {bs}, {w} workers")
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"torch {torch.__version__}, Pillow {PILImage.__version__}, numpy {np.__version__}"
    )
    print(f"# load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    print("| loader | best tiles/s | median tiles/s | vs torch (best) | first batch |")
    print("| --- | --- | --- | --- | --- |")
    for name, (best, median, first) in rows:
        print(f"| {name} | {best:,.0f} | {median:,.0f} | {best / torch_best:.2f}x | {first * 1000:.0f} ms |")
    print()
    print("| one core | dataloader-rs tiles/s | Pillow (+ NumPy) tiles/s | ratio |")
    print("| --- | --- | --- | --- |")
    print(f"| decode to uint8 RGB | {dec_ours:,.0f} | {dec_pil:,.0f} | {dec_ours / dec_pil:.2f}x |")
    print(f"| decode to normalised float32 CHW | {chain_ours:,.0f} | {chain_np:,.0f} | {chain_ours / chain_np:.2f}x |")


if __name__ == "__main__":
    main()
