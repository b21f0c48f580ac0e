"""Samplers: sequential, shuffle with seeds, user samplers read whole at iter()."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataloader_rs import PyDataloader

from conftest import Range


def flat(loader):
    return [x for b in loader for x in b]


@given(n=st.integers(0, 300), bs=st.integers(1, 17), workers=st.integers(0, 3), seed=st.integers(0, 2**64 - 1))
@settings(max_examples=60, deadline=None)
def test_every_index_exactly_once_per_shuffled_epoch(n, bs, workers, seed):
    loader = PyDataloader(Range(n), batch_size=bs, shuffle=True, seed=seed, num_workers=workers)
    for _ in range(2):
        assert sorted(flat(loader)) == list(range(n))


def test_a_new_permutation_every_epoch_and_the_same_seed_the_same_sequence():
    a = PyDataloader(Range(200), batch_size=7, shuffle=True, seed=11)
    b = PyDataloader(Range(200), batch_size=7, shuffle=True, seed=11, num_workers=2)
    epochs_a = [flat(a) for _ in range(3)]
    epochs_b = [flat(b) for _ in range(3)]
    assert epochs_a == epochs_b
    assert epochs_a[0] != epochs_a[1] != epochs_a[2]
    assert epochs_a[0] != list(range(200))
    other = PyDataloader(Range(200), batch_size=7, shuffle=True, seed=12)
    assert flat(other) != epochs_a[0]


def test_without_a_seed_loaders_differ_and_expose_their_seed():
    a = PyDataloader(Range(100), shuffle=True)
    b = PyDataloader(Range(100), shuffle=True)
    assert isinstance(a.seed, int)
    assert a.seed != b.seed
    assert flat(a) != flat(b)
    replay = PyDataloader(Range(100), shuffle=True, seed=a.seed)
    fresh = PyDataloader(Range(100), shuffle=True, seed=a.seed)
    assert flat(replay) == flat(fresh)


def test_negative_and_huge_seeds():
    assert sorted(flat(PyDataloader(Range(10), shuffle=True, seed=-1))) == list(range(10))
    assert sorted(flat(PyDataloader(Range(10), shuffle=True, seed=2**100))) == list(range(10))


def test_sampler_kinds():
    assert flat(PyDataloader(Range(10), batch_size=2, sampler=[3, 3, 0])) == [3, 3, 0]
    assert flat(PyDataloader(Range(10), batch_size=2, sampler=range(9, 4, -2))) == [9, 7, 5]
    assert flat(PyDataloader(Range(10), batch_size=2, sampler=(i for i in [1, 2]))) == [1, 2]

    class Gen:
        def __len__(self):
            return 3

        def __iter__(self):
            yield from (4, 5, 6)

    assert flat(PyDataloader(Range(10), batch_size=2, sampler=Gen())) == [4, 5, 6]


def test_a_sampler_is_read_again_every_epoch():
    class Counting:
        def __init__(self):
            self.epochs = 0

        def __iter__(self):
            self.epochs += 1
            return iter([self.epochs])

    s = Counting()
    loader = PyDataloader(Range(10), sampler=s)
    assert flat(loader) == [1]
    assert flat(loader) == [2]


def test_a_sampler_is_read_whole_at_iter():
    reads = []

    class Logged:
        def __iter__(self):
            for i in range(5):
                reads.append(i)
                yield i

    it = iter(PyDataloader(Range(10), batch_size=2, sampler=Logged()))
    assert reads == [0, 1, 2, 3, 4]
    assert len(it) == 3


def test_numpy_samplers():
    np = pytest.importorskip("numpy")
    perm = np.random.default_rng(0).permutation(20)
    out = flat(PyDataloader(Range(20), batch_size=6, sampler=perm, num_workers=2))
    assert out == perm.tolist()
    assert all(type(i) is int for i in out)
    assert flat(PyDataloader(Range(20), sampler=np.array([3, 1], dtype=np.uint8))) == [3, 1]


def test_weighted_sampler_from_the_docs():
    class Weighted:
        def __init__(self, weights):
            self.weights = weights

        def __len__(self):
            return len(self.weights)

        def __iter__(self):
            population = range(len(self.weights))
            yield from random.choices(population, weights=self.weights, k=len(self.weights))

    out = flat(PyDataloader(Range(4), batch_size=8, sampler=Weighted([0, 0, 1, 0])))
    assert out == [2, 2, 2, 2]


@pytest.mark.parametrize(
    ("sampler", "exc", "match"),
    [
        ([0, -1], ValueError, "the sampler yielded -1: indices must be non-negative ints"),
        ([0, 1.5], TypeError, "the sampler yielded 1.5 of type float"),
        ([0, "2"], TypeError, "of type str"),
        ([True], TypeError, "of type bool"),
        ([None], TypeError, "of type NoneType"),
        ([2**64], ValueError, "64 bits"),
    ],
)
def test_bad_sampler_values_make_iter_raise(sampler, exc, match):
    loader = PyDataloader(Range(10), sampler=sampler)
    with pytest.raises(exc, match=match):
        iter(loader)


@pytest.mark.parametrize("given", [{}, {"sampler": [0], "batch_sampler": [[0]]}])
def test_the_native_epoch_takes_one_of_sampler_and_batch_sampler(given):
    loader = PyDataloader(Range(3))
    with pytest.raises(ValueError, match="epoch_from takes one of sampler= and batch_sampler="):
        loader._native.epoch_from(**given)
    # Neither call started an epoch: the next one is still the first.
    assert loader._native.epoch == 0
    assert loader._native.epoch_from(sampler=[2, 0]).__next__() == [2]


def test_a_raising_sampler_or_len_makes_iter_raise_the_same_exception():
    boom = KeyError("sampler broke")

    class Broken:
        def __iter__(self):
            yield 0
            raise boom

    with pytest.raises(KeyError) as info:
        iter(PyDataloader(Range(10), sampler=Broken()))
    assert info.value is boom

    class BadLen(Range):
        def __len__(self):
            raise OSError("no length today")

    with pytest.raises(OSError, match="no length today"):
        iter(PyDataloader(BadLen(3)))


def test_large_shuffled_epoch_starts():
    loader = PyDataloader(Range(10_000_000), batch_size=64, shuffle=True, seed=0, num_workers=2)
    it = iter(loader)
    first = next(it)
    assert len(first) == 64
    assert len(set(first)) == 64
    assert len(it) == 10_000_000 // 64 - 1
