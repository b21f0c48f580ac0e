"""Hugging Face Accelerate with a ``PyDataloader``.

``Accelerator.prepare`` only wraps torch's own ``DataLoader`` and hands any other iterable back
unchanged. A ``PyDataloader`` needs nothing more: once an ``Accelerator`` exists, each epoch's
iterator tells Accelerate's gradient state where the epoch ends, as Accelerate's own loaders
do, so ``accelerator.accumulate`` syncs on the last batch of every epoch exactly as with a
prepared torch ``DataLoader``. The loader keeps its threads and finds its rank from
``torch.distributed`` itself, so nothing is sharded twice.

``prepare(accelerator, loader)`` also moves each batch to ``accelerator.device``:

    from dataloader_rs.accelerate import prepare

    accelerator = Accelerator(gradient_accumulation_steps=4)
    model, optimizer = accelerator.prepare(model, optimizer)
    loader = prepare(accelerator, PyDataloader(dataset, batch_size=32, shuffle=True))
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from dataloader_rs._loader import PyDataloader

__all__ = ["EpochInGradientState", "PreparedLoader", "prepare"]


def gradient_state() -> Any:
    """Accelerate's ``GradientState`` once an ``Accelerator`` made it, else None (nothing is
    imported or created here: the state is shared by every ``Accelerator`` of the process)."""
    state = sys.modules.get("accelerate.state")
    cls = getattr(state, "GradientState", None)
    if cls is None or not getattr(cls, "_shared_state", None):
        return None
    return cls()


class _Marker:
    """What the gradient state holds while an epoch runs: the two values it reads of a loader.
    Not the iterator itself, so that an abandoned epoch is freed (and taken off) as usual."""

    __slots__ = ("__weakref__", "end_of_dataloader", "remainder")  # Accelerate keeps weak references

    def __init__(self) -> None:
        self.end_of_dataloader = False
        # No batch is padded, so ``gather_for_metrics`` has nothing to drop.
        self.remainder = -1


class EpochInGradientState:
    """An epoch's iterator that tells Accelerate's gradient state where the epoch ends: it is
    the state's active loader from its first batch to its end, and ``end_of_dataloader`` is
    true from the moment the last batch is handed out (as in Accelerate's ``DataLoaderShard``)."""

    __slots__ = ("_batches", "_marker", "_registered", "_state")

    def __init__(self, batches: Any, state: Any) -> None:
        self._batches = batches
        self._state = state
        self._marker = _Marker()
        self._registered = False

    def __iter__(self) -> EpochInGradientState:
        return self

    def __next__(self) -> Any:
        if not self._registered:
            if self._marker.end_of_dataloader:
                raise StopIteration
            self._state._add_dataloader(self._marker)
            self._registered = True
        try:
            batch = next(self._batches)
        except StopIteration:
            self._marker.end_of_dataloader = True
            self._leave()
            raise
        if len(self._batches) == 0:
            self._marker.end_of_dataloader = True
        return batch

    @property
    def end_of_dataloader(self) -> bool:
        return self._marker.end_of_dataloader

    @property
    def remainder(self) -> int:
        return self._marker.remainder

    @property
    def epoch(self) -> int:
        return int(self._batches.epoch)

    @property
    def position(self) -> int:
        return int(self._batches.position)

    def __len__(self) -> int:
        return len(self._batches)

    def _leave(self) -> None:
        if self._registered:
            self._registered = False
            # Older Accelerates remove with list.remove: the state may have been reset meanwhile.
            with contextlib.suppress(ValueError):
                self._state._remove_dataloader(self._marker)

    def __del__(self) -> None:
        self._leave()


def in_gradient_state(batches: Any) -> Any:
    """``batches`` (an epoch's iterator) made known to Accelerate's gradient state when an
    ``Accelerator`` exists; ``batches`` itself otherwise."""
    state = gradient_state()
    return batches if state is None else EpochInGradientState(batches, state)


class PreparedLoader:
    """A ``PyDataloader`` as Accelerate's ``DataLoaderShard`` presents one: batches moved to
    the accelerator's device, and the end of each epoch told to its gradient state."""

    def __init__(self, accelerator: Any, loader: PyDataloader[Any], device_placement: bool = True) -> None:
        if not isinstance(loader, PyDataloader):
            raise TypeError(f"prepare() takes a PyDataloader, got {type(loader).__name__}")
        self.accelerator = accelerator
        self.loader = loader
        self.device_placement = device_placement
        self.gradient_state = accelerator.gradient_state
        self._epoch: EpochInGradientState | None = None
        self._skip = 0

    @property
    def end_of_dataloader(self) -> bool:
        return self._epoch is not None and self._epoch.end_of_dataloader

    @property
    def remainder(self) -> int:
        return -1

    @property
    def device(self) -> Any:
        return self.accelerator.device

    @property
    def dataset(self) -> Any:
        return self.loader.dataset

    @property
    def batch_size(self) -> int | None:
        return self.loader.batch_size

    def __len__(self) -> int:
        return len(self.loader) - self._skip

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def skip_first_batches(self, num_batches: int) -> PreparedLoader:
        """The next epoch starts at batch ``num_batches`` (of that epoch, with the same order):
        what ``Accelerator.skip_first_batches`` does for torch's loaders, without replacing
        this loader by one of torch's."""
        state = self.loader.state_dict()
        state["position"] = num_batches
        self.loader.load_state_dict(state)
        skipped = PreparedLoader(self.accelerator, self.loader, self.device_placement)
        skipped._skip = num_batches
        return skipped

    def __iter__(self) -> Iterator[Any]:
        from accelerate.utils import send_to_device  # type: ignore[import-untyped]

        epoch = iter(self.loader)
        if not isinstance(epoch, EpochInGradientState):
            epoch = EpochInGradientState(epoch, self.gradient_state)
        self._epoch = epoch
        try:
            for batch in epoch:
                yield send_to_device(batch, self.device) if self.device_placement else batch
        finally:
            epoch._leave()
            self._skip = 0


def prepare(accelerator: Any, loader: PyDataloader[Any], device_placement: bool = True) -> PreparedLoader:
    """``loader`` made known to ``accelerator``: see the module's documentation."""
    return PreparedLoader(accelerator, loader, device_placement)
