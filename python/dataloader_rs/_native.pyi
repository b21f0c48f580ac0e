import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, final

from dataloader_rs._aio import EventLoop

_Column = Sequence[int] | Sequence[str] | Any  # or a numpy array of ints or strs
_Path = str | os.PathLike[str]

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
    @staticmethod
    def over_rust(
        dataset: HttpDataset | FileDataset | ObjectStoreDataset,
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
        runtime_threads: int | None,
    ) -> Loader: ...
    @staticmethod
    def over_async(
        event_loop: EventLoop,
        getitem: Callable[[int], Any],
        getitems: Callable[[list[int]], Any] | None,
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
        runtime_threads: int | None,
    ) -> Loader: ...
    @property
    def transform_threads(self) -> int: ...
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

@final
class HttpDataset:
    def __new__(
        cls,
        urls: Sequence[str],
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = 30.0,
        connect_timeout: float | None = 10.0,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        max_bytes: int = 67108864,
    ) -> HttpDataset: ...
    @classmethod
    def from_template(
        cls,
        template: str,
        columns: Mapping[str, _Column] | None = None,
        *,
        length: int | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = 30.0,
        connect_timeout: float | None = 10.0,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        max_bytes: int = 67108864,
    ) -> HttpDataset: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> bytes: ...

@final
class FileDataset:
    def __new__(
        cls,
        paths: Sequence[_Path],
        *,
        timeout: float | None = None,
        retries: int = 0,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        max_bytes: int = 67108864,
    ) -> FileDataset: ...
    @classmethod
    def from_template(
        cls,
        template: _Path,
        columns: Mapping[str, _Column] | None = None,
        *,
        length: int | None = None,
        timeout: float | None = None,
        retries: int = 0,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        max_bytes: int = 67108864,
    ) -> FileDataset: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> bytes: ...

@final
class ObjectStoreDataset:
    def __new__(
        cls,
        url: str,
        keys: Sequence[str],
        *,
        options: Mapping[str, str] | None = None,
        timeout: float | None = None,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        max_bytes: int = 67108864,
    ) -> ObjectStoreDataset: ...
    @classmethod
    def from_template(
        cls,
        url: str,
        template: str,
        columns: Mapping[str, _Column] | None = None,
        *,
        length: int | None = None,
        options: Mapping[str, str] | None = None,
        timeout: float | None = None,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        max_bytes: int = 67108864,
    ) -> ObjectStoreDataset: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> bytes: ...
