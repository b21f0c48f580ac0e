"""Real Accelerate (1.15) with a PyDataloader through dataloader_rs.accelerate.prepare:
gradient accumulation syncs on the last batch of every epoch, batches reach the accelerator's
device, and skip_first_batches resumes mid-epoch in the same order."""

from __future__ import annotations

import pytest

accelerate = pytest.importorskip("accelerate")
torch = pytest.importorskip("torch")

from dataloader_rs import PyDataloader, PyDataset  # noqa: E402
from dataloader_rs.accelerate import prepare  # noqa: E402


class Items(PyDataset):
    def __len__(self):
        return 20

    def __getitem__(self, i):
        return torch.tensor([float(i)])


def loader(**kw):
    return PyDataloader(Items(), batch_size=2, shuffle=True, seed=1, num_workers=2, collate_fn=torch.stack, **kw)


def train(accelerator, batches, epochs):
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    syncs = []
    for _ in range(epochs):
        epoch = []
        for x in batches:
            with accelerator.accumulate(model):
                accelerator.backward(model(x).sum())
                optimizer.step()
                optimizer.zero_grad()
                epoch.append(accelerator.sync_gradients)
        syncs.append(epoch)
    return syncs


@pytest.fixture
def accelerator():
    from accelerate.state import AcceleratorState, GradientState

    acc = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=3)
    yield acc
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def test_accumulation_syncs_at_the_last_batch_of_every_epoch(accelerator):
    syncs = train(accelerator, prepare(accelerator, loader()), epochs=2)
    # 10 batches per epoch, every 3rd syncs, and so does the last one; the count restarts.
    expected = [i % 3 == 2 or i == 9 for i in range(10)]
    assert syncs == [expected, expected]


def test_without_prepare_the_end_of_an_epoch_is_not_seen(accelerator):
    # What prepare() fixes: Accelerate hands our loader back as it is.
    plain = loader()
    assert accelerator.prepare(plain) is plain
    syncs = train(accelerator, plain, epochs=2)
    assert syncs[0][9] is False


def test_batches_reach_the_device_and_skip_first_batches_keeps_the_order(accelerator):
    reference = [b.flatten().tolist() for b in loader()]
    prepared = prepare(accelerator, loader())
    skipped = prepared.skip_first_batches(4)
    assert len(skipped) == 6
    got = []
    for b in skipped:
        assert b.device == accelerator.device
        got.append(b.flatten().tolist())
    assert got == reference[4:]
    # The next epoch is whole again.
    assert len([b for b in prepared]) == 10
