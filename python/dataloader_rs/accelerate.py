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

``accelerate.skip_first_batches(loader, n)`` (transformers' ``Trainer`` calls it to resume
mid-epoch) rebuilds a torch ``DataLoader`` from the loader's attributes: for ours, the transform
would be lost, a Rust dataset sent to worker processes and, without ``collate_fn``, the batches
collated by torch. Once Accelerate is imported, making a ``PyDataloader`` (or asking its length)
replaces that function, where Accelerate and the Trainer look it up, by ``skip_first_batches``
below: our loaders skip by position (``loader.skip_first_batches(n)``: same batches, none of the
skipped ones loaded), every other loader goes to Accelerate's own. A name bound to Accelerate's
function before that (``from accelerate import skip_first_batches`` in your module) stays
Accelerate's: call ``route_skip_first_batches()`` first, or ``loader.skip_first_batches(n)``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from dataloader_rs._loader import PyDataloader, SkipFirstBatches

__all__ = [
    "EpochInGradientState",
    "PreparedLoader",
    "prepare",
    "route_skip_first_batches",
    "skip_first_batches",
]


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


#: Accelerate's own ``skip_first_batches``, kept when it is routed here.
_accelerate_skip: Callable[..., Any] | None = None

_NAME = "skip_first_batches"
#: Where the function is looked up by name: Accelerate's package, its module, ``Accelerator``'s
#: module (its method) and transformers' Trainer (``from accelerate import skip_first_batches``).
_LOOKED_UP_IN = ("accelerate", "accelerate.data_loader", "accelerate.accelerator", "transformers.trainer")


def skip_first_batches(dataloader: Any, num_batches: int = 0) -> Any:
    """``accelerate.skip_first_batches`` for our loaders too: a ``PyDataloader`` (or one it
    prepared or skipped) skips its first ``num_batches`` itself; any other loader goes to
    Accelerate's function."""
    if isinstance(dataloader, (PyDataloader, SkipFirstBatches, PreparedLoader)):
        return dataloader.skip_first_batches(num_batches)
    original = _accelerate_skip
    if original is None:  # not routed: Accelerate's is still in its place
        from accelerate import data_loader  # type: ignore[import-untyped]

        original = data_loader.skip_first_batches
    return original(dataloader, num_batches)


def route_skip_first_batches() -> bool:
    """Puts ``skip_first_batches`` (above) in place of Accelerate's own wherever that is looked
    up by name (see the module's documentation); a name holding anything else is left alone,
    and a second call changes nothing. Returns whether Accelerate is imported (nothing is
    imported here)."""
    global _accelerate_skip
    if not hasattr(sys.modules.get("accelerate"), _NAME):
        return False  # not imported, or still importing
    if _accelerate_skip is None:
        original = getattr(sys.modules.get("accelerate.data_loader"), _NAME, None)
        if original is None or original is skip_first_batches:
            return False
        _accelerate_skip = original
    for name in _LOOKED_UP_IN:
        module = sys.modules.get(name)
        if module is not None and getattr(module, _NAME, None) is _accelerate_skip:
            setattr(module, _NAME, skip_first_batches)
    return True
