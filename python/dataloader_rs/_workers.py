"""What code running on a loader's threads can ask: ``get_worker_info()`` and ``item_seed()``."""

from __future__ import annotations

import sys
from typing import Any

from dataloader_rs import _native


class WorkerInfo:
    """The worker thread a dataset call runs on, as torch's ``WorkerInfo``: ``id`` in
    ``range(num_workers)``, ``num_workers``, ``seed`` (per worker and epoch) and ``dataset``
    (the loader's own object: threads share it, there is no copy per worker)."""

    __slots__ = ("dataset", "epoch", "id", "num_workers", "seed")

    def __init__(self, id: int, num_workers: int, seed: int, dataset: Any, epoch: int) -> None:
        self.id = id
        self.num_workers = num_workers
        self.seed = seed
        self.dataset = dataset
        self.epoch = epoch

    def __repr__(self) -> str:
        return f"WorkerInfo(id={self.id}, num_workers={self.num_workers}, seed={self.seed}, epoch={self.epoch})"


def get_worker_info() -> WorkerInfo | None:
    """The worker this call runs on, inside ``__getitem__``, ``__getitems__``, a transform or
    ``collate_fn`` loaded by worker threads; None elsewhere, and with ``num_workers=0`` (the
    caller's own thread), as in torch."""
    state = _native.worker_state()
    if state is None:
        return None
    info, worker, epoch, seed, _ = state
    if worker is None:
        return None
    return WorkerInfo(worker, info.num_workers, seed, info.dataset, epoch)


def item_seed() -> int:
    """The seed of the item being loaded (inside ``__getitem__`` or a transform): a 64-bit
    function of the loader's seed, the epoch and the item's index, the same whatever the number
    of threads. Seed a generator of your own with it (``np.random.default_rng(item_seed())``,
    ``torch.Generator().manual_seed(item_seed())``), never the global RNGs, which all threads
    share."""
    state = _native.worker_state()
    if state is None or state[4] is None:
        raise RuntimeError(
            "item_seed() is for code loading one item on a loader (a dataset's __getitem__ or a transform)"
        )
    return int(state[4])


def answer_torch_worker_info() -> None:
    """Makes ``torch.utils.data.get_worker_info()`` answer as ``get_worker_info()`` on this
    package's worker threads (libraries such as ``datasets`` shard a stream by it), and as
    before everywhere else. Done once, when torch is imported."""
    torch_data: Any = sys.modules.get("torch.utils.data")
    if torch_data is None or getattr(torch_data.get_worker_info, "_dataloader_rs", False):
        return
    worker_module: Any = sys.modules.get("torch.utils.data._utils.worker")
    torchs = torch_data.get_worker_info

    def torch_get_worker_info() -> Any:
        # torch's first: in its worker processes (forked while our threads ran) nothing of
        # ours is called, so no lock a parent's thread held at the fork is ever waited on.
        theirs = torchs()
        return theirs if theirs is not None else get_worker_info()

    torch_get_worker_info._dataloader_rs = True  # type: ignore[attr-defined]
    torch_get_worker_info.__doc__ = torchs.__doc__
    torch_data.get_worker_info = torch_get_worker_info
    if worker_module is not None:
        worker_module.get_worker_info = torch_get_worker_info
