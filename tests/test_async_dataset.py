"""PyAsyncDataset: coroutines on the loader's own event loop, items in flight, cancellation,
exceptions, aclose(), and the construction-time checks."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
import threading
import time

import pytest

from dataloader_rs import PyAsyncDataset, PyDataloader, _aio

from conftest import Stalls, ctrl_c_after, in_forked_child, wait_until

pytestmark = pytest.mark.timeout(60)


def _loop_threads(dataset_class: str) -> list[threading.Thread]:
    """The live event-loop threads of loaders over datasets of that class."""
    return [t for t in threading.enumerate() if t.name == f"dataloader-rs event loop ({dataset_class})"]


class Squares(PyAsyncDataset[int]):
    """Item i is i*i after a random short sleep; records concurrency and the running threads."""

    def __init__(self, n: int, sleep: float = 0.005) -> None:
        super().__init__()
        self.n = n
        self.sleep = sleep
        self.now = 0
        self.peak = 0
        self.loops: set[int] = set()
        self.threads: set[int] = set()
        self.closed = 0

    def __len__(self) -> int:
        return self.n

    async def __getitem__(self, index: int) -> int:
        self.loops.add(id(asyncio.get_running_loop()))
        self.threads.add(threading.get_ident())
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(random.random() * self.sleep)
        finally:
            self.now -= 1
        return index * index

    async def aclose(self) -> None:
        self.closed += 1


def test_batches_come_in_order_from_one_loop_thread(no_thread_leak):
    ds = Squares(100)
    loader = PyDataloader(ds, batch_size=10, num_workers=3, item_concurrency=4)
    for _ in range(2):
        assert list(loader) == [[i * i for i in range(b, b + 10)] for b in range(0, 100, 10)]
    assert len(ds.loops) == 1
    assert len(ds.threads) == 1
    assert threading.get_ident() not in ds.threads
    del loader
    assert ds.closed == 1


def test_without_workers_and_with_shuffle(no_thread_leak):
    ds = Squares(30)
    got = []
    for batch, indices in PyDataloader(ds, batch_size=7, shuffle=True, seed=1, return_indices=True):
        assert batch == [i * i for i in indices]
        got += indices
    assert sorted(got) == list(range(30))
    assert ds.closed == 1  # the loader and its iterator are gone


class Crowd(Squares):
    """The first items wait until `crowd` items are in flight at once (20 s at most)."""

    def __init__(self, n: int, crowd: int) -> None:
        super().__init__(n, sleep=0)
        self.crowd = crowd
        self.reached: asyncio.Event | None = None

    async def __getitem__(self, index: int) -> int:
        if self.reached is None:
            self.reached = asyncio.Event()
        if self.now + 1 >= self.crowd:
            self.reached.set()
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.reached.wait(), 20)
        finally:
            self.now -= 1
        return index * index


def test_items_in_flight_are_num_workers_times_item_concurrency():
    ds = Crowd(96, crowd=8)
    assert sum(len(b) for b in PyDataloader(ds, batch_size=16, num_workers=2, item_concurrency=4)) == 96
    assert ds.peak == 8


def test_one_batch_may_use_the_loaders_whole_budget_earliest_first():
    # num_workers x item_concurrency = 8 slots shared by the batches in flight: an epoch of one
    # batch of 8 fetches all 8 at once, not item_concurrency's 4.
    ds = Crowd(8, crowd=8)
    loader = PyDataloader(ds, batch_size=8, num_workers=2, item_concurrency=4, timeout=15)
    assert [x for b in loader for x in b] == [i * i for i in range(8)]
    assert ds.peak == 8


class Gathered(PyAsyncDataset[int]):
    """Every item waits at a barrier of `parties`: a batch passes only when that many items of
    it are in flight at once."""

    def __init__(self, n: int, parties: int) -> None:
        super().__init__()
        self.n = n
        self.parties = parties
        self.barrier: asyncio.Barrier | None = None

    def __len__(self) -> int:
        return self.n

    async def __getitem__(self, index: int) -> int:
        if self.barrier is None:
            self.barrier = asyncio.Barrier(self.parties)
        await asyncio.wait_for(self.barrier.wait(), 20)
        return index


def test_item_concurrency_items_of_a_batch_are_in_flight_at_once():
    ds = Gathered(24, parties=8)
    assert list(PyDataloader(ds, batch_size=8, num_workers=1, item_concurrency=8)) == [
        list(range(b, b + 8)) for b in range(0, 24, 8)
    ]
    # Two batches of 4: 8 items of two batches in flight together.
    ds = Gathered(16, parties=8)
    assert sum(len(b) for b in PyDataloader(ds, batch_size=4, num_workers=2, item_concurrency=4)) == 16


class Batched(Squares):
    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.calls: list[list[int]] = []

    async def __getitems__(self, indices: list[int]) -> list[int]:
        self.calls.append(indices)
        await asyncio.sleep(0)
        return [-i for i in indices]


def test_getitems_is_used_with_item_concurrency_1_only():
    ds = Batched(10)
    assert list(PyDataloader(ds, batch_size=4, num_workers=2)) == [[0, -1, -2, -3], [-4, -5, -6, -7], [-8, -9]]
    assert sorted(ds.calls) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    ds = Batched(10)
    assert list(PyDataloader(ds, batch_size=5, item_concurrency=2)) == [
        [0, 1, 4, 9, 16],
        [25, 36, 49, 64, 81],
    ]
    assert ds.calls == []


def test_getitems_returning_the_wrong_count_is_a_value_error():
    class Short(Batched):
        async def __getitems__(self, indices: list[int]) -> list[int]:
            return indices[1:]

    it = iter(PyDataloader(Short(4), batch_size=2))
    with pytest.raises(ValueError, match="one sample per index: it got 2 indices and returned 1"):
        next(it)


def test_dropping_an_iterator_cancels_the_coroutines_in_flight(no_thread_leak):
    ds = Stalls(16, stall_from=4)
    loader = PyDataloader(ds, batch_size=4, num_workers=2, item_concurrency=4)
    it = iter(loader)
    assert next(it) == [0, 1, 2, 3]
    assert wait_until(lambda: len(ds.started) == 8)
    start = time.monotonic()
    del it
    assert time.monotonic() - start < 5
    assert wait_until(lambda: ds.cancelled == set(range(4, 12)))
    # The loader goes on with a new epoch.
    it = iter(loader)
    assert next(it) == [0, 1, 2, 3]
    del it, loader


def test_breaking_out_of_a_loop_cancels_too():
    ds = Stalls(8, stall_from=2)
    loader = PyDataloader(ds, batch_size=2, num_workers=1, item_concurrency=2)
    for batch in loader:
        assert batch == [0, 1]
        break
    assert wait_until(lambda: ds.cancelled == {2, 3})


class Failing(PyAsyncDataset[int]):
    def __init__(self, error: BaseException, bad: int) -> None:
        super().__init__()
        self.error = error
        self.bad = bad

    def __len__(self) -> int:
        return 9

    async def __getitem__(self, index: int) -> int:
        await asyncio.sleep(0)
        if index == self.bad:
            raise self.error
        return index


@pytest.mark.parametrize(("num_workers", "item_concurrency"), [(0, 1), (2, 3), (1, 3)])
def test_exceptions_keep_type_and_identity_and_the_next_batch_continues(num_workers, item_concurrency):
    error = KeyError("label 4")
    it = iter(PyDataloader(Failing(error, 4), batch_size=3, num_workers=num_workers, item_concurrency=item_concurrency))
    assert next(it) == [0, 1, 2]
    with pytest.raises(KeyError) as excinfo:
        next(it)
    assert excinfo.value is error
    assert excinfo.value.__traceback__ is not None
    assert next(it) == [6, 7, 8]
    assert list(it) == []
    del it, excinfo
    gc.collect()  # the error's traceback holds the iterator in a cycle
    assert _loop_threads("Failing") == []


def test_a_transform_runs_on_the_pool_as_items_arrive():
    ds = Squares(24)
    threads = set()
    lock = threading.Lock()

    def transform(index, sample):
        with lock:
            threads.add(threading.get_ident())
        assert sample == index * index
        return (index, sample)

    loader = PyDataloader(ds, batch_size=6, num_workers=2, item_concurrency=3, transform=transform, collate_fn=dict)
    assert list(loader) == [{i: i * i for i in range(b, b + 6)} for b in range(0, 24, 6)]
    assert threading.get_ident() not in threads
    assert not threads & ds.threads  # not on the event loop either
    boom = ZeroDivisionError("transform")

    def failing(index, sample):
        if index == 1:
            raise boom
        return sample

    it = iter(PyDataloader(Squares(4), batch_size=2, transform=failing))
    with pytest.raises(ZeroDivisionError) as excinfo:
        next(it)
    assert excinfo.value is boom
    assert next(it) == [4, 9]


def test_runtime_threads_is_accepted_and_checked():
    assert list(PyDataloader(Squares(3), batch_size=3, runtime_threads=1)) == [[0, 1, 4]]
    with pytest.raises(ValueError, match="runtime_threads"):
        PyDataloader(Squares(3), runtime_threads=0)


# --------------------------------------------------------------------------- aclose


def test_aclose_is_awaited_once_on_the_loop_when_the_loader_is_dropped(no_thread_leak):
    class Session(Squares):
        async def aclose(self) -> None:
            self.closed += 1
            self.close_loop = id(asyncio.get_running_loop())
            await asyncio.sleep(0.01)

    ds = Session(8)
    loader = PyDataloader(ds, batch_size=4, num_workers=2)
    list(loader)
    list(loader)
    it = iter(loader)
    assert ds.closed == 0
    del loader
    gc.collect()
    assert ds.closed == 0  # the iterator still needs the loop
    assert next(it) == [0, 1, 4, 9]
    del it
    assert ds.closed == 1
    assert ds.close_loop in ds.loops
    assert _loop_threads("Session") == []


def test_a_loader_that_never_ran_closes_too(no_thread_leak):
    ds = Squares(3)
    loader = PyDataloader(ds)
    del loader
    assert ds.closed == 1


def _logged_on_close(ds: Squares, caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """Runs an epoch of ``ds``, drops the loader; the errors dataloader_rs logged meanwhile."""
    loader = PyDataloader(ds, batch_size=2)
    list(loader)
    with caplog.at_level(logging.ERROR, logger="dataloader_rs"):
        del loader
    return [r for r in caplog.records if r.name == "dataloader_rs"]


def test_an_aclose_error_is_logged_and_the_loop_stops(caplog, no_thread_leak):
    class Broken(Squares):
        async def aclose(self) -> None:
            self.closed += 1
            raise ConnectionError("session already gone")

    ds = Broken(4)
    records = _logged_on_close(ds, caplog)
    assert ds.closed == 1
    [record] = records
    assert "Broken.aclose() raised" in record.getMessage()
    assert isinstance(record.exc_info[1], ConnectionError)
    assert _loop_threads("Broken") == []


def test_an_aclose_running_too_long_is_logged_and_abandoned(caplog, monkeypatch, no_thread_leak):
    monkeypatch.setattr(_aio, "ACLOSE_TIMEOUT", 0.2)

    class Slow(Squares):
        async def aclose(self) -> None:
            self.closed += 1
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.abandoned = True
                raise

    ds = Slow(4)
    records = _logged_on_close(ds, caplog)
    assert ds.closed == 1
    assert ds.abandoned
    messages = [r.getMessage() for r in records]
    assert messages == ["Slow.aclose() was still running after 0.2 s; it is abandoned and the event loop stops"]
    assert _loop_threads("Slow") == []


def test_an_iterator_of_a_dropped_loader_keeps_working():
    ds = Squares(6)
    batches = [b for b in PyDataloader(ds, batch_size=2, num_workers=2)]
    assert batches == [[0, 1], [4, 9], [16, 25]]
    assert ds.closed == 1


# --------------------------------------------------------------------------- checks


class _NoLen(PyAsyncDataset[int]):
    async def __getitem__(self, index: int) -> int:
        return index


class _PlainGetitem(PyAsyncDataset[int]):
    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> int:  # type: ignore[override]
        return index


class _PlainGetitems(Squares):
    def __getitems__(self, indices: list[int]) -> list[int]:  # type: ignore[override]
        return indices


class _PlainAclose(Squares):
    def aclose(self) -> None:  # type: ignore[override]
        pass


class _AsyncLen(Squares):
    async def __len__(self) -> int:  # type: ignore[override]
        return 1


@pytest.mark.parametrize(
    ("cls", "match"),
    [
        (_NoLen, "_NoLen must define __len__"),
        (_PlainGetitem, r"_PlainGetitem.__getitem__ must be async def"),
        (_PlainGetitems, r"_PlainGetitems.__getitems__ must be async def"),
        (_PlainAclose, r"_PlainAclose.aclose must be async def"),
        (_AsyncLen, r"_AsyncLen.__len__ must be a plain method"),
    ],
)
def test_construction_time_type_errors(cls, match, no_thread_leak):
    ds = cls.__new__(cls)
    with pytest.raises(TypeError, match=match):
        PyDataloader(ds)


def test_getitems_none_turns_it_off():
    class Off(Batched):
        __getitems__ = None  # type: ignore[assignment]

    ds = Off(4)
    assert list(PyDataloader(ds, batch_size=4)) == [[0, 1, 4, 9]]


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_a_forked_child_gets_an_event_loop_of_its_own():
    ds = Squares(8)
    loader = PyDataloader(ds, batch_size=4, num_workers=2, item_concurrency=2)
    expected = [[0, 1, 4, 9], [16, 25, 36, 49]]
    assert list(loader) == expected
    assert in_forked_child(lambda: list(loader)) == expected
    assert list(loader) == expected


def test_a_loader_that_fails_to_build_leaves_no_thread(no_thread_leak):
    ds = Squares(3)
    with pytest.raises(ValueError, match=r"threads|item_concurrency"):
        PyDataloader(ds, num_workers=1 << 20, item_concurrency=1 << 20, transform=lambda i, x: x)
    assert ds.closed == 1


def test_items_are_transformed_as_they_arrive():
    transformed_first = threading.Event()

    class Waits(PyAsyncDataset[int]):
        def __len__(self) -> int:
            return 2

        async def __getitem__(self, index: int) -> int:
            if index == 1:  # arrives only once item 0 was transformed
                for _ in range(1000):
                    if transformed_first.is_set():
                        return 1
                    await asyncio.sleep(0.01)
                raise TimeoutError("item 0 was not transformed while item 1 was in flight")
            return 0

    def transform(index, sample):
        if index == 0:
            transformed_first.set()
        return sample

    assert list(PyDataloader(Waits(), batch_size=2, item_concurrency=2, transform=transform)) == [[0, 1]]


def test_ctrl_c_interrupts_a_stalled_coroutine(sigint_raises):
    ds = Stalls(4, stall_from=2)
    it = iter(PyDataloader(ds, batch_size=2, num_workers=0, item_concurrency=2))
    assert next(it) == [0, 1]
    with ctrl_c_after(0.3):
        next(it)
    assert ds.cancelled == set()  # the batch goes on; dropping the iterator cancels it
    del it
    assert wait_until(lambda: ds.cancelled == {2, 3})


def test_slots_go_to_the_earliest_batch_first_and_skip_cancelled_waiters():
    from dataloader_rs._aio import Slots

    async def run() -> list[tuple[int, int, int]]:
        slots = Slots(1)
        order: list[tuple[int, int, int]] = []
        await slots.acquire((0, 0, 0))  # the one slot, taken

        async def item(key: tuple[int, int, int]) -> None:
            await slots.acquire(key)
            order.append(key)
            slots.release()

        later = [asyncio.ensure_future(item((0, 2, p))) for p in range(2)]
        await asyncio.sleep(0)
        cancelled = asyncio.ensure_future(item((0, 0, 5)))
        earlier = asyncio.ensure_future(item((0, 1, 0)))
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.sleep(0)
        slots.release()
        await asyncio.gather(earlier, *later)
        assert slots.free == 1
        return order

    # Batch 1 came after batch 2's items but is served first; the cancelled waiter never is.
    assert asyncio.run(run()) == [(0, 1, 0), (0, 2, 0), (0, 2, 1)]
