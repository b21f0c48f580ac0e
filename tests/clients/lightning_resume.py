"""Lightning fit stopped mid-epoch after a checkpoint, then resumed from it: prints whether
the batches seen before and after the stop are exactly those of an uninterrupted run."""

import contextlib
import json
import sys

import lightning as L
import torch

from dataloader_rs import PyDataloader, PyDataset


class DS(PyDataset):
    def __len__(self):
        return 40

    def __getitem__(self, i):
        return torch.tensor(i)


class Stop(Exception):
    pass


class M(L.LightningModule):
    def __init__(self, stop_at=None, path=None):
        super().__init__()
        self.l = torch.nn.Linear(1, 1)
        self.seen = []
        self.stop_at, self.path = stop_at, path

    def training_step(self, b, i):
        self.seen.append(b.tolist())
        return self.l(b.float()[:, None]).sum()

    def on_train_batch_end(self, out, b, i):
        if self.stop_at is not None and self.global_step == self.stop_at:
            self.trainer.save_checkpoint(self.path)
            raise Stop

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def loader():
    return PyDataloader(DS(), batch_size=4, shuffle=True, seed=5, num_workers=2, collate_fn=torch.stack)


if __name__ == "__main__":
    kw = dict(
        accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, max_epochs=2,
    )  # fmt: skip
    full = M()
    L.Trainer(**kw).fit(full, loader())
    first = M(stop_at=13, path=sys.argv[1])
    with contextlib.suppress(Stop):
        L.Trainer(**kw).fit(first, loader())
    rest = M()
    L.Trainer(**kw).fit(rest, loader(), ckpt_path=sys.argv[1])
    print(json.dumps({"full": full.seen, "first": first.seen, "rest": rest.seen}))
