"""A stream of text lines read in batches: one reader, one reader per worker, a shuffle buffer,
two ranks and a resumed epoch, each checked against what it must give.

Run it from a checkout after `pip install .`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

from dataloader_rs import PyDataloader, PyIterableDataset, get_worker_info


class Lines(PyIterableDataset[str]):
    """The lines of some files; a reader per worker reads every `num_workers`-th file."""

    def __init__(self, paths: list[Path]) -> None:
        super().__init__()
        self.paths = paths

    def __iter__(self) -> Iterator[str]:
        info = get_worker_info()
        mine = self.paths if info is None else self.paths[info.id :: info.num_workers]
        for path in mine:
            with path.open() as f:
                yield from (line.rstrip("\n") for line in f)


def words(line: str) -> list[str]:
    return line.split()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for s in range(4):
            path = Path(tmp) / f"shard{s}.txt"
            path.write_text("".join(f"shard {s} line {i}\n" for i in range(25)))
            paths.append(path)
        lines = Lines(paths)
        everything = [f"shard {s} line {i}" for s in range(4) for i in range(25)]

        # One reader: the stream's order; the workers split the lines into words.
        loader = PyDataloader(lines, batch_size=16, num_workers=2, transform=words)
        batches = list(loader)
        assert [" ".join(w) for b in batches for w in b] == everything
        print(f"one reader: {len(batches)} batches, in the stream's order")

        # One reader per worker: each reads its files, batches interleaved as torch's are.
        per_worker = PyDataloader(lines, batch_size=16, num_workers=2, stream_readers="per_worker")
        got = [x for b in per_worker for x in b]
        assert sorted(got) == sorted(everything)
        print(f"one reader per worker: {len(got)} lines, each once")

        # A shuffle buffer of 32 lines, the same order again for the same seed.
        def shuffled() -> list[str]:
            loader = PyDataloader(lines, batch_size=16, shuffle_buffer=32, seed=0)
            return [x for b in loader for x in b]

        assert shuffled() == shuffled() != everything
        assert sorted(shuffled()) == sorted(everything)
        print("a shuffle buffer of 32: a seeded permutation")

        # Two ranks: disjoint halves, the same number of batches.
        shares = [list(PyDataloader(lines, batch_size=16, rank=r, world_size=2)) for r in range(2)]
        assert len(shares[0]) == len(shares[1])
        assert sorted(x for s in shares for b in s for x in b) == sorted(everything)
        print(f"two ranks: {len(shares[0])} batches each")

        # Resume: stop after two batches, continue in a new loader from the state.
        first = PyDataloader(lines, batch_size=16, num_workers=2)
        it = iter(first)
        head = [next(it), next(it)]
        state = first.state_dict()
        del it
        second = PyDataloader(lines, batch_size=16, num_workers=2)
        second.load_state_dict(state)
        assert head + list(second) == list(PyDataloader(lines, batch_size=16))
        print(f"resumed at batch {state['position']}: the rest of the epoch, as uninterrupted")


if __name__ == "__main__":
    main()
