"""torchvision transforms (v2) on bytes fetched in Rust: FileDataset reads the PNG files on the
loader's runtime, a Python transform decodes them with Pillow and applies v2 transforms and a
random horizontal flip, and torch.stack batches them. The flip's coin comes from a
torch.Generator seeded with dataloader_rs.item_seed(), so two runs with the same seed give the
same batches, whatever the number of threads.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import v2

import dataloader_rs
from dataloader_rs import FileDataset, PyDataloader

to_tensor = v2.Compose([v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True)])


def transform(index: int, png: bytes) -> torch.Tensor:
    image = to_tensor(Image.open(io.BytesIO(png)).convert("RGB"))
    # v2's random transforms draw from torch's global RNG, which all threads share: draw the
    # coin from a generator of this item's own instead, and apply the flip with v2.functional
    generator = torch.Generator().manual_seed(dataloader_rs.item_seed())
    if torch.rand(1, generator=generator).item() < 0.5:
        image = v2.functional.horizontal_flip(image)
    return image


def run(paths: list[Path], num_workers: int) -> torch.Tensor:
    loader = PyDataloader(
        FileDataset(paths),
        batch_size=8,
        shuffle=True,
        seed=7,
        num_workers=num_workers,
        item_concurrency=4,
        transform=transform,
        collate_fn=torch.stack,
        return_indices=True,
    )
    out = torch.empty(len(paths), 3, 24, 24)
    for batch, indices in loader:
        assert batch.shape == (len(indices), 3, 24, 24)
        assert batch.dtype == torch.float32
        out[indices] = batch  # back in dataset order
    return out


def main() -> None:
    rng = np.random.default_rng(2)
    with tempfile.TemporaryDirectory() as tmp:
        paths, arrays = [], []
        for i in range(32):
            rgb = rng.integers(0, 256, size=(24, 24, 3), dtype=np.uint8)
            Image.fromarray(rgb).save(Path(tmp) / f"{i:02d}.png")
            paths.append(Path(tmp) / f"{i:02d}.png")
            arrays.append(torch.from_numpy(rgb).permute(2, 0, 1).float() / 255)

        first, second = run(paths, num_workers=2), run(paths, num_workers=1)
        assert torch.equal(first, second), "the same seed must give the same flips"
        flipped = 0
        for image, original in zip(first, arrays, strict=True):
            if torch.allclose(image, original.flip(-1)):
                flipped += 1
            else:
                torch.testing.assert_close(image, original)
        assert 0 < flipped < len(paths), flipped  # p=0.5 over 32 images
        print(f"torchvision_on_rust_bytes: {len(paths)} images, {flipped} flipped, two runs equal")


if __name__ == "__main__":
    main()
