"""Workers, threads and the GIL: order, concurrency, break, Ctrl-C, one thread per iterator, fork."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
import weakref

import pytest

from dataloader_rs import PyDataloader, PyDataset
from dataloader_rs._native import parked_workers

from conftest import Range, ctrl_c_after, in_forked_child, run_threads, wait_until


class Blocking(PyDataset):
    """Items in `blocked` wait for `release`; records which items started."""

    def __init__(self, n, blocked=()):
        super().__init__()
        self.n = n
        self.blocked = set(blocked)
        self.release = threading.Event()
        self.started = []
        self.lock = threading.Lock()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        with self.lock:
            self.started.append(i)
        if i in self.blocked:
            assert self.release.wait(30), "never released"
        return i


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_batches_come_in_order_under_random_delays(workers):
    import random

    rnd = random.Random(workers)
    delays = [rnd.random() * 0.002 for _ in range(200)]

    def get(i):
        time.sleep(delays[i])
        return i

    loader = PyDataloader(Range(200, fn=get), batch_size=7, num_workers=workers, prefetch_depth=1)
    assert [x for b in loader for x in b] == list(range(200))


def test_workers_load_batches_in_parallel():
    # Two batches can only finish if two workers wait at the barrier at the same time.
    barrier = threading.Barrier(2, timeout=20)

    def get(i):
        if i % 4 == 0:
            barrier.wait()
        return i

    loader = PyDataloader(Range(8, fn=get), batch_size=4, num_workers=2)
    assert list(loader) == [[0, 1, 2, 3], [4, 5, 6, 7]]


@pytest.mark.parametrize(("workers", "k"), [(0, 4), (2, 4), (1, 3)])
def test_item_concurrency_fetches_items_of_a_batch_at_once(workers, k):
    barrier = threading.Barrier(k * max(workers, 1), timeout=20)
    seen = set()

    def get(i):
        seen.add(threading.get_ident())
        barrier.wait()
        return i

    n = k * max(workers, 1)
    loader = PyDataloader(Range(n, fn=get), batch_size=k, num_workers=workers, item_concurrency=k)
    assert [x for b in loader for x in b] == list(range(n))
    assert len(seen) == n


def test_in_flight_batches_are_bounded():
    ds = Blocking(100, blocked={0})
    it = iter(PyDataloader(ds, batch_size=1, num_workers=2, prefetch_depth=3))
    deadline = time.monotonic() + 10
    while len(ds.started) < 5 and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)
    # num_workers + prefetch_depth = 5 batches in progress or waiting, never more.
    assert sorted(ds.started) == [0, 1, 2, 3, 4]
    ds.release.set()
    assert [b[0] for b in it] == list(range(100))


def test_break_abandons_the_epoch_and_the_next_epoch_does_not_wait_for_it():
    ds = Blocking(12, blocked={4, 5, 6, 7, 8, 9, 10, 11})
    loader = PyDataloader(ds, batch_size=4, num_workers=2, prefetch_depth=1)
    for batch in loader:
        assert batch == [0, 1, 2, 3]
        break
    # Workers are stuck on blocked items of the abandoned epoch; the next epoch gets threads of
    # its own. Items now answer at once.
    ds.blocked = set()
    it = iter(loader)
    assert next(it) == [0, 1, 2, 3]
    ds.release.set()
    assert list(it) == [[4, 5, 6, 7], [8, 9, 10, 11]]


def test_a_second_thread_calling_next_gets_runtime_error():
    ds = Blocking(4, blocked={0})
    it = iter(PyDataloader(ds, batch_size=1, num_workers=1))
    got = {}

    def first():
        got["batch"] = next(it)

    t = threading.Thread(target=first)
    t.start()
    while 0 not in ds.started:
        time.sleep(0.001)
    time.sleep(0.02)
    with pytest.raises(RuntimeError, match="being advanced by another thread"):
        next(it)
    ds.release.set()
    t.join(10)
    assert got["batch"] == [0]
    assert next(it) == [1]


def test_a_second_thread_without_workers():
    ds = Blocking(4, blocked={0})
    it = iter(PyDataloader(ds, batch_size=1))
    t = threading.Thread(target=lambda: next(it))
    t.start()
    while 0 not in ds.started:
        time.sleep(0.001)
    with pytest.raises(RuntimeError, match="being advanced by another thread"):
        next(it)
    ds.release.set()
    t.join(10)
    assert next(it) == [1]


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_ctrl_c_interrupts_a_waiting_next_and_the_iterator_stays_usable(sigint_raises):
    ds = Blocking(3, blocked={0})
    it = iter(PyDataloader(ds, batch_size=1, num_workers=1))
    try:
        with ctrl_c_after(0.2):
            next(it)
    finally:
        ds.release.set()  # a failed test does not leave the worker blocked
    assert list(it) == [[0], [1], [2]]


def test_many_threads_each_with_their_own_loader():
    errors = []

    def run(seed):
        try:
            loader = PyDataloader(Range(300), batch_size=16, shuffle=True, seed=seed, num_workers=2)
            for _ in range(3):
                assert sorted(x for b in loader for x in b) == list(range(300))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    run_threads(run, [(s,) for s in range(8)], join_timeout=60)
    assert errors == []


def _worker_thread_count() -> int:
    return sum(1 for tid in os.listdir("/proc/self/task") if _thread_name(tid) == "dataloader-rs")


def _thread_name(tid: str) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_pool_is_made_once_and_reused_by_every_epoch():
    # Other tests' loaders may still be retiring threads, so only changes are compared: the
    # count never grows with epochs, and drops by this loader's threads when it is dropped.
    loader = PyDataloader(Range(64), batch_size=4, num_workers=3)
    assert len(list(loader)) == 16
    time.sleep(0.05)
    after_first = _worker_thread_count()
    for _ in range(20):
        assert len(list(loader)) == 16
    time.sleep(0.05)
    assert _worker_thread_count() <= after_first
    del loader
    import gc

    gc.collect()
    deadline = time.monotonic() + 10
    while _worker_thread_count() > after_first - 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _worker_thread_count() <= after_first - 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_uses_a_loader_its_parent_iterated():
    loader = PyDataloader(Range(20), batch_size=6, num_workers=2, shuffle=True, seed=4)
    parent = [list(loader) for _ in range(1)]
    child = in_forked_child(lambda: [list(loader) for _ in range(2)])
    assert len(child) == 2
    for epoch in child:
        assert sorted(x for b in epoch for x in b) == list(range(20))
    # The child continues the parent's epoch sequence (epochs 1 and 2), as the parent would.
    assert child[0] == list(loader)
    assert parent[0] != child[0]


def test_deep_c_recursion_in_getitem_on_a_worker_thread():
    # Python-to-Python calls do not use the C stack; a key function of sorted() does: each level
    # is a C frame of list.sort (about 4 KiB, its merge state). 1200 levels need more than the
    # 2 MiB of a default Rust thread (and 4 MiB) and fit in the workers' 8 MiB. In a subprocess:
    # an overflow is a crash.
    code = """
import sys, threading
from dataloader_rs import PyDataloader, PyDataset
sys.setrecursionlimit(20_000)
def deep(n):
    if n == 0:
        return 0
    box = []
    sorted([n], key=lambda _: box.append(deep(n - 1)))
    return box[0] + 1
class D(PyDataset):
    def __len__(self): return 2
    def __getitem__(self, i):
        assert threading.current_thread() is not threading.main_thread()
        return deep(1200 + i)
print(list(PyDataloader(D(), batch_size=1, num_workers=2)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert (out.returncode, out.stdout, out.stderr) == (0, "[[1200], [1201]]\n", "")


class Table:
    """A per-thread table (anything weak-referenceable)."""


class PerThreadTable(PyDataset):
    """Builds a table once per thread, in a threading.local, as the spec advises."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.local = threading.local()
        self.builds: list[int] = []
        self.tables: list[weakref.ref[Table]] = []
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        if getattr(self.local, "table", None) is None:
            table = self.local.table = Table()
            with self.lock:
                self.builds.append(threading.get_native_id())
                self.tables.append(weakref.ref(table))
        return index


@pytest.mark.parametrize(("workers", "k"), [(1, 1), (2, 1), (2, 3)])
def test_threading_local_values_live_as_long_as_the_worker_thread(workers, k):
    # Each loader thread builds its table once, however many batches (and interpreter
    # hand-overs) it serves, across epochs. Threads are told apart by their native id (a
    # pthread id, threading.get_ident, may be reused by a later thread).
    ds = PerThreadTable(640)
    loader = PyDataloader(ds, batch_size=8, num_workers=workers, item_concurrency=k)
    for _ in range(3):
        assert [i for b in loader for i in b] == list(range(640))
    assert ds.builds
    assert len(ds.builds) == len(set(ds.builds)), "a thread rebuilt its threading.local table"
    assert threading.get_native_id() not in ds.builds


def test_epochs_back_to_back_run_on_num_workers_threads():
    # "Created once and reused by every epoch": an epoch started right after the last one ended
    # finds that epoch's workers still on their way back to the pool, and must wait for them
    # rather than start threads. Both workers load a batch in every epoch (the barrier), so a
    # thread started for an epoch shows up in the ids.
    barrier = threading.Barrier(2, timeout=30)
    ids: set[int] = set()

    class BothWorkers(PyDataset[int]):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, index: int) -> int:
            if index % 2 == 0:
                barrier.wait()
            ids.add(threading.get_native_id())
            return index

    loader = PyDataloader(BothWorkers(), batch_size=2, num_workers=2)
    for _ in range(200):
        assert [i for b in loader for i in b] == [0, 1, 2, 3]
    assert len(ids) <= 2, f"200 epochs ran on {len(ids)} threads"


def test_a_loader_made_after_another_was_dropped_runs_on_its_threads():
    # A fresh loader per epoch keeps its threads, and their threading.local tables: the
    # threads of a dropped loader wait (WORKER_KEEP, 2 s) for the next loader to take them.
    # Threads parked by earlier tests' loaders (some only freed by a collection) end first, so
    # only this test's are parked.
    gc.collect()
    assert wait_until(lambda: parked_workers() == 0, timeout=30)
    ds = PerThreadTable(640)
    first = PyDataloader(ds, batch_size=8, num_workers=1)
    assert [i for b in first for i in b] == list(range(640))
    assert len(ds.builds) == 1
    del first
    gc.collect()
    assert wait_until(lambda: parked_workers() == 1, timeout=30)
    for _ in range(3):
        loader = PyDataloader(ds, batch_size=8, num_workers=1)
        assert [i for b in loader for i in b] == list(range(640))
        assert parked_workers() == 0, "the new loader took the parked thread"
        del loader
        gc.collect()
        assert wait_until(lambda: parked_workers() == 1, timeout=30)
    assert len(ds.builds) == 1, "the table was built again: the thread was not reused"

    # Two workers: the parked thread and a new one; both go to the lot, and the next loader
    # takes both.
    pair = PyDataloader(Range(64), batch_size=4, num_workers=2)
    assert len(list(pair)) == 16
    assert parked_workers() == 0
    del pair
    gc.collect()
    assert wait_until(lambda: parked_workers() == 2, timeout=30)
    again = PyDataloader(Range(64), batch_size=4, num_workers=2)
    it = iter(again)
    assert parked_workers() == 0
    assert next(it) == [0, 1, 2, 3]
    assert len(list(it)) == 15


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_count_on_its_parents_parked_threads():
    # The parent's parked threads do not exist in a forked child: a loader there starts its own
    # (were the lot inherited, its jobs would wait for threads that never come: a hang, ended by
    # in_forked_child's alarm).
    def park() -> bool:
        gc.collect()
        loader = PyDataloader(Range(32), batch_size=4, num_workers=2)
        assert len(list(loader)) == 8
        del loader
        gc.collect()
        # Parked threads leave after 2 s idle: a slow machine may miss them, and runs again.
        return wait_until(lambda: parked_workers() >= 2, timeout=1.5)

    assert any(park() for _ in range(5))

    def child():
        before = parked_workers()
        fresh = PyDataloader(Range(32), batch_size=4, num_workers=2)
        return before, [x for b in fresh for x in b]

    before, items = in_forked_child(child)
    assert before == 0
    assert items == list(range(32))


def test_threading_local_values_are_freed_when_the_loader_threads_end():
    ds = PerThreadTable(64)
    loader = PyDataloader(ds, batch_size=8, num_workers=2)
    assert len(list(loader)) == 8
    assert ds.tables
    del loader
    gc.collect()
    # The pool's threads end once the loader is gone and no other loader took them for 2 s,
    # and each deletes its thread state (and so its threading.local values) as it exits.
    deadline = time.monotonic() + 30
    while any(t() is not None for t in ds.tables) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [t() for t in ds.tables] == [None] * len(ds.tables)


EXIT_SCRIPTS = {
    "loader alive, epoch finished": """
loader = PyDataloader(D(), batch_size=4, num_workers=2)
assert len(list(loader)) == 16
""",
    "iterator abandoned mid-epoch": """
loader = PyDataloader(D(), batch_size=4, num_workers=2, prefetch_depth=4)
it = iter(loader)
next(it)
""",
    "loader dropped just before exit": """
loader = PyDataloader(D(), batch_size=4, num_workers=3, item_concurrency=2)
assert len(list(loader)) == 16
del loader
""",
}


@pytest.mark.parametrize("case", sorted(EXIT_SCRIPTS))
def test_the_interpreter_exits_cleanly_with_loader_threads_holding_thread_states(case):
    # Loader threads keep a Python thread state for their life; an interpreter that exits with
    # them alive (or ending) must neither hang nor crash nor print anything.
    code = (
        "import threading\n"
        "from dataloader_rs import PyDataloader, PyDataset\n"
        "local = threading.local()\n"
        "class D(PyDataset):\n"
        "    def __len__(self): return 64\n"
        "    def __getitem__(self, i):\n"
        "        local.table = getattr(local, 'table', None) or {'made': i}\n"
        "        return i\n" + EXIT_SCRIPTS[case] + "print('done')\n"
    )
    import subprocess

    # Threads ending while the interpreter finalizes is a race: try it a few times.
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
        assert (out.returncode, out.stdout, out.stderr) == (0, "done\n", "")
