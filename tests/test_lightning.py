"""Real Lightning (2.6) driving a PyDataloader: the four entry points in process, `ddp` and
`ddp_spawn` with two CPU processes (gloo), and a mid-epoch checkpoint resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

L = pytest.importorskip("lightning")
torch = pytest.importorskip("torch")

from dataloader_rs import PyDataloader, PyDataset, get_worker_info  # noqa: E402

CLIENTS = Path(__file__).parent / "clients"


class Items(PyDataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        info = get_worker_info()
        return torch.tensor(i), torch.tensor(-1 if info is None else info.id)


def collate(samples):
    return torch.stack([x for x, _ in samples]), torch.stack([w for _, w in samples])


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(1, 1)
        self.seen = {"train": [], "val": [], "test": []}
        self.workers = set()

    def _step(self, stage, batch):
        x, w = batch
        self.seen[stage] += x.tolist()
        self.workers |= set(w.tolist())
        return self.l(x.float()[:, None]).sum()

    def training_step(self, batch, i):
        return self._step("train", batch)

    def validation_step(self, batch, i):
        self._step("val", batch)

    def test_step(self, batch, i):
        self._step("test", batch)

    def predict_step(self, batch, i):
        return batch[0]

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def trainer(**kw):
    return L.Trainer(
        accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, **kw,
    )  # fmt: skip


def loader(**kw):
    return PyDataloader(Items(), batch_size=4, num_workers=2, collate_fn=collate, **kw)


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning", "ignore::FutureWarning")
def test_fit_validate_test_predict_run_on_our_threads():
    model = Model()
    t = trainer(max_epochs=2)
    train = loader(shuffle=True, seed=3)
    t.fit(model, train, loader())
    assert t.train_dataloader is train  # not replaced by torch's loader
    # Two epochs, each the whole dataset once, in two different orders.
    first, second = model.seen["train"][:24], model.seen["train"][24:]
    assert sorted(first) == sorted(second) == list(range(24))
    assert first != second
    assert model.workers == {0, 1}  # loaded on both worker threads
    # The sanity check runs 2 batches, then one full validation per epoch.
    assert model.seen["val"][8:] == list(range(24)) * 2
    t.validate(model, loader())
    t.test(model, loader())
    assert model.seen["val"][-24:] == list(range(24))
    assert model.seen["test"] == list(range(24))
    predictions = t.predict(model, loader())
    assert torch.cat(predictions).tolist() == list(range(24))


def _run_ddp(tmp_path, strategy):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK")}
    env["PYTHONWARNINGS"] = "ignore"
    proc = subprocess.run(
        [sys.executable, str(CLIENTS / "lightning_ddp.py"), str(tmp_path), strategy],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    epochs = []
    for epoch in range(2):
        ranks = [json.loads((tmp_path / f"rank{r}-epoch{epoch}.json").read_text()) for r in range(2)]
        epochs.append(ranks)
    return epochs


@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_ddp_ranks_get_disjoint_shares_covering_the_dataset_every_epoch(tmp_path, strategy):
    epochs = _run_ddp(tmp_path, strategy)
    for ranks in epochs:
        a, b = (r["seen"] for r in ranks)
        assert len(a) == len(b) == 25
        assert not set(a) & set(b)
        assert set(a) | set(b) == set(range(50))
        for r in ranks:
            assert r["loader"] == "PyDataloader"
            assert r["workers"] == [0, 1]
    assert epochs[0][0]["seen"] != epochs[1][0]["seen"]  # set_epoch reshuffles


@pytest.mark.timeout(300)
def test_checkpoint_resume_mid_epoch_continues_with_the_batches_not_seen(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(CLIENTS / "lightning_resume.py"), str(tmp_path / "mid.ckpt")],
        env=dict(os.environ, PYTHONWARNINGS="ignore"), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(got["first"]) == 13
    assert got["first"] + got["rest"] == got["full"]


def test_fabric_setup_dataloaders_refuses_ours_and_our_helper_does_its_work():
    from lightning.fabric import Fabric

    from dataloader_rs.fabric import setup_dataloaders

    fabric = Fabric(accelerator="cpu", devices=1)
    plain = loader(shuffle=True, seed=2)
    with pytest.raises(TypeError, match="Only PyTorch DataLoader"):
        fabric.setup_dataloaders(plain)
    train, val = setup_dataloaders(fabric, plain, loader())
    epochs = [[x.tolist() for x, _ in train] for _ in range(2)]
    assert all(sorted(x for batch in e for x in batch) == list(range(24)) for e in epochs)
    assert epochs[0] != epochs[1]  # a new epoch number each iteration
    reference = loader(shuffle=True, seed=2)
    reference.set_epoch(1)
    assert epochs[1] == [x.tolist() for x, _ in reference]
    assert all(x.device == fabric.device for x, _ in val)


class Stream(torch.utils.data.IterableDataset):
    """A stream that splits itself by worker, as torch's worker processes expect."""

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        ids = range(24) if info is None else range(info.id, 24, info.num_workers)
        for i in ids:
            yield torch.tensor(i), torch.tensor(-1 if info is None else info.id)


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("readers", ["one", "per_worker"])
def test_fit_on_a_stream(readers):
    model = Model()
    t = trainer(max_epochs=2)
    train = PyDataloader(Stream(), batch_size=4, num_workers=2, collate_fn=collate, stream_readers=readers)
    t.fit(model, train)
    # Each epoch sees every item once, whatever the readers.
    assert sorted(model.seen["train"]) == sorted(list(range(24)) * 2)
    assert t.global_step == 12
    assert model.workers == ({-1} if readers == "one" else {0, 1})
