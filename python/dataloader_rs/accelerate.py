"""Hugging Face Accelerate with a ``PyDataloader``.

``Accelerator.prepare`` only wraps torch's own ``DataLoader`` and hands any other iterable back
unchanged, so with ``gradient_accumulation_steps`` it never learns where an epoch ends and keeps
accumulating across epochs. ``prepare(accelerator, loader)`` gives Accelerate what its own
wrapper would: the end of each epoch (gradients sync on the last batch), batches moved to
``accelerator.device``, and ``skip_first_batches`` for resuming mid-epoch. The loader keeps its
threads and finds its rank from ``torch.distributed`` itself, so nothing is sharded twice.

    from dataloader_rs.accelerate import prepare

    accelerator = Accelerator(gradient_accumulation_steps=4)
    model, optimizer = accelerator.prepare(model, optimizer)
    loader = prepare(accelerator, PyDataloader(dataset, batch_size=32, shuffle=True))
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dataloader_rs._loader import PyDataloader

__all__ = ["PreparedLoader", "prepare"]


class PreparedLoader:
    """A ``PyDataloader`` as Accelerate's ``DataLoaderShard`` presents one: iterating it tells
    the accelerator's gradient state when the last batch of the epoch is handed out."""

    def __init__(self, accelerator: Any, loader: PyDataloader[Any], device_placement: bool = True) -> None:
        if not isinstance(loader, PyDataloader):
            raise TypeError(f"prepare() takes a PyDataloader, got {type(loader).__name__}")
        self.accelerator = accelerator
        self.loader = loader
        self.device_placement = device_placement
        self.gradient_state = accelerator.gradient_state
        self.end_of_dataloader = False
        # No padding is added to the last batch, so there is nothing to drop in gather_for_metrics.
        self.remainder = -1
        self._skip = 0

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

        self.end_of_dataloader = False
        self.gradient_state._add_dataloader(self)
        try:
            batches = iter(self.loader)
            try:
                current = next(batches)
            except StopIteration:
                return
            for following in batches:
                yield send_to_device(current, self.device) if self.device_placement else current
                current = following
            self.end_of_dataloader = True
            yield send_to_device(current, self.device) if self.device_placement else current
        finally:
            self.gradient_state._remove_dataloader(self)
            self._skip = 0


def prepare(accelerator: Any, loader: PyDataloader[Any], device_placement: bool = True) -> PreparedLoader:
    """``loader`` made known to ``accelerator``: see the module's documentation."""
    return PreparedLoader(accelerator, loader, device_placement)
