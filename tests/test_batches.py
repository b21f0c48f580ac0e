"""Batches and collate_fn, __getitems__, transform and return_indices."""

from __future__ import annotations

import threading

import pytest

from dataloader_rs import PyDataloader, PyDataset

from conftest import Range

np = pytest.importorskip("numpy")


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_a_batch_is_a_list_without_collate_fn(workers):
    batches = list(PyDataloader(Range(7), batch_size=3, num_workers=workers))
    assert batches == [[0, 1, 2], [3, 4, 5], [6]]
    assert all(type(b) is list for b in batches)


@pytest.mark.parametrize("workers", [0, 2])
def test_drop_last(workers):
    assert list(PyDataloader(Range(7), batch_size=3, drop_last=True, num_workers=workers)) == [
        [0, 1, 2],
        [3, 4, 5],
    ]


def test_np_stack_collates_arrays():
    ds = Range(6, fn=lambda i: np.full((2, 2), i, dtype=np.int32))
    batches = list(PyDataloader(ds, batch_size=4, num_workers=2, collate_fn=np.stack))
    assert [b.shape for b in batches] == [(4, 2, 2), (2, 2, 2)]
    assert batches[0].dtype == np.int32
    np.testing.assert_array_equal(batches[1][:, 0, 0], [4, 5])


def test_collate_fn_may_return_a_dict():
    def collate(samples):
        return {"x": np.array(samples), "n": len(samples)}

    (batch,) = list(PyDataloader(Range(3), batch_size=3, collate_fn=collate))
    assert batch["n"] == 3
    np.testing.assert_array_equal(batch["x"], [0, 1, 2])


@pytest.mark.parametrize("workers", [0, 2])
def test_collate_fn_runs_on_the_thread_that_loaded_the_batch(workers):
    ds = Range(8)
    seen = []

    def collate(samples):
        seen.append(threading.get_ident())
        return samples

    list(PyDataloader(ds, batch_size=2, num_workers=workers, collate_fn=collate))
    main = threading.get_ident()
    if workers == 0:
        assert set(seen) == {main}
        assert ds.threads == {main}
    else:
        assert main not in seen
        assert set(seen) <= ds.threads


class WithGetitems(PyDataset):
    def __init__(self, n, wrong_count=False):
        super().__init__()
        self.n = n
        self.calls = []
        self.wrong_count = wrong_count

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        raise AssertionError("__getitems__ must be used")

    def __getitems__(self, indices):
        self.calls.append(list(indices))
        assert type(indices) is list
        assert all(type(i) is int for i in indices)
        out = (i * 10 for i in indices)  # any iterable
        if self.wrong_count:
            return list(out)[:-1]
        return out


@pytest.mark.parametrize("workers", [0, 2])
def test_getitems_fetches_the_whole_batch(workers):
    ds = WithGetitems(5)
    loader = PyDataloader(ds, batch_size=2, num_workers=workers)
    assert list(loader) == [[0, 10], [20, 30], [40]]
    assert sorted(ds.calls) == [[0, 1], [2, 3], [4]]


def test_getitems_gets_the_sampler_order():
    ds = WithGetitems(10)
    assert list(PyDataloader(ds, batch_size=3, sampler=[9, 2, 2, 5])) == [[90, 20, 20], [50]]
    assert ds.calls == [[9, 2, 2], [5]]


def test_getitems_with_the_wrong_number_of_samples_raises_value_error():
    loader = PyDataloader(WithGetitems(4, wrong_count=True), batch_size=2)
    it = iter(loader)
    with pytest.raises(ValueError, match="got 2 indices and returned 1 samples"):
        next(it)


def test_getitems_set_to_none_is_off():
    class Off(WithGetitems):
        __getitems__ = None

        def __getitem__(self, i):
            return -i

    assert list(PyDataloader(Off(3), batch_size=3)) == [[0, -1, -2]]


def test_getitems_is_not_used_with_item_concurrency():
    class Both(WithGetitems):
        def __getitem__(self, i):
            return i

    ds = Both(4)
    assert list(PyDataloader(ds, batch_size=4, item_concurrency=2)) == [[0, 1, 2, 3]]
    assert ds.calls == []


@pytest.mark.parametrize(("workers", "k"), [(0, 1), (2, 1), (0, 3), (2, 3)])
def test_transform_gets_index_and_sample_on_the_fetching_thread(workers, k):
    # (index, thread) of every call: index 3 comes twice, maybe on two threads at once.
    fetched = []
    transformed = []

    def get(i):
        fetched.append((i, threading.get_ident()))
        return f"s{i}"

    def transform(index, sample):
        transformed.append((index, threading.get_ident()))
        return (index, sample)

    loader = PyDataloader(
        Range(6, fn=get),
        batch_size=4,
        sampler=[5, 0, 3, 3, 1],
        transform=transform,
        num_workers=workers,
        item_concurrency=k,
    )
    assert list(loader) == [[(5, "s5"), (0, "s0"), (3, "s3"), (3, "s3")], [(1, "s1")]]
    assert sorted(transformed) == sorted(fetched)
    if workers == 0 and k == 1:
        assert {t for _, t in fetched} == {threading.get_ident()}


def test_transform_with_getitems():
    ds = WithGetitems(3)
    loader = PyDataloader(ds, batch_size=3, transform=lambda i, x: (i, x))
    assert list(loader) == [[(0, 0), (1, 10), (2, 20)]]


def test_a_one_argument_transform_is_wrapped():
    class Compose:
        def __call__(self, x):
            return x + 100

    assert list(PyDataloader(Range(2), batch_size=2, transform=Compose())) == [[100, 101]]
    assert list(PyDataloader(Range(2), batch_size=2, transform=lambda x: -x)) == [[0, -1]]
    assert list(PyDataloader(Range(2), batch_size=2, transform=lambda i, x, scale=2: x * scale)) == [[0, 2]]


def test_a_shuffled_transform_sees_the_drawn_index():
    seen = []
    loader = PyDataloader(
        Range(20), batch_size=5, shuffle=True, seed=1, transform=lambda i, x: seen.append((i, x)) or x
    )
    flat = [x for b in loader for x in b]
    assert sorted(flat) == list(range(20))
    assert seen == [(x, x) for x in flat]


@pytest.mark.parametrize("workers", [0, 2])
def test_return_indices(workers):
    loader = PyDataloader(
        Range(10, fn=lambda i: i * i),
        batch_size=4,
        sampler=[7, 1, 8, 2, 0],
        return_indices=True,
        num_workers=workers,
        collate_fn=np.array,
    )
    out = list(loader)
    assert [type(b) for b in out] == [tuple, tuple]
    (b0, i0), (_, i1) = out
    assert i0 == [7, 1, 8, 2]
    assert i1 == [0]
    assert all(type(i) is int for i in i0)
    np.testing.assert_array_equal(b0, [49, 1, 64, 4])


def test_return_indices_with_shuffle_matches_items():
    loader = PyDataloader(Range(50), batch_size=8, shuffle=True, seed=5, return_indices=True, num_workers=2)
    for batch, indices in loader:
        assert batch == indices
