"""The asyncio side of ``PyAsyncDataset``: the loader's event loop on a background thread, and the
coroutine that fetches one batch, its items taking the loader's ``items_in_flight`` slots
(``num_workers * item_concurrency``) earliest batch first.

The Rust worker that loads a batch calls :meth:`EventLoop.submit` once per batch and receives each
item through ``deliver(pos, value, failed)`` as it arrives (``deliver.started(pos)`` tells it
when the item's fetch starts, for the stats) (it transforms it on the loader's pool
at once); it cancels the returned future when the batch is abandoned.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import heapq
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

logger = logging.getLogger("dataloader_rs")

#: How long ``aclose()`` may run when the loader is dropped before the loop stops anyway.
ACLOSE_TIMEOUT = 5.0

#: How long closing waits for the tasks it cancelled (dropped iterators' batches) to finish.
_CANCEL_GRACE = 1.0

#: For the hand-overs between the closing thread and the loop's.
_CLOSE_MARGIN = 0.5


class Deliver(Protocol):
    """The Rust side's ``_Deliver``: ``pos`` None stands for every item of the batch."""

    def __call__(self, pos: int | None, value: Any, failed: bool, /) -> bool:
        """Returns whether the batch goes on after a failed item (skipped with max_failures)."""
        ...

    def started(self, pos: int | None, /) -> None: ...


#: The loops not closed yet: closed at exit, while their threads can still run.
_live: weakref.WeakSet[EventLoop] = weakref.WeakSet()


class Slots:
    """The items fetched at once across a loader's batches, granted earliest first: by epoch,
    batch, then position. A batch may take every slot; the next one starts on those the earlier
    one leaves. Used on the loop's own thread only (no lock)."""

    def __init__(self, slots: int) -> None:
        self.free = max(1, slots)
        self._waiting: list[tuple[tuple[int, int, int], int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    async def acquire(self, key: tuple[int, int, int]) -> None:
        if self.free > 0 and not self._waiting:
            self.free -= 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (key, next(self._arrivals), granted))
        self._grant()
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release()  # granted as it was cancelled: hand the slot on
            raise

    def release(self) -> None:
        self.free += 1
        self._grant()

    def _grant(self) -> None:
        while self.free > 0 and self._waiting:
            _, _, granted = heapq.heappop(self._waiting)
            if not granted.done():  # a cancelled waiter is passed over
                self.free -= 1
                granted.set_result(None)


async def load_batch(
    getitem: Callable[[int], Awaitable[Any]],
    getitems: Callable[[list[int]], Awaitable[Iterable[Any]]] | None,
    indices: list[int],
    slots: Slots,
    batch: tuple[int, int],
    deliver: Deliver,
) -> None:
    """Fetches the items of ``indices``, each in one of the loader's ``slots`` (granted to the
    earliest ``batch`` first), or all with one ``__getitems__`` call, and hands each to
    ``deliver`` as it arrives; a failure is delivered as the exception object and stops the
    batch."""
    try:
        if getitems is not None:
            deliver.started(None)
            samples = list(await getitems(indices))
            if len(samples) != len(indices):
                raise ValueError(
                    "__getitems__ must return one sample per index: it got "
                    f"{len(indices)} indices and returned {len(samples)} samples"
                )
            for pos, sample in enumerate(samples):
                deliver(pos, sample, False)
            return

        todo = iter(enumerate(indices))
        failed = False

        async def fetch(pos: int, index: int) -> None:
            nonlocal failed
            await slots.acquire((*batch, pos))
            try:
                if failed:
                    return
                deliver.started(pos)
                try:
                    sample = await getitem(index)
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:  # the consumer gets it, whatever it is
                    if not deliver(pos, exc, True):  # not skipped: the batch stops
                        failed = True
                    return
                deliver(pos, sample, False)
            finally:
                slots.release()

        await asyncio.gather(*(fetch(pos, index) for pos, index in todo))
    except asyncio.CancelledError:
        deliver(None, RuntimeError("the batch was cancelled"), True)
        raise
    except BaseException as exc:
        deliver(None, exc, True)


class EventLoop:
    """An asyncio event loop on a daemon thread of its own, owned by one loader.

    :meth:`close` (called by Rust once the loader and its iterators are dropped, or at exit)
    awaits ``aclose`` on the loop, at most :data:`ACLOSE_TIMEOUT` seconds, logs its exception or
    its overrun, cancels what is left, stops the loop and joins the thread; all of it within
    about :data:`ACLOSE_TIMEOUT` + 1.5 s, even when ``aclose`` blocks the loop (the thread is then
    left to finish on its own, a daemon thread that does not delay the exit). In a forked child, the
    parent's thread does not exist: a new loop is started on first use.
    """

    def __init__(self, aclose: Callable[[], Awaitable[None]] | None, name: str) -> None:
        self._aclose = aclose
        self._name = name
        self._lock = threading.Lock()
        self._closed = False
        self._pid = os.getpid()
        self._slots: Slots | None = None
        self._loop, self._thread = self._start()
        _live.add(self)

    def _start(self) -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            try:
                loop.run_forever()
                # Batches submitted while the loop was closing: cancel them too.
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

        thread = threading.Thread(target=run, name=f"dataloader-rs event loop ({self._name})", daemon=True)
        thread.start()
        ready.wait()
        return loop, thread

    @property
    def thread(self) -> threading.Thread:
        """The thread that runs the loop."""
        return self._thread

    def submit(
        self,
        getitem: Callable[[int], Awaitable[Any]],
        getitems: Callable[[list[int]], Awaitable[Iterable[Any]]] | None,
        indices: list[int],
        items_in_flight: int,
        batch: tuple[int, int],
        deliver: Deliver,
    ) -> concurrent.futures.Future[None]:
        """Starts one batch on the loop; cancelling the returned future cancels its coroutines.
        ``batch`` (the epoch's id, the batch's number) is its place in the line for the
        loader's ``items_in_flight`` slots."""
        with self._lock:  # not while close() stops the loop: the batch would never start
            if self._closed:
                raise RuntimeError("the loader's event loop is closed")
            if self._pid != os.getpid():  # a forked child: the parent's thread is not here
                self._loop, self._thread = self._start()
                self._pid = os.getpid()
                self._slots = None  # its waiters were the parent's
            if self._slots is None:  # made once: the loader's budget does not change
                self._slots = Slots(items_in_flight)
            return asyncio.run_coroutine_threadsafe(
                load_batch(getitem, getitems, indices, self._slots, batch, deliver), self._loop
            )

    async def _shutdown(self) -> None:
        if self._aclose is not None:
            task = asyncio.ensure_future(self._aclose())
            done, _ = await asyncio.wait({task}, timeout=ACLOSE_TIMEOUT)
            if task in done:
                exc = task.exception()
                if exc is not None:
                    logger.error("%s.aclose() raised; the event loop stops anyway", self._name, exc_info=exc)
            else:
                logger.error(
                    "%s.aclose() was still running after %s s; it is abandoned and the event loop stops",
                    self._name,
                    ACLOSE_TIMEOUT,
                )
                task.cancel()
        current = asyncio.current_task()
        rest = [t for t in asyncio.all_tasks() if t is not current]
        for t in rest:
            t.cancel()
        if rest:
            await asyncio.wait(rest, timeout=_CANCEL_GRACE)

    def __del__(self) -> None:
        # In a garbage cycle (a dataset that holds its loader), this runs before the collector
        # clears the cycle's objects, while aclose() can still run; the loader's own close
        # comes after, on a cleared object.
        self.close()

    def close(self) -> None:
        """Awaits ``aclose()`` once, then stops the loop and joins its thread (idempotent)."""
        lock = self.__dict__.get("_lock")
        if lock is None or "_thread" not in self.__dict__:
            return  # cleared by the garbage collector (closed by __del__), or never started
        with lock:
            if self._closed:
                return
            self._closed = True
        if self._pid != os.getpid() or self._loop.is_closed():
            return
        loop = self._loop
        if threading.get_ident() == self._thread.ident:
            # Dropped from one of its own coroutines: finish without blocking the loop.
            task = loop.create_task(self._shutdown())
            task.add_done_callback(lambda _: loop.stop())
            return
        # One deadline for the whole close: an aclose() that blocks the loop (a synchronous
        # sleep) stops no timeout on the loop, so this thread must not wait on it unbounded.
        deadline = time.monotonic() + ACLOSE_TIMEOUT + _CANCEL_GRACE + _CLOSE_MARGIN
        shutdown = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        try:
            shutdown.result(timeout=deadline - time.monotonic())
        except concurrent.futures.TimeoutError:
            pass  # reported below, with the thread still running
        except BaseException as exc:  # a shutdown that failed must not keep the loop
            logger.error("closing the event loop of %s failed", self._name, exc_info=exc)
        with contextlib.suppress(RuntimeError):  # the loop closed by itself in the meantime
            loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            # A daemon thread: it ends with the process if it never finishes.
            logger.error(
                "the event loop of %s did not stop within %s s (does aclose() block it?); "
                "it is left to finish on its own",
                self._name,
                ACLOSE_TIMEOUT + _CANCEL_GRACE,
            )


@atexit.register
def _close_all() -> None:
    for event_loop in list(_live):
        event_loop.close()
