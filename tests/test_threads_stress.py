"""Stress: many threads creating, iterating and dropping loaders; one iterator misused from two
threads; drops while batches are in flight. On free-threaded CPython these run without a GIL."""

from __future__ import annotations

import random
import sys
import threading

import pytest

from dataloader_rs import PyDataloader

from conftest import Range, run_threads


def test_the_gil_stays_off_on_free_threaded_python():
    if not hasattr(sys, "_is_gil_enabled"):
        pytest.skip("not CPython 3.13+")
    import sysconfig

    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        pytest.skip("a GIL build")
    loader = PyDataloader(Range(100), batch_size=10, num_workers=2, item_concurrency=2)
    assert sum(len(b) for b in loader) == 100
    assert sys._is_gil_enabled() is False


@pytest.mark.timeout(300)
def test_many_threads_create_iterate_and_drop_loaders():
    errors: list[BaseException] = []
    seen: list[list[int]] = []
    lock = threading.Lock()

    def run(seed: int) -> None:
        rnd = random.Random(seed)
        try:
            for _ in range(15):
                n = rnd.randrange(0, 200)
                loader = PyDataloader(
                    Range(n),
                    batch_size=rnd.randrange(1, 17),
                    shuffle=True,
                    seed=seed,
                    num_workers=rnd.randrange(0, 4),
                    prefetch_depth=rnd.randrange(1, 4),
                    item_concurrency=rnd.randrange(1, 4),
                )
                if rnd.random() < 0.3:
                    # Drop mid-epoch, with batches in flight.
                    it = iter(loader)
                    for _ in range(rnd.randrange(0, 3)):
                        next(it, None)
                    del it
                    continue
                got = sorted(x for b in loader for x in b)
                with lock:
                    seen.append(got)
                assert got == list(range(n)), (seed, n)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = run_threads(run, [(s,) for s in range(12)], join_timeout=240)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert errors == []
    assert seen, "some epochs ran to the end"


@pytest.mark.timeout(120)
def test_one_iterator_hammered_by_many_threads_loses_and_duplicates_nothing():
    n = 5000
    it = iter(PyDataloader(Range(n), batch_size=7, num_workers=2))
    got: list[int] = []
    refused = 0
    messages: set[str] = set()
    lock = threading.Lock()
    done = threading.Event()

    def pull() -> None:
        nonlocal refused
        while not done.is_set():
            try:
                batch = next(it)
            except StopIteration:
                done.set()
                return
            except RuntimeError as e:
                with lock:
                    refused += 1
                    messages.add(str(e))
                continue
            with lock:
                got.extend(batch)

    threads = [threading.Thread(target=pull) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(100)
    assert not any(t.is_alive() for t in threads)
    assert sorted(got) == list(range(n))
    assert all("being advanced by another thread" in m for m in messages), messages


@pytest.mark.timeout(120)
def test_loaders_dropped_while_workers_are_busy():
    gate = threading.Event()

    def slow(i: int) -> int:
        gate.wait(0.01)
        return i

    for _ in range(30):
        loader = PyDataloader(Range(1000, fn=slow), batch_size=4, num_workers=3, item_concurrency=2)
        it = iter(loader)
        next(it)
        del it, loader
    gate.set()
    # Everything still works afterwards.
    assert sum(len(b) for b in PyDataloader(Range(50), batch_size=5, num_workers=2)) == 50
