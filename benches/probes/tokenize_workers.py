"""`Tokenize` on a map-style dataset of texts, 0 to 3 workers: whether the workers tokenise in
parallel (the tokenising runs without the interpreter, the rest of a batch holds it).

The texts and the tokenizer are those of the ``parquet`` workload of ``benches/streams.py``
(rows of 24 words, a word-level tokenizer), held in a list; ``direct`` calls the transform on
each text in a loop, without a loader.

    python benches/probes/tokenize_workers.py [--items 50000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from tokenizers import Tokenizer, models, pre_tokenizers

from dataloader_rs import PyDataloader, PyDataset
from dataloader_rs.text import Tokenize


class Texts(PyDataset[str]):
    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> str:
        return self.texts[i]

    def __getitems__(self, indices: list[int]) -> list[str]:
        return [self.texts[i] for i in indices]


def epoch(loader: Any) -> float:
    start = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    words = [f"w{i}" for i in range(5000)]
    texts = [" ".join(words[(r * 7 + j * 13) % len(words)] for j in range(24)) for r in range(args.items)]
    vocab = {w: i for i, w in enumerate(words)}
    vocab["[UNK]"] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    transform = Tokenize(tokenizer)
    for workers in (0, 1, 2, 3):
        loader = PyDataloader(Texts(texts), batch_size=64, num_workers=workers, transform=transform)
        epoch(loader)
        took = statistics.median(epoch(loader) for _ in range(args.rounds))
        print(f"{workers} workers: {took * 1e3:7.1f} ms")
    start = time.perf_counter()
    for t in texts:
        transform(t)
    print(f"direct:    {(time.perf_counter() - start) * 1e3:7.1f} ms")


if __name__ == "__main__":
    main()
