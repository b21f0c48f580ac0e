"""Random transforms in a loader draw from (seed, epoch, index, position): the batches are the
same for any num_workers, item_concurrency, prefetch_depth, dataset kind (Python or Rust), a
resume and the rank layout, and they differ between epochs."""

from __future__ import annotations

import numpy as np
import pytest
from parity import assert_matches, content, encode, pil_image

from dataloader_rs import FileDataset, ImageCollator, PyDataloader, PyDataset
from dataloader_rs import transforms as T

from conftest import write_files

N = 24
BATCH = 4


def pngs() -> list[bytes]:
    """PNG images of several sizes and modes."""
    modes = ["RGB", "L", "RGBA"]
    return [encode(pil_image(modes[i % 3], 20 + i % 5, 30 - i % 7, "random", seed=i), "PNG") for i in range(N)]


DATA = pngs()


class Pngs(PyDataset[bytes]):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> bytes:
        return DATA[i]


def pipeline() -> T.Compose:
    return T.Compose(
        [
            T.Decode(),
            T.ToRgb(),
            T.RandomResizedCrop(12),
            T.RandomHorizontalFlip(),
            T.ColorJitter(0.4, 0.4, 0.4, 0.1),
            T.RandomGrayscale(p=0.2),
            T.TrivialAugmentWide(),
            T.RandomApply([T.RandomCrop(10, padding=2, padding_mode="reflect")], p=0.5),
            T.Resize((12, 12)),
            T.ToFloat(),
            T.Normalize([0.5] * 3, [0.25] * 3),
            T.ToChw(),
            T.RandomErasing(p=0.5, value="random"),
        ]
    )


@pytest.fixture(scope="module")
def png_files(tmp_path_factory):
    return write_files(tmp_path_factory.mktemp("pngs"), DATA, ".png")


def epochs(loader, n: int = 2) -> list[list[tuple[np.ndarray, list[int]]]]:
    return [[(np.asarray(b).copy(), list(ix)) for b, ix in loader] for _ in range(n)]


def make(dataset, **kw) -> PyDataloader:
    kw.setdefault("shuffle", True)
    if kw["shuffle"]:
        kw.setdefault("seed", 1234)
    return PyDataloader(
        dataset, batch_size=BATCH, transform=pipeline(), collate_fn=ImageCollator(), return_indices=True, **kw
    )


def assert_same(a, b) -> None:
    assert len(a) == len(b)
    for (xa, ia), (xb, ib) in zip(a, b, strict=True):
        assert ia == ib
        assert_matches(xa, xb)


CONFIGS = [
    {"num_workers": 0},
    {"num_workers": 1},
    {"num_workers": 2},
    {"num_workers": 2, "item_concurrency": 4},
    {"num_workers": 0, "item_concurrency": 3},
    {"num_workers": 2, "prefetch_depth": 1},
]


@pytest.fixture(scope="module")
def reference():
    return epochs(make(Pngs(), num_workers=0))


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_python_dataset_batches_do_not_depend_on_threads(reference, config):
    got = epochs(make(Pngs(), **config))
    for epoch in range(2):
        assert_same(got[epoch], reference[epoch])


@pytest.mark.parametrize("config", [{"num_workers": 1}, {"num_workers": 2, "item_concurrency": 4}], ids=str)
def test_rust_dataset_batches_are_the_python_datasets(reference, png_files, config):
    got = epochs(make(FileDataset(png_files), **config))
    for epoch in range(2):
        assert_same(got[epoch], reference[epoch])


def by_index(epoch) -> dict[int, np.ndarray]:
    return {i: x[k] for x, ix in epoch for k, i in enumerate(ix)}


def test_epochs_differ(reference):
    first, second = by_index(reference[0]), by_index(reference[1])
    assert sorted(first) == sorted(second) == list(range(N))
    assert all(not np.array_equal(first[i], second[i]) for i in range(N))
    # A fresh loader with the same seed draws the same epochs again; another seed does not.
    assert_same(epochs(make(Pngs(), num_workers=2), 1)[0], reference[0])
    other = by_index(epochs(make(Pngs(), seed=99), 1)[0])
    assert all(not np.array_equal(first[i], other[i]) for i in range(N))


def batches(loader_or_iter) -> list[tuple[np.ndarray, list[int]]]:
    return [(np.asarray(b).copy(), list(ix)) for b, ix in loader_or_iter]


@pytest.mark.parametrize(("epoch", "stop"), [(0, 2), (1, 1), (1, 4)])
def test_resume_mid_epoch(reference, epoch, stop):
    loader = make(Pngs(), num_workers=2)
    if epoch == 1:
        assert_same(batches(loader), reference[0])
    it = iter(loader)
    for _ in range(stop):
        next(it)
    state = loader.state_dict()
    del it
    resumed = make(Pngs(), num_workers=1, item_concurrency=2)
    resumed.load_state_dict(state)
    assert_same(batches(resumed), reference[epoch][stop:])


def test_without_shuffle_a_generator_makes_the_draws_reproducible():
    torch = pytest.importorskip("torch")
    a = epochs(make(Pngs(), shuffle=False, generator=torch.Generator().manual_seed(5), num_workers=2), 1)
    b = epochs(make(Pngs(), shuffle=False, generator=torch.Generator().manual_seed(5)), 1)
    c = epochs(make(Pngs(), shuffle=False, generator=torch.Generator().manual_seed(6)), 1)
    assert_same(a[0], b[0])
    assert [ix for _, ix in a[0]] == [ix for _, ix in c[0]]
    assert not any(np.array_equal(x, y) for (x, _), (y, _) in zip(a[0], c[0], strict=True))


def test_ranks_draw_what_one_rank_draws(reference):
    whole = by_index(reference[0])
    for rank in range(2):
        shard = by_index(epochs(make(Pngs(), rank=rank, world_size=2, num_workers=2), 1)[0])
        assert len(shard) == N // 2
        for i, x in shard.items():
            assert_matches(x, whole[i])


def test_a_lone_op_in_a_loader_draws_as_a_direct_call_with_the_seed():
    # Item 0 of epoch 0 with base seed s: what `op(image, seed=s)` draws.
    img = content(40, 50, 3, "random", 3)

    class One(PyDataset[np.ndarray]):
        def __len__(self) -> int:
            return 1

        def __getitem__(self, i: int) -> np.ndarray:
            return img

    op = T.RandomResizedCrop(16)
    loader = PyDataloader(
        One(), batch_size=1, shuffle=True, seed=42, transform=op, collate_fn=ImageCollator(layout="NHWC")
    )
    (batch,) = list(loader)
    assert_matches(np.asarray(batch)[0], op(img, seed=42))


def test_a_resume_without_shuffle_draws_what_the_first_run_drew():
    # No shuffle and no generator: the base seed is drawn at random, and state_dict carries it.
    loader = make(Pngs(), shuffle=False, num_workers=2)
    whole = batches(loader)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    del it
    assert isinstance(state["base_seed"], int)
    resumed = make(Pngs(), shuffle=False, num_workers=1)
    resumed.load_state_dict(state)
    # The resumed run is epoch 1 from its second batch: compare with a fresh run of epoch 1.
    again = make(Pngs(), shuffle=False, num_workers=2)
    again.load_state_dict({**state, "position": 0})
    expected = batches(again)
    assert_same(batches(resumed), expected[1:])
    assert not np.array_equal(expected[0][0], whole[0][0])  # epoch 1 draws anew
