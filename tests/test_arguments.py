"""PyDataloader arguments: defaults, validation, len()."""

from __future__ import annotations

import pytest

from dataloader_rs import PyAsyncDataset, PyDataloader, PyDataset, SequentialSampler

from conftest import Range


def test_defaults():
    loader = PyDataloader(Range(3))
    assert loader.batch_size == 1
    assert loader.shuffle is False
    assert loader.seed is None
    assert isinstance(loader.sampler, SequentialSampler)
    assert list(loader.sampler) == [0, 1, 2]
    assert loader.num_workers == 0
    assert loader.prefetch_depth == 2
    assert loader.transform is None
    assert loader.collate_fn is None
    assert loader.drop_last is False
    assert loader.item_concurrency == 1
    assert loader.return_indices is False
    assert loader.runtime_threads is None
    assert list(loader) == [[0], [1], [2]]


def test_positional_like_torch():
    loader = PyDataloader(Range(5), 2, False)
    assert list(loader) == [[0, 1], [2, 3], [4]]


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"batch_size": 0}, ValueError, "batch_size must be at least 1, got 0"),
        ({"batch_size": -3}, ValueError, "batch_size must be at least 1"),
        ({"batch_size": 2.0}, TypeError, "batch_size must be an int"),
        ({"batch_size": True}, TypeError, "batch_size must be an int"),
        ({"num_workers": -1}, ValueError, "num_workers must be at least 0"),
        ({"prefetch_depth": 0}, ValueError, "prefetch_depth must be at least 1, got 0"),
        ({"item_concurrency": 0}, ValueError, "item_concurrency must be at least 1"),
        ({"shuffle": True, "sampler": [0, 1]}, ValueError, "shuffle=True cannot be combined with sampler"),
        ({"seed": 3}, ValueError, "seed is only allowed with shuffle=True"),
        ({"shuffle": True, "seed": "x"}, TypeError, "seed must be an int"),
        ({"shuffle": "yes"}, TypeError, "shuffle must be a bool"),
        ({"sampler": 5}, TypeError, "sampler must be an iterable of ints"),
        ({"transform": 5}, TypeError, "transform must be callable"),
        ({"collate_fn": "stack"}, TypeError, "collate_fn must be callable"),
        ({"runtime_threads": 2}, ValueError, "runtime_threads"),
        ({"runtime_threads": 0}, ValueError, "runtime_threads"),
    ],
)
def test_invalid_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        PyDataloader(Range(4), **kwargs)


def test_numpy_ints_are_accepted_as_sizes():
    np = pytest.importorskip("numpy")
    loader = PyDataloader(Range(4), batch_size=np.int64(2), num_workers=np.int32(1))
    assert loader.batch_size == 2
    assert list(loader) == [[0, 1], [2, 3]]


@pytest.mark.parametrize("depth", [10**12, 2**63 - 1, 2**64 - 1, 10**30])
@pytest.mark.parametrize("workers", [0, 1, 2])
def test_any_prefetch_depth_works(depth, workers):
    # The ring holds at most the epoch's batches: no depth is too large.
    loader = PyDataloader(Range(5), batch_size=2, num_workers=workers, prefetch_depth=depth)
    assert loader.prefetch_depth == depth
    assert list(loader) == [[0, 1], [2, 3], [4]]


def test_huge_sizes_name_their_argument():
    assert list(PyDataloader(Range(3), batch_size=10**30)) == [[0, 1, 2]]
    with pytest.raises(ValueError, match=r"num_workers must be at most 9223372036854775807, got 10{30}$"):
        PyDataloader(Range(3), num_workers=10**30)
    with pytest.raises(ValueError, match="item_concurrency must be at most 9223372036854775807, got 1844674407"):
        PyDataloader(Range(3), item_concurrency=2**64)
    with pytest.raises(ValueError, match=r"num_workers . item_concurrency is too large: 65536 . 2"):
        PyDataloader(Range(3), num_workers=1 << 16, item_concurrency=2)


def test_items_in_parallel_is_deprecated_but_works():
    with pytest.warns(DeprecationWarning, match="items_in_parallel is deprecated: use item_concurrency"):
        loader = PyDataloader(Range(4), batch_size=2, items_in_parallel=2)
    assert loader.item_concurrency == 2
    assert list(loader) == [[0, 1], [2, 3]]
    with (
        pytest.warns(DeprecationWarning, match="items_in_parallel"),
        pytest.raises(TypeError, match="not both"),
    ):
        PyDataloader(Range(4), item_concurrency=2, items_in_parallel=2)


@pytest.mark.parametrize(
    ("n", "bs", "drop_last", "expected"),
    [(10, 3, False, 4), (10, 3, True, 3), (9, 3, True, 3), (0, 3, False, 0), (2, 3, True, 0), (1, 1, False, 1)],
)
def test_len_of_loader(n, bs, drop_last, expected):
    loader = PyDataloader(Range(n), batch_size=bs, drop_last=drop_last)
    assert len(loader) == expected
    assert len(list(loader)) == expected


def test_len_of_iterator_counts_down():
    loader = PyDataloader(Range(10), batch_size=3, num_workers=2)
    it = iter(loader)
    assert len(it) == 4
    next(it)
    assert len(it) == 3
    list(it)
    assert len(it) == 0
    with pytest.raises(StopIteration):
        next(it)


def test_len_uses_the_sampler():
    loader = PyDataloader(Range(100), batch_size=2, sampler=[1, 2, 3])
    assert len(loader) == 2

    class NoLen:
        def __iter__(self):
            yield from (3, 1)

    loader = PyDataloader(Range(100), batch_size=2, sampler=NoLen())
    with pytest.raises(TypeError):
        len(loader)
    assert list(loader) == [[3, 1]]


class Both(PyDataset, PyAsyncDataset):
    def __len__(self):
        return 1

    def __getitem__(self, i):
        return i


class AsyncGetitem(PyDataset):
    def __len__(self):
        return 1

    async def __getitem__(self, i):
        return i


class NoLen(PyDataset):
    def __getitem__(self, i):
        return i


def test_dataset_checks():
    with pytest.raises(TypeError, match="subclasses both PyDataset and PyAsyncDataset"):
        PyDataloader(Both())
    with pytest.raises(TypeError, match=r"AsyncGetitem.__getitem__ is async def.*PyAsyncDataset"):
        PyDataloader(AsyncGetitem())
    with pytest.raises(TypeError, match="NoLen must define __len__"):
        PyDataloader(NoLen())
    with pytest.raises(TypeError, match="must define __len__"):
        PyDataloader(object())


def test_a_duck_typed_dataset_works():
    class Squares:
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return i * i

    assert list(PyDataloader(Squares(), batch_size=3)) == [[0, 1, 4]]
