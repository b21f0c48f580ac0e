"""The dataset base classes: subclass one and implement ``__len__`` and ``__getitem__``, or
``__iter__`` for a stream."""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Iterable, Iterator

T_co = TypeVar("T_co", covariant=True)


class PyDataset(Generic[T_co]):
    """A map-style dataset fetched synchronously: ``__len__`` and ``__getitem__(index)``.

    Define ``__getitems__(indices)`` to fetch a whole batch in one call (PyTorch's protocol); set
    ``__getitems__ = None`` in a subclass to turn an inherited one off. With ``num_workers > 0``
    these methods run on several threads at once.
    """

    def __init__(self) -> None:
        pass

    if TYPE_CHECKING:

        def __len__(self) -> int: ...

        def __getitem__(self, index: int) -> T_co: ...

        def __getitems__(self, indices: list[int]) -> Iterable[T_co]: ...


class PyAsyncDataset(Generic[T_co]):
    """A map-style dataset fetched by coroutines: ``async def __getitem__(index)``.

    The loader runs the coroutines on an asyncio event loop of its own, on a background thread.
    Objects tied to an event loop (a client session) must be created inside the coroutines and
    released by an optional ``async def aclose(self)``, awaited once when the loader is dropped.
    """

    def __init__(self) -> None:
        pass

    if TYPE_CHECKING:

        def __len__(self) -> int: ...

        def __getitem__(self, index: int) -> Awaitable[T_co]: ...

        def __getitems__(self, indices: list[int]) -> Awaitable[Iterable[T_co]]: ...

        def aclose(self) -> Awaitable[None]: ...


class PyIterableDataset(Generic[T_co]):
    """An iterable dataset (a stream): ``__iter__`` yields the items in order; ``__len__`` is
    optional. The loader reads it with one reader, or one per worker
    (``stream_readers="per_worker"``), where ``get_worker_info()`` tells each its share."""

    def __init__(self) -> None:
        pass

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")
