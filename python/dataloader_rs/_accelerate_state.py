"""What a ``PyDataloader`` tells Hugging Face Accelerate, without importing it: where each epoch
ends (its ``GradientState``), and where ``skip_first_batches`` goes for our loaders. The loader
and ``dataloader_rs.accelerate`` both build on this module, which knows neither: a loader class
that skips its own batches says so with ``_skips_its_own_batches = True``."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any


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


#: No batch taken ahead yet; the epoch ended after the batch handed out.
_NOTHING = object()
_END = object()


class EpochInGradientState:
    """An epoch's iterator that tells Accelerate's gradient state where the epoch ends: it is
    the state's active loader from its first batch to its end, and ``end_of_dataloader`` is
    true from the moment the last batch is handed out (as in Accelerate's ``DataLoaderShard``)."""

    __slots__ = ("_ahead", "_batches", "_marker", "_registered", "_sized", "_state")

    def __init__(self, batches: Any, state: Any) -> None:
        self._batches = batches
        self._state = state
        self._marker = _Marker()
        self._registered = False
        try:
            len(batches)
            self._sized = True
        except TypeError:  # a stream's epoch: its end shows one batch ahead, as Accelerate finds it
            self._sized = False
        self._ahead: Any = _NOTHING

    def __iter__(self) -> EpochInGradientState:
        return self

    def __next__(self) -> Any:
        if not self._registered:
            if self._marker.end_of_dataloader:
                raise StopIteration
            self._state._add_dataloader(self._marker)
            self._registered = True
        if not self._sized:
            return self._next_ahead()
        try:
            batch = next(self._batches)
        except StopIteration:
            self._end()
            raise
        if len(self._batches) == 0:
            self._marker.end_of_dataloader = True
        return batch

    def _next_ahead(self) -> Any:
        """The next batch, with the one after it taken already: the last is known as last."""
        batch = self._ahead
        if batch is _NOTHING:
            try:
                batch = next(self._batches)
            except StopIteration:
                self._end()
                raise
        elif batch is _END:
            self._end()
            raise StopIteration
        try:
            self._ahead = next(self._batches)
        except StopIteration:
            self._ahead = _END
            self._marker.end_of_dataloader = True
        return batch

    def _end(self) -> None:
        self._marker.end_of_dataloader = True
        self._leave()

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
    if getattr(type(dataloader), "_skips_its_own_batches", False):
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
