"""max_failures for every kind of dataset (Python, Rust, async), and a record per epoch: what an
abandoned epoch's workers skip later never lands in the next epoch's record."""

from __future__ import annotations

import threading

import pytest

from dataloader_rs import FileDataset, HttpDataset, PyAsyncDataset, PyDataloader, PyDataset, TooManyFailures

from conftest import wait_until
from servers.http import item_body

pytestmark = pytest.mark.timeout(60)


def flat(batches):
    return [x for b in batches for x in b]


@pytest.mark.parametrize(("workers", "k"), [(0, 1), (2, 1), (2, 3)])
def test_a_rust_dataset_skips_failed_requests(http_server, workers, k):
    urls = [http_server.item_url(i) for i in range(12)]
    urls[3] = urls[8] = http_server.url("/status/404")
    loader = PyDataloader(HttpDataset(urls), batch_size=4, max_failures=2, num_workers=workers, item_concurrency=k)
    batches = list(loader)
    assert flat(batches) == [item_body(i) for i in range(12) if i not in (3, 8)]
    assert [len(b) for b in batches] == [3, 4, 3]
    assert sorted((f.index, f.type) for f in loader.failures) == [(3, "OSError"), (8, "OSError")]
    assert all("404" in f.message for f in loader.failures)
    assert loader.stats()["items_delivered"] == 10


def test_a_rust_dataset_over_the_limit_raises_with_the_record(tmp_path):
    paths = [str(tmp_path / f"{i}") for i in range(6)]
    for p in paths[:3]:
        open(p, "wb").close()  # 3, 4 and 5 are missing
    it = iter(PyDataloader(FileDataset(paths), batch_size=6, max_failures=2))
    with pytest.raises(TooManyFailures) as info:
        next(it)
    assert sorted(f.index for f in info.value.failures) == [3, 4, 5]
    assert {f.type for f in info.value.failures} == {"FileNotFoundError"}


class AsyncFlaky(PyAsyncDataset[int]):
    def __init__(self, n: int, bad: set[int]) -> None:
        super().__init__()
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    async def __getitem__(self, index: int) -> int:
        if index in self.bad:
            raise ValueError(f"bad sample {index}")
        return index

    async def __getitems__(self, indices: list[int]) -> list[int]:
        return [await self.__getitem__(i) for i in indices]


@pytest.mark.parametrize(("workers", "k"), [(0, 1), (2, 1), (2, 3)])
def test_an_async_dataset_skips_failed_items(workers, k):
    loader = PyDataloader(
        AsyncFlaky(20, {3, 11}), batch_size=4, max_failures=2, num_workers=workers, item_concurrency=k
    )
    batches = list(loader)
    assert flat(batches) == [i for i in range(20) if i not in (3, 11)]
    assert sorted((f.index, f.type, f.message) for f in loader.failures) == [
        (3, "ValueError", "bad sample 3"),
        (11, "ValueError", "bad sample 11"),
    ]


def test_an_async_dataset_over_the_limit_raises():
    it = iter(PyDataloader(AsyncFlaky(8, {1, 2}), batch_size=4, max_failures=1, item_concurrency=2))
    with pytest.raises(TooManyFailures):
        next(it)


class FailsOnceLate(PyDataset):
    """Item `slow` blocks until released, then fails, the first time only."""

    def __init__(self, n: int, slow: int) -> None:
        super().__init__()
        self.n, self.slow = n, slow
        self.inside = threading.Event()
        self.release = threading.Event()
        self.done = threading.Event()
        self.calls = 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.slow:
            self.calls += 1
            if self.calls == 1:
                self.inside.set()
                try:
                    assert self.release.wait(20)
                    raise ValueError("late failure")
                finally:
                    self.done.set()
        return i


@pytest.mark.parametrize("keep_old_iterator", [False, True])
def test_an_abandoned_epoch_never_adds_to_the_next_epochs_record(keep_old_iterator):
    ds = FailsOnceLate(8, slow=3)
    loader = PyDataloader(ds, batch_size=1, num_workers=2, max_failures=5)
    old = iter(loader)
    assert next(old) == [0]
    assert ds.inside.wait(20)  # a worker is inside item 3 of the first epoch
    if not keep_old_iterator:
        del old  # the break: the first epoch is abandoned
    new = iter(loader)
    assert next(new) == [0]
    ds.release.set()  # the first epoch's item 3 fails now, during the second epoch
    assert ds.done.wait(20)
    assert wait_until(lambda: True, 0.2)
    assert flat(new) == [1, 2, 3, 4, 5, 6, 7]
    assert loader.failures == []
