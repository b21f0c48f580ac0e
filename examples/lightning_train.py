"""Lightning trains on a PyDataloader as it is: its worker threads, its shuffle, its sharding
under `ddp`. Generated data, CPU only; `python examples/lightning_train.py`."""

from __future__ import annotations

import lightning as L
import numpy as np
import torch

from dataloader_rs import PyDataloader, PyDataset, item_seed


class Points(PyDataset):
    """y = 3x + 1 with noise drawn from a per-item generator (reproducible on threads)."""

    def __len__(self) -> int:
        return 512

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng(item_seed())
        x = np.float32(index / 512)
        y = np.float32(3 * x + 1 + rng.normal(0, 0.01))
        return torch.tensor([x]), torch.tensor([y])


def collate(samples: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = zip(*samples, strict=True)
    return torch.stack(xs), torch.stack(ys)


class Line(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.fit = torch.nn.Linear(1, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.fit(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def main() -> None:
    L.seed_everything(0, verbose=False)
    loader = PyDataloader(Points(), batch_size=32, shuffle=True, num_workers=2, collate_fn=collate)
    model = Line()
    trainer = L.Trainer(
        max_epochs=30, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(model, loader)
    slope, bias = model.fit.weight.item(), model.fit.bias.item()
    assert abs(slope - 3) < 0.2, slope
    assert abs(bias - 1) < 0.1, bias
    print(f"lightning: fitted y = {slope:.2f}x + {bias:.2f} over {trainer.current_epoch} epochs")


if __name__ == "__main__":
    main()
