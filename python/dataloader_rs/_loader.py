"""``PyDataloader``: argument checking and epochs; the loading itself is in Rust (``_native``)."""

from __future__ import annotations

import inspect
import operator
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from dataloader_rs import _aio, _native
from dataloader_rs._datasets import PyAsyncDataset, PyDataset
from dataloader_rs._errors import Failure

B = TypeVar("B")

_MISSING: Any = object()
_U64 = 1 << 64


def _type_name(value: object) -> str:
    return type(value).__name__


def _int_arg(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if not isinstance(value, int):
        try:
            value = operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(f"{name} must be an int, got {value!r} ({_type_name(value)})") from None
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value}")
    return value


def _callable_arg(name: str, value: object) -> Callable[..., Any] | None:
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be callable or None, got {value!r} ({_type_name(value)})")
    return value


def _is_async(fn: object) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)


def _check_sync_dataset(dataset: object) -> None:
    cls = type(dataset)
    for name in ("__len__", "__getitem__"):
        if getattr(cls, name, None) is None:
            raise TypeError(f"{cls.__name__} must define {name} to be used as a dataset")
    for name in ("__getitem__", "__getitems__", "__len__"):
        if _is_async(getattr(cls, name, None)):
            raise TypeError(
                f"{cls.__name__}.{name} is async def, but {cls.__name__} is a PyDataset: "
                "subclass PyAsyncDataset for a dataset of coroutines"
            )


#: The datasets fetched in Rust.
RUST_DATASETS = (_native.HttpDataset, _native.FileDataset, _native.ObjectStoreDataset)


def _check_async_dataset(dataset: object) -> None:
    cls = type(dataset)
    for name in ("__len__", "__getitem__"):
        if getattr(cls, name, None) is None:
            raise TypeError(f"{cls.__name__} must define {name} to be used as a dataset")
    if _is_async(getattr(cls, "__len__", None)):
        raise TypeError(f"{cls.__name__}.__len__ must be a plain method, not async def")
    for name in ("__getitem__", "__getitems__", "aclose"):
        method = getattr(cls, name, None)
        if method is not None and not inspect.iscoroutinefunction(method):
            raise TypeError(
                f"{cls.__name__}.{name} must be async def: {cls.__name__} is a PyAsyncDataset "
                "(subclass PyDataset for a dataset of plain methods)"
            )


def _one_argument(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes exactly one positional argument (a torchvision Compose, say)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    positional = 0
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            return False
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            if p.default is not p.empty and positional >= 1:
                continue
            positional += 1
    return positional == 1


def _two_argument(transform: Callable[..., Any]) -> Callable[[int, Any], Any]:
    if _one_argument(transform):

        def apply(index: int, sample: Any) -> Any:
            return transform(sample)

        apply.__wrapped__ = transform  # type: ignore[attr-defined]
        return apply
    return transform


class PyDataloader(Generic[B]):
    """Loads batches of a dataset on worker threads, in order; ``torch.utils.data.DataLoader``'s
    interface. Iterating it again starts a new epoch.

    Args:
        dataset: a ``PyDataset`` (or any object with ``__len__`` and ``__getitem__``), a
            ``PyAsyncDataset``, or a Rust dataset.
        batch_size: samples per batch (at least 1).
        shuffle: a new random order every epoch; not with ``sampler``.
        seed: the seed of ``shuffle=True`` (only with it): the same seed gives the same epochs.
        sampler: an iterable of int indices, read whole at the start of each epoch.
        num_workers: batches loaded in parallel on threads; 0 loads on the calling thread.
        prefetch_depth: batches that may wait beyond the ``num_workers`` in progress (≥ 1; any
            size works: no more than the epoch's batches are held).
        transform: ``f(index, sample) -> sample`` for every item, before ``collate_fn``; a
            one-argument callable is called as ``f(sample)``.
        collate_fn: ``f(list_of_samples) -> batch``; without it a batch is a list.
        drop_last: drop the last batch of an epoch when it is short.
        item_concurrency: items of one batch fetched in parallel, one ``__getitem__`` each.
        return_indices: each batch comes as ``(batch, indices)``.
        runtime_threads: threads of the async runtime (async and Rust datasets only), 1 to 1024.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        shuffle: bool | None = False,
        *,
        seed: int | None = None,
        sampler: Iterable[int] | None = None,
        num_workers: int = 0,
        prefetch_depth: int = 2,
        transform: Callable[..., Any] | None = None,
        collate_fn: Callable[[list[Any]], B] | None = None,
        drop_last: bool = False,
        item_concurrency: int = _MISSING,
        return_indices: bool = False,
        runtime_threads: int | None = None,
        items_in_parallel: int = _MISSING,
        rank: int | None = None,
        world_size: int | None = None,
        max_failures: float | None = None,
    ) -> None:
        if items_in_parallel is not _MISSING:
            warnings.warn(
                "items_in_parallel is deprecated: use item_concurrency",
                DeprecationWarning,
                stacklevel=2,
            )
            if item_concurrency is not _MISSING:
                raise TypeError("give item_concurrency or its former name items_in_parallel, not both")
            item_concurrency = items_in_parallel
        if item_concurrency is _MISSING:
            item_concurrency = 1

        self.batch_size = _int_arg("batch_size", batch_size, 1)
        # Beyond a usize these are refused here, with their name (the native loader refuses
        # far smaller values of num_workers x item_concurrency for threads).
        self.num_workers = _int_arg("num_workers", num_workers, 0, sys.maxsize)
        self.prefetch_depth = _int_arg("prefetch_depth", prefetch_depth, 1)
        self.item_concurrency = _int_arg("item_concurrency", item_concurrency, 1, sys.maxsize)
        if shuffle is None:
            shuffle = False
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle must be a bool, got {shuffle!r} ({_type_name(shuffle)})")
        if not isinstance(drop_last, bool):
            raise TypeError(f"drop_last must be a bool, got {drop_last!r} ({_type_name(drop_last)})")
        if not isinstance(return_indices, bool):
            raise TypeError(f"return_indices must be a bool, got {return_indices!r}")
        if shuffle and sampler is not None:
            raise ValueError("shuffle=True cannot be combined with sampler: shuffle inside the sampler instead")
        if seed is not None:
            if not shuffle:
                raise ValueError("seed is only allowed with shuffle=True")
            if isinstance(seed, bool) or not isinstance(seed, int):
                raise TypeError(f"seed must be an int, got {seed!r} ({_type_name(seed)})")
        if sampler is not None and not isinstance(sampler, Iterable):
            raise TypeError(f"sampler must be an iterable of ints, got {sampler!r} ({_type_name(sampler)})")
        _callable_arg("transform", transform)
        _callable_arg("collate_fn", collate_fn)

        if isinstance(dataset, PyDataset) and isinstance(dataset, PyAsyncDataset):
            raise TypeError(f"{type(dataset).__name__} subclasses both PyDataset and PyAsyncDataset: choose one")
        is_async = isinstance(dataset, PyAsyncDataset)
        is_rust = isinstance(dataset, RUST_DATASETS)
        if is_async or is_rust:
            if runtime_threads is not None:
                runtime_threads = _int_arg("runtime_threads", runtime_threads, 1, 1024)
        elif runtime_threads is not None:
            raise ValueError(
                "runtime_threads sizes the async runtime of async and Rust datasets; "
                f"{type(dataset).__name__} is a synchronous dataset"
            )
        if is_async:
            _check_async_dataset(dataset)
        elif not is_rust:
            _check_sync_dataset(dataset)

        self.dataset = dataset
        self.shuffle = shuffle
        self.sampler = sampler
        self.transform = transform
        self.collate_fn = collate_fn
        self.drop_last = drop_last
        self.return_indices = return_indices
        self.runtime_threads = runtime_threads

        common: dict[str, Any] = {
            # A batch never holds more than the epoch, nor the ring more than its batches: a
            # larger value acts as sys.maxsize (which fits a usize).
            "batch_size": min(self.batch_size, sys.maxsize),
            "num_workers": self.num_workers,
            "prefetch_depth": min(self.prefetch_depth, sys.maxsize),
            "item_concurrency": self.item_concurrency,
            "drop_last": drop_last,
            "return_indices": return_indices,
            "shuffle": shuffle,
            "seed": None if seed is None else seed % _U64,
        }
        wrapped = None if transform is None else _two_argument(transform)
        if is_rust:
            self._native = _native.Loader.over_rust(
                dataset, wrapped, collate_fn, runtime_threads=runtime_threads, **common
            )
            self.seed = self._native.seed
            self._setup_run(rank, world_size, max_failures)
            return
        if is_async:
            # The loop is closed (aclose awaited) by the native loader once it and its
            # iterators are gone.
            event_loop = _aio.EventLoop(getattr(dataset, "aclose", None), type(dataset).__name__)
            getitems = getattr(dataset, "__getitems__", None) if self.item_concurrency == 1 else None
            try:
                self._native = _native.Loader.over_async(
                    event_loop,
                    dataset.__getitem__,
                    getitems,
                    wrapped,
                    collate_fn,
                    runtime_threads=runtime_threads,
                    **common,
                )
            except BaseException:
                event_loop.close()
                raise
            self.seed = self._native.seed
            self._setup_run(rank, world_size, max_failures)
            return

        getitems = getattr(dataset, "__getitems__", None)
        if getitems is not None and not callable(getitems):
            raise TypeError(f"{type(dataset).__name__}.__getitems__ must be a method or None")
        self._native = _native.Loader(
            dataset.__getitem__,
            getitems,
            None if transform is None else _two_argument(transform),
            collate_fn,
            batch_size=common["batch_size"],
            num_workers=self.num_workers,
            prefetch_depth=common["prefetch_depth"],
            item_concurrency=self.item_concurrency,
            drop_last=drop_last,
            return_indices=return_indices,
            shuffle=shuffle,
            seed=None if seed is None else seed % _U64,
        )
        self.seed = self._native.seed
        self._setup_run(rank, world_size, max_failures)

    def _setup_run(self, rank: int | None, world_size: int | None, max_failures: float | None) -> None:
        """Sharding (explicit, or from torchrun's RANK / WORLD_SIZE) and skipping."""
        if world_size is None and rank is None and "WORLD_SIZE" in os.environ:
            world_size = _int_arg("the WORLD_SIZE environment variable", int(os.environ["WORLD_SIZE"]), 1)
            rank = _int_arg("the RANK environment variable", int(os.environ.get("RANK", "0")), 0)
        if world_size is None and rank is not None:
            raise ValueError("rank needs world_size (or the WORLD_SIZE environment variable)")
        if world_size is not None:
            world_size = _int_arg("world_size", world_size, 1)
            rank = 0 if rank is None else rank
            if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
                raise ValueError(f"rank must be in [0, world_size): got rank {rank!r} of {world_size}")
            self._native.set_shard(rank, world_size)
        self.rank = rank
        self.world_size = world_size
        self.max_failures = max_failures
        if max_failures is not None:
            if isinstance(max_failures, bool):
                raise TypeError("max_failures must be an int (a count) or a float (a fraction of the epoch)")
            if isinstance(max_failures, int):
                self._native.set_max_failures(count=_int_arg("max_failures", max_failures, 0))
            elif isinstance(max_failures, float):
                self._native.set_max_failures(fraction=max_failures)
            else:
                raise TypeError(
                    f"max_failures must be an int (a count) or a float (a fraction), got {_type_name(max_failures)}"
                )

    def set_epoch(self, epoch: int) -> None:
        """Makes the next epoch number ``epoch``: its shuffle (and shard) follow from the seed and
        the number, as with ``DistributedSampler.set_epoch``."""
        self._native.set_epoch(_int_arg("epoch", epoch, 0))

    def state_dict(self) -> dict[str, Any]:
        """Where the run stands, as a plain JSON-serialisable dict: the epoch and the batches of
        it already received. Batches prefetched but not received count as not received."""
        epoch, position, num_batches, started = self._native.progress()
        if not started:
            epoch, position = self._native.epoch, 0
        elif position >= num_batches:
            epoch, position = epoch + 1, 0
        return {
            "version": 1,
            "epoch": epoch,
            "position": position,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "rank": self.rank,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Makes the next ``iter(loader)`` continue where ``state`` was taken: the batches not
        yet received, in the same order with the same contents, then the following epochs."""
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from state_dict(), got {_type_name(state)}")
        if state.get("version") != 1:
            raise ValueError(f"unknown state version {state.get('version')!r}")
        for key in ("seed", "batch_size", "drop_last", "rank", "world_size"):
            if state.get(key) != getattr(self, key):
                raise ValueError(
                    f"the state was taken with {key}={state.get(key)!r}, this loader has {getattr(self, key)!r}"
                )
        self._native.resume(_int_arg("epoch", state["epoch"], 0), _int_arg("position", state["position"], 0))

    def stats(self) -> dict[str, Any]:
        """Counters over every epoch: batches and items handed out, failed batches, the time spent
        waiting for batches, batch load latency (p50, p99) and skipped items."""
        return self._native.stats()

    @property
    def failures(self) -> list[Failure]:
        """The items skipped in the current epoch (with ``max_failures``)."""
        return self._native.failures()

    def _dataset_len(self) -> int:
        n = len(self.dataset)
        if n < 0:
            raise ValueError(f"len(dataset) must be non-negative, got {n}")
        return n

    def __len__(self) -> int:
        """The number of batches per epoch (``len(sampler)`` items when there is a sampler)."""
        n = len(self.sampler) if self.sampler is not None else self._dataset_len()  # type: ignore[arg-type]
        return self._native.num_batches(n)

    def __iter__(self) -> Iterator[B]:
        """Starts a new epoch: workers begin loading at once."""
        if self.sampler is not None:
            return self._native.epoch_from_sampler(self.sampler)
        return self._native.epoch_over(self._dataset_len())

    def __repr__(self) -> str:
        return (
            f"PyDataloader({type(self.dataset).__name__}, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, num_workers={self.num_workers}, "
            f"prefetch_depth={self.prefetch_depth}, item_concurrency={self.item_concurrency})"
        )
