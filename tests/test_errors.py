"""Errors: user exceptions keep their identity, and the next batch follows."""

from __future__ import annotations

import traceback

import pytest

from dataloader_rs import PyDataloader, PyDataset

from conftest import Range


class CustomError(Exception):
    pass


class Failing(PyDataset):
    def __init__(self, n, bad):
        super().__init__()
        self.n = n
        self.bad = bad
        self.raised = []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i in self.bad:
            e = CustomError(f"item {i} is bad")
            self.raised.append(e)
            raise e
        return i


CONFIGS = [(0, 1), (2, 1), (0, 3), (2, 3)]


@pytest.mark.parametrize(("workers", "k"), CONFIGS)
def test_the_same_exception_object_reaches_the_caller_and_the_next_batch_follows(workers, k):
    ds = Failing(9, bad={4})
    it = iter(PyDataloader(ds, batch_size=3, num_workers=workers, item_concurrency=k))
    assert next(it) == [0, 1, 2]
    with pytest.raises(CustomError, match="item 4 is bad") as info:
        next(it)
    assert info.value is ds.raised[0]
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "__getitem__" in frames
    assert next(it) == [6, 7, 8]
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.parametrize("workers", [0, 2])
def test_key_error_stays_a_key_error(workers):
    table = {0: "a", 1: "b"}
    loader = PyDataloader(Range(3, fn=lambda i: table[i]), batch_size=1, num_workers=workers)
    it = iter(loader)
    assert next(it) == ["a"]
    assert next(it) == ["b"]
    with pytest.raises(KeyError) as info:
        next(it)
    assert info.value.args == (2,)


@pytest.mark.parametrize("workers", [0, 2])
def test_transform_and_collate_errors_keep_their_type(workers):
    def transform(i, x):
        if i == 1:
            raise ZeroDivisionError("transform of 1")
        return x

    it = iter(PyDataloader(Range(4), batch_size=2, transform=transform, num_workers=workers))
    with pytest.raises(ZeroDivisionError, match="transform of 1"):
        next(it)
    assert next(it) == [2, 3]

    def collate(samples):
        if samples[0] == 0:
            raise LookupError("collate of the first batch")
        return tuple(samples)

    it = iter(PyDataloader(Range(4), batch_size=2, collate_fn=collate, num_workers=workers))
    with pytest.raises(LookupError, match="collate of the first batch"):
        next(it)
    assert next(it) == (2, 3)


def test_getitems_errors_keep_their_type():
    class G(Range):
        def __getitems__(self, indices):
            raise PermissionError(f"no access to {indices}")

    it = iter(PyDataloader(G(4), batch_size=2, num_workers=1))
    with pytest.raises(PermissionError, match=r"no access to \[0, 1\]"):
        next(it)
    with pytest.raises(PermissionError, match=r"no access to \[2, 3\]"):
        next(it)


def test_a_getitem_returning_a_coroutine_raises_type_error():
    class Forgot(Range):
        def __getitem__(self, i):
            async def fetch():
                return i

            return fetch()

    it = iter(PyDataloader(Forgot(2), batch_size=1))
    with pytest.raises(TypeError, match="__getitem__ returned a coroutine"):
        next(it)


def test_every_item_error_in_a_batch_reports_the_first():
    ds = Failing(6, bad={1, 2})
    it = iter(PyDataloader(ds, batch_size=3))
    with pytest.raises(CustomError, match="item 1 is bad"):
        next(it)
