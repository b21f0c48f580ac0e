"""One workload on one thread, to count its instructions under callgrind: a count does not move
with the machine's load, so two builds of the extension compare on a shared machine.

    python benches/probes/instructions.py make DIR          # 64 PNG tiles (benches/images.py's)
    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python benches/probes/instructions.py WORKLOAD DIR  # WORKLOAD: none, decode, overhead

``none`` only imports and reads the tiles: subtract its count from the others'. ``decode``: the
images benchmark's Compose (decode, RGB, float, normalise, CHW) on each tile, 4 times.
``overhead``: 20,000 int items through ``PyDataloader`` with 0 workers, batches of 64, identity
collation.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from images import make_tiles, rust_compose

from dataloader_rs import PyDataloader, PyDataset


class Ints(PyDataset[int]):
    def __len__(self) -> int:
        return 20_000

    def __getitem__(self, index: int) -> int:
        return index


def main() -> None:
    workload, directory = sys.argv[1], Path(sys.argv[2])
    if workload == "make":
        directory.mkdir(parents=True, exist_ok=True)
        make_tiles(directory, 64)
        return
    blobs = [p.read_bytes() for p in sorted(directory.glob("*.png"))]
    if workload == "decode":
        compose = rust_compose()
        for _ in range(4):
            for b in blobs:
                compose(b)
    elif workload == "overhead":
        count = sum(len(batch) for batch in PyDataloader(Ints(), batch_size=64, collate_fn=list))
        assert count == 20_000, count
    elif workload != "none":
        sys.exit(f"unknown workload {workload}: none, decode or overhead")


if __name__ == "__main__":
    main()
