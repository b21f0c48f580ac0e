"""Tiles fetched by their coordinates, with return_indices=True: a grid of PNG tiles named by
(row, col), a FileDataset.from_template that builds each path in Rust from a coords array, the
Rust transforms and ImageCollator; each batch comes with the dataset indices of its items, and
coords[indices] says where each tile belongs. Every tile's pixels encode its row and column.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from dataloader_rs import FileDataset, ImageCollator, PyDataloader
from dataloader_rs import transforms as T

ROWS, COLS, TILE = 6, 9, 16


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for row in range(ROWS):
            for col in range(COLS):
                pixels = np.empty((TILE, TILE, 3), np.uint8)
                pixels[..., 0], pixels[..., 1], pixels[..., 2] = row, col, 10 * row + col
                Image.fromarray(pixels).save(Path(tmp) / f"tile_r{row}_c{col}.png")

        rows, cols = np.meshgrid(np.arange(ROWS), np.arange(COLS), indexing="ij")
        coords = np.stack([rows.ravel(), cols.ravel()], axis=1)  # (n, 2): row, col of each tile
        tiles = FileDataset.from_template(
            str(Path(tmp) / "tile_r{row}_c{col}.png"), {"row": coords[:, 0], "col": coords[:, 1]}
        )
        assert len(tiles) == ROWS * COLS
        loader = PyDataloader(
            tiles,
            batch_size=8,
            shuffle=True,
            seed=0,
            num_workers=2,
            item_concurrency=8,
            transform=T.Compose([T.Decode(), T.ToRgb()]),  # uint8 HWC
            collate_fn=ImageCollator(layout="NHWC"),
            return_indices=True,
        )
        seen = []
        for batch, indices in loader:
            x = np.asarray(batch)  # (b, 16, 16, 3) uint8
            assert x.shape == (len(indices), TILE, TILE, 3), x.shape
            assert x.dtype == np.uint8, x.dtype
            for tile, (row, col) in zip(x, coords[indices], strict=True):
                assert (tile[..., 0] == row).all(), (row, col)
                assert (tile[..., 1] == col).all(), (row, col)
                assert (tile[..., 2] == 10 * row + col).all()
            seen.extend(indices)
        assert sorted(seen) == list(range(ROWS * COLS))
        assert seen != sorted(seen)
        print(f"tiles_by_coordinates: {len(seen)} tiles of a {ROWS}x{COLS} grid, each matching coords[indices]")


if __name__ == "__main__":
    main()
