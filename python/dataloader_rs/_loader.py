"""``PyDataloader``: what only Python can do (torch's generator, the distributed environment,
``worker_init_fn``, the kind of dataset, torch's options) and epochs; the native loader
(``_native``) checks every argument it receives, once, and loads."""

from __future__ import annotations

import inspect
import operator
import os
import random
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from dataloader_rs import _native
from dataloader_rs._accelerate_state import in_gradient_state, route_skip_first_batches
from dataloader_rs._datasets import PyAsyncDataset, PyDataset, PyIterableDataset
from dataloader_rs._errors import Failure
from dataloader_rs._workers import answer_torch_worker_info as _answer_torch_worker_info
from dataloader_rs._workers import get_worker_info

B = TypeVar("B")

_MISSING: Any = object()
_U64 = 1 << 64
#: The highest epoch number: the one after it would not fit in 64 bits (it never wraps to 0).
LAST_EPOCH = _U64 - 2


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


def _split_by_node(dataset: object) -> bool:
    """Whether ``dataset`` already yields one rank's share only: a Hugging Face
    ``IterableDataset`` returned by ``datasets.distributed.split_dataset_by_node`` (training
    scripts call it themselves). Splitting it again would keep 1/world_size of a share."""
    hf = sys.modules.get("datasets")
    cls = getattr(hf, "IterableDataset", None)
    return isinstance(cls, type) and isinstance(dataset, cls) and getattr(dataset, "_distributed", None) is not None


def _chunk_state(state: object) -> bool:
    """Whether ``state`` is the state of a ``datasets.IterableDataset`` read in chunks."""
    if "datasets" not in sys.modules:
        return False
    from dataloader_rs import _hf_stream

    return _hf_stream.is_chunk_state(state)


def _is_async(fn: object) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)


def _is_stream(dataset: object) -> bool:
    """Whether ``dataset`` is an iterable dataset (a stream): torch's or Hugging Face's
    ``IterableDataset``, a ``PyIterableDataset``, or any object with ``__iter__`` and no
    ``__getitem__``."""
    if isinstance(dataset, PyIterableDataset):
        return True
    torch_data = sys.modules.get("torch.utils.data")
    hf = sys.modules.get("datasets")
    for cls in (getattr(torch_data, "IterableDataset", None), getattr(hf, "IterableDataset", None)):
        if isinstance(cls, type) and isinstance(dataset, cls):
            return True
    kind = type(dataset)
    return getattr(kind, "__iter__", None) is not None and getattr(kind, "__getitem__", None) is None


def _stream_iter(dataset: Any, init: Callable[[int], None] | None) -> Callable[[], Iterator[Any]]:
    """What a reader of a stream calls for its iterator: ``worker_init_fn(worker_id)`` first,
    on the reader's worker, when given."""

    def make_iter() -> Iterator[Any]:
        info = get_worker_info()
        if init is not None and info is not None:
            init(info.id)
        return iter(dataset)

    return make_iter


def _stream_source(dataset: Any, readers: object, batch_size: object) -> Any:
    """What the one reader of a stream reads: a ``datasets.IterableDataset``'s rows in chunks
    where they are the rows of ``iter(dataset)`` (see ``_hf_stream``), else ``dataset``. Readers
    per worker read ``iter(dataset)``: the dataset splits itself by ``get_worker_info()`` there."""
    if readers not in (None, "one") or "datasets" not in sys.modules:
        return dataset
    from dataloader_rs import _hf_stream

    how = _hf_stream.chunkable(dataset)
    if how is None:
        return dataset
    size = batch_size if isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size > 0 else 1
    kind = _hf_stream.ChunkedRows if how == "state" else _hf_stream.ChunkedRowsFromStart
    return kind(dataset, _hf_stream.chunk_rows(size))


def _check_stream_options(
    sampler: object, batch_sampler: object, readers: object, worker_init_fn: object, num_workers: object
) -> None:
    """What torch refuses with an iterable dataset, and what has no meaning with one reader."""
    for name, value in (("sampler", sampler), ("batch_sampler", batch_sampler)):
        if value is not None:
            raise ValueError(
                f"an iterable dataset (a stream) has no indices to sample: {name} is refused, as "
                "torch's DataLoader refuses it"
            )
    if worker_init_fn is not None and readers != "per_worker" and num_workers:
        raise ValueError(
            "worker_init_fn(worker_id) runs before a worker's reader starts: with the one "
            "reader of stream_readers='one' no worker reads the stream; use "
            "stream_readers='per_worker' (torch's way)"
        )


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
RUST_DATASETS = (_native.HttpDataset, _native.FileDataset, _native.ObjectStoreDataset, _native.TarDataset)


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


def _takes_index(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is called as ``fn(index, sample)``: only when it really takes two
    positional arguments (exactly two without a default). Everything else — one positional
    argument, ``*inputs`` (torchvision v2), builtins without a signature such as
    ``torch.as_tensor`` — is called as ``fn(sample)``. An ``nn.Module`` is judged by its
    ``forward``."""
    forward = getattr(fn, "forward", None)
    target = forward if callable(forward) and not inspect.isroutine(fn) else fn
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return False
    required = sum(
        1
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    )
    return required == 2


def _pinning(collate_fn: Callable[[list[Any]], Any] | None, pin: bool, device: str) -> Any:
    """``collate_fn``, then the batch's tensors pinned where CUDA is available (as torch's
    ``pin_memory=True``); without an accelerator, a warning and nothing pinned, as torch does."""
    if not pin:
        return collate_fn
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            torch = None
    if torch is None or not torch.cuda.is_available():
        warnings.warn(
            "pin_memory=True but no CUDA device is available: batches are not pinned",
            UserWarning,
            stacklevel=3,
        )
        return collate_fn
    from torch.utils.data._utils.pin_memory import pin_memory as pin_batch

    def collate_and_pin(samples: list[Any]) -> Any:
        batch = samples if collate_fn is None else collate_fn(samples)
        return pin_batch(batch, device or None)  # type: ignore[no-untyped-call]

    return collate_and_pin


def _with_worker_init(
    init: Callable[[int], None], getitem: Callable[[int], Any], getitems: Callable[[list[int]], Any] | None
) -> tuple[Callable[[int], Any], Callable[[list[int]], Any] | None]:
    """``getitem`` / ``getitems`` that first call ``init(worker_id)`` once on each worker thread
    of this loader (per loader: a thread kept for a later loader runs that loader's init)."""
    done = threading.local()

    def ensure() -> None:
        if not getattr(done, "ran", False):
            info = get_worker_info()
            if info is not None:
                done.ran = True
                init(info.id)

    def getitem_init(index: int) -> Any:
        ensure()
        return getitem(index)

    if getitems is None:
        return getitem_init, None
    many = getitems

    def getitems_init(indices: list[int]) -> Any:
        ensure()
        return many(indices)

    return getitem_init, getitems_init


def _check_torch_options(num_workers: object, persistent_workers: object, pin_memory: object, in_order: object) -> None:
    """Checks the arguments that only torch's DataLoader has and the native loader never sees
    (``prefetch_factor`` it turns into ``prefetch_depth`` itself)."""
    for name, value in (("persistent_workers", persistent_workers), ("pin_memory", pin_memory), ("in_order", in_order)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {value!r}")
    if persistent_workers and not num_workers:
        raise ValueError("persistent_workers=True needs num_workers > 0")


#: Configuration attributes that cannot change once a loader is made (setting one raises,
#: as torch's DataLoader does for its own: a silently ignored setting is worse).
_FROZEN = frozenset(
    {
        "dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers",
        "prefetch_depth", "prefetch_factor", "transform", "collate_fn", "drop_last",
        "item_concurrency", "items_in_flight", "return_indices", "runtime_threads",
        "persistent_workers",
        "pin_memory", "pin_memory_device", "timeout", "worker_init_fn", "generator",
        "in_order", "multiprocessing_context", "max_failures", "rank", "world_size", "seed",
    }
)  # fmt: skip

#: The seed every rank shuffles with when the run is distributed and no seed was given
#: (torch's DistributedSampler default): all ranks must draw the same permutation.
DISTRIBUTED_SEED = 0


def _generator_seed(generator: object) -> int:
    initial_seed = getattr(generator, "initial_seed", None)
    if not callable(initial_seed):
        raise TypeError(f"generator must be a torch.Generator, got {_type_name(generator)}")
    return int(initial_seed()) % _U64


def _draw_seed() -> int:
    """A seed for what the user gave none for (the shuffle, the per-item seeds), drawn as torch's
    ``RandomSampler`` draws its own: from torch's global RNG when torch is in use (so
    ``torch.manual_seed``, Lightning's ``seed_everything`` and transformers' ``set_seed`` make a
    run reproducible), else from ``random``'s (``random.seed``)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            return int(torch.empty((), dtype=torch.int64).random_().item()) % _U64
        except Exception:
            pass
    return random.getrandbits(64)


#: The keys of ``state_dict()``, in its order; ``base_seed`` came later (older states lack it).
_STATE_FIELDS = (
    "version",
    "epoch",
    "position",
    "seed",
    "batch_size",
    "drop_last",
    "rank",
    "world_size",
    "base_seed",
    "dataset_state",
)
_OPTIONAL_STATE_FIELDS = frozenset({"base_seed", "dataset_state"})


def _state_int(
    state: dict[str, Any], key: str, minimum: int, maximum: int | None = _U64 - 1, *, optional: bool = False
) -> Any:
    """``state[key]``, an int in ``[minimum, maximum]`` (or None when ``optional``)."""
    value = state.get(key)
    if value is None and optional:
        return None
    name = f"state[{key!r}]"
    if optional and not isinstance(value, (bool, int)) and not hasattr(type(value), "__index__"):
        raise TypeError(f"{name} must be an int or None, got {value!r} ({_type_name(value)})")
    return _int_arg(name, value, minimum, maximum)


def _distributed() -> tuple[int, int] | None:
    """Rank and world size of the run this process belongs to, or None when it is alone.

    In order: an initialised ``torch.distributed`` (only looked at when torch was imported),
    then torchrun's ``RANK`` / ``WORLD_SIZE``. A world size above 1 whose rank cannot be told
    is an error, never rank 0: two processes reading the same share lose the other half.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    world = os.environ.get("WORLD_SIZE")
    if world is None:
        return None
    world_size = _int_arg("the WORLD_SIZE environment variable", int(world), 1)
    if world_size == 1:
        return None
    rank = os.environ.get("RANK")
    if rank is None:
        raise RuntimeError(
            f"WORLD_SIZE={world_size} is set but RANK is not, and torch.distributed is not "
            "initialised: this process cannot tell which share of the data is its own. Start "
            "the epoch after init_process_group (Lightning and Accelerate do so), set RANK, "
            "or pass rank= and world_size="
        )
    rank_value = _int_arg("the RANK environment variable", int(rank), 0)
    if rank_value >= world_size:
        raise ValueError(f"RANK={rank_value} is not below WORLD_SIZE={world_size}")
    return rank_value, world_size


#: Whether Accelerate's ``skip_first_batches`` comes to our loaders (see ``_route_skip_first_batches``).
_skip_routed = False


def _route_skip_first_batches() -> None:
    """Once Accelerate is imported, routes its ``skip_first_batches`` (and the Trainer's) to
    ``PyDataloader.skip_first_batches`` for our loaders: its own rebuilds a torch DataLoader from
    our attributes, losing the transform and the batch types. Nothing is imported here."""
    global _skip_routed
    if _skip_routed or "accelerate" not in sys.modules:
        return
    _skip_routed = route_skip_first_batches()


class SequentialSampler:
    """``loader.sampler`` of a loader without shuffle or sampler: the indices in order."""

    def __init__(self, loader: PyDataloader[Any]) -> None:
        self._loader = loader

    def __len__(self) -> int:
        return self._loader._share_len()

    def __iter__(self) -> Iterator[int]:
        return iter(self._loader._epoch_order(self._loader._native.epoch))


class RandomSampler(SequentialSampler):
    """``loader.sampler`` of a shuffling loader: iterating it gives the order of the next epoch
    (this rank's share), without starting it."""

    def set_epoch(self, epoch: int) -> None:
        self._loader.set_epoch(epoch)


class BatchSampler:
    """``loader.batch_sampler`` of a loader cutting its sampler into batches of ``batch_size``."""

    def __init__(self, loader: PyDataloader[Any]) -> None:
        self._loader = loader
        self.sampler = loader.sampler
        self.batch_size = loader.batch_size
        self.drop_last = loader.drop_last

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[list[int]]:
        order = list(self.sampler)
        bs = int(self.batch_size or 1)
        for start in range(0, len(order), bs):
            batch = order[start : start + bs]
            if len(batch) < bs and self.drop_last:
                return
            yield batch


class PyDataloader(Generic[B]):
    """Loads batches of a dataset on worker threads, in order; ``torch.utils.data.DataLoader``'s
    interface (its arguments in its positional order), with threads for workers. Iterating it
    again starts a new epoch.

    At exit, loading stops between items and the exit waits at most 5 s for user code still
    running on the workers; then the process ends with status 1 and a message. After Ctrl-C
    (an uncaught ``KeyboardInterrupt``) it waits 0.1 s and ends as Python does after Ctrl-C:
    killed by SIGINT (status 130 in a shell, -2 in ``subprocess``).

    Args:
        dataset: a ``PyDataset`` (or any object with ``__len__`` and ``__getitem__``), a
            ``PyAsyncDataset``, or a Rust dataset; not an iterable dataset (``TypeError``).
        batch_size: samples per batch (at least 1).
        shuffle: a new random order every epoch; not with ``sampler``.
        sampler: an iterable of int indices, read whole at the start of each epoch; never
            sharded unless ``rank``/``world_size`` are given.
        batch_sampler: an iterable of lists of indices, one per batch (not with
            ``batch_size``, ``shuffle``, ``sampler`` or ``drop_last``).
        num_workers: batches loaded in parallel on threads; 0 loads on the calling thread.
        collate_fn: ``f(list_of_samples) -> batch``; without it a batch is a list.
        pin_memory: pin each batch's tensors where CUDA is available (a warning otherwise).
        drop_last: drop the last batch of an epoch when it is short.
        timeout: seconds a ``next()`` waits for a batch from the workers before RuntimeError.
        worker_init_fn: ``f(worker_id)``, once on each worker thread of the loader.
        multiprocessing_context: unused (workers are threads); a warning when given.
        generator: a ``torch.Generator`` whose seed seeds the shuffle and the item seeds.
        prefetch_factor: batches per worker in progress or waiting (torch's meaning).
        persistent_workers: accepted; worker threads always persist.
        pin_memory_device: the device to pin for.
        in_order: accepted; batches always come in sampler order.
        seed: the seed of ``shuffle=True`` (only with it): the same seed gives the same epochs.
            Without it (and without ``generator``) one is drawn when the loader is made, as
            torch's ``RandomSampler`` draws its own: from torch's global generator when torch
            is imported, else from ``random``'s; a state loaded later may replace it.
        prefetch_depth: batches that may wait beyond the ``num_workers`` in progress (≥ 1; any
            size works: no more than the epoch's batches are held).
        transform: ``f(index, sample) -> sample`` for every item, before ``collate_fn``; a
            callable taking one positional argument is called as ``f(sample)``.
        item_concurrency: items of one batch fetched in parallel, one ``__getitem__`` each.
        return_indices: each batch comes as ``(batch, indices)``.
        runtime_threads: threads of the async runtime (async and Rust datasets only), 1 to 1024.
        items_in_flight: the most items fetched at once across the batches in flight (Rust
            datasets only; ≥ 1): the earliest batch gets them first, the next takes up the
            slots it leaves. None: ``num_workers * item_concurrency``.
        rank, world_size: load this rank's share (otherwise found from torch.distributed or
            torchrun's environment when an epoch starts).
        max_failures: skip failed items, at most a count or a fraction of the epoch.
    """

    #: ``accelerate.skip_first_batches`` hands it to ``self.skip_first_batches``.
    _skips_its_own_batches = True

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Iterable[int] | None = None,
        batch_sampler: Iterable[Iterable[int]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], B] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        seed: int | None = None,
        prefetch_depth: int = _MISSING,
        transform: Callable[..., Any] | None = None,
        item_concurrency: int = _MISSING,
        return_indices: bool = False,
        runtime_threads: int | None = None,
        items_in_flight: int | None = None,
        items_in_parallel: int = _MISSING,
        rank: int | None = None,
        world_size: int | None = None,
        max_failures: float | None = None,
        stream_readers: str | None = None,
        shuffle_buffer: int | None = None,
        _base_seed: int | None = None,
        _drawn_seed: int | None = None,
    ) -> None:
        self._init_args = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        if items_in_parallel is not _MISSING:
            warnings.warn(
                "items_in_parallel is deprecated: use item_concurrency",
                DeprecationWarning,
                stacklevel=2,
            )
            if item_concurrency is not _MISSING:
                raise TypeError("give item_concurrency or its former name items_in_parallel, not both")
            item_concurrency = items_in_parallel

        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler gives whole batches: it cannot be combined with batch_size, "
                    "shuffle, sampler or drop_last"
                )
            if not isinstance(batch_sampler, Iterable):
                raise TypeError(f"batch_sampler must be an iterable of lists of ints, got {_type_name(batch_sampler)}")
            if rank is not None or world_size is not None:
                raise ValueError("batch_sampler gives whole batches: shard them in the batch sampler, not with rank=")
        _check_torch_options(num_workers, persistent_workers, pin_memory, in_order)
        if multiprocessing_context is not None:
            warnings.warn(
                "multiprocessing_context is not used: dataloader_rs workers are threads of this process",
                UserWarning,
                stacklevel=2,
            )
        if generator is not None:
            if seed is not None:
                raise TypeError("give seed or generator, not both")
            if shuffle:
                seed = _generator_seed(generator)
        _callable_arg("worker_init_fn", worker_init_fn)

        self._initialized = False
        if shuffle and sampler is not None:
            raise ValueError("shuffle=True cannot be combined with sampler: shuffle inside the sampler instead")
        if sampler is not None and not isinstance(sampler, Iterable):
            raise TypeError(f"sampler must be an iterable of ints, got {sampler!r} ({_type_name(sampler)})")
        _callable_arg("transform", transform)
        _callable_arg("collate_fn", collate_fn)

        if isinstance(dataset, PyDataset) and isinstance(dataset, PyAsyncDataset):
            raise TypeError(f"{type(dataset).__name__} subclasses both PyDataset and PyAsyncDataset: choose one")
        is_async = isinstance(dataset, PyAsyncDataset)
        is_rust = isinstance(dataset, RUST_DATASETS)
        is_stream = not is_rust and not is_async and _is_stream(dataset)
        if is_stream:
            _check_stream_options(sampler, batch_sampler, stream_readers, worker_init_fn, num_workers)
        if is_async or is_rust:
            if worker_init_fn is not None:
                raise ValueError(
                    "worker_init_fn runs on the worker threads of a PyDataset; the items of "
                    f"{type(dataset).__name__} are fetched without them"
                )
        elif runtime_threads is not None:
            raise ValueError(
                "runtime_threads sizes the async runtime of async and Rust datasets; "
                f"{type(dataset).__name__} is a synchronous dataset"
            )
        if items_in_flight is not None and not is_rust:
            raise ValueError(
                "items_in_flight bounds the fetches of Rust datasets (HttpDataset, "
                f"FileDataset, ObjectStoreDataset, TarDataset); {type(dataset).__name__} is not one"
            )
        if is_async:
            _check_async_dataset(dataset)
        elif not is_rust and not is_stream:
            _check_sync_dataset(dataset)

        self.dataset = dataset
        self.transform = transform
        self.collate_fn = collate_fn
        self.drop_last = drop_last
        self.return_indices = return_indices
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.persistent_workers = persistent_workers
        self.worker_init_fn = worker_init_fn
        self.generator = generator
        self.in_order = in_order
        self.multiprocessing_context = multiprocessing_context
        self._sampler = sampler
        self._batch_sampler = batch_sampler
        self._user_seed = seed
        #: A shuffle seed the loader drew (none given): a state's seed replaces it.
        self._seed_drawn = bool(shuffle) and seed is None
        if self._seed_drawn:
            seed = _drawn_seed if _drawn_seed is not None else _draw_seed()
        #: The seed of a state that replaced the drawn one (``load_state_dict``).
        self._adopted_seed: int | None = None
        self._dist_seed: int | None = None
        #: (epoch, position) of the latest iterator when made: see ``_unused_epoch``.
        self._last_iter: tuple[int, int] | None = None
        #: The batch the next epoch starts at, from ``load_state_dict`` until it starts.
        self._resume_position: int | None = None
        #: (epoch, position, the stream dataset's state) loaded, until the epoch starts.
        self._resume_state: tuple[int, int, Any] | None = None

        if shuffle or (is_stream and seed is not None):
            base_seed = None  # the shuffle's seed (or the shuffle buffer's)
        elif _base_seed is not None:
            base_seed = _base_seed % _U64
        elif generator is not None:
            base_seed = _generator_seed(generator)
        else:
            base_seed = _draw_seed()
        args: dict[str, Any] = {
            "kind": "rust" if is_rust else "async" if is_async else "stream" if is_stream else "python",
            "dataset": dataset,
            "transform": transform,
            "transform_takes_index": transform is not None and _takes_index(transform),
            "collate_fn": _pinning(collate_fn, pin_memory, pin_memory_device),
            "return_indices": return_indices,
            "timeout": timeout,
            "runtime_threads": runtime_threads,
            "items_in_flight": items_in_flight,
            "batch_size": 1 if batch_sampler is not None else batch_size,
            "num_workers": num_workers,
            "prefetch_depth": None if prefetch_depth is _MISSING else prefetch_depth,
            "prefetch_factor": prefetch_factor,
            "item_concurrency": None if item_concurrency is _MISSING else item_concurrency,
            "drop_last": drop_last,
            "shuffle": shuffle,
            "seed": seed,
            "base_seed": base_seed,
            "rank": rank,
            "world_size": world_size,
            "max_failures": max_failures,
            "stream_readers": stream_readers,
            "shuffle_buffer": shuffle_buffer,
        }
        if is_async:
            # The loop is closed (aclose awaited) by the native loader once it and its
            # iterators are gone. `_aio` (and asyncio, half of this package's import time) is
            # imported only by the loaders that need it.
            from dataloader_rs import _aio

            event_loop = _aio.EventLoop(getattr(dataset, "aclose", None), type(dataset).__name__)
            try:
                self._native = _native.Loader(
                    **args,
                    event_loop=event_loop,
                    getitem=dataset.__getitem__,
                    getitems=getattr(dataset, "__getitems__", None),
                )
            except BaseException:
                event_loop.close()
                raise
        elif is_rust:
            self._native = _native.Loader(**args)
        elif is_stream:
            if stream_readers == "per_worker":
                _answer_torch_worker_info()
            source = _stream_source(dataset, stream_readers, batch_size)
            args["dataset"] = source
            self._native = _native.Loader(
                **args,
                make_iter=_stream_iter(source, worker_init_fn) if worker_init_fn is not None else None,
            )
        else:
            getitem = dataset.__getitem__
            getitems = getattr(dataset, "__getitems__", None)
            if getitems is not None and not callable(getitems):
                raise TypeError(f"{type(dataset).__name__}.__getitems__ must be a method or None")
            if worker_init_fn is not None and num_workers:  # zero workers run no init
                getitem, getitems = _with_worker_init(worker_init_fn, getitem, getitems)
            self._native = _native.Loader(**args, getitem=getitem, getitems=getitems)
        native = self._native
        self.batch_size = None if batch_sampler is not None else native.batch_size
        self.num_workers = native.num_workers
        self.prefetch_depth = native.prefetch_depth
        self.prefetch_factor = prefetch_factor if prefetch_factor is not None else (2 if self.num_workers else None)
        self.item_concurrency = native.item_concurrency
        self.shuffle = native.shuffle
        self.timeout = native.timeout
        self.runtime_threads = native.runtime_threads
        self.items_in_flight = native.items_in_flight
        self._base_seed = native.base_seed
        self.max_failures = max_failures
        self._is_stream = is_stream
        #: What the native loader reads as the stream: the dataset, or its rows read in chunks.
        self._stream_source = args["dataset"] if is_stream else None
        self.stream_readers = ("one" if stream_readers is None else stream_readers) if is_stream else None
        self.shuffle_buffer = shuffle_buffer
        self._initialized = True
        _route_skip_first_batches()

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FROZEN and getattr(self, "_initialized", False):
            raise ValueError(
                f"{name} cannot be changed once the loader is made (it would be silently "
                "ignored): make a new PyDataloader"
            )
        object.__setattr__(self, name, value)

    @property
    def sampler(self) -> Any:
        """The sampler given, or one that shows the loader's own order (``SequentialSampler``,
        ``RandomSampler``), as torch's DataLoader always has one."""
        if self._sampler is not None:
            return self._sampler
        return RandomSampler(self) if self.shuffle else SequentialSampler(self)

    @property
    def batch_sampler(self) -> Any:
        """The batch sampler given, or a ``BatchSampler`` over ``sampler``."""
        if self._batch_sampler is not None:
            return self._batch_sampler
        return BatchSampler(self)

    @property
    def seed(self) -> int | None:
        """The shuffle's seed, or None without shuffle: the one given; else the one drawn when
        the loader was made (from torch's global RNG, or ``random``'s), or a state's that
        replaced it; in a distributed run without a seed, the one all ranks share."""
        seed = self._epoch_seed()
        return self._native.seed if seed is None else seed

    def _epoch_seed(self) -> int | None:
        """The seed the next epochs shuffle with when it is not the native loader's own."""
        if self._adopted_seed is not None:
            return self._adopted_seed
        return self._dist_seed

    def _shard(self) -> tuple[int, int] | None:
        """This epoch's (rank, world_size): given, or from the distributed run; never for a
        sampler or batch sampler the user passed (their order is theirs), nor for a stream
        already split by node."""
        explicit = self._native.explicit_shard
        if explicit is not None:
            return explicit
        if self._sampler is not None or self._batch_sampler is not None:
            return None
        if self._is_stream and _split_by_node(self.dataset):
            return None
        return _distributed()

    def _apply_shard(self) -> tuple[int, int] | None:
        shard = self._shard()
        if shard is None:
            self._native.clear_shard()
        else:
            self._native.set_shard(*shard)
        distributed_default = shard is not None and shard[1] > 1 and self.shuffle and self._user_seed is None
        object.__setattr__(self, "_dist_seed", DISTRIBUTED_SEED if distributed_default else None)
        return shard

    @property
    def rank(self) -> int | None:
        """This process's rank when the loader loads a share, else None."""
        shard = self._shard()
        return None if shard is None else shard[0]

    @property
    def world_size(self) -> int | None:
        """The number of shares when the loader loads one, else None."""
        shard = self._shard()
        return None if shard is None else shard[1]

    def set_epoch(self, epoch: int) -> None:
        """Makes the next epoch number ``epoch``: its shuffle (and shard) follow from the seed and
        the number, as with ``DistributedSampler.set_epoch``. Called while the epoch just
        started has handed out nothing and is numbered ``epoch`` already, it changes nothing:
        trainers (Lightning) make the iterator first and name its epoch after."""
        epoch = _int_arg("epoch", epoch, 0, LAST_EPOCH)
        if self._unused_epoch() == epoch:
            return
        self._last_iter = None
        self._native.set_epoch(epoch)

    def _unused_epoch(self) -> int | None:
        """The number of the latest epoch when it has handed out no batch and no epoch came
        after it: an iterator made only to check that the loader iterates (Lightning does so)
        does not use up an epoch number."""
        if self._last_iter is None:
            return None
        epoch, position, _, started = self._native.progress()
        if started and (epoch, position) == self._last_iter and self._native.epoch == epoch + 1:
            return int(epoch)
        return None

    def state_dict(self) -> dict[str, Any]:
        """Where the run stands, as a plain JSON-serialisable dict: the epoch and the batches of
        it already received. Batches prefetched but not received count as not received."""
        epoch, position = self._native.resume_point()
        if self._resume_position is not None:  # loaded, not started yet
            epoch, position = self._native.epoch, self._resume_position
        state: dict[str, Any] = {
            "version": 1,
            "epoch": epoch,
            "position": position,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "rank": self.rank,
            "world_size": self.world_size,
            # What item_seed() and the random transforms draw from: a resumed run draws the same.
            "base_seed": self._base_seed,
        }
        if self._is_stream:
            state["dataset_state"] = self._stream_state(epoch, position)
        return state

    def _stream_state(self, epoch: int, position: int) -> Any:
        """The stream dataset's own ``state_dict()`` after the batches handed out, when its one
        reader takes them; None otherwise (a resume then reads the stream again and drops)."""
        if self._resume_state is not None and (epoch, position) == self._resume_state[:2]:
            return self._resume_state[2]
        taken = self._native.stream_state()
        if taken is not None and (taken[0], taken[1]) == (epoch, position):
            return taken[2]
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Makes the next ``iter(loader)`` continue where ``state`` was taken: the batches not
        yet received, in the same order with the same contents, then the following epochs.

        Every field is checked against this loader (``TypeError`` for a wrong type,
        ``ValueError`` for a value out of range or that differs, each naming the field) before
        anything changes. A shuffle seed this loader drew itself gives way to the state's: only
        a seed given to both (``seed=``, ``generator=``) must be the same."""
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from state_dict(), got {_type_name(state)}")
        for key in state:
            if key not in _STATE_FIELDS:
                raise ValueError(f"state has an unknown key {key!r} (a state_dict() has {', '.join(_STATE_FIELDS)})")
        for key in _STATE_FIELDS:
            if key not in state and key not in _OPTIONAL_STATE_FIELDS:
                raise ValueError(f"state lacks the key {key!r} (a state_dict() has {', '.join(_STATE_FIELDS)})")
        version = _state_int(state, "version", 0)
        if version != 1:
            raise ValueError(f"unknown state version: state['version'] is {version}, this loader reads 1")
        epoch = _state_int(state, "epoch", 0, LAST_EPOCH)
        position = _state_int(state, "position", 0)
        seed = _state_int(state, "seed", 0, optional=True)
        batch_size = _state_int(state, "batch_size", 1, None, optional=True)
        drop_last = state["drop_last"]
        if not isinstance(drop_last, bool):
            raise TypeError(f"state['drop_last'] must be a bool, got {drop_last!r} ({_type_name(drop_last)})")
        rank = _state_int(state, "rank", 0, optional=True)
        world_size = _state_int(state, "world_size", 1, optional=True)
        base_seed = _state_int(state, "base_seed", 0, optional=True)  # absent from early states
        dataset_state = state.get("dataset_state")
        source: Any = self._stream_source
        if dataset_state is not None:
            restore = getattr(source, "load_state_dict", None)
            if not self._is_stream or not callable(restore):
                name = type(self.dataset).__name__
                if source is not self.dataset:
                    raise ValueError(
                        f"state['dataset_state'] is a dataset's state, but this loader keeps none for {name}: "
                        "its shuffle buffer loses its rows with its state, so a resume reads it again"
                    )
                raise ValueError(f"state['dataset_state'] is for a stream with load_state_dict(); {name} has none")
            check = getattr(source, "check_state", None)
            if check is not None:
                check(dataset_state)
            elif source is self.dataset and _chunk_state(dataset_state):
                raise ValueError(
                    "state['dataset_state'] was taken by a loader reading this datasets.IterableDataset "
                    "in chunks; this loader reads iter(dataset) (another stream_readers, format or dataset)"
                )

        self._apply_shard()
        taken = {"batch_size": batch_size, "drop_last": drop_last, "rank": rank, "world_size": world_size}
        for key, value in taken.items():
            if value != getattr(self, key):
                raise ValueError(f"the state was taken with {key}={value!r}, this loader has {getattr(self, key)!r}")
        adopt = None
        if seed != self.seed:
            # A seed this loader drew (or the default of a distributed run) is not the user's.
            if not self.shuffle or seed is None or self._user_seed is not None:
                raise ValueError(f"the state was taken with seed={seed!r}, this loader has {self.seed!r}")
            adopt = seed
        try:
            num_batches: int | None = len(self)
        except TypeError:  # a sampler or batch sampler without a length
            num_batches = None
        if num_batches is not None and position > num_batches:
            raise ValueError(
                f"state['position'] is {position}, past the end of the epoch: this loader's epochs "
                f"have {num_batches} batches"
            )
        if position == num_batches and position > 0:
            # Taken after the last batch: the next epoch starts, as state_dict() would say.
            if epoch == LAST_EPOCH:
                raise ValueError(f"state['epoch'] is {epoch}, handed out whole: no epoch number is left after it")
            epoch, position = epoch + 1, 0

        self._native.resume(epoch, position)
        self._resume_position = position
        self._resume_state = None
        forget = getattr(source, "forget", None)
        if callable(forget):
            forget()
        if dataset_state is not None and position > 0:
            source.load_state_dict(dataset_state)
            self._native.restore_stream(position)
            self._resume_state = (epoch, position, dataset_state)
        if adopt is not None:
            self._adopted_seed = adopt
        if base_seed is not None:
            self._base_seed = base_seed
            self._native.set_base_seed(base_seed)
        self._last_iter = None

    def stats(self) -> dict[str, Any]:
        """Counters over every epoch: batches and items handed out, failed batches, the time spent
        waiting for batches, batch load latency (p50, p99) and skipped items; for the Rust datasets
        and ``TarStream``, their requests in flight, bytes fetched, retries and cache hits (None for
        datasets that do their own I/O)."""
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

    # The two below serve the loader's own samplers, made only when no sampler was given.

    def _share_len(self) -> int:
        """Items of an epoch of the dataset for this rank."""
        self._apply_shard()
        return self._native.share_len(self._dataset_len())

    def _epoch_order(self, epoch: int) -> list[int]:
        """The indices epoch ``epoch`` loads (this rank's share), without loading them."""
        self._apply_shard()
        return self._native.order_of(epoch, self._dataset_len(), seed=self._epoch_seed())

    def __len__(self) -> int:
        """The number of batches per epoch (``len(sampler)`` items when there is a sampler)."""
        _route_skip_first_batches()  # Trainer asks the length before it skips
        if self._batch_sampler is not None:
            return len(self._batch_sampler)  # type: ignore[arg-type]
        if self._is_stream:
            return self._stream_len()
        self._apply_shard()
        n = len(self._sampler) if self._sampler is not None else self._dataset_len()  # type: ignore[arg-type]
        return self._native.num_batches(n)

    def _stream_len(self) -> int:
        """The batches of an epoch of a stream with ``__len__``: this rank's complete rounds
        of ``world_size`` items, in batches (as torch, an estimate for readers per worker)."""
        if getattr(type(self.dataset), "__len__", None) is None:
            name = type(self.dataset).__name__
            raise TypeError(f"{name} is an iterable dataset without __len__: its loader has no len()")
        shard = self._apply_shard()
        items = self._dataset_len() // (1 if shard is None else shard[1])
        size = int(self._native.batch_size)
        return items // size if self.drop_last else -(-items // size)

    def __iter__(self) -> Iterator[B]:
        """Starts a new epoch: workers begin loading at once."""
        return self._start_epoch(0)

    def skip_first_batches(self, num_batches: int) -> SkipFirstBatches[B]:
        """This loader with every epoch started at batch ``num_batches``: the batches it would
        give after its first ``num_batches``, same values and types, the skipped ones never
        loaded. ``accelerate.skip_first_batches`` (transformers' ``Trainer`` on a mid-epoch
        resume) comes here once Accelerate is imported (see ``dataloader_rs.accelerate``)."""
        return SkipFirstBatches(self, _int_arg("num_batches", num_batches, 0))

    def _start_epoch(self, skip: int) -> Iterator[B]:
        """The next epoch, its first ``skip`` batches (after any a loaded state skips) not loaded."""
        unused = self._unused_epoch()
        if unused is not None:
            self._native.set_epoch(unused)
        if skip:
            # The native epoch clamps a start past its end: an empty epoch, as torch's would be.
            self._native.resume(self._native.epoch, min((self._resume_position or 0) + skip, _U64 - 1))
        if self._native.epoch > LAST_EPOCH:
            raise RuntimeError(f"epoch {LAST_EPOCH} was the last an epoch number can count to: set_epoch(n) to go on")
        if self._batch_sampler is not None:
            batches = self._native.epoch_from(batch_sampler=self._batch_sampler)
        elif self._is_stream:
            self._stream_shard(self._apply_shard())
            self._stream_set_epoch()
            batches = self._native.epoch_stream()
        else:
            self._apply_shard()
            if self._sampler is not None:
                batches = self._native.epoch_from(sampler=self._sampler)
            else:
                batches = self._native.epoch_over(self._dataset_len(), seed=self._epoch_seed())
        self._last_iter = (batches.epoch, batches.position)
        self._resume_position = None
        self._resume_state = None
        if "accelerate.state" in sys.modules:
            return in_gradient_state(batches)  # type: ignore[no-any-return]
        return batches

    def _stream_shard(self, shard: tuple[int, int] | None) -> None:
        """A stream whose ``set_rank(rank, world_size)`` returns True (a ``TarStream`` with
        ``split_by_rank=True``) reads its rank's share itself: the loader then keeps all it
        gives instead of every ``world_size``-th item."""
        set_rank = getattr(self.dataset, "set_rank", None)
        if shard is not None and shard[1] > 1 and callable(set_rank) and set_rank(*shard) is True:
            self._native.clear_shard()

    def _stream_set_epoch(self) -> None:
        """Tells a stream with ``set_epoch`` (a ``TarStream``, a ``datasets.IterableDataset``)
        the epoch about to start, as Hugging Face's trainer does: its own shuffle follows the
        loader's epochs."""
        set_epoch = getattr(self.dataset, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(self._native.epoch)

    def __getstate__(self) -> dict[str, Any]:
        """A loader pickles as its configuration, dataset and place in the run; threads are
        made again where it is unpickled (``ddp_spawn`` sends loaders to its processes so)."""
        args = {k: v for k, v in self._init_args.items() if v is not _MISSING}
        # What a generator gave (or the drawn seeds) travels as plain seeds; a drawn seed stays
        # one the loader drew (a state may replace it).
        args["generator"] = None
        if self._seed_drawn:
            args["_drawn_seed"] = self._adopted_seed if self._adopted_seed is not None else self._native.seed
        elif self.shuffle:
            args["seed"] = self._native.seed
        args["_base_seed"] = self._base_seed
        return {"args": args, "epoch": self._native.epoch}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state["args"])  # type: ignore[misc]
        self._native.set_epoch(state["epoch"])

    def __repr__(self) -> str:
        return (
            f"PyDataloader({type(self.dataset).__name__}, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, num_workers={self.num_workers}, "
            f"prefetch_depth={self.prefetch_depth}, item_concurrency={self.item_concurrency})"
        )


class LoaderView(Generic[B]):
    """A wrapper of a ``PyDataloader`` (``self.loader``) that hands on what trainers read of a
    loader: its dataset, its batch size and the epoch number (``set_epoch``)."""

    loader: PyDataloader[B]

    @property
    def dataset(self) -> Any:
        return self.loader.dataset

    @property
    def batch_size(self) -> int | None:
        return self.loader.batch_size

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)


class SkipFirstBatches(LoaderView[B]):
    """A ``PyDataloader`` whose every epoch starts at batch ``num_batches``: what
    ``loader.skip_first_batches(n)`` returns. The epochs are the loader's own (``set_epoch``
    names them; iterating the loader itself gives whole epochs)."""

    #: ``accelerate.skip_first_batches`` hands it to ``self.skip_first_batches``.
    _skips_its_own_batches = True

    def __init__(self, loader: PyDataloader[B], num_batches: int) -> None:
        self.loader = loader
        self.num_batches = num_batches

    def __len__(self) -> int:
        return max(0, len(self.loader) - self.num_batches)

    def __iter__(self) -> Iterator[B]:
        return self.loader._start_epoch(self.num_batches)

    def skip_first_batches(self, num_batches: int) -> SkipFirstBatches[B]:
        return SkipFirstBatches(self.loader, self.num_batches + _int_arg("num_batches", num_batches, 0))

    def __repr__(self) -> str:
        return f"{self.loader!r}.skip_first_batches({self.num_batches})"
