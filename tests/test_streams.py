"""Iterable datasets (streams): every kind of iterable, one reader or one per worker (torch's
way, compared with torch's own DataLoader), ranks, the shuffle buffer, resume, errors and the
life cycle of an epoch."""

from __future__ import annotations

import gc
import itertools
import json
import os
import subprocess
import sys
import textwrap
import weakref

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dataloader_rs as dr
from dataloader_rs import PyDataloader, PyIterableDataset
from dataloader_rs._native import parked_workers

from conftest import wait_until

try:
    import torch
    from torch.utils.data import DataLoader, IterableDataset
except ImportError:  # the free-threaded builds' venvs have no torch
    torch = None
    IterableDataset = object  # type: ignore[assignment,misc]

needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")


class Count(PyIterableDataset[int]):
    """0..n-1; with readers per worker, each reader yields its share (by get_worker_info())."""

    def __init__(self, n: int, sized: bool = True) -> None:
        self.n = n
        self.sized = sized

    def __iter__(self):
        info = dr.get_worker_info()
        if info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))

    def __len__(self) -> int:
        if not self.sized:
            raise TypeError("no length")
        return self.n


class Unsized(PyIterableDataset[int]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        return iter(range(self.n))


class Plain:
    """Any object with __iter__ and no __getitem__ is a stream."""

    def __iter__(self):
        yield from "abcdefg"


class TorchCount(IterableDataset):  # type: ignore[misc]
    """torch's way: shards itself by torch.utils.data.get_worker_info()."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))


def flat(batches):
    return [x for b in batches for x in b]


@pytest.mark.parametrize("workers", [0, 1, 2, 3])
@pytest.mark.parametrize("batch_size", [1, 3, 64])
def test_one_reader_gives_the_stream_in_order(workers, batch_size):
    loader = PyDataloader(Unsized(100), batch_size=batch_size, num_workers=workers)
    batches = list(loader)
    assert flat(batches) == list(range(100))
    assert [len(b) for b in batches[:-1]] == [batch_size] * (len(batches) - 1)
    assert list(loader) == batches  # a second epoch reads it again


def test_a_plain_iterable_and_a_generator_function_are_streams():
    assert flat(PyDataloader(Plain(), batch_size=3, num_workers=2)) == list("abcdefg")

    class Gen:
        def __iter__(self):
            for i in range(5):
                yield {"x": i}

    assert flat(PyDataloader(Gen(), batch_size=2)) == [{"x": i} for i in range(5)]


@needs_torch
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers", [0, 2, 3])
@pytest.mark.parametrize(
    ("n", "batch_size", "drop_last"), [(10, 3, False), (10, 3, True), (7, 2, False), (2, 4, False)]
)
def test_readers_per_worker_give_torchs_batches_in_torchs_order(workers, n, batch_size, drop_last):
    ours = PyDataloader(
        TorchCount(n), batch_size=batch_size, num_workers=workers, stream_readers="per_worker", drop_last=drop_last
    )
    theirs = DataLoader(TorchCount(n), batch_size=batch_size, num_workers=workers, drop_last=drop_last, collate_fn=list)
    assert list(ours) == list(theirs)


@needs_torch
def test_torch_default_collate_and_a_torch_iterable():
    loader = PyDataloader(TorchCount(10), batch_size=4, collate_fn=torch.utils.data.default_collate, num_workers=2)
    batches = list(loader)
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[0].dtype == torch.int64


def test_get_worker_info_names_the_reader_per_worker_and_nothing_with_one_reader():
    seen = []

    class Spy(PyIterableDataset[int]):
        def __iter__(self):
            info = dr.get_worker_info()
            seen.append(None if info is None else (info.id, info.num_workers, info.dataset is ds))
            yield from range(4)

    ds = Spy()
    assert len(flat(PyDataloader(ds, batch_size=2, num_workers=2))) == 4
    assert seen == [None]  # the one reader is no worker: the stream is not split
    seen.clear()
    assert len(flat(PyDataloader(ds, batch_size=2, num_workers=2, stream_readers="per_worker"))) == 8
    assert sorted(seen) == [(0, 2, True), (1, 2, True)]


@needs_torch
def test_torch_get_worker_info_answers_on_our_reader_threads():
    seen = []

    class Spy(IterableDataset):  # type: ignore[misc]
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            seen.append((info.id, info.num_workers))
            yield info.id

    loader = PyDataloader(Spy(), batch_size=1, num_workers=3, stream_readers="per_worker")
    assert sorted(flat(loader)) == [0, 1, 2]
    assert sorted(seen) == [(0, 3), (1, 3), (2, 3)]
    assert torch.utils.data.get_worker_info() is None  # outside the loader's threads


@needs_torch
def test_a_hugging_face_iterable_dataset_is_split_between_readers_by_its_shards():
    datasets = pytest.importorskip("datasets")

    def rows(shards):
        for s in shards:
            for i in range(5):
                yield {"shard": s, "i": i}

    ds = datasets.IterableDataset.from_generator(rows, gen_kwargs={"shards": list(range(4))})
    assert ds.num_shards == 4
    expected = sorted((r["shard"], r["i"]) for r in ds)
    for readers in ("one", "per_worker"):
        loader = PyDataloader(ds, batch_size=3, num_workers=2, stream_readers=readers)
        got = [(r["shard"], r["i"]) for r in flat(loader)]
        assert sorted(got) == expected, readers  # every row once: no reader reads another's shard
    theirs = DataLoader(ds, batch_size=3, num_workers=2, collate_fn=list)
    ours = PyDataloader(ds, batch_size=3, num_workers=2, stream_readers="per_worker")
    assert list(ours) == list(theirs)


@needs_torch
@pytest.mark.parametrize("readers", ["one", "per_worker"])
def test_a_dataset_split_by_node_already_is_not_split_again(monkeypatch, readers):
    # Training scripts call split_dataset_by_node themselves: under torchrun the rank's share
    # is the whole of what the split dataset yields.
    datasets = pytest.importorskip("datasets")
    from datasets.distributed import split_dataset_by_node

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    ds = datasets.Dataset.from_dict({"x": list(range(10))}).to_iterable_dataset(num_shards=2)
    mine = split_dataset_by_node(ds, rank=1, world_size=2)
    expected = [r["x"] for r in mine]
    loader = PyDataloader(mine, batch_size=2, num_workers=2, stream_readers=readers)
    assert loader.rank is None
    assert sorted(r["x"] for r in flat(loader)) == sorted(expected)
    # Not split by node: the loader takes its every second item, as for any stream.
    assert [r["x"] for r in flat(PyDataloader(ds, batch_size=2))] == [1, 3, 5, 7, 9]
    # Asked explicitly, the loader splits what it is given.
    explicit = PyDataloader(mine, batch_size=2, rank=0, world_size=2)
    assert len(flat(explicit)) == len(expected) // 2


def test_len_only_when_the_dataset_has_one():
    assert len(PyDataloader(Count(10), batch_size=3)) == 4
    assert len(PyDataloader(Count(10), batch_size=3, drop_last=True)) == 3
    assert len(PyDataloader(Count(10), batch_size=3, rank=1, world_size=3)) == 1
    with pytest.raises(TypeError, match="Unsized is an iterable dataset without __len__"):
        len(PyDataloader(Unsized(10), batch_size=3))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"shuffle": True}, ValueError, "shuffle=True is refused"),
        ({"sampler": [0, 1]}, ValueError, "sampler is refused"),
        ({"batch_sampler": [[0, 1]], "batch_size": 1}, ValueError, "batch_sampler is refused"),
        ({"item_concurrency": 4}, ValueError, "item_concurrency .* must be 1, got 4"),
        ({"stream_readers": "two"}, ValueError, "stream_readers must be 'one' or 'per_worker', got 'two'"),
        ({"shuffle_buffer": -1}, ValueError, "shuffle_buffer must be at least 0"),
        ({"shuffle_buffer": 2.5}, TypeError, "shuffle_buffer"),
        ({"worker_init_fn": print, "num_workers": 2}, ValueError, "stream_readers='per_worker'"),
        ({"seed": 3}, ValueError, "seed is only allowed with shuffle=True .or shuffle_buffer="),
    ],
)
def test_what_a_stream_refuses(kwargs, error, match):
    with pytest.raises(error, match=match):
        PyDataloader(Unsized(5), **kwargs)


@pytest.mark.parametrize("kwargs", [{"stream_readers": "one"}, {"shuffle_buffer": 4}])
def test_stream_options_on_a_map_style_dataset_are_refused(kwargs):
    with pytest.raises(ValueError, match="for iterable datasets"):
        PyDataloader(list(range(5)), **kwargs)


def test_worker_init_fn_runs_once_before_each_reader():
    calls = []
    loader = PyDataloader(
        Count(8), batch_size=2, num_workers=2, stream_readers="per_worker", worker_init_fn=calls.append
    )
    assert sorted(flat(loader)) == list(range(8))
    assert sorted(calls) == [0, 1]


@pytest.mark.parametrize("workers", [0, 2])
def test_the_shuffle_buffer_permutes_within_its_size_and_follows_the_seed(workers):
    def epochs(seed):
        loader = PyDataloader(Unsized(200), batch_size=16, num_workers=workers, shuffle_buffer=10, _base_seed=seed)
        return [flat(loader) for _ in range(2)]

    first, second = epochs(7)
    assert sorted(first) == list(range(200))
    assert first != list(range(200))
    assert first != second  # each epoch its own order
    # An item leaves the buffer at most `size - 1` places before it arrived.
    assert all(pos >= item - 9 for pos, item in enumerate(first))
    assert epochs(7) == [first, second]
    assert epochs(8)[0] != first
    seeded = PyDataloader(Unsized(200), batch_size=16, num_workers=workers, shuffle_buffer=10, seed=7)
    assert flat(seeded) == first  # seed= is the buffer's seed


@needs_torch
def test_torch_manual_seed_fixes_the_shuffle_buffer():
    def run():
        torch.manual_seed(3)
        return flat(PyDataloader(Unsized(100), batch_size=8, shuffle_buffer=20))

    assert run() == run()


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 60),
    world=st.integers(1, 4),
    batch_size=st.integers(1, 7),
    workers=st.integers(0, 2),
    buffer=st.sampled_from([None, 5]),
)
def test_ranks_read_disjoint_shares_of_equal_batches(n, world, batch_size, workers, buffer):
    shares = []
    for rank in range(world):
        loader = PyDataloader(
            Unsized(n), batch_size=batch_size, num_workers=workers, rank=rank, world_size=world, shuffle_buffer=buffer
        )
        shares.append(list(loader))
    assert len({len(s) for s in shares}) == 1  # the same number of batches on every rank
    items = [flat(s) for s in shares]
    complete = n // world * world
    assert sorted(itertools.chain(*items)) == list(range(complete))  # disjoint, nothing lost
    if buffer is None:
        assert items == [list(range(r, complete, world)) for r in range(world)]


@pytest.mark.parametrize("readers", ["one", "per_worker"])
@pytest.mark.parametrize("buffer", [None, 7])
@pytest.mark.parametrize("stop", [0, 1, 3, 6])
def test_a_resumed_epoch_gives_the_batches_an_uninterrupted_one_gives(readers, buffer, stop):
    def loader():
        return PyDataloader(
            Count(23), batch_size=3, num_workers=2, stream_readers=readers, shuffle_buffer=buffer, _base_seed=5
        )

    reference = loader()
    whole, after = list(reference), list(reference)
    first = loader()
    it = iter(first)
    head = [next(it) for _ in range(stop)]
    state = first.state_dict()
    del it
    second = loader()
    second.load_state_dict(json.loads(json.dumps(state)))
    assert head + list(second) == whole
    assert list(second) == after  # the epoch after is whole again


def hf_rows(reads):
    def rows(shards):
        for s in shards:
            for i in range(10):
                reads.append((s, i))
                yield {"s": s, "i": i}

    return rows


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stream_with_its_own_state_resumes_from_it_without_reading_again(workers):
    datasets = pytest.importorskip("datasets")
    reads: list[tuple[int, int]] = []

    def stream():
        return datasets.IterableDataset.from_generator(hf_rows(reads), gen_kwargs={"shards": [0, 1, 2]})

    whole = list(PyDataloader(stream(), batch_size=4, num_workers=workers))
    first = PyDataloader(stream(), batch_size=4, num_workers=workers)
    it = iter(first)
    head = [next(it) for _ in range(3)]
    state = json.loads(json.dumps(first.state_dict()))
    del it
    assert state["position"] == 3
    assert state["dataset_state"] is not None
    reads.clear()
    second = PyDataloader(stream(), batch_size=4, num_workers=workers)
    second.load_state_dict(state)
    assert second.state_dict() == state  # loaded, not started yet
    assert head + list(second) == whole
    # Read again: shard 1 from its start (the dataset resumes by shard), not shard 0.
    assert reads == [(s, i) for s in (1, 2) for i in range(10)]


def test_a_dataset_state_for_a_dataset_that_cannot_take_it_is_refused():
    loader = PyDataloader(Unsized(10), batch_size=2)
    state = loader.state_dict()
    assert state["dataset_state"] is None  # no state_dict() of its own
    state["dataset_state"] = {"x": 1}
    with pytest.raises(ValueError, match=r"dataset_state.*Unsized has none"):
        loader.load_state_dict(state)


def test_skip_first_batches_of_a_stream():
    loader = PyDataloader(Unsized(10), batch_size=3, num_workers=2)
    assert list(loader.skip_first_batches(2)) == [[6, 7, 8], [9]]


def test_state_after_a_whole_epoch_starts_the_next():
    loader = PyDataloader(Unsized(5), batch_size=2, num_workers=2)
    list(loader)
    state = loader.state_dict()
    assert (state["epoch"], state["position"]) == (1, 0)


class Boom(Exception):
    pass


def test_an_exception_in_iter_reaches_the_caller_with_its_type():
    class BadIter(PyIterableDataset[int]):
        def __iter__(self):
            raise Boom("no stream today")

    for workers in (0, 2):
        with pytest.raises(Boom, match="no stream today"):
            list(PyDataloader(BadIter(), batch_size=2, num_workers=workers))


def test_an_exception_in_next_reaches_the_caller_and_the_stream_goes_on():
    class Flaky:
        def __iter__(self):
            return FlakyIter()

    class FlakyIter:
        def __init__(self):
            self.i = 0

        def __iter__(self):
            return self

        def __next__(self):
            self.i += 1
            if self.i > 8:
                raise StopIteration
            if self.i == 3:
                raise Boom("item 3")
            return self.i

    it = iter(PyDataloader(Flaky(), batch_size=2, num_workers=2))
    assert next(it) == [1, 2]
    with pytest.raises(Boom, match="item 3"):
        next(it)
    assert list(it) == [[5, 6], [7, 8]]

    loader = PyDataloader(Flaky(), batch_size=2, num_workers=2, max_failures=1)
    assert list(loader) == [[1, 2], [4], [5, 6], [7, 8]]
    [failure] = loader.failures
    # A stream's index is the item's place in it.
    assert (failure.index, failure.type, failure.message) == (2, "Boom", "item 3")


def test_a_generator_that_raises_ends_after_its_error():
    class Gen:
        def __iter__(self):
            yield 1
            raise Boom("broken")

    it = iter(PyDataloader(Gen(), batch_size=1, num_workers=2))
    assert next(it) == [1]
    with pytest.raises(Boom):
        next(it)
    assert list(it) == []


def test_transform_and_collate_run_on_stream_items():
    loader = PyDataloader(Unsized(6), batch_size=4, num_workers=2, transform=lambda x: x * 10, collate_fn=tuple)
    assert list(loader) == [(0, 10, 20, 30), (40, 50)]


def test_a_rust_transform_on_a_stream_of_images():
    np = pytest.importorskip("numpy")

    class Images:
        def __iter__(self):
            for i in range(5):
                yield dr.Image.from_array(np.full((4, 6, 3), i, dtype=np.uint8))

    loader = PyDataloader(
        Images(),
        batch_size=2,
        num_workers=2,
        transform=dr.transforms.CenterCrop(2),
        collate_fn=dr.ImageCollator(),
    )
    batches = [np.asarray(b) for b in loader]
    assert [b.shape for b in batches] == [(2, 3, 2, 2), (2, 3, 2, 2), (1, 3, 2, 2)]  # NCHW
    assert [int(b[i, 0, 0, 0]) for b in batches for i in range(len(b))] == [0, 1, 2, 3, 4]


class Endless:
    def __iter__(self):
        return itertools.count()


def test_break_out_of_an_endless_stream_and_start_again():
    loader = PyDataloader(Endless(), batch_size=4, num_workers=2)
    for epoch in range(3):
        got = []
        for batch in loader:
            got.append(batch)
            if len(got) == 3:
                break
        assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]], epoch
    del loader, batch
    gc.collect()


def test_a_dropped_endless_epoch_frees_its_threads():
    # A worker waiting for its reader's turn gives up when the epoch is dropped: both
    # workers go back to the lot (threads parked by earlier tests end first).
    gc.collect()
    assert wait_until(lambda: parked_workers() == 0, timeout=30)
    loader = PyDataloader(Endless(), batch_size=4, num_workers=2, stream_readers="per_worker")
    it = iter(loader)
    assert len(next(it)) == 4
    refs = [weakref.ref(it), weakref.ref(loader)]
    del it, loader
    gc.collect()
    assert wait_until(lambda: all(r() is None for r in refs), timeout=10)
    assert wait_until(lambda: parked_workers() == 2, timeout=10), parked_workers()


TORCHRUN = textwrap.dedent(
    """
    import json, sys
    import torch.distributed as dist
    from dataloader_rs import PyDataloader

    class Stream:
        def __iter__(self):
            return iter(range(103))

    dist.init_process_group("gloo")
    loader = PyDataloader(Stream(), batch_size=8, num_workers=2)
    mine = [b for b in loader]
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    if dist.get_rank() == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(gathered, f)
    dist.destroy_process_group()
    """
)


@needs_torch
@pytest.mark.timeout(300)
def test_torchrun_two_ranks_split_a_stream_into_equal_batches(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TORCHRUN)
    out = tmp_path / "shares.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    run = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd = [*run, str(script), str(out)]
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=240)
    zero, one = json.loads(out.read_text())
    assert len(zero) == len(one) == 7  # 51 items each (103 has 51 complete rounds of 2)
    assert flat(zero) == list(range(0, 102, 2))
    assert flat(one) == list(range(1, 102, 2))


def test_a_stream_with_set_epoch_is_told_each_epoch_before_its_iter():
    class Epochs(PyIterableDataset[int]):
        """Yields the epoch it was told, twice: what __iter__ saw."""

        def __init__(self) -> None:
            self.epoch = -1
            self.told: list[int] = []

        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch
            self.told.append(epoch)

        def __iter__(self):
            return iter([self.epoch, self.epoch])

    dataset = Epochs()
    loader = PyDataloader(dataset, batch_size=2)
    assert [list(loader) for _ in range(2)] == [[[0, 0]], [[1, 1]]]
    loader.set_epoch(7)
    assert list(loader) == [[7, 7]]
    assert dataset.told == [0, 1, 7]
