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

from collections.abc import Iterator
from typing import Any

from dataloader_rs._accelerate_state import (
    EpochInGradientState,
    route_skip_first_batches,
    skip_first_batches,
)
from dataloader_rs._loader import LoaderView, PyDataloader

__all__ = [
    "EpochInGradientState",
    "PreparedLoader",
    "prepare",
    "route_skip_first_batches",
    "skip_first_batches",
]


class PreparedLoader(LoaderView[Any]):
    """A ``PyDataloader`` as Accelerate's ``DataLoaderShard`` presents one: batches moved to
    the accelerator's device, and the end of each epoch told to its gradient state."""

    #: ``accelerate.skip_first_batches`` hands it to ``self.skip_first_batches``.
    _skips_its_own_batches = True

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

    def __len__(self) -> int:
        return len(self.loader) - self._skip

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
