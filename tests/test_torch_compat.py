"""torch.utils.data.DataLoader's arguments and attributes, the transform rule, worker info and
per-item seeds, sharding decided when an epoch starts, and pickling."""

from __future__ import annotations

import itertools
import pickle
import threading
import time

import numpy as np
import pytest

from dataloader_rs import (
    BatchSampler,
    FileDataset,
    PyDataloader,
    PyDataset,
    RandomSampler,
    SequentialSampler,
    get_worker_info,
    item_seed,
)

from conftest import Range


def flat(batches):
    return [x for b in batches for x in b]


# --- torch's arguments ----------------------------------------------------------------------


def test_torch_positional_order():
    # dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory,
    # drop_last, timeout, worker_init_fn
    loader = PyDataloader(Range(7), 3, False, None, None, 2, sum, False, True, 5.0, None)
    assert list(loader) == [0 + 1 + 2, 3 + 4 + 5]
    assert (loader.num_workers, loader.drop_last, loader.timeout) == (2, True, 5.0)


def test_prefetch_factor_counts_batches_per_worker():
    loader = PyDataloader(Range(4), num_workers=3, prefetch_factor=4)
    assert loader.prefetch_factor == 4
    assert loader.num_workers + loader.prefetch_depth == 3 * 4
    assert PyDataloader(Range(4), num_workers=2).prefetch_factor == 2
    with pytest.raises(ValueError, match="prefetch_factor needs num_workers > 0"):
        PyDataloader(Range(4), prefetch_factor=2)
    with pytest.raises(TypeError, match="not both"):
        PyDataloader(Range(4), num_workers=1, prefetch_factor=2, prefetch_depth=2)


def test_persistent_workers_and_in_order_are_accepted():
    loader = PyDataloader(Range(5), batch_size=2, num_workers=2, persistent_workers=True, in_order=False)
    assert list(loader) == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError, match="persistent_workers=True needs num_workers > 0"):
        PyDataloader(Range(5), persistent_workers=True)


def test_pin_memory_without_cuda_warns_and_pins_nothing():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.warns(UserWarning, match="no CUDA device"):
        loader = PyDataloader(Range(4), batch_size=2, pin_memory=True, collate_fn=torch.tensor)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3]]


def test_pin_memory_with_cuda_pins_each_batch_on_a_worker(monkeypatch):
    torch = pytest.importorskip("torch")
    import torch.utils.data._utils.pin_memory as pin_module

    pinned = []

    def fake_pin(batch, device=None):
        pinned.append((threading.get_ident(), device))
        return ("pinned", batch)

    # No GPU here: stand in for CUDA and for torch's pinning, to check the wiring.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(pin_module, "pin_memory", fake_pin)
    loader = PyDataloader(
        Range(4), batch_size=2, num_workers=1, pin_memory=True, pin_memory_device="cuda:0", collate_fn=sum
    )
    assert list(loader) == [("pinned", 1), ("pinned", 5)]
    assert [device for _, device in pinned] == ["cuda:0", "cuda:0"]
    assert threading.get_ident() not in {t for t, _ in pinned}


def test_multiprocessing_context_warns_that_workers_are_threads():
    with pytest.warns(UserWarning, match="threads"):
        PyDataloader(Range(2), multiprocessing_context="spawn")


def test_timeout_raises_when_no_batch_arrives():
    release = threading.Event()

    class Slow(PyDataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            release.wait(10)
            return i

    it = iter(PyDataloader(Slow(), num_workers=1, timeout=0.2))
    with pytest.raises(RuntimeError, match=r"no batch arrived within timeout=0.2 seconds"):
        next(it)
    release.set()
    with pytest.raises(ValueError, match="timeout must be non-negative"):
        PyDataloader(Range(2), timeout=-1)


def test_worker_init_fn_runs_once_on_each_worker_thread():
    calls = []
    lock = threading.Lock()

    def init(worker_id):
        with lock:
            calls.append((worker_id, threading.get_ident()))

    loading = set()

    class Sleepy(Range):
        def __getitem__(self, i):
            loading.add(threading.get_ident())
            time.sleep(0.002)
            return i

    loader = PyDataloader(Sleepy(40), batch_size=2, num_workers=3, worker_init_fn=init)
    assert flat(loader) == list(range(40))
    assert flat(loader) == list(range(40))
    threads = [t for _, t in calls]
    assert len(threads) == len(set(threads))  # once per thread, across epochs
    assert loading == set(threads)  # every thread that loaded ran it first
    assert all(0 <= w < 3 for w, _ in calls)
    files = FileDataset(["/nonexistent"])
    with pytest.raises(ValueError, match="worker_init_fn runs on the worker threads"):
        PyDataloader(files, worker_init_fn=init)


def test_generator_seeds_the_shuffle():
    torch = pytest.importorskip("torch")
    a = PyDataloader(Range(30), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(11))
    b = PyDataloader(Range(30), batch_size=4, shuffle=True, seed=11)
    assert a.seed == 11
    assert list(a) == list(b)
    with pytest.raises(TypeError, match="seed or generator"):
        PyDataloader(Range(3), shuffle=True, seed=1, generator=torch.Generator())


def test_batch_sampler_gives_batches_of_any_size_in_its_order():
    batches = [[5, 1], [0], [2, 3, 4], [], [6]]
    for workers in (0, 2):
        loader = PyDataloader(Range(7), batch_sampler=batches, num_workers=workers, item_concurrency=2)
        assert len(loader) == 5
        assert loader.batch_size is None
        assert loader.drop_last is False
        assert loader.batch_sampler is batches
        assert list(loader) == batches
    with pytest.raises(ValueError, match="batch_sampler gives whole batches"):
        PyDataloader(Range(7), batch_size=2, batch_sampler=batches)
    with pytest.raises(TypeError, match="each batch must be an iterable"):
        list(PyDataloader(Range(7), batch_sampler=[1, 2]))


def test_torch_batch_sampler_object():
    torch = pytest.importorskip("torch")
    bs = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(7)), batch_size=3, drop_last=False)
    assert list(PyDataloader(Range(7), batch_sampler=bs, num_workers=2)) == [[0, 1, 2], [3, 4, 5], [6]]


def test_configuration_cannot_be_changed_silently():
    loader = PyDataloader(Range(4))
    for name, value in [("batch_size", 2), ("num_workers", 2), ("shuffle", True), ("collate_fn", sum)]:
        with pytest.raises(ValueError, match=f"{name} cannot be changed once the loader is made"):
            setattr(loader, name, value)
    assert loader.batch_size == 1
    loader.note = "other attributes are free"  # as on any object
    assert loader.note == "other attributes are free"


def test_sampler_and_batch_sampler_attributes_show_the_order():
    plain = PyDataloader(Range(5), batch_size=2)
    assert isinstance(plain.sampler, SequentialSampler)
    assert list(plain.sampler) == [0, 1, 2, 3, 4]
    assert len(plain.sampler) == 5
    assert isinstance(plain.batch_sampler, BatchSampler)
    assert list(plain.batch_sampler) == [[0, 1], [2, 3], [4]]
    shuffled = PyDataloader(Range(20), batch_size=3, shuffle=True, seed=4)
    assert isinstance(shuffled.sampler, RandomSampler)
    shuffled.sampler.set_epoch(2)
    upcoming = list(shuffled.sampler)
    assert sorted(upcoming) == list(range(20))
    assert flat(shuffled) == upcoming  # iterating the sampler did not start the epoch


# --- transform= -----------------------------------------------------------------------------


def test_a_callable_gets_the_index_only_when_it_takes_two_positional_arguments():
    seen = []

    def two(index, sample):
        return (index, sample)

    def one_with_default(sample, scale=10):
        return sample * scale

    def star(*inputs):
        seen.append(len(inputs))
        return inputs[0] if len(inputs) == 1 else inputs

    data = Range(3)
    assert flat(PyDataloader(data, transform=two)) == [(0, 0), (1, 1), (2, 2)]
    assert flat(PyDataloader(data, transform=one_with_default)) == [0, 10, 20]
    assert flat(PyDataloader(data, transform=star)) == [0, 1, 2]
    assert seen == [1, 1, 1]
    assert flat(PyDataloader(data, transform=str)) == ["0", "1", "2"]  # a builtin type


def test_torchvision_v1_and_v2_transforms_modules_and_builtins():
    torch = pytest.importorskip("torch")
    v1 = pytest.importorskip("torchvision.transforms")
    v2 = pytest.importorskip("torchvision.transforms.v2")

    class Images(PyDataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return np.full((2, 3, 3), i, dtype=np.uint8)  # HWC

    def run(transform):
        return flat(PyDataloader(Images(), batch_size=2, num_workers=2, transform=transform))

    out = run(v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]))
    assert all(isinstance(x, torch.Tensor) and x.shape == (3, 2, 3) for x in out)
    assert [float(x[0, 0, 0]) for x in out] == pytest.approx([i / 255 for i in range(4)])
    out = run(v2.ToImage())
    assert [x.shape for x in out] == [torch.Size([3, 2, 3])] * 4
    out = run(v1.Compose([v1.ToTensor()]))
    assert [float(x[0, 0, 0]) for x in out] == pytest.approx([i / 255 for i in range(4)])
    out = run(torch.as_tensor)
    assert [x.shape for x in out] == [torch.Size([2, 3, 3])] * 4

    class Double(torch.nn.Module):
        def forward(self, x):
            return torch.as_tensor(x) * 2

    assert [int(x[0, 0, 0]) for x in run(Double())] == [0, 2, 4, 6]


# --- worker info and per-item seeds ---------------------------------------------------------


class Where(PyDataset):
    def __len__(self):
        return 30

    def __getitem__(self, i):
        info = get_worker_info()
        time.sleep(0.001)
        return None if info is None else (info.id, info.num_workers, info.dataset is self)


def test_get_worker_info_on_worker_threads_only():
    assert get_worker_info() is None
    got = flat(PyDataloader(Where(), batch_size=2, num_workers=3))
    assert {g[1:] for g in got} == {(3, True)}
    assert {g[0] for g in got} <= {0, 1, 2}
    assert len({g[0] for g in got}) >= 2
    assert flat(PyDataloader(Where(), batch_size=2)) == [None] * 30  # the caller's thread
    helpers = flat(PyDataloader(Where(), batch_size=6, num_workers=1, item_concurrency=3))
    assert {g[0] for g in helpers} == {0}  # item helpers work for worker 0


class Noisy(PyDataset):
    """An augmentation drawing from its own generator, seeded per item."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        return float(np.random.default_rng(item_seed()).random())


def test_item_seeds_make_a_seeded_run_reproducible_whatever_the_threads():
    runs = []
    for workers, k in [(0, 1), (1, 1), (3, 1), (2, 4)]:
        loader = PyDataloader(Noisy(), batch_size=4, shuffle=True, seed=8, num_workers=workers, item_concurrency=k)
        runs.append([flat(loader), flat(loader)])
    assert all(r == runs[0] for r in runs)
    first, second = runs[0]
    assert len(set(first)) == 40
    assert set(first) != set(second)  # a new epoch draws new augmentations


def test_item_seeds_in_a_transform_and_outside():
    loader = PyDataloader(Range(6), num_workers=2, transform=lambda i, x: (i, item_seed()))
    seeds = flat(loader)
    again = flat(
        PyDataloader(Range(6), num_workers=2, transform=lambda i, x: (i, item_seed()), _base_seed=loader._base_seed)
    )
    assert len({s for _, s in seeds}) == 6
    assert seeds == again  # the same base seed, epoch and indices: the same seeds
    with pytest.raises(RuntimeError, match="item_seed"):
        item_seed()


def test_torch_manual_seed_makes_unshuffled_runs_reproducible():
    torch = pytest.importorskip("torch")
    runs = []
    for _ in range(2):
        torch.manual_seed(123)
        runs.append(flat(PyDataloader(Noisy(), batch_size=5, num_workers=2)))
    assert runs[0] == runs[1]
    torch.manual_seed(124)
    assert flat(PyDataloader(Noisy(), batch_size=5, num_workers=2)) != runs[0]


# --- sharding when an epoch starts ----------------------------------------------------------


def test_world_size_without_rank_is_an_error_not_rank_0(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    loader = PyDataloader(Range(10))  # made before the process group (as in Lightning's ddp)
    with pytest.raises(RuntimeError, match="RANK is not"):
        iter(loader)
    monkeypatch.setenv("RANK", "1")
    assert flat(loader) == [1, 3, 5, 7, 9]


def test_ranks_without_a_seed_agree_on_the_shuffle(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    shares = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        loader = PyDataloader(Range(30), batch_size=4, shuffle=True)  # each draws its own seed
        loader.set_epoch(3)
        shares.append(flat(loader))
        assert loader.seed == 0
    assert not set(shares[0]) & set(shares[1])
    assert set(shares[0]) | set(shares[1]) == set(range(30))


def test_a_user_sampler_is_never_sharded_behind_the_users_back(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    mine = [4, 0, 3]
    assert flat(PyDataloader(Range(5), sampler=mine)) == mine
    assert flat(PyDataloader(Range(5), sampler=mine, rank=0, world_size=2)) == [4, 3]


def test_a_distributed_sampler_kept_from_torch_code_is_not_sharded_again(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    sampler = torch.utils.data.DistributedSampler(range(20), num_replicas=2, rank=0, shuffle=False)
    assert flat(PyDataloader(Range(20), sampler=sampler, batch_size=3)) == list(range(0, 20, 2))


def test_an_iterator_made_only_to_check_iteration_uses_no_epoch():
    loader = PyDataloader(Range(12), batch_size=3, shuffle=True, seed=2)
    reference = PyDataloader(Range(12), batch_size=3, shuffle=True, seed=2)
    iter(loader)  # Lightning checks that a loader iterates
    it = iter(loader)
    loader.set_epoch(0)  # called after the iterator was made
    assert list(it) == list(reference)
    loader.set_epoch(1)
    reference.set_epoch(1)
    assert list(loader) == list(reference)


# --- pickling ------------------------------------------------------------------------------


class Squares(PyDataset):
    def __len__(self):
        return 25

    def __getitem__(self, i):
        return i * i


def test_a_loader_pickles_with_its_seed_and_epoch():
    loader = PyDataloader(Squares(), 4, True, num_workers=2)
    list(loader)
    clone = pickle.loads(pickle.dumps(loader))
    assert clone.seed == loader.seed
    assert clone.num_workers == 2
    assert list(clone) == list(loader)
    assert flat(clone) == flat(loader)


def test_endless_iteration_is_a_user_sampler_choice():
    # A finite slice of an endless sampler works (an endless one never starts an epoch).
    assert flat(PyDataloader(Range(3), sampler=itertools.islice(itertools.cycle([2, 0]), 5))) == [2, 0, 2, 0, 2]


def test_batch_sampler_with_empty_batches_for_rust_and_async_datasets(tmp_path):
    from dataloader_rs import PyAsyncDataset

    class Doubles(PyAsyncDataset):
        def __len__(self):
            return 4

        async def __getitem__(self, i):
            return 2 * i

    for i in range(4):
        (tmp_path / f"{i}.bin").write_bytes(bytes([i]))
    files = FileDataset([str(tmp_path / f"{i}.bin") for i in range(4)])
    batches = [[3], [], [0, 2, 1]]
    for k in (1, 2):
        rust = PyDataloader(
            files, batch_sampler=batches, num_workers=2, item_concurrency=k, transform=lambda i, b: b[0]
        )
        assert list(rust) == [[3], [], [0, 2, 1]]
        aio = PyDataloader(Doubles(), batch_sampler=batches, item_concurrency=k)
        assert list(aio) == [[6], [], [0, 4, 2]]
