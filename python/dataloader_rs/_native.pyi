from collections.abc import Callable, Iterable
from typing import Any, final

__version__: str

@final
class Loader:
    def __new__(
        cls,
        getitem: Callable[[int], Any],
        getitems: Callable[[list[int]], Iterable[Any]] | None,
        transform: Callable[[int, Any], Any] | None,
        collate_fn: Callable[[list[Any]], Any] | None,
        *,
        batch_size: int,
        num_workers: int,
        prefetch_depth: int,
        item_concurrency: int,
        drop_last: bool,
        return_indices: bool,
        shuffle: bool,
        seed: int | None,
    ) -> Loader: ...
    @property
    def seed(self) -> int | None: ...
    @property
    def epoch(self) -> int: ...
    def num_batches(self, len: int, /) -> int: ...
    def epoch_over(self, len: int, /) -> BatchIterator: ...
    def epoch_from_sampler(self, sampler: Iterable[int], /) -> BatchIterator: ...

@final
class BatchIterator:
    def __iter__(self) -> BatchIterator: ...
    def __next__(self) -> Any: ...
    def __len__(self) -> int: ...
