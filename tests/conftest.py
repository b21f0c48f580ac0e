"""Shared helpers of the pytest suite."""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import faulthandler
import gc
import os
import pickle
import signal
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from dataloader_rs import PyAsyncDataset, PyDataset

from servers.fixtures import *  # noqa: F403  (fixtures use each other: import them all)


class Range(PyDataset[int]):
    """Item i is i (or f(i)); records the threads that fetched items."""

    def __init__(self, n: int, fn=None) -> None:
        super().__init__()
        self.n = n
        self.fn = fn
        self.threads: set[int] = set()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        # No lock of our own: `set.add` is atomic on both builds, and a lock held by a worker
        # when a test forks would stay held in the child forever.
        self.threads.add(threading.get_ident())
        if self.fn is not None:
            return self.fn(index)
        return index


class Flaky(PyDataset):
    """Items are their index, but those in ``bad`` raise ValueError."""

    def __init__(self, n, bad):
        super().__init__()
        self.n, self.bad = n, set(bad)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i in self.bad:
            raise ValueError(f"bad sample {i}")
        return i


class Stalls(PyAsyncDataset[int]):
    """Items from `stall_from` on never finish; records the ones cancelled."""

    def __init__(self, n: int, stall_from: int) -> None:
        super().__init__()
        self.n = n
        self.stall_from = stall_from
        self.started: set[int] = set()
        self.cancelled: set[int] = set()

    def __len__(self) -> int:
        return self.n

    async def __getitem__(self, index: int) -> int:
        if index < self.stall_from:
            return index
        self.started.add(index)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled.add(index)
            raise
        return index


@pytest.fixture
def no_thread_leak():
    """Fails a test that leaves Python threads running (worker threads are Rust threads and are
    counted through /proc instead)."""
    before = set(threading.enumerate())
    yield
    extra = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not extra, extra


@pytest.fixture
def sigint_raises():
    """Ctrl-C raises KeyboardInterrupt here, also when the test runner started with SIGINT
    ignored (a background job of a non-interactive shell, some CI runners): Python then installs
    no handler, and `_thread.interrupt_main` does nothing. A child started meanwhile gets the
    default action back at exec (handled signals are reset), so its Python installs its own."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def ctrl_c_after(seconds: float) -> Iterator[None]:
    """Asserts that the block is ended by the Ctrl-C sent to the main thread after ``seconds``
    (use with the ``sigint_raises`` fixture)."""
    timer = threading.Timer(seconds, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            yield
    finally:
        timer.cancel()


def run_threads(target: Callable[..., object], args: Iterable[tuple], join_timeout: float) -> list[threading.Thread]:
    """Runs ``target(*a)`` on a thread for each ``a`` in ``args``, all at once; joins each for at
    most ``join_timeout`` seconds and returns the threads (to check none hangs)."""
    threads = [threading.Thread(target=target, args=a) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_timeout)
    return threads


def write_files(directory: Path, blobs: Iterable[bytes], suffix: str) -> list[str]:
    """Writes each blob to ``directory/<i><suffix>``; the paths, in order."""
    paths = []
    for i, data in enumerate(blobs):
        p = directory / f"{i}{suffix}"
        p.write_bytes(data)
        paths.append(str(p))
    return paths


def kill_at_end(proc: subprocess.Popen) -> None:
    """Kills `proc` if it still runs (a test that failed or timed out must not leave it behind
    for the next test to be blamed for) and reaps it."""
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


def wait_until(predicate, timeout: float = 10.0) -> bool:
    """Polls ``predicate`` until it holds or ``timeout`` seconds passed; what it last returned."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def in_forked_child(fn):
    """Runs ``fn`` in a forked child (killed after 20 s) and returns what it returned."""
    r, w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded process forked"
        pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            # pytest-timeout's SIGALRM handler is inherited and needs the interpreter: a child
            # stuck outside it would never end. The default action kills it; before that, a
            # watchdog thread prints where every thread is.
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            faulthandler.dump_traceback_later(18, exit=False)
            # No collection of garbage the parent left: its finalizers could wait on locks
            # that threads of the parent held at the fork, and those threads are gone.
            gc.disable()
            signal.alarm(20)
            os.write(w, pickle.dumps(fn()))
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return pickle.loads(data)
