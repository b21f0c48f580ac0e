"""Beyond the spec: sharding for distributed training, mid-epoch resume, skipping bad samples,
live stats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataloader_rs import PyDataloader, TooManyFailures

from conftest import Flaky, Range


def flat(batches):
    return [x for b in batches for x in b]


def torch_partition(n: int, rank: int, world: int, drop_last: bool) -> list[int]:
    """torch.utils.data.DistributedSampler's rule over positions 0..n-1 (no shuffle)."""
    indices = list(range(n))
    if drop_last:
        total = (n // world) * world
        indices = indices[:total]
    else:
        total = -(-n // world) * world
        padding = total - len(indices)
        if padding and indices:
            indices += (indices * -(-padding // len(indices)))[:padding]
    return indices[rank:total:world]


# --- sharding -------------------------------------------------------------------------------


@given(n=st.integers(0, 120), world=st.integers(1, 6), drop_last=st.booleans(), bs=st.integers(1, 9))
@settings(max_examples=60, deadline=None)
def test_ranks_follow_torchs_partition(n, world, drop_last, bs):
    shares = []
    for rank in range(world):
        loader = PyDataloader(Range(n), batch_size=bs, rank=rank, world_size=world, drop_last=drop_last)
        got = flat(loader)
        expected = torch_partition(n, rank, world, drop_last)
        if drop_last:
            expected = expected[: (len(expected) // bs) * bs]
        assert got == expected
        shares.append(got)
    if n and not drop_last:
        assert len({len(s) for s in shares}) == 1
        assert sorted(set(flat(shares))) == list(range(n))


def test_shuffled_ranks_are_disjoint_cover_and_change_with_set_epoch():
    n, world = 103, 4
    epochs = []
    for epoch in range(2):
        shares = []
        for rank in range(world):
            loader = PyDataloader(Range(n), batch_size=5, shuffle=True, seed=7, rank=rank, world_size=world)
            loader.set_epoch(epoch)
            shares.append(flat(loader))
        everything = flat(shares)
        assert len(everything) == 26 * world  # padded to equal lengths
        assert set(everything) == set(range(n))
        epochs.append(shares)
    assert epochs[0] != epochs[1]


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"rank": 2, "world_size": 2}, ValueError, "rank must be in"),
        ({"rank": -1, "world_size": 2}, ValueError, "rank must be in"),
        ({"rank": 0, "world_size": 0}, ValueError, "world_size must be at least 1"),
        ({"rank": 0}, ValueError, "world_size"),
    ],
)
def test_bad_ranks(kwargs, exc, match, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(exc, match=match):
        PyDataloader(Range(4), **kwargs)


RANK_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from conftest import Range
    from dataloader_rs import PyDataloader
    loader = PyDataloader(Range(50), batch_size=4, shuffle=True, seed=3, num_workers=2)
    print(json.dumps({"len": len(loader), "items": [x for b in loader for x in b]}))
    """
)


def test_ranks_from_torchrun_environment_in_subprocesses():
    tests_dir = os.path.dirname(__file__)
    results = []
    for rank in range(3):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="3")
        out = subprocess.run(
            [sys.executable, "-c", RANK_SCRIPT, tests_dir], env=env, capture_output=True, text=True, check=True
        )
        results.append(json.loads(out.stdout))
    assert {r["len"] for r in results} == {5}  # 17 items each, padded, in batches of 4
    shares = [r["items"] for r in results]
    assert all(len(s) == 17 for s in shares)
    assert set(flat(shares)) == set(range(50))


# --- resume ---------------------------------------------------------------------------------


@given(
    cut=st.integers(0, 30),
    workers_a=st.integers(0, 3),
    workers_b=st.integers(0, 3),
    depth=st.integers(1, 3),
    k=st.integers(1, 3),
)
@settings(max_examples=25, deadline=None)
def test_resume_gives_exactly_the_batches_not_received(cut, workers_a, workers_b, depth, k):
    def make(workers, **kw):
        return PyDataloader(Range(97), batch_size=6, shuffle=True, seed=11, num_workers=workers, **kw)

    reference = make(0)
    expected = [list(reference) for _ in range(3)]  # three uninterrupted epochs

    first = make(workers_a, prefetch_depth=depth)
    list(first)  # epoch 0 whole
    it = iter(first)  # epoch 1, interrupted after `cut` batches
    received = [next(it) for _ in range(min(cut, 16))]  # 17 batches per epoch: stop inside it
    state = first.state_dict()
    json.dumps(state)  # a plain, JSON-serialisable dict
    del it, first

    second = make(workers_b, item_concurrency=k)
    second.load_state_dict(json.loads(json.dumps(state)))
    rest = list(second)
    assert received + rest == expected[1]
    assert list(second) == expected[2]


def test_state_dict_between_epochs_and_of_a_fresh_loader():
    loader = PyDataloader(Range(10), batch_size=3, shuffle=True, seed=1)
    fresh = loader.state_dict()
    assert fresh["epoch"] == 0
    assert fresh["position"] == 0
    list(loader)
    after = loader.state_dict()
    assert after["epoch"] == 1
    assert after["position"] == 0
    other = PyDataloader(Range(10), batch_size=3, shuffle=True, seed=1)
    other.load_state_dict(after)
    reference = PyDataloader(Range(10), batch_size=3, shuffle=True, seed=1)
    list(reference)  # epoch 0
    assert list(other) == list(reference)  # both give epoch 1


def test_load_state_dict_refuses_a_different_configuration():
    a = PyDataloader(Range(10), batch_size=3, shuffle=True, seed=1)
    with pytest.raises(ValueError, match="seed"):
        PyDataloader(Range(10), batch_size=3, shuffle=True, seed=2).load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="batch_size"):
        PyDataloader(Range(10), batch_size=4, shuffle=True, seed=1).load_state_dict(a.state_dict())
    with pytest.raises(TypeError):
        a.load_state_dict("nope")


# --- skipping bad samples -------------------------------------------------------------------


@pytest.mark.parametrize(("workers", "k"), [(0, 1), (2, 1), (2, 3)])
def test_bad_samples_are_skipped_and_recorded(workers, k):
    loader = PyDataloader(Flaky(20, {3, 11}), batch_size=4, max_failures=2, num_workers=workers, item_concurrency=k)
    batches = list(loader)
    assert flat(batches) == [i for i in range(20) if i not in (3, 11)]
    assert [len(b) for b in batches] == [3, 4, 3, 4, 4]
    assert sorted((f.index, f.type, f.message) for f in loader.failures) == [
        (3, "ValueError", "bad sample 3"),
        (11, "ValueError", "bad sample 11"),
    ]


def test_too_many_failures_raise_with_the_record():
    loader = PyDataloader(Flaky(20, {1, 2, 3}), batch_size=4, max_failures=0.1)  # 10% of 20 = 2
    it = iter(loader)
    with pytest.raises(TooManyFailures) as info:
        next(it)
    assert sorted(f.index for f in info.value.failures) == [1, 2, 3]
    assert "3 items failed" in str(info.value)


def test_without_max_failures_the_spec_behaviour_stays():
    it = iter(PyDataloader(Flaky(8, {1}), batch_size=4))
    with pytest.raises(ValueError, match="bad sample 1"):
        next(it)
    assert next(it) == [4, 5, 6, 7]


# --- stats ----------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_stats_count_exactly(workers):
    loader = PyDataloader(Flaky(10, {5}), batch_size=4, num_workers=workers)
    for _ in range(2):
        it = iter(loader)
        while True:
            try:
                next(it)
            except ValueError:
                continue
            except StopIteration:
                break
    s = loader.stats()
    assert s["batches"] == 6
    assert s["failed_batches"] == 2
    assert s["items"] == 2 * 6
    assert s["wait_seconds"] >= 0.0
    assert s["load_p50_seconds"] is not None
    assert s["load_p99_seconds"] >= s["load_p50_seconds"]


def test_all_four_together_sharded_shuffled_resumed_with_skips():
    def make(rank):
        return PyDataloader(
            Flaky(60, {7, 8}),
            batch_size=5,
            shuffle=True,
            seed=5,
            rank=rank,
            world_size=2,
            max_failures=4,
            num_workers=2,
        )

    for rank in range(2):
        whole = make(rank)
        expected = [list(whole) for _ in range(2)]
        part = make(rank)
        it = iter(part)
        got = [next(it), next(it)]
        state = part.state_dict()
        resumed = make(rank)
        resumed.load_state_dict(state)
        assert got + list(resumed) == expected[0]
        assert list(resumed) == expected[1]
        assert not ({7, 8} & set(flat(expected[0])))
