import json
import sys

import lightning as L
import torch

from dataloader_rs import PyDataloader, PyDataset, get_worker_info


class DS(PyDataset):
    def __len__(self):
        return 50

    def __getitem__(self, i):
        info = get_worker_info()
        return torch.tensor(i), torch.tensor(-1 if info is None else info.id)


def collate(xs):
    return torch.stack([x for x, _ in xs]), torch.stack([w for _, w in xs])


class M(L.LightningModule):
    def __init__(self, out):
        super().__init__()
        self.l = torch.nn.Linear(1, 1)
        self.out = out
        self.seen = []
        self.workers = set()

    def training_step(self, b, i):
        x, w = b
        self.seen += x.tolist()
        self.workers |= set(w.tolist())
        return self.l(x.float()[:, None]).sum()

    def on_train_epoch_end(self):
        with open(f"{self.out}/rank{self.global_rank}-epoch{self.current_epoch}.json", "w") as f:
            json.dump(
                {
                    "seen": self.seen,
                    "workers": sorted(self.workers),
                    "loader": type(self.trainer.train_dataloader).__name__,
                },
                f,
            )
        self.seen = []

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    out, strategy = sys.argv[1], sys.argv[2]
    loader = PyDataloader(DS(), batch_size=4, shuffle=True, num_workers=2, collate_fn=collate)
    t = L.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=2,
        strategy=strategy,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    t.fit(M(out), loader)
