"""The quick start on generated data: arrays written to .npy files, loaded in shuffled batches.

Run it from a checkout after `pip install .` (or through `cargo xtask demo`).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from dataloader_rs import PyDataloader, PyDataset


class Arrays(PyDataset[np.ndarray]):
    def __init__(self, paths: list[Path]) -> None:
        super().__init__()
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> np.ndarray:
        return np.load(self.paths[index])


def main() -> None:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i in range(512):
            path = Path(tmp) / f"{i}.npy"
            np.save(path, rng.integers(0, 255, size=(32, 32, 3), dtype=np.uint8))
            paths.append(path)

        loader = PyDataloader(
            Arrays(paths),
            batch_size=32,
            shuffle=True,
            seed=0,  # a reproducible order, a new permutation every epoch
            num_workers=4,  # 4 batches loaded in parallel, on threads
            prefetch_depth=4,  # up to 4 more batches waiting
            collate_fn=np.stack,  # one (32, 32, 32, 3) array per batch
            drop_last=True,
        )
        for epoch in range(3):
            start = time.perf_counter()
            total = 0
            for batch in loader:  # iterating again starts a new epoch
                assert batch.shape == (32, 32, 32, 3)
                total += int(batch.sum(dtype=np.int64))
            elapsed = time.perf_counter() - start
            print(f"epoch {epoch}: {len(loader)} batches of {batch.shape} in {elapsed * 1000:.1f} ms (sum {total})")


if __name__ == "__main__":
    main()
