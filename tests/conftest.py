"""Shared helpers of the pytest suite."""

from __future__ import annotations

import threading

import pytest

from dataloader_rs import PyDataset

from servers.fixtures import *  # noqa: F403  (fixtures use each other: import them all)


class Range(PyDataset[int]):
    """Item i is i (or f(i)); records the threads that fetched items."""

    def __init__(self, n: int, fn=None) -> None:
        super().__init__()
        self.n = n
        self.fn = fn
        self.threads: set[int] = set()
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        with self.lock:
            self.threads.add(threading.get_ident())
        if self.fn is not None:
            return self.fn(index)
        return index


@pytest.fixture
def no_thread_leak():
    """Fails a test that leaves Python threads running (worker threads are Rust threads and are
    counted through /proc instead)."""
    before = set(threading.enumerate())
    yield
    extra = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not extra, extra
