"""Real Accelerate (1.15) with a PyDataloader, through the standard ``accelerator.prepare`` (which
hands it back as it is) and through dataloader_rs.accelerate.prepare: gradient accumulation syncs
on the last batch of every epoch as with torch's prepared loader, batches reach the
accelerator's device, and prepared.skip_first_batches resumes mid-epoch in the same order."""

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


def sync_steps(make_loader, epochs=2, **accelerator_kw):
    """The (epoch, batch) at which a fresh Accelerator with gradient_accumulation_steps=2 syncs,
    the loader given to its standard prepare() with the model and the optimizer."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    accelerator = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=2, **accelerator_kw)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, batches = accelerator.prepare(model, optimizer, make_loader())
    steps = []
    for epoch in range(epochs):
        for step, x in enumerate(batches):
            with accelerator.accumulate(model):
                accelerator.backward(model(x).sum())
                optimizer.step()
                optimizer.zero_grad()
                if accelerator.sync_gradients:
                    steps.append((epoch, step))
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    return steps


class Ten(torch.utils.data.Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return torch.tensor([float(i)])


def test_the_standard_prepare_syncs_as_with_torchs_loader():
    theirs = sync_steps(lambda: torch.utils.data.DataLoader(Ten(), batch_size=2))
    # 5 batches an epoch: every 2nd syncs, and the last of the epoch; the count restarts.
    assert theirs == [(0, 1), (0, 3), (0, 4), (1, 1), (1, 3), (1, 4)]
    mine = PyDataloader(Ten(), batch_size=2, collate_fn=torch.stack, num_workers=2)
    assert sync_steps(lambda: mine) == theirs
    # Accelerate hands the loader back as it is; its epochs' iterators tell it where they end.
    assert sync_steps(lambda: PyDataloader(Ten(), batch_size=2, shuffle=True, collate_fn=torch.stack)) == theirs


class TenStream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return (torch.tensor([float(i)]) for i in range(10))


def test_a_stream_syncs_at_its_last_batch_as_torchs_loader_does():
    # A stream's epoch has no length: its last batch is known one batch ahead, as Accelerate's
    # own loaders find it.
    theirs = sync_steps(lambda: torch.utils.data.DataLoader(TenStream(), batch_size=4))
    assert theirs == [(0, 1), (0, 2), (1, 1), (1, 2)]
    mine = PyDataloader(TenStream(), batch_size=4, collate_fn=torch.stack, num_workers=2)
    assert sync_steps(lambda: mine) == theirs


def test_the_gradient_state_sees_the_last_batch_and_forgets_an_abandoned_epoch(accelerator):
    state = accelerator.gradient_state
    mine = PyDataloader(Ten(), batch_size=4, collate_fn=torch.stack)
    seen = [(state.in_dataloader, state.end_of_dataloader) for _ in mine]
    assert seen == [(True, False), (True, False), (True, True)]
    assert not state.in_dataloader  # gone at the end of the epoch
    it = iter(mine)
    next(it)
    evaluation = [state.end_of_dataloader for _ in PyDataloader(Ten(), batch_size=5)]  # nested
    assert evaluation == [False, True]
    assert state.in_dataloader  # the outer epoch again
    assert not state.end_of_dataloader
    del it  # abandoned: taken off
    assert not state.in_dataloader
    # gather_for_metrics at the end of an epoch: nothing padded, nothing dropped.
    gathered = [accelerator.gather_for_metrics(b) for b in mine]
    assert torch.cat(gathered).flatten().tolist() == list(range(10))


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
