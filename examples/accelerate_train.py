"""Accelerate with gradient accumulation on a PyDataloader: `dataloader_rs.accelerate.prepare`
tells the accelerator where each epoch ends, so the last batch syncs. CPU only, generated data;
`python examples/accelerate_train.py` (or under `accelerate launch`)."""

from __future__ import annotations

import torch
from accelerate import Accelerator

from dataloader_rs import PyDataloader, PyDataset
from dataloader_rs.accelerate import prepare


class Points(PyDataset):
    def __len__(self) -> int:
        return 100

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.tensor([index / 100])
        return x, 2 * x - 1


def collate(samples: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = zip(*samples, strict=True)
    return torch.stack(xs), torch.stack(ys)


def main() -> None:
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=4)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model, optimizer = accelerator.prepare(model, optimizer)
    # 10 batches an epoch: syncs after batches 4, 8 and, at the end of the epoch, 10.
    loader = prepare(accelerator, PyDataloader(Points(), batch_size=10, shuffle=True, seed=0, collate_fn=collate))
    syncs = 0
    for _ in range(40):
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                optimizer.step()
                optimizer.zero_grad()
                syncs += accelerator.sync_gradients
    assert syncs == 40 * 3, syncs
    w, b = model.weight.item(), model.bias.item()
    assert abs(w - 2) < 0.2, w
    assert abs(b + 1) < 0.1, b
    print(f"accelerate: {syncs} optimizer steps, fitted y = {w:.2f}x + {b:.2f}")


if __name__ == "__main__":
    main()
