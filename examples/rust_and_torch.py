"""Rust and torch mixed in one Python transform: Rust decodes, torch flips a zero-copy view of
the decoded image, Image.from_array brings the tensor back, Rust normalizes and ImageCollator
batches; torch.from_dlpack(batch) is the batch as a tensor, without a copy.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image as PILImage

from dataloader_rs import FileDataset, Image, ImageCollator, PyDataloader
from dataloader_rs import transforms as T

MEAN = [0.5, 0.5, 0.5]
STD = [0.25, 0.25, 0.25]
decode = T.Compose([T.Decode(), T.ToRgb(), T.PadTo(32, 32)])
normalize = T.Compose([T.ToFloat(), T.Normalize(MEAN, STD)])


def transform(index: int, png: bytes) -> Image:
    image = decode(png)  # Rust, the interpreter released: an Image, uint8 HWC
    hwc = torch.from_dlpack(image)  # a view of the Image's buffer, no copy
    assert hwc.shape == (32, 32, 3)
    assert hwc.dtype == torch.uint8
    chw = torch.flip(hwc.permute(2, 0, 1), dims=[2])  # any torch op on uint8 CHW: a horizontal flip
    return normalize(Image.from_array(chw, layout="chw"))  # back to Rust, HWC


def main() -> None:
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as tmp:
        paths, arrays = [], []
        for i in range(24):
            rgb = rng.integers(0, 256, size=(32, 28 + i % 5, 3), dtype=np.uint8)
            path = Path(tmp) / f"{i:02d}.png"
            PILImage.fromarray(rgb).save(path)
            paths.append(path)
            arrays.append(rgb)

        loader = PyDataloader(
            FileDataset(paths),
            batch_size=8,
            num_workers=2,
            item_concurrency=4,
            transform=transform,
            collate_fn=ImageCollator(),  # NCHW float32
        )
        batches = [torch.from_dlpack(batch) for batch in loader]
        assert [tuple(b.shape) for b in batches] == [(8, 3, 32, 32)] * 3
        x = torch.cat(batches)
        assert x.dtype == torch.float32
        for i, rgb in enumerate(arrays):
            padded = np.zeros((32, 32, 3), np.uint8)
            padded[:, : rgb.shape[1]] = rgb  # PadTo pads at the right, then the flip moves it left
            expected = (padded[:, ::-1].astype(np.float32) / 255 - 0.5) / 0.25
            torch.testing.assert_close(x[i], torch.from_numpy(expected.transpose(2, 0, 1).copy()))
        print(f"rust_and_torch: {len(x)} images, Rust decode -> torch flip -> Rust normalize, batch {tuple(x.shape)}")


if __name__ == "__main__":
    main()
