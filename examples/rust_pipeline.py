"""All in Rust: PNG files read by FileDataset, decoded and transformed by dataloader_rs.transforms,
batched by ImageCollator on two worker threads, without the interpreter touching an item.

The images have different sizes and modes (RGB, gray, RGBA): ToRgb and PadTo make them one shape.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from dataloader_rs import FileDataset, ImageCollator, PyDataloader
from dataloader_rs import transforms as T

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
PAD = (0 - np.array(MEAN)) / STD


def main() -> None:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        paths, arrays = [], []
        for i in range(40):
            h, w = 40 + i % 9, 48 - i % 7  # up to 48 x 48
            rgb = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
            image = Image.fromarray(rgb).convert(["RGB", "L", "RGBA"][i % 3])
            path = Path(tmp) / f"{i:03d}.png"
            image.save(path)
            paths.append(path)
            arrays.append(np.asarray(image.convert("RGB")))

        pipeline = T.Compose([T.Decode(), T.ToRgb(), T.PadTo(48, 48), T.ToFloat(), T.Normalize(MEAN, STD), T.ToChw()])
        loader = PyDataloader(
            FileDataset(paths),
            batch_size=16,
            num_workers=2,
            item_concurrency=4,
            transform=pipeline,
            collate_fn=ImageCollator(),
        )
        shapes, seen = [], 0
        for batch in loader:
            x = np.asarray(batch)  # a view of the batch's buffer, NCHW float32
            assert x.dtype == np.float32, x.dtype
            assert x.shape[1:] == (3, 48, 48), x.shape
            for k, chw in enumerate(x):  # the same values as Pillow + ToTensor + Normalize
                rgb = arrays[seen + k]
                h, w = rgb.shape[:2]
                expected = (rgb.astype(np.float32) / 255 - MEAN) / STD
                np.testing.assert_allclose(chw[:, :h, :w], expected.transpose(2, 0, 1), atol=1e-5)
                pad = chw[:, h:, :]  # PadTo filled 0, normalized like any pixel
                np.testing.assert_allclose(pad, np.broadcast_to(PAD[:, None, None], pad.shape), atol=1e-5)
            seen += len(x)
            shapes.append(x.shape)
        assert seen == 40, seen
        assert shapes == [(16, 3, 48, 48), (16, 3, 48, 48), (8, 3, 48, 48)], shapes
        print(f"rust_pipeline: {seen} PNGs -> {len(shapes)} float32 NCHW batches {shapes}, values match Pillow")


if __name__ == "__main__":
    main()
