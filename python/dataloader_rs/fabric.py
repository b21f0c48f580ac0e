"""Lightning Fabric with a ``PyDataloader``.

``Fabric.setup_dataloaders`` accepts torch's ``DataLoader`` only (it raises ``TypeError`` for
anything else, since it rebuilds the loader with a ``DistributedSampler``). A ``PyDataloader``
needs no rebuilding — it finds its rank from ``torch.distributed`` when an epoch starts — so
``setup_dataloaders(fabric, loader)`` only does the rest of Fabric's work: each iteration is a
new epoch number (``set_epoch``), and batches are moved to ``fabric.device``.

    from dataloader_rs.fabric import setup_dataloaders

    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    train = setup_dataloaders(fabric, PyDataloader(dataset, batch_size=32, shuffle=True))
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dataloader_rs._loader import PyDataloader

__all__ = ["FabricLoader", "setup_dataloaders"]


class FabricLoader:
    """A ``PyDataloader`` as Fabric's own wrapper presents one."""

    def __init__(self, fabric: Any, loader: PyDataloader[Any], move_to_device: bool = True) -> None:
        if not isinstance(loader, PyDataloader):
            raise TypeError(f"setup_dataloaders() takes PyDataloader objects, got {type(loader).__name__}")
        self.fabric = fabric
        self.loader = loader
        self.move_to_device = move_to_device
        self._num_iter_calls = 0

    @property
    def device(self) -> Any:
        return self.fabric.device if self.move_to_device else None

    @property
    def dataset(self) -> Any:
        return self.loader.dataset

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        self.loader.set_epoch(self._num_iter_calls)
        self._num_iter_calls += 1
        for batch in self.loader:
            yield self.fabric.to_device(batch) if self.move_to_device else batch


def setup_dataloaders(fabric: Any, *loaders: PyDataloader[Any], move_to_device: bool = True) -> Any:
    """Each loader made ready for ``fabric``: one ``FabricLoader``, or a list of them for
    several loaders (as ``Fabric.setup_dataloaders`` returns)."""
    if not loaders:
        raise ValueError("setup_dataloaders needs at least one loader")
    wrapped = [FabricLoader(fabric, loader, move_to_device) for loader in loaders]
    return wrapped[0] if len(wrapped) == 1 else wrapped
